"""A tuned program's convolution records chosen together with the layout transforms between them
(relay_eqsat.passes.runtime.layouts): the log keeps one record per convolution chosen, the rest moves
to its history, trials are not measured again, and the program computes what it computed."""
from __future__ import annotations

import collections
import os
import stat

import numpy as np
import pytest
import tvm
from tvm import autotvm, relay

from relay_eqsat.passes.runtime import layouts, tuning
from relay_eqsat.passes.runtime.build import build, random_inputs, run
from relay_eqsat.passes.runtime.records import load_records
from relay_eqsat.passes.runtime.target import host_target
from tests.test_records import dense_relu


def conv_chain():
    """Two 3x3 convolutions in a chain (8 -> 16 -> 32 channels) with relus: the second reads the
    first's output, so their channel blocks meet."""
    rng = np.random.default_rng(0)
    x = relay.var("x", shape=(1, 8, 14, 14))
    w1 = relay.const(rng.standard_normal((16, 8, 3, 3)).astype("float32"))
    w2 = relay.const(rng.standard_normal((32, 16, 3, 3)).astype("float32"))
    y = relay.nn.relu(relay.nn.conv2d(x, w1, padding=(1, 1), channels=16, kernel_size=(3, 3)))
    y = relay.nn.relu(relay.nn.conv2d(y, w2, padding=(1, 1), channels=32, kernel_size=(3, 3)))
    return relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], y)))


@pytest.fixture(scope="module")
def tuned_chain(tmp_path_factory):
    """conv_chain with 6 trials on each convolution (several channel blocks each), its log."""
    mod = conv_chain()
    tasks = tuning.program_tasks({"the input": mod}, host_target())
    for t in tasks:
        t.trials = 6
    log = tmp_path_factory.mktemp("layouts") / "chain.log"
    assert tuning.tune(tasks, str(log), enabled=False) == 12
    return mod, tasks, log.read_text()


def lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_a_log_rewritten_to_a_choice_keeps_every_trial_and_builds_with_the_chosen_records(tuned_chain, tmp_path):
    mod, tasks, text = tuned_chain
    log = tmp_path / "chain.log"
    log.write_text(text)
    log.chmod(0o640)
    fastest = layouts._fastest(str(log))
    # choose, for the first convolution, a record that is not its fastest
    records = [r for _, r in layouts._lines(str(log)) if layouts._ok(r)]
    key = tuning.task_key(tasks[0].task)
    other = next(r for r in records if tuning.task_key(r[0].task) == key and r[0].config.index != fastest[key])
    moved = layouts.apply_choice(str(log), [other])
    kept, history = lines(log.read_text()), lines((tmp_path / "chain.log.trials").read_text())
    assert moved == len(history) == 5
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(log.stat().st_mode) == 0o640  # the user's file keeps its permissions
    assert stat.S_IMODE((tmp_path / "chain.log.trials").stat().st_mode) == 0o666 & ~umask  # a new file: as open()
    assert collections.Counter(kept + history) == collections.Counter(lines(text))  # nothing lost, nothing twice
    assert layouts._fastest(str(log)) == {**fastest, key: other[0].config.index}
    # tuning counts the moved records as trials measured: a resumed run measures nothing again
    (tmp_path / "as_tuned.log").write_text(text)
    assert {k: sorted(v) for k, v in tuning.records_per_task(str(log)).items()} == \
        {k: sorted(v) for k, v in tuning.records_per_task(str(tmp_path / "as_tuned.log")).items()}
    assert tuning.tune(tasks, str(log), enabled=False) == 0
    # the build looks the chosen record up, and the program computes what it computes untuned
    with autotvm.apply_history_best(str(log)) as best:
        assert best.query(tvm.target.Target(host_target()), tasks[0].task.workload).index == other[0].config.index
    inputs = random_inputs({"x": ([1, 8, 14, 14], "float32")}, seed=0)
    want = run(build(mod), inputs)[0]
    got = run(build(mod, records=load_records(str(log))), inputs)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    assert layouts.apply_choice(str(log), [other]) == 0  # chosen already: nothing moves
    # a later choice of a record the first one moved to the history brings it back
    first = next(r for r in records if tuning.task_key(r[0].task) == key and r[0].config.index == fastest[key])
    assert layouts.apply_choice(str(log), [first]) == 1
    kept, history = lines(log.read_text()), lines((tmp_path / "chain.log.trials").read_text())
    assert collections.Counter(kept + history) == collections.Counter(lines(text))
    assert layouts._fastest(str(log)) == fastest and len(kept) == len(lines(text)) - 5


def test_the_choice_is_timed_against_each_kernel_s_fastest_and_kept_only_when_faster(tuned_chain, tmp_path):
    mod, _, text = tuned_chain
    log = tmp_path / "chain.log"
    log.write_text(text)
    report = layouts.choose(mod, str(log), host_target(), rounds=3)
    assert report["convolutions"] == 2 and 0 <= report["changed"] <= 2 and report["seconds"] > 0
    assert "reason" in report and layouts.layouts_in_words(report)
    after = lines(log.read_text())
    history = tmp_path / "chain.log.trials"
    if report["kept"]:
        assert report["ratio"] <= 0.98 and report["moved"] == len(lines(history.read_text())) > 0
        assert collections.Counter(after + lines(history.read_text())) == collections.Counter(lines(text))
    else:  # not faster, or each one's fastest already: the log as tuned
        assert after == lines(text) and not history.exists()
        if report["changed"]:
            assert "ratio" in report and "wins" in report


def test_a_second_choice_on_the_same_log_is_remembered(tuned_chain, tmp_path, monkeypatch):
    """The verdict is kept beside the log: a run on the same program and log (as the first choice
    left it) returns it without choosing again; a log with other trials is chosen on again."""
    mod, _, text = tuned_chain
    log = tmp_path / "chain.log"
    log.write_text(text)
    first = layouts.choose(mod, str(log), host_target(), rounds=3)
    assert (tmp_path / "chain.log.choice").exists() and not first.get("remembered")
    after = log.read_text()

    def no_second_choice(*args, **kwargs):
        raise AssertionError("chosen again")
    monkeypatch.setattr(layouts, "joint_records", no_second_choice)
    again = layouts.choose(mod, str(log), host_target(), rounds=3)
    assert again["remembered"] and again["moved"] == 0
    assert {k: again[k] for k in ("kept", "reason", "convolutions", "changed")} == \
        {k: first[k] for k in ("kept", "reason", "convolutions", "changed")}
    assert "remembered" in layouts.layouts_in_words(again) and log.read_text() == after
    # other trials in the log (one record fewer): the verdict is not this log's
    log.write_text("\n".join(lines(after)[1:]) + "\n")
    with pytest.raises(AssertionError, match="chosen again"):
        layouts.choose(mod, str(log), host_target(), rounds=3)
    # nor another program's, and a damaged memo is no verdict
    log.write_text(after)
    assert layouts._remembered(layouts._program_key(conv_chain(), host_target()), str(log)) is not None
    assert layouts._remembered(layouts._program_key(dense_relu(), host_target()), str(log)) is None
    (tmp_path / "chain.log.choice").write_text("{not json")
    assert layouts._remembered(layouts._program_key(mod, host_target()), str(log)) is None


def test_a_program_without_convolutions_keeps_its_log(tmp_path, monkeypatch):
    mod = dense_relu()
    assert layouts._has_convolution(conv_chain()) and not layouts._has_convolution(mod)
    tasks = [t for t in tuning.plan_trials(tuning.program_tasks({"the input": mod}, host_target()), 2, 1) if t.trials]
    log = tmp_path / "dense.log"
    tuning.tune(tasks, str(log), enabled=False)
    text = log.read_text()
    report = layouts.choose(mod, str(log), host_target())
    assert report["kept"] is False and report["reason"] == "no convolution" and report["convolutions"] == 0
    assert log.read_text() == text and not (tmp_path / "dense.log.trials").exists()
    # told without extracting its tasks (BERT-base's take a minute)
    monkeypatch.setattr(tuning, "program_tasks", lambda *a, **k: pytest.fail("tasks extracted"))
    assert layouts.choose(mod, str(log), host_target())["reason"] == "no convolution"


def sliced_sum_then_conv():
    """Two convolutions of x padded to 16 output channels, each sliced back to 12 and biased (what
    conv-pad-out-channels leaves), their sum read by a third convolution: EfficientNet-B0's residual
    add between two padded convolutions, where TVM's graph tuner failed (KeyError: 'topi_op')."""
    rng = np.random.default_rng(1)
    x = relay.var("x", shape=(1, 8, 14, 14))

    def const(*shape):
        return relay.const(rng.standard_normal(shape).astype("float32"))

    def padded(w):
        y = relay.nn.conv2d(x, w, padding=(1, 1), channels=16, kernel_size=(3, 3))
        return relay.nn.bias_add(relay.strided_slice(y, begin=[0, 0], end=[1, 12]), const(12))

    y = padded(const(16, 8, 3, 3)) + padded(const(16, 8, 3, 3))
    y = relay.nn.relu(relay.nn.conv2d(y, const(16, 12, 1, 1), channels=16, kernel_size=(1, 1)))
    return relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], y)))


def test_a_sum_of_sliced_convolutions_before_a_convolution_is_chosen_as_a_boundary(tmp_path):
    mod = sliced_sum_then_conv()
    tasks = tuning.program_tasks({"the input": mod}, host_target())
    assert len(tasks) == 2  # the two padded convolutions are one task
    for t in tasks:
        t.trials = 3
    log = tmp_path / "sliced.log"
    tuning.tune(tasks, str(log), enabled=False)
    records = [r for r in tuning._log(str(log)) if layouts._ok(r)]
    # TVM's graph tuner alone keeps the dropped sum as the last convolution's ancestor
    from tvm.autotvm.graph_tuner import DPTuner

    with pytest.raises(KeyError, match="topi_op"), layouts._quiet():
        DPTuner(mod["main"], {"x": (1, 8, 14, 14)}, records, [relay.op.get("nn.conv2d")], host_target(),
                log_file=str(tmp_path / "gt.log")).benchmark_layout_transform(
                    runner=tuning.measure_option()["runner"])
    chosen, fallbacks = layouts.joint_records(mod, str(log), host_target())
    assert fallbacks == 0 and len(chosen) == 3
    # the program built under the chosen records computes what it computed untuned
    chosen_log = tmp_path / "chosen.log"
    with open(chosen_log, "w") as f:
        for inp, res in chosen:
            f.write(autotvm.record.encode(inp, res) + "\n")
    inputs = random_inputs({"x": ([1, 8, 14, 14], "float32")}, 0)
    want = run(build(mod), inputs)[0]
    got = run(build(mod, records=load_records(str(chosen_log))), inputs)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("children", [True, False])
def test_both_programs_build_under_their_own_records_in_children_or_here(tuned_chain, tmp_path, monkeypatch, children):
    """The choice and each kernel's fastest are built at once in child processes where they can be,
    else one after the other here: either way each under its own records."""
    from relay_eqsat.passes.runtime import builder
    from relay_eqsat.passes.runtime.build import executor, set_inputs

    mod, tasks, text = tuned_chain
    log = tmp_path / "chain.log"
    log.write_text(text)
    records = [r for _, r in layouts._lines(str(log)) if layouts._ok(r)]
    # the trial log: the first convolution's fastest record made another output channel block
    # (one the trials did not choose), so the program built under it has other tensor shapes
    task = tasks[0].task
    space = task.config_space
    fastest_oc = next(r for r in records if tuning.task_key(r[0].task) == tuning.task_key(task)
                      and r[0].config.index == layouts._fastest(str(log))[tuning.task_key(task)])[0].config["tile_oc"]
    index = next(i for i in range(len(space)) if space.get(i)["tile_oc"].size[-1] != fastest_oc.size[-1])
    crafted = autotvm.record.encode(autotvm.MeasureInput(records[0][0].target, task, space.get(index)),
                                    autotvm.MeasureResult((1e-9,), 0, 0.0, 0.0))
    trial = tmp_path / "trial.log"
    trial.write_text(text + crafted + "\n")
    if not children:
        monkeypatch.setattr(builder, "unavailable", lambda target, remote=False: "not here")
    built = layouts._build_all(mod, host_target(), (load_records(str(log)), load_records(str(trial))))
    assert [isinstance(b, builder.Prebuilt) for b in built] == [children, children]
    inputs = random_inputs({"x": ([1, 8, 14, 14], "float32")}, seed=0)
    want = run(build(mod), inputs)[0]
    for lib in built:
        m = executor(lib, tvm.cpu(0))
        set_inputs(m, inputs)
        m.run()
        np.testing.assert_allclose(m.get_output(0).numpy(), want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    # each under its own records: the graph each one's records give in this process
    for lib, path in zip(built, (log, trial)):
        assert lib.get_graph_json() == build(mod, records=load_records(str(path))).get_graph_json()
    assert built[0].get_graph_json() != built[1].get_graph_json()


def wide_then_narrow():
    """A 1x1 convolution 8 -> 32 channels, then 32 -> 12 at 28 x 28 (MobileNet-v2's 96 -> 24 in
    small): TVM's fallback gives the second an input block below the first one's output block
    (12 output channels: ic_bn at most 12, or 6 on AVX2, where 32 takes 16, or 8)."""
    rng = np.random.default_rng(2)
    x = relay.var("x", shape=(1, 8, 28, 28))
    w1 = relay.const(rng.standard_normal((32, 8, 1, 1)).astype("float32"))
    w2 = relay.const(rng.standard_normal((12, 32, 1, 1)).astype("float32"))
    y = relay.nn.relu(relay.nn.conv2d(x, w1, channels=32, kernel_size=(1, 1)))
    y = relay.nn.conv2d(y, w2, channels=12, kernel_size=(1, 1))
    return relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], y)))


def fallback_record(task, cost: float = 1e-4):
    index = tuning.fallback_index(task)
    return (autotvm.MeasureInput(tvm.target.Target(host_target()), task, task.config_space.get(index)),
            autotvm.MeasureResult((cost,), 0, 0.0, 0.0))


def test_an_input_block_the_fallback_ties_below_its_producers_is_raised():
    from relay_eqsat.cost.simd import output_block, simd_lanes

    lanes = simd_lanes(host_target())
    first, second = sorted(tuning.program_tasks({"p": wide_then_narrow()}, host_target()),
                           key=lambda t: t.task.args[0][1][1])  # by input channels: 8, then 32
    record = fallback_record(second.task)
    have = int(record[0].config["tile_ic"].size[-1])
    want = output_block(32, lanes)
    assert have < want  # the fallback's tie
    assert layouts.raised_input_block(record, lanes) == want
    index = layouts._with_input_block(second.task, record[0].config, want)
    raised = second.task.config_space.get(index)
    assert int(raised["tile_ic"].size[-1]) == want
    for name in second.task.config_space.space_map:  # every other knob as it was
        if name != "tile_ic":
            assert tuning._same_entity(raised[name], record[0].config[name])
    # the producer's input block is its producer's (8 channels, one block): nothing to raise
    assert layouts.raised_input_block(fallback_record(first.task), lanes) is None
    # no lanes (not x86), or a template without the knob: nothing
    assert layouts.raised_input_block(record, None) is None
    dense = tuning.program_tasks({"d": dense_relu()}, host_target())[0].task
    assert layouts.raised_input_block(fallback_record(dense), lanes) is None


def test_raised_blocks_are_measured_once_and_the_choice_times_them_and_keeps_what_computes_the_same(tmp_path):
    mod = wide_then_narrow()
    tasks = tuning.program_tasks({"p": mod}, host_target())
    for t in tasks:
        t.trials = 1  # each its fallback: the second keeps the tie
    log = tmp_path / "narrow.log"
    tuning.tune(tasks, str(log), enabled=False)
    records = [r for r in tuning._log(str(log)) if layouts._ok(r)]
    assert len(records) == 2
    raised, measured = layouts.raised_blocks(records, str(log), host_target(), tasks)
    assert measured == 1 and len(lines(log.read_text())) == 3  # the raised configuration, appended
    changed = [(a, b) for a, b in zip(records, raised) if a[0].config.index != b[0].config.index]
    assert len(changed) == 1 and layouts.raised_input_block(changed[0][1], None) is None
    again, measured = layouts.raised_blocks(records, str(log), host_target(), tasks)
    assert measured == 0 and [r[0].config.index for r in again] == [r[0].config.index for r in raised]
    # the choice: timed against the log as it is; kept or not, the program computes what it computed
    inputs = random_inputs({"x": ([1, 8, 28, 28], "float32")}, seed=0)
    want = run(build(mod), inputs)[0]
    raised_record = changed[0][1][0]
    raised_is_fastest = layouts._fastest(str(log))[tuning.task_key(raised_record.task)] == raised_record.config.index
    report = layouts.choose(mod, str(log), host_target(), rounds=3)
    assert report["convolutions"] == 2 and report["measured"] == 0 and layouts.layouts_in_words(report)
    if raised_is_fastest:  # timed faster alone too: the log builds with it already, nothing to raise
        assert report["raised"] == 0
    else:  # a candidate of its own, timed (the graph tuner's may be the one reported)
        assert "ratio" in report and report["raised"] in (0, 1)
    if report["kept"]:
        assert report["raised"] == 1 or report["changed"]
    got = run(build(mod, records=load_records(str(log))), inputs)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


def test_the_choice_s_trials_come_out_of_the_budget(tmp_path):
    mod = wide_then_narrow()
    tasks = tuning.program_tasks({"p": mod}, host_target())
    log = tmp_path / "budget.log"
    # the second convolution's fallback ties its input block: one raised configuration to measure,
    # kept out of the plan (a quarter of 8 covers it)
    plan, kept = layouts.plan_with_choice(tasks, tasks, 8, str(log), host_target())
    assert layouts.choice_trials(plan, str(log), host_target()) == (0, 1) and kept == 1
    assert sum(t.trials for t in plan) + kept == 8
    tuning.tune(plan, str(log), enabled=False)
    report = layouts.choose(mod, str(log), host_target(), rounds=3, allowance=kept)
    assert report["fallbacks"] + report["measured"] <= kept
    assert len(list(tuning._log(str(log)))) <= 8  # the log and its history: never more than the budget
    # nothing left for the choice: a convolution without a record leaves the graph tuner out (it
    # would measure the fallback) and no raised configuration is measured
    bare = tmp_path / "bare.log"
    first, second = sorted(tasks, key=lambda t: t.task.args[0][1][1])
    first.trials, second.trials = 1, 0
    tuning.tune([first, second], str(bare), enabled=False)
    assert layouts.choice_trials([first, second], str(bare), host_target()) == (1, 1)
    report = layouts.choose(mod, str(bare), host_target(), rounds=3, allowance=0)
    assert report["fallbacks"] == 0 and report["measured"] == 0 and "joint" in report
    assert len(list(tuning._log(str(bare)))) == 1
