"""A depthwise convolution's zero padding written by the 1x1 convolution that produces its input.

TOPI's x86 ``depthwise_conv2d_NCHWc`` copies its padded input in a stage of its own, a pass over a
tensor that at 56-112 columns does not fit in L2; TVM folds an explicit ``nn.pad`` back into the
convolution (FoldExplicitPadding), so writing the pad apart changes nothing. The producing 1x1
convolution can write the padding instead: given padding ``q`` it computes ``q`` more rows and
columns on each side, all zero before its bias (its window there reads only padding); the element-wise
ops between the two run on them too, and a constant 0/1 mask multiplied in after them, fused into
the producer's kernel, sets them back to zero. The depthwise convolution then reads that tensor with
no padding of its own. Outputs are the same (the border is exactly zero: the ops allowed between map
finite values to finite ones). One depthwise 3x3 with its SiLU, NCHW16c, untuned, on a
Sapphire-Rapids-class CPU took 0.38-0.65 of its time once its input was padded beforehand; the
expansion + depthwise pair 0.74-0.91 at 56-112 columns, and 0.97-1.01 at 28, so maps narrower than
:data:`MIN_COLUMNS` keep their padding (docs/design-notes.md, "On AVX-512 the distance is TVM's
depthwise convolutions").

:func:`producer_pads` finds the pairs on the pass's graph; ``to_relay`` writes them. Measured on x86
only; on other targets the runtime check judges the program as it judges any.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from relay_eqsat.cost.inlining import fusion_cuts
from relay_eqsat.cost.simd import conv_kind
from relay_eqsat.graph import TensorGraph
from relay_eqsat.types import TensorType

#: the ops that may stand between the producer and the depthwise convolution: element-wise, each
#: mapping finite values to finite ones (so the mask's zeros stay zeros)
ELEMENT_WISE = frozenset({"nn.bias_add", "add", "subtract", "multiply", "maximum", "minimum", "negative",
                          "nn.relu", "clip", "nn.leaky_relu", "sigmoid", "fast_sigmoid", "tanh", "fast_tanh"})
#: the least rows and columns of the producer's output where the padding moves
MIN_COLUMNS = 56


@dataclass(frozen=True)
class ProducerPad:
    """The padding ``pad`` (top, left, bottom, right) of one depthwise convolution, written by the 1x1
    convolution ``producer``, through the element-wise ops ending in ``last`` (the depthwise input)."""

    producer: int
    last: int
    pad: tuple

    def mask(self, shape: Sequence[int], dtype: str) -> np.ndarray:
        """1 on the producer's own output, 0 on the rows and columns it adds, (1, 1, H', W')."""
        top, left, bottom, right = self.pad
        m = np.zeros((1, 1, shape[2] + top + bottom, shape[3] + left + right), dtype=dtype)
        m[:, :, top:top + shape[2], left:left + shape[3]] = 1
        return m


def _kind(graph: TensorGraph, n) -> str | None:
    """``conv_kind`` of ``n`` (the fp32 NCHW convolutions TVM's x86 schedules block by channels),
    OIHW weights only."""
    if n.attrs.get("kernel_layout", "OIHW") != "OIHW" or not isinstance(n.type, TensorType):
        return None
    return conv_kind(n.op, n.attrs, [graph[j].type for j in n.inputs])


def _depthwise(graph: TensorGraph, n) -> bool:
    return _kind(graph, n) == "depthwise" and any(n.attrs["padding"])


def _pointwise_producer(graph: TensorGraph, n) -> bool:
    if _kind(graph, n) != "conv":
        return False
    w = graph[n.inputs[1]].type.shape
    return (tuple(w[2:]) == (1, 1) and tuple(n.attrs["strides"]) == (1, 1)
            and not any(n.attrs["padding"]) and n.type.shape[2] >= MIN_COLUMNS and n.type.shape[3] >= MIN_COLUMNS)


def _per_channel(n, t) -> bool:
    """Whether a constant operand ``t`` of the element-wise node ``n`` is the same over every row and
    column of its NCHW operand: a bias along axis 1, or a constant whose last two dims are 1."""
    if n.op == "nn.bias_add":
        return n.attrs.get("axis") == 1
    return isinstance(t, TensorType) and all(d == 1 for d in tuple(t.shape)[-2:])


def _chain(graph: TensorGraph, last: int, constant: Sequence[bool], skip) -> tuple[int, frozenset] | None:
    """(the producer, the element-wise nodes from it to ``last``) where ``last`` is a qualifying 1x1
    convolution's output, directly or through :data:`ELEMENT_WISE` ops of its shape whose other
    operands are per-channel constants; None otherwise."""
    shape = graph[last].type.shape
    chain: set[int] = set()
    producer = None
    stack = [last]
    while stack:
        j = stack.pop()
        m = graph[j]
        if _pointwise_producer(graph, m) and m.type.shape == shape and j not in skip:
            if producer not in (None, j):
                return None  # two producers
            producer = j
        elif m.op in ELEMENT_WISE and m.type.shape == shape and j not in skip:
            if j in chain:
                continue
            chain.add(j)
            for k in m.inputs:
                if not constant[k]:
                    stack.append(k)
                elif not _per_channel(m, graph[k].type):
                    return None
        else:
            return None
    return None if producer is None else (producer, frozenset(chain))


def producer_pads(graph: TensorGraph, live: Sequence[int], constant: Sequence[bool],
                  skip: Mapping[int, object] | None = None) -> dict[int, ProducerPad]:
    """The depthwise convolutions of ``graph``'s ``live`` nodes whose padding their producer writes,
    by node id: a depthwise convolution (fp32 NCHW, one channel a group, padded) whose input is a 1x1,
    stride-1, unpadded convolution of at least :data:`MIN_COLUMNS` rows and columns, directly or
    through element-wise ops (:func:`_chain`), none of which anything else reads. ``skip``: nodes
    left as they are (``to_relay``'s fusion cuts)."""
    skip = skip or {}
    users: dict[int, list[int]] = {}
    for i in live:
        for j in graph[i].inputs:
            users.setdefault(j, []).append(i)
    found: dict[int, ProducerPad] = {}
    for d in live:
        n = graph[d]
        if d in skip or not _depthwise(graph, n):
            continue
        last = n.inputs[0]
        found_chain = _chain(graph, last, constant, skip)
        if found_chain is None:
            continue
        producer, chain = found_chain
        inside = chain | {producer}
        if all(u in inside or u == d for j in inside for u in users.get(j, ())):
            found[d] = ProducerPad(producer, last, tuple(n.attrs["padding"]))
    return found


def moved_paddings(graph: TensorGraph) -> int:
    """How many depthwise convolutions of ``graph`` ``to_relay`` writes with their padding moved."""
    live, constant = graph.reachable(), graph.is_constant()
    return len(producer_pads(graph, live, constant, fusion_cuts(graph, live, constant)))
