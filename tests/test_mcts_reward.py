"""The merge-aware rollout reward (greedy-merge) and the MCTS that uses it."""
from __future__ import annotations

import random

import numpy as np
import pytest

from relay_eqsat.egraph import EGraph
from relay_eqsat.extract import (ExtractionProblem, InfeasibleError, NodeCosts, egraph_problem,
                                 get_extractor, greedy_merge, greedy_ocf, ilp_acyc, merge_cost, ocf_cost,
                                 solution_cost, validate_solution)
from relay_eqsat.extract.validity import reachable_classes
from relay_eqsat.extract.ocf import ocf_choice
from relay_eqsat.extract.merge_kernel import improve_shared
from relay_eqsat.graph import TensorGraph
from relay_eqsat.pipeline import OptimizeOptions
from relay_eqsat.rewrite import parse_rules
from relay_eqsat.search.base import Limits
from relay_eqsat.search.mcts import MCTS, EGraphEnvironment, MCTSOptions, MCTSScheduler
from relay_eqsat.search.tensat import TensatScheduler
from test_extract import brute_force_optimum, problem  # the exhaustive reference, the problem builder


def merge_problem() -> ExtractionProblem:
    """out = a + b with a = dense(x, w1), b = dense(x, w2), after a merge rule added
    a = split(dense(x, concat(w1, w2)))[0] and b = ...[1]. Each dense costs 10, the merged
    one 12, the split 1: merged, the program costs 14; each piece alone looks like 13 > 10."""
    return problem({
        "out": [(1, ["a", "b"])],
        "a": [(10, ["x", "w1"]), (0, ["s"])],
        "b": [(10, ["x", "w2"]), (0, ["s"])],
        "s": [(1, ["m"])],
        "m": [(12, ["x", "k"])],
        "k": [(0, ["w1", "w2"])],
        "x": [(0, [])], "w1": [(0, [])], "w2": [(0, [])],
    }, ["out"])


def test_ocf_misses_the_merge_greedy_merge_finds_it():
    p = merge_problem()
    assert greedy_ocf(p).cost == 21  # 10 + 10 + 1: both pieces kept apart
    s = greedy_merge(p)
    assert s.cost == 14 == brute_force_optimum(p) == ilp_acyc(p, time_limit=10).cost
    assert s.info["moves"] == 1
    assert {p.class_key[c]: p.node_class[n] for c, n in s.choice.items()}  # a valid choice
    validate_solution(p, s.choice)
    assert get_extractor("greedy-merge").solve(p).cost == 14


def test_a_merge_whose_pieces_are_reshaped_is_found_through_them():
    """A grouped convolution's merge: each piece is reshape(get(split(reshape(merged)))), so the
    classes a and b read the shared split only through their own piece classes g0 and g1, which
    no DAG class reads. The move on s has no DAG user; the move lifted through g0 and g1 (their
    chosen nodes read s) switches a and b together: 10 + 10 + 1 -> 12 + 1 + 1 + 1."""
    p = problem({
        "out": [(1, ["a", "b"])],
        "a": [(10, ["x", "w1"]), (0.5, ["g0"])],
        "b": [(10, ["x", "w2"]), (0.5, ["g1"])],
        "g0": [(0, ["s"])],
        "g1": [(0, ["s"])],
        "s": [(1, ["m"])],
        "m": [(12, ["x", "k"])],
        "k": [(0, ["w1", "w2"])],
        "x": [(0, [])], "w1": [(0, [])], "w2": [(0, [])],
    }, ["out"])
    assert greedy_ocf(p).cost == 21
    s = greedy_merge(p)
    assert s.cost == 15 == brute_force_optimum(p)
    validate_solution(p, s.choice)
    start, flat = p.children_csr()
    args = (np.ascontiguousarray(p.node_class, dtype=np.int32), start, flat,
            np.ascontiguousarray(p.node_cost, dtype=np.float64), np.zeros(len(p.node_cost), np.uint8))
    roots = [p.class_key.index("out")]
    choice = ocf_choice(*args, p.num_classes, roots, False)  # greedy_merge's start
    assert improve_shared(*args, choice.copy(), roots)[0] == 15
    no_lift = improve_shared(*args, choice, roots, max_lift=0)
    assert no_lift[0] == 21 and no_lift[1] == 0  # one level of readers only: the move is not seen


def test_a_better_pairing_replaces_the_first_one():
    """Three dense layers (10 each) on one input; merging a+b costs 13, b+c 12. The move on s_bc
    alone leaves a reading s_ab by itself (13 > 10): a goes back to its own dense."""
    p = problem({
        "out": [(1, ["a", "b", "c"])],
        "s_ab": [(13, ["x"])],  # before s_bc: the a+b pairing is found first
        "s_bc": [(12, ["x"])],
        "a": [(10, ["x"]), (0, ["s_ab"])],
        "b": [(10, ["x"]), (0, ["s_ab"]), (0, ["s_bc"])],
        "c": [(10, ["x"]), (0, ["s_bc"])],
        "x": [(0, [])],
    }, ["out"])
    assert greedy_ocf(p).cost == 31
    s = greedy_merge(p)
    assert s.cost == 23 == brute_force_optimum(p)  # a alone (10), b and c merged (2), out (1)


def test_group_moves_never_close_a_cycle():
    """Switching a and b to the nodes reading s would close the cycle s -> a -> s: the move is
    refused. (Switching b alone would pay, 12: a move switches all of a class's readers or none.)"""
    p = problem({
        "out": [(1, ["a", "b"])],
        "a": [(10, ["x"]), (0, ["s"])],
        "b": [(10, ["x"]), (0, ["s"])],
        "s": [(1, ["a"])],
        "x": [(0, [])],
    }, ["out"])
    s = greedy_merge(p)
    validate_solution(p, s.choice)
    assert s.cost == 21 == greedy_ocf(p).cost
    assert brute_force_optimum(p) == 12


def random_problem(seed: int, n_classes: int) -> ExtractionProblem:
    """A random e-graph with integer costs, some class cycles and nodes sharing child classes."""
    rng = random.Random(seed)
    while True:
        node_class, children, cost = [], [], []
        for c in range(n_classes):
            for _ in range(rng.randint(1, 3)):
                node_class.append(c)
                if c == n_classes - 1 or rng.random() < 0.2:
                    kids = ()
                else:
                    kids = tuple(rng.randrange(c + 1, n_classes) if rng.random() < 0.9 else rng.randrange(n_classes)
                                 for _ in range(rng.randint(1, 3)))
                children.append(kids)
                cost.append(rng.choice([0, 1, 2, 3, 5, 8, 13]))
        p = ExtractionProblem(node_class=node_class, node_children=children, node_cost=cost, roots=[0])
        try:
            greedy_ocf(p)
        except InfeasibleError:
            continue
        return p


@pytest.mark.parametrize("seed", range(12))
def test_between_the_optimum_and_ocf_on_random_egraphs(seed):
    p = random_problem(seed, 8 if seed < 6 else 40)
    s = greedy_merge(p)
    validate_solution(p, s.choice)
    assert s.cost == solution_cost(p, s.choice) >= 0
    exact = brute_force_optimum(p) if seed < 6 else ilp_acyc(p, time_limit=30)
    optimum = exact if seed < 6 else exact.cost
    if seed >= 6:
        assert exact.optimal  # integer costs: CP-SAT's optimum is exact
    assert optimum <= s.cost <= greedy_ocf(p).cost


def kernel_args(p: ExtractionProblem):
    start, flat = p.children_csr()
    return (np.ascontiguousarray(p.node_class, dtype=np.int32), start, flat,
            np.ascontiguousarray(p.node_cost, dtype=np.float64), np.zeros(p.num_nodes, np.uint8))


@pytest.mark.parametrize("seed", range(30))
def test_incremental_costs_match_the_whole_walk(seed):
    """The kernel keeps each trial's cost incrementally (reference counts, an undo log, a cycle check
    from the changed classes); ``check=True`` walks the whole DAG after every evaluation and raises
    on any difference. Random e-graphs with cycles, from the OCF start and from random acyclic ones."""
    p = random_problem(seed, 10 + 3 * seed)
    args = kernel_args(p)
    roots = [0]
    starts = [ocf_choice(*args, p.num_classes, roots, False)]
    rng = random.Random(seed)
    members = [[n for n in range(p.num_nodes) if p.node_class[n] == c] for c in range(p.num_classes)]
    while len(starts) < 6:
        choice = np.array([rng.choice(m) for m in members], np.int32)
        try:
            improve_shared(*args, choice.copy(), roots, max_passes=0)  # raises unless acyclic
        except ValueError:
            continue
        starts.append(choice)
    for start in starts:
        choice = start.copy()
        cost, kept, evaluations, passes = improve_shared(*args, choice, roots, check=True)
        assert evaluations >= 1 and passes >= 1
        reached = reachable_classes(p, {c: int(n) for c, n in enumerate(choice) if n >= 0}, roots)
        solution = {c: int(choice[c]) for c in reached}
        validate_solution(p, solution, roots)
        assert cost == pytest.approx(solution_cost(p, solution, roots))
        unchecked = start.copy()
        assert improve_shared(*args, unchecked, roots) == (cost, kept, evaluations, passes)
        assert (unchecked == choice).all()


def test_a_cycle_left_off_the_dag_does_not_stop_a_move():
    """Switching a and c to their nodes reading s cuts c off the DAG, where c's new node and y's
    close the cycle c -> y -> c: unreachable, so the move stands (the whole walk's verdict; the
    reference counts alone would keep c and y, and the cycle check hands it to the whole walk)."""
    p = problem({
        "out": [(1, ["a"])],
        "c": [(5, ["x"]), (1, ["s", "y"])],  # before a: c is switched while a still reads it
        "a": [(5, ["c"]), (1, ["s"])],
        "y": [(1, ["c"])],
        "s": [(1, ["x"])],
        "x": [(0, [])],
    }, ["out"])
    args = kernel_args(p)
    key = p.class_key.index
    node = {c: [n for n in range(p.num_nodes) if p.node_class[n] == key(c)] for c in p.class_key}
    choice = np.array([node[c][0] for c in p.class_key], np.int32)  # out -> a -> c -> x: 11
    cost, kept, _, _ = improve_shared(*args, choice, [key("out")], check=True)
    assert (cost, kept) == (3, 1)  # out -> a -> s -> x
    assert choice[key("a")] == node["a"][1] and choice[key("c")] == node["c"][1]


def test_kernel_checks_its_input():
    p = merge_problem()
    start, flat = p.children_csr()
    args = (np.asarray(p.node_class, np.int32), start, flat, np.asarray(p.node_cost, np.float64),
            np.zeros(p.num_nodes, np.uint8))
    wrong = np.full(p.num_classes, -1, np.int32)
    wrong[0] = 1  # node 1 lives in class "a"
    with pytest.raises(ValueError, match="not one of its nodes"):
        improve_shared(*args, wrong, [0])
    with pytest.raises(ValueError, match="acyclic DAG"):
        improve_shared(*args, np.full(p.num_classes, -1, np.int32), [0])
    with pytest.raises(ValueError, match="out of range"):
        improve_shared(*args, np.full(p.num_classes, -1, np.int32), [99])


def test_infeasible_root_is_an_error():
    p = merge_problem()
    p.blacklisted[:] = True
    with pytest.raises(InfeasibleError):
        greedy_merge(p)


# ------------------------------------------------------------------ on e-graphs, and in MCTS

MERGE_RULES = parse_rules('''
rule dense-merge
  lhs   (nn.dense ?x ?w1 :* ?a) ; (nn.dense ?x ?w2 :* ?a)
  let   ?y = (nn.dense ?x (concatenate ?w1 ?w2 :axis 0) :* ?a)
  let   ?s = (split ?y :indices [(dim ?w1 0)] :axis (- (ndim ?x) 1))
  rhs   (tuple_get_item ?s :index 0) ; (tuple_get_item ?s :index 1)
rule relu-over-split
  lhs   (nn.relu (tuple_get_item (split ?x :* ?sa) :index ?k))
  rhs   (tuple_get_item (split (nn.relu ?x) :* ?sa) :index ?k)
rule add-comm
  lhs   (add ?x ?y)
  rhs   (add ?y ?x)
rule mul-comm
  lhs   (multiply ?x ?y)
  rhs   (multiply ?y ?x)
''', "merge-test")


def merge_graph():
    """relu(dense(x, w1)) + relu(dense(x, w2)), scaled: the dense layers can merge, then the relus."""
    g = TensorGraph()
    x = g.var("x", (4, 64))
    w1 = g.const(np.ones((64, 64), "float32"), "w1")
    w2 = g.const(np.full((64, 64), 2, "float32"), "w2")
    two = g.const(np.full((4, 64), 2, "float32"), "two")
    a = g.add("nn.relu", (g.add("nn.dense", (x, w1)),))
    b = g.add("nn.relu", (g.add("nn.dense", (x, w2)),))
    g.set_output(g.add("multiply", (g.add("add", (a, b)), two)))
    eg = EGraph()
    return eg, eg.add_graph(g)


def kernel_cost(op, attrs, input_types, out_type, const):
    """Costs where a merged operator pays: a kernel launch costs 1, plus 1 per 64 output columns."""
    if const or op in ("var", "constant"):
        return 0.0
    if op == "tuple_get_item":
        return 0.0
    if op == "split":
        return 0.1
    return 1.0 + out_type.shape[-1] / 64


def test_egraph_merge_cost_sees_the_merge_ocf_cost_does_not():
    eg, root = merge_graph()
    cache = NodeCosts(kernel_cost)
    before = ocf_cost(eg, cache, root)
    assert merge_cost(eg, cache, root) == before  # nothing to merge yet
    TensatScheduler().run(eg, MERGE_RULES[:2], Limits(node_limit=200, k_multi=2))
    exact = get_extractor("ilp-acyc").solve(egraph_problem(eg, kernel_cost, [root]), time_limit=10)
    assert exact.optimal and exact.cost < before - 1.0  # merged dense and relu: two kernels fewer
    assert ocf_cost(eg, cache, root) == before  # blind: each piece alone looks dearer
    assert merge_cost(eg, cache, root) == pytest.approx(exact.cost)
    assert merge_cost(eg, cache, root) == greedy_merge(egraph_problem(eg, cache, [root])).cost
    assert merge_cost(eg.copy(), cache, root) == merge_cost(eg, cache, root)


def run_mcts(reward, seed=0, budget=24, node_limit=80):
    eg, root = merge_graph()
    opts = MCTSOptions(budget=budget, seed=seed, reward=reward, progress=False)
    rep = MCTSScheduler(opts, root=root).run(eg, MERGE_RULES, Limits(node_limit=node_limit), kernel_cost)
    return eg, root, rep


def test_mcts_rollouts_earn_merges_with_the_merge_reward():
    eg, root, rep = run_mcts("greedy-merge")
    assert rep.info["history"][0]["value"] > 1.0  # the rollouts below the first rule found the merges
    assert rep.info["initial_cost"] == 12.0 and rep.info["final_cost"] == pytest.approx(10.1)
    assert {"dense-merge", "relu-over-split"} <= set(rep.info["applied"])
    _, _, blind = run_mcts("greedy-ocf")
    assert all(h["value"] == 0 for h in blind.info["history"])  # no rollout ever earned anything
    assert blind.info["final_cost"] == blind.info["initial_cost"]


@pytest.mark.parametrize("reward", ["greedy-merge", "greedy-ocf"])
def test_same_seed_same_search(reward):
    runs = [run_mcts(reward, seed=5, budget=16, node_limit=150) for _ in range(2)]
    assert runs[0][2].info["applied"] == runs[1][2].info["applied"]
    first, second = ([dict(h, time=0) for h in run[2].info["history"]] for run in runs)
    assert first == second
    assert runs[0][0].fingerprint() == runs[1][0].fingerprint()


def test_an_action_is_credited_with_its_own_gain():
    """The value of the merge at the root counts the merge's own gain, not only what follows it."""
    eg, root = merge_graph()
    env = EGraphEnvironment(MERGE_RULES, root, kernel_cost, Limits(node_limit=200), extractor="greedy-merge")
    mcts = MCTS(env, MCTSOptions(budget=32, seed=0, progress=False))
    tree = mcts._node(eg.copy(), None, None)
    best = mcts.search(tree, 32, float("inf"))
    merge = tree.children[0]  # dense-merge
    assert merge.cost < tree.cost
    assert merge.value / merge.visits >= tree.cost - merge.cost
    assert best is merge


def test_reward_option_default_and_ocf_still_available():
    assert MCTSOptions().reward == "greedy-merge"
    sched = MCTSScheduler.from_options(OptimizeOptions(search="mcts"), root=0)
    assert sched.options.reward == "greedy-merge"
    sched = MCTSScheduler.from_options(OptimizeOptions(search="mcts", extractor="greedy-ocf"), root=0)
    assert sched.options.reward == "greedy-ocf"
    eg, root = merge_graph()
    assert EGraphEnvironment(MERGE_RULES, root, kernel_cost).extractor.name == "greedy-merge"
    env = EGraphEnvironment(MERGE_RULES, root, kernel_cost, extractor="greedy-ocf")
    assert env.cost(eg) == ocf_cost(eg, NodeCosts(kernel_cost), root)
