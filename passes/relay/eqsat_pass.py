"""EqSatPass: the Relay module pass, a composition of the parts beside it.

main -> TensorGraph (:mod:`.frontend`) -> the optimizer (:func:`relay_eqsat.pipeline.optimize_graph`)
-> Relay (:mod:`.backend`), with options from :mod:`.config` (constructor, else the PassContext's
``relay.eqsat.<option>``, else :data:`~.config.DEFAULT_OPTIONS`), the decision from
:mod:`relay_eqsat.passes.runtime.decision` (how to judge, and the runtime check) and verdicts
remembered by :mod:`relay_eqsat.passes.runtime.verdicts`.
"""
from __future__ import annotations

import contextlib
import json
import logging
import time
from typing import Any, Mapping

import numpy as np
import tvm
from tvm import relay

from relay_eqsat.graph import TensorGraph, TensorType
from relay_eqsat.pipeline import optimize_graph, resolve_cost, resolve_rules, rules_in_words
from relay_eqsat.options import OPTIMIZER_OPTIONS, validate
from relay_eqsat.user_warnings import warn

from .frontend import UnsupportedProgram, from_relay, main_function
from .backend import to_relay
from .config import resolve_options
from .pad_in_producer import moved_paddings
from .scale_guard import runtime_scaled_weights
from .simplify_copies import copied_ops
from relay_eqsat.cost.tracker import remote_from_options
from relay_eqsat.passes.runtime.builder import Builder, unavailable
from relay_eqsat.passes.runtime.decision import RUNTIME_SETTINGS, judge, runtime_check
from relay_eqsat.passes.runtime.records import has_records, load_records, resolve as resolve_records
from relay_eqsat.passes.runtime.layouts import LayoutChoiceError, choose as choose_layouts, plan_with_choice
from relay_eqsat.passes.runtime.tuning import check_tunable, plan_decision, program_tasks, tune
from relay_eqsat.passes.runtime.remote import probe_device
from relay_eqsat.passes.runtime.target import host_target
from relay_eqsat.passes.runtime.verdicts import Verdicts, program_record

log = logging.getLogger(__name__)




#: function attribute of an optimized ``main`` holding the report's summary (JSON)
REPORT_ATTR = "relay_eqsat.report"

_SUMMARY_KEYS = ("search", "stop_reason", "iterations", "rules_fired", "rules_in_result", "egraph_nodes",
                 "cost_before", "cost_after", "predicted_speedup", "extractor", "extract_status", "optimal",
                 "search_time", "extract_time", "total_time", "runtime_before", "runtime_after",
                 "measured_speedup", "runtime_candidates", "runtime_chosen")


def _report_summary(report: Mapping[str, Any]) -> dict:
    return {k: report[k] for k in _SUMMARY_KEYS if k in report}


# -- PassContext config side table ----------------------------------------------



# -- the optimizer seam ---------------------------------------------------------------

def optimize(graph: TensorGraph, options: Mapping[str, Any]) -> tuple[TensorGraph, dict]:
    """The optimizer between frontend and backend: TensorGraph -> cheaper
    equivalent TensorGraph (or the input itself), plus the report as a dict
    (``alternatives``: the optimizer's other candidates, ``Candidate`` objects, for the runtime check;
    ``recalibrate``: with ``calibrate_after_check``, what calibrates and extracts again when the
    runtime check rejects the result, a ``Recalibration``, else None).
    ``options`` are the pass's options after :func:`judge` (``calibrate`` and
    ``min_gain`` resolved, ``cost`` a CostModel)."""
    opts = {k: v for k, v in options.items() if k in OPTIMIZER_OPTIONS}
    if opts.get("target") is None:
        opts["target"] = host_target()
    new_graph, report = optimize_graph(graph, opts, min_gain=float(options.get("min_gain") or 0.0),
                                       calibrate=bool(options.get("calibrate")),
                                       calibrate_time_limit=float(options["calibrate_time_limit"]),
                                       runtime_decides=bool(options.get("runtime_decides")),
                                       calibrate_after_check=bool(options.get("calibrate_after_check")),
                                       while_measuring=options.get("while_measuring"),
                                       tuned=bool(options.get("tuning_records")))
    return new_graph, dict(report.to_dict(), alternatives=report.alternatives, recalibrate=report.recalibrate)



# -- the pass -------------------------------------------------------------------------

def _input_in_our_form(typed: tvm.IRModule, graph: TensorGraph, signature, func, report: dict) -> TensorGraph:
    """``graph`` (the input in the frontend's form), marked changed in ``report``, when TVM builds it
    better than the input itself: SimplifyExpr would copy shared work of the input and not of
    ``graph`` (`simplify_copies`), or FoldScaleAxis would scale weights of the input by run-time
    values on every inference, which ``to_relay`` guards (`scale_guard`), or a depthwise convolution
    would copy its padded input, which ``to_relay`` has its 1x1 producer write (`pad_in_producer`);
    else ``graph`` with ``report`` untouched (the input goes on)."""
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
    moved = moved_paddings(graph)
    if moved:
        report["producer_pads"] = moved
        why.append(f"TOPI's x86 depthwise convolution copies its padded input in a stage of its own; {moved} of "
                   "this form's read a padding their 1x1 producer wrote")
    if not why:
        return graph
    before = (report.get("reason") or "nothing cheaper found").removesuffix("; input kept")
    report.update(changed=True, reason=f"the input in relay-eqsat's form ({before}): " + "; ".join(why))
    return graph



def _choose_layouts(mod: tvm.IRModule, path: str, target: str, allowance: int | None = None) -> dict:
    """The tuned program's convolution records chosen together with the layout transforms between
    them (:func:`~relay_eqsat.passes.runtime.layouts.choose`), kept only where the program runs
    faster; a graph the graph tuner does not take keeps the log as tuned (a failure, with a warning).
    A Ctrl-C goes on up: the log is rewritten at once or not at all."""
    try:
        return choose_layouts(mod, path, target, allowance=allowance)
    except LayoutChoiceError as e:  # a graph the graph tuner does not take: nothing to refine
        log.info("EqSatPass: %s", e)
        return {"kept": False, "reason": str(e)}
    except Exception as e:  # noqa: BLE001 - the trials are in the log: the choice only refines it
        log.exception("EqSatPass: choosing the convolutions' records together failed")
        warn(f"EqSatPass: the convolutions' records were not chosen together ({type(e).__name__}: {e}); "
             "each kernel keeps its fastest record")
        return {"kept": False, "reason": f"{type(e).__name__}: {e}"}


def _signature(graph: TensorGraph) -> list[tuple[str, TensorType]]:
    """(name, type) of the graph's var nodes in order: the frontend adds every
    parameter, so unused ones survive an optimizer that drops them."""
    return [(graph[i].attrs["name"], graph[i].type) for i in graph.inputs]


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


def _others(typed, func, signature, alternatives, timed: bool) -> list:
    """Calibration's other candidates as (module, Candidate), for the runtime check to time beside
    the result (none when the check does not time)."""
    others = []
    for cand in alternatives if timed else ():
        try:
            others.append((_module(typed, func, cand.graph, signature), cand))
        except Exception:  # noqa: BLE001 - an alternative that fails is not timed
            log.warning("EqSatPass: an alternative candidate could not be converted; not timed", exc_info=True)
    return others


def _second_chance(recalibrate, typed, func, signature, opts, report: dict, judgement, builds):
    """The runtime check measured the cost model's pick no faster (``report``, updated in place): the
    kernels it and the input do not share are measured, the e-graph extracted again and, when that
    chooses another program cheaper than the input under them, it is judged by the runtime check
    too (the input is built already). Returns (chosen, graph, module, report, others) of that second
    check, or None (the input stays; ``report["recalibration"]`` says why)."""
    first = {k: report[k] for k in ("measured_speedup", "runtime_wins", "predicted_speedup", "rules_in_result",
                                     "check_timing_seconds") if k in report}
    try:
        graph2, rep2 = recalibrate(while_measuring=builds.paused if builds else None)
        if not rep2.changed:
            report["recalibration"] = {"reason": rep2.reason, "calibration": rep2.info.get("calibration")}
            return None
        report2 = dict(rep2.to_dict(), judged_by=f"{report.get('judged_by', '')}; kernels measured after the "
                                                 "cost model's pick was measured no faster", first_check=first)
        mod2 = _with_report(_module(typed, func, graph2, signature), report2)
        others2 = _others(typed, func, signature, rep2.alternatives, True)
    except Exception as e:  # noqa: BLE001 - the input stays, as the first check decided
        log.warning("EqSatPass: calibrating after the runtime check failed", exc_info=True)
        report["recalibration"] = {"reason": f"failed ({type(e).__name__}: {e})"}
        return None
    chosen = runtime_check(typed, mod2, opts, report2, judgement, [m for m, _ in others2], builds)
    return chosen, graph2, mod2, report2, others2


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
    logged at INFO on ``relay_eqsat.passes.relay.eqsat_pass``.

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
            remote = remote_from_options(opts["rpc_tracker"], opts["rpc_key"])  # ValueError: one without the other
            tuning = opts["tune_trials"] > 0
            if tuning and not opts["tuning_records"]:
                raise ValueError("tune_trials needs tuning_records: the AutoTVM log the trials are added to")
            if tuning and remote is not None:
                raise ValueError("tune_trials times its trials on this machine, not on RPC devices")
            # RecordsError (a ValueError): named, with its line; a log to tune into may not exist yet
            records = (resolve_records(opts["tuning_records"]) if not tuning or has_records(opts["tuning_records"])
                       else None)
            if tuning:
                check_tunable(records, opts["target"] or host_target())  # TuningError (a RuntimeError)
        except (ValueError, TypeError, RuntimeError) as e:
            warn(f"EqSatPass: bad option ({e}); module left unchanged")
            return mod
        self.last_options = opts
        # a tracker named but down, or without a device under the key, is an error the user must see
        # (RemoteUnavailable), not a quiet fallback to predictions: it fails within its timeout
        device = probe_device(remote, opts["target"] or host_target()) if remote is not None else ""
        tuned = None
        if tuning:
            try:
                tuned = self._tune(mod, opts, remote, device, records)
            except Exception as e:  # noqa: BLE001 - a pass must not break the build (Ctrl-C goes on up)
                log.exception("EqSatPass: tuning failed")
                warn(f"EqSatPass: tuning failed ({type(e).__name__}: {e}); module left unchanged")
                return mod
            records = load_records(opts["tuning_records"]) if has_records(opts["tuning_records"]) else None
        with contextlib.ExitStack() as stack:  # the builds in child processes stop when the pass ends
            out = self._transform(mod, opts, remote, device, records, stack)
        if tuned is not None and self.last_report is not None:
            self.last_report["tuning"] = tuned
        return out

    def _tune(self, mod: tvm.IRModule, opts: Mapping[str, Any], remote, device: str, records) -> dict:
        """Spend ``tune_trials`` AutoTVM trials in two rounds (:mod:`relay_eqsat.passes.runtime.tuning`),
        adding them to the log: a few on each kernel that differs between the input and the candidates
        the optimizer finds under ``records`` (the log's records so far, or None); the pass decides
        under them (its runtime check, as after tuning); the rest on the tasks of the program it chose,
        but for the trials the convolutions' joint choice of records measures
        (:func:`~relay_eqsat.passes.runtime.layouts.plan_with_choice`): all within ``tune_trials``.
        What was tuned, for the report."""
        t0 = time.perf_counter()
        bound = bind_params(mod, self.params) if self.params else mod
        typed, func = main_function(bound)
        graph = from_relay(typed)
        signature = _signature(graph)
        target = opts["target"] or host_target()
        cost_model = resolve_cost(opts["cost"], target, device=device, jobs=opts["jobs"], records=records)
        try:
            judgement = judge(opts, cost_model, None, device, records)
            new_graph, report = optimize(graph, dict(opts, target=target, cost=cost_model,
                                                     calibrate=judgement.calibrate, min_gain=0.0,
                                                     runtime_decides=True))
        finally:
            if cost_model is not opts["cost"]:
                cost_model.close()
        programs = {"the input": typed}
        if report.get("changed"):
            programs["the result"] = _module(typed, func, new_graph, signature)
        for i, cand in enumerate(report.get("alternatives") or ()):
            programs[f"candidate {i + 2}"] = _module(typed, func, cand.graph, signature)
        path = opts["tuning_records"]
        compared = program_tasks(programs, target)
        first = plan_decision(compared, opts["tune_trials"], len(programs))
        measured = tune(first, path)
        shipped, decided = typed, "the input"
        if len(programs) > 1:  # decide under the first round's trials, as the pass decides after tuning
            records = load_records(path) if has_records(path) else None
            with contextlib.ExitStack() as stack:
                out = self._transform(mod, opts, remote, device, records, stack)
            if (self.last_report or {}).get("changed"):
                shipped, decided = out, "the result"
        second, kept = plan_with_choice(program_tasks({decided: shipped}, target), compared, opts["tune_trials"],
                                        path, target)
        measured += tune(second, path)
        layouts = _choose_layouts(shipped, path, target, kept)
        tasks: dict[tuple, dict] = {}  # each task once: planned in all, in the log before, measured now
        for t in (*first, *second):
            row = tasks.setdefault(t.key, {"task": t.describe(), "programs": set(), "planned": 0,
                                           "before": t.done, "measured": 0})
            row["programs"] |= t.programs
            row["planned"] = max(row["planned"], t.trials)
            row["measured"] += t.measured
        return {"budget": opts["tune_trials"], "measured": measured, "programs": list(programs),
                "decided": decided, "decision_trials": sum(t.measured for t in first), "choice_allowance": kept,
                "tasks": [dict(r, programs=sorted(r["programs"])) for r in tasks.values()],
                "layouts": layouts, "log": path, "seconds": time.perf_counter() - t0}

    def _transform(self, mod: tvm.IRModule, opts: Mapping[str, Any], remote, device: str, records,
                   stack: contextlib.ExitStack) -> tvm.IRModule:
        builds = None
        if self.params:
            mod = bind_params(mod, self.params)
        t0 = time.perf_counter()
        cost_model = None
        alternatives, recalibrate = [], None
        try:
            typed, func = main_function(mod)
            graph = from_relay(typed)
            signature = _signature(graph)
            target = opts["target"] or host_target()
            cost_model = resolve_cost(opts["cost"], target, device=device, remote=remote, jobs=opts["jobs"],
                                      records=records)
            if cost_model is not opts["cost"]:  # open until the check is done (it may calibrate after it)
                stack.callback(cost_model.close)
            judgement = judge(opts, cost_model, remote, device, records)
            verdicts = (Verdicts.of(cost_model, RUNTIME_SETTINGS, opts["rules"], records) if judgement.check_runtime
                        else Verdicts(None, RUNTIME_SETTINGS))
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
                if ((judgement.check_runtime or opts["verify"])
                        and unavailable(target, remote=judgement.remote is not None) is None):
                    # the input's build starts now, on the CPU time calibration leaves
                    builds = stack.enter_context(Builder(target, opts["jobs"], records))
                    builds.submit(typed, "the input", background=True)
                new_graph, report = optimize(graph, dict(opts, target=target, cost=cost_model,
                                                         calibrate=judgement.calibrate, min_gain=judgement.min_gain,
                                                         runtime_decides=judgement.check_runtime,
                                                         calibrate_after_check=judgement.calibrate_after_check,
                                                         # a build beside disturbs the kernels' timings
                                                         while_measuring=builds.paused if builds else None))
                report["judged_by"] = judgement.notes
                alternatives = report.pop("alternatives", None) or []
                recalibrate = report.pop("recalibrate", None)
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
            others = _others(typed, func, signature, alternatives, judgement.check_runtime and not opts["verify"])
        except UnsupportedProgram as e:
            warn(f"EqSatPass: unsupported program ({e.reason}); module left unchanged")
            return mod
        except Exception as e:  # noqa: BLE001 - a pass must not break the build
            log.exception("EqSatPass failed")
            warn(f"EqSatPass: failed ({type(e).__name__}: {e}); module left unchanged")
            return mod
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
                t_check = time.perf_counter()
                chosen = runtime_check(typed, new_mod, opts, report, judgement, [m for m, _ in others], builds)
                if chosen is None and recalibrate is not None and "runtime_before" in report:
                    # measured no faster: calibrate now, extract again, and judge what that chooses
                    second = _second_chance(recalibrate, typed, func, signature, opts, report, judgement, builds)
                    if second is not None:
                        chosen, new_graph, new_mod, report, others = second
                report["check_seconds"] = time.perf_counter() - t_check
                if builds is not None:
                    report["check_builds"] = builds.summary()
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
