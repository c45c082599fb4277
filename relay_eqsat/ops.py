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
strided_slice (x)      begin, end, strides: full-rank tuples (end clamped to dim)
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
inputs), ``flops``, ``bytes`` (inputs read + output written) and ``evaluate``
(numpy reference). ``pattern`` mirrors TVM's fusion classes: ``elemwise``,
``broadcast``, ``injective``, ``reduce``, ``out_fusable`` (conv/dense:
element-wise consumers fuse into them), ``opaque``, ``leaf`` or ``tuple``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .graph import Attrs, TensorType, TupleType, Type


class ShapeError(ValueError):
    """Raised when an operator's inputs have shapes or attributes it cannot take."""


@dataclass(frozen=True)
class OpDef:
    name: str
    arity: int | None  # None: variadic (at least one input)
    infer: Callable[[Attrs, Sequence[Type]], Type]
    evaluate: Callable[[Attrs, list], Any]
    flops: Callable[[Attrs, Sequence[Type], Type], int]
    pattern: str
    defaults: dict | None = None


OPS: dict[str, OpDef] = {}


def register(name: str, arity: int | None, pattern: str, infer, evaluate, flops=None, defaults=None) -> OpDef:
    op = OpDef(name, arity, infer, evaluate, flops or (lambda a, ins, out: 0), pattern, defaults)
    OPS[name] = op
    return op


def get(op: str) -> OpDef:
    try:
        return OPS[op]
    except KeyError:
        raise ShapeError(f"unknown operator {op!r}") from None


def _check_arity(op: OpDef, input_types: Sequence[Type]) -> None:
    if op.arity is None:
        if not input_types:
            raise ShapeError(f"{op.name} needs at least one input")
    elif len(input_types) != op.arity:
        raise ShapeError(f"{op.name} takes {op.arity} inputs, got {len(input_types)}")


def infer_type(op: str, attrs: Attrs, input_types: Sequence[Type]) -> Type:
    """Output type of ``op`` on inputs of these types; ShapeError if invalid."""
    d = get(op)
    _check_arity(d, input_types)
    if d.pattern not in ("tuple", "opaque") and op != "tuple_get_item":
        for t in input_types:
            if not isinstance(t, TensorType):
                raise ShapeError(f"{op} takes tensors, got a tuple {t}")
    return d.infer(attrs, input_types)


def evaluate(op: str, attrs: Attrs, inputs: list) -> Any:
    """Numpy reference semantics of ``op``."""
    return get(op).evaluate(attrs, inputs)


def flops(op: str, attrs: Attrs, input_types: Sequence[Type], out_type: Type) -> int:
    """Floating-point operations of one execution (multiply-add = 2)."""
    return int(get(op).flops(attrs, input_types, out_type))


def bytes_moved(op: str, attrs: Attrs, input_types: Sequence[Type], out_type: Type) -> int:
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


# -- graph-level ops ---------------------------------------------------------

def _leaf_infer(attrs: Attrs, ins) -> Type:
    return attrs["type"]


def _leaf_eval(attrs, ins):
    raise ValueError("leaves are evaluated by TensorGraph.evaluate")


register("var", 0, "leaf", _leaf_infer, _leaf_eval)
register("constant", 0, "leaf", _leaf_infer, _leaf_eval)
register("opaque", None, "opaque", _leaf_infer, _leaf_eval)


def _tuple_infer(attrs, ins):
    return TupleType(tuple(_tensor(t, "tuple field") for t in ins))


register("tuple", None, "tuple", _tuple_infer, lambda attrs, ins: tuple(ins))


def _tgi_infer(attrs, ins):
    (t,) = ins
    if not isinstance(t, TupleType):
        raise ShapeError(f"tuple_get_item needs a tuple, got {t}")
    i = attrs["index"]
    if not 0 <= i < len(t.fields):
        raise ShapeError(f"tuple_get_item index {i} out of range for {len(t.fields)} fields")
    return t.fields[i]


register("tuple_get_item", 1, "injective", _tgi_infer, lambda attrs, ins: ins[0][attrs["index"]])


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


def _binary_infer(attrs, ins):
    a, b = ins
    if a.dtype != b.dtype:
        raise ShapeError(f"dtype mismatch {a.dtype} vs {b.dtype}")
    return TensorType(broadcast_shape(a.shape, b.shape), a.dtype)


def _elementwise_flops(attrs, ins, out):
    return out.size


for _name, _fn in [("add", np.add), ("subtract", np.subtract), ("multiply", np.multiply),
                   ("divide", np.divide)]:
    register(_name, 2, "broadcast", _binary_infer,
             (lambda fn: lambda attrs, ins: fn(ins[0], ins[1]).astype(ins[0].dtype, copy=False))(_fn),
             _elementwise_flops)


# -- conv2d ---------------------------------------------------------------

def conv2d_out_hw(h, w, kh, kw, strides, padding, dilation):
    oh = (h + padding[0] + padding[2] - dilation[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (w + padding[1] + padding[3] - dilation[1] * (kw - 1) - 1) // strides[1] + 1
    return oh, ow


def _conv2d_infer(attrs, ins):
    x, w = ins
    if x.ndim != 4 or w.ndim != 4:
        raise ShapeError(f"nn.conv2d needs 4-d data and weight, got {x} and {w}")
    if attrs.get("data_layout", "NCHW") != "NCHW" or attrs.get("kernel_layout", "OIHW") != "OIHW":
        raise ShapeError("nn.conv2d: only NCHW/OIHW layouts are modelled")
    n, c, h, wd = x.shape
    o, i, kh, kw = w.shape
    g = attrs["groups"]
    if g < 1 or c % g or o % g or c // g != i:
        raise ShapeError(f"nn.conv2d: {c} input channels, weight {list(w.shape)} and groups={g} disagree")
    oh, ow = conv2d_out_hw(h, wd, kh, kw, attrs["strides"], attrs["padding"], attrs["dilation"])
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"nn.conv2d: empty output {oh}x{ow}")
    return TensorType((n, o, oh, ow), attrs.get("out_dtype") or x.dtype)


def _conv2d_eval(attrs, ins):
    x, w = ins
    sh, sw = attrs["strides"]
    dh, dw = attrs["dilation"]
    pt, pl, pb, pr = attrs["padding"]
    g = attrs["groups"]
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    n, c, h, wd = xp.shape
    o, ci, kh, kw = w.shape
    oh = (h - dh * (kh - 1) - 1) // sh + 1
    ow = (wd - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, oh, ow), dtype=np.float64)
    og = o // g
    for gi in range(g):
        xs = xp[:, gi * ci:(gi + 1) * ci]
        ws = w[gi * og:(gi + 1) * og].astype(np.float64)
        for a in range(kh):
            for b in range(kw):
                patch = xs[:, :, a * dh: a * dh + sh * (oh - 1) + 1: sh, b * dw: b * dw + sw * (ow - 1) + 1: sw]
                out[:, gi * og:(gi + 1) * og] += np.einsum("nchw,oc->nohw", patch, ws[:, :, a, b])
    return out.astype(attrs.get("out_dtype") or x.dtype)


def _conv2d_flops(attrs, ins, out):
    x, w = ins
    return 2 * out.size * w.shape[1] * w.shape[2] * w.shape[3]


register("nn.conv2d", 2, "out_fusable", _conv2d_infer, _conv2d_eval, _conv2d_flops,
         defaults=dict(strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1,
                       data_layout="NCHW", kernel_layout="OIHW", out_dtype=""))
