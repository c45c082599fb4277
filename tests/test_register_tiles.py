"""Convolutions split where TVM's register tile spills on AVX2 (issue 15).

TVM's untuned x86 convolution keeps one vector register of partial sums per
output column of its tile; past 14 (AVX2's 16 registers less the weight and the
input) it spills and runs at ~0.65 of the speed (``bench/register_tiles.py``,
``relay_eqsat/cost/simd.py``). ``conv-split-width`` and ``conv1x1-split-height``
compute a convolution as two on its input's halves, concatenated;
``bias-add-over-concat`` and ``add-over-concat-slices`` carry the epilogue into
the halves. Their ``example`` lines are verified numerically by
tests/test_rules.py; here: what they match (the core), and the pass end to end
on a small Relay function with the shipped cost model of an AVX2 CPU (split,
same numbers) and of an AVX-512 one (nothing to gain: unchanged).
"""
from __future__ import annotations

import numpy as np
import pytest

from relay_eqsat.egraph import EGraph
from relay_eqsat.graph import TensorGraph
from relay_eqsat.rules import Matcher, apply_matches, load_rules

RULES = {r.name: r for r in load_rules()
         if r.name in ("conv-split-width", "conv1x1-split-height", "bias-add-over-concat", "add-over-concat-slices")}
ZNVER1 = "llvm -mtriple=x86_64-linux-gnu -mcpu=znver1"
ZNVER4 = "llvm -mtriple=x86_64-linux-gnu -mcpu=znver4"
#: the pass as it decides without measuring (the shipped model of the target)
TRUST = dict(check_runtime="off", calibrate="off", min_gain=0.0, search="tensat", final_extractor="greedy-ocf",
             node_limit=3000)


def _conv_graph(h, w, k, c=16, stride=1):
    g = TensorGraph()
    x = g.var("x", (1, c, h, w))
    wt = g.const(np.ones((c, c, k, k), "float32"), "w")
    p = k // 2
    g.set_output(g.add("nn.conv2d", [x, wt], {"strides": (stride, stride), "padding": (p, p, p, p),
                                              "dilation": (1, 1), "groups": 1, "data_layout": "NCHW",
                                              "kernel_layout": "OIHW", "out_dtype": ""}))
    return g


def _applied(rule, g) -> int:
    """Applications of ``rule`` (preconditions checked) on the graph's nodes."""
    eg = EGraph()
    eg.add_graph(g)
    m = Matcher([rule])
    return apply_matches(eg, rule, m.matches(rule, m.search(eg)))


@pytest.mark.parametrize("h,w,k,stride,splits", [
    (28, 28, 3, 1, True),    # 28 columns: spills
    (28, 56, 3, 1, True),    # block 28
    (27, 27, 3, 1, True),    # odd: 14 + 13
    (28, 14, 3, 1, False),   # 14 columns fit
    (55, 55, 3, 1, False),   # block 11
    (28, 28, 3, 2, True),    # strided too: each half from its own input columns
    (14, 14, 1, 1, True),    # 1x1: 2 x 14 = 28
    (14, 7, 1, 1, False),    # 1x1: 2 x 7 = 14
    (28, 7, 1, 1, False),    # 1x1: block 7, no narrower split (the height rule's)
])
def test_width_split_matches_spilling_tiles_only(h, w, k, stride, splits):
    g = _conv_graph(h if stride == 1 else 2 * h, w if stride == 1 else 2 * w, k, stride=stride)
    assert (_applied(RULES["conv-split-width"], g) > 0) == splits


@pytest.mark.parametrize("h,w,k,splits", [
    (28, 7, 1, True),    # 4 x 7 = 28 -> 14 x 7 each
    (14, 14, 1, True),   # block 14 x 2 rows = 28 (the width rule applies too)
    (56, 7, 1, False),   # taller than 28: left alone
    (28, 7, 3, False),   # 3x3: its tile does not depend on the rows
    (13, 7, 1, False),   # 1 x 7
])
def test_height_split_matches_1x1_tiles_only(h, w, k, splits):
    g = _conv_graph(h, w, k)
    assert (_applied(RULES["conv1x1-split-height"], g) > 0) == splits


# -- the pass, end to end (TVM) -----------------------------------------------------------

def _block(h, w, c=16, seed=0):
    """conv3x3 + bias + relu, then conv1x1 + bias + the block's input + relu (a residual block)."""
    tvm = pytest.importorskip("tvm")
    from tvm import relay

    rng = np.random.default_rng(seed)
    x = relay.var("x", shape=(1, c, h, w))
    y = relay.nn.conv2d(x, relay.const(rng.standard_normal((c, c, 3, 3)).astype("float32") * 0.2),
                        kernel_size=(3, 3), padding=(1, 1), channels=c)
    y = relay.nn.relu(relay.nn.bias_add(y, relay.const(rng.standard_normal(c).astype("float32"))))
    y = relay.nn.conv2d(y, relay.const(rng.standard_normal((c, c, 1, 1)).astype("float32") * 0.2),
                        kernel_size=(1, 1), channels=c)
    y = relay.nn.bias_add(y, relay.const(rng.standard_normal(c).astype("float32")))
    y = relay.nn.relu(relay.add(y, x))
    return relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], y)))


def _optimize(mod, target):
    from relay_eqsat.passes import EqSatPass

    p = EqSatPass(**TRUST, target=target)
    return p(mod), p.last_report


@pytest.mark.tvm
def test_pass_splits_spilling_convolutions_for_avx2_with_same_numbers():
    pytest.importorskip("tvm")
    from relay_eqsat.passes.runtime import build, run
    from relay_eqsat.passes.simplify_copies import op_calls

    mod = _block(28, 28, c=32)
    out, report = _optimize(mod, ZNVER1)
    assert report["changed"], report.get("reason")
    assert report["rules_fired"]["conv-split-width"] >= 1
    calls = op_calls(out)
    assert calls["nn.conv2d"] > 2 and calls["concatenate"] >= 1
    inputs = {"x": np.random.default_rng(1).standard_normal((1, 32, 28, 28)).astype("float32")}
    ref = run(build(mod), inputs)[0]
    got = run(build(out), inputs)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(ref).max())))


@pytest.mark.tvm
def test_pass_leaves_them_whole_for_avx512():
    pytest.importorskip("tvm")
    from relay_eqsat.passes.simplify_copies import op_calls

    out, report = _optimize(_block(28, 28, c=32), ZNVER4)
    assert report["rules_fired"].get("conv-split-width", 0) >= 1  # offered,
    assert op_calls(out).get("nn.conv2d") == 2                     # not taken
