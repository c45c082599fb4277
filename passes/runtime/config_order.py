"""Which configurations of a task tuning tries first: TVM's x86 convolution templates ranked by the
register tile each configuration gives the inner loop.

TVM's x86 convolution schedules (``conv2d_NCHWc.x86``, ``depthwise_conv2d_NCHWc.x86``) keep the
partial sums of an output tile in vector registers: ``tile_ow``'s inner factor columns (times
``tile_oh`` for 1x1 kernels), each ``ceil(oc_bn / lanes)`` registers wide, ``oc_bn`` the inner factor
of ``tile_oc``. A tile of more accumulators than fit beside the weight and the input spills in the
innermost loop (the untuned choice on AVX2: 28 columns of 16 registers), one of fewer than the FMA
pipeline's depth leaves it idle, an ``oc_bn`` that is not a multiple of the lanes leaves lanes empty,
and an ``ic_bn`` of 1 or 2 pays the reduction loop's overhead at every step. Random search spends
most of a small budget on such configurations; :func:`ranked` orders a task's space by the model
below (:func:`tile_score`), the one ``relay_eqsat.cost.simd`` prices untuned kernels with, so the
first trials go to tiles that fit. Other templates (dense, batch_matmul, ...) have no model here
and are searched at random.
"""
from __future__ import annotations

import math

from relay_eqsat.cost.simd import REGISTER_SPILL, simd_lanes, vector_registers

#: the templates :func:`ranked` has a model for
CONV_TEMPLATES = ("conv2d_NCHWc.x86", "depthwise_conv2d_NCHWc.x86")
#: independent accumulators the FMA units need to stay busy (latency 4 cycles x 2 pipes on the
#: AMD and Intel cores TVM targets): a tile of fewer runs at ``acc / FMA_DEPTH`` of its speed
FMA_DEPTH = 8


def tile_score(oc_bn: int, columns: int, rows: int, width: int, lanes: int) -> float:
    """The share of its best speed a convolution's inner loop is predicted to run at with output-channel
    block ``oc_bn`` and an output tile of ``columns`` x ``rows`` (``rows`` 1 but for 1x1 kernels'
    ``tile_oh``) over an output ``width`` columns wide: lanes used, registers spilled, FMA pipes kept
    busy, loads per FMA (each step loads the weight's vectors and broadcasts one input per column:
    more than one load per FMA starves the FMA pipes) and the last, partial tile of a width the
    tile does not divide. A block of 3, 5, 6, ... vectors (``oc_bn`` 24 or 40 on AVX2) runs at
    :data:`ODD_VECTORS` of the speed of one of 1, 2 or 4 (LLVM's lowering of the odd vector type;
    measured, 1x1 convolutions of MobileNet-v2 on a Zen 3: 2-4x slower than 16 or 32 channels)."""
    vectors = math.ceil(oc_bn / lanes)
    lane_use = oc_bn / (vectors * lanes)
    if vectors & (vectors - 1):
        lane_use *= ODD_VECTORS
    acc = columns * rows * vectors
    fits = acc <= vector_registers(lanes) - vectors - 1  # the weight's vectors and the broadcast input
    spill = 1.0 if fits else REGISTER_SPILL
    depth = min(1.0, acc / FMA_DEPTH)
    feed = min(1.0, acc / (vectors + columns * rows))
    tail = width / (math.ceil(width / columns) * columns)
    return lane_use * spill * depth * feed * tail


def _inner(entity) -> int:
    return int(entity.size[-1])


def _knobs(config) -> tuple[int, int, int, int, int] | None:
    """(oc_bn, ic_bn, columns, rows, unroll) of a convolution configuration; None without those knobs."""
    try:
        oc_bn, ic_bn, columns = _inner(config["tile_oc"]), _inner(config["tile_ic"]), _inner(config["tile_ow"])
    except (KeyError, AttributeError, TypeError):
        return None
    rows = unroll = 1
    for name in ("tile_oh", "unroll_kw"):
        try:
            value = int(config[name].val)
        except (KeyError, AttributeError, TypeError):
            continue
        if name == "tile_oh":
            rows = value
        else:
            unroll = value
    return oc_bn, ic_bn, columns, rows, unroll


#: the speed share of an output-channel block of a vector count that is not a power of two
ODD_VECTORS = 0.5
#: a tile shape's second configuration is tried after the first ones of the next ``SPREAD`` shapes
SPREAD = 4


def ranked(task, target: str) -> list[int] | None:
    """The indices of ``task``'s configurations in the order tuning tries them; None where there is
    no model for its template or its target (not x86). Configurations are grouped by their register
    tile (``oc_bn``, columns, rows), the groups ordered by :func:`tile_score`; within a group the
    channel blocks that agree come first (neighbouring kernels need no layout transform between them),
    then larger input-channel blocks, the unrolled kernel width first. The groups take turns, so a
    few trials cover several tile shapes: a shape's second configuration comes after the first ones
    of the next :data:`SPREAD` shapes."""
    lanes = simd_lanes(str(target))
    if task.name not in CONV_TEMPLATES or not lanes:
        return None
    space = task.config_space
    width = getattr(space.space_map.get("tile_ow"), "product", None)
    if not width:
        return None
    groups: dict[tuple, list] = {}
    for index in range(space.range_length):
        if not space.is_index_valid(index):
            continue
        knobs = _knobs(space.get(index))
        if knobs is None:
            return None
        oc_bn, ic_bn, columns, rows, unroll = knobs
        groups.setdefault((oc_bn, columns, rows), []).append((-int(ic_bn == oc_bn), -ic_bn, -unroll, index))
    shapes = sorted(groups, key=lambda g: (-tile_score(g[0], g[1], g[2], int(width), lanes),
                                           -g[0] * g[1] * g[2], g))
    keyed = []
    for rank, shape in enumerate(shapes):
        for turn, member in enumerate(sorted(groups[shape])):
            keyed.append((rank + SPREAD * turn, rank, member[-1]))
    keyed.sort()
    return [k[-1] for k in keyed]
