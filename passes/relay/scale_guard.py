"""Keep TVM's FoldScaleAxis from scaling a weight at run time.

``relay.build`` runs FoldScaleAxis at opt_level 3: a per-channel scale on a
convolution's or dense layer's input, ``conv2d(x * s, W)``, becomes
``conv2d(x, W * s)``. With a constant ``s`` that is folded once, at build
time. This TVM folds it when ``s`` is computed at run time too: a
squeeze-and-excitation gate (MobileNet-v3, EfficientNet, RegNet-Y), or the
``x * clip(x / 6 + 0.5, 0, 1)`` of a hardswish before a batch-1 dense layer.
The weight is then multiplied by ``s`` and re-packed into its blocked layout
on every inference: in torchvision's MobileNet-v3-large, 10.8% of the time at
opt_level 3 went to the 1280 -> 1000 head's weight so treated, 4% to the SE
projections' (Zen 4, one thread); guarded, the model ran 1.16x faster,
RegNet-Y-400MF 1.11x (``bench/simplify_copies.py --onnx ...``, docs/history.md).

Where the weight is smaller than the scaled data (the projection after an SE
gate at a large feature map: EfficientNet-B0's first blocks scale 32 x 112 x
112 values for a 16 x 32 weight), scaling the weight and re-packing it is the
cheaper kernel, and the scale is left to FoldScaleAxis: under its tuned log
EfficientNet-B0 so guarded (11 of its 32 scales left unguarded) ran 0.955 of
the time of every scale guarded (13 of 15 paired rounds, Zen 3; every scale
unguarded: 0.980).

A ``copy`` between the scale and the weighted op hides the scale from
FoldScaleAxis (it only looks through the ops it knows) and costs nothing: it
fuses into the multiply's element-wise kernel (not where something else reads
the scaled tensor too: there the copy would be a kernel of its own, and no
guard is put). ``relay.to_relay`` puts one there
(:func:`guards`), the frontend reads it back as the identity, and the pass
offers its input in this form when the input has scales to guard
(:func:`runtime_scaled_weights`), for the runtime check to judge.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Sequence

import tvm
from tvm import relay

from relay_eqsat.graph import TensorGraph, TensorType

#: the weighted ops whose input scale FoldScaleAxis folds into the weight
WEIGHTED = ("nn.conv2d", "nn.dense")


def channel_axis(op: str, data_layout: str | None) -> int:
    """The axis of a weighted op's data input that its weight reduces over: a convolution's ``C`` of
    its data layout (NCHW: 1, NHWC: 3), a dense layer's last."""
    if op == "nn.conv2d":
        return (data_layout or "NCHW").index("C")
    return -1


def is_axis_scale(scale: Sequence[int], data: Sequence[int], axis: int) -> bool:
    """Whether a ``scale`` of this shape multiplies ``data`` per channel of ``axis`` (every other
    extent 1 once broadcast: what FoldScaleAxis folds into the weight)."""
    if len(scale) > len(data):
        return False
    axis %= len(data)
    full = [1] * (len(data) - len(scale)) + list(scale)
    return all(e == 1 for k, e in enumerate(full) if k != axis)


def _folded(op: str, data_layout: str | None, data: Sequence[int],
            operands: Sequence[tuple[Sequence[int] | None, bool]]) -> bool:
    """Whether FoldScaleAxis folds a ``multiply`` of ``operands`` ((shape or None, constant) each),
    read by nothing but the weighted ``op``'s data input of shape ``data``, into its weight: every
    operand computed at run time, one of them per channel."""
    if op not in WEIGHTED or not data or any(const for _, const in operands):
        return False
    axis = channel_axis(op, data_layout)
    return any(shape is not None and is_axis_scale(shape, data, axis) for shape, _ in operands)


def dearer_scaled(data: Sequence[int], weight: Sequence[int] | None) -> bool:
    """Whether scaling the ``weight`` (and re-packing it) on every inference moves at least as many
    values as scaling the ``data`` does: where it does not, FoldScaleAxis's form is the cheaper one."""
    return weight is None or math.prod(weight) >= math.prod(data)


def guards(graph: TensorGraph, i: int, constant: Sequence[bool], readers: Counter) -> bool:
    """Whether node ``i``'s data input is a scale computed at run time that FoldScaleAxis would
    fold into its weight (``_folded``): a ``multiply`` nothing else reads, of data no larger than the
    weight (``dearer_scaled``)."""
    n = graph[i]
    if n.op not in WEIGHTED or len(n.inputs) < 2 or graph[n.inputs[0]].op != "multiply" or readers[n.inputs[0]] != 1:
        return False
    m = graph[n.inputs[0]]

    def shape(k):
        return graph[k].type.shape if isinstance(graph[k].type, TensorType) else None

    data = shape(n.inputs[0]) or ()
    return (_folded(n.op, n.attrs.get("data_layout"), data, [(shape(k), constant[k]) for k in m.inputs])
            and dearer_scaled(data, shape(n.inputs[1])))


def runtime_scaled_weights(mod: tvm.IRModule) -> int:
    """How many weighted ops of the typed ``mod``'s ``main`` FoldScaleAxis would scale at run time
    where that costs more than scaling their data (:func:`guards` on Relay)."""
    uses: Counter = Counter()
    calls = []

    def visit(e):
        if isinstance(e, relay.Call):
            calls.append(e)
        readers = e.args if isinstance(e, relay.Call) else e.fields if isinstance(e, relay.Tuple) else ()
        for a in readers:
            uses[a] += 1
    relay.analysis.post_order_visit(mod["main"], visit)

    def shape(e):
        t = e.checked_type
        return [int(d) for d in t.shape] if isinstance(t, relay.TensorType) else None

    def is_op(e, name):
        return isinstance(e, relay.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name == name

    return sum(1 for c in calls if isinstance(c.op, tvm.ir.Op) and len(c.args) > 1 and is_op(c.args[0], "multiply")
               and uses[c.args[0]] == 1
               and _folded(c.op.name, getattr(c.attrs, "data_layout", None), shape(c.args[0]) or (),
                           [(shape(a), isinstance(a, relay.Constant)) for a in c.args[0].args])
               and dearer_scaled(shape(c.args[0]) or (), shape(c.args[1])))
