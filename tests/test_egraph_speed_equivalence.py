"""The fast paths of e-graph growth give the same results as the plain ones.

The C hashcons and per-op node index, the Cython join of multi-pattern
matches and the compiled application plans are checked against plain
references: a Python join, a dict model of the hashcons, brute-force
e-matching and the general (Python) application path. Structure only, no
timing.
"""
from __future__ import annotations

import gc
import random

import numpy as np
import pytest

from relay_eqsat.egraph import EGraph, join_flat
from relay_eqsat.graph import TensorGraph
from relay_eqsat.rewrite import Matcher, flat_join, load_rules
from relay_eqsat.search import Limits, TensatScheduler

from test_egraph import pattern, var


def reference_join(matches, slots, width, limit=None):
    """The join as plain Python (nested loops over the patterns, first ones kept)."""
    k = len(matches)
    partial = []
    for m in matches[0]:
        vals = [None] * width
        vals[0] = m[0]
        for j, sl in enumerate(slots[0]):
            vals[sl] = m[1 + j]
        partial.append(vals)
    bound = set(slots[0])
    for i in range(1, k):
        shared = [(j, sl) for j, sl in enumerate(slots[i]) if sl in bound]
        nxt = []
        for vals in partial:
            for m in matches[i]:
                if any(vals[sl] != m[1 + j] for j, sl in shared) or m[0] in vals[:i]:
                    continue
                v2 = list(vals)
                v2[i] = m[0]
                for j, sl in enumerate(slots[i]):
                    v2[sl] = m[1 + j]
                nxt.append(v2)
                if limit is not None and len(nxt) == limit:
                    break
            if limit is not None and len(nxt) == limit:
                break
        partial = nxt
        bound |= set(slots[i])
    return [tuple(v) for v in partial]


@pytest.mark.parametrize("seed", range(8))
def test_join_flat_equals_the_python_join(seed):
    rng = random.Random(seed)
    k = rng.choice([2, 3])
    nvars = rng.randint(2, 4)
    width = k + nvars
    # each pattern binds some variables (positions k..width-1); pattern 0 and a later one share some
    slots = [rng.sample(range(k, width), rng.randint(1, nvars)) for _ in range(k)]
    slots[0] += [p for p in range(k, width) if not any(p in s for s in slots)]  # every variable bound
    slots = [tuple(s) for s in slots]
    matches = [[tuple([rng.randrange(6)] + [rng.randrange(3) for _ in s]) for _ in range(rng.randint(0, 12))]
               for s in slots]
    matches = [list(dict.fromkeys(ms)) for ms in matches]  # search results are deduplicated
    full = reference_join(matches, slots, width)
    assert join_flat(matches, slots, width) == full
    for limit in (1, 3, 7):
        assert join_flat(matches, slots, width, limit) == reference_join(matches, slots, width, limit)


def test_flat_join_of_a_rule_equals_the_python_join():
    g = TensorGraph()
    x = g.var("x", [4, 8])
    rng = np.random.default_rng(0)
    outs = [g.add("nn.dense", [x, g.const(rng.standard_normal((6, 8)).astype("float32"))], {"out_dtype": ""})
            for _ in range(5)]
    s = outs[0]
    for y in outs[1:]:
        s = g.add("add", [s, y], {})
    g.set_output(s)
    (rule,) = [r for r in load_rules() if r.name == "dense-merge"]
    eg = EGraph()
    eg.add_graph(g)
    matcher = Matcher([rule])
    found = [eg.search(matcher.programs[key]) for key in matcher.rule_keys[rule.name]]
    width = len(rule.lhs) + len(rule.flat_names)
    full = flat_join(rule, found)
    assert len(full) == 5 * 4
    assert full == reference_join(found, rule.flat_layout[2], width)
    assert flat_join(rule, found, limit=7) == full[:7]


def test_hashcons_agrees_with_a_dict_model():
    """Random adds and merges (enough nodes to resize the table several times): after each
    rebuild every alive node is found under its canonical key, re-adding it changes nothing,
    and a copy keeps its own table."""
    rng = random.Random(0)
    eg = EGraph()
    leaves = [var(eg, f"v{i}") for i in range(40)]
    classes = list(leaves)
    for step in range(6):
        for _ in range(800):
            op = rng.choice(["add", "multiply", "subtract"])
            a, b = rng.choice(classes), rng.choice(classes)
            classes.append(eg.add(op, {}, [a, b]))
        for _ in range(60):
            a, b = rng.choice(classes), rng.choice(classes)
            if eg.class_type(a) == eg.class_type(b):
                eg.union(a, b)
        eg.rebuild()
        model = {}
        for n in eg.nodes():
            op, attrs, children = eg.node(n)
            key = (op, attrs, children)
            assert key not in model, "two alive nodes with one canonical key"
            model[key] = eg.node_class(n)
        before = eg.num_nodes
        for (op, attrs, children), c in model.items():
            assert eg.lookup(op, attrs, children) == c
            assert eg.add(op, attrs, children) == c
        assert eg.num_nodes == before
        assert eg.lookup("add", {}, [leaves[0], leaves[0]]) in (None, *model.values())
    cp = eg.copy()
    n0 = eg.num_nodes
    fresh = cp.add("maximum", {}, [leaves[0], leaves[1]])
    assert cp.num_nodes == n0 + 1 and eg.num_nodes == n0
    assert eg.lookup("maximum", {}, [leaves[0], leaves[1]]) is None
    assert cp.lookup("maximum", {}, [leaves[0], leaves[1]]) == fresh
    assert cp.fingerprint() != eg.fingerprint()


def test_search_equals_brute_force_matching():
    """``search`` (per-op node index) finds what a scan of every node finds, in node order."""
    rng = random.Random(1)
    eg = EGraph()
    classes = [var(eg, f"v{i}") for i in range(10)]
    for _ in range(300):
        op = rng.choice(["add", "multiply"])
        classes.append(eg.add(op, {}, [rng.choice(classes), rng.choice(classes)]))
    for _ in range(20):
        eg.union(rng.choice(classes), rng.choice(classes))
    eg.rebuild()
    for n in eg.nodes()[::7]:
        eg.blacklist(n)
    prog = pattern("(add (multiply ?x ?y) ?z)")
    found = eg.search(prog)
    expect = []
    for n in range(eg.total_nodes):
        if not eg.node_alive(n) or eg.is_blacklisted(n) or eg.node_op(n) != "add":
            continue
        left, z = eg.node_children(n)
        for m in eg.class_nodes(left):
            if eg.node_op(m) == "multiply" and not eg.is_blacklisted(m):
                x, y = eg.node_children(m)
                bound = {"?x": x, "?y": y, "?z": z}
                t = (eg.node_class(n), *[bound[v] for v in prog.vars])
                if t not in expect:
                    expect.append(t)
    assert found == expect and len(found) > 10
    assert eg.search(prog, 3) == expect[:3]


@pytest.mark.parametrize("enabled", [True, False])
def test_a_run_restores_the_garbage_collector(enabled):
    from test_tensat import mlp_graph

    eg = EGraph()
    eg.add_graph(mlp_graph(layers=1, width=2))
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        TensatScheduler().run(eg, load_rules(), Limits(node_limit=500, iter_limit=2))
        assert gc.isenabled() == enabled
    finally:
        gc.enable() if was else gc.disable()


def test_compiled_plans_store_the_signatures_adding_computes():
    """A compiled plan remembers each step's signature; every node it added has the
    signature of its op, attributes and children's types, as ``add_ids`` computes it."""
    from test_tensat import mlp_graph

    from relay_eqsat.egraph import signature_id

    eg = EGraph()
    eg.add_graph(mlp_graph(layers=2, width=3))
    before = eg.num_nodes
    TensatScheduler().run(eg, load_rules(), Limits(node_limit=3000, iter_limit=4, k_multi=2))
    assert eg.num_nodes > before
    arr = eg.arrays()
    for j in range(len(arr.node_id)):
        n = int(arr.node_id[j])
        kids = tuple(eg.class_type_id(c) for c in eg.node_children(n))
        assert arr.node_sig[j] == signature_id(eg.node_op_id(n), eg.node_attrs_id(n), kids)


def test_infer_type_memo_agrees_with_ops():
    from relay_eqsat import ops
    from relay_eqsat.egraph import infer_type_memo
    from relay_eqsat.graph import Attrs, TensorType

    x, w = TensorType((1, 3, 8, 8)), TensorType((4, 3, 3, 3))
    a = ops.normalize_attrs("nn.conv2d", Attrs(padding=(1, 1, 1, 1)), [x, w])
    for _ in range(2):  # computed, then memoized
        assert infer_type_memo("nn.conv2d", a, (x, w)) == ops.infer_type("nn.conv2d", a, [x, w])
        with pytest.raises(ops.ShapeError):
            infer_type_memo("nn.conv2d", a, (x, TensorType((4, 5, 3, 3))))


def test_lazily_compiled_patterns_search_like_compiled_ones():
    """``Matcher.search`` compiles a pattern on first use and skips patterns whose root
    operator the e-graph lacks: the same matches as compiling and searching every one."""
    from test_tensat import mlp_graph

    from relay_eqsat.egraph import Program

    eg = EGraph()
    eg.add_graph(mlp_graph(layers=2, width=3))
    TensatScheduler().run(eg, load_rules(), Limits(node_limit=1500, iter_limit=2))
    matcher = Matcher(load_rules())
    found = matcher.search(eg)
    assert set(found) == set(matcher.programs) and any(found.values()) and not all(found.values())
    for text in matcher.programs:
        assert found[text] == eg.search(Program(matcher.programs[text].tree)), text
