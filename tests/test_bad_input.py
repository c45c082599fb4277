"""Bad input gives a clear error or an unchanged, still-correct program; never a
crash, never a wrong result.

The options schema (``relay_eqsat.options``): one declaration, strict
coercion, the same checks in ``OptimizeOptions``, ``EqSatPass``, PassContext
configs, ``relay-eqsat optimize`` flags and ``tvmc --eqsat-*`` flags. The
command lines: one line and exit status 2 for a bad model file or
``--input-shapes``, 3 for an internal error, 1 (and nothing written) for a
mismatch. The cost database: unusable paths fall back to the shipped data.
"""
from __future__ import annotations

import argparse
import importlib.resources
import logging
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from relay_eqsat import options as schema
from relay_eqsat.cost import CostModel, KINDS, make_cost_model
from relay_eqsat.cost.cache import CostCache
from relay_eqsat.extract import EXTRACTORS
from relay_eqsat.graph import Attrs, TensorGraph, TensorType
from relay_eqsat.pipeline import OptimizeOptions, optimize_graph, resolve_rules

# a target with measurements and a learned model shipped in the package
SHIPPED_TARGET = "llvm -mtriple=x86_64-linux-gnu -mcpu=znver3"
CONV_ATTRS = dict(strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1,
                  data_layout="NCHW", kernel_layout="OIHW", out_dtype="")

BAD_VALUES = [
    ("search", "foo"), ("final_extractor", "nope"), ("extractor", "nope"), ("node_limit", -5),
    ("budget", 0), ("cost", "bogus"), ("check_runtime", "maybe"), ("rules", "/nonexistent.rules"),
    ("calibrate", 2), ("iter_limit", "many"), ("k_multi", -1), ("time_limit", float("nan")),
    ("extract_time_limit", 0), ("max_sim_steps", 1.5), ("patience", -1), ("min_gain", -0.1), ("verify", "perhaps"),
    ("cycle_filter", "sometimes"), ("seed", True), ("rules", 7), ("check_time_limit", "inf"),
]


# -- the schema (no TVM) ------------------------------------------------------------------------

def test_one_declaration_with_choices_from_the_registries():
    opts = OptimizeOptions()
    assert tuple(f for f in vars(opts)) == schema.OPTIMIZER_OPTIONS
    assert all(getattr(opts, n) == schema.DEFAULTS[n] for n in schema.OPTIMIZER_OPTIONS)
    for name in ("verify", "check_runtime", "calibrate", "calibrate_time_limit", "check_time_limit", "min_gain"):
        assert name in schema.DEFAULTS and name not in schema.OPTIMIZER_OPTIONS
    assert schema.DEFAULTS["check_runtime"] == schema.DEFAULTS["calibrate"] == "auto"
    assert (schema.DEFAULTS["calibrate_time_limit"], schema.DEFAULTS["check_time_limit"]) == (300.0, 120.0)
    assert schema.DEFAULTS["min_gain"] is None and schema.DEFAULTS["verify"] is False
    assert schema.OPTIONS["extractor"].allowed() == schema.OPTIONS["final_extractor"].allowed() == tuple(EXTRACTORS)
    assert schema.OPTIONS["cost"].allowed() == tuple(KINDS)
    assert "default" in schema.OPTIONS["rules"].allowed()


@pytest.mark.parametrize("name,value", BAD_VALUES)
def test_bad_values_name_the_option_the_value_and_what_is_allowed(name, value):
    with pytest.raises(ValueError) as e:
        schema.coerce(name, value)
    text = str(e.value)
    assert f"option {name}:" in text and repr(value) in text and "expected" in text
    with pytest.raises(ValueError, match=f"option {name}:"):
        if name in schema.OPTIMIZER_OPTIONS:
            OptimizeOptions.from_mapping({name: value})
        else:
            schema.validate({name: value})


def test_strings_are_coerced():
    got = schema.validate({"node_limit": "5000", "verify": "true", "check_runtime": True, "calibrate": "no",
                           "time_limit": "2.5", "seed": np.int64(3), "min_gain": "none", "k_multi": "0",
                           "budget": 4.0, "search": "mcts"})
    assert got == {"node_limit": 5000, "verify": True, "check_runtime": "on", "calibrate": "off",
                   "time_limit": 2.5, "seed": 3, "min_gain": None, "k_multi": 0, "budget": 4, "search": "mcts"}
    assert type(got["seed"]) is int and type(got["time_limit"]) is float
    for text, switch in [("1", "on"), ("yes", "on"), ("false", "off"), ("0", "off"), ("AUTO", "auto"), (False, "off")]:
        assert schema.coerce("check_runtime", text) == switch
    opts = OptimizeOptions(node_limit="123", time_limit="4")
    assert (opts.node_limit, opts.time_limit) == (123, 4.0)


def test_unknown_names_are_listed():
    with pytest.raises(ValueError, match=r"unknown EqSatPass option 'nodelimit'; known: search, .*node_limit"):
        schema.validate({"nodelimit": 3}, what="EqSatPass option")
    with pytest.raises(ValueError, match="unknown optimizer options"):
        OptimizeOptions.from_mapping({"verify": True})  # a pass option, not the optimizer's


def test_rules_names_paths_and_lists(tmp_path, monkeypatch):
    shipped = resolve_rules("default")
    assert schema.coerce("rules", "default") == "default"
    assert schema.coerce("rules", shipped) == shipped
    with pytest.raises(ValueError, match="not a Rule"):
        schema.coerce("rules", shipped[:2] + ["not a rule"])
    # a .rules file in the working directory, named without a directory: read as that file
    mine = tmp_path / "mine.rules"
    mine.write_text(importlib.resources.files("relay_eqsat.rulesets").joinpath("default.rules").read_text())
    monkeypatch.chdir(tmp_path)
    path = schema.coerce("rules", "mine.rules")
    assert os.path.samefile(path, mine)
    assert [r.name for r in resolve_rules(path)] == [r.name for r in shipped]
    with pytest.raises(ValueError, match="does not exist"):
        schema.coerce("rules", str(tmp_path / "missing.rules"))


def test_argparse_flags_come_from_the_schema(capsys):
    p = argparse.ArgumentParser(prog="t")
    for name in schema.OPTIONS:
        p.add_argument(schema.flag_name(name), dest=name, **schema.argparse_kwargs(name))
    args = p.parse_args(["--node-limit", "50", "--check-runtime", "--calibrate", "off", "--verify",
                         "--min-gain", "0.1", "--rules", "default"])
    assert (args.node_limit, args.check_runtime, args.calibrate, args.verify, args.min_gain, args.rules) == \
        (50, "on", "off", True, 0.1, "default")
    assert args.search is None and args.fast_math is None  # not given: the pass's default applies
    assert p.parse_args(["--fast-math", "off"]).fast_math is False and p.parse_args(["--fast-math"]).fast_math
    for argv, needle in [(["--search", "foo"], "invalid choice: 'foo'"), (["--node-limit", "-5"], "node_limit"),
                         (["--check-runtime", "maybe"], "invalid choice"), (["--cost", "bogus"], "invalid choice"),
                         (["--fast-math", "sometimes"], "fast_math"),
                         (["--rules", "/nonexistent.rules"], "does not exist")]:
        with pytest.raises(SystemExit) as e:
            p.parse_args(argv)
        assert e.value.code == 2 and needle in capsys.readouterr().err


# -- the cost database (no TVM) ----------------------------------------------------------------

def _unusable_db(kind: str, tmp_path):
    if kind == "directory":
        path = tmp_path / "a_directory"
        path.mkdir()
    elif kind == "under a file":
        (tmp_path / "plain_file").write_text("not a directory")
        path = tmp_path / "plain_file" / "costs.sqlite"
    else:
        path = tmp_path / "random.sqlite"
        path.write_bytes(np.random.default_rng(0).bytes(8192))
    return path


def _conv_cost(cm: CostModel) -> float:
    x, w = TensorType((1, 16, 14, 14)), TensorType((32, 16, 3, 3))
    return cm.op_cost("nn.conv2d", Attrs(CONV_ATTRS), [x, w], TensorType((1, 32, 14, 14)))


@pytest.mark.parametrize("kind", ["directory", "under a file", "random bytes"])
def test_unusable_cost_database_falls_back_to_the_shipped_data(kind, tmp_path, monkeypatch, caplog):
    path = _unusable_db(kind, tmp_path)
    monkeypatch.setenv("RELAY_EQSAT_COST_DB", str(path))
    monkeypatch.setenv("RELAY_EQSAT_TARGET", SHIPPED_TARGET)
    with caplog.at_level(logging.WARNING, logger="relay_eqsat.cost.cache"):
        cm = make_cost_model("auto")
        cost = _conv_cost(cm)
        again = make_cost_model("auto")
        assert _conv_cost(again) == cost
        # writes are dropped, reads see no user rows
        cm.cache.set_meta("k", "v")
        assert cm.cache.get_meta("k") is None and cm.cache.count() == 0 and list(cm.cache.rows()) == []
    assert math.isfinite(cost) and cost > 0
    assert cm.learned is not None and not cm.foreign_model  # the shipped model of this CPU
    assert cm.cache.error is not None
    warned = [r.getMessage() for r in caplog.records if "cost database" in r.getMessage()]
    assert len(warned) == 1 and str(path) in warned[0]
    assert "shipped" in warned[0] and "will not be kept" in warned[0]
    if kind == "random bytes":
        assert path.read_bytes() == np.random.default_rng(0).bytes(8192)  # left as it was


def test_unusable_cost_database_optimizer_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAY_EQSAT_COST_DB", str(_unusable_db("random bytes", tmp_path)))
    monkeypatch.setenv("RELAY_EQSAT_TARGET", SHIPPED_TARGET)
    g = TensorGraph()  # two 3x3 convolutions of one input: conv-merge makes them one
    x = g.var("x", (1, 8, 16, 16))
    attrs = dict(CONV_ATTRS, channels=16, kernel_size=(3, 3))
    ws = [g.const(np.random.default_rng(i).standard_normal((16, 8, 3, 3)).astype("float32"), f"w{i}") for i in (1, 2)]
    g.set_output(g.add("concatenate", [g.add("nn.relu", (g.add("nn.conv2d", (x, w), attrs),)) for w in ws],
                       {"axis": 1}))
    out, rep = optimize_graph(g, {"final_extractor": "greedy-ocf", "node_limit": 2000})
    assert rep.changed and rep.ops_after["nn.conv2d"] < rep.ops_before["nn.conv2d"]
    a = np.random.default_rng(0).standard_normal((1, 8, 16, 16)).astype("float32")
    np.testing.assert_allclose(out.evaluate({"x": a}), g.evaluate({"x": a}), rtol=1e-4, atol=1e-4)


def test_database_that_reads_but_cannot_be_written_keeps_its_rows(tmp_path, caplog):
    db = tmp_path / "c.sqlite"
    CostCache(db).set_meta("k", "v")
    cache = CostCache(db)
    assert cache.get_meta("k") == "v"
    # what a read-only file does to writes (the tests run as root, so chmod would not do it)
    cache._connect().execute("PRAGMA query_only=ON")
    with caplog.at_level(logging.WARNING, logger="relay_eqsat.cost.cache"):
        cache.set_meta("k2", "v2")  # dropped, with one warning
        cache.set_meta("k3", "v3")
    assert cache.get_meta("k") == "v" and cache.get_meta("k2") is None and cache.count() == 0
    assert "readonly" in cache.error
    warned = [r.getMessage() for r in caplog.records if "cost database" in r.getMessage()]
    assert len(warned) == 1 and "cannot be written" in warned[0] and str(db) in warned[0]


# -- EqSatPass (TVM) ---------------------------------------------------------------------------

@pytest.fixture
def tvm_mod():
    tvm = pytest.importorskip("tvm")
    from tvm import relay

    x = relay.var("x", shape=(1, 4, 8, 8))
    w1 = relay.const(np.random.default_rng(1).standard_normal((8, 4, 3, 3)).astype("float32"))
    w2 = relay.const(np.random.default_rng(2).standard_normal((8, 4, 3, 3)).astype("float32"))
    c1 = relay.nn.relu(relay.nn.conv2d(x, w1, padding=(1, 1), channels=8, kernel_size=(3, 3)))
    c2 = relay.nn.relu(relay.nn.conv2d(x, w2, padding=(1, 1), channels=8, kernel_size=(3, 3)))
    mod = tvm.IRModule.from_expr(relay.Function([x], relay.concatenate([c1, c2], axis=1)))
    return relay.transform.InferType()(mod)


@pytest.mark.tvm
@pytest.mark.parametrize("name,value", BAD_VALUES[:8] + [("target", "not-a-target"), ("target", 3)])
def test_constructor_rejects_bad_values(name, value):
    pytest.importorskip("tvm")
    from relay_eqsat.passes import EqSatPass

    with pytest.raises(ValueError, match=f"option {name}:") as e:
        EqSatPass(**{name: value})
    assert repr(value) in str(e.value)


@pytest.mark.tvm
def test_constructor_rejects_unknown_names_and_coerces_good_values(host_target):
    from relay_eqsat.passes import EqSatPass

    with pytest.raises(ValueError, match="unknown EqSatPass option 'nodelimit'"):
        EqSatPass(nodelimit=5)
    p = EqSatPass(node_limit="5000", verify="true", check_runtime="false", min_gain="0.05", target=host_target)
    assert p.options == {"node_limit": 5000, "verify": True, "check_runtime": "off", "min_gain": 0.05,
                         "target": host_target}


@pytest.mark.tvm
def test_bad_config_value_warns_and_keeps_the_module(tvm_mod):
    import tvm

    from relay_eqsat.passes import EqSatPass

    p = EqSatPass()
    for config in ({"relay.eqsat.search": "foo"}, {"relay.eqsat.node_limit": -1},
                   {"relay.eqsat.target": "not-a-target"}, {"relay.eqsat.nodelimit": 3}):
        with tvm.transform.PassContext(opt_level=3, config=config):
            with pytest.warns(UserWarning, match="bad option"):
                out = p(tvm_mod)
        assert out.same_as(tvm_mod) and p.last_report is None


@pytest.mark.tvm
def test_pass_optimizes_with_an_unusable_cost_database(tvm_mod, tmp_path, monkeypatch, caplog):
    from relay_eqsat.passes import EqSatPass
    from relay_eqsat.passes.runtime.build import build_and_run, output_error, random_inputs

    db = _unusable_db("directory", tmp_path)
    monkeypatch.setenv("RELAY_EQSAT_COST_DB", str(db))
    p = EqSatPass(final_extractor="greedy-ocf", check_runtime="off", calibrate="off", min_gain=0.0)
    with caplog.at_level(logging.WARNING, logger="relay_eqsat.cost.cache"):
        out = p(tvm_mod)
    assert p.last_report is not None and p.last_report["changed"], p.last_report
    assert p.last_report["ops_after"]["nn.conv2d"] < p.last_report["ops_before"]["nn.conv2d"]
    assert any(str(db) in r.getMessage() for r in caplog.records)
    inputs = random_inputs({"x": ((1, 4, 8, 8), "float32")})
    ref = build_and_run(tvm_mod, inputs).outputs
    got = build_and_run(out, inputs).outputs
    err, why = output_error(ref, got)
    assert why is None and err <= 1e-4


# -- command lines (TVM) -----------------------------------------------------------------------

def _onnx_model(path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((0.5 * rng.standard_normal(s)).astype(np.float32), n)
             for n, s in {"w1": (8, 4, 3, 3), "w2": (8, 4, 3, 3)}.items()]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("Conv", ["x", "w2"], ["c2"], pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("Relu", ["c1"], ["r1"]), helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Concat", ["r1", "r2"], ["y"], axis=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


def _cli(*args):
    from relay_eqsat.cli import main

    return main([str(a) for a in args])


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.tvm
def test_tvmc_bad_flag_value_is_an_argparse_error(tmp_path):
    pytest.importorskip("tvm")
    model = _onnx_model(tmp_path / "m.onnx")
    res = subprocess.run([sys.executable, "-m", "relay_eqsat.cli", "tvmc", "compile", "--eqsat", "--eqsat-search",
                          "foo", str(model), "-o", str(tmp_path / "m.tar")], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 2
    assert "usage: tvmc compile" in res.stderr and "argument --eqsat-search: invalid choice: 'foo'" in res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "m.tar").exists()


@pytest.mark.tvm
def test_tvmc_bad_composite_target_and_model_files(tmp_path, capfd, host_target):
    model = _onnx_model(tmp_path / "m.onnx")
    status = _cli("tvmc", "compile", "--target", f"eqsat -search=foo, {host_target}", model, "-o", tmp_path / "m.tar")
    assert status != 0
    line = _one_line(capfd.readouterr().err)
    assert "option search: 'foo'" in line
    (tmp_path / "empty.onnx").write_bytes(b"")
    (tmp_path / "garbage.onnx").write_bytes(np.random.default_rng(0).bytes(300))
    for name, why in [("empty.onnx", "empty"), ("garbage.onnx", "DecodeError"), ("missing.onnx", "no such file")]:
        status = _cli("tvmc", "compile", "--eqsat", tmp_path / name, "-o", tmp_path / "m.tar")
        line = _one_line(capfd.readouterr().err)
        assert status == 2 and line.startswith("relay-eqsat tvmc: cannot read model") and why in line, line
    assert not (tmp_path / "m.tar").exists()


@pytest.mark.tvm
def test_optimize_bad_model_files_and_shapes(tmp_path, capfd):
    pytest.importorskip("tvm")
    model = _onnx_model(tmp_path / "m.onnx")
    (tmp_path / "empty.onnx").write_bytes(b"")
    (tmp_path / "bad.onnx").write_bytes(np.random.default_rng(0).bytes(300))
    cases = [([tmp_path / "empty.onnx"], "cannot read model", "the file is empty"),
             ([tmp_path / "bad.onnx"], "cannot read model", "DecodeError"),
             ([tmp_path / "missing.onnx"], "cannot read model", "no such file"),
             ([tmp_path], "cannot read model", "not a regular file"),
             ([model, "--input-shapes", "x:[1,3,"], "bad --input-shapes", "x:[1,3,"),
             ([model, "--input-shapes", "x=1,3"], "bad --input-shapes", "x=1,3"),
             ([model, "--target", "not-a-target"], "option target", "not-a-target")]
    for args, what, detail in cases:
        status = _cli("optimize", *args, "--no-measure", "-o", tmp_path / "r.json")
        line = _one_line(capfd.readouterr().err)
        assert status == 2, (args, line)
        assert line.startswith(f"relay-eqsat optimize: {what}") and detail in line, line
    assert not (tmp_path / "r.json").exists()


@pytest.mark.tvm
def test_optimize_internal_error_is_exit_3(tmp_path, capfd, monkeypatch):
    from relay_eqsat.passes.cli import optimize as cli

    def broken(result):
        raise RuntimeError("boom")

    monkeypatch.setattr(cli, "format_table", broken)
    model = _onnx_model(tmp_path / "m.onnx")
    quick = ["--no-measure", "--final-extractor", "greedy-ocf", "--check-runtime", "off", "--calibrate", "off"]
    assert _cli("optimize", model, *quick) == 3
    line = _one_line(capfd.readouterr().err)
    assert "internal error: RuntimeError: boom" in line and "run with -v" in line
    assert _cli("optimize", model, *quick, "-v") == 3
    err = capfd.readouterr().err
    assert "Traceback" in err and "boom" in err
