"""The operator table: attributes, shape inference, FLOP/byte counts, numpy semantics.

Operator names are Relay's (``nn.conv2d``, ``add``...), plus the graph-level
``var``, ``constant``, ``opaque``, ``tuple`` and ``tuple_get_item``.
Attributes are normalized by the frontend to the canonical forms below, so
that equal computations have equal attributes (the e-graph interns them):

=====================  ======================================================
op (inputs)            attrs (canonical form)
=====================  ======================================================
var ()                 name: str, type: TensorType
constant ()            name: str, type: TensorType
opaque (any)           key: int, type: Type, name: str
tuple (*xs)            -
tuple_get_item (t)     index: int
nn.conv2d (x, w)       strides (2), padding (4: top, left, bottom, right),
                       dilation (2), groups: int, data_layout "NCHW",
                       kernel_layout "OIHW", out_dtype: str ("" = input dtype)
nn.dense (x, w)        out_dtype ("" ); x [..., K], w [N, K] -> [..., N]
nn.matmul (a, b)       transpose_a: bool, transpose_b: bool, out_dtype
nn.batch_matmul (a,b)  transpose_a: bool, transpose_b: bool, out_dtype
                       (Relay default transpose_b=True: [B,M,K] x [B,N,K])
add subtract multiply  - (numpy broadcasting)
divide maximum minimum
power
nn.relu tanh sigmoid   -
erf exp sqrt rsqrt
negative
clip (x)               a_min: float, a_max: float
nn.leaky_relu (x)      alpha: float
nn.max_pool2d (x)      pool_size (2), strides (2), dilation (2), padding (4),
                       layout "NCHW", ceil_mode: bool
nn.avg_pool2d (x)      as max_pool2d plus count_include_pad: bool
nn.global_avg_pool2d   layout "NCHW"
nn.global_max_pool2d   layout "NCHW"
transpose (x)          axes: full permutation tuple
reshape (x)            newshape: the concrete output shape (no -1/0 codes)
concatenate (*xs)      axis: int >= 0
split (x)              indices: tuple of split points (ascending), axis: int >= 0
strided_slice (x)      begin, end, strides: full-rank tuples (end clamped to dim;
                       0 <= begin < end <= dim, strides >= 1)
nn.pad (x)             pad_width: ((lo, hi), ...) per axis, pad_value: float,
                       pad_mode "constant"
nn.bias_add (x, b)     axis: int >= 0
nn.batch_norm          axis: int >= 0, epsilon: float, center: bool, scale: bool;
 (x, g, b, mean, var)  output (out, mean, var) as in Relay
nn.softmax (x)         axis: int >= 0
nn.layer_norm (x,g,b)  axis: int >= 0, epsilon: float, center: bool, scale: bool
mean (x)               axis: sorted tuple of ints >= 0, keepdims: bool
=====================  ======================================================

Every op defines ``infer`` (raising ``ShapeError``, a ``ValueError``, on bad
inputs or attributes, never an IndexError/KeyError), ``flops``, ``bytes``
(inputs read + output written) and ``evaluate`` (numpy reference, Relay's
semantics, float32 out; matmul/conv/reductions accumulate in float64).
Attributes missing from a node fall back to the op's ``defaults``; a missing
attribute without a default is a ``ShapeError`` naming it.
``normalize_attrs`` turns Relay-style attributes (negative axes, ``None``,
short padding forms, reshape codes, ``indices_or_sections``, slice ``axes``
and ``slice_mode``...) into the canonical form above and drops the rest.
An ``out_dtype`` equal to the input's dtype becomes "".
Canonical axes are non-negative, so softmax/layer_norm (Relay default -1)
and mean have no ``axis`` default: ``normalize_attrs`` supplies it.

FLOPs: a multiply-add is 2; element-wise arithmetic is 1 per output element;
a transcendental function (exp, tanh, sigmoid, erf, sqrt, rsqrt, power)
counts ``TRANSCENDENTAL_FLOPS`` per element; data movement (transpose,
reshape, concatenate, split, strided_slice, pad) is 0 FLOPs.

``pattern`` mirrors TVM's fusion classes (``TOpPattern`` of TVM 0.16):
``elemwise``, ``broadcast``, ``injective``, ``reduce``, ``out_fusable``
(kOutEWiseFusable: conv2d, dense, matmul, batch_matmul, the pools,
batch_norm, softmax: element-wise consumers fuse into them), ``opaque``
(layer_norm), ``leaf`` or ``tuple``.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from .graph import Attrs, TensorType, TupleType, Type

try:  # scipy comes with xgboost; the fallback is exact but slow
    from scipy.special import erf as _erf
except ImportError:  # pragma: no cover
    _erf = np.vectorize(math.erf, otypes=[np.float64])

TRANSCENDENTAL_FLOPS = 4
"""FLOPs counted per element for exp, tanh, sigmoid, erf, sqrt, rsqrt, power."""


class ShapeError(ValueError):
    """Raised when an operator's inputs have shapes or attributes it cannot take."""


@dataclass(frozen=True)
class OpDef:
    name: str
    arity: int | None  # None: variadic (at least one input; opaque: any number)
    infer: Callable[["OpAttrs", Sequence[Type]], Type]
    evaluate: Callable[["OpAttrs", list], Any]
    flops: Callable[["OpAttrs", Sequence[Type], Type], int]
    pattern: str
    defaults: dict | None = None
    required: tuple = ()  # canonical attributes without a default
    normalize: Callable[[str, dict, list], dict] | None = None  # Relay-style -> canonical


OPS: dict[str, OpDef] = {}


def register(name: str, arity: int | None, pattern: str, infer, evaluate, flops=None, defaults=None,
             required=(), normalize=None) -> OpDef:
    op = OpDef(name, arity, infer, evaluate, flops or (lambda a, ins, out: 0), pattern, defaults,
               tuple(required), normalize)
    OPS[name] = op
    return op


def get(op: str) -> OpDef:
    try:
        return OPS[op]
    except KeyError:
        raise ShapeError(f"unknown operator {op!r}") from None


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


class OpAttrs(Mapping):
    """A node's attributes with the op's defaults filled in, plus checked accessors.

    A missing attribute without a default, or one of the wrong kind, raises
    ``ShapeError`` naming the op and the attribute.
    """

    def __init__(self, op: OpDef, attrs: Mapping | None):
        self.op = op.name
        self._d = {**(op.defaults or {}), **(attrs or {})}

    def __getitem__(self, key: str) -> Any:
        try:
            return self._d[key]
        except KeyError:
            raise ShapeError(f"{self.op}: missing required attribute {key!r}") from None

    def __contains__(self, key) -> bool:
        return key in self._d

    def get(self, key, default=None):
        return self._d.get(key, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def _bad(self, key, want) -> ShapeError:
        return ShapeError(f"{self.op}: attribute {key!r} must be {want}, got {self._d.get(key)!r}")

    def integer(self, key: str, lo: int | None = None) -> int:
        v = self[key]
        if not _is_int(v) or (lo is not None and v < lo):
            raise self._bad(key, "an int" + (f" >= {lo}" if lo is not None else ""))
        return int(v)

    def ints(self, key: str, n: int | None = None, lo: int | None = None) -> tuple[int, ...]:
        v = self[key]
        want = "a tuple of " + (f"{n} " if n is not None else "") + "ints" + (f" >= {lo}" if lo is not None else "")
        if (not isinstance(v, (tuple, list)) or not all(_is_int(e) for e in v)
                or (n is not None and len(v) != n) or (lo is not None and any(e < lo for e in v))):
            raise self._bad(key, want)
        return tuple(int(e) for e in v)

    def number(self, key: str) -> float:
        v = self[key]
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise self._bad(key, "a number")
        return float(v)

    def flag(self, key: str) -> bool:
        v = self[key]
        if not isinstance(v, (bool, int, np.bool_, np.integer)) or v not in (0, 1):
            raise self._bad(key, "a bool")
        return bool(v)

    def choice(self, key: str, options: Sequence[str]) -> str:
        v = self[key]
        if v not in options:
            raise self._bad(key, " or ".join(map(repr, options)))
        return v

    def axis(self, key: str, ndim: int) -> int:
        v = self[key]
        if not _is_int(v) or not 0 <= v < ndim:
            raise self._bad(key, f"an axis in [0, {ndim}) of a {ndim}-d input")
        return int(v)

    def out_dtype(self, default: str) -> str:
        v = self.get("out_dtype") or default
        try:
            np.dtype(v)
        except TypeError:
            raise self._bad("out_dtype", "a dtype name") from None
        return v


def _check_arity(op: OpDef, input_types: Sequence[Type]) -> None:
    if op.arity is None:
        if not input_types and op.name != "opaque":  # an opaque op may take no inputs
            raise ShapeError(f"{op.name} needs at least one input")
    elif len(input_types) != op.arity:
        raise ShapeError(f"{op.name} takes {op.arity} inputs, got {len(input_types)}")


def infer_type(op: str, attrs: Mapping, input_types: Sequence[Type]) -> Type:
    """Output type of ``op`` on inputs of these types; ShapeError if invalid."""
    d = get(op)
    _check_arity(d, input_types)
    if op not in ("tuple", "opaque", "tuple_get_item"):
        for t in input_types:
            if not isinstance(t, TensorType):
                raise ShapeError(f"{op} takes tensors, got {t}")
    try:
        return d.infer(OpAttrs(d, attrs), input_types)
    except (TypeError, IndexError, KeyError) as e:  # malformed attribute values
        raise ShapeError(f"{op}: invalid attributes {dict(attrs or {})!r}: {e}") from e


def evaluate(op: str, attrs: Mapping, inputs: list) -> Any:
    """Numpy reference semantics of ``op``."""
    d = get(op)
    return d.evaluate(OpAttrs(d, attrs), inputs)


def flops(op: str, attrs: Mapping, input_types: Sequence[Type], out_type: Type) -> int:
    """Floating-point operations of one execution (multiply-add = 2)."""
    d = get(op)
    return int(d.flops(OpAttrs(d, attrs), input_types, out_type))


def bytes_moved(op: str, attrs: Mapping, input_types: Sequence[Type], out_type: Type) -> int:
    """Bytes read from inputs plus bytes written to the output."""
    if get(op).pattern in ("leaf", "tuple") or op == "tuple_get_item":
        return 0
    return sum(t.nbytes for t in input_types) + out_type.nbytes


def pattern(op: str) -> str:
    return get(op).pattern


def _tensor(t: Type, what: str) -> TensorType:
    if not isinstance(t, TensorType):
        raise ShapeError(f"{what} must be a tensor, got {t}")
    return t


def _same_dtype(op: str, types: Sequence[TensorType]) -> str:
    dtypes = sorted({t.dtype for t in types})
    if len(dtypes) > 1:
        raise ShapeError(f"{op}: inputs have different dtypes {dtypes}")
    return dtypes[0]


def _ndim(op: str, t: TensorType, ndim: int | None = None, at_least: int = 0) -> TensorType:
    if (ndim is not None and t.ndim != ndim) or t.ndim < at_least:
        want = f"{ndim}-d" if ndim is not None else f"at least {at_least}-d"
        raise ShapeError(f"{op}: needs a {want} input, got {t}")
    return t


def _cast(value, dtype) -> np.ndarray:
    return np.asarray(value).astype(dtype, copy=False)


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _along(v, axis: int, ndim: int) -> np.ndarray:
    """A 1-d array shaped to broadcast along ``axis`` of an ``ndim``-d tensor."""
    return np.reshape(v, [-1 if i == axis else 1 for i in range(ndim)])


# -- graph-level ops ---------------------------------------------------------

def _leaf_infer(kind):
    def infer(a, ins) -> Type:
        t = a["type"]
        if not isinstance(t, kind):
            raise ShapeError(f"{a.op}: attribute 'type' must be a {kind}, got {t!r}")
        return t
    return infer


def _leaf_eval(attrs, ins):
    raise ValueError("leaves are evaluated by TensorGraph.evaluate")


register("var", 0, "leaf", _leaf_infer(TensorType), _leaf_eval, required=("name", "type"))
register("constant", 0, "leaf", _leaf_infer(TensorType), _leaf_eval, required=("name", "type"))
register("opaque", None, "opaque", _leaf_infer((TensorType, TupleType)), _leaf_eval,
         required=("key", "type", "name"))


def _tuple_infer(a, ins):
    return TupleType(tuple(_tensor(t, "tuple field") for t in ins))


register("tuple", None, "tuple", _tuple_infer, lambda a, ins: tuple(ins))


def _tgi_infer(a, ins):
    (t,) = ins
    if not isinstance(t, TupleType):
        raise ShapeError(f"tuple_get_item needs a tuple, got {t}")
    i = a.integer("index")
    if not 0 <= i < len(t.fields):
        raise ShapeError(f"tuple_get_item index {i} out of range for {len(t.fields)} fields")
    return t.fields[i]


def _tgi_normalize(op, raw, ins):
    if ins and isinstance(ins[0], TupleType) and _is_int(raw.get("index")) and raw["index"] < 0:
        raw["index"] += len(ins[0].fields)
    return raw


register("tuple_get_item", 1, "injective", _tgi_infer, lambda a, ins: ins[0][a["index"]],
         required=("index",), normalize=_tgi_normalize)


# -- element-wise binary (broadcasting) ------------------------------------

def broadcast_shape(a: tuple, b: tuple) -> tuple:
    """Numpy/Relay broadcast of two shapes; ShapeError if incompatible."""
    out = []
    for i in range(max(len(a), len(b))):
        da = a[len(a) - 1 - i] if i < len(a) else 1
        db = b[len(b) - 1 - i] if i < len(b) else 1
        if da != db and 1 not in (da, db):
            raise ShapeError(f"shapes {list(a)} and {list(b)} do not broadcast")
        out.append(max(da, db) if 1 in (da, db) else da)
    return tuple(reversed(out))


def _binary_infer(a, ins):
    x, y = ins
    return TensorType(broadcast_shape(x.shape, y.shape), _same_dtype(a.op, ins))


def _binary_eval(fn):
    def ev(a, ins):
        with np.errstate(all="ignore"):
            return _cast(fn(ins[0], ins[1]), ins[0].dtype)
    return ev


def _per_element(cost: int):
    return lambda a, ins, out: cost * out.size


for _name, _fn, _cost in [("add", np.add, 1), ("subtract", np.subtract, 1), ("multiply", np.multiply, 1),
                          ("divide", np.divide, 1), ("maximum", np.maximum, 1), ("minimum", np.minimum, 1),
                          ("power", np.power, TRANSCENDENTAL_FLOPS)]:
    register(_name, 2, "broadcast", _binary_infer, _binary_eval(_fn), _per_element(_cost))


# -- element-wise unary -----------------------------------------------------

def _unary_infer(number_attrs):
    def infer(a, ins):
        for key in number_attrs:
            a.number(key)
        return ins[0]
    return infer


def _unary_eval(fn):
    def ev(a, ins):
        (x,) = ins
        with np.errstate(all="ignore"):
            value = fn(_f64(x) if np.issubdtype(x.dtype, np.floating) else x, a)
        return _cast(value, x.dtype)
    return ev


_T = TRANSCENDENTAL_FLOPS
_UNARY = [
    # name, f(x, attrs), flops per element, numeric attributes, defaults
    ("nn.relu", lambda x, a: np.maximum(x, 0), 1, (), None),
    ("negative", lambda x, a: np.negative(x), 1, (), None),
    ("tanh", lambda x, a: np.tanh(x), _T, (), None),
    ("sigmoid", lambda x, a: 0.5 * (1.0 + np.tanh(0.5 * x)), _T, (), None),  # overflow-free
    ("erf", lambda x, a: _erf(x), _T, (), None),
    ("exp", lambda x, a: np.exp(x), _T, (), None),
    ("sqrt", lambda x, a: np.sqrt(x), _T, (), None),
    ("rsqrt", lambda x, a: 1.0 / np.sqrt(x), _T, (), None),
    ("clip", lambda x, a: np.clip(x, a.number("a_min"), a.number("a_max")), 1, ("a_min", "a_max"), None),
    ("nn.leaky_relu", lambda x, a: np.where(x > 0, x, x * a.number("alpha")), 1, ("alpha",), {"alpha": 0.01}),
]


def _normalize_floats(keys):
    def normalize(op, raw, ins):
        raw.update({k: float(raw[k]) for k in keys if k in raw})
        return raw
    return normalize


for _name, _fn, _cost, _num, _defaults in _UNARY:
    register(_name, 1, "elemwise", _unary_infer(_num), _unary_eval(_fn), _per_element(_cost),
             defaults=_defaults, required=tuple(k for k in _num if k not in (_defaults or {})),
             normalize=_normalize_floats(_num))


# -- matrix products ----------------------------------------------------------

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
        _ndim(a.op, x, 3)
        _ndim(a.op, y, 3)
    else:
        _ndim(a.op, x, at_least=2 if ta else 1)
        _ndim(a.op, y, 2)
    xs = _swap_last(x.shape) if ta else x.shape  # [..., M, K]
    ys = _swap_last(y.shape) if tb else y.shape  # [..., K, N]
    if xs[-1] != ys[-2]:
        raise ShapeError(f"{a.op}: reduction dims differ: {x} and {y} "
                         f"(transpose_a={ta}, transpose_b={tb})")
    if a.op == "nn.batch_matmul":
        return broadcast_shape(xs[:1], ys[:1]) + (xs[1], ys[2]), xs[-1]
    return xs[:-1] + (ys[-1],), xs[-1]


def _mm_infer(a, ins):
    dtype = _same_dtype(a.op, ins)
    return TensorType(_mm_shape(a, *ins)[0], a.out_dtype(dtype))


def _mm_eval(a, ins):
    x, y = ins
    ta, tb = _mm_transposes(a)
    xs = np.swapaxes(x, -1, -2) if ta else x
    ys = np.swapaxes(y, -1, -2) if tb else y
    return _cast(np.matmul(_f64(xs), _f64(ys)), a.out_dtype(str(x.dtype)))


def _mm_flops(a, ins, out):
    return 2 * out.size * _mm_shape(a, *ins)[1]


for _name, _defaults in [("nn.dense", dict(out_dtype="")),
                         ("nn.matmul", dict(transpose_a=False, transpose_b=False, out_dtype="")),
                         ("nn.batch_matmul", dict(transpose_a=False, transpose_b=True, out_dtype=""))]:
    register(_name, 2, "out_fusable", _mm_infer, _mm_eval, _mm_flops, defaults=_defaults)


# -- conv2d and pooling (NCHW windows) -------------------------------------------

def conv2d_out_hw(h, w, kh, kw, strides, padding, dilation):
    oh = (h + padding[0] + padding[2] - dilation[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (w + padding[1] + padding[3] - dilation[1] * (kw - 1) - 1) // strides[1] + 1
    return oh, ow


def _window_attrs(a) -> tuple[tuple, tuple, tuple]:
    return a.ints("strides", 2, 1), a.ints("padding", 4, 0), a.ints("dilation", 2, 1)


def _windows(xp, kernel, strides, dilation, out_hw):
    """Yield (i, j, tap): the [N, C, OH, OW] view of padded ``xp`` under kernel tap (i, j)."""
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel, strides, dilation, out_hw
    for i in range(kh):
        for j in range(kw):
            yield i, j, xp[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]


def _conv2d_infer(a, ins):
    x, w = ins
    _ndim(a.op, x, 4)
    _ndim(a.op, w, 4)
    a.choice("data_layout", ("NCHW",))
    a.choice("kernel_layout", ("OIHW",))
    dtype = _same_dtype(a.op, ins)
    n, c, h, wd = x.shape
    o, i, kh, kw = w.shape
    g = a.integer("groups", 1)
    if c % g or o % g or c // g != i:
        raise ShapeError(f"nn.conv2d: {c} input channels, weight {list(w.shape)} and groups={g} disagree")
    strides, padding, dilation = _window_attrs(a)
    oh, ow = conv2d_out_hw(h, wd, kh, kw, strides, padding, dilation)
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"nn.conv2d: empty output {oh}x{ow}")
    return TensorType((n, o, oh, ow), a.out_dtype(dtype))


def _conv2d_eval(a, ins):
    x, w = ins
    strides, (pt, pl, pb, pr), dilation = _window_attrs(a)
    g = a["groups"]
    xp = np.pad(_f64(x), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    o, ci, kh, kw = w.shape
    out_hw = conv2d_out_hw(x.shape[2], x.shape[3], kh, kw, strides, (pt, pl, pb, pr), dilation)
    out = np.zeros((x.shape[0], o) + out_hw, dtype=np.float64)
    og = o // g
    for gi in range(g):
        ws = _f64(w[gi * og:(gi + 1) * og])
        for i, j, tap in _windows(xp[:, gi * ci:(gi + 1) * ci], (kh, kw), strides, dilation, out_hw):
            out[:, gi * og:(gi + 1) * og] += np.einsum("nchw,oc->nohw", tap, ws[:, :, i, j])
    return _cast(out, a.out_dtype(str(x.dtype)))


def _conv2d_flops(a, ins, out):
    x, w = ins
    return 2 * out.size * w.shape[1] * w.shape[2] * w.shape[3]


def _normalize_windows(op, raw, ins):
    """Relay's short forms: pool_size/strides/dilation k or (k,), padding p, (p,) or (ph, pw)."""
    for key in ("pool_size", "strides", "dilation"):
        v = raw.get(key)
        if _is_int(v) or (isinstance(v, (tuple, list)) and len(v) == 1):
            raw[key] = (int(np.ravel(v)[0]),) * 2
    v = raw.get("padding")
    if _is_int(v) or (isinstance(v, (tuple, list)) and len(v) == 1):
        raw["padding"] = (int(np.ravel(v)[0]),) * 4
    elif isinstance(v, (tuple, list)) and len(v) == 2:
        raw["padding"] = tuple(v) * 2
    return raw


register("nn.conv2d", 2, "out_fusable", _conv2d_infer, _conv2d_eval, _conv2d_flops,
         defaults=dict(strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1,
                       data_layout="NCHW", kernel_layout="OIHW", out_dtype=""),
         normalize=_normalize_windows)


@dataclass(frozen=True)
class _PoolGeometry:
    kernel: tuple
    strides: tuple
    padding: tuple  # top, left, bottom, right
    dilation: tuple
    extra: tuple  # ceil_mode's extra bottom/right padding (stride - 1), as in TOPI
    out_hw: tuple


def _pool_geometry(a, x: TensorType) -> _PoolGeometry:
    _ndim(a.op, x, 4)
    a.choice("layout", ("NCHW",))
    kernel = a.ints("pool_size", 2, 1)
    strides, padding, dilation = _window_attrs(a)
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
        taps = [t for _, _, t in _windows(xp, geo.kernel, geo.strides, geo.dilation, geo.out_hw)]
        return _cast(np.maximum.reduce(taps), x.dtype)
    xp = np.pad(_f64(x), pads)
    total = sum(t for _, _, t in _windows(xp, geo.kernel, geo.strides, geo.dilation, geo.out_hw))
    include = a.flag("count_include_pad")
    counts = [_avg_divisors(geo.out_hw[i], x.shape[2 + i], geo.kernel[i], geo.strides[i], geo.dilation[i],
                            geo.padding[i], geo.padding[i + 2], include) for i in (0, 1)]
    divisor = np.outer(*counts)
    if not include:
        divisor = np.maximum(divisor, 1)
    with np.errstate(all="ignore"):
        return _cast(total / divisor, x.dtype)


def _pool_flops(a, ins, out):
    kh, kw = a.ints("pool_size", 2, 1)
    return out.size * kh * kw


_POOL_DEFAULTS = dict(pool_size=(1, 1), strides=(1, 1), dilation=(1, 1), padding=(0, 0, 0, 0),
                      layout="NCHW", ceil_mode=False)
register("nn.max_pool2d", 1, "out_fusable", _pool_infer, _pool_eval, _pool_flops,
         defaults=_POOL_DEFAULTS, normalize=_normalize_windows)
register("nn.avg_pool2d", 1, "out_fusable", _pool_infer, _pool_eval, _pool_flops,
         defaults={**_POOL_DEFAULTS, "count_include_pad": False}, normalize=_normalize_windows)


def _global_pool_infer(a, ins):
    (x,) = ins
    _ndim(a.op, x, 4)
    a.choice("layout", ("NCHW",))
    return TensorType(x.shape[:2] + (1, 1), x.dtype)


for _name, _fn in [("nn.global_avg_pool2d", np.mean), ("nn.global_max_pool2d", np.max)]:
    register(_name, 1, "out_fusable", _global_pool_infer,
             (lambda fn: lambda a, ins: _cast(fn(_f64(ins[0]), axis=(2, 3), keepdims=True), ins[0].dtype))(_fn),
             lambda a, ins, out: ins[0].size, defaults=dict(layout="NCHW"))


# -- data movement ------------------------------------------------------------

def _wrap_axis(op: str, v, ndim: int, what: str = "axis") -> int:
    """A possibly negative Relay axis -> its index in [0, ndim)."""
    if not _is_int(v) or not -ndim <= v < ndim:
        raise ShapeError(f"{op}: {what} {v!r} out of range for a {ndim}-d input")
    return int(v) + ndim if v < 0 else int(v)


def _first_tensor(op: str, ins) -> TensorType:
    if not ins or not isinstance(ins[0], TensorType):
        raise ShapeError(f"{op}: normalizing attributes needs the input's tensor type, got {list(ins)}")
    return ins[0]


def _normalize_axis(relay_default: int | None = None):
    def normalize(op, raw, ins):
        if relay_default is not None:
            raw.setdefault("axis", relay_default)
        if "axis" in raw:
            raw["axis"] = _wrap_axis(op, raw["axis"], _first_tensor(op, ins).ndim)
        return raw
    return normalize


def _transpose_infer(a, ins):
    (x,) = ins
    axes = a.ints("axes")
    if sorted(axes) != list(range(x.ndim)):
        raise ShapeError(f"transpose: axes {list(axes)} are not a permutation of the {x.ndim} axes of {x}")
    return TensorType(tuple(x.shape[i] for i in axes), x.dtype)


def _transpose_normalize(op, raw, ins):
    n = _first_tensor(op, ins).ndim
    axes = raw.get("axes")
    raw["axes"] = tuple(reversed(range(n))) if not axes else tuple(_wrap_axis(op, v, n, "axes") for v in axes)
    return raw


register("transpose", 1, "injective", _transpose_infer, lambda a, ins: np.transpose(ins[0], a["axes"]),
         required=("axes",), normalize=_transpose_normalize)


def _reshape_infer(a, ins):
    (x,) = ins
    shape = a.ints("newshape", lo=1)
    if math.prod(shape) != x.size:
        raise ShapeError(f"reshape: cannot reshape {x} ({x.size} elements) to {list(shape)}")
    return TensorType(shape, x.dtype)


def _reshape_normalize(op, raw, ins):
    """Resolve Relay's newshape codes: 0 copy, -1 infer, -2 copy rest, -3 merge two, -4 split one."""
    shape = _first_tensor(op, ins).shape
    codes = raw.get("newshape", ())
    codes = [int(c) for c in ((codes,) if _is_int(codes) else codes)]
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


register("reshape", 1, "injective", _reshape_infer, lambda a, ins: np.reshape(ins[0], a["newshape"]),
         required=("newshape",), normalize=_reshape_normalize)


def _replace_dim(shape: tuple, axis: int, d: int) -> tuple:
    return shape[:axis] + (d,) + shape[axis + 1:]


def _concat_infer(a, ins):
    first = ins[0]
    dtype = _same_dtype(a.op, ins)
    axis = a.axis("axis", first.ndim)
    for t in ins[1:]:
        if t.ndim != first.ndim or _replace_dim(t.shape, axis, 0) != _replace_dim(first.shape, axis, 0):
            raise ShapeError(f"concatenate: {t} does not match {first} outside axis {axis}")
    return TensorType(_replace_dim(first.shape, axis, sum(t.shape[axis] for t in ins)), dtype)


register("concatenate", None, "injective", _concat_infer, lambda a, ins: np.concatenate(ins, axis=a["axis"]),
         defaults=dict(axis=0), normalize=_normalize_axis())


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
    raw = _normalize_axis()(op, raw, ins)
    dim = _first_tensor(op, ins).shape[raw.get("axis", 0)]
    spec = raw.pop("indices_or_sections", raw.get("indices"))
    if _is_int(spec):  # a number of equal sections
        if spec < 1 or dim % spec:
            raise ShapeError(f"{op}: cannot split a dimension of {dim} into {spec} equal sections")
        spec = [dim // spec * k for k in range(1, spec)]
    if spec is not None:
        raw["indices"] = tuple(int(i) + dim if i < 0 else int(i) for i in spec)
    return raw


register("split", 1, "injective", _split_infer,
         lambda a, ins: tuple(np.split(ins[0], a["indices"], axis=a["axis"])),
         defaults=dict(axis=0), required=("indices",), normalize=_split_normalize)


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
    shape = _first_tensor(op, ins).shape
    mode = raw.pop("slice_mode", "end")
    if mode not in ("end", "size"):
        raise ShapeError(f"{op}: unknown slice_mode {mode!r}")
    axes = raw.pop("axes", None)
    axes = range(len(shape)) if axes is None else [_wrap_axis(op, v, len(shape), "axes") for v in axes]
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


register("strided_slice", 1, "injective", _slice_infer, _slice_eval,
         required=("begin", "end", "strides"), normalize=_slice_normalize)


def _pad_infer(a, ins):
    (x,) = ins
    pw = a["pad_width"]
    if (not isinstance(pw, (tuple, list)) or len(pw) != x.ndim
            or not all(isinstance(p, (tuple, list)) and len(p) == 2 and all(_is_int(v) and v >= 0 for v in p)
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


register("nn.pad", 1, "injective", _pad_infer, _pad_eval,
         defaults=dict(pad_value=0.0, pad_mode="constant"), required=("pad_width",))


# -- bias, normalization, softmax, reduction --------------------------------------

def _bias_add_infer(a, ins):
    x, b = ins
    _same_dtype(a.op, ins)
    _channel_params(a, x, [b], a.axis("axis", x.ndim))
    return x


def _channel_params(a, x: TensorType, params, axis: int) -> None:
    for p in params:
        if p.shape != (x.shape[axis],):
            raise ShapeError(f"{a.op}: parameter {p} must have shape [{x.shape[axis]}] (axis {axis} of {x})")


register("nn.bias_add", 2, "broadcast", _bias_add_infer,
         lambda a, ins: _cast(ins[0] + _along(ins[1], a["axis"], ins[0].ndim), ins[0].dtype),
         lambda a, ins, out: out.size, defaults=dict(axis=1), normalize=_normalize_axis())


def _norm_infer(a, ins) -> TensorType:
    """Checks shared by batch_norm and layer_norm; returns the data type."""
    x = ins[0]
    _same_dtype(a.op, ins)
    _channel_params(a, x, ins[1:], a.axis("axis", x.ndim))
    a.number("epsilon")
    a.flag("center")
    a.flag("scale")
    return x


def _standardize(a, x, mean, var, gamma, beta, axis: int) -> np.ndarray:
    """(x - mean) / sqrt(var + epsilon), then scaled by gamma and shifted by beta as the flags say."""
    y = (x - mean) / np.sqrt(var + a.number("epsilon"))
    if a.flag("scale"):
        y = y * _along(_f64(gamma), axis, x.ndim)
    if a.flag("center"):
        y = y + _along(_f64(beta), axis, x.ndim)
    return y


def _batch_norm_eval(a, ins):
    x, gamma, beta, mean, var = ins
    axis = a["axis"]
    y = _standardize(a, _f64(x), _along(_f64(mean), axis, x.ndim), _along(_f64(var), axis, x.ndim),
                     gamma, beta, axis)
    return _cast(y, x.dtype), mean, var


def _layer_norm_eval(a, ins):
    x, gamma, beta = ins
    axis = a["axis"]
    x64 = _f64(x)
    mean = x64.mean(axis=axis, keepdims=True)
    var = np.square(x64 - mean).mean(axis=axis, keepdims=True)
    return _cast(_standardize(a, x64, mean, var, gamma, beta, axis), x.dtype)


_NORM_DEFAULTS = dict(epsilon=1e-5, center=True, scale=True)
# batch_norm: one multiply-add per element once scale and shift are folded (inference)
register("nn.batch_norm", 5, "out_fusable", lambda a, ins: TupleType((_norm_infer(a, ins), ins[3], ins[4])),
         _batch_norm_eval, lambda a, ins, out: 2 * ins[0].size, defaults={"axis": 1, **_NORM_DEFAULTS},
         normalize=_normalize_axis())
# layer_norm: mean, subtract, square, sum, normalize, scale, shift: 7 per element
register("nn.layer_norm", 3, "opaque", _norm_infer, _layer_norm_eval, lambda a, ins, out: 7 * ins[0].size,
         defaults=_NORM_DEFAULTS, required=("axis",), normalize=_normalize_axis(-1))


def _softmax_infer(a, ins):
    a.axis("axis", ins[0].ndim)
    return ins[0]


def _softmax_eval(a, ins):
    x = _f64(ins[0])
    e = np.exp(x - x.max(axis=a["axis"], keepdims=True))
    return _cast(e / e.sum(axis=a["axis"], keepdims=True), ins[0].dtype)


# softmax: max, subtract, exp, sum, divide
register("nn.softmax", 1, "out_fusable", _softmax_infer, _softmax_eval,
         _per_element(4 + TRANSCENDENTAL_FLOPS), required=("axis",), normalize=_normalize_axis(-1))


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
    n = _first_tensor(op, ins).ndim
    axis = raw.get("axis")
    axes = {_wrap_axis(op, v, n) for v in ((axis,) if _is_int(axis) else axis or ())}
    if raw.pop("exclude", False) and axes:
        axes = set(range(n)) - axes
        if not axes:  # Relay: the input unchanged (no mean has an empty axis tuple)
            raise ShapeError(f"{op}: exclude of every axis reduces nothing")
    raw["axis"] = tuple(sorted(axes or range(n)))
    return raw


register("mean", 1, "reduce", _mean_infer,
         lambda a, ins: _cast(np.mean(_f64(ins[0]), axis=a["axis"], keepdims=a.flag("keepdims")), ins[0].dtype),
         lambda a, ins, out: ins[0].size, defaults=dict(keepdims=False), required=("axis",),
         normalize=_mean_normalize)


# -- attribute normalization ----------------------------------------------------

def _coerce(op: str, key: str, value, default):
    """A Relay attribute value (0/1 for bools, ints for floats...) in the type of its default."""
    try:
        if isinstance(default, bool):
            if not isinstance(value, (bool, int, np.bool_, np.integer)) or value not in (0, 1):
                raise ValueError(value)
            return bool(value)
        if isinstance(default, (float, int, str)):
            return type(default)(value)
    except (TypeError, ValueError):
        raise ShapeError(f"{op}: attribute {key!r} must be like {default!r}, got {value!r}") from None
    return value


def normalize_attrs(op: str, attrs: Mapping, input_types: Sequence[Type]) -> Attrs:
    """Relay-style attributes of ``op`` -> the canonical form of the table above.

    Fills defaults, wraps negative axes and indices using ``input_types``,
    expands Relay's short forms, coerces 0/1 to bools and ints to floats
    where the default is one, and drops attributes that are not canonical
    (``units``, ``channels``, ``kernel_size``, an ``out_layout`` equal to
    the input layout...). ShapeError on a missing required attribute or one
    that cannot be normalized.
    """
    d = get(op)
    raw = {str(k): v for k, v in dict(attrs or {}).items() if v is not None}
    layout = raw.get("layout", raw.get("data_layout", "NCHW"))
    if raw.get("out_layout", "") not in ("", layout):
        raise ShapeError(f"{op}: out_layout {raw['out_layout']!r} differs from the input layout {layout!r}")
    if d.normalize is not None:
        try:
            raw = d.normalize(op, raw, list(input_types))
        except ShapeError:
            raise
        except (TypeError, ValueError, IndexError, KeyError) as e:
            raise ShapeError(f"{op}: cannot normalize attributes {raw!r}: {e}") from e
    out = {k: _coerce(op, k, raw.get(k, v), v) for k, v in (d.defaults or {}).items()}
    for k in d.required:
        if k not in raw:
            raise ShapeError(f"{op}: missing required attribute {k!r}")
        out[k] = raw[k]
    if out.get("out_dtype") and input_types and getattr(input_types[0], "dtype", None) == out["out_dtype"]:
        out["out_dtype"] = ""  # "the input's dtype" has one spelling, as the frontend writes it
    return Attrs(out)
