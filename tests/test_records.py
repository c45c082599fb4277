"""Tuning records (passes/runtime/records.py): AutoTVM and auto-scheduler logs read and told apart,
a corrupt log a clear error that loses nothing, and the runtime check building both programs
under the user's records, as tvmc compile --tuning-records will."""
from __future__ import annotations

import json
import time

import numpy as np
import pytest
import tvm
from tvm import relay

from relay_eqsat import EqSatPass
from relay_eqsat.cli import main as cli_main
from relay_eqsat.cost import CostCache, CostModel
from relay_eqsat.cost.cache import tuned_device
from relay_eqsat.cost.calibrate import CALIBRATION_CONFIG, Calibrator
from relay_eqsat.cost.instance import instances_from_graph
from relay_eqsat.cost.pool import MeasurePool
from relay_eqsat.passes.relay import eqsat_pass
from relay_eqsat.passes.runtime import decision
from relay_eqsat.passes.runtime.build import build, run
from relay_eqsat.passes.relay.frontend import from_relay
from relay_eqsat.passes.runtime.records import Hits, RecordsError, load_records
from relay_eqsat.passes.runtime.target import host_target


def dense_relu():
    x = relay.var("x", shape=(4, 64))
    w = relay.const(np.random.default_rng(0).standard_normal((48, 64)).astype("float32"))
    return relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], relay.nn.relu(relay.nn.dense(x, w)))))


def kernels(lib) -> list[str]:
    return [n["attrs"]["func_name"] for n in json.loads(lib.get_graph_json())["nodes"] if n["op"] == "tvm_op"]


def write_autotvm_log(path):
    """``path``: an AutoTVM log for dense_relu's ``dense_nopack.x86`` task only: built under it, the
    dense runs unpacked, where TVM's untuned default packs its weight (``contrib_dense_pack``)."""
    from tvm import autotvm
    from tvm.autotvm.measure import MeasureInput, MeasureResult

    tasks = autotvm.task.extract_from_program(dense_relu()["main"], target=host_target(), params={})
    task = next(t for t in tasks if t.name == "dense_nopack.x86")
    cfg = task.config_space.get(len(task.config_space) // 2)
    path.write_text(autotvm.record.encode(MeasureInput(task.target, task, cfg),
                                          MeasureResult((1e-5,), 0, 0.1, time.time())) + "\n")
    return path


@pytest.fixture
def autotvm_log(tmp_path):
    """:func:`write_autotvm_log`'s log."""
    return write_autotvm_log(tmp_path / "dense.autotvm.log")


@pytest.fixture
def auto_scheduler_log(tmp_path):
    from tvm import auto_scheduler

    tasks, _ = auto_scheduler.extract_tasks(dense_relu()["main"], {}, host_target())
    inputs = [auto_scheduler.MeasureInput(t, t.compute_dag.get_init_state()) for t in tasks]
    results = [auto_scheduler.MeasureResult([1e-4], 0, "", 0.1, time.time()) for _ in tasks]
    path = tmp_path / "dense.ansor.json"
    auto_scheduler.save_records(str(path), inputs, results)
    return path


def test_both_kinds_of_log_are_read_and_told_apart(autotvm_log, auto_scheduler_log):
    a, s = load_records(autotvm_log), load_records(auto_scheduler_log)
    assert (a.kind, a.count) == ("autotvm", 1) and s.kind == "auto_scheduler" and s.count >= 1
    assert a.digest != s.digest and "1 autotvm records" in a.describe()
    lib = build(dense_relu(), records=a)
    assert kernels(build(dense_relu())) == ["tvmgen_default_fused_nn_contrib_dense_pack_nn_relu"]
    assert kernels(lib) == ["tvmgen_default_fused_nn_dense_nn_relu"]  # the record's schedule, not the default
    x = {"x": np.random.default_rng(1).standard_normal((4, 64)).astype("float32")}
    np.testing.assert_allclose(run(lib, x)[0], run(build(dense_relu()), x)[0], rtol=1e-5, atol=1e-5)


def test_a_build_counts_the_kernels_the_records_had(autotvm_log):
    hits = Hits()
    build(dense_relu(), records=load_records(autotvm_log), hits=hits)
    # TVM weighs the dense's implementations (the relu is fused into it): the log has the unpacked one's
    assert len(hits.asked) > 1 and len(hits.found) == 1 and "dense_nopack.x86" in next(iter(hits.found))[1]
    hits = Hits()
    build(dense_relu(), hits=hits)
    assert not hits.asked and not hits.found


def test_kernels_are_measured_under_the_records_and_kept_beside_their_untuned_times(tmp_path, autotvm_log):
    """Calibration under a log builds each kernel under it: the dense (which the log has) gets a row
    of its own under the records, the relu (which it has not) the same time under both keys; a
    cost model with the records prices from them and counts only them measured, one without them
    keeps the untuned rows, and a second calibration under the records measures nothing."""
    records = load_records(autotvm_log)
    graph = from_relay(dense_relu())
    unfused = {i.op: i for i in instances_from_graph(graph)}
    dense, relu = unfused["nn.dense"], unfused["nn.relu"]
    db = CostCache(tmp_path / "costs.sqlite")
    target = str(host_target())
    with MeasurePool(target, "tvm-llvm", CALIBRATION_CONFIG, db, jobs=1, records=records) as pool:
        results = {r.instance.op: r for r in pool.measure_many([dense, relu], progress=False)}
    assert results["nn.dense"].ok and results["nn.dense"].tuned is True
    assert results["nn.relu"].ok and results["nn.relu"].tuned is False
    key = tuned_device("", records.digest)
    assert key != "" and db.get(dense, target, device=key) is not None and db.get(dense, target) is None
    assert db.get(relu, target, device=key).seconds == db.get(relu, target).seconds

    tuned = CostModel("auto", target, cache=db, learned=False, records=records)
    plain = CostModel("auto", target, cache=db, learned=False)
    assert tuned.is_measured(dense) and tuned.is_measured(relu)
    assert not plain.is_measured(dense) and plain.is_measured(relu)
    assert tuned.kernel_cost(dense.op, dense.attrs, dense.input_types, dense.out_type) == pytest.approx(
        db.get(dense, target, device=key).seconds)

    # a cost model under other records: the untuned relu's row does not count as measured under them
    other = CostModel("auto", target, cache=db, learned=False,
                      records=type(records)(records.path, records.kind, records.count, "0" * 64))
    assert not other.is_measured(relu)
    cal = Calibrator(tuned, 60.0, progress=False)
    assert cal.measure([graph]) == 0 and cal.close().reused >= 2


@pytest.mark.parametrize("text, says", [
    ("", "no tuning records"),
    ('{"input": ["llvm", "dense_nopack.x86"\n', "line 1: not JSON"),
    ('{"hello": 1}\n', "line 1: not an AutoTVM or auto-scheduler"),
])
def test_a_corrupt_log_is_a_clear_error(tmp_path, text, says):
    path = tmp_path / "bad.log"
    path.write_text(text)
    with pytest.raises(RecordsError, match=says):
        load_records(path)
    with pytest.raises(RecordsError, match="cannot read"):
        load_records(tmp_path / "missing.log")


def test_a_log_mixing_both_kinds_is_refused(tmp_path, autotvm_log, auto_scheduler_log):
    path = tmp_path / "mixed.log"
    path.write_text(autotvm_log.read_text() + auto_scheduler_log.read_text())
    with pytest.raises(RecordsError, match="mixed"):
        load_records(path)


def test_the_runtime_check_builds_both_programs_under_the_records(monkeypatch, tmp_path, autotvm_log):
    """Both programs are built (in the check's build processes) under the user's log, the report
    says so, and the remembered verdict is keyed by the log's content."""
    monkeypatch.setenv("RELAY_EQSAT_COST_DB", str(tmp_path / "costs.sqlite"))
    monkeypatch.setattr(eqsat_pass, "optimize", lambda graph, options: (
        graph.compact(), {"changed": True, "reason": "test", "predicted_speedup": 1.5}))
    seen = []
    real = decision.build_and_run

    def spy(mod, *a, **k):  # the records each build is made under, and the kernels it made
        seen.append((k.get("records"), kernels(k["built"]()) if k.get("built") else None))
        return real(mod, *a, **k)

    monkeypatch.setattr(decision, "build_and_run", spy)
    monkeypatch.setattr(decision, "time_rounds", lambda modules, **kw: [[2e-3] * 9, [1e-3] * 9])
    p = EqSatPass(tuning_records=str(autotvm_log))
    out = p(dense_relu())
    rep = p.last_report
    assert not out.same_as(dense_relu()) and "programs built under 1 autotvm records" in rep["judged_by"]
    assert [r.digest for r, _ in seen] == [load_records(autotvm_log).digest] * 2
    assert all(names == ["tvmgen_default_fused_nn_dense_nn_relu"] for _, names in seen)
    q = EqSatPass()  # no records: another verdict, measured again (both programs built anew)
    q(dense_relu())
    assert not q.last_report.get("runtime_check_cached") and len(seen) == 4


def test_a_corrupt_log_leaves_the_module_unchanged_with_a_warning(tmp_path):
    bad = tmp_path / "bad.log"
    bad.write_text("not json\n")
    mod = dense_relu()
    with pytest.warns(UserWarning, match="line 1: not JSON"):
        assert EqSatPass(tuning_records=str(bad))(mod).same_as(mod)


def test_the_command_lines_refuse_a_corrupt_log_before_any_work(tmp_path, capsys):
    bad = tmp_path / "bad.log"
    bad.write_text('{"hello": 1}\n')
    assert cli_main(["optimize", "zoo:squeezenet", "--small", "--tuning-records", str(bad)]) == 2
    assert "line 1: not an AutoTVM or auto-scheduler tuning record" in capsys.readouterr().err
    from tests.test_tvmc import parallel_conv_model

    path, _ = parallel_conv_model(tmp_path)
    code = cli_main(["tvmc", "compile", str(path), "-o", str(tmp_path / "m.tar"), "--eqsat",
                     "--tuning-records", str(bad)])
    assert code == 2 and not (tmp_path / "m.tar").exists()
    assert "not an AutoTVM or auto-scheduler" in capsys.readouterr().err
