"""docs/results.md, made from the benchmark runs in two steps (``make results``).

``summarize RUN_DIR`` reads one ``make bench`` output folder (``bench/results/bench_<date>_<time>``:
the scripts' JSON) and rewrites the summaries under bench/summaries/, one per results table, from
the JSON files the folder has:

  real_models.json     the real-model set (ONNX exports) against TVM opt_level 3, onnxruntime beside
                       (from bench/real_models.py's JSON, its ONNX rows)
  zoo.json             the model zoo against TVM opt_level 3 (the same JSON, its zoo rows)
  cost_accuracy.json   the cost model's whole-graph error and single-rule pair ranking
                       (bench/cost_accuracy.py)
  mcts_vs_tensat.json  MCTS against TENSAT's schedule under 2,000 e-nodes (bench/mcts_vs_tensat.py)
  rpc_measure.json     kernels measured by local workers and RPC devices, the runtime check over RPC
                       and the pass's first run (bench/rpc_measure.py)

Each summary holds the machine (CPU, core count, target, threads, as the run's JSON records them; a
JSON that does not name the CPU takes the name another JSON of the same folder records), the date
(the JSON's), the command (the script's command line the JSON records), the commit (the one a JSON of
the folder records, else ``git rev-parse --short HEAD`` when summarizing, and says so), the run folder
and the rows the table shows. A table whose JSON is missing from the folder, or has no rows for it,
keeps its summary. Without RUN_DIR: the bench/results/bench_* folder whose real_models.json was
recorded last; none (a fresh clone): nothing is summarized.

``render`` writes docs/results.md from bench/summaries/ (deterministic: the same summaries give the
same bytes; tests/test_results_doc.py checks the committed page against them) and the README's copy
of the main table (between its ``results:real_models`` markers).

``options`` writes the options table of docs/usage.md (between its ``options`` markers) from the
options schema, relay_eqsat/options.py (needs the package importable with its compiled modules).

    python bench/results_doc.py summarize [RUN_DIR] [--summaries bench/summaries]
    python bench/results_doc.py render [--summaries bench/summaries] [--out docs/results.md] [--readme README.md]
    python bench/results_doc.py options [--usage docs/usage.md]

Standard library only (no TVM, no numpy): the summaries render anywhere.
"""
from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
SUMMARIES = ROOT / "bench" / "summaries"
RESULTS_MD = ROOT / "docs" / "results.md"
README = ROOT / "README.md"
USAGE_MD = ROOT / "docs" / "usage.md"

#: the tables, in the order docs/results.md shows them; the first is the README's
TABLES = ("real_models", "zoo", "tuning", "cost_accuracy", "mcts_vs_tensat", "rpc_measure", "first_run")
#: the run folder's JSON each table is summarized from
SOURCE = {"real_models": "real_models.json", "zoo": "real_models.json",
          "cost_accuracy": "cost_accuracy.json", "mcts_vs_tensat": "mcts_vs_tensat.json",
          "rpc_measure": "rpc_measure.json", "first_run": "rpc_measure.json"}
#: the transformers' exports (bench/export_onnx.py's TRANSFORMERS), for a row whose JSON does not list
#: its inputs; every other ONNX model of the set is torchvision's
TRANSFORMERS = ("bert", "distilbert", "gpt2", "roberta", "opt", "t5_encoder", "llama_small")
RULES_SHOWN = 6  # rules named per row, most nodes first
DIGITS = 6  # significant digits kept in a summary
BEGIN_README, END_README = "<!-- results:real_models (make results writes this) -->", "<!-- /results:real_models -->"
BEGIN_OPTIONS, END_OPTIONS = "<!-- options (python bench/results_doc.py options writes this) -->", "<!-- /options -->"


# -- summarize ------------------------------------------------------------------------------------

def _round(x: Any) -> Any:
    """``x`` with its floats to :data:`DIGITS` significant digits (a summary's diffs stay readable)."""
    if isinstance(x, float):
        return float(f"{x:.{DIGITS}g}") if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _round(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_round(v) for v in x]
    return x


def _ms(seconds: Any) -> float | None:
    return None if seconds is None else float(seconds) * 1e3


def _load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _library(row: Mapping) -> str:
    """Where an exported model comes from: transformers (token-id inputs) or torchvision (an image)."""
    inputs = (row.get("export") or {}).get("inputs")
    if inputs:
        return "transformers" if any(i.get("name") == "input_ids" for i in inputs) else "torchvision"
    return "transformers" if row["model"] in TRANSFORMERS else "torchvision"


def run_commit(run: Path, data: Sequence[Mapping]) -> tuple[str | None, str]:
    """(commit, where it came from): a JSON of the run's ``code.commit``, else git's HEAD now."""
    for d in data:
        code = d.get("code") or {}
        if code.get("commit"):
            modified = " (with local changes)" if code.get("modified") else ""
            return str(code["commit"]) + modified, "recorded by the run"
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None, "unknown"
    return head, "HEAD when summarized (the run recorded none)"


def machine_of(d: Mapping, others: Sequence[Mapping]) -> dict:
    """The machine a run's JSON records: CPU name, cores, target, TVM threads."""
    m = d.get("machine") or {}
    cpu = m.get("cpu_model") or next(((o.get("machine") or {}).get("cpu_model") for o in others
                                      if (o.get("machine") or {}).get("cpu_model")), None)
    threads = m.get("tvm_threads") if m.get("tvm_threads") is not None else m.get("threads")
    return {"cpu": cpu, "cpus": m.get("cpus"), "target": m.get("target"), "tvm_threads": threads}


def header_of(d: Mapping, run: Path, others: Sequence[Mapping], commit: tuple[str | None, str]) -> dict:
    m = d.get("machine") or {}
    argv = list(m.get("argv") or [])
    try:
        folder = run.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        folder = run.name
    return {"machine": machine_of(d, others), "date": m.get("time"),
            "command": "python " + shlex.join(argv) if argv else None,
            "commit": commit[0], "commit_source": commit[1], "run": folder}


def _real_row(row: Mapping) -> dict | None:
    """One model of bench/real_models.py's JSON: opt_level 3 against the pass's defaults."""
    variants = row.get("variants") or {}
    opt3, default = variants.get("opt3") or {}, variants.get("default") or {}
    if "median_s" not in opt3 or "median_s" not in default:
        return None
    rerun = variants.get("default_rerun") or {}
    ratio = default.get("ratio_vs_opt3")
    kept = not default.get("changed")
    out = {"model": row["model"], "small": bool(row.get("small")),
           "library": _library(row),
           "ort_ms": _ms((row.get("ort") or {}).get("median_s")),
           "ort_threads": (row.get("ort") or {}).get("threads"),
           "opt3_ms": _ms(opt3["median_s"]), "defaults_ms": _ms(default["median_s"]),
           "input_kept": kept, "speedup": 1.0 if kept or not ratio else 1.0 / ratio,
           "wins": default.get("wins"), "rounds": default.get("rounds"),
           "predicted": default.get("predicted_speedup"),
           "opt_s": default.get("opt_time"), "opt_s_rerun": rerun.get("opt_time"),
           "rerun_same": rerun.get("same_as") == "default" if rerun else None,
           "max_err_vs_ort": default.get("max_err_vs_ort"),
           "rules_in_result": None if "rules_in_result" not in default else  # runs before 2026-11-29
           dict(sorted(default["rules_in_result"].items(), key=lambda kv: (-kv[1], kv[0])))}
    if kept and default.get("measured_speedup") is not None:  # the candidate the runtime check kept out
        out["candidate_speedup"] = default["measured_speedup"]
        out["candidate_wins"] = default.get("runtime_wins")
    return out


def _tuning_of(rec: Mapping) -> dict:
    t = rec.get("tuning") or {}
    tasks = t.get("tasks") or []
    chose = t.get("layouts") or {}
    choosing = (chose.get("fallbacks") or 0) + (chose.get("measured") or 0)  # the choice's trials, in B
    return {"trials": None if t.get("measured") is None else t["measured"] + choosing, "seconds": t.get("seconds"),
            "tasks": len(tasks), "tasks_tuned": sum(1 for k in tasks if k.get("planned")),
            "programs": t.get("programs"), "deciding": t.get("decision_trials"),
            "choosing": choosing if "choice_allowance" in t else None,
            "layouts": {k: v for k, v in chose.items()
                        if k in ("kept", "convolutions", "changed", "raised", "fallbacks", "measured", "ratio",
                                 "wins", "rounds")} or None}


def _tuning_row(row: Mapping) -> dict | None:
    """One model of a bench/real_models.py --tune-trials run: untuned, tuned alone, the pass + tuning."""
    variants = row.get("variants") or {}
    opt3, alone, both = (variants.get(k) or {} for k in ("opt3", "opt3_tuned", "tuned"))
    if not all("median_s" in v for v in (opt3, alone, both)):
        return None
    ratio = both.get("ratio_vs_opt3_tuned")
    return {"model": row["model"], "small": bool(row.get("small")), "library": _library(row),
            "ort_ms": _ms((row.get("ort") or {}).get("median_s")), "ort_threads": (row.get("ort") or {}).get("threads"),
            "opt3_ms": _ms(opt3["median_s"]), "tuned_alone_ms": _ms(alone["median_s"]), "pass_tuned_ms":
            _ms(both["median_s"]), "pass_over_alone": None if not ratio else 1.0 / ratio,
            "wins": both.get("wins_vs_opt3_tuned"), "rounds": both.get("rounds"),
            "pass_changed": bool(both.get("report_changed")), "reason": both.get("reason"),
            "rules_in_result": dict(sorted((both.get("rules_in_result") or {}).items(),
                                           key=lambda kv: (-kv[1], kv[0]))),
            "tuning_alone": _tuning_of(alone), "tuning_pass": _tuning_of(both),
            "pass_s": both.get("opt_time"), "max_err_vs_ort": both.get("max_err_vs_ort"),
            # onnxruntime timed in the same rounds (runs from 2026-12-06): paired ratio, rounds won
            "over_ort": both.get("ratio_vs_ort"), "ort_wins": both.get("wins_vs_ort")}


def summarize_real_models(d: Mapping, header: Mapping) -> dict[str, dict]:
    """The ONNX rows (table real_models), the zoo rows (table zoo) and, in a --tune-trials run, the
    tuned comparison (table tuning) of bench/real_models.py's JSON."""
    args = d.get("args") or {}
    what = (f"TVM opt_level 3 against EqSatPass() with its defaults, then opt_level 3; {args.get('rounds')} "
            f"paired rounds, each timing at least {args.get('min_repeat_ms')} ms")
    tables: dict[str, list] = {"real_models": [], "zoo": [], "tuning": []}
    for row in d.get("rows") or []:
        tuned = _tuning_row(row)
        if tuned is not None:
            tables["tuning"].append(tuned)
        summary = _real_row(row)
        if summary is None:
            continue
        if row.get("kind") == "zoo":
            for key in ("ort_ms", "ort_threads", "max_err_vs_ort", "library"):
                summary.pop(key)
            tables["zoo"].append(summary)
        else:
            tables["real_models"].append(summary)
    out = {t: {"table": t, **header, "what": what, "rows": rows} for t, rows in tables.items() if rows}
    if "tuning" in out:
        out["tuning"]["budget"] = args.get("tune_trials")
        out["tuning"]["goals"] = _tuning_goals(out["tuning"]["rows"])
    return out


#: how much faster a goal's "faster" is: the runtime check's margin (passes/runtime/decision.py,
#: RUNTIME_MARGIN), so that two programs that time alike (MobileNet-v2's input kept, tuned with the
#: same trials twice: 1.003x, 5 of 9 rounds) do not count as one beating the other
GOAL_MARGIN = 0.02


def _beats_ort(r: Mapping) -> bool:
    """The pass + tuning faster than onnxruntime: timed in the same rounds, the paired ratio at
    most ``1 - GOAL_MARGIN`` and most rounds won; in older runs (onnxruntime timed apart), the
    medians, by the same margin."""
    if r.get("over_ort") is not None:
        return r["over_ort"] <= 1.0 - GOAL_MARGIN and (r.get("ort_wins") or 0) * 2 > (r.get("rounds") or 0)
    return bool(r.get("ort_ms")) and r["pass_tuned_ms"] <= (1.0 - GOAL_MARGIN) * r["ort_ms"]


def _tuning_goals(rows: Sequence[Mapping]) -> list[dict]:
    """Issue 58's goals: the pass + tuning faster than tuning alone on every model (by
    :data:`GOAL_MARGIN` at least, rounds won in the majority), and faster than onnxruntime on at
    least two (:func:`_beats_ort`)."""
    faster = [r for r in rows if r.get("pass_over_alone") and r["pass_over_alone"] >= 1.0 / (1.0 - GOAL_MARGIN)
              and (r.get("wins") or 0) * 2 > (r.get("rounds") or 0)]
    beat = [r for r in rows if _beats_ort(r)]
    return [{"goal": "the pass + tuning faster than tuning alone at the same budget, on every model",
             "met": len(faster) == len(rows), "detail": f"{len(faster)}/{len(rows)} models"
             + (f": {', '.join(r['model'] for r in faster)}" if faster else "")},
            {"goal": "the pass + tuning faster than onnxruntime on at least two models",
             "met": len(beat) >= 2, "detail": f"{len(beat)}/{len(rows)} models"
             + (f": {', '.join(r['model'] for r in beat)}" if beat else "")}]


def summarize_cost_accuracy(d: Mapping, header: Mapping) -> dict[str, dict]:
    kinds = [k for k in ("learned", "auto", "analytic", "held-out")
             if any(k in r for r in d.get("rows") or [])]
    rows = []
    for r in d.get("rows") or []:
        if r.get("fit_only") or r.get("measured") is None:
            continue
        rows.append({"model": r["model"], "small": bool(r.get("small")), "measured_ms": _ms(r["measured"]),
                     "error_pct": {k: 100.0 * r[k]["rel_error"] for k in kinds
                                   if isinstance(r.get(k), Mapping) and r[k].get("rel_error") is not None}})
    counted = [p for p in d.get("pairs") or [] if p.get("counted")]
    pairs = {k: [sum(1 for p in counted if (p.get(k) or {}).get("correct")), len(counted)]
             for k in kinds if k != "held-out" and any(k in p for p in counted)}
    wrong = [{"model": p["model"], "small": bool(p.get("small")), "rule": p["rule"],
              "measured_ratio": p.get("ratio")} for p in counted if not (p.get("learned") or {}).get("correct")]
    if not rows:
        return {}
    return {"cost_accuracy": {"table": "cost_accuracy", **header, "kinds": kinds, "rows": rows,
                              "pairs": pairs, "pairs_wrong": wrong,
                              "goals": [{k: g.get(k) for k in ("goal", "met", "detail")}
                                        for g in d.get("goals") or []]}}


def summarize_mcts(d: Mapping, header: Mapping) -> dict[str, dict]:
    rows = []
    for r in d.get("rows") or []:
        t, m, ref = r.get("tensat") or {}, r.get("mcts") or {}, r.get("reference") or {}
        if "cost_after" not in t or "cost_after" not in m:
            continue
        rows.append({"model": r["model"], "small": bool(r.get("small")), "input_ms": _ms(t.get("cost_before")),
                     "tensat_ms": _ms(t["cost_after"]), "mcts_ms": _ms(m["cost_after"]),
                     "mcts_over_tensat": r.get("mcts_over_tensat_cost"),
                     "tensat_s": t.get("time"), "mcts_s": m.get("time"), "mcts_stop": m.get("stop_reason"),
                     "reference_ms": _ms(ref.get("cost_after")), "reference_nodes": ref.get("egraph_nodes")})
    if not rows:
        return {}
    args = d.get("args") or {}
    return {"mcts_vs_tensat": {"table": "mcts_vs_tensat", **header, "node_limit": args.get("node_limit"),
                               "reference_node_limit": args.get("reference_node_limit"), "rows": rows,
                               "goals": [{k: g.get(k) for k in ("goal", "met", "detail")}
                                         for g in d.get("goals") or []]}}


#: bench/rpc_measure.py's goal for the first_run part (the first-run table's)
FIRST_RUN_GOAL = "a first run within twice TVM's build"


def summarize_rpc_measure(d: Mapping, header: Mapping) -> dict[str, dict]:
    keep = {"throughput": ("model", "config", "kernels", "measured", "failed", "seconds", "kernels_per_s",
                           "speedup_vs_local1", "vs_local1_median", "vs_local1_p90"),
            "verdicts": ("model", "predicted_speedup", "same_verdict", "note"),
            "first_run": ("model", "config", "pass_s", "calibration_s", "kernels_measured", "search_s", "extract_s",
                          "check_s", "check_timing_s", "tvm_build_s", "pass_over_build", "goal_s", "within_goal",
                          "changed", "measured_speedup", "others_timed", "first_check_speedup", "recalibrated",
                          "error")}
    out: dict[str, Any] = {"table": "rpc_measure", **header}
    first: dict[str, Any] = {"table": "first_run", **header}
    for part, fields in keep.items():
        rows = []
        for r in d.get(part) or []:
            row = {k: r.get(k) for k in fields if k in r}
            for where in ("local", "rpc"):
                if isinstance(r.get(where), Mapping):
                    row[where] = {k: r[where].get(k) for k in ("kept", "measured_speedup", "runtime_wins")}
            rows.append(row)
        if rows and part == "first_run":  # a table of its own: a run may measure it alone
            first["rows"] = rows
        elif rows:
            out["rows" if part == "throughput" else part] = rows  # the kernels-per-second table is its rows
    goals = [{k: g.get(k) for k in ("goal", "met", "detail")} for g in d.get("goals") or []]
    tables = {}
    if "rows" in out or "verdicts" in out:
        tables["rpc_measure"] = dict(out, goals=[g for g in goals if not g["goal"].startswith(FIRST_RUN_GOAL)])
    if "rows" in first:
        tables["first_run"] = dict(first, goals=[g for g in goals if g["goal"].startswith(FIRST_RUN_GOAL)])
    return tables


SUMMARIZERS = {"real_models.json": summarize_real_models, "cost_accuracy.json": summarize_cost_accuracy,
               "mcts_vs_tensat.json": summarize_mcts, "rpc_measure.json": summarize_rpc_measure}


def latest_run(results: Path = RESULTS) -> Path | None:
    """The bench_* folder under ``results`` whose real_models.json was recorded last (its JSON's time,
    not the file's: a checkout gives every file one mtime)."""
    found = []
    for path in sorted(results.glob("bench_*/real_models.json")):
        d = _load(path)
        if d is not None:
            found.append(((d.get("machine") or {}).get("time") or "", path.parent.name, path.parent))
    return max(found)[2] if found else None


def summarize(run: Path, summaries: Path = SUMMARIES) -> list[Path]:
    """Rewrite the summaries of every table ``run`` has JSON for; the paths written."""
    loaded = {name: _load(run / name) for name in SUMMARIZERS}
    loaded = {k: v for k, v in loaded.items() if v is not None}
    if not loaded:
        raise SystemExit(f"{run}: none of {', '.join(SUMMARIZERS)} there")
    commit = run_commit(run, list(loaded.values()))
    written = []
    summaries.mkdir(parents=True, exist_ok=True)
    for name, d in loaded.items():
        header = header_of(d, run, [o for o in loaded.values() if o is not d], commit)
        for table, summary in SUMMARIZERS[name](d, header).items():
            path = summaries / f"{table}.json"
            path.write_text(json.dumps(_round(summary), indent=1, ensure_ascii=False) + "\n")
            written.append(path)
    return written


# -- render ---------------------------------------------------------------------------------------

def sig(x: float | None, digits: int = 3) -> str:
    """A time: ``digits`` significant digits (trailing zeros kept), thousands as 21,723."""
    if x is None:
        return "–"
    if abs(x) >= 10 ** digits:
        return f"{round(x):,}"
    text = f"{x:#.{digits}g}"
    return text.rstrip(".")


def times(x: float | None, decimals: int = 3) -> str:
    """A ratio: ``decimals`` decimals below 10, one from 10 up (89.4×)."""
    if x is None:
        return "–"
    return f"{x:.{decimals if x < 10 else 1}f}×"


def ratio(x: float | None, decimals: int = 2) -> str:
    return times(x, decimals)[:-1]


def seconds(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}"


def label(row: Mapping) -> str:
    name = row["model"].removeprefix("zoo:")
    return name + (" (small)" if row.get("small") else "")


def rules_text(rules: Mapping[str, int], top: int = RULES_SHOWN) -> str:
    items = list(rules.items())
    text = ", ".join(f"`{k}` {v}" for k, v in items[:top])
    return text + (f", +{len(items) - top} more" if len(items) > top else "")


def geomean(values: Iterable[float]) -> float | None:
    vals = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def machine_text(s: Mapping) -> str:
    m = s.get("machine") or {}
    parts = [m.get("cpu") or "CPU not recorded"]
    if m.get("cpus"):
        parts[0] += f", {m['cpus']} cores"
    if m.get("target"):
        parts.append(f"target `{m['target']}`")
    return "; ".join(parts)


def header_lines(s: Mapping, threads: str | None = None) -> list[str]:
    commit = f"`{s['commit']}`" if s.get("commit") else "not recorded"
    if s.get("commit_source") and s["commit_source"] != "recorded by the run":
        commit += f" ({s['commit_source']})"
    lines = [f"- Machine: {machine_text(s)}" + (f"; {threads}" if threads else ""),
             f"- Date: {s.get('date') or 'not recorded'}; commit {commit}; run folder `{s.get('run')}` "
             "(not committed)",
             f"- Command: `{s.get('command') or 'not recorded'}`"]
    return lines


def _speedup_cell(r: Mapping) -> str:
    if r.get("input_kept"):
        if r.get("candidate_speedup") is not None:
            return f"1.000× (input kept; candidate {r['candidate_speedup']:.3f}×, {r.get('candidate_wins')})"
        return "1.000× (input kept)"
    return f"**{times(r['speedup'])}** ({r.get('wins')}/{r.get('rounds')})"


def _rules_cell(r: Mapping) -> str:
    if r.get("rules_in_result") is None:
        return "not recorded by this run"
    if not r["rules_in_result"]:
        return "nothing cheaper under the cost model" if r.get("input_kept") else "–"
    return ("candidate: " if r.get("input_kept") else "") + rules_text(r["rules_in_result"])


def _opt_cell(r: Mapping) -> str:
    return f"{seconds(r.get('opt_s'))} / {seconds(r.get('opt_s_rerun'))}"


def real_models_block(s: Mapping) -> str:
    """The real-model table with its machine, date, command and commit: docs/results.md's and the README's."""
    rows = s["rows"]
    ort = sorted({r.get("ort_threads") for r in rows if r.get("ort_threads") is not None})
    tvm = (s.get("machine") or {}).get("tvm_threads")
    threads = f"{tvm} TVM thread{'s' if tvm != 1 else ''}" if tvm is not None else "TVM threads not recorded"
    if ort:
        threads += f", onnxruntime at {'/'.join(map(str, ort))} intra-op thread{'s' if ort != [1] else ''}"
    out = header_lines(s, threads)
    out += ["", "| model | onnxruntime ms | TVM opt3 ms | defaults ms | speedup over opt3 (rounds won) "
            "| defaults / onnxruntime | predicted | optimization s, 1st / 2nd run | the rules its program came "
            "from (nodes) |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        vs_ort = f"{r['defaults_ms'] / r['ort_ms']:.2f}" if r.get("ort_ms") else "–"
        defaults = "= opt3" if r.get("input_kept") else sig(r["defaults_ms"])
        out.append(f"| {label(r)} ({r.get('library')}) | {sig(r.get('ort_ms'))} | {sig(r['opt3_ms'])} | {defaults} | "
                   f"{_speedup_cell(r)} | {vs_ort} | {ratio(r.get('predicted'))} | {_opt_cell(r)} | "
                   f"{_rules_cell(r)} |")
    vision = [r for r in rows if r.get("library") == "torchvision"]
    slower = [label(r) for r in rows if r["speedup"] < 1.0]
    lines = []
    if vision:
        lines.append(f"torchvision models' geometric mean {times(geomean(r['speedup'] for r in vision))} "
                     f"({len(vision)} models)")
    for r in rows:
        if r.get("library") == "transformers":
            lines.append(f"{label(r)} {times(r['speedup'], 1)}")
    lines.append("none slower than opt_level 3" if not slower else f"slower: {', '.join(slower)}")
    out += ["", "Over the set: " + "; ".join(lines) + "."]
    return "\n".join(out)


def zoo_block(s: Mapping) -> str:
    tvm = (s.get("machine") or {}).get("tvm_threads")
    out = header_lines(s, f"{tvm} TVM thread{'s' if tvm != 1 else ''}" if tvm is not None else None)
    out += ["", "| zoo model | TVM opt3 ms | defaults ms | speedup over opt3 (rounds won) | predicted "
            "| optimization s, 1st / 2nd run | the rules its program came from (nodes) |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    rows = sorted(s["rows"], key=lambda r: (-r["speedup"], label(r)))
    for r in rows:
        defaults = "= opt3" if r.get("input_kept") else sig(r["defaults_ms"])
        out.append(f"| {label(r)} | {sig(r['opt3_ms'])} | {defaults} | {_speedup_cell(r)} | "
                   f"{ratio(r.get('predicted'))} | {_opt_cell(r)} | {_rules_cell(r)} |")
    slower = [label(r) for r in rows if r["speedup"] < 1.0]
    out += ["", f"Geometric mean {times(geomean(r['speedup'] for r in rows))} over {len(rows)} models; "
            + ("none slower than opt_level 3." if not slower else f"slower: {', '.join(slower)}.")]
    return "\n".join(out)


def _goals(s: Mapping) -> list[str]:
    status = {True: "met", False: "not met", None: "not measured"}
    return [f"- {g['goal']}: **{status[g.get('met')]}** ({g.get('detail')})" for g in s.get("goals") or []]


def cost_accuracy_block(s: Mapping) -> str:
    kinds = s["kinds"]
    out = header_lines(s)
    out += ["", "| model | measured ms | " + " | ".join(f"{k} error" for k in kinds) + " |",
            "| --- | --- | " + " | ".join("---" for _ in kinds) + " |"]
    for r in s["rows"]:
        errs = [f"{r['error_pct'][k]:+.1f}%" if k in r["error_pct"] else "–" for k in kinds]
        out.append(f"| {label(r)} | {sig(r['measured_ms'])} | " + " | ".join(errs) + " |")
    out.append("")
    for k in kinds:
        errs = [abs(r["error_pct"][k]) for r in s["rows"] if k in r["error_pct"]]
        if errs:
            within = sum(e <= 15.0 for e in errs)
            out.append(f"- {k}: {within}/{len(errs)} models within 15%, mean |error| {sum(errs) / len(errs):.1f}%"
                       + (f"; single-rule pairs ranked right {s['pairs'][k][0]}/{s['pairs'][k][1]}"
                          if k in (s.get("pairs") or {}) else ""))
    if s.get("pairs_wrong"):
        out.append("- pairs the learned model ranks wrong: " + ", ".join(
            f"{label(p)} `{p['rule']}` (measured ratio {p['measured_ratio']:.3f})" for p in s["pairs_wrong"]))
    out += _goals(s)
    return "\n".join(out)


def mcts_block(s: Mapping) -> str:
    out = header_lines(s)
    ref = s.get("reference_node_limit")
    out += ["", f"| model | input ms | TENSAT ms | MCTS ms | MCTS / TENSAT | MCTS s (stop) | TENSAT s | "
            f"reference ms{f' ({ref:,} e-nodes)' if ref else ''} |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in s["rows"]:
        out.append(f"| {label(r)} | {sig(r['input_ms'], 4)} | {sig(r['tensat_ms'], 4)} | {sig(r['mcts_ms'], 4)} | "
                   f"{r['mcts_over_tensat']:.5f} | {seconds(r.get('mcts_s'))} ({r.get('mcts_stop')}) | "
                   f"{seconds(r.get('tensat_s'))} | {sig(r.get('reference_ms'), 4)} |")
    out.append("")
    out += _goals(s)
    return "\n".join(out)


def tuning_block(s: Mapping) -> str:
    tvm = (s.get("machine") or {}).get("tvm_threads")
    out = header_lines(s, f"{tvm} TVM thread{'s' if tvm != 1 else ''}, onnxruntime at the same"
                       if tvm is not None else None)
    out += ["", f"Budget B = {s.get('budget')} AutoTVM trials a model (each task's first trial TVM's own "
            "fallback configuration; then x86 convolutions and dense layers in the register-tile order of "
            "`passes/runtime/config_order.py`, other kernels at random). The pass + tuning's trials include "
            "those deciding between its programs and those its joint choice of convolution records measures "
            "(*choosing*: fallbacks the graph tuner needs, raised input blocks)." + (
                " onnxruntime ran beside the bench and was timed in the same rounds: its column is paired "
                "(median per-round ratio, rounds the pass + tuning won)." if any(r.get("over_ort") is not None
                                                                                  for r in s["rows"]) else ""), "",
            "| model | onnxruntime ms | TVM opt3 ms | TVM tuned ms (trials, tasks tuned, s) | pass + tuning ms "
            "(trials, tasks tuned, s) | pass + tuning over tuned alone (rounds won) | pass + tuning / "
            "onnxruntime | the pass's program |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in s["rows"]:
        cells = []
        for key in ("tuning_alone", "tuning_pass"):
            t = r.get(key) or {}
            parts = [f"{t[k]} {k}" for k in ("deciding", "choosing") if t.get(k) is not None]
            deciding = f" ({', '.join(parts)})" if parts else ""
            cells.append(f"{t.get('trials')}{deciding}, {t.get('tasks_tuned')}/{t.get('tasks')}, "
                         f"{seconds(t.get('seconds'))}")
        vs_ort = (f"{r['over_ort']:.3f} ({r.get('ort_wins')}/{r.get('rounds')})" if r.get("over_ort") is not None
                  else f"{r['pass_tuned_ms'] / r['ort_ms']:.2f}" if r.get("ort_ms") else "–")
        program = (f"changed: {rules_text(r['rules_in_result'])}" if r.get("pass_changed") and r.get("rules_in_result")
                   else "changed" if r.get("pass_changed") else "input kept")
        chosen = (r.get("tuning_pass") or {}).get("layouts") or {}
        if chosen.get("kept"):
            raised = f", {chosen['raised']} input blocks raised" if chosen.get("raised") else ""
            program += (f"; {chosen['changed']} of {chosen['convolutions']} convolutions' records chosen together"
                        f"{raised} ({times(1.0 / chosen['ratio'])}, {chosen['wins']}/{chosen['rounds']})")
        speed = times(r.get("pass_over_alone"))
        out.append(f"| {label(r)} ({r.get('library')}) | {sig(r.get('ort_ms'))} | {sig(r['opt3_ms'])} | "
                   f"{sig(r['tuned_alone_ms'])} ({cells[0]}) | {sig(r['pass_tuned_ms'])} ({cells[1]}) | "
                   f"{speed} ({r.get('wins')}/{r.get('rounds')}) | {vs_ort} | {program} |")
    out.append("")
    out += _goals(s)
    return "\n".join(out)


def rpc_measure_block(s: Mapping) -> str:
    out = header_lines(s)
    if s.get("rows"):
        out += ["", "Kernels per second, each configuration from an empty cost database (*localN*: `--jobs N`; "
                "*rpcN*: N `tvm.exec.rpc_server` on this machine under one tracker key); *vs local1*: each "
                "kernel's time against `local1`'s, median and 90th percentile of |ratio - 1|.", "",
                "| model | config | kernels | failed | seconds | kernels/s | × local1 | vs local1 median | "
                "vs local1 p90 |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in s["rows"]:
            pct = [f"{r[k] * 100:.1f}%" if r.get(k) is not None else "–" for k in ("vs_local1_median", "vs_local1_p90")]
            out.append(f"| {r['model']} | {r['config']} | {r.get('measured')} | {r.get('failed')} | "
                       f"{seconds(r.get('seconds'))} | {sig(r.get('kernels_per_s'))} | "
                       f"{ratio(r.get('speedup_vs_local1'))} | {pct[0]} | {pct[1]} |")
    if s.get("verdicts"):
        out += ["", "The runtime check's verdict on the pass's candidate, here and over RPC (the same two programs "
                "uploaded to the server and timed there):", "",
                "| model | predicted | here: kept, speedup, wins | over RPC: kept, speedup, wins |",
                "| --- | --- | --- | --- |"]
        for r in s["verdicts"]:
            cells = []
            for where in ("local", "rpc"):
                v = r.get(where) or {}
                cells.append(f"{'kept' if v.get('kept') else 'input kept'}, {times(v.get('measured_speedup'))}, "
                             f"{v.get('runtime_wins')}" if v else (r.get("note") or "–"))
            out.append(f"| {r['model']} | {times(r.get('predicted_speedup'))} | {cells[0]} | {cells[1]} |")
    out.append("")
    out += _goals(s)
    return "\n".join(out)


def first_run_block(s: Mapping) -> str:
    out = header_lines(s)
    if s.get("rows"):
        out += ["",
                "| model | config | pass | calibration (kernels) | search | extraction with calibration | runtime check "
                "(of it timing) | TVM build | pass / build | goal: 2 builds + timing | result |",
                "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in s["rows"]:
            if r.get("error"):
                out.append(f"| {r['model']} | {r['config']} | failed | | | | | | | | |")
                continue
            result = f"{times(r.get('measured_speedup'))}" if r.get("changed") else "input kept"
            if r.get("recalibrated"):  # the model's pick measured no faster, then calibration chose again
                result = (f"model's pick {times(r.get('first_check_speedup'))}, no faster; calibrated: "
                          + (result if r["recalibrated"] == "second check" else "nothing else, input kept"))
            timing = f" ({seconds(r['check_timing_s'])})" if r.get("check_timing_s") is not None else ""
            calibrated = (f"{seconds(r['calibration_s'])} ({r.get('kernels_measured')})"
                          if r.get("calibration_s") is not None else "none")
            goal = (f"{seconds(r['goal_s'])}{' met' if r.get('within_goal') else ' not met'}"
                    if r.get("goal_s") is not None else "–")
            out.append(f"| {r['model']} | {r['config']} | {seconds(r.get('pass_s'))} | "
                       f"{calibrated} | {seconds(r.get('search_s'))} | "
                       f"{seconds(r.get('extract_s'))} | {seconds(r.get('check_s'))}{timing} | "
                       f"{seconds(r.get('tvm_build_s'))} | {ratio(r.get('pass_over_build'), 1)} | {goal} | {result} |")
    out.append("")
    out += _goals(s)
    return "\n".join(out)


SECTIONS = {
    "real_models": ("Real models against TVM opt_level 3",
                    "Models written by their libraries' authors (torchvision, transformers), exported to ONNX "
                    "and loaded the way a user loads them (tvmc's ONNX frontend), random weights, batch 1. "
                    "*defaults*: `EqSatPass()` with its defaults, then opt_level 3; *speedup*: the median "
                    "per-round time ratio to opt_level 3 in paired rounds, inverted; *= opt3*: the pass "
                    "returned its input (a candidate it measured no faster, or none); *predicted*: the cost "
                    "model's speedup; onnxruntime on the same inputs at the same thread count.",
                    real_models_block),
    "zoo": ("The model zoo against TVM opt_level 3",
            "TASO's benchmark graphs built in Relay (`relay_eqsat.passes` zoo), timed as the real models are.",
            zoo_block),
    "cost_accuracy": ("Cost model accuracy",
                      "Whole-graph runtime predicted against measured (error = (predicted - measured) / "
                      "measured): *learned* every kernel predicted by the shipped model, *auto* measured "
                      "kernels first, *analytic* the roofline alone, *held-out* each model predicted by a model "
                      "trained without its kernels and runtime; single-rule pairs: a rule's rewrite and its "
                      "input measured more than 5% apart, ranked by the prediction.",
                      cost_accuracy_block),
    "mcts_vs_tensat": ("MCTS against TENSAT's schedule",
                       "Predicted ms of the program each search returns under 2,000 e-nodes (the MCTS paper's "
                       "setting), the final extraction ILP-ACyc; *reference*: TENSAT under 100 times the "
                       "node limit, what any schedule of the rules could reach.",
                       mcts_block),
    "tuning": ("Tuned: TVM's AutoTVM alone against the pass tuning its choices",
               "`bench/real_models.py --tune-trials B`: each model at opt_level 3 untuned; *TVM tuned*: "
               "opt_level 3 under B AutoTVM trials spent on the input's tasks; *pass + tuning*: "
               "`EqSatPass(tune_trials=B)`, the same B in two rounds: a few trials on each task the input and "
               "the candidates do not share (at most half of B; *deciding*), the pass deciding under them, the "
               "rest on the tasks of the program it chose; optimized under its log and built under it; paired "
               "rounds; "
               "onnxruntime on the same inputs at the same thread count. What it means: "
               "[design notes](design-notes.md#tuning).",
               tuning_block),
    "rpc_measure": ("Measuring on this machine's cores and on RPC devices",
                    "Calibration's kernels measured by local workers and by TVM RPC servers, and the runtime "
                    "check over RPC (`bench/rpc_measure.py`; what it means: [measuring](measuring.md)).",
                    rpc_measure_block),
    "first_run": ("The first run on a CPU without shipped data",
                  "`relay-eqsat optimize MODEL` with an empty cost database and the shipped data hidden, in "
                  "seconds, against TVM's own build of the model (`bench/rpc_measure.py --parts first_run`; "
                  "*before*: the package of the commit before the change, run the same way; what the parts are: "
                  "[measuring](measuring.md#what-the-first-run-costs)). *result*: the runtime check's measured "
                  "speedup, or how the cost model's pick fared when it was timed no faster and calibration chose "
                  "again.",
                  first_run_block),
}


def load_summaries(summaries: Path = SUMMARIES) -> dict[str, dict]:
    return {t: json.loads((summaries / f"{t}.json").read_text()) for t in TABLES
            if (summaries / f"{t}.json").exists()}


def render_text(summaries: Mapping[str, Mapping]) -> str:
    """docs/results.md's text from the summaries (``{table: summary}``)."""
    out = ["# Results", "",
           "Generated by `make results` (`bench/results_doc.py render`) from the summaries in "
           "[bench/summaries/](../bench/summaries/): do not edit by hand. A `make bench` run writes its JSON "
           "under `bench/results/` (not committed); `make results RUN=<that folder>` summarizes it and "
           "writes this page. Each table names the machine, date, command and commit it was measured with. "
           "Earlier runs, on other CPUs too, are in [history](history.md); what the figures mean for a "
           "decision, in [design notes](design-notes.md).", ""]
    for table in TABLES:
        if table not in summaries:
            continue
        title, text, block = SECTIONS[table]
        out += [f"## {title}", "", text, "", block(summaries[table]), ""]
    return "\n".join(out).rstrip("\n") + "\n"


def readme_block(summaries: Mapping[str, Mapping]) -> str:
    return real_models_block(summaries["real_models"]) if "real_models" in summaries else ""


def replace_between(text: str, begin: str, end: str, body: str) -> str:
    """``text`` with what lies between the lines ``begin`` and ``end`` replaced by ``body``."""
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        raise ValueError(f"markers {begin!r} ... {end!r} not found")
    return text[:i + len(begin)] + "\n" + body.rstrip("\n") + "\n" + text[j:]


def between(text: str, begin: str, end: str) -> str | None:
    i, j = text.find(begin), text.find(end)
    return None if i < 0 or j < i else text[i + len(begin):j].strip("\n")


def render(summaries: Path = SUMMARIES, out: Path = RESULTS_MD, readme: Path | None = README) -> list[Path]:
    loaded = load_summaries(summaries)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_text(loaded))
    written = [out]
    if readme is not None and readme.exists() and BEGIN_README in readme.read_text():
        readme.write_text(replace_between(readme.read_text(), BEGIN_README, END_README, readme_block(loaded)))
        written.append(readme)
    return written


# -- options --------------------------------------------------------------------------------------

def options_table() -> str:
    """docs/usage.md's table of every option, from the schema (relay_eqsat/options.py)."""
    import importlib.util

    if importlib.util.find_spec("relay_eqsat") is None:  # not installed: this checkout's
        sys.path.append(str(ROOT))
    from relay_eqsat import options

    rows = ["| option | type | default | allowed | where | what it does |", "| --- | --- | --- | --- | --- | --- |"]
    for o in options.OPTIONS.values():
        kind = {object: "str or object"}.get(o.type, o.type.__name__)
        allowed = o.allowed()
        if allowed is not None:
            text = ", ".join(f"`{a}`" for a in allowed) + (" (or a boolean)" if o.switch else "")
        elif o.low is not None:
            text = f"{'≥' if o.low_inclusive else '>'} {o.low:g}"
        else:
            text = "true/false" if o.type is bool else f"any {kind}"
        if o.nullable:
            text += " or None"
        where = "EqSatPass" if o.scope == "pass" else "EqSatPass, optimizer"
        help_text = o.help.replace("|", "\\|")
        rows.append(f"| `{o.name}` | {kind} | `{o.default}` | {text} | {where} | {help_text} |")
    return "\n".join(rows)


def write_options(usage: Path = USAGE_MD) -> Path:
    usage.write_text(replace_between(usage.read_text(), BEGIN_OPTIONS, END_OPTIONS, options_table()))
    return usage


# -- command line ---------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    s = sub.add_parser("summarize", help="a make-bench run folder -> bench/summaries/*.json")
    s.add_argument("run", nargs="?", default="", help="the run folder (default: the newest bench/results/bench_*)")
    s.add_argument("--summaries", type=Path, default=SUMMARIES)
    r = sub.add_parser("render", help="bench/summaries/ -> docs/results.md (and the README's table)")
    r.add_argument("--summaries", type=Path, default=SUMMARIES)
    r.add_argument("--out", type=Path, default=RESULTS_MD)
    r.add_argument("--readme", type=Path, default=README)
    o = sub.add_parser("options", help="the options schema -> docs/usage.md's options table")
    o.add_argument("--usage", type=Path, default=USAGE_MD)
    args = ap.parse_args(argv)
    if args.command == "summarize":
        run = Path(args.run) if args.run else latest_run()
        if run is None:
            print("no bench/results/bench_* run with real_models.json: the committed summaries stay")
            return 0
        for path in summarize(run, args.summaries):
            print(f"wrote {path} (from {run})")
    elif args.command == "render":
        for path in render(args.summaries, args.out, args.readme):
            print(f"wrote {path}")
    else:
        print(f"wrote {write_options(args.usage)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
