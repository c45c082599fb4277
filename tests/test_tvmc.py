"""``relay-eqsat tvmc compile --eqsat``: tvmc's own compile command with EqSatPass
inside its pipeline, on small ONNX models written here with ``onnx.helper``.

Every compiled package (.tar) is loaded with tvmc's ``TVMCPackage`` and run with
the graph executor; its outputs must equal those of the same model compiled by
tvmc without the pass. Routes: the ``--eqsat*`` flags, the ``eqsat`` composite
target (``--target "eqsat -opt=v, llvm ..."``), ``--pass-config
relay.eqsat.<option>=...``, and tvmc's Python API (``tvmc.compile``).
"""
from __future__ import annotations

import json

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from tvm.contrib import graph_executor  # noqa: E402

from relay_eqsat.cli import main as cli_main  # noqa: E402
from relay_eqsat.passes.relay import tvmc as eqsat_tvmc  # noqa: E402
from relay_eqsat.passes.runtime.target import host_target  # noqa: E402

pytestmark = pytest.mark.tvm

# the pass deciding without measuring (test_safe_default.py tests the measured default)
TRUST = ["--eqsat-check-runtime", "off", "--eqsat-calibrate", "off", "--eqsat-min-gain", "0"]
FAST = ["--eqsat-final-extractor", "greedy-ocf", "--eqsat-node-limit", "2000", *TRUST]


# -- models ------------------------------------------------------------------------

def _save(tmp_path, name, nodes, inputs, outputs, weights, seed=0):
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((0.5 * rng.standard_normal(shape)).astype(np.float32), w)
             for w, shape in weights.items()]
    graph = helper.make_graph(nodes, name,
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs.items()],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    return path, inputs


def parallel_conv_model(tmp_path):
    """Two 3x3 convolutions of one input (+bias, relu) concatenated."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("Conv", ["x", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Concat", ["r1", "r2"], ["y"], axis=1)]
    return _save(tmp_path, "parallel_conv", nodes, {"x": [1, 8, 16, 16]}, {"y": [1, 32, 16, 16]},
                 {"w1": (16, 8, 3, 3), "b1": (16,), "w2": (16, 8, 3, 3), "b2": (16,)})


def shared_matmul_model(tmp_path):
    """Two Gemms and two MatMuls sharing their input, summed."""
    nodes = [helper.make_node("Gemm", ["x", "g1", "gb1"], ["a"], transB=1),
             helper.make_node("Gemm", ["x", "g2", "gb2"], ["b"], transB=1),
             helper.make_node("MatMul", ["x", "m1"], ["c"]),
             helper.make_node("MatMul", ["x", "m2"], ["d"]),
             helper.make_node("Add", ["a", "b"], ["ab"]),
             helper.make_node("Mul", ["c", "d"], ["cd"]),
             helper.make_node("Add", ["ab", "cd"], ["y"])]
    return _save(tmp_path, "shared_matmul", nodes, {"x": [16, 32]}, {"y": [16, 24]},
                 {"g1": (24, 32), "gb1": (24,), "g2": (24, 32), "gb2": (24,), "m1": (32, 24), "m2": (32, 24)})


def relu_add_chain_model(tmp_path):
    """relu(x + w1) + relu(x + w2) ... a chain of element-wise ops and two inputs."""
    nodes = [helper.make_node("Add", ["x", "w1"], ["a1"]),
             helper.make_node("Relu", ["a1"], ["r1"]),
             helper.make_node("Add", ["r1", "z"], ["a2"]),
             helper.make_node("Relu", ["a2"], ["r2"]),
             helper.make_node("Add", ["r2", "w2"], ["a3"]),
             helper.make_node("Relu", ["a3"], ["y"])]
    return _save(tmp_path, "relu_add_chain", nodes, {"x": [4, 64], "z": [4, 64]}, {"y": [4, 64]},
                 {"w1": (64,), "w2": (4, 64)})


# -- helpers ------------------------------------------------------------------------

def random_inputs(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}


def run_package(path, inputs):
    """Load a tvmc package (.tar) and run it with the graph executor."""
    from tvm.driver.tvmc import TVMCPackage

    pkg = TVMCPackage(str(path))
    m = graph_executor.create(pkg.graph, tvm.runtime.load_module(pkg.lib_path), tvm.cpu(0))
    if pkg.params:
        m.load_params(pkg.params)
    for name, value in inputs.items():
        m.set_input(name, value)
    m.run()
    return [m.get_output(i).numpy() for i in range(m.get_num_outputs())]


def assert_same(ref, got):
    assert len(ref) == len(got)
    for r, g in zip(ref, got):
        assert r.shape == g.shape and r.dtype == g.dtype
        tol = 1e-4 * max(1.0, float(np.abs(r).max()))
        err = float(np.abs(r.astype(np.float64) - g.astype(np.float64)).max())
        assert err <= tol, f"max error {err:.3g} > {tol:.3g}"


def tvmc(*args) -> int:
    return cli_main(["tvmc", *[str(a) for a in args]])


def compile_reference(model, tmp_path):
    out = tmp_path / (model.stem + "_plain.tar")
    assert tvmc("compile", model, "-o", out) == 0
    return out


def report_of(path):
    with open(path) as f:
        return json.load(f)


# -- tests ------------------------------------------------------------------------------------

def test_flags_parallel_conv(tmp_path, capsys, no_host_data):
    # the default (znver4) model finds the merge; a CPU's own data, or the nearest CPU's, may rightly not
    model, shapes = parallel_conv_model(tmp_path)
    ref = compile_reference(model, tmp_path)
    out, rep = tmp_path / "opt.tar", tmp_path / "report.json"
    assert tvmc("compile", "--eqsat", *FAST, "--eqsat-report", rep, model, "-o", out) == 0
    assert "eqsat: changed" in capsys.readouterr().out
    report = report_of(rep)
    assert report["changed"] and report["rules_fired"]["conv-merge"] > 0
    assert report["ops_after"]["nn.conv2d"] < report["ops_before"]["nn.conv2d"]
    assert report["options"]["final_extractor"] == "greedy-ocf" and report["options"]["node_limit"] == 2000
    inputs = random_inputs(shapes)
    assert_same(run_package(ref, inputs), run_package(out, inputs))


def test_flags_mcts_shared_matmuls(tmp_path):
    model, shapes = shared_matmul_model(tmp_path)
    ref = compile_reference(model, tmp_path)
    out, rep = tmp_path / "opt.tar", tmp_path / "report.json"
    assert tvmc("compile", "--eqsat", "--eqsat-search", "mcts", "--eqsat-budget", "4", "--eqsat-seed", "3",
                "--eqsat-final-extractor", "greedy-ocf", "--eqsat-node-limit", "300", "--eqsat-time-limit", "4",
                "--eqsat-report", rep, model, "--output", out) == 0
    report = report_of(rep)
    assert report["search"] == "mcts" and report["options"]["budget"] == 4 and report["options"]["seed"] == 3
    assert report["options"]["time_limit"] == 4.0 and report["search_time"] < 10
    inputs = random_inputs(shapes, seed=1)
    assert_same(run_package(ref, inputs), run_package(out, inputs))


def test_composite_target_route(tmp_path, capsys):
    model, shapes = relu_add_chain_model(tmp_path)
    ref = compile_reference(model, tmp_path)
    out, rep = tmp_path / "opt.tar", tmp_path / "report.json"
    target = f"eqsat -search=tensat -node-limit=777 -final_extractor=greedy-ocf -k-multi=2, {host_target()}"
    assert tvmc("compile", "--target", target, "--eqsat-report", rep, model, "-o", out) == 0
    assert "eqsat: " in capsys.readouterr().out
    report = report_of(rep)
    assert (report["options"]["node_limit"], report["options"]["k_multi"]) == (777, 2)
    inputs = random_inputs(shapes, seed=2)
    assert_same(run_package(ref, inputs), run_package(out, inputs))
    # the composite target through tvmc's Python API as well
    from tvm.driver import tvmc as tvmc_api

    eqsat_tvmc.register()
    pkg = tvmc_api.compile(tvmc_api.load(str(model)), target=f"eqsat -node_limit=55, {host_target()}",
                           package_path=str(tmp_path / "api.tar"))
    assert eqsat_tvmc.LAST_REPORT["options"]["node_limit"] == 55
    assert_same(run_package(ref, inputs), run_package(pkg.package_path, inputs))


def test_pass_config_route(tmp_path):
    model, shapes = parallel_conv_model(tmp_path)
    out, rep = tmp_path / "opt.tar", tmp_path / "report.json"
    assert tvmc("compile", "--eqsat", "--pass-config", "relay.eqsat.node_limit=321",
                "--pass-config", "relay.eqsat.final_extractor=greedy", "--pass-config", "relay.eqsat.k_multi=2",
                "--eqsat-k-multi", "3", "--eqsat-target", host_target(), "--eqsat-report", rep, model, "-o", out) == 0
    options = report_of(rep)["options"]
    # config values reach the pass; a --eqsat-* flag wins over the same --pass-config key
    assert (options["node_limit"], options["final_extractor"], options["k_multi"]) == (321, "greedy", 3)
    assert options["target"] == host_target()  # a flag value with "=" and spaces
    ref = compile_reference(model, tmp_path)
    inputs = random_inputs(shapes, seed=3)
    assert_same(run_package(ref, inputs), run_package(out, inputs))
    # search=none through the config: the pass runs, finds nothing to extract but the input
    rep2 = tmp_path / "report2.json"
    assert tvmc("compile", "--eqsat", "--pass-config", "relay.eqsat.search=none", "--eqsat-report", rep2,
                model, "-o", tmp_path / "none.tar") == 0
    report = report_of(rep2)
    assert report["stop_reason"] == "no search" and not report["changed"]


def test_disabled_pass_and_bad_option(tmp_path, capsys):
    from tvm.driver import tvmc as tvmc_api

    model, shapes = relu_add_chain_model(tmp_path)
    eqsat_tvmc.register()
    # tvmc's --disabled-pass only accepts C++-registered passes; its Python API takes any name
    pkg = tvmc_api.compile(tvmc_api.load(str(model)), target=f"eqsat, {host_target()}",
                           disabled_pass=["EqSatPass"], package_path=str(tmp_path / "d.tar"))
    assert eqsat_tvmc.LAST_REPORT is None
    inputs = random_inputs(shapes)
    assert_same(run_package(compile_reference(model, tmp_path), inputs), run_package(pkg.package_path, inputs))
    # an unknown option in the composite target is tvmc's error (exit status 4)
    status = tvmc("compile", "--target", f"eqsat -nodelimit=5, {host_target()}", model, "-o", tmp_path / "e.tar")
    assert status == 4
    assert "unknown eqsat option" in capsys.readouterr().err


def test_help_lists_the_flags(capsys):
    with pytest.raises(SystemExit):
        tvmc("compile", "--help")
    text = capsys.readouterr().out
    for flag in ("--eqsat", "--eqsat-search", "--eqsat-budget", "--eqsat-node-limit", "--eqsat-cost",
                 "--eqsat-report"):
        assert flag in text
