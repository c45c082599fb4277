"""The users' pytest plugin (``relay_eqsat.passes.regression.plugin``: the ``eqsat`` fixture, marker, options,
snapshots, ``--eqsat-measure``), through pytest's ``pytester``: each test writes a small user suite
and runs pytest on it in a subprocess (TVM in the outer process stays out of the inner runs).

The suites use tiny Relay functions (two dense layers of one input, which ``dense-merge`` merges)
and a tiny ONNX model, so each inner run is a couple of seconds, most of it importing TVM.
"""
from __future__ import annotations

import json

import pytest

pytest.importorskip("tvm")
# the inner suites need the default model to find dense-merge's rewrite, which a CPU's own shipped data may
# rightly not (on Sapphire Rapids at one thread it saves nothing): no_host_data's setting reaches the subprocesses
pytestmark = [pytest.mark.tvm, pytest.mark.usefixtures("no_host_data")]
pytest_plugins = ["pytester"]

MODELS = '''
import numpy as np
import pytest
import tvm
from tvm import relay


def two_dense(n=32, scale=1.0):
    """relu(dense(x, w1)) + relu(dense(x, w2)): dense-merge merges the two dense layers."""
    x = relay.var("x", shape=(4, n), dtype="float32")
    w1, w2 = relay.var("w1", shape=(n, n)), relay.var("w2", shape=(n, n))
    body = relay.add(relay.nn.relu(relay.nn.dense(x, w1)), relay.nn.relu(relay.nn.dense(x, w2)))
    rng = np.random.default_rng(0)
    params = {k: (scale * rng.standard_normal((n, n))).astype("float32") for k in ("w1", "w2")}
    return tvm.IRModule.from_expr(relay.Function([x, w1, w2], body)), params
'''

SNAPSHOT_SUITE = MODELS + '''

def test_tiny(eqsat):
    result = eqsat(*two_dense())
    assert result.changed and result.report["rules_fired"]["dense-merge"] == 2
    assert result.params == {} and result.max_error <= 1e-4
    assert result.snapshot.name == "test_tiny.json"


def test_two_calls(eqsat):
    first, second = eqsat(*two_dense(16)), eqsat(*two_dense(16, scale=2.0))
    third = eqsat(*two_dense(8), key="small")
    assert [r.snapshot.name for r in (first, second, third)] == [
        "test_two_calls.json", "test_two_calls-2.json", "test_two_calls-small.json"]
'''


#: the inner runs: a subprocess each; hypothesis's plugin spends seconds in its terminal summary
INNER = ("-p", "no:hypothesispytest")


def run(pytester, *args):
    return pytester.runpytest_subprocess(*INNER, *args)


def snapshot_file(pytester, test="test_tiny"):
    return pytester.path / "__eqsat_snapshots__" / "test_suite" / f"{test}.json"


def edit_snapshot(path, **changes):
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data, indent=2))
    return data


def test_snapshots_are_written_matched_regressed_and_updated(pytester):
    pytester.makepyfile(test_suite=SNAPSHOT_SUITE)
    res = run(pytester, "--eqsat-update-snapshots")
    res.assert_outcomes(passed=2)
    res.stdout.fnmatch_lines(["*- relay-eqsat -*",
                              "test_suite.py::test_tiny: module, cost * -> * ms (*x), changed, snapshot written",
                              "4 eqsat calls; snapshots: 4 written"])
    written = snapshot_file(pytester).read_text()
    data = json.loads(written)
    assert data["changed"] is True and data["rules_fired"]["dense-merge"] == 2
    assert data["cost_after"] < data["cost_before"] and data["fingerprint"].startswith("sha256:")
    assert data["options"]["check_runtime"] == "off" and data["stop_reason"] == "saturated"
    for name in ("test_two_calls", "test_two_calls-2", "test_two_calls-small"):
        assert snapshot_file(pytester, name).exists()

    # the same settings give the same snapshot: a second run matches it; a test without one fails and
    # says how to write it (as syrupy and pytest-snapshot do)
    pytester.makepyfile(test_suite=SNAPSHOT_SUITE + "\n\ndef test_new(eqsat):\n    eqsat(*two_dense(8))\n")
    res = run(pytester, "-k", "not two_calls")
    res.assert_outcomes(passed=1, failed=1)
    res.stdout.fnmatch_lines(["*eqsat snapshot __eqsat_snapshots__/test_suite/test_new.json does not exist "
                              "(module): run pytest with --eqsat-update-snapshots to write it*",
                              "*test_tiny: module, *, changed, snapshot matched"])
    assert snapshot_file(pytester).read_text() == written and not snapshot_file(pytester, "test_new").exists()

    # a deliberately regressed snapshot (a cheaper recorded program, another fingerprint) fails, readably
    edit_snapshot(snapshot_file(pytester), cost_after=data["cost_after"] * 0.9, fingerprint="sha256:0000000000000000",
                  rules_fired={**data["rules_fired"], "dense-merge": 3})
    res = run(pytester, "-k", "test_tiny")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines([
        "*EqSatSnapshotMismatch: eqsat snapshot differs: __eqsat_snapshots__/test_suite/test_tiny.json (module)",
        "*  predicted cost after: * ms -> * ms (+11.1%, tolerance 1.0%): regressed",
        f"*  fingerprint: 'sha256:0000000000000000' -> '{data['fingerprint']}'",
        "*  rules_fired:", "*    --- snapshot", "*    +++ this run", "*    -dense-merge: 3", "*    +dense-merge: 2",
        "*run pytest with --eqsat-update-snapshots to accept this run's result",
        "*test_tiny: module, *, snapshot differs, FAILED: eqsat snapshot differs*"])

    # --eqsat-update-snapshots rewrites it (the file is the one first written) and writes the missing one
    res = run(pytester, "-k", "not two_calls", "--eqsat-update-snapshots")
    res.assert_outcomes(passed=2)
    res.stdout.fnmatch_lines(["*test_tiny: module, *, snapshot updated", "*test_new: module, *, snapshot written",
                              "2 eqsat calls; snapshots: 1 updated, 1 written"])
    assert snapshot_file(pytester).read_text() == written


def test_the_summary_lists_the_calls_made_in_pytest_xdist_workers(pytester):
    """Under pytest-xdist the eqsat calls run in worker processes: their records travel with the
    test reports to the controller, whose terminal summary lists them as a one-process run does
    (a failing call too)."""
    pytest.importorskip("xdist")
    pytester.makepyfile(test_suite=SNAPSHOT_SUITE)
    res = run(pytester, "-p", "xdist", "-n", "2", "--eqsat-update-snapshots")
    res.assert_outcomes(passed=2)
    res.stdout.fnmatch_lines(["*- relay-eqsat -*",
                              "test_suite.py::test_tiny: module, cost * -> * ms (*x), changed, snapshot written",
                              "4 eqsat calls; snapshots: 4 written"])
    res.stdout.fnmatch_lines(["test_suite.py::test_two_calls [[]small[]]: module, *, snapshot written"])
    data = edit_snapshot(snapshot_file(pytester), fingerprint="sha256:0000000000000000")
    assert data["changed"] is True
    res = run(pytester, "-p", "xdist", "-n", "2", "-k", "test_tiny")
    res.assert_outcomes(failed=1)
    res.stdout.fnmatch_lines(["*test_tiny: module, *, snapshot differs, FAILED: eqsat snapshot differs*",
                              "1 eqsat call; snapshots: 1 differs"])


def test_snapshot_comparison_fields_and_tolerance():
    from relay_eqsat.passes.regression import snapshots

    old = {"format": 1, "model": "m", "target": "llvm", "changed": True, "fingerprint": "sha256:a",
           "cost_before": 2e-3, "cost_after": 1e-3, "rules_fired": {"dense-merge": 2}, "egraph_nodes": 30,
           "stop_reason": "saturated", "ops_after": {"nn.dense": 1}, "options": {"node_limit": 500}}
    assert snapshots.differences(old, dict(old), 0.01) == ([], [])
    # a cost within the tolerance (either way) and fields not compared do not fail, and are shown
    failing, context = snapshots.differences(old, {**old, "cost_after": 1.005e-3, "options": {"node_limit": 600}}, 0.01)
    assert failing == [] and context == [
        "  predicted cost after: 1.0000 ms -> 1.0050 ms (+0.5%, tolerance 1.0%)", "  options: node_limit 500 -> 600"]
    failing, _ = snapshots.differences(old, {**old, "cost_after": 1.005e-3}, 0.001)
    assert failing == ["  predicted cost after: 1.0000 ms -> 1.0050 ms (+0.5%, tolerance 0.1%): regressed"]
    assert snapshots.differences(old, {**old, "cost_after": 0.5e-3}, 0.0)[0] == []  # cheaper: not a regression
    failing, _ = snapshots.differences(old, {**old, "target": "cuda", "stop_reason": "node_limit",
                                             "egraph_nodes": 31, "changed": False}, 0.01)
    assert [f.split(":")[0].strip() for f in failing] == ["target", "changed", "egraph_nodes", "stop_reason"]


def test_snapshot_check_statuses(tmp_path):
    from relay_eqsat.passes.regression import snapshots

    path = tmp_path / "snap" / "t.json"
    current = {"model": "m", "target": "llvm", "cost_after": 1e-3, "fingerprint": "sha256:a"}
    status, message = snapshots.check(path, current, 0.01, update=False, shown="snap/t.json")
    assert status == "missing" and "snap/t.json does not exist (m)" in message and not path.exists()
    assert snapshots.check(path, current, 0.01, update=True) == ("written", None)
    assert snapshots.check(path, current, 0.01, update=False) == ("matched", None)
    assert snapshots.check(path, {**current, "cost_after": 0.9e-3}, 0.01, update=False)[0].startswith(
        "matched (differences allowed: predicted cost after: 1.0000 ms -> 0.9000 ms (-10.0%")
    status, message = snapshots.check(path, {**current, "fingerprint": "sha256:b"}, 0.01, update=False)
    assert status == "differs" and "  fingerprint: 'sha256:a' -> 'sha256:b'" in message.splitlines()
    path.write_text("{not json")
    status, message = snapshots.check(path, current, 0.01, update=False)
    assert status == "unreadable" and "cannot be read: not JSON" in message
    assert snapshots.check(path, current, 0.01, update=True) == ("updated (was unreadable)", None)
    assert json.loads(path.read_text()) == current


WRONG_SUITE = MODELS + '''
from relay_eqsat.passes.regression import fixture as regression


def test_wrong_program(eqsat, monkeypatch):
    real = regression.run_pass

    def doubled(mod, options):
        # a well-typed program computing other numbers: the pass's result times 2
        out, report, used, said = real(mod, options)
        f = out["main"]
        wrong = relay.Function(f.params, relay.multiply(f.body, relay.const(2.0)), f.ret_type)
        return tvm.IRModule.from_expr(wrong), report, used, said

    monkeypatch.setattr(regression, "run_pass", doubled)
    eqsat(*two_dense())


def test_unsupported_program(eqsat):
    x = relay.var("x", shape=(2,), dtype="float32")
    cond = relay.var("c", shape=(), dtype="bool")
    eqsat(tvm.IRModule.from_expr(relay.Function([x, cond], relay.If(cond, x, relay.negative(x)))))
'''


def test_a_program_computing_other_outputs_fails_and_writes_nothing(pytester):
    pytester.makepyfile(test_suite=WRONG_SUITE)
    res = run(pytester, "--eqsat-update-snapshots")
    res.assert_outcomes(failed=2)
    res.stdout.fnmatch_lines([
        "*EqSatOutputMismatch: eqsat: the optimized program computes different outputs (module, inputs drawn "
        "with seed 0):",
        "*output 0 float32[[]4, 32[]]: max abs error * at (*) (original *, optimized *) > tolerance * "
        "(atol 1e-05 + rtol 0.0001 x max|original| *)",
        "*test_wrong_program: module, *, snapshot not compared, FAILED: outputs differ"])
    # a program the pass cannot take fails the test, with the pass's reason
    res.stdout.fnmatch_lines(["*AssertionError: eqsat: EqSatPass left module unchanged without optimizing it: "
                              "EqSatPass: unsupported program (*"])
    assert not (pytester.path / "__eqsat_snapshots__").exists()


INPUTS_SUITE = MODELS + '''
import onnx
from onnx import TensorProto, helper, numpy_helper

pytestmark = pytest.mark.eqsat(snapshot=False, iter_limit=5)


def test_int_and_bool_inputs(eqsat):
    """ids index a 50-row table: drawn in [0, 50); mask is an int used as a number: [0, 2); flag is a bool."""
    table = relay.const(np.random.default_rng(1).standard_normal((50, 16)).astype("float32"))
    ids = relay.var("ids", shape=(64,), dtype="int32")
    mask = relay.var("mask", shape=(64, 1), dtype="int32")
    flag = relay.var("flag", shape=(64, 1), dtype="bool")
    e = relay.multiply(relay.take(table, ids, axis=0), relay.cast(mask, "float32"))
    w1, w2 = (relay.const(np.random.default_rng(k).standard_normal((16, 16)).astype("float32")) for k in (2, 3))
    y = relay.add(relay.nn.dense(e, w1), relay.nn.dense(e, w2))
    y = relay.where(flag, y, relay.negative(y))
    mod = tvm.IRModule.from_expr(relay.Function([ids, mask, flag], y))
    result = eqsat(mod)
    got = result.inputs
    assert got["ids"].dtype == np.int32 and 0 <= got["ids"].min() and got["ids"].max() < 50 and got["ids"].max() >= 2
    assert set(np.unique(got["mask"])) == {0, 1} and got["flag"].dtype == np.bool_
    assert result.changed and result.report["rules_fired"]["dense-merge"] == 2
    # an input's range and an input's values, per call
    again = eqsat(mod, input_ranges={"mask": (2, 5)}, inputs={"ids": np.arange(64, dtype="int32") % 7})
    assert again.inputs["mask"].min() >= 2 and again.inputs["mask"].max() < 5
    assert list(again.inputs["ids"][:8]) == [0, 1, 2, 3, 4, 5, 6, 0]


def test_onnx_model_with_token_ids(eqsat, tmp_path):
    """An ONNX embedding (Gather) then two MatMuls: the int64 token ids are drawn below the vocabulary size."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("emb", (30, 16)), ("w1", (16, 16)), ("w2", (16, 16)))]
    nodes = [helper.make_node("Gather", ["emb", "ids"], ["e"], axis=0),
             helper.make_node("MatMul", ["e", "w1"], ["a"]), helper.make_node("MatMul", ["e", "w2"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(tmp_path / "emb.onnx"))
    result = eqsat(str(tmp_path / "emb.onnx"), input_shapes={"ids": [1, 8]})
    assert result.inputs["ids"].dtype == np.int64 and result.inputs["ids"].max() < 30
    assert result.max_error <= 1e-4
'''


def test_int_bool_and_onnx_inputs(pytester):
    pytester.makepyfile(test_suite=INPUTS_SUITE)
    res = run(pytester)
    res.assert_outcomes(passed=2)
    res.stdout.fnmatch_lines(["*test_onnx_model_with_token_ids: emb.onnx, cost *, snapshot off"])


PRECEDENCE_SUITE = MODELS + '''

def check(result, name, value, source):
    got = result.settings[name] if name in result.settings else result.options[name]
    assert got == value, (name, got)
    assert result.sources[name] == source, (name, result.sources[name])


def test_cli_over_ini(eqsat):
    result = eqsat(*two_dense(8))
    check(result, "node_limit", 600, "command line")
    check(result, "search", "tensat", "ini eqsat_options")
    check(result, "rtol", 0.001, "ini eqsat_options")
    check(result, "check_runtime", "off", "plugin default")  # the pass decides on its cost model
    check(result, "min_gain", 0.0, "plugin default")
    assert result.options["cycle_filter"] == "efficient"  # the pass's own default


@pytest.mark.eqsat(node_limit=700)
def test_marker_over_cli(eqsat):
    check(eqsat(*two_dense(8)), "node_limit", 700, "marker")


@pytest.mark.eqsat(node_limit=700, iter_limit=3)
def test_call_over_marker(eqsat):
    result = eqsat(*two_dense(8), node_limit=800, k_multi=2)
    check(result, "node_limit", 800, "call")
    check(result, "iter_limit", 3, "marker")
    check(result, "k_multi", 2, "call")


@pytest.mark.eqsat(iter_limit=4)
class TestClass:
    @pytest.mark.eqsat(iter_limit=2)
    def test_closest_marker(self, eqsat):
        result = eqsat(*two_dense(8))
        check(result, "iter_limit", 2, "marker")
        assert result.snapshot is None


@pytest.mark.eqsat(nod_limit=5)
def test_unknown_name(eqsat):
    eqsat(*two_dense(8))
'''


def test_option_precedence_call_marker_cli_ini(pytester):
    pytester.makepyfile(test_suite=PRECEDENCE_SUITE)
    pytester.makeini("[pytest]\neqsat_options =\n    node_limit = 500\n    search = tensat\n    rtol = 1e-3\n"
                     "    snapshot = false\n")
    res = run(pytester, "--eqsat-node-limit", "600")
    res.assert_outcomes(passed=4, failed=1)
    res.stdout.fnmatch_lines(["*SettingError: marker: unknown name 'nod_limit'; EqSatPass options: search, *"])


def test_bad_option_values_are_usage_errors(pytester):
    pytester.makepyfile(test_suite="def test_nothing():\n    pass\n")
    res = run(pytester, "--eqsat-node-limit", "-5")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*relay-eqsat: command line: option node_limit: '-5' is out of range; expected an "
                              "integer > 0"])
    pytester.makeini("[pytest]\neqsat_options =\n    search = bogus\n")
    res = run(pytester)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    res.stderr.fnmatch_lines(["*relay-eqsat: ini eqsat_options: option search: 'bogus' is not a choice; *"])
    # pytest --help lists the options
    pytester.makeini("[pytest]\n")
    res = run(pytester, "--help")
    res.stdout.fnmatch_lines(["*relay-eqsat regression checks*", "*--eqsat-update-snapshots*",
                              "*--eqsat-measure-threshold=MEASURE_THRESHOLD*", "*--eqsat-node-limit=NODE_LIMIT*",
                              "*eqsat_options (linelist):*"])


MEASURE_SUITE = MODELS + '''
from relay_eqsat.passes.regression import fixture as regression

pytestmark = pytest.mark.eqsat(snapshot=False)


def test_measured(eqsat):
    result = eqsat(*two_dense(64))
    assert result.measured["rounds"] == 3 and result.measured["ratio"] > 0


def test_slower(eqsat, monkeypatch):
    monkeypatch.setattr(regression, "paired_ratio", lambda before, after: (1.5, 0))
    eqsat(*two_dense(64))
'''


def test_measure_times_both_programs_and_fails_a_slower_one(pytester, no_host_data):
    pytester.makepyfile(test_suite=MEASURE_SUITE)
    # a generous threshold: this test checks the mechanics, not this machine's timings
    res = run(pytester, "--eqsat-measure", "--eqsat-measure-rounds", "3",
                                        "--eqsat-measure-threshold", "0.4")
    res.assert_outcomes(passed=1, failed=1)
    res.stdout.fnmatch_lines([
        "*EqSatSlower: eqsat: the optimized program is slower: median runtime ratio optimized/original 1.500 over "
        "3 paired rounds (* ms -> * ms) > 1.400 (measure_threshold 0.4)",
        "*test_measured: module, *, changed, snapshot off, measured * -> * ms (ratio *, 3 rounds)"])
