"""TVM inlines a fused kernel's element-wise producers into their consumers, copying a producer's
expression once per read; nested fast ops (19 reads each) grew the pass's NasRNN program past
what TVM compiles in minutes. ``relay_eqsat.cost.inlining`` counts the reads, cuts a kernel that
would exceed the limit, the backend writes ``stop_fusion`` at the cut and the cost model does not
fuse across it."""
from __future__ import annotations

import numpy as np
import pytest

from relay_eqsat import ops
from relay_eqsat.cost.base import standalone_elementwise
from relay_eqsat.cost.inlining import MAX_INLINED_READS, fusion_cuts, inlined_reads
from relay_eqsat.cost.sweep import elementwise_ops
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


tvm = pytest.importorskip("tvm")
from tvm import relay  # noqa: E402

from relay_eqsat.graph import TensorType  # noqa: E402
from relay_eqsat.passes import from_relay  # noqa: E402
from relay_eqsat.passes.relay import graph_to_module  # noqa: E402
from relay_eqsat.passes.runtime import build, output_error, run  # noqa: E402
from relay_eqsat.passes.target import host_target  # noqa: E402

#: attributes for the ops that require some
ATTRS = {"clip": {"a_min": -1.0, "a_max": 1.0}, "nn.leaky_relu": {"alpha": 0.1}, "nn.bias_add": {"axis": 1}}


@tvm.instrument.pass_instrument
class _LoweredTIR:
    """Keeps the TIR modules as ``tir.LowerIntrin`` leaves them (intrinsics legalized for the target)."""

    def __init__(self):
        self.mods = []

    def run_after_pass(self, mod, info):
        if info.name == "tir.LowerIntrin":
            self.mods.append(mod)


#: a coefficient of fast_tanh's polynomial: it appears once per copy of a fast_tanh expression
FAST_TANH_MARK = "-2.76076847742355e-16"


def _reads_in_tvm(name: str) -> int:
    """How many copies of its first operand's expression TVM's lowering of ``name`` (as the backend
    writes it) makes: the op applied to ``fast_tanh`` of a dense layer's output (the kernel a
    dense's x86 schedule builds, every element-wise stage inlined), its other operands graph
    inputs, counted as copies of fast_tanh's polynomial in the TIR. TIR's common-subexpression
    elimination is off: it runs after the expression is built."""
    d = ops.OPS[name]
    shapes = [(4, 16), (16,)] if name == "nn.bias_add" else [(4, 16)] * d.arity
    xs = [relay.var(f"x{k}", shape=s) for k, s in enumerate(shapes)]
    w = relay.const(RNG.standard_normal((16, 16)).astype("float32"))
    first = relay.Call(relay.op.get("fast_tanh"), [relay.nn.dense(xs[0], w)])
    e = d.relay.to_relay({**(d.defaults or {}), **ATTRS.get(name, {})}, [first] + xs[1:],
                         [TensorType(s, "float32") for s in shapes], TensorType((4, 16), "float32"))
    grab = _LoweredTIR()
    with tvm.transform.PassContext(opt_level=3, instruments=[grab], config={"tir.disable_cse_tir": True}):
        relay.build(tvm.IRModule.from_expr(relay.Function(xs, e)), target=host_target())
    marks = sum(f.script().count(FAST_TANH_MARK) for m in grab.mods for f in m.functions.values())
    return marks - (name == "fast_tanh")  # fast_tanh's own polynomial is one more


@pytest.mark.tvm
def test_the_op_tables_inline_reads_are_what_tvm_lowers():
    """Every element-wise op of the table, as the backend writes it (a fast sigmoid is its fast_exp,
    a fast_erf reads x again for its NaN guard)."""
    eo = elementwise_ops()
    got = {name: _reads_in_tvm(name) for name in eo["unary"] + eo["binary"]}
    assert got == {name: ops.OPS[name].inline_reads for name in got}
    assert got["fast_tanh"] == 19 and got["tanh"] == 5 and got["add"] == 1


@pytest.mark.tvm
def test_the_backend_stops_fusion_at_a_cut_reads_it_back_and_tvm_builds_it():
    """Four nested fast_tanh after a dense: one ``stop_fusion`` before the fourth, two kernels; read
    back, the program is the graph written (no node for the annotation); the outputs are the
    graph's (uncut, TVM took 30 s to compile this kernel; cut, a fraction of a second)."""
    g, (a, b, c, d) = _chain(["fast_tanh"] * 4)
    mod = graph_to_module(g)
    assert mod.astext(show_meta_data=False).count("stop_fusion") == 1
    with tvm.transform.PassContext(opt_level=3):
        fused = relay.transform.FuseOps(fuse_opt_level=3)(relay.transform.InferType()(mod))
    assert fused.astext(show_meta_data=False).count("Primitive=1") == 2
    back = from_relay(mod)
    assert [n.op for n in back.nodes if n.op not in ("var", "constant")] == ["nn.dense"] + ["fast_tanh"] * 4
    x = RNG.standard_normal((1, 64)).astype("float32")
    want = g.evaluate({"x": x})
    got = run(build(mod, target=host_target()), {"x": x})
    err, why = output_error([np.asarray(want)], got)
    assert why is None and err < 1e-5
    # a program without such chains is written as before: no annotation
    assert "stop_fusion" not in graph_to_module(_chain(["tanh", "sigmoid", "fast_tanh"])[0]).astext()
