"""TENSAT's scheduler: stop reasons, k_multi, cycle filtering end to end."""
from __future__ import annotations

import numpy as np
import pytest

from relay_eqsat.egraph import EGraph
from relay_eqsat.extract import build_graph, egraph_problem
from relay_eqsat.graph import TensorGraph
from relay_eqsat.rewrite import load_rules
from relay_eqsat.search import Limits, SearchReport, TensatScheduler

from test_egraph import min_cost_choice


def rules_named(*names):
    by = {r.name: r for r in load_rules()}
    return [by[n] for n in names]


def mlp_graph(layers=3, width=3, seed=0):
    """Layers of `width` dense ops sharing an input, summed, through relu; the
    last dense of a layer takes the first one's output as its weight (TENSAT
    Figure 3's cycle-prone shape)."""
    rng = np.random.default_rng(seed)
    g = TensorGraph()
    x = g.var("x", [8, 8])
    for _ in range(layers):
        ys = []
        for j in range(width):
            if j == width - 1 and j > 0:
                w = ys[0]
            else:
                w = g.const(rng.standard_normal((8, 8)).astype("float32") * 0.3)
            ys.append(g.add("nn.dense", [x, w], {"out_dtype": ""}))
        s = ys[0]
        for y in ys[1:]:
            s = g.add("add", [s, y])
        x = g.add("nn.relu", [s])
    g.set_output(x)
    return g


def extract_and_check(g, eg, root):
    def cost(op, attrs, ins, out, const):
        return 0.0 if op in ("var", "constant") else (0.5 if const else 1.0)
    p = egraph_problem(eg, cost, [root])
    choice = min_cost_choice(p)
    assert not any(p.blacklisted[n] for n in choice.values())
    h = build_graph(eg, p, choice)  # raises on a cycle
    h.validate()
    inputs = g.random_inputs(3)
    np.testing.assert_allclose(h.evaluate(inputs), g.evaluate(inputs), rtol=1e-4, atol=1e-4)
    return h


def test_saturates_and_reports():
    g = TensorGraph()
    a, b = g.var("a", [2, 3]), g.var("b", [2, 3])
    g.set_output(g.add("add", [a, b]))
    eg = EGraph()
    eg.add_graph(g)
    rep = TensatScheduler().run(eg, rules_named("add-comm"), Limits(iter_limit=10))
    assert isinstance(rep, SearchReport)
    assert rep.stop_reason == "saturated"
    assert rep.fired == {"add-comm": 1}
    assert rep.nodes_before == 3 and rep.nodes_after == 4
    assert rep.iterations == 2 and len(rep.sizes) == 2
    assert rep.total_time >= rep.search_time


def test_node_iteration_and_time_limits():
    g = mlp_graph()
    rules = load_rules()
    eg = EGraph()
    eg.add_graph(g)
    rep = TensatScheduler().run(eg, rules, Limits(node_limit=150, iter_limit=50, k_multi=3))
    assert rep.stop_reason == "node_limit"
    assert eg.num_nodes >= 150

    eg = EGraph()
    eg.add_graph(g)
    rep = TensatScheduler().run(eg, rules, Limits(iter_limit=1, k_multi=1))
    assert rep.stop_reason == "iter_limit" and rep.iterations == 1

    eg = EGraph()
    eg.add_graph(g)
    rep = TensatScheduler().run(eg, rules, Limits(time_limit=1e-9))
    assert rep.stop_reason == "time_limit"


def test_k_multi_is_respected():
    for k in (0, 1, 2):
        g = mlp_graph(layers=2)
        eg = EGraph()
        eg.add_graph(g)
        rules = rules_named("dense-merge", "add-comm", "add-assoc")
        rep = TensatScheduler().run(eg, rules, Limits(iter_limit=4, k_multi=k, node_limit=100_000))
        concat_iters = {eg.node_iteration(n) for n in eg.nodes() if eg.node_op(n) == "concatenate"}
        if k == 0:
            assert rep.fired["dense-merge"] == 0 and not concat_iters
        else:
            assert rep.fired["dense-merge"] > 0
            assert concat_iters and max(concat_iters) <= k


@pytest.mark.parametrize("mode", ["efficient", "vanilla"])
def test_no_cycle_in_extraction_after_filtering(mode):
    g = mlp_graph()
    eg = EGraph()
    root = eg.add_graph(g)
    rep = TensatScheduler().run(eg, load_rules(), Limits(iter_limit=4, k_multi=2, node_limit=4000,
                                                         cycle_filter=mode))
    assert rep.fired["dense-merge"] > 0
    assert not eg.has_cycle()
    assert rep.blacklisted == len(eg.blacklisted_nodes()) or rep.blacklisted >= len(eg.blacklisted_nodes())
    extract_and_check(g, eg, root)


def test_without_filtering_cycles_remain():
    g = mlp_graph(layers=2)
    eg = EGraph()
    eg.add_graph(g)
    TensatScheduler().run(eg, rules_named("dense-merge"), Limits(iter_limit=1, cycle_filter="none"))
    assert eg.has_cycle()
    assert not eg.blacklisted_nodes()


def test_multi_pattern_rules_are_searched_once_per_canonical_pattern():
    sched = TensatScheduler()
    rules = load_rules()
    m = sched.matcher(rules)
    n_patterns = sum(len(r.lhs) for r in rules)
    assert len(m.programs) < n_patterns  # e.g. both dense-merge patterns share one program


def test_limits_validation():
    with pytest.raises(ValueError):
        Limits(cycle_filter="sometimes")
    with pytest.raises(ValueError):
        Limits(node_limit=0)


@pytest.mark.parametrize("model", ["squeezenet-small", "mlp"])
def test_planned_application_matches_the_general_path(model):
    """apply_search_matches (flat joins, memoized plans, Cython loop) applies
    exactly what apply_matches does on Matcher.matches, rule by rule (the MLP: dense merges,
    the multi-pattern rules)."""
    from relay_eqsat.egraph import EGraph
    from relay_eqsat.rewrite import Matcher, apply_matches, apply_search_matches, load_rules

    if model == "mlp":
        graph = mlp_graph(layers=2, width=3)
    else:
        from relay_eqsat.passes import zoo
        from relay_eqsat.passes.relay.frontend import from_relay

        graph = from_relay(*zoo.get("squeezenet", small=True))
    rules = load_rules("default")
    matcher = Matcher(rules)
    a, b = EGraph(), EGraph()
    a.add_graph(graph)
    b.add_graph(graph)
    for _ in range(2):
        for r in rules:
            if r.flat_layout is None:
                continue
            keys = matcher.rule_keys[r.name]
            fa = apply_matches(a, r, matcher.matches(r, matcher.search(a, keys)), a.descendants_map().reaches)
            fb, _ = apply_search_matches(b, r, [b.search(matcher.programs[k]) for k in keys], b.descendants_map())
            assert fa == fb, r.name
            a.rebuild()
            b.rebuild()
            assert a.fingerprint() == b.fingerprint(), r.name
    assert a.num_nodes > len(graph)


def test_match_limit_bounds_multi_pattern_joins():
    """A multi-source rule over one input with many dense ops joins to the
    product of its matches; match_limit keeps the first ones (same order), and
    a search under it still finds merges."""
    from relay_eqsat.rewrite import Matcher, flat_join

    g = mlp_graph(layers=1, width=8)
    (rule,) = rules_named("dense-merge")
    eg = EGraph()
    eg.add_graph(g)
    matcher = Matcher([rule])
    keys = matcher.rule_keys[rule.name]
    found = [eg.search(matcher.programs[k]) for k in keys]
    full = flat_join(rule, found)
    assert len(full) > 20
    assert flat_join(rule, found, limit=20) == full[:20]
    assert flat_join(rule, found, limit=len(full) + 5) == full
    rep = TensatScheduler().run(eg, [rule], Limits(node_limit=5000, iter_limit=2, k_multi=2, match_limit=10))
    assert rep.fired[rule.name] > 0
    with pytest.raises(ValueError, match="match_limit"):
        Limits(match_limit=0)
