"""QDQ-quantized ONNX models through every entry point, and the backend's type check.

A QuantizeLinear/DequantizeLinear pair with a scalar scale and zero point
becomes ``qnn.quantize``/``qnn.dequantize`` calls on 0-d constants. The Relay
round trip once rebuilt those constants as shape [1]; ``qnn.quantize`` then
failed type inference inside the pass and this TVM segfaults when a Python
module pass catches such an error. Each entry point (``relay-eqsat optimize``,
``relay-eqsat tvmc compile --eqsat``, ``EqSatPass`` in a ``Sequential``) runs in
a subprocess, so a crash fails the test instead of killing pytest, and the
optimized program's outputs are compared with the original's (both built by
TVM). ``to_relay``'s type check (:func:`check_types`) must refuse ill-typed
graphs before any Relay is built.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from tvm import relay  # noqa: E402

from relay_eqsat.graph import Node, TensorGraph, TensorType  # noqa: E402
from relay_eqsat.passes.relay.backend import IllTypedGraph, check_types, to_relay
from relay_eqsat.passes.relay.frontend import from_relay  # noqa: E402
from relay_eqsat.passes.runtime.build import build, output_error, random_inputs, run  # noqa: E402
from relay_eqsat.passes.runtime.target import host_target  # noqa: E402

pytestmark = pytest.mark.tvm

SHAPE = {"x": [1, 16]}
# the pass deciding without measuring: whether a QDQ model's rewrite is kept must not hang on how a
# loaded machine times it (test_safe_default.py tests the measured default)
TRUST = ["--check-runtime", "off", "--calibrate", "off", "--min-gain", "0"]
FAST = ["--eqsat-final-extractor", "greedy-ocf", "--eqsat-node-limit", "2000",
        *("--eqsat-" + a[2:] if a.startswith("--") else a for a in TRUST)]


def qdq_model(path, parallel: bool, opset: int = 13):
    """x -> QuantizeLinear(scalar scale, int8 scalar zero point) -> DequantizeLinear
    -> two MatMuls with constant [16, 16] weights (chained or side by side) -> Relu -> Add."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((0.3 * rng.standard_normal((16, 16))).astype(np.float32), "w1"),
             numpy_helper.from_array((0.3 * rng.standard_normal((16, 16))).astype(np.float32), "w2"),
             numpy_helper.from_array(np.array(0.05, np.float32), "scale"),
             numpy_helper.from_array(np.array(3, np.int8), "zero_point")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zero_point"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "scale", "zero_point"], ["dq"]),
             helper.make_node("MatMul", ["dq", "w1"], ["m1"])]
    if parallel:  # relu(dq @ w1) + dq @ w2
        nodes += [helper.make_node("MatMul", ["dq", "w2"], ["m2"]),
                  helper.make_node("Relu", ["m1"], ["r"]),
                  helper.make_node("Add", ["r", "m2"], ["y"])]
    else:  # relu(dq @ w1 @ w2) + dq
        nodes += [helper.make_node("MatMul", ["m1", "w2"], ["m2"]),
                  helper.make_node("Relu", ["m2"], ["r"]),
                  helper.make_node("Add", ["r", "dq"], ["y"])]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE["x"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE["x"])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def load_relay(path):
    mod, params = relay.frontend.from_onnx(onnx.load(str(path)), shape=SHAPE, freeze_params=True)
    return relay.transform.InferType()(mod), params


def reference_outputs(model_path, inputs):
    mod, params = load_relay(model_path)
    return run(build(mod, params=params), inputs)


def assert_same_outputs(ref, got):
    err, why = output_error(ref, got)
    assert why is None, why
    assert err <= 1e-4, f"max relative error {err:.3g}"


def run_python(code: str, *args, timeout=300) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter; a crash shows as a non-zero status here."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, (f"exit status {proc.returncode} (139 = segfault)\n"
                                  f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}")
    return proc


def run_cli(*args) -> subprocess.CompletedProcess:
    return run_python("import sys\nfrom relay_eqsat.cli import main\nsys.exit(main(sys.argv[1:]))", *args)


INPUTS = random_inputs({"x": (SHAPE["x"], "float32")}, seed=1)


# -- the three entry points -------------------------------------------------------------

def test_optimize_command(tmp_path):
    model = qdq_model(tmp_path / "qdq_chain.onnx", parallel=False)
    saved, report = tmp_path / "opt.json", tmp_path / "report.json"
    proc = run_cli("optimize", model, "--final-extractor", "greedy-ocf", "--repeat", "1", "--number", "1",
                   *TRUST, "--save-module", saved, "-o", report)
    assert "warning" not in proc.stderr, proc.stderr
    result = json.loads(report.read_text())
    assert result["report"]["changed"], result["report"].get("reason")
    assert result["measured"]["equal"]
    optimized = tvm.ir.load_json(saved.read_text())
    ops_after = {str(c.op.name) for c in _calls(optimized["main"])}
    assert {"qnn.quantize", "qnn.dequantize"} <= ops_after  # the opaque QDQ calls survive
    assert_same_outputs(reference_outputs(model, INPUTS), run(build(optimized), INPUTS))


def test_tvmc_compile_eqsat(tmp_path):
    model = qdq_model(tmp_path / "qdq_chain.onnx", parallel=False, opset=14)
    out, report = tmp_path / "opt.tar", tmp_path / "report.json"
    run_cli("tvmc", "compile", "--target", host_target(), "--eqsat", *FAST, "--eqsat-report", report,
            model, "-o", out)
    rep = json.loads(report.read_text())
    assert rep["changed"], rep.get("reason")
    run_python("""
        import sys
        import numpy as np
        import tvm
        from tvm.contrib import graph_executor
        from tvm.driver.tvmc import TVMCPackage
        pkg = TVMCPackage(sys.argv[1])
        m = graph_executor.create(pkg.graph, tvm.runtime.load_module(pkg.lib_path), tvm.cpu(0))
        if pkg.params:
            m.load_params(pkg.params)
        m.set_input("x", np.load(sys.argv[2]))
        m.run()
        np.save(sys.argv[3], m.get_output(0).numpy())
        """, out, _save_npy(tmp_path / "x.npy", INPUTS["x"]), tmp_path / "y.npy")
    assert_same_outputs(reference_outputs(model, INPUTS), [np.load(tmp_path / "y.npy")])


@pytest.mark.parametrize("parallel", [False, True], ids=["chain", "parallel"])
def test_eqsat_pass_in_sequential(tmp_path, parallel):
    model = qdq_model(tmp_path / "qdq.onnx", parallel=parallel)
    saved = tmp_path / "opt.json"
    proc = run_python("""
        import json, sys, warnings
        import onnx, tvm
        from tvm import relay
        from relay_eqsat.passes import EqSatPass
        mod, params = relay.frontend.from_onnx(onnx.load(sys.argv[1]), shape={"x": [1, 16]},
                                               freeze_params=True)
        eqsat = EqSatPass(check_runtime="off", calibrate="off", min_gain=0.0)  # deciding without timing
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a pass that gave up would warn
            with tvm.transform.PassContext(opt_level=3):
                out = tvm.transform.Sequential([relay.transform.InferType(), eqsat])(mod)
        open(sys.argv[2], "w").write(tvm.ir.save_json(out))
        print(json.dumps({"changed": bool(eqsat.last_report["changed"])}))
        """, model, saved)
    changed = json.loads(proc.stdout.strip().splitlines()[-1])["changed"]
    # the chain's dense-dense fold is clearly cheaper; merging the parallel pair is marginal
    assert changed or parallel
    optimized = tvm.ir.load_json(saved.read_text())
    assert_same_outputs(reference_outputs(model, INPUTS), run(build(optimized), INPUTS))


def _save_npy(path, value):
    np.save(path, value)
    return path


def _calls(func):
    found = []
    relay.analysis.post_order_visit(func, lambda e: found.append(e) if isinstance(e, relay.Call) else None)
    return found


# -- 0-d values round trip exactly ---------------------------------------------------------------

def test_zero_d_constants_and_params_round_trip():
    x = relay.var("x", shape=(), dtype="float32")
    y = relay.var("y", shape=(3,), dtype="float32")
    c = relay.const(np.array(2.5, np.float32))
    func = relay.Function([x, y], relay.add(relay.multiply(x, c), relay.exp(y)))
    g = from_relay(func)
    assert g[g.inputs[0]].type == TensorType((), "float32")
    assert [v.shape for v in g.constants.values()] == [()]
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(to_relay(g)))
    assert tvm.ir.structural_equal(mod["main"].checked_type,
                                   relay.transform.InferType()(tvm.IRModule.from_expr(func))["main"].checked_type)
    inputs = {"x": np.array(1.5, np.float32), "y": np.arange(3, dtype=np.float32)}
    ref = run(build(func), inputs)
    assert ref[0].shape == (3,)
    assert_same_outputs(ref, run(build(mod), inputs))


def test_class_token_take_keeps_its_rank():
    """ViT's head: ``take(x, 0, axis=1)`` with a 0-d index, then dense. With the
    index rebuilt as [1] the program's output became [1, 1, 10], not [1, 10]."""
    x = relay.var("x", shape=(1, 5, 8), dtype="float32")
    w = relay.const(np.random.default_rng(0).standard_normal((10, 8)).astype(np.float32))
    token = relay.take(x, relay.const(np.array(0, np.int32)), axis=1)
    func = relay.Function([x], relay.nn.dense(token, w))
    g = from_relay(func)
    assert any(n.op == "opaque" and n.attrs["name"] == "take" for n in g.nodes)
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(to_relay(g)))
    assert [int(d) for d in mod["main"].checked_type.ret_type.shape] == [1, 10]
    inputs = {"x": np.random.default_rng(1).standard_normal((1, 5, 8)).astype(np.float32)}
    assert_same_outputs(run(build(func), inputs), run(build(mod), inputs))


# -- the type check before Relay is built ------------------------------------------------------------

def _qdq_graph(tmp_path) -> TensorGraph:
    mod, params = load_relay(qdq_model(tmp_path / "qdq.onnx", parallel=False))
    return from_relay(mod).compact()


def _replace(g: TensorGraph, i: int, node: Node) -> TensorGraph:
    g.nodes[i] = node
    return g


def test_check_types_accepts_the_frontend_graph(tmp_path):
    g = _qdq_graph(tmp_path)
    check_types(g)
    assert any(n.op == "opaque" for n in g.nodes)


def test_check_types_refuses_changed_opaque_inputs(tmp_path):
    """The failure the 0-d bug caused, made on the graph side: qnn.quantize's
    scalar scale replaced by a [1] tensor (a consistent constant node, so only
    the opaque call's input types can tell)."""
    g = _qdq_graph(tmp_path)
    i = next(i for i, n in enumerate(g.nodes)
             if n.op == "constant" and n.type == TensorType((), "float32"))
    name = g.nodes[i].attrs["name"]
    g.constants[name] = g.constants[name].reshape(1)
    _replace(g, i, Node("constant", (), g.nodes[i].attrs.replace(type=TensorType((1,), "float32")),
                        TensorType((1,), "float32")))
    with pytest.raises(IllTypedGraph, match="qnn.quantize.*typed for"):
        to_relay(g)


def test_check_types_refuses_wrong_stored_types(tmp_path):
    g = _qdq_graph(tmp_path)
    i = next(i for i, n in enumerate(g.nodes) if n.op == "nn.relu")
    _replace(g, i, Node("nn.relu", g.nodes[i].inputs, g.nodes[i].attrs, TensorType((1, 1, 16), "float32")))
    with pytest.raises(IllTypedGraph, match=r"nn.relu.*stored type float32\[1, 1, 16\]"):
        to_relay(g)
    # a constant whose value disagrees with its node's type
    g = _qdq_graph(tmp_path)
    name = next(n.attrs["name"] for n in g.nodes if n.op == "constant" and n.type.shape == (16, 16))
    g.constants[name] = g.constants[name][:8]
    with pytest.raises(IllTypedGraph, match="value float32"):
        check_types(g)
    # a var whose type is not the signature's
    g = _qdq_graph(tmp_path)
    with pytest.raises(IllTypedGraph, match="signature says"):
        check_types(g, signature=[("x", TensorType((2, 16), "float32"))])


def test_pass_keeps_the_module_when_the_optimizer_returns_an_ill_typed_graph(tmp_path):
    """In a subprocess: should the check let the graph through, TVM could crash."""
    model = qdq_model(tmp_path / "qdq.onnx", parallel=False)
    proc = run_python("""
        import sys, warnings
        import onnx, tvm
        from tvm import relay
        from relay_eqsat.graph import Node, TensorType
        from relay_eqsat.passes import EqSatPass
        from relay_eqsat.passes.relay import eqsat_pass
        mod, _ = relay.frontend.from_onnx(onnx.load(sys.argv[1]), shape={"x": [1, 16]}, freeze_params=True)
        mod = relay.transform.InferType()(mod)

        def broken(graph, options):  # the scalar scale made [1]: qnn.quantize would not type-check
            g = graph.compact()
            i = next(i for i, n in enumerate(g.nodes)
                     if n.op == "constant" and n.type == TensorType((), "float32"))
            t = TensorType((1,), "float32")
            g.constants[g.nodes[i].attrs["name"]] = g.constants[g.nodes[i].attrs["name"]].reshape(1)
            g.nodes[i] = Node("constant", (), g.nodes[i].attrs.replace(type=t), t)
            return g, {"changed": True, "reason": "test", "cost_before": 2.0, "cost_after": 1.0}

        eqsat_pass.optimize = broken
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = tvm.transform.Sequential([EqSatPass()])(mod)
        assert tvm.ir.structural_equal(out, mod), "module changed"
        messages = [str(w.message) for w in caught]
        assert any("IllTypedGraph" in m and "left unchanged" in m for m in messages), messages
        print("ok")
        """, model)
    assert proc.stdout.strip().endswith("ok")
