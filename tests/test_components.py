"""Acyclic extraction problems taken apart (extract/components.py) and solved part by part."""
from __future__ import annotations

import pytest

from relay_eqsat.extract import get_extractor, greedy_ocf, ilp_acyc, maxsat, validate_solution
from relay_eqsat.extract.components import (PartResult, Split, _shape, isomorphism, needed_classes, pack,
                                            solve_parts, split, topological_classes)
from relay_eqsat.extract.presolve import reduce_problem

from test_extract import brute_force_optimum, problem, random_problem  # the exhaustive reference, builders


def two_blocks(y_nodes=((4.0, ["i"]),)):
    """Two independent choices under one root: r needs a and b; a is computed directly or through m
    (which also needs x), b directly or through n (which needs y); x and y are needed only by the
    second alternatives. ``y_nodes``: y's nodes (by default unlike x's)."""
    return problem({
        "r": [(1.0, ["a", "b"])],
        "a": [(5.0, ["s"]), (1.0, ["m"])],
        "m": [(1.0, ["s", "x"])],
        "b": [(5.0, ["t"]), (1.0, ["n"])],
        "n": [(1.0, ["t", "y"])],
        "s": [(1.0, ["i"])],
        "t": [(1.0, ["i"])],
        "x": [(2.0, ["i"]), (9.0, [])],
        "y": list(y_nodes),
        "i": [(0.0, [])],
    }, ["r"])


def test_needed_classes_follow_every_alternative():
    p = two_blocks()
    red = reduce_problem(p)
    order = topological_classes(red)
    assert order is not None and order.index(p.class_key.index("i")) < order.index(0)
    names = {p.class_key[c] for c in needed_classes(red, order)}
    # r's one node needs a and b; both of a's alternatives reach s, both of b's reach t; s and t need i.
    # x and y serve only one alternative each (x has two nodes of its own): not needed
    assert names == {"r", "a", "b", "s", "t", "i"}


def test_split_fixes_single_node_needed_classes_and_separates_independent_choices():
    p = two_blocks()
    red = reduce_problem(p)
    sp = split(red)
    fixed = {p.class_key[int(p.node_class[n])] for n in sp.fixed}
    assert fixed == {"r", "s", "t", "i"}
    parts = [{p.class_key[c] for c in part.classes} for part in sp.parts]
    assert sorted(map(sorted, parts)) == [["a", "m", "x"], ["b", "n", "y"]]
    for part in sp.parts:
        # a part's root is its needed class with a choice; clauses for needed children are left out
        assert [p.class_key[c] for c in part.roots] in (["a"], ["b"])
        assert all(d in part.class_nodes for n in part.nodes for d in part.child_sets[n])
    for name in ("ilp-acyc", "maxsat"):
        s = get_extractor(name).extract(p)
        assert s.optimal and s.cost == brute_force_optimum(p) and s.info["parts"] == 2
        # the bound is the fixed nodes' cost plus each part's proven optimum
        assert s.bound == pytest.approx(s.cost, rel=1e-6)


def test_a_cyclic_class_graph_is_not_split():
    # b -> a survives presolve: its other node is dearer, so it does not dominate
    p = problem({"r": [(1.0, ["a"])], "a": [(1.0, ["b"]), (3.0, [])], "b": [(1.0, ["a"]), (2.5, [])]}, ["r"])
    red = reduce_problem(p)
    assert topological_classes(red) is None and split(red) is None
    for name in ("ilp-acyc", "maxsat"):
        s = get_extractor(name).extract(p)
        assert s.optimal and s.cost == brute_force_optimum(p) and "parts" not in s.info


@pytest.mark.parametrize("seed", range(30))
def test_parts_give_the_optimum_of_the_whole(seed):
    # acyclic random e-graphs (children only among later classes), small enough for the exhaustive
    # reference, and larger ones checked against the monolithic solve
    small = seed < 15
    p = random_problem(200 + seed, n_classes=7 if small else 120, max_nodes=3, max_children=3, back_rate=0.0,
                       blacklist_rate=0.1 if seed % 4 == 0 else 0.0)
    red = reduce_problem(p)
    assert split(red) is not None
    best = brute_force_optimum(p) if small else ilp_acyc(p, decompose=False, threads=2).cost
    for extract in (lambda: ilp_acyc(p, threads=2), lambda: maxsat(p)):
        s = extract()
        validate_solution(p, s.choice)
        assert s.optimal and s.cost == pytest.approx(best, rel=1e-9, abs=1e-12), (s.status, s.cost, best)
        assert s.bound <= s.cost * (1 + 1e-12) and s.bound >= best * (1 - 1e-5) - 1e-12
        assert "parts" in s.info


def test_pack_merges_small_parts_only():
    p = random_problem(300, n_classes=200, max_nodes=3, back_rate=0.0)
    sp = split(reduce_problem(p))
    packed = pack(sp.parts, max_nodes=8)
    assert sorted(c for part in packed for c in part.classes) == sorted(c for part in sp.parts for c in part.classes)
    for part in packed:
        small = [q for q in sp.parts if len(q.nodes) < 8 and set(q.classes) <= set(part.classes)]
        assert len(part.nodes) <= 8 or not small  # a large part is never packed with others
        assert set(part.roots) == {r for q in sp.parts if set(q.classes) <= set(part.classes) for r in q.roots}
    assert [len(q.nodes) for q in packed] == sorted(len(q.nodes) for q in packed)


def test_a_part_without_a_result_keeps_the_warm_start_and_its_bound_stays_valid():
    p = two_blocks()
    red = reduce_problem(p)
    sp = split(red)
    warm = greedy_ocf(p)
    warm_nodes = set(warm.choice.values())
    calls = []

    def nothing(part, hint, limit):
        calls.append((part.roots, hint, limit))
        return PartResult(None, False, 0.5, "TIME_LIMIT")

    out = solve_parts(p.node_cost, sp, warm_nodes, nothing, deadline=None)
    assert not out.optimal and out.info["parts_kept_warm"] == 2 and out.info["parts_solved"] == 0
    assert out.chosen == warm_nodes | set(sp.fixed)
    # each part's hint is the warm start's choice there, a feasible choice of the part
    assert all(hint and hint <= warm_nodes for _, hint, _ in calls)
    assert out.bound == pytest.approx(float(p.node_cost[sp.fixed].sum()) + 2 * 0.5)
    # a deadline already passed: no solver call at all
    calls.clear()
    out = solve_parts(p.node_cost, sp, warm_nodes, nothing, deadline=0.0)
    assert not calls and out.chosen == warm_nodes | set(sp.fixed)
    # the extractors then return the warm start, flagged, never worse than greedy
    for name in ("ilp-acyc", "maxsat"):
        s = get_extractor(name).extract(p, time_limit=1e-9)
        assert not s.optimal and s.status.startswith("fallback greedy-merge") and s.info["parts"] == 2
        validate_solution(p, s.choice)


def test_empty_split_when_every_needed_class_has_one_node():
    p = problem({"r": [(1.0, ["a"])], "a": [(2.0, ["b"])], "b": [(3.0, [])]}, ["r"])
    sp = split(reduce_problem(p))
    assert sp == Split(fixed=[0, 1, 2], parts=[])
    s = ilp_acyc(p)
    assert s.optimal and s.cost == 6.0 and s.bound == 6.0


def twin_blocks(y_cost: float = 2.0):
    """``two_blocks`` with its second block a copy of the first (y like x), so their parts are isomorphic."""
    return two_blocks(y_nodes=((y_cost, ["i"]), (9.0, [])))


def test_an_isomorphic_part_takes_its_twins_result(monkeypatch):
    import relay_eqsat.extract.components as components

    monkeypatch.setattr(components, "PACK_NODES", 1)  # no packing: these parts are tiny
    p = twin_blocks()
    sp = split(reduce_problem(p))
    a, b = sp.parts
    sa, sb = _shape(a, p.node_cost), _shape(b, p.node_cost)
    assert sa[0] == sb[0]
    g = isomorphism(a, sa, b, sb, p.node_cost)
    assert g is not None and sorted(g) == sorted(a.nodes) and sorted(g.values()) == sorted(b.nodes)
    assert all(p.node_cost[m] == p.node_cost[n] for m, n in g.items())
    assert {p.class_key[int(p.node_class[g[n]])] for n in a.nodes} == {"b", "n", "y"}
    calls = []

    def counting(part, hint, limit):
        calls.append(part)
        return PartResult(set(hint), True, float(p.node_cost[sorted(hint)].sum()), "OPTIMAL")

    warm = set(greedy_ocf(p).choice.values())
    out = solve_parts(p.node_cost, sp, warm, counting, deadline=None)
    assert len(calls) == 1 and out.info["parts_reused"] == 1 and out.optimal
    for name in ("ilp-acyc", "maxsat"):
        s = get_extractor(name).extract(p)
        assert s.optimal and s.cost == brute_force_optimum(p) and s.info["parts_reused"] == 1
        validate_solution(p, s.choice)
    # a cost that differs breaks the twin: both parts are solved
    q = twin_blocks(y_cost=2.5)
    sq = split(reduce_problem(q))
    qa, qb = sq.parts
    assert isomorphism(qa, _shape(qa, q.node_cost), qb, _shape(qb, q.node_cost), q.node_cost) is None
    s = ilp_acyc(q)
    assert s.optimal and s.cost == brute_force_optimum(q) and s.info["parts_reused"] == 0
    # a hash collision (every hash 0, as if they all collided): the full check still finds the costs differ
    collide = [(0, {c: 0 for c in part.classes}, {n: 0 for n in part.nodes}, _shape(part, q.node_cost)[3])
               for part in (qa, qb)]
    assert isomorphism(qa, collide[0], qb, collide[1], q.node_cost) is None
    # ... and with equal costs it maps only what the check accepts
    ca = [(0, {c: 0 for c in part.classes}, {n: 0 for n in part.nodes}, _shape(part, p.node_cost)[3])
          for part in (a, b)]
    g = isomorphism(a, ca[0], b, ca[1], p.node_cost)
    assert g is None or all(p.node_cost[m] == p.node_cost[n] for m, n in g.items())
