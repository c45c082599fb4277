"""The command line behaves like its ecosystem's tools: ``--version``, ``-v`` without TVM's
compiler log, progress bars, a time budget for timing, ``--plot`` checked first, Ctrl-C (one line,
exit 130, the cost database consistent, no worker left), warnings at the user's call site and
``--rules NAME.rules`` read from the working directory first."""
from __future__ import annotations

import json
import logging
import signal
import sqlite3
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from relay_eqsat import progress
from relay_eqsat.cli import main
from relay_eqsat.interrupt import EXIT_INTERRUPTED, child_pids
from relay_eqsat.pipeline import resolve_rules

DATA = Path(__file__).parent / "data"
CLI = [sys.executable, "-m", "relay_eqsat.cli"]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _interrupt(cmd: list[str], ready, timeout: float = 240.0) -> tuple[subprocess.Popen, str]:
    """Start ``cmd``, send it SIGINT once ``ready(proc)`` holds; (process, its stderr)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    while not ready(proc):
        assert proc.poll() is None, f"ended before the interrupt: {proc.communicate()}"
        assert time.monotonic() < deadline, "never ready"
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    return proc, err


# -- --version ----------------------------------------------------------------------------

def test_version_names_both_versions_without_importing_them():
    import importlib.metadata

    code = ("import sys; from relay_eqsat.cli import main; rc = main(['--version']); "
            "print(rc, [m for m in ('tvm', 'relay_eqsat.passes', 'ortools') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    version, check = out.strip().splitlines()
    assert version.startswith(f"relay-eqsat {importlib.metadata.version('relay-eqsat')} (TVM ")
    tvm = pytest.importorskip("tvm")
    assert version.endswith(f"(TVM {tvm.__version__})")
    assert check == "0 []"


# -- the extract subcommand: progress forced on and off, -v -------------------------------

def test_extract_progress_and_log(capsys, monkeypatch):
    monkeypatch.setattr(progress, "DELAY_S", 0.0)  # show at once: the extraction takes well under a second
    args = ["extract", str(DATA / "shared_subgraph.json"), "-e", "ilp-acyc", "--time-limit", "10"]
    assert main(args + ["--progress", "-v"]) == 0
    out, err = capsys.readouterr()
    assert "extracting (ilp-acyc)" in err and "/10 s" in err
    assert "relay_eqsat.cli: read " in err  # -v: this package's log
    cost = float(out.split("cost:")[1].split()[0])
    assert main(args + ["--no-progress"]) == 0
    out2, err2 = capsys.readouterr()
    assert err2 == "" and float(out2.split("cost:")[1].split()[0]) == cost
    assert progress.set_enabled(None) is None  # main put the forced setting back
    package = logging.getLogger("relay_eqsat")
    assert package.propagate and not package.handlers  # and the logging configuration


# -- timing within a budget ------------------------------------------------------------------

def test_plan_timing_counts():
    runtime = pytest.importorskip("relay_eqsat.passes.runtime.timing")
    # a fast program: enough runs per timing to last 50 ms, the most timings
    assert runtime.plan_timing([2e-4], 20.0) == (250, 7, False)
    # BERT before optimization, 14 s a run, two programs: one run per timing, the fewest timings,
    # by the wall clock (no untimed run per timing, no warm-up round)
    assert runtime.plan_timing([14.0, 12.0], 20.0) == (1, 3, True)
    # in between: as many rounds as fit
    assert runtime.plan_timing([0.5, 0.4], 5.0) == (1, 5, True)


class _SlowProgram:
    """A stand-in for a graph executor module whose run takes ``seconds``."""

    def __init__(self, seconds: float):
        self.seconds, self.runs = seconds, 0

    def run(self):
        self.runs += 1
        time.sleep(self.seconds)


def test_time_within_a_slow_program_runs_only_the_timings():
    runtime = pytest.importorskip("relay_eqsat.passes.runtime.timing")
    slow = [_SlowProgram(0.05), _SlowProgram(0.04)]
    # the first runs (made by the caller) say 1.5 s: timing 3 rounds would take 9 s of a 2 s budget
    timing = runtime.time_within(slow, budget=2.0, first_run_s=[1.5, 1.5])
    assert (timing.number, timing.repeat, timing.wall) == (1, 3, True)
    assert [p.runs for p in slow] == [3, 3]  # no warm-up, no untimed runs
    assert timing.medians[0] == pytest.approx(0.05, abs=0.03) and timing.medians[1] == pytest.approx(0.04, abs=0.03)
    assert timing.describe().startswith("3 x 1 run of each program, interleaved")


class _EvaluatedProgram:
    """A stand-in for a graph executor module timed by TVM's time_evaluator: each timing returns
    ``seconds`` and is counted."""

    def __init__(self, seconds: float):
        self.seconds, self.timings = seconds, 0
        self.module = self

    def time_evaluator(self, name, dev, number, repeat, min_repeat_ms):
        def timing():
            self.timings += 1
            return types.SimpleNamespace(results=[self.seconds] * repeat)
        return timing


def test_time_rounds_times_a_slow_program_by_the_wall_clock_and_a_fast_one_by_the_evaluator():
    runtime = pytest.importorskip("relay_eqsat.passes.runtime.timing")
    slow, fast = _SlowProgram(0.01), _EvaluatedProgram(1e-3)
    t_slow, t_fast = runtime.time_rounds([slow, fast], repeat=4, min_repeat_ms=50, wall=[True, False])
    assert slow.runs == 4  # one run a timing: no warm-up timing, no untimed run before each
    assert fast.timings == 5  # a warm-up timing, then one a round
    assert len(t_slow) == 4 and t_fast == [1e-3] * 4
    assert runtime.time_rounds([_EvaluatedProgram(2e-3)], repeat=2) == [[2e-3, 2e-3]]  # no flags: the evaluator
    with pytest.raises(ValueError, match="2 flags for 1 modules"):
        runtime.time_rounds([slow], wall=[True, False])


# -- optimize: -v, -vvv, progress, the timing line, --plot, --rules --------------------------

@pytest.fixture
def onnx_file(tmp_path):
    pytest.importorskip("tvm")
    pytest.importorskip("onnx")
    from test_cli import onnx_model

    return onnx_model(tmp_path / "par.onnx")


QUICK = ["--final-extractor", "greedy-ocf", "--check-runtime=off", "--calibrate=off", "--min-gain=0"]


@pytest.mark.tvm
def test_optimize_verbose_progress_and_timing(onnx_file, tmp_path, capsys, monkeypatch, no_host_data):
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    report = tmp_path / "r.json"
    assert main(["optimize", str(onnx_file), *QUICK, "-v", "--progress", "--time-budget", "2", "-o", str(report)]) == 0
    out, err = capsys.readouterr()
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.strip()]
    # -v: this package's steps, not TVM's compiler (te_compiler logs a line per operator at INFO)
    assert any(line.startswith("relay_eqsat.passes.cli.optimize: loaded ") for line in lines)
    assert any(line.startswith("relay_eqsat.passes.relay.eqsat_pass: EqSatPass: changed") for line in lines)
    assert not any("te_compiler" in line for line in lines)
    # progress: saturation, builds, timing
    for step in ("saturating:", "building the original program", "building the optimized program", "timing:"):
        assert any(step in line for line in lines), step
    # the timing fits the budget, never fewer than 3 timings, and says so
    m = json.loads(report.read_text())["measured"]
    assert m["repeat"] >= 3 and m["number"] >= 1 and m["time_budget"] == 2.0
    runs = "run" if m["number"] == 1 else "runs"
    assert f"timed:             {m['repeat']} x {m['number']} {runs} of each program, interleaved" in out
    assert f"{m['speedup']:.3f}x" in out

    assert main(["optimize", str(onnx_file), *QUICK, "-vvv", "--no-progress", "--repeat", "3", "--number", "2"]) == 0
    out, err = capsys.readouterr()
    assert "te_compiler: Using" in err  # -vvv: TVM's Python log too
    assert "timed:             3 x 2 runs of each program" in out and "saturating" not in err


@pytest.mark.tvm
def test_plot_without_matplotlib_fails_before_any_work(capsys, monkeypatch):
    from relay_eqsat.passes.cli import optimize as passes_cli

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError

    def never(*args, **kwargs):
        raise AssertionError("the model was loaded before --plot was checked")

    monkeypatch.setattr(passes_cli, "load_model", never)
    assert main(["optimize", "zoo:squeezenet", "--small", "--plot", "out.png"]) == 2
    err = capsys.readouterr().err
    assert "--plot needs matplotlib" in err and "pip install matplotlib" in err


def _one_rule_file(path: Path, name: str) -> Path:
    """A rule file holding the shipped default set's rule ``name`` only."""
    text = (Path(__file__).parents[1] / "rules" / "default.rules").read_text()
    start = text.index(f"rule {name}\n")
    end = text.find("\nrule ", start + 1)
    path.write_text(text[start:end if end > 0 else None] + "\n")
    return path


def test_rules_name_resolves_in_the_working_directory_first(tmp_path, monkeypatch):
    shipped = resolve_rules("default.rules")
    assert len(shipped) > 1
    monkeypatch.chdir(tmp_path)
    _one_rule_file(tmp_path / "default.rules", "conv-merge")
    assert [r.name for r in resolve_rules("default.rules")] == ["conv-merge"]
    assert len(resolve_rules("default")) == len(shipped)  # a bare name is the shipped set


@pytest.mark.tvm
def test_optimize_rules_file_in_the_working_directory(onnx_file, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _one_rule_file(tmp_path / "default.rules", "conv-merge")
    report = tmp_path / "r.json"
    assert main(["optimize", str(onnx_file), *QUICK, "--rules", "default.rules", "--no-measure",
                 "-o", str(report)]) == 0
    fired = json.loads(report.read_text())["report"]["rules_fired"]
    assert set(fired) == {"conv-merge"} and fired["conv-merge"] > 0
    assert set(json.loads(report.read_text())["report"]["rules_in_result"]) <= {"conv-merge"}


# -- warnings at the user's call site -----------------------------------------------------------

@pytest.mark.tvm
def test_pass_warning_points_at_the_users_line():
    tvm = pytest.importorskip("tvm")
    from tvm import relay

    from relay_eqsat.passes import EqSatPass

    x = relay.var("x", shape=(2, 3))
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.nn.relu(x)))
    seq = tvm.transform.Sequential([EqSatPass(), relay.transform.InferType()])
    with pytest.warns(UserWarning, match="EqSatPass: bad option") as record:
        with tvm.transform.PassContext(opt_level=3, config={"relay.eqsat.node_limit": -5}):
            line = sys._getframe().f_lineno + 1
            seq(mod)
    (w,) = [w for w in record if "EqSatPass" in str(w.message)]
    assert (w.filename, w.lineno) == (__file__, line)


def test_warning_from_code_without_a_source_file():
    # `python -c` code: its module's loader has no source; the warning must still be shown, never raise
    done = subprocess.run([sys.executable, "-W", "always", "-c",
                           "from relay_eqsat.user_warnings import warn; warn('EqSatPass: look here')"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "<string>:1: UserWarning: EqSatPass: look here" in done.stderr, done


# -- Ctrl-C -----------------------------------------------------------------------------------

def test_extraction_leaves_ctrl_c_to_python():
    """OR-Tools CP-SAT catches SIGINT during a solve by default and leaves it at SIG_DFL afterwards:
    a later Ctrl-C would kill the process without Python's cleanup (relay_eqsat/extract/ilp.py sets
    ``catch_sigint_signal = False``). The child starts from Python's own handler: a test run started
    in the background (``make test &``) hands its children SIGINT ignored, and Python keeps it so
    (then nothing is raised: the exit 0 with nothing printed this test gave in such runs)."""
    code = ("import signal, sys, time; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "from relay_eqsat.extract import get_extractor; "
            "from relay_eqsat.extract.serialize import load_problem; "
            "s = get_extractor('ilp-acyc').extract(load_problem(sys.argv[1]), None, time_limit=10)\n"
            "assert s.optimal and s.solve_time > 0, s  # CP-SAT ran\n"
            "try:\n    signal.raise_signal(signal.SIGINT); time.sleep(5)\n"
            "except KeyboardInterrupt:\n    print('KeyboardInterrupt')")
    done = subprocess.run([sys.executable, "-c", code, str(DATA / "shared_subgraph.json")], capture_output=True,
                          text=True, timeout=120)
    assert (done.returncode, done.stdout.strip()) == (0, "KeyboardInterrupt"), done


@pytest.mark.tvm
def test_ctrl_c_during_measurement(tmp_path):
    """One line, exit 130, the measured kernels in a consistent database, the worker gone."""
    db = tmp_path / "costs.sqlite"
    workers: list[int] = []

    def rows() -> int:
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
                return conn.execute("SELECT COUNT(*) FROM costs").fetchone()[0]
        except sqlite3.Error:
            return 0

    def ready(proc) -> bool:
        workers[:] = child_pids(proc.pid)
        return bool(workers) and rows() >= 1

    proc, err = _interrupt([*CLI, "measure", "--models", "zoo:squeezenet", "--small", "--db", str(db),
                            "--no-train", "--repeat", "2", "--min-repeat-ms", "1"], ready)
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert err.strip().splitlines()[-1] == "relay-eqsat measure: interrupted" and "Traceback" not in err, err
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in workers), "the measuring worker was left behind"
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        seconds = [s for (s,) in conn.execute("SELECT seconds FROM costs")]
    assert seconds and all(s > 0 for s in seconds)


@pytest.mark.tvm
def test_ctrl_c_during_a_tvm_build():
    """A Ctrl-C while TVM compiles (native code calling Python back): one line, exit 130, at once."""
    lines: list[str] = []

    def ready(proc) -> bool:
        lines.append(proc.stderr.readline())
        return "EqSatPass:" in lines[-1]  # the pass is done; the command is building next

    start = time.monotonic()
    proc, err = _interrupt([*CLI, "optimize", "zoo:squeezenet", "--small", "-v", "--calibrate=off",
                            "--check-runtime=off", "--final-extractor", "greedy-ocf"], ready)
    err = "".join(lines) + err
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert err.strip().splitlines()[-1] == "relay-eqsat optimize: interrupted" and "Traceback" not in err, err
    assert time.monotonic() - start < 120
