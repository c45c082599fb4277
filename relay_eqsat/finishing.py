"""Finishing an extracted program: a second, small equality saturation with the rules of phase
``finish`` (and ``both``) alone, on an e-graph of the program the search's extraction chose.

Some clean-ups are chains longer than the search's iterations reach, and would copy every variant
the search's algebra makes: a reshape moved below a transformer FFN's bias + GELU takes eight
steps (bias, divide, erf, add, multiply, multiply, then the two reshapes meeting and going), while
commutativity and associativity fill the search's e-graph to its node limit in six (bert-base,
10,000 e-nodes). On the extracted program alone, with those rules alone, the chain saturates in
milliseconds and the extractor (the search's final one, over the same cost function) picks the
finished form where it is cheaper. The program is returned unchanged otherwise.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from .egraph import EGraph
from .graph import TensorGraph
from .search import Limits, get_scheduler

log = logging.getLogger(__name__)

#: the finishing e-graph's node limit, as a multiple of the program's nodes (at least FINISH_MIN_NODES)
FINISH_GROWTH = 4
FINISH_MIN_NODES = 1000
FINISH_ITERATIONS = 64


@dataclass
class Finished:
    """What finishing did: the program (the input one, unless ``changed``), the finishing e-graph
    and the e-nodes of the program extracted from it (``egraph.node_origin`` names the rule that
    added each), and the finishing search's stop reason."""

    graph: TensorGraph
    changed: bool = False
    egraph: Any = None
    enodes: Sequence[int] = ()
    stop_reason: str = ""


def finishing_rules(rules: Sequence) -> list:
    """The rules of the finishing phase (``phase finish`` or ``both``)."""
    return [r for r in rules if r.phase in ("finish", "both")]


def search_rules(rules: Sequence) -> list:
    """The rules of the e-graph search (``phase search``, the default, or ``both``)."""
    return [r for r in rules if r.phase in ("search", "both")]


def finish(graph: TensorGraph, rules: Sequence, node_cost: Callable, extractor, graph_cost: Callable,
           time_limit: float, cycle_filter: str = "efficient", program_cost: Callable | None = None) -> Finished:
    """``graph`` finished with ``rules`` (TENSAT's scheduler to saturation, within
    ``FINISH_GROWTH`` times its nodes, ``FINISH_ITERATIONS`` iterations and ``time_limit``
    seconds), then extracted by ``extractor`` over ``node_cost``; the result where
    ``graph_cost`` prices it below ``graph``, else ``graph`` itself."""
    if not rules or time_limit <= 0:
        return Finished(graph)
    egraph = EGraph()
    root = egraph.add_graph(graph)
    limits = Limits(node_limit=max(FINISH_GROWTH * len(graph), FINISH_MIN_NODES), iter_limit=FINISH_ITERATIONS,
                    time_limit=time_limit, k_multi=0, cycle_filter=cycle_filter)
    srep = get_scheduler("tensat").run(egraph, rules, limits, node_cost)
    if not srep.nodes_added:
        return Finished(graph, stop_reason=srep.stop_reason)
    out, solution = extractor.extract_graph(egraph, root, node_cost, time_limit, program_cost=program_cost)
    out = out.compact()
    if graph_cost(out) >= graph_cost(graph) * (1 - 1e-9):
        return Finished(graph, stop_reason=srep.stop_reason)
    log.debug("finishing: %s", srep.summary())
    return Finished(out, True, egraph, tuple(solution.info.get("enodes", ())), srep.stop_reason)
