"""Shrinking an extraction problem before it is encoded, and integer weights for the solvers.

Only nodes that some acyclic extraction can use need a variable. An acyclic
extraction is a well-founded derivation: every chosen node's children are built
before it. So a usable node must be productive (least fixpoint from the leaves:
all child classes have a productive node), must not have its own class as a
child, and must not be blacklisted; and its class must be reachable from the
roots through such nodes. Everything else is fixed to "not chosen".
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Iterable

import numpy as np

from .problem import ExtractionProblem
from .validate import InfeasibleError


@dataclass
class Reduced:
    """The part of a problem that matters for the given roots.

    usable[n]         n may be chosen
    classes           classes the roots can reach through usable nodes (sorted)
    class_nodes[c]    usable nodes of each class in ``classes``
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
    while queue:
        c = queue.popleft()
        for n in problem.class_nodes[c]:
            if not usable[n]:
                continue
            class_nodes[c].append(n)
            kids = tuple(sorted(set(problem.node_children[n])))
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
