"""The pass's default is safe to switch on (issue 13): on the machine it builds for it keeps a
result only if measured faster (after measuring the compared kernels when the CPU has no cost
data of its own), remembers what it measured, and when cross-compiling requires a predicted gain
beyond the cost model's calibrated error. Timers are replaced where a decision is tested: no
timing assertions."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from relay_eqsat.cost import CostModel, FusionRule
from relay_eqsat.cost.base import ANALYTIC_ERROR, FOREIGN_ERROR
from relay_eqsat.graph import TensorGraph
from relay_eqsat.pipeline import optimize_graph

tvm = pytest.importorskip("tvm")
from tvm import relay  # noqa: E402

from relay_eqsat.passes import EqSatPass
from relay_eqsat.passes.relay import eqsat_pass  # noqa: E402
from relay_eqsat.passes.relay import config  # noqa: E402
from relay_eqsat.passes.runtime import decision  # noqa: E402
from relay_eqsat.passes.runtime.build import build, run  # noqa: E402
from relay_eqsat.passes.runtime.target import host_target, runs_here  # noqa: E402
from relay_eqsat.passes.runtime.verdicts import program_from_record, program_hash, program_record  # noqa: E402

pytestmark = pytest.mark.tvm

ZNVER3 = "llvm -mtriple=x86_64-linux-gnu -mcpu=znver3"
ARM = "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72"


@pytest.fixture
def cost_db(tmp_path, monkeypatch):
    path = tmp_path / "costs.sqlite"
    monkeypatch.setenv("RELAY_EQSAT_COST_DB", str(path))
    return path


def parallel_dense_graph(n=3, units=96, width=64):
    """x -> n dense layers on constant weights -> summed: merging them is a candidate."""
    g = TensorGraph()
    x = g.var("x", (1, width))
    rng = np.random.default_rng(0)
    outs = [g.add("nn.dense", [x, g.const(rng.standard_normal((units, width)).astype("float32"))],
                  {"units": units}) for _ in range(n)]
    s = outs[0]
    for o in outs[1:]:
        s = g.add("add", [s, o])
    g.set_output(s)
    return g


def launch_heavy_model(db, target=None):
    """A cost model that finds merging worthwhile: roofline kernels, a large per-kernel launch term."""
    return CostModel("auto", target=target or host_target(), cache=str(db), learned=False,
                     fusion=FusionRule(launch=20.0))


# -- where a program can be timed -----------------------------------------------------------

def test_runs_here():
    assert runs_here(None) and runs_here(host_target())
    assert not runs_here("llvm")          # plain llvm is riscv64 in this TVM
    assert not runs_here("cuda")
    assert not runs_here(ARM)
    assert not runs_here("llvm -mtriple=x86_64-linux-gnu -mcpu=not-a-cpu")
    assert not runs_here("not a target")
    assert runs_here("llvm -mtriple=x86_64-linux-gnu -mcpu=x86-64")  # every x86-64 runs baseline code


def test_wins_needed_is_a_sign_test():
    assert decision.wins_needed(9) == 8 == decision.RUNTIME_MIN_WINS
    assert decision.wins_needed(6) == 6
    assert decision.wins_needed(5) == 6  # no count of wins in 5 rounds is significant


# -- what the decision rests on -------------------------------------------------------------

def test_calibrated_error_and_host_data(monkeypatch, cost_db):
    assert CostModel("analytic").calibrated_error() == ANALYTIC_ERROR
    own = CostModel("auto", target=ZNVER3)  # measurements and a model shipped for this CPU
    # the error stored with the shipped model: its leave-one-model-out whole-graph error (0.116 since 2026-12-06)
    assert own.has_host_data and own.calibrated_error() == pytest.approx(own.learned.meta["whole_graph_error"])
    assert 0 < own.calibrated_error() < FOREIGN_ERROR
    unseen = CostModel("auto", target="llvm -mtriple=x86_64-linux-gnu -mcpu=icelake-server")
    assert not unseen.has_host_data and unseen.calibrated_error() == FOREIGN_ERROR
    monkeypatch.setenv("RELAY_EQSAT_IGNORE_SHIPPED", "1")  # the unseen-CPU path on a CPU with data
    hidden = CostModel("auto", target=ZNVER3)
    assert not hidden.has_host_data and hidden.calibrated_error() == FOREIGN_ERROR


class _Model:
    kind, has_host_data = "auto", False

    def calibrated_error(self):
        return 0.4


def _opts(**kw):
    return {**config.DEFAULT_OPTIONS, **kw}


def test_judge_on_this_machine():
    j = decision.judge(_opts(), _Model())
    assert (j.check_runtime, j.calibrate, j.min_gain, j.fallback_gain) == (True, True, 0.0, 0.4)
    own = _Model()
    own.has_host_data = True  # shipped data covers what it was measured on, not a rewrite's new kernels
    assert decision.judge(_opts(), own).calibrate is True
    j = decision.judge(_opts(check_runtime="off", calibrate="off"), _Model())
    assert (j.check_runtime, j.calibrate, j.min_gain) == (False, False, 0.4)
    assert decision.judge(_opts(check_runtime="off", min_gain=0.05), _Model()).min_gain == 0.05


def test_judge_cross_compiling():
    j = decision.judge(_opts(target=ARM), _Model())
    assert (j.check_runtime, j.calibrate, j.min_gain) == (False, False, 0.4)
    assert "cross-compiling" in j.notes
    with pytest.warns(UserWarning, match="cross-compiling"):
        assert decision.judge(_opts(target=ARM, check_runtime="on"), _Model()).check_runtime is False


# -- the optimizer: min_gain and calibration ------------------------------------------------

def test_min_gain_keeps_the_input_inside_the_error(cost_db):
    g = parallel_dense_graph()
    opts = {"final_extractor": "greedy-ocf", "node_limit": 2000}
    out, rep = optimize_graph(g, opts, cost_model=launch_heavy_model(cost_db), min_gain=0.0)
    assert rep.changed and rep.speedup > 1.2
    predicted = rep.speedup
    out, rep = optimize_graph(g, opts, cost_model=launch_heavy_model(cost_db), min_gain=predicted - 1 + 0.05)
    assert not rep.changed
    assert "within the cost model's error" in rep.reason


def test_calibration_measures_the_compared_kernels_once(cost_db):
    from relay_eqsat.cost import CostCache

    g = parallel_dense_graph()
    opts = {"final_extractor": "greedy-ocf", "node_limit": 2000}
    out, rep = optimize_graph(g, opts, cost_model=launch_heavy_model(cost_db), calibrate=True)
    cal = rep.info["calibration"]
    assert cal["measured"] >= 2 and cal["complete"] and cal["db"] == str(cost_db)
    assert CostCache(cost_db).count(target=host_target()) == cal["measured"]
    x = {"x": np.random.default_rng(1).standard_normal((1, 64)).astype("float32")}
    np.testing.assert_allclose(out.evaluate(x)[0], g.evaluate(x)[0], rtol=1e-4, atol=1e-4)
    # a second run finds every kernel in the database and measures nothing
    out2, rep2 = optimize_graph(g, opts, cost_model=launch_heavy_model(cost_db), calibrate=True)
    cal2 = rep2.info.get("calibration", {"measured": 0, "reused": cal["measured"]})
    assert cal2["measured"] == 0
    assert rep2.cost_after == pytest.approx(rep.cost_after) and rep2.changed == rep.changed


def test_when_the_runtime_decides_calibration_measures_only_what_differs(cost_db):
    """The runtime check times the whole programs next: calibration measures the kernels the input
    and the candidate do not share (both sides of each rewrite), and leaves the shared ones as the
    model prices them; without it, every kernel of both is measured."""
    from relay_eqsat.cost.instance import instances_from_graph

    g = parallel_dense_graph()
    opts = {"final_extractor": "greedy-ocf", "node_limit": 2000}
    out, rep = optimize_graph(g, opts, cost_model=launch_heavy_model(cost_db), calibrate=True,
                              runtime_decides=True)
    cal = rep.info["calibration"]
    before = {i.key() for i in instances_from_graph(g)}
    after = {i.key() for i in instances_from_graph(out)}
    assert rep.changed and before & after and before ^ after
    assert cal["measured"] == len(before ^ after) and cal["shared"] == len(before & after) and cal["complete"]
    model = launch_heavy_model(cost_db)  # what the database holds now: the differing kernels only
    assert {i.key() for i in instances_from_graph(g) + instances_from_graph(out) if model.is_measured(i)} == before ^ after
    cal_all = optimize_graph(g, opts, cost_model=launch_heavy_model(cost_db), calibrate=True)[1].info["calibration"]
    assert cal_all["measured"] == len(before & after) and cal_all["shared"] == 0


def test_calibration_after_the_check_measures_what_the_rejected_pick_changed(cost_db):
    """``calibrate_after_check`` on a real e-graph, kernels really measured: nothing before the
    check; on the word that the pick was timed no faster, the kernels it and the input do not share
    (and those of any later round's choice), then either another program, with the input's
    numbers, or the input."""
    from relay_eqsat.cost import CostCache
    from relay_eqsat.cost.instance import instances_from_graph
    from relay_eqsat.pipeline import _same_program

    g = parallel_dense_graph()
    opts = {"final_extractor": "greedy-ocf", "node_limit": 2000}
    out, rep = optimize_graph(g, opts, cost_model=launch_heavy_model(cost_db), calibrate=True,
                              runtime_decides=True, calibrate_after_check=True)
    assert rep.changed and "calibration" not in rep.info and CostCache(cost_db).count(target=host_target()) == 0
    differ = {i.key() for i in instances_from_graph(g)} ^ {i.key() for i in instances_from_graph(out)}
    out2, rep2 = rep.recalibrate()
    cal = rep2.info["calibration"]
    assert cal["after_check"] and cal["complete"] and cal["measured"] >= len(differ) > 0
    assert CostCache(cost_db).count(target=host_target()) == cal["measured"]
    if rep2.changed:
        assert not _same_program(out2, out) and rep2.cost_after < rep2.cost_before
        x = {"x": np.random.default_rng(1).standard_normal((1, 64)).astype("float32")}
        np.testing.assert_allclose(out2.evaluate(x)[0], g.evaluate(x)[0], rtol=1e-4, atol=1e-4)
    else:
        assert out2.op_counts() == g.op_counts() and rep2.reason.endswith("input kept")


def test_calibration_stops_at_its_time_limit(cost_db):
    g = parallel_dense_graph()
    out, rep = optimize_graph(g, {"final_extractor": "greedy-ocf"}, cost_model=launch_heavy_model(cost_db),
                              calibrate=True, calibrate_time_limit=1e-9)
    cal = rep.info["calibration"]
    assert cal["measured"] == 0 and cal["unmeasured"] > 0 and not cal["complete"]
    out.validate()


# -- the pass: runtime check by default, remembered verdicts, cross-compiling --------------

def dense_net(opaque: bool = False):
    """Three dense layers on x, added; ``opaque``: on ``cumsum(x)``, an op the optimizer does not model
    (kept opaque, as transformers' exports keep isnan, where and their masks' ops)."""
    x = relay.var("x", shape=(1, 64))
    ws = [relay.const(np.random.default_rng(k).standard_normal((96, 64)).astype("float32")) for k in range(3)]
    h = relay.cumsum(x, axis=1) if opaque else x
    ys = [relay.nn.dense(h, w) for w in ws]
    return relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], ys[0] + ys[1] + ys[2])))


def _copy_optimizer(graph, options):
    return graph.compact(), {"changed": True, "reason": "test", "predicted_speedup": 1.01}


def _commuting_optimizer(graph, options):
    """A program of its own: every add's operands swapped (the same numbers)."""
    g, ids = TensorGraph(), {}
    g.constants, g.opaque = dict(graph.constants), dict(graph.opaque)
    for i, n in enumerate(graph.nodes):
        ins = [ids[j] for j in n.inputs]
        ids[i] = g.add(n.op, ins[::-1] if n.op == "add" else ins, n.attrs)
    g.set_output(ids[graph.output])
    return g, {"changed": True, "reason": "test", "predicted_speedup": 2.0, "cost_before": 2e-3, "cost_after": 1e-3}


@pytest.fixture
def builds(monkeypatch):
    """The builds the pass makes (a list that grows by one per build); its optimizer claims a change."""
    made = []
    real_build = decision.build_and_run
    monkeypatch.setattr(decision, "build_and_run", lambda *a, **k: made.append(1) or real_build(*a, **k))
    monkeypatch.setattr(eqsat_pass, "optimize", _copy_optimizer)
    return made


def test_default_measures_and_remembers_a_rejection(monkeypatch, cost_db, builds):
    monkeypatch.setattr(decision, "time_rounds", lambda modules, **kw: [[1e-3] * 9, [2e-3] * 9])
    mod = dense_net()
    p = EqSatPass()
    assert p(mod).same_as(mod)
    assert "runtime measured" in p.last_report["judged_by"] and len(builds) == 2
    assert "measured no faster" in p.last_report["reason"]

    def no_search(graph, options):
        raise AssertionError("searched again")

    monkeypatch.setattr(eqsat_pass, "optimize", no_search)
    q = EqSatPass()
    assert q(mod).same_as(mod) and len(builds) == 2  # nothing searched, built or timed
    assert q.last_report["runtime_check_cached"] and "remembered" in q.last_report["reason"]


def test_a_verdict_is_not_reused_at_another_thread_count(monkeypatch, cost_db, builds):
    """A rejection or a win measured with one runtime thread count is measured again under
    another: a program faster on one thread need not be on eight."""
    from relay_eqsat.passes.runtime import verdicts

    mod = dense_net()
    monkeypatch.setattr(verdicts, "runtime_threads", lambda: "1")
    monkeypatch.setattr(decision, "time_rounds", lambda modules, **kw: [[1e-3] * 9, [2e-3] * 9])
    assert EqSatPass()(mod).same_as(mod) and len(builds) == 2
    monkeypatch.setattr(verdicts, "runtime_threads", lambda: "8")
    monkeypatch.setattr(decision, "time_rounds", lambda modules, **kw: [[2e-3] * 9, [1e-3] * 9])
    p = EqSatPass()
    out = p(mod)
    assert len(builds) == 4 and not p.last_report.get("runtime_check_cached")  # searched, built, timed again
    assert not out.same_as(mod) and "measured no faster" not in p.last_report["reason"]
    x = {"x": np.random.default_rng(4).standard_normal((1, 64)).astype("float32")}
    np.testing.assert_allclose(run(build(out), x)[0], run(build(mod), x)[0], rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(verdicts, "runtime_threads", lambda: "1")  # back on one thread: its own verdict
    q = EqSatPass()
    assert q(mod).same_as(mod) and len(builds) == 4 and q.last_report["runtime_check_cached"]


def test_a_verdict_is_not_reused_after_the_rules_change(monkeypatch, cost_db, builds, tmp_path):
    """A verdict is keyed by the rule file's text, not the rules option's name: after an upgrade
    that adds a rule (or an edit of the user's file) the model is searched again (the programs'
    own verdict still answers when the search returns the program already timed); with the text
    back as it was, the first verdict answers without a search."""
    import shutil

    from relay_eqsat.rewrite import rules_root

    rules = tmp_path / "mine.rules"
    shutil.copyfile(str(rules_root().joinpath("taso-extra.rules")), rules)
    searched = []
    monkeypatch.setattr(eqsat_pass, "optimize", lambda g, o: searched.append(1) or _copy_optimizer(g, o))
    monkeypatch.setattr(decision, "time_rounds", lambda modules, **kw: [[1e-3] * 9, [2e-3] * 9])
    mod = dense_net()
    assert EqSatPass(rules=str(rules))(mod).same_as(mod) and len(builds) == 2 and len(searched) == 1
    q = EqSatPass(rules=str(rules))
    assert q(mod).same_as(mod) and q.last_report["runtime_check_cached"] and len(searched) == 1
    original = rules.read_text()
    rules.write_text(original + "\n# edited: one comment more\n")
    assert EqSatPass(rules=str(rules))(mod).same_as(mod) and len(searched) == 2  # searched again
    assert len(builds) == 2  # the same candidate: its measured verdict against the input answers
    rules.write_text(original)
    r = EqSatPass(rules=str(rules))
    assert r(mod).same_as(mod) and r.last_report["runtime_check_cached"] and len(searched) == 2


def test_content_fingerprint_follows_the_files_the_options_name(tmp_path):
    from relay_eqsat.cost import make_cost_model
    from relay_eqsat.passes.runtime.verdicts import content_fingerprint
    from relay_eqsat.rewrite import rules_root

    cm = make_cost_model("auto", "llvm -mtriple=x86_64-linux-gnu -mcpu=znver4", db=str(tmp_path / "c.sqlite"))
    shipped = content_fingerprint("default", cm)
    assert shipped == content_fingerprint("default.rules", cm) != content_fingerprint("taso-extra", cm)
    mine = tmp_path / "mine.rules"
    mine.write_text(rules_root().joinpath("default.rules").read_text())
    assert content_fingerprint(str(mine), cm) == shipped  # the same text: the same verdicts
    other = make_cost_model("auto", "llvm -mtriple=x86_64-linux-gnu -mcpu=sapphirerapids",
                            db=str(tmp_path / "c.sqlite"))
    assert content_fingerprint("default", other) != shipped  # another CPU's model and table
    assert content_fingerprint([], cm) == "" and content_fingerprint("default", object()) == ""
    mine.unlink()  # a rule file gone since the pass was made: a key of its own, no error
    assert content_fingerprint(str(mine), cm) not in ("", shipped)
    with pytest.raises(ValueError, match="no shipped rule set"):
        content_fingerprint("nosuchset", cm)


def test_runtime_threads_names_the_runtime_setting():
    from relay_eqsat.passes.runtime.verdicts import runtime_threads

    assert runtime_threads() == str(int(tvm.get_global_func("runtime.NumThreads")()))


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or (os.cpu_count() or 1) < 2,
                    reason="needs CPU affinity and two CPUs")
def test_asking_the_thread_count_leaves_the_callers_cpus():
    """Asking TVM's runtime for its thread count starts its thread pool, which pins the calling
    thread to CPU 0; what the pass's process starts later (onnxruntime, torch) would inherit it.
    A fresh process (TVM's pool not started, threads bound as by default) keeps its CPUs."""
    code = ("import os\nfrom relay_eqsat.passes.runtime.build import thread_count\n"
            "before = os.sched_getaffinity(0)\nn = thread_count()\n"
            "print(n >= 1, os.sched_getaffinity(0) == before, len(before))")
    env = {k: v for k, v in os.environ.items() if k != "TVM_BIND_THREADS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-3:] == ["True", "True", str(len(os.sched_getaffinity(0)))]


def test_default_remembers_a_measured_win(monkeypatch, cost_db, builds):
    monkeypatch.setattr(decision, "time_rounds", lambda modules, **kw: [[2e-3] * 9, [1e-3] * 9])
    mod = dense_net()
    out = EqSatPass()(mod)
    assert not out.same_as(mod) and len(builds) == 2
    q = EqSatPass()
    out2 = q(mod)
    assert not out2.same_as(mod) and len(builds) == 2 and q.last_report["runtime_check_cached"]
    x = {"x": np.random.default_rng(2).standard_normal((1, 64)).astype("float32")}
    np.testing.assert_allclose(run(build(out2), x)[0], run(build(mod), x)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("opaque", [False, True])
def test_a_remembered_win_is_returned_without_searching_again(monkeypatch, cost_db, builds, opaque):
    """The next run returns the program measured faster, rebuilt from the database on the input's
    constants (and opaque ops, by key): no search (whose costs the first run's kernel measurements
    have changed since), no build, the same numbers."""
    monkeypatch.setattr(decision, "time_rounds", lambda modules, **kw: [[2e-3] * 9, [1e-3] * 9])
    monkeypatch.setattr(eqsat_pass, "optimize", _commuting_optimizer)
    mod = dense_net(opaque)
    out = EqSatPass()(mod)
    assert not out.same_as(mod) and len(builds) == 2
    searched = []
    monkeypatch.setattr(eqsat_pass, "optimize", lambda g, o: searched.append(1) or _commuting_optimizer(g, o))
    q = EqSatPass()
    out2 = q(mod)
    assert not searched and len(builds) == 2
    rep = q.last_report
    assert rep["changed"] and rep["runtime_check_cached"] and "remembered from an earlier run" in rep["reason"]
    assert rep["cost_after"] < rep["cost_before"]  # the first run's figures come with it
    assert program_hash(out2) == program_hash(out) != program_hash(mod)  # the program kept, rebuilt
    x = {"x": np.random.default_rng(3).standard_normal((1, 64)).astype("float32")}
    np.testing.assert_allclose(run(build(out2), x)[0], run(build(mod), x)[0], rtol=1e-5, atol=1e-5)
    EqSatPass(seed=7)(mod)  # other options: another key, a search
    assert searched == [1]


def test_program_records_round_trip_and_refuse_what_does_not_fit():
    from relay_eqsat.passes.relay.frontend import from_relay

    g = from_relay(relay.transform.InferType()(dense_net()))
    rec = json.loads(json.dumps(program_record(g)))  # JSON-able
    back = program_from_record(rec, g)
    assert [(n.op, n.inputs, n.attrs, n.type) for n in back.nodes] == [(n.op, n.inputs, n.attrs, n.type)
                                                                        for n in g.nodes]
    assert back.output == g.output and all(back.constants[k] is v for k, v in g.constants.items())
    other = from_relay(relay.transform.InferType()(dense_net()))
    name = next(iter(g.constants))
    other.constants[name] = np.zeros((3, 3), "float32")  # same name, another type
    assert program_from_record(rec, other) is None
    other.constants.pop(name)
    assert program_from_record(rec, other) is None
    assert program_from_record({"nodes": [["nn.relu", [5], "{}"]], "output": 0}, g) is None


def test_program_records_keep_opaque_nodes_by_key_and_refuse_another_input():
    from relay_eqsat.graph import Attrs, Node
    from relay_eqsat.passes.relay.frontend import from_relay

    g = from_relay(relay.transform.InferType()(dense_net(opaque=True)))
    (key, attrs), = [(n.attrs["key"], n.attrs) for n in g.nodes if n.op == "opaque"]
    rec = json.loads(json.dumps(program_record(g)))
    back = program_from_record(rec, g)
    assert [(n.op, n.inputs, n.attrs, n.type) for n in back.nodes] == [(n.op, n.inputs, n.attrs, n.type)
                                                                        for n in g.nodes]
    assert back.opaque[key] is g.opaque[key]
    assert program_from_record(rec, from_relay(relay.transform.InferType()(dense_net()))) is None  # no such op
    other = from_relay(relay.transform.InferType()(dense_net(opaque=True)))
    node = next(i for i, n in enumerate(other.nodes) if n.op == "opaque")
    n = other.nodes[node]
    other.nodes[node] = Node(n.op, n.inputs, Attrs(dict(attrs, name="other")), n.type)
    assert program_from_record(rec, other) is None  # the key names another op there


def test_a_round_too_slow_to_time_falls_back_to_the_predicted_gain(monkeypatch, cost_db):
    monkeypatch.setattr(eqsat_pass, "optimize", _copy_optimizer)
    monkeypatch.setattr(decision, "one_run_seconds", lambda m, first_run_s, budget, min_rounds: 100.0)
    monkeypatch.setattr(decision, "time_rounds", lambda *a, **k: pytest.fail("timed anyway"))
    mod = dense_net()
    p = EqSatPass()
    assert p(mod).same_as(mod)
    assert "do not fit in check_time_limit" in p.last_report["reason"]


def test_a_slow_input_is_timed_by_the_wall_clock_within_the_limit(monkeypatch, cost_db):
    """A program of WALL_CLOCK_S or more a run is timed by the wall clock (TVM's time_evaluator
    would run it once untimed before every timing, doubling what the check takes), and the rounds
    that fit check_time_limit are counted so: one run of it a round."""
    monkeypatch.setattr(eqsat_pass, "optimize", _copy_optimizer)
    seconds = iter([6.0, 1e-3])  # the input's one run, then the candidate's
    monkeypatch.setattr(decision, "one_run_seconds", lambda m, first_run_s, budget, min_rounds: next(seconds))
    asked = []

    def rounds(modules, **kw):
        asked.append(kw)
        return [[6.0] * kw["repeat"], [1e-3] * kw["repeat"]]
    monkeypatch.setattr(decision, "time_rounds", rounds)
    p = EqSatPass(check_time_limit=40.0)
    p(dense_net())
    (kw,) = asked
    assert kw["wall"] == [True, False]
    assert kw["repeat"] == 6  # 40 s // (6 s + the candidate's 50-ms timing and its untimed run)
    assert p.last_report["runtime_wins"] == "6/6"


def test_a_first_run_of_a_second_or_more_is_taken_for_the_run_time():
    class Unrunnable:
        @property
        def module(self):
            raise AssertionError("ran again")
    assert decision.one_run_seconds(Unrunnable(), 10.9, 120.0, decision.RUNTIME_MIN_ROUNDS) == 10.9
    assert decision.one_run_seconds(Unrunnable(), 50.0, 120.0, decision.RUNTIME_MIN_ROUNDS) == 50.0


def test_creating_the_executor_counts_as_building(monkeypatch):
    """This TVM's LLVM module turns into machine code when the executor first looks up its
    kernels (11 s of DenseNet-121 on a Zen 1, whose runs take 0.3 s): build_and_run counts that
    as building, so the first run it reports (the runtime check reads it) is the program's own."""
    from types import SimpleNamespace

    from relay_eqsat.passes.runtime import build as runtime

    clock = [0.0]

    def after(seconds, value):
        clock[0] += seconds
        return value
    monkeypatch.setattr(runtime, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    monkeypatch.setattr(runtime, "build", lambda *a, **k: after(40.0, "lib"))
    monkeypatch.setattr(runtime, "executor", lambda lib: after(12.0, "module"))
    monkeypatch.setattr(runtime, "run", lambda m, inputs: after(0.5, ["out"]))
    assert runtime.build_and_run("mod", {}) == ("module", ["out"], 52.0, 0.5)


def test_cross_compiling_builds_nothing_and_needs_the_calibrated_gain(monkeypatch, cost_db):
    monkeypatch.setattr(decision, "build_and_run", lambda *a, **k: pytest.fail("built for another machine"))
    mod = dense_net()
    p = EqSatPass(target=ARM, final_extractor="greedy-ocf")
    out = p(mod)
    rep = p.last_report
    assert "cross-compiling" in rep["judged_by"]
    assert rep["info"]["min_gain"] == pytest.approx(FOREIGN_ERROR)
    if not out.same_as(mod):  # kept only beyond the error
        assert rep["predicted_speedup"] >= 1 + FOREIGN_ERROR


def test_measurement_can_be_turned_off(monkeypatch, cost_db):
    monkeypatch.setattr(decision, "build_and_run", lambda *a, **k: pytest.fail("measured"))
    p = EqSatPass(check_runtime="off", calibrate="off", min_gain=0.0, final_extractor="greedy-ocf")
    p(dense_net())
    assert "runtime not measured" in p.last_report["judged_by"]
    assert "calibration" not in p.last_report["info"]


# -- rules gated per device kind ------------------------------------------------------------

def test_avoid_clause_gates_a_rule_per_device():
    from relay_eqsat.rewrite import RuleSyntaxError, device_kind, parse_rules, rules_for_target

    text = """
    rule relu-relu
      lhs (nn.relu (nn.relu ?x))
      rhs (nn.relu ?x)
      avoid gpu   # a made-up gate for the test
      example ?x [2,3]
    rule keep-me
      lhs (nn.relu (nn.relu (nn.relu ?x)))
      rhs (nn.relu ?x)
      example ?x [2,3]
    """
    rules = parse_rules(text)
    assert rules[0].avoid == ("gpu",) and rules[1].avoid == ()
    assert (device_kind("cuda -arch=sm_80"), device_kind(host_target()), device_kind("hexagon")) == ("gpu", "cpu", None)
    kept, avoided = rules_for_target(rules, "cuda")
    assert [r.name for r in kept] == ["keep-me"] and avoided == ["relu-relu"]
    assert len(rules_for_target(rules, host_target())[0]) == 2
    with pytest.raises(RuleSyntaxError, match="avoid takes device kinds"):
        parse_rules("rule r\n lhs (nn.relu ?x)\n rhs (nn.relu ?x)\n avoid tpu\n")


def _relu_chain(n):
    """relu applied n times to x: the same function for every n >= 1."""
    g = TensorGraph()
    y = g.var("x", (4,))
    for _ in range(n):
        y = g.add("nn.relu", [y])
    g.set_output(y)
    return g


def _scripted_calibration(monkeypatch, price, measured_as, **kwargs):
    """``optimize_graph`` on ``_relu_chain(1)`` with a scripted extraction and calibration: programs
    priced by their relu count (``price``: the input's at 1, the candidates' predicted), each
    round's extraction the cheapest candidate, its calibration setting its price to
    ``measured_as``."""
    from types import SimpleNamespace

    from relay_eqsat import pipeline as optimize_mod
    from relay_eqsat.extract.problem import Solution

    class Model:
        cache = None

        def graph_cost(self, g):
            return price[g.op_counts()["nn.relu"]]

        def node_cost(self, *a, **k):
            return 1.0

    class Extractor:
        name = "scripted"

        def extract_graph(self, egraph, root, node_cost, time_limit, program_cost=None):
            n = min(measured_as, key=price.get)
            return _relu_chain(n), Solution(choice={}, cost=price[n], status="scripted")

    class Calibrator:
        def __init__(self, cost_model, time_limit, progress=None, differences_only=False, while_measuring=None):
            self.rounds = 0

        def measure(self, graphs):
            self.rounds += 1
            n = graphs[1].op_counts()["nn.relu"]
            changed = price[n] != measured_as[n]
            price[n] = measured_as[n]
            return changed

        def close(self):
            return SimpleNamespace(to_dict=lambda: {"rounds": self.rounds})

    monkeypatch.setattr(optimize_mod, "get_extractor", lambda name: Extractor())
    monkeypatch.setattr(optimize_mod, "Calibrator", Calibrator)
    return optimize_graph(_relu_chain(1), {"search": "none"}, cost_model=Model(), calibrate=True, **kwargs)


def test_out_of_calibration_rounds_the_cheapest_measured_candidate_is_returned(monkeypatch):
    """Each round's extraction can pick an alternative the borrowed model has not measured and prices
    too low (bert-base on a Zen 1); when the rounds run out, the last extraction's kernels were
    measured only after it was chosen: the candidate cheapest under the measured times is returned."""
    from relay_eqsat import pipeline as optimize_mod

    monkeypatch.setattr(optimize_mod, "CALIBRATION_ROUNDS", 1)  # A, then B, then out of rounds
    # by relu count: the input, candidates A and B as predicted; A measures dearer than predicted but
    # cheaper than the input, B dearer still
    out, rep = _scripted_calibration(monkeypatch, {1: 10.0, 2: 5.0, 3: 6.0}, {2: 8.0, 3: 9.0})
    assert rep.info["calibration"]["rounds"] == 2
    assert out.op_counts()["nn.relu"] == 2 and rep.cost_after == 8.0 and rep.changed  # A, not the last (B)


def test_calibrations_other_candidates_go_to_the_runtime_check(monkeypatch):
    """Near ties between calibration's candidates flip with one kernel's measurement (SqueezeNet1.1
    on a Zen 4): when the runtime decides, the rounds' other candidates that the measured kernels
    still price below the input come with the result (each once, cheapest first); without it, or
    when nothing is cheaper, none do."""

    def run_with(runtime_decides, input_price=10.0):
        # the input; A, B, C as predicted, then as measured: A then B chosen, B measured cheapest
        return _scripted_calibration(monkeypatch, {1: input_price, 2: 5.0, 3: 6.0, 4: 9.5},
                                     {2: 8.0, 3: 7.0, 4: 9.5}, runtime_decides=runtime_decides)

    out, rep = run_with(True)
    assert out.op_counts()["nn.relu"] == 3 and rep.cost_after == 7.0 and rep.info["calibration"]["rounds"] == 3
    assert [(c.graph.op_counts()["nn.relu"], c.cost) for c in rep.alternatives] == [(2, 8.0)]
    assert rep.alternatives[0].report_fields()["cost_after"] == 8.0 and "alternatives" not in rep.to_dict()
    assert run_with(False)[1].alternatives == []
    out, rep = run_with(True, input_price=7.5)  # A measures dearer than the input: not a candidate
    assert out.op_counts()["nn.relu"] == 3 and rep.alternatives == []


def test_calibration_after_the_check_extracts_again_from_the_same_egraph(monkeypatch):
    """``calibrate_after_check``: nothing is measured before the runtime judges the cost model's pick
    (A); on the word that it was measured no faster, A's kernels are measured and the e-graph
    extracted again: another program (B) cheaper than the input under the measured kernels is
    returned for the runtime to judge, or the input when the measured kernels still choose A or
    nothing cheaper."""

    from relay_eqsat import pipeline as optimize_mod

    def run_with(measured_as):
        # the input (1 relu), A (2) and B (3) as predicted: A first
        return _scripted_calibration(monkeypatch, {1: 10.0, 2: 5.0, 3: 6.0}, measured_as,
                                     runtime_decides=True, calibrate_after_check=True)

    # the chains run one distinct kernel: what differs, as if A's and B's were kernels of their own
    monkeypatch.setattr(optimize_mod, "unmeasured_difference", lambda model, a, b: (2, 2))

    out, rep = run_with({2: 12.0, 3: 7.0})
    assert out.op_counts()["nn.relu"] == 2 and rep.changed and "calibration" not in rep.info
    assert rep.recalibrate is not None and "recalibrate" not in rep.to_dict()
    out2, rep2 = rep.recalibrate()
    assert out2.op_counts()["nn.relu"] == 3 and rep2.changed and rep2.cost_after == 7.0 and rep2.cost_before == 10.0
    assert rep2.info["calibration"]["after_check"] and rep2.info["calibration"]["rounds"] >= 2
    assert rep2.info["calibration"]["rejected_over_result"] == pytest.approx(12.0 / 7.0)
    assert rep2.total_time >= rep.total_time and rep2.recalibrate is None and rep.changed  # the first stays as it was

    out, rep = run_with({2: 4.0, 3: 7.0})  # measured, A is still the cheapest: the runtime said no
    out2, rep2 = rep.recalibrate()
    assert not rep2.changed and out2.op_counts()["nn.relu"] == 1 and "measured no faster" in rep2.reason
    out, rep = run_with({2: 11.0, 3: 12.0})  # measured, nothing is cheaper than the input
    out2, rep2 = rep.recalibrate()
    assert not rep2.changed and "no cheaper program" in rep2.reason
    # where most of the kernels that differ have measured times already, the rejection stands
    monkeypatch.setattr(optimize_mod, "unmeasured_difference", lambda model, a, b: (1, 8))
    out, rep = run_with({2: 12.0, 3: 7.0})
    assert rep.recalibrate is None and rep.info["calibration_deferred"] == {"unmeasured": 1, "differing": 8}
    monkeypatch.setattr(optimize_mod, "unmeasured_difference", lambda model, a, b: (2, 2))
    # nothing cheaper than the input: no candidate, nothing calibrated, either way
    for after_check in (False, True):
        out, rep = _scripted_calibration(monkeypatch, {1: 1.0, 2: 5.0}, {2: 5.0}, runtime_decides=True,
                                         calibrate_after_check=after_check)
        assert not rep.changed and "calibration" not in rep.info and rep.recalibrate is None
    # without the check, or with calibrate_after_check off, calibration comes first as before
    assert _scripted_calibration(monkeypatch, {1: 10.0, 2: 5.0, 3: 6.0}, {2: 12.0, 3: 7.0},
                                 calibrate_after_check=True)[1].recalibrate is None


def test_unmeasured_difference_counts_the_kernels_one_program_runs_and_the_other_not():
    from relay_eqsat.pipeline import unmeasured_difference

    class Measured:
        def __init__(self, keys):
            self.keys = keys

        def is_measured(self, inst):
            return inst.key() in self.keys

    g = TensorGraph()
    x = g.var("x", (4,))
    g.set_output(g.add("nn.relu", [x]))
    h = TensorGraph()
    y = h.var("x", (4,))
    h.set_output(h.add("sigmoid", [h.add("nn.relu", [y])]))
    from relay_eqsat.cost.instance import instances_from_graph
    sig = next(i for i in instances_from_graph(h) if i.op == "sigmoid")
    assert unmeasured_difference(Measured(set()), g, h) == (1, 1)  # the relu both run is no difference
    assert unmeasured_difference(Measured({sig.key()}), g, h) == (0, 1)
    assert unmeasured_difference(object(), g, g) == (0, 0)


def _rejected_then_recalibrated(second):
    """An optimizer whose result (the input, copied) comes with a ``recalibrate`` that returns
    ``second(graph)``: (graph', OptimizeReport)."""
    calls = []

    def optimizer(graph, options):
        g, rep = _copy_optimizer(graph, options)
        assert options["calibrate_after_check"]

        def recalibrate(while_measuring=None):
            calls.append(while_measuring)
            return second(graph)
        rep["recalibrate"] = recalibrate
        return g, rep
    return optimizer, calls


def test_the_pass_calibrates_only_when_the_model_pick_is_no_faster(monkeypatch, cost_db, builds):
    """calibrate="auto" with the runtime check: the model's pick is judged first; kept, nothing is
    calibrated; measured no faster, calibration's second extraction is judged by a second check
    (the input built once) and, faster, kept, remembered and returned by the next run; when the
    measured kernels choose nothing else, the input stays and the report says why."""
    from relay_eqsat.pipeline import OptimizeReport

    def commuted(graph):
        g, fields = _commuting_optimizer(graph, {})
        return g, OptimizeReport(changed=True, reason="cheaper program found", cost_before=2e-3, cost_after=1e-3,
                                 info={"calibration": {"measured": 3, "after_check": True}})

    optimizer, calls = _rejected_then_recalibrated(commuted)
    monkeypatch.setattr(eqsat_pass, "optimize", optimizer)
    rounds = iter([[[1e-3] * 9, [1e-3] * 9], [[2e-3] * 9, [1e-3] * 9]])  # the copy: no faster; then 2x
    monkeypatch.setattr(decision, "time_rounds", lambda modules, **kw: next(rounds))
    mod = dense_net()
    p = EqSatPass()
    out = p(mod)
    rep = p.last_report
    assert len(calls) == 1 and not out.same_as(mod) and rep["measured_speedup"] == pytest.approx(2.0)
    assert rep["first_check"]["runtime_wins"] == "0/9" and rep["info"]["calibration"]["after_check"]
    assert "only if the cost model's pick" in rep["judged_by"] and "after the cost model's pick" in rep["judged_by"]
    # three programs built, the input once (loaded for each check)
    assert [b["what"] for b in rep["check_builds"]] == ["the input", "the result", "the result"] and len(builds) == 4
    from relay_eqsat.passes.relay.backend import to_relay
    from relay_eqsat.passes.relay.frontend import from_relay
    assert program_hash(out) == program_hash(tvm.IRModule.from_expr(
        to_relay(_commuting_optimizer(from_relay(mod), {})[0])))
    x = {"x": np.random.default_rng(5).standard_normal((1, 64)).astype("float32")}
    np.testing.assert_allclose(run(build(out), x)[0], run(build(mod), x)[0], rtol=1e-5, atol=1e-5)
    q = EqSatPass()
    assert program_hash(q(mod)) == program_hash(out) and q.last_report["runtime_check_cached"] and len(calls) == 1

    def nothing_else(graph):
        return graph, OptimizeReport(changed=False, reason="the measured kernels choose the program the runtime "
                                     "measured no faster; input kept", info={"calibration": {"measured": 3}})

    optimizer, calls = _rejected_then_recalibrated(nothing_else)
    monkeypatch.setattr(eqsat_pass, "optimize", optimizer)
    monkeypatch.setattr(decision, "time_rounds", lambda modules, **kw: [[1e-3] * 9, [1e-3] * 9])
    r = EqSatPass(seed=2)
    assert r(mod).same_as(mod) and len(calls) == 1 and len(builds) == 6
    assert "measured no faster" in r.last_report["reason"]
    assert "choose the program" in r.last_report["recalibration"]["reason"]

    optimizer, calls = _rejected_then_recalibrated(commuted)
    monkeypatch.setattr(eqsat_pass, "optimize", optimizer)
    monkeypatch.setattr(decision, "time_rounds", lambda modules, **kw: [[2e-3] * 9, [1e-3] * 9])
    s = EqSatPass(seed=3)
    assert not s(mod).same_as(mod) and calls == [] and "first_check" not in s.last_report  # kept: no calibration


def test_the_runtime_check_keeps_the_fastest_of_the_candidates(monkeypatch, cost_db, builds):
    """The result and calibration's other candidates are built, checked and timed in the same rounds;
    the fastest is judged as the result would be and, kept, comes with its own report figures; the
    next run returns it without a search. With ``verify`` only the result is built and timed. The
    other is built beside the input and the result (three build slots); with two, it waits for
    none, and is not built."""
    from relay_eqsat.pipeline import Candidate
    from relay_eqsat.passes.relay.frontend import from_relay
    from relay_eqsat.passes.relay.backend import to_relay

    def two_candidates(graph, options):
        g, rep = _copy_optimizer(graph, options)
        other = _commuting_optimizer(graph, options)[0]
        rep.update(cost_before=2e-3, cost_after=1e-3, alternatives=[Candidate(other, 1.6e-3, {"add-comm": 2})])
        return g, rep

    monkeypatch.setattr(eqsat_pass, "optimize", two_candidates)
    timed = []

    def rounds(modules, **kw):  # the input, the result (1% faster: not enough), the other (2x)
        timed.append(len(modules))
        return [[2e-3] * 9, [1.98e-3] * 9, [1e-3] * 9][:len(modules)]

    monkeypatch.setattr(decision, "time_rounds", rounds)
    mod = dense_net()
    p = EqSatPass(jobs=3)
    out = p(mod)
    rep = p.last_report
    assert timed == [3] and len(builds) == 3 and not out.same_as(mod)
    assert rep["runtime_chosen"] == 1 and rep["measured_speedup"] == pytest.approx(2.0)
    assert [c["runtime_wins"] for c in rep["runtime_candidates"]] == ["9/9", "9/9"]  # 1% alone: too little
    assert rep["rules_in_result"] == {"add-comm": 2} and rep["predicted_speedup"] == pytest.approx(1.25)
    assert program_hash(out) == program_hash(tvm.IRModule.from_expr(
        to_relay(_commuting_optimizer(from_relay(mod), {})[0])))
    assert "fastest of 2 candidates" in eqsat_pass.format_summary(rep)
    x = {"x": np.random.default_rng(5).standard_normal((1, 64)).astype("float32")}
    np.testing.assert_allclose(run(build(out), x)[0], run(build(mod), x)[0], rtol=1e-5, atol=1e-5)
    q = EqSatPass(jobs=3)
    out2 = q(mod)  # remembered: the program chosen, no search, no build
    assert q.last_report["runtime_check_cached"] and len(builds) == 3 and program_hash(out2) == program_hash(out)
    EqSatPass(verify=True, jobs=3)(mod)
    assert len(builds) == 5 and timed == [3, 2]  # the input and the result only
    r = EqSatPass(jobs=2, seed=1)  # two slots, both taken by the input and the result: the other waits for none
    r(mod)
    assert len(builds) == 7 and timed == [3, 2, 2] and r.last_report["runtime_others_unbuilt"] == 1


def test_the_runtime_check_builds_in_child_processes_the_input_from_the_start(monkeypatch, cost_db, builds):
    """The input's build starts before the optimizer runs, in the background; the result's beside it;
    where programs cannot be built in a child (no C++ compiler to export them), both are built here.
    The verdict and the program are the same either way."""
    monkeypatch.setattr(decision, "time_rounds", lambda modules, **kw: [[2e-3] * 9, [1e-3] * 9])
    mod = dense_net()
    p = EqSatPass()
    out = p(mod)
    rep = p.last_report
    assert not out.same_as(mod) and rep["runtime_wins"] == "9/9" and len(builds) == 2
    (inp, res) = rep["check_builds"]
    assert inp["what"] == "the input" and inp["background"] and inp["state"] == res["state"] == "built"
    assert res["what"] == "the result" and not res["background"] and inp["started"] <= res["started"]
    assert rep["check_timing_seconds"] >= 0
    monkeypatch.setenv("CXX", "no-such-compiler-here")
    q = EqSatPass(seed=1)
    out2 = q(mod)
    assert "check_builds" not in q.last_report and q.last_report["runtime_wins"] == "9/9" and len(builds) == 4
    assert program_hash(out2) == program_hash(out)


def test_other_candidates_are_built_only_where_the_rounds_still_fit(monkeypatch, cost_db, builds):
    """Another candidate is built and timed only if the check keeps all its rounds with it (it runs
    about as long as the result): with programs of 5 s a run, 9 rounds of the input and the result
    fit in the 120-s limit, a third program's would not; with nothing timed, none is built."""
    from relay_eqsat.pipeline import Candidate

    def two_candidates(graph, options):
        g, rep = _copy_optimizer(graph, options)
        rep["alternatives"] = [Candidate(_commuting_optimizer(graph, options)[0], 1.6e-3, {"add-comm": 2})]
        return g, rep

    monkeypatch.setattr(eqsat_pass, "optimize", two_candidates)
    monkeypatch.setattr(decision, "one_run_seconds", lambda m, first_run_s, budget, min_rounds: 5.0)
    timed = []
    monkeypatch.setattr(decision, "time_rounds",
                        lambda modules, **kw: timed.append((len(modules), kw["repeat"])) or [[2e-3] * 9, [1e-3] * 9])
    p = EqSatPass(jobs=3)  # a slot for the other beside the input and the result
    p(dense_net())
    assert len(builds) == 2 and timed == [(2, 9)]
    assert p.last_report["runtime_others_untimed"] == 1 and "runtime_candidates" not in p.last_report
    monkeypatch.setattr(decision, "one_run_seconds", lambda m, first_run_s, budget, min_rounds: 100.0)
    q = EqSatPass(seed=3, jobs=3)  # a round too slow for the limit: rule 3 decides, the other is not built
    q(dense_net())
    assert len(builds) == 4 and timed == [(2, 9)] and "runtime_untimed" in q.last_report


def test_measured_kernels_choose_but_do_not_veto_when_the_runtime_decides(monkeypatch, cost_db):
    """Kernels timed alone miss launch overheads and fusion: a candidate they no longer favour is
    still handed to the runtime check (runtime_decides), and dropped without it."""
    from relay_eqsat.cost import calibrate as calibrate_mod
    from relay_eqsat.cost.instance import instances_from_graph

    g = parallel_dense_graph()
    before = {i.key() for i in instances_from_graph(g)}

    def measure_new_kernels_as_slow(self, graphs):
        graphs = list(graphs)
        slow = {i.key(): 1.0 for gr in graphs[1:] for i in instances_from_graph(gr) if i.key() not in before}
        self.report.rounds += 1
        self.report.measured += len(slow)
        self.cost_model.add_measurements(slow)
        return len(slow)

    monkeypatch.setattr(calibrate_mod.Calibrator, "measure", measure_new_kernels_as_slow)
    opts = {"final_extractor": "greedy-ocf", "node_limit": 2000}
    out, rep = optimize_graph(g, opts, cost_model=launch_heavy_model(cost_db), calibrate=True)
    assert not rep.changed and "vetoed" not in rep.info["calibration"]  # the measured kernels decided
    out2, rep2 = optimize_graph(g, opts, cost_model=launch_heavy_model(cost_db), calibrate=True,
                                runtime_decides=True)
    assert rep2.changed and rep2.info["calibration"]["vetoed"] and "runtime decides" in rep2.reason
    x = {"x": np.random.default_rng(3).standard_normal((1, 64)).astype("float32")}
    np.testing.assert_allclose(out2.evaluate(x)[0], g.evaluate(x)[0], rtol=1e-4, atol=1e-4)


# -- the output check ---------------------------------------------------------------------------
def test_output_error_is_relative_to_each_outputs_own_scale():
    """Random-weight classifiers give logits of 1e-9 (MobileNet-v3) or 1e-14 (EfficientNet-B0): each
    output is held to its own digits, as one of 10 is. 0.1% off fails at every scale, float32
    rounding passes, an all-zero output (a zero-initialized head) must stay exactly zero."""
    from relay_eqsat.passes.runtime.build import output_error

    y = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    for scale in (10.0, 1e-9, 1e-14):
        ref = [y * np.float32(scale), np.float32(3.0) * y]
        assert output_error(ref, [ref[0] * np.float32(1 + 1e-3), ref[1]])[0] == pytest.approx(1e-3, rel=0.01)
        assert output_error(ref, [ref[0] * np.float32(1 + 2 ** -22), ref[1]])[0] <= 1e-6
        assert output_error(ref, ref) == (0.0, None)
    zero = [np.zeros(10, np.float32)]
    assert output_error(zero, [np.zeros(10, np.float32)]) == (0.0, None)
    err, why = output_error(zero, [np.full(10, 1e-30, np.float32)])
    assert err == float("inf") and "all zeros before" in why


def test_the_pass_check_rejects_a_wrong_program_with_tiny_outputs():
    """compare_modules (the pass's output check) on a model whose outputs are ~1e-9: a weight 0.1%
    off is a mismatch, the same program is not."""
    x = relay.var("x", shape=(1, 64))
    w = np.random.default_rng(1).standard_normal((32, 64)).astype("float32")

    def module(weight):
        y = relay.multiply(relay.nn.dense(x, relay.const(weight)), relay.const(np.float32(1e-9)))
        return tvm.IRModule.from_expr(relay.Function([x], y))

    assert decision.compare_modules(module(w), module(w.copy()))["max_error"] == 0.0
    with pytest.raises(decision.EqSatVerificationError, match="relative"):
        decision.compare_modules(module(w), module(w * np.float32(1.001)))
