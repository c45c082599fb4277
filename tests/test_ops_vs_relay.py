"""Every modelled op's shape inference against Relay's InferType, on random cases.

For each op with a Relay conversion (``passes/relay/frontend.py``'s ``MODELLED_OPS``),
seeded random shapes and Relay-style attributes (size-1 dimensions, negative
axes, short padding forms, reshape codes, slices with strides, negative
indices and ends beyond the dimension, reductions over None/one/several axes
with keepdims and exclude, splits by sections and by indices, transposes with
and without axes, broadcasting binary ops, 0-d operands...) build a one-op
Relay function, and :func:`check_case` compares Relay's type with

1. the op table: ``ops.infer_type(op, ops.normalize_attrs(op, relay_attrs))``;
2. the frontend: ``from_relay`` models the call (an opaque node only where the
   table refuses the case, or for a documented frontend limit) with Relay's
   type and the same canonical attributes as the table's normalization;
3. the backend: ``to_relay`` of that graph type-checks to the same type.

Only valid cases (by Relay's semantics) are handed to TVM: the generators
construct them so (Relay aborts or segfaults on some invalid ones, e.g.
duplicate reduction axes).
"""
from __future__ import annotations

import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
from tvm import relay  # noqa: E402

from relay_eqsat import ops  # noqa: E402
from relay_eqsat.graph import TensorType  # noqa: E402
from relay_eqsat.ops import ShapeError  # noqa: E402
from relay_eqsat.passes.relay.frontend import MODELLED_OPS, convert_type, from_relay
from relay_eqsat.passes.relay.backend import to_relay  # noqa: E402

pytestmark = pytest.mark.tvm

CASES_PER_OP = 30


@dataclass
class Case:
    shapes: list[tuple[int, ...]]
    build: Callable[[list], relay.Expr]  # the Relay call on the input vars
    dtype: str = "float32"
    extra: dict = field(default_factory=dict)  # Relay-style attributes passed as arguments (pad_value)
    frontend_models: bool = True  # False: a case the frontend keeps opaque by design (pad_mode edge...)


# -- random pieces ----------------------------------------------------------------------

def dim(rng, lo=2, hi=6, p1=0.25) -> int:
    return 1 if rng.random() < p1 else int(rng.integers(lo, hi + 1))


def shape(rng, ndim, **kw) -> tuple[int, ...]:
    return tuple(dim(rng, **kw) for _ in range(ndim))


def maybe_neg(rng, axis: int, ndim: int) -> int:
    return axis - ndim if rng.random() < 0.5 else axis


def float_dtype(rng) -> str:
    return "float16" if rng.random() < 0.15 else "float32"


def pick(rng, options):
    return options[int(rng.integers(len(options)))]


def window_form(rng, pair):
    """A (h, w) pair in one of Relay's spellings: int (when equal), (h, w)."""
    if pair[0] == pair[1] and rng.random() < 0.4:
        return int(pair[0])
    return tuple(int(v) for v in pair)


def padding_form(rng, pad4):
    """(top, left, bottom, right) in one of Relay's spellings: p, (p_h, p_w), all four."""
    t, l, b, r = pad4
    if t == l == b == r and rng.random() < 0.5:
        return int(t)
    if t == b and l == r and rng.random() < 0.5:
        return (int(t), int(l))
    return tuple(int(v) for v in pad4)


def out_hw(h, w, k, s, p, d, extra=(0, 0)):
    return ops.conv2d_out_hw(h, w, k[0], k[1], s, (p[0], p[1], p[2] + extra[0], p[3] + extra[1]), d)


# -- generators, one per op -------------------------------------------------------------

def g_conv2d(rng, op):
    while True:
        if rng.random() < 0.25:  # depthwise
            c = int(rng.integers(1, 5))
            groups, i, o = c, 1, c * int(rng.integers(1, 3))
        else:
            groups = pick(rng, [1, 1, 2])
            i = int(rng.integers(1, 4))
            c, o = groups * i, groups * int(rng.integers(1, 4))
        n, h, w = int(rng.integers(1, 3)), int(rng.integers(3, 10)), int(rng.integers(3, 10))
        k = tuple(int(v) for v in rng.integers(1, 4, size=2))
        s = tuple(int(v) for v in rng.integers(1, 3, size=2))
        d = tuple(int(v) for v in rng.integers(1, 3, size=2))
        p = tuple(int(v) for v in rng.integers(0, 3, size=4))
        if min(out_hw(h, w, k, s, p, d)) > 0:
            break
    strides, dilation, padding = window_form(rng, s), window_form(rng, d), padding_form(rng, p)
    out_dtype = pick(rng, ["", "", "float32", "float64"])
    kernel_size = k if rng.random() < 0.5 else None
    return Case([(n, c, h, w), (o, i) + k], lambda xs: relay.nn.conv2d(
        xs[0], xs[1], strides=strides, padding=padding, dilation=dilation, groups=groups,
        kernel_size=kernel_size, out_dtype=out_dtype))


def g_dense(rng, op):
    k, n = dim(rng), dim(rng)
    x = shape(rng, int(rng.integers(0, 4))) + (k,)
    units = n if rng.random() < 0.5 else None
    out_dtype = pick(rng, ["", "float32", "float64"])
    return Case([x, (n, k)], lambda xs: relay.nn.dense(xs[0], xs[1], units=units, out_dtype=out_dtype),
                dtype=float_dtype(rng))


def g_matmul(rng, op):
    """(relay.nn.matmul builds an nn.dense when only transpose_b is set.)"""
    ta, tb = bool(rng.random() < 0.4), bool(rng.random() < 0.5)
    m, k, n = dim(rng), dim(rng), dim(rng)
    lead = shape(rng, int(rng.integers(0, 2)))
    if ta:
        x = lead + (k, m)
    else:
        x = lead + (m, k) if rng.random() < 0.8 else (k,)
    y = (n, k) if tb else (k, n)
    units = n if rng.random() < 0.5 else None
    return Case([x, y], lambda xs: relay.nn.matmul(xs[0], xs[1], units=units, transpose_a=ta, transpose_b=tb))


def g_batch_matmul(rng, op):
    ta, tb = bool(rng.random() < 0.4), bool(rng.random() < 0.6)
    b, m, k, n = dim(rng), dim(rng), dim(rng), dim(rng)
    b1, b2 = (b, b) if rng.random() < 0.6 else pick(rng, [(1, b), (b, 1)])
    x = (b1, k, m) if ta else (b1, m, k)
    y = (b2, n, k) if tb else (b2, k, n)
    out_dtype = pick(rng, ["", "float32"])
    return Case([x, y], lambda xs: relay.nn.batch_matmul(xs[0], xs[1], out_dtype=out_dtype,
                                                         transpose_a=ta, transpose_b=tb))


def g_binary(rng, op):
    out = shape(rng, int(rng.integers(0, 5)))
    shapes = []
    for _ in range(2):
        rank = int(rng.integers(0, len(out) + 1))
        shapes.append(tuple(1 if rng.random() < 0.3 else d for d in out[len(out) - rank:]))
    return Case(shapes, lambda xs: relay.Call(relay.op.get(op), xs), dtype=float_dtype(rng))


def g_unary(rng, op):
    return Case([shape(rng, int(rng.integers(0, 5)))], lambda xs: relay.Call(relay.op.get(op), xs),
                dtype=float_dtype(rng))


#: ops whose Relay call the frontend keeps opaque: Relay's fast_erf maps NaN to 1 where the table's keeps NaN
#: (the backend writes the table's as ``where(isnan(x), x, fast_erf(x))``)
READ_AS_OPAQUE = {"fast_erf"}


def g_fast(rng, op):
    """TVM's approximations (float32 only)."""
    return Case([shape(rng, int(rng.integers(0, 5)))], lambda xs: relay.Call(relay.op.get(op), xs),
                frontend_models=op not in READ_AS_OPAQUE)


def g_clip(rng, op):
    lo = float(rng.uniform(-2, 0))
    hi = lo + float(rng.uniform(0, 3))
    return Case([shape(rng, int(rng.integers(0, 5)))], lambda xs: relay.clip(xs[0], lo, hi))


def g_leaky_relu(rng, op):
    alpha = float(rng.uniform(0, 0.5))
    return Case([shape(rng, int(rng.integers(1, 5)))], lambda xs: relay.nn.leaky_relu(xs[0], alpha))


def g_pool(rng, op):
    while True:
        n, c, h, w = int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(3, 11)), int(rng.integers(3, 11))
        k = tuple(int(v) for v in rng.integers(1, 4, size=2))
        s = tuple(int(v) for v in rng.integers(1, 4, size=2))
        d = tuple(int(v) for v in rng.integers(1, 3, size=2))
        p = tuple(int(v) for v in rng.integers(0, 3, size=4))
        ceil = bool(rng.random() < 0.4)
        extra = tuple(v - 1 for v in s) if ceil else (0, 0)
        if min(out_hw(h, w, k, s, p, d, extra)) > 0:
            break
    kw = dict(pool_size=window_form(rng, k), strides=window_form(rng, s), dilation=window_form(rng, d),
              padding=padding_form(rng, p), ceil_mode=ceil)
    if op == "nn.avg_pool2d":
        kw["count_include_pad"] = bool(rng.random() < 0.5)
        return Case([(n, c, h, w)], lambda xs: relay.nn.avg_pool2d(xs[0], **kw))
    return Case([(n, c, h, w)], lambda xs: relay.nn.max_pool2d(xs[0], **kw))


def g_global_pool(rng, op):
    fn = relay.nn.global_avg_pool2d if op == "nn.global_avg_pool2d" else relay.nn.global_max_pool2d
    return Case([shape(rng, 4)], lambda xs: fn(xs[0]))


def g_transpose(rng, op):
    nd = int(rng.integers(1, 6))
    axes = None
    if rng.random() < 0.7:
        axes = [maybe_neg(rng, int(a), nd) for a in rng.permutation(nd)]
    return Case([shape(rng, nd)], lambda xs: relay.transpose(xs[0], axes))


def _factor(n: int, rng) -> tuple[int, int]:
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    a = pick(rng, divisors)
    return a, n // a


def reshape_codes(rng, x: tuple[int, ...]) -> list[int]:
    """Relay newshape codes for ``x``: literal dims, 0 (copy), -1 (infer, once),
    -2 (copy the rest), -3 (merge two), -4 (split one; its own -1 is local).
    Relay fails on a -1 code after a -4 (it indexes the output by the code's
    position), so none is made."""
    codes, i, used_minus1 = [], 0, False
    while i < len(x):
        r = rng.random()
        if r < 0.1:
            codes.append(-2)
            return codes
        if r < 0.25 and i + 1 < len(x):
            codes.append(-3)
            i += 2
            continue
        if r < 0.4:
            a, b = _factor(x[i], rng)
            choice = int(rng.integers(3))
            if choice == 0:
                codes += [-4, -1, b]
            elif choice == 1:
                codes += [-4, a, -1]
            else:
                codes += [-4, a, b]
            used_minus1 = True  # no -1 code after a -4
        elif r < 0.55:
            codes.append(0)
        elif r < 0.65 and not used_minus1:
            codes.append(-1)
            used_minus1 = True
        else:
            codes.append(x[i])
        i += 1
    return codes


def g_reshape(rng, op):
    x = shape(rng, int(rng.integers(1, 5)))
    if rng.random() < 0.3:  # a plain target shape, with one -1 sometimes
        size = int(np.prod(x))
        a, b = _factor(size, rng)
        newshape = [a, b] if rng.random() < 0.5 else [a, -1]
        if rng.random() < 0.3:
            newshape = [1] + newshape
    else:
        newshape = reshape_codes(rng, x)
    return Case([x], lambda xs: relay.reshape(xs[0], newshape))


def g_concatenate(rng, op):
    nd = int(rng.integers(1, 5))
    base = shape(rng, nd)
    axis = int(rng.integers(nd))
    shapes = [base[:axis] + (dim(rng),) + base[axis + 1:] for _ in range(int(rng.integers(1, 5)))]
    ax = maybe_neg(rng, axis, nd)
    return Case(shapes, lambda xs: relay.concatenate(xs, ax))


def g_split(rng, op):
    nd = int(rng.integers(1, 5))
    x = list(shape(rng, nd))
    axis = int(rng.integers(nd))
    x[axis] = int(rng.integers(1, 9))
    dim_ = x[axis]
    if rng.random() < 0.5:
        spec = pick(rng, [d for d in range(1, dim_ + 1) if dim_ % d == 0])
    else:
        k = int(rng.integers(0, dim_))
        spec = sorted(int(v) for v in rng.choice(np.arange(1, dim_), size=min(k, dim_ - 1), replace=False)) \
            if dim_ > 1 else []
    ax = maybe_neg(rng, axis, nd)
    return Case([tuple(x)], lambda xs: relay.split(xs[0], spec, ax).astuple())


def g_strided_slice(rng, op):
    nd = int(rng.integers(1, 5))
    x = shape(rng, nd, hi=8)
    if rng.random() < 0.1:  # a negative stride: Relay takes it, the frontend keeps it opaque
        begin, end, strides = [x[0] - 1], [-x[0] - 1 if rng.random() < 0.5 else 0], [-1]
        return Case([x], lambda xs: relay.strided_slice(xs[0], begin, end, strides))
    size_mode = rng.random() < 0.2
    use_axes = rng.random() < 0.3
    axes = sorted(int(a) for a in rng.choice(nd, size=int(rng.integers(1, nd + 1)), replace=False)) \
        if use_axes else list(range(int(rng.integers(1, nd + 1))))
    begin, end, strides = [], [], []
    for a in axes:
        # the slice [b, e) spelled in Relay's ways; Relay clamps begin and end into
        # [0, d] (negative ones count from the end) and refuses begin > end
        d = x[a]
        b = int(rng.integers(0, d))
        e = int(rng.integers(b, d + 1)) if rng.random() < 0.1 else int(rng.integers(b + 1, d + 1))  # some empty
        sb = b - d if rng.random() < 0.3 else b
        if size_mode:  # Relay's end is the begin as given plus the size (-1: to the end)
            if e == d and rng.random() < 0.3:
                se = -1
            elif sb < 0 and e < d and rng.random() < 0.5:
                se = e - b  # sb + se = e - d: the end counted from the back
            else:
                se = e - sb + (int(rng.integers(0, 3)) if e == d else 0)  # sb + se = e (or beyond d)
        elif e == d and rng.random() < 0.5:
            se = d + int(rng.integers(0, 5))  # beyond the dimension
        else:
            se = e - d if rng.random() < 0.3 and e < d else e
        begin.append(sb)
        end.append(se)
        strides.append(int(rng.integers(1, 4)))
    if rng.random() < 0.3 and not use_axes:  # with axes, Relay wants a stride per axis
        strides = strides[:int(rng.integers(0, len(strides) + 1))]
    kw = dict(slice_mode="size" if size_mode else "end")
    if use_axes:
        kw["axes"] = axes
    return Case([x], lambda xs: relay.strided_slice(xs[0], begin, end, strides or None, **kw))


def g_pad(rng, op):
    x = shape(rng, int(rng.integers(1, 5)))
    mode = "constant" if rng.random() < 0.8 else pick(rng, ["edge", "reflect"])
    hi = 3
    if mode == "reflect":
        hi = max(1, min(x))  # reflect padding must be smaller than every dim
    pad_width = [[int(v) for v in rng.integers(0, hi, size=2)] for _ in x]
    value = float(np.float32(rng.uniform(-2, 2)))
    return Case([x], lambda xs: relay.nn.pad(xs[0], pad_width, relay.const(np.float32(value)), mode),
                extra={"pad_value": value}, frontend_models=mode == "constant")


def g_bias_add(rng, op):
    nd = int(rng.integers(1, 5))
    x = shape(rng, nd)
    axis = int(rng.integers(nd))
    ax = maybe_neg(rng, axis, nd)
    return Case([x, (x[axis],)], lambda xs: relay.nn.bias_add(xs[0], xs[1], ax))


def g_batch_norm(rng, op):
    nd = int(rng.integers(1, 5))
    x = shape(rng, nd)
    axis = int(rng.integers(nd))
    ax = -1 if axis == nd - 1 and rng.random() < 0.5 else axis  # Relay takes no other negative axis
    eps, center, scale = float(rng.uniform(1e-6, 1e-2)), bool(rng.random() < 0.7), bool(rng.random() < 0.7)
    return Case([x] + [(x[axis],)] * 4, lambda xs: relay.nn.batch_norm(
        *xs, axis=ax, epsilon=eps, center=center, scale=scale).astuple())


def g_layer_norm(rng, op):
    nd = int(rng.integers(1, 5))
    x = shape(rng, nd)
    axis = int(rng.integers(nd))
    ax = maybe_neg(rng, axis, nd)
    eps, center, scale = float(rng.uniform(1e-6, 1e-2)), bool(rng.random() < 0.7), bool(rng.random() < 0.7)
    return Case([x, (x[axis],), (x[axis],)], lambda xs: relay.nn.layer_norm(
        *xs, axis=ax, epsilon=eps, center=center, scale=scale))


def g_softmax(rng, op):
    nd = int(rng.integers(1, 5))
    ax = maybe_neg(rng, int(rng.integers(nd)), nd)
    fn = relay.nn.softmax if op == "nn.softmax" else relay.nn.fast_softmax
    return Case([shape(rng, nd)], lambda xs: fn(xs[0], ax))


def g_mean(rng, op):
    nd = int(rng.integers(1, 5))
    r = rng.random()
    if r < 0.2:
        axis = None
    elif r < 0.3:
        axis = []
    elif r < 0.55:
        axis = maybe_neg(rng, int(rng.integers(nd)), nd)
    else:  # distinct axes (Relay segfaults on duplicates), some negative, any order
        picked = rng.choice(nd, size=int(rng.integers(1, nd + 1)), replace=False)
        axis = [maybe_neg(rng, int(a), nd) for a in picked]
    keepdims, exclude = bool(rng.random() < 0.5), bool(rng.random() < 0.25)
    return Case([shape(rng, nd)], lambda xs: relay.mean(xs[0], axis=axis, keepdims=keepdims, exclude=exclude))


GENERATORS: dict[str, Callable] = {
    "nn.conv2d": g_conv2d, "nn.dense": g_dense, "nn.matmul": g_matmul, "nn.batch_matmul": g_batch_matmul,
    **{op: g_binary for op in ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power")},
    **{op: g_unary for op in ("nn.relu", "tanh", "sigmoid", "erf", "exp", "sqrt", "rsqrt", "negative")},
    **{op: g_fast for op in ("fast_exp", "fast_tanh", "fast_erf")},  # fast_sigmoid: NO_RELAY_OP
    "clip": g_clip, "nn.leaky_relu": g_leaky_relu, "nn.max_pool2d": g_pool, "nn.avg_pool2d": g_pool,
    "nn.global_avg_pool2d": g_global_pool, "nn.global_max_pool2d": g_global_pool,
    "transpose": g_transpose, "reshape": g_reshape, "concatenate": g_concatenate, "split": g_split,
    "strided_slice": g_strided_slice, "nn.pad": g_pad, "nn.bias_add": g_bias_add,
    "nn.batch_norm": g_batch_norm, "nn.softmax": g_softmax, "nn.fast_softmax": g_softmax,
    "nn.layer_norm": g_layer_norm, "mean": g_mean,
}


# -- the comparison ---------------------------------------------------------------------------

def py_value(v):
    """A Relay attribute value as plain Python (ints, floats, strings, tuples)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, tvm.tir.IntImm):
        return int(v.value)
    if isinstance(v, tvm.tir.FloatImm):
        return float(v.value)
    if isinstance(v, (tvm.ir.container.Array, list, tuple)):
        return tuple(py_value(e) for e in v)
    return str(v)


def relay_attrs(call) -> dict:
    if call.attrs is None or not hasattr(call.attrs, "keys"):
        return {}
    return {str(k): py_value(call.attrs[k]) for k in call.attrs.keys()}


def typed(func) -> tvm.IRModule:
    return relay.transform.InferType()(tvm.IRModule.from_expr(func))


def check_case(case: Case, stats: Counter) -> None:
    xs = [relay.var(f"x{i}", shape=s, dtype=case.dtype) for i, s in enumerate(case.shapes)]
    mod = typed(relay.Function(xs, case.build(xs)))
    call = mod["main"].body
    op = str(call.op.name)
    want = convert_type(call.checked_type)
    ins = [TensorType(s, case.dtype) for s in case.shapes]
    raw = {**relay_attrs(call), **case.extra}
    what = f"{op} {raw} on {ins}"
    # 1. the op table
    try:
        canon = ops.normalize_attrs(op, raw, ins)
        got = ops.infer_type(op, canon, ins)
    except ShapeError as e:
        canon, refused = None, str(e)
    else:
        assert got == want, f"{what}: ops.infer_type gives {got} ({canon}), Relay {want}"
    # 2. the frontend
    g = from_relay(mod)
    node = g[g.output]
    assert node.type == want, f"{what}: frontend node type {node.type}, Relay {want}"
    if node.op == op:
        assert canon is not None, f"{what}: the frontend models it, the table refuses it ({refused})"
        assert node.attrs == canon, f"{what}: frontend attrs {node.attrs}, table {canon}"
        stats["modelled"] += 1
    else:
        assert node.op == "opaque", f"{what}: frontend made a {node.op}"
        reason = g.opaque[node.attrs["key"]].reason
        assert canon is None or not case.frontend_models, f"{what}: kept opaque ({reason}) though the table models it"
        stats["opaque"] += 1
    # 3. the backend
    back = typed(to_relay(g))
    assert convert_type(back["main"].body.checked_type) == want, f"{what}: backend builds {back['main'].body.checked_type}"


#: table ops with no Relay op of their own: the backend writes them as several calls
NO_RELAY_OP = {"fast_sigmoid", "batch_dense"}


def written_inputs(rng, op) -> list[tuple]:
    """Input shapes for an op written as several calls: batch_dense's [B, M, K] and [B, N, K], else one."""
    if op == "batch_dense":
        b, m, n, k = (int(v) for v in rng.integers(1, 6, size=4))
        return [(b, m, k), (b, n, k)]
    return [shape(rng, int(rng.integers(0, 5)))]


def test_every_modelled_op_has_a_generator():
    assert set(GENERATORS) | NO_RELAY_OP == set(MODELLED_OPS)


@pytest.mark.parametrize("op", sorted(NO_RELAY_OP | READ_AS_OPAQUE))
def test_ops_written_as_several_calls_type_check_in_relay(op):
    from relay_eqsat.graph import TensorGraph

    rng = np.random.default_rng(zlib.crc32(op.encode()))
    for _ in range(CASES_PER_OP // 3):
        shapes = written_inputs(rng, op)
        g = TensorGraph()
        g.set_output(g.add(op, [g.var(f"x{i}", s) for i, s in enumerate(shapes)]))
        want = ops.infer_type(op, g[g.output].attrs, [TensorType(s, "float32") for s in shapes])
        assert convert_type(typed(to_relay(g))["main"].body.checked_type) == want


@pytest.mark.parametrize("op", sorted(MODELLED_OPS - NO_RELAY_OP))
def test_op_agrees_with_relay(op):
    rng = np.random.default_rng(zlib.crc32(op.encode()))
    stats: Counter = Counter()
    for _ in range(CASES_PER_OP):
        check_case(GENERATORS[op](rng, op), stats)
    if op in READ_AS_OPAQUE:  # by design: the backend writes the table's op in another form
        assert stats["opaque"] == CASES_PER_OP, dict(stats)
        return
    # the generators mostly make cases the optimizer models
    assert stats["modelled"] >= CASES_PER_OP * 0.6, dict(stats)
