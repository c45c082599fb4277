"""Reshapes moved below element-wise ops (the ``reshape-below-*`` rules).

An ONNX MatMul of a ``[1, M, K]`` input reaches the e-graph as
``reshape(dense(reshape(x)))`` (batch-matmul-const-to-dense), and TVM ends a
dense's kernel at the reshape: a transformer FFN's bias + GELU ran as a kernel
of its own. With the reshape moved below the GELU it meets the reshape into
the next dense and both go, so the epilogue joins the dense. The rules'
``example`` lines are verified by tests/test_rules.py; here: the core turns a
BERT-style FFN into dense -> GELU -> dense with no reshape between, same
numbers, and leaves a constant that broadcasts differently on the two shapes
alone.
"""
from __future__ import annotations

import numpy as np

from relay_eqsat.cost import CostModel
from relay_eqsat.egraph import EGraph
from relay_eqsat.graph import TensorGraph
from relay_eqsat.pipeline import optimize_graph
from relay_eqsat.rewrite import Matcher, apply_matches, load_rules

RULES = [r for r in load_rules() if r.name.startswith("reshape-below")]


def _ffn(m=16, k=8, n=32, seed=0):
    """x [1, m, k] -> a linear layer as batch-matmul-const-to-dense writes it (reshape -> dense ->
    reshape) -> + bias -> exact GELU -> the same back to k."""
    rng = np.random.default_rng(seed)
    g = TensorGraph()

    def const(shape, name):
        return g.const(rng.standard_normal(shape).astype("float32"), name)

    def scalar(v, name):
        return g.const(np.array(v, "float32"), name)

    def linear(x, w, rows, units):
        flat = g.add("reshape", [x], {"newshape": (rows, g.nodes[x].type.shape[-1])})
        return g.add("reshape", [g.add("nn.dense", [flat, w], {"out_dtype": ""})], {"newshape": (1, rows, units)})
    x = g.var("x", [1, m, k])
    h = g.add("add", [linear(x, const((n, k), "w1"), m, n), const((n,), "b1")], {})
    t = g.add("erf", [g.add("divide", [h, scalar(1.4142135, "sqrt2")], {})], {})
    t = g.add("multiply", [g.add("multiply", [h, g.add("add", [t, scalar(1.0, "one")], {})], {}),
                           scalar(0.5, "half")], {})
    g.set_output(linear(t, const((k, n), "w2"), m, k))
    return g


def _consumers(g: TensorGraph) -> dict[int, list[int]]:
    users: dict[int, list[int]] = {}
    for i in g.reachable():
        for j in g.nodes[i].inputs:
            users.setdefault(j, []).append(i)
    return users


def test_the_gelu_joins_the_dense():
    g = _ffn()
    out, report = optimize_graph(g, dict(search="tensat", node_limit=5000, fast_math=False),
                                 cost_model=CostModel("analytic"))
    ops = [out.nodes[i].op for i in out.reachable()]
    assert ops.count("nn.dense") == 2 and ops.count("reshape") == 2  # into the first, out of the second
    users = _consumers(out)
    first = min(i for i in out.reachable() if out.nodes[i].op == "nn.dense")
    # the first dense feeds the bias add directly, and no reshape sits between the two denses
    assert [out.nodes[u].op for u in users[first]] == ["add"]
    second = max(i for i in out.reachable() if out.nodes[i].op == "nn.dense")
    assert [out.nodes[j].op for j in out.nodes[second].inputs][0] == "multiply"
    assert any(name.startswith("reshape-below") for name in report.rules_in_result)
    x = np.random.default_rng(1).standard_normal((1, 16, 8)).astype("float32")
    np.testing.assert_allclose(out.evaluate({"x": x})[0], g.evaluate({"x": x})[0], rtol=1e-4, atol=1e-4)


def _matches(x_shape, newshape, c_shape):
    """Applications of the rules on add(reshape(x, newshape), constant of c_shape)."""
    g = TensorGraph()
    r = g.add("reshape", [g.var("x", x_shape)], {"newshape": newshape})
    g.set_output(g.add("add", [r, g.const(np.ones(c_shape, "float32"), "c")], {}))
    eg = EGraph()
    eg.add_graph(g)
    m = Matcher(RULES)
    found = m.search(eg)
    return sum(apply_matches(eg, rule, m.matches(rule, found)) for rule in RULES)


def test_a_constant_moves_only_where_it_broadcasts_alike():
    assert _matches([1, 4, 6], [4, 6], [6]) == 1       # a bias along the last axis, kept
    assert _matches([2, 6], [3, 4], []) == 1           # a scalar
    assert _matches([2, 6], [3, 4], [1]) == 1          # a one-element vector
    assert _matches([2, 6], [3, 4], [4]) == 0          # the last axis changes: it would broadcast over 6
    assert _matches([2, 6], [3, 4], [3, 4]) == 0       # a full-shape constant: not moved


def test_the_rules_finish_and_stay_out_of_the_search():
    """They run on the extracted program (relay_eqsat.finishing), never in the search's e-graph,
    where they would copy every variant of its algebra; the reshapes they meet run in both."""
    from relay_eqsat.finishing import finishing_rules, search_rules

    rules = load_rules()
    assert RULES and all(r.phase == "finish" for r in RULES)
    searched = {r.name for r in search_rules(rules)}
    finishing = {r.name for r in finishing_rules(rules)}
    assert not searched & {r.name for r in RULES}
    assert {"reshape-reshape", "reshape-identity"} <= searched & finishing
    assert {r.name for r in RULES} <= finishing


def test_finishing_keeps_a_program_it_cannot_make_cheaper():
    """A reshape whose element-wise consumer is not followed by a reshape back: moving it saves
    nothing, and finish returns the very program it was given."""
    from relay_eqsat.extract import get_extractor
    from relay_eqsat.finishing import finish, finishing_rules

    g = TensorGraph()
    r = g.add("reshape", [g.var("x", [2, 6])], {"newshape": (3, 4)})
    g.set_output(g.add("tanh", [r], {}))
    cost = CostModel("analytic")
    done = finish(g, finishing_rules(load_rules()), cost.node_cost, get_extractor("ilp-acyc"), cost.graph_cost, 10)
    assert done.graph is g and not done.changed
