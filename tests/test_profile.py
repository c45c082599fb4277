"""``relay-eqsat profile MODEL``: per fused kernel times from TVM's debug executor, grouped by
kind, JSON written, kernels tied to the TensorGraph nodes they came from; bad input exits 2."""
from __future__ import annotations

import json

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")

from relay_eqsat.cli import main  # noqa: E402
from relay_eqsat.graph import TensorGraph  # noqa: E402
from relay_eqsat.passes.cli.profile import kernel_kind, match_graph_nodes  # noqa: E402
from tests.test_records import autotvm_log  # noqa: E402,F401 - a fixture

pytestmark = pytest.mark.tvm

QUICK = ["--repeat", "1", "--min-repeat-ms", "0", "--no-whole"]


def test_profile_zoo_model(tmp_path, capsys):
    out = tmp_path / "p.json"
    status = main(["profile", "zoo:squeezenet", "--small", *QUICK, "--top", "5", "--json", str(out)])
    text = capsys.readouterr().out
    assert status == 0, text
    result = json.loads(out.read_text())
    kernels = result["kernels"]
    assert kernels and all(k["seconds"] > 0 for k in kernels)
    assert sum(k["share"] for k in kernels) == pytest.approx(1.0)
    assert sum(v["share"] for v in result["kinds"].values()) == pytest.approx(1.0)
    assert sum(v["kernels"] for v in result["kinds"].values()) == len(kernels)
    assert result["kernel_seconds"] == pytest.approx(sum(k["seconds"] for k in kernels))
    assert {"conv", "pool", "layout_transform"} <= set(result["kinds"])
    # every kernel's Relay function was found by its hash; every conv kernel came from one nn.conv2d
    assert all(k["function_matched"] for k in kernels)
    convs = [k for k in kernels if k["kind"] == "conv"]
    assert len(convs) == 14  # squeezenet small: conv1, 4 fire modules x 3, the classifier
    for k in convs:
        assert [op for _, op in k["graph_nodes"]].count("nn.conv2d") == 1
        assert k["const_inputs"]  # the weights
    assert len({i for k in convs for i, _ in k["graph_nodes"]}) == sum(len(k["graph_nodes"]) for k in convs)
    for needle in ("kind", "fused op sequence", "nn.contrib_conv2d_NCHWc+add+nn.relu", "graph nodes (approx.)",
                   "more kernels", f"profile: {out}"):
        assert needle in text


def test_profile_after_the_pass(tmp_path, capsys, monkeypatch):
    """--eqsat profiles what EqSatPass returns (its defaults; here without measuring, so the test
    is fast): the header says what the pass did, the kernels are the returned program's."""
    import relay_eqsat.passes.cli.profile as profile_mod
    from relay_eqsat.passes import EqSatPass

    monkeypatch.setattr(profile_mod, "make_pass", lambda target, records=None: EqSatPass(
        target=target, check_runtime="off", calibrate="off", min_gain=0.0))
    out = tmp_path / "p.json"
    status = main(["profile", "zoo:squeezenet", "--small", *QUICK, "--top", "3", "--json", str(out), "--eqsat"])
    text = capsys.readouterr().out
    assert status == 0, text
    result = json.loads(out.read_text())
    assert result["model"].endswith("after EqSatPass") and result["eqsat"]
    assert "eqsat:   " in text and ("rewritten" in result["eqsat"] or "kept its input" in result["eqsat"])
    assert result["kernels"] and all(k["seconds"] > 0 for k in result["kernels"])


def test_profile_bad_model_exits_2(tmp_path, capsys):
    assert main(["profile", str(tmp_path / "missing.onnx")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("relay-eqsat profile:") and "no such file" in err[0]
    assert main(["profile", "zoo:nonexistent"]) == 2
    assert main(["profile", "zoo:squeezenet", "--small", "--threads", "0"]) == 2
    assert main(["profile", "zoo:squeezenet", "--small", "--target", "not-a-target"]) == 2
    assert main(["profile", "zoo:squeezenet", "--small", "--target", "llvm -mtriple=aarch64-linux-gnu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(e.startswith("relay-eqsat profile:") for e in err)


def test_kernel_kind():
    assert kernel_kind(["nn.contrib_conv2d_NCHWc", "add", "nn.relu"], "out_elemwise_fusable") == "conv"
    assert kernel_kind(["nn.batch_matmul"], "out_elemwise_fusable") == "dense/matmul"
    assert kernel_kind(["nn.contrib_dense_pack", "add"], "out_elemwise_fusable") == "dense/matmul"
    assert kernel_kind(["nn.max_pool2d"], "out_elemwise_fusable") == "pool"
    assert kernel_kind(["mean"], "comm_reduce") == "reduction"
    assert kernel_kind(["concatenate", "layout_transform"], "injective") == "layout_transform"
    assert kernel_kind(["reshape", "transpose"], "injective") == "injective"
    assert kernel_kind(["add", "erf", "multiply"], "broadcast") == "elementwise"


def test_match_graph_nodes_by_op_and_order():
    """Two conv+bias+relu chains behind a layout_transform TVM inserted: anchors k-th to k-th,
    the fused elementwise ops to the nodes after their anchor, nothing for the inserted op."""
    g = TensorGraph()
    x = g.var("x", (1, 4, 8, 8))
    ids = {}
    h = x
    for k in range(2):
        w = g.const(np.ones((4, 4, 3, 3), np.float32), f"w{k}")
        b = g.const(np.ones((4,), np.float32), f"b{k}")
        c = g.add("nn.conv2d", (h, w), {"padding": (1, 1, 1, 1), "channels": 4, "kernel_size": (3, 3)})
        ba = g.add("nn.bias_add", (c, b), {"axis": 1})
        h = g.add("nn.relu", (ba,))
        ids[k] = (c, ba, h)
    g.set_output(h)
    kernels = [{"ops": ["layout_transform"], "producers": [], "graph_nodes": []},
               {"ops": ["nn.contrib_conv2d_NCHWc", "add", "nn.relu"], "producers": [0], "graph_nodes": []},
               {"ops": ["nn.contrib_conv2d_NCHWc", "add", "nn.relu"], "producers": [1], "graph_nodes": []}]
    left = match_graph_nodes(kernels, g)
    assert kernels[0]["graph_nodes"] == []
    for k in range(2):
        assert kernels[k + 1]["graph_nodes"] == [[i, op] for i, op in zip(ids[k], ["nn.conv2d", "nn.bias_add",
                                                                                 "nn.relu"])]
    assert left == {}


def test_profile_under_a_tuning_log(tmp_path, capsys, autotvm_log):
    """--tuning-records: the kernels are built (and fused) as under tvmc compile --tuning-records,
    and the header says how many of the workloads TVM looked up the log had; a corrupt log is a clear
    error before any work."""
    from relay_eqsat.passes.cli.profile import format_profile, profile_module
    from relay_eqsat.passes.runtime.records import load_records
    from tests.test_records import dense_relu

    untuned = profile_module(dense_relu(), repeat=2, min_repeat_ms=0, whole=False)
    tuned = profile_module(dense_relu(), repeat=2, min_repeat_ms=0, whole=False, records=load_records(autotvm_log))
    assert [k["ops"] for k in untuned["kernels"]] == [["nn.contrib_dense_pack", "nn.relu"]] and untuned["tuning"] is None
    assert [k["ops"] for k in tuned["kernels"]] == [["nn.dense", "nn.relu"]]  # the record's schedule
    assert tuned["tuning"]["workloads_found"] == 1 and tuned["tuning"]["workloads_asked"] > 1
    tuned["model"] = "dense"
    assert "tuning:  built under 1 autotvm records from" in format_profile(tuned)
    bad = tmp_path / "bad.log"
    bad.write_text("not json\n")
    assert main(["profile", "zoo:squeezenet", "--small", "--tuning-records", str(bad)]) == 2
    assert "line 1" in capsys.readouterr().err
