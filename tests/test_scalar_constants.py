"""Scalar constants carry their value, and rules match it: ``power-cube`` (issue 15).

A 0-d constant's node holds its ``value`` (``TensorGraph.const``), so a rule's
pattern can name a scalar operand, ``(power ?x (constant :value 3.0))``: the
value is an attribute of the matched node, part of the match, not a
precondition (whose application plans are memoized per class types). GPT-2's
GELU is exported with ``Pow(x, 3)``, which TVM's x86 code runs as one libm
``powf`` call per value; ``power-cube`` writes it as ``x * x * x``. Its
``example`` lines are verified numerically by tests/test_rules.py; here: the
attribute, what the rule matches (the core, no TVM), and the pass end to end
on a GELU in the form the ONNX frontend hands TVM (no ``power`` left, the same
numbers).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from relay_eqsat import ops
from relay_eqsat.cost import CostModel
from relay_eqsat.egraph import EGraph
from relay_eqsat.graph import TensorGraph, TensorType
from relay_eqsat.rewrite.check import verify_rule
from relay_eqsat.rewrite import Matcher, apply_matches, load_rules, parse_rules

RULE = next(r for r in load_rules() if r.name == "power-cube")
TRUST = dict(check_runtime="off", calibrate="off", min_gain=0.0, search="tensat", final_extractor="greedy-ocf",
             node_limit=2000)


class LibmPower(CostModel):
    """The host's default cost model, with ``power`` priced as TVM's x86 code runs it: one libm
    ``powf`` call per value (~20 ns; the shipped models have no measured ``power`` and price it
    near two multiplies, a known limitation in the README), so that the test does not depend on
    which way an extrapolation tips."""

    def op_cost(self, op, attrs, input_types, out_type, *args, **kwargs):
        cost = super().op_cost(op, attrs, input_types, out_type, *args, **kwargs)
        if op == "power" and isinstance(out_type, TensorType):
            cost += 20e-9 * out_type.size
        return cost


def test_a_scalar_constant_carries_its_value():
    g = TensorGraph()
    assert g[g.const(np.float32(3.0))].attrs["value"] == 3.0
    assert g[g.const(np.array(2, "int64"))].attrs["value"] == 2
    assert type(g[g.const(np.array(2, "int64"))].attrs["value"]) is int
    assert "value" not in g[g.const(np.array([3.0], "float32"))].attrs  # one element, not a scalar
    assert "value" not in g[g.const(np.ones((2, 2), "float32"))].attrs
    assert "value" not in g[g.const(np.float32("nan"))].attrs  # NaN is unequal to itself: no attribute
    assert "value" not in g[g.const(np.float32("inf"))].attrs


def test_the_op_table_keeps_a_constants_value_and_drops_unknown_attributes():
    t = TensorType((), "float32")
    norm = ops.normalize_attrs("constant", {"name": "c", "type": t, "value": 3.0, "other": 1}, [])
    assert dict(norm) == {"name": "c", "type": t, "value": 3.0}
    assert dict(ops.normalize_attrs("constant", {"name": "c", "type": t}, [])) == {"name": "c", "type": t}


def _applications(exponent) -> int:
    """Applications of power-cube on power(x, exponent); ``exponent``: a scalar, an array, or "var"."""
    g = TensorGraph()
    x = g.var("x", (4, 8))
    e = g.var("e", ()) if exponent == "var" else g.const(np.asarray(exponent, "float32"))
    g.set_output(g.add("power", [x, e]))
    eg = EGraph()
    eg.add_graph(g)
    m = Matcher([RULE])
    return apply_matches(eg, RULE, m.matches(RULE, m.search(eg)))


def test_the_rule_is_shipped_exact_with_examples():
    assert RULE.examples and not RULE.approx
    assert verify_rule(RULE).ok


@pytest.mark.parametrize("exponent,applications", [(3.0, 1), (2.0, 0), (3.5, 0), ([3.0], 0), ("var", 0)])
def test_matches_the_cube_only(exponent, applications):
    assert _applications(exponent) == applications


def test_a_rule_naming_the_wrong_value_is_caught():
    (wrong,) = parse_rules("""
    rule power-square-wrong
      lhs   (power ?x (constant :value 2.0))
      rhs   (multiply (multiply ?x ?x) ?x)
      example ?x [4,8]
    """)
    check = verify_rule(wrong)
    assert check.status == "wrong" and "differ" in check.problem


def test_leaf_constants_of_a_checked_rule_stand_for_any_value():
    """A rule's variable made a constant when it is checked has no value to match (its value is
    drawn): a scalar one would otherwise read as the zero it was built with."""
    from relay_eqsat.rewrite.instances import from_example

    (rule,) = parse_rules("""
    rule mul-scalar-comm
      lhs   (multiply ?x ?s)
      where (const ?s)
      rhs   (multiply ?s ?x)
      example ?x [4,8] ?s []
    """)
    inst = from_example(rule, rule.examples[0], {"?s"})
    (s,) = [n for n in inst.graph.nodes if n.op == "constant"]
    assert s.type.shape == () and "value" not in s.attrs
    assert verify_rule(rule).ok


# -- the pass, end to end (TVM) -----------------------------------------------------------

def _gelu_tanh(shape=(8, 48)):
    """GPT-2's GELU as the ONNX frontend writes it: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    tvm = pytest.importorskip("tvm")
    from tvm import relay

    x = relay.var("x", shape=shape)
    c = lambda v: relay.const(np.float32(v))  # noqa: E731
    inner = c(math.sqrt(2 / math.pi)) * (x + c(0.044715) * relay.power(x, c(3.0)))
    y = c(0.5) * x * (c(1.0) + relay.tanh(inner))
    return relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], y)))




@pytest.mark.tvm
def test_the_frontends_scalar_exponent_arrives_with_its_value():
    from relay_eqsat.passes.relay.frontend import from_relay

    g = from_relay(_gelu_tanh())
    (p,) = [n for n in g.nodes if n.op == "power"]
    assert g[p.inputs[1]].attrs["value"] == 3.0


@pytest.mark.tvm
def test_pass_writes_the_cube_as_multiplies_with_the_same_numbers():
    from relay_eqsat.passes import EqSatPass
    from relay_eqsat.passes.runtime.build import build, run
    from relay_eqsat.passes.relay.simplify_copies import op_calls

    mod = _gelu_tanh()
    p = EqSatPass(**TRUST, fast_math=False, cost=LibmPower())
    out = p(mod)
    report = p.last_report
    assert report["changed"], report.get("reason")
    assert report["rules_fired"]["power-cube"] == 1
    assert "power" not in op_calls(out) and "power" in op_calls(mod)
    x = np.random.default_rng(0).standard_normal((8, 48)).astype("float32") * 3
    ref, got = run(build(mod), {"x": x})[0], run(build(out), {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    expect = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(got, expect, rtol=1e-5, atol=1e-5)
