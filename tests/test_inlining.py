"""TVM inlines a fused kernel's element-wise producers into their consumers, copying a producer's
expression once per read; nested fast ops (19 reads each) grew the pass's NasRNN program past
what TVM compiles in minutes. ``relay_eqsat.cost.inlining`` counts the reads, cuts a kernel that
would exceed the limit and the cost model does not fuse across it (the backend's ``stop_fusion``
and the reads per op against TVM's lowering: tests/test_inlining_relay.py)."""
from __future__ import annotations

import numpy as np
import pytest

from relay_eqsat import ops
from relay_eqsat.cost.fusion import standalone_elementwise
from relay_eqsat.cost.inlining import MAX_INLINED_READS, fusion_cuts, inlined_reads
from relay_eqsat.graph import TensorGraph

RNG = np.random.default_rng(0)


def _chain(ops_: list[str], width: int = 64) -> tuple[TensorGraph, list[int]]:
    """dense, then ``ops_`` applied in a chain; returns the graph and the chain's node ids."""
    g = TensorGraph()
    x = g.var("x", (1, width))
    y = g.add("nn.dense", [x, g.const((RNG.standard_normal((width, width)) / width ** 0.5).astype("float32"), "w")],
              {"out_dtype": ""})
    chain = []
    for op in ops_:
        y = g.add(op, [y], dedup=False)
        chain.append(y)
    g.set_output(y)
    return g, chain


def test_nested_ops_multiply_their_reads_and_the_kernel_is_cut_at_the_limit():
    g, (a, b, c, d) = _chain(["fast_tanh"] * 4)
    reads = inlined_reads(g)
    assert [reads[i] for i in (a, b, c, d)] == [19, 19 ** 2, 19 ** 3, 19 ** 4]
    assert reads[g.nodes[a].inputs[0]] == 1  # the dense's output is read from memory
    assert fusion_cuts(g) == {d: frozenset({0})}  # 19^4 = 130,321 > 8,192: the fourth reads the third
    assert fusion_cuts(g, limit=1024) == {c: frozenset({0})}
    assert inlined_reads(g, cuts=fusion_cuts(g))[d] == 19
    assert max(inlined_reads(g, cuts=fusion_cuts(g)).values()) <= MAX_INLINED_READS
    # exact ops read their operand once (tanh: 5 times): 5 nested tanh, 20 sigmoid need no cut
    assert fusion_cuts(_chain(["tanh"] * 5)[0]) == {} and fusion_cuts(_chain(["sigmoid"] * 20)[0]) == {}
    assert fusion_cuts(_chain(["tanh"] * 6)[0]) != {}


def test_operands_add_up_reductions_reset_and_constants_read_once():
    g = TensorGraph()
    x = g.var("x", (4, 16))
    t = g.add("fast_tanh", [x])
    s = g.add("add", [t, g.add("fast_exp", [x])])              # 19 + 18
    m = g.add("multiply", [s, g.const(np.ones((16,), np.float32), "c")])  # + 1 for the constant
    red = g.add("mean", [g.add("fast_tanh", [m])], {"axis": (1,), "keepdims": True})
    out = g.add("fast_tanh", [red])
    g.set_output(out)
    reads = inlined_reads(g)
    assert reads[s] == 37 and reads[m] == 38
    assert reads[red] == 19 * 38  # a reduction inlines its operand ...
    assert reads[out] == 19      # ... and is read from memory by its consumers
    # a split's piece passes the split's count on; a cut lands on the piece (a tensor), not the tuple
    h = TensorGraph()
    y = h.var("y", (1, 32))
    for _ in range(3):
        y = h.add("fast_tanh", [y], dedup=False)
    parts = h.add("split", [y], {"indices": (16,), "axis": 1})
    piece = h.add("tuple_get_item", [parts], {"index": 0})
    last = h.add("fast_tanh", [piece])
    h.set_output(last)
    assert inlined_reads(h)[piece] == 19 ** 3
    assert fusion_cuts(h) == {last: frozenset({0})} and h.nodes[last].inputs[0] == piece


def test_the_cost_model_does_not_fuse_across_a_cut():
    g, (a, b, c, d) = _chain(["fast_tanh"] * 4)
    assert standalone_elementwise(g) == {d: c}  # the fourth is a kernel of its own, reading the third
    assert standalone_elementwise(_chain(["fast_tanh"] * 3)[0]) == {}


def test_the_optimizers_report_counts_the_cuts_of_its_result():
    """Exact tanh nested four deep become fast_tanh under the ``approx`` rules: the result's fourth
    is cut from the third, and the report says so; kept exact, nothing is cut."""
    from relay_eqsat.pipeline import optimize_graph

    g, _ = _chain(["tanh"] * 4, width=1024)
    opts = {"cost": "learned", "target": "llvm -mtriple=x86_64-linux-gnu -mcpu=znver4"}
    out, rep = optimize_graph(g, opts, progress=False)
    assert rep.changed and out.op_counts().get("fast_tanh") == 4
    assert rep.info["fusion_cuts"] == 1 == sum(len(c) for c in fusion_cuts(out).values())
    out, rep = optimize_graph(g, dict(opts, fast_math=False), progress=False)
    assert "fusion_cuts" not in rep.info
