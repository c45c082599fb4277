"""Monte Carlo tree search over rewrite-rule applications (Hartmann, He, Yoneki, PACT 2024).

When the e-graph cannot saturate within its node limit, the order in which
rules are applied decides what it can contain. Algorithm 1 of the paper: from
the current e-graph, grow a search tree for ``budget`` iterations (select by
UCB1, expand one random rule, simulate random rules scoring each step with a
fast extractor, back-propagate), apply the root's best rule to the real
e-graph, and repeat until saturation, the node limit or the time limit.

The tree search is written against `Environment`, a narrow view of "an
e-graph plus rules": clone a state, apply one action, tell whether an action's
source pattern still matches, measure size, and cost a state.
`EGraphEnvironment` is the real one (an action = one TENSAT rewrite step with
a single rule, cycle filtering included); `MCTSScheduler` is the `Scheduler`
the pass uses.
"""
from __future__ import annotations

import math
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Hashable, Protocol, Sequence


class Environment(Protocol):
    """What MCTS needs from the world it searches."""

    actions: Sequence[Any]

    def clone(self, state: Any) -> Any: ...

    def apply(self, state: Any, action: int) -> bool:
        """Apply action (an index into ``actions``) to ``state`` in place; True if it changed."""

    def applicable(self, state: Any, action: int) -> bool:
        """False when the action's source pattern(s) do not occur: it cannot change ``state``."""

    def size(self, state: Any) -> int: ...

    def cost(self, state: Any) -> float:
        """Cost of the best program in ``state`` under the reward extractor (cached)."""

    def fingerprint(self, state: Any) -> Hashable: ...


@dataclass
class MCTSOptions:
    """Hyperparameters; defaults follow the paper (budget 128, 10 simulation steps, 2,000 e-nodes)."""

    budget: int = 128
    max_sim_steps: int = 10
    node_limit: int = 2000
    time_limit: float = 60.0
    exploration: float = 2.0 * math.sqrt(2.0)  # c in v/n + c*sqrt(ln N / n), as in the paper's code
    stop_probability: float = 0.5  # chance to stop descending at a non-root node and expand there
    gamma: float = 1.0  # reward discount per simulation step
    reuse_subtree: bool = True
    seed: int = 0
    max_steps: int | None = None  # cap on rules applied to the real e-graph (None: no cap)
    progress: bool | None = None  # None: a progress bar only when stderr is a terminal


@dataclass
class TreeNode:
    state: Any
    parent: "TreeNode | None"
    action: int | None
    cost: float
    value: float = 0.0
    visits: int = 0
    saturated: bool = False  # the action leading here changed nothing
    exhausted: bool = False  # nothing left to explore below this node
    at_limit: bool = False  # the node limit was reached here: no further rewriting
    blacklist: set = field(default_factory=set)  # actions known not to change this state
    children: dict = field(default_factory=dict)  # action -> TreeNode

    def open_actions(self, num_actions: int) -> list[int]:
        """Actions not tried yet and not known to be useless."""
        return [a for a in range(num_actions) if a not in self.blacklist and a not in self.children]

    def live_children(self) -> list["TreeNode"]:
        """Children still worth descending into."""
        return [c for c in self.children.values() if not c.saturated and not c.exhausted]

    def candidates(self) -> list["TreeNode"]:
        """Children that changed the e-graph and were evaluated: the choices for the real e-graph."""
        return [c for c in self.children.values() if not c.saturated and c.visits > 0]


@dataclass
class MCTSResult:
    state: Any
    stop_reason: str
    steps: int
    applied: list[int]
    initial_cost: float
    final_cost: float
    iterations: int
    time: float
    history: list[dict]


class MCTS:
    """Algorithm 1: repeated tree searches, each choosing one rule for the real e-graph."""

    def __init__(self, env: Environment, options: MCTSOptions | None = None):
        self.env = env
        self.opt = options or MCTSOptions()
        self.rng = random.Random(self.opt.seed)
        self.iterations = 0
        self._deadline = math.inf  # run() sets it

    # -- tree search ------------------------------------------------------
    def _node(self, state, parent, action) -> TreeNode:
        node = TreeNode(state, parent, action, self.env.cost(state))
        node.at_limit = self.env.size(state) >= self.opt.node_limit
        self._prune(node)
        return node

    def _prune(self, node: TreeNode) -> None:
        """Blacklist every action whose source pattern no longer occurs."""
        for a in range(len(self.env.actions)):
            if a not in node.blacklist and not self.env.applicable(node.state, a):
                node.blacklist.add(a)

    def _expandable(self, node: TreeNode) -> bool:
        return not node.at_limit and bool(node.open_actions(len(self.env.actions)))

    def _ucb(self, child: TreeNode, parent_visits: int) -> float:
        if child.visits == 0:
            return math.inf
        return child.value / child.visits + self.opt.exploration * math.sqrt(
            math.log(max(parent_visits, 1)) / child.visits)

    def _select(self, root: TreeNode) -> TreeNode | None:
        """Descend by UCB1; stop at a non-root node with probability p to expand it.

        The root keeps expanding until every useful action has a child. A node
        with nothing left to expand or descend into is marked exhausted and the
        descent restarts. Returns None when the whole tree is exhausted.
        """
        node = root
        while True:
            live = node.live_children()
            expandable = self._expandable(node)
            if node is root and expandable:
                return node
            if expandable and (not live or self.rng.random() < self.opt.stop_probability):
                return node
            if not live:
                if node is root:
                    return None
                node.exhausted = True
                node = root
                continue
            scores = [self._ucb(c, node.visits) for c in live]
            best = max(scores)
            ties = [c for c, s in zip(live, scores) if s == best]
            node = ties[0] if len(ties) == 1 else self.rng.choice(ties)

    def _expand(self, node: TreeNode) -> TreeNode | None:
        """Apply one random useful action; return the new child, or None if nothing changed."""
        while True:
            open_actions = node.open_actions(len(self.env.actions))
            if not open_actions or node.at_limit:
                return None
            a = self.rng.choice(open_actions)
            state = self.env.clone(node.state)
            if not self.env.apply(state, a):
                # saturated child: record it so it is never visited again
                node.children[a] = TreeNode(state, node, a, node.cost, saturated=True)
                node.blacklist.add(a)
                continue
            child = self._node(state, node, a)
            node.children[a] = child
            return child

    def _simulate(self, node: TreeNode, start_cost: float) -> float:
        """Random rules for up to max_sim_steps; reward = sum of discounted cost decreases."""
        reward = max(start_cost - node.cost, 0.0)  # the expansion step itself
        if node.at_limit:
            return reward
        state = self.env.clone(node.state)
        prev = node.cost
        banned = set(node.blacklist)
        steps = 0
        discount = self.opt.gamma
        while steps < self.opt.max_sim_steps and time.perf_counter() <= self._deadline:
            choices = [a for a in range(len(self.env.actions)) if a not in banned]
            if not choices:
                break  # saturated
            a = self.rng.choice(choices)
            if not self.env.apply(state, a):
                banned.add(a)
                continue
            banned.clear()
            steps += 1
            cost = self.env.cost(state)
            reward += discount * max(prev - cost, 0.0)
            discount *= self.opt.gamma
            prev = cost
            if self.env.size(state) >= self.opt.node_limit:
                break
        return reward

    @staticmethod
    def _backpropagate(node: TreeNode, reward: float) -> None:
        while node is not None:
            node.value += reward
            node.visits += 1
            node = node.parent

    def search(self, root: TreeNode, budget: int, deadline: float) -> TreeNode | None:
        """Grow the tree under ``root``; return the best child by average value."""
        for _ in range(budget):
            if time.perf_counter() > deadline:
                break
            leaf = self._select(root)
            if leaf is None:
                break
            child = self._expand(leaf)
            self.iterations += 1
            if child is None:
                # every remaining action at leaf changed nothing: nothing left to try there
                if leaf is not root and not leaf.live_children():
                    leaf.exhausted = True
                continue
            reward = self._simulate(child, leaf.cost)
            self._backpropagate(child, reward)
            if child.at_limit:
                child.exhausted = True
        live = root.candidates()
        if not live:
            return None
        # best average value; ties to more visits, then to the lower cost, then the lower rule index
        return max(live, key=lambda c: (c.value / c.visits, c.visits, -c.cost, -c.action))

    # -- outer loop -------------------------------------------------------
    def run(self, state) -> MCTSResult:
        """Algorithm 1: grow ``state`` in place, one MCTS-chosen action at a time."""
        t0 = time.perf_counter()
        deadline = t0 + self.opt.time_limit
        self._deadline = deadline
        if hasattr(self.env, "deadline"):
            self.env.deadline = deadline  # a rewrite step stops applying matches past it
        root = self._node(self.env.clone(state), None, None)
        initial_cost = root.cost
        applied: list[int] = []
        history: list[dict] = []
        stop = "saturated"
        bar = _progress(self.opt.progress, self.opt.max_steps)
        while True:
            if root.at_limit:
                stop = "node_limit"
                break
            if self.opt.max_steps is not None and len(applied) >= self.opt.max_steps:
                stop = "step_limit"
                break
            if time.perf_counter() > deadline:
                stop = "time_limit"
                break
            best = self.search(root, self.opt.budget, deadline)
            if best is None:
                stop = "time_limit" if time.perf_counter() > deadline and self._expandable(root) else "saturated"
                break
            # the real e-graph takes the chosen rule (the same deterministic step the tree took)
            self.env.apply(state, best.action)
            applied.append(best.action)
            history.append({"rule": best.action, "value": best.value / best.visits,
                            "visits": best.visits, "size": self.env.size(state),
                            "cost": best.cost, "time": time.perf_counter() - t0})
            if bar is not None:
                bar.update(1)
                bar.set_postfix(size=self.env.size(state), cost=f"{best.cost:.4g}")
            if self.opt.reuse_subtree and self.env.fingerprint(best.state) == self.env.fingerprint(state):
                best.parent = None
                best.action = None
                best.saturated = best.exhausted = False
                self._prune(best)
                root = best
            else:
                root = self._node(self.env.clone(state), None, None)
        if bar is not None:
            bar.close()
        return MCTSResult(state, stop, len(applied), applied, initial_cost, root.cost,
                          self.iterations, time.perf_counter() - t0, history)


class EGraphEnvironment:
    """MCTS over an e-graph: an action applies one rule as one TENSAT rewrite step.

    ``node_cost`` is the e-graph's cost callable (see ``EGraph.to_problem``);
    rewards come from ``extractor`` (default: the sharing-aware greedy "OCF"),
    cached by e-graph fingerprint. The OCF greedy runs directly on the
    e-graph's arrays (``EGraph.ocf_cost``, same result as ``greedy_ocf`` on
    ``to_problem``), with node costs remembered per node across clones; any
    other extractor goes through ``to_problem``.
    """

    def __init__(self, rules: Sequence[Any], root: int, node_cost, limits=None, extractor=None):
        from ..extract import get_extractor
        from ..rules import Matcher
        from .base import Limits, SearchReport

        self.actions = list(rules)
        self.root = root
        self.node_cost = node_cost
        self.limits = limits or Limits(node_limit=2000)
        self.extractor = extractor or get_extractor("greedy-ocf")
        self.matcher = Matcher(self.actions)
        self.scratch = SearchReport()  # statistics of every step, simulations included
        self.deadline = math.inf  # set by MCTS.run: steps stop applying matches past it
        self._costs: dict = {}
        self._node_costs: dict = {}  # (op, attrs, child types, const) -> cost, for ocf_cost
        self._fast_ocf = self.extractor.name == "greedy-ocf" and not getattr(self.extractor, "options", None)
        self.extractions = 0
        self.cache_hits = 0

    def clone(self, g):
        return g.copy()

    def apply(self, g, action: int) -> bool:
        from .tensat import rewrite_step

        g.iteration += 1
        rule = self.actions[action]
        return rewrite_step(g, self.matcher, [rule], self.limits, self.deadline, self.scratch).changed

    def applicable(self, g, action: int) -> bool:
        m = self.matcher
        return all(g.search(m.programs[k], 1) for k in m.rule_keys[self.actions[action].name])

    def size(self, g) -> int:
        return g.num_nodes

    def fingerprint(self, g):
        return g.fingerprint()

    def cost(self, g) -> float:
        fp = g.fingerprint()
        c = self._costs.get(fp)
        if c is None:
            if self._fast_ocf:
                c = g.ocf_cost(self.node_cost, self._node_costs, self.root)
            else:
                problem = g.to_problem(self.node_cost, [self.root])
                c = self.extractor.solve(problem).cost
            self._costs[fp] = c
            self.extractions += 1
        else:
            self.cache_hits += 1
        return c


class MCTSScheduler:
    """`Scheduler` (see ``search/base.py``) choosing each rule by MCTS; needs a cost."""

    name = "mcts"

    def __init__(self, options: MCTSOptions | None = None, extractor=None, root: int | None = None):
        self.options = options or MCTSOptions()
        self.extractor = extractor
        self.root = root

    def run(self, egraph, rules, limits=None, cost=None):
        from dataclasses import replace

        from .base import Limits, SearchReport

        if cost is None:
            raise ValueError("MCTS needs a cost (the e-graph node_cost callable) to score rewrites")
        limits = limits or Limits(node_limit=self.options.node_limit)
        opt = replace(self.options, node_limit=limits.node_limit,
                      time_limit=min(self.options.time_limit, limits.time_limit))
        root = self.root if self.root is not None else getattr(egraph, "root", None)
        if root is None:
            raise ValueError("MCTSScheduler needs the root class (pass root=, or set egraph.root)")
        egraph.rebuild()
        rep = SearchReport(fired={r.name: 0 for r in rules})
        rep.nodes_before, rep.classes_before = egraph.num_nodes, egraph.num_classes
        env = EGraphEnvironment(rules, root, cost, limits, self.extractor)
        result = MCTS(env, opt).run(egraph)
        for a in result.applied:
            rep.fired[env.actions[a].name] += 1
        rep.stop_reason = result.stop_reason
        rep.iterations = result.steps
        rep.nodes_after, rep.classes_after = egraph.num_nodes, egraph.num_classes
        rep.total_time = result.time
        rep.sizes = [(0, h["size"]) for h in result.history]
        rep.info.update(mcts_iterations=result.iterations, initial_cost=result.initial_cost,
                        final_cost=result.final_cost, extractions=env.extractions,
                        cache_hits=env.cache_hits, applied=[env.actions[a].name for a in result.applied],
                        history=result.history)
        return rep


def _progress(enabled: bool | None, total: int | None):
    if enabled is None:
        enabled = sys.stderr.isatty()
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return None
    return tqdm(total=total, desc="mcts", unit="rule", leave=False)
