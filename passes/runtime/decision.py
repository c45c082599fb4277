"""Whether the pass keeps its result: how to judge it (:func:`judge`) and the runtime check.

:func:`judge` resolves ``check_runtime``, ``calibrate`` and ``min_gain`` from whether the target
runs here and what the cost model rests on (a :class:`Judgement`). :func:`runtime_check` builds the
input and the result (and calibration's other candidates), checks that they compute the same
outputs and, when the target runs here, times them in paired rounds (:func:`compare_modules`, the
rounds planned by :func:`~.timing.plan_timing`): a program is kept only if its median per-round
ratio is at most ``1 - RUNTIME_MARGIN`` and it won a sign test's share of the rounds
(:func:`wins_needed`).
"""
from __future__ import annotations

import dataclasses
import math
import statistics
import time
from typing import Any, Mapping, Sequence

import numpy as np
import tvm

from relay_eqsat.cost.base import FOREIGN_ERROR
from relay_eqsat.user_warnings import warn

from relay_eqsat.passes.relay.frontend import main_function
from .timing import one_run_seconds, paired_ratio, plan_timing, round_seconds, time_rounds
from .build import build_and_run, output_error, random_inputs
from relay_eqsat.passes.runtime.target import host_target, runs_here
from .remote import open_place


#: with ``check_runtime``, the optimized program is kept only if its median
#: per-round time ratio (after / before) is at most 1 - RUNTIME_MARGIN and it
#: was the faster of the two in at least RUNTIME_MIN_WINS of the
#: RUNTIME_REPEAT interleaved rounds (a sign test: by chance alone, 8 of 9
#: happens with probability 0.02). Each timing lasts at least
#: RUNTIME_MIN_REPEAT_MS. A 2-core machine shared with other jobs varies by
#: several percent between runs; a single median-vs-median comparison with a
#: 1% margin kept slower programs.
RUNTIME_MARGIN = 0.02


RUNTIME_REPEAT = 9


RUNTIME_MIN_WINS = 8


RUNTIME_MIN_REPEAT_MS = 50


#: a program too slow for RUNTIME_REPEAT rounds within ``check_time_limit`` is timed in fewer,
#: never fewer than this (then it must win every round: the sign test at the same level)
RUNTIME_MIN_ROUNDS = 6


#: the chance, for two programs equally fast, of winning the rounds a result needs (sign test)
RUNTIME_ALPHA = 0.02


#: the check's settings, part of a remembered verdict's key
RUNTIME_SETTINGS = f"{RUNTIME_MARGIN}/{RUNTIME_REPEAT}/{RUNTIME_MIN_WINS}/{RUNTIME_MIN_ROUNDS}/{RUNTIME_ALPHA}"


class EqSatVerificationError(RuntimeError):
    """``verify=True`` and the optimized module computes different outputs."""


@dataclasses.dataclass
class Judgement:
    """How the pass decides whether to keep its result, for one run.

    check_runtime  build and time both programs (on this machine, or on ``remote``'s device)
    calibrate      measure the compared programs' kernels (there, or here)
    calibrate_after_check
                   measure them only once the runtime check measured the cost model's pick no
                   faster, then extract again and check that (``calibrate="auto"`` with the check)
    min_gain       predicted gain required (0 when the runtime check decides; else the cost
                   model's calibrated error for the target, or the user's ``min_gain``)
    notes          why, in words (in the report as ``judged_by``)
    remote         the RPC tracker and key whose device measures (None: this machine)
    """

    check_runtime: bool
    calibrate: bool
    min_gain: float
    fallback_gain: float
    notes: str
    remote: Any = None
    records: Any = None  # the TuningRecords the programs ship with (built and judged under them)
    calibrate_after_check: bool = False


def judge(opts: Mapping[str, Any], cost_model, remote=None, device: str = "", records=None) -> Judgement:
    """Resolve ``check_runtime``, ``calibrate`` and ``min_gain`` (auto: from whether the target runs
    on this machine, or on a device of ``remote``'s RPC tracker, and what the cost model rests on).
    ``device``: what that device reports of its CPU (named in the notes); ``records``: the tuning
    records the programs are built under (:mod:`.records`)."""
    target = opts.get("target") or host_target()
    here = runs_here(target) or remote is not None
    where = (f"the device under key {remote.key!r} at tracker {remote.address}"
             + (f" ({device})" if device else "") if remote is not None else "this machine")
    check = {"on": True, "off": False, "auto": here}[opts["check_runtime"]]
    notes = []
    if check and not here:
        warn(f"EqSatPass: check_runtime needs a target that runs on this machine, not {target!r} "
             "(cross-compiling; rpc_tracker and rpc_key name devices that run it); a predicted gain beyond "
             "the cost model's error decides instead")
        check = False
    kind = getattr(cost_model, "kind", None)
    measurable = here and kind in ("auto", "measured")
    # measured kernels decide even on a CPU with shipped data: it covers the models it was measured
    # on, not the kernels a rewrite creates (SqueezeNet1.1 on Sapphire Rapids: the candidate chosen
    # on the shipped data ran 1.08x faster, the one chosen after measuring its new kernels 1.17x)
    calibrate = measurable and opts["calibrate"] != "off"  # "auto" is "on" where the target runs here
    # a cost object of the user's own (no calibrated_error) is trusted as little as another CPU's model
    error = (cost_model.calibrated_error() if callable(getattr(cost_model, "calibrated_error", None))
             else FOREIGN_ERROR)
    fallback = float(opts["min_gain"]) if opts.get("min_gain") is not None else error
    # where the whole programs are timed anyway, the cost model's pick is judged first and its
    # kernels measured only if it loses ("on": measured first, as without the check; with verify,
    # the output check alone, the cost model decides)
    after_check = calibrate and check and opts["calibrate"] == "auto" and not opts.get("verify")
    if after_check:
        notes.append(f"runtime measured on {where} (kernels measured there only if the cost model's pick "
                     "was no faster)")
    elif calibrate and check:
        notes.append(f"kernels and runtime measured on {where}")
    elif calibrate:
        notes.append(f"kernels measured on {where}")
    elif check:
        notes.append(f"runtime measured on {where}")
    if check:
        gain = float(opts["min_gain"]) if opts.get("min_gain") is not None else 0.0
    else:
        gain = fallback
        notes.append(f"predicted gain over {gain:.0%} required"
                     + (" (the cost model's calibrated error for this target)" if opts.get("min_gain") is None
                        else "") + (f"; cross-compiling for {target}, no device to measure on (rpc_tracker and "
                                    "rpc_key name one)" if not here else "; runtime not measured"))
    if records is not None and (check or calibrate or opts.get("verify")):
        built = "programs" if not calibrate else "kernels and programs" if check or opts.get("verify") else "kernels"
        notes.append(f"{built} built under {records.describe()}")
    return Judgement(check, calibrate, gain, fallback, "; ".join(notes), remote if here else None, records,
                     after_check)


def _check_inputs(mod: tvm.IRModule, seed: int) -> dict[str, np.ndarray]:
    _, func = main_function(mod)
    types = {v.name_hint: ([int(d) for d in v.checked_type.shape], str(v.checked_type.dtype))
             for v in func.params}
    return random_inputs(types, seed)


def wins_needed(rounds: int, alpha: float = RUNTIME_ALPHA) -> int:
    """The fewest wins out of ``rounds`` that two equally fast programs reach with
    probability at most ``alpha`` (one-sided sign test); ``rounds + 1`` if none does."""
    tail = 0.0
    for w in range(rounds, -1, -1):
        tail += math.comb(rounds, w) / 2 ** rounds
        if tail > alpha:
            return w + 1
    return 0


def compare_modules(before: tvm.IRModule, after: tvm.IRModule, seed: int = 0, rtol: float = 1e-4,
                    target: str | None = None, time_repeat: int = 0,
                    time_limit: float | None = None, others: Sequence[tvm.IRModule] = (),
                    place=None, builds=None, records=None) -> dict[str, Any]:
    """Build both modules for ``target`` (default: the host), run them on the
    same random inputs and raise :class:`EqSatVerificationError` if an output
    differs by more than ``rtol * max|output|``. With ``time_repeat``,
    also time both in up to ``time_repeat`` interleaved rounds, as many as fit in
    ``time_limit`` seconds but at least :data:`RUNTIME_MIN_ROUNDS` (when not even
    those fit, nothing is timed and ``untimed`` says why). Returns ``max_error``
    and, when timed, ``runtime_before`` and ``runtime_after`` (medians,
    seconds), ``ratio`` (the median of the per-round ratios after / before),
    ``wins`` (rounds in which ``after`` was faster) and ``rounds``.

    ``others``: more candidates for ``after``'s place, built, checked and timed in the same rounds
    as long as the rounds still fit with them (only when timing; ``others_untimed``: how many did
    not); then ``chosen`` is the index (0: ``after``, k: ``others[k - 1]``) of the one with the
    lowest median ratio, the figures above are its, and ``candidates`` holds every one's
    (``ratio``, ``wins``, ``runtime``). ``max_error`` is the largest of theirs.

    ``place`` (:mod:`.remote`): the device the programs run and are timed on (default: here).

    ``builds`` (a :class:`~.builder.Builder`): the programs are built in its child processes, the
    input (when not submitted already), the result and, beside them, the others, at once; an other
    is built only if a slot is free for it when the check begins (never after the result: the
    alternatives cost no build time of their own; ``others_unbuilt``: how many were not).
    ``records``: the tuning records every program is built under (the builder's own, with one)."""
    inputs = _check_inputs(before, seed)
    jobs = {}
    if builds is not None:
        jobs = {id(m): builds.submit(m, what) for m, what in ((before, "the input"), (after, "the result"))}
        for k, mod in enumerate(others if time_repeat > 0 else ()):
            jobs[id(mod)] = builds.submit(mod, f"alternative {k + 1}", beside=True)

    def run(mod, what):
        job = jobs.get(id(mod))
        return build_and_run(mod, inputs, target, place=place, what=what, records=records,
                             built=None if job is None else (lambda: builds.wait(job)))

    m_before, ref, _, first_before = run(before, "the input")

    def built_and_checked(mod, what="the result"):
        m, got, _, first = run(mod, what)
        err, why = output_error(ref, got)
        if why is not None:
            raise EqSatVerificationError(why)
        if not err <= rtol:
            raise EqSatVerificationError(f"max error {err:.3g} (relative) > {rtol:g}")
        return m, first, err

    m_after, first_after, err = built_and_checked(after)
    out: dict[str, Any] = {"max_error": err}
    if time_repeat <= 0:
        return out  # nothing timed: no other candidate could be chosen, none is built
    limit = math.inf if time_limit is None else time_limit

    def plan(run_seconds):
        return plan_timing(run_seconds, time_limit, max_repeat=time_repeat, fill_ms=RUNTIME_MIN_REPEAT_MS)

    timing_s = [0.0]  # seconds spent timing (not building): the rounds and each program's run time

    def run_seconds(m, first):
        t = time.perf_counter()
        seconds = one_run_seconds(m, first, limit, RUNTIME_MIN_ROUNDS)
        timing_s[0] += time.perf_counter() - t
        return seconds

    runs = [m_before, m_after]
    one_run = [run_seconds(m, first) for m, first in ((m_before, first_before), (m_after, first_after))]
    rounds = plan(one_run).repeat
    if rounds < min(RUNTIME_MIN_ROUNDS, time_repeat):
        per_round = round_seconds(one_run, plan(one_run), RUNTIME_MIN_REPEAT_MS)
        out["untimed"] = (f"one timing round takes {per_round:.2f} s: {RUNTIME_MIN_ROUNDS} rounds do not "
                          f"fit in check_time_limit={time_limit:g} s")
        return out
    if builds is not None:  # an other with no free slot beside the result is not built
        built = [mod for mod in others if jobs.get(id(mod)) is not None]
        if len(built) < len(others):
            out["others_unbuilt"] = len(others) - len(built)
        others = built
    for k, mod in enumerate(others):  # built and timed only while the rounds still fit with it (it runs about as long as the result)
        if plan(one_run + [one_run[1]]).repeat < rounds:
            break
        m, first, err = built_and_checked(mod, f"alternative {k + 1}")
        out["max_error"] = max(out["max_error"], err)
        seconds = run_seconds(m, first)
        if plan(one_run + [seconds]).repeat < rounds:
            break  # it ran slower than the result
        runs.append(m)
        one_run.append(seconds)
    if len(runs) - 2 < len(others):
        out["others_untimed"] = len(others) - (len(runs) - 2)
        for mod in others[len(runs) - 2:]:
            if jobs.get(id(mod)) is not None:
                builds.cancel(jobs[id(mod)])
    wall = list(plan(one_run).wall)
    rounds_start = time.perf_counter()
    t_before, *t_after = time_rounds(runs, repeat=rounds, min_repeat_ms=RUNTIME_MIN_REPEAT_MS, wall=wall)
    out["timing_seconds"] = timing_s[0] + time.perf_counter() - rounds_start
    candidates = []
    for t in t_after:
        ratio, wins = paired_ratio(t_before, t)
        candidates.append({"ratio": ratio, "wins": wins, "runtime": statistics.median(t)})
    chosen = min(range(len(candidates)), key=lambda k: candidates[k]["ratio"])
    best = candidates[chosen]
    out.update(runtime_before=statistics.median(t_before), runtime_after=best["runtime"],
               ratio=best["ratio"], wins=best["wins"], rounds=len(t_before))
    if len(candidates) > 1:
        out.update(chosen=chosen, candidates=candidates)
    return out


def runtime_check(before: tvm.IRModule, after: tvm.IRModule, opts: Mapping[str, Any],
                  report: dict, judgement: Judgement, others: Sequence[tvm.IRModule] = (),
                  builds=None) -> int | None:
    """``verify`` and the runtime check: which program to keep, ``after`` (0), one of ``others``
    (its index + 1: calibration's other candidates, timed in the same rounds, the fastest of them
    all judged) or none (None, the input stays); notes what it found in ``report``. A numerical
    mismatch of any raises with ``verify``, else (or when one fails to build) rejects them all with a
    warning; with ``judgement.check_runtime``, a program is kept only if measured faster: a median
    per-round speedup of at least :data:`RUNTIME_MARGIN`, and faster in at
    least :data:`RUNTIME_MIN_WINS` of :data:`RUNTIME_REPEAT` rounds (in fewer
    rounds, when a round is too slow for ``check_time_limit``, in
    :func:`wins_needed` of them; when not even :data:`RUNTIME_MIN_ROUNDS` fit,
    the predicted gain must exceed ``judgement.fallback_gain``). Outputs are
    compared on the host when the target does not run here. ``builds``: a
    :class:`~.builder.Builder` the programs are built by (:func:`compare_modules`; for a device of
    the RPC tracker too, whose upload takes the exported library as it is)."""
    timed = judgement.check_runtime
    others = others if timed else ()
    target = opts.get("target")
    place = None
    if judgement.remote is not None:  # both programs run on a device of the tracker, built for it
        try:
            place = open_place(judgement.remote, target)
        except Exception as e:  # noqa: BLE001 - TrackerError: it answered when the pass began
            warn(f"EqSatPass: no device for the runtime check ({e}); module left unchanged")
            report.update(changed=False, reason=f"not judged: no device for the runtime check ({e}); input kept")
            return None
        report["judged_on"] = {"key": judgement.remote.key, "tracker": judgement.remote.address,
                               "device": place.device, "address": place.where}
        report["judged_by"] = f"{report.get('judged_by', '')}; programs timed on {place.where}".lstrip("; ")
    elif not runs_here(target):
        target = None  # outputs compared on the host
    try:
        res = compare_modules(before, after, seed=opts["seed"], target=target,
                              time_repeat=RUNTIME_REPEAT if timed else 0,
                              time_limit=float(opts["check_time_limit"]), others=others, place=place,
                              builds=builds, records=judgement.records)
    except EqSatVerificationError as e:
        if opts.get("verify"):
            raise
        warn(f"EqSatPass: the optimized program computes different outputs ({e}); module left unchanged")
        report.update(changed=False, reason=f"rejected: outputs differ ({e})")
        return None
    except Exception as e:  # noqa: BLE001 - TVM failing to build either program
        if place is not None and not place.alive():  # the device went away: nothing is judged on half a timing
            warn(f"EqSatPass: {place.where} went away during the runtime check; module left unchanged")
            report.update(changed=False, reason=f"not judged: the device ({place.where}) went away during the "
                                                "runtime check; input kept")
            return None
        if opts.get("verify"):
            raise
        warn(f"EqSatPass: building for the runtime check failed ({type(e).__name__}: "
             f"{str(e).strip().splitlines()[-1] if str(e).strip() else ''}); module left unchanged")
        report.update(changed=False, reason=f"rejected: build failed ({type(e).__name__})")
        return None
    finally:
        if place is not None:
            place.close()  # the device goes back to the tracker
    report["verify_error"] = res["max_error"]
    if not timed:
        return 0
    if "untimed" in res:
        predicted = report.get("predicted_speedup", 1.0)
        report["runtime_untimed"] = res["untimed"]
        if predicted >= 1 + judgement.fallback_gain:
            return 0
        report.update(changed=False, reason=(f"{res['untimed']}, and the predicted {predicted:.3f}x is within the "
                                             f"cost model's error ({judgement.fallback_gain:.0%}); input kept"))
        return None
    before_s, after_s, ratio, wins, rounds = (res["runtime_before"], res["runtime_after"], res["ratio"],
                                              res["wins"], res["rounds"])
    chosen = res.get("chosen", 0)
    report.update(runtime_before=before_s, runtime_after=after_s, measured_speedup=1.0 / ratio,
                  runtime_wins=f"{wins}/{rounds}", check_timing_seconds=res["timing_seconds"])
    if res.get("others_untimed"):
        report["runtime_others_untimed"] = res["others_untimed"]
    if res.get("others_unbuilt"):
        report["runtime_others_unbuilt"] = res["others_unbuilt"]
    if "candidates" in res:
        report["runtime_candidates"] = [{"measured_speedup": 1.0 / c["ratio"], "runtime_wins": f"{c['wins']}/{rounds}"}
                                        for c in res["candidates"]]
        report["runtime_chosen"] = chosen
    if ratio <= 1 - RUNTIME_MARGIN and wins >= wins_needed(rounds):
        return chosen
    report.update(changed=False, reason=(f"measured no faster ({before_s * 1e3:.3f} ms -> {after_s * 1e3:.3f} ms, "
                                         f"median ratio {ratio:.3f}, faster in {wins}/{rounds} rounds); "
                                         "input kept"))
    return None
