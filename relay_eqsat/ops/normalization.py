"""Bias, normalization, softmax and reduction: ``nn.bias_add``, ``nn.batch_norm``,
``nn.layer_norm``, ``nn.softmax`` (and ``nn.fast_softmax``), ``mean``.

Their parameters (bias, gamma, beta, moving mean and variance) lie along one
``axis`` of the data; the numpy semantics compute in float64.
"""
from __future__ import annotations

import numpy as np

from ..types import TensorType, TupleType
from .checks import first_tensor, normalize_axis, same_dtype, wrap_axis
from .elementwise import TRANSCENDENTAL_FLOPS, per_element
from .numeric import along, cast, f64
from .opdef import OpDef, ShapeError, is_int, register


def _bias_add_infer(a, ins):
    x, b = ins
    same_dtype(a.op, ins)
    _channel_params(a, x, [b], a.axis("axis", x.ndim))
    return x


def _channel_params(a, x: TensorType, params, axis: int) -> None:
    for p in params:
        if p.shape != (x.shape[axis],):
            raise ShapeError(f"{a.op}: parameter {p} must have shape [{x.shape[axis]}] (axis {axis} of {x})")


register(OpDef("nn.bias_add", 2, "broadcast", _bias_add_infer,
               lambda a, ins: cast(ins[0] + along(ins[1], a["axis"], ins[0].ndim), ins[0].dtype),
               lambda a, ins, out: out.size, defaults=dict(axis=1), normalize=normalize_axis(),
               weight_slots=(1,), vocab=31))


def _norm_infer(a, ins) -> TensorType:
    """Checks shared by batch_norm and layer_norm; returns the data type."""
    x = ins[0]
    same_dtype(a.op, ins)
    _channel_params(a, x, ins[1:], a.axis("axis", x.ndim))
    a.number("epsilon")
    a.flag("center")
    a.flag("scale")
    return x


def _standardize(a, x, mean, var, gamma, beta, axis: int) -> np.ndarray:
    """(x - mean) / sqrt(var + epsilon), then scaled by gamma and shifted by beta as the flags say."""
    y = (x - mean) / np.sqrt(var + a.number("epsilon"))
    if a.flag("scale"):
        y = y * along(f64(gamma), axis, x.ndim)
    if a.flag("center"):
        y = y + along(f64(beta), axis, x.ndim)
    return y


def _batch_norm_eval(a, ins):
    x, gamma, beta, mean, var = ins
    axis = a["axis"]
    y = _standardize(a, f64(x), along(f64(mean), axis, x.ndim), along(f64(var), axis, x.ndim),
                     gamma, beta, axis)
    return cast(y, x.dtype), mean, var


def _layer_norm_eval(a, ins):
    x, gamma, beta = ins
    axis = a["axis"]
    x64 = f64(x)
    mean = x64.mean(axis=axis, keepdims=True)
    var = np.square(x64 - mean).mean(axis=axis, keepdims=True)
    return cast(_standardize(a, x64, mean, var, gamma, beta, axis), x.dtype)


_NORM_DEFAULTS = dict(epsilon=1e-5, center=True, scale=True)
# batch_norm: one multiply-add per element once scale and shift are folded (inference); the
# cost model fuses it like an element-wise op, TVM turning it into a scale-and-shift
register(OpDef("nn.batch_norm", 5, "out_fusable", lambda a, ins: TupleType((_norm_infer(a, ins), ins[3], ins[4])),
               _batch_norm_eval, lambda a, ins, out: 2 * ins[0].size, defaults={"axis": 1, **_NORM_DEFAULTS},
               normalize=normalize_axis(), fusion="fused", weight_slots=(1, 2, 3, 4), vocab=32))
# layer_norm: mean, subtract, square, sum, normalize, scale, shift: 7 per element
register(OpDef("nn.layer_norm", 3, "opaque", _norm_infer, _layer_norm_eval, lambda a, ins, out: 7 * ins[0].size,
               defaults=_NORM_DEFAULTS, required=("axis",), normalize=normalize_axis(-1),
               weight_slots=(1, 2), vocab=34))


def _softmax_infer(a, ins):
    a.axis("axis", ins[0].ndim)
    return ins[0]


def _softmax_eval(a, ins):
    x = f64(ins[0])
    e = np.exp(x - x.max(axis=a["axis"], keepdims=True))
    return cast(e / e.sum(axis=a["axis"], keepdims=True), ins[0].dtype)


# softmax: max, subtract, exp, sum, divide
register(OpDef("nn.softmax", 1, "out_fusable", _softmax_infer, _softmax_eval,
               per_element(4 + TRANSCENDENTAL_FLOPS), required=("axis",), normalize=normalize_axis(-1), vocab=33))
# TVM's softmax with its vectorized exp (``fast_exp``): see the fast ops in ``elementwise``
register(OpDef("nn.fast_softmax", 1, "out_fusable", _softmax_infer, _softmax_eval,
               per_element(4 + TRANSCENDENTAL_FLOPS), required=("axis",), normalize=normalize_axis(-1)))


def _mean_axes(a, x: TensorType) -> tuple[int, ...]:
    axes = a.ints("axis", lo=0)
    if not axes or list(axes) != sorted(set(axes)) or axes[-1] >= x.ndim:
        raise ShapeError(f"mean: axis must be a non-empty sorted tuple of distinct axes of {x}, got {axes}")
    return axes


def _mean_infer(a, ins):
    (x,) = ins
    axes = _mean_axes(a, x)
    keep = a.flag("keepdims")
    return TensorType(tuple(1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes),
                      x.dtype)


def _mean_normalize(op, raw, ins):
    """None or () -> every axis; an int -> a 1-tuple; negative axes wrapped; ``exclude`` complemented."""
    n = first_tensor(op, ins).ndim
    axis = raw.get("axis")
    axes = {wrap_axis(op, v, n) for v in ((axis,) if is_int(axis) else axis or ())}
    if raw.pop("exclude", False) and axes:
        axes = set(range(n)) - axes
        if not axes:  # Relay: the input unchanged (no mean has an empty axis tuple)
            raise ShapeError(f"{op}: exclude of every axis reduces nothing")
    raw["axis"] = tuple(sorted(axes or range(n)))
    return raw


register(OpDef("mean", 1, "reduce", _mean_infer,
               lambda a, ins: cast(np.mean(f64(ins[0]), axis=a["axis"], keepdims=a.flag("keepdims")), ins[0].dtype),
               lambda a, ins, out: ins[0].size, defaults=dict(keepdims=False), required=("axis",),
               normalize=_mean_normalize, vocab=35))
