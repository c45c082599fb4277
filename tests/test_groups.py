"""Fused groups: formed as FuseOps forms them, measured as one job, their epilogues learned."""
from __future__ import annotations

import numpy as np
import pytest

from relay_eqsat.cost import CostModel, FusionRule, OpInstance
from relay_eqsat.cost.fusion import epilogue_seconds
from relay_eqsat.cost.cache import CostCache
from relay_eqsat.cost.groups import fit_epilogue, fused_groups, group_anchor, group_graph
from relay_eqsat.cost.instance import GROUP_OP
from relay_eqsat.cost.learned import LearnedCostModel
from relay_eqsat.cost.measure import MeasureConfig
from relay_eqsat.cost.pool import MeasurePool
from relay_eqsat.graph import Attrs, TensorGraph, TensorType

TARGET = "llvm -mtriple=x86_64-linux-gnu -mcpu=core-avx2"
CONV = dict(strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1, data_layout="NCHW",
            kernel_layout="OIHW", out_dtype="")


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAY_EQSAT_COST_DB", str(tmp_path / "costs.sqlite"))
    monkeypatch.setenv("RELAY_EQSAT_MODEL_DIR", str(tmp_path / "models"))
    monkeypatch.setenv("RELAY_EQSAT_TARGET", TARGET)


def _rnn_cell(n=64):
    """dense + bias + add + tanh, its value read by a sigmoid and a multiply that meet again
    (x * sigmoid(x)); a batch-normed conv with relu."""
    g = TensorGraph()
    rng = np.random.default_rng(0)
    x = g.var("x", (1, n))
    h = g.var("h", (1, n))
    y = g.add("nn.dense", [x, g.const(rng.normal(size=(n, n)).astype("float32"), "w")], {"out_dtype": ""})
    y = g.add("nn.bias_add", [y, g.const(rng.normal(size=(n,)).astype("float32"), "b")], {"axis": 1})
    y = g.add("add", [y, h])
    t = g.add("tanh", [y])
    s = g.add("sigmoid", [t])
    m = g.add("multiply", [t, s])
    img = g.var("img", (1, 4, 6, 6))
    c = g.add("nn.conv2d", [img, g.const(rng.normal(size=(8, 4, 3, 3)).astype("float32"), "cw")], CONV)
    bn = g.add("nn.batch_norm", [c] + [g.const(rng.uniform(0.5, 1.5, size=(8,)).astype("float32"), f"bn{k}")
                                       for k in range(4)], {"axis": 1, "epsilon": 1e-5, "center": True, "scale": True})
    r = g.add("nn.relu", [g.add("tuple_get_item", [bn], {"index": 0})])
    g.set_output(g.add("tuple", [m, r]))
    return g


def test_groups_are_formed_as_fuse_ops_forms_them_and_compute_the_same_values():
    g = _rnn_cell()
    groups = fused_groups(g)
    bodies = [[spec["op"] for spec in grp.attrs["nodes"]] for grp in groups]
    # the tanh's two readers meet again: FuseOps fuses them through their post-dominator
    assert bodies == [["nn.dense", "nn.bias_add", "add", "tanh", "sigmoid", "multiply"],
                      ["nn.conv2d", "nn.batch_norm", "tuple_get_item", "nn.relu"]]
    dense_group, conv_group = groups
    assert dense_group.attrs["constants"] == (1, 2)  # weight and bias: bound as in the model
    assert group_anchor(dense_group) == OpInstance.make("nn.dense", {"out_dtype": ""},
                                                        [TensorType((1, 64)), TensorType((64, 64))])
    # the key round-trips through the cache's text and the output type is inferred from it
    again = OpInstance.from_key(*dense_group.key(), dense_group.out_str)
    assert again.key() == dense_group.key() and again.out_type == dense_group.out_type
    assert OpInstance.make(GROUP_OP, dense_group.attrs, dense_group.input_types).out_type == TensorType((1, 64))
    # the group's own graph computes what the model computes at the group's value
    inputs = g.random_inputs(seed=1)
    full = g.evaluate(inputs)
    sub = group_graph(dense_group)
    feed = {"x0": inputs["x"], "p1": g.constants["w"], "p2": g.constants["b"], "x3": inputs["h"]}
    t = np.tanh(inputs["x"] @ g.constants["w"].T + g.constants["b"] + inputs["h"])
    np.testing.assert_allclose(sub.evaluate(feed), full[0], rtol=1e-6)
    np.testing.assert_allclose(full[0], t / (1 + np.exp(-t)), rtol=1e-5, atol=1e-6)
    # read by something outside the group, the tanh ends the dense's kernel
    g2 = TensorGraph()
    y = g2.add("tanh", [g2.add("nn.dense", [g2.var("x", (1, 8)), g2.var("w", (8, 8))], {"out_dtype": ""})])
    g2.set_output(g2.add("tuple", [g2.add("sigmoid", [y]), g2.add("nn.softmax", [y], {"axis": 1})]))
    assert [[s["op"] for s in grp.attrs["nodes"]] for grp in fused_groups(g2)] == [["nn.dense", "tanh"]]
    # the batch norm's field is read through its tuple_get_item, which joins the group
    assert len(group_graph(conv_group).inputs) == 6


def test_epilogue_fit_recovers_per_op_costs_and_leaves_rare_ops_out():
    truth = {"tanh": 8e-9, "nn.bias_add": 1e-11, "add": 2e-11, "multiply": 1e-9, "_read": 3e-11}
    rows = []
    rng = np.random.default_rng(0)
    for n, b in ((64, 1), (128, 4), (256, 2), (512, 1), (1024, 8)):
        for chain in (["nn.bias_add", "tanh"], ["nn.bias_add", "add", "tanh"], ["nn.bias_add", "multiply"],
                      ["add"], ["nn.bias_add", "add", "multiply", "tanh"]):
            g = TensorGraph()
            y = g.add("nn.dense", [g.var("x", (b, n)), g.var("w", (n, n))], {"out_dtype": ""})
            for op in chain:
                other = g.var(f"o{len(g.nodes)}", (n,) if op == "nn.bias_add" else (b, n))
                y = g.add(op, [y, other], {"axis": 1} if op == "nn.bias_add" else {}) if op != "tanh" \
                    else g.add("tanh", [y])
            g.set_output(y)
            (grp,) = fused_groups(g)
            # b x n values out; a bias add reads n more, an add or multiply b x n
            added = sum(truth[op] * b * n + truth["_read"] * (0 if op == "tanh" else n if op == "nn.bias_add" else b * n)
                        for op in chain)
            rows.append((grp, added, float(rng.uniform(1e-6, 1e-5))))
    # one sigmoid only: too rare for a coefficient
    g = TensorGraph()
    g.set_output(g.add("sigmoid", [g.add("nn.dense", [g.var("x", (1, 32)), g.var("w", (32, 32))],
                                         {"out_dtype": ""})]))
    rows.append((fused_groups(g)[0], 1e-6, 1e-5))
    coefs, report = fit_epilogue(rows)
    assert "sigmoid" not in coefs and report["groups"] == 25
    for op, c in truth.items():
        assert coefs[op] == pytest.approx(c, rel=1e-3, abs=1e-13), op
    assert report["after"] < 1e-6 < report["before"]
    # first rows: bias_add in three groups, every other op in fewer; nothing left to fit on
    assert fit_epilogue(rows[:3]) == ({}, {"groups": 0, "ops": ["nn.bias_add"], "reason": "too few groups"})


def test_cost_model_adds_the_learned_epilogue_to_fused_ops():
    t = TensorType((1, 512))
    coefs = {"tanh": 1e-8, "add": 0.0, "_read": 1e-10}
    cm = CostModel("analytic", TARGET, fusion=FusionRule(epilogue=2.0, fused=0.1))
    before = {op: cm.op_cost(op, Attrs(), ins, t) for op, ins in (("tanh", [t]), ("add", [t, t]))}
    alone = cm.op_cost("tanh", Attrs(), [t], t, standalone=True)
    cm.epilogue = coefs
    assert cm.op_cost("tanh", Attrs(), [t], t) == pytest.approx(before["tanh"] + 2.0 * 512 * 1e-8)
    assert cm.op_cost("add", Attrs(), [t, t], t) == pytest.approx(before["add"] + 2.0 * 512 * 1e-10)
    assert epilogue_seconds(coefs, "multiply", [t, t], t) is None
    assert cm.op_cost("multiply", Attrs(), [t, t], t) > 0  # no coefficient: the discounted kernel time only
    # an op running as a kernel of its own pays its kernel time, no epilogue
    assert cm.op_cost("tanh", Attrs(), [t], t, standalone=True) == alone
    terms = cm.cost_terms("tanh", Attrs(), [t], t)
    assert terms[FusionRule.TERMS.index("epilogue")] == pytest.approx(512 * 1e-8)
    assert terms @ cm.fusion.vector() == pytest.approx(cm.op_cost("tanh", Attrs(), [t], t))
    # (output, extra) elements: a residual add reads its second tensor, a bias add a vector
    assert epilogue_seconds({"add": 0.0, "_read": 1.0}, "add", [t, t], t) == 512
    assert epilogue_seconds({"nn.bias_add": 0.0, "_read": 1.0}, "nn.bias_add", [t, TensorType((512,))], t) == 512


def test_training_on_groups_stores_the_epilogue_with_the_model(tmp_path):
    rng = np.random.default_rng(0)
    samples, groups = [], []
    for n in range(16, 16 + 8 * 30, 8):
        g = TensorGraph()
        y = g.add("nn.dense", [g.var("x", (1, n)), g.var("w", (n, n))], {"out_dtype": ""})
        y = g.add("tanh", [g.add("nn.bias_add", [y, g.var("b", (n,))], {"axis": 1})])
        g.set_output(y)
        (grp,) = fused_groups(g)
        anchor = group_anchor(grp)
        samples.append((anchor, 1e-9 * n * n * rng.uniform(0.9, 1.1)))
        groups.append((grp, 5e-9 * n))
    model, report = LearnedCostModel.train(samples + groups, TARGET, "tvm-llvm", rounds=5)
    assert report.n_train + report.n_test == len(samples)  # groups are not kernels
    coefs = model.meta["epilogue"]
    t, b = TensorType((1, 100)), TensorType((100,))
    # bias add and tanh always come together here: only their sum is identified
    both = epilogue_seconds(coefs, "nn.bias_add", [t, b], t) + epilogue_seconds(coefs, "tanh", [t], t)
    assert both == pytest.approx(5e-9 * 100, rel=0.05)
    path = model.save(tmp_path / "m.json")
    cm = CostModel("auto", TARGET, cache=CostCache(tmp_path / "c.sqlite"), learned=path)
    assert cm.epilogue == coefs
    plain = CostModel("auto", TARGET, cache=CostCache(tmp_path / "c.sqlite"), learned=path)
    plain.epilogue = {}
    cost = lambda m: m.op_cost("nn.bias_add", Attrs(axis=1), [t, b], t) + m.op_cost("tanh", Attrs(), [t], t)
    assert cost(cm) - cost(plain) == pytest.approx(cm.fusion.epilogue * both)
    # the cache stores a group's (possibly negative) added seconds; not a kernel's
    cache = CostCache(tmp_path / "c2.sqlite")
    cache.put(groups[0][0], TARGET, "tvm-llvm", -1e-8, 3)
    assert cache.get(groups[0][0], TARGET, "tvm-llvm").seconds == -1e-8
    with pytest.raises(ValueError, match="positive"):
        cache.put(samples[0][0], TARGET, "tvm-llvm", -1e-8, 3)


def test_a_group_is_measured_against_its_anchor_in_one_job(tmp_path):
    pytest.importorskip("tvm")
    g = TensorGraph()
    y = g.add("nn.dense", [g.var("x", (1, 256)), g.const(np.ones((256, 256), np.float32), "w")], {"out_dtype": ""})
    for _ in range(4):
        y = g.add("tanh", [y])
    g.set_output(y)
    (grp,) = fused_groups(g)
    cache = CostCache(tmp_path / "c.sqlite")
    with MeasurePool(TARGET, config=MeasureConfig(repeat=5, min_repeat_ms=2), cache=cache) as m:
        (r,) = m.measure_many([grp])
    assert r.ok and r.repeats == 5, r.error
    assert np.isfinite(r.seconds)  # what the tanh add: a difference of paired timings, any sign
    assert cache.get(grp, TARGET, "tvm-llvm").seconds == r.seconds


def test_cli_measure_takes_the_models_groups(tmp_path, capsys):
    pytest.importorskip("tvm")
    import argparse

    from relay_eqsat.cost.instance import instances_from_graph
    from relay_eqsat.passes.cli import measure as cli

    parser = argparse.ArgumentParser(prog="relay-eqsat")
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["measure", "--models", "zoo:squeezenet", "--small", "--groups", "--limit", "0",
                              "--no-train"])
    assert args.func(args) == 0
    g = cli._load_graph("zoo:squeezenet", True)
    n = len(instances_from_graph(g)) + len(fused_groups(g))
    assert len(fused_groups(g)) > 0
    out = capsys.readouterr().out
    assert f"with the models' fused groups: {n} distinct kernels and groups" in out
    assert "anchors of the groups" not in out  # a model's anchors are its kernels already
    # the sweep's groups bring their anchors, timed alone: the epilogue fit needs both
    args = parser.parse_args(["measure", "--models", "zoo:squeezenet", "--small", "--sweep-epilogues", "3",
                              "--limit", "0", "--no-train"])
    assert args.func(args) == 0
    m = len(instances_from_graph(g))
    out = capsys.readouterr().out
    assert f"with 3 fused-epilogue sweep kernels: {m + 3} distinct kernels" in out
    assert f"with the anchors of the groups: {m + 6} distinct kernels" in out


def test_a_groups_product_gets_a_models_weights_so_its_epilogue_sees_order_one_values():
    """Measured with positive weights, a dense layer's output grows with its reduction length
    (~1,000 in BERT), and a fused erf, tanh or sigmoid runs its saturated fast path: BERT's GELU
    measured 3.7 ns per element where it costs 18 on a model's values. A product's constant
    operands are drawn zero-mean and scaled by its fan-in; other constants (a batch norm's
    variance) stay positive."""
    pytest.importorskip("tvm")
    from relay_eqsat.passes.runtime.kernels import product_fan_in, relay_function

    k = 1024
    g = TensorGraph()
    y = g.add("nn.dense", [g.var("x", (16, k)), g.const(np.ones((256, k), np.float32), "w")], {"out_dtype": ""})
    y = g.add("nn.bias_add", [y, g.const(np.ones((256,), np.float32), "b")], {"axis": 1})
    y = g.add("multiply", [y, g.add("erf", [y])])
    g.set_output(y)
    (grp,) = fused_groups(g)
    func, params, inputs = relay_function(grp)
    w, b = params["p1"], params["p2"]
    assert abs(float(w.mean())) < 0.01 and 0.8 / np.sqrt(k) < float(w.std()) < 1.2 / np.sqrt(k)
    assert float(b.min()) > 0  # not the anchor's: a positive draw as before
    sub = group_graph(grp)
    dense = inputs["x0"] @ w.T
    assert 0.5 < float(dense.std()) < 2.0 and float(np.abs(dense).mean()) < 2.0  # erf's input: order one
    out = sub.evaluate({**params, **inputs})
    pre = dense + b
    np.testing.assert_allclose(out, pre * np.vectorize(__import__("math").erf)(pre), rtol=1e-4, atol=1e-5)
    # alone, a dense's weight slot is drawn the same way; an element-wise op's input stays positive
    anchor = group_anchor(grp)
    assert product_fan_in(anchor.op, anchor.attrs, anchor.input_types, anchor.out_type) == k
    _, p, _ = relay_function(anchor)
    assert abs(float(p["p1"].mean())) < 0.01
    e = OpInstance.make("erf", {}, [TensorType((4, 8))])
    assert product_fan_in(e.op, e.attrs, e.input_types, e.out_type) is None
    _, _, xin = relay_function(e)
    assert float(xin["x0"].min()) >= 0.5
    # a convolution's fan-in is its input channels per group times its window; the batch norm's
    # parameters after it stay positive (a variance)
    conv_group = fused_groups(_rnn_cell())[1]
    anchor = group_anchor(conv_group)
    assert product_fan_in(anchor.op, anchor.attrs, anchor.input_types, anchor.out_type) == 4 * 3 * 3
    _, p, _ = relay_function(conv_group)
    assert float(p["p1"].min()) < 0 < float(p["p1"].max())
    assert all(float(v.min()) > 0 for name, v in p.items() if name != "p1")
