"""Greedy bottom-up extraction with two cost functions.

DCF ("default cost function", egg's and TENSAT's): a node costs its own cost
plus the costs of its child classes, one term per child occurrence. A subgraph
shared by two children is paid twice, so residual blocks and other shared
subgraphs are overestimated, exponentially in their nesting depth.

OCF (sharing-aware, after Algorithm 2 of Hartmann, He, Yoneki, PACT 2024): each
class keeps its history, the set of classes its best node's subgraph is made
of. A node's cost is its own cost plus the cost of the union of its children's
histories, each constituent class counted once. Algorithm 2 approximates the
overlap of two histories by the largest overlapping entry; here the union is
exact, because each class's history is frozen when its choice is final (below),
so the cost of a class is exactly the DAG cost of the subgraph it extracts, and
a residual block (a child that is also inside its sibling's history) is never
counted twice.

Both run as Knuth's generalization of Dijkstra's algorithm: a node is costed
once, when the last of its child classes has been finalized; a class is
finalized when the cheapest costed node of any unfinalized class is one of its
own nodes. Both cost functions are superior (a node costs at least as much as
each child class), so finalization order is nondecreasing in cost and the DCF
result equals egg's bottom-up fixpoint.

Acyclicity: a class's chosen node is only ever a node all of whose child
classes were finalized before that class. Give each class its finalization
rank; every chosen edge goes from a class to a class of smaller rank, so the
chosen nodes cannot form a cycle. (Nodes that need their own class can never
be costed for the same reason.) The result is validated anyway.

Histories are Python integers used as bitsets over finalization ranks (union is
one C-level OR); a class's history is dropped once every node that has it as a
child belongs to a finalized class, so memory follows the frontier of the
graph, not its square. A node's cost is its largest child's cost plus the
weights of the classes the other children add; few classes are added in the
common case (an op with weight inputs) and those are summed bit by bit, larger
differences by numpy.
"""
from __future__ import annotations

import heapq
import time
from typing import Iterable

import numpy as np

from .problem import ExtractionProblem, Solution
from .validate import InfeasibleError, reachable_classes, solution_cost, validate_solution

_FEW_BITS = 12


def _structure(problem: ExtractionProblem):
    """Per node: distinct child classes; per class: nodes having it as a child."""
    node_class = problem.node_class.tolist()
    blacklisted = problem.blacklisted
    distinct: list[tuple[int, ...]] = []
    pending = [0] * problem.num_nodes
    parents: list[list[int]] = [[] for _ in range(problem.num_classes)]
    leaves: list[int] = []
    for n, children in enumerate(problem.node_children):
        kids = tuple(set(children)) if len(children) > 1 else tuple(children)
        distinct.append(kids)
        if blacklisted[n]:
            continue
        pending[n] = len(kids)
        if not kids:
            leaves.append(n)
        for d in kids:
            parents[d].append(n)
    return node_class, distinct, pending, parents, leaves


def _finish(problem: ExtractionProblem, roots: list[int], choice: dict[int, int], status: str,
            started: float, validate: bool, info: dict) -> Solution:
    missing = [r for r in roots if r not in choice]
    if missing:
        raise InfeasibleError(f"root classes {[problem.class_key[r] for r in missing]} have no acyclic "
                              "extraction that avoids the blacklisted nodes")
    needed = reachable_classes(problem, choice, roots)
    choice = {c: choice[c] for c in needed}
    if validate:
        validate_solution(problem, choice, roots)
    return Solution(choice=choice, cost=solution_cost(problem, choice, roots), optimal=False,
                    status=status, solve_time=time.perf_counter() - started, info=info)


def greedy_dcf(problem: ExtractionProblem, roots: Iterable[int] | None = None, *,
               stop_at_roots: bool = True, validate: bool = True) -> Solution:
    """Greedy extraction with the default (tree) cost. ``info["tree_cost"]`` holds DCF's own estimate."""
    started = time.perf_counter()
    roots = list(problem.roots) if roots is None else [int(r) for r in roots]
    node_class, _, pending, parents, leaves = _structure(problem)
    cost = problem.node_cost.tolist()
    children = problem.node_children
    blacklisted = problem.blacklisted
    class_cost = [0.0] * problem.num_classes
    done = [False] * problem.num_classes
    choice: dict[int, int] = {}
    root_set = set(roots)
    left = len(root_set)
    heap = [(cost[n], n) for n in leaves]
    heapq.heapify(heap)
    while heap:
        value, n = heapq.heappop(heap)
        c = node_class[n]
        if done[c]:
            continue
        done[c] = True
        choice[c] = n
        class_cost[c] = value
        if c in root_set:
            left -= 1
            if left == 0 and stop_at_roots:
                break
        for p in parents[c]:
            pending[p] -= 1
            if pending[p] == 0 and not blacklisted[p] and not done[node_class[p]]:
                heapq.heappush(heap, (cost[p] + sum(class_cost[d] for d in children[p]), p))
    tree_cost = sum(class_cost[r] for r in set(roots) if done[r])
    return _finish(problem, roots, choice, "greedy-dcf", started, validate, {"tree_cost": tree_cost})


def greedy_ocf(problem: ExtractionProblem, roots: Iterable[int] | None = None, *,
               stop_at_roots: bool = True, validate: bool = True) -> Solution:
    """Greedy extraction with the sharing-aware cost: shared subgraphs are counted once."""
    started = time.perf_counter()
    roots = list(problem.roots) if roots is None else [int(r) for r in roots]
    node_class, distinct, pending, parents, leaves = _structure(problem)
    cost = problem.node_cost.tolist()
    blacklisted = problem.blacklisted
    n_classes = problem.num_classes
    class_cost = [0.0] * n_classes
    done = [False] * n_classes
    history: list[int | None] = [None] * n_classes
    # classes whose history is still needed: count of parent nodes in unfinalized classes
    holders = [len(parents[c]) for c in range(n_classes)]
    rank_weight = np.zeros(n_classes + 8, dtype=np.float64)  # + 8: bitsets are read in whole bytes
    rank_weight_list: list[float] = []
    choice: dict[int, int] = {}
    root_set = set(roots)
    left = len(root_set)

    def node_value(p: int) -> float:
        kids = distinct[p]
        if not kids:
            return cost[p]
        if len(kids) == 1:
            return cost[p] + class_cost[kids[0]]
        big = max(kids, key=class_cost.__getitem__)
        big_history = history[big]
        union = 0
        for d in kids:
            union |= history[d]
        extra = union & ~big_history
        if not extra:
            return cost[p] + class_cost[big]
        if extra.bit_count() <= _FEW_BITS:
            added = 0.0
            while extra:
                low = extra & -extra
                added += rank_weight_list[low.bit_length() - 1]
                extra ^= low
        else:
            size = (extra.bit_length() + 7) // 8
            bits = np.unpackbits(np.frombuffer(extra.to_bytes(size, "little"), dtype=np.uint8),
                                 bitorder="little")
            added = float(bits @ rank_weight[: len(bits)])
        return cost[p] + class_cost[big] + added

    heap = [(cost[n], n) for n in leaves]
    heapq.heapify(heap)
    while heap:
        value, n = heapq.heappop(heap)
        c = node_class[n]
        if done[c]:
            continue
        rank = len(rank_weight_list)
        union = 0
        for d in distinct[n]:
            union |= history[d]
        history[c] = union | (1 << rank)
        rank_weight[rank] = cost[n]
        rank_weight_list.append(cost[n])
        done[c] = True
        choice[c] = n
        class_cost[c] = value
        # every node of c is now moot: release the child histories it was holding
        for m in problem.class_nodes[c]:
            if blacklisted[m]:
                continue
            for d in distinct[m]:
                holders[d] -= 1
                if holders[d] == 0 and done[d]:
                    history[d] = None
        if holders[c] == 0:
            history[c] = None
        if c in root_set:
            left -= 1
            if left == 0 and stop_at_roots:
                break
        for p in parents[c]:
            pending[p] -= 1
            if pending[p] == 0 and not blacklisted[p] and not done[node_class[p]]:
                heapq.heappush(heap, (node_value(p), p))
    return _finish(problem, roots, choice, "greedy-ocf", started, validate, {})
