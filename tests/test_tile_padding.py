"""Padding to TVM's x86 tiles, and strided 1x1 convolutions, on CPU targets (issue 15).

TVM's x86 ``conv2d_NCHWc``, untuned, blocks channels by the largest divisor
of the count up to the SIMD width, so ShuffleNet-v2's 58/116/232 channels run
in 2- and 4-wide vectors and SqueezeNet's 1000-class convolution in 10-wide
ones. The rules of ``rules/default.rules``' "channel padding" section round a
count up to a multiple of 16 with zero weights, slice the extra channels off
and carry the slice through per-channel ops until a convolution absorbs it;
``conv1x1-stride-to-slice`` subsamples before a strided 1x1 convolution;
``dense-pad-rows`` and ``batch-matmul-pad-rows/-columns`` pad the rows (and
columns) of a product to a multiple of 8, the tile TVM's dense_pack and
batch_matmul schedules take (ViT's 197 tokens: 1-row tiles). Their
``example`` lines are verified by tests/test_rules.py; here: where they match,
that they stay off GPU targets, that an extraction preferring full channel
blocks reaches the padded program with the same numbers (numpy reference, no
TVM), and the pass end to end on TVM.
"""
from __future__ import annotations

import numpy as np
import pytest

from relay_eqsat.cost import CostModel
from relay_eqsat.egraph import EGraph
from relay_eqsat.graph import TensorGraph
from relay_eqsat.pipeline import optimize_graph
from relay_eqsat.rewrite import Matcher, apply_matches, load_rules, rules_for_target

PADDING = ("conv-pad-out-channels", "conv-pad-in-channels", "conv-absorb-channel-slice", "relu-channel-slice",
           "bias-add-channel-slice", "depthwise-conv-channel-slice", "depthwise-conv-pad-channels")
PRODUCTS = ("dense-pad-rows", "batch-matmul-pad-rows", "batch-matmul-pad-columns")
RULES = {r.name: r for r in load_rules()
         if r.name in PADDING + PRODUCTS + ("conv1x1-stride-to-slice", "conv-widen-output")}
CPU = "llvm -mtriple=x86_64-linux-gnu -mcpu=znver4"
CONV = dict(strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1, data_layout="NCHW",
            kernel_layout="OIHW", out_dtype="")


class FullBlocksCost(CostModel):
    """The analytic cost, with a convolution dearer by 16 / (its channel block) as TVM's untuned
    x86 schedules block channels (largest divisor <= 16), a dense by 8 / (its row tile, the
    largest power of two <= 8 dividing the rows): the tests do not depend on a trained model's
    view of small shapes."""

    def __init__(self):
        super().__init__("analytic")

    def op_cost(self, op, attrs, input_types, out_type, all_inputs_constant=False):
        cost = super().op_cost(op, attrs, input_types, out_type, all_inputs_constant)
        if all_inputs_constant:
            return cost
        if op == "nn.dense":
            tile = 8
            while input_types[0].shape[0] % tile:
                tile //= 2
            return cost * 8 / tile
        if op != "nn.conv2d":
            return cost
        out_channels = input_types[1].shape[0]
        block = max(d for d in range(1, 17) if out_channels % d == 0)
        return cost * 16 / block


def _conv(g, x, cout, cin, k=1, groups=1, rng=None, **attrs):
    rng = rng or np.random.default_rng(cout * 100 + cin)
    w = g.const(rng.standard_normal((cout, cin // groups, k, k)).astype("float32"))
    return g.add("nn.conv2d", [x, w], {**CONV, "groups": groups, "padding": (k // 2,) * 4, **attrs})


def _bias_relu(g, y, c, relu=True, rng=None):
    rng = rng or np.random.default_rng(c)
    y = g.add("nn.bias_add", [y, g.const(rng.standard_normal(c).astype("float32"))], {"axis": 1})
    return g.add("nn.relu", [y]) if relu else y


def shuffle_block(c=58, hw=8) -> TensorGraph:
    """ShuffleNet-v2's branch: conv1x1 + bias + relu, depthwise 3x3 + bias, conv1x1 + bias + relu."""
    g = TensorGraph()
    x = g.var("x", [1, c, hw, hw])
    y = _bias_relu(g, _conv(g, x, c, c), c)
    y = _bias_relu(g, _conv(g, y, c, c, k=3, groups=c), c, relu=False)
    y = _bias_relu(g, _conv(g, y, c, c), c)
    g.set_output(y)
    return g


def _fired(graph, rules):
    eg = EGraph()
    eg.add_graph(graph)
    m = Matcher(list(rules))
    found = m.search(eg)
    return {r.name: apply_matches(eg, r, m.matches(r, found)) for r in rules}


def test_rules_are_shipped_and_verified():
    assert set(RULES) == set(PADDING) | set(PRODUCTS) | {"conv1x1-stride-to-slice", "conv-widen-output"}
    assert all(r.examples for r in RULES.values())


@pytest.mark.parametrize("channels,expect", [(58, True), (116, True), (1000, True), (64, False), (16, False),
                                             (12, False)])
def test_padding_matches_odd_channel_counts_only(channels, expect):
    g = TensorGraph()
    x = g.var("x", [1, 32, 4, 4])
    g.set_output(_conv(g, x, channels, 32))
    fired = _fired(g, [RULES["conv-pad-out-channels"]])
    assert bool(fired["conv-pad-out-channels"]) == expect


def test_padding_rules_stay_off_gpu_targets():
    rules = list(RULES.values())
    rules = [r for r in rules if r.name in PADDING]
    kept, avoided = rules_for_target(rules, "cuda")
    assert not kept and set(avoided) == set(PADDING)
    kept, avoided = rules_for_target(rules, CPU)
    assert len(kept) == len(rules) and not avoided


def test_strided_1x1_matches_only_unpadded_1x1():
    g = TensorGraph()
    x = g.var("x", [1, 16, 8, 8])
    a = _conv(g, x, 32, 16, strides=(2, 2))                   # 1x1 stride 2: matches
    b = _conv(g, x, 32, 16, k=3, strides=(2, 2))              # 3x3: no
    c = _conv(g, x, 32, 16)                                   # stride 1: no
    g.set_output(g.add("concatenate", [a, g.add("nn.max_pool2d", [c], dict(pool_size=(2, 2), strides=(2, 2))), b],
                       {"axis": 1}))
    assert _fired(g, [RULES["conv1x1-stride-to-slice"]]) == {"conv1x1-stride-to-slice": 1}


def _optimize(graph, rules=None):
    return optimize_graph(graph, dict(target=CPU, search="tensat", final_extractor="ilp-acyc",
                                      extract_time_limit=20, node_limit=5000),
                          cost_model=FullBlocksCost(), rules=rules)


def test_extraction_pads_a_shufflenet_branch_with_the_same_numbers():
    g = shuffle_block()
    out, report = _optimize(g)
    assert report.changed, report.reason
    convs = [n for n in out.nodes if n.op == "nn.conv2d"]
    assert convs and all(n.type.shape[1] == 64 for n in convs), [n.type.shape for n in convs]
    assert out[out.output].type == g[g.output].type
    x = np.random.default_rng(1).standard_normal((1, 58, 8, 8)).astype("float32")
    ref, got = g.evaluate({"x": x}), out.evaluate({"x": x})
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_full_blocks_are_left_alone():
    out, report = _optimize(shuffle_block(c=64))
    assert not report.changed
    assert not any(n.op == "nn.pad" for n in out.nodes)


@pytest.mark.tvm
@pytest.mark.parametrize("c", [58, 24])
def test_pass_pads_with_the_same_numbers_on_tvm(c):
    pytest.importorskip("tvm")
    from relay_eqsat.passes import EqSatPass
    from relay_eqsat.passes.relay.backend import graph_to_module
    from relay_eqsat.passes.runtime.build import build, run

    g = shuffle_block(c=c)
    mod = graph_to_module(g)
    p = EqSatPass(check_runtime="off", calibrate="off", min_gain=0.0, search="tensat",
                  final_extractor="ilp-acyc", extract_time_limit=20, target=CPU, cost=FullBlocksCost())
    out = p(mod)
    report = p.last_report
    assert report["changed"], report.get("reason")
    assert report["rules_fired"].get("conv-pad-out-channels")
    inputs = {"x": np.random.default_rng(2).standard_normal((1, c, 8, 8)).astype("float32")}
    ref = run(build(mod), inputs)[0]
    got = run(build(out), inputs)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


@pytest.mark.parametrize("rows,expect", [(197, True), (13, True), (200, False), (8, False), (5, False)])
def test_dense_row_padding_matches_rows_off_the_tile(rows, expect):
    g = TensorGraph()
    x = g.var("x", [rows, 16])
    g.set_output(g.add("nn.dense", [x, g.const(np.ones((24, 16), "float32"))], {"out_dtype": ""}))
    assert bool(_fired(g, [RULES["dense-pad-rows"]])["dense-pad-rows"]) == expect


def _mlp(rows=13):
    """dense + bias + relu + dense, as a transformer's MLP on ``rows`` tokens."""
    rng = np.random.default_rng(3)
    g = TensorGraph()
    x = g.var("x", [rows, 16])
    y = g.add("nn.dense", [x, g.const(rng.standard_normal((32, 16)).astype("float32"))], {"out_dtype": ""})
    y = g.add("nn.relu", [g.add("add", [y, g.const(rng.standard_normal(32).astype("float32"))])])
    g.set_output(g.add("nn.dense", [y, g.const(rng.standard_normal((16, 32)).astype("float32"))], {"out_dtype": ""}))
    return g


@pytest.mark.parametrize("swap", [False, True])
def test_extraction_pads_dense_rows_with_the_same_numbers(swap):
    """Without dense-swap-operands both dense layers run on the 13 tokens padded to 16 rows; with
    it (the default set) the extraction may instead make the weight the data operand: either way
    every dense's data rows are tiled by 8 and the numbers are the same."""
    g = _mlp()
    out, report = _optimize(g, None if swap else [r for r in load_rules() if r.name != "dense-swap-operands"])
    assert report.changed, report.reason
    dense_shapes = [[out[i].type.shape for i in n.inputs] for n in out.nodes if n.op == "nn.dense"]
    assert len(dense_shapes) == 2 and all(s[0][0] % 8 == 0 for s in dense_shapes), dense_shapes
    if not swap:
        assert all(s[0][0] == 16 for s in dense_shapes), dense_shapes
    x = np.random.default_rng(4).standard_normal((13, 16)).astype("float32")
    ref, got = g.evaluate({"x": x}), out.evaluate({"x": x})
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))


@pytest.mark.tvm
def test_pass_pads_dense_rows_with_the_same_numbers_on_tvm():
    pytest.importorskip("tvm")
    from relay_eqsat.passes import EqSatPass
    from relay_eqsat.passes.relay.backend import graph_to_module
    from relay_eqsat.passes.runtime.build import build, run

    mod = graph_to_module(_mlp(rows=197))
    p = EqSatPass(check_runtime="off", calibrate="off", min_gain=0.0, search="tensat",
                  final_extractor="ilp-acyc", extract_time_limit=20, target=CPU, cost=FullBlocksCost())
    out = p(mod)
    assert p.last_report["changed"], p.last_report.get("reason")
    assert p.last_report["rules_fired"].get("dense-pad-rows")
    inputs = {"x": np.random.default_rng(5).standard_normal((197, 16)).astype("float32")}
    ref = run(build(mod), inputs)[0]
    got = run(build(out), inputs)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))


@pytest.mark.parametrize("width,expect", [(73, True), (39, True), (58, False), (30, False), (151, True)])
def test_widen_output_matches_widths_without_a_good_block(width, expect):
    """71 and 37 columns have no divisor in 8..31 (TVM blocks by 1); 56 and 28 do; <= 31 is one block."""
    g = TensorGraph()
    x = g.var("x", [1, 4, 5, width])
    g.set_output(_conv(g, x, 8, 4, k=3, padding=(0, 0, 0, 0)))
    assert bool(_fired(g, [RULES["conv-widen-output"]])["conv-widen-output"]) == expect


@pytest.mark.tvm
def test_widened_conv_has_the_same_numbers_on_tvm():
    """The rule's right side (one more column of right padding per stride, sliced off) built by
    TVM: asymmetric padding and the slice survive the round trip through Relay."""
    pytest.importorskip("tvm")
    from relay_eqsat.passes.relay.backend import graph_to_module
    from relay_eqsat.passes.runtime.build import build, run

    def model(widen):
        g = TensorGraph()
        x = g.var("x", [1, 4, 9, 75])
        y = _conv(g, x, 8, 4, k=3, strides=(2, 2), padding=(0, 0, 0, 2 * 3 if widen else 0))
        if widen:
            y = g.add("strided_slice", [y], {"begin": (0, 0, 0, 0), "end": (1, 8, 4, 37), "strides": (1, 1, 1, 1)})
        g.set_output(g.add("nn.relu", [y]))
        return g

    g, wide = model(False), model(True)
    assert _fired(g, [RULES["conv-widen-output"]])["conv-widen-output"] == 1
    assert [n.type.shape for n in wide.nodes if n.op == "nn.conv2d"] == [(1, 8, 4, 40)]
    inputs = {"x": np.random.default_rng(6).standard_normal((1, 4, 9, 75)).astype("float32")}
    ref = run(build(graph_to_module(g)), inputs)[0]
    got = run(build(graph_to_module(wide)), inputs)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))
