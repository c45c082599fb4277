"""ShuffleNet's channel shuffle as an interleave (rule ``channel-shuffle-interleave``, issue 15).

torchvision's ShuffleNet-v2 shuffles the channels of ``concat(x1, branch)`` as
``reshape [n, 2, c, h, w] -> transpose (0, 2, 1, 3, 4) -> reshape [n, 2c, h,
w]``, and TVM's fused kernel computes every element's transposed index. The
rule writes it as the two halves interleaved (a unit axis after each one's
channels, concatenated on it); its ``example`` lines are verified numerically
by tests/test_rules.py. Here: which shuffles it matches (the core, no TVM), and
the pass end to end on a ShuffleNet unit's tail in the frontend's form (no
transpose left, the same numbers).
"""
from __future__ import annotations

import numpy as np
import pytest

from relay_eqsat.cost import CostModel
from relay_eqsat.egraph import EGraph
from relay_eqsat.graph import TensorGraph
from relay_eqsat.rewrite import Matcher, apply_matches, load_rules

RULE = next(r for r in load_rules() if r.name == "channel-shuffle-interleave")
TRUST = dict(check_runtime="off", calibrate="off", min_gain=0.0, search="tensat", final_extractor="greedy-ocf",
             node_limit=2000)


def _shuffle(g: TensorGraph, x: int, n: int, c: int, h: int, w: int, groups: int = 2, axes=(0, 2, 1, 3, 4)) -> int:
    r = g.add("reshape", [x], {"newshape": (n, groups, c // groups, h, w)})
    t = g.add("transpose", [r], {"axes": tuple(axes)})
    return g.add("reshape", [t], {"newshape": (n, c, h, w)})


def _matches(halves=((1, 4, 3, 3), (1, 4, 3, 3)), groups=2, axes=(0, 2, 1, 3, 4)) -> int:
    g = TensorGraph()
    a = g.add("nn.relu", [g.var("a", halves[0])])
    b = g.add("nn.relu", [g.var("b", halves[1])])
    cat = g.add("concatenate", [a, b], {"axis": 1})
    n, _, h, w = halves[0]
    g.set_output(_shuffle(g, cat, n, halves[0][1] + halves[1][1], h, w, groups, axes))
    eg = EGraph()
    eg.add_graph(g)
    m = Matcher([RULE])
    return apply_matches(eg, RULE, m.matches(RULE, m.search(eg)))


def test_the_rule_is_shipped_with_examples():
    assert RULE.examples


def test_matches_the_shuffle_of_two_concatenated_halves():
    assert _matches() == 1
    assert _matches(((2, 6, 5, 7), (2, 6, 5, 7))) == 1


@pytest.mark.parametrize("halves,groups,axes", [
    (((1, 4, 3, 3), (1, 2, 3, 3)), 2, (0, 2, 1, 3, 4)),  # halves of different widths: no interleave
    (((1, 6, 3, 3), (1, 6, 3, 3)), 3, (0, 2, 1, 3, 4)),  # three groups over two pieces
    (((1, 4, 3, 3), (1, 4, 3, 3)), 2, (0, 1, 2, 4, 3)),  # another transpose
])
def test_leaves_other_reshapes_and_transposes_alone(halves, groups, axes):
    assert _matches(halves, groups, axes) == 0


class SlowTranspose(CostModel):
    """The analytic cost with a transpose 100x dearer (what TVM's fused kernel pays for the
    shuffle's index arithmetic, far above the copy the analytic model sees)."""

    def __init__(self):
        super().__init__("analytic")

    def op_cost(self, op, attrs, input_types, out_type, all_inputs_constant=False):
        cost = super().op_cost(op, attrs, input_types, out_type, all_inputs_constant)
        return cost * 100 if op == "transpose" else cost


def _unit_tail(c: int = 8, hw: int = 6):
    """A ShuffleNet unit's tail as TVM's ONNX frontend gives it: x split in halves, the second
    through a 1x1 convolution and relu, concatenated with the first, shuffled, then a 1x1
    convolution (the next unit's)."""
    import tvm
    from tvm import relay

    rng = np.random.default_rng(0)
    x = relay.var("x", shape=(1, c, hw, hw), dtype="float32")
    half = c // 2
    x1 = relay.strided_slice(x, [0, 0, 0, 0], [1, half, hw, hw])
    x2 = relay.strided_slice(x, [0, half, 0, 0], [1, c, hw, hw])
    w1 = relay.const(rng.standard_normal((half, half, 1, 1)).astype("float32"))
    branch = relay.nn.relu(relay.nn.conv2d(x2, w1, channels=half, kernel_size=(1, 1)))
    cat = relay.concatenate([x1, branch], axis=1)
    shuffled = relay.reshape(relay.transpose(relay.reshape(cat, (1, 2, half, hw, hw)), (0, 2, 1, 3, 4)),
                             (1, c, hw, hw))
    w2 = relay.const(rng.standard_normal((c, c, 1, 1)).astype("float32"))
    out = relay.nn.conv2d(shuffled, w2, channels=c, kernel_size=(1, 1))
    return relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], out)))




@pytest.mark.tvm
def test_pass_interleaves_the_shuffle_with_the_same_numbers():
    pytest.importorskip("tvm")
    from relay_eqsat.passes import EqSatPass
    from relay_eqsat.passes.runtime.build import build, run
    from relay_eqsat.passes.relay.simplify_copies import op_calls

    mod = _unit_tail()
    assert "transpose" in op_calls(mod)
    p = EqSatPass(**TRUST, cost=SlowTranspose())
    out = p(mod)
    report = p.last_report
    assert report["changed"], report.get("reason")
    assert report["rules_fired"]["channel-shuffle-interleave"] >= 1
    assert "transpose" not in op_calls(out) and "concatenate" in op_calls(out)
    inputs = {"x": np.random.default_rng(1).standard_normal((1, 8, 6, 6)).astype("float32")}
    ref = run(build(mod), inputs)[0]
    got = run(build(out), inputs)[0]
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(ref).max())))
