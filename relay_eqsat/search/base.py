"""The contract of a search run: its limits (checked in one place), why it stopped, and its report.

``Limits`` take their defaults from, and are validated by, the options schema
(``relay_eqsat.options``); :meth:`Limits.exceeded` is the one check of the
node, iteration and time limits (the ``Runner`` calls it between iterations
and between rule applications; MCTS on its tree's e-graphs). A run's
``SearchReport.stop_reason`` is one of the :class:`StopReason` strings.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..options import DEFAULTS, validate

#: the fields of :class:`Limits` that are options of the schema
LIMIT_OPTIONS = ("node_limit", "iter_limit", "time_limit", "k_multi", "cycle_filter")


class StopReason:
    """Why a run stopped (the strings reports and the CLI show)."""

    SATURATED = "saturated"    # an iteration changed nothing (MCTS: no rule changes the e-graph)
    NODE_LIMIT = "node_limit"
    ITER_LIMIT = "iter_limit"
    TIME_LIMIT = "time_limit"
    STEP_LIMIT = "step_limit"  # MCTS: MCTSOptions.max_steps rules applied
    NO_GAIN = "no_gain"        # MCTS: MCTSOptions.patience rules in a row with nothing cheaper found below them


@dataclass
class Limits:
    """When to stop growing the e-graph.

    node_limit   stop once the e-graph has this many e-nodes
    iter_limit   at most this many iterations (TENSAT: 15)
    time_limit   seconds (wall clock), checked between rule applications
    k_multi      multi-pattern rules run only in the first k_multi iterations (TENSAT: 1)
    cycle_filter "efficient" (TENSAT's descendants-map pre-filter plus the
                 post-processing DFS), "vanilla" (a reachability check per
                 match, plus the DFS) or "none" (the e-graph may keep cycles;
                 only an acyclicity-aware extractor can handle it)
    match_limit  at most this many matches of one rule per step (the first
                 ones, in match order; None: all). A multi-pattern rule's join
                 grows with the product of its sources' matches (three dense
                 over one input that already has dozens after merges of
                 merges: millions of combinations), so an unbounded join can
                 take seconds per step for nothing the node limit would admit.

    Defaults and checks of the first five are the options schema's
    (``relay_eqsat.options``); ValueError at construction for a bad value.
    """

    node_limit: int = DEFAULTS["node_limit"]
    iter_limit: int = DEFAULTS["iter_limit"]
    time_limit: float = DEFAULTS["time_limit"]
    k_multi: int = DEFAULTS["k_multi"]
    cycle_filter: str = DEFAULTS["cycle_filter"]
    match_limit: int | None = 20_000

    def __post_init__(self) -> None:
        for name, value in validate({n: getattr(self, n) for n in LIMIT_OPTIONS}, "limit").items():
            setattr(self, name, value)
        if self.match_limit is not None and self.match_limit <= 0:
            raise ValueError("match_limit must be positive (or None)")

    def exceeded(self, egraph=None, iteration: int | None = None, elapsed: float | None = None) -> str | None:
        """The limit reached, checked in this order: ``iteration`` (iterations
        done) against iter_limit, ``egraph``'s e-nodes against node_limit,
        ``elapsed`` seconds against time_limit; each only when given. None
        when none is reached."""
        if iteration is not None and iteration >= self.iter_limit:
            return StopReason.ITER_LIMIT
        if egraph is not None and egraph.num_nodes >= self.node_limit:
            return StopReason.NODE_LIMIT
        if elapsed is not None and elapsed >= self.time_limit:
            return StopReason.TIME_LIMIT
        return None


@dataclass
class SearchReport:
    """What a run did.

    stop_reason   a :class:`StopReason` string
    iterations    iterations run (an iteration stopped by a limit counts; MCTS: rules applied)
    fired         rule name -> applications that changed the e-graph (MCTS: times the rule was chosen)
    sizes         per iteration: (e-classes, e-nodes) after it
    nodes_before, nodes_after, classes_before, classes_after
    blacklisted   nodes put on the filter list by cycle filtering
    filtered      matches the cycle pre-filter (or vanilla check) rejected
    search_time, apply_time, rebuild_time, filter_time, total_time  seconds
    info          what a scheduler adds (MCTS: its counters, costs and the rules applied)
    """

    stop_reason: str = ""
    iterations: int = 0
    fired: dict[str, int] = field(default_factory=dict)
    sizes: list[tuple[int, int]] = field(default_factory=list)
    nodes_before: int = 0
    nodes_after: int = 0
    classes_before: int = 0
    classes_after: int = 0
    blacklisted: int = 0
    filtered: int = 0
    search_time: float = 0.0
    apply_time: float = 0.0
    rebuild_time: float = 0.0
    filter_time: float = 0.0
    total_time: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def nodes_added(self) -> int:
        return self.nodes_after - self.nodes_before

    def summary(self) -> str:
        top = sorted(self.fired.items(), key=lambda kv: -kv[1])[:8]
        return (f"{self.stop_reason} after {self.iterations} iterations: "
                f"{self.nodes_before} -> {self.nodes_after} e-nodes, {self.classes_after} e-classes, "
                f"{self.blacklisted} blacklisted, {self.total_time:.3f}s; top rules {top}")
