"""What makes an extraction valid, and what it costs.

A choice maps class -> node. It is valid for a set of roots when every class
the roots reach through chosen nodes has a chosen node that lives in that
class, is not blacklisted, and the chosen nodes form no cycle. Its cost is the
cost of that DAG: every reached class counted once, however many parents share
it.
"""
from __future__ import annotations

from typing import Iterable, Mapping

from .problem import ExtractionProblem


class ExtractionError(RuntimeError):
    """An extractor produced an invalid choice (incomplete, cyclic, blacklisted): a bug."""


class InfeasibleError(ValueError):
    """No acyclic extraction exists: some root cannot be built from non-blacklisted nodes."""


def _roots(problem: ExtractionProblem, roots: Iterable[int] | None) -> list[int]:
    return list(problem.roots) if roots is None else [int(r) for r in roots]


def reachable_classes(problem: ExtractionProblem, choice: Mapping[int, int],
                      roots: Iterable[int] | None = None) -> list[int]:
    """Classes reached from the roots through chosen nodes, in depth-first preorder.

    Raises ExtractionError when a reached class has no chosen node.
    """
    children = problem.node_children
    seen: set[int] = set()
    order: list[int] = []
    stack = _roots(problem, roots)
    while stack:
        c = stack.pop()
        if c in seen:
            continue
        seen.add(c)
        order.append(c)
        n = choice.get(c)
        if n is None:
            raise ExtractionError(f"incomplete extraction: class {c} is needed but has no chosen node")
        stack.extend(children[n])
    return order


def solution_cost(problem: ExtractionProblem, choice: Mapping[int, int],
                  roots: Iterable[int] | None = None) -> float:
    """Cost of the DAG the roots reach through ``choice``; a shared class is counted once."""
    cost = problem.node_cost
    return float(sum(cost[choice[c]] for c in reachable_classes(problem, choice, roots)))


def validate_solution(problem: ExtractionProblem, choice: Mapping[int, int],
                      roots: Iterable[int] | None = None) -> None:
    """Raise ExtractionError unless ``choice`` is a complete, acyclic, allowed extraction of the roots."""
    from .cycles import find_cycle_in_choice

    roots = _roots(problem, roots)
    if not roots:
        raise ExtractionError("no root classes to extract")
    for c in reachable_classes(problem, choice, roots):
        n = choice[c]
        if not 0 <= n < problem.num_nodes or problem.node_class[n] != c:
            raise ExtractionError(f"class {c} chose node {n}, which is not one of its nodes")
        if problem.blacklisted[n]:
            raise ExtractionError(f"class {c} chose blacklisted node {n}")
    cycle = find_cycle_in_choice(problem, choice, roots)
    if cycle is not None:
        raise ExtractionError(f"extraction contains the cycle of classes {cycle}")
