"""The TVM side of ``relay_eqsat.cost.inlining`` (tests/test_inlining.py has the counts): the operator
table's reads per op are what TVM's lowering makes, and the backend's ``stop_fusion`` at a cut
splits the kernel, reads back as the identity and computes the graph's values."""
from __future__ import annotations

import numpy as np
import pytest

from relay_eqsat import ops
from relay_eqsat.cost.sweep import elementwise_ops

tvm = pytest.importorskip("tvm")
from tvm import relay  # noqa: E402

from test_inlining import _chain  # noqa: E402

from relay_eqsat.graph import TensorType  # noqa: E402
from relay_eqsat.passes import from_relay  # noqa: E402
from relay_eqsat.passes.relay.backend import graph_to_module  # noqa: E402
from relay_eqsat.passes.runtime.build import build, output_error, run  # noqa: E402
from relay_eqsat.passes.runtime.target import host_target  # noqa: E402

pytestmark = pytest.mark.tvm

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
    w = relay.const(np.random.default_rng(0).standard_normal((16, 16)).astype("float32"))
    first = relay.Call(relay.op.get("fast_tanh"), [relay.nn.dense(xs[0], w)])
    e = d.conversion("relay").to_ir({**(d.defaults or {}), **ATTRS.get(name, {})}, [first] + xs[1:],
                         [TensorType(s, "float32") for s in shapes], TensorType((4, 16), "float32"))
    grab = _LoweredTIR()
    with tvm.transform.PassContext(opt_level=3, instruments=[grab], config={"tir.disable_cse_tir": True}):
        relay.build(tvm.IRModule.from_expr(relay.Function(xs, e)), target=host_target())
    marks = sum(f.script().count(FAST_TANH_MARK) for m in grab.mods for f in m.functions.values())
    return marks - (name == "fast_tanh")  # fast_tanh's own polynomial is one more


@pytest.mark.tvm
def test_the_op_tables_inline_reads_are_what_tvm_lowers():
    """Every element-wise op of the table, as the backend writes it (a fast sigmoid is
    0.5 + 0.5 * fast_tanh(0.5 * x), a fast_erf reads x again for its NaN guard)."""
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
    x = np.random.default_rng(1).standard_normal((1, 64)).astype("float32")
    want = g.evaluate({"x": x})
    got = run(build(mod, target=host_target()), {"x": x})
    err, why = output_error([np.asarray(want)], got)
    assert why is None and err < 1e-5
    # a program without such chains is written as before: no annotation
    assert "stop_fusion" not in graph_to_module(_chain(["tanh", "sigmoid", "fast_tanh"])[0]).astext()
