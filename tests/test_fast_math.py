"""TVM's vectorized approximations of exp, tanh, erf, sigmoid and softmax (ops, ``approx`` rules, fast_math).

The table's ``fast_exp``, ``fast_tanh``, ``fast_erf``, ``fast_sigmoid`` and
``nn.fast_softmax`` are the exact functions to within float32 rounding error,
and keep NaN; the backend writes them with TVM's FastMath ops (fast_erf with a
NaN guard, since TVM's maps NaN to 1; fast_sigmoid as 0.5 + 0.5 * fast_tanh(0.5 * x)).
Checked here: their values as TVM builds them against the exact functions on
random and edge inputs, the rules' ``approx`` clause and the ``fast_math``
option, and the optimizer choosing them for a transformer's GELU and softmax
with the same numbers out.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from relay_eqsat.graph import TensorGraph
from relay_eqsat.pipeline import OptimizeOptions, optimize_graph, resolve_rules
from relay_eqsat.rewrite import RuleSyntaxError, parse_rules, rules_for_target

FAST = {"exp": "fast_exp", "tanh": "fast_tanh", "erf": "fast_erf", "sigmoid": "fast_sigmoid",
        "nn.softmax": "nn.fast_softmax"}
APPROX_RULES = {"exp-fast", "tanh-fast", "erf-fast", "sigmoid-fast", "softmax-fast"}
#: |fast - exact| <= TOL * max(1, |exact|) per value (measured: below 1e-6; bench/fast_math.py)
TOL = 2e-6
EDGES = [np.nan, np.inf, -np.inf, -3e38, -100.0, -88.5, -87.0, -9.5, -4.0, -1e-8, 0.0, 1e-8, 0.5, 4.0, 9.5,
         88.0, 89.0, 3e38]
SPR = "llvm -mtriple=x86_64-linux-gnu -mcpu=sapphirerapids"


def one_op(op: str, shape) -> TensorGraph:
    g = TensorGraph()
    x = g.var("x", shape)
    g.set_output(g.add(op, [x], {"axis": len(shape) - 1} if "softmax" in op else None))
    return g


def gelu_softmax(shape=(4, 64)) -> TensorGraph:
    """ONNX's GELU, x * (1 + erf(x / sqrt 2)) * 0.5, then a softmax over the last axis."""
    g = TensorGraph()
    x = g.var("x", shape)
    e = g.add("erf", [g.add("divide", [x, g.const(np.float32(math.sqrt(2.0)))])])
    h = g.add("multiply", [g.add("multiply", [x, g.add("add", [e, g.const(np.float32(1.0))])]),
                           g.const(np.float32(0.5))])
    g.set_output(g.add("nn.softmax", [h], {"axis": 1}))
    return g


# -- the rules and the option (no TVM) ------------------------------------------------------------

def test_the_approximate_rules_are_shipped_marked_and_kept_off_gpus():
    rules = {r.name: r for r in resolve_rules("default")}
    assert {n for n, r in rules.items() if r.approx} == APPROX_RULES
    assert all(rules[n].examples and "gpu" in rules[n].avoid for n in APPROX_RULES)
    kept, left_out = rules_for_target(rules.values(), "llvm", fast_math=False)
    assert APPROX_RULES <= set(left_out) and not APPROX_RULES & {r.name for r in kept}
    kept, _ = rules_for_target(rules.values(), "llvm")
    assert APPROX_RULES <= {r.name for r in kept}


def test_approx_clause_takes_nothing():
    (r,) = parse_rules("rule r\n  lhs (exp ?x)\n  rhs (fast_exp ?x)\n  approx   # why\n")
    assert r.approx
    (r,) = parse_rules("rule r\n  lhs (exp ?x)\n  rhs (fast_exp ?x)\n")
    assert not r.approx
    with pytest.raises(RuleSyntaxError, match="approx takes nothing"):
        parse_rules("rule r\n  lhs (exp ?x)\n  rhs (fast_exp ?x)\n  approx cpu\n")


def test_fast_math_option_is_validated():
    assert OptimizeOptions().fast_math is True
    assert OptimizeOptions(fast_math="off").fast_math is False
    with pytest.raises(ValueError, match="fast_math"):
        OptimizeOptions(fast_math="sometimes")


@pytest.mark.parametrize("fast_math", [True, False])
def test_optimizer_takes_the_fast_forms_only_with_fast_math(fast_math):
    """This CPU's shipped model prices erf and softmax above their approximations (the tests'
    other CPUs' models may not: the pass measures before it keeps a rewrite)."""
    g = gelu_softmax()
    out, rep = optimize_graph(g, OptimizeOptions(fast_math=fast_math, target=SPR, search="tensat",
                                                 final_extractor="greedy-ocf", cost="learned"))
    ops = set(out.op_counts())
    if fast_math:
        assert rep.changed and {"fast_erf", "nn.fast_softmax"} <= ops and not {"erf", "nn.softmax"} & ops
        assert {"erf-fast", "softmax-fast"} <= set(rep.rules_fired)
    else:
        assert not ops & set(FAST.values())
        assert APPROX_RULES <= set(rep.info["rules_avoided"])
    x = {"x": np.random.default_rng(0).standard_normal((4, 64)).astype("float32") * 3}
    np.testing.assert_allclose(out.evaluate(x), g.evaluate(x), rtol=1e-6, atol=1e-7)


# -- as TVM builds them ---------------------------------------------------------------------------

@pytest.mark.tvm
@pytest.mark.parametrize("exact", list(FAST))
def test_fast_ops_match_the_exact_functions_as_tvm_builds_them(exact):
    pytest.importorskip("tvm")
    from relay_eqsat.passes.relay.backend import graph_to_module
    from relay_eqsat.passes.runtime.build import build_and_run

    rng = np.random.default_rng(3)
    x = np.concatenate([np.array(EDGES, "float32"), (rng.standard_normal(2 * 64 - len(EDGES)) * 4).astype("float32")])
    x = x.reshape(2, 64)
    with np.errstate(over="ignore"):  # exp(3e38) is inf
        ref = one_op(exact, x.shape).evaluate({"x": x})  # float64 inside, rounded to float32
    got = build_and_run(graph_to_module(one_op(FAST[exact], x.shape)), {"x": x})[1][0]
    assert np.array_equal(np.isnan(got), np.isnan(ref)), "NaN where the exact function has none, or lost"
    finite = np.isfinite(ref)
    assert np.array_equal(got[~finite & ~np.isnan(ref)], ref[~finite & ~np.isnan(ref)])  # +-inf as exact
    err = np.abs(got[finite].astype(np.float64) - ref[finite]) / np.maximum(1.0, np.abs(ref[finite]))
    assert err.max() <= TOL, f"{FAST[exact]}: error {err.max():.2e} at {x[finite][err.argmax()]}"


@pytest.mark.tvm
def test_fast_erf_keeps_nan_that_tvms_own_maps_to_one():
    tvm = pytest.importorskip("tvm")
    from tvm import relay

    from relay_eqsat.passes.relay.backend import graph_to_module
    from relay_eqsat.passes.runtime.build import build_and_run

    x = np.array([np.nan, 0.5, -np.inf], "float32")
    v = relay.var("x", shape=(3,))
    tvms = build_and_run(tvm.IRModule.from_expr(relay.Function([v], relay.Call(relay.op.get("fast_erf"), [v]))),
                         {"x": x})[1][0]
    ours = build_and_run(graph_to_module(one_op("fast_erf", (3,))), {"x": x})[1][0]
    assert tvms[0] == 1.0  # why the backend guards it
    assert np.isnan(ours[0]) and abs(ours[1] - math.erf(0.5)) < TOL and ours[2] == -1.0


@pytest.mark.tvm
def test_optimized_gelu_softmax_gives_the_same_numbers_in_tvm():
    pytest.importorskip("tvm")
    from relay_eqsat.passes.relay.backend import graph_to_module
    from relay_eqsat.passes.runtime.build import build_and_run, output_error

    g = gelu_softmax((8, 128))
    out, rep = optimize_graph(g, OptimizeOptions(target=SPR, search="tensat", final_extractor="greedy-ocf",
                                                 cost="learned"))
    assert "fast_erf" in out.op_counts()
    x = {"x": np.random.default_rng(1).standard_normal((8, 128)).astype("float32") * 3}
    a = build_and_run(graph_to_module(g), x)[1]
    b = build_and_run(graph_to_module(out), x)[1]
    assert output_error(a, b)[0] <= 1e-5
