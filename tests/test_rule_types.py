"""Rule applications keep one type per e-class.

A rule whose right side has another type than the class its left side
matched (here: ``x + y -> x`` where ``y`` broadcasts ``x`` to a larger shape)
must not be merged: ``union`` would refuse with an error that ends the whole
search. The application is skipped instead and counted in
``EGraph.type_mismatches`` (the optimizer's report: ``info["type_mismatch"]``),
on both application paths (``apply_matches`` and the memoized Cython
``apply_search_matches``), every time it is met, memoized or not.
"""
from __future__ import annotations

import pytest

from relay_eqsat.egraph import EGraph
from relay_eqsat.graph import TensorGraph
from relay_eqsat.pipeline import optimize_graph
from relay_eqsat.rewrite import Matcher, apply_matches, apply_search_matches, parse_rules
from relay_eqsat.search.base import Limits
from relay_eqsat.search.tensat import TensatScheduler

BAD_RULES = """
rule drop-broadcast-add
  lhs (add ?x ?y)
  rhs ?x
rule relu-of-first
  lhs (add ?x ?y)
  rhs (nn.relu ?x)
"""


def broadcast_graph() -> tuple[TensorGraph, dict]:
    """add(x[3], y[2,3]) is [2,3] (x's class is [3]); add(x, z[3]) is [3]."""
    g = TensorGraph()
    x, y, z = g.var("x", (3,)), g.var("y", (2, 3)), g.var("z", (3,))
    wide, narrow = g.add("add", (x, y)), g.add("add", (x, z))
    g.set_output(g.add("tuple", (wide, narrow)))
    return g, {"x": x, "wide": wide, "narrow": narrow}


def load(eg: EGraph, g: TensorGraph) -> list[int]:
    classes: list[int] = []
    eg.add_graph(g, classes)
    return classes


@pytest.mark.parametrize("path", ["general", "planned"])
def test_ill_typed_application_is_skipped_and_counted(path):
    rule = parse_rules(BAD_RULES)[0]
    g, ids = broadcast_graph()
    eg = EGraph()
    cls = load(eg, g)
    m = Matcher([rule])
    for round_ in (1, 2):  # the second round finds the (memoized) plans in the rule's cache
        if path == "general":
            apply_matches(eg, rule, m.matches(rule, m.search(eg)))
        else:
            keys = m.rule_keys[rule.name]
            apply_search_matches(eg, rule, [eg.search(m.programs[k]) for k in keys])
        eg.rebuild()
        assert eg.type_mismatches == round_  # counted per application, cached plan or not
    # the well-typed application merged, the ill-typed one did not
    assert eg.find(cls[ids["narrow"]]) == eg.find(cls[ids["x"]])
    assert eg.find(cls[ids["wide"]]) != eg.find(cls[ids["x"]])
    assert tuple(eg.class_type(cls[ids["wide"]]).shape) == (2, 3)


def test_ill_typed_built_right_side_is_skipped():
    """The right side built from new nodes (relu(x): [3]) against a [2,3] class."""
    rule = parse_rules(BAD_RULES)[1]
    g, ids = broadcast_graph()
    eg = EGraph()
    cls = load(eg, g)
    m = Matcher([rule])
    keys = m.rule_keys[rule.name]
    fired, _ = apply_search_matches(eg, rule, [eg.search(m.programs[k]) for k in keys])
    eg.rebuild()
    assert fired == 1 and eg.type_mismatches == 1
    assert tuple(eg.class_type(cls[ids["wide"]]).shape) == (2, 3)


# verified on its example (x + 0 == x), but not type-preserving when y broadcasts x
ZERO_ADD = """
rule add-zero-difference
  lhs (add ?x (subtract ?y ?y))
  rhs ?x
  example ?x [3] ?y [3]
"""


def test_scheduler_and_optimizer_survive_and_report_it():
    rules = parse_rules(ZERO_ADD)
    g = TensorGraph()
    x, y, z = g.var("x", (3,)), g.var("y", (2, 3)), g.var("z", (3,))
    wide = g.add("add", (x, g.add("subtract", (y, y))))  # [2,3]
    narrow = g.add("add", (x, g.add("subtract", (z, z))))  # [3]
    g.set_output(g.add("tuple", (wide, narrow)))
    eg = EGraph()
    cls = load(eg, g)
    rep = TensatScheduler().run(eg, rules, Limits(node_limit=1000, iter_limit=3))
    assert rep.stop_reason == "saturated"
    assert rep.fired["add-zero-difference"] == 1  # the [3] one
    assert eg.type_mismatches >= 1
    assert eg.find(cls[narrow]) == eg.find(cls[x]) != eg.find(cls[wide])
    out, report = optimize_graph(g, {"search": "tensat", "cost": "analytic", "target": "llvm -mcpu=znver4",
                                     "iter_limit": 3}, rules=rules)
    assert report.info["type_mismatch"] >= 1
    out.validate()
    assert out[out.output].type == g[g.output].type


def test_shipped_rules_never_mismatch_on_a_zoo_model():
    """The default rules keep types on a real model's saturated e-graph."""
    pytest.importorskip("tvm")
    from relay_eqsat.passes import zoo
    from relay_eqsat.passes.relay.frontend import from_relay
    from relay_eqsat.rewrite import load_rules

    mod, params = zoo.get("squeezenet", small=True)
    eg = EGraph()
    eg.add_graph(from_relay(mod, params))
    TensatScheduler().run(eg, load_rules("default"), Limits(node_limit=3000, iter_limit=3, k_multi=2))
    assert eg.type_mismatches == 0
