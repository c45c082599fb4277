"""bench/real_models.py without the export venv: command line, inputs, dedup, table/JSON/plot, and
the variants of a tiny Relay program built, timed and checked against numpy."""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

real_models = pytest.importorskip("real_models")
tables = pytest.importorskip("tables")


def _tiny(bias: np.ndarray, scale: float | None = None):
    """relu(x + bias) (times ``scale`` if given), a bound module."""
    import tvm
    from tvm import relay

    x = relay.var("x", shape=(2, 8), dtype="float32")
    y = relay.nn.relu(relay.add(x, relay.const(bias)))
    if scale is not None:
        y = relay.multiply(y, relay.const(np.float32(scale)))
    return relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], y)))


def test_parse_args_defaults_and_quick():
    args = real_models.parse_args(["--quick", "--models", "squeezenet1_1", "--variants", "default", "--zoo", ""])
    assert (args.rounds, args.min_repeat_ms) == (3, 50)
    assert args.model_list == ["squeezenet1_1"]
    assert args.variant_list == ["opt3", "default"]  # the baseline always runs
    assert args.zoo_list == []
    full = real_models.parse_args([])
    assert (full.rounds, full.min_repeat_ms, full.threads) == (9, 200, 1)
    assert full.model_list == list(real_models.REAL_MODELS) and "bert" in full.model_list
    assert full.variant_list == list(real_models.VARIANTS)
    assert full.zoo_list == [("nasrnn", False), ("nasnet_a", True)]
    # "extra": the other exports, alone or beside named models; never part of "all"
    extra = real_models.parse_args(["--models", "bert,extra"]).model_list
    assert extra == ["bert", *real_models.EXTRA_MODELS] and "vit_b_16" in extra
    assert not set(real_models.EXTRA_MODELS) & set(real_models.REAL_MODELS)
    assert {"distilbert", "gpt2", "roberta", "opt", "t5_encoder", "llama_small"} <= set(real_models.EXTRA_MODELS)


def test_the_transformers_models_take_token_ids_below_their_vocabulary_and_a_mask():
    models = real_models.export_onnx.MODELS
    vocabularies = {name: t.vocab for name, t in real_models.export_onnx.TRANSFORMERS.items()}
    assert vocabularies["bert"] == vocabularies["distilbert"] == 30522 and vocabularies["gpt2"] == 50257
    for name, vocab in vocabularies.items():
        ids, mask = models[name]
        assert (ids["name"], ids["dtype"], ids["shape"], ids["high"]) == ("input_ids", "int64", [1, 128], vocab)
        assert (mask["name"], mask["high"]) == ("attention_mask", 2)
        assert real_models.export_onnx.OUTPUT_NAMES[name] == ["last_hidden_state"]


@pytest.mark.parametrize("argv", [["--models", "resnet18"], ["--variants", "fast"], ["--zoo", "nasrnn:huge"],
                                  ["--zoo", "nosuchmodel"], ["--threads", "0"], ["--time-budget", "-1"],
                                  ["--without-rules", "conv-merge,no-such-rule"]])
def test_parse_args_rejects_bad_values(argv, capsys):
    with pytest.raises(SystemExit) as e:
        real_models.parse_args(argv)
    assert e.value.code == 2
    assert "error" in capsys.readouterr().err


def test_without_rules_adds_a_variant_with_the_defaults_less_those_rules():
    from relay_eqsat.pipeline import resolve_rules

    args = real_models.parse_args(["--variants", "default", "--without-rules", "channel-shuffle-interleave,conv-merge"])
    assert args.variant_list == ["opt3", "default", "without_rules"]
    assert args.without_rules == ["channel-shuffle-interleave", "conv-merge"]
    assert real_models.parse_args([]).without_rules == []
    p, missing = real_models.make_pass("without_rules", args.without_rules)
    assert not missing
    names = [r.name for r in p.options["rules"]]
    assert len(names) == len(resolve_rules("default")) - 2
    assert "channel-shuffle-interleave" not in names and "conv-merge" not in names and "conv-enlarge-1x1" in names


def test_zoo_specs_small_from_flags():
    assert real_models.zoo_specs("nasrnn,nasnet_a", small_models="nasnet_a") == [("nasrnn", False),
                                                                                 ("nasnet_a", True)]
    assert real_models.zoo_specs("nasrnn", small=True) == [("nasrnn", True)]


def test_inputs_follow_the_specs():
    specs = real_models.export_onnx.MODELS["bert"] + [{"name": "img", "shape": [1, 3], "dtype": "float32"}]
    a, b = real_models.make_inputs(specs, seed=0), real_models.make_inputs(specs, seed=0)
    assert set(a) == {"input_ids", "attention_mask", "img"}
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])  # seeded
    assert a["input_ids"].dtype == np.int64 and a["input_ids"].shape == (1, 128)
    assert a["input_ids"].max() < 30522 and a["input_ids"].max() > 4  # the whole vocabulary, not [0, 4)
    assert set(np.unique(a["attention_mask"])) == {0, 1}
    assert a["img"].dtype == np.float32
    assert real_models.shapes_arg(specs) == "input_ids:[1,128] attention_mask:[1,128] img:[1,3]"


def test_same_program_ignores_the_report_attribute():
    from relay_eqsat.passes.relay.eqsat_pass import REPORT_ATTR

    bias = np.arange(8, dtype=np.float32)
    a, b = _tiny(bias), _tiny(bias)
    assert real_models.same_program(a, a) and real_models.same_program(a, b)
    import tvm

    tagged = tvm.IRModule.from_expr(b["main"].with_attr(REPORT_ATTR, '{"total_time": 1.0}'))
    assert real_models.same_program(a, tagged)
    assert not real_models.same_program(a, _tiny(bias + 1))  # constants' values count
    assert not real_models.same_program(a, _tiny(bias, scale=2.0))


def test_dedup_keeps_the_first_of_each_program():
    bias = np.zeros(8, dtype=np.float32)
    base = _tiny(bias)
    mods = {"opt3": base, "default": base, "default_rerun": _tiny(bias, 3.0), "check_runtime": _tiny(bias),
            "trust_model": _tiny(bias, 3.0)}
    assert real_models.dedup(mods) == {"opt3": "opt3", "default": "opt3", "default_rerun": "default_rerun",
                                       "check_runtime": "opt3", "trust_model": "default_rerun"}


def test_run_variants_shares_identical_programs_and_checks_outputs(monkeypatch, tmp_path):
    """The variants of relu(x + b): each distinct program built once, timed in paired rounds,
    compared with a numpy reference (the role onnxruntime plays)."""
    monkeypatch.setenv("RELAY_EQSAT_COST_DB", str(tmp_path / "costs.sqlite"))
    bias = np.linspace(-1, 1, 8, dtype=np.float32)
    bound = _tiny(bias)
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    reference = [np.maximum(x + bias, 0)]
    args = real_models.parse_args(["--rounds", "3", "--min-repeat-ms", "1", "--zoo", ""])
    records = real_models.run_variants(bound, {"x": x}, ["opt3", "trust_model"], args, reference)
    assert list(records) == ["opt3", "trust_model"]
    base, trust = records["opt3"], records["trust_model"]
    assert base["ratio_vs_opt3"] == 1.0 and base["rounds"] == 3 and len(base["samples_s"]) == 3
    assert base["max_err_vs_ort"] <= 1e-6 and base["ok_vs_ort"] and base["max_err_vs_opt3"] == 0.0
    assert "error" not in trust, trust
    assert trust["max_err_vs_ort"] <= 1e-4 and trust["ok_vs_ort"]
    if trust["same_as"] == "opt3":  # nothing cheaper: built and timed once, the measurement shared
        assert not trust["changed"] and trust["samples_s"] == base["samples_s"]
        assert trust["build_time"] == base["build_time"]
    else:
        assert trust["changed"] and trust["same_as"] is None


class _FakeOrt:
    """Stands in for export_venv.OrtProcess: a timing of a known length per call."""

    first_run_s = 1e-3

    def __init__(self, seconds):
        self.seconds, self.samples = seconds, []

    def time(self):
        self.samples.append(self.seconds)
        return self.seconds


def test_onnxruntime_is_timed_in_the_same_rounds_and_paired(monkeypatch, tmp_path):
    monkeypatch.setenv("RELAY_EQSAT_COST_DB", str(tmp_path / "costs.sqlite"))
    bias = np.linspace(-1, 1, 8, dtype=np.float32)
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    args = real_models.parse_args(["--rounds", "3", "--min-repeat-ms", "1", "--zoo", ""])
    ort = _FakeOrt(10.0)  # far slower than relu(x + b): every round won
    records = real_models.run_variants(_tiny(bias), {"x": x}, ["opt3"], args, [np.maximum(x + bias, 0)], ort)
    base = records["opt3"]
    assert len(ort.samples) == base["rounds"] == 3  # one onnxruntime timing a round, no warm-up call
    assert base["wins_vs_ort"] == 3 and 0 < base["ratio_vs_ort"] < 1e-3
    assert base["ratio_vs_ort"] == pytest.approx(statistics.median(s / 10.0 for s in base["samples_s"]))
    assert "ratio_vs_ort" not in real_models.run_variants(_tiny(bias), {"x": x}, ["opt3"], args, None)["opt3"]


_SERVE = """import json, sys, time
import numpy as np
sys.path.insert(0, {bench!r})
import export_onnx
args = sys.argv[1:]
assert args[0] == "ort-serve", args
if "--fail" in open(args[1]).read():
    print("Traceback: InvalidGraph: the model is broken", file=sys.stderr)
    sys.exit(1)
with np.load(args[2]) as z:
    x = z["x"]
np.savez(args[3], output_0=x * 2)
print(json.dumps({{"first_run_s": 0.001, "threads": int(args[args.index("--threads") + 1])}}), flush=True)
export_onnx.serve_timings(lambda: time.sleep(0.0005), float(args[args.index("--min-repeat-ms") + 1]),
                          sys.stdin, sys.stdout)
"""


def test_ort_process_serves_outputs_then_a_timing_per_request(tmp_path, monkeypatch):
    """The bench's side of ``export_onnx.py ort-serve`` (onnxruntime's session replaced by a sleep):
    outputs first, then one timing per call, each at least --min-repeat-ms long; a failing helper
    is a clear error with its stderr."""
    export_venv = pytest.importorskip("export_venv")
    script = tmp_path / "serve.py"
    script.write_text(_SERVE.format(bench=str(Path(real_models.__file__).parent)))
    monkeypatch.setattr(export_venv, "EXPORT_SCRIPT", script)
    model = tmp_path / "m.onnx"
    model.write_text("fine")
    x = np.arange(6, dtype=np.float32)
    with export_venv.OrtProcess(Path(sys.executable), model, {"x": x}, tmp_path, threads=1, min_repeat_ms=5) as ort:
        assert np.array_equal(ort.outputs[0], x * 2) and ort.first_run_s == 0.001 and ort.info["threads"] == 1
        times = [ort.time(), ort.time()]
        assert all(0.0004 < t < 0.05 for t in times) and ort.samples == times
        proc = ort._proc
    assert proc.poll() == 0  # asked to quit, it did
    model.write_text("--fail")
    with pytest.raises(RuntimeError, match="InvalidGraph: the model is broken"):
        export_venv.OrtProcess(Path(sys.executable), model, {"x": x}, tmp_path)


def test_serve_timings_answers_time_and_refuses_anything_else(capsys):
    import io

    calls = []
    out = io.StringIO()
    assert real_models.export_onnx.serve_timings(lambda: calls.append(1), 0.0, io.StringIO("time\ntime\nquit\ntime\n"),
                                                 out) == 2
    assert len(out.getvalue().splitlines()) == 2 and len(calls) == 2  # nothing after quit
    with pytest.raises(SystemExit) as e:
        real_models.export_onnx.serve_timings(lambda: None, 0.0, io.StringIO("run\n"), io.StringIO())
    assert e.value.code == 2 and "unknown command 'run'" in capsys.readouterr().err


def _erf(shape=(16, 256)):
    """erf(0.7 x): the pass's erf-fast candidate (a bound module)."""
    import tvm
    from tvm import relay

    x = relay.var("x", shape=shape, dtype="float32")
    return relay.transform.InferType()(tvm.IRModule.from_expr(
        relay.Function([x], relay.erf(relay.multiply(x, relay.const(np.float32(0.7)))))))


def test_run_variants_reuses_what_the_runtime_check_built(monkeypatch, tmp_path):
    """The pass's runtime check built the input (and its candidate): the bench times those builds,
    reporting the check's build seconds, and checks their outputs as any other."""
    monkeypatch.setenv("RELAY_EQSAT_COST_DB", str(tmp_path / "costs.sqlite"))
    monkeypatch.setitem(real_models.VARIANT_OPTIONS, "check_runtime",
                        {"check_runtime": "on", "calibrate": "off", "min_gain": 0.0})
    bound = _erf()
    x = np.random.default_rng(1).standard_normal((16, 256)).astype(np.float32)
    args = real_models.parse_args(["--rounds", "3", "--min-repeat-ms", "1", "--zoo", ""])
    records = real_models.run_variants(bound, {"x": x}, ["opt3", "check_runtime"], args, None)
    base, checked = records["opt3"], records["check_runtime"]
    assert "error" not in checked, checked
    assert base["build_reused"] and base["build_time"] > 0.01  # the check's build and its seconds
    if checked["changed"]:
        assert checked["build_reused"] and checked["max_err_vs_opt3"] <= 1e-3  # erf's approximation
    else:  # measured no faster: the input kept
        assert checked["same_as"] == "opt3" and "measured no faster" in checked["reason"]


def test_a_time_budget_cuts_rounds_but_not_below_the_minimum():
    args = real_models.parse_args(["--rounds", "9", "--min-repeat-ms", "200", "--zoo", ""])
    assert real_models.timing_rounds([65.0, 1.0], [True, True], args) == 9  # no budget: every round
    args.time_budget = 300.0
    assert real_models.timing_rounds([65.0, 1.0], [True, True], args) == 4  # 66 s a round
    assert real_models.timing_rounds([0.01, 0.01], [False, False], args) == 9  # 0.42 s a round
    assert real_models.timing_rounds([0.05, 0.04], [False, False], args) == 9
    assert real_models.timing_rounds([200.0, 150.0], [True, True], args) == real_models.MIN_ROUNDS
    # each time_evaluator timing: an untimed run plus at least --min-repeat-ms
    assert real_models.timing_rounds([30.0], [False], args) == 5  # 60 s a round
    args.rounds = 2
    assert real_models.timing_rounds([200.0, 150.0], [True, True], args) == 2  # never more than --rounds


def _synthetic_rows():
    timed = {"median_s": 2e-3, "samples_s": [2e-3] * 3, "ratio_vs_opt3": 1.0, "wins": 0, "rounds": 3,
             "max_err_vs_opt3": 0.0}
    shared = {**timed, "max_err_vs_ort": 3e-7, "ok_vs_ort": True}
    return [
        {"model": "squeezenet1_1", "kind": "onnx", "ort": {"median_s": 1.5e-3},
         "variants": {
             "opt3": {**shared, "opt_time": 0.0, "build_time": 4.0, "same_as": None, "changed": False},
             "default": {**shared, "opt_time": 12.5, "build_time": 4.0, "same_as": "opt3", "changed": False,
                         "predicted_speedup": 1.0, "reason": "no gain above min_gain", "rules_fired": {},
                         "calibration": {"measured": 3, "reused": 0, "seconds": 1.25, "error": ""}},
             "trust_model": {**shared, "median_s": 2.2e-3, "ratio_vs_opt3": 1.1, "wins": 1, "opt_time": 3.0,
                             "build_time": 5.0, "same_as": None, "changed": True, "predicted_speedup": 1.2,
                             "max_err_vs_ort": 2e-3, "ok_vs_ort": False, "options_missing": ["min_gain"]},
             "check_runtime": {"error": "pass failed: RuntimeError: boom"}}},
        {"model": "bert", "kind": "onnx", "error": "RuntimeError: export_onnx.py export failed: no torch"},
        {"model": "zoo:nasnet_a", "kind": "zoo", "small": True,  # no onnxruntime: no error vs ORT
         "variants": {"opt3": {**timed, "opt_time": 0.0, "build_time": 1.0, "same_as": None, "changed": False}}},
    ]


def test_table_rows_from_a_synthetic_result():
    rows = real_models.table_rows(_synthetic_rows())
    assert all(len(r) == len(real_models.HEADERS) for r in rows)
    by = {(r[0], r[1]): r for r in rows}
    opt3 = by[("squeezenet1_1", "opt3")]
    assert opt3[6] == "2" and opt3[8] == "-" and opt3[10] == pytest.approx(1.5)  # ORT ms on the opt3 line
    default = by[("squeezenet1_1", "default")]
    assert default[5] == "= opt3" and default[6] == "2 (= opt3)" and default[10] is None
    trust = by[("squeezenet1_1", "trust_model")]
    assert trust[2] is True and trust[7] == 1.1 and trust[8] == "1/3" and trust[9] == 2e-3
    assert by[("squeezenet1_1", "check_runtime")][2].startswith("failed: pass failed")
    assert by[("bert", "-")][2].startswith("failed: RuntimeError")
    assert by[("zoo:nasnet_a (small)", "opt3")][9] is None and by[("zoo:nasnet_a (small)", "opt3")][10] is None
    text = tables.print_table(real_models.HEADERS, rows)
    assert "= opt3" in text and "zoo:nasnet_a (small)" in text


def test_notes_name_reasons_calibration_missing_options_and_mismatches():
    lines = real_models.notes(_synthetic_rows())
    assert "squeezenet1_1 default: no gain above min_gain" in lines
    assert "squeezenet1_1 default: calibration: measured 3, seconds 1.25" in lines
    assert any("trust_model: EqSatPass has no option(s) min_gain" in ln for ln in lines)
    assert any("trust_model: outputs differ from onnxruntime's" in ln for ln in lines)
    assert not any("opt3: outputs differ" in ln for ln in lines)


def test_json_and_plot_from_a_synthetic_result(tmp_path):
    rows = _synthetic_rows()
    out = tables.write_json(tmp_path / "real_models.json", {"rows": rows})
    back = json.loads(out.read_text())["rows"]
    assert back[0]["variants"]["default"]["same_as"] == "opt3" and back[1]["error"].startswith("RuntimeError")
    png = real_models.plot_ratios(rows, tmp_path / "real_models.png")
    assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert real_models.plot_ratios([rows[1]], tmp_path / "none.png") is None  # nothing measured


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_setaffinity") or (__import__("os").cpu_count() or 1) < 2,
                    reason="needs CPU affinity and two CPUs")
def test_onnxruntime_runs_on_every_cpu_after_tvm_pinned_the_bench(tmp_path, monkeypatch):
    """TVM's runtime pins the main thread to CPU 0 once its thread pool starts, and a child
    inherits that: the export venv's helper (onnxruntime's reference) gets every CPU back."""
    import os

    export_venv = pytest.importorskip("export_venv")
    script = tmp_path / "affinity.py"
    script.write_text("import os, sys\nprint(sorted(os.sched_getaffinity(0)))\n")
    monkeypatch.setattr(export_venv, "EXPORT_SCRIPT", script)
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(before)})  # as TVM leaves the bench's process
    try:
        out = export_venv._run_helper(Path(sys.executable), "versions")
    finally:
        os.sched_setaffinity(0, before)
    assert json.loads(out) == sorted(before) and len(before) >= 2
