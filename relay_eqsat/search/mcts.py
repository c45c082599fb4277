"""Monte Carlo tree search over rewrite-rule applications (Hartmann, He, Yoneki, PACT 2024).

When the e-graph cannot saturate within its node limit, the order in which
rules are applied decides what it can contain. Algorithm 1 of the paper: from
the current e-graph, grow a search tree for ``budget`` iterations (select by
UCB1, expand one random rule, simulate random rules scoring each step with a
fast extractor, back-propagate), apply the root's best rule to the real
e-graph, and repeat until saturation, the node limit or the time limit.

Five departures from the paper, and a stop, each for a measured failure
(``bench/mcts_vs_tensat.py``): rollouts are scored by the merge-aware greedy
(``greedy-merge``), which sees a merged operator pay once its pieces all read
it, where the paper's OCF greedy saw every merge as a loss; a node's value
counts the gain of its own step as well as the gains below it (see
``MCTS._backpropagate``); and random rules are drawn weighted by how often
each changed an e-graph so far (``MCTS._pick``), so rollouts stop spending
their time on rules that match but add nothing; and the rule applied to the
real e-graph is the root's child with the best return found below it (max
backup; ``MCTS.search``), not the best average: on an e-graph near its node
limit most rollouts fill the budget with rewrites that pay nothing, and the
average buried the one sequence that paid (full NasNet-A: 0.2% above
TENSAT); and an action applies a multi-pattern rule whose matches would not
all fit under the node limit to non-overlapping matches only
(``MCTSOptions.disjoint``, ``Runner.step``), the next action of it to the
next such set: NasRNN's gates pair up in 308 matches of ``dense-merge``,
applied all at once they filled the 2,000 e-nodes with pairings a program
can use one of, and neither scheduler got past pairs (2.5% above the
cheapest program the rules reach on the Zen 1; applied disjointly, MCTS
finds it). Rollouts still apply every match (``MCTS._apply``): cheap, and
they score the state as well. The paper's loop runs until saturation or a
limit; this one also stops once ``MCTSOptions.patience`` rules in a row were
applied with no cheaper program found by any rollout below them (stop reason
``no_gain``): under the Zen 1's costs VGG-19 went on flattening nested
splits no program used, 60 rules and 70 s on that CPU, where nothing paid
after the 12th rule (with patience 8: 20 rules, the same program).

The tree search is written against `Environment`, a narrow view of "an
e-graph plus rules": clone a state, apply one action, tell whether an action's
source pattern still matches, whether a state reached the node limit, measure
size, and cost a state. `EGraphEnvironment` is the real one (an action = one
``Runner.step`` with a single rule, cycle filtering included, under the
runner's limits); `MCTSScheduler` is the `Scheduler` (``mcts``) that plugs the
outer loop into the ``Runner``: each iteration applies the rule the tree
search picks.
"""
from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from typing import Any, Hashable, Protocol, Sequence

from .. import progress
from ..extract import NodeCosts, egraph_problem, get_extractor, merge_cost, ocf_cost
from ..options import DEFAULTS
from relay_eqsat.rewrite import Matcher, Rule
from .base import SearchReport, StopReason
from .runner import Runner, Step
from .scheduler import Scheduler


class Environment(Protocol):
    """What MCTS needs from the world it searches."""

    actions: Sequence[Any]

    def clone(self, state: Any) -> Any: ...

    def apply(self, state: Any, action: int) -> bool:
        """Apply action (an index into ``actions``) to ``state`` in place; True if it changed. (An
        environment may add ``rollout_apply``, with the same signature, for a rollout's steps.)"""

    def applicable(self, state: Any, action: int) -> bool:
        """False when the action's source pattern(s) do not occur: it cannot change ``state``."""

    def at_limit(self, state: Any) -> bool:
        """True when ``state`` reached the node limit: no further rewriting."""

    def size(self, state: Any) -> int: ...

    def cost(self, state: Any) -> float:
        """Cost of the best program in ``state`` under the reward extractor (cached)."""

    def fingerprint(self, state: Any) -> Hashable: ...


@dataclass
class MCTSOptions:
    """Hyperparameters; defaults follow the paper (budget 128, 10 simulation steps) through the
    options schema. The node and time limits are the runner's ``Limits`` (the paper's node
    limit: 2,000 e-nodes)."""

    budget: int = DEFAULTS["budget"]
    max_sim_steps: int = DEFAULTS["max_sim_steps"]
    reward: str = DEFAULTS["extractor"]  # the extractor whose cost scores rollouts (see EGraphEnvironment)
    exploration: float = 2.0 * math.sqrt(2.0)  # c in v/n + c*sqrt(ln N / n), as in the paper's code
    stop_probability: float = 0.5  # chance to stop descending at a non-root node and expand there
    gamma: float = 1.0  # reward discount per simulation step
    reuse_subtree: bool = True
    seed: int = DEFAULTS["seed"]
    disjoint: bool = True  # the tree's actions apply a multi-pattern rule's non-overlapping matches (Runner.step); rollouts every match
    max_steps: int | None = None  # cap on rules applied to the real e-graph (None: no cap)
    # stop once this many rules in a row were applied with no cheaper program found anywhere below them
    # (the chosen child's best return 0: no rollout of up to max_sim_steps rules from there paid; None
    # or 0: never)
    patience: int | None = DEFAULTS["patience"]
    progress: bool | None = None  # None: a progress bar only when stderr is a terminal


@dataclass
class TreeNode:
    state: Any
    parent: "TreeNode | None"
    action: int | None
    cost: float
    value: float = 0.0
    visits: int = 0
    best: float = 0.0  # the best return backpropagated through this node (max backup)
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


class MCTS:
    """The tree search of Algorithm 1: grows a tree of rule applications and picks the best first rule.

    ``deadline`` (a ``time.perf_counter()`` value; MCTSScheduler sets the
    runner's) ends simulations; ``search`` takes its own.
    """

    def __init__(self, env: Environment, options: MCTSOptions | None = None):
        self.env = env
        self._rollout_apply = getattr(env, "rollout_apply", env.apply)  # a rollout's steps (see ``_apply``)
        self.opt = options or MCTSOptions()
        self.rng = random.Random(self.opt.seed)
        self.iterations = 0
        # per action: applications tried and those that changed the e-graph, over the whole search
        self.tried = [0] * len(env.actions)
        self.changed = [0] * len(env.actions)
        self.deadline = math.inf

    # -- tree search ------------------------------------------------------
    def _node(self, state, parent, action) -> TreeNode:
        node = TreeNode(state, parent, action, self.env.cost(state))
        node.at_limit = self.env.at_limit(state)
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

    def _apply(self, state, action: int, rollout: bool = False) -> bool:
        """Apply ``action`` to ``state``; a rollout's steps apply every match (the paper's actions: a
        merge rule's pairings fill the node limit at once and end the rollout, where applied without
        overlap they went on for ten steps of extraction on large e-graphs: BERT 16 -> 43 s, and the
        pass's 10,000-e-node searches ran out of time before their first action on NasRNN)."""
        changed = (self._rollout_apply if rollout else self.env.apply)(state, action)
        self.tried[action] += 1
        self.changed[action] += changed
        return changed

    def _pick(self, actions: list[int]) -> int:
        """A random action, each weighted by its rate of changing the e-graph so far ((changed + 1) /
        (tried + 1)). A rule whose pattern occurs but whose rewrites are all there already changes
        nothing, and finding that out costs a full search and join (20 ms for a multi-pattern
        rule on a 2,000-node e-graph): with uniform choice most of a rollout's time went to such
        tries (mobilenet_v2: 108k of 116k applications). Deterministic under the seed."""
        if len(actions) == 1:
            return actions[0]
        weights = [(self.changed[a] + 1) / (self.tried[a] + 1) for a in actions]
        return self.rng.choices(actions, weights)[0]

    def _expand(self, node: TreeNode) -> TreeNode | None:
        """Apply one random useful action; return the new child, or None if nothing changed."""
        while True:
            open_actions = node.open_actions(len(self.env.actions))
            if not open_actions or node.at_limit:
                return None
            a = self._pick(open_actions)
            state = self.env.clone(node.state)
            if not self._apply(state, a):
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
        while steps < self.opt.max_sim_steps and time.perf_counter() <= self.deadline:
            choices = [a for a in range(len(self.env.actions)) if a not in banned]
            if not choices:
                break  # saturated
            a = self._pick(choices)
            if not self._apply(state, a, rollout=True):
                banned.add(a)
                continue
            banned.clear()
            steps += 1
            cost = self.env.cost(state)
            reward += discount * max(prev - cost, 0.0)
            discount *= self.opt.gamma
            prev = cost
            if self.env.at_limit(state):
                break
        return reward

    def _backpropagate(self, node: TreeNode, reward: float) -> None:
        """Add the return to every node on the path. A node's value is the return of the action leading
        to it: ``reward`` (the simulation's, from the new node's own step on) for the new node, and for
        each ancestor the cost decrease of its own step plus the discounted return below it. (Adding
        the same ``reward`` everywhere, as Algorithm 1 reads, credits an action with the gains found
        after it but not with its own: a merge that paid at once then looked worse than a neutral
        rewrite whose rollouts went on to find the merge.)"""
        ret = reward
        while node is not None:
            node.value += ret
            node.visits += 1
            node.best = max(node.best, ret)
            parent = node.parent
            if parent is not None:
                step = max(parent.parent.cost - parent.cost, 0.0) if parent.parent is not None else 0.0
                ret = step + self.opt.gamma * ret
            node = parent

    def search(self, root: TreeNode, budget: int, deadline: float) -> TreeNode | None:
        """Grow the tree under ``root``; return the child with the best return found below it."""
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
        # the best return found below it (max backup, as single-player MCTS: the search looks for one good
        # sequence of rules, and a first rule whose random rollouts mostly fill the node budget with useless
        # rewrites still leads to the best one it found); ties to the average value, more visits, the lower
        # cost, the lower rule index
        return max(live, key=lambda c: (c.best, c.value / c.visits, c.visits, -c.cost, -c.action))


#: a return below this share of the start's cost is float rounding, not a cheaper program (MCTSOptions.patience)
GAIN_TOLERANCE = 1e-12

#: rewards computed straight from an e-graph's arrays, by extractor name (the same cost as the extractor's)
FAST_REWARDS = {"greedy-merge": merge_cost, "greedy-ocf": ocf_cost}


class EGraphEnvironment:
    """MCTS over an e-graph: an action applies one rule as one ``Runner.step``.

    ``node_cost`` is the e-graph's cost callable (see ``extract.egraph_problem``);
    rewards come from ``extractor`` (an Extractor or its name; default: the
    ``extractor`` option's, "greedy-merge"), cached by e-graph fingerprint.
    The two greedy rewards run directly on the e-graph's arrays, with node
    costs memoized per node signature (``NodeCosts``) across clones:
    "greedy-merge" (``extract.merge_cost``: the OCF greedy plus group moves
    that let the pieces of a merged operator share it, so a rollout that
    makes a merge possible earns its gain) and "greedy-ocf"
    (``extract.ocf_cost``, blind to merges: each piece of a merged operator
    looks dearer alone). Both are deterministic. Any other extractor goes
    through ``egraph_problem``; an exact one (ILP-ACyc, MaxSAT) solves each
    state to optimality without a time limit: 0.05-1.5 s on a 2,000-node
    e-graph, and CP-SAT's parallel workers may return another optimal choice
    of the rounded integer weights, whose real cost can differ in the last
    digits from run to run.

    Steps run under ``runner`` (its limits and clock; default: a new
    ``Runner(limits)``, ``limits`` being unused when ``runner`` is given);
    ``matcher``: the rules' compiled ``Matcher``; ``disjoint``: a
    multi-pattern rule applies its non-overlapping matches (``Runner.step``).
    """

    def __init__(self, rules: Sequence[Rule], root: int, node_cost, limits=None, extractor=None,
                 runner: Runner | None = None, matcher: Matcher | None = None, disjoint: bool = False):
        self.actions = list(rules)
        self.disjoint = disjoint
        self.root = root
        self.node_cost = node_cost
        self.runner = runner or Runner(limits)
        self.limits = self.runner.limits
        if extractor is None or isinstance(extractor, str):
            extractor = get_extractor(extractor or DEFAULTS["extractor"])
        self.extractor = extractor
        self.matcher = matcher or Matcher(self.actions)
        self.scratch = SearchReport()  # statistics of the tree's steps (expansions and simulations)
        self._costs: dict = {}
        self._node_costs = NodeCosts(node_cost)  # node costs memoized per node signature, for every state
        self._fast = None if getattr(self.extractor, "options", None) else FAST_REWARDS.get(self.extractor.name)
        self.extractions = 0
        self.cache_hits = 0

    def clone(self, g):
        return g.copy()

    def apply(self, g, action: int) -> bool:
        return self.runner.step(g, self.matcher, [self.actions[action]], self.scratch, self.disjoint).changed

    def rollout_apply(self, g, action: int) -> bool:
        """``apply`` for a rollout's steps: every match (see ``MCTS._apply``)."""
        return self.runner.step(g, self.matcher, [self.actions[action]], self.scratch).changed

    def applicable(self, g, action: int) -> bool:
        m = self.matcher
        return all(g.search(m.programs[k], 1) for k in m.rule_keys[self.actions[action].name])

    def at_limit(self, g) -> bool:
        return self.limits.exceeded(g) is not None

    def size(self, g) -> int:
        return g.num_nodes

    def fingerprint(self, g):
        return g.fingerprint()

    def cost(self, g) -> float:
        fp = g.fingerprint()
        c = self._costs.get(fp)
        if c is None:
            if self._fast is not None:
                c = self._fast(g, self._node_costs, self.root)
            else:
                problem = egraph_problem(g, self._node_costs, [self.root])
                c = self.extractor.solve(problem).cost
            self._costs[fp] = c
            self.extractions += 1
        else:
            self.cache_hits += 1
        return c


@dataclass
class _Search:
    """One MCTSScheduler run's state: the tree search, its current root and what was applied."""

    env: EGraphEnvironment
    mcts: MCTS
    tree: TreeNode
    initial_cost: float
    bar: Any
    best: TreeNode | None = None
    applied: list[int] = field(default_factory=list)
    idle: int = 0  # rules applied in a row whose search found nothing cheaper (see MCTSOptions.patience)
    history: list[dict] = field(default_factory=list)


class MCTSScheduler(Scheduler):
    """Each iteration applies the rule MCTS picks (Algorithm 1's outer loop); needs a cost.

    Not bounded by ``Limits.iter_limit``: ``MCTSOptions.max_steps`` caps the
    rules applied ("step_limit"). ``root``: the class the search optimizes
    (default: ``egraph.root``). The report's ``fired`` counts the times each
    rule was chosen; ``info`` holds reward (the rollouts' extractor), mcts_iterations,
    initial_cost, final_cost (under that extractor), extractions, cache_hits, applied (rule
    names) and history. ``extractor``: an Extractor for the rollouts, overriding
    ``options.reward``.
    """

    name = "mcts"
    iteration_limited = False

    @property
    def disjoint(self) -> bool:
        """The real e-graph's steps as the tree's (``MCTSOptions.disjoint``)."""
        return self.options.disjoint

    def __init__(self, options: MCTSOptions | None = None, extractor=None, root: int | None = None,
                 matcher_cache: dict | None = None):
        super().__init__(matcher_cache)
        self.options = options or MCTSOptions()
        self.extractor = extractor
        self.root = root
        self._search: _Search | None = None

    @classmethod
    def from_options(cls, options: Any = None, root: int | None = None) -> "MCTSScheduler":
        if options is None:
            return cls(root=root)
        mopts = MCTSOptions(budget=options.budget, max_sim_steps=options.max_sim_steps, seed=options.seed,
                            reward=options.extractor, patience=options.patience)
        return cls(mopts, root=root)

    def start(self, runner: Runner, egraph, rules: list[Rule], cost) -> None:
        if cost is None:
            raise ValueError("MCTS needs a cost (the e-graph node_cost callable) to score rewrites")
        root = self.root if self.root is not None else getattr(egraph, "root", None)
        if root is None:
            raise ValueError("MCTSScheduler needs the root class (pass root=, or set egraph.root)")
        env = EGraphEnvironment(rules, root, cost, extractor=self.extractor or self.options.reward, runner=runner,
                                matcher=self.matcher(rules), disjoint=self.disjoint)
        mcts = MCTS(env, self.options)
        mcts.deadline = runner.deadline
        tree = mcts._node(env.clone(egraph), None, None)
        self._search = _Search(env, mcts, tree, tree.cost, _progress(self.options.progress, self.options.max_steps))

    def next_rules(self, runner: Runner, egraph, rules: list[Rule], iteration: int) -> list[Rule] | str:
        s = self._search
        if self.options.max_steps is not None and len(s.applied) >= self.options.max_steps:
            return StopReason.STEP_LIMIT
        if self.options.patience and s.idle >= self.options.patience:
            return StopReason.NO_GAIN
        s.best = s.mcts.search(s.tree, self.options.budget, runner.deadline)
        if s.best is None:
            out_of_time = runner.exceeded() == StopReason.TIME_LIMIT
            return StopReason.TIME_LIMIT if out_of_time and s.mcts._expandable(s.tree) else StopReason.SATURATED
        # the real e-graph takes the chosen rule (the same deterministic step the tree took)
        return [rules[s.best.action]]

    def after_step(self, runner: Runner, egraph, step: Step, report) -> None:
        s, best, env = self._search, self._search.best, self._search.env
        report.fired[env.actions[best.action].name] += 1
        s.applied.append(best.action)
        s.idle = s.idle + 1 if best.best <= GAIN_TOLERANCE * abs(s.initial_cost) else 0
        s.history.append({"rule": best.action, "value": best.value / best.visits, "best": best.best,
                          "visits": best.visits, "size": env.size(egraph),
                          "cost": best.cost, "time": time.perf_counter() - runner.start})
        if s.bar is not None:
            s.bar.update(1)
            s.bar.set_postfix(size=env.size(egraph), cost=f"{best.cost:.4g}")
        if self.options.reuse_subtree and env.fingerprint(best.state) == env.fingerprint(egraph):
            best.parent = None
            best.action = None
            best.saturated = best.exhausted = False
            s.mcts._prune(best)
            s.tree = best
        else:
            s.tree = s.mcts._node(env.clone(egraph), None, None)
        return None  # the limits are checked before the next search; saturation is the search's to find

    def finish(self, runner: Runner, egraph, report) -> None:
        s, self._search = self._search, None
        if s.bar is not None:
            s.bar.close()
        report.info.update(reward=s.env.extractor.name, mcts_iterations=s.mcts.iterations,
                           initial_cost=s.initial_cost, final_cost=s.tree.cost, extractions=s.env.extractions,
                           cache_hits=s.env.cache_hits, applied=[s.env.actions[a].name for a in s.applied],
                           history=s.history)


def _progress(enabled: bool | None, total: int | None):
    """The package's progress bar for applied rules, or None when bars are off (the step then skips
    computing the bar's figures)."""
    if not progress.is_enabled(enabled):
        return None
    return progress.bar(total=total, desc="mcts", unit="rule", enabled=True)
