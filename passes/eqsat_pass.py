"""EqSatPass: the Relay module pass (main -> TensorGraph -> optimize -> Relay).

Options come from the constructor, else from the PassContext config
(``relay.eqsat.<option>``), else from :data:`DEFAULT_OPTIONS`.

PassContext config keys: this TVM (0.16, C++ ``PassConfigManager``) rejects
unregistered keys and offers no Python API to register them. Importing this
module therefore wraps ``tvm.transform.PassContext.__init__``: keys starting
with ``relay.eqsat.`` are taken out of ``config`` before the C++ constructor
sees them and kept in a side table keyed by the context object; the pass
reads them back with :func:`eqsat_config`. ``PassContext.list_configs()``
also lists them (IntImm for int/bool options, runtime.String otherwise, parsed
by the pass), so ``tvmc compile --pass-config relay.eqsat.budget=8`` works.
``relay_eqsat.passes`` must be imported before such a PassContext is created
(importing ``EqSatPass`` does it); ``PassContext.current().config`` does not
show these keys.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import math
import statistics
import time
import weakref
from typing import Any, Mapping, Sequence

import numpy as np
import tvm
from tvm import relay

from relay_eqsat.cost.base import FOREIGN_ERROR
from relay_eqsat.graph import TensorGraph, TensorType
from relay_eqsat.optimize import optimize_graph, resolve_cost, resolve_rules, rules_in_words
from relay_eqsat.options import DEFAULTS, OPTIMIZER_OPTIONS, OPTIONS, set_hook, validate
from relay_eqsat.user_warnings import warn

from .relay import UnsupportedProgram, from_relay, main_function, to_relay
from .runtime import (FIRST_RUN_TRUSTED_S, WALL_CLOCK_S, build_and_run, output_error, paired_ratio, random_inputs,
                      time_rounds, timer)
from .scale_guard import runtime_scaled_weights
from .simplify_copies import copied_ops
from .target import host_target, runs_here
from .verdicts import Verdicts, content_fingerprint, program_record

log = logging.getLogger(__name__)

CONFIG_PREFIX = "relay.eqsat."

#: option -> default value: every option of the pass, from the schema (relay_eqsat.options:
#: the optimizer's options, verify, check_runtime, calibrate, the time limits, min_gain).
DEFAULT_OPTIONS: dict[str, Any] = dict(DEFAULTS)

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

#: function attribute of an optimized ``main`` holding the report's summary (JSON)
REPORT_ATTR = "relay_eqsat.report"

_SUMMARY_KEYS = ("search", "stop_reason", "iterations", "rules_fired", "rules_in_result", "egraph_nodes",
                 "cost_before", "cost_after", "predicted_speedup", "extractor", "extract_status", "optimal",
                 "search_time", "extract_time", "total_time", "runtime_before", "runtime_after",
                 "measured_speedup", "runtime_candidates", "runtime_chosen")


def _report_summary(report: Mapping[str, Any]) -> dict:
    return {k: report[k] for k in _SUMMARY_KEYS if k in report}


class EqSatVerificationError(RuntimeError):
    """``verify=True`` and the optimized module computes different outputs."""


# -- PassContext config side table ----------------------------------------------

_CONFIG: dict[int, dict[str, Any]] = {}


def _ctx_key(ctx) -> int:
    return int(ctx.handle.value)


def _install_config_hook() -> None:
    cls = tvm.transform.PassContext
    if getattr(cls.__init__, "_relay_eqsat_hook", False):
        return
    original = cls.__init__

    def __init__(self, *args, **kwargs):
        # config is the 5th positional parameter of PassContext.__init__
        config = kwargs.get("config", args[4] if len(args) > 4 else None)
        ours = {}
        if config:
            config = dict(config)
            for k in [k for k in config if str(k).startswith(CONFIG_PREFIX)]:
                ours[k[len(CONFIG_PREFIX):]] = config.pop(k)
            if len(args) > 4:
                args = args[:4] + (config,) + args[5:]
            else:
                kwargs["config"] = config
        original(self, *args, **kwargs)
        if ours:
            key = _ctx_key(self)
            _CONFIG[key] = ours
            # the wrapper keeps the C++ context alive, so the key is not reused before this runs
            weakref.finalize(self, _CONFIG.pop, key, None)

    __init__._relay_eqsat_hook = True
    __init__.__wrapped__ = original
    __init__.__doc__ = original.__doc__
    cls.__init__ = __init__

    # list them too, so tools that validate keys against list_configs() (tvmc
    # --pass-config) accept them; tvmc parses IntImm (ints, true/false) and strings
    original_list = cls.list_configs

    def list_configs():
        configs = dict(original_list())
        for name, option in OPTIONS.items():
            typ = "IntImm" if option.type in (int, bool) else "runtime.String"
            configs[CONFIG_PREFIX + name] = {"type": typ}
        return configs

    list_configs.__doc__ = original_list.__doc__
    cls.list_configs = staticmethod(list_configs)


_install_config_hook()


def eqsat_config(ctx=None) -> dict[str, Any]:
    """The ``relay.eqsat.*`` options of a PassContext (default: the current
    one), without the prefix."""
    ctx = ctx if ctx is not None else tvm.transform.PassContext.current()
    return dict(_CONFIG.get(_ctx_key(ctx), {}))


def _plain(value: Any) -> Any:
    """A PassContext config value as a Python one (IntImm/FloatImm -> number, String -> str)."""
    if isinstance(value, tvm.runtime.String):
        return str(value)
    if isinstance(value, (tvm.tir.IntImm, tvm.tir.FloatImm)):
        return value.value
    return value


def _check_target(target: str) -> str:
    """The schema's hook for ``target``: the string, if TVM can make a Target of it."""
    try:
        tvm.target.Target(target)
    except Exception as e:  # noqa: BLE001 - TVM raises ValueError or TVMError
        text = str(e).strip()
        raise ValueError(f"{target!r} is not a TVM target ({text.splitlines()[-1] if text else type(e).__name__})"
                         ) from None
    return target


set_hook("target", _check_target)


def resolve_options(explicit: Mapping[str, Any], ctx=None) -> dict[str, Any]:
    """Constructor options over PassContext config over defaults, each
    validated through the schema (:mod:`relay_eqsat.options`); ValueError
    naming a bad option or value."""
    opts = dict(DEFAULT_OPTIONS)
    config = {name: _plain(value) for name, value in eqsat_config(ctx).items()}
    opts.update(validate(config, what="PassContext option relay.eqsat"))
    opts.update(validate(explicit, what="EqSatPass option"))
    return opts


# -- the optimizer seam ---------------------------------------------------------------

def optimize(graph: TensorGraph, options: Mapping[str, Any]) -> tuple[TensorGraph, dict]:
    """The optimizer between frontend and backend: TensorGraph -> cheaper
    equivalent TensorGraph (or the input itself), plus the report as a dict
    (``alternatives``: the optimizer's other candidates, ``Candidate`` objects, for the runtime check).
    ``options`` are the pass's options after :func:`judge` (``calibrate`` and
    ``min_gain`` resolved, ``cost`` a CostModel)."""
    opts = {k: v for k, v in options.items() if k in OPTIMIZER_OPTIONS}
    if opts.get("target") is None:
        opts["target"] = host_target()
    new_graph, report = optimize_graph(graph, opts, min_gain=float(options.get("min_gain") or 0.0),
                                       calibrate=bool(options.get("calibrate")),
                                       calibrate_time_limit=float(options["calibrate_time_limit"]),
                                       runtime_decides=bool(options.get("runtime_decides")))
    return new_graph, dict(report.to_dict(), alternatives=report.alternatives)



@dataclasses.dataclass
class Judgement:
    """How the pass decides whether to keep its result, for one run.

    check_runtime  build and time both programs here (the target runs on this machine)
    calibrate      measure the compared programs' kernels here first (no cost data for this CPU)
    min_gain       predicted gain required (0 when the runtime check decides; else the cost
                   model's calibrated error for the target, or the user's ``min_gain``)
    notes          why, in words (in the report as ``judged_by``)
    """

    check_runtime: bool
    calibrate: bool
    min_gain: float
    fallback_gain: float
    notes: str


def judge(opts: Mapping[str, Any], cost_model) -> Judgement:
    """Resolve ``check_runtime``, ``calibrate`` and ``min_gain`` (auto: from whether the target runs
    on this machine and what the cost model rests on)."""
    target = opts.get("target") or host_target()
    here = runs_here(target)
    check = {"on": True, "off": False, "auto": here}[opts["check_runtime"]]
    notes = []
    if check and not here:
        warn(f"EqSatPass: check_runtime needs a target that runs on this machine, not {target!r} "
             "(cross-compiling); a predicted gain beyond the cost model's error decides instead")
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
    if calibrate:
        notes.append("kernels measured on this machine")
    if check:
        notes.append("runtime measured on this machine")
        gain = float(opts["min_gain"]) if opts.get("min_gain") is not None else 0.0
    else:
        gain = fallback
        notes.append(f"predicted gain over {gain:.0%} required"
                     + (" (the cost model's calibrated error for this target)" if opts.get("min_gain") is None
                        else "") + ("; cross-compiling" if not here else "; runtime not measured"))
    return Judgement(check, calibrate, gain, fallback, "; ".join(notes))


# -- the pass -------------------------------------------------------------------------

def _input_in_our_form(typed: tvm.IRModule, graph: TensorGraph, signature, func, report: dict) -> TensorGraph:
    """``graph`` (the input in the frontend's form), marked changed in ``report``, when TVM builds it
    better than the input itself: SimplifyExpr would copy shared work of the input and not of
    ``graph`` (`simplify_copies`), or FoldScaleAxis would scale weights of the input by run-time
    values on every inference, which ``to_relay`` guards (`scale_guard`); else ``graph`` with
    ``report`` untouched (the input goes on)."""
    why = []
    copies, scaled = copied_ops(typed), runtime_scaled_weights(typed)
    if copies or scaled:
        mod = relay.transform.InferType()(tvm.IRModule.from_expr(to_relay(graph, signature=signature,
                                                                          attrs=func.attrs)))
        left = copied_ops(mod) if copies else 0
        if left < copies:
            report["simplify_copies"] = [copies, left]
            why.append(f"TVM's SimplifyExpr copies {copies} shared operator calls of the input (its add(x, x) "
                       f"-> multiply(x, 2) rewrite loses the sharing), {left} of this form")
        unguarded = runtime_scaled_weights(mod) if scaled else 0
        if unguarded < scaled:  # a weighted op the frontend keeps opaque (an NHWC convolution) keeps its scale
            report["scale_guards"] = [scaled, unguarded]
            why.append(f"TVM's FoldScaleAxis scales {scaled} weights of the input by values computed at run time, "
                       f"on every inference, {unguarded} of this form")
    if not why:
        return graph
    before = (report.get("reason") or "nothing cheaper found").removesuffix("; input kept")
    report.update(changed=True, reason=f"the input in relay-eqsat's form ({before}): " + "; ".join(why))
    return graph


def _signature(graph: TensorGraph) -> list[tuple[str, TensorType]]:
    """(name, type) of the graph's var nodes in order: the frontend adds every
    parameter, so unused ones survive an optimizer that drops them."""
    return [(graph[i].attrs["name"], graph[i].type) for i in graph.inputs]


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


def _one_run_seconds(m, first_run_s: float, time_limit: float) -> float:
    """Seconds of one run of ``m``: its first run (``build_and_run``'s ``first_run_s``)
    when that is :data:`FIRST_RUN_TRUSTED_S` or more, or when even half of it would not
    let :data:`RUNTIME_MIN_ROUNDS` rounds fit in ``time_limit`` (a slow model is not run
    again just to learn it is slow), else one warm timed run."""
    if first_run_s >= FIRST_RUN_TRUSTED_S or first_run_s / 2 * RUNTIME_MIN_ROUNDS > time_limit:
        return first_run_s
    return timer(m)()[0]


def compare_modules(before: tvm.IRModule, after: tvm.IRModule, seed: int = 0, rtol: float = 1e-4,
                    target: str | None = None, time_repeat: int = 0,
                    time_limit: float | None = None, others: Sequence[tvm.IRModule] = ()) -> dict[str, Any]:
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
    (``ratio``, ``wins``, ``runtime``). ``max_error`` is the largest of theirs."""
    inputs = _check_inputs(before, seed)
    m_before, ref, _, first_before = build_and_run(before, inputs, target)

    def built_and_checked(mod):
        m, got, _, first = build_and_run(mod, inputs, target)
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
    runs = [m_before, m_after]
    one_run = [_one_run_seconds(m, first, limit) for m, first in ((m_before, first_before), (m_after, first_after))]
    rounds, wall, per_round = _timing_plan(one_run, time_repeat, time_limit)
    if rounds < min(RUNTIME_MIN_ROUNDS, time_repeat):
        out["untimed"] = (f"one timing round takes {per_round:.2f} s: {RUNTIME_MIN_ROUNDS} rounds do not "
                          f"fit in check_time_limit={time_limit:g} s")
        return out
    for mod in others:  # built and timed only while the rounds still fit with it (it runs about as long as the result)
        if _timing_plan(one_run + [one_run[1]], time_repeat, time_limit)[0] < rounds:
            break
        m, first, err = built_and_checked(mod)
        out["max_error"] = max(out["max_error"], err)
        seconds = _one_run_seconds(m, first, limit)
        if _timing_plan(one_run + [seconds], time_repeat, time_limit)[0] < rounds:
            break  # it ran slower than the result
        runs.append(m)
        one_run.append(seconds)
    if len(runs) - 2 < len(others):
        out["others_untimed"] = len(others) - (len(runs) - 2)
    wall = _timing_plan(one_run, time_repeat, time_limit)[1]
    t_before, *t_after = time_rounds(runs, repeat=rounds, min_repeat_ms=RUNTIME_MIN_REPEAT_MS, wall=wall)
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


def _timing_plan(one_run: Sequence[float], time_repeat: int, time_limit: float | None) -> tuple[int, list[bool], float]:
    """(rounds, wall-clock flags, seconds a round takes) for timing programs whose one run takes
    ``one_run`` seconds each: ``time_repeat`` rounds, fewer where they would not fit in
    ``time_limit``. A program of WALL_CLOCK_S or more is timed by the wall clock: TVM's
    time_evaluator would run it once untimed before every timing, doubling what the check takes
    (DistilBERT's 10.9-s input: 9 rounds took 200 s where 120 were allowed)."""
    wall = [s >= WALL_CLOCK_S for s in one_run]
    floor = RUNTIME_MIN_REPEAT_MS / 1e3
    per_round = sum(s if w else max(floor, s) + s for s, w in zip(one_run, wall))
    rounds = time_repeat if time_limit is None else min(time_repeat, int(time_limit // per_round))
    return rounds, wall, per_round


def runtime_check(before: tvm.IRModule, after: tvm.IRModule, opts: Mapping[str, Any],
                  report: dict, judgement: Judgement, others: Sequence[tvm.IRModule] = ()) -> int | None:
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
    compared on the host when the target does not run here."""
    timed = judgement.check_runtime
    others = others if timed else ()
    target = opts.get("target")
    target = target if runs_here(target) else None
    try:
        res = compare_modules(before, after, seed=opts["seed"], target=target,
                              time_repeat=RUNTIME_REPEAT if timed else 0,
                              time_limit=float(opts["check_time_limit"]), others=others)
    except EqSatVerificationError as e:
        if opts.get("verify"):
            raise
        warn(f"EqSatPass: the optimized program computes different outputs ({e}); module left unchanged")
        report.update(changed=False, reason=f"rejected: outputs differ ({e})")
        return None
    except Exception as e:  # noqa: BLE001 - TVM failing to build either program
        if opts.get("verify"):
            raise
        warn(f"EqSatPass: building for the runtime check failed ({type(e).__name__}: "
             f"{str(e).strip().splitlines()[-1] if str(e).strip() else ''}); module left unchanged")
        report.update(changed=False, reason=f"rejected: build failed ({type(e).__name__})")
        return None
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
                  runtime_wins=f"{wins}/{rounds}")
    if res.get("others_untimed"):
        report["runtime_others_untimed"] = res["others_untimed"]
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


def _with_main(typed: tvm.IRModule, main) -> tvm.IRModule:
    """``typed`` with ``main`` in place of its main, types inferred."""
    return relay.transform.InferType()(tvm.IRModule(
        {gv: (main if gv.name_hint == "main" else f) for gv, f in typed.functions.items()}, typed.type_definitions))


def _module(typed: tvm.IRModule, func, graph: TensorGraph, signature) -> tvm.IRModule:
    """``typed`` with its main replaced by ``graph`` in Relay, type-checked against ``func``'s type
    (RuntimeError if it differs)."""
    new_mod = _with_main(typed, to_relay(graph, signature=signature, attrs=func.attrs))
    if not tvm.ir.structural_equal(new_mod["main"].checked_type, func.checked_type):
        raise RuntimeError(f"the optimized main has type {new_mod['main'].checked_type}, not {func.checked_type}")
    return new_mod


def _with_report(mod: tvm.IRModule, report: Mapping[str, Any]) -> tvm.IRModule:
    """``mod`` with the report's summary in its main's :data:`REPORT_ATTR`."""
    return _with_main(mod, mod["main"].with_attr(REPORT_ATTR, json.dumps(_report_summary(report))))


def bind_params(mod: tvm.IRModule, params: Mapping[str, Any]) -> tvm.IRModule:
    """``mod`` with the parameters of ``main`` named in ``params`` replaced by
    constants (as ``relay.build(..., params=)`` does; names ``main`` does not
    take are ignored), type-checked. The rewrite rules' ``(const ?w)``
    preconditions only hold for weights bound this way."""
    values = {k: v if isinstance(v, tvm.nd.NDArray) else tvm.nd.array(np.asarray(v))
              for k, v in params.items()}
    mod = relay.transform.InferType()(mod)
    func = relay.build_module.bind_params_by_name(mod["main"], values)
    new_mod = tvm.IRModule({gv: (func if gv.name_hint == "main" else f)
                            for gv, f in mod.functions.items()}, mod.type_definitions)
    return relay.transform.InferType()(new_mod)


def format_summary(report: Mapping[str, Any]) -> str:
    """One line for the log: what changed, why the search stopped, costs, times, rules fired and
    the rules the returned program (or the rejected candidate) came from."""
    fired = report.get("rules_fired") or {}
    top = sorted(((k, v) for k, v in fired.items() if v), key=lambda kv: -kv[1])
    rules = ", ".join(f"{k}x{v}" for k, v in top[:5]) + (f", +{len(top) - 5} more" if len(top) > 5 else "")
    used = rules_in_words(report.get("rules_in_result") or {}, 5)
    before, after = report.get("cost_before", 0.0), report.get("cost_after", 0.0)
    return (f"{'changed' if report.get('changed') else 'unchanged'} ({report.get('reason', '')}); "
            f"search {report.get('search', '?')} stopped: {report.get('stop_reason', '?')}, "
            f"e-graph {report.get('egraph_nodes', 0)} nodes; predicted cost {before * 1e3:.4f} ms -> "
            f"{after * 1e3:.4f} ms ({before / after if after > 0 else 1.0:.3f}x); "
            + (f"measured {report['runtime_before'] * 1e3:.3f} ms -> {report['runtime_after'] * 1e3:.3f} ms"
               + (f" (the fastest of {len(report['runtime_candidates'])} candidates)"
                  if report.get("runtime_candidates") else "") + "; "
               if "runtime_after" in report else "")
            + f"{report.get('seconds', report.get('total_time', 0.0)):.2f} s; "
            f"{sum(fired.values())} rule applications [{rules}]"
            + (f"; {'result' if report.get('changed') else 'candidate'} from [{used}]" if used else ""))


@tvm.transform.module_pass(opt_level=0, name="EqSatPass")
class EqSatPass:
    """Optimize ``main`` by equality saturation (see :data:`DEFAULT_OPTIONS`).

    The rewrite rules only fire on weights that are constants: pass
    ``params={name: array}`` to bind them by name first (as ``relay.build``
    does; the result's ``main`` then no longer takes them, whether or not the
    program changed, and ``relay.build`` ignores param names ``main`` does not
    take), or bind them yourself with
    ``relay.build_module.bind_params_by_name``. ``params`` is a constructor
    option only (not read from the PassContext).

    An optimized ``main`` carries the report's summary as JSON in its function
    attribute ``relay_eqsat.report`` (:data:`REPORT_ATTR`); the summary is
    logged at INFO on ``relay_eqsat.passes.eqsat_pass``.

    A program the frontend cannot take (dynamic shapes, control flow...) or
    any internal failure gives a warning and the module back unchanged;
    ``verify=True`` raises :class:`EqSatVerificationError` on a numerical
    mismatch. ``check_runtime=True`` builds the input and the result for the
    target (a CPU target; the host's by default), checks their outputs agree
    and times both, and keeps the result only if it is measured faster (see
    :data:`RUNTIME_MARGIN`; when the kernels measured in calibration's rounds
    chose other programs too, up to two of them are timed in the same rounds
    and the fastest is judged; the cost model's "never worse" made
    "never slower"; a mismatch or a failed build also keeps the input, with a
    warning). After a run, ``last_options`` and ``last_report`` hold the
    options used and the optimizer's report (``None`` if skipped).
    """

    def __init__(self, params: Mapping[str, Any] | None = None, **options: Any):
        # unknown names and bad values (the target string too) fail here, early
        self.options = validate(options, what="EqSatPass option")
        if "rules" in self.options:  # a user rule file is verified now: a wrong rule fails here, named
            resolve_rules(self.options["rules"])
        self.params = dict(params) if params else None
        self.last_options: dict[str, Any] | None = None
        self.last_report: dict | None = None

    def transform_module(self, mod: tvm.IRModule, ctx) -> tvm.IRModule:
        self.last_report = None
        try:
            opts = resolve_options(self.options, ctx)
        except (ValueError, TypeError) as e:
            warn(f"EqSatPass: bad option ({e}); module left unchanged")
            return mod
        self.last_options = opts
        if self.params:
            mod = bind_params(mod, self.params)
        t0 = time.perf_counter()
        cost_model = None
        alternatives = []
        try:
            typed, func = main_function(mod)
            graph = from_relay(typed)
            signature = _signature(graph)
            target = opts["target"] or host_target()
            cost_model = resolve_cost(opts["cost"], target)
            judgement = judge(opts, cost_model)
            remembering = getattr(cost_model, "cache", None) if judgement.check_runtime else None
            verdicts = Verdicts(remembering, RUNTIME_SETTINGS,
                                content_fingerprint(opts["rules"], cost_model) if remembering is not None else "")
            remembered = None if opts["verify"] else verdicts.rejected_input(typed, opts)
            won = None if opts["verify"] or remembered is not None else verdicts.won_input(typed, opts, graph)
            if remembered is not None:
                # an earlier run measured this model's result no faster (same options, same machine)
                report = dict(remembered, changed=False, runtime_check_cached=True, judged_by=judgement.notes)
                report["reason"] = f"{remembered.get('reason', 'measured no faster')} (remembered from an earlier run)"
            elif won is not None:
                # an earlier run measured this model's result faster: the same program, no search
                new_graph, report = won[0], dict(won[1], changed=True, judged_by=judgement.notes)
            else:
                new_graph, report = optimize(graph, dict(opts, target=target, cost=cost_model,
                                                         calibrate=judgement.calibrate, min_gain=judgement.min_gain,
                                                         runtime_decides=judgement.check_runtime))
                report["judged_by"] = judgement.notes
                alternatives = report.pop("alternatives", None) or []
                if not report.get("changed", True):
                    new_graph = _input_in_our_form(typed, graph, signature, func, report)
            if not report.get("changed", True):
                # never worse: nothing cheaper was found, the input goes on untouched
                report["seconds"] = time.perf_counter() - t0
                if opts["verify"]:
                    report["verify_error"] = 0.0  # the output is the input itself
                self.last_report = report
                log.info("EqSatPass: %s", format_summary(report))
                return mod
            new_mod = _with_report(_module(typed, func, new_graph, signature), report)
            others = []  # calibration's other candidates, for the runtime check
            for cand in alternatives if judgement.check_runtime and not opts["verify"] else ():
                try:
                    others.append((_module(typed, func, cand.graph, signature), cand))
                except Exception:  # noqa: BLE001 - an alternative that fails is not timed
                    log.warning("EqSatPass: an alternative candidate could not be converted; not timed",
                                exc_info=True)
        except UnsupportedProgram as e:
            warn(f"EqSatPass: unsupported program ({e.reason}); module left unchanged")
            return mod
        except Exception as e:  # noqa: BLE001 - a pass must not break the build
            log.exception("EqSatPass failed")
            warn(f"EqSatPass: failed ({type(e).__name__}: {e}); module left unchanged")
            return mod
        finally:
            if cost_model is not None and cost_model is not opts["cost"]:
                cost_model.close()
        report = dict(report)
        keep = True
        if opts["verify"] or judgement.check_runtime:
            verdict = None if opts["verify"] else verdicts.pair(typed, new_mod, opts)
            if verdict is not None:
                keep = verdict["keep"]
                report.update(verdict["report"], runtime_check_cached=True)
                if won is not None:
                    report["reason"] = f"{report.get('reason', 'measured faster')} (remembered from an earlier run)"
            else:
                chosen = runtime_check(typed, new_mod, opts, report, judgement, [m for m, _ in others])
                keep = chosen is not None
                if chosen:  # one of calibration's other candidates measured fastest
                    mod_chosen, cand = others[chosen - 1]
                    new_graph = cand.graph
                    report.update(cand.report_fields(), predicted_speedup=report["cost_before"] / cand.cost)
                    new_mod = _with_report(mod_chosen, report)
                if judgement.check_runtime and not opts["verify"]:
                    verdicts.remember(typed, new_mod, opts, keep, report,
                                      won=(program_record(new_graph), _report_summary(report)))
        report["seconds"] = time.perf_counter() - t0
        self.last_report = report
        log.info("EqSatPass: %s", format_summary(report))
        return new_mod if keep else mod
