"""The Cython e-graph core: congruence, analysis, copies, e-matching, cycles, extraction interface."""
from __future__ import annotations

import numpy as np
import pytest

from relay_eqsat import ops
from relay_eqsat.egraph import EGraph, Program
from relay_eqsat.extract import build_graph, egraph_problem
from relay_eqsat.graph import TensorGraph, TensorType
from relay_eqsat.rewrite import Matcher, apply_matches, load_rules, parse_pattern

F = TensorType((2, 3))


def var(eg, name, shape=(2, 3)):
    return eg.add("var", {"name": name, "type": TensorType(shape)})


def const(eg, name, shape=(2, 3)):
    return eg.add("constant", {"name": name, "type": TensorType(shape)})


def pattern(text):
    from relay_eqsat.rewrite import read_one

    return Program(parse_pattern(read_one(text), {}))


def min_cost_choice(problem, cost=None):
    """A trivial extractor for tests: bottom-up minimal tree cost, never a blacklisted node."""
    cost = problem.node_cost if cost is None else cost
    best = {}
    pick = {}
    changed = True
    while changed:
        changed = False
        for n in range(problem.num_nodes):
            if problem.blacklisted[n]:
                continue
            kids = problem.node_children[n]
            if any(k not in best for k in kids):
                continue
            c = cost[n] + sum(best[k] for k in kids)
            cls = int(problem.node_class[n])
            if cls not in best or c < best[cls] - 1e-12:
                best[cls] = c
                pick[cls] = n
                changed = True
    return pick


def unit_cost(op, attrs, input_types, out_type, const):
    return 0.0 if op in ("var", "constant") else 1.0


def test_congruence_closure():
    eg = EGraph()
    a, b = var(eg, "a"), var(eg, "b")
    fa = eg.add("nn.relu", {}, [a])
    fb = eg.add("nn.relu", {}, [b])
    gfa = eg.add("exp", {}, [fa])
    gfb = eg.add("exp", {}, [fb])
    assert eg.find(fa) != eg.find(fb)
    assert eg.num_classes == 6
    eg.union(a, b)
    assert not eg.clean
    eg.rebuild()
    assert eg.find(a) == eg.find(b)
    assert eg.find(fa) == eg.find(fb)
    assert eg.find(gfa) == eg.find(gfb)
    assert eg.num_classes == 3
    # congruent duplicates are removed: one relu node, one exp node survive
    assert eg.num_nodes == 4
    assert len(eg.class_nodes(fa)) == 1
    # hashcons sees the canonical form
    assert eg.lookup("nn.relu", {}, [b]) == eg.find(fa)
    assert eg.add("nn.relu", {}, [a]) == eg.find(fa)


def test_analysis_types_and_constants():
    eg = EGraph()
    x = var(eg, "x")
    w = const(eg, "w")
    k = const(eg, "k")
    wk = eg.add("add", {}, [w, k])
    xw = eg.add("add", {}, [x, w])
    assert eg.class_type(wk) == F
    assert eg.class_const(wk) and eg.class_const(w)
    assert not eg.class_const(xw) and not eg.class_const(x)
    # a class becomes constant once any of its nodes is computable from constants
    y = eg.add("nn.relu", {}, [xw])
    assert not eg.class_const(y)
    eg.union(xw, wk)
    eg.rebuild()
    assert eg.class_const(xw)
    assert eg.class_const(y), "constness propagates to parents on merge"
    # merging classes of different types is a bug
    z = var(eg, "z", (3, 2))
    with pytest.raises(ValueError):
        eg.union(x, z)
    # opaque flag
    o = eg.add("opaque", {"key": 0, "type": F, "name": "op"}, [x])
    assert eg.class_opaque(o) and not eg.class_opaque(x)
    # shape errors propagate from ops.infer_type
    with pytest.raises(ops.ShapeError):
        eg.add("add", {}, [x, z])


def test_copy_is_independent():
    eg = EGraph()
    a, b = var(eg, "a"), var(eg, "b")
    fa = eg.add("nn.relu", {}, [a])
    fb = eg.add("nn.relu", {}, [b])
    cp = eg.copy()
    assert cp.fingerprint() == eg.fingerprint()
    cp.union(a, b)
    cp.rebuild()
    cp.add("exp", {}, [fa])
    assert cp.find(fa) == cp.find(fb)
    assert eg.find(fa) != eg.find(fb)
    assert eg.num_nodes == 4 and cp.num_nodes == 4
    assert eg.lookup("exp", {}, [fa]) is None
    assert cp.fingerprint() != eg.fingerprint()
    # and the original keeps working
    eg.add("exp", {}, [fb])
    assert eg.num_nodes == 5


def test_iteration_order_and_counts():
    eg = EGraph()
    a = var(eg, "a")
    eg.iteration = 3
    r = eg.add("nn.relu", {}, [a])
    (n,) = eg.class_nodes(r)
    assert eg.node_iteration(n) == 3 and eg.node_iteration(eg.class_nodes(a)[0]) == 0
    assert eg.node_op(n) == "nn.relu" and eg.node_children(n) == (eg.find(a),)
    assert sorted(eg.classes()) == sorted({eg.find(a), eg.find(r)})
    assert eg.nodes() == [0, 1]


def test_node_origin_names_what_added_it_and_survives_copy():
    from relay_eqsat.egraph import origin_id, origin_name

    eg = EGraph()
    a = var(eg, "a")
    eg.origin = origin_id("some-rule")
    r = eg.add("nn.relu", {}, [a])
    again = eg.add("nn.relu", {}, [a])  # already there: still the first adder's
    eg.origin = origin_id("other-rule")
    e = eg.add("exp", {}, [a])
    eg.origin = -1
    t = eg.add("tanh", {}, [a])
    (na,), (nr,), (ne,), (nt,) = (eg.class_nodes(c) for c in (a, r, e, t))
    assert eg.find(again) == eg.find(r)
    assert [eg.node_origin(n) for n in (na, nr, ne, nt)] == [None, "some-rule", "other-rule", None]
    assert origin_name(origin_id("some-rule")) == "some-rule" and origin_name(-1) is None
    cp = eg.copy()
    assert [cp.node_origin(n) for n in (na, nr, ne, nt)] == [None, "some-rule", "other-rule", None]
    assert cp.origin == -1
    for k in range(600):  # growing the node arrays keeps the origins
        cp.add("nn.relu", {}, [var(cp, f"v{k}")])
    assert cp.node_origin(nr) == "some-rule" and cp.node_origin(ne) == "other-rule"
    with pytest.raises(IndexError):
        eg.node_origin(10_000)


def test_ematching_with_variables_and_attributes():
    eg = EGraph()
    x = var(eg, "x", (1, 2, 5, 5))
    w1 = const(eg, "w1", (3, 2, 3, 3))
    w2 = const(eg, "w2", (3, 2, 3, 3))
    attrs = dict(strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1,
                 data_layout="NCHW", kernel_layout="OIHW", out_dtype="")
    c1 = eg.add("nn.conv2d", attrs, [x, w1])
    c2 = eg.add("nn.conv2d", attrs, [x, w2])
    c3 = eg.add("nn.conv2d", dict(attrs, padding=(0, 0, 0, 0)), [x, w1])
    s = eg.add("add", {}, [c1, c1])
    # variables
    ms = eg.search(pattern("(nn.conv2d ?x ?w)"))
    assert sorted(m[0] for m in ms) == sorted([c1, c2, c3])
    # attribute literal
    ms = eg.search(pattern("(nn.conv2d ?x ?w :padding [1,1,1,1])"))
    assert sorted(m[0] for m in ms) == sorted([c1, c2])
    # attribute variable binds the value
    from relay_eqsat.egraph import value_of, attrs_of
    ms = eg.search(pattern("(nn.conv2d ?x ?w :padding ?p)"))
    assert {value_of(m[3]) for m in ms} == {(1, 1, 1, 1), (0, 0, 0, 0)}
    # whole attributes
    ms = eg.search(pattern("(nn.conv2d ?x ?w :* ?a)"))
    assert {attrs_of(m[3])["padding"] for m in ms} == {(1, 1, 1, 1), (0, 0, 0, 0)}
    # repeated variable: both children must be the same class
    assert [m[0] for m in eg.search(pattern("(add ?a ?a)"))] == [s]
    assert eg.search(pattern("(add ?a ?b)")) == [(s, c1, c1)]
    # nested
    ms = eg.search(pattern("(add (nn.conv2d ?x ?w :padding [1,1,1,1]) ?y)"))
    assert ms == [(s, c1, x, w1)]
    assert eg.search_class(pattern("(nn.conv2d ?x ?w)"), c2) == [(c2, x, w2)]
    # matching sees merges
    eg.union(c2, c1)
    eg.rebuild()
    ms = eg.search(pattern("(add (nn.conv2d ?x ?w :padding [1,1,1,1]) ?y)"))
    assert sorted(m[2:4] for m in ms) == sorted([(x, w1), (x, w2)])


def test_multi_pattern_compatibility_only_pairs_sharing_x():
    eg = EGraph()
    x, y = var(eg, "x", (2, 8)), var(eg, "y", (2, 8))
    ws = [const(eg, f"w{i}", (4, 8)) for i in range(3)]
    d0 = eg.add("nn.dense", {"out_dtype": ""}, [x, ws[0]])
    d1 = eg.add("nn.dense", {"out_dtype": ""}, [x, ws[1]])
    d2 = eg.add("nn.dense", {"out_dtype": ""}, [y, ws[2]])
    (rule,) = [r for r in load_rules() if r.name == "dense-merge"]
    m = Matcher([rule])
    envs = m.matches(rule, m.search(eg))
    pairs = {(e[("root", 0)], e[("root", 1)]) for e in envs}
    assert pairs == {(d0, d1), (d1, d0)}  # never with d2 (other input), never a dense with itself
    assert all(e["?x"] == x for e in envs)


def _figure3_egraph():
    """TENSAT Figure 3: two matmuls sharing an input, the second using the first's output."""
    g = TensorGraph()
    x = g.var("x", [4, 4])
    w = g.const(np.random.default_rng(0).standard_normal((4, 4)).astype("float32"), "w")
    y1 = g.add("nn.dense", [x, w], {"out_dtype": ""})
    y2 = g.add("nn.dense", [x, y1], {"out_dtype": ""})
    g.set_output(y2)
    eg = EGraph()
    root = eg.add_graph(g)
    return g, eg, root


def test_cycle_postprocessing_blacklists_newest_node():
    g, eg, root = _figure3_egraph()
    (rule,) = [r for r in load_rules() if r.name == "dense-merge"]
    m = Matcher([rule])
    eg.iteration = 1
    envs = m.matches(rule, m.search(eg))
    assert apply_matches(eg, rule, envs, cycle_check=None) > 0
    eg.rebuild()
    assert eg.has_cycle()
    newest_before = eg.total_nodes
    black = eg.resolve_cycles()
    assert black and not eg.has_cycle()
    assert all(eg.node_iteration(n) == 1 for n in black), "only nodes added by the rewrite are filtered"
    assert set(black) == set(eg.blacklisted_nodes())
    problem = egraph_problem(eg, unit_cost, [root])
    reported = {problem.node_key[i] for i in np.flatnonzero(problem.blacklisted)}
    assert reported == set(black)
    assert newest_before == eg.total_nodes
    # extraction respecting the blacklist is acyclic and computes the same function
    choice = min_cost_choice(problem)
    out = build_graph(eg, problem, choice)
    inputs = g.random_inputs(0)
    np.testing.assert_allclose(out.evaluate(inputs), g.evaluate(inputs), rtol=1e-4, atol=1e-5)


def test_cycle_prefilter_and_vanilla_check_reject_figure3():
    for mode in ("efficient", "vanilla"):
        g, eg, root = _figure3_egraph()
        (rule,) = [r for r in load_rules() if r.name == "dense-merge"]
        m = Matcher([rule])
        envs = m.matches(rule, m.search(eg))
        check = eg.descendants_map().reaches if mode == "efficient" else eg.reachable
        fired = apply_matches(eg, rule, envs, cycle_check=check)
        eg.rebuild()
        assert fired == 0, mode
        assert not eg.has_cycle()


def test_descendants_map():
    eg = EGraph()
    a = var(eg, "a")
    b = eg.add("nn.relu", {}, [a])
    c = eg.add("exp", {}, [b])
    d = var(eg, "d")
    dm = eg.descendants_map()
    assert dm.reaches(c, a) and dm.reaches(c, b) and dm.reaches(b, a) and dm.reaches(a, a)
    assert not dm.reaches(a, c) and not dm.reaches(d, a) and not dm.reaches(c, d)
    assert eg.reachable(c, a) and not eg.reachable(a, c)


def test_to_problem_and_build_graph_round_trip():
    g = TensorGraph()
    x = g.var("x", [2, 3])
    w = g.const(np.arange(6, dtype="float32").reshape(2, 3), "w")
    s = g.add("add", [x, w])
    r = g.add("nn.relu", [s])
    out = g.add("multiply", [r, s])
    g.set_output(out)
    eg = EGraph()
    root = eg.add_graph(g)
    seen = []

    def cost(op, attrs, input_types, out_type, const):
        seen.append((op, const))
        return 1.0
    p = egraph_problem(eg, cost, [root])
    assert p.num_classes == eg.num_classes and p.num_nodes == eg.num_nodes
    assert ("constant", True) in seen and ("var", False) in seen
    assert p.class_data[p.roots[0]] == g[out].type
    choice = min_cost_choice(p)
    h = build_graph(eg, p, choice, p.roots[0])
    h.validate()
    assert len(h.reachable()) == len(g.reachable())  # shared class emitted once
    inputs = g.random_inputs(1)
    np.testing.assert_allclose(h.evaluate(inputs), g.evaluate(inputs))
    # a cyclic choice is rejected
    eg2 = EGraph()
    a = var(eg2, "a")
    ra = eg2.add("nn.relu", {}, [a])
    rra = eg2.add("nn.relu", {}, [ra])
    eg2.union(a, rra)
    eg2.rebuild()
    p2 = egraph_problem(eg2, unit_cost, [rra])
    relu_of = {int(p2.node_class[n]): n for n in range(p2.num_nodes) if p2.node_label[n] == "nn.relu"}
    with pytest.raises(ValueError):
        build_graph(eg2, p2, relu_of, p2.roots[0])


def test_add_graph_keeps_payloads_and_renames_collisions():
    g1 = TensorGraph()
    x = g1.var("x", [2])
    c = g1.const(np.ones(2, "float32"), "c")
    o = g1.add_opaque("payload-1", [x], TensorType((2,)))
    g1.set_output(g1.add("add", [g1.add("add", [x, c]), o]))
    g2 = TensorGraph()
    x2 = g2.var("x", [2])
    c2 = g2.const(np.full(2, 5, "float32"), "c")
    g2.set_output(g2.add("add", [x2, c2]))
    eg = EGraph()
    r1 = eg.add_graph(g1)
    r2 = eg.add_graph(g2)
    assert eg.find(r1) != eg.find(r2)
    assert len(eg.constants) == 2 and list(eg.opaque.values()) == ["payload-1"]
    p = egraph_problem(eg, unit_cost, [r2])
    h = build_graph(eg, p, min_cost_choice(p))
    np.testing.assert_allclose(h.evaluate({"x": np.zeros(2, "float32")}), [5, 5])
    p = egraph_problem(eg, unit_cost, [r1])
    h = build_graph(eg, p, min_cost_choice(p))
    assert list(h.opaque.values()) == ["payload-1"]


def test_copy_speed_is_array_copy():
    import time

    eg = EGraph()
    cur = var(eg, "x")
    for i in range(20000):
        cur = eg.add("nn.relu" if i % 2 else "exp", {}, [cur])
    t = time.perf_counter()
    for _ in range(20):
        eg.copy()
    per_copy = (time.perf_counter() - t) / 20
    assert per_copy < 0.05, per_copy
