"""The TVM-backed subcommands of ``relay-eqsat``: ``optimize`` and ``tvmc``.

Registered lazily from :data:`relay_eqsat.cli.COMMANDS`; registration stays
TVM-free, the handlers import TVM.

``relay-eqsat optimize MODEL`` optimizes a zoo model (``zoo:NAME``) or a
model file tvmc can load (.onnx, .tflite, .pb, .relay...), builds the original
and the optimized program with ``relay.build`` at opt_level 3 for the same
target, checks that they compute the same outputs on random inputs, times
both (interleaved, as many timings as fit ``--time-budget``, their counts
derived from a first run's time; it says how many it made), and prints a
before/after table.

``relay-eqsat tvmc ARGS...`` is tvmc's own command line with ``compile
--eqsat`` and the ``eqsat`` composite target added (see
:mod:`relay_eqsat.passes.relay.tvmc`).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import textwrap
import time
import traceback
from typing import Any, Callable

from relay_eqsat import progress
from relay_eqsat.cli import add_common_arguments
from relay_eqsat.options import OPTIONS, argparse_kwargs, flag_name

log = logging.getLogger(__name__)

#: EqSatPass options offered as ``relay-eqsat optimize`` flags (``--node-limit`` for ``node_limit``...);
#: ``target`` has its own flag (it is also the build target) and ``verify`` is what the command always does
PASS_FLAG_OPTIONS = [name for name in OPTIONS if name not in ("target", "verify")]

EXIT_OK, EXIT_MISMATCH, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3

#: seconds ``relay-eqsat optimize`` spends timing the programs, by default
DEFAULT_TIME_BUDGET = 20.0

EXIT_CODES = """exit status:
  0  done (the optimized program, or the input kept, computes the original's outputs)
  1  the optimized program's outputs differ from the original's (nothing is written)
  2  bad input: usage, an option's value, a model file that cannot be read, --input-shapes, an RPC
     tracker that does not answer or has no device under --rpc-key
  3  internal error (one line; run with -v for the traceback)
  130  interrupted (Ctrl-C)"""


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """MODEL and the flags that say how to load it (read by :func:`load_model`)."""
    p.add_argument("model", metavar="MODEL", help="zoo:NAME (e.g. zoo:squeezenet) or a model file")
    p.add_argument("--small", action="store_true", help="the zoo model's small configuration")
    p.add_argument("--batch", type=int, default=1, help="zoo model batch size")
    p.add_argument("--input-shapes", default=None,
                   help='model file input shapes, tvmc syntax: "name:[1,3,224,224] other:[1,10]"')


def add_optimize_command(subparsers) -> None:
    """``relay-eqsat optimize MODEL``: optimize, build, check, measure, print before/after."""
    p = subparsers.add_parser(
        "optimize", help="optimize a zoo model or model file; print measured before/after",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXIT_CODES,
        description=textwrap.fill(
            "Optimize MODEL (zoo:NAME or a file tvmc can load, e.g. model.onnx) with EqSatPass, "
            "build the original and the optimized program with TVM at opt_level 3 for the same target, "
            "check their outputs agree on random inputs (exit status 1 if not) and print predicted "
            "cost, measured runtime (median of interleaved timings, as many as fit --time-budget), "
            "speedup, optimization time, stop reason and rules fired.", 79))
    _optimize_arguments(p)
    p.set_defaults(func=run_optimize)


def _optimize_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``optimize`` (and ``tune``)."""
    add_model_arguments(p)
    p.add_argument("--target", default=None,
                   help="TVM target for building, measuring and the costs (default: the host CPU)")
    for name in PASS_FLAG_OPTIONS:
        p.add_argument(flag_name(name), dest=name, **argparse_kwargs(name))
    p.add_argument("--time-budget", type=float, default=DEFAULT_TIME_BUDGET, metavar="S",
                   help="seconds for timing the programs: the timings (interleaved between the two; "
                        "median reported) and the runs each averages are chosen from a first run's "
                        "time to fit, but never fewer than 3 timings (default %(default)g)")
    p.add_argument("--repeat", type=int, default=None,
                   help="timings per program (default: as many as fit --time-budget, 3 to 7)")
    p.add_argument("--number", type=int, default=None,
                   help="runs averaged per timing (default: enough for a timing to last 50 ms)")
    p.add_argument("--no-measure", action="store_true", help="skip building and measuring (costs only)")
    p.add_argument("--rtol", type=float, default=1e-4,
                   help="output tolerance: max |a-b| <= rtol * max |a| (default 1e-4)")
    p.add_argument("-o", "--output", metavar="OUT.json", default=None, help="write the report as JSON")
    p.add_argument("--save-module", metavar="PATH", default=None,
                   help="write the optimized module: tvm.ir.save_json if PATH ends in .json, else Relay text "
                        "(with metadata, readable by tvm.relay.parse; without the report attribute)")
    p.add_argument("--plot", metavar="PATH.png", default=None,
                   help="bar chart of cost and runtime (needs matplotlib, checked before any work)")
    add_common_arguments(p)


def add_tvmc_command(subparsers) -> None:
    """``relay-eqsat tvmc ARGS...``: tvmc with ``compile --eqsat`` and the ``eqsat`` composite target."""
    p = subparsers.add_parser(
        "tvmc", add_help=False, prefix_chars="\0",
        help="tvmc (TVM's driver) with `compile --eqsat` and the `eqsat` composite target",
        description="Everything after `tvmc` goes to tvmc's own command line, e.g. "
                    "`relay-eqsat tvmc compile --eqsat --eqsat-search mcts model.onnx -o model.tar`.")
    p.add_argument("args", nargs=argparse.REMAINDER)
    p.set_defaults(func=run_tvmc)


def run_tvmc(args) -> int:
    from relay_eqsat.passes.relay.tvmc import tvmc_main

    verbose = any(a == "--verbose" or (a.startswith("-v") and set(a[1:]) == {"v"}) for a in args.args)
    return guarded("tvmc", verbose, tvmc_main, args.args)


def guarded(command: str, verbose: bool, handler: Callable[..., int], *args: Any) -> int:
    """``handler(*args)``; an unexpected exception becomes one line on stderr
    and :data:`EXIT_INTERNAL` (with ``verbose``, the traceback first)."""
    try:
        return handler(*args)
    except Exception as e:  # noqa: BLE001 - the command's last resort
        if verbose:
            traceback.print_exc()
        text = str(e).strip()
        print(f"relay-eqsat {command}: internal error: {type(e).__name__}"
              + (f": {text.splitlines()[-1]}" if text else "")
              + ("" if verbose else " (run with -v for the traceback)"), file=sys.stderr)
        return EXIT_INTERNAL


# -- optimize -------------------------------------------------------------------------

def load_model(spec: str, small: bool = False, batch: int = 1, input_shapes: str | None = None):
    """``(mod, params)`` of ``zoo:NAME`` or of a model file (through tvmc's frontends)."""
    t0 = time.perf_counter()
    with progress.ticking(f"loading {spec}"):
        if spec.startswith("zoo:"):
            from relay_eqsat.passes import zoo

            out = zoo.get(spec[4:], small=small, batch=batch)
        else:
            from .model_file import load_model_file

            out = load_model_file(spec, input_shapes)
    log.info("loaded %s in %.1f s", spec, time.perf_counter() - t0)
    return out


def plot_unavailable() -> str | None:
    """Why ``--plot`` cannot work here (matplotlib missing), in words with the fix; else None."""
    try:
        import matplotlib  # noqa: F401 - a dependency; checked before the long work starts
    except ImportError as e:
        return (f"--plot needs matplotlib, which cannot be imported ({e}); install it with "
                f"`{sys.executable} -m pip install matplotlib`, or leave out --plot")
    return None


def _input_types(mod) -> dict[str, tuple[list[int], str]]:
    return {v.name_hint: ([int(d) for d in v.checked_type.shape], str(v.checked_type.dtype))
            for v in mod["main"].params}


def _fmt_ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f} ms"


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def format_table(result: dict) -> str:
    """The before/after table of :func:`run_optimize`'s result."""
    rep = result["report"]
    # an unchanged result: the figures are those of the candidate the pass measured and rejected
    rows = [("", "original", "optimized" if rep.get("changed") else "candidate", "ratio")]
    cb, ca = rep.get("cost_before", 0.0), rep.get("cost_after", 0.0)
    rows.append(("predicted cost", _fmt_ms(cb), _fmt_ms(ca), f"{cb / ca:.3f}x" if ca > 0 else "-"))
    m = result.get("measured")
    if m:
        rows.append(("measured runtime (median)", _fmt_ms(m["original"]), _fmt_ms(m["optimized"]),
                     f"{m['speedup']:.3f}x"))
    rows.append(("graph nodes", str(rep.get("nodes_before", "-")), str(rep.get("nodes_after", "-")), ""))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    fired = {k: v for k, v in sorted((rep.get("rules_fired") or {}).items(), key=lambda kv: -kv[1]) if v}
    top = ", ".join(f"{k} x{v}" for k, v in list(fired.items())[:8])
    more = f", ... ({len(fired) - 8} more)" if len(fired) > 8 else ""
    lines += [
        "",
        f"model:             {result['model']}  (target {result['target']})",
        f"result:            {'changed' if rep.get('changed') else 'unchanged'} ({rep.get('reason', '')})",
        f"judged by:         {rep.get('judged_by', '-')}",
        f"optimization time: {rep.get('total_time', 0.0):.2f} s (search {rep.get('search_time', 0.0):.2f} s, "
        f"extraction {rep.get('extract_time', 0.0):.2f} s)",
        f"search:            {rep.get('search', '')}, stopped: {rep.get('stop_reason', '')} after "
        f"{rep.get('iterations', 0)} steps; e-graph {rep.get('egraph_nodes', 0)} nodes / "
        f"{rep.get('egraph_classes', 0)} classes",
        f"extraction:        {rep.get('extractor', '')} [{rep.get('extract_status', '')}"
        f"{', optimal' if rep.get('optimal') else ''}]",
        f"rules fired:       {sum(fired.values())} applications of {len(fired)} rules"
        + (f": {top}{more}" if fired else ""),
    ]
    first, recal = rep.get("first_check"), rep.get("recalibration")
    if first or recal:  # the cost model's pick was timed no faster, then calibration chose again
        timed = first or rep
        cal = (rep.get("info") or {}).get("calibration") if first else (recal or {}).get("calibration")
        measured = f"{_count(cal['measured'], 'kernel')} measured, " if cal and "measured" in cal else ""
        lines.append(f"first check:       the cost model's pick timed {timed.get('measured_speedup', 0.0):.3f}x "
                     f"({timed.get('runtime_wins', '-')} rounds won), no faster; then {measured}"
                     + ("another program chosen and timed (above)" if first else recal.get("reason", "")))
    used = rep.get("rules_in_result") or {}
    if used:  # the optimized program's nodes by the rule that added them (the candidate's if rejected)
        from relay_eqsat.pipeline import rules_in_words
        lines.append(f"{'result from:' if rep.get('changed') else 'candidate from:':<19}"
                     f"{_count(sum(used.values()), 'node')} added by {_count(len(used), 'rule')}: "
                     f"{rules_in_words(used, 8)}")
    elif rep.get("changed"):  # the input's nodes in relay-eqsat's form (TVM would copy the input's work)
        lines.append("result from:       no rewrite rule: the input's own nodes")
    tuned = rep.get("tuning")
    if tuned:
        tasks = tuned["tasks"]
        lines.append(f"tuning:            {_count(tuned['measured'], 'AutoTVM trial')} measured in "
                     f"{tuned['seconds']:.0f} s (budget {tuned['budget']}, {sum(t['before'] for t in tasks)} in the log "
                     f"before) on {sum(1 for t in tasks if t['planned'])} of {_count(len(tasks), 'task')} of "
                     f"{', '.join(tuned['programs'])}"
                     + (f" ({tuned['decision_trials']} deciding between them, the rest on {tuned['decided']}'s)"
                        if len(tuned['programs']) > 1 and "decided" in tuned else "")
                     # decided again under the whole log: not always the program round two tuned
                     + (f", {'the result' if rep.get('changed') else 'the input'} shipped"
                        if "decided" in tuned else "")
                     + f"; log {tuned['log']} (tvmc compile --tuning-records "
                     f"{tuned['log']} --eqsat builds this program without tuning again)")
        if tuned.get("layouts"):
            from relay_eqsat.passes.runtime.layouts import layouts_in_words

            lines.append(f"records together:  {layouts_in_words(tuned['layouts'])}")
    if result.get("not_measured"):
        lines.append(f"measured:          no: {result['not_measured']}")
    if result.get("measured_on"):
        on = result["measured_on"]
        lines.append(f"measured on:       {on['address']} ({on['device']})")
    if m:
        if not rep.get("changed"):
            lines.append("measured:          the input program was kept, so it was built and measured once")
        lines += [f"timed:             {m['timing']}",
                  f"build time:        {m['build_original']:.1f} s original, {m['build_optimized']:.1f} s optimized"
                  + (f" ({m['builds_reused']} reused from the pass's runtime check)" if m.get("builds_reused") else ""),
                  f"output check:      max error {m['max_error']:.3g} relative to each output's max|out| "
                  f"(largest {m['output_scale']:.3g}; tolerance {result['rtol']:g}): "
                  f"{'OK' if m['equal'] else 'MISMATCH'}"]
    return "\n".join(lines)


def plot_result(result: dict, path: str) -> None:
    """Bar chart: predicted cost and measured runtime, original vs optimized."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rep, m = result["report"], result.get("measured")
    groups = [("predicted cost", rep["cost_before"], rep["cost_after"])]
    if m:
        groups.append(("measured runtime", m["original"], m["optimized"]))
    fig, axes = plt.subplots(1, len(groups), figsize=(3.2 * len(groups) + 0.5, 3.2), squeeze=False)
    for ax, (title, before, after) in zip(axes[0], groups):
        bars = ax.bar(["original", "optimized"], [before * 1e3, after * 1e3], color=["#888888", "#2a7ab9"])
        ax.bar_label(bars, fmt="%.3f")
        ax.set_title(f"{title} ({before / after:.2f}x)" if after > 0 else title)
        ax.set_ylabel("ms")
        ax.margins(y=0.18)
    fig.suptitle(result["model"])
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def without_report_attr(mod):
    """``mod`` with the report attribute dropped from ``main``: Relay's text
    parser rejects attribute keys with a dot and string values with quotes, so
    the text form (``--save-module x.relay``) leaves it out (``-o`` has it)."""
    import tvm
    from tvm import relay

    from relay_eqsat.passes.relay.eqsat_pass import REPORT_ATTR

    func = mod["main"]
    if func.attrs is None or REPORT_ATTR not in func.attrs:
        return mod
    attrs = {k: func.attrs[k] for k in func.attrs.keys() if k != REPORT_ATTR}
    new = relay.Function(func.params, func.body, func.ret_type, func.type_params,
                         tvm.ir.make_node("DictAttrs", **attrs) if attrs else None)
    out = tvm.IRModule({gv: (new if gv.name_hint == "main" else f) for gv, f in mod.functions.items()},
                       mod.type_definitions)
    return relay.transform.InferType()(out)


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def run_optimize(args) -> int:
    return guarded("optimize", args.verbose, _run_optimize, args)


def tuning_into(options) -> bool:
    """Whether the pass tunes into its ``tuning_records`` log, which does not exist yet (or is empty)."""
    from relay_eqsat.passes.runtime.records import has_records

    path = options.get("tuning_records")
    return bool(options.get("tune_trials")) and bool(path) and not has_records(path)


def add_tune_command(subparsers) -> None:
    """``relay-eqsat tune MODEL --tune-trials N --tuning-records F``: optimize with tuning."""
    p = subparsers.add_parser(
        "tune", help="tune a model's kernels and the pass's candidates' with AutoTVM, then optimize under them",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXIT_CODES,
        description=textwrap.fill(
            "`relay-eqsat optimize` with tuning: spend --tune-trials AutoTVM trials on the tasks of MODEL and of "
            "the programs the pass would choose between (the tasks they do not share first), adding each trial "
            "to the AutoTVM log --tuning-records as it is measured, then optimize, build and time under that log. "
            "Run again with the same log to go on where it stopped (a Ctrl-C keeps every trial measured); "
            "`tvmc compile --tuning-records LOG --eqsat` then builds the tuned program without tuning.", 79))
    _optimize_arguments(p)
    p.set_defaults(func=run_tune)


def run_tune(args) -> int:
    if not args.tune_trials or not args.tuning_records:
        print("relay-eqsat tune: --tune-trials N (at least 1) and --tuning-records LOG are required", file=sys.stderr)
        return EXIT_BAD_INPUT
    return guarded("tune", args.verbose, _run_optimize, args)


def _run_optimize(args) -> int:
    from tvm import relay

    from relay_eqsat.passes.relay.eqsat_pass import EqSatPass, bind_params
    from relay_eqsat.passes.runtime.records import resolve as resolve_records
    from relay_eqsat.passes.runtime.build import reuse_builds
    from relay_eqsat.passes.runtime.remote import RemoteUnavailable, check_remote
    from relay_eqsat.passes.runtime.target import host_target

    for name in ("repeat", "number"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            print(f"relay-eqsat optimize: --{name} must be at least 1, got {getattr(args, name)}", file=sys.stderr)
            return EXIT_BAD_INPUT
    if not args.time_budget >= 0:
        print(f"relay-eqsat optimize: --time-budget must not be negative, got {args.time_budget}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.plot and (why := plot_unavailable()):
        print(f"relay-eqsat optimize: {why}", file=sys.stderr)
        return EXIT_BAD_INPUT
    target = args.target or host_target()
    options = {name: getattr(args, name) for name in PASS_FLAG_OPTIONS if getattr(args, name) is not None}
    options["target"] = target
    try:
        eqsat = EqSatPass(**options)  # every option checked (the target too) before the model loads
        # a tracker named must answer now, within its timeout (not after the model loads)
        remote = check_remote(options.get("rpc_tracker"), options.get("rpc_key"))
        # RecordsError: the file and the line (a log to tune into may not exist yet)
        records = None if tuning_into(options) else resolve_records(options.get("tuning_records"))
        mod, params = load_model(args.model, args.small, args.batch, args.input_shapes)
    except (ValueError, OSError, RemoteUnavailable) as e:  # ModelFileError and ShapesError are ValueErrors
        print(f"relay-eqsat optimize: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    mod = relay.transform.InferType()(mod)
    original = bind_params(mod, params) if params else mod
    # the programs the pass's runtime check builds are the ones measured below: built once
    with reuse_builds() as reuse:
        return _optimize_and_measure(args, eqsat, original, target, reuse, remote, records)


def _optimize_and_measure(args, eqsat, original, target: str, reuse, remote=None, records=None) -> int:
    import warnings

    import numpy as np
    import tvm

    from relay_eqsat.passes.runtime.build import build, build_and_run, output_error, random_inputs
    from relay_eqsat.passes.runtime.remote import RemoteUnavailable, open_place
    from relay_eqsat.passes.runtime.target import runs_here
    from relay_eqsat.passes.runtime.timing import time_within

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with tvm.transform.PassContext(opt_level=3):
                optimized = eqsat(original)
        except RemoteUnavailable as e:
            print(f"relay-eqsat optimize: {e}", file=sys.stderr)
            return EXIT_BAD_INPUT
    for w in caught:
        if "EqSatPass" in str(w.message):
            print(f"warning: {w.message}", file=sys.stderr)
    report = eqsat.last_report
    if report is None:
        print("relay-eqsat optimize: the pass did not run (see the warning above)", file=sys.stderr)
        return EXIT_BAD_INPUT
    if report.get("tuning"):  # the programs are measured under what was tuned
        from relay_eqsat.passes.runtime.records import resolve as resolve_records

        records = resolve_records(report["tuning"]["log"])
    result = {"model": args.model + (" (small)" if args.small else ""), "target": target, "rtol": args.rtol,
              "options": {k: v for k, v in (eqsat.last_options or {}).items()}, "report": report}
    status = EXIT_OK
    if not args.no_measure and remote is None and not runs_here(target):
        # cross-compiling with no device: both programs are built for the target, and not run
        for what, mod in (("original", original), ("optimized", optimized)):
            if what == "optimized" and optimized.same_as(original):
                continue
            t0 = time.perf_counter()
            build(mod, target=target, records=records)
            result.setdefault("built", {})[what] = time.perf_counter() - t0
        result["not_measured"] = (f"cross-compiling for {target}: built, not run (no device here; "
                                  "--rpc-tracker and --rpc-key name one)")
    elif not args.no_measure:
        inputs = random_inputs(_input_types(original), seed=0)
        place = open_place(remote, target) if remote is not None else None
        if place is not None:
            result["measured_on"] = {"key": remote.key, "tracker": remote.address, "device": place.device,
                                     "address": place.where}

        def build_run(mod, what):
            built = build_and_run(mod, inputs, target, what=what, place=place, records=records)
            log.info("built %s in %.1f s", what, built.build_s)
            return built

        m_orig, ref, b_orig, r_orig = build_run(original, "the original program")
        if optimized.same_as(original):
            # never worse kept the input: one program, one measurement (a ratio would be noise)
            timing = time_within([m_orig], args.time_budget, [r_orig], args.number, args.repeat)
            (t_orig,) = timing.medians
            t_opt, got, b_opt = t_orig, ref, 0.0
        else:
            m_opt, got, b_opt, r_opt = build_run(optimized, "the optimized program")
            timing = time_within([m_orig, m_opt], args.time_budget, [r_orig, r_opt], args.number, args.repeat)
            t_orig, t_opt = timing.medians
        log.info("timed %s", timing.describe())
        err = output_error(ref, got)[0]
        scale = max([0.0] + [float(np.abs(r).max()) for r in ref if r.size])  # the largest output's
        result["measured"] = {"original": t_orig, "optimized": t_opt, "speedup": t_orig / t_opt,
                              "build_original": b_orig, "build_optimized": b_opt,
                              "builds_reused": reuse.hits, "max_error": err,
                              "output_scale": scale,
                              "equal": err <= args.rtol, "repeat": timing.repeat, "number": timing.number,
                              "wall_clock": timing.wall, "timing_seconds": timing.seconds,
                              "time_budget": args.time_budget, "timing": timing.describe()}
        if not err <= args.rtol:
            status = EXIT_MISMATCH
    print(format_table(result))
    if status == EXIT_MISMATCH:
        # a wrong program is neither saved nor reported as a result
        print("relay-eqsat optimize: the optimized program's outputs differ from the original's; "
              "nothing written", file=sys.stderr)
        return status
    if args.output:
        with open(args.output, "w") as f:
            json.dump(_jsonable(result), f, indent=1)
        print(f"report:            {args.output}")
    if args.save_module:
        if args.save_module.endswith(".json"):
            text = tvm.ir.save_json(optimized)
        else:
            text = without_report_attr(optimized).astext(show_meta_data=True)
        with open(args.save_module, "w") as f:
            f.write(text)
        print(f"optimized module:  {args.save_module}")
    if args.plot:
        plot_result(result, args.plot)
        print(f"plot:              {args.plot}")
    return status
