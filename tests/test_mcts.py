"""MCTS rewrite scheduling (Hartmann et al., PACT 2024) on real e-graphs."""
import numpy as np
import pytest

from relay_eqsat.egraph import EGraph
from relay_eqsat.extract import build_graph, egraph_problem, get_extractor
from relay_eqsat.graph import TensorGraph
from relay_eqsat.rewrite import parse_rules
from relay_eqsat.search.base import Limits
from relay_eqsat.search.mcts import MCTS, EGraphEnvironment, MCTSOptions, MCTSScheduler
from relay_eqsat.search.tensat import TensatScheduler

# The paper's running example (a*2)/2, on tensors: strength reduction x*2 -> x+x
# is the tempting rule; re-association plus x*(y/y) -> x reaches `a`.
TOY_RULES = parse_rules('''
rule strength-reduce
  lhs (multiply ?x (constant :name "two"))
  rhs (add ?x ?x)
rule mul-comm
  lhs (multiply ?x ?y)
  rhs (multiply ?y ?x)
rule mul-div-assoc
  lhs (divide (multiply ?x ?y) ?z)
  rhs (multiply ?x (divide ?y ?z))
rule mul-self-div
  lhs (multiply ?x (divide ?y ?y))
  rhs ?x
''', "toy")


def size_cost(op, attrs, input_types, out_type, const):
    return 1.0


def toy_egraph():
    g = TensorGraph()
    a = g.var("a", (4,))
    two = g.const(np.full(4, 2, "float32"), "two")
    g.set_output(g.add("divide", (g.add("multiply", (a, two)), two)))
    eg = EGraph()
    return eg, eg.add_graph(g)


def extracted(eg, root):
    problem = egraph_problem(eg, size_cost, [root])
    sol = get_extractor("greedy-ocf").solve(problem)
    return sol.cost, build_graph(eg, problem, sol.choice)


def run_mcts(seed=0, budget=16, node_limit=10, patience=MCTSOptions.patience):
    eg, root = toy_egraph()
    opts = MCTSOptions(budget=budget, seed=seed, progress=False, patience=patience)
    rep = MCTSScheduler(opts, root=root).run(eg, TOY_RULES, Limits(node_limit=node_limit), size_cost)
    return eg, root, rep


def test_fixed_order_misses_a_under_the_node_limit():
    eg, root = toy_egraph()
    rep = TensatScheduler().run(eg, TOY_RULES, Limits(node_limit=10))
    assert rep.stop_reason == "node_limit"
    assert extracted(eg, root)[0] == 4.0  # still (a*2)/2 or an equally large form


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_mcts_finds_a(seed):
    eg, root, rep = run_mcts(seed)
    cost, graph = extracted(eg, root)
    assert cost == 1.0
    out = graph[graph.output]
    assert out.op == "var" and out.attrs["name"] == "a"
    assert eg.num_nodes <= 10
    assert rep.info["final_cost"] == 1.0 and rep.info["initial_cost"] == 4.0
    # the rewrite that enables the cancellation is chosen before the cancellation
    applied = rep.info["applied"]
    assert applied.index("mul-div-assoc") < applied.index("mul-self-div")


def test_same_seed_same_result():
    runs = [run_mcts(seed=7, budget=8) for _ in range(2)]
    assert runs[0][2].info["applied"] == runs[1][2].info["applied"]
    assert runs[0][0].fingerprint() == runs[1][0].fingerprint()


def test_blacklist_prunes_rules_whose_pattern_is_absent():
    eg, root = toy_egraph()
    env = EGraphEnvironment(TOY_RULES, root, size_cost, Limits(node_limit=10))
    names = [r.name for r in TOY_RULES]
    mcts = MCTS(env, MCTSOptions(budget=8, seed=0, progress=False))
    node = mcts._node(eg.copy(), None, None)
    # nothing of the form x*(y/y) exists yet
    assert node.blacklist == {names.index("mul-self-div")}
    mcts.search(node, 8, float("inf"))
    assert names.index("mul-self-div") not in node.children
    # after re-association the cancellation becomes applicable in that child
    child = node.children[names.index("mul-div-assoc")]
    assert names.index("mul-self-div") not in child.blacklist


def test_saturated_children_are_never_revisited():
    eg, root = toy_egraph()
    env = EGraphEnvironment(TOY_RULES, root, size_cost, Limits(node_limit=100))
    mcts = MCTS(env, MCTSOptions(budget=64, seed=1, progress=False))
    node = mcts._node(eg.copy(), None, None)
    mcts.search(node, 64, float("inf"))

    def walk(n):
        for c in n.children.values():
            if c.saturated:
                assert c.visits == 0 and not c.children
            walk(c)
    walk(node)


def test_budget_one_is_sequential_saturation():
    """Budget 1: no look-ahead, one rule at a time; with room to saturate it
    reaches the same program as TENSAT's saturation."""
    eg, root, rep = run_mcts(seed=0, budget=1, node_limit=1000, patience=None)
    assert rep.stop_reason == "saturated"
    assert all(h["visits"] == 1 for h in rep.info["history"])
    # one tree iteration per applied rule, plus the last one that found nothing left to change
    assert rep.info["mcts_iterations"] == len(rep.info["history"]) + 1
    ref, ref_root = toy_egraph()
    TensatScheduler().run(ref, TOY_RULES, Limits(node_limit=1000))
    assert extracted(eg, root)[0] == extracted(ref, ref_root)[0] == 1.0


SUM_RULES = TOY_RULES + parse_rules('''
rule add-comm
  lhs (add ?x ?y)
  rhs (add ?y ?x)
rule add-assoc
  lhs (add (add ?x ?y) ?z)
  rhs (add ?x (add ?y ?z))
''', "sum")


def sum_egraph():
    """(a*2)/2 + b + c + d: the toy's cancellation, then a sum whose re-orderings cost the same."""
    g = TensorGraph()
    a = g.var("a", (4,))
    two = g.const(np.full(4, 2, "float32"), "two")
    out = g.add("divide", (g.add("multiply", (a, two)), two))
    for name in "bcd":
        out = g.add("add", (out, g.var(name, (4,))))
    g.set_output(out)
    eg = EGraph()
    return eg, eg.add_graph(g)


@pytest.mark.parametrize("seed", [0, 1])
def test_stops_after_patience_rules_with_nothing_cheaper_below_them(seed):
    """Once the cancellation is found, the sum's re-orderings go on for many rules and none pays: with
    patience 3 the search stops three applied rules after the last one below which a rollout found a
    gain, on the program of the run without patience, having made the same choices up to there."""
    runs = {}
    for patience in (None, 3):
        eg, root = sum_egraph()
        opts = MCTSOptions(budget=8, seed=seed, progress=False, patience=patience)
        rep = MCTSScheduler(opts, root=root).run(eg, SUM_RULES, Limits(node_limit=300), size_cost)
        runs[patience] = eg, root, rep
    (full_eg, full_root, full), (eg, root, rep) = runs[None], runs[3]
    assert full.stop_reason in ("saturated", "node_limit") and rep.stop_reason == "no_gain"
    hist, full_hist = rep.info["history"], full.info["history"]
    assert len(hist) < len(full_hist)
    assert [h["best"] for h in hist[-3:]] == [0.0] * 3 and hist[-4]["best"] > 0
    assert rep.info["applied"] == full.info["applied"][:len(hist)]
    assert all(h["best"] == 0.0 for h in full_hist[len(hist) - 3:])  # nothing was left to find
    assert extracted(eg, root)[0] == extracted(full_eg, full_root)[0] == 7.0  # ((a + b) + c) + d: seven nodes


def test_mcts_result_is_numerically_equal():
    eg, root, _ = run_mcts(seed=3)
    _, graph = extracted(eg, root)
    a = np.random.default_rng(0).standard_normal(4).astype("float32")
    g0 = TensorGraph()
    x = g0.var("a", (4,))
    two = g0.const(np.full(4, 2, "float32"), "two")
    g0.set_output(g0.add("divide", (g0.add("multiply", (x, two)), two)))
    np.testing.assert_allclose(graph.evaluate({"a": a}), g0.evaluate({"a": a}), rtol=1e-6)


def test_needs_a_cost():
    eg, root = toy_egraph()
    with pytest.raises(ValueError, match="cost"):
        MCTSScheduler(root=root).run(eg, TOY_RULES, Limits(node_limit=10))


def test_extractor_extracts_a_tensor_graph_from_an_egraph():
    eg, root, _ = run_mcts(seed=0)
    graph, cost = get_extractor("ilp-acyc").extract(eg, root, size_cost, time_limit=10)
    assert cost == 1.0 and graph[graph.output].op == "var"


class _TrapEnv:
    """A synthetic search problem: from cost 10, rule 0 grabs 2 at once and ends the search (the node
    limit); rule 1 gains 0.5 and opens rule 2, which gains 3.5 more; rules 3-9 change the state and gain
    nothing. Any two steps reach the limit. Most rollouts after rule 1 pick a useless rule, so rule 1's
    average return is below rule 0's while the best sequence starts with it."""

    actions = list(range(10))

    def clone(self, state):
        return list(state)

    def apply(self, state, action):
        if self.at_limit(state) or action in state:
            return False
        state.append(action)
        return True

    def applicable(self, state, action):
        return action not in state

    def at_limit(self, state):
        return 0 in state or len(state) >= 2

    def size(self, state):
        return len(state)

    def cost(self, state):
        c = 10.0
        if 0 in state:
            c -= 2.0
        if 1 in state:
            c -= 0.5
            if 2 in state:
                c -= 3.5
        return c

    def fingerprint(self, state):
        return tuple(state)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_first_rule_is_chosen_by_the_best_return_found_below_it(seed):
    """Max backup: the root's child is picked by the best return found in its subtree, not by the
    average, which the useless rollouts after rule 1 drag below rule 0's immediate gain."""
    env = _TrapEnv()
    mcts = MCTS(env, MCTSOptions(budget=64, max_sim_steps=2, seed=seed))
    mcts.deadline = float("inf")
    root = mcts._node([], None, None)
    best = mcts.search(root, 64, float("inf"))
    grab, prepare = root.children[0], root.children[1]
    assert grab.value / grab.visits > prepare.value / prepare.visits  # the trap: averages favour rule 0
    assert prepare.best > grab.best and best is prepare


def test_patience_comes_from_the_options():
    """The schema's option reaches the scheduler (the pass, the CLI and tvmc build it from options)."""
    from relay_eqsat.pipeline import OptimizeOptions

    assert MCTSScheduler.from_options(OptimizeOptions(search="mcts")).options.patience == 8
    assert MCTSScheduler.from_options(OptimizeOptions(search="mcts", patience="3")).options.patience == 3
    with pytest.raises(ValueError, match="patience"):
        OptimizeOptions(search="mcts", patience=-1)


def test_the_search_option_names_every_registered_scheduler():
    """The options schema names the shipped schedulers itself (the search package imports it), and a
    scheduler registered later becomes a ``search`` value."""
    from relay_eqsat import options
    from relay_eqsat.search import SCHEDULERS, register_scheduler
    from relay_eqsat.search.scheduler import Scheduler

    assert tuple(SCHEDULERS) == options.OPTIONS["search"].allowed() == ("tensat", "mcts", "none")
    with pytest.raises(ValueError, match="search"):
        options.validate({"search": "my-search"})

    class Mine(Scheduler):
        name = "my-search"

    register_scheduler("my-search", Mine)
    try:
        assert options.validate({"search": "my-search"}) == {"search": "my-search"}
    finally:
        del SCHEDULERS["my-search"]
        options.SEARCHES.remove("my-search")
