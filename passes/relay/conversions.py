"""Per-op Relay conversions, registered into the operator table at import.

For each op of :mod:`relay_eqsat.ops` that Relay has, ``ops.register_conversion`` gets, under the
frontend name :data:`FRONTEND`,

- ``from_relay(call, input_types, out_type) -> attrs``: the Relay call's
  attributes, Relay-style (``ops.normalize_attrs`` makes them canonical); it
  raises :class:`NotModelled` for attributes the table does not model, and
  the frontend keeps such a call opaque. The call's first ``arity`` arguments
  are the node's inputs (a variadic op's are the fields of its tuple
  argument); later ones are read here as attributes (``nn.pad``'s pad value);
- ``to_relay(attrs, input_exprs, input_types, out_type) -> relay.Expr``: the
  node rebuilt, ``attrs`` with the op's defaults filled in.

The drivers (:mod:`relay_eqsat.passes.relay.frontend`) only look the op up in the table.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relay

from relay_eqsat import ops


#: this frontend's name in the operator table (``OpDef.conversion(FRONTEND)``)
FRONTEND = "relay"


def _register(name: str, from_relay, to_relay) -> None:
    ops.register_conversion(FRONTEND, name, from_relay, to_relay)


class NotModelled(Exception):
    """A call of a modelled op whose attributes or types we do not model."""


# -- reading Relay attributes -----------------------------------------------------

def _ints(values) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def _pair(values, what: str) -> tuple[int, int]:
    v = _ints(values if not isinstance(values, (int, tvm.tir.IntImm)) else [values])
    if len(v) == 1:
        return (v[0], v[0])
    if len(v) != 2:
        raise NotModelled(f"{what} {list(v)}")
    return v


def _pad4(values) -> tuple[int, int, int, int]:
    """Relay's 2-d padding (1, 2 or 4 values) as (top, left, bottom, right)."""
    p = _ints(values if not isinstance(values, (int, tvm.tir.IntImm)) else [values])
    if len(p) == 1:
        return (p[0],) * 4
    if len(p) == 2:
        return (p[0], p[1], p[0], p[1])
    if len(p) == 4:
        return p
    raise NotModelled(f"padding {list(p)}")


def _axis(a, ndim: int) -> int:
    a = int(a)
    if a < 0:
        a += ndim
    if not 0 <= a < ndim:
        raise NotModelled(f"axis {a} out of range for rank {ndim}")
    return a


def _out_dtype(attrs, in_dtype: str) -> str:
    d = str(attrs.out_dtype or "")
    return "" if d in ("", in_dtype) else d


def _layout(attrs, name: str, want: str) -> str:
    v = str(getattr(attrs, name))
    if v != want:
        raise NotModelled(f"{name}={v}")
    out = str(getattr(attrs, "out_layout", "") or "")
    if out not in ("", want):
        raise NotModelled(f"out_layout={out}")
    return v


def _no_attrs(call, ts, out):
    return {}


# -- element-wise ------------------------------------------------------------------

def _plain(name):
    op = relay.op.get(name)
    return lambda a, xs, ts, out: relay.Call(op, list(xs))


def _to_add(a, xs, ts, out):
    # hhb-tvm's SimplifyExpr rewrites add(e, e) into multiply(e, 2) and, when e
    # contains a conv2d, leaves a free variable behind (relay.build fails).
    # e + e == e * 2 exactly in floating point, so emit the product directly.
    if xs[0].same_as(xs[1]):
        return relay.multiply(xs[0], relay.const(np.array(2, dtype=ts[0].dtype)))
    return relay.add(xs[0], xs[1])


for _name in ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power",
              "nn.relu", "tanh", "sigmoid", "erf", "exp", "sqrt", "rsqrt", "negative"):
    _register(_name, _no_attrs, _to_add if _name == "add" else _plain(_name))


def _to_fast_erf(a, xs, ts, out):
    """fast_erf keeping NaN: ``where(isnan(x), x, fast_erf(x))``, one fused element-wise kernel (Relay's
    fast_erf clamps its input first, so NaN comes out as 1: a Relay fast_erf is not the table's and
    stays opaque)."""
    x = xs[0]
    return relay.where(relay.isnan(x), x, relay.Call(relay.op.get("fast_erf"), [x]))


def _to_fast_sigmoid(a, xs, ts, out):
    """0.5 + 0.5 * fast_tanh(0.5 * x): TVM has no fast sigmoid, and its sigmoid calls libm's exp per
    value. The same function as 1 / (1 + fast_exp(-x)) to within float32 rounding (absolute error
    below 1e-6), and cheaper fused into a convolution's output: EfficientNet-B0 ran 0.864 of that
    form's time on a Zen 3 (11 of 11 paired rounds; docs/design-notes.md, "TVM's vectorized
    approximations")."""
    half = relay.const(np.array(0.5, dtype=ts[0].dtype))
    tanh = relay.Call(relay.op.get("fast_tanh"), [relay.multiply(half, xs[0])])
    return relay.add(half, relay.multiply(half, tanh))


def _written_only(why):
    """The ``from_relay`` of an op no single Relay call reads as: the call stays opaque."""
    def from_relay(call, ts, out):
        raise NotModelled(why)
    return from_relay


for _name in ("fast_exp", "fast_tanh"):  # Relay's keep NaN as the table's do: read and written as they are
    _register(_name, _no_attrs, _plain(_name))
_register("fast_erf", _written_only("Relay's fast_erf maps NaN to 1"), _to_fast_erf)
_register("fast_sigmoid", _written_only("Relay has no fast_sigmoid"), _to_fast_sigmoid)

_register("clip", lambda call, ts, out: dict(a_min=float(call.attrs.a_min), a_max=float(call.attrs.a_max)),
                   lambda a, xs, ts, out: relay.clip(xs[0], a["a_min"], a["a_max"]))
_register("nn.leaky_relu", lambda call, ts, out: dict(alpha=float(call.attrs.alpha)),
                   lambda a, xs, ts, out: relay.nn.leaky_relu(xs[0], a["alpha"]))


# -- matrix products and convolution -------------------------------------------------

def _from_conv2d(call, ts, out):
    a = call.attrs
    if str(a.kernel_layout) != "OIHW":
        raise NotModelled(f"kernel_layout={a.kernel_layout}")
    return dict(strides=_pair(a.strides, "strides"), padding=_pad4(a.padding),
                dilation=_pair(a.dilation, "dilation"), groups=int(a.groups),
                data_layout=_layout(a, "data_layout", "NCHW"), kernel_layout="OIHW",
                out_dtype=_out_dtype(a, ts[0].dtype))


def _to_conv2d(a, xs, ts, out):
    w = ts[1]
    return relay.nn.conv2d(xs[0], xs[1], strides=a["strides"], padding=a["padding"],
                           dilation=a["dilation"], groups=a["groups"], channels=w.shape[0],
                           kernel_size=w.shape[2:], data_layout=a.get("data_layout", "NCHW"),
                           kernel_layout=a.get("kernel_layout", "OIHW"),
                           out_dtype=a.get("out_dtype", ""))


def _to_dense(a, xs, ts, out):
    x, w = ts
    if x.ndim == 2:
        return relay.nn.dense(xs[0], xs[1], units=w.shape[0], out_dtype=a.get("out_dtype", ""))
    # TVM's x86 dense layout rewrite (opt_level 3) only takes 2-d data
    flat = relay.reshape(xs[0], [-1, x.shape[-1]])
    y = relay.nn.dense(flat, xs[1], units=w.shape[0], out_dtype=a.get("out_dtype", ""))
    return relay.reshape(y, list(out.shape))


def _from_matmul(call, ts, out):
    a = call.attrs
    return dict(transpose_a=bool(a.transpose_a), transpose_b=bool(a.transpose_b),
                out_dtype=_out_dtype(a, ts[0].dtype))


def _to_matmul(a, xs, ts, out):
    if a["transpose_b"] and not a["transpose_a"]:  # relay.nn.matmul builds an nn.dense for this form:
        return _to_dense(a, xs, ts, out)  # the same, with N-d data flattened for TVM's x86 dense
    b = ts[1]
    units = b.shape[0] if a["transpose_b"] else b.shape[-1]
    return relay.nn.matmul(xs[0], xs[1], units=units, out_dtype=a.get("out_dtype", ""),
                           transpose_a=a["transpose_a"], transpose_b=a["transpose_b"])


def _to_batch_matmul(a, xs, ts, out):
    return relay.nn.batch_matmul(xs[0], xs[1], out_dtype=a.get("out_dtype", ""),
                                 transpose_a=a["transpose_a"], transpose_b=a["transpose_b"])


_register("nn.conv2d", _from_conv2d, _to_conv2d)
_register("nn.dense", lambda call, ts, out: dict(out_dtype=_out_dtype(call.attrs, ts[0].dtype)), _to_dense)
_register("nn.matmul", _from_matmul, _to_matmul)
_register("nn.batch_matmul", _from_matmul, _to_batch_matmul)


def _to_batch_dense(a, xs, ts, out):
    """One nn.dense per batch entry (TVM's packed dense schedule), stacked. Each ``take`` gets an
    index constant of its own (a 0-d constant shared by calls becomes a kernel argument)."""
    def entry(x, i):
        return relay.take(x, relay.const(np.array(i, dtype="int32")), axis=0)

    return relay.stack([relay.nn.dense(entry(xs[0], i), entry(xs[1], i), units=ts[1].shape[1],
                                       out_dtype=a.get("out_dtype", "")) for i in range(ts[0].shape[0])], axis=0)


_register("batch_dense", _written_only("Relay has no batch_dense"), _to_batch_dense)


# -- pools -------------------------------------------------------------------------------

def _from_pool(call, ts, out):
    a = call.attrs
    d = dict(pool_size=_pair(a.pool_size, "pool_size"), strides=_pair(a.strides, "strides"),
             dilation=_pair(a.dilation, "dilation"), padding=_pad4(a.padding),
             layout=_layout(a, "layout", "NCHW"), ceil_mode=bool(a.ceil_mode))
    if call.op.name == "nn.avg_pool2d":
        d["count_include_pad"] = bool(a.count_include_pad)
    return d


def _to_pool(name):
    def build(a, xs, ts, out):
        kw = dict(pool_size=a["pool_size"], strides=a["strides"], dilation=a["dilation"],
                  padding=a["padding"], layout=a.get("layout", "NCHW"), ceil_mode=a["ceil_mode"])
        if name == "nn.avg_pool2d":
            return relay.nn.avg_pool2d(xs[0], count_include_pad=a["count_include_pad"], **kw)
        return relay.nn.max_pool2d(xs[0], **kw)
    return build


def _from_global_pool(call, ts, out):
    return dict(layout=_layout(call.attrs, "layout", "NCHW"))


_register("nn.max_pool2d", _from_pool, _to_pool("nn.max_pool2d"))
_register("nn.avg_pool2d", _from_pool, _to_pool("nn.avg_pool2d"))
_register("nn.global_avg_pool2d", _from_global_pool,
                   lambda a, xs, ts, out: relay.nn.global_avg_pool2d(xs[0], a.get("layout", "NCHW")))
_register("nn.global_max_pool2d", _from_global_pool,
                   lambda a, xs, ts, out: relay.nn.global_max_pool2d(xs[0], a.get("layout", "NCHW")))


# -- data movement ---------------------------------------------------------------------

def _from_transpose(call, ts, out):
    nd = ts[0].ndim
    axes = call.attrs.axes
    if axes is None or len(axes) == 0:
        return dict(axes=tuple(range(nd - 1, -1, -1)))
    axes = tuple(_axis(x, nd) for x in axes)
    if sorted(axes) != list(range(nd)):
        raise NotModelled(f"axes {axes} is not a permutation")
    return dict(axes=axes)


def _from_split(call, ts, out):
    x = ts[0]
    axis = _axis(call.attrs.axis, x.ndim)
    ios = call.attrs.indices_or_sections
    if isinstance(ios, (int, tvm.tir.IntImm)):
        n = int(ios)
        if n < 1 or x.shape[axis] % n:
            raise NotModelled(f"{n} sections of {x.shape[axis]}")
        step = x.shape[axis] // n
        indices = tuple(step * i for i in range(1, n))
    else:
        indices = _ints(ios)
        if any(i < 0 for i in indices) or list(indices) != sorted(indices):
            raise NotModelled(f"split indices {list(indices)}")
    return dict(indices=indices, axis=axis)


def _from_strided_slice(call, ts, out):
    """Relay's begin/end/strides/axes/slice_mode as given: ``ops.normalize_attrs``
    resolves them the way Relay's type relation does (one implementation)."""
    a = call.attrs
    if a.begin is None or a.end is None:
        raise NotModelled("dynamic strided_slice")
    d = dict(begin=_ints(a.begin), end=_ints(a.end), slice_mode=str(a.slice_mode))
    if a.strides is not None:
        d["strides"] = _ints(a.strides)
    if a.axes is not None:
        d["axes"] = _ints(a.axes)
    return d


def _from_pad(call, ts, out):
    a = call.attrs
    if str(a.pad_mode) != "constant":
        raise NotModelled(f"pad_mode={a.pad_mode}")
    pv = call.args[1]
    if not isinstance(pv, relay.Constant) or pv.data.numpy().size != 1:
        raise NotModelled("non-constant pad_value")
    pad_width = tuple(_ints(p) for p in a.pad_width)
    if len(pad_width) != ts[0].ndim or any(len(p) != 2 or min(p) < 0 for p in pad_width):
        raise NotModelled(f"pad_width {pad_width}")
    return dict(pad_width=pad_width, pad_value=float(pv.data.numpy().reshape(())), pad_mode="constant")


def _to_pad(a, xs, ts, out):
    pv = relay.const(np.array(a["pad_value"], dtype=ts[0].dtype))
    return relay.nn.pad(xs[0], [list(p) for p in a["pad_width"]], pv, a.get("pad_mode", "constant"))


_register("transpose", _from_transpose, lambda a, xs, ts, out: relay.transpose(xs[0], list(a["axes"])))
_register("reshape", lambda call, ts, out: dict(newshape=out.shape),
                   lambda a, xs, ts, out: relay.reshape(xs[0], list(a["newshape"])))
_register("concatenate", lambda call, ts, out: dict(axis=_axis(call.attrs.axis, out.ndim)),
                   lambda a, xs, ts, out: relay.concatenate(list(xs), a["axis"]))
_register("split", _from_split,
                   lambda a, xs, ts, out: relay.split(xs[0], list(a["indices"]), a["axis"]).astuple())
_register("strided_slice", _from_strided_slice, lambda a, xs, ts, out: relay.strided_slice(
    xs[0], list(a["begin"]), list(a["end"]), list(a["strides"])))
_register("nn.pad", _from_pad, _to_pad)


# -- bias, normalization, softmax, reduction ---------------------------------------------

def _from_axis(call, ts, out):
    return dict(axis=_axis(call.attrs.axis, ts[0].ndim))


def _from_norm(call, ts, out):
    a = call.attrs
    return dict(axis=_axis(a.axis, ts[0].ndim), epsilon=float(a.epsilon),
                center=bool(a.center), scale=bool(a.scale))


def _from_mean(call, ts, out):
    """Relay's axis/keepdims/exclude as given: ``ops.normalize_attrs`` resolves them."""
    a = call.attrs
    return dict(axis=None if a.axis is None else _ints(a.axis), keepdims=bool(a.keepdims),
                exclude=bool(a.exclude))


_register("nn.bias_add", _from_axis, lambda a, xs, ts, out: relay.nn.bias_add(xs[0], xs[1], a["axis"]))
_register("nn.batch_norm", _from_norm, lambda a, xs, ts, out: relay.nn.batch_norm(
    *xs, axis=a["axis"], epsilon=a["epsilon"], center=a["center"], scale=a["scale"]).astuple())
_register("nn.softmax", _from_axis, lambda a, xs, ts, out: relay.nn.softmax(xs[0], a["axis"]))
_register("nn.fast_softmax", _from_axis, lambda a, xs, ts, out: relay.nn.fast_softmax(xs[0], a["axis"]))
_register("nn.layer_norm", _from_norm, lambda a, xs, ts, out: relay.nn.layer_norm(
    xs[0], xs[1], xs[2], axis=a["axis"], epsilon=a["epsilon"], center=a["center"], scale=a["scale"]))
_register("mean", _from_mean,
                   lambda a, xs, ts, out: relay.mean(xs[0], axis=list(a["axis"]), keepdims=a["keepdims"]))
