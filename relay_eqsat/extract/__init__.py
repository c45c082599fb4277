"""Extraction: choose one node per needed e-class, minimizing total cost, with no cycles.

Every extractor consumes an ``ExtractionProblem`` and returns a ``Solution``
(see problem.py). ``get_extractor(name, **options)`` gives one by name:

    greedy       bottom-up greedy, default (tree) cost; the baseline
    greedy-ocf   bottom-up greedy, sharing-aware cost (Hartmann et al. 2024)
    ilp-topo     TENSAT's ILP with topological-order variables
    ilp-acyc     He et al.'s ILP with acyclic constraints per class cycle
    maxsat       He et al.'s acyclic weighted partial MaxSAT

``Extractor.extract(problem)`` returns a Solution; given an e-graph instead,
it flattens it with ``egraph.to_problem(cost, [root])``, extracts, and returns
``(egraph.build_graph(choice, root_index, problem), cost)``: a TensorGraph
and its cost.
Every solution is validated (complete, acyclic, roots chosen, nothing
blacklisted) before it is returned; a violation raises ExtractionError.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

from .greedy import greedy_dcf, greedy_ocf
from .ilp import ilp_acyc, ilp_topo
from .maxsat import maxsat
from .problem import ExtractionProblem, Solution
from .validate import (ExtractionError, InfeasibleError, reachable_classes, solution_cost,
                       validate_solution)

__all__ = [
    "ExtractionProblem", "Solution", "Extractor", "get_extractor", "EXTRACTORS", "solution_cost",
    "validate_solution", "reachable_classes", "ExtractionError", "InfeasibleError",
    "greedy_dcf", "greedy_ocf", "ilp_topo", "ilp_acyc", "maxsat",
]


class Extractor:
    """One extraction method with fixed options.

    ``solve(problem, roots, time_limit)`` does the work; ``extract`` adds the
    e-graph round trip. ``exact`` says whether the method can prove optimality.
    """

    name = "extractor"
    exact = False

    def __init__(self, function: Callable[..., Solution], name: str, exact: bool, takes_time_limit: bool,
                 **options: Any) -> None:
        self._function = function
        self.name = name
        self.exact = exact
        self._takes_time_limit = takes_time_limit
        self.options = options
        self.last_solution: Solution | None = None

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"Extractor({self.name!r}{', ' + opts if opts else ''})"

    def solve(self, problem: ExtractionProblem, roots: Iterable[int] | None = None,
              time_limit: float | None = None) -> Solution:
        kwargs = dict(self.options)
        if self._takes_time_limit:
            kwargs["time_limit"] = time_limit
        solution = self._function(problem, roots, **kwargs)
        validate_solution(problem, solution.choice, problem.roots if roots is None else roots)
        self.last_solution = solution
        return solution

    def extract(self, egraph_or_problem: Any, root: Any = None, cost: Any = None,
                time_limit: float | None = None):
        """A Solution for an ExtractionProblem (``root``: a class index or list overriding its roots);
        ``(TensorGraph, cost)`` for an e-graph."""
        if isinstance(egraph_or_problem, ExtractionProblem):
            if root is None:
                roots = None
            elif isinstance(root, (list, tuple)):
                roots = [int(r) for r in root]
            else:
                roots = [int(root)]
            return self.solve(egraph_or_problem, roots, time_limit)
        egraph = egraph_or_problem
        if root is None or cost is None:
            raise ValueError("extracting from an e-graph needs its root class and a node cost")
        problem = egraph.to_problem(cost, [root])
        solution = self.solve(problem, None, time_limit)
        return egraph.build_graph(solution.choice, problem.roots[0], problem), solution.cost


EXTRACTORS: dict[str, tuple[Callable[..., Solution], bool, bool]] = {
    # name: (function, exact, takes a time limit)
    "greedy": (greedy_dcf, False, False),
    "greedy-ocf": (greedy_ocf, False, False),
    "ilp-topo": (ilp_topo, True, True),
    "ilp-acyc": (ilp_acyc, True, True),
    "maxsat": (maxsat, True, True),
}


def get_extractor(name: str, **options: Any) -> Extractor:
    """The extractor called ``name`` with keyword options for its function (e.g. solver="scip")."""
    try:
        function, exact, takes_time_limit = EXTRACTORS[name]
    except KeyError:
        raise ValueError(f"unknown extractor {name!r}; choose from {sorted(EXTRACTORS)}") from None
    return Extractor(function, name, exact, takes_time_limit, **options)
