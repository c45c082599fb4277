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
from relay_eqsat.rewrite import Matcher, apply_matches, load_rules

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
    (8, 8, 1, 1, False),     # 1x1: a tile of 16, but pieces under 7 columns
])
def test_width_split_matches_spilling_tiles_only(h, w, k, stride, splits):
    g = _conv_graph(h if stride == 1 else 2 * h, w if stride == 1 else 2 * w, k, stride=stride)
    assert (_applied(RULES["conv-split-width"], g) > 0) == splits


@pytest.mark.parametrize("h,w,k,splits", [
    (28, 7, 1, True),    # 4 x 7 = 28 -> 14 x 7 each
    (14, 14, 1, True),   # block 14 x 2 rows = 28 (the width rule applies too)
    (56, 7, 1, False),   # halves of 28 rows: the same 4 x 7 tile
    (28, 7, 3, False),   # 3x3: its tile does not depend on the rows
    (13, 7, 1, False),   # 1 x 7
    (8, 8, 1, False),    # 2 x 8 = 16, its halves' the same: left whole
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
    from relay_eqsat.passes.runtime.build import build, run
    from relay_eqsat.passes.relay.simplify_copies import op_calls

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


def test_left_out_for_avx512_and_gpus():
    """AVX-512's 32 registers hold every tile the rules split: they are not searched there (nor on
    GPUs); every other CPU target keeps them, the host (None) too."""
    from relay_eqsat.rewrite import rules_for_target

    names = set(RULES)
    for target, kept in ((ZNVER1, True), ("llvm -mtriple=x86_64-linux-gnu -mcpu=haswell", True), (None, True),
                         ("llvm -mtriple=x86_64-linux-gnu -mcpu=sandybridge", True), (ZNVER4, False),
                         ("llvm -mtriple=x86_64-linux-gnu -mcpu=sapphirerapids", False),
                         ("llvm -mtriple=x86_64-linux-gnu -mcpu=znver4 -mattr=-avx512f", True), ("cuda", False)):
        rules, avoided = rules_for_target(list(RULES.values()), target)
        assert {r.name for r in rules} == (names if kept else set()), target
        assert set(avoided) == (set() if kept else names), target
        # kernels built under tuning records choose their own register tiles: never split for them
        rules, avoided = rules_for_target(list(RULES.values()), target, tuned=True)
        assert not rules and set(avoided) == names, target


@pytest.mark.tvm
def test_pass_leaves_them_out_for_avx512():
    pytest.importorskip("tvm")
    from relay_eqsat.passes.relay.simplify_copies import op_calls

    out, report = _optimize(_block(28, 28, c=32), ZNVER4)
    assert "conv-split-width" in report["info"]["rules_avoided"] and not report["rules_fired"].get("conv-split-width")
    assert op_calls(out).get("nn.conv2d") == 2


@pytest.mark.tvm
def test_pass_leaves_them_out_under_tuning_records(tmp_path):
    """The AVX2 block the pass splits untuned (test above) stays whole under a tuning log: tuning
    chooses the convolutions' tiles (bench_tuning_3: the split candidates timed no faster under it)."""
    pytest.importorskip("tvm")
    from relay_eqsat.passes import EqSatPass
    from relay_eqsat.passes.relay.simplify_copies import op_calls
    from tests.test_records import write_autotvm_log

    log = write_autotvm_log(tmp_path / "dense.log")  # records of another model's kernel: tuned all the same
    p = EqSatPass(**TRUST, target=ZNVER1, tuning_records=str(log))
    out = p(_block(28, 28, c=32))
    assert {"conv-split-width", "conv1x1-split-height"} <= set(p.last_report["info"]["rules_avoided"])
    assert op_calls(out).get("nn.conv2d", 2) == 2 and not p.last_report["rules_fired"].get("conv-split-width")


def test_sweep_fit_recovers_a_step(monkeypatch):
    """bench/register_tiles.py's fit: kernels timed 0.6x slower above 14 accumulators (two groups,
    noise-free) give back the budget 14 and the factor 0.6, and the power law fits worse."""
    import sys
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "bench"))
    sys.modules.pop("register_tiles", None)
    import register_tiles

    rows = []
    for kind, speed in (("conv3x3", 30e9), ("conv1x1", 25e9)):
        for acc in (4, 7, 8, 12, 14, 15, 16, 20, 24, 28):
            flops = 1e8 * acc
            rows.append(dict(kind=kind, channels=64, acc=acc, flops=flops, v4_efficiency=1.0,
                             seconds=flops / (speed * (0.6 if acc > 14 else 1.0))))
    f = register_tiles.fit(rows)
    assert f["budget"] == 14 and f["spill"] == pytest.approx(0.6)
    assert f["sse"] == pytest.approx(0.0, abs=1e-12) and f["power_law"]["sse"] > 0.01
    assert f["speed_gflops"]["conv3x3/64"] == pytest.approx(30.0)
