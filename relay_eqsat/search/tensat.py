"""TENSAT's exploration phase (Yang et al., MLSys 2021, §4 and Algorithm 2) as a scheduler.

Every iteration applies every rule (one ``Runner.step``: each canonical
pattern searched once, every match applied, cycles filtered); multi-pattern
rules run only in the first ``k_multi`` iterations. The run stops on
saturation (an iteration that changes nothing), the node limit, the
iteration limit or the time limit.
"""
from __future__ import annotations

from typing import Sequence

from relay_eqsat.rewrite import Rule
from .base import Limits, SearchReport
from .runner import Runner
from .scheduler import Scheduler


class TensatScheduler(Scheduler):
    """Apply all rules each iteration (multi-pattern ones while iteration < k_multi)."""

    name = "tensat"

    def next_rules(self, runner: Runner, egraph, rules: list[Rule], iteration: int) -> list[Rule]:
        return [r for r in rules if not r.multi or iteration < runner.limits.k_multi]


def run_tensat(egraph, rules: Sequence[Rule], **limits) -> SearchReport:
    """Convenience: ``TensatScheduler().run(egraph, rules, Limits(**limits))``."""
    return TensatScheduler().run(egraph, rules, Limits(**limits))
