"""Extraction: choose one node per needed e-class, minimizing total cost, with no cycles.

Every extractor consumes an ``ExtractionProblem`` and returns a ``Solution``
(see problem.py). ``get_extractor(name, **options)`` gives one by name:

    greedy       bottom-up greedy, default (tree) cost; the baseline
    greedy-ocf   bottom-up greedy, sharing-aware cost (Hartmann et al. 2024)
    greedy-merge greedy-ocf, then group moves that let the pieces of a merged operator share it
    ilp-topo     TENSAT's ILP with topological-order variables
    ilp-acyc     He et al.'s ILP with acyclic constraints per class cycle
    maxsat       He et al.'s acyclic weighted partial MaxSAT

``Extractor.extract(problem)`` returns a Solution; given an e-graph instead,
it flattens it with ``egraph_problem(egraph, cost, [root])``, extracts, and
returns ``(build_graph(egraph, problem, choice), cost)``: a TensorGraph and its
cost (egraph_io.py; the e-graph itself only exposes its arrays);
``extract_graph`` returns the TensorGraph with the whole Solution; given a
whole-program cost (``CostModel.program_cost``) it also re-extracts with the
extra costs the extracted program reveals (element-wise ops that do not fuse
there) and keeps the program that is cheapest as a whole.
``ocf_cost(egraph, costs, root)`` and ``merge_cost(egraph, costs, root)``
are greedy-ocf's and greedy-merge's costs straight from the e-graph's arrays:
the MCTS rewards.
Every solution is validated (complete, acyclic, roots chosen, nothing
blacklisted) before it is returned; a violation raises ExtractionError.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Iterable

import numpy as np

from ..graph import TensorGraph
from .egraph_io import NodeCosts, build_graph, egraph_problem
from .greedy import greedy_dcf, greedy_ocf, ocf_cost
from .ilp import ilp_acyc, ilp_topo
from .maxsat import maxsat
from .merge_greedy import greedy_merge, merge_cost
from .problem import ExtractionProblem, Solution
from .validity import ExtractionError, InfeasibleError, reachable_classes, solution_cost, validate_solution

__all__ = [
    "ExtractionProblem", "Solution", "Extractor", "get_extractor", "EXTRACTORS", "solution_cost",
    "validate_solution", "reachable_classes", "ExtractionError", "InfeasibleError",
    "greedy_dcf", "greedy_ocf", "greedy_merge", "ilp_topo", "ilp_acyc", "maxsat",
    "NodeCosts", "egraph_problem", "build_graph", "ocf_cost", "merge_cost",
]


#: a whole program's cost and, per graph node, the seconds it costs beyond its per-node cost
ProgramCost = Callable[[TensorGraph], "tuple[float, dict[int, float]]"]
#: re-extractions with the program's extra costs (``Extractor.extract_graph``)
REFINE_ROUNDS = 2
#: ... tried only when those extra costs add up to more than this share of the program's cost
REFINE_MIN_SHARE = 1e-3


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
        return solution

    def extract(self, egraph_or_problem: Any, root: Any = None, cost: Any = None,
                time_limit: float | None = None):
        """A Solution for an ExtractionProblem (``root``: a class index or list overriding its roots);
        ``(TensorGraph, cost)`` for an e-graph (``cost``: a node cost callable or NodeCosts)."""
        if isinstance(egraph_or_problem, ExtractionProblem):
            if root is None:
                roots = None
            elif isinstance(root, (list, tuple)):
                roots = [int(r) for r in root]
            else:
                roots = [int(root)]
            return self.solve(egraph_or_problem, roots, time_limit)
        graph, solution = self.extract_graph(egraph_or_problem, root, cost, time_limit)
        return graph, solution.cost

    def extract_graph(self, egraph: Any, root: int, cost: Any, time_limit: float | None = None,
                      program_cost: ProgramCost | None = None,
                      rounds: int = REFINE_ROUNDS) -> tuple[TensorGraph, Solution]:
        """The program extracted from ``egraph`` at class ``root`` and the Solution it came from.

        ``program_cost(graph) -> (seconds, {graph node: extra seconds})``: the whole program's
        cost and what it costs beyond its nodes' per-node costs, charged to the nodes that cause
        it (``CostModel.program_cost``: the node that keeps an element-wise op from fusing). With
        it, up to ``rounds`` times, the e-nodes those graph nodes came from get that extra cost and
        the problem is solved again; the program cheapest by ``program_cost`` is returned (its
        Solution's cost is still the per-node one). The Solution's ``info["enodes"]`` lists the
        e-graph node ids the program was built from."""
        if root is None or cost is None:
            raise ValueError("extracting from an e-graph needs its root class and a node cost")
        problem = egraph_problem(egraph, cost, [root])
        solution = self.solve(problem, None, time_limit)
        origin: dict[int, list[int]] = {}
        graph = _built(egraph, problem, solution, origin)
        if program_cost is None or rounds <= 0:
            return graph, solution
        best_cost, extra = program_cost(graph)
        best = (graph, solution)
        penalty = np.zeros(len(problem.node_cost))
        for _ in range(rounds):
            grew = False
            for nid, seconds in extra.items():
                for n in origin.get(nid, ()):
                    if seconds > penalty[n] * (1 + 1e-9):
                        penalty[n] = seconds
                        grew = True
            if not grew or sum(extra.values()) <= REFINE_MIN_SHARE * best_cost:
                break  # nothing new the per-node costs missed, or too little to matter
            penalized = replace(problem, node_cost=problem.node_cost + penalty)
            sol = self.solve(penalized, None, time_limit)
            origin = {}
            graph = _built(egraph, penalized, sol, origin)
            c, extra = program_cost(graph)
            if c < best_cost * (1 - 1e-9):
                # per-node cost and bound of the unpenalized problem: the first solve's bound still holds;
                # the program is cheaper as a whole, not proven per node
                refined = replace(sol, cost=solution_cost(problem, sol.choice), optimal=False,
                                  bound=solution.bound, status=f"{sol.status}, fusion-refined",
                                  solve_time=solution.solve_time + sol.solve_time)
                best_cost, best = c, (graph, refined)
        return best


def _built(egraph: Any, problem: ExtractionProblem, solution: Solution,
           origin: dict[int, list[int]]) -> TensorGraph:
    """``build_graph`` of ``solution`` (``origin`` filled), noting in ``solution.info["enodes"]`` the
    e-graph node ids the program was built from (what ``EGraph.node_origin`` tells the rules of)."""
    graph = build_graph(egraph, problem, solution.choice, origin=origin)
    solution.info["enodes"] = sorted({problem.node_key[n] for ns in origin.values() for n in ns})
    return graph


EXTRACTORS: dict[str, tuple[Callable[..., Solution], bool, bool]] = {
    # name: (function, exact, takes a time limit)
    "greedy": (greedy_dcf, False, False),
    "greedy-ocf": (greedy_ocf, False, False),
    "greedy-merge": (greedy_merge, False, False),
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
