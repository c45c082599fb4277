"""Quick start: EqSatPass in a TVM pass pipeline.

Steps:

1. Build a model as a Relay module plus its weights (``params``); here a
   model of the project's zoo (``relay_eqsat.passes.zoo``), SqueezeNet.
2. Put ``EqSatPass`` in a ``tvm.transform.Sequential``. The rewrite rules
   only fire on weights that are constants, so give it ``params=`` (it binds
   them by name, as ``relay.build`` does) or bind them yourself with
   ``relay.build_module.bind_params_by_name``. EqSatPass has opt_level 0, so
   the Sequential runs it at any PassContext opt_level. Options can also come
   from the context: ``PassContext(config={"relay.eqsat.node_limit": 2000})``.
3. Read what it did: ``eqsat.last_report`` (rules fired, e-graph size, stop
   reason, predicted cost before/after, times, and ``judged_by``: by default
   the pass keeps its result only if it was measured faster on this machine,
   after measuring the compared kernels on a CPU it has no cost data for),
   also attached to an optimized ``main`` as the function attribute
   ``relay_eqsat.report`` (JSON).
4. Build the original and the optimized program with ``relay.build`` at
   opt_level 3 for the host CPU (``host_target()``: this TVM build's plain
   ``llvm`` means riscv64), run both on the same random input and compare
   outputs and measured runtimes.

Run: ``.venv/bin/python tutorials/01_quickstart.py [--small] [--model NAME]``
(``--small``: the model's small configuration, a few seconds).
"""
import argparse
import json

import numpy as np
import tvm
from tvm import relay

from relay_eqsat import EqSatPass
from relay_eqsat.passes import zoo
from relay_eqsat.passes.runtime.build import build, random_inputs, run
from relay_eqsat.passes.runtime.target import host_target


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="small model configuration (fast)")
    ap.add_argument("--model", default="squeezenet", choices=zoo.MODELS)
    args = ap.parse_args()

    # 1. the model
    mod, params = zoo.get(args.model, small=args.small)
    print(f"model: {args.model}{' (small)' if args.small else ''}, {len(params)} weight tensors")

    # 2. the pass in a pipeline (fast options: TENSAT scheduler, OCF greedy extraction)
    eqsat = EqSatPass(params=params, search="tensat", final_extractor="greedy-ocf")
    pipeline = tvm.transform.Sequential([relay.transform.InferType(), eqsat])
    with tvm.transform.PassContext(opt_level=3, config={"relay.eqsat.node_limit": 5000}):
        optimized = pipeline(mod)

    # 3. the report
    rep = eqsat.last_report
    fired = {k: v for k, v in rep["rules_fired"].items() if v}
    print(f"changed: {rep['changed']} ({rep['reason']})")
    # safe by default: on this machine the result is kept only if measured faster (see the README)
    print(f"judged by: {rep['judged_by']}")
    print(f"search stopped: {rep['stop_reason']}, e-graph {rep['egraph_nodes']} nodes, "
          f"node limit {eqsat.last_options['node_limit']} (from the PassContext)")
    print(f"rules fired: {fired}")
    print(f"predicted cost: {rep['cost_before'] * 1e3:.4f} ms -> {rep['cost_after'] * 1e3:.4f} ms")
    attrs = optimized["main"].attrs
    if attrs is not None and "relay_eqsat.report" in attrs:
        attached = json.loads(str(attrs["relay_eqsat.report"]))
        print(f"report attached to main: stop_reason={attached['stop_reason']}")

    # 4. build both at opt_level 3, compare outputs and runtimes
    target = host_target()
    inputs = random_inputs({"data": (zoo.input_shapes(args.model, args.small)["data"], "float32")})
    lib_before = build(mod, params=params, target=target, opt_level=3)
    lib_after = build(optimized, target=target, opt_level=3)
    before, after = run(lib_before, inputs), run(lib_after, inputs)
    err = max(float(np.abs(a - b).max()) / max(1.0, float(np.abs(a).max())) for a, b in zip(before, after))
    print(f"max relative output error: {err:.3g}")
    assert err <= 1e-4, "outputs differ"

    from tvm.contrib import graph_executor

    def median_ms(lib):
        m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
        for k, v in inputs.items():
            m.set_input(k, v)
        return float(np.median(m.module.time_evaluator("run", tvm.cpu(0), number=3, repeat=3)().results)) * 1e3

    t0, t1 = median_ms(lib_before), median_ms(lib_after)
    print(f"measured runtime: {t0:.3f} ms -> {t1:.3f} ms ({t0 / t1:.2f}x)")
    print("OK")


if __name__ == "__main__":
    main()
