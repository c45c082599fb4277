"""TENSAT's exploration phase (Yang et al., MLSys 2021, §4 and Algorithm 2).

Each iteration searches every rule's source patterns (each canonical pattern
once), applies every match, rebuilds, and resolves cycles. Multi-pattern
rules run only in the first ``k_multi`` iterations. With the efficient cycle
filter, a descendants map taken at the start of the iteration rejects matches
that would close a cycle (sound, not complete), and a DFS at the end of the
iteration blacklists the newest node of every remaining cycle until none is
left; with the vanilla filter every match is checked against the current
e-graph instead. The run stops on saturation (an iteration that changes
nothing), the node limit, the iteration limit or the time limit.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

from ..rules import Matcher, Rule, _flat_join, apply_matches, apply_search_matches
from .base import Limits, Scheduler, SearchReport


@dataclass
class StepResult:
    """What one rewrite step did (see `rewrite_step`)."""

    changed: bool
    hit_limit: bool
    timed_out: bool


def rewrite_step(egraph, matcher: Matcher, active: Sequence[Rule], limits: Limits,
                 deadline: float, rep: SearchReport) -> StepResult:
    """One TENSAT iteration with the rules ``active``: search each canonical pattern
    once, apply every match (cycle pre-filter), rebuild, resolve remaining cycles.

    Statistics are added to ``rep``. MCTS calls it with a single rule per step.
    """
    fp_nodes, fp_classes = egraph.num_nodes, egraph.num_classes

    # search (each canonical pattern once)
    ts = time.perf_counter()
    keys = {k for r in active for k in matcher.rule_keys[r.name]}
    found = matcher.search(egraph, keys)
    rep.search_time += time.perf_counter() - ts

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
    changed = hit_limit = timed_out = False
    for r in active:
        if egraph.num_nodes >= limits.node_limit:
            hit_limit = True
            break
        if time.perf_counter() >= deadline:
            timed_out = True
            break
        keys = matcher.rule_keys[r.name]
        if not all(found[k] for k in keys):
            continue  # a source pattern without matches: the join is empty
        flat = r._flat is not None
        if flat:
            envs = _flat_join(r, [found[k] for k in keys], limits.match_limit)
        else:
            envs = matcher.matches(r, found)
            if limits.match_limit is not None:
                envs = envs[:limits.match_limit]
        if not envs:
            continue
        if limits.cycle_filter == "efficient" and dmap is None:
            tf = time.perf_counter()
            dmap = egraph.descendants_map()

            def check(v, r, reaches=dmap.reaches):
                bad = reaches(v, r)
                counter[0] += bad
                return bad
            rep.filter_time += time.perf_counter() - tf
        if flat:
            cycle = dmap if limits.cycle_filter == "efficient" else (
                egraph.reachable if limits.cycle_filter == "vanilla" else None)
            n, filtered = apply_search_matches(egraph, r, None, cycle, limits.node_limit, joined=envs)
            counter[0] += filtered
        else:
            n = apply_matches(egraph, r, envs, check, limits.node_limit)
        rep.fired[r.name] = rep.fired.get(r.name, 0) + n
        changed = changed or n > 0
    rep.apply_time += time.perf_counter() - ta
    rep.filtered += counter[0]

    tr = time.perf_counter()
    egraph.rebuild()
    rep.rebuild_time += time.perf_counter() - tr

    if limits.cycle_filter != "none":
        tf = time.perf_counter()
        rep.blacklisted += len(egraph.resolve_cycles())
        rep.filter_time += time.perf_counter() - tf
    changed = changed and (egraph.num_nodes != fp_nodes or egraph.num_classes != fp_classes)
    hit_limit = hit_limit or egraph.num_nodes >= limits.node_limit
    return StepResult(changed, hit_limit, timed_out)


class TensatScheduler(Scheduler):
    """Apply all rules each iteration (multi-pattern ones while iteration < k_multi)."""

    name = "tensat"

    def __init__(self, matcher_cache: dict | None = None):
        self._matchers: dict = matcher_cache if matcher_cache is not None else {}

    def _matcher(self, rules: Sequence[Rule]) -> Matcher:
        key = tuple(id(r) for r in rules)
        m = self._matchers.get(key)
        if m is None:
            m = Matcher(rules)
            self._matchers[key] = m
        return m

    def run(self, egraph, rules: Sequence[Rule], limits: Limits | None = None, cost=None) -> SearchReport:
        limits = limits or Limits()
        rules = list(rules)
        matcher = self._matcher(rules)
        rep = SearchReport(fired={r.name: 0 for r in rules})
        t0 = time.perf_counter()
        deadline = t0 + limits.time_limit
        egraph.rebuild()
        rep.nodes_before = egraph.num_nodes
        rep.classes_before = egraph.num_classes
        stop = ""
        start_iter = egraph.iteration
        for it in range(limits.iter_limit):
            if egraph.num_nodes >= limits.node_limit:
                stop = "node_limit"
                break
            if time.perf_counter() >= deadline:
                stop = "time_limit"
                break
            egraph.iteration = start_iter + it + 1
            active = [r for r in rules if not r.multi or it < limits.k_multi]
            step = rewrite_step(egraph, matcher, active, limits, deadline, rep)
            rep.iterations = it + 1
            rep.sizes.append((egraph.num_classes, egraph.num_nodes))
            if step.hit_limit:
                stop = "node_limit"
                break
            if step.timed_out:
                stop = "time_limit"
                break
            if not step.changed:
                stop = "saturated"
                break
        else:
            stop = "iter_limit"
        rep.stop_reason = stop
        rep.nodes_after = egraph.num_nodes
        rep.classes_after = egraph.num_classes
        rep.total_time = time.perf_counter() - t0
        return rep


def run_tensat(egraph, rules: Sequence[Rule], **limits) -> SearchReport:
    """Convenience: ``TensatScheduler().run(egraph, rules, Limits(**limits))``."""
    return TensatScheduler().run(egraph, rules, Limits(**limits))
