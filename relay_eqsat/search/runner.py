"""The Runner: the loop that grows an e-graph, owning its limits, stop reason and report (egg's ``Runner``).

``Runner(limits).run(egraph, rules, scheduler, cost) -> SearchReport``. Each
iteration the runner checks the limits (:meth:`Limits.exceeded`, the one
check), asks the scheduler which rules to apply (or why to stop), runs one
rewrite :meth:`~Runner.step` with them and lets the scheduler judge the step.
The step is shared by every scheduler, MCTS's simulations on cloned e-graphs
included: search each canonical pattern once, pre-filter matches that would
close a cycle, apply them up to the node limit, rebuild, resolve the cycles
left (TENSAT, Yang et al., MLSys 2021, §4 and Algorithm 2). A run shows its
e-graph's size against the node limit on a progress bar (:mod:`relay_eqsat.progress`).
"""
from __future__ import annotations

import gc
import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

from .. import progress
from ..egraph import origin_id
from relay_eqsat.rewrite import Matcher, Rule, apply_matches, apply_search_matches, flat_join
from .base import Limits, SearchReport, StopReason

if TYPE_CHECKING:
    from .scheduler import Scheduler

log = logging.getLogger(__name__)

#: the saturation bar: e-nodes against the node limit, the iteration, the time
BAR_FORMAT = "{desc}: {n}/{total} e-nodes |{bar}| {postfix} [{elapsed}]"


@dataclass
class Step:
    """What one rewrite step did.

    changed  the e-graph changed (new nodes or merges)
    stop     why the run should stop after it, if a reason applies: a
             ``StopReason`` string (node limit reached, or a limit cut the
             step short; saturated: nothing changed), else None
    fired    rule name -> applications that changed the e-graph
    """

    changed: bool
    stop: str | None
    fired: dict[str, int] = field(default_factory=dict)


@contextmanager
def gc_paused():
    """Python's cyclic garbage collector off for the block (its state restored after).

    Growing an e-graph allocates many short-lived tuples (matches, keys) and no
    cycles worth collecting meanwhile; with a large heap (TVM loaded) the
    collector's automatic passes took a fifth of a run's time."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class Runner:
    """Grows e-graphs within ``limits``; the clock starts at construction and at each :meth:`run`."""

    def __init__(self, limits: Limits | None = None):
        self.limits = limits or Limits()
        self.start = time.perf_counter()

    @property
    def deadline(self) -> float:
        """``time.perf_counter()`` value at which the time limit is reached."""
        return self.start + self.limits.time_limit

    def exceeded(self, egraph=None, iteration: int | None = None) -> str | None:
        """:meth:`Limits.exceeded` with the time since the start (the time limit is always checked)."""
        return self.limits.exceeded(egraph, iteration, time.perf_counter() - self.start)

    def run(self, egraph, rules: Sequence[Rule], scheduler: Scheduler, cost=None) -> SearchReport:
        """Grow ``egraph`` with ``rules`` as ``scheduler`` chooses until a limit,
        saturation or the scheduler stops it. ``cost`` (the e-graph's node-cost
        callable) is for schedulers that steer by cost (MCTS)."""
        with gc_paused():
            return self._run(egraph, rules, scheduler, cost)

    def _run(self, egraph, rules: Sequence[Rule], scheduler: Scheduler, cost) -> SearchReport:
        rules = list(rules)
        rep = SearchReport(fired={r.name: 0 for r in rules})
        self.start = time.perf_counter()
        egraph.rebuild()
        rep.nodes_before, rep.classes_before = egraph.num_nodes, egraph.num_classes
        matcher = scheduler.matcher(rules)
        scheduler.start(self, egraph, rules, cost)
        iteration = 0
        with progress.bar(total=self.limits.node_limit, desc="saturating", unit="node",
                          initial=egraph.num_nodes, bar_format=BAR_FORMAT) as bar:
            while True:
                stop = self.exceeded(egraph, iteration if scheduler.iteration_limited else None)
                if stop is None:
                    chosen = scheduler.next_rules(self, egraph, rules, iteration)
                    if isinstance(chosen, str):
                        stop = chosen
                if stop is not None:
                    break
                step = self.step(egraph, matcher, chosen, rep, scheduler.disjoint)
                iteration += 1
                rep.iterations = iteration
                rep.sizes.append((egraph.num_classes, egraph.num_nodes))
                bar.set_postfix_str(f"iteration {iteration}, {egraph.num_classes} classes", refresh=False)
                bar.update(min(egraph.num_nodes, self.limits.node_limit) - bar.n)
                log.debug("iteration %d: %d e-nodes, %d e-classes, %d rule applications, %.2f s", iteration,
                          egraph.num_nodes, egraph.num_classes, sum(step.fired.values()),
                          time.perf_counter() - self.start)
                stop = scheduler.after_step(self, egraph, step, rep)
                if stop is not None:
                    break
        rep.stop_reason = stop
        scheduler.finish(self, egraph, rep)
        rep.nodes_after, rep.classes_after = egraph.num_nodes, egraph.num_classes
        rep.total_time = time.perf_counter() - self.start
        return rep

    def step(self, egraph, matcher: Matcher, rules: Sequence[Rule], stats: SearchReport,
             disjoint: bool = False) -> Step:
        """One rewrite step with ``rules`` (one iteration of the e-graph's
        ``iteration`` counter): search each canonical pattern once, apply every
        match (cycle pre-filter, node limit), rebuild, resolve remaining cycles.

        ``disjoint``: a multi-pattern rule whose matches would not all fit
        under the node limit (matches times its right side's nodes above the
        room left) applies only matches that overlap no earlier application of
        it in this step (no root class shared; see ``apply_matches``); the next
        step applies the next such set. Every pairing of the parallel operators
        on one input is a match of a merge rule (NasRNN's gates: 308 of
        ``dense-merge``), and applying them all fills a small node limit with
        alternatives of which a program can use one; applied disjointly, the
        merges of merges fit (``Scheduler.disjoint``).

        The limits are checked before each rule; times, ``blacklisted`` and
        ``filtered`` are added to ``stats``.
        """
        limits = self.limits
        egraph.iteration += 1
        fp_nodes, fp_classes = egraph.num_nodes, egraph.num_classes

        # search (each canonical pattern once)
        ts = time.perf_counter()
        keys = {k for r in rules for k in matcher.rule_keys[r.name]}
        found = matcher.search(egraph, keys)
        stats.search_time += time.perf_counter() - ts

        # pre-filter: the descendants map is the e-graph at the start of the
        # iteration, taken just before the first application (nothing has changed
        # before it), and not at all when no rule matches
        check = None
        counter = [0]
        dmap = None
        if limits.cycle_filter == "vanilla":
            def check(v, r, reachable=egraph.reachable):
                bad = reachable(v, r)
                counter[0] += bad
                return bad

        # apply
        ta = time.perf_counter()
        changed = False
        interrupted = None
        fired: dict[str, int] = {}
        for r in rules:
            interrupted = self.exceeded(egraph)
            if interrupted is not None:
                break
            keys = matcher.rule_keys[r.name]
            if not all(found[k] for k in keys):
                continue  # a source pattern without matches: the join is empty
            flat = r.flat_layout is not None
            if flat:
                envs = flat_join(r, [found[k] for k in keys], limits.match_limit)
            else:
                envs = matcher.matches(r, found)
                if limits.match_limit is not None:
                    envs = envs[:limits.match_limit]
            if not envs:
                continue
            overlap = disjoint and r.multi and len(envs) * r.new_nodes > limits.node_limit - egraph.num_nodes
            if limits.cycle_filter == "efficient" and dmap is None:
                tf = time.perf_counter()
                dmap = egraph.descendants_map()

                def check(v, r, reaches=dmap.reaches):
                    bad = reaches(v, r)
                    counter[0] += bad
                    return bad
                stats.filter_time += time.perf_counter() - tf
            egraph.origin = origin_id(r.name)  # the nodes this application adds are the rule's
            try:
                if flat:
                    cycle = dmap if limits.cycle_filter == "efficient" else (
                        egraph.reachable if limits.cycle_filter == "vanilla" else None)
                    n, filtered = apply_search_matches(egraph, r, None, cycle, limits.node_limit, joined=envs,
                                                       disjoint=overlap)
                    counter[0] += filtered
                else:
                    n = apply_matches(egraph, r, envs, check, limits.node_limit, overlap)
            finally:
                egraph.origin = -1
            fired[r.name] = fired.get(r.name, 0) + n
            changed = changed or n > 0
        stats.apply_time += time.perf_counter() - ta
        stats.filtered += counter[0]

        tr = time.perf_counter()
        egraph.rebuild()
        stats.rebuild_time += time.perf_counter() - tr

        if limits.cycle_filter != "none":
            tf = time.perf_counter()
            stats.blacklisted += len(egraph.resolve_cycles())
            stats.filter_time += time.perf_counter() - tf
        changed = changed and (egraph.num_nodes != fp_nodes or egraph.num_classes != fp_classes)
        stop = limits.exceeded(egraph) or interrupted
        if stop is None and not changed:
            stop = StopReason.SATURATED
        return Step(changed, stop, fired)
