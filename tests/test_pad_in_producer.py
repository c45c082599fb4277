"""A depthwise convolution's zero padding written by the 1x1 convolution producing its input
(relay_eqsat.passes.relay.pad_in_producer): where it moves, where it does not, and the same outputs,
NaN and infinity included."""
from __future__ import annotations

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
from tvm import relay  # noqa: E402

from relay_eqsat.graph import TensorGraph  # noqa: E402
from relay_eqsat.passes import EqSatPass, from_relay  # noqa: E402
from relay_eqsat.passes.relay.backend import graph_to_module  # noqa: E402
from relay_eqsat.passes.relay.pad_in_producer import MIN_COLUMNS, moved_paddings  # noqa: E402
from relay_eqsat.passes.runtime.build import build, run  # noqa: E402

CONV = dict(strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1, data_layout="NCHW",
            kernel_layout="OIHW", out_dtype="")


def block(act="silu", size=MIN_COLUMNS, k=3, stride=1, producer=1, spatial_const=False, shared=False):
    """x -> conv (producer x producer) + bias -> act -> depthwise k x k (padding k // 2) [-> + the act's
    output, when ``shared``]: an MBConv expansion and its depthwise convolution."""
    rng = np.random.default_rng(0)
    g = TensorGraph()
    x = g.var("x", (1, 8, size, size))
    c = 32
    w1 = g.const((rng.standard_normal((c, 8, producer, producer)) * 0.3).astype("float32"))
    pad = producer // 2
    y = g.add("nn.conv2d", (x, w1), dict(CONV, padding=(pad,) * 4))
    y = g.add("nn.bias_add", (y, g.const(rng.standard_normal(c).astype("float32"))), dict(axis=1))
    if spatial_const:  # a constant that differs over rows and columns
        y = g.add("add", (y, g.const(rng.standard_normal((size, size)).astype("float32"))))
    if act == "silu":
        y = g.add("multiply", (y, g.add("fast_sigmoid", (y,))))
    else:  # ReLU6
        y = g.add("clip", (y,), dict(a_min=0.0, a_max=6.0))
    wd = g.const(rng.standard_normal((c, 1, k, k)).astype("float32"))
    z = g.add("nn.conv2d", (y, wd), dict(CONV, strides=(stride, stride), padding=(k // 2,) * 4, groups=c))
    if shared:
        z = g.add("add", (g.add("nn.max_pool2d", (y,), dict(pool_size=(stride, stride), strides=(stride, stride),
                                                             padding=(0, 0, 0, 0), dilation=(1, 1),
                                                             layout="NCHW", ceil_mode=False)), z))
    g.set_output(z)
    return g


def calls(mod, name):
    found = []

    def visit(e):
        if isinstance(e, relay.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name == name:
            found.append(e)
    relay.analysis.post_order_visit(mod["main"], visit)
    return found


def check_outputs(g, inputs=None):
    inputs = inputs or g.random_inputs()
    want = g.evaluate(inputs)
    got = run(build(graph_to_module(g)), inputs)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.nanmax(np.abs(want[np.isfinite(want)])),
                               equal_nan=True)


@pytest.mark.parametrize("act,k,stride", [("silu", 3, 1), ("silu", 3, 2), ("relu6", 5, 1), ("relu6", 3, 2)])
def test_the_producer_writes_the_padding_and_the_outputs_are_the_same(act, k, stride):
    g = block(act, k=k, stride=stride)
    assert moved_paddings(g) == 1
    mod = graph_to_module(g)
    producer, depthwise = sorted(calls(mod, "nn.conv2d"), key=lambda c: int(c.attrs.groups))
    assert int(depthwise.attrs.groups) == 32 and [int(p) for p in depthwise.attrs.padding] == [0, 0, 0, 0]
    assert [int(p) for p in producer.attrs.padding] == [k // 2] * 4
    mask = [c for c in calls(mod, "multiply") if isinstance(c.args[1], relay.Constant)
            and c.args[1].data.shape == (1, 1, MIN_COLUMNS + k // 2 * 2, MIN_COLUMNS + k // 2 * 2)]
    assert len(mask) == 1 and mask[0].args[1].data.numpy().sum() == MIN_COLUMNS ** 2
    check_outputs(g)


def test_nan_and_infinity_in_the_input_give_what_they_gave():
    g = block("silu")
    inputs = g.random_inputs()
    x = inputs["x"]
    x[0, 3, 0, 0], x[0, 5, 0, MIN_COLUMNS - 1], x[0, 1, 7, 9] = np.nan, np.inf, -np.inf
    check_outputs(g, inputs)


@pytest.mark.parametrize("case", ["narrow", "3x3 producer", "spatial constant", "read elsewhere"])
def test_the_padding_stays_where_the_producer_cannot_write_it(case):
    g = {"narrow": lambda: block(size=MIN_COLUMNS // 2),
         "3x3 producer": lambda: block(producer=3),
         "spatial constant": lambda: block(spatial_const=True),
         "read elsewhere": lambda: block(shared=True, stride=2)}[case]()
    assert moved_paddings(g) == 0
    mod = graph_to_module(g)
    depthwise = [c for c in calls(mod, "nn.conv2d") if int(c.attrs.groups) == 32]
    assert [int(p) for p in depthwise[0].attrs.padding] == [1, 1, 1, 1]
    check_outputs(g)


def test_the_pass_returns_its_form_when_only_the_padding_moves(monkeypatch):
    from relay_eqsat.passes.relay import pad_in_producer

    g = block("relu6")
    with monkeypatch.context() as m:  # the input as a user hands it over: the depthwise convolution pads itself
        m.setattr(pad_in_producer, "MIN_COLUMNS", 10 ** 9)
        user = graph_to_module(g)
    assert [int(p) for c in calls(user, "nn.conv2d") if int(c.attrs.groups) == 32 for p in c.attrs.padding] == [1] * 4
    assert moved_paddings(from_relay(user)) == 1
    eqsat = EqSatPass(search="none", check_runtime="off", calibrate="off", min_gain=0.0, verify=True)
    out = eqsat(user)
    report = eqsat.last_report
    assert report["changed"] and report["producer_pads"] == 1 and "depthwise" in report["reason"]
    assert report["verify_error"] <= 1e-5
    assert [int(p) for c in calls(out, "nn.conv2d") if int(c.attrs.groups) == 32 for p in c.attrs.padding] == [0] * 4
    # a program with nothing to move goes on untouched
    narrow = graph_to_module(block("relu6", size=MIN_COLUMNS // 2))
    assert eqsat(narrow).same_as(narrow) and "producer_pads" not in eqsat.last_report
