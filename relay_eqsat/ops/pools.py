"""Pooling over NCHW windows: ``nn.max_pool2d``, ``nn.avg_pool2d`` and the global pools.

The average pool divides by the element counts TOPI uses (``count_include_pad``,
``ceil_mode``'s extra padding never counted). FLOPs: one per window element.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..types import TensorType
from .checks import require_ndim
from .numeric import cast, f64
from .opdef import OpDef, ShapeError, register
from .products import conv2d_out_hw, normalize_windows, window_attrs, windows


@dataclass(frozen=True)
class _PoolGeometry:
    kernel: tuple
    strides: tuple
    padding: tuple  # top, left, bottom, right
    dilation: tuple
    extra: tuple  # ceil_mode's extra bottom/right padding (stride - 1), as in TOPI
    out_hw: tuple


def _pool_geometry(a, x: TensorType) -> _PoolGeometry:
    require_ndim(a.op, x, 4)
    a.choice("layout", ("NCHW",))
    kernel = a.ints("pool_size", 2, 1)
    strides, padding, dilation = window_attrs(a)
    extra = tuple(s - 1 for s in strides) if a.flag("ceil_mode") else (0, 0)
    padded = (padding[0], padding[1], padding[2] + extra[0], padding[3] + extra[1])
    out_hw = conv2d_out_hw(x.shape[2], x.shape[3], *kernel, strides, padded, dilation)
    if min(out_hw) <= 0:
        raise ShapeError(f"{a.op}: pool window {kernel} does not fit input {x} with padding {padding}")
    return _PoolGeometry(kernel, strides, padding, dilation, extra, out_hw)


def _pool_infer(a, ins):
    (x,) = ins
    if a.op == "nn.avg_pool2d":
        a.flag("count_include_pad")
    return TensorType(x.shape[:2] + _pool_geometry(a, x).out_hw, x.dtype)


def _truncdiv(p, q):
    """Integer division rounding toward zero (TVM's ``/`` on ints)."""
    return np.where(p < 0, -((-p) // q), p // q)


def _avg_divisors(out_len, size, k, s, d, head, tail, include_pad):
    """Per output position along one axis: the element count TOPI divides the window sum by."""
    start = np.arange(out_len) * s - head
    end = start + (k - 1) * d
    if include_pad:  # taps inside the explicit padding count, ceil_mode's extra padding does not
        return _truncdiv(np.minimum(end, size + tail - 1) - start, d) + 1
    first = start + d * np.maximum(_truncdiv(d - 1 - start, d), 0)  # first tap inside the input
    return _truncdiv(np.minimum(end, size - 1) - first, d) + 1


def _lowest(dtype) -> Any:
    return np.finfo(dtype).min if np.issubdtype(dtype, np.floating) else np.iinfo(dtype).min


def _pool_eval(a, ins):
    (x,) = ins
    geo = _pool_geometry(a, TensorType(x.shape, str(x.dtype)))
    (pt, pl, pb, pr), (eh, ew) = geo.padding, geo.extra
    pads = ((0, 0), (0, 0), (pt, pb + eh), (pl, pr + ew))
    if a.op == "nn.max_pool2d":
        xp = np.pad(x, pads, constant_values=_lowest(x.dtype))
        taps = [t for _, _, t in windows(xp, geo.kernel, geo.strides, geo.dilation, geo.out_hw)]
        return cast(np.maximum.reduce(taps), x.dtype)
    xp = np.pad(f64(x), pads)
    total = sum(t for _, _, t in windows(xp, geo.kernel, geo.strides, geo.dilation, geo.out_hw))
    include = a.flag("count_include_pad")
    counts = [_avg_divisors(geo.out_hw[i], x.shape[2 + i], geo.kernel[i], geo.strides[i], geo.dilation[i],
                            geo.padding[i], geo.padding[i + 2], include) for i in (0, 1)]
    divisor = np.outer(*counts)
    if not include:
        divisor = np.maximum(divisor, 1)
    with np.errstate(all="ignore"):
        return cast(total / divisor, x.dtype)


def _pool_flops(a, ins, out):
    kh, kw = a.ints("pool_size", 2, 1)
    return out.size * kh * kw


_POOL_DEFAULTS = dict(pool_size=(1, 1), strides=(1, 1), dilation=(1, 1), padding=(0, 0, 0, 0),
                      layout="NCHW", ceil_mode=False)
register(OpDef("nn.max_pool2d", 1, "out_fusable", _pool_infer, _pool_eval, _pool_flops,
               defaults=_POOL_DEFAULTS, normalize=normalize_windows, vocab=21))
register(OpDef("nn.avg_pool2d", 1, "out_fusable", _pool_infer, _pool_eval, _pool_flops,
               defaults={**_POOL_DEFAULTS, "count_include_pad": False}, normalize=normalize_windows, vocab=22))


def _global_pool_infer(a, ins):
    (x,) = ins
    require_ndim(a.op, x, 4)
    a.choice("layout", ("NCHW",))
    return TensorType(x.shape[:2] + (1, 1), x.dtype)


def _global_pool_eval(fn):
    return lambda a, ins: cast(fn(f64(ins[0]), axis=(2, 3), keepdims=True), ins[0].dtype)


for _name, _fn, _vocab in [("nn.global_avg_pool2d", np.mean, 23), ("nn.global_max_pool2d", np.max, 24)]:
    register(OpDef(_name, 1, "out_fusable", _global_pool_infer, _global_pool_eval(_fn),
                   lambda a, ins, out: ins[0].size, defaults=dict(layout="NCHW"), vocab=_vocab))
