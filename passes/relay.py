"""Relay <-> TensorGraph: the frontend (:func:`from_relay`) and backend (:func:`to_relay`).

The frontend takes the ``main`` function of a type-checked Relay module, a pure
dataflow graph with static shapes, and turns every call of an operator of the
:mod:`relay_eqsat.ops` table into a node with canonical attributes. Anything
else is kept verbatim as an ``opaque`` node whose payload (:class:`OpaqueCall`)
rebuilds the original call; a call is also made opaque when ``ops.infer_type``
disagrees with Relay's type for it, so a round trip never changes meaning.
Programs the frontend cannot take raise :class:`UnsupportedProgram`.

The backend rebuilds one Relay expression per node, so shared values stay
shared, and leaves weight-only subgraphs as constant expressions for
``relay.build``'s FoldConstant.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import tvm
from tvm import relay

from relay_eqsat import ops
from relay_eqsat.graph import Attrs, TensorGraph, TensorType, TupleType, Type

log = logging.getLogger(__name__)

FLOAT_DTYPES = ("float16", "float32", "float64")


class UnsupportedProgram(ValueError):
    """The Relay program is outside what the frontend takes (dynamic shapes,
    control flow, closures, references, calls between functions...)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class _NotModelled(Exception):
    """A call of a modelled op whose attributes or types we do not model."""


# -- types ---------------------------------------------------------------------

def convert_type(t) -> Type:
    """Our type for a Relay TensorType / TupleType of tensors with static shapes."""
    if isinstance(t, relay.TensorType):
        shape = []
        for d in t.shape:
            if not isinstance(d, tvm.tir.IntImm):
                raise UnsupportedProgram(f"dynamic shape {t}")
            shape.append(int(d))
        return TensorType(tuple(shape), str(t.dtype))
    if isinstance(t, relay.TupleType):
        fields = []
        for f in t.fields:
            ft = convert_type(f)
            if not isinstance(ft, TensorType):
                raise UnsupportedProgram(f"nested tuple type {t}")
            fields.append(ft)
        return TupleType(tuple(fields))
    raise UnsupportedProgram(f"values of type {t} ({type(t).__name__})")


def relay_type(t: Type):
    """The Relay type for one of ours."""
    if isinstance(t, TensorType):
        return relay.TensorType(t.shape, t.dtype)
    return relay.TupleType([relay_type(f) for f in t.fields])


# -- opaque payload -----------------------------------------------------------

@dataclass(eq=False)
class OpaqueCall:
    """A Relay call kept verbatim: the op and its attrs object (type args are
    re-inferred).

    The node's inputs are the call's arguments flattened: ``arg_spec[i]`` is
    -1 for a tensor argument, or n >= 0 for a tuple argument made of the next
    n inputs.
    """

    op: tvm.ir.Op
    attrs: Any
    arg_spec: tuple[int, ...]
    in_types: tuple[TensorType, ...]
    out_type: Type
    reason: str = ""
    _func: Any = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return str(self.op.name)

    def call(self, inputs: Sequence[relay.Expr]) -> relay.Expr:
        """The original call applied to new (flattened) input expressions."""
        if len(inputs) != len(self.in_types):
            raise ValueError(f"{self.name}: {len(inputs)} inputs for {len(self.in_types)}")
        args, pos = [], 0
        for n in self.arg_spec:
            if n < 0:
                args.append(inputs[pos])
                pos += 1
            else:
                args.append(relay.Tuple(list(inputs[pos:pos + n])))
                pos += n
        return relay.Call(self.op, args, self.attrs)

    def function(self) -> relay.Function:
        """``fn(p0, p1, ...) { call(p0, p1, ...) }`` with the input types."""
        if self._func is None:
            ps = [relay.var(f"p{i}", relay_type(t)) for i, t in enumerate(self.in_types)]
            self._func = relay.Function(ps, self.call(ps))
        return self._func

    def __repr__(self) -> str:
        return f"OpaqueCall({self.name}, {list(self.in_types)} -> {self.out_type}, {self.reason!r})"


# -- frontend: attribute conversion -------------------------------------------

def _ints(values) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def _pair(values, what: str) -> tuple[int, int]:
    v = _ints(values if not isinstance(values, (int, tvm.tir.IntImm)) else [values])
    if len(v) == 1:
        return (v[0], v[0])
    if len(v) != 2:
        raise _NotModelled(f"{what} {list(v)}")
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
    raise _NotModelled(f"padding {list(p)}")


def _axis(a, ndim: int) -> int:
    a = int(a)
    if a < 0:
        a += ndim
    if not 0 <= a < ndim:
        raise _NotModelled(f"axis {a} out of range for rank {ndim}")
    return a


def _out_dtype(attrs, in_dtype: str) -> str:
    d = str(attrs.out_dtype or "")
    return "" if d in ("", in_dtype) else d


def _layout(attrs, name: str, want: str) -> str:
    v = str(getattr(attrs, name))
    if v != want:
        raise _NotModelled(f"{name}={v}")
    out = str(getattr(attrs, "out_layout", "") or "")
    if out not in ("", want):
        raise _NotModelled(f"out_layout={out}")
    return v


def _conv2d(fe, call, ts):
    a = call.attrs
    if str(a.kernel_layout) != "OIHW":
        raise _NotModelled(f"kernel_layout={a.kernel_layout}")
    return dict(strides=_pair(a.strides, "strides"), padding=_pad4(a.padding),
                dilation=_pair(a.dilation, "dilation"), groups=int(a.groups),
                data_layout=_layout(a, "data_layout", "NCHW"), kernel_layout="OIHW",
                out_dtype=_out_dtype(a, ts[0].dtype))


def _dense(fe, call, ts):
    return dict(out_dtype=_out_dtype(call.attrs, ts[0].dtype))


def _matmul(fe, call, ts):
    a = call.attrs
    return dict(transpose_a=bool(a.transpose_a), transpose_b=bool(a.transpose_b),
                out_dtype=_out_dtype(a, ts[0].dtype))


def _no_attrs(fe, call, ts):
    return {}


def _clip(fe, call, ts):
    return dict(a_min=float(call.attrs.a_min), a_max=float(call.attrs.a_max))


def _leaky_relu(fe, call, ts):
    return dict(alpha=float(call.attrs.alpha))


def _pool(fe, call, ts):
    a = call.attrs
    d = dict(pool_size=_pair(a.pool_size, "pool_size"), strides=_pair(a.strides, "strides"),
             dilation=_pair(a.dilation, "dilation"), padding=_pad4(a.padding),
             layout=_layout(a, "layout", "NCHW"), ceil_mode=bool(a.ceil_mode))
    if call.op.name == "nn.avg_pool2d":
        d["count_include_pad"] = bool(a.count_include_pad)
    return d


def _global_pool(fe, call, ts):
    return dict(layout=_layout(call.attrs, "layout", "NCHW"))


def _transpose(fe, call, ts):
    nd = ts[0].ndim
    axes = call.attrs.axes
    if axes is None or len(axes) == 0:
        return dict(axes=tuple(range(nd - 1, -1, -1)))
    axes = tuple(_axis(x, nd) for x in axes)
    if sorted(axes) != list(range(nd)):
        raise _NotModelled(f"axes {axes} is not a permutation")
    return dict(axes=axes)


def _reshape(fe, call, ts, out):
    return dict(newshape=out.shape)


def _concatenate(fe, call, ts, out):
    return dict(axis=_axis(call.attrs.axis, out.ndim))


def _split(fe, call, ts):
    x = ts[0]
    axis = _axis(call.attrs.axis, x.ndim)
    ios = call.attrs.indices_or_sections
    if isinstance(ios, (int, tvm.tir.IntImm)):
        n = int(ios)
        if n < 1 or x.shape[axis] % n:
            raise _NotModelled(f"{n} sections of {x.shape[axis]}")
        step = x.shape[axis] // n
        indices = tuple(step * i for i in range(1, n))
    else:
        indices = _ints(ios)
        if any(i < 0 for i in indices) or list(indices) != sorted(indices):
            raise _NotModelled(f"split indices {list(indices)}")
    return dict(indices=indices, axis=axis)


def _strided_slice(fe, call, ts):
    """Relay's begin/end/strides/axes/slice_mode as given: ``ops.normalize_attrs``
    resolves them the way Relay's type relation does (one implementation)."""
    a = call.attrs
    if a.begin is None or a.end is None:
        raise _NotModelled("dynamic strided_slice")
    d = dict(begin=_ints(a.begin), end=_ints(a.end), slice_mode=str(a.slice_mode))
    if a.strides is not None:
        d["strides"] = _ints(a.strides)
    if a.axes is not None:
        d["axes"] = _ints(a.axes)
    return d


def _pad(fe, call, ts):
    a = call.attrs
    if str(a.pad_mode) != "constant":
        raise _NotModelled(f"pad_mode={a.pad_mode}")
    pv = call.args[1]
    if not isinstance(pv, relay.Constant) or pv.data.numpy().size != 1:
        raise _NotModelled("non-constant pad_value")
    pad_width = tuple(_ints(p) for p in a.pad_width)
    if len(pad_width) != ts[0].ndim or any(len(p) != 2 or min(p) < 0 for p in pad_width):
        raise _NotModelled(f"pad_width {pad_width}")
    return dict(pad_width=pad_width, pad_value=float(pv.data.numpy().reshape(())), pad_mode="constant")


def _axis_only(fe, call, ts):
    return dict(axis=_axis(call.attrs.axis, ts[0].ndim))


def _norm(fe, call, ts):
    a = call.attrs
    return dict(axis=_axis(a.axis, ts[0].ndim), epsilon=float(a.epsilon),
                center=bool(a.center), scale=bool(a.scale))


def _mean(fe, call, ts):
    """Relay's axis/keepdims/exclude as given: ``ops.normalize_attrs`` resolves them."""
    a = call.attrs
    return dict(axis=None if a.axis is None else _ints(a.axis), keepdims=bool(a.keepdims),
                exclude=bool(a.exclude))


# op name -> (attribute converter, number of leading args that are graph inputs
# or None for all, whether the converter needs the output type)
_BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum", "power")
_UNARY = ("nn.relu", "tanh", "sigmoid", "erf", "exp", "sqrt", "rsqrt", "negative")

_CONVERTERS: dict[str, tuple[Callable, int | None, bool]] = {
    "nn.conv2d": (_conv2d, None, False),
    "nn.dense": (_dense, None, False),
    "nn.matmul": (_matmul, None, False),
    "nn.batch_matmul": (_matmul, None, False),
    **{name: (_no_attrs, None, False) for name in _BINARY + _UNARY},
    "clip": (_clip, None, False),
    "nn.leaky_relu": (_leaky_relu, None, False),
    "nn.max_pool2d": (_pool, None, False),
    "nn.avg_pool2d": (_pool, None, False),
    "nn.global_avg_pool2d": (_global_pool, None, False),
    "nn.global_max_pool2d": (_global_pool, None, False),
    "transpose": (_transpose, None, False),
    "reshape": (_reshape, None, True),
    "concatenate": (_concatenate, None, True),
    "split": (_split, None, False),
    "strided_slice": (_strided_slice, None, False),
    "nn.pad": (_pad, 1, False),
    "nn.bias_add": (_axis_only, None, False),
    "nn.batch_norm": (_norm, None, False),
    "nn.softmax": (_axis_only, None, False),
    "nn.layer_norm": (_norm, None, False),
    "mean": (_mean, None, False),
}

MODELLED_OPS = frozenset(_CONVERTERS)


def _normalize(op: str, attrs: Attrs, input_types) -> Attrs:
    norm = getattr(ops, "normalize_attrs", None)
    return norm(op, attrs, input_types) if norm is not None else attrs


# -- frontend: the walk -------------------------------------------------------

class _Frontend:
    def __init__(self, func: relay.Function, params: Mapping | None):
        self.g = TensorGraph()
        self.memo: dict[Any, Any] = {}  # relay expr -> node id, or list of ids for a Tuple literal
        self.small_consts: dict[tuple, int] = {}
        self.func = func
        names: set[str] = set()
        params = dict(params or {})
        for v in func.params:
            t = convert_type(v.checked_type)
            if not isinstance(t, TensorType):
                raise UnsupportedProgram(f"parameter {v.name_hint} of tuple type {t}")
            name = v.name_hint
            if name in params:
                value = params[name]
                value = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
                if tuple(value.shape) != t.shape or str(value.dtype) != t.dtype:
                    raise ValueError(f"param {name!r}: value {value.dtype}{list(value.shape)} "
                                     f"does not match the parameter type {t}")
                self.memo[v] = self._const(value, name)
                continue
            base, k = name, 0
            while name in names:
                k += 1
                name = f"{base}_{k}"
            if name != base:
                log.warning("parameter name %r is not unique; renamed to %r", base, name)
            names.add(name)
            self.memo[v] = self.g.var(name, t.shape, t.dtype)

    def _const(self, value: np.ndarray, name: str | None = None) -> int:
        key = None
        if name is None and value.size <= 4096:
            key = (str(value.dtype), value.shape, value.tobytes())
            if key in self.small_consts:
                return self.small_consts[key]
        base = name or f"c{len(self.g.constants)}"
        cname, k = base, 0
        while cname in self.g.constants:
            k += 1
            cname = f"{base}_{k}"
        nid = self.g.const(value, cname)
        if key is not None:
            self.small_consts[key] = nid
        return nid

    # values
    def value(self, expr) -> int:
        """The node holding ``expr``'s value (a ``tuple`` node for a Tuple literal)."""
        m = self.memo[expr]
        if isinstance(m, list):
            return self.g.add("tuple", m)
        return m

    def fields(self, expr) -> list[int]:
        """Nodes of the fields of a tuple-typed expression."""
        m = self.memo[expr]
        if isinstance(m, list):
            return list(m)
        t = self.g[m].type
        if not isinstance(t, TupleType):
            raise UnsupportedProgram(f"expected a tuple, got {t}")
        return [self.g.add("tuple_get_item", (m,), {"index": i}) for i in range(len(t.fields))]

    def run(self) -> TensorGraph:
        body = self.func.body
        stack: list[tuple[Any, int]] = [(body, 0)]
        while stack:
            expr, state = stack.pop()
            if state == 0 and expr in self.memo:
                continue
            if isinstance(expr, relay.Let):
                if isinstance(expr.value, relay.Function):
                    raise UnsupportedProgram("let-bound function (closure or recursion)")
                if state == 0:
                    stack += [(expr, 1), (expr.value, 0)]
                elif state == 1:
                    self.memo[expr.var] = self.memo[expr.value]
                    stack += [(expr, 2), (expr.body, 0)]
                else:
                    self.memo[expr] = self.memo[expr.body]
                continue
            children = self._children(expr)
            if state == 0 and children:
                stack.append((expr, 1))
                stack.extend((c, 0) for c in reversed(children) if c not in self.memo)
                continue
            self.memo[expr] = self._visit(expr)
        self.g.set_output(self.value(body))
        return self.g

    @staticmethod
    def _children(expr) -> list:
        if isinstance(expr, relay.Call):
            if not isinstance(expr.op, tvm.ir.Op):
                what = "another function" if isinstance(expr.op, relay.GlobalVar) else type(expr.op).__name__
                raise UnsupportedProgram(f"call of {what} ({expr.op})")
            return list(expr.args)
        if isinstance(expr, relay.Tuple):
            return list(expr.fields)
        if isinstance(expr, relay.TupleGetItem):
            return [expr.tuple_value]
        if isinstance(expr, (relay.Var, relay.Constant)):
            return []
        raise UnsupportedProgram(f"{type(expr).__name__} expressions (control flow, closures, "
                                 f"references or ADTs)")

    def _visit(self, expr):
        if isinstance(expr, relay.Var):
            raise UnsupportedProgram(f"free variable {expr.name_hint}")
        if isinstance(expr, relay.Constant):
            return self._const(expr.data.numpy())
        if isinstance(expr, relay.Tuple):
            convert_type(expr.checked_type)
            out = []
            for f in expr.fields:
                m = self.memo[f]
                if isinstance(m, list) or isinstance(self.g[m].type, TupleType):
                    raise UnsupportedProgram("nested tuples")
                out.append(m)
            return out
        if isinstance(expr, relay.TupleGetItem):
            m = self.memo[expr.tuple_value]
            if isinstance(m, list):
                return m[expr.index]
            return self.g.add("tuple_get_item", (m,), {"index": int(expr.index)})
        return self._call(expr)

    def _call(self, call: relay.Call) -> int:
        out = convert_type(call.checked_type)
        name = str(call.op.name)
        reason = "not modelled"
        conv = _CONVERTERS.get(name)
        if conv is not None:
            try:
                return self._modelled(call, name, conv, out)
            except _NotModelled as e:
                reason = str(e)
                log.debug("%s kept opaque: %s", name, reason)
            except Exception as e:  # noqa: BLE001 - ops table or attrs outside the contract
                reason = f"{type(e).__name__}: {e}"
                log.debug("%s kept opaque: %s", name, reason)
        return self._opaque(call, out, reason)

    def _modelled(self, call, name, conv, out) -> int:
        fn, n_inputs, needs_out = conv
        args = call.args if n_inputs is None else call.args[:n_inputs]
        if name == "concatenate":
            inputs = self.fields(args[0])
        else:
            inputs = []
            for a in args:
                if isinstance(a.checked_type, relay.TupleType):
                    raise _NotModelled("tuple argument")
                inputs.append(self.value(a))
        ts = [self.g[i].type for i in inputs]
        for t in ts + (list(out.fields) if isinstance(out, TupleType) else [out]):
            if t.dtype not in FLOAT_DTYPES:
                raise _NotModelled(f"dtype {t.dtype}")
        attrs = fn(self, call, ts, out) if needs_out else fn(self, call, ts)
        attrs = _normalize(name, Attrs(attrs), ts)
        inferred = ops.infer_type(name, attrs, ts)
        if inferred != out:
            log.warning("%s%r: ops.infer_type gives %s but Relay says %s; kept opaque",
                        name, attrs, inferred, out)
            raise _NotModelled(f"type mismatch: inferred {inferred}, Relay {out}")
        return self.g.add(name, inputs, attrs)

    def _opaque(self, call, out: Type, reason: str) -> int:
        inputs, spec = [], []
        for a in call.args:
            if isinstance(a.checked_type, relay.TupleType):
                ids = self.fields(a)
                spec.append(len(ids))
                inputs += ids
            else:
                inputs.append(self.value(a))
                spec.append(-1)
        payload = OpaqueCall(call.op, call.attrs, tuple(spec),
                             tuple(self.g[i].type for i in inputs), out, reason)
        return self.g.add_opaque(payload, inputs, out, name=payload.name)


def main_function(mod_or_func) -> tuple[tvm.IRModule, relay.Function]:
    """The type-checked module and its ``main`` function."""
    if isinstance(mod_or_func, relay.Function):
        mod = tvm.IRModule.from_expr(mod_or_func)
    elif isinstance(mod_or_func, tvm.IRModule):
        mod = mod_or_func
    else:
        raise TypeError(f"expected a Relay IRModule or Function, got {type(mod_or_func).__name__}")
    if not any(gv.name_hint == "main" for gv in mod.get_global_vars()):
        raise UnsupportedProgram("module has no main function")
    try:
        mod = relay.transform.InferType()(mod)
    except tvm.TVMError as e:
        raise UnsupportedProgram(f"type inference failed: {str(e).strip().splitlines()[-1]}") from e
    func = mod["main"]
    if not isinstance(func, relay.Function):
        raise UnsupportedProgram(f"main is a {type(func).__name__}, not a Relay function")
    if len(func.type_params):
        raise UnsupportedProgram("polymorphic main function")
    return mod, func


def from_relay(mod_or_func, params: Mapping | None = None) -> TensorGraph:
    """The TensorGraph of a Relay module's ``main`` (or of a function).

    Types are inferred first; ``params`` (name -> array) are bound as
    constants named after their parameters. Parameters stay ``var`` nodes in
    order (unused ones included); a value used several times is one node.
    Raises :class:`UnsupportedProgram` for programs outside the pure,
    static-shape dataflow fragment.
    """
    _, func = main_function(mod_or_func)
    return _Frontend(func, params).run()


# -- backend -------------------------------------------------------------------

def _b_conv2d(a, xs, ts, out):
    w = ts[1]
    return relay.nn.conv2d(xs[0], xs[1], strides=a["strides"], padding=a["padding"],
                           dilation=a["dilation"], groups=a["groups"], channels=w.shape[0],
                           kernel_size=w.shape[2:], data_layout=a.get("data_layout", "NCHW"),
                           kernel_layout=a.get("kernel_layout", "OIHW"),
                           out_dtype=a.get("out_dtype", ""))


def _b_dense(a, xs, ts, out):
    x, w = ts
    if x.ndim == 2:
        return relay.nn.dense(xs[0], xs[1], units=w.shape[0], out_dtype=a.get("out_dtype", ""))
    # TVM's x86 dense layout rewrite (opt_level 3) only takes 2-d data
    flat = relay.reshape(xs[0], [-1, x.shape[-1]])
    y = relay.nn.dense(flat, xs[1], units=w.shape[0], out_dtype=a.get("out_dtype", ""))
    return relay.reshape(y, list(out.shape))


def _b_matmul(a, xs, ts, out):
    b = ts[1]
    units = b.shape[0] if a["transpose_b"] else b.shape[-1]
    return relay.nn.matmul(xs[0], xs[1], units=units, out_dtype=a.get("out_dtype", ""),
                           transpose_a=a["transpose_a"], transpose_b=a["transpose_b"])


def _b_batch_matmul(a, xs, ts, out):
    return relay.nn.batch_matmul(xs[0], xs[1], out_dtype=a.get("out_dtype", ""),
                                 transpose_a=a["transpose_a"], transpose_b=a["transpose_b"])


def _b_plain(name):
    op = relay.op.get(name)
    return lambda a, xs, ts, out: relay.Call(op, list(xs))


def _b_add(a, xs, ts, out):
    # hhb-tvm's SimplifyExpr rewrites add(e, e) into multiply(e, 2) and, when e
    # contains a conv2d, leaves a free variable behind (relay.build fails).
    # e + e == e * 2 exactly in floating point, so emit the product directly.
    if xs[0].same_as(xs[1]):
        return relay.multiply(xs[0], relay.const(np.array(2, dtype=ts[0].dtype)))
    return relay.add(xs[0], xs[1])


def _b_pool(name):
    def build(a, xs, ts, out):
        kw = dict(pool_size=a["pool_size"], strides=a["strides"], dilation=a["dilation"],
                  padding=a["padding"], layout=a.get("layout", "NCHW"), ceil_mode=a["ceil_mode"])
        if name == "nn.avg_pool2d":
            return relay.nn.avg_pool2d(xs[0], count_include_pad=a["count_include_pad"], **kw)
        return relay.nn.max_pool2d(xs[0], **kw)
    return build


def _b_pad(a, xs, ts, out):
    pv = relay.const(np.array(a["pad_value"], dtype=ts[0].dtype))
    return relay.nn.pad(xs[0], [list(p) for p in a["pad_width"]], pv, a.get("pad_mode", "constant"))


_BUILDERS: dict[str, Callable] = {
    "nn.conv2d": _b_conv2d,
    "nn.dense": _b_dense,
    "nn.matmul": _b_matmul,
    "nn.batch_matmul": _b_batch_matmul,
    **{name: _b_plain(name) for name in _BINARY + _UNARY},
    "add": _b_add,
    "clip": lambda a, xs, ts, out: relay.clip(xs[0], a["a_min"], a["a_max"]),
    "nn.leaky_relu": lambda a, xs, ts, out: relay.nn.leaky_relu(xs[0], a["alpha"]),
    "nn.max_pool2d": _b_pool("nn.max_pool2d"),
    "nn.avg_pool2d": _b_pool("nn.avg_pool2d"),
    "nn.global_avg_pool2d": lambda a, xs, ts, out: relay.nn.global_avg_pool2d(xs[0], a.get("layout", "NCHW")),
    "nn.global_max_pool2d": lambda a, xs, ts, out: relay.nn.global_max_pool2d(xs[0], a.get("layout", "NCHW")),
    "transpose": lambda a, xs, ts, out: relay.transpose(xs[0], list(a["axes"])),
    "reshape": lambda a, xs, ts, out: relay.reshape(xs[0], list(a["newshape"])),
    "concatenate": lambda a, xs, ts, out: relay.concatenate(list(xs), a["axis"]),
    "split": lambda a, xs, ts, out: relay.split(xs[0], list(a["indices"]), a["axis"]).astuple(),
    "strided_slice": lambda a, xs, ts, out: relay.strided_slice(
        xs[0], list(a["begin"]), list(a["end"]), list(a["strides"])),
    "nn.pad": _b_pad,
    "nn.bias_add": lambda a, xs, ts, out: relay.nn.bias_add(xs[0], xs[1], a["axis"]),
    "nn.batch_norm": lambda a, xs, ts, out: relay.nn.batch_norm(
        *xs, axis=a["axis"], epsilon=a["epsilon"], center=a["center"], scale=a["scale"]).astuple(),
    "nn.softmax": lambda a, xs, ts, out: relay.nn.softmax(xs[0], a["axis"]),
    "nn.layer_norm": lambda a, xs, ts, out: relay.nn.layer_norm(
        xs[0], xs[1], xs[2], axis=a["axis"], epsilon=a["epsilon"], center=a["center"], scale=a["scale"]),
    "mean": lambda a, xs, ts, out: relay.mean(xs[0], axis=list(a["axis"]), keepdims=a["keepdims"]),
}


def _c_array(value) -> np.ndarray:
    """``value`` as a C-contiguous array of the same shape (0-d stays 0-d,
    unlike ``np.ascontiguousarray``, which makes it 1-d)."""
    return np.asarray(value, order="C")


def _relay_const(value: np.ndarray) -> relay.Constant:
    return relay.Constant(tvm.nd.array(_c_array(value)))


class IllTypedGraph(ValueError):
    """A TensorGraph whose stored types disagree with what its nodes compute:
    building Relay from it would hand TVM an ill-typed function."""


def check_types(graph: TensorGraph, signature: Sequence[tuple[str, TensorType]] | None = None) -> None:
    """Raise :class:`IllTypedGraph` unless every node the output needs is
    well typed: a modelled node's stored type is what ``ops.infer_type``
    gives for its inputs' types, a constant's value has its node's shape and
    dtype, an opaque node's inputs have the types its call had in the input
    program (Relay gave it its output type there) and a ``var`` has its
    signature's type. TVM-free: run before any Relay is built."""
    sig = dict(signature) if signature is not None else None
    for i in graph.reachable():
        n = graph[i]
        in_types = [graph[j].type for j in n.inputs]
        where = f"node {i} ({n.op if n.op != 'opaque' else n.attrs.get('name', 'opaque')})"
        if n.op == "opaque":
            payload = graph.opaque.get(n.attrs["key"])
            if not isinstance(payload, OpaqueCall):
                raise IllTypedGraph(f"{where}: no Relay call for opaque key {n.attrs['key']}")
            if tuple(in_types) != tuple(payload.in_types):
                raise IllTypedGraph(f"{where}: inputs {in_types}, but the call was typed for "
                                    f"{list(payload.in_types)}")
            if n.type != payload.out_type:
                raise IllTypedGraph(f"{where}: type {n.type}, but the call gives {payload.out_type}")
            continue
        try:
            inferred = ops.infer_type(n.op, n.attrs, in_types)
        except ValueError as e:
            raise IllTypedGraph(f"{where}: {e}") from None
        if inferred != n.type:
            raise IllTypedGraph(f"{where}: stored type {n.type}, but its inputs {in_types} give {inferred}")
        if n.op == "constant":
            value = graph.constants.get(n.attrs["name"])
            if value is None:
                raise IllTypedGraph(f"{where}: constant {n.attrs['name']!r} has no value")
            if tuple(value.shape) != n.type.shape or str(value.dtype) != n.type.dtype:
                raise IllTypedGraph(f"{where}: value {value.dtype}{list(value.shape)} for type {n.type}")
        elif n.op == "var" and sig is not None and n.attrs["name"] in sig and sig[n.attrs["name"]] != n.type:
            raise IllTypedGraph(f"{where}: type {n.type}, but the signature says {sig[n.attrs['name']]}")


def to_relay(graph: TensorGraph, signature: Sequence[tuple[str, TensorType]] | None = None,
             attrs=None) -> relay.Function:
    """The Relay function computing ``graph``'s output, one expression per node.

    Parameters are the graph's ``var`` nodes in order, or ``signature``
    (name, type) pairs when given (to keep the original function's signature
    even when the graph no longer uses some parameter). ``attrs`` are the
    function attributes to keep.

    Types are checked first (:func:`check_types`): an ill-typed graph raises
    :class:`IllTypedGraph` before any Relay is built.
    """
    check_types(graph, signature)
    params: dict[str, relay.Var] = {}
    if signature is not None:
        for name, t in signature:
            params[name] = relay.var(name, relay_type(t))
    else:
        for i in graph.inputs:
            n = graph[i]
            params[n.attrs["name"]] = relay.var(n.attrs["name"], relay_type(n.type))
    exprs: dict[int, relay.Expr] = {}
    for i in graph.reachable():
        n = graph[i]
        xs = [exprs[j] for j in n.inputs]
        if n.op == "var":
            name = n.attrs["name"]
            if name not in params:
                raise ValueError(f"graph input {name!r} is not in the signature")
            e = params[name]
        elif n.op == "constant":
            e = _relay_const(graph.constants[n.attrs["name"]])
            if tuple(e.data.shape) != n.type.shape:  # e.g. a 0-d array made 1-d
                raise IllTypedGraph(f"node {i}: constant of type {n.type} built as shape {list(e.data.shape)}")
        elif n.op == "tuple":
            e = relay.Tuple(xs)
        elif n.op == "tuple_get_item":
            e = relay.TupleGetItem(xs[0], n.attrs["index"])
        elif n.op == "opaque":
            e = graph.opaque[n.attrs["key"]].call(xs)
        else:
            try:
                builder = _BUILDERS[n.op]
            except KeyError:
                raise ValueError(f"no Relay builder for op {n.op!r}") from None
            full = {**(ops.get(n.op).defaults or {}), **n.attrs}
            e = builder(full, xs, [graph[j].type for j in n.inputs], n.type)
        exprs[i] = e
    return relay.Function(list(params.values()), exprs[graph.output], attrs=attrs)


def graph_to_module(graph: TensorGraph, **kwargs) -> tvm.IRModule:
    """``to_relay(graph)`` as the ``main`` of a type-checked IRModule."""
    return relay.transform.InferType()(tvm.IRModule.from_expr(to_relay(graph, **kwargs)))


# -- evaluating opaque nodes -------------------------------------------------------

_OPAQUE_CACHE: dict[int, list] = {}


def opaque_evaluator(target: str | None = None) -> Callable[[OpaqueCall, list], Any]:
    """An ``opaque_eval`` for :meth:`TensorGraph.evaluate`: runs the payload's
    call with TVM on numpy inputs. Compiled calls are cached by structure."""
    from .target import build, host_target, _executor

    tgt = target or host_target()

    def evaluate(payload: OpaqueCall, inputs: list):
        func = payload.function()
        h = (tvm.ir.structural_hash(func), tgt)
        entries = _OPAQUE_CACHE.setdefault(h, [])
        for f, m in entries:
            if tvm.ir.structural_equal(f, func):
                break
        else:
            m = _executor(build(func, target=tgt))
            entries.append((func, m))
        for k, v in enumerate(inputs):
            m.set_input(f"p{k}", _c_array(v))
        m.run()
        outs = [m.get_output(k).numpy() for k in range(m.get_num_outputs())]
        return tuple(outs) if isinstance(payload.out_type, TupleType) else outs[0]

    return evaluate
