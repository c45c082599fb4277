"""batch_dense: a batch_matmul (NT form) run as one nn.dense per batch entry (issue 15).

TVM's x86 batch_matmul schedule runs attention's products at 20-30 GFLOP/s;
one packed dense per head runs them 3-5x faster (bench/attention_forms.py).
Checked here: the op's semantics and its Relay form as TVM builds it (NaN and
inf included), rule ``batch-matmul-dense-per-batch`` (where it applies and
where not), the cost model pricing it as the kernels TVM runs (a measurement
of the op itself first), and the optimizer choosing it for bert-base's
attention under this CPU's shipped model with the same numbers out.
"""
from __future__ import annotations

import numpy as np
import pytest

from relay_eqsat import ops
from relay_eqsat.cost import CostCache, OpInstance, make_cost_model
from relay_eqsat.egraph import EGraph
from relay_eqsat.graph import TensorGraph
from relay_eqsat.pipeline import OptimizeOptions, optimize_graph, resolve_rules
from relay_eqsat.rewrite import Matcher, apply_matches
from relay_eqsat.types import Attrs, TensorType

RULE = "batch-matmul-dense-per-batch"
SPR = "llvm -mtriple=x86_64-linux-gnu -mcpu=sapphirerapids"


def t(*shape):
    return TensorType(shape, "float32")


def attention(b=12, m=128, k=64) -> TensorGraph:
    """softmax(Q.K^T / 8).V with the heads as the batch, in the NT forms the pass rewrites."""
    g = TensorGraph()
    q, kk, v = g.var("q", (b, m, k)), g.var("k", (b, m, k)), g.var("v", (b, m, k))
    nt = {"transpose_a": False, "transpose_b": True, "out_dtype": ""}  # as the frontend reads them
    s = g.add("nn.batch_matmul", [q, kk], nt)
    p = g.add("nn.softmax", [g.add("divide", [s, g.const(np.float32(8.0))])], {"axis": 2})
    vt = g.add("transpose", [v], {"axes": (0, 2, 1)})
    g.set_output(g.add("nn.batch_matmul", [p, vt], nt))
    return g


def inputs(g: TensorGraph, seed=0) -> dict:
    rng = np.random.default_rng(seed)
    return {n.attrs["name"]: rng.standard_normal(n.type.shape).astype("float32") for n in g.nodes if n.op == "var"}


# -- the rule (no TVM) ----------------------------------------------------------------------------

def rewrites(b, n_b, ta=False, tb=True, m=3, k=4, n=5, const_b=False) -> bool:
    """Whether the rule applies to one batch_matmul [b, m, k] x [n_b, n, k] (transposes as given;
    ``const_b``: the right operand a constant)."""
    rule = next(r for r in resolve_rules("default") if r.name == RULE)
    g = TensorGraph()
    x = g.var("a", (b, k, m) if ta else (b, m, k))
    shape_b = (n_b, n, k) if tb else (n_b, k, n)
    y = g.const(np.ones(shape_b, "float32"), "b") if const_b else g.var("b", shape_b)
    g.set_output(g.add("nn.batch_matmul", [x, y], {"transpose_a": ta, "transpose_b": tb, "out_dtype": ""}))
    eg = EGraph()
    eg.add_graph(g)
    m = Matcher([rule])
    return apply_matches(eg, rule, m.matches(rule, m.search(eg))) > 0


def test_the_rule_is_shipped_verified_and_kept_off_gpus():
    rule = next(r for r in resolve_rules("default") if r.name == RULE)
    assert rule.examples and "gpu" in rule.avoid and not rule.approx


@pytest.mark.parametrize("b,n_b,ta,tb,want", [
    (12, 12, False, True, True), (1, 1, False, True, True), (64, 64, False, True, True),
    (65, 65, False, True, False),  # a dense per entry: the program's size is bounded
    (1, 6, False, True, False), (6, 1, False, True, False),  # a broadcast batch
    (4, 4, True, True, False), (4, 4, False, False, False),  # other forms (batch-matmul-nn-to-nt first)
])
def test_the_rule_applies_to_the_nt_form_with_equal_batches_only(b, n_b, ta, tb, want):
    assert rewrites(b, n_b, ta, tb) == want


def test_one_entry_by_a_constant_is_left_to_the_dense_rule():
    """A linear layer of a [1, M, K] input (BERT's every one) is batch-matmul-const-to-dense-tb's
    plain dense: a one-entry stack would end the dense's kernel before its epilogue."""
    assert not rewrites(1, 1, const_b=True)
    assert rewrites(1, 1) and rewrites(4, 4, const_b=True)


# -- the cost model (no TVM) ----------------------------------------------------------------------

def test_cost_is_the_kernels_tvm_runs_unless_the_op_itself_was_measured(tmp_path):
    cache = CostCache(str(tmp_path / "costs.sqlite"))
    cm = make_cost_model("auto", target=SPR, db=cache)
    a, b, out = t(12, 128, 64), t(12, 128, 64), t(12, 128, 128)
    attrs = ops.normalize_attrs("batch_dense", {}, [a, b])
    parts = ops.get("batch_dense").kernels(ops.OpAttrs(ops.get("batch_dense"), attrs), [a, b], out)
    assert [(count, op) for count, op, *_ in parts] == [(12, "nn.dense"), (12, "strided_slice"),
                                                        (12, "strided_slice"), (1, "concatenate")]
    want = sum(count * cm.kernel_cost(op, ops.normalize_attrs(op, pa, list(ins)), tuple(ins), o)
               for count, op, pa, ins, o in parts)
    assert cm.kernel_cost("batch_dense", attrs, (a, b), out) == pytest.approx(want)
    assert cm.sources["kernels"] == 1
    # the 12 denses are most of it (each head's product is one dense kernel)
    dense = cm.kernel_cost("nn.dense", Attrs({"out_dtype": ""}), (t(128, 64), t(128, 64)), t(128, 128))
    assert 12 * dense <= want
    # a batched prediction prefetches the parts and leaves the op to them
    cm2 = make_cost_model("auto", target=SPR, db=cache)
    cm2.prefetch([OpInstance("batch_dense", attrs, (a, b), out)])
    assert cm2.kernel_cost("batch_dense", attrs, (a, b), out) == pytest.approx(want)
    # the op measured as a whole (its Relay form built and timed) comes first
    cache.put(OpInstance("batch_dense", attrs, (a, b), out), cm.target, cm.backend or "tvm-llvm", 1.5e-4, 10)
    cm3 = make_cost_model("auto", target=SPR, db=cache)
    assert cm3.kernel_cost("batch_dense", attrs, (a, b), out) == pytest.approx(1.5e-4)


def test_optimizer_runs_bert_attention_as_denses_on_this_cpus_model():
    """bert-base's attention products under the shipped Sapphire Rapids model: the per-head denses
    are cheaper, so both products become batch_dense, with the numbers unchanged."""
    g = attention()
    out, rep = optimize_graph(g, OptimizeOptions(target=SPR, search="tensat", cost="learned"))
    counts = out.op_counts()
    assert rep.changed and counts.get("batch_dense") == 2 and "nn.batch_matmul" not in counts
    assert rep.rules_fired.get(RULE)
    x = inputs(g)
    np.testing.assert_allclose(out.evaluate(x), g.evaluate(x), rtol=1e-5, atol=1e-6)


# -- as TVM builds it -----------------------------------------------------------------------------

def one_op(b, m, n, k) -> TensorGraph:
    g = TensorGraph()
    g.set_output(g.add("batch_dense", [g.var("a", (b, m, k)), g.var("b", (b, n, k))]))
    return g


@pytest.mark.tvm
@pytest.mark.parametrize("b,m,n,k", [(12, 128, 128, 64), (1, 3, 5, 4), (3, 197, 64, 197), (5, 1, 7, 16)])
def test_batch_dense_as_tvm_builds_it_is_batch_matmul(b, m, n, k):
    tvm = pytest.importorskip("tvm")
    from tvm import relay

    from relay_eqsat.passes.relay.backend import graph_to_module
    from relay_eqsat.passes.runtime.build import build_and_run

    rng = np.random.default_rng(b * m + n)
    a = rng.standard_normal((b, m, k)).astype("float32")
    bb = rng.standard_normal((b, n, k)).astype("float32")
    a[0, 0, 0], bb[-1, -1, -1] = np.nan, np.inf  # one NaN row, one inf column, as batch_matmul gives them
    va, vb = relay.var("a", shape=a.shape), relay.var("b", shape=bb.shape)
    ref = build_and_run(tvm.IRModule.from_expr(relay.Function([va, vb], relay.nn.batch_matmul(va, vb))),
                        {"a": a, "b": bb})[1][0]
    got = build_and_run(graph_to_module(one_op(b, m, n, k)), {"a": a, "b": bb})[1][0]
    assert got.shape == (b, m, n)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-4, equal_nan=True)


@pytest.mark.tvm
def test_optimized_attention_gives_the_same_numbers_in_tvm():
    pytest.importorskip("tvm")
    from relay_eqsat.passes.relay.backend import graph_to_module
    from relay_eqsat.passes.runtime.build import build_and_run, output_error

    g = attention(b=4, m=32, k=16)
    out, rep = optimize_graph(g, OptimizeOptions(target=SPR, search="tensat", cost="learned"))
    assert "batch_dense" in out.op_counts()
    x = inputs(g, seed=1)
    a = build_and_run(graph_to_module(g), x)[1]
    b = build_and_run(graph_to_module(out), x)[1]
    assert output_error(a, b)[0] <= 1e-5
