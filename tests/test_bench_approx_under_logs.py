"""bench/approx_under_logs.py on a tiny ONNX model made here, with an AutoTVM log tuned here: every
exact op replaced, the four builds agree with the exact untuned one, and each is timed."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

approx = pytest.importorskip("approx_under_logs")
onnx = pytest.importorskip("onnx")
pytest.importorskip("tvm")


def tiny_model(folder: Path) -> str:
    """x[4, 16] @ w[16, 32] -> sigmoid -> tanh -> softmax, as bench/models holds an export."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 32)).astype("float32"), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Sigmoid", ["m"], ["s"]),
             helper.make_node("Tanh", ["s"], ["t"]), helper.make_node("Softmax", ["t"], ["y"], axis=-1)]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    onnx.save(model, str(folder / "tiny.onnx"))
    (folder / "tiny.json").write_text(json.dumps({"inputs": [{"name": "x", "shape": [4, 16], "dtype": "float32"}]}))
    return "tiny"


def test_every_exact_op_is_approximated_and_the_builds_agree_untuned_and_under_a_log(tmp_path, monkeypatch):
    from model_inputs import load_onnx
    from relay_eqsat.passes.runtime import tuning
    from relay_eqsat.passes.runtime.target import host_target

    name = tiny_model(tmp_path)
    monkeypatch.setattr(approx, "MODELS_DIR", tmp_path)
    mod = load_onnx(tmp_path / "tiny.onnx", [{"name": "x", "shape": [4, 16], "dtype": "float32"}])
    log = tmp_path / "tiny.log"
    plan = tuning.plan_trials(tuning.program_tasks({"the input": mod}, host_target()), 2, 1)
    assert tuning.tune(plan, str(log), enabled=False) == 2
    out = tmp_path / "approx.json"
    assert approx.main([name, str(log), "--rounds", "1", "--out", str(out)]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["replaced"] == 3  # sigmoid, tanh, softmax; the dense stays
    assert 0 < row["max_error"] <= approx.RTOL
    assert set(row["ms"]) == set(approx.VARIANTS) and all(v > 0 for v in row["ms"].values())
    assert row["approx_over_exact_under_log"]["wins"].endswith("/1")


def test_approximated_replaces_only_the_ops_named():
    from relay_eqsat.graph import TensorGraph

    g = TensorGraph()
    x = g.var("x", (2, 8))
    g.set_output(g.add("tanh", [g.add("sigmoid", [x])]))
    fast, replaced = approx.approximated(g, {"sigmoid"})
    assert replaced == 1 and fast.op_counts() == {"var": 1, "fast_sigmoid": 1, "tanh": 1}
    assert g.op_counts()["sigmoid"] == 1  # the input graph is left as it was


def test_bad_arguments_are_refused(tmp_path):
    log = tmp_path / "a.log"
    log.write_text("")
    for argv in (["m", str(log), "--ops", "relu"], ["m", str(log), "--rounds", "0"], ["m", str(tmp_path / "none.log")]):
        with pytest.raises(SystemExit):
            approx.main(argv)
