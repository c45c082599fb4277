"""The warm start every exact extractor (ILP-Topo, ILP-ACyc, MaxSAT) starts from: the merge-aware
greedy's program (:data:`WARM`), the solver's hint, and the result whenever the solver's own is
dearer in real costs (:func:`dearer_than_warm`) or none is found in the time limit
(:func:`warm_solution`)."""
from __future__ import annotations

import time


from .merge_greedy import greedy_merge
from .presolve import Reduced, reduce_problem
from .problem import ExtractionProblem, Solution


#: the greedy extractor every exact one starts from (its solution is the hint, and the result when
#: the solver has nothing better in the time limit)
WARM = "greedy-merge"


#: a solver's solution counts as dearer than the warm start's when its real cost is higher by more than
#: this share (float sums of equal costs in another order differ in the last digits)
WARM_TIE = 1e-12


def dearer_than_warm(cost: float, warm: Solution) -> bool:
    """Whether a solver's solution of real cost ``cost`` is dearer than the warm start: also when
    the solver calls it optimal, which it is for its rounded integer weights (CP-SAT) or within its
    relative gap (SCIP), not always in real costs (SqueezeNet's 2,000-e-node e-graph: 1.1e-6 dearer
    than greedy-merge's)."""
    return warm.cost < cost - WARM_TIE * abs(cost)


def warm_solution(warm: Solution, status: str, bound: float | None, **fields) -> Solution:
    """The warm start as the result (not optimal), with the solver's lower ``bound`` (None: none)
    capped by its cost and ``fields`` (solve_time, encode_time, info)."""
    return Solution(choice=warm.choice, cost=warm.cost, optimal=False, status=status,
                    bound=None if bound is None else min(bound, warm.cost), **fields)


def prepare(problem, roots):
    """What every exact extractor starts from: (start time, roots, the reduced problem,
    the warm start: the merge-aware greedy's solution, never dearer than OCF greedy's)."""
    started = time.perf_counter()
    roots = list(problem.roots) if roots is None else [int(r) for r in roots]
    red = reduce_problem(problem, roots)
    warm = greedy_merge(problem, roots)
    return started, roots, red, warm


def warm_nodes(problem: ExtractionProblem, red: Reduced, warm: Solution) -> set[int]:
    """The warm start's chosen nodes, each dominated one (no variable, see presolve.undominated)
    replaced by a node of its class that dominates it, so the hint is a complete solution."""
    cost = problem.node_cost
    chosen = set()
    for c, n in warm.choice.items():
        nodes = red.class_nodes.get(c)
        if nodes is None or n in red.child_sets:
            chosen.add(n)
            continue
        mine = set(problem.node_children[n])
        chosen.add(min((m for m in nodes if cost[m] <= cost[n] and set(red.child_sets[m]) <= mine),
                       key=lambda m: (cost[m], m), default=n))
    return chosen
