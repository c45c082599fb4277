"""Input checks and axis normalization shared by the op families' ``infer`` and ``normalize``."""
from __future__ import annotations

from typing import Sequence

from ..types import TensorType, Type
from .opdef import ShapeError, is_int


def tensor(t: Type, what: str) -> TensorType:
    if not isinstance(t, TensorType):
        raise ShapeError(f"{what} must be a tensor, got {t}")
    return t


def same_dtype(op: str, types: Sequence[TensorType]) -> str:
    """The one dtype of ``types``; ShapeError if they differ."""
    dtypes = sorted({t.dtype for t in types})
    if len(dtypes) > 1:
        raise ShapeError(f"{op}: inputs have different dtypes {dtypes}")
    return dtypes[0]


def require_ndim(op: str, t: TensorType, ndim: int | None = None, at_least: int = 0) -> TensorType:
    if (ndim is not None and t.ndim != ndim) or t.ndim < at_least:
        want = f"{ndim}-d" if ndim is not None else f"at least {at_least}-d"
        raise ShapeError(f"{op}: needs a {want} input, got {t}")
    return t


def wrap_axis(op: str, v, ndim: int, what: str = "axis") -> int:
    """A possibly negative Relay axis -> its index in [0, ndim)."""
    if not is_int(v) or not -ndim <= v < ndim:
        raise ShapeError(f"{op}: {what} {v!r} out of range for a {ndim}-d input")
    return int(v) + ndim if v < 0 else int(v)


def first_tensor(op: str, ins) -> TensorType:
    if not ins or not isinstance(ins[0], TensorType):
        raise ShapeError(f"{op}: normalizing attributes needs the input's tensor type, got {list(ins)}")
    return ins[0]


def normalize_axis(relay_default: int | None = None):
    """A ``normalize`` wrapping the ``axis`` attribute (``relay_default`` when absent)."""
    def normalize(op, raw, ins):
        if relay_default is not None:
            raw.setdefault("axis", relay_default)
        if "axis" in raw:
            raw["axis"] = wrap_axis(op, raw["axis"], first_tensor(op, ins).ndim)
        return raw
    return normalize
