"""Tuning the pass's choices (passes/runtime/tuning.py, ``tune_trials``, ``relay-eqsat tune``): the
budget planned where the decision is open and fairly between the programs compared, trials timed
here and appended to the log as measured (a second run goes on where the first stopped, an
interrupted one keeps what it measured), and the log reproducing the tuned program in
``tvmc compile --tuning-records LOG --eqsat`` without tuning again, its outputs unchanged."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tvm
from tvm import autotvm, relay

from relay_eqsat import EqSatPass
from relay_eqsat.cli import main as cli_main
from relay_eqsat.passes.runtime import tuning
from relay_eqsat.passes.runtime.target import host_target
from tests.test_records import auto_scheduler_log, dense_relu  # noqa: F401 - a fixture
from tests.test_tvmc import assert_same, compile_reference, parallel_conv_model, random_inputs, \
    report_of, run_package


@dataclasses.dataclass
class FakeTask:
    name: str
    config_space: range
    args: tuple = ()
    workload: tuple = ()

    def __post_init__(self):
        self.workload = (self.name,)


def task(name, flop, programs, space=1000):
    return tuning.Task(FakeTask(name, range(space)), set(programs), flop)


def test_the_budget_goes_first_to_what_the_programs_do_not_share_and_to_each_program_in_turn():
    tasks = [task("shared-big", 1e9, {"a", "b"}),
             task("a-big", 4e8, {"a"}), task("a-small", 1e6, {"a"}),
             task("b-big", 2e8, {"b"}), task("b-mid", 1e8, {"b"}), task("b-small", 1e6, {"b"})]
    plan = tuning.plan_trials(tasks, 24, 2)
    # each program's largest unshared task, then each one's second (larger first), ...; the shared one last
    assert [t.task.name for t in plan] == ["a-big", "b-big", "b-mid", "a-small", "b-small", "shared-big"]
    # shares by work, at least 24 // 5 (the unshared tasks) each while the budget lasts
    assert [t.trials for t in plan] == [6, 4, 4, 4, 4, 2]
    plan = tuning.plan_trials(tasks, 60, 2)  # enough for MIN_TRIALS each: the largest get more
    assert [t.trials for t in plan] == [15, 8, 8, 8, 8, 13]
    big = tuning.plan_trials([task("x", 9e9, {"a"}), task("y", 1e9, {"a"}, space=3)], 100, 1)
    assert [t.trials for t in big] == [90, 3]  # shares by work, never past a task's configurations


def test_a_small_kernel_whose_untuned_tile_spills_gets_its_first_ordered_trial_from_the_most_planned(monkeypatch):
    spilling = {"spills", "spills-one-config", "spills-tiny"}
    monkeypatch.setattr(tuning, "_spills", lambda t: t.task.name in spilling)
    tasks = [task("big", 8e9, {"a"}), task("mid", 1e9, {"a"}), task("spills", 3e7, {"a"}),
             task("fits", 2e7, {"a"}), task("spills-one-config", 2e7, {"a"}, space=1), task("spills-tiny", 1e6, {"a"})]
    plan = {t.task.name: t.trials for t in tuning.plan_trials(tasks, 64, 1)}
    # by work the budget ends at "mid"; the spilling one gets TVM's fallback and the order's first
    # tile, taken from the task planned the most. Not covered: one whose tile fits, one with a single
    # configuration (its fallback is all there is), one of less than a tenth of a trial's share of work
    assert plan == {"big": 57 - tuning.COVER_TRIALS, "mid": 7, "spills": tuning.COVER_TRIALS, "fits": 0,
                    "spills-one-config": 0, "spills-tiny": 0}
    # with 16 trials a trial's share is 57 MFLOP: a 30-MFLOP kernel is not worth one
    small = {t.task.name: t.trials for t in tuning.plan_trials([dataclasses.replace(t) for t in tasks], 16, 1)}
    assert small == {"big": 15, "mid": 1, "spills": 0, "fits": 0, "spills-one-config": 0, "spills-tiny": 0}


def test_the_decision_gets_a_few_trials_on_each_kernel_that_differs_and_its_program_would_tune():
    tasks = [task("shared-big", 1e9, {"a", "b"}),
             task("a-big", 4e8, {"a"}), task("a-small", 1e6, {"a"}),
             task("b-big", 2e8, {"b"}), task("b-mid", 1e8, {"b"}), task("b-small", 1e6, {"b"})]
    alone_b = tuning.plan_trials([dataclasses.replace(t) for t in tasks if "b" in t.programs], 60, 1)
    assert [(t.task.name, t.trials) for t in alone_b] == [("shared-big", 47), ("b-big", 10), ("b-mid", 3),
                                                          ("b-small", 0)]
    plan = tuning.plan_decision(tasks, 60, 2)
    # DECIDE_TRIALS, never more than tuning the kernel's program alone gives it (b-mid 3), none to a kernel
    # that plan leaves at its fallback (the small ones: compared at their fallback), none to a shared one
    assert [(t.task.name, t.trials) for t in plan] == [("a-big", 4), ("b-big", 4), ("b-mid", 3), ("a-small", 0),
                                                      ("b-small", 0), ("shared-big", 0)]
    # a smaller budget: tuning b alone reaches b-big only (the shared kernel takes most of it)
    assert [t.trials for t in tuning.plan_decision(tasks, 24, 2)] == [4, 4, 0, 0, 0, 0]
    # at most half the budget: here one trial (the fallback) of the one kernel tuning a alone reaches
    assert [t.trials for t in tuning.plan_decision(tasks, 4, 2)] == [1, 0, 0, 0, 0, 0]
    many = [task(f"{p}{i}", 1e8, {p}) for p in "ab" for i in range(5)]
    assert [t.trials for t in tuning.plan_decision(many, 24, 2)] == [1] * 10  # half of 24 over 10: one each
    tiny = tuning.plan_decision([task("a", 1e6, {"a"}, space=2), task("b", 1e6, {"b"})], 100, 2)
    assert [t.trials for t in tiny] == [2, 4]  # never past a task's configurations


def test_the_shipped_program_gets_the_budget_but_what_deciding_spent_on_kernels_it_does_not_run(monkeypatch):
    compared = [task("shared", 1e9, {"a", "b"}), task("a-big", 1e9, {"a"}), task("a-small", 1e6, {"a"}),
                task("b-own", 1e9, {"b"})]
    shipped = [task("shared", 1e9, {"a"}), task("a-big", 1e9, {"a"}), task("a-small", 1e6, {"a"})]
    in_log = {t.key: list(range(n)) for t, n in zip(compared, (0, 4, 4, 3))}
    monkeypatch.setattr(tuning, "records_per_task", lambda path: in_log)
    alone = tuning.plan_trials([task("shared", 1e9, {"a"}), task("a-big", 1e9, {"a"}), task("a-small", 1e6, {"a"})],
                               40, 1)
    assert [(t.task.name, t.trials) for t in alone] == [("a-big", 20), ("shared", 20), ("a-small", 0)]
    plan = tuning.plan_shipped(shipped, compared, 40, "log")
    # tuning it alone's plan; b-own's 3 trials and the 4 a-small has (the plan gave it none) come off the end
    assert [(t.task.name, t.trials) for t in plan] == [("a-big", 20), ("shared", 13), ("a-small", 4)]
    assert sum(t.trials for t in plan) + 3 == 40  # the log: never more than the budget
    in_log[compared[1].key] = list(range(30))  # a task measured past its plan keeps its trials
    plan = tuning.plan_shipped(shipped, compared, 40, "log")
    assert [(t.task.name, t.trials) for t in plan] == [("a-big", 30), ("shared", 3), ("a-small", 4)]


def test_trials_are_timed_here_appended_as_measured_and_a_second_run_goes_on_where_the_first_stopped(tmp_path):
    tasks = tuning.program_tasks({"the input": dense_relu()}, host_target())
    plan = [t for t in tuning.plan_trials(tasks, 3, 1) if t.trials]
    log = tmp_path / "dense.log"
    assert tuning.tune(plan, str(log), enabled=False) == 3
    records = list(autotvm.record.load_from_file(str(log)))
    assert len(records) == 3 and all(r.error_no == 0 and 0 < r.costs[0] < 1 for _, r in records)
    # each task's first trial is TVM's untuned choice: its records are never worse than no records
    for t in plan:
        first = next(i for i, _ in records if tuning.task_key(i.task) == t.key)
        assert first.config.index == tuning.fallback_index(t.task) is not None
    assert tuning.tune(plan, str(log), enabled=False) == 0  # all there: nothing measured again
    other = tmp_path / "again.log"  # one task, one budget: the same configurations, in any run
    assert tuning.tune(plan, str(other), enabled=False) == 3
    assert ([i.config.index for i, _ in autotvm.record.load_from_file(str(other))]
            == [i.config.index for i, _ in records])
    before = plan[0].trials
    plan[0].trials += 2
    assert tuning.tune(plan, str(log), enabled=False) == 2
    assert (plan[0].done, plan[0].measured) == (before, 2)
    seen = [(tuning.task_key(i.task), i.config.index) for i, _ in autotvm.record.load_from_file(str(log))]
    assert len(seen) == len(set(seen)) == 5  # no configuration measured twice


def test_an_interrupted_run_keeps_the_trials_it_measured(tmp_path, monkeypatch):
    tasks = tuning.program_tasks({"the input": dense_relu()}, host_target())
    plan = [t for t in tuning.plan_trials(tasks, 4, 1) if t.trials]
    real = autotvm.tuner.RandomTuner.tune

    def stopped(self, n_trial, measure_option, callbacks=()):
        def ctrl_c(tuner, inputs, results):
            raise KeyboardInterrupt
        return real(self, n_trial, measure_option, callbacks=[*callbacks, ctrl_c])

    monkeypatch.setattr(autotvm.tuner.RandomTuner, "tune", stopped)
    log = tmp_path / "dense.log"
    with pytest.raises(KeyboardInterrupt):
        tuning.tune(plan, str(log), enabled=False)
    kept = list(autotvm.record.load_from_file(str(log)))
    assert 0 < len(kept) < 4 and all(r.error_no == 0 for _, r in kept)


def test_tuning_options_that_cannot_work_leave_the_module_unchanged_with_a_warning(tmp_path, auto_scheduler_log):
    mod = dense_relu()
    with pytest.warns(UserWarning, match="tune_trials needs tuning_records"):
        assert EqSatPass(tune_trials=4)(mod).same_as(mod)
    with pytest.warns(UserWarning, match="holds auto_scheduler records"):
        assert EqSatPass(tune_trials=4, tuning_records=str(auto_scheduler_log))(mod).same_as(mod)
    with pytest.warns(UserWarning, match="does not run"):
        assert EqSatPass(tune_trials=4, tuning_records=str(tmp_path / "new.log"),
                         target="llvm -mtriple=aarch64-linux-gnu")(mod).same_as(mod)
    assert cli_main(["tune", "zoo:squeezenet", "--small", "--tuning-records", str(tmp_path / "l.log")]) == 2
    assert not (tmp_path / "l.log").exists()


def call_ops(mod) -> dict[str, int]:
    counts: dict[str, int] = {}

    def visit(e):
        if isinstance(e, relay.Call) and isinstance(e.op, tvm.ir.Op):
            counts[e.op.name] = counts.get(e.op.name, 0) + 1

    relay.analysis.post_order_visit(mod["main"], visit)
    return counts


def test_tune_then_tvmc_compile_with_its_log_builds_the_tuned_program_without_tuning(tmp_path, capsys):
    """`relay-eqsat tune` tunes the input's and the candidates' kernels into one AutoTVM log and
    optimizes under it; `tvmc compile --tuning-records LOG --eqsat` then makes the same program
    (the same decision under that log), tunes nothing, and computes what the model does."""
    model, shapes = parallel_conv_model(tmp_path)
    log, saved = tmp_path / "tuned.log", tmp_path / "tuned.json"
    # the roofline costs decide (a merged candidate on every CPU: the learned model of a CPU where merging does not
    # pay, Sapphire Rapids, prices the two alike and leaves nothing to decide between), the same way in both runs
    fixed = ["--cost", "analytic", "--check-runtime", "off"]
    assert cli_main(["tune", str(model), "--tune-trials", "6", "--tuning-records", str(log), *fixed,
                     "--save-module", str(saved), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "tuning:            6 AutoTVM trials measured" in printed and "records together:  " in printed
    trials = list(autotvm.record.load_from_file(str(log)))
    assert len(trials) == 6 and sum(r.error_no == 0 for _, r in trials) >= 4
    # the input's convolutions (16 channels out) and the merged candidate's (32) both tuned to decide
    # (one trial each: half the budget over the two), the other four on the program the pass chose
    weights = [tuple(i.task.args[1][1]) for i, _ in trials]
    assert set(weights) == {(16, 8, 3, 3), (32, 8, 3, 3)}
    assert sorted(weights.count(w) for w in set(weights)) == [1, 5]
    out, rep = tmp_path / "opt.tar", tmp_path / "tvmc.json"
    assert cli_main(["tvmc", "compile", str(model), "-o", str(out), "--eqsat", "--tuning-records", str(log),
                     "--eqsat-cost", "analytic", "--eqsat-check-runtime", "off", "--eqsat-report", str(rep)]) == 0
    again = report_of(rep)
    with open(saved) as f:  # the same decision: the tuned program is the input's convolutions or a merged one
        merged = call_ops(tvm.ir.load_json(f.read()))["nn.conv2d"] == 1
    assert again["changed"] == merged and bool(again.get("rules_in_result")) == merged
    assert f"{'the result' if merged else 'the input'} shipped" in printed  # what the saved module is
    assert "tuning" not in again and len(list(autotvm.record.load_from_file(str(log)))) == 6
    inputs = random_inputs(shapes)
    assert_same(run_package(compile_reference(model, tmp_path), inputs), run_package(out, inputs))


def rival(name, flop, programs, args, space=1000):
    t = task(name, flop, programs, space)
    t.task.workload = (name, *args)
    return t


def test_one_ops_rival_implementations_share_one_task_s_trials_each_probed_first():
    # x86 dense as dense_nopack and dense_pack: one kernel ships, so one share of the budget between them
    tasks = [rival("dense_nopack.x86", 1e9, {"a"}, ("w",)), rival("dense_pack.x86", 1e9, {"a"}, ("w",)),
             rival("conv", 1e9, {"a"}, ("c",))]
    assert [[t.task.name for t in g] for g in tuning.rivals(tasks)] == [["dense_nopack.x86", "dense_pack.x86"]]
    plan = tuning.plan_trials(tasks, 40, 1)
    trials = {t.task.name: t.trials for t in plan}
    # halves by work between the two ops (not thirds); the rivals' half: RIVAL_TRIALS each, the rest on one
    assert trials["conv"] == 20
    assert sorted([trials["dense_nopack.x86"], trials["dense_pack.x86"]]) == [tuning.RIVAL_TRIALS, 20 - tuning.RIVAL_TRIALS]
    small = tuning.plan_trials(tasks, 6, 1)  # too few to probe both fully: the probes in turn
    assert sorted(t.trials for t in small if t.task.name != "conv") == [1, 2]
    tiny = tuning.plan_trials([rival("x", 1e9, {"a"}, ("w",), space=2), rival("y", 1e9, {"a"}, ("w",), space=3)], 40, 1)
    assert [t.trials for t in tiny] == [2, 3]  # never past their configurations


def test_rivals_are_tuned_together_the_rest_of_their_share_on_the_one_with_the_fastest_record(tmp_path):
    tasks = tuning.program_tasks({"the input": dense_relu()}, host_target())
    assert sorted(t.task.name for t in tasks) == ["dense_nopack.x86", "dense_pack.x86"]
    plan = tuning.plan_trials(tasks, tuning.RIVAL_TRIALS * 2 + 3, 1)
    log = tmp_path / "dense.log"
    assert tuning.tune(plan, str(log), enabled=False) == tuning.RIVAL_TRIALS * 2 + 3
    best = tuning.best_per_task(str(log))
    records = [(tuning.task_key(i.task), i.config.index) for i, _ in autotvm.record.load_from_file(str(log))]
    count = {t.key: sum(1 for k, _ in records if k == t.key) for t in tasks}
    fast = min(tasks, key=lambda t: best[t.key])
    slow = next(t for t in tasks if t is not fast)
    # each probed with its first RIVAL_TRIALS (TVM's own choice first), the three left on the faster one
    assert count == {fast.key: tuning.RIVAL_TRIALS + 3, slow.key: tuning.RIVAL_TRIALS}
    assert len(records) == len(set(records))  # no configuration measured twice
    assert [t.trials for t in plan if t is fast] == [tuning.RIVAL_TRIALS + 3]
    first_slow = [r for r in records if r[0] == slow.key]
    assert first_slow[0][1] == tuning.fallback_index(slow.task)
    # the rest went to the one whose probes were faster: judged by the first RIVAL_TRIALS of each
    timed = [(tuning.task_key(i.task), sum(r.costs) / len(r.costs)) for i, r in autotvm.record.load_from_file(str(log))]
    probe_best = {t.key: min([c for k, c in timed if k == t.key][:tuning.RIVAL_TRIALS]) for t in tasks}
    assert probe_best[fast.key] <= probe_best[slow.key]
    # resumed with the same plan: nothing measured again, the split unchanged
    again = tuning.plan_trials(tuning.program_tasks({"the input": dense_relu()}, host_target()),
                               tuning.RIVAL_TRIALS * 2 + 3, 1)
    assert tuning.tune(again, str(log), enabled=False) == 0


def test_a_kernel_run_many_times_is_planned_by_its_work_in_the_whole_program():
    # three products of one shape (a transformer's heads) and one larger product run once
    rng = np.random.default_rng(0)
    x = relay.var("x", shape=(16, 32))
    heads = [relay.nn.dense(x, relay.const(rng.standard_normal((16, 32)).astype("float32"))) for _ in range(3)]
    big = relay.nn.dense(x, relay.const(rng.standard_normal((40, 32)).astype("float32")))
    out = relay.concatenate([*heads, big], axis=1)
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], out)))
    tasks = tuning.program_tasks({"the input": mod}, host_target())
    calls = {(t.task.name, t.task.args[1][1][0]): t.calls for t in tasks}
    assert calls == {("dense_nopack.x86", 16): 3, ("dense_pack.x86", 16): 3,
                     ("dense_nopack.x86", 40): 1, ("dense_pack.x86", 40): 1}
    head = next(t for t in tasks if t.task.args[1][1][0] == 16)
    assert head.work == head.flop * 3
    # planned by work: the three heads (3 x 16 columns) before the one 40-column product
    plan = tuning.plan_trials(tasks, 100, 1)
    assert plan[0].task.args[1][1][0] == 16
    assert sum(t.trials for t in plan if t.task.args[1][1][0] == 16) > sum(
        t.trials for t in plan if t.task.args[1][1][0] == 40)


def test_calls_are_counted_on_a_program_with_a_dynamic_dimension():
    x = relay.var("x", shape=(relay.Any(), 32))
    w = relay.const(np.zeros((16, 32), "float32"))
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.nn.relu(relay.nn.dense(x, w))))
    calls = tuning._calls(mod)  # no error; the dynamic dimension counted by its name
    dense = {shapes: n for (op, shapes), n in calls.items() if op == "dense"}
    assert list(dense.values()) == [1] and next(iter(dense))[1] == (16, 32)
