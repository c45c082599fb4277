"""Building, running, timing and comparing Relay programs: the project's one implementation.

The pass's runtime check, the measuring worker (:mod:`relay_eqsat.passes.kernels`) and
the benchmarks all build with :func:`build`, time with :func:`timer` and what is made of
it (:func:`time_rounds`, :func:`time_module`, :func:`measure`), and compare outputs with
:func:`output_error`. Builds default to :func:`~relay_eqsat.passes.target.host_target`
(this TVM's plain ``llvm`` is riscv64).
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
from tvm import relay
from tvm.contrib import graph_executor

from relay_eqsat import progress

from .target import host_target


def _as_module(mod) -> tvm.IRModule:
    if isinstance(mod, relay.Function):
        return tvm.IRModule.from_expr(mod)
    return mod


@dataclass
class BuildReuse:
    """The builds kept inside one :func:`reuse_builds` block: (module, factory) per key, how
    many builds it saved, and the seconds :func:`build_and_run` took to build each factory
    (by ``id``: a reused build reports its first build's seconds)."""

    kept: dict = field(default_factory=dict)
    hits: int = 0
    build_s: dict = field(default_factory=dict)


_REUSE: list[BuildReuse] = []  # the active reuse_builds blocks, innermost last


@contextlib.contextmanager
def reuse_builds():
    """Within this block :func:`build` compiles a module (no ``params``, no ``sequence``) only
    once per target and opt level: a structurally equal module built before in the block gets
    the same factory. ``relay-eqsat optimize`` wraps the pass and its own before/after builds
    in one, so the programs the pass's runtime check built are not built again. The factories
    are dropped when the block ends (nothing is kept across a user's pipeline)."""
    reuse = BuildReuse()
    _REUSE.append(reuse)
    try:
        yield reuse
    finally:
        _REUSE.remove(reuse)
        reuse.kept.clear()
        reuse.build_s.clear()


def build(mod, params: Mapping | None = None, target: str | None = None, opt_level: int = 3,
          sequence: Sequence = ()):
    """Compile a Relay module (or function) with ``relay.build`` for ``target``
    (default: :func:`host_target`), running the passes ``sequence`` first inside the same
    PassContext. Returns the graph executor factory (inside :func:`reuse_builds`, the one
    built before for an equal module, target and opt level)."""
    target = target or host_target()
    reuse = _REUSE[-1] if _REUSE and params is None and not sequence else None
    if reuse is not None:
        module = _as_module(mod)
        key = (tvm.ir.structural_hash(module), str(target), opt_level)
        for kept, lib in reuse.kept.get(key, ()):
            if tvm.ir.structural_equal(kept, module):
                reuse.hits += 1
                return lib
    with tvm.transform.PassContext(opt_level=opt_level):
        built = _as_module(mod)
        if sequence:
            built = tvm.transform.Sequential(list(sequence))(built)
        lib = relay.build(built, target=target, params=params)
    if reuse is not None:
        reuse.kept.setdefault(key, []).append((module, lib))
    return lib


def thread_count() -> int | None:
    """The threads TVM's runtime runs a kernel with (``TVM_NUM_THREADS`` or its default); None
    when this TVM cannot say. Asking starts TVM's thread pool, which pins the calling thread to
    one CPU (on 2 cores: {0, 1} -> {0}), and every thread or process it starts later inherits
    that (onnxruntime or torch run after the pass in the same process: one core). The caller's
    CPUs are given back."""
    num_threads = tvm.get_global_func("runtime.NumThreads", True)
    if num_threads is None:
        return None
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    try:
        return int(num_threads())
    finally:
        if cpus is not None and os.sched_getaffinity(0) != cpus:
            os.sched_setaffinity(0, cpus)


def executor(lib, dev=None) -> graph_executor.GraphModule:
    """A graph executor on ``dev`` (default: the CPU) for a factory from :func:`build`
    (a GraphModule is returned as it is)."""
    if isinstance(lib, graph_executor.GraphModule):
        return lib
    return graph_executor.GraphModule(lib["default"](dev if dev is not None else tvm.cpu(0)))


def set_inputs(m: graph_executor.GraphModule, inputs: Mapping[str, np.ndarray]) -> None:
    """Set the named inputs of a graph executor."""
    for name, value in inputs.items():
        m.set_input(name, value)


def run(lib, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Run a built module (factory from :func:`build`, or a GraphModule) on
    named inputs; returns every output as a numpy array, in order."""
    m = executor(lib)
    set_inputs(m, inputs)
    m.run()
    return [m.get_output(i).numpy() for i in range(m.get_num_outputs())]


def random_inputs(types: Mapping[str, tuple[Sequence[int], str]], seed: int = 0) -> dict[str, np.ndarray]:
    """Random arrays for ``{name: (shape, dtype)}``: standard normal floats,
    integers in [0, 4)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, (shape, dtype) in types.items():
        if np.issubdtype(np.dtype(dtype), np.integer):
            out[name] = rng.integers(0, 4, size=tuple(shape)).astype(dtype)
        elif np.dtype(dtype) == np.bool_:
            out[name] = rng.integers(0, 2, size=tuple(shape)).astype(bool)
        else:
            out[name] = rng.standard_normal(tuple(shape)).astype(dtype)
    return out


class Built(NamedTuple):
    """A program built and run once by :func:`build_and_run`."""

    module: graph_executor.GraphModule
    outputs: list[np.ndarray]
    build_s: float  # compiling and making the executor (this TVM's LLVM JIT runs then); a build
    # reused inside reuse_builds: the seconds its first build took
    first_run_s: float  # the program's own first run: what one timing of it costs at least


def build_and_run(mod, inputs: Mapping[str, np.ndarray], target: str | None = None, opt_level: int = 3,
                  sequence: Sequence = (), what: str = "the program") -> Built:
    """:func:`build` ``mod`` for ``target`` (default: the host) and run it once on
    ``inputs``. The build seconds include creating the executor: this TVM's LLVM module
    turns into machine code when the executor first looks up its kernels (11 s of
    DenseNet-121 on a Zen 1, whose runs take 0.3 s), so the first run is the program's
    own. Inside :func:`reuse_builds` a program built before is not built again and its build
    seconds are the first build's. Progress (``what`` names the program) shows while it builds
    and runs."""
    reuse = _REUSE[-1] if _REUSE else None
    hits = reuse.hits if reuse is not None else 0
    t0 = time.perf_counter()
    with progress.ticking(f"building {what}"):
        lib = build(mod, target=target, opt_level=opt_level, sequence=sequence)
        m = executor(lib)
    t1 = time.perf_counter()
    build_s = t1 - t0
    if reuse is not None:
        if reuse.hits > hits:
            build_s = reuse.build_s.get(id(lib), build_s)
        elif any(kept is lib for entries in reuse.kept.values() for _, kept in entries):
            reuse.build_s[id(lib)] = build_s
    with progress.ticking(f"running {what}"):
        outputs = run(m, inputs)
    return Built(m, outputs, build_s, time.perf_counter() - t1)


# -- timing -------------------------------------------------------------------------------

def timer(m: graph_executor.GraphModule, number: int = 1, repeat: int = 1, min_repeat_ms: int = 0,
          dev=None) -> Callable[[], list[float]]:
    """A zero-argument timer of ``m.run()`` on ``dev`` (default: the CPU) returning ``repeat``
    timings in seconds, each averaging ``number`` runs (or as many as fill ``min_repeat_ms``);
    TVM's ``time_evaluator`` does one untimed run first."""
    f = m.module.time_evaluator("run", dev if dev is not None else tvm.cpu(0), number=number,
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
    dev = dev if dev is not None else tvm.cpu(0)
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
               min_repeat_ms: int = 0) -> list[tuple[dict, float | None]]:
    """(graph JSON node, median seconds) for every node of the built ``lib``, in the graph's
    order, from TVM's debug executor: each kernel is timed on its own, ``repeat`` timings of
    ``number`` runs (or as many as fill ``min_repeat_ms``); None for nodes it did not time
    (inputs, parameters). The debug executor's own logging on stderr is silenced."""
    from tvm.contrib.debugger import debug_executor

    graph_json = lib.get_graph_json()
    nodes = json.loads(graph_json)["nodes"]
    with tempfile.TemporaryDirectory(prefix="relay-eqsat-debug-") as dump, _quiet_stderr():
        m = debug_executor.create(graph_json, lib.get_lib(), dev, dump_root=dump)
        m.set_input(**lib.get_params())
        set_inputs(m, inputs)
        per_node = m.run_individual(number, repeat=repeat, min_repeat_ms=min_repeat_ms)
    return [(n, float(np.median(times)) if len(times) else None) for n, times in zip(nodes, per_node)]


def _is_layout_transform(node: dict) -> bool:
    return node["op"] == "tvm_op" and "layout_transform" in node["attrs"]["func_name"]


def layout_transform_seconds(lib, dev, inputs: Mapping[str, np.ndarray], repeat: int = 7,
                             min_repeat_ms: float = 20.0, overhead: float | Callable[[], float] = 0.0) -> float:
    """Seconds a run of the built ``lib`` spends in its ``layout_transform`` kernels, from the
    debug executor's per-node medians (:func:`node_times`: ``repeat`` timings, each at least a
    quarter of ``min_repeat_ms``), each less ``overhead`` (a figure, or a function giving it, called
    only where there are layout transforms): the debug executor's own cost per kernel timed
    (:func:`debug_overhead`). 0 when it has none."""
    if not any(_is_layout_transform(n) for n in json.loads(lib.get_graph_json())["nodes"]):
        return 0.0
    over = overhead() if callable(overhead) else overhead
    times = node_times(lib, dev, inputs, 10, repeat, max(1, int(round(min_repeat_ms / 4))))
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


# -- comparing programs -------------------------------------------------------------------

def time_rounds(modules: Sequence[graph_executor.GraphModule], number: int = 0, repeat: int = 10,
                min_repeat_ms: int = 0, wall: Sequence[bool] | None = None) -> list[list[float]]:
    """Seconds per run of each graph executor module, one sample per round:
    the timings alternate between the modules (``repeat`` rounds; each timing
    averages ``number`` runs, or as many as fill ``min_repeat_ms``), so load
    from other processes affects all of them alike (the order rotates from
    round to round, so none is always timed first), and sample ``k`` of one
    module can be paired with sample ``k`` of another. ``wall``: per module,
    whether to time it by the wall clock (:func:`wall_timer`: ``number`` runs
    a timing, no untimed run before each and no warm-up timing), for programs
    of :data:`WALL_CLOCK_S` or more, where that untimed run doubles the time a
    timing costs."""
    wall = [False] * len(modules) if wall is None else list(wall)
    if len(wall) != len(modules):
        raise ValueError(f"wall: {len(wall)} flags for {len(modules)} modules")
    timers = [wall_timer(m, max(1, number)) if w else timer(m, max(1, number), 1, min_repeat_ms)
              for m, w in zip(modules, wall)]
    return _rounds(timers, repeat, warmup=[not w for w in wall])


def _rounds(timers: Sequence[Callable[[], list[float]]], repeat: int, warmup: Sequence[bool]) -> list[list[float]]:
    """:func:`time_rounds`'s loop over zero-argument timers (first one warm-up call of each timer
    ``warmup`` flags), with a progress bar of the timings."""
    n = len(timers)
    samples: list[list[float]] = [[] for _ in timers]
    with progress.bar(total=repeat * n + sum(warmup), desc="timing", unit="timing") as bar:
        for t, w in zip(timers, warmup):
            if w:
                t()
                bar.update(1)
        for r in range(repeat):
            for k in [(r + j) % n for j in range(n)]:
                samples[k].append(timers[k]()[0])
                bar.update(1)
    return samples


def wall_timer(m: graph_executor.GraphModule, number: int = 1, dev=None) -> Callable[[], list[float]]:
    """A zero-argument timer of ``m.run()`` by the wall clock: one timing, the mean of ``number``
    runs, with no untimed run first (unlike :func:`timer`): for programs slow enough that the
    clock's overhead is nothing and an extra run would cost as much as a timing."""
    dev = dev if dev is not None else tvm.cpu(0)

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


def plan_timing(run_seconds: Sequence[float], budget: float, min_repeat: int = TIMING_MIN_REPEAT,
                max_repeat: int = TIMING_MAX_REPEAT) -> tuple[int, int, bool]:
    """(number, repeat, wall) to time programs whose runs take ``run_seconds`` each, in
    interleaved rounds, within ``budget`` seconds: each timing averages ``number`` runs, enough
    for the fastest program's timing to last :data:`TIMING_MIN_S`; ``repeat`` rounds, as many
    as fit in the budget between ``min_repeat`` and ``max_repeat``; ``wall``: every program runs
    :data:`WALL_CLOCK_S` or longer, so the wall clock times them (no untimed run per timing, no
    warm-up round)."""
    fastest = max(min(run_seconds), 1e-9)
    number = max(1, math.ceil(TIMING_MIN_S / fastest))
    wall = fastest >= WALL_CLOCK_S
    # a time_evaluator timing does one untimed run first; time_rounds warms up with one round
    per_round = (number + (0 if wall else 1)) * sum(run_seconds)
    fit = int(budget // per_round) - (0 if wall else 1) if per_round > 0 else max_repeat
    return number, max(min_repeat, min(max_repeat, fit)), wall


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
    run_s = [f if f is not None and f >= FIRST_RUN_TRUSTED_S else timer(m)()[0] for m, f in zip(modules, first)]
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


def time_interleaved(modules: Sequence[graph_executor.GraphModule], number: int = 0, repeat: int = 10,
                     min_repeat_ms: int = 0) -> list[float]:
    """Median seconds per run of each module, timed by :func:`time_rounds`."""
    return [float(statistics.median(s)) for s in time_rounds(modules, number, repeat, min_repeat_ms)]


def output_error(ref: Sequence[np.ndarray], got: Sequence[np.ndarray]) -> tuple[float, str | None]:
    """(largest ``max|a-b| / max|a|`` over the outputs, why it is infinite or None): each output's
    error relative to its own scale, so a classifier whose random weights leave logits of 1e-9 (or
    1e-14) is held to the same digits as one with logits of 10 (relative to ``max(1, max|a|)``, as
    before 2026-11-27, any program passes there). Infinite when the outputs differ in count, shape
    or dtype, when one has inf/nan where the other has not, or when an output that is all zeros
    (a zero-initialized head) is not matched exactly."""
    if len(ref) != len(got):
        return float("inf"), f"{len(ref)} outputs before, {len(got)} after"
    worst = 0.0
    for k, (r, g) in enumerate(zip(ref, got)):
        if r.shape != g.shape or r.dtype != g.dtype:
            return float("inf"), (f"output {k}: {r.dtype}{list(r.shape)} before, "
                                  f"{g.dtype}{list(g.shape)} after")
        if r.size == 0:
            continue
        rf, gf = r.astype(np.float64), g.astype(np.float64)
        finite = np.isfinite(rf) & np.isfinite(gf)
        same = (rf == gf) | (np.isnan(rf) & np.isnan(gf))
        if not np.all(same | finite):
            return float("inf"), f"output {k}: inf/nan in one program and not the other"
        if not finite.any():
            continue
        diff = float(np.abs(rf - gf)[finite].max())
        scale = float(np.abs(rf[finite]).max())
        if diff > 0 and scale == 0:
            return float("inf"), f"output {k}: all zeros before, up to {diff:.3g} after"
        if diff > 0:
            worst = max(worst, diff / scale)
    return worst, None
