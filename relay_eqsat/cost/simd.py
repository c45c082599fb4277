"""What TVM's x86 convolution schedules do with channel counts: SIMD lanes, channel blocks, efficiency.

Without a tuning log, TVM (0.16, ``topi/x86``) builds an fp32 ``nn.conv2d`` on an
x86 CPU from its *fallback* schedule: ``conv2d.py::_get_default_config`` calls
``conv2d_avx_1x1._fallback_schedule`` (1x1 kernels) or
``conv2d_avx_common._fallback_schedule`` (others), depthwise convolutions get
``depthwise_conv2d._fallback_schedule``, grouped ones
``group_conv2d._fallback_schedule``. Each picks the output-channel block
``oc_bn`` as the largest divisor of the output channels (per group) that is at
most the SIMD width in fp32 lanes (``tvm.target.x86.get_simd_32bit_lanes``: 16
when the target has AVX-512 BW and F, 8 with AVX2, else 4), and the
input-channel block ``ic_bn`` as the largest divisor of the input channels
(per group) at most ``oc_bn``; ``conv2d_alter_op.py`` then lays the data out as
``NCHW{ic_bn}c`` and the kernel vectorizes over ``oc_bn``. 58 channels give
2-wide vectors on a 16-lane CPU (58 = 2 x 29), 64 give 16-wide ones: the
narrow kernels run several times slower per FLOP (``bench/channel_blocks.py``).

``simd_lanes(target)`` answers TVM's lane question from the target string
alone (no TVM), ``channel_blocks`` gives the blocks an instance gets, and
``lane_efficiency`` the fitted share of the full-block speed it runs at.

The same fallback schedules tile other dimensions by divisors too, and
``schedule_efficiency`` multiplies their effects into the lane efficiency:

- ``conv2d_avx_common._fallback_schedule`` (kernels larger than 1x1) blocks
  the output width by ``reg_n``, its largest divisor up to 31: 71 or 37
  columns (prime) run one at a time, at 0.19 of the speed of 40 columns
  (conv3x3 64->64 on Sapphire Rapids: 1 column 26.8 GFLOP/s, 2: 47, 3: 68,
  4: 84, 6: 102, 20: 140); fitted ``(min(reg_n, 8) / 8) ** 0.8``. A column's
  accumulation chain (input channels x kernel size FMAs) short enough for the
  out-of-order window to overlap the next columns' counts as more columns
  (``chain_width``): a 3-channel stem loses little. The 1x1
  schedule tiles height x width together and showed no such effect.
- ``dense.py::_default_dense_pack_config`` tiles the rows of ``x`` by the
  largest power of two up to 8 dividing them: ViT's 197 tokens run in 1-row
  tiles, 768->3072 in 64.9 ms against 11.3 ms on 200 rows (0.17 of the speed),
  768->768 0.35, 65 rows 0.30, 50 rows (2-row tiles) 0.73; fitted
  ``(tile / 8) ** 0.6``.
- the same config blocks the output columns (``N``, the weight's rows) by their
  largest divisor up to twice the lanes (32 with AVX-512), the packed weight's
  inner width: a block that is a multiple of the lanes runs at full speed, one
  below the lanes in partial vectors (``N`` = 49, block 7: 0.35; 197, block 1:
  0.06), and one between (24, 25, 28: N = 48, 1000, 196...) ~50x slower at
  8-row tiles, 3.4 GFLOP/s against ~170 (128 rows, 768 -> N; the slowdown
  shrinks with the row tile: 0.04 at 4 rows, 0.13 at 2, 0.25 on 197 rows;
  one-row layers, memory-bound, lose only ~20%: 1 x 768 -> 1000 at 0.79). Fitted ``(block / lanes)
  ** 1.1`` below the lanes and ``0.02 * (8 / row tile) ** 1.1`` between
  (docs/design-notes.md, "Rules that pay on a CPU"). This is what decides whether a dense
  with its operands swapped (the activations as the weight) pays: 128 rows
  become 32-wide blocks, 197 or 200 rows do not.
- ``batch_matmul.py::_default_batch_matmul_config`` tiles ``M`` the same way:
  ViT's attention P.V ([12,197,197] x [12,197,64]) runs at 0.40 of the speed on
  200 rows; fitted ``(tile / 8) ** 0.44`` (Q.K^T, whose N is 197 too, lost only
  6%: one point, the model is rough there).
"""
from __future__ import annotations

import re
from typing import Sequence

from ..graph import Attrs, TensorType, Type

# -mcpu values this LLVM (17) knows, by what get_simd_32bit_lanes answers for them
# (checked against TVM in tests/test_channel_blocks.py).
_AVX512BW_CPUS = frozenset({
    "skylake-avx512", "skylake_avx512", "skx", "cascadelake", "cooperlake", "cannonlake",
    "icelake-client", "icelake_client", "icelake-server", "icelake_server", "tigerlake", "rocketlake",
    "sapphirerapids", "emeraldrapids", "graniterapids", "graniterapids-d", "graniterapids_d",
    "diamondrapids", "x86-64-v4", "znver4", "znver5",
})
# AVX2 (Knights Landing/Mill have AVX-512 F but not BW: TVM gives them 8 lanes)
_AVX2_CPUS = frozenset({
    "haswell", "broadwell", "skylake", "core-avx2", "core_4th_gen_avx", "core_4th_gen_avx_tsx",
    "core_5th_gen_avx", "core_5th_gen_avx_tsx", "x86-64-v3", "znver1", "znver2", "znver3", "bdver4",
    "alderlake", "raptorlake", "meteorlake", "arrowlake", "arrowlake-s", "arrowlake_s", "lunarlake",
    "pantherlake", "gracemont", "sierraforest", "grandridge", "clearwaterforest",
    "knl", "knm", "mic_avx512",
})
_AVX512F_ONLY_CPUS = frozenset({"knl", "knm", "mic_avx512"})
# -mattr features that imply AVX-512 BW, and (any other +avx512*) AVX-512 F, in LLVM
_IMPLY_BW = ("avx512bw", "avx512vbmi", "avx512vbmi2", "avx512bitalg", "avx512bf16", "avx512fp16")
_X86_TRIPLE = re.compile(r"^(x86_64|amd64|i[3-6]86)")


def _option(target: str, name: str) -> str | None:
    m = re.search(rf"(?:^|\s)-{name}=(\S+)", target)
    return m.group(1) if m else None


def is_x86(target: str | None) -> bool:
    """Whether ``target`` is an LLVM (or C) target for an x86 CPU: its ``-mtriple`` says so,
    or, without one, its ``-mcpu`` is an x86 CPU (this TVM defaults a bare ``llvm`` to riscv64)."""
    if not target:
        return False
    t = str(target)
    if t.split()[0] not in ("llvm", "c"):
        return False
    triple = _option(t, "mtriple")
    if triple is not None:
        return bool(_X86_TRIPLE.match(triple))
    cpu = _option(t, "mcpu")
    return cpu is not None and (cpu in _AVX512BW_CPUS or cpu in _AVX2_CPUS or cpu.startswith("x86-64"))


def simd_lanes(target: str | None) -> int | None:
    """The fp32 SIMD lanes TVM's x86 schedules assume for ``target`` (16, 8 or 4, as
    ``tvm.target.x86.get_simd_32bit_lanes`` answers: AVX-512 BW and F, AVX2, else), from
    ``-mcpu`` and ``-mattr`` (``+avx512bw`` gives 16; ``+avx512f`` alone gives 8, as in TVM);
    None for a target that is not x86 (GPUs, Arm, ...): no lane effect is modelled there."""
    if not is_x86(target):
        return None
    t = str(target)
    cpu = _option(t, "mcpu") or ""
    feats: set[str] = set()
    if cpu in _AVX512BW_CPUS:
        feats = {"avx2", "avx512f", "avx512bw"}
    elif cpu in _AVX2_CPUS:
        feats = {"avx2"} | ({"avx512f"} if cpu in _AVX512F_ONLY_CPUS else set())
    for attr in (_option(t, "mattr") or "").split(","):
        name = attr[1:]
        if attr.startswith("+"):
            if name in _IMPLY_BW:
                feats |= {"avx2", "avx512f", "avx512bw"}
            elif name.startswith("avx512"):
                feats |= {"avx2", "avx512f"}
            elif name == "avx2":
                feats.add("avx2")
        elif attr.startswith("-"):
            if name in ("avx", "avx2"):
                feats.clear()
            elif name == "avx512f":
                feats -= {"avx512f", "avx512bw"}
            elif name == "avx512bw":
                feats.discard("avx512bw")
    if {"avx512f", "avx512bw"} <= feats:
        return 16
    return 8 if "avx2" in feats else 4


def _largest_divisor(n: int, at_most: int) -> int:
    for bn in range(max(1, min(n, at_most)), 0, -1):
        if n % bn == 0:
            return bn
    return 1


def output_block(channels: int, lanes: int) -> int:
    """The channel block TVM's untuned x86 convolution of ``channels`` output channels hands the
    next op on a CPU of ``lanes`` fp32 lanes: the largest divisor of the channels up to the lanes."""
    return _largest_divisor(int(channels), int(lanes))


def conv_kind(op: str, attrs: Attrs, input_types: Sequence[Type]) -> str | None:
    """``"conv"``, ``"depthwise"`` or ``"group"`` for an fp32 NCHW ``nn.conv2d`` that TVM's x86
    fallback schedules block by channels; None for anything else (other ops, other dtypes,
    depthwise with a channel multiplier or dilation, which take TVM's generic schedule)."""
    if op != "nn.conv2d" or len(input_types) != 2:
        return None
    x, w = input_types
    if not (isinstance(x, TensorType) and isinstance(w, TensorType)) or x.ndim != 4 or w.ndim != 4:
        return None
    if x.dtype != "float32" or w.dtype != "float32" or attrs.get("data_layout", "NCHW") != "NCHW":
        return None
    groups = int(attrs.get("groups", 1))
    if groups == 1:
        return "conv"
    c, o = x.shape[1], w.shape[0]
    if groups == c and o % c == 0:  # TVM's is_depthwise_conv2d
        if o != c or tuple(attrs.get("dilation", (1, 1))) != (1, 1):
            return None
        return "depthwise"
    return "group"


def channel_blocks(op: str, attrs: Attrs, input_types: Sequence[Type], lanes: int | None
                   ) -> tuple[int, int] | None:
    """(ic_bn, oc_bn): the channel blocks TVM's fallback schedule picks for this convolution
    on a CPU of ``lanes`` fp32 lanes (per group for grouped ones), or None where no lane effect
    applies (``lanes`` None, or not such a convolution, see :func:`conv_kind`)."""
    kind = conv_kind(op, attrs, input_types) if lanes else None
    if kind is None:
        return None
    x, w = input_types
    groups = int(attrs.get("groups", 1))
    if kind == "depthwise":
        oc_bn = _largest_divisor(w.shape[0], lanes)
        return oc_bn, oc_bn
    out_per_group, in_per_group = w.shape[0] // groups, w.shape[1]
    oc_bn = _largest_divisor(out_per_group, lanes)
    return _largest_divisor(in_per_group, oc_bn), oc_bn


#: efficiency = (oc_bn / lanes) ** EXPONENT[kind]: least squares on the log-seconds of
#: bench/channel_blocks.py's sweep (212 kernels on a 16-lane Sapphire Rapids, one full-block speed
#: per kind and spatial size; docs/design-notes.md, "Rules that pay on a CPU"): 2-wide dense convolutions run at
#: about a fifth of the full-block speed, 4-wide ones at a third. The input block adds nothing
#: (its exponent fitted -0.12: 58->64 runs as fast as 64->64). Depthwise kernels are limited by
#: more than the vector width and lose less; grouped ones (blocks within a group of few channels)
#: lose more. The 8-lane check (AVX2 code, --target ...haswell, 44 kernels) fitted 0.90, 0.61
#: and 1.49: at least these penalties on AVX2 CPUs.
EXPONENT = {"conv": 0.73, "depthwise": 0.27, "group": 1.07}


def lane_efficiency(op: str, attrs: Attrs, input_types: Sequence[Type], lanes: int | None) -> float:
    """The share of its full-block speed a convolution runs at with the channel blocks TVM picks
    on a CPU of ``lanes`` fp32 lanes (1.0 where no lane effect applies): its time is the
    full-block time divided by this."""
    blocks = channel_blocks(op, attrs, input_types, lanes)
    if blocks is None:
        return 1.0
    return min(1.0, blocks[1] / lanes) ** EXPONENT[conv_kind(op, attrs, input_types)]


#: efficiency of a width block / row tile ``b`` of at most ``full``: ``(min(b, full) / full) ** exponent``
WIDTH_BLOCK = (8, 0.8)      # conv output width block (reg_n), kernels larger than 1x1
#: FMAs of the next output's accumulation chain the CPU overlaps with this one's (``chain_width``):
#: least squares on the log-speed of the 1-column convolutions of Sapphire Rapids' data (rms 0.21 ->
#: 0.16; 55-70 fit equally), where ``WIDTH_BLOCK`` was fitted
WIDTH_CHAIN = 64
DENSE_ROWS = (8, 0.6)       # dense_pack row tile
BATCH_MATMUL_ROWS = (8, 0.44)  # batch_matmul row tile


def width_block(op: str, attrs: Attrs, input_types: Sequence[Type], out_type: Type) -> int | None:
    """``reg_n``, the output-width block of TVM's x86 fallback for a dense (groups 1)
    convolution with a kernel larger than 1x1: the largest divisor of the output width up to
    31; None for anything else."""
    if conv_kind(op, attrs, input_types) != "conv" or not isinstance(out_type, TensorType):
        return None
    w = input_types[1]
    if w.shape[2] == 1 and w.shape[3] == 1:
        return None
    return _largest_divisor(out_type.shape[3], 31)


def accumulators(op: str, attrs: Attrs, input_types: Sequence[Type], out_type: Type,
                 lanes: int | None) -> int | None:
    """The vector registers of partial sums in the innermost loop of TVM's x86 fallback for a
    dense (groups 1) fp32 convolution: one per output column of the width block ``reg_n``
    (kernels larger than 1x1, :func:`width_block`) or of the ``oh x ow`` tile
    (``conv2d_avx_1x1._fallback_schedule``: ``ow`` the largest divisor of the output width
    below 32, then ``oh`` the largest divisor of the output height with ``oh * ow < 32``); the
    output-channel block is at most the lanes, one register wide. None for anything else (or
    ``lanes`` None)."""
    if not lanes:
        return None
    block = width_block(op, attrs, input_types, out_type)
    if block is not None or conv_kind(op, attrs, input_types) != "conv" or not isinstance(out_type, TensorType):
        return block
    h, ow = out_type.shape[2], _largest_divisor(out_type.shape[3], 31)
    return ow * next(d for d in range(h, 0, -1) if h % d == 0 and d * ow < 32)


#: a tile of more accumulators than ``vector_registers - REGISTER_SPARE`` spills in the innermost loop and
#: runs at ``REGISTER_SPILL`` of its speed: a step, fitted by ``bench/register_tiles.py`` on a Zen 1 (AVX2,
#: 44 kernels: 3x3 convolutions at 4-56 columns, 1x1 ones at tiles of 7-28; least squares on
#: log-seconds, median |residual| 0.17 -> 0.066; a power law ``(14 / acc) ** s`` fitted worse). Tiles of
#: 7-14 columns ran at 29-31 GFLOP/s there, 15-28 at 15-27.
REGISTER_SPARE = 2
REGISTER_SPILL = 0.65


def vector_registers(lanes: int | None) -> int | None:
    """The vector registers of the ISA that TVM's lane count stands for: 32 with AVX-512
    (16 lanes), 16 with AVX2 or SSE (8 or 4)."""
    if not lanes:
        return None
    return 32 if lanes >= 16 else 16


def register_efficiency(op: str, attrs: Attrs, input_types: Sequence[Type], out_type: Type,
                        lanes: int | None) -> float:
    """The share of its speed a convolution keeps when its fallback tile needs more accumulators
    (:func:`accumulators`) than fit in the vector registers beside the weight and the input
    (``vector_registers - REGISTER_SPARE``): ``REGISTER_SPILL``; 1.0 where they fit or nothing
    applies. On AVX2 (16 registers) TVM's tiles of 28 columns (widths 28, 56, 112; 1x1
    convolutions of most sizes) spill; on AVX-512 (32) only a tile of 31 would."""
    acc = accumulators(op, attrs, input_types, out_type, lanes)
    if acc is None or acc <= vector_registers(lanes) - REGISTER_SPARE:
        return 1.0
    return REGISTER_SPILL


def chain_length(input_types: Sequence[Type]) -> int:
    """The FMAs one output value accumulates in a convolution (input channels per group x kernel
    height x width): the dependency chain each of the schedule's ``reg_n`` accumulators runs."""
    w = input_types[1]
    return max(1, w.shape[1] * w.shape[2] * w.shape[3])


def chain_width(reg_n: int, chain: int) -> float:
    """The independent accumulators a convolution's inner loop keeps busy: its ``reg_n`` columns,
    plus what the CPU's out-of-order window overlaps of the next columns' chains while this one's
    runs (``WIDTH_CHAIN`` FMAs): one column of a 3-channel 3x3 stem (27 FMAs a chain) runs at the
    speed of several, one of a 64-channel 3x3 convolution (576) alone. Measured (1-column kernels,
    share of the full-block speed): Sapphire Rapids 0.62 at 27 FMAs, 0.25 at 147, 0.17 from 576 on;
    Zen 4 1.03, 0.38, 0.27."""
    return reg_n * (1.0 + WIDTH_CHAIN / chain)


def _power2_tile(n: int, at_most: int = 8) -> int:
    t = at_most
    while t > 1 and n % t:
        t //= 2
    return t


def row_tile(op: str, attrs: Attrs, input_types: Sequence[Type]) -> int | None:
    """The row tile TVM's x86 fallback gives an fp32 ``nn.dense`` (rows of a 2-D ``x``) or
    ``nn.batch_matmul`` (``M``, without transpose_a): the largest power of two up to 8
    dividing the rows; None for anything else."""
    if not input_types or not isinstance(input_types[0], TensorType) or input_types[0].dtype != "float32":
        return None
    x = input_types[0]
    if op == "nn.dense" and x.ndim == 2:
        return _power2_tile(x.shape[0])
    if op == "nn.batch_matmul" and x.ndim == 3 and not attrs.get("transpose_a", False):
        return _power2_tile(x.shape[1])
    return None


def column_block(op: str, attrs: Attrs, input_types: Sequence[Type], lanes: int | None) -> int | None:
    """The output-column block TVM's x86 fallback gives an fp32 ``nn.dense`` with a 2-D weight
    on a CPU of ``lanes`` fp32 lanes: the largest divisor of the weight's rows up to twice the
    lanes; None for anything else (or ``lanes`` None)."""
    if op != "nn.dense" or not lanes or len(input_types) != 2:
        return None
    x, w = input_types
    if not (isinstance(x, TensorType) and isinstance(w, TensorType)) or w.ndim != 2 or x.ndim != 2:
        return None
    if x.dtype != "float32" or w.dtype != "float32":
        return None
    return _largest_divisor(w.shape[0], 2 * lanes)


#: a dense's column block below the lanes runs at ``(block / lanes) ** DENSE_PARTIAL``; one above
#: the lanes and not a multiple of them at ``DENSE_SPLIT * (8 / row tile) ** DENSE_SPLIT_ROWS``
DENSE_PARTIAL = 1.1
DENSE_SPLIT = 0.02
DENSE_SPLIT_ROWS = 1.1


def column_efficiency(block: int | None, row: int | None, lanes: int | None) -> float:
    """The share of its well-blocked speed a dense runs at with output-column block ``block``
    and row tile ``row`` (:func:`column_block`, :func:`row_tile`)."""
    if block is None or not lanes or block % lanes == 0:
        return 1.0
    if block < lanes:
        return (block / lanes) ** DENSE_PARTIAL
    return DENSE_SPLIT * (DENSE_ROWS[0] / (row or 1)) ** DENSE_SPLIT_ROWS


def _tile_efficiency(block: float | None, rule: tuple[int, float]) -> float:
    if block is None:
        return 1.0
    full, exponent = rule
    return (min(block, full) / full) ** exponent


def schedule_efficiency(op: str, attrs: Attrs, input_types: Sequence[Type], out_type: Type,
                        lanes: int | None, columns: bool = True, chains: bool = True,
                        registers: bool = True) -> float:
    """The share of its well-tiled speed a kernel runs at under TVM's x86 fallback schedules
    on a CPU of ``lanes`` fp32 lanes: the lane efficiency of a convolution's channel blocks
    times that of its output-width block, or a dense/batch_matmul's row tile (times a dense's
    output-column block); 1.0 where
    none applies or the target is not x86 (``lanes`` None). Its time is the well-tiled time
    divided by this. ``columns`` False leaves the column blocks out (what models trained on
    baseline v2 were fitted to); ``chains`` False counts a width block as its columns alone,
    without the accumulation chains the CPU overlaps (``chain_width``; baselines v2 and v3);
    ``registers`` False leaves out a convolution tile's spilled accumulators
    (``register_efficiency``; baselines v2 to v4)."""
    if not lanes:
        return 1.0
    eff = lane_efficiency(op, attrs, input_types, lanes)
    if registers:
        eff *= register_efficiency(op, attrs, input_types, out_type, lanes)
    columns_busy: float | None = width_block(op, attrs, input_types, out_type)
    if columns_busy is not None and chains:
        columns_busy = chain_width(columns_busy, chain_length(input_types))
    eff *= _tile_efficiency(columns_busy, WIDTH_BLOCK)
    rule = DENSE_ROWS if op == "nn.dense" else BATCH_MATMUL_ROWS
    row = row_tile(op, attrs, input_types)
    if columns:
        eff *= column_efficiency(column_block(op, attrs, input_types, lanes), row, lanes)
    return eff * _tile_efficiency(row, rule)
