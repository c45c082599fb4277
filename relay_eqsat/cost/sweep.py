"""A generic sweep of kernel shapes: what to measure on a CPU besides the kernels of known models.

The learned model predicts a kernel it never saw from the measured kernels
near it. Trained on the zoo's models alone it sees few shapes of the ops
that dominate real models (24 dense and 6 batch_matmul kernels among the 791
measured on Sapphire Rapids), and a model of another family is predicted
from shapes of a different regime: BERT's 128-row dense layers from ViT's
197-row ones (+37% held out). ``sweep_instances(n, seed)`` draws ``n``
kernels of the anchors that carry the time of CNNs and transformers (dense,
batch_matmul, convolutions: plain, strided, 1x1, grouped, depthwise, and
the pools) from fixed grids of sizes common in real networks, seeded and
deterministic, each kernel's work capped so the sweep measures in minutes.
Seven more tiers reach past that grid, each a regime it draws rarely or
never and where held-out validation missed: high-resolution convolutions
(``"large"``), convolutions above its work cap (``"heavy"``), dense layers of
a few rows (``"matvec"``), kernels of a few microseconds (``"small"``),
dense layers whose output width TVM's x86 schedule blocks badly or well,
tall ones among them (``"columns"``: a dense with its operands swapped), a
network's first convolution on the image (``"stem"``: 1-4 input channels,
large kernels and strides, patch embeddings) and the element-wise,
broadcast and normalizing ops (``"elementwise"``: every such op of the
operator table, TVM's approximations included, over 2-D, 3-D and 4-D
tensors of 64 to 4M values), of which a model brings a handful of shapes,
and fused groups (``"epilogues"``: a product with the activation a model
fuses into its kernel, measured as what the activation adds).
``relay-eqsat measure --sweep N`` (``--sweep-large N``, ``--sweep-heavy N``,
``--sweep-matvec N``, ``--sweep-small N``, ``--sweep-columns N``,
``--sweep-stem N``, ``--sweep-elementwise N``, ``--sweep-epilogues N``) measures them beside the
models' kernels.

No TVM here: the instances are ``OpInstance``s with canonical attributes
and inferred output types, measured by the ``Measurer`` like any other.
"""
from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass
from typing import Callable

from .. import ops
from ..graph import TensorGraph, TensorType
from .analytic import op_flops_bytes
from .groups import group_instance
from .instance import OpInstance

#: sizes drawn from (real networks' rows, widths, channels and feature maps)
ROWS = (1, 8, 16, 32, 64, 100, 128, 196, 197, 256, 384, 512)
WIDTHS = (64, 128, 256, 384, 512, 768, 1000, 1024, 1536, 2048, 3072, 4096)
BATCHES = (1, 2, 4, 8, 12, 16)
SEQ = (16, 49, 64, 96, 128, 196, 197, 256, 384)
HEAD = (32, 48, 64, 96, 128)
CHANNELS = (16, 24, 32, 40, 48, 64, 80, 96, 112, 128, 144, 160, 192, 240, 256, 320, 384, 448, 512, 576,
            640, 768, 960, 1024, 2048)
MAPS = (7, 8, 14, 17, 28, 35, 56, 73, 112)

#: a drawn kernel above this many FLOPs is drawn again (at about 25-100 GFLOP/s on one core, the
#: largest take 10-40 ms a run, the size of VGG's convolutions)
MAX_FLOPS = 2e9

#: share of each kind among the drawn kernels
KINDS = {"dense": 0.25, "batch_matmul": 0.15, "conv": 0.35, "conv1x1": 0.1, "depthwise": 0.07,
         "grouped": 0.04, "pool": 0.04}

#: the high-resolution tier (``tier="large"``): the first stages of VGG-style networks, U-Nets and
#: detection backbones run convolutions on 150-224 px maps, 2-8 GFLOP each, which the grid above
#: neither reaches (maps up to 112) nor admits (MAX_FLOPS); VGG-19's were predicted 32% too slow
#: from the smaller ones (held out)
LARGE_CHANNELS = (3, 16, 24, 32, 48, 64, 96, 128)
LARGE_MAPS = (112, 128, 150, 160, 192, 224)
LARGE_MAX_FLOPS = 8e9
LARGE_KINDS = {"conv": 0.55, "conv1x1": 0.2, "depthwise": 0.15, "pool": 0.1}

#: the heavy tier (``tier="heavy"``): convolutions of 2-8 GFLOP on 14-73 px maps (VGG's 3x3 layers on
#: 256-512 channels, wide ResNets), above the default grid's cap and below the high-resolution tier's
#: maps; with only the zoo's own such layers to learn from, VGG-19's were predicted 19-27% too slow
#: (held out)
HEAVY_CHANNELS = (128, 192, 256, 320, 384, 448, 512, 640, 768, 1024)
HEAVY_MAPS = (14, 17, 28, 35, 56, 73)
HEAVY_KINDS = {"conv": 0.75, "conv1x1": 0.25}

#: the matrix-vector tier (``tier="matvec"``): dense layers of 1-4 rows (RNN cells, classifier heads,
#: batch-1 decoding), whose time is their weights read once: from cache when they fit, from memory when
#: not, a regime of weight sizes the default grid samples at a few points (one row in twelve); held out,
#: NasRNN's 512x512 and VGG-19's 4096-wide layers were predicted 1.9-2.4x too slow
MATVEC_ROWS = (1, 1, 2, 4)
MATVEC_WIDTHS = (256, 512, 768, 1000, 1024, 1536, 2048, 3072, 4096, 6144, 8192)

#: the small-kernel tier (``tier="small"``): convolutions, pools and dense layers of a few microseconds
#: each (networks on 32 px inputs, the last stages of mobile networks, RNN cells with small states), where
#: a kernel's fixed cost per call is a large part of its time; the default grid starts at maps of 7 px and
#: 16 channels, and the small NasNet-A's 2-8 px, 8-32 channel kernels were predicted 20-40% too fast from
#: the other models' (held out)
SMALL_CHANNELS = (3, 4, 8, 12, 16, 24, 32, 40, 48, 64, 80, 96)
SMALL_MAPS = (2, 4, 7, 8, 14, 16, 28, 32)
SMALL_ROWS = (1, 2, 4, 8, 16, 32)
SMALL_WIDTHS = (16, 32, 64, 128, 256, 512)
SMALL_MAX_FLOPS = 5e7
SMALL_KINDS = {"dense": 0.15, "conv": 0.25, "conv1x1": 0.2, "depthwise": 0.15, "grouped": 0.05, "pool": 0.2}

#: the output-column tier (``tier="columns"``): TVM's x86 dense blocks the output width N by its largest
#: divisor up to twice the lanes; a block between the lanes and twice them that is not a multiple of them
#: (N = 24, 48, 196, 200, 1000 on AVX-512) runs ~50x slower than N = 1024 (``simd.column_block``), and a
#: dense with its operands swapped has the activations' rows as N and the weight's thousands of rows as M.
#: The default grid draws N from widths that all block well (but 1000) and M up to 512.
COLUMN_ROWS = (1, 2, 4, 8, 49, 64, 128, 196, 197, 200, 256, 512, 768, 1000, 1024, 2048, 3072, 4096)
COLUMN_WIDTHS = (256, 512, 768, 1024, 2048, 3072, 4096)
COLUMN_COLS = (7, 16, 24, 48, 49, 50, 64, 96, 100, 128, 196, 197, 200, 224, 256, 384, 768, 1000, 1024, 3072)
COLUMN_MAX_FLOPS = 1e9

#: the stem tier (``tier="stem"``): the first convolution of a network reads the image (1-4 channels) with
#: a large kernel and a stride, and its output width is often odd or prime (224 px, 7x7 stride 2 unpadded:
#: 109); the default grid starts at 16 channels and 112 px, and held out on Zen 4, SqueezeNet's
#: 3->96 7x7 stride-2 stem was predicted 1.9x too slow from the other models' stems. Patch embeddings
#: (ViT's 16x16 stride 16) are stems too.
STEM_CHANNELS = (1, 3, 3, 3, 4)
STEM_MAPS = (32, 64, 96, 112, 128, 160, 192, 224, 225, 227, 229, 256, 299, 320)
STEM_OUT = (8, 16, 24, 32, 48, 64, 96, 128)
STEM_KERNELS = (3, 3, 4, 5, 7, 7, 11)
STEM_PATCHES = (2, 4, 8, 14, 16, 32)
STEM_PATCH_OUT = (64, 96, 128, 192, 256, 384, 512, 768, 1024)
STEM_MAX_FLOPS = 4e9
STEM_KINDS = {"stem": 0.8, "patchify": 0.2}

#: the element-wise tier (``tier="elementwise"``): activations, arithmetic with a same-shape, per-channel
#: or scalar operand, bias adds, softmax, layer norm, batch norm and means, each of the operator table's
#: ops of those kinds (``elementwise_ops``) over tensors of ``ELEMENTWISE_VALUES`` values. A zoo brings
#: two to four shapes of ``tanh``, ``erf``, softmax or layer norm, from one or two models: held out on
#: Zen 4, NasRNN's ``tanh`` was predicted 20x too fast and ViT's ``erf`` and softmax about 2x
ELEMENTWISE_VALUES = (64, 1 << 22)
ELEMENTWISE_KINDS = {"unary": 0.45, "binary": 0.25, "normalize": 0.3}
#: attributes an op needs that the sweep cannot leave to its defaults
ELEMENTWISE_ATTRS = {"clip": {"a_min": 0.0, "a_max": 6.0}}

#: the fused-epilogue tier (``tier="epilogues"``): an anchor with the activation a model fuses into
#: its kernel, as a fused group (`relay_eqsat.cost.groups`) whose measured time is what the epilogue
#: adds. What a fused op costs per value is learned from groups; the zoo brings ``erf`` in two models
#: only (BERT, ViT), so with one of them held out it had no coefficient and the whole-graph fit
#: stretched the dense layers' weight to cover the missing GELU (ViT held out +42% on Zen 4)
EPILOGUE_ANCHORS = {"dense": 0.4, "conv1x1": 0.2, "conv": 0.15, "depthwise": 0.1, "batch_matmul": 0.15}
#: an anchor above this many FLOPs is drawn again: the epilogue is timed as a difference of paired
#: runs, which a long anchor's noise swamps
EPILOGUE_MAX_FLOPS = 3e8
#: the activations drawn after the anchor (and its bias add, most of the time): single ops of the
#: operator table and the compositions exporters write
EPILOGUE_ACTIVATIONS = ("nn.relu", "clip", "nn.leaky_relu", "sigmoid", "tanh", "erf", "exp", "fast_erf",
                        "fast_tanh", "fast_sigmoid", "fast_exp", "gelu", "gelu-fast", "silu", "hardswish",
                        "residual-relu")

F32 = "float32"


def _conv(x: TensorType, w: tuple[int, ...], stride: int, pad: int, groups: int = 1) -> OpInstance:
    attrs = ops.normalize_attrs("nn.conv2d", {"strides": (stride, stride), "padding": (pad,) * 4,
                                              "groups": groups}, [x, TensorType(w, F32)])
    return OpInstance.make("nn.conv2d", attrs, [x, TensorType(w, F32)])


def _dense(r: random.Random, grid: Grid) -> OpInstance:
    m, k, n = r.choice(grid.rows), r.choice(grid.widths), r.choice(grid.columns or grid.widths)
    ins = [TensorType((m, k), F32), TensorType((n, k), F32)]
    return OpInstance.make("nn.dense", ops.normalize_attrs("nn.dense", {}, ins), ins)


def _batch_matmul(r: random.Random, grid: Grid) -> OpInstance:
    b, m, n, k = r.choice(BATCHES), r.choice(SEQ), r.choice(SEQ), r.choice(HEAD)
    if r.random() < 0.5:  # scores: Q K^T (k = the head size); else P V (n = the head size)
        n, k = k, n
    tb = r.random() < 0.5
    ins = [TensorType((b, m, k), F32), TensorType((b, n, k) if tb else (b, k, n), F32)]
    return OpInstance.make("nn.batch_matmul", ops.normalize_attrs("nn.batch_matmul", {"transpose_b": tb}, ins), ins)


@dataclass(frozen=True)
class Grid:
    """One tier of the sweep: the sizes its kernels are drawn from, each kind's share, the work cap."""

    channels: tuple[int, ...] = CHANNELS
    maps: tuple[int, ...] = MAPS
    kinds: tuple[tuple[str, float], ...] = tuple(KINDS.items())
    max_flops: float = MAX_FLOPS
    rows: tuple[int, ...] = ROWS
    widths: tuple[int, ...] = WIDTHS
    conv_kernels: tuple[int, ...] = (3, 3, 3, 5, 7)
    depthwise_kernels: tuple[int, ...] = (3, 3, 5)
    min_flops: float = 0.0  # a draw with no more work is drawn again (a tier above another's cap)
    columns: tuple[int, ...] | None = None  # a dense's output widths (default: ``widths``)
    strides: tuple[int, ...] = (1, 1, 1, 2)  # a plain convolution's strides
    out_channels: tuple[int, ...] | None = None  # a convolution's output channels (default: ``channels``)


LARGE = Grid(LARGE_CHANNELS, LARGE_MAPS, tuple(LARGE_KINDS.items()), LARGE_MAX_FLOPS)
HEAVY = Grid(HEAVY_CHANNELS, HEAVY_MAPS, tuple(HEAVY_KINDS.items()), LARGE_MAX_FLOPS, min_flops=MAX_FLOPS)
MATVEC = Grid(kinds=(("dense", 1.0),), rows=MATVEC_ROWS, widths=MATVEC_WIDTHS)
COLUMNS = Grid(kinds=(("dense", 1.0),), max_flops=COLUMN_MAX_FLOPS, rows=COLUMN_ROWS, widths=COLUMN_WIDTHS,
               columns=COLUMN_COLS)
SMALL = Grid(SMALL_CHANNELS, SMALL_MAPS, tuple(SMALL_KINDS.items()), SMALL_MAX_FLOPS, SMALL_ROWS, SMALL_WIDTHS,
             conv_kernels=(3, 3, 5, 7), depthwise_kernels=(3, 5, 7))
STEM = Grid(STEM_CHANNELS, STEM_MAPS, tuple(STEM_KINDS.items()), STEM_MAX_FLOPS, conv_kernels=STEM_KERNELS,
            strides=(1, 2, 2, 2, 4), out_channels=STEM_OUT)
#: channels of 4-D tensors and widths of 2-D ones (the other sizes follow from the values drawn)
ELEMENTWISE = Grid(CHANNELS, kinds=tuple(ELEMENTWISE_KINDS.items()), max_flops=float("inf"),
                   widths=WIDTHS + (16, 30, 197, 512))
EPILOGUES = Grid(kinds=(("epilogue", 1.0),), max_flops=EPILOGUE_MAX_FLOPS)

#: the tiers ``sweep_instances`` draws from, by name
#: (``relay-eqsat measure --sweep[-large|-heavy|-matvec|-small|-columns]``)
TIERS = {"default": Grid(), "large": LARGE, "heavy": HEAVY, "matvec": MATVEC, "small": SMALL, "columns": COLUMNS,
         "stem": STEM, "elementwise": ELEMENTWISE, "epilogues": EPILOGUES}


def _feature_map(r: random.Random, grid: Grid) -> tuple[int, int]:
    c, h = r.choice(grid.channels), r.choice(grid.maps)
    return c, h


def _plain_conv(r: random.Random, grid: Grid) -> OpInstance:
    c, h = _feature_map(r, grid)
    k = r.choice(grid.conv_kernels)
    stride = r.choice(grid.strides)
    return _conv(TensorType((1, c, h, h), F32), (r.choice(grid.channels), c, k, k), stride, k // 2)


def _conv1x1(r: random.Random, grid: Grid) -> OpInstance:
    c, h = _feature_map(r, grid)
    return _conv(TensorType((1, c, h, h), F32), (r.choice(grid.channels), c, 1, 1), r.choice((1, 1, 1, 2)), 0)


def _depthwise(r: random.Random, grid: Grid) -> OpInstance:
    c, h = _feature_map(r, grid)
    k = r.choice(grid.depthwise_kernels)
    return _conv(TensorType((1, c, h, h), F32), (c, 1, k, k), r.choice((1, 1, 2)), k // 2, groups=c)


def _grouped(r: random.Random, grid: Grid) -> OpInstance:
    g = r.choice((2, 4, 8, 16, 32))
    c = g * r.choice((4, 8, 16, 32))
    h = r.choice(grid.maps)
    return _conv(TensorType((1, c, h, h), F32), (c, c // g, 3, 3), r.choice((1, 1, 2)), 1, groups=g)


def _pool(r: random.Random, grid: Grid) -> OpInstance:
    c, h = _feature_map(r, grid)
    x = TensorType((1, c, h, h), F32)
    op = r.choice(("nn.max_pool2d", "nn.avg_pool2d"))
    k, s = r.choice(((3, 2), (2, 2), (3, 1)))
    attrs = ops.normalize_attrs(op, {"pool_size": (k, k), "strides": (s, s), "padding": (k // 2,) * 4 if s == 1
                                     else (0, 0, 0, 0)}, [x])
    return OpInstance.make(op, attrs, [x])


def _stem(r: random.Random, grid: Grid) -> OpInstance:
    """A first convolution on the image: few channels, large kernel, stride, padded or not."""
    c, h = _feature_map(r, grid)
    k = r.choice(grid.conv_kernels)
    return _conv(TensorType((1, c, h, h), F32), (r.choice(grid.out_channels or grid.channels), c, k, k),
                 r.choice(grid.strides), r.choice((k // 2, 0)))


def _patchify(r: random.Random, grid: Grid) -> OpInstance:
    """A patch embedding: kernel = stride, unpadded, wide output."""
    c, p = r.choice(grid.channels), r.choice(STEM_PATCHES)
    h = p * r.choice((7, 8, 14, 16, 24, 28, 56))
    return _conv(TensorType((1, c, h, h), F32), (r.choice(STEM_PATCH_OUT), c, p, p), p, 0)


@functools.lru_cache(maxsize=None)
def elementwise_ops() -> dict[str, tuple[str, ...]]:
    """The operator table's ops the element-wise tier draws, by draw: ``unary`` (element-wise, one
    input), ``binary`` (broadcast, two inputs; the bias add among them) and ``normalize`` (softmax,
    layer and batch norm, reductions)."""
    unary = tuple(n for n, d in ops.OPS.items() if d.pattern == "elemwise" and d.arity == 1)
    binary = tuple(n for n, d in ops.OPS.items() if d.pattern == "broadcast" and d.arity == 2)
    normalize = tuple(n for n in ("nn.softmax", "nn.fast_softmax", "nn.layer_norm", "nn.batch_norm", "mean")
                      if n in ops.OPS)
    return {"unary": tuple(sorted(unary)), "binary": tuple(sorted(binary)), "normalize": tuple(sorted(normalize))}


def _tensor(r: random.Random, grid: Grid) -> tuple[int, ...]:
    """A 2-D (rows x width), 3-D (attention scores: heads x seq x seq) or 4-D (1 x C x H x H) shape of
    about a number of values drawn log-uniformly from ``ELEMENTWISE_VALUES``: an RNN cell's 512 values
    as often as a feature map's million. The width, channels or sequence come from the grid, the rest
    is fitted to the size (drawn again if it falls outside)."""
    lo, hi = ELEMENTWISE_VALUES
    while True:
        size = math.exp(r.uniform(math.log(lo), math.log(hi)))
        form = r.random()
        if form < 0.4:
            w = r.choice(grid.widths)
            shape = (max(1, round(size / w)), w)
        elif form < 0.55:
            s = r.choice(SEQ)
            shape = (max(1, round(size / (s * s))), s, s)
        else:
            c = r.choice(grid.channels)
            shape = (1, c) + (max(1, round(math.sqrt(size / c))),) * 2
        n = math.prod(shape)
        if lo <= n <= hi:
            return shape


def _made(op: str, attrs: dict, ins: list[TensorType]) -> OpInstance:
    return OpInstance.make(op, ops.normalize_attrs(op, {**ELEMENTWISE_ATTRS.get(op, {}), **attrs}, ins), ins)


def _unary(r: random.Random, grid: Grid) -> OpInstance:
    return _made(r.choice(elementwise_ops()["unary"]), {}, [TensorType(_tensor(r, grid), F32)])


def _binary(r: random.Random, grid: Grid) -> OpInstance:
    """Same shapes, a per-channel operand (the bias add's, or broadcast along axis 1 of a 4-D
    tensor / the last of a 2-D one), or a scalar."""
    op, shape = r.choice(elementwise_ops()["binary"]), _tensor(r, grid)
    x = TensorType(shape, F32)
    channel = shape[1] if len(shape) == 4 else shape[-1]
    if op == "nn.bias_add":
        return _made(op, {"axis": 1 if len(shape) == 4 else len(shape) - 1}, [x, TensorType((channel,), F32)])
    form = r.random()
    if form < 0.5:
        y = shape
    elif form < 0.8:
        y = (1, channel, 1, 1) if len(shape) == 4 else (channel,)
    else:
        y = ()
    return _made(op, {}, [x, TensorType(y, F32)])


def _normalize(r: random.Random, grid: Grid) -> OpInstance:
    op, shape = r.choice(elementwise_ops()["normalize"]), _tensor(r, grid)
    x = TensorType(shape, F32)
    last = len(shape) - 1
    if op == "nn.batch_norm":  # on feature maps
        while len(shape) != 4:
            shape = _tensor(r, grid)
        x = TensorType(shape, F32)
        vec = TensorType((shape[1],), F32)
        return _made(op, {"axis": 1}, [x] + [vec] * 4)
    if op == "nn.layer_norm":
        vec = TensorType((shape[last],), F32)
        return _made(op, {"axis": last}, [x, vec, vec])
    if op == "mean":  # a row's mean (layer norm, written out), or a 4-D map's (global pooling)
        axis = (2, 3) if len(shape) == 4 and r.random() < 0.5 else (last,)
        return _made(op, {"axis": axis, "keepdims": True}, [x])
    return _made(op, {"axis": last}, [x])


def _activation(g, y: int, name: str, const: Callable[[tuple], int], var: Callable[[tuple], int]) -> int:
    """``name`` of :data:`EPILOGUE_ACTIVATIONS` applied to node ``y`` of ``g``; ``const(shape)``
    adds an operand constant in the model (a scalar), ``var(shape)`` one that is not."""
    if name in ("gelu", "gelu-fast"):  # y * 0.5 * (1 + erf(y / sqrt 2)), as ONNX exports write it
        erf = g.add("erf" if name == "gelu" else "fast_erf", [g.add("multiply", [y, const(())])])
        return g.add("multiply", [g.add("multiply", [y, const(())]), g.add("add", [erf, const(())])])
    if name == "silu":
        return g.add("multiply", [y, g.add("sigmoid", [y])])
    if name == "hardswish":  # y * clip(y + 3, 0, 6) / 6
        gate = g.add("clip", [g.add("add", [y, const(())])], {"a_min": 0.0, "a_max": 6.0})
        return g.add("multiply", [g.add("multiply", [y, gate]), const(())])
    if name == "residual-relu":  # a residual block's end: the shortcut added, then relu
        return g.add("nn.relu", [g.add("add", [y, var(g.nodes[y].type.shape)])])
    return g.add(name, [y], ops.normalize_attrs(name, ELEMENTWISE_ATTRS.get(name, {}), [g.nodes[y].type]))


def _epilogue(r: random.Random, grid: Grid) -> OpInstance:
    """A fused group: an anchor of :data:`EPILOGUE_ANCHORS` (drawn from the generic grid, at most
    the tier's FLOPs), a bias add (four draws in five) and an activation."""
    kinds, weights = list(EPILOGUE_ANCHORS), list(EPILOGUE_ANCHORS.values())
    while True:
        anchor = DRAW[r.choices(kinds, weights)[0]](r, Grid())
        if op_flops_bytes(anchor.op, anchor.attrs, anchor.input_types, anchor.out_type)[0] <= grid.max_flops:
            break
    act = r.choice(EPILOGUE_ACTIVATIONS)
    g = TensorGraph()
    const: set[int] = set()

    def operand(shape, constant):
        i = g.var(f"v{len(g.nodes)}", shape)
        if constant:
            const.add(i)
        return i

    # the weight is a constant (a batch_matmul's too: the ONNX frontend's linear layer), so the
    # measuring worker draws it as a model's and the activation sees values of order one
    weights = ops.get(anchor.op).weight_slots or (1,)
    ins = [operand(t.shape, k in weights) for k, t in enumerate(anchor.input_types)]
    y = g.add(anchor.op, ins, anchor.attrs)
    out = g.nodes[y].type.shape
    if r.random() < 0.8:
        axis = 1 if anchor.op == "nn.conv2d" else len(out) - 1
        y = g.add("nn.bias_add", [y, operand((out[axis],), True)], {"axis": axis})
    y = _activation(g, y, act, lambda shape: operand(shape, True), lambda shape: operand(shape, False))
    is_const = [i in const for i in range(len(g.nodes))]
    inst = group_instance(g, [i for i, n in enumerate(g.nodes) if n.op != "var"], is_const)
    if inst is None:
        raise ops.ShapeError(f"no group from {anchor.op} + {act}")
    return inst


DRAW: dict[str, Callable[[random.Random, Grid], OpInstance]] = {
    "dense": _dense, "batch_matmul": _batch_matmul, "conv": _plain_conv, "conv1x1": _conv1x1,
    "depthwise": _depthwise, "grouped": _grouped, "pool": _pool, "stem": _stem, "patchify": _patchify,
    "unary": _unary, "binary": _binary, "normalize": _normalize, "epilogue": _epilogue}


def sweep_instances(n: int, seed: int = 0, max_flops: float | None = None, tier: str = "default") -> list[OpInstance]:
    """``n`` distinct kernel instances drawn from one tier of ``TIERS`` (its grid and its kinds'
    shares), deterministic for a seed; a draw with more than ``max_flops`` FLOPs (default: the tier's
    cap), no more than the tier's ``min_flops``, or whose shapes do not type, is drawn again."""
    if n < 0:
        raise ValueError("the sweep size must be >= 0")
    if tier not in TIERS:
        raise ValueError(f"unknown sweep tier {tier!r} (one of {', '.join(TIERS)})")
    r = random.Random(seed)
    grid = TIERS[tier]
    if max_flops is None:
        max_flops = grid.max_flops
    kinds, weights = [k for k, _ in grid.kinds], [w for _, w in grid.kinds]
    out: dict[tuple, OpInstance] = {}
    tries = 0
    while len(out) < n:
        tries += 1
        if tries > 100 * n + 1000:
            raise RuntimeError(f"drew only {len(out)} distinct sweep kernels of {n}")
        try:
            inst = DRAW[r.choices(kinds, weights)[0]](r, grid)
        except ops.ShapeError:
            continue
        flops, _ = op_flops_bytes(inst.op, inst.attrs, inst.input_types, inst.out_type)
        if flops > max_flops or flops <= grid.min_flops:
            continue
        out.setdefault(inst.key(), inst)
    return list(out.values())
