"""Tuning the pass's choices with AutoTVM: the tasks of the input and of the pass's candidates,
one trial budget, one records file.

A kernel's tuned time can reverse the pass's decision (a split that pays for an untuned schedule
may lose to the whole kernel tuned), so the tasks the decision rests on are tuned: those of the
input and of each candidate the pass would compare. :func:`program_tasks` extracts each
program's AutoTVM tasks; the budget is spent in two rounds. :func:`plan_decision` gives the tasks
one program runs and another does not (where the decision is open) a few trials each (none where
the program would ship it untuned), at most half the budget; the pass decides under them; :func:`plan_shipped` spends the rest on the tasks of the
program it ships, planned as tuning that program alone plans it (each task's share of the trials by
its floating-point work in one run of the program, a kernel run 144 times counted 144 times, and
a small kernel whose untuned tile spills registers its first ordered trial, :func:`plan_trials`),
so a kept input loses only the first round's trials
on the candidates' own kernels. :func:`tune` runs a plan, appending every trial to the records file
as it is measured (a Ctrl-C keeps them), and a second run on the same file tunes only what the plan
still lacks (a task's trials already in the file count, and are not measured again). A task's
first trial is TVM's own untuned choice (its fallback configuration), so the records never make a
kernel slower than TVM builds it without them. One op's rival implementations (x86's
``dense_nopack`` and ``dense_pack`` of one workload, :func:`rivals`) share one task's trials: each
gets its first few, the rest goes to the one whose record is fastest, the one TVM will build.

The search after the fallback: x86 convolutions try their configurations in the order of
:mod:`.config_order` (register tiles that fit first, several tile shapes within a few trials), then
at random; other templates at random (AutoTVM's ``RandomTuner``). At the budgets a small machine
affords (tens of trials a task: 16 trials of a SqueezeNet convolution took 130 s on 2 cores) a
genetic search's first generation is random samples too, and AutoTVM's XGBoost tuner trains in the
tuning process, which hangs this TVM. What the order gains over random search, task by task:
``bench/tuning_order.py``; model by model: docs/results.md (docs/design-notes.md#tuning).
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import math
import random
import zlib
from typing import Mapping, Sequence

import tvm

from relay_eqsat import progress

log = logging.getLogger(__name__)

#: no task planned gets fewer trials than this (below it random search is a lottery); a budget
#: too small for every task at this floor leaves the last tasks untuned
MIN_TRIALS = 8
#: trials a task whose untuned configuration spills registers or wastes lanes (by the register model,
#: :func:`.config_order.fallback_share`) gets where the shares by work give it fewer: TVM's fallback
#: and the first of :mod:`.config_order`'s order (:func:`_cover`). Shares by work leave a model's smallest kernels
#: untuned, and among them are memory-bound ones that take far longer than their work says (Zen 3,
#: MobileNet-v2 under a 128-trial log: the 144 -> 32 projection at 28 x 28 ran its 28-column fallback
#: in 0.19 ms, onnxruntime in 0.083)
COVER_TRIALS = 2
#: the share of the budget those trials may take at most, the tasks of most work covered first
COVER_SHARE = 0.25
#: a task of less work than this share of one trial's (the whole work over the budget) is not
#: covered: an excitation's 1x1 convolution on a 1 x 1 map runs in microseconds (EfficientNet-B0:
#: 0.4 MFLOP at most, where one trial's share is 6.4), where memory-bound kernels of a tenth of
#: a trial's share still take a percent of the model (MobileNet-v2's 192 -> 64 projection at
#: 14 x 14: 4.8 MFLOP, 0.14 ms untuned, Zen 3)
COVER_LEAST = 0.1
#: trials a task only some of the compared programs run gets before the pass decides between them
#: (:func:`plan_decision`): TVM's fallback and the first three of :mod:`.config_order`'s order
DECIDE_TRIALS = 4
#: trials each of one op's rival implementations (:func:`rivals`) gets before the rest of their
#: share goes to the fastest of them: TVM's fallback and the first three of the order
RIVAL_TRIALS = 4
#: how AutoTVM times a trial: each timing at least this long, the median of ``repeat``
TRIAL_MIN_REPEAT_MS = 50
TRIAL_REPEAT = 3
#: a trial's build or run past this many seconds is an error (the configuration is dropped)
TRIAL_TIMEOUT_S = 20


class TuningError(RuntimeError):
    """The model cannot be tuned (records of another tuner, a target AutoTVM cannot measure here)."""


@dataclasses.dataclass
class Task:
    """One AutoTVM task, the programs that run it and the trials planned for it."""

    task: object           # autotvm.task.Task
    programs: set          # names of the programs that run it
    flop: float            # one run of the kernel
    calls: int = 1         # the kernel's runs in one run of the program (the most of its programs)
    trials: int = 0        # planned, in all (the records file's count included)
    done: int = 0          # in the records file before this run
    measured: int = 0      # measured in this run

    @property
    def key(self) -> tuple:
        return task_key(self.task)

    @property
    def work(self) -> float:
        """The floating-point work of the kernel in one run of its program: what trials are planned by."""
        return max(self.flop, 1.0) * self.calls

    def describe(self) -> str:
        return f"{self.task.name} {self.task.args}"


def task_key(task) -> tuple:
    """What identifies a task across programs and in a records file: its name and workload."""
    return (task.name, str(task.workload))


def program_tasks(programs: Mapping[str, tvm.IRModule], target: str) -> list[Task]:
    """The AutoTVM tasks of ``programs`` (name -> module, weights bound), each once, with the
    programs that run it and how often (:func:`_calls`)."""
    from tvm import autotvm

    found: dict[tuple, Task] = {}
    for name, mod in programs.items():
        calls = _calls(mod)
        for t in _quiet_extraction(lambda: autotvm.task.extract_from_program(mod["main"], target=target, params={})):
            key = task_key(t)
            if key not in found:
                found[key] = Task(t, set(), float(getattr(t, "flop", 0) or 0))
            found[key].programs.add(name)
            found[key].calls = max(found[key].calls, _task_calls(t, calls))
    return list(found.values())


def _calls(mod: tvm.IRModule) -> collections.Counter:
    """How often ``mod``'s main function calls each operator on each list of argument shapes:
    ``(op name without its namespace, (shape, ...))`` -> calls."""
    from tvm import relay

    typed = relay.transform.InferType()(mod)
    counts: collections.Counter = collections.Counter()

    def visit(e):
        if isinstance(e, relay.Call) and isinstance(e.op, tvm.ir.Op):
            shapes = tuple(tuple(int(d) if isinstance(d, tvm.tir.IntImm) else str(d) for d in a.checked_type.shape)
                           for a in e.args if isinstance(a.checked_type, relay.TensorType))  # a dynamic dim: its name
            counts[(e.op.name.split(".")[-1], shapes)] += 1

    relay.analysis.post_order_visit(typed["main"], visit)
    return counts


def _task_calls(task, calls: collections.Counter) -> int:
    """How many of ``calls`` run ``task``'s kernel: those of the operator its template implements
    (``dense`` for ``dense_pack.x86``, ``conv2d`` for ``depthwise_conv2d_NCHWc.x86``) on the
    tensors of its workload. A transformer's per-head product runs once per head and layer: one
    task, 144 kernels in BERT-base. At least 1."""
    shapes = tuple(tuple(a[1]) for a in task.args if isinstance(a, (tuple, list)) and a and a[0] == "TENSOR")
    template = task.name.split(".")[0]
    n = sum(c for (op, s), c in calls.items() if s == shapes and op in template)
    return max(1, n)


def _quiet_extraction(extract):
    """``extract()``, its lowering thread's errors logged rather than printed: AutoTVM collects the
    tasks while it lowers the program in a thread, and this TVM's lowering of some convolutions fails
    after their tasks were collected (``Cannot find the Realization point``), which changes nothing."""
    import threading

    before = threading.excepthook

    def hook(args):
        log.debug("AutoTVM task extraction: %s: %s", args.exc_type.__name__, args.exc_value)

    threading.excepthook = hook
    try:
        return extract()
    finally:
        threading.excepthook = before


def _shared(t: Task, programs: int) -> bool:
    return len(t.programs) >= programs


def _in_turn(tasks: Sequence[Task], programs: int) -> list[Task]:
    """``tasks`` in the order they are tuned: those not run by all ``programs`` first (the decision
    between the programs rests on them), then the rest; within each, the programs take turns (every
    program's largest task by floating-point work, then every program's second, ...), so a budget too
    small for all of them tunes each program alike and the comparison stays fair."""
    rank: dict[tuple, int] = {}  # a task's place among its program's tasks of its kind (shared or not)
    for name in sorted({p for t in tasks for p in t.programs}):
        for kind in (False, True):
            own = sorted((t for t in tasks if name in t.programs and _shared(t, programs) == kind),
                         key=lambda t: (-t.work, t.key))
            for i, t in enumerate(own):
                rank[t.key] = min(rank.get(t.key, i), i)
    return sorted(tasks, key=lambda t: (_shared(t, programs), rank[t.key], -t.work, t.key))


def plan_trials(tasks: Sequence[Task], budget: int, programs: int) -> list[Task]:
    """``tasks`` in the order they are tuned (:func:`_in_turn`), each with its ``trials``: each task
    gets the budget's share of its work, at least :data:`MIN_TRIALS` (less when the budget cannot
    give that much to every unshared task), at most its configuration space; what is left once the
    budget is spent gets none, but for the tasks whose untuned configuration spills registers: those
    get :data:`COVER_TRIALS` from the tasks planned the most (:func:`_cover`). One op's rival
    implementations (:func:`rivals`) are one task here: their share is split by :func:`_split_rivals`, and :func:`tune` gives what is left after each
    one's first trials to the fastest. A task's trials already in the log count towards its share
    (:func:`tune`)."""
    ordered = _in_turn(tasks, programs)
    group = {id(t): g for g in rivals(ordered) for t in g}
    units, seen = [], set()
    for t in ordered:
        g = group.get(id(t), [t])
        if id(g[0]) not in seen:
            seen.add(id(g[0]))
            units.append(g)
    work = sum(g[0].work for g in units)
    # the floor, lowered when the budget cannot give it to every task the programs do not share
    # (each of them gets some trials then: the comparison is between them)
    unshared = sum(1 for g in units if not _shared(g[0], programs)) or len(units) or 1
    floor = max(1, min(MIN_TRIALS, budget // unshared))
    left = budget
    for g in units:
        share = math.ceil(budget * g[0].work / work)
        want = min(max(share, floor), sum(len(t.task.config_space) for t in g))
        _split_rivals(g, min(want, left))
        left -= sum(t.trials for t in g)
    _cover(units, budget, floor)
    return ordered


def _spills(t: Task) -> bool:
    """Whether the register model predicts ``t``'s untuned configuration at no more than a spilling
    tile's share of its best (:func:`.config_order.fallback_share`)."""
    from relay_eqsat.cost.simd import REGISTER_SPILL

    from .config_order import TEMPLATES, fallback_share

    if TEMPLATES.get(getattr(t.task, "name", None)) is None:
        return False
    share = fallback_share(t.task, str(t.task.target), fallback_index(t.task))
    return share is not None and share <= REGISTER_SPILL


def _cover(units: Sequence[Sequence[Task]], budget: int, floor: int) -> None:
    """Give each task that the shares by work left below :data:`COVER_TRIALS` and whose untuned
    configuration spills (:func:`_spills`) that many, the tasks of most work first, each trial
    taken from the task planned the most (never below ``floor``), within :data:`COVER_SHARE` of the
    ``budget``. A task of less work than :data:`COVER_LEAST` of one trial's share of the whole is
    left at its fallback. One op's rival implementations neither get nor give: they get their own
    first trials."""
    single = [g[0] for g in units if len(g) == 1]
    cap = int(budget * COVER_SHARE)
    keep = max(floor, COVER_TRIALS)
    least = COVER_LEAST * sum(g[0].work for g in units) / max(1, budget)
    for t in sorted((t for t in single if t.trials < COVER_TRIALS <= len(t.task.config_space)
                     and t.work >= least), key=lambda t: -t.work):
        need = COVER_TRIALS - t.trials
        donors = [d for d in single if d.trials > keep]
        if need > min(cap, sum(d.trials - keep for d in donors)):
            continue
        if not _spills(t):
            continue
        for _ in range(need):
            d = max(donors, key=lambda d: (d.trials, -d.work))
            d.trials -= 1
            t.trials += 1
            cap -= 1


def rivals(tasks: Sequence[Task]) -> list[list[Task]]:
    """The groups of ``tasks`` that are one op's alternative implementations: the same workload under
    different templates (x86's ``dense_nopack`` and ``dense_pack``). TVM builds the op with the one
    whose record is fastest, so trials on the others are spent on a kernel that does not ship."""
    by: dict[tuple, list[Task]] = {}
    for t in tasks:
        workload = tuple(t.task.workload)[1:]
        if workload:
            by.setdefault((repr(workload), str(getattr(t.task, "target", ""))), []).append(t)
    return [g for g in by.values() if len({t.task.name for t in g}) > 1]


def _split_rivals(group: Sequence[Task], trials: int) -> None:
    """``trials`` over one op's rival implementations as planned: each its first
    :data:`RIVAL_TRIALS` in turn, what is left on the first (:func:`tune` moves it to the fastest)."""
    for t in group:
        t.trials = 0
    cap = [len(t.task.config_space) for t in group]
    probe = [min(RIVAL_TRIALS, c) for c in cap] if len(group) > 1 else cap
    while trials and any(t.trials < p for t, p in zip(group, probe)):
        for t, p in zip(group, probe):
            if trials and t.trials < p:
                t.trials += 1
                trials -= 1
    for t, c in zip(group, cap):
        take = min(trials, c - t.trials)
        t.trials += take
        trials -= take


def plan_decision(tasks: Sequence[Task], budget: int, programs: int) -> list[Task]:
    """The first of tuning's two rounds: the trials the decision between ``programs`` needs. Only the
    tasks not every program runs get any (a shared kernel tuned changes every program alike), and
    each no more than tuning one of its programs alone would give it (:func:`plan_trials` with the
    whole ``budget``), at most :data:`DECIDE_TRIALS` (TVM's fallback and the order's first tiles,
    where most of what the order gains is found): a kernel its program would ship at its fallback
    (a small one the budget does not reach) is compared at its fallback, so a program the decision
    keeps loses only the trials spent on the kernels of the programs it does not ship. Fewer when
    that would take more than half the ``budget``, in :func:`_in_turn`'s order until the half is
    spent. The rest of the budget goes to the program the decision ships (:func:`plan_shipped`)."""
    ordered = _in_turn(tasks, programs)
    alone: dict[tuple, int] = {}  # a task's trials in the plan of tuning one of its programs alone
    for name in sorted({p for t in ordered for p in t.programs}):
        own = [dataclasses.replace(t) for t in ordered if name in t.programs]
        for t in plan_trials(own, budget, 1):
            alone[t.key] = max(alone.get(t.key, 0), t.trials)
    unshared = [t for t in ordered if not _shared(t, programs) and alone[t.key]]
    half = budget // 2
    each = max(1, min(DECIDE_TRIALS, half // max(1, len(unshared))))
    left = max(half, min(budget, len(unshared)))  # at least the fallbacks, within the budget
    for t in ordered:
        t.trials = 0
    for t in unshared:
        t.trials = min(each, alone[t.key], len(t.task.config_space), left)
        left -= t.trials
    return ordered


def plan_shipped(shipped: Sequence[Task], compared: Sequence[Task], budget: int, path: str) -> list[Task]:
    """The second round: the plan tuning the shipped program alone with ``budget`` gets
    (:func:`plan_trials`), less the trials the log ``path`` holds for the tasks of the programs
    ``compared`` that the shipped program does not run (spent on the decision), taken from the plan's
    last tasks (its smallest). A task's trials in the log count as planned ones, whatever the plan
    gave it: the whole log never holds more than ``budget`` trials of these programs. A program the
    decision kept (the input) is tuned as tuning it alone tunes it, but for its smallest tasks."""
    own = {t.key for t in shipped}
    done = records_per_task(path)
    have = {t.key: len(done.get(t.key, ())) for t in shipped}
    cut = sum(len(done.get(t.key, ())) for t in compared if t.key not in own)
    plan = plan_trials(shipped, budget, 1)
    for t in plan:  # measured trials are spent: a task the plan gives fewer keeps them
        if have[t.key] > t.trials:
            cut += have[t.key] - t.trials
            t.trials = have[t.key]
    for t in reversed(plan):
        take = min(cut, t.trials - have[t.key])
        t.trials -= take
        cut -= take
    return plan


def _log(path: str):
    """The trials of the AutoTVM log ``path`` as (MeasureInput, MeasureResult) pairs: its records and
    those a joint choice of its convolutions' records moved to its history (:func:`.records.history`);
    none when both are missing."""
    from tvm import autotvm

    from .records import has_records, history

    for p in (path, history(path)):
        if has_records(p):
            yield from autotvm.record.load_from_file(p)


def records_per_task(path: str) -> dict[tuple, list[int]]:
    """The configuration indices each task has in the AutoTVM log ``path`` and its history, each
    once (none when both are missing)."""
    out: dict[tuple, dict[int, None]] = {}
    for inp, _ in _log(path):
        out.setdefault(task_key(inp.task), {})[inp.config.index] = None
    return {k: list(v) for k, v in out.items()}


def fastest(records) -> dict[tuple, tuple[float, int]]:
    """Each task's fastest error-free trial among ``records`` ((MeasureInput, MeasureResult) pairs):
    its mean time in seconds and its configuration's index, as AutoTVM picks a task's record."""
    out: dict[tuple, tuple[float, int]] = {}
    for inp, res in records:
        if res.error_no == 0 and res.costs:
            key, cost = task_key(inp.task), sum(res.costs) / len(res.costs)
            if key not in out or cost < out[key][0]:
                out[key] = (cost, inp.config.index)
    return out


def best_per_task(path: str) -> dict[tuple, float]:
    """Each task's fastest error-free trial in the AutoTVM log ``path`` and its history, in seconds
    (its mean time)."""
    return {key: cost for key, (cost, _) in fastest(_log(path)).items()}


class _Here:
    """What AutoTVM's timing asks of a session (a device, a global function), for this process: an
    RPC ``LocalSession`` would tag its devices as remote ones, which a local module cannot time."""

    @staticmethod
    def device(name, index=0):
        return tvm.device(name, index)

    @staticmethod
    def get_function(name):
        return tvm.get_global_func(name)


class LoadHere:
    """AutoTVM's module loader for trials timed on this machine: the built library loaded in the
    measuring worker itself (AutoTVM's own loader uploads it to an RPC server, where this TVM fails
    to load it: every trial an error). Picklable: the runner's worker processes receive it."""

    @contextlib.contextmanager
    def __call__(self, remote_kwargs, build_result):
        yield _Here(), tvm.runtime.load_module(build_result.filename)


def _tuner(task, target: str):
    """The tuner of ``task``: :mod:`.config_order`'s order where it has one, random search otherwise."""
    from tvm import autotvm

    from .config_order import ranked

    order = ranked(task, target)
    if order is None:
        return autotvm.tuner.RandomTuner(task)
    order = collections.deque(order)

    class OrderedTuner(autotvm.tuner.RandomTuner):
        """Configurations in :func:`ranked`'s order (those measured before skipped), then at random."""

        def next_batch(self, batch_size):
            out, seen = [], set(self.visited)
            while order and len(out) < batch_size:
                index = order.popleft()
                if index not in seen:
                    self.visited.append(index)
                    seen.add(index)
                    out.append(self.space.get(index))
            return out + super().next_batch(batch_size - len(out)) if len(out) < batch_size else out

    return OrderedTuner(task)


def _here_runner_class():
    from tvm import autotvm

    class HereRunner(autotvm.measure.RPCRunner):
        """AutoTVM's runner for this machine without a tracker or server: each trial timed in one
        worker process at a time (two timings at once on a small machine disturb each other)."""

        def __init__(self, **kwargs):
            super().__init__(key="here", host=None, port=None, n_parallel=1, module_loader=LoadHere(),
                             **kwargs)

        def set_task(self, task):
            self.task = task

    return HereRunner


def measure_option():
    """AutoTVM's measuring: builds in a local process pool, linked by the host's compiler as a shared
    library, timed here one trial at a time (:class:`LoadHere`)."""
    from tvm import autotvm
    from tvm.contrib import cc

    return autotvm.measure_option(
        builder=autotvm.LocalBuilder(timeout=TRIAL_TIMEOUT_S, build_func=cc.create_shared),
        runner=_here_runner_class()(number=1, repeat=TRIAL_REPEAT, min_repeat_ms=TRIAL_MIN_REPEAT_MS,
                                    timeout=TRIAL_TIMEOUT_S, enable_cpu_cache_flush=True))


def _same_entity(a, b) -> bool:
    """Whether two knob values are the same choice (a split's outer factor is -1 in the space)."""
    if hasattr(a, "size") and hasattr(b, "size"):
        return list(a.size[1:]) == list(b.size[1:])
    return repr(a) == repr(b)


def config_index(space, wanted) -> int | None:
    """The index in the configuration ``space`` of the configuration that takes, for each knob, its
    first value ``wanted(name, value)`` accepts; None where a knob has no such value or the
    configuration is not valid."""
    knob = []
    for name, knobs in space.space_map.items():
        pick = next((i for i in range(len(knobs)) if wanted(name, knobs[i])), None)
        if pick is None:
            return None
        knob.append(pick)
    index = space.knob2point(knob)
    return index if space.is_index_valid(index) else None


def fallback_index(task) -> int | None:
    """The index in ``task``'s configuration space of TVM's own untuned choice for it (the
    fallback configuration its template picks without records), or None where it has none there."""
    from tvm.autotvm.task.dispatcher import FallbackContext

    from tvm.autotvm.env import GLOBAL_SCOPE

    ctx, silent = FallbackContext(), GLOBAL_SCOPE.silent
    GLOBAL_SCOPE.silent = True  # not AutoTVM's warning that a fallback is used: that is the point here
    try:
        with ctx, tvm.target.Target(task.target):
            task.func(*task.args)
        (cfg,) = ctx.memory.values()
        return config_index(task.config_space, lambda name, value: _same_entity(value, cfg[name]))
    except Exception as e:  # noqa: BLE001 - a template without a fallback in its space: tuned from random
        log.debug("no fallback configuration for %s: %s", task.name, e)
        return None
    finally:
        GLOBAL_SCOPE.silent = silent


def _measure_fallback(task, option, path: str) -> list[int]:
    """Measure ``task``'s fallback configuration (:func:`fallback_index`) as its first trial,
    appended to the log ``path``: the best record of a task is then never worse than what TVM
    builds untuned (a random search's best of a few trials often is, and a record replaces the
    fallback). The indices measured."""
    from tvm import autotvm
    from tvm.autotvm.measure import MeasureInput, create_measure_batch

    index = fallback_index(task)
    if index is None:
        return []
    inputs = [MeasureInput(task.target, task, task.config_space.get(index))]
    results = create_measure_batch(task, option)(inputs)
    autotvm.callback.log_to_file(path)(None, inputs, results)
    return [index]


@contextlib.contextmanager
def _seeded(key: tuple):
    """AutoTVM's random search (Python's ``random``) seeded by the task: one task tuned with one
    budget samples the same configurations in any program and any run (tuning a model alone and
    through the pass differ only where the programs differ), the caller's random state kept."""
    state = random.getstate()
    random.seed(zlib.crc32(repr(key).encode()))
    try:
        yield
    finally:
        random.setstate(state)


def tune(plan: Sequence[Task], path: str, enabled: bool | None = None) -> int:
    """Run ``plan`` (from :func:`plan_trials`), appending each trial to the AutoTVM log ``path``;
    a task's trials already in the log count towards its plan and are not measured again. One
    op's rival implementations (:func:`rivals`) are tuned together: each its first
    :data:`RIVAL_TRIALS` (as many as the plan gives it, if fewer), then the rest of what the plan
    gives them all on the one with the fastest record, so the trials go to the kernel that ships.
    Returns the trials measured. A Ctrl-C (KeyboardInterrupt) stops it, the log keeping every
    trial measured."""
    from tvm import autotvm

    done = records_per_task(path)
    for t in plan:
        t.done, t.measured = len(done.get(t.key, ())), 0
    todo = sum(max(0, t.trials - t.done) for t in plan)
    option = measure_option()
    group = {id(t): g for g in rivals(plan) for t in g}
    with progress.bar(todo, "tuning", unit="trial", enabled=enabled) as bar:
        def counted(tuner, inputs, results):
            bar.update(len(results))

        def run(t: Task) -> None:
            n = t.trials - t.done - t.measured
            if n <= 0:
                return
            tuner = _tuner(t.task, str(t.task.target))
            # measured by an earlier run (or, for a rival tuned again, by this one): not again
            tuner.visited.extend(records_per_task(path).get(t.key, ()) if t.measured else done.get(t.key, ()))
            bar.set_postfix_str(t.task.name, refresh=False)
            if not t.done and not t.measured:  # the first trial of a task: TVM's own choice
                first = _measure_fallback(t.task, option, path)
                tuner.visited.extend(first)
                t.measured += len(first)
                bar.update(len(first))
                n -= len(first)
            before = bar.n
            if n > 0:
                with _seeded(t.key):
                    tuner.tune(n_trial=n, measure_option=option,
                               callbacks=[autotvm.callback.log_to_file(path), counted])
            t.measured += bar.n - before

        handled: set[int] = set()
        for t in plan:
            g = group.get(id(t))
            if g is None:
                run(t)
                continue
            if id(g[0]) in handled:
                continue
            handled.add(id(g[0]))
            total = sum(r.trials for r in g)
            for r in g:  # each one's first trials, then the rest on the fastest
                r.trials = min(r.trials, max(RIVAL_TRIALS, r.done))
                run(r)
            rest = total - sum(r.trials for r in g)
            best = best_per_task(path)
            for r in sorted(g, key=lambda r: (best.get(r.key, math.inf), g.index(r))):
                take = min(rest, len(r.task.config_space) - r.trials)
                if take > 0:
                    r.trials += take
                    rest -= take
                    run(r)
    return sum(t.measured for t in plan)


def check_tunable(records, target: str) -> None:
    """TuningError unless ``records`` (None, or the log tuning appends to) are AutoTVM's and the
    target's kernels can be timed here."""
    if records is not None and records.kind != "autotvm":
        raise TuningError(f"tune_trials appends AutoTVM trials; {records.path} holds {records.kind} records")
    from .target import runs_here

    if not runs_here(target):
        raise TuningError(f"tune_trials times trials on this machine, which does not run {target}")
