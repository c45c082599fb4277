"""Which configurations of a task tuning tries first: TVM's x86 convolution and dense templates ranked
by the register tile each configuration gives the inner loop.

TVM's x86 schedules keep the partial sums of an output tile in vector registers while the reduction
runs: ``conv2d_NCHWc.x86`` and ``depthwise_conv2d_NCHWc.x86`` one per column of ``tile_ow``'s inner
factor (times ``tile_oh`` for 1x1 kernels), each ``ceil(oc_bn / lanes)`` registers wide (``oc_bn``
the inner factor of ``tile_oc``); ``dense_pack.x86`` one per row of ``tile_y``'s inner factor, each
``ceil(tile_x / lanes)`` wide; ``dense_nopack.x86`` one per (row, column) of the ``tile_y`` x
``tile_x`` block, each ``ceil(tile_k / lanes)`` wide. A tile of more accumulators than fit beside the
operands it loads spills in the innermost loop (the untuned choice for most convolutions on AVX2: 28
columns, 16 registers), one of fewer than the FMA pipes' depth leaves them idle, one that loads more
than it computes starves them, a block that is not a whole number of vectors leaves lanes empty.
Random search spends most of a small budget on such configurations; :func:`ranked` orders a task's
space by :func:`tile_score` (the register model ``relay_eqsat.cost.simd`` prices untuned kernels
with), tile shapes taking turns so that a few trials cover several of them. A convolution's
configurations that keep the channel blocks TVM gives it untuned come first: a record's blocks
decide the layout its neighbours hand it, and where neighbouring records differ AlterOpLayout puts a
``layout_transform`` between them (measured, Zen 3, MobileNet-v2, 128 trials: the log made with this
rule ran 0.957 of the time of one made without it, in 9 of 9 paired rounds; docs/history.md). On
maps narrower than :data:`LAYOUT_COLUMNS` a transform costs little and the blocks are ranked with
the rest. Other
templates (batch_matmul, pools, ...) have no order here and are searched at random.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from relay_eqsat.cost.simd import REGISTER_SPILL, output_block, simd_lanes, vector_registers

#: independent accumulators the FMA units need to stay busy (latency 4 cycles x 2 pipes on the
#: AMD and Intel cores TVM targets): a tile of fewer runs at ``acc / FMA_DEPTH`` of its speed
FMA_DEPTH = 8
#: the speed share of a block of a vector count that is not a power of two (3, 5, 6: ``oc_bn`` 24 or 40
#: on AVX2) or more than one vector and not a whole number of them (12 on AVX2): LLVM's lowering of the
#: odd vector type; measured on a Zen 3, the 1x1 convolutions of MobileNet-v2 ran 2-4x slower with 24
#: or 40 channels a block than with 16 or 32, BERT's dense_pack 1.5-2x slower with 12 columns than 16
ODD_VECTORS = 0.5
#: a tile shape's second configuration is tried after the first ones of the next ``SPREAD`` shapes
SPREAD = 4
#: the least output columns at which a convolution's configurations that keep TVM's untuned channel
#: blocks come first. Below, a layout transform moves a sixteenth of what one at 56 columns does
#: (EfficientNet-B0's at 14 x 14: 0.02 ms, at 7 x 7: 0.003) and the blocks are ranked with the tile:
#: with 32 output channels a block (14 accumulators in one row) its 1x1 convolutions at 7 x 7 and
#: 14 x 14 timed 0.87-0.96 of the untuned blocks' best; at B = 128 the log tuned in this order ran
#: the pass's program 0.954 of the time of the log tuned in the old (20/21 paired rounds;
#: Sapphire-Rapids-class, docs/history.md)
LAYOUT_COLUMNS = 28


class Tile(NamedTuple):
    """A configuration's register tile: ``vectors`` registers wide (``width`` fp32 values),
    ``acc`` accumulators, ``loads`` operand loads (or broadcasts) a reduction step, and the share
    of a ``span``-long axis its last tile computes (1.0 where the tile divides it)."""

    width: int
    acc: int
    loads: int
    covered: float = 1.0


def tile_score(tile: Tile, lanes: int) -> float:
    """The share of its best speed an inner loop with register tile ``tile`` is predicted to run at
    on a CPU of ``lanes`` fp32 lanes: lanes used, registers spilled (the accumulators and what a
    step loads must fit), FMA pipes kept busy, loads per FMA, the last partial tile."""
    vectors = math.ceil(tile.width / lanes)
    lane_use = tile.width / (vectors * lanes)
    if vectors & (vectors - 1) or (vectors > 1 and tile.width % lanes):
        lane_use *= ODD_VECTORS
    fits = tile.acc <= vector_registers(lanes) - vectors - 1  # the weight's vectors and one input
    spill = 1.0 if fits else REGISTER_SPILL
    depth = min(1.0, tile.acc / FMA_DEPTH)
    feed = min(1.0, tile.acc / max(1, tile.loads))
    return lane_use * spill * depth * feed * tile.covered


def _inner(config, name: str) -> int:
    return int(config[name].size[-1])


def _value(config, name: str, default: int = 1) -> int:
    try:
        return int(config[name].val)
    except (KeyError, AttributeError, TypeError, ValueError):
        return default


def untuned_blocks(space, lanes: int) -> tuple[int, int]:
    """The (input, output) channel blocks TVM's x86 fallback gives a convolution (``oc_bn`` the largest
    divisor of the output channels up to the lanes, ``ic_bn`` the largest divisor of the input
    channels up to ``oc_bn``): the layout the untuned program's convolutions hand each other."""
    oc_bn = output_block(space.space_map["tile_oc"].product, lanes)
    return output_block(space.space_map["tile_ic"].product, oc_bn), oc_bn


def untuned_first(space) -> bool:
    """Whether a convolution's configurations that keep TVM's untuned channel blocks come first: its
    output map at least :data:`LAYOUT_COLUMNS` columns wide."""
    return int(space.space_map["tile_ow"].product) >= LAYOUT_COLUMNS


def _conv(config, space, lanes: int):
    oc_bn, ic_bn, columns = _inner(config, "tile_oc"), _inner(config, "tile_ic"), _inner(config, "tile_ow")
    rows, unroll = _value(config, "tile_oh"), _value(config, "unroll_kw")
    width = int(space.space_map["tile_ow"].product)
    vectors = math.ceil(oc_bn / lanes)
    covered = width / (math.ceil(width / columns) * columns)
    tile = Tile(oc_bn, columns * rows * vectors, vectors + columns * rows, covered)
    # within a shape: channel blocks that agree, larger input-channel blocks, the kernel width unrolled
    return (oc_bn, columns, rows), tile, (-int(ic_bn == oc_bn), -ic_bn, -unroll), \
        not untuned_first(space) or (ic_bn, oc_bn) == untuned_blocks(space, lanes)


def _dense_pack(config, space, lanes: int):
    rows, columns = _inner(config, "tile_y"), _inner(config, "tile_x")
    vectors = math.ceil(columns / lanes)
    tile = Tile(columns, rows * vectors, rows + vectors)
    # within a shape: the reduction and row splits TVM's own choice makes (k 1, inner rows the tile)
    return (rows, columns), tile, (_inner(config, "tile_k") != 1, _inner(config, "tile_inner") != rows,
                                   -config["tile_y"].size[-2], -config["tile_x"].size[-2]), True


def _dense_nopack(config, space, lanes: int):
    rows, columns, k = _inner(config, "tile_y"), _inner(config, "tile_x"), _inner(config, "tile_k")
    vectors = math.ceil(k / lanes)
    return (rows, columns, k), Tile(k, rows * columns * vectors, (rows + columns) * vectors), (), True


#: template -> (configuration, space, lanes) -> (tile shape, Tile, order within the shape, whether it keeps
#: the layout the untuned program's kernels hand each other)
TEMPLATES = {"conv2d_NCHWc.x86": _conv, "depthwise_conv2d_NCHWc.x86": _conv,
             "dense_pack.x86": _dense_pack, "dense_nopack.x86": _dense_nopack}


#: what a template's description of a configuration fails with where the template is another TVM
#: version's (its knobs are not these)
_FOREIGN = (KeyError, AttributeError, TypeError, ValueError, ZeroDivisionError, StopIteration)


def _described(task, lanes: int, describe):
    """Each valid configuration of ``task``'s space as ``(index, describe(...))``."""
    space = task.config_space
    for index in range(space.range_length):
        if space.is_index_valid(index):
            yield index, describe(space.get(index), space, lanes)


def fallback_share(task, target: str, fallback: int | None) -> float | None:
    """The speed TVM's untuned configuration of ``task`` (its index ``fallback`` in the space) is
    predicted to run at, as a share of the best configuration's (:func:`tile_score`); None where
    there is no model for its template or target, or no fallback. A share at or below
    ``REGISTER_SPILL`` is a tile that spills (28 columns where 16 registers hold 14) or wastes
    lanes: the first configuration of :func:`ranked` order is then worth a trial on its own."""
    lanes = simd_lanes(str(target))
    describe = TEMPLATES.get(getattr(task, "name", None))
    if describe is None or not lanes or fallback is None:
        return None
    try:
        scores = {index: tile_score(d[1], lanes) for index, d in _described(task, lanes, describe)}
    except _FOREIGN:
        return None
    best = max(scores.values(), default=0.0)
    return scores.get(fallback, 0.0) / best if best > 0 else None


def ranked(task, target: str) -> list[int] | None:
    """The indices of ``task``'s configurations in the order tuning tries them; None where there is
    no model for its template or its target (not x86). Configurations are grouped by their register
    tile, the groups ordered by :func:`tile_score` (ties: more accumulators), each group's own order
    by the template's preferences; the groups take turns, a shape's second configuration after the
    first ones of the next :data:`SPREAD` shapes."""
    lanes = simd_lanes(str(target))
    describe = TEMPLATES.get(task.name)
    if describe is None or not lanes:
        return None
    groups: dict[tuple, list] = {}
    scores: dict[tuple, tuple] = {}
    try:
        for index, (shape, tile, within, keeps) in _described(task, lanes, describe):
            shape = (not keeps, *shape)
            groups.setdefault(shape, []).append((*within, index))
            scores[shape] = (-tile_score(tile, lanes), -tile.acc)
    except _FOREIGN:
        return None
    keyed = []
    for keeps in (True, False):  # the untuned layout's configurations first, each part in turns
        part = sorted((g for g in groups if g[0] != keeps), key=lambda g: (scores[g], g))
        for rank, shape in enumerate(part):
            for turn, member in enumerate(sorted(groups[shape])):
                keyed.append((not keeps, rank + SPREAD * turn, rank, member[-1]))
    keyed.sort()
    return [k[-1] for k in keyed]
