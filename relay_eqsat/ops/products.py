"""Matrix products and convolution: ``nn.dense``, ``nn.matmul``, ``nn.batch_matmul``, ``nn.conv2d``.

A multiply-add counts 2 FLOPs; the numpy semantics accumulate in float64.
The NCHW window helpers (``conv2d_out_hw``, ``window_attrs``, ``windows``,
``normalize_windows``) serve the pools too.
"""
from __future__ import annotations

import numpy as np

from ..types import TensorType
from .checks import require_ndim, same_dtype
from .elementwise import broadcast_shape
from .numeric import cast, f64
from .opdef import OpDef, ShapeError, is_int, register


def _swap_last(shape: tuple) -> tuple:
    return shape[:-2] + (shape[-1], shape[-2])


def _mm_transposes(a) -> tuple[bool, bool]:
    if a.op == "nn.dense":
        return False, True
    return a.flag("transpose_a"), a.flag("transpose_b")


def _mm_shape(a, x: TensorType, y: TensorType) -> tuple[tuple, int]:
    """(output shape, reduction length K) of a dense/matmul/batch_matmul."""
    ta, tb = _mm_transposes(a)
    if a.op == "nn.batch_matmul":
        require_ndim(a.op, x, 3)
        require_ndim(a.op, y, 3)
    else:
        require_ndim(a.op, x, at_least=2 if ta else 1)
        require_ndim(a.op, y, 2)
    xs = _swap_last(x.shape) if ta else x.shape  # [..., M, K]
    ys = _swap_last(y.shape) if tb else y.shape  # [..., K, N]
    if xs[-1] != ys[-2]:
        raise ShapeError(f"{a.op}: reduction dims differ: {x} and {y} "
                         f"(transpose_a={ta}, transpose_b={tb})")
    if a.op == "nn.batch_matmul":
        return broadcast_shape(xs[:1], ys[:1]) + (xs[1], ys[2]), xs[-1]
    return xs[:-1] + (ys[-1],), xs[-1]


def _mm_infer(a, ins):
    dtype = same_dtype(a.op, ins)
    return TensorType(_mm_shape(a, *ins)[0], a.out_dtype(dtype))


def _mm_eval(a, ins):
    x, y = ins
    ta, tb = _mm_transposes(a)
    xs = np.swapaxes(x, -1, -2) if ta else x
    ys = np.swapaxes(y, -1, -2) if tb else y
    return cast(np.matmul(f64(xs), f64(ys)), a.out_dtype(str(x.dtype)))


def _mm_flops(a, ins, out):
    return 2 * out.size * _mm_shape(a, *ins)[1]


# x [..., K], w [N, K] -> [..., N]; the weight streams from memory once per inference
register(OpDef("nn.dense", 2, "out_fusable", _mm_infer, _mm_eval, _mm_flops, defaults=dict(out_dtype=""),
               streamed_weights=(1,), weight_slots=(1,), vocab=1))
register(OpDef("nn.matmul", 2, "out_fusable", _mm_infer, _mm_eval, _mm_flops,
               defaults=dict(transpose_a=False, transpose_b=False, out_dtype=""), vocab=2))
register(OpDef("nn.batch_matmul", 2, "out_fusable", _mm_infer, _mm_eval, _mm_flops,
               defaults=dict(transpose_a=False, transpose_b=True, out_dtype=""), vocab=3))


# -- batch_dense: a batch_matmul run as one nn.dense per batch entry ---------------------
#
# TVM's x86 batch_matmul schedule tiles by at most 8 and packs nothing: attention's
# products (bert-base Q.K^T [12,128,64] x [12,128,64]^T) run at 20-30 GFLOP/s where
# nn.dense's packed schedule runs one head's [128,64] x [128,64]^T at ~100
# (bench/attention_forms.py). The backend writes batch_dense(a, b) as
# stack([dense(take(a, i), take(b, i)) for i < B]).

def _bd_shapes(a, ins) -> tuple[int, int, int, int]:
    """(B, M, N, K) of batch_dense(a [B, M, K], b [B, N, K])."""
    x, y = ins
    require_ndim(a.op, x, 3)
    require_ndim(a.op, y, 3)
    (b, m, k), (b2, n, k2) = x.shape, y.shape
    if b != b2:
        raise ShapeError(f"{a.op}: batch sizes differ: {x} and {y}")
    if k != k2:
        raise ShapeError(f"{a.op}: reduction dims differ: {x} and {y}")
    if b < 1:
        raise ShapeError(f"{a.op}: empty batch: {x}")
    return b, m, n, k


def _bd_infer(a, ins):
    dtype = same_dtype(a.op, ins)
    b, m, n, _ = _bd_shapes(a, ins)
    return TensorType((b, m, n), a.out_dtype(dtype))


def _bd_eval(a, ins):
    x, y = ins
    return cast(np.matmul(f64(x), np.swapaxes(f64(y), -1, -2)), a.out_dtype(str(x.dtype)))


def _bd_flops(a, ins, out):
    b, m, n, k = _bd_shapes(a, ins)
    return 2 * b * m * n * k


def _bd_kernels(a, ins, out):
    """What TVM runs for it: B denses, each batch entry of both operands taken out (a copy) and
    the B results stacked (a copy of the output)."""
    b, m, n, k = _bd_shapes(a, ins)
    x, y = ins

    def entry(t: TensorType):
        return (b, "strided_slice", {"begin": (0, 0, 0), "end": (1,) + t.shape[1:], "strides": (1, 1, 1)},
                (t,), TensorType((1,) + t.shape[1:], t.dtype))

    piece = TensorType((1, m, n), out.dtype)
    return [(b, "nn.dense", {"out_dtype": a.get("out_dtype", "")},
             (TensorType((m, k), x.dtype), TensorType((n, k), y.dtype)), TensorType((m, n), out.dtype)),
            entry(x), entry(y), (1, "concatenate", {"axis": 0}, (piece,) * b, out)]


register(OpDef("batch_dense", 2, "out_fusable", _bd_infer, _bd_eval, _bd_flops, defaults=dict(out_dtype=""),
               kernels=_bd_kernels))


# -- NCHW windows ------------------------------------------------------------------

def conv2d_out_hw(h, w, kh, kw, strides, padding, dilation):
    oh = (h + padding[0] + padding[2] - dilation[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (w + padding[1] + padding[3] - dilation[1] * (kw - 1) - 1) // strides[1] + 1
    return oh, ow


def window_attrs(a) -> tuple[tuple, tuple, tuple]:
    """The checked (strides, padding, dilation) of a conv or pool."""
    return a.ints("strides", 2, 1), a.ints("padding", 4, 0), a.ints("dilation", 2, 1)


def windows(xp, kernel, strides, dilation, out_hw):
    """Yield (i, j, tap): the [N, C, OH, OW] view of padded ``xp`` under kernel tap (i, j)."""
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel, strides, dilation, out_hw
    for i in range(kh):
        for j in range(kw):
            yield i, j, xp[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]


def normalize_windows(op, raw, ins):
    """Relay's short forms: pool_size/strides/dilation k or (k,), padding p, (p,) or (ph, pw)."""
    for key in ("pool_size", "strides", "dilation"):
        v = raw.get(key)
        if is_int(v) or (isinstance(v, (tuple, list)) and len(v) == 1):
            raw[key] = (int(np.ravel(v)[0]),) * 2
    v = raw.get("padding")
    if is_int(v) or (isinstance(v, (tuple, list)) and len(v) == 1):
        raw["padding"] = (int(np.ravel(v)[0]),) * 4
    elif isinstance(v, (tuple, list)) and len(v) == 2:
        raw["padding"] = tuple(v) * 2
    return raw


# -- conv2d ----------------------------------------------------------------------------

def _conv2d_infer(a, ins):
    x, w = ins
    require_ndim(a.op, x, 4)
    require_ndim(a.op, w, 4)
    a.choice("data_layout", ("NCHW",))
    a.choice("kernel_layout", ("OIHW",))
    dtype = same_dtype(a.op, ins)
    n, c, h, wd = x.shape
    o, i, kh, kw = w.shape
    g = a.integer("groups", 1)
    if c % g or o % g or c // g != i:
        raise ShapeError(f"nn.conv2d: {c} input channels, weight {list(w.shape)} and groups={g} disagree")
    strides, padding, dilation = window_attrs(a)
    oh, ow = conv2d_out_hw(h, wd, kh, kw, strides, padding, dilation)
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"nn.conv2d: empty output {oh}x{ow}")
    return TensorType((n, o, oh, ow), a.out_dtype(dtype))


def _conv2d_eval(a, ins):
    x, w = ins
    strides, (pt, pl, pb, pr), dilation = window_attrs(a)
    g = a["groups"]
    xp = np.pad(f64(x), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    o, ci, kh, kw = w.shape
    out_hw = conv2d_out_hw(x.shape[2], x.shape[3], kh, kw, strides, (pt, pl, pb, pr), dilation)
    out = np.zeros((x.shape[0], o) + out_hw, dtype=np.float64)
    og = o // g
    for gi in range(g):
        ws = f64(w[gi * og:(gi + 1) * og])
        for i, j, tap in windows(xp[:, gi * ci:(gi + 1) * ci], (kh, kw), strides, dilation, out_hw):
            out[:, gi * og:(gi + 1) * og] += np.einsum("nchw,oc->nohw", tap, ws[:, :, i, j])
    return cast(out, a.out_dtype(str(x.dtype)))


def _conv2d_flops(a, ins, out):
    x, w = ins
    return 2 * out.size * w.shape[1] * w.shape[2] * w.shape[3]


register(OpDef("nn.conv2d", 2, "out_fusable", _conv2d_infer, _conv2d_eval, _conv2d_flops,
               defaults=dict(strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1,
                             data_layout="NCHW", kernel_layout="OIHW", out_dtype=""),
               normalize=normalize_windows, conv=True, streamed_weights=(1,), weight_slots=(1,), vocab=0))
