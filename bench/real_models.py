"""Real models: torchvision/transformers models exported to ONNX, EqSatPass's defaults vs TVM (issue 13).

Models written by their libraries' authors (torchvision resnet50,
squeezenet1_1, googlenet, densenet121, shufflenet_v2_x1_0; transformers'
BertModel, bert-base without the pooler, sequence 128), random weights from
torch.manual_seed(0), batch 1, exported to ONNX (TorchScript exporter, opset
14) by bench/export_onnx.py in the export venv (.venv-export, Python 3.11;
created when missing). Exports are cached under bench/models/ (gitignored).

Each model is loaded the way a user loads it (tvmc's ONNX frontend, the input
shapes given), its weights bound, and compiled by TVM for the host
(passes.target.host_target()) as these variants:

  opt3           opt_level 3, no pass
  default        EqSatPass() with its defaults, then opt_level 3; run twice on
                 the same cost database (default_rerun: the second run, which
                 reuses the kernel measurements the first one made)
  check_runtime  EqSatPass(check_runtime="on")
  trust_model    EqSatPass(check_runtime="off", calibrate="off", min_gain=0.0):
                 keeps any gain the cost model predicts
  exact_math     EqSatPass(fast_math=False): the default without the approximate
                 rules (exp, tanh, erf and softmax stay exact)
  without_rules  with --without-rules NAMES: the default rule set less those
                 rules (what they add to the pass's result, timed side by side)

Programs that are structurally identical (ignoring the pass's report
attribute) are built and timed once and share the measurement ("= opt3" in
the table); a program the pass's runtime check already built (the input, the
pass's result) is not built again, and its build seconds are that build's. The
distinct programs of a model are timed in --rounds paired interleaved rounds
(each timing at least --min-repeat-ms long, a program whose first run took
0.2 s or more timed by the wall clock, one run a timing with no untimed run
before it; the order rotates; with --time-budget S, fewer rounds but at least
3 where --rounds would take longer than S seconds: BERT at opt_level 3 runs a
minute on a Zen 1, and the wins column says how many): the median time, the
median per-round ratio to opt3 (below 1: faster) and the rounds won. Every
program's outputs are compared with onnxruntime's on the same seeded random
inputs (run in the export venv with the same thread count, kept running beside
the bench and timed in the same interleaved rounds as TVM's programs: its
median time is the reference column, and each variant's ratio_vs_ort and
wins_vs_ort are paired with it) and with opt3's: max |a - b| / max |a| (the pass's
output check's measure), passing at <= 1e-4. Zoo rows
(--zoo, "name" or "name:small") show the zoo's wins under the defaults; they
have no onnxruntime column.

The cost database is a fresh file per run (RELAY_EQSAT_COST_DB; --cost-db to
choose one, --keep-cost-db to keep the fresh one); --ignore-shipped sets
RELAY_EQSAT_IGNORE_SHIPPED=1 (the cost model ignores the shipped
measurements and models: a CPU it has never seen). TVM_NUM_THREADS and
onnxruntime's intra-op threads are --threads.

Writes bench/results/real_models.json (rewritten after every model, so an
interrupted run keeps what finished) and real_models.png (ratio to opt3 per
model and variant).

    python bench/real_models.py [--models all] [--variants all] [--zoo nasrnn,nasnet_a:small] [--threads 1]
                                [--rounds 9] [--min-repeat-ms 200] [--time-budget S] [--quick] [--cost-db PATH]
                                [--keep-cost-db]
                                [--ignore-shipped] [--without-rules RULE,...]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import warnings
from pathlib import Path
from typing import Any, Mapping, Sequence

import export_onnx
import runtime_stats
import tables
import zoo_models
from export_venv import OrtProcess, ensure_export_venv, export_model, export_versions
from model_inputs import load_onnx, load_zoo, make_inputs, shapes_arg  # noqa: F401 - shapes_arg: for the tests
from relay_eqsat.pipeline import rules_in_words

BENCH_DIR = Path(__file__).resolve().parent
MODELS_DIR = BENCH_DIR / "models"

#: --models all: issue 15's set; --models extra: the other exports (export_onnx.EXTRA_VISION)
REAL_MODELS = (*export_onnx.ISSUE_VISION, "bert")
EXTRA_MODELS = tuple(m for m in export_onnx.MODELS if m not in REAL_MODELS)
BASELINE = "opt3"
RERUN = "default_rerun"
WITHOUT = "without_rules"  # the defaults less --without-rules (a variant only when that is given)
#: variant -> EqSatPass options (None: no pass). The option names live here only.
VARIANT_OPTIONS: dict[str, dict | None] = {
    "opt3": None,
    "default": {},
    "check_runtime": {"check_runtime": "on"},
    "trust_model": {"check_runtime": "off", "calibrate": "off", "min_gain": 0.0},
    "exact_math": {"fast_math": False},  # the default without the approximate rules (exp, tanh, erf, softmax)
}
VARIANTS = tuple(VARIANT_OPTIONS)
#: with --tune-trials B (issue 58): TVM tuned (AutoTVM, the input's tasks, B trials) and the pass
#: tuning its choices with the same B (``tune_trials``), each built under its own log
TVM_TUNED, PASS_TUNED = "opt3_tuned", "tuned"
TUNED_VARIANTS = (TVM_TUNED, PASS_TUNED)
RTOL = 1e-4
MIN_ROUNDS = 3  # --time-budget never cuts a model's paired rounds below this
DEFAULT_ZOO = "nasrnn,nasnet_a:small"


# -- command line -------------------------------------------------------------------------------

def split_names(spec: str, known: Sequence[str], what: str,
                groups: Mapping[str, Sequence[str]] | None = None) -> list[str]:
    """Names from a comma-separated list ('all': every known one; a name of ``groups``: its names);
    ValueError naming the known ones."""
    if spec.strip() == "all":
        return list(known)
    names = []
    for s in (s.strip() for s in spec.split(",")):
        names += list((groups or {}).get(s, [s] if s else []))
    known = list(known) + [n for g in (groups or {}).values() for n in g]
    bad = [n for n in names if n not in known]
    if bad:
        raise ValueError(f"unknown {what} {', '.join(bad)}; known: {', '.join(known)}")
    return names


def zoo_specs(spec: str, small_models: str = "", small: bool = False) -> list[tuple[str, bool]]:
    """``(name, small)`` of each ``name`` or ``name:small`` in ``spec`` (small also when ``small``
    or the name is in ``small_models``); ValueError for unknown models or suffixes."""
    from relay_eqsat.passes import zoo

    forced = {m.strip() for m in small_models.split(",") if m.strip()}
    out = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        name, _, size = item.partition(":")
        if size not in ("", "small"):
            raise ValueError(f"--zoo {item!r}: expected NAME or NAME:small")
        zoo.spec(name)  # ValueError naming the known models
        out.append((name, small or size == "small" or name in forced))
    return out


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("--models", default="all",
                    help=f"comma-separated; 'all': {', '.join(REAL_MODELS)}; 'extra': {', '.join(EXTRA_MODELS)}")
    ap.add_argument("--variants", default="all",
                    help=f"comma-separated, or 'all': {', '.join(VARIANTS)} (opt3, the baseline, always runs)")
    ap.add_argument("--zoo", default=DEFAULT_ZOO, help="zoo rows: NAME or NAME:small, comma-separated ('' for none)")
    ap.add_argument("--small", action="store_true", help="zoo rows at their small configuration")
    ap.add_argument("--small-models", default="", metavar="NAMES", help="zoo rows to run small (as other benches)")
    ap.add_argument("--threads", type=int, default=1, help="TVM_NUM_THREADS and onnxruntime's intra-op threads")
    ap.add_argument("--rounds", type=int, default=None, help="paired timing rounds (default 9; --quick 3)")
    ap.add_argument("--min-repeat-ms", type=int, default=None,
                    help="each timing runs at least this long (default 200; --quick 50)")
    ap.add_argument("--time-budget", type=float, default=0.0, metavar="S",
                    help=f"fewer rounds (at least {MIN_ROUNDS}) for a model whose --rounds would take longer "
                         "than S seconds (0: no limit)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 3 rounds of 50 ms")
    ap.add_argument("--cost-db", default=None, help="cost database (default: a fresh one in a temporary folder)")
    ap.add_argument("--keep-cost-db", action="store_true", help="keep the fresh cost database (path printed)")
    ap.add_argument("--ignore-shipped", action="store_true",
                    help="RELAY_EQSAT_IGNORE_SHIPPED=1: the cost model ignores the shipped tables and models")
    ap.add_argument("--models-dir", default=str(MODELS_DIR), help="exported ONNX cache")
    ap.add_argument("--seed", type=int, default=0, help="random inputs")
    ap.add_argument("--without-rules", default="", metavar="RULES",
                    help="add the variant without_rules: the defaults less these rules (comma-separated)")
    ap.add_argument("--tune-trials", type=int, default=0, metavar="B",
                    help=f"add the variants {TVM_TUNED} (opt_level 3 under B AutoTVM trials on the input's tasks) "
                         f"and {PASS_TUNED} (the pass with tune_trials=B); logs beside --out, resumed if there")
    ap.add_argument("--out", default=str(zoo_models.RESULTS_DIR / "real_models.json"), help="JSON result file")
    args = ap.parse_args(argv)
    if args.rounds is None:
        args.rounds = 3 if args.quick else 9
    if args.min_repeat_ms is None:
        args.min_repeat_ms = 50 if args.quick else 200
    if args.threads < 1 or args.rounds < 1 or args.min_repeat_ms < 0 or not args.time_budget >= 0:
        ap.error("--threads and --rounds must be >= 1, --min-repeat-ms and --time-budget >= 0")
    try:
        args.model_list = split_names(args.models, REAL_MODELS, "model", {"extra": EXTRA_MODELS})
        wanted = split_names(args.variants, VARIANTS, "variant")
        args.zoo_list = zoo_specs(args.zoo, args.small_models, args.small)
    except ValueError as e:
        ap.error(str(e))
    args.variant_list = [BASELINE] + [v for v in VARIANTS if v in wanted and v != BASELINE]
    args.without_rules = [r.strip() for r in args.without_rules.split(",") if r.strip()]
    if args.without_rules:
        try:
            default_rules_without(args.without_rules)
        except ValueError as e:
            ap.error(str(e))
        args.variant_list.append(WITHOUT)
    if args.tune_trials < 0:
        ap.error("--tune-trials must be >= 0")
    if args.tune_trials:
        args.variant_list += list(TUNED_VARIANTS)
    return args


# -- models and inputs ----------------------------------------------------------------------------



# -- the variants ---------------------------------------------------------------------------------

def default_rules_without(names: Sequence[str]) -> list:
    """The default rule set less the rules ``names`` (ValueError naming any it does not have)."""
    from relay_eqsat.pipeline import resolve_rules

    rules, left_out = resolve_rules("default"), set(names)
    unknown = sorted(left_out - {r.name for r in rules})
    if unknown:
        raise ValueError(f"--without-rules: no default rule named {', '.join(unknown)}")
    return [r for r in rules if r.name not in left_out]


def make_pass(variant: str, without: Sequence[str] = (), tuning: Mapping | None = None):
    """``(EqSatPass, options it does not know)`` for ``variant``: options this EqSatPass lacks are
    left out (and reported) rather than failing the variant. ``without``: the rules the
    ``without_rules`` variant leaves out of the defaults; ``tuning``: the options of the
    ``tuned`` variant (tune_trials and tuning_records)."""
    from relay_eqsat.passes import DEFAULT_OPTIONS, EqSatPass

    if variant == WITHOUT:
        options = {"rules": default_rules_without(without)}
    elif variant == PASS_TUNED:
        options = dict(tuning or {})
    else:
        options = VARIANT_OPTIONS["default" if variant == RERUN else variant]
    known = {k: v for k, v in options.items() if k in DEFAULT_OPTIONS}
    return EqSatPass(**known), sorted(set(options) - set(known))


def run_pass(variant: str, bound, without: Sequence[str] = (), tuning: Mapping | None = None) -> tuple[Any, dict]:
    """(the module after ``variant``'s pass, what to record: optimization seconds, the report's
    figures, warnings); the module is ``bound`` itself when the pass kept it."""
    import tvm

    p, missing = make_pass(variant, without, tuning)
    with warnings.catch_warnings(record=True) as caught, runtime_stats.stopwatch() as took:
        warnings.simplefilter("always")
        with tvm.transform.PassContext(opt_level=3):
            out = p(bound)
    report = p.last_report or {}
    fired = {k: v for k, v in (report.get("rules_fired") or {}).items() if v}
    distinct, total = tables.rules_used(fired)
    info = {"opt_time": took(), "report_changed": report.get("changed"), "predicted_speedup":
            report.get("predicted_speedup"), "reason": report.get("reason"), "rules_fired": fired,
            "rules_in_result": dict(report.get("rules_in_result") or {}),
            "rules_distinct": distinct, "rule_applications": total, "stop_reason": report.get("stop_reason"),
            "measured_speedup": report.get("measured_speedup"), "runtime_wins": report.get("runtime_wins"),
            "warnings": [str(w.message)[:300] for w in caught]}
    calibration = report.get("calibration", (report.get("info") or {}).get("calibration"))
    if calibration is not None:
        info["calibration"] = calibration
    for key in ("runtime_candidates", "runtime_chosen"):  # calibration's candidates timed side by side
        if key in report:
            info[key] = report[key]
    for key in ("runtime_check_cached", "judged_by", "tuning"):  # a verdict remembered; what was tuned
        if key in report:
            info[key] = report[key]
    if missing:
        info["options_missing"] = missing
    return out, info


def _without_report(func):
    """``func`` without the pass's report attribute (timings in it differ from run to run)."""
    from tvm import relay

    from relay_eqsat.passes.relay.eqsat_pass import REPORT_ATTR

    if not isinstance(func, relay.Function) or func.attrs is None or REPORT_ATTR not in func.attrs.keys():
        return func
    import tvm

    rest = {k: func.attrs[k] for k in func.attrs.keys() if k != REPORT_ATTR}
    attrs = tvm.ir.make_node("DictAttrs", **rest) if rest else None
    return relay.Function(func.params, func.body, func.ret_type, func.type_params, attrs)


def same_program(a, b) -> bool:
    """Whether two modules are the same program: the same object, or structurally equal
    functions (the pass's report attribute ignored)."""
    import tvm

    if a.same_as(b):
        return True
    names_a = sorted(g.name_hint for g in a.get_global_vars())
    if names_a != sorted(g.name_hint for g in b.get_global_vars()):
        return False
    return all(tvm.ir.structural_equal(_without_report(a[n]), _without_report(b[n])) for n in names_a)


def dedup(modules: Mapping[str, Any], records: Mapping[str, Any] | None = None) -> dict[str, str]:
    """variant -> the first variant (in ``modules``' order) with the same program built under the
    same tuning ``records`` (variant -> records or None) (itself if new)."""
    firsts: list[str] = []
    same: dict[str, str] = {}

    def digest(name):
        return getattr((records or {}).get(name), "digest", None)

    for name, mod in modules.items():
        same[name] = next((f for f in firsts if digest(f) == digest(name) and same_program(modules[f], mod)), name)
        if same[name] == name:
            firsts.append(name)
    return same


def timing_rounds(first_run_s: Sequence[float], wall: Sequence[bool], args) -> int:
    """Paired rounds for programs whose first runs took ``first_run_s``: ``args.rounds``, fewer
    (never under :data:`MIN_ROUNDS`) where that many would take longer than ``args.time_budget``
    seconds (0: no limit). A round costs each program's run, and where ``time_evaluator`` times
    it (not ``wall``), an untimed run plus a timing of at least ``args.min_repeat_ms``."""
    if not args.time_budget:
        return args.rounds
    floor = args.min_repeat_ms / 1e3
    per_round = sum(s if w else s + max(floor, s) for s, w in zip(first_run_s, wall))
    fit = int(args.time_budget // per_round) if per_round > 0 else args.rounds
    return max(min(MIN_ROUNDS, args.rounds), min(args.rounds, fit))


def run_variants(bound, inputs: Mapping, variants: Sequence[str], args, reference: Sequence | None,
                 ort=None) -> dict:
    """Every variant of one model: pass, dedup, build each distinct program once, time them in
    paired rounds, compare outputs. Returns ``{variant: record}``. The programs the pass's
    runtime check built (the input and its result) are not built again. ``ort``: onnxruntime
    serving the model (:class:`export_venv.OrtProcess`, or anything with ``time()`` and
    ``first_run_s``), timed in the same rounds: each variant's ``ratio_vs_ort`` and
    ``wins_vs_ort`` are paired with its timings."""
    from relay_eqsat.passes.runtime.build import reuse_builds

    with reuse_builds() as reuse:
        return _run_variants(bound, inputs, variants, args, reference, reuse, ort)


def _run_variants(bound, inputs: Mapping, variants: Sequence[str], args, reference: Sequence | None,
                  reuse, ort=None) -> dict:
    import numpy as np

    from relay_eqsat.passes.runtime.timing import WALL_CLOCK_S, paired_ratio, time_rounds
    from relay_eqsat.passes.runtime.build import build_and_run, output_error

    records: dict[str, dict] = {BASELINE: {"opt_time": 0.0}}
    modules = {BASELINE: bound}
    logs: dict[str, Any] = {}  # variant -> the tuning records it is built under
    for v in variants:
        if v == BASELINE:
            continue
        for run in ((v, RERUN) if v == "default" else (v,)):
            try:
                if run == TVM_TUNED:
                    modules[run], records[run] = bound, tune_input(bound, args.tune_trials, tuning_log(args, run))
                else:
                    tuning = None
                    if run == PASS_TUNED:
                        tuning_log(args, run).parent.mkdir(parents=True, exist_ok=True)
                        tuning = {"tune_trials": args.tune_trials, "tuning_records": str(tuning_log(args, run))}
                    modules[run], records[run] = run_pass(run, bound, args.without_rules, tuning)
                if run in TUNED_VARIANTS:
                    from relay_eqsat.passes.runtime.records import load_records

                    logs[run] = load_records(tuning_log(args, run))
                    records[run]["tuning_log"] = str(tuning_log(args, run))
            except Exception as e:  # noqa: BLE001 - one variant failing is a result
                records[run] = {"error": f"pass failed: {tables.error_text(e)}"}
            print(f"  {run}: " + (records[run].get("error") or f"{records[run]['opt_time']:.1f} s, "
                                  f"reason: {records[run].get('reason')}"), flush=True)
    same = dedup(modules, logs)
    built, first_run_s = {}, {}
    for name in modules:
        rec = records[name]
        rec["same_as"] = same[name] if same[name] != name else None
        rec["changed"] = same[name] != BASELINE
        if same[name] != name:
            continue
        try:
            hits = reuse.hits
            m, outputs, rec["build_time"], first_run_s[name] = build_and_run(modules[name], inputs,
                                                                             records=logs.get(name))
            rec["build_reused"] = reuse.hits > hits  # the pass's runtime check built it (build_time: that build's)
            built[name] = (m, outputs)
        except Exception as e:  # noqa: BLE001
            rec["error"] = f"build failed: {tables.error_text(e)}"
            if name == BASELINE:
                raise
    order = list(built)
    # a program whose first run took WALL_CLOCK_S or more is timed by the wall clock: TVM's
    # time_evaluator would run it once untimed before every timing (BERT at opt_level 3: 20 s)
    wall = [first_run_s[k] >= WALL_CLOCK_S for k in order]
    also = [ort.time] if ort is not None else []
    rounds = timing_rounds([first_run_s[k] for k in order] + ([ort.first_run_s] if also else []),
                           wall + [False] * len(also), args)
    timed = time_rounds([built[k][0] for k in order], repeat=rounds, min_repeat_ms=args.min_repeat_ms, wall=wall,
                        also=also)
    samples = dict(zip(order, timed))
    ort_samples = timed[len(order)] if also else None
    base = samples[BASELINE]
    for name in modules:
        rec, first = records[name], same[name]
        if first not in built:
            rec.setdefault("error", records[first].get("error", "not built"))
            continue
        outputs = built[first][1]
        ratio, wins = paired_ratio(base, samples[first])
        rec.update(median_s=statistics.median(samples[first]), samples_s=samples[first], ratio_vs_opt3=ratio,
                   wins=wins, rounds=len(base))
        rec["max_err_vs_opt3"] = output_error(built[BASELINE][1], outputs)[0]
        if name == PASS_TUNED and same.get(TVM_TUNED) in samples:  # the pass + tuning against tuning alone
            rec["ratio_vs_opt3_tuned"], rec["wins_vs_opt3_tuned"] = paired_ratio(samples[same[TVM_TUNED]],
                                                                                 samples[first])
        if ort_samples is not None:  # onnxruntime timed in the same rounds
            rec["ratio_vs_ort"], rec["wins_vs_ort"] = paired_ratio(ort_samples, samples[first])
        if first != name:
            rec["build_time"] = records[first].get("build_time")
        if reference is not None:
            err, why = output_error([np.asarray(r) for r in reference], outputs)
            rec["max_err_vs_ort"], rec["ok_vs_ort"] = err, bool(err <= RTOL)
            if why:
                rec["err_vs_ort_why"] = why
    return records


def tuning_log(args, variant: str) -> Path:
    """Where ``variant`` of the model being run keeps its AutoTVM log: beside --out (a rerun with the
    same --out goes on tuning where the last one stopped)."""
    return Path(args.out).parent / "tuning" / f"{args.current_model}.{variant}.log"


def tune_input(bound, trials: int, log: Path) -> dict:
    """TVM tuned alone: ``trials`` AutoTVM trials on the input's tasks (planned as the pass plans
    its own: by floating-point work, at least MIN_TRIALS each while the budget lasts), into ``log``."""
    from relay_eqsat.passes.runtime.target import host_target
    from relay_eqsat.passes.runtime.tuning import plan_trials, program_tasks, tune

    log.parent.mkdir(parents=True, exist_ok=True)
    with runtime_stats.stopwatch() as took:
        plan = plan_trials(program_tasks({"the input": bound}, host_target()), trials, 1)
        measured = tune(plan, str(log))
    seconds = took()
    return {"opt_time": seconds, "reason": f"{measured} AutoTVM trials on {sum(1 for t in plan if t.trials)} of "
                                            f"{len(plan)} tasks", "tuning": {
        "budget": trials, "measured": measured, "seconds": seconds, "programs": ["the input"], "log": str(log),
        "tasks": [{"task": t.describe(), "planned": t.trials, "before": t.done, "measured": t.measured}
                  for t in plan]}}


# -- rows -----------------------------------------------------------------------------------------

def onnx_row(name: str, py: Path | None, workdir: Path, args) -> dict:
    """One real model: export (cached), onnxruntime, TVM's variants."""
    row: dict[str, Any] = {"model": name, "kind": "onnx"}
    args.current_model = name
    try:
        if py is None:
            raise RuntimeError("no export venv")
        path, meta = export_model(py, name, Path(args.models_dir))
        row.update(onnx=str(path), export=meta)
        inputs = make_inputs(meta["inputs"], args.seed)
        with OrtProcess(py, path, inputs, workdir, args.threads, args.min_repeat_ms) as ort:
            with runtime_stats.stopwatch() as took:
                bound = load_onnx(path, meta["inputs"])
            row["load_time"] = took()
            row["variants"] = run_variants(bound, inputs, args.variant_list, args, ort.outputs, ort)
            row["ort"] = {**ort.info, "median_s": statistics.median(ort.samples), "samples_s": ort.samples,
                          "rounds": len(ort.samples), "interleaved": True}
    except Exception as e:  # noqa: BLE001 - a model failing is a result; the rest go on
        row["error"] = tables.error_text(e)
    return row


def zoo_row(name: str, small: bool, args) -> dict:
    row: dict[str, Any] = {"model": f"zoo:{name}", "kind": "zoo", "small": small}
    args.current_model = f"zoo_{name}" + ("_small" if small else "")
    try:
        bound, inputs = load_zoo(name, small, args.seed)
        row["variants"] = run_variants(bound, inputs, args.variant_list, args, None)
    except Exception as e:  # noqa: BLE001
        row["error"] = tables.error_text(e)
    return row


def row_label(row: Mapping) -> str:
    return row["model"] + (" (small)" if row.get("small") else "")


HEADERS = ["model", "variant", "changed", "predicted", "opt s", "build s", "median ms", "ratio vs opt3", "wins",
           "max err vs ORT", "ORT ms"]


def table_rows(rows: Sequence[Mapping]) -> list[list]:
    """The printed table's cells: one line per model and variant (a failed model: one line)."""
    out = []
    for row in rows:
        label = row_label(row)
        if "error" in row and not row.get("variants"):
            out.append([label, "-", f"failed: {row['error']}"[:100]] + [None] * (len(HEADERS) - 3))
            continue
        ort_ms = tables.ms(row.get("ort", {}).get("median_s"))
        for k, (variant, rec) in enumerate(row["variants"].items()):
            if "median_s" not in rec:
                out.append([label, variant, f"failed: {rec.get('error')}"[:100]] + [None] * (len(HEADERS) - 3))
                continue
            shared = rec.get("same_as")
            median = tables.fmt(tables.ms(rec["median_s"])) + (f" (= {shared})" if shared else "")
            wins = "-" if variant == BASELINE else f"{rec['wins']}/{rec['rounds']}"
            out.append([label, variant, rec.get("changed"), rec.get("predicted_speedup"), rec.get("opt_time"),
                        f"= {shared}" if shared else rec.get("build_time"), median, rec["ratio_vs_opt3"], wins,
                        rec.get("max_err_vs_ort"), ort_ms if k == 0 else None])
    return out


def calibration_text(cal: Any) -> str:
    """The report's calibration entry in one line (its non-zero counts, seconds and error)."""
    if not isinstance(cal, Mapping):
        return str(cal)
    parts = [f"{k} {tables.fmt(cal[k])}" for k in ("measured", "reused", "failed", "unmeasured", "seconds",
                                                    "rounds", "error") if cal.get(k)]
    return ", ".join(parts) or "nothing measured"


def notes(rows: Sequence[Mapping]) -> list[str]:
    """What the table leaves out: each pass's reason, calibration, missing options, output checks."""
    lines = []
    for row in rows:
        for variant, rec in (row.get("variants") or {}).items():
            if variant == BASELINE:
                continue
            where = f"{row_label(row)} {variant}"
            if rec.get("reason"):
                lines.append(f"{where}: {rec['reason']}")
            if rec.get("rules_in_result"):  # the returned program's, or the rejected candidate's
                lines.append(f"{where}: {'program' if rec.get('report_changed') else 'candidate'} from "
                             f"{rules_in_words(rec['rules_in_result'], 8)}")
            if "calibration" in rec:
                lines.append(f"{where}: calibration: {calibration_text(rec['calibration'])}")
            if rec.get("runtime_candidates"):
                timed = ", ".join(f"{c['measured_speedup']:.3f}x ({c['runtime_wins']})"
                                  for c in rec["runtime_candidates"])
                lines.append(f"{where}: calibration's candidates timed side by side: {timed}; "
                             f"the pass judged #{rec.get('runtime_chosen', 0) + 1}")
            if rec.get("tuning"):
                t = rec["tuning"]
                lines.append(f"{where}: {t['measured']} AutoTVM trials (fallback first, then config_order's order or random) in {t['seconds']:.0f} s, "
                             f"budget {t['budget']}, {sum(1 for k in t['tasks'] if k['planned'])} of "
                             f"{len(t['tasks'])} tasks of {', '.join(t['programs'])}"
                             + (f" ({t.get('decision_trials', 0)} deciding; round two on {t['decided']}'s, "
                                f"{'the result' if rec.get('report_changed') else 'the input'} shipped)"
                                if "decided" in t else "")
                             + f"; log {rec.get('tuning_log')}")
                if t.get("layouts"):
                    from relay_eqsat.passes.runtime.layouts import layouts_in_words

                    lines.append(f"{where}: convolutions' records chosen together: {layouts_in_words(t['layouts'])}")
            if "ratio_vs_opt3_tuned" in rec:
                lines.append(f"{where}: against {TVM_TUNED} (tuning alone, same budget): median ratio "
                             f"{rec['ratio_vs_opt3_tuned']:.3f}, faster in {rec['wins_vs_opt3_tuned']}/{rec['rounds']} rounds")
            if rec.get("options_missing"):
                lines.append(f"{where}: EqSatPass has no option(s) {', '.join(rec['options_missing'])}; left out")
        for variant, rec in (row.get("variants") or {}).items():
            for key, what in (("max_err_vs_ort", "onnxruntime"), ("max_err_vs_opt3", "opt3")):
                if rec.get(key) is not None and not rec[key] <= RTOL:
                    lines.append(f"{row_label(row)} {variant}: outputs differ from {what}'s "
                                 f"(max rel error {rec[key]:.3g} > {RTOL:g})")
    return lines


def plot_ratios(rows: Sequence[Mapping], path: Path) -> Path | None:
    """Grouped bars: each variant's time / opt3's per model (paired median ratio), onnxruntime's
    (ratio of medians, unpaired) for reference; a line at 1.0."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    shown = [r for r in rows if r.get("variants", {}).get(BASELINE, {}).get("median_s")]
    if not shown:
        return None
    series = [v for v in [*VARIANTS[1:], RERUN, *TUNED_VARIANTS] if any(v in r["variants"] for r in shown)]
    values = {v: [r["variants"].get(v, {}).get("ratio_vs_opt3", np.nan) for r in shown] for v in series}
    if any("ort" in r for r in shown):
        values["onnxruntime"] = [r["ort"]["median_s"] / r["variants"][BASELINE]["median_s"] if "ort" in r
                                 else np.nan for r in shown]
    x = np.arange(len(shown))
    width = 0.8 / max(1, len(values))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(shown) + 2), 4.5))
    for i, (name, ys) in enumerate(values.items()):
        bars = ax.bar(x + (i - (len(values) - 1) / 2) * width, ys, width, label=name,
                      hatch="//" if name == "onnxruntime" else None)
        for bar, row in zip(bars, shown):  # a program shared with an earlier variant: say which
            shared = row["variants"].get(name, {}).get("same_as")
            if shared:
                ax.annotate(f"= {shared}", (bar.get_x() + bar.get_width() / 2, 0.02), rotation=90, ha="center",
                            va="bottom", fontsize=7)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(x, [row_label(r) for r in shown], rotation=30, ha="right")
    ax.set_ylabel("time / TVM opt_level 3 time (below 1: faster)")
    ax.set_title("Real models: EqSatPass variants vs TVM opt_level 3")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def machine(args, py: Path | None) -> dict:
    """tables.machine_info() plus the CPU model, thread counts, cost settings and versions."""
    import importlib.metadata as md

    info = tables.machine_info()
    info["threads"] = args.threads
    info["TVM_NUM_THREADS"] = os.environ.get("TVM_NUM_THREADS")
    info["ignore_shipped"] = bool(args.ignore_shipped)
    info["versions"] = {pkg: _version(md, pkg) for pkg in ("hhb-tvm", "onnx", "numpy", "relay-eqsat")}
    info["export_venv"] = export_versions(py)
    return info


def _version(md, pkg: str) -> str | None:
    try:
        return md.version(pkg)
    except md.PackageNotFoundError:
        return None


def main(argv=None) -> list[dict]:
    args = parse_args(argv)
    # before TVM's runtime starts its thread pool and before the cost model opens its database
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    tmp = Path(tempfile.mkdtemp(prefix="real_models_"))
    cost_db = Path(args.cost_db) if args.cost_db else tmp / "costs.sqlite"
    os.environ["RELAY_EQSAT_COST_DB"] = str(cost_db)
    if args.ignore_shipped:
        os.environ["RELAY_EQSAT_IGNORE_SHIPPED"] = "1"
    out = Path(args.out)
    rows: list[dict] = []
    try:
        py = None
        if args.model_list:
            try:
                py = ensure_export_venv()
            except Exception as e:  # noqa: BLE001 - the zoo rows still run
                print(f"export venv unavailable: {tables.error_text(e)}", flush=True)
        info = machine(args, py)
        code = tables.code_version()
        print(f"{info.get('cpu_model')}, {info.get('target')}, {args.threads} thread(s); cost database {cost_db}",
              flush=True)
        jobs = [(m, lambda m=m: onnx_row(m, py, tmp, args)) for m in args.model_list]
        jobs += [(f"zoo:{n}", lambda n=n, s=s: zoo_row(n, s, args)) for n, s in args.zoo_list]
        for label, job in jobs:
            print(f"== {label}", flush=True)
            rows.append(job())
            if "error" in rows[-1]:
                print(f"  failed: {rows[-1]['error']}", flush=True)
            tables.write_json(out, {"machine": info, "code": code, "args": vars(args),
                                    "cost_db": str(cost_db), "rows": rows})
        print()
        tables.print_table(HEADERS, table_rows(rows),
                           title=f"Real models, {args.threads} thread(s): median of {args.rounds} paired rounds"
                                 + (f" (fewer where they would take over {args.time_budget:g} s: wins says how many)"
                                    if args.time_budget else "") + "; "
                                 "ratio = median per-round time / opt3's (below 1: faster); errors relative to "
                                 f"max|ref|, pass <= {RTOL:g}")
        for line in notes(rows):
            print(line)
        png = plot_ratios(rows, out.with_suffix(".png"))
        if png:
            print(f"wrote {png}")
    finally:
        if args.keep_cost_db and not args.cost_db:
            print(f"cost database kept: {cost_db}")
            for f in tmp.glob("*.npz"):
                f.unlink()
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return rows


if __name__ == "__main__":
    main()
