"""Non-overlapping application of multi-pattern rules (``Runner.step(disjoint=True)``, MCTS's actions).

Every pairing of parallel operators on one input is a match of a merge rule; applied all at
once they fill a small node limit with alternatives of which a program can use one each (NasRNN's
gates: 308 matches of ``dense-merge``). Where a rule's matches would not all fit under the limit,
applied non-overlapping, a step merges disjoint pairs and the next steps merge the merged: MCTS,
whose actions apply rules that way, reaches programs TENSAT's all-match iterations cannot under
the same limit.
"""
import numpy as np
import pytest

from relay_eqsat.egraph import EGraph
from relay_eqsat.extract import build_graph, egraph_problem, get_extractor
from relay_eqsat.graph import TensorGraph
from relay_eqsat.rewrite import Matcher, apply_matches, apply_search_matches
from relay_eqsat.search.base import Limits, SearchReport
from relay_eqsat.search.mcts import MCTSOptions, MCTSScheduler
from relay_eqsat.search.runner import Runner
from relay_eqsat.search.tensat import TensatScheduler
from test_mcts_reward import MERGE_RULES, kernel_cost

DENSE_MERGE, RELU_OVER_SPLIT = MERGE_RULES[0], MERGE_RULES[1]


def gates(n: int) -> TensorGraph:
    """``sum_i relu(dense(x, w_i))``: n parallel dense layers on one input (an RNN cell's gates)."""
    g = TensorGraph()
    x = g.var("x", (4, 64))
    rng = np.random.default_rng(0)
    outs = [g.add("nn.relu", (g.add("nn.dense", (x, g.const(rng.standard_normal((64, 64)).astype("float32"),
                                                                  f"w{i}"))),)) for i in range(n)]
    acc = outs[0]
    for o in outs[1:]:
        acc = g.add("add", (acc, o))
    g.set_output(acc)
    return g


def cheapest(eg, root):
    problem = egraph_problem(eg, kernel_cost, [root])
    sol = get_extractor("ilp-acyc").solve(problem, time_limit=20)
    assert sol.optimal
    return sol.cost, build_graph(eg, problem, sol.choice)


def step(eg, disjoint: bool, room: int = 100_000):
    limits = Limits(node_limit=eg.num_nodes + room)
    return Runner(limits).step(eg, Matcher([DENSE_MERGE]), [DENSE_MERGE], SearchReport(), disjoint)


def fresh(n: int = 4) -> EGraph:
    eg = EGraph()
    eg.add_graph(gates(n))
    return eg


def test_a_disjoint_step_merges_each_operator_once_where_all_would_not_fit():
    # four gates: 12 ordered pairs, 5 new e-nodes each; room for 30
    assert step(fresh(), False, room=30).stop == "node_limit"  # all pairings, until the limit
    dis = fresh()
    s = step(dis, True, room=30)
    assert s.fired == {"dense-merge": 2} and s.stop is None  # (w0, w1) and (w2, w3)
    # the next step takes the next non-overlapping set: what the first one skipped is applied later
    again = step(dis, True, room=30 - (dis.num_nodes - fresh().num_nodes))
    assert again.changed and again.fired["dense-merge"] >= 1


def test_every_match_is_applied_where_all_fit():
    full, dis = fresh(), fresh()
    assert step(full, False).fired == step(dis, True).fired == {"dense-merge": 12}
    assert full.num_nodes == dis.num_nodes


def test_single_pattern_rules_are_not_limited():
    g = gates(3)
    counts = []
    for disjoint in (False, True):
        eg = EGraph()
        eg.add_graph(g)
        Runner(Limits(node_limit=100_000)).step(eg, Matcher([DENSE_MERGE]), [DENSE_MERGE], SearchReport(), False)
        s = Runner(Limits(node_limit=100_000)).step(eg, Matcher([RELU_OVER_SPLIT]), [RELU_OVER_SPLIT],
                                                    SearchReport(), disjoint)
        counts.append(s.fired["relu-over-split"])
    assert counts[0] == counts[1] > 1


@pytest.mark.parametrize("flat", [False, True])
def test_both_application_paths_skip_overlaps_alike(flat):
    """``apply_matches`` (raw environments) and ``apply_search_matches`` (flat joins, in Cython)."""
    eg = fresh()
    matcher = Matcher([DENSE_MERGE])
    found = matcher.search(eg, set(matcher.rule_keys[DENSE_MERGE.name]))
    if flat:
        assert DENSE_MERGE.flat_layout is not None
        fired, filtered = apply_search_matches(eg, DENSE_MERGE, [found[k] for k in matcher.rule_keys[DENSE_MERGE.name]],
                                               disjoint=True)
        assert filtered == 0
    else:
        fired = apply_matches(eg, DENSE_MERGE, matcher.matches(DENSE_MERGE, found), disjoint=True)
    assert fired == 2


def test_mcts_merges_of_merges_fit_the_node_limit_where_tensat_fills_it():
    """Six gates under 150 e-nodes: TENSAT's first iteration applies 30 pairings and stops at the
    limit with three pairs at best; MCTS's disjoint actions merge pairs, then pairs of pairs."""
    g = gates(6)
    costs = {}
    for k in (1, 2, 3):
        eg = EGraph()
        root = eg.add_graph(g)
        rep = TensatScheduler().run(eg, MERGE_RULES[:2], Limits(node_limit=150, k_multi=k))
        assert rep.stop_reason == "node_limit"
        costs[f"tensat k={k}"] = cheapest(eg, root)[0]
    for disjoint in (False, True):
        eg = EGraph()
        root = eg.add_graph(g)
        opts = MCTSOptions(budget=24, seed=0, progress=False, disjoint=disjoint)
        MCTSScheduler(opts, root=root).run(eg, MERGE_RULES[:2], Limits(node_limit=150), kernel_cost)
        cost, out = cheapest(eg, root)
        costs[f"mcts disjoint={disjoint}"] = cost
        x = np.random.default_rng(1).standard_normal((4, 64)).astype("float32")
        np.testing.assert_allclose(out.evaluate({"x": x}), g.evaluate({"x": x}), rtol=1e-5, atol=1e-4)
    tensat = min(v for k, v in costs.items() if k.startswith("tensat"))
    assert costs["mcts disjoint=False"] == tensat  # the paper's actions: no better than TENSAT here
    assert costs["mcts disjoint=True"] < tensat - 3.0, costs  # at least three kernels fewer


def test_disjoint_steps_reach_the_same_optimum_on_a_small_model():
    """Three gates, room for every match of the first iterations: both find the cheapest program
    (the three gates in one dense and one relu)."""
    class DisjointTensat(TensatScheduler):
        disjoint = True

    found = []
    for scheduler in (TensatScheduler(), DisjointTensat()):
        eg = EGraph()
        root = eg.add_graph(gates(3))
        scheduler.run(eg, MERGE_RULES[:2], Limits(node_limit=2_000, k_multi=6, iter_limit=6))
        found.append(cheapest(eg, root)[0])
    assert found[0] == found[1] == pytest.approx(14.1)


def test_mcts_defaults_to_disjoint_actions():
    assert MCTSOptions().disjoint is True
    assert MCTSScheduler().disjoint is True
    assert TensatScheduler().disjoint is False


def test_rollouts_apply_every_match_the_tree_without_overlap():
    """A rollout only scores a state: its steps apply every match (a merge that fills the limit ends it
    cheaply); the tree's actions, which the real e-graph repeats, apply without overlap."""
    from relay_eqsat.search.mcts import EGraphEnvironment

    eg = fresh()
    env = EGraphEnvironment([DENSE_MERGE], 0, kernel_cost, Limits(node_limit=eg.num_nodes + 30), disjoint=True)
    tree, rollout = eg.copy(), eg.copy()
    assert env.apply(tree, 0) and env.rollout_apply(rollout, 0)
    assert tree.num_nodes == eg.num_nodes + 10  # two merges, five e-nodes each
    assert rollout.num_nodes >= eg.num_nodes + 30  # pairings up to the limit
