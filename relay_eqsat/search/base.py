"""What every scheduler shares: limits, the report, and the ``Scheduler`` seam.

A scheduler grows an e-graph by applying rewrite rules until it saturates or
a limit stops it (egg's ``Runner``): ``Scheduler.run(egraph, rules, limits,
cost) -> SearchReport``. ``cost`` is optional; schedulers that steer by cost
(MCTS) use it, TENSAT's does not.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence


@dataclass
class Limits:
    """When to stop growing the e-graph.

    node_limit   stop once the e-graph has this many e-nodes (TENSAT: 50,000)
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
    """

    node_limit: int = 50_000
    iter_limit: int = 15
    time_limit: float = 60.0
    k_multi: int = 1
    cycle_filter: str = "efficient"
    match_limit: int | None = 20_000

    def __post_init__(self) -> None:
        if self.cycle_filter not in ("efficient", "vanilla", "none"):
            raise ValueError(f"cycle_filter must be efficient, vanilla or none, not {self.cycle_filter!r}")
        if self.match_limit is not None and self.match_limit <= 0:
            raise ValueError("match_limit must be positive (or None)")
        if self.node_limit <= 0 or self.iter_limit < 0 or self.time_limit <= 0 or self.k_multi < 0:
            raise ValueError("limits must be positive (k_multi and iter_limit may be 0)")


@dataclass
class SearchReport:
    """What a scheduler did.

    stop_reason   "saturated" | "node_limit" | "iter_limit" | "time_limit"
    iterations    iterations run (an iteration stopped by a limit counts)
    fired         rule name -> applications that changed the e-graph
    sizes         per iteration: (e-classes, e-nodes) after it
    nodes_before, nodes_after, classes_before, classes_after
    blacklisted   nodes put on the filter list by cycle filtering
    filtered      matches the cycle pre-filter (or vanilla check) rejected
    search_time, apply_time, rebuild_time, filter_time, total_time  seconds
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


class Scheduler:
    """Grows an e-graph with rules within limits (subclasses: TensatScheduler, MCTS)."""

    name = "scheduler"

    def run(self, egraph, rules: Sequence, limits: Limits | None = None, cost=None) -> SearchReport:
        raise NotImplementedError
