"""``relay-eqsat optimize MODEL``: before/after table with measured TVM runtimes,
output check (nonzero exit status on a mismatch), JSON report, saved module,
plot; on a zoo model and on an ONNX file. Runs the CLI's ``main`` in-process."""
from __future__ import annotations

import json

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from relay_eqsat.cli import main  # noqa: E402
from relay_eqsat.graph import Node  # noqa: E402
from relay_eqsat.passes.relay import eqsat_pass  # noqa: E402
from relay_eqsat.passes.runtime.build import build, random_inputs, run  # noqa: E402

pytestmark = pytest.mark.tvm

# the pass deciding without measuring (test_safe_default.py tests the measured default)
QUICK = ["--final-extractor", "greedy-ocf", "--repeat", "2", "--number", "1", "--check-runtime=off", "--calibrate=off",
         "--min-gain=0"]


def onnx_model(path):
    """Two parallel 3x3 convolutions of one input, relu, concatenated."""
    rng = np.random.default_rng(0)
    weights = {"w1": (8, 4, 3, 3), "b1": (8,), "w2": (8, 4, 3, 3), "b2": (8,)}
    inits = [numpy_helper.from_array((0.5 * rng.standard_normal(s)).astype(np.float32), n) for n, s in weights.items()]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("Conv", ["x", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("Relu", ["c1"], ["r1"]), helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Concat", ["r1", "r2"], ["y"], axis=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 12, 12])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, str(path))
    return path


def test_optimize_zoo_model(tmp_path, capsys, no_host_data):
    out_json, module, plot = tmp_path / "r.json", tmp_path / "m.json", tmp_path / "p.png"
    status = main(["optimize", "zoo:nasnet_a", "--small", *QUICK, "--node-limit", "3000", "--search", "tensat",
                   "-o", str(out_json), "--save-module", str(module), "--plot", str(plot)])
    text = capsys.readouterr().out
    assert status == 0, text
    for needle in ("predicted cost", "measured runtime (median)", "optimization time:", "stopped: saturated",
                   "rules fired:", "result from:", "output check:", ": OK"):
        assert needle in text
    result = json.loads(out_json.read_text())
    m = result["measured"]
    assert m["equal"] and m["max_error"] <= 1e-4 and m["original"] > 0 and m["optimized"] > 0
    assert m["speedup"] == pytest.approx(m["original"] / m["optimized"])
    assert result["report"]["changed"] and result["options"]["node_limit"] == 3000
    used = result["report"]["rules_in_result"]  # small NasNet-A: the input's form can be the whole gain
    assert (f" added by {len(used)} rule" if used else "no rewrite rule: the input's own nodes") in text
    assert f"{m['speedup']:.3f}x" in text  # the table prints what was measured
    # the saved module is the optimized program: params bound, loads and computes the same
    saved = tvm.ir.load_json(module.read_text())
    assert [p.name_hint for p in saved["main"].params] == ["data"]
    assert eqsat_pass.REPORT_ATTR in saved["main"].attrs
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("changed, used, line", [
    (True, {"dense-merge": 5, "relu-over-split": 4}, "result from:       9 nodes added by 2 rules: "
                                                     "dense-merge (5 nodes), relu-over-split (4 nodes)"),
    (False, {"conv-merge": 1}, "candidate from:    1 node added by 1 rule: conv-merge (1 node)"),
    (True, {}, "result from:       no rewrite rule: the input's own nodes"),
    (False, {}, None),
])
def test_table_says_which_rules_the_program_came_from(changed, used, line):
    from relay_eqsat.passes.cli.optimize import format_table

    report = {"changed": changed, "rules_in_result": used, "cost_before": 2e-3, "cost_after": 1e-3,
              "rules_fired": {"dense-merge": 7}}
    text = format_table({"report": report, "model": "m", "target": "llvm"})
    lines = [x for x in text.splitlines() if "from:" in x]
    assert lines == ([line] if line else [])


def test_table_says_when_the_model_pick_was_timed_no_faster():
    """The model's pick timed no faster, then calibration: the table says what it measured and whether
    another program was timed (the result's figures above are that program's) or why not."""
    from relay_eqsat.passes.cli.optimize import format_table

    base = {"cost_before": 2e-3, "cost_after": 1e-3, "rules_fired": {}}
    second = dict(base, changed=True, measured_speedup=1.2, runtime_wins="9/9",
                  first_check={"measured_speedup": 0.97, "runtime_wins": "2/9"},
                  info={"calibration": {"measured": 24, "after_check": True}})
    kept = dict(base, changed=False, measured_speedup=0.97, runtime_wins="2/9",
                recalibration={"reason": "the measured kernels choose the program the runtime measured no "
                                         "faster; input kept", "calibration": {"measured": 1}})
    lines = [[x for x in format_table({"report": r, "model": "m", "target": "llvm"}).splitlines()
              if x.startswith("first check:")] for r in (second, kept, dict(base, changed=True))]
    assert lines[0] == ["first check:       the cost model's pick timed 0.970x (2/9 rounds won), no faster; then "
                        "24 kernels measured, another program chosen and timed (above)"]
    assert lines[1] == ["first check:       the cost model's pick timed 0.970x (2/9 rounds won), no faster; then "
                        "1 kernel measured, the measured kernels choose the program the runtime measured no "
                        "faster; input kept"]
    assert lines[2] == []


def test_optimize_onnx_file_and_text_module(tmp_path, capsys, no_host_data):
    model = onnx_model(tmp_path / "par.onnx")
    text_out = tmp_path / "m.relay"
    status = main(["optimize", str(model), *QUICK, "--save-module", str(text_out)])
    text = capsys.readouterr().out
    assert status == 0, text
    assert "changed (cheaper program found)" in text and "conv-merge" in text
    saved = tvm.relay.parse(text_out.read_text())
    inputs = random_inputs({"x": ((1, 4, 12, 12), "float32")})
    from tvm.driver.tvmc import frontends

    original = frontends.load_model(str(model))
    ref = run(build(original.mod, params=original.params), inputs)
    got = run(build(saved), inputs)
    assert np.abs(ref[0] - got[0]).max() <= 1e-4 * max(1.0, float(np.abs(ref[0]).max()))


def test_optimize_mismatch_exits_nonzero(tmp_path, capsys, monkeypatch):
    def wrong(graph, options):  # relu -> sigmoid: not equivalent
        g = graph.compact()
        g.nodes = [Node("sigmoid", n.inputs, n.attrs, n.type) if n.op == "nn.relu" else n for n in g.nodes]
        return g, {"changed": True, "reason": "test", "cost_before": 2.0, "cost_after": 1.0}

    monkeypatch.setattr(eqsat_pass, "optimize", wrong)
    model = onnx_model(tmp_path / "par.onnx")
    saved, report = tmp_path / "opt.json", tmp_path / "r.json"
    # the pass's own runtime check would catch the wrong program: off, so the command's check does
    status = main(["optimize", str(model), *QUICK, "--check-runtime", "off", "--save-module", str(saved),
                   "-o", str(report)])
    captured = capsys.readouterr()
    assert status == 1
    assert "MISMATCH" in captured.out and "differ" in captured.err and "nothing written" in captured.err
    assert not saved.exists() and not report.exists()  # a program whose outputs mismatched is never written


def test_optimize_bad_arguments(capsys):
    assert main(["optimize", "zoo:nonexistent", "--small"]) == 2
    assert "unknown zoo model" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # an argparse error now: --search has choices
        main(["optimize", "zoo:squeezenet", "--small", "--search", "bogus", "--no-measure"])
    assert e.value.code == 2


def test_tvmc_passthrough(capsys):
    assert main(["tvmc", "--version"]) == 0
    assert tvm.__version__ in capsys.readouterr().out


def test_reuse_builds_builds_an_equal_module_once():
    from tvm import relay

    from relay_eqsat.passes.runtime.build import reuse_builds

    def func(scale):
        x = relay.var("x", shape=(2, 3))
        return relay.Function([x], relay.multiply(x, relay.const(scale)))

    with reuse_builds() as reuse:
        a = build(func(2.0))
        assert build(func(2.0)) is a and reuse.hits == 1  # an equal module: the same factory
        assert build(func(3.0)) is not a and reuse.hits == 1  # another constant: built
        assert build(func(2.0), opt_level=2) is not a  # another opt level: built
        inputs = {"x": np.ones((2, 3), np.float32)}
        assert np.array_equal(run(a, inputs)[0], 2 * inputs["x"])
    assert not reuse.kept  # dropped when the block ends
    assert build(func(2.0)) is not a  # outside a block nothing is kept


def test_a_reused_build_reports_its_first_build_seconds():
    from tvm import relay

    from relay_eqsat.passes.runtime import build as runtime

    x = relay.var("x", shape=(2, 3))
    func = relay.Function([x], relay.nn.relu(x))
    inputs = {"x": np.ones((2, 3), np.float32) * -1}
    with runtime.reuse_builds() as reuse:
        first = runtime.build_and_run(func, inputs)
        again = runtime.build_and_run(func, inputs)
        assert reuse.hits == 1 and again.build_s == first.build_s > 0  # the first build's seconds
        assert again.module is not first.module and np.array_equal(again.outputs[0], np.zeros((2, 3)))
        other = runtime.build_and_run(func, inputs, opt_level=2)  # built: its own seconds
        assert reuse.hits == 1 and other.build_s != first.build_s
    assert not reuse.build_s  # dropped with the builds


def test_optimize_reuses_the_programs_the_runtime_check_built(tmp_path, capsys, no_host_data):
    """The pass's runtime check builds the input and the candidate; the command measures the
    same programs without building them again."""
    model = onnx_model(tmp_path / "par.onnx")
    out_json = tmp_path / "r.json"
    status = main(["optimize", str(model), "--final-extractor", "greedy-ocf", "--repeat", "2", "--number", "1",
                   "--check-runtime=on", "--calibrate=off", "--min-gain=0", "-o", str(out_json)])
    text = capsys.readouterr().out
    assert status == 0, text
    result = json.loads(out_json.read_text())
    m, rep = result["measured"], result["report"]
    assert "runtime_before" in rep or "runtime_untimed" in rep  # the runtime check built both
    assert m["builds_reused"] == (2 if rep["changed"] else 1) and m["equal"]
    assert "reused from the pass's runtime check" in text
