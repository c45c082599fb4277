"""Global pools as pools whose window is the whole map (``global-avg-pool-window``,
``global-max-pool-window``), and pools measured on the channel blocks a convolution hands them.

After a convolution x86 runs a pool in the convolution's channel blocks (NCHW8c on AVX2), where its
global pools reduce one channel at a time and its window pools a block at once (a squeeze-and-
excitation average over 32 x 112 x 112: 0.39 ms global, 0.05 ms as a window, Zen 3; timed in
``bench/`` runs and docs/history.md, not here). The rules' ``example`` lines are verified
numerically by tests/test_rules.py; here: what they match (the core, no TVM), that a pool's kernel
is measured on channel blocks and a fused group's is not, that a cost database forgets pools timed
the old way once, and the pass end to end on a squeeze-and-excitation block (same numbers).
"""
from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from relay_eqsat import ops
from relay_eqsat.cost import CostModel
from relay_eqsat.cost.cache import CostCache, POOL_OPS, normalize_target
from relay_eqsat.cost.instance import OpInstance
from relay_eqsat.egraph import EGraph
from relay_eqsat.graph import TensorGraph, TensorType
from relay_eqsat.rewrite import Matcher, apply_matches, load_rules, rules_for_target

RULES = {r.name: r for r in load_rules() if r.name.endswith("-pool-window")}
ZNVER3 = "llvm -mtriple=x86_64-linux-gnu -mcpu=znver3"


def _pool(op: str, shape, **attrs) -> OpInstance:
    x = TensorType(tuple(shape), "float32")
    return OpInstance.make(op, ops.normalize_attrs(op, attrs, [x]), [x])


def test_rules_are_shipped_for_cpus_only():
    assert set(RULES) == {"global-avg-pool-window", "global-max-pool-window"}
    assert all(r.examples for r in RULES.values())
    cpu, _ = rules_for_target(RULES.values(), ZNVER3)
    gpu, left_out = rules_for_target(RULES.values(), "cuda")
    assert {r.name for r in cpu} == set(RULES) and not gpu and set(left_out) == set(RULES)


@pytest.mark.parametrize("op,window", [("nn.global_avg_pool2d", "nn.avg_pool2d"),
                                       ("nn.global_max_pool2d", "nn.max_pool2d")])
def test_a_global_pool_becomes_its_whole_map_window(op, window):
    g = TensorGraph()
    x = g.var("x", [2, 16, 7, 5])
    pooled = g.add(op, [g.add("nn.relu", [x])])
    g.set_output(pooled)
    eg = EGraph()
    eg.add_graph(g)
    m = Matcher(list(RULES.values()))
    found = m.search(eg)
    assert sum(apply_matches(eg, r, m.matches(r, found)) for r in RULES.values()) == 1
    (added,) = [n for n in eg.nodes() if eg.node_op(n) == window]
    assert eg.node_class(added) == eg.node_class(next(n for n in eg.nodes() if eg.node_op(n) == op))
    attrs = dict(eg.node_attrs(added))
    assert tuple(attrs["pool_size"]) == (7, 5) and tuple(attrs["strides"]) == (1, 1)
    assert tuple(attrs["padding"]) == (0, 0, 0, 0)
    # the window's program computes what the global pool's does
    w = TensorGraph()
    y = w.var("x", [2, 16, 7, 5])
    w.set_output(w.add(window, [w.add("nn.relu", [y])], attrs))
    value = {"x": np.random.default_rng(0).standard_normal((2, 16, 7, 5)).astype("float32")}
    np.testing.assert_allclose(w.evaluate(value), g.evaluate(value), rtol=1e-6, atol=1e-7)


def test_window_pools_are_not_matched():
    g = TensorGraph()
    x = g.var("x", [1, 16, 7, 7])
    g.set_output(g.add("nn.avg_pool2d", [x], {"pool_size": (7, 7)}))
    eg = EGraph()
    eg.add_graph(g)
    m = Matcher(list(RULES.values()))
    assert not any(m.matches(r, m.search(eg)) for r in RULES.values())


# -- a cost database forgets pools measured the old way -----------------------------------------

def test_pool_rows_of_before_are_dropped_once(tmp_path):
    db = tmp_path / "costs.sqlite"
    pool, conv = _pool("nn.global_avg_pool2d", (1, 32, 14, 14)), OpInstance.make(
        "nn.relu", {}, [TensorType((1, 32, 14, 14), "float32")])
    c = CostCache(db)
    c.put(pool, ZNVER3, "tvm-llvm", 3e-4, 5)
    c.put(conv, ZNVER3, "tvm-llvm", 1e-5, 5)
    c.close()
    # a database of before this change: the marker gone, as it was
    conn = sqlite3.connect(db)
    conn.execute("DELETE FROM meta")
    conn.commit()
    conn.close()
    c = CostCache(db)
    assert c.get(pool, ZNVER3, "tvm-llvm") is None  # measured on channels-first maps: dropped
    assert c.get(conv, ZNVER3, "tvm-llvm").seconds == 1e-5  # everything else kept
    assert c.error is None
    c.put(pool, ZNVER3, "tvm-llvm", 4e-5, 5)  # measured again, the new way
    c.close()
    again = CostCache(db)  # done once: the new row stays
    assert again.get(pool, ZNVER3, "tvm-llvm").seconds == 4e-5
    assert set(POOL_OPS) == {"nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d",
                                   "nn.global_max_pool2d"}
    again.close()
    assert normalize_target(ZNVER3)


# -- measured on channel blocks (TVM) --------------------------------------------------------

def test_channel_block_is_the_convolutions():
    from relay_eqsat.cost.simd import output_block

    assert [output_block(c, 8) for c in (32, 1000, 3, 7, 12, 1)] == [8, 8, 3, 7, 6, 1]
    assert [output_block(c, 16) for c in (32, 1000, 24)] == [16, 10, 12]


@pytest.mark.tvm
def test_a_pool_is_built_on_channel_blocks_on_x86_only():
    pytest.importorskip("tvm")
    from relay_eqsat.passes.runtime.kernels import blocked_pool

    gavg = _pool("nn.global_avg_pool2d", (1, 32, 14, 14))
    func, params, inputs = blocked_pool(gavg, 8)
    text = func.astext()
    assert text.count("layout_transform") == 2 and 'layout="NCHW8c"' in text
    assert params == {} and [v.shape for v in inputs.values()] == [(1, 32, 14, 14)]
    window = blocked_pool(_pool("nn.max_pool2d", (1, 24, 9, 9), pool_size=(3, 3), strides=(2, 2)), 16)
    assert 'layout="NCHW12c"' in window[0].astext()  # 24 channels: blocks of 12 on AVX-512 (as TVM's)
    assert blocked_pool(gavg, None) is None  # not x86
    assert blocked_pool(_pool("nn.global_avg_pool2d", (1, 1, 14, 14)), 8) is None  # one channel
    assert blocked_pool(OpInstance.make("nn.relu", {}, [TensorType((1, 32, 4, 4), "float32")]), 8) is None


@pytest.mark.tvm
def test_measured_pool_runs_its_kernel_on_the_blocks(host_target):
    """The runner's measurement of a pool times the pool on the blocks, less the two transforms:
    the built program has the transforms and one pool kernel; a fused group (pool + sigmoid) is
    built as before, anchor and group alike."""
    pytest.importorskip("tvm")
    import json

    from relay_eqsat.cost.measure import MeasureConfig
    from relay_eqsat.cost.simd import simd_lanes
    from relay_eqsat.passes.runtime.kernels import TVMRunner

    if not simd_lanes(host_target):
        pytest.skip("not an x86 host")
    runner = TVMRunner(host_target, MeasureConfig(repeat=3, min_repeat_ms=2))
    inst = _pool("nn.avg_pool2d", (1, 32, 14, 14), pool_size=(14, 14))
    _, lib, _, _ = runner._load(inst, blocked=True)
    names = [n["attrs"]["func_name"] for n in json.loads(lib.get_graph_json())["nodes"] if n["op"] == "tvm_op"]
    assert sum("layout_transform" in n for n in names) == 2 and sum("pool" in n for n in names) == 1
    _, lib, _, _ = runner._load(inst)
    names = [n["attrs"]["func_name"] for n in json.loads(lib.get_graph_json())["nodes"] if n["op"] == "tvm_op"]
    assert names and not any("layout_transform" in n for n in names)
    seconds, repeats = runner(inst)
    assert seconds > 0 and repeats >= 1


# -- the pass, end to end (TVM) ----------------------------------------------------------------

class SlowGlobalPool(CostModel):
    """The analytic cost, a global pool 8x dearer (what x86 measures on channel blocks): the tests'
    pass must not depend on this machine's timings."""

    def __init__(self):
        super().__init__("analytic")

    def op_cost(self, op, attrs, input_types, out_type, all_inputs_constant=False, standalone=False):
        cost = super().op_cost(op, attrs, input_types, out_type, all_inputs_constant, standalone)
        return cost * 8 if op.startswith("nn.global_") else cost


@pytest.mark.tvm
@pytest.mark.parametrize("pool", ["avg", "max"])
def test_pass_rewrites_a_squeeze_and_excitation_block_with_same_numbers(pool):
    tvm = pytest.importorskip("tvm")
    from tvm import relay

    from relay_eqsat.passes import EqSatPass
    from relay_eqsat.passes.relay.simplify_copies import op_calls
    from relay_eqsat.passes.runtime.build import build, run

    rng = np.random.default_rng(0)
    x = relay.var("x", shape=(1, 16, 12, 10))
    y = relay.nn.relu(relay.nn.conv2d(x, relay.const(rng.standard_normal((16, 16, 3, 3)).astype("float32")),
                                      padding=(1, 1), channels=16, kernel_size=(3, 3)))
    s = getattr(relay.nn, f"global_{pool}_pool2d")(y)
    s = relay.sigmoid(relay.nn.conv2d(s, relay.const(rng.standard_normal((16, 16, 1, 1)).astype("float32")),
                                      channels=16, kernel_size=(1, 1)))
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], relay.multiply(y, s))))
    p = EqSatPass(check_runtime="off", calibrate="off", min_gain=0.0, search="tensat", final_extractor="greedy-ocf",
                  node_limit=2000, cost=SlowGlobalPool())
    out = p(mod)
    report = p.last_report
    assert report["changed"], report.get("reason")
    assert report["rules_fired"][f"global-{pool}-pool-window"] == 1
    calls = op_calls(out)
    assert f"nn.{pool}_pool2d" in calls and f"nn.global_{pool}_pool2d" not in calls
    inputs = {"x": rng.standard_normal((1, 16, 12, 10)).astype("float32")}
    ref, got = run(build(mod), inputs)[0], run(build(out), inputs)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
