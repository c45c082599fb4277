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

OCF runs in Cython (ocf.pyx) on CSR arrays, for an ExtractionProblem
(``greedy_ocf``) and directly on an e-graph's arrays (``ocf_cost``, the MCTS
reward: the same result without building the problem). A class's history is
a bitset over finalization ranks, dropped once every node that has it as a
child belongs to a finalized class, so memory follows the frontier of the
graph, not its square. A node's cost is its largest child's cost plus the
weights of the classes the other children add.
"""
from __future__ import annotations

import heapq
import time
from typing import Any, Iterable

import numpy as np

from .egraph_io import NodeCost, NodeCosts, class_indices, node_costs
from .ocf import dag_cost, ocf_choice
from .problem import ExtractionProblem, Solution
from .validity import InfeasibleError, reachable_classes, solution_cost, validate_solution


def _structure(problem: ExtractionProblem):
    """Per node: its class and number of distinct child classes; per class: the allowed nodes
    having it as a child; the allowed nodes without children."""
    node_class = problem.node_class.tolist()
    blacklisted = problem.blacklisted
    pending = [0] * problem.num_nodes
    parents: list[list[int]] = [[] for _ in range(problem.num_classes)]
    leaves: list[int] = []
    for n, children in enumerate(problem.node_children):
        kids = tuple(set(children)) if len(children) > 1 else tuple(children)
        if blacklisted[n]:
            continue
        pending[n] = len(kids)
        if not kids:
            leaves.append(n)
        for d in kids:
            parents[d].append(n)
    return node_class, pending, parents, leaves


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
    node_class, pending, parents, leaves = _structure(problem)
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
    start, flat = problem.children_csr()
    chosen = ocf_choice(np.ascontiguousarray(problem.node_class, dtype=np.int32), start, flat,
                        np.ascontiguousarray(problem.node_cost, dtype=np.float64),
                        np.ascontiguousarray(problem.blacklisted).view(np.uint8), problem.num_classes,
                        roots, stop_at_roots)
    choice = {c: n for c, n in enumerate(chosen.tolist()) if n >= 0}
    return _finish(problem, roots, choice, "greedy-ocf", started, validate, {})


def ocf_cost(egraph: Any, node_cost: NodeCost | NodeCosts, root: int) -> float:
    """Cost of the sharing-aware greedy extraction of e-graph class ``root``: ``greedy_ocf``'s cost
    on ``egraph_problem(egraph, node_cost, [root])``, computed on the e-graph's arrays without
    building the problem. The fast reward for MCTS: pass one NodeCosts to every call so each
    node key is costed once. Raises InfeasibleError when ``root`` cannot be extracted without
    blacklisted nodes."""
    arrays = egraph.arrays()
    (r,) = class_indices(arrays, [root])
    cost = node_costs(node_cost).of(arrays)
    chosen = ocf_choice(arrays.node_class, arrays.child_start, arrays.children, cost,
                        arrays.node_black.view(np.uint8), arrays.num_classes, (r,), True)
    if chosen[r] < 0:
        raise InfeasibleError(f"root class {int(arrays.class_id[r])} has no acyclic extraction that avoids "
                              "the blacklisted nodes")
    return dag_cost(chosen, arrays.child_start, arrays.children, cost, (r,))
