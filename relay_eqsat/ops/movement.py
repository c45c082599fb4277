"""Data movement: ``transpose``, ``reshape``, ``concatenate``, ``split``, ``strided_slice``, ``nn.pad``.

All are injective and count 0 FLOPs. The ``normalize`` functions resolve
Relay's forms (negative axes, reshape codes, ``indices_or_sections``, slice
``axes`` and ``slice_mode``) into the canonical attributes.
"""
from __future__ import annotations

import math

import numpy as np

from ..types import TensorType, TupleType
from .checks import first_tensor, normalize_axis, same_dtype, wrap_axis
from .opdef import OpDef, ShapeError, is_int, register


def _transpose_infer(a, ins):
    (x,) = ins
    axes = a.ints("axes")
    if sorted(axes) != list(range(x.ndim)):
        raise ShapeError(f"transpose: axes {list(axes)} are not a permutation of the {x.ndim} axes of {x}")
    return TensorType(tuple(x.shape[i] for i in axes), x.dtype)


def _transpose_normalize(op, raw, ins):
    n = first_tensor(op, ins).ndim
    axes = raw.get("axes")
    raw["axes"] = tuple(reversed(range(n))) if not axes else tuple(wrap_axis(op, v, n, "axes") for v in axes)
    return raw


register(OpDef("transpose", 1, "injective", _transpose_infer, lambda a, ins: np.transpose(ins[0], a["axes"]),
               required=("axes",), normalize=_transpose_normalize, vocab=25))


def _reshape_infer(a, ins):
    (x,) = ins
    shape = a.ints("newshape", lo=1)
    if math.prod(shape) != x.size:
        raise ShapeError(f"reshape: cannot reshape {x} ({x.size} elements) to {list(shape)}")
    return TensorType(shape, x.dtype)


def _reshape_normalize(op, raw, ins):
    """Resolve Relay's newshape codes: 0 copy, -1 infer, -2 copy rest, -3 merge two, -4 split one."""
    shape = first_tensor(op, ins).shape
    codes = raw.get("newshape", ())
    codes = [int(c) for c in ((codes,) if is_int(codes) else codes)]
    allowzero = bool(raw.pop("allowzero", False))
    out: list[int] = []
    src = i = 0
    while i < len(codes):
        c = codes[i]
        if c > 0 or (c == 0 and allowzero):
            out.append(c)
            src += 1
        elif c in (0, -1):
            out.append(shape[src] if c == 0 else -1)
            src += 1
        elif c == -2:
            out.extend(shape[src:])
            src = len(shape)
        elif c == -3:
            out.append(shape[src] * shape[src + 1])
            src += 2
        elif c == -4:
            d1, d2 = codes[i + 1], codes[i + 2]
            d1 = shape[src] // d2 if d1 == -1 else d1
            out += [d1, shape[src] // d1 if d2 == -1 else d2]
            src += 1
            i += 2
        else:
            raise ShapeError(f"{op}: unknown newshape code {c}")
        i += 1
    if out.count(-1) > 1:
        raise ShapeError(f"{op}: newshape {codes} has more than one -1")
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        size = math.prod(shape)
        if known <= 0 or size % known:
            raise ShapeError(f"{op}: cannot infer -1 in newshape {codes} for input shape {list(shape)}")
        out[out.index(-1)] = size // known
    raw["newshape"] = tuple(out)
    return raw


register(OpDef("reshape", 1, "injective", _reshape_infer, lambda a, ins: np.reshape(ins[0], a["newshape"]),
               required=("newshape",), normalize=_reshape_normalize, vocab=26))


def _replace_dim(shape: tuple, axis: int, d: int) -> tuple:
    return shape[:axis] + (d,) + shape[axis + 1:]


def _concat_infer(a, ins):
    first = ins[0]
    dtype = same_dtype(a.op, ins)
    axis = a.axis("axis", first.ndim)
    for t in ins[1:]:
        if t.ndim != first.ndim or _replace_dim(t.shape, axis, 0) != _replace_dim(first.shape, axis, 0):
            raise ShapeError(f"concatenate: {t} does not match {first} outside axis {axis}")
    return TensorType(_replace_dim(first.shape, axis, sum(t.shape[axis] for t in ins)), dtype)


register(OpDef("concatenate", None, "injective", _concat_infer, lambda a, ins: np.concatenate(ins, axis=a["axis"]),
               defaults=dict(axis=0), normalize=normalize_axis(), vocab=27))


def _split_infer(a, ins):
    (x,) = ins
    axis = a.axis("axis", x.ndim)
    bounds = (0,) + a.ints("indices") + (x.shape[axis],)
    if any(lo >= hi for lo, hi in zip(bounds, bounds[1:])):
        raise ShapeError(f"split: indices {list(bounds[1:-1])} must ascend strictly inside (0, {x.shape[axis]}) "
                         f"on axis {axis} of {x}")
    return TupleType(tuple(TensorType(_replace_dim(x.shape, axis, hi - lo), x.dtype)
                           for lo, hi in zip(bounds, bounds[1:])))


def _split_normalize(op, raw, ins):
    raw = normalize_axis()(op, raw, ins)
    dim = first_tensor(op, ins).shape[raw.get("axis", 0)]
    spec = raw.pop("indices_or_sections", raw.get("indices"))
    if is_int(spec):  # a number of equal sections
        if spec < 1 or dim % spec:
            raise ShapeError(f"{op}: cannot split a dimension of {dim} into {spec} equal sections")
        spec = [dim // spec * k for k in range(1, spec)]
    if spec is not None:
        raw["indices"] = tuple(int(i) + dim if i < 0 else int(i) for i in spec)
    return raw


register(OpDef("split", 1, "injective", _split_infer,
               lambda a, ins: tuple(np.split(ins[0], a["indices"], axis=a["axis"])),
               defaults=dict(axis=0), required=("indices",), normalize=_split_normalize, vocab=28))


def _slice_infer(a, ins):
    (x,) = ins
    n = x.ndim
    begin, end, strides = a.ints("begin", n, 0), a.ints("end", n, 0), a.ints("strides", n, 1)
    for i, (b, e, d) in enumerate(zip(begin, end, x.shape)):
        if not b < e <= d:
            raise ShapeError(f"strided_slice: axis {i} of {x}: need 0 <= begin < end <= {d}, got begin={b}, end={e}")
    return TensorType(tuple(-(-(e - b) // s) for b, e, s in zip(begin, end, strides)), x.dtype)


def _slice_eval(a, ins):
    return ins[0][tuple(slice(b, e, s) for b, e, s in zip(a["begin"], a["end"], a["strides"]))]


def _clamp_index(i, dim: int) -> int:
    i = int(i)
    return min(max(i + dim if i < 0 else i, 0), dim)


def _slice_normalize(op, raw, ins):
    """Relay's partial begin/end/strides, ``axes`` and ``slice_mode`` -> full-rank, clamped tuples."""
    shape = first_tensor(op, ins).shape
    mode = raw.pop("slice_mode", "end")
    if mode not in ("end", "size"):
        raise ShapeError(f"{op}: unknown slice_mode {mode!r}")
    axes = raw.pop("axes", None)
    axes = range(len(shape)) if axes is None else [wrap_axis(op, v, len(shape), "axes") for v in axes]
    begin, end, strides = (list(raw.get(k) or ()) for k in ("begin", "end", "strides"))
    canon = [[0] * len(shape), list(shape), [1] * len(shape)]
    for j, ax in enumerate(axes):
        dim = shape[ax]
        s = int(strides[j]) if j < len(strides) and mode == "end" else 1
        if s < 1:
            raise ShapeError(f"{op}: stride {s} on axis {ax}: only positive strides are modelled")
        b = int(begin[j]) if j < len(begin) and begin[j] is not None else 0
        e = dim
        if j < len(end) and end[j] is not None:
            e = int(end[j])
            if mode == "size":  # as in Relay: the size counts from the begin as given, negative or not
                e = dim if e < 0 else b + e
        canon[0][ax], canon[1][ax], canon[2][ax] = _clamp_index(b, dim), _clamp_index(e, dim), s
    raw["begin"], raw["end"], raw["strides"] = map(tuple, canon)
    return raw


register(OpDef("strided_slice", 1, "injective", _slice_infer, _slice_eval,
               required=("begin", "end", "strides"), normalize=_slice_normalize, vocab=29))


def _pad_infer(a, ins):
    (x,) = ins
    pw = a["pad_width"]
    if (not isinstance(pw, (tuple, list)) or len(pw) != x.ndim
            or not all(isinstance(p, (tuple, list)) and len(p) == 2 and all(is_int(v) and v >= 0 for v in p)
                       for p in pw)):
        raise ShapeError(f"nn.pad: pad_width must be {x.ndim} (before, after) pairs of ints >= 0, got {pw!r}")
    a.number("pad_value")
    if a.choice("pad_mode", ("constant", "edge", "reflect")) == "reflect" and any(
            max(p) >= d for p, d in zip(pw, x.shape)):
        raise ShapeError(f"nn.pad: reflect padding {pw!r} must be smaller than the dims of {x}")
    return TensorType(tuple(d + lo + hi for d, (lo, hi) in zip(x.shape, pw)), x.dtype)


def _pad_eval(a, ins):
    (x,) = ins
    if a["pad_mode"] == "constant":
        return np.pad(x, a["pad_width"], constant_values=np.asarray(a.number("pad_value"), x.dtype))
    return np.pad(x, a["pad_width"], mode=a["pad_mode"])


register(OpDef("nn.pad", 1, "injective", _pad_infer, _pad_eval,
               defaults=dict(pad_value=0.0, pad_mode="constant"), required=("pad_width",), vocab=30))
