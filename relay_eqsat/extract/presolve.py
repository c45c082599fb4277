"""Shrinking an extraction problem before it is encoded, and integer weights for the solvers.

Only nodes that some acyclic extraction can use need a variable. An acyclic
extraction is a well-founded derivation: every chosen node's children are built
before it. So a usable node must be productive (least fixpoint from the leaves:
all child classes have a productive node), must not have its own class as a
child, and must not be blacklisted; and its class must be reachable from the
roots through such nodes. Of the usable nodes of a class, only those that no
other node dominates (:func:`undominated`) get a variable. Everything else is
fixed to "not chosen".
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from .problem import ExtractionProblem
from .validity import InfeasibleError


@dataclass
class Reduced:
    """The part of a problem that matters for the given roots.

    usable[n]         n can head an acyclic, blacklist-free term
    classes           classes the roots can reach through usable nodes (sorted)
    class_nodes[c]    usable, undominated nodes of each class in ``classes``
    child_sets[n]     distinct child classes of each usable node
    """

    roots: list[int]
    usable: np.ndarray
    classes: list[int]
    class_nodes: dict[int, list[int]]
    child_sets: dict[int, tuple[int, ...]]

    @property
    def nodes(self) -> list[int]:
        return [n for c in self.classes for n in self.class_nodes[c]]


def productive_nodes(problem: ExtractionProblem) -> np.ndarray:
    """Nodes that can head an acyclic, blacklist-free term (least fixpoint from the leaves)."""
    n_nodes = problem.num_nodes
    allowed = ~problem.blacklisted
    node_class = problem.node_class.tolist()
    pending = np.zeros(n_nodes, dtype=np.int64)
    parents: list[list[int]] = [[] for _ in range(problem.num_classes)]
    ready: deque[int] = deque()
    for n, children in enumerate(problem.node_children):
        if not allowed[n]:
            continue
        distinct = set(children)
        if node_class[n] in distinct:
            continue  # a node that needs its own class can never be built first
        pending[n] = len(distinct)
        if not distinct:
            ready.append(n)
        for d in distinct:
            parents[d].append(n)
    class_done = np.zeros(problem.num_classes, dtype=bool)
    productive = np.zeros(n_nodes, dtype=bool)
    while ready:
        n = ready.popleft()
        productive[n] = True
        c = node_class[n]
        if class_done[c]:
            continue
        class_done[c] = True
        for p in parents[c]:
            pending[p] -= 1
            if pending[p] == 0:
                ready.append(p)
    return productive


def undominated(candidates: list[tuple[int, tuple[int, ...]]], cost: np.ndarray) -> list[tuple[int, tuple[int, ...]]]:
    """The (node, child classes) of one class that no other node dominates.

    Node m dominates n when m costs no more and needs a subset of n's child
    classes: a choice using n stays valid and acyclic (m's children are among
    n's) and costs no more with m instead, so n needs no variable. Among equal
    nodes (same cost, same child classes: a commuted add) the lowest index is
    kept. Besides shrinking the problem this removes most equal-cost
    alternatives, whose optima a multi-worker solver would pick among at random.
    """
    if len(candidates) < 2:
        return candidates
    order = sorted(candidates, key=lambda nk: (cost[nk[0]], len(nk[1]), nk[0]))
    kept: list[tuple[int, tuple[int, ...]]] = []
    kept_sets: list[frozenset] = []
    for n, kids in order:
        mine = frozenset(kids)
        # anything kept earlier costs no more; it dominates n if its children are a subset of n's
        if any(k <= mine for k in kept_sets):
            continue
        kept.append((n, kids))
        kept_sets.append(mine)
    kept.sort(key=lambda nk: nk[0])
    return kept


def reduce_problem(problem: ExtractionProblem, roots: Iterable[int] | None = None) -> Reduced:
    """The usable nodes and relevant classes for ``roots``; raises InfeasibleError if a root cannot be built."""
    roots = list(problem.roots) if roots is None else [int(r) for r in roots]
    if not roots:
        raise ValueError("no root classes to extract")
    usable = productive_nodes(problem)
    class_nodes: dict[int, list[int]] = {}
    child_sets: dict[int, tuple[int, ...]] = {}
    queue = deque()
    for r in roots:
        if r not in class_nodes:
            class_nodes[r] = []
            queue.append(r)
    cost = problem.node_cost
    while queue:
        c = queue.popleft()
        candidates = [(n, tuple(sorted(set(problem.node_children[n])))) for n in problem.class_nodes[c] if usable[n]]
        for n, kids in undominated(candidates, cost):
            class_nodes[c].append(n)
            child_sets[n] = kids
            for d in kids:
                if d not in class_nodes:
                    class_nodes[d] = []
                    queue.append(d)
    for r in roots:
        if not class_nodes[r]:
            raise InfeasibleError(f"root class {problem.class_key[r]!r} has no acyclic extraction "
                                  "that avoids the blacklisted nodes")
    return Reduced(roots=roots, usable=usable, classes=sorted(class_nodes),
                   class_nodes=class_nodes, child_sets=child_sets)


def integer_weights(costs: np.ndarray, resolution: int = 10**7) -> tuple[np.ndarray, float]:
    """Non-negative integer weights for node costs, for CP-SAT and MaxSAT objectives.

    Integral costs up to 2**31 are used as they are (scale 1: the optimum is
    exact). Otherwise w = round(cost * scale) with scale = resolution / max
    cost, so each weight is accurate to max_cost / (2 * resolution); then
    distinct costs are kept distinct and in order (a positive cost never gets
    weight 0, and a larger cost always gets a larger weight), so the solvers
    never see ties or reversals that the real costs do not have. An optimum
    for the weights is within n_chosen * max_cost / resolution of the real
    optimum. Returns (weights as int64, scale) with weight ~= cost * scale.
    """
    costs = np.asarray(costs, dtype=np.float64)
    if len(costs) == 0:
        return np.zeros(0, dtype=np.int64), 1.0
    if np.any(costs < 0) or not np.all(np.isfinite(costs)):
        raise ValueError("node costs must be finite and non-negative")
    top = float(costs.max())
    if top <= 2**31 and np.all(costs == np.round(costs)):
        return costs.astype(np.int64), 1.0
    scale = resolution / top
    unique, inverse = np.unique(costs, return_inverse=True)
    rounded = np.round(unique * scale).astype(np.int64)
    previous = -1
    for i, u in enumerate(unique):
        w = int(rounded[i])
        if u > 0 and w <= previous:
            w = previous + 1
        rounded[i] = w
        previous = w
    return rounded[inverse], scale


def rounding_slack(weights: np.ndarray, costs: np.ndarray, scale: float, classes: np.ndarray) -> float:
    """How much the integer weights can overstate a solution's scaled cost: the sum over
    classes of the largest ``w_n - cost_n * scale`` of the class (0 when none is positive).
    A solution takes one node per class, so ``(w(S) - slack) / scale <= cost(S)``."""
    if len(weights) == 0:
        return 0.0
    excess = np.maximum(np.asarray(weights, dtype=np.float64) - np.asarray(costs, dtype=np.float64) * scale, 0.0)
    per_class = np.zeros(int(classes.max()) + 1)
    np.maximum.at(per_class, classes, excess)
    return float(per_class.sum())


#: tie-break resolution: each weight unit is split into this many parts
TIE_BREAK_PARTS = 1 << 16


def _node_hash(nodes: np.ndarray) -> np.ndarray:
    """A fixed pseudo-random 64-bit value per node index (splitmix64's finalizer)."""
    h = nodes.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


def tie_break_weights(weights: np.ndarray, nodes, node_class: np.ndarray,
                      exact: bool) -> tuple[np.ndarray, int, int]:
    """Integer weights without ties, so that a multi-worker solver's optimum is one program.

    Equal-cost alternatives are common in e-graphs (a commuted add, two orders of
    the same reshapes), and CP-SAT's parallel workers return whichever optimum one
    of them finds first: the same e-graph gave a different program run to run.
    Each weight becomes ``w * K + r_n`` with ``r_n`` a fixed pseudo-random value
    in ``[0, R)`` per node, so among the optima of ``w`` the solver must find the
    one of least ``sum r``, which is unique unless two ``r`` sums collide.

    ``exact`` (the weights are the real integral costs): ``R`` is kept below
    ``K / classes``, so the tie-broken optimum is an optimum of ``w``. Otherwise
    ``R = K``: an optimum of the tie-broken weights is within ``n_chosen`` weight
    units of the optimum of ``w``, the same order as :func:`integer_weights`'s
    rounding. Returns (weights, K, slack): ``slack`` bounds ``sum r`` over any
    choice of one node per class, so ``(bound - slack) / K`` is a lower bound in
    units of ``w`` for a solver bound on the tie-broken objective.
    """
    nodes = np.asarray(nodes, dtype=np.int64)
    weights = np.asarray(weights, dtype=np.int64)
    if len(nodes) == 0:
        return weights, 1, 0
    classes = node_class[nodes]
    parts = TIE_BREAK_PARTS
    span = parts if not exact else parts // (len(np.unique(classes)) + 1)
    if span <= 1:
        return weights, 1, 0
    r = (_node_hash(nodes) % np.uint64(span)).astype(np.int64)
    per_class = np.zeros(int(classes.max()) + 1, dtype=np.int64)
    np.maximum.at(per_class, classes, r)
    return weights * parts + r, parts, int(per_class.sum())
