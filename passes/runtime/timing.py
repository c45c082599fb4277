"""Timing programs: the project's one timer, interleaved rounds and the one timing planner.

:func:`timer` (TVM's ``time_evaluator``) and :func:`wall_timer` time one program; every
comparison interleaves its programs round by round (:func:`interleave`, through
:func:`time_rounds`), so the machine's drift affects them alike; :func:`plan_timing` sizes the
rounds to a time budget from each program's run time (:func:`one_run_seconds`), for the runtime
check and the command line (:func:`time_within`); :class:`Samples` and :class:`Timing` hold what
was measured. The debug executor's per-kernel times (:func:`node_times`) serve the cost model's
measurements and ``relay-eqsat profile``.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, NamedTuple, Sequence

import numpy as np
import tvm
from tvm.contrib import graph_executor

from relay_eqsat import progress

from .build import build, executor, module_device, set_inputs



def timer(m: graph_executor.GraphModule, number: int = 1, repeat: int = 1, min_repeat_ms: int = 0,
          dev=None) -> Callable[[], list[float]]:
    """A zero-argument timer of ``m.run()`` on ``dev`` (default: the CPU) returning ``repeat``
    timings in seconds, each averaging ``number`` runs (or as many as fill ``min_repeat_ms``);
    TVM's ``time_evaluator`` does one untimed run first."""
    f = m.module.time_evaluator("run", dev if dev is not None else module_device(m), number=number,
                                repeat=repeat, min_repeat_ms=min_repeat_ms)
    return lambda: [float(r) for r in f().results]


def measure(mod, params: Mapping | None, inputs: Mapping[str, np.ndarray],
            number: int = 10, repeat: int = 3, target: str | None = None) -> float:
    """Median wall time in seconds of one inference of ``mod`` (built at
    opt_level 3), from ``repeat`` timings each averaging ``number`` runs."""
    m = executor(build(mod, params=params, target=target))
    set_inputs(m, inputs)
    return float(statistics.median(timer(m, number, repeat)()))


def time_module(m: graph_executor.GraphModule, dev=None, repeat: int = 7, number: int = 0,
                min_repeat_ms: float = 20.0, warmup: int = 2) -> tuple[float, int]:
    """(median seconds of ``m.run()``, timings taken): ``warmup`` untimed runs, then ``repeat``
    timings of ``number`` runs each, or (``number`` 0) of as many as last ``min_repeat_ms``.
    Non-finite timings raise RuntimeError."""
    dev = dev if dev is not None else module_device(m)
    for _ in range(warmup):
        m.run()
    dev.sync()
    results = timer(m, max(1, number), repeat, 0 if number else max(1, int(round(min_repeat_ms))), dev)()
    if not all(np.isfinite(results)):
        raise RuntimeError(f"non-finite timings {results}")
    return statistics.median(results), len(results)


@contextlib.contextmanager
def _quiet_stderr():
    """Silence file descriptor 2 (the debug executor logs every iteration from C++)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def node_times(lib, dev, inputs: Mapping[str, np.ndarray], number: int = 10, repeat: int = 7,
               min_repeat_ms: int = 0, module=None) -> list[tuple[dict, float | None]]:
    """(graph JSON node, median seconds) for every node of the built ``lib``, in the graph's
    order, from TVM's debug executor: each kernel is timed on its own, ``repeat`` timings of
    ``number`` runs (or as many as fill ``min_repeat_ms``); None for nodes it did not time
    (inputs, parameters). The debug executor's own logging on stderr is silenced. ``module``: the
    runtime module of ``lib`` as loaded on ``dev`` (a remote device's), default ``lib.get_lib()``."""
    graph_json = lib.get_graph_json()
    nodes = json.loads(graph_json)["nodes"]
    with tempfile.TemporaryDirectory(prefix="relay-eqsat-debug-") as dump, _quiet_stderr():
        m = _debug_executor(graph_json, module if module is not None else lib.get_lib(), dev, dump)
        m.set_input(**lib.get_params())
        set_inputs(m, inputs)
        per_node = m.run_individual(number, repeat=repeat, min_repeat_ms=min_repeat_ms)
    return [(n, float(np.median(times)) if len(times) else None) for n, times in zip(nodes, per_node)]


def _debug_executor(graph_json: str, module, dev, dump_root: str):
    """TVM's debug executor of ``module`` (a built library's, loaded on ``dev``), its parameters
    left to the caller: ``debug_executor.create`` reads them from the module, which fails for a
    module on a remote device (this TVM hands the remote's parameter map back as an opaque Object)."""
    from tvm.contrib.debugger import debug_executor

    devs, num_rpc, type_ids = graph_executor.get_device(module, dev)
    if num_rpc == len(devs):
        create = devs[0]._rpc_sess.get_function("tvm.graph_executor_debug.create")
    else:
        create = tvm.get_global_func("tvm.graph_executor_debug.create")
    return debug_executor.GraphModuleDebug(create(graph_json, module, *type_ids), devs, graph_json, dump_root)


def _is_layout_transform(node: dict) -> bool:
    return node["op"] == "tvm_op" and "layout_transform" in node["attrs"]["func_name"]


def layout_transform_seconds(lib, dev, inputs: Mapping[str, np.ndarray], repeat: int = 7,
                             min_repeat_ms: float = 20.0, overhead: float | Callable[[], float] = 0.0,
                             module=None) -> float:
    """Seconds a run of the built ``lib`` spends in its ``layout_transform`` kernels, from the
    debug executor's per-node medians (:func:`node_times`: ``repeat`` timings, each at least a
    quarter of ``min_repeat_ms``), each less ``overhead`` (a figure, or a function giving it, called
    only where there are layout transforms): the debug executor's own cost per kernel timed
    (:func:`debug_overhead`). 0 when it has none. ``module``: the runtime module of ``lib`` as
    loaded on ``dev`` (:func:`node_times`)."""
    if not any(_is_layout_transform(n) for n in json.loads(lib.get_graph_json())["nodes"]):
        return 0.0
    over = overhead() if callable(overhead) else overhead
    times = node_times(lib, dev, inputs, 10, repeat, max(1, int(round(min_repeat_ms / 4))),
                       module=module)
    return sum(max(0.0, t - over) for n, t in times if _is_layout_transform(n) and t is not None)


def debug_overhead(times: Sequence[tuple[dict, float | None]], whole: float) -> float:
    """Seconds the debug executor's timing adds to each kernel: its kernels' medians (``times``,
    from :func:`node_times`) summed beyond ``whole`` (the graph executor's seconds for a run of the
    same program), per kernel; never below 0 nor above the smallest kernel's median. Meaningful on
    a program of tiny kernels only: on large ones the two executors' timings of the same kernel
    differ by more than this cost (a 100-ms convolution by 10-40% on a Zen 1)."""
    kernels = [t for n, t in times if n.get("op") == "tvm_op" and t is not None]
    if not kernels:
        return 0.0
    return min(max(0.0, (sum(kernels) - whole) / len(kernels)), min(kernels))


def time_rounds(modules: Sequence[graph_executor.GraphModule], number: int = 0, repeat: int = 10,
                min_repeat_ms: int = 0, wall: Sequence[bool] | None = None,
                also: Sequence[Callable[[], float]] = ()) -> list[list[float]]:
    """Seconds per run of each graph executor module, one sample per round:
    the timings alternate between the modules (``repeat`` rounds; each timing
    averages ``number`` runs, or as many as fill ``min_repeat_ms``), so load
    from other processes affects all of them alike (the order rotates from
    round to round, so none is always timed first), and sample ``k`` of one
    module can be paired with sample ``k`` of another. ``wall``: per module,
    whether to time it by the wall clock (:func:`wall_timer`: ``number`` runs
    a timing, no untimed run before each and no warm-up timing), for programs
    of :data:`WALL_CLOCK_S` or more, where that untimed run doubles the time a
    timing costs. ``also``: timers of other runtimes (each call one timing's seconds per run, already
    warm; onnxruntime's in a bench), interleaved with the modules' timings; their samples follow
    the modules'."""
    wall = [False] * len(modules) if wall is None else list(wall)
    if len(wall) != len(modules):
        raise ValueError(f"wall: {len(wall)} flags for {len(modules)} modules")
    timers = [wall_timer(m, max(1, number)) if w else timer(m, max(1, number), 1, min_repeat_ms)
              for m, w in zip(modules, wall)]
    return interleave([lambda r, t=t: t() for t in timers] + [lambda r, t=t: [t()] for t in also], repeat,
                      warmup=[not w for w in wall])


def interleave(timers: Sequence[Callable[[int], list[float]]], rounds: int,
               warmup: Sequence[bool] = ()) -> list[list[float]]:
    """The one interleaving loop: ``rounds`` rounds, each calling every timer once with the
    round's index (the order rotating from round to round, so none is always timed first) and
    adding the seconds it returns to that timer's samples; first one warm-up call of each timer
    ``warmup`` flags. With a progress bar of the timings."""
    n = len(timers)
    warmup = list(warmup) + [False] * (n - len(warmup))
    samples: list[list[float]] = [[] for _ in timers]
    with progress.bar(total=rounds * n + sum(warmup), desc="timing", unit="timing") as bar:
        for t, w in zip(timers, warmup):
            if w:
                t(0)
                bar.update(1)
        for r in range(rounds):
            for k in [(r + j) % n for j in range(n)]:
                samples[k].extend(timers[k](r))
                bar.update(1)
    return samples


@dataclass
class Samples:
    """One program's timings: the median seconds per run and the samples, with their quartiles,
    spread and a comparison beyond noise."""

    median: float
    samples: list[float]

    @property
    def quartiles(self) -> tuple[float, float]:
        """(lower, upper) quartile of the samples (min and max with fewer than 4)."""
        if len(self.samples) < 4:
            return min(self.samples), max(self.samples)
        q = statistics.quantiles(self.samples, n=4)
        return q[0], q[2]

    @property
    def spread(self) -> float:
        """Relative inter-quartile range of the samples."""
        lo, hi = self.quartiles
        return (hi - lo) / self.median if self.median > 0 else 0.0

    def slower_than(self, other: "Samples", noise: float) -> bool:
        """Slower beyond noise: the median more than ``noise`` (relative) above the other's
        and the lower quartile above the other's upper quartile."""
        return self.median > other.median * (1 + noise) and self.quartiles[0] > other.quartiles[1]


def wall_timer(m: graph_executor.GraphModule, number: int = 1, dev=None) -> Callable[[], list[float]]:
    """A zero-argument timer of ``m.run()`` by the wall clock: one timing, the mean of ``number``
    runs, with no untimed run first (unlike :func:`timer`): for programs slow enough that the
    clock's overhead is nothing and an extra run would cost as much as a timing."""
    dev = dev if dev is not None else module_device(m)

    def once() -> list[float]:
        dev.sync()
        t0 = time.perf_counter()
        for _ in range(number):
            m.run()
        dev.sync()
        return [(time.perf_counter() - t0) / number]

    return once


#: a timing of a fast program averages enough runs to last at least this long (seconds)
TIMING_MIN_S = 0.05
#: programs whose run takes at least this long are timed by the wall clock (:func:`wall_timer`)
WALL_CLOCK_S = 0.2
#: a first run this long is taken for the run time (a later run is no faster by much)
FIRST_RUN_TRUSTED_S = 1.0
#: timings per program when the budget allows, and at least (the budget notwithstanding)
TIMING_MAX_REPEAT = 7
TIMING_MIN_REPEAT = 3


def one_run_seconds(m: graph_executor.GraphModule, first_run_s: float | None = None, budget: float | None = None,
                    min_rounds: int = 1) -> float:
    """Seconds of one run of ``m``: its first run (``build_and_run``'s ``first_run_s``) when that
    is :data:`FIRST_RUN_TRUSTED_S` or more, or when even half of it would not let ``min_rounds``
    rounds fit in ``budget`` (a slow program is not run again just to learn it is slow), else one
    warm timed run."""
    if first_run_s is not None and (first_run_s >= FIRST_RUN_TRUSTED_S
                                    or (budget is not None and first_run_s / 2 * min_rounds > budget)):
        return first_run_s
    return timer(m)()[0]


class TimingPlan(NamedTuple):
    """How to time programs in interleaved rounds (:func:`plan_timing`): each timing averages
    ``number`` runs (0: as many as fill the plan's ``fill_ms``, ``time_evaluator``'s
    ``min_repeat_ms``), ``repeat`` rounds, ``wall``: timed by the wall clock (one flag for all
    programs, or one a program)."""

    number: int
    repeat: int
    wall: bool | tuple[bool, ...]


def timing_seconds(run_s: float, wall: bool, number: int, fill_ms: float = 0.0) -> float:
    """Seconds one timing of a program whose run takes ``run_s`` costs: ``number`` runs (or as
    many as fill ``fill_ms``), plus the untimed run ``time_evaluator`` makes first unless the wall
    clock times it."""
    timed = number * run_s if number else max(fill_ms / 1e3, run_s)
    return timed + (0.0 if wall else run_s)


def plan_timing(run_seconds: Sequence[float], budget: float | None, min_repeat: int = TIMING_MIN_REPEAT,
                max_repeat: int = TIMING_MAX_REPEAT, fill_ms: float | None = None) -> TimingPlan:
    """The one timing planner: how to time programs whose runs take ``run_seconds`` each, in
    interleaved rounds (:func:`time_rounds`), within ``budget`` seconds (None: no limit).

    By a count (``fill_ms`` None; the command line, :func:`time_within`): each timing averages
    ``number`` runs, enough for the fastest program's timing to last :data:`TIMING_MIN_S`;
    ``wall``: every program runs :data:`WALL_CLOCK_S` or longer, so the wall clock times them all
    (no untimed run per timing, no warm-up round); ``repeat``: as many rounds as fit, warm-up
    included, between ``min_repeat`` and ``max_repeat``.

    By time (``fill_ms``; the runtime check): each timing runs as often as fills ``fill_ms``
    (``number`` 0); ``wall`` one flag a program: a program of :data:`WALL_CLOCK_S` or more is
    timed by the wall clock (TVM's time_evaluator would run it once untimed before every timing,
    doubling what the check takes: DistilBERT's 10.9-s input took 200 s for 9 rounds where 120
    were allowed); ``repeat``: ``max_repeat`` rounds, fewer where they would not fit, not raised to
    ``min_repeat`` (the caller says what too few rounds mean)."""
    if fill_ms is not None:
        wall = tuple(s >= WALL_CLOCK_S for s in run_seconds)
        per_round = round_seconds(run_seconds, TimingPlan(0, 0, wall), fill_ms)
        fit = max_repeat if budget is None else int(budget // per_round)
        return TimingPlan(0, min(max_repeat, fit), wall)
    fastest = max(min(run_seconds), 1e-9)
    number = max(1, math.ceil(TIMING_MIN_S / fastest))
    wall = fastest >= WALL_CLOCK_S
    per_round = round_seconds(run_seconds, TimingPlan(number, 0, wall))
    # time_rounds warms up with one round of time_evaluator timings
    fit = (int(budget // per_round) - (0 if wall else 1)) if per_round > 0 and budget is not None else max_repeat
    return TimingPlan(number, max(min_repeat, min(max_repeat, fit)), wall)


def round_seconds(run_seconds: Sequence[float], plan: TimingPlan, fill_ms: float = 0.0) -> float:
    """Seconds one round of ``plan`` takes: a timing of each program (:func:`timing_seconds`)."""
    walls = plan.wall if isinstance(plan.wall, tuple) else (plan.wall,) * len(run_seconds)
    return sum(timing_seconds(s, w, plan.number, fill_ms) for s, w in zip(run_seconds, walls))


@dataclass
class Timing:
    """What :func:`time_within` measured: median seconds per run of each program, from
    ``repeat`` timings of ``number`` runs each (interleaved), taking ``seconds``."""

    medians: list[float]
    number: int
    repeat: int
    wall: bool
    seconds: float
    budget: float
    samples: list[list[float]] = field(default_factory=list)

    def describe(self) -> str:
        """"7 x 250 runs of each program, interleaved (1.2 s; budget 20 s)"."""
        each = "of each program, interleaved" if len(self.medians) > 1 else "of the program"
        clock = ", wall clock" if self.wall else ""
        return (f"{self.repeat} x {self.number} run{'s' if self.number != 1 else ''} {each} "
                f"({self.seconds:.1f} s{clock}; budget {self.budget:g} s)")


def time_within(modules: Sequence[graph_executor.GraphModule], budget: float,
                first_run_s: Sequence[float | None] = (), number: int | None = None,
                repeat: int | None = None) -> Timing:
    """Time ``modules`` interleaved (:func:`time_rounds`), with counts that fit ``budget``
    seconds (:func:`plan_timing`), from each program's run time: its ``first_run_s`` (a run
    already made, after :func:`build_and_run`'s build) when that is :data:`FIRST_RUN_TRUSTED_S`
    or more (a slow program is not run again just to learn it is slow), else one warm timed run.
    ``number``/``repeat`` given override the plan."""
    t0 = time.perf_counter()
    first = list(first_run_s) + [None] * (len(modules) - len(first_run_s))
    run_s = [one_run_seconds(m, f) for m, f in zip(modules, first)]
    plan_number, plan_repeat, wall = plan_timing(run_s, budget)
    number = plan_number if number is None else number
    repeat = plan_repeat if repeat is None else repeat
    samples = time_rounds(modules, number, repeat, wall=[wall] * len(modules))
    return Timing([float(statistics.median(s)) for s in samples], number, repeat, wall,
                  time.perf_counter() - t0, budget, samples)


def paired_ratio(before: Sequence[float], after: Sequence[float]) -> tuple[float, int]:
    """(median of the per-round ratios after / before, rounds in which ``after`` was faster)
    of two modules' :func:`time_rounds` samples."""
    ratio = float(statistics.median(a / b for a, b in zip(after, before)))
    return ratio, sum(a < b for a, b in zip(after, before))
