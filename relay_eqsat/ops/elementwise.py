"""Element-wise ops: broadcasting binary arithmetic and unary functions.

FLOPs: 1 per output element for arithmetic, ``TRANSCENDENTAL_FLOPS`` for a
transcendental function (exp, tanh, sigmoid, erf, sqrt, rsqrt, power).
"""
from __future__ import annotations

import math

import numpy as np

from ..types import TensorType
from .checks import same_dtype
from .numeric import cast, f64
from .opdef import OpDef, ShapeError, register

try:  # scipy comes with xgboost; the fallback is exact but slow
    from scipy.special import erf as _erf
except ImportError:  # pragma: no cover
    _erf = np.vectorize(math.erf, otypes=[np.float64])

TRANSCENDENTAL_FLOPS = 4
"""FLOPs counted per element for exp, tanh, sigmoid, erf, sqrt, rsqrt, power."""


def per_element(cost: int):
    """A ``flops`` of ``cost`` per output element."""
    return lambda a, ins, out: cost * out.size


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
    return TensorType(broadcast_shape(x.shape, y.shape), same_dtype(a.op, ins))


def _binary_eval(fn):
    def ev(a, ins):
        with np.errstate(all="ignore"):
            return cast(fn(ins[0], ins[1]), ins[0].dtype)
    return ev


_T = TRANSCENDENTAL_FLOPS
_BINARY = [
    # name, numpy function, flops per element, learned-model vocabulary index
    ("add", np.add, 1, 4),
    ("subtract", np.subtract, 1, 5),
    ("multiply", np.multiply, 1, 6),
    ("divide", np.divide, 1, 7),
    ("maximum", np.maximum, 1, 8),
    ("minimum", np.minimum, 1, 9),
    ("power", np.power, _T, 10),
]
for _name, _fn, _cost, _vocab in _BINARY:
    register(OpDef(_name, 2, "broadcast", _binary_infer, _binary_eval(_fn), per_element(_cost), vocab=_vocab))


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
            value = fn(f64(x) if np.issubdtype(x.dtype, np.floating) else x, a)
        return cast(value, x.dtype)
    return ev


def _normalize_floats(keys):
    def normalize(op, raw, ins):
        raw.update({k: float(raw[k]) for k in keys if k in raw})
        return raw
    return normalize


_UNARY = [
    # name, f(x, attrs), flops per element, numeric attributes, defaults, vocabulary index
    ("nn.relu", lambda x, a: np.maximum(x, 0), 1, (), None, 11),
    ("negative", lambda x, a: np.negative(x), 1, (), None, 18),
    ("tanh", lambda x, a: np.tanh(x), _T, (), None, 12),
    ("sigmoid", lambda x, a: 0.5 * (1.0 + np.tanh(0.5 * x)), _T, (), None, 13),  # overflow-free
    ("erf", lambda x, a: _erf(x), _T, (), None, 14),
    ("exp", lambda x, a: np.exp(x), _T, (), None, 15),
    ("sqrt", lambda x, a: np.sqrt(x), _T, (), None, 16),
    ("rsqrt", lambda x, a: 1.0 / np.sqrt(x), _T, (), None, 17),
    ("clip", lambda x, a: np.clip(x, a.number("a_min"), a.number("a_max")), 1, ("a_min", "a_max"), None, 19),
    ("nn.leaky_relu", lambda x, a: np.where(x > 0, x, x * a.number("alpha")), 1, ("alpha",), {"alpha": 0.01}, 20),
]
# TVM's vectorized polynomial approximations (its FastMath ops, and a sigmoid built on fast_tanh, which
# TVM lacks; the default set's ``approx`` rules turn the exact functions into them): the same
# functions to within float32 rounding error (tests/test_fast_math.py), computed SIMD-wide instead of
# one libm call per value. As this table defines them they keep NaN (Relay's fast_erf maps NaN to 1:
# the backend guards it). No vocabulary index: the learned model sees them as ``op=<other>``.
_UNARY += [
    ("fast_exp", lambda x, a: np.exp(x), _T, (), None, None),
    ("fast_tanh", lambda x, a: np.tanh(x), _T, (), None, None),
    ("fast_erf", lambda x, a: _erf(x), _T, (), None, None),
    ("fast_sigmoid", lambda x, a: 0.5 * (1.0 + np.tanh(0.5 * x)), _T, (), None, None),
]
#: how many times TVM's llvm lowering reads an op's operand (``OpDef.inline_reads``; 1 if not
#: listed), as counted in the TIR of the op applied to an inlined producer
#: (tests/test_inlining_relay.py): tanh is legalized to two exps per sign, select-ed; the FastMath ops
#: are polynomials evaluated on x and x * x; a fast sigmoid, 0.5 + 0.5 * fast_tanh(0.5 * x), one more
#: than its fast_tanh; a fast_erf also reads x for its NaN guard
_INLINE_READS = {"tanh": 5, "nn.leaky_relu": 3, "fast_exp": 18, "fast_tanh": 19, "fast_erf": 23,
                 "fast_sigmoid": 20}
for _name, _fn, _cost, _num, _defaults, _vocab in _UNARY:
    register(OpDef(_name, 1, "elemwise", _unary_infer(_num), _unary_eval(_fn), per_element(_cost),
                   defaults=_defaults, required=tuple(k for k in _num if k not in (_defaults or {})),
                   normalize=_normalize_floats(_num), vocab=_vocab, inline_reads=_INLINE_READS.get(_name, 1)))
