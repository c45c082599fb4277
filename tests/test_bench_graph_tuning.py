"""bench/graph_tuning.py on a tiny ONNX model made here, with an AutoTVM log tuned here: the
convolutions' records chosen together on a copy of the log (the log itself untouched), the choice
timed, a missing log a row that says so."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

graph_tuning = pytest.importorskip("graph_tuning")
onnx = pytest.importorskip("onnx")
pytest.importorskip("tvm")


def conv_chain_model(folder: Path) -> str:
    """x[1, 8, 14, 14] -> 3x3 conv to 16 -> relu -> 3x3 conv to 32, as bench/models holds an export."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype("float32"), n)
             for n, s in (("w1", (16, 8, 3, 3)), ("w2", (32, 16, 3, 3)))]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["y"], pads=[1, 1, 1, 1], kernel_shape=[3, 3])]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 14, 14])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 14, 14])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    onnx.save(model, str(folder / "chain.onnx"))
    (folder / "chain.json").write_text(json.dumps({"inputs": [{"name": "x", "shape": [1, 8, 14, 14],
                                                              "dtype": "float32"}]}))
    return "chain"


def test_the_choice_is_made_and_timed_on_a_copy_of_the_log(tmp_path, monkeypatch):
    from model_inputs import load_onnx
    from relay_eqsat.passes.runtime import tuning
    from relay_eqsat.passes.runtime.target import host_target

    name = conv_chain_model(tmp_path)
    monkeypatch.setattr(graph_tuning, "MODELS_DIR", tmp_path)
    mod = load_onnx(tmp_path / "chain.onnx", [{"name": "x", "shape": [1, 8, 14, 14], "dtype": "float32"}])
    tasks = tuning.program_tasks({"the input": mod}, host_target())
    for t in tasks:
        t.trials = 4
    log = tmp_path / f"{name}.opt3_tuned.log"
    assert tuning.tune(tasks, str(log), enabled=False) == 8
    text = log.read_text()
    out = tmp_path / "graph.json"
    assert graph_tuning.main(["--logs", str(tmp_path), "--models", f"{name},missing", "--rounds", "3",
                              "--out", str(out)]) == 0
    row, missing = json.loads(out.read_text())["rows"]
    assert row["convolutions"] == 2 and row["reason"] and isinstance(row["kept"], bool)
    if row["changed"]:
        assert "ratio" in row and row["rounds"] == 3
    assert log.read_text() == text and not Path(str(log) + ".trials").exists()  # a copy was rewritten, if any
    assert "no log at" in missing["error"]


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(SystemExit):
        graph_tuning.main(["--logs", str(tmp_path), "--rounds", "-1"])
