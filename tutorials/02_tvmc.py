"""tvmc: ``tvmc compile --eqsat`` on an ONNX model.

Steps:

1. Write a small ONNX model with ``onnx.helper``: two 3x3 convolutions of one
   input, each with bias and ReLU, concatenated (the shape of an Inception
   branch). ONNX initializers become Relay constants (tvmc's ONNX frontend
   freezes them), so the rewrite rules see constant weights.
2. Compile it twice with tvmc's own ``compile`` command, through
   ``relay-eqsat tvmc`` (here in-process: ``relay_eqsat.cli.main``): once
   plain, once with ``--eqsat`` (plus ``--eqsat-<option>`` flags, and
   ``--eqsat-report`` to keep the optimizer's report). ``--eqsat`` puts an
   ``eqsat`` composite target in front of ``--target``; its
   ``pass_pipeline`` runs EqSatPass inside tvmc's PassContext before
   ``relay.build``. The same can be written by hand:
   ``--target "eqsat -search=mcts -budget=8, llvm -mtriple=..."``, and
   options can come from ``--pass-config relay.eqsat.node_limit=5000``.
3. Load both packages (.tar) with tvmc's ``TVMCPackage``, run them with the
   graph executor on the same input, and compare.

Run: ``.venv/bin/python tutorials/02_tvmc.py [--small] [--search mcts]``.
"""
import argparse
import json
import tempfile
from pathlib import Path

import numpy as np
import onnx
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm.contrib import graph_executor

from relay_eqsat.cli import main as relay_eqsat_main


def write_model(path, channels, size):
    rng = np.random.default_rng(0)
    cin = channels // 2
    weights = {"w1": (channels, cin, 3, 3), "b1": (channels,), "w2": (channels, cin, 3, 3), "b2": (channels,)}
    inits = [numpy_helper.from_array((0.3 * rng.standard_normal(s)).astype(np.float32), n) for n, s in weights.items()]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("Conv", ["x", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("Relu", ["c1"], ["r1"]), helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Concat", ["r1", "r2"], ["y"], axis=1)]
    graph = helper.make_graph(
        nodes, "two_branches", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2 * channels, size, size])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return (1, cin, size, size)


def run_package(path, x):
    from tvm.driver.tvmc import TVMCPackage

    pkg = TVMCPackage(str(path))
    m = graph_executor.create(pkg.graph, tvm.runtime.load_module(pkg.lib_path), tvm.cpu(0))
    if pkg.params:
        m.load_params(pkg.params)
    m.set_input("x", x)
    m.run()
    out = m.get_output(0).numpy()
    timer = m.module.time_evaluator("run", tvm.cpu(0), number=5, repeat=3)
    return out, float(np.median(timer().results))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="a smaller model (fast)")
    ap.add_argument("--search", default="tensat", choices=["tensat", "mcts"])
    args = ap.parse_args()
    channels, size = (16, 16) if args.small else (64, 56)

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = tmp / "two_branches.onnx"
        shape = write_model(model, channels, size)
        print(f"wrote {model.name}: input {list(shape)}")

        # 2. tvmc compile, plain and with --eqsat (no --target: the host CPU)
        plain, opt, report = tmp / "plain.tar", tmp / "eqsat.tar", tmp / "report.json"
        assert relay_eqsat_main(["tvmc", "compile", str(model), "-o", str(plain)]) == 0
        assert relay_eqsat_main(["tvmc", "compile", "--eqsat", "--eqsat-search", args.search,
                                 "--eqsat-budget", "8", "--eqsat-node-limit", "2000",
                                 "--eqsat-final-extractor", "greedy-ocf", "--eqsat-report", str(report),
                                 str(model), "-o", str(opt)]) == 0
        rep = json.loads(report.read_text())
        print(f"eqsat report: changed={rep['changed']}, rules fired "
              f"{ {k: v for k, v in rep['rules_fired'].items() if v} }")
        print(f"conv2d ops: {rep['ops_before'].get('nn.conv2d')} -> {rep['ops_after'].get('nn.conv2d')}")

        # 3. run both packages
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        (y0, t0), (y1, t1) = run_package(plain, x), run_package(opt, x)
        err = float(np.abs(y0 - y1).max()) / max(1.0, float(np.abs(y0).max()))
        print(f"max relative output error: {err:.3g}")
        assert err <= 1e-4, "outputs differ"
        print(f"runtime: plain {t0 * 1e3:.3f} ms, eqsat {t1 * 1e3:.3f} ms ({t0 / t1:.2f}x)")
    print("OK")


if __name__ == "__main__":
    main()
