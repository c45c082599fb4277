"""The ``Scheduler`` seam and the registry of schedulers by name.

A scheduler only chooses: which rules the ``Runner`` applies next (or why to
stop) and what a finished step means; the runner owns the loop, the limits and
the report. ``SCHEDULERS`` maps a search name (the ``search`` option) to its
class, None for "none" (no search); ``get_scheduler`` builds one from the
optimizer's options.
"""
from __future__ import annotations

from typing import Any, Sequence

from relay_eqsat.options import add_search
from relay_eqsat.rewrite import Matcher, Rule
from .base import Limits, SearchReport
from .runner import Runner, Step


class Scheduler:
    """Hooks a ``Runner`` calls (subclasses: ``TensatScheduler``, ``MCTSScheduler``).

    ``iteration_limited``: whether ``Limits.iter_limit`` bounds the run's
    iterations. ``disjoint``: whether the runner's steps apply a multi-pattern
    rule's matches non-overlapping (``Runner.step``; TENSAT: no, every match).
    ``matcher_cache`` (optional, shared between schedulers): rule list
    identities -> compiled ``Matcher``.
    """

    name = "scheduler"
    iteration_limited = True
    disjoint = False

    def __init__(self, matcher_cache: dict | None = None):
        self._matchers: dict = matcher_cache if matcher_cache is not None else {}

    @classmethod
    def from_options(cls, options: Any = None, root: int | None = None) -> "Scheduler":
        """A scheduler configured by the optimizer's options (an ``OptimizeOptions``;
        None: defaults); ``root`` is the class the search optimizes."""
        return cls()

    def run(self, egraph, rules: Sequence[Rule], limits: Limits | None = None, cost=None) -> SearchReport:
        """``Runner(limits).run(egraph, rules, self, cost)``."""
        return Runner(limits).run(egraph, rules, self, cost)

    def matcher(self, rules: Sequence[Rule]) -> Matcher:
        """The compiled ``Matcher`` of ``rules`` (cached per list of rule objects)."""
        key = tuple(id(r) for r in rules)
        m = self._matchers.get(key)
        if m is None:
            m = Matcher(rules)
            self._matchers[key] = m
        return m

    # -- hooks --------------------------------------------------------------
    def start(self, runner: Runner, egraph, rules: list[Rule], cost) -> None:
        """Before the first iteration (the e-graph is rebuilt); raise ValueError if the run cannot go on."""

    def next_rules(self, runner: Runner, egraph, rules: list[Rule], iteration: int) -> Sequence[Rule] | str:
        """The rules to apply in iteration ``iteration`` (0-based), or a
        ``StopReason`` string to stop before it."""
        raise NotImplementedError

    def after_step(self, runner: Runner, egraph, step: Step, report: SearchReport) -> str | None:
        """Account for a finished step; return a ``StopReason`` string to stop.
        Default: count the step's applications in ``report.fired`` and stop when
        the step says so (a limit, or saturation)."""
        for name, n in step.fired.items():
            report.fired[name] = report.fired.get(name, 0) + n
        return step.stop

    def finish(self, runner: Runner, egraph, report: SearchReport) -> None:
        """After the last iteration (``report.stop_reason`` is set)."""


#: search name -> scheduler class; None: no search ("none")
SCHEDULERS: dict[str, type[Scheduler] | None] = {}


def register_scheduler(name: str, cls: type[Scheduler] | None) -> None:
    """Make ``cls`` the scheduler of the search named ``name`` (None: a search that does nothing);
    the ``search`` option then takes ``name``."""
    SCHEDULERS[name] = cls
    add_search(name)


def get_scheduler(name: str, options: Any = None, root: int | None = None) -> Scheduler | None:
    """The scheduler named ``name`` configured from ``options`` (see
    ``Scheduler.from_options``); None for "none". ValueError for an unknown name."""
    if name not in SCHEDULERS:
        raise ValueError(f"unknown search {name!r}; known: {', '.join(SCHEDULERS)}")
    cls = SCHEDULERS[name]
    return None if cls is None else cls.from_options(options, root)
