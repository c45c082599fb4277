"""TVM's FoldScaleAxis folds a scale computed at run time (a squeeze-and-excitation gate, a
hardswish before a batch-1 dense) into the weight, which is then scaled and re-packed on every
inference; ``to_relay`` guards such scales with a ``copy``, the frontend reads it back as the
identity, and the pass hands back its form of a program that has them even when nothing cheaper
is found."""
from __future__ import annotations

import re

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
from tvm import relay  # noqa: E402

from relay_eqsat.passes import EqSatPass, from_relay  # noqa: E402
from relay_eqsat.passes.relay.backend import to_relay  # noqa: E402
from relay_eqsat.passes.runtime.build import build, output_error, random_inputs, run  # noqa: E402
from relay_eqsat.passes.relay.scale_guard import channel_axis, is_axis_scale, runtime_scaled_weights  # noqa: E402
from relay_eqsat.passes.runtime.target import host_target  # noqa: E402

pytestmark = pytest.mark.tvm

#: the pass trusting a cost model that finds nothing cheaper (this file is about what it returns)
NOTHING_CHEAPER = dict(search="none", check_runtime="off", calibrate="off", min_gain=0.0, verify=True)
RNG = np.random.default_rng(0)


def _const(*shape):
    return relay.const((RNG.standard_normal(shape) * 0.1).astype("float32"))


def _hardswish(x):
    """The ONNX frontend's HardSwish: x * clip(x / 6 + 0.5, 0, 1)."""
    gate = relay.clip(relay.add(relay.multiply(x, relay.const(np.float32(1 / 6))), relay.const(np.float32(0.5))), 0, 1)
    return relay.multiply(x, gate)


def _se_model(gate_shared=False, head=True, size=4):
    """A squeeze-and-excitation block (gate computed from the input) before a 1x1 projection, then a
    hardswish and a batch-1 dense head: two run-time scales TVM folds into weights (at ``size`` 4
    the projection's weight, 48 x 32, is larger than the 32 x 4 x 4 feature map it scales)."""
    x = relay.var("x", shape=(1, 32, size, size))
    s = relay.nn.global_avg_pool2d(x)
    s = relay.nn.relu(relay.nn.conv2d(s, _const(8, 32, 1, 1), kernel_size=(1, 1), channels=8))
    s = relay.sigmoid(relay.nn.conv2d(s, _const(32, 8, 1, 1), kernel_size=(1, 1), channels=32))
    gated = relay.multiply(x, s)
    y = relay.nn.conv2d(gated, _const(48, 32, 1, 1), kernel_size=(1, 1), channels=48)
    if gate_shared:  # the gated tensor read twice: a copy would be a kernel of its own
        y = relay.concatenate([y, gated], axis=1)
    out = y
    if head:
        h = relay.nn.batch_flatten(relay.nn.global_avg_pool2d(y))
        out = relay.nn.dense(_hardswish(h), _const(10, 80 if gate_shared else 48))
    return relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], out)))


def _weight_scaled_at_run_time(mod) -> int:
    """Fused functions of TVM's optimized ``mod`` that multiply a weight before re-packing it."""
    with tvm.transform.PassContext(opt_level=3):
        opt, _ = relay.optimize(mod, target=host_target())
    text = opt.astext(show_meta_data=False)
    fns = re.findall(r"fn \(.*?\n  \}", text, re.S)
    return sum(1 for f in fns if "multiply(" in f and "layout_transform(" in f
               and re.search(r'dst_layout="(OIHW|NC)\d', f))


def test_is_axis_scale():
    assert is_axis_scale((1, 32, 1, 1), (1, 32, 8, 8), 1) and is_axis_scale((32, 1, 1), (1, 32, 8, 8), 1)
    assert is_axis_scale((1, 1280), (1, 1280), -1) and is_axis_scale((1280,), (1, 1280), -1)
    assert not is_axis_scale((1, 32, 8, 8), (1, 32, 8, 8), 1)  # x * sigmoid(x) on a feature map
    assert not is_axis_scale((4, 1280), (4, 1280), -1)  # a batch of rows: per element, not per channel
    assert not is_axis_scale((1, 1, 1, 1, 1), (1, 32, 8, 8), 1)
    assert channel_axis("nn.conv2d", "NCHW") == 1 and channel_axis("nn.conv2d", "NHWC") == 3
    assert channel_axis("nn.dense", None) == -1


def test_an_nhwc_gate_counts_on_its_channel_axis_and_is_not_claimed_when_unguarded():
    """The count reads an NHWC convolution's channel axis; the frontend keeps that convolution opaque,
    so its form has the same scale: the pass does not offer it as a fix."""
    x = relay.var("x", shape=(1, 4, 4, 32))
    s = relay.sigmoid(relay.mean(x, axis=[1, 2], keepdims=True))  # [1, 1, 1, 32]
    y = relay.nn.conv2d(relay.multiply(x, s), _const(1, 1, 32, 48), kernel_size=(1, 1), channels=48,
                        data_layout="NHWC", kernel_layout="HWIO")
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], y)))
    assert runtime_scaled_weights(mod) == 1
    form = relay.transform.InferType()(tvm.IRModule.from_expr(to_relay(from_relay(mod))))
    assert runtime_scaled_weights(form) == 1
    eqsat = EqSatPass(**NOTHING_CHEAPER)
    assert eqsat(mod).same_as(mod) and "scale_guards" not in eqsat.last_report


def test_tvm_scales_weights_at_run_time_and_the_guarded_form_does_not():
    mod = _se_model()
    assert runtime_scaled_weights(mod) == 2
    assert _weight_scaled_at_run_time(mod) >= 1  # what this TVM does with the input
    ours = relay.transform.InferType()(tvm.IRModule.from_expr(to_relay(from_relay(mod))))
    assert ours.astext().count("copy(") == 2 and runtime_scaled_weights(ours) == 0
    assert _weight_scaled_at_run_time(ours) == 0
    inputs = random_inputs({"x": ((1, 32, 4, 4), "float32")})
    assert output_error(run(build(mod), inputs), run(build(ours), inputs))[0] <= 1e-6
    # read back, the copies are the identity: the same graph again
    again = from_relay(ours)
    assert again.op_counts() == from_relay(mod).op_counts()


def test_no_guard_where_tvm_folds_nothing_or_a_copy_would_cost_a_kernel():
    x = relay.var("x", shape=(1, 32, 8, 8))
    w = _const(16, 32, 1, 1)
    cases = {
        "constant scale": relay.multiply(x, _const(1, 32, 1, 1)),
        "silu on a feature map": relay.multiply(x, relay.sigmoid(x)),
    }
    for name, data in cases.items():
        mod = relay.transform.InferType()(tvm.IRModule.from_expr(
            relay.Function([x], relay.nn.conv2d(data, w, kernel_size=(1, 1), channels=16))))
        assert runtime_scaled_weights(mod) == 0, name
        assert "copy(" not in to_relay(from_relay(mod)).astext(), name
    shared = _se_model(gate_shared=True, head=False)
    assert runtime_scaled_weights(shared) == 0 and "copy(" not in to_relay(from_relay(shared)).astext()


def test_a_scale_of_more_values_than_the_weight_is_left_to_fold_scale_axis():
    """At 16 x 16 the gate scales 8,192 values and the projection's weight has 1,536: TVM's form,
    the weight scaled and re-packed, moves fewer, so no copy guards it (the dense head's scale of 48
    values for a 10 x 48 weight still is guarded), and the outputs are the input's."""
    mod = _se_model(size=16)
    assert runtime_scaled_weights(mod) == 1
    ours = relay.transform.InferType()(tvm.IRModule.from_expr(to_relay(from_relay(mod))))
    assert ours.astext().count("copy(") == 1 and runtime_scaled_weights(ours) == 0
    inputs = random_inputs({"x": ((1, 32, 16, 16), "float32")})
    assert output_error(run(build(mod), inputs), run(build(ours), inputs))[0] <= 1e-6


def test_pass_returns_its_form_when_tvm_would_scale_weights():
    mod = _se_model()
    eqsat = EqSatPass(**NOTHING_CHEAPER)
    out = eqsat(mod)
    report = eqsat.last_report
    assert report["changed"] and not out.same_as(mod)
    assert report["scale_guards"] == [2, 0] and "FoldScaleAxis" in report["reason"]
    assert report["verify_error"] <= 1e-6 and runtime_scaled_weights(out) == 0
    # a program without such scales goes on untouched
    plain = _se_model(gate_shared=True, head=False)
    eqsat(plain)
    assert not eqsat.last_report["changed"] and "scale_guards" not in eqsat.last_report
