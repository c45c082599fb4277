"""bench/results_doc.py: docs/results.md is the committed summaries rendered, the README's table is
docs/results.md's, every summary says where it was measured, a run folder summarizes into a page,
and docs/usage.md's options table is the options schema. No TVM needed."""
from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPEC = importlib.util.spec_from_file_location("results_doc", ROOT / "bench" / "results_doc.py")
results_doc = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(results_doc)


def committed() -> dict[str, dict]:
    return results_doc.load_summaries(results_doc.SUMMARIES)


def test_results_page_is_the_committed_summaries_rendered():
    page = (ROOT / "docs" / "results.md").read_text()
    assert page == results_doc.render_text(committed()), \
        "docs/results.md differs from bench/summaries/: run `make results` (or `python bench/results_doc.py render`)"


def test_readme_table_is_the_results_pages_main_table():
    readme = (ROOT / "README.md").read_text()
    block = results_doc.between(readme, results_doc.BEGIN_README, results_doc.END_README)
    assert block is not None, "README.md lacks the results:real_models markers"
    summaries = committed()
    assert block == results_doc.readme_block(summaries)
    assert block in (ROOT / "docs" / "results.md").read_text()


def test_every_table_has_a_summary_saying_where_it_was_measured():
    summaries = committed()
    assert set(summaries) == set(results_doc.TABLES)
    for table, s in summaries.items():
        assert s["table"] == table
        for key in ("machine", "date", "command", "commit"):
            assert s.get(key), f"{table}: no {key}"
        assert s["machine"].get("cpu") and s["machine"].get("target"), table
        assert s["command"].startswith("python bench/"), table
        assert s["rows"], table


def test_real_model_summary_has_onnxruntime_beside_tvm():
    rows = committed()["real_models"]["rows"]
    assert all(r["ort_ms"] > 0 and r["ort_threads"] for r in rows)
    assert all(r["opt3_ms"] > 0 and r["defaults_ms"] > 0 for r in rows)
    assert "onnxruntime ms" in results_doc.real_models_block(committed()["real_models"])


def _real_row(model, kind, opt3_s, default_s, *, ratio, wins=9, changed=True, ort_s=None, inputs=None,
              measured=None, rules=None, small=False):
    default = {"median_s": default_s, "ratio_vs_opt3": ratio, "wins": wins, "rounds": 9, "changed": changed,
               "predicted_speedup": 1.2, "opt_time": 12.5, "rules_in_result": rules or {},
               "max_err_vs_ort": 1e-6 if ort_s else None, "same_as": None if changed else "opt3"}
    if measured is not None:
        default.update(measured_speedup=measured, runtime_wins="2/9")
    row = {"model": model, "kind": kind, "small": small,
           "variants": {"opt3": {"median_s": opt3_s, "ratio_vs_opt3": 1.0, "wins": 0, "rounds": 9},
                        "default": default,
                        "default_rerun": {**default, "opt_time": 0.4, "same_as": "default"}}}
    if ort_s is not None:
        row["ort"] = {"median_s": ort_s, "threads": 1}
        row["export"] = {"inputs": inputs or [{"name": "input", "shape": [1, 3, 224, 224], "dtype": "float32"}]}
    return row


def make_run(folder: Path) -> Path:
    """A small `make bench` output folder: the JSON files the summaries read."""
    folder.mkdir()
    machine = {"cpu_model": "Test CPU", "cpus": 2, "target": "llvm -mtriple=x86_64-linux-gnu -mcpu=znver4",
               "tvm_threads": 1, "time": "2026-12-01 10:00:00",
               "argv": ["bench/real_models.py", "--zoo", "nasrnn", "--out", str(folder / "real_models.json")]}
    rows = [_real_row("resnet50", "onnx", 0.080, 0.064, ratio=0.8, ort_s=0.070,
                      rules={"conv1x1-stride-to-slice": 4, "dense-pad-columns": 3}),
            _real_row("densenet121", "onnx", 0.060, 0.060, ratio=1.0, wins=0, changed=False, ort_s=0.050,
                      measured=0.97, rules={"conv-merge": 2}),
            _real_row("bert", "onnx", 20.0, 0.25, ratio=0.0125, ort_s=0.24,
                      inputs=[{"name": "input_ids", "shape": [1, 128], "dtype": "int64"}]),
            _real_row("zoo:nasrnn", "zoo", 0.004, 0.002, ratio=0.5, rules={"dense-merge": 5})]
    tuning = {"measured": 64, "seconds": 120.0, "programs": ["the input"],
              "tasks": [{"task": "conv2d_NCHWc.x86 a", "planned": 60}, {"task": "conv2d_NCHWc.x86 b", "planned": 4},
                        {"task": "conv2d_NCHWc.x86 c", "planned": 0}]}
    rows[0]["variants"].update(  # a --tune-trials run's variants: tuned alone, the pass + tuning
        opt3_tuned={"median_s": 0.050, "ratio_vs_opt3": 0.625, "wins": 9, "rounds": 9, "tuning": tuning},
        tuned={"median_s": 0.040, "ratio_vs_opt3": 0.5, "wins": 9, "rounds": 9, "report_changed": True,
               "ratio_vs_opt3_tuned": 0.8, "wins_vs_opt3_tuned": 8, "rules_in_result": {"conv-merge": 2},
               "opt_time": 150.0, "max_err_vs_ort": 2e-6,
               "tuning": {**tuning, "programs": ["the input", "the result"]}})
    (folder / "real_models.json").write_text(json.dumps(
        {"machine": machine, "args": {"rounds": 9, "min_repeat_ms": 200, "tune_trials": 64}, "rows": rows}))
    (folder / "cost_accuracy.json").write_text(json.dumps({
        "machine": {**machine, "cpu_model": None, "argv": ["bench/cost_accuracy.py", "--held-out"]},
        "rows": [{"model": "nasrnn", "small": False, "measured": 0.003,
                  "learned": {"rel_error": -0.1}, "auto": {"rel_error": 0.02}, "held-out": {"rel_error": 0.2}},
                 {"model": "nasrnn", "small": True, "fit_only": True, "measured": 1e-5,
                  "learned": {"rel_error": 0.5}}],
        "pairs": [{"model": "nasrnn", "small": True, "rule": "dense-merge", "counted": True, "ratio": 1.06,
                   "learned": {"correct": False}, "auto": {"correct": True}},
                  {"model": "nasrnn", "small": True, "rule": "tanh-fast", "counted": True, "ratio": 0.5,
                   "learned": {"correct": True}, "auto": {"correct": True}},
                  {"model": "nasrnn", "small": True, "rule": "add-comm", "counted": False, "ratio": 1.0,
                   "learned": {"correct": False}, "auto": {"correct": False}}],
        "goals": [{"goal": "whole-graph prediction (learned) within 15%", "met": True, "detail": "1/1 models"}]}))
    (folder / "mcts_vs_tensat.json").write_text(json.dumps({
        "machine": {**machine, "cpu_model": None, "argv": ["bench/mcts_vs_tensat.py"]},
        "code": {"commit": "abc1234", "modified": ""},
        "args": {"node_limit": 2000, "reference_node_limit": 200000},
        "rows": [{"model": "nasrnn", "small": False, "mcts_over_tensat_cost": 0.9,
                  "tensat": {"cost_before": 0.003, "cost_after": 0.0028, "time": 0.5},
                  "mcts": {"cost_after": 0.00252, "time": 12.0, "stop_reason": "no_gain"},
                  "reference": {"cost_after": 0.0025, "egraph_nodes": 200001}}],
        "goals": [{"goal": "MCTS at least as good as TENSAT on every model", "met": True, "detail": "1/1"}]}))
    (folder / "rpc_measure.json").write_text(json.dumps({
        "machine": {**machine, "argv": ["bench/rpc_measure.py"]},
        "throughput": [{"model": "squeezenet1_1", "config": "local1", "kernels": 46, "measured": 46, "failed": 0,
                        "seconds": 23.0, "kernels_per_s": 2.0, "speedup_vs_local1": 1.0,
                        "kernel_seconds": {"k": 1e-5}},
                       {"model": "squeezenet1_1", "config": "rpc2", "kernels": 46, "measured": 46, "failed": 0,
                        "seconds": 15.3, "kernels_per_s": 3.0, "speedup_vs_local1": 1.5, "vs_local1_median": 0.1,
                        "vs_local1_p90": 0.4}],
        "verdicts": [{"model": "squeezenet1_1", "predicted_speedup": 1.2, "same_verdict": True,
                      "local": {"kept": True, "measured_speedup": 1.1, "runtime_wins": "9/9", "reason": "x"},
                      "rpc": {"kept": True, "measured_speedup": 1.08, "runtime_wins": "9/9"}}],
        "first_run": [{"model": "squeezenet1_1", "config": "local2", "pass_s": 44.7, "calibration_s": 16.1,
                       "check_s": 20.0, "check_timing_s": 1.5, "tvm_build_s": 12.3, "pass_over_build": 3.6,
                       "goal_s": 26.1, "within_goal": False, "changed": True, "measured_speedup": 1.11},
                      {"model": "squeezenet1_1", "config": "after", "pass_s": 18.0, "search_s": 0.01,
                       "calibration_s": None, "changed": True, "measured_speedup": 1.06},
                      {"model": "squeezenet1_1", "config": "after", "pass_s": 50.0, "calibration_s": 13.0,
                       "kernels_measured": 24, "changed": True, "measured_speedup": 1.05,
                       "first_check_speedup": 0.96, "recalibrated": "second check"}],
        "goals": [{"goal": "the runtime check's verdict over RPC equals the local one", "met": True,
                   "detail": "1/1 models"},
                  {"goal": "a first run within twice TVM's build plus the paired timing", "met": False,
                   "detail": "squeezenet1_1 local2 45 s of 26 s"}]}))
    return folder


def test_summarize_a_run_folder_into_summaries_the_renderer_accepts(tmp_path):
    run = make_run(tmp_path / "bench_20261201_100000")
    out = tmp_path / "summaries"
    written = results_doc.summarize(run, out)
    assert sorted(p.name for p in written) == sorted(f"{t}.json" for t in results_doc.TABLES)
    s = results_doc.load_summaries(out)

    real = s["real_models"]
    assert real["machine"] == {"cpu": "Test CPU", "cpus": 2, "target": "llvm -mtriple=x86_64-linux-gnu -mcpu=znver4",
                               "tvm_threads": 1}
    assert real["date"] == "2026-12-01 10:00:00"
    assert real["command"].startswith("python bench/real_models.py --zoo nasrnn")
    assert real["commit"] == "abc1234" and real["commit_source"] == "recorded by the run"  # from mcts_vs_tensat.json
    by = {r["model"]: r for r in real["rows"]}
    assert set(by) == {"resnet50", "densenet121", "bert"}
    assert by["resnet50"]["speedup"] == pytest.approx(1.25)
    assert by["resnet50"]["ort_ms"] == pytest.approx(70.0) and by["resnet50"]["opt3_ms"] == pytest.approx(80.0)
    assert by["resnet50"]["library"] == "torchvision" and by["bert"]["library"] == "transformers"
    assert by["densenet121"]["input_kept"] and by["densenet121"]["speedup"] == 1.0
    assert by["densenet121"]["candidate_speedup"] == pytest.approx(0.97)
    assert by["bert"]["speedup"] == pytest.approx(80.0)

    zoo = s["zoo"]["rows"]
    assert [r["model"] for r in zoo] == ["zoo:nasrnn"] and zoo[0]["speedup"] == pytest.approx(2.0)
    assert "ort_ms" not in zoo[0]

    tuned = s["tuning"]
    assert tuned["budget"] == 64 and [r["model"] for r in tuned["rows"]] == ["resnet50"]
    row = tuned["rows"][0]
    assert row["pass_over_alone"] == pytest.approx(1.25) and row["tuning_pass"]["tasks_tuned"] == 2
    assert [g["met"] for g in tuned["goals"]] == [True, False]  # faster than tuned alone; beats ORT on 1 < 2
    text = results_doc.tuning_block(tuned)
    assert ("| resnet50 (torchvision) | 70.0 | 80.0 | 50.0 (64, 2/3, 120) | 40.0 (64, 2/3, 120) | 1.250× (8/9) "
            "| 0.57 | changed: `conv-merge` 2 |") in text, text
    assert row["tuning_pass"]["layouts"] is None  # the run's report had no joint choice of records
    chosen = {**tuned, "rows": [{**row, "tuning_pass": {**row["tuning_pass"], "layouts": {
        "kept": True, "changed": 21, "convolutions": 52, "ratio": 0.949, "wins": 8, "rounds": 9}}}]}
    assert ("changed: `conv-merge` 2; 21 of 52 convolutions' records chosen together (1.054×, 8/9) |"
            in results_doc.tuning_block(chosen))
    # onnxruntime timed in the same rounds: the column is paired, and the goal counts rounds won
    paired = {**tuned, "rows": [{**row, "over_ort": 0.93, "ort_wins": 4}]}
    assert "| 0.930 (4/9) |" in results_doc.tuning_block(paired) and "timed in the same rounds" in \
        results_doc.tuning_block(paired)
    assert not results_doc._beats_ort(paired["rows"][0])  # faster by the median, but 4 of 9 rounds
    assert results_doc._beats_ort({**row, "over_ort": 0.93, "ort_wins": 7})
    assert not results_doc._beats_ort({**row, "over_ort": 1.02, "ort_wins": 5})
    assert not results_doc._beats_ort({**row, "over_ort": 0.99, "ort_wins": 6})  # within the margin
    level = {**row, "pass_over_alone": 1.003, "wins": 5}  # the same program, tuned twice
    assert [g["met"] for g in results_doc._tuning_goals([row, level])][0] is False
    assert [g["met"] for g in results_doc._tuning_goals([row, {**level, "pass_over_alone": 1.03}])][0] is True
    assert results_doc._beats_ort(row)  # an older run: medians (40 ms against 70)

    cost = s["cost_accuracy"]
    assert cost["machine"]["cpu"] == "Test CPU"  # named by real_models.json of the same run
    assert [r["model"] for r in cost["rows"]] == ["nasrnn"]  # the fit-only row is left out
    assert cost["rows"][0]["error_pct"] == {"learned": pytest.approx(-10.0), "auto": pytest.approx(2.0),
                                            "held-out": pytest.approx(20.0)}
    assert cost["pairs"] == {"learned": [1, 2], "auto": [2, 2]}
    assert cost["pairs_wrong"][0]["rule"] == "dense-merge"

    rpc = s["rpc_measure"]
    assert [r["config"] for r in rpc["rows"]] == ["local1", "rpc2"] and "kernel_seconds" not in rpc["rows"][0]
    assert rpc["verdicts"][0]["rpc"] == {"kept": True, "measured_speedup": 1.08, "runtime_wins": "9/9"}
    assert "first_run" not in rpc and [g["met"] for g in rpc["goals"]] == [True]
    text = results_doc.rpc_measure_block(rpc)
    assert "| squeezenet1_1 | rpc2 | 46 | 0 | 15.3 | 3.00 | 1.50 | 10.0% | 40.0% |" in text
    assert "kept, 1.080×, 9/9" in text and "**met**" in text
    first = s["first_run"]  # a table of its own, with its goal
    assert first["rows"][0]["pass_s"] == pytest.approx(44.7) and [g["met"] for g in first["goals"]] == [False]
    text = results_doc.first_run_block(first)
    assert "| 20.0 (1.5) | 12.3 | 3.6 | 26.1 not met | 1.110× |" in text and "**not met**" in text
    assert "| squeezenet1_1 | after | 18.0 | none | 0.0 |" in text
    assert "model's pick 0.960×, no faster; calibrated: 1.050×" in text

    mcts = s["mcts_vs_tensat"]["rows"][0]
    assert mcts["tensat_ms"] == pytest.approx(2.8) and mcts["mcts_ms"] == pytest.approx(2.52)
    assert mcts["reference_nodes"] == 200001

    page = results_doc.render_text(s)
    assert page == results_doc.render_text(results_doc.load_summaries(out))  # deterministic
    for text in ("Test CPU, 2 cores", "2026-12-01 10:00:00", "`abc1234`", "python bench/mcts_vs_tensat.py",
                 "| resnet50 (torchvision) | 70.0 | 80.0 | 64.0 | **1.250×** (9/9) | 0.91 |",
                 "| densenet121 (torchvision) | 50.0 | 60.0 | = opt3 | 1.000× (input kept; candidate 0.970×, 2/9)",
                 "| bert (transformers) | 240 | 20,000 | 250 | **80.0×** (9/9) | 1.04 |",
                 "torchvision models' geometric mean " + f"{math.sqrt(1.25):.3f}×",
                 "| nasrnn | 3.00 | -10.0% | +2.0% | +20.0% |", "single-rule pairs ranked right 1/2",
                 "| nasrnn | 3.000 | 2.800 | 2.520 | 0.90000 | 12.0 (no_gain) | 0.5 | 2.500 |"):
        assert text in page, text
    for title, _, _ in results_doc.SECTIONS.values():
        assert f"## {title}" in page


def test_summarize_without_a_recorded_commit_names_where_it_came_from(tmp_path):
    run = make_run(tmp_path / "bench_x")
    (run / "mcts_vs_tensat.json").unlink()
    s = {p.stem: json.loads(p.read_text()) for p in results_doc.summarize(run, tmp_path / "out")}
    assert set(s) == {"real_models", "zoo", "tuning", "cost_accuracy", "rpc_measure", "first_run"}  # mcts_vs_tensat's left as it was
    assert s["real_models"]["commit_source"] != "recorded by the run"
    assert s["real_models"]["commit"] or s["real_models"]["commit_source"] == "unknown"


def test_latest_run_is_the_one_recorded_last(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    assert results_doc.latest_run(results) is None  # a fresh clone: the committed summaries stay
    for name, when in (("bench_b", "2026-11-29 12:00:00"), ("bench_a", "2026-11-30 08:00:00")):
        (results / name).mkdir()
        (results / name / "real_models.json").write_text(json.dumps({"machine": {"time": when}, "rows": []}))
    (results / "bench_c").mkdir()  # no real_models.json: not a candidate
    assert results_doc.latest_run(results) == results / "bench_a"


def test_render_writes_the_page_and_the_readmes_table(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{results_doc.BEGIN_README}\nSTALE\n{results_doc.END_README}\nafter\n")
    out = tmp_path / "results.md"
    results_doc.render(results_doc.SUMMARIES, out, readme)
    assert out.read_text() == (ROOT / "docs" / "results.md").read_text()
    text = readme.read_text()
    assert "STALE" not in text and text.startswith("intro\n") and text.endswith("after\n")
    assert results_doc.between(text, results_doc.BEGIN_README, results_doc.END_README) == \
        results_doc.readme_block(committed())


def test_usage_options_table_is_the_schema():
    usage = (ROOT / "docs" / "usage.md").read_text()
    table = results_doc.between(usage, results_doc.BEGIN_OPTIONS, results_doc.END_OPTIONS)
    assert table is not None, "docs/usage.md lacks the options markers"
    from relay_eqsat.options import OPTIONS

    for name in OPTIONS:
        assert f"| `{name}` |" in table, name
    assert table == results_doc.options_table(), \
        "docs/usage.md's options table differs from relay_eqsat/options.py: run `python bench/results_doc.py options`"
