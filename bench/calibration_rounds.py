"""A model's calibration candidates on a CPU with no shipped cost data, and what choosing among them is worth.

The optimizer calibrates on such a CPU: it extracts with a borrowed CPU's model, measures the
candidate's kernels here, extracts again, up to ``CALIBRATION_ROUNDS`` rounds. This script records
every candidate (by wrapping ``Calibrator.measure``), its cost under the kernels measured by the
end, which one the optimizer returned, and times side by side (paired rounds) the
last extraction (what the loop returned before 2026-11-28) and the returned program.

    TVM_NUM_THREADS=1 .venv/bin/python bench/calibration_rounds.py bench/models/bert.onnx \\
        --db /tmp/fresh.sqlite --out bench/results/calibration_rounds_z1/bert_rounds.json

``--db`` must not hold this CPU's kernels yet (a new file), or there is nothing to calibrate.
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a model file (ONNX, ...)")
    ap.add_argument("--db", required=True, help="a new cost database file")
    ap.add_argument("--out", required=True, help="JSON result file")
    ap.add_argument("--rounds", type=int, default=9, help="paired timing rounds")
    args = ap.parse_args(argv)

    from tvm import relay

    from relay_eqsat.cost import calibrate
    from relay_eqsat.cost.base import CostModel
    from relay_eqsat.pipeline import OptimizeOptions, optimize_graph
    from relay_eqsat.passes.runtime import build as runtime, timing
    from relay_eqsat.passes.relay.eqsat_pass import bind_params
    from relay_eqsat.passes.cli.model_file import load_model_file
    from relay_eqsat.passes.relay.frontend import from_relay
    from relay_eqsat.passes.relay.backend import graph_to_module
    from relay_eqsat.passes.runtime.target import host_target

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(message)s")
    mod, params = load_model_file(args.model)
    graph = from_relay(bind_params(relay.transform.InferType()(mod), params))
    target = host_target()
    cost_model = CostModel("auto", target=target, cache=args.db)
    seen = []  # each round's candidate, as the optimizer hands it to the calibrator
    measure = calibrate.Calibrator.measure

    def recording(self, graphs):
        seen.append(list(graphs)[1])
        return measure(self, graphs)
    calibrate.Calibrator.measure = recording
    t0 = time.perf_counter()
    try:
        out, rep = optimize_graph(graph, OptimizeOptions.from_mapping({"target": target}), cost_model=cost_model,
                                  calibrate=True, runtime_decides=True)
    finally:
        calibrate.Calibrator.measure = measure

    def products(g):
        return {k: v for k, v in g.op_counts().items() if "dense" in k or "matmul" in k}
    res = {"model": args.model, "target": target, "optimize_s": time.perf_counter() - t0,
           "summary": rep.summary(), "calibration": rep.info.get("calibration"),
           "input_cost_s": cost_model.graph_cost(graph),
           "candidates": [{"measured_cost_s": cost_model.graph_cost(c), "products": products(c)} for c in seen],
           "returned": next((i for i, c in enumerate(seen) if c is out), None)}
    print(f"{args.model} on {target}: {len(seen)} candidates; returned #{res['returned']}")
    for i, c in enumerate(res["candidates"]):
        print(f"  #{i}: {c['measured_cost_s'] * 1e3:9.1f} ms under the measured kernels  {c['products']}")
    if not seen or seen[-1] is out:
        print("the last extraction is the returned program: nothing to compare")
    else:
        inputs = runtime.random_inputs({k: (t.shape, t.dtype) for k, t in graph.input_types().items()})
        names = ("last extraction", "returned")
        built = [runtime.build_and_run(graph_to_module(p), inputs) for p in (seen[-1], out)]
        samples = timing.time_rounds([b.module for b in built], repeat=args.rounds,
                                      wall=[b.first_run_s >= timing.WALL_CLOCK_S for b in built])
        ratio, wins = timing.paired_ratio(samples[0], samples[1])
        res["timing"] = {n: {"median_s": statistics.median(s), "samples_s": s} for n, s in zip(names, samples)}
        res.update(ratio_returned_over_last=ratio, wins_returned=wins,
                   max_err=runtime.output_error(built[0].outputs, built[1].outputs)[0])
        print(f"  timed side by side, {args.rounds} rounds: last extraction "
              f"{res['timing'][names[0]]['median_s'] * 1e3:.1f} ms, returned "
              f"{res['timing'][names[1]]['median_s'] * 1e3:.1f} ms, ratio {ratio:.3f} ({wins}/{args.rounds} won), "
              f"max error {res['max_err']:.2g}")
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
