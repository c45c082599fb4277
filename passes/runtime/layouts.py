"""A tuned program's convolution records chosen together, with the layout transforms between them.

On x86 a convolution's AutoTVM record picks its channel blocks (``tile_ic``, ``tile_oc``: NCHW8c,
NCHW16c, ...). Where a producer's output blocks differ from its consumer's input blocks, TVM puts a
``layout_transform`` kernel between them. Under a 512-trial log of MobileNet-v2 (Zen 3, one
thread), 40 such kernels took 10.6% of its kernel time. Taking each convolution's fastest record
alone ignores them.

:func:`choose` picks one record per convolution for the whole program, kernels and transforms
together. It times two candidates. One is AutoTVM's graph tuner's: dynamic programming over each
convolution's fastest :data:`CANDIDATES` records of distinct layouts, each transform timed here.
The other is each convolution's fastest record with the input block TVM's fallback ties below what
its producers write raised to theirs (:func:`raised_blocks`): trials time kernels alone and never
see that transform. The faster candidate is kept only if the program built under it beats the
program built under each kernel's fastest record, in :data:`ROUNDS` paired rounds with the runtime
check's margin and a sign test at its level (:mod:`.decision`). A kept choice leaves the
chosen records in the log the program is built with (what ``tvmc compile --tuning-records`` reads);
the records of those convolutions it displaces move to the log's history beside it
(:func:`.records.history`). Tuning reads the history as trials measured (:func:`.tuning.records_per_task`):
a resumed run measures none of them again. The verdict is kept beside the log (``<log>.choice``):
a later run on the same program, log, target, machine and thread count returns it without
choosing again (EfficientNet-B0's choice takes minutes, Zen 3). Under the pass's tuning the trials
it measures (fallbacks, raised configurations) come out of the budget (:func:`plan_with_choice`).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
import time
from typing import Any

import tvm

from .records import history

log = logging.getLogger(__name__)

#: the records per convolution the choice is made among: the fastest of each distinct pair of
#: (input, output) layouts, at most this many
CANDIDATES = 8
#: the paired rounds the choice is timed in, with the runtime check's margin and a sign test at its
#: level (36 of 54). A conv net runs in milliseconds, so they cost seconds; in 9 rounds a choice
#: measured 0.945 and 0.952 of the time on a noisy machine won only 5 and 7 (bench_tuning_12), below
#: the 8 that 9 rounds need, and in 27 SqueezeNet1.1's choice on one log won 19 (0.960, 20 needed)
#: in one run and 25 (0.962) in the next (Zen 3, bench_tuning_16)
ROUNDS = 54
#: the most of a tuning budget the choice's own trials may take (:func:`plan_with_choice`)
CHOICE_SHARE = 0.25
#: the templates whose input channel block :func:`raised_input_block` raises
_RAISABLE = frozenset({"conv2d_NCHWc.x86"})
#: the file beside a log that keeps the last choice's verdict on it (:func:`_remembered`)
MEMO_SUFFIX = ".choice"


class LayoutChoiceError(RuntimeError):
    """The program's convolutions cannot be chosen together (a graph the graph tuner does not take)."""


def _lines(path: str) -> list[tuple[str, Any]]:
    """The log ``path``'s lines, each with its decoded (MeasureInput, MeasureResult) (None where it is
    not a record)."""
    from tvm.autotvm.record import decode

    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [(line, decode(line)) for line in f if line.strip()]


def _ok(record) -> bool:
    return record is not None and record[1].error_no == 0 and bool(record[1].costs)


def _convolution_tasks(mod: tvm.IRModule, target: str) -> list:
    from .tuning import program_tasks

    if not _has_convolution(mod):  # no task extraction for nothing: BERT-base's takes a minute
        return []
    return [t for t in program_tasks({"the program": mod}, target) if "conv2d" in t.task.name]


def _has_convolution(mod: tvm.IRModule) -> bool:
    """Whether any function of ``mod`` calls a convolution operator."""
    found = []

    def visit(e):
        if isinstance(e, tvm.relay.Call) and isinstance(e.op, tvm.ir.Op) and "conv2d" in e.op.name:
            found.append(e)

    for _, func in mod.functions.items():
        if isinstance(func, tvm.relay.Function):
            tvm.relay.analysis.post_order_visit(func, visit)
    return bool(found)


def _input_shapes(mod: tvm.IRModule) -> dict[str, tuple]:
    shapes = {}
    for p in mod["main"].params:
        shape = p.checked_type.shape if p.checked_type is not None else ()
        if not all(isinstance(d, tvm.tir.IntImm) for d in shape):
            raise LayoutChoiceError(f"input {p.name_hint} has a dynamic shape")
        shapes[p.name_hint] = tuple(int(d) for d in shape)
    return shapes


def joint_records(mod: tvm.IRModule, path: str, target: str, convolutions=None,
                  allowance: int | None = None) -> tuple[list | None, int]:
    """One record per convolution of ``mod`` (weights bound), chosen with the layout transforms
    between them (AutoTVM's dynamic-programming graph tuner, transforms timed here), from the
    error-free records of the log ``path`` and its history. A convolution without one gets its
    fallback configuration measured first (appended to ``path``). The chosen (MeasureInput,
    MeasureResult) pairs and the fallbacks measured; LayoutChoiceError where the graph cannot be taken.
    ``convolutions``: ``mod``'s convolution tasks (:class:`.tuning.Task`), where extracted already.
    ``allowance``: the most fallbacks it may measure (None: no limit); where more are needed it
    measures none and returns (None, 0)."""
    from tvm import relay
    from tvm.autotvm.graph_tuner import DPTuner

    from .tuning import _log, _measure_fallback, measure_option, task_key

    typed = relay.transform.InferType()(mod)
    shapes = _input_shapes(typed)
    records = [r for r in _log(path) if _ok(r)]
    have = {task_key(inp.task) for inp, _ in records}
    missing = [t for t in (_convolution_tasks(typed, target) if convolutions is None else convolutions)
               if t.key not in have]  # the graph tuner needs each convolution's candidates
    if allowance is not None and len(missing) > allowance:
        return None, 0
    fallbacks = 0
    for t in missing:
        fallbacks += len(_measure_fallback(t.task, measure_option(), path))
    if fallbacks:  # appended to the log
        records = [r for r in _log(path) if _ok(r)]
    with tempfile.TemporaryDirectory() as tmp, _quiet(), _orphans_as_boundaries():
        try:
            tuner = DPTuner(typed["main"], shapes, records, [relay.op.get("nn.conv2d")],
                            target, max_sch_num=CANDIDATES, verbose=False,
                            log_file=os.path.join(tmp, "graph_tuner.log"), log_level=logging.WARNING)
            tuner.benchmark_layout_transform(runner=measure_option()["runner"])
            tuner.run()
            return [tuple(r) for r in tuner.get_optimal_records()], fallbacks
        except (KeyError, RuntimeError, tvm.TVMError, ValueError, IndexError) as e:
            raise LayoutChoiceError(f"the graph tuner cannot take this program ({type(e).__name__}: {e})") from e


def _without_orphans(in_nodes: dict, node_list, input_names) -> dict:
    """The graph tuner's map from each convolution (or element-wise op of several inputs) to its
    nearest such ancestors, ``in_nodes``, with no ancestor left out of it: an ancestor that is
    neither in the map nor a boundary node (a graph input, or an op that fixes the layout:
    ``strided_slice``, ``reshape``, ...) is replaced by its own nearest boundary nodes (none where
    only constants feed it). TVM's graph tuner drops an element-wise op of several inputs that
    all come from boundary nodes, but a convolution reading that op keeps it as an ancestor, and
    then the tuner fails on it (``KeyError: 'topi_op'``): EfficientNet-B0 with two padded
    convolutions' sliced outputs added before the next convolution. What such an op hands on is
    in the boundary's fixed layout, so a convolution reading it is chosen as one reading a graph
    input. Mutates and returns ``in_nodes``; a node left with no ancestor is a
    :class:`LayoutChoiceError`."""
    from tvm.autotvm.graph_tuner.utils import is_boundary_node

    def boundaries(i: int, seen: set) -> list[int]:
        if i in seen:
            return []
        seen.add(i)
        if is_boundary_node(node_list[i], input_names):
            return [i]
        return [b for j, *_ in node_list[i]["inputs"] for b in boundaries(j, seen)]

    for key, ancestors in in_nodes.items():
        if all(a in in_nodes or is_boundary_node(node_list[a], input_names) for a in ancestors):
            continue
        mended: list[int] = []
        for a in ancestors:
            for b in ([a] if a in in_nodes or is_boundary_node(node_list[a], input_names)
                      else boundaries(a, set())):
                if b not in mended:
                    mended.append(b)
        if not mended:
            raise LayoutChoiceError(f"node {key} of the graph tuner's graph has no input left")
        ancestors[:] = mended
    return in_nodes


@contextlib.contextmanager
def _orphans_as_boundaries():
    """TVM's graph tuner with its ancestor map mended (:func:`_without_orphans`) while it runs."""
    from tvm.autotvm.graph_tuner import base_graph_tuner

    original = base_graph_tuner.get_in_nodes

    def get_in_nodes(node_list, target_ops, input_names):
        return _without_orphans(original(node_list, target_ops, input_names), node_list, input_names)

    base_graph_tuner.get_in_nodes = get_in_nodes
    try:
        yield
    finally:
        base_graph_tuner.get_in_nodes = original


@contextlib.contextmanager
def _quiet():
    """The graph tuner's and AutoTVM's info logging and fallback warnings off while it runs."""
    from tvm.autotvm.env import GLOBAL_SCOPE

    loggers = [logging.getLogger(n) for n in ("autotvm", "graph_tuner", "root")]
    levels = [lg.level for lg in loggers]
    silent = GLOBAL_SCOPE.silent
    try:
        for lg in loggers:
            lg.setLevel(max(lg.level, logging.WARNING))
        GLOBAL_SCOPE.silent = True
        yield
    finally:
        GLOBAL_SCOPE.silent = silent
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def split_log(path: str, chosen) -> tuple[list[str], list[str]]:
    """The lines of the log ``path`` and of its history divided anew by the ``chosen`` records:
    (the log's, the history's). A workload that has a chosen record keeps only that configuration's
    record in the log (its first error-free one, brought back from the history if a choice before
    moved it there); every other workload's lines stay where they are. No line is lost or doubled."""
    from .tuning import task_key

    pick = {task_key(inp.task): inp.config.index for inp, _ in chosen}
    kept, displaced, seen = [], [], set()

    def chosen_here(record) -> tuple | None:
        key = task_key(record[0].task) if record is not None else None
        if key in pick and key not in seen and record[0].config.index == pick[key] and _ok(record):
            return key
        return None

    for line, record in _lines(path):
        key = task_key(record[0].task) if record is not None else None
        if key not in pick:
            kept.append(line)
        elif chosen_here(record):
            seen.add(key)
            kept.append(line)
        else:
            displaced.append(line)
    stay = []
    for line, record in _lines(history(path)):
        key = chosen_here(record)
        if key:
            seen.add(key)
            kept.append(line)
        else:
            stay.append(line)
    return kept, stay + displaced


def _write(path: str, lines) -> None:
    """``lines`` as the file ``path``, replaced at once (a file beside it renamed over it), with the
    permissions ``path`` had (a new file: those the umask gives, as ``open`` would)."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".layouts.", suffix=".log")
    try:
        mode = os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0o022)
        os.umask(umask)
        mode = 0o666 & ~umask
    os.fchmod(fd, mode)
    with os.fdopen(fd, "w") as f:
        f.writelines(line if line.endswith("\n") else line + "\n" for line in lines)
    os.replace(tmp, path)


def apply_choice(path: str, chosen) -> int:
    """Rewrite the log ``path`` and its :func:`.records.history` as :func:`split_log` divides them: the
    ``chosen`` records in the log in place of the other records of their convolutions, which move to
    the history. Each file is replaced at once. The records moved out of the log."""
    before = [line for line, _ in _lines(path)]
    kept, rest = split_log(path, chosen)
    if kept == before:
        return 0
    _write(history(path), rest)
    _write(path, kept)
    now = set(kept)
    return sum(1 for line in before if line not in now)


def raised_input_block(record, lanes: int | None) -> int | None:
    """The input channel block the convolution of ``record`` (a (MeasureInput, MeasureResult) pair)
    is handed by producers that write their largest block (:func:`~relay_eqsat.cost.simd.output_block`
    of its input channels), where its configuration takes a smaller one; None otherwise. TVM's x86
    fallback ties a convolution's input block to its output block (``ic_bn`` at most ``oc_bn``): with
    24 or 40 output channels it reads NCHW12c or NCHW10c while its producer writes NCHW16c, and a
    ``layout_transform`` runs between them (MobileNet-v2's 96 -> 24 and 144 -> 24 at 56 x 56:
    0.24 ms of 6.8, Sapphire-Rapids-class, tuned)."""
    return _raised(record[0].task, record[0].config, lanes)


def _raised(task, config, lanes: int | None) -> int | None:
    """:func:`raised_input_block` of ``task`` under ``config``."""
    from relay_eqsat.cost.simd import output_block

    if task.name not in _RAISABLE or not lanes:
        return None
    try:  # the workload's data tensor: ("TENSOR", (n, c, h, w), dtype)
        have = int(config["tile_ic"].size[-1])
        want = output_block(int(task.args[0][1][1]), lanes)
    except (KeyError, AttributeError, TypeError, ValueError, IndexError):  # another TVM's knobs
        return None
    return want if have < want else None


def choice_trials(plan, path: str, target: str) -> tuple[int, int]:
    """The trials :func:`choose` would measure on a program whose tasks tuning ``plan``
    (:class:`.tuning.Task`, trials planned) leaves in the log ``path``: (fallbacks, raised). A
    fallback for each convolution without a trial planned or logged (the graph tuner needs a record
    of each), and a raised configuration for each convolution whose fallback's input block
    :func:`raised_input_block` raises and that the log does not hold yet, where tuning tries the
    fallback's blocks first (:func:`.config_order.untuned_first`: most such convolutions keep them;
    elsewhere the blocks tuning finds are not known before it)."""
    from .tuning import records_per_task

    done = records_per_task(path)
    return _fallbacks_needed(plan, done), _raised_ahead(plan, done, target)


def _fallbacks_needed(plan, done) -> int:
    """:func:`choice_trials`' fallbacks, ``done`` the log's configurations per task."""
    return sum(1 for t in plan if "conv2d" in t.task.name and not t.trials and not done.get(t.key))


def _raised_ahead(tasks, done, target: str) -> int:
    """:func:`choice_trials`' raised configurations, ``done`` the log's configurations per task."""
    from relay_eqsat.cost.simd import simd_lanes

    from .config_order import untuned_first
    from .tuning import fallback_index

    lanes = simd_lanes(str(target))
    raised = 0
    for t in tasks:
        if t.task.name not in _RAISABLE or not untuned_first(t.task.config_space):
            continue
        index = fallback_index(t.task)
        config = None if index is None else t.task.config_space.get(index)
        block = None if config is None else _raised(t.task, config, lanes)
        if block is not None:
            raised += _with_input_block(t.task, config, block) not in (None, *done.get(t.key, ()))
    return raised


def plan_with_choice(shipped, compared, budget: int, path: str, target: str) -> tuple[list, int]:
    """:func:`.tuning.plan_shipped` with the trials :func:`choose` measures kept out of ``budget``:
    the raised configurations and the graph tuner's fallbacks (:func:`choice_trials`) where together
    they fit in :data:`CHOICE_SHARE` of it, else the raised ones alone (no more than that share).
    The plan, and the trials kept (``choose``'s ``allowance``): the log never holds more than
    ``budget`` trials of the programs, the choice's included, as tuning the input alone gets."""
    from .tuning import plan_shipped, records_per_task

    cap = int(budget * CHOICE_SHARE)
    done = records_per_task(path)
    raised = _raised_ahead(shipped, done, target)  # the plan does not change these
    reserve = 0
    while True:  # the fewer trials planned, the more fallbacks: until what is kept covers them
        plan = plan_shipped(shipped, compared, budget - reserve, path)
        both = raised + _fallbacks_needed(plan, done)
        need = both if both <= cap else min(raised, cap)
        if need <= reserve:
            return plan, reserve
        reserve = need


def _with_input_block(task, config, block: int) -> int | None:
    """The index of ``config`` with its ``tile_ic`` split's inner factor ``block``, every other knob
    kept; None where ``task``'s space has no such configuration."""
    from .tuning import _same_entity, config_index

    return config_index(task.config_space, lambda name, value: int(value.size[-1]) == block
                        if name == "tile_ic" else _same_entity(value, config[name]))


def raised_blocks(chosen, path: str, target: str, convolutions, limit: int | None = None) -> tuple[list, int]:
    """``chosen`` (one record per convolution) with each record whose input block
    :func:`raised_input_block` raises replaced by the same configuration with that block: its record
    from the log ``path`` or its history, else measured once here (appended to ``path``).
    ``convolutions``: the program's convolution tasks (:class:`.tuning.Task`; a record read from a
    log has no configuration space). The records, and how many were measured. An isolated trial
    does not see the transform a raised block saves (AutoTVM times each kernel alone, its input in
    its own layout; MobileNet-v2's 144 -> 24 timed 0.38 ms raised against 0.19, and ran 0.265 ms
    against 0.254 plus a 0.142 ms transform in the program), so the program built under them is
    timed (:func:`choose`). At most ``limit`` are measured (None: no limit); a record whose raised
    configuration is not logged and would be past it stays as it is."""
    from tvm import autotvm
    from tvm.autotvm.measure import MeasureInput, create_measure_batch

    from relay_eqsat.cost.simd import simd_lanes

    from .tuning import _log, measure_option, task_key

    lanes = simd_lanes(str(target))
    spaces = {t.key: t.task for t in convolutions}
    have = {}
    for r in _log(path):
        if _ok(r):
            have.setdefault((task_key(r[0].task), r[0].config.index), r)
    out, measured = [], 0
    for record in chosen:
        block = raised_input_block(record, lanes)
        task = spaces.get(task_key(record[0].task))
        index = None if block is None or task is None else _with_input_block(task, record[0].config, block)
        if index is None:
            out.append(record)
            continue
        found = have.get((task_key(task), index))
        if found is None and limit is not None and measured >= limit:  # the budget's share spent
            out.append(record)
            continue
        if found is None:
            inputs = [MeasureInput(task.target, task, task.config_space.get(index))]
            results = create_measure_batch(task, measure_option())(inputs)
            autotvm.callback.log_to_file(path)(None, inputs, results)
            measured += 1
            found = (inputs[0], results[0]) if _ok((inputs[0], results[0])) else None
        out.append(found if found is not None else record)
    return out, measured


def choose(mod: tvm.IRModule, path: str, target: str, rounds: int | None = None,
           allowance: int | None = None) -> dict[str, Any]:
    """Choose ``mod``'s convolution records together and keep the choice only if the program built
    under it is faster than ``mod`` built under the log ``path`` as it is, in paired rounds, by the
    runtime check's margin, with a sign test at its level over ``rounds`` rounds (default
    :data:`ROUNDS`). The candidates: the graph tuner's choice (:func:`joint_records`) and each
    convolution's fastest record with the input blocks TVM's fallback ties below their producers'
    raised (:func:`raised_blocks`); the faster of those that pass is kept (:func:`apply_choice`).
    ``allowance``: the most trials it may measure (the share of a tuning budget :func:`choice_trials`
    kept for it; None: no limit). The graph tuner's candidate is left out where the fallbacks it
    needs would not fit, and raised configurations are measured while the rest lasts.
    What was done, for the report: ``kept``, ``reason``, ``convolutions`` (chosen records),
    ``changed`` (of the kept or fastest candidate's records, those not each one's fastest),
    ``raised`` (of those, input blocks raised), ``fallbacks`` (convolutions the trials had left
    without a record, their fallback configuration measured), ``measured`` (raised blocks'
    configurations measured), ``joint`` (why the graph tuner's candidate was left out, if it was),
    ``ratio``/``wins``/``rounds`` (when timed), ``moved`` (records moved to the history) and
    ``seconds``."""
    from .build import executor, output_error, random_inputs, set_inputs
    from .decision import RUNTIME_MARGIN, RUNTIME_MIN_REPEAT_MS, wins_needed
    from .records import load_records
    from .timing import paired_ratio, time_rounds
    from .tuning import task_key

    t0 = time.perf_counter()
    out: dict[str, Any] = {"kept": False, "convolutions": 0, "changed": 0, "raised": 0, "moved": 0}
    convolutions = _convolution_tasks(mod, target)
    if not convolutions:
        return dict(out, reason="no convolution", seconds=time.perf_counter() - t0)
    program = _program_key(mod, target)
    remembered = _remembered(program, path)
    if remembered is not None:  # chosen on this log as it is now: nothing would come out otherwise
        return dict(remembered, remembered=True, moved=0, seconds=time.perf_counter() - t0)
    chosen, fallbacks = joint_records(mod, path, target, convolutions, allowance)
    if chosen is None:  # the graph tuner needs a record of every convolution: not within the budget
        chosen = []
        out["joint"] = "left out: the fallbacks it needs are past the budget"
    fastest = _fastest_records(path, convolutions)
    best = {task_key(r[0].task): r[0].config.index for r in fastest}
    raised, measured = raised_blocks(fastest, path, target, convolutions,
                                     None if allowance is None else allowance - fallbacks)

    def differing(records) -> int:
        return sum(1 for r in records if best.get(task_key(r[0].task)) != r[0].config.index)

    candidates = [c for c in (chosen, raised) if differing(c)]
    out.update(convolutions=len(chosen) or len(fastest), changed=differing(chosen), fallbacks=fallbacks,
               measured=measured)
    if not candidates:
        out["reason"] = "each convolution's fastest record is the joint choice"
        _remember(program, path, out)
        return dict(out, seconds=time.perf_counter() - t0)
    rounds = rounds or ROUNDS
    with tempfile.TemporaryDirectory() as tmp:
        sets = [load_records(path)]
        for k, c in enumerate(candidates):
            trial = os.path.join(tmp, f"choice{k}.log")
            _write(trial, split_log(path, c)[0])
            sets.append(load_records(trial))
        typed = tvm.relay.transform.InferType()(mod)
        inputs = random_inputs({p.name_hint: ([int(d) for d in p.checked_type.shape], p.checked_type.dtype)
                                for p in typed["main"].params}, seed=0)
        modules, outputs = [], []
        for lib in _build_all(mod, target, sets):
            m = executor(lib, tvm.cpu(0))
            set_inputs(m, inputs)
            m.run()
            modules.append(m)
            outputs.append([m.get_output(i).numpy() for i in range(m.get_num_outputs())])
        for k in range(len(candidates)):
            error, why = output_error(outputs[0], outputs[k + 1])
            if not error <= 1e-4:
                return dict(out, reason=f"outputs differ under the choice ({why or f'{error:.3g}'})",
                            seconds=time.perf_counter() - t0)
        times = time_rounds(modules, repeat=rounds, min_repeat_ms=RUNTIME_MIN_REPEAT_MS)
    verdicts = [paired_ratio(times[0], t) for t in times[1:]]
    passed = [ratio <= 1 - RUNTIME_MARGIN and wins >= wins_needed(rounds) for ratio, wins in verdicts]
    k = min(range(len(candidates)), key=lambda k: (not passed[k], verdicts[k][0]))
    (ratio, wins), pick = verdicts[k], candidates[k]
    out.update(ratio=ratio, wins=wins, rounds=rounds, changed=differing(pick),
               raised=differing(pick) if pick is raised else 0)
    if passed[k]:
        out.update(kept=True, moved=apply_choice(path, pick),
                   reason=f"faster: median ratio {ratio:.3f}, {wins}/{rounds} rounds")
    else:
        out["reason"] = f"not faster: median ratio {ratio:.3f}, {wins}/{rounds} rounds"
    out["seconds"] = time.perf_counter() - t0
    _remember(program, path, out)
    return out


def _program_key(mod: tvm.IRModule, target: str) -> str:
    """What a choice's verdict rests on besides the log: the program, the target, this machine and the
    runtime's thread count."""
    from .target import host_target
    from .verdicts import program_hash, runtime_threads

    return "|".join([program_hash(mod), str(target), host_target(), runtime_threads()])


def _memo_key(program: str, path: str) -> str:
    """``program`` (:func:`_program_key`) with the log's content."""
    with open(path, "rb") as f:
        return program + "|" + hashlib.sha256(f.read()).hexdigest()


def _remembered(program: str, path: str) -> dict[str, Any] | None:
    """The report of the choice last made on the program ``program`` (:func:`_program_key`) with the
    log ``path`` as it is now (the log after it: a kept choice's records, a rejected one's log as
    tuned), or None."""
    try:
        with open(path + MEMO_SUFFIX) as f:
            stored = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(stored, dict) or stored.get("key") != _memo_key(program, path):
        return None
    report = stored.get("report")
    return report if isinstance(report, dict) else None


def _remember(program: str, path: str, report: dict[str, Any]) -> None:
    """Keep the choice's verdict beside the log, keyed by the log as the choice left it."""
    try:
        _write(path + MEMO_SUFFIX, [json.dumps({"key": _memo_key(program, path), "report": report}) + "\n"])
    except OSError as e:  # the choice is in the log: only the next run's shortcut is lost
        log.warning("the convolutions' choice could not be remembered beside %s: %s", path, e)


def _build_all(mod: tvm.IRModule, target: str, record_sets) -> list:
    """``mod`` built under each of ``record_sets``: at once, each in a child process of its own
    (:class:`~.builder.Builder`), where builds can run in children here; else one after the other
    in this process (also where the pass's machine has one CPU). EfficientNet-B0's two builds took
    69 s of the step's 229 one after the other (Zen 3)."""
    from relay_eqsat.cost.pool import default_jobs

    from .build import build
    from .builder import Builder, unavailable

    if unavailable(target) is not None or default_jobs() < 2:
        return [build(mod, target=target, records=records) for records in record_sets]
    with contextlib.ExitStack() as stack:
        builders = [stack.enter_context(Builder(target, 1, records)) for records in record_sets]
        jobs = [b.submit(mod, f"the program under records {k + 1}") for k, b in enumerate(builders)]
        return [b.wait(job) for b, job in zip(builders, jobs)]


def _fastest_records(path: str, convolutions) -> list:
    """The record AutoTVM builds each of ``convolutions`` (:class:`.tuning.Task`) with from the log
    ``path`` (its fastest), for those that have one."""
    from .tuning import fastest, task_key

    records = [r for _, r in _lines(path) if _ok(r)]
    best = fastest(records)
    out: dict[tuple, tuple] = {}
    for r in records:
        key = task_key(r[0].task)
        if key in best and r[0].config.index == best[key][1]:
            out.setdefault(key, r)
    return [out[t.key] for t in convolutions if t.key in out]


def _fastest(path: str) -> dict[tuple, int]:
    """Each task's fastest configuration in the log ``path`` alone (the one AutoTVM builds with)."""
    from .tuning import fastest

    return {key: index for key, (_, index) in fastest(r for _, r in _lines(path) if r is not None).items()}


def _timed_first(report) -> str:
    timed = [f"{report[k]} {what}" for k, what in (("fallbacks", "fallbacks"),
                                                    ("measured", "raised configurations")) if report.get(k)]
    return f" ({' and '.join(timed)} timed first)" if timed else ""


def layouts_in_words(report) -> str:
    """:func:`choose`'s report in a line."""
    if not report.get("convolutions"):
        return str(report.get("reason", "not done"))
    return (f"{report['changed']} of {report['convolutions']} convolutions' records differ from each one's "
            f"fastest" + (f", {report['raised']} input blocks raised" if report.get("raised") else "")
            + _timed_first(report)
            + ("; the graph tuner's candidate left out (its fallbacks past the budget)" if report.get("joint") else "")
            + f"; {report['reason']}" + ("; kept" if report.get("kept") else "; each kernel's fastest kept")
            + (" (remembered from an earlier run)" if report.get("remembered")
               else f" ({report['seconds']:.0f} s)" if "seconds" in report else ""))
