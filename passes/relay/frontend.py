"""Relay -> TensorGraph: the frontend (:func:`from_relay`; the way back is :mod:`.backend`).

The frontend takes the ``main`` function of a type-checked Relay module, a pure
dataflow graph with static shapes, and turns every call of an operator of the
:mod:`relay_eqsat.ops` table with Relay conversions (registered by
:mod:`relay_eqsat.passes.relay.conversions`) into a node with canonical attributes. Anything
else is kept verbatim as an ``opaque`` node whose payload (:class:`OpaqueCall`)
rebuilds the original call; a call is also made opaque when ``ops.infer_type``
disagrees with Relay's type for it, so a round trip never changes meaning.
Programs the frontend cannot take raise :class:`UnsupportedProgram`.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import tvm
from tvm import relay

from relay_eqsat import ops
from relay_eqsat.graph import Attrs, TensorGraph, TensorType, TupleType, Type

from .conversions import FRONTEND, NotModelled  # importing it registers every op's Relay conversions

log = logging.getLogger(__name__)

FLOAT_DTYPES = ("float16", "float32", "float64")


class UnsupportedProgram(ValueError):
    """The Relay program is outside what the frontend takes (dynamic shapes,
    control flow, closures, references, calls between functions...)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


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


#: ops with Relay conversions (``passes/relay/conversions.py``); the frontend keeps any other call opaque
MODELLED_OPS = frozenset(name for name, d in ops.OPS.items() if d.conversion(FRONTEND) is not None)


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
        if name in ("copy", "annotation.stop_fusion"):  # identities ``to_relay`` writes (`scale_guard`,
            return self.memo[call.args[0]]                 # `relay_eqsat.cost.inlining`)
        reason = "not modelled"
        if name in MODELLED_OPS:
            try:
                return self._modelled(call, ops.OPS[name], out)
            except NotModelled as e:
                reason = str(e)
                log.debug("%s kept opaque: %s", name, reason)
            except Exception as e:  # noqa: BLE001 - ops table or attrs outside the contract
                reason = f"{type(e).__name__}: {e}"
                log.debug("%s kept opaque: %s", name, reason)
        return self._opaque(call, out, reason)

    def _modelled(self, call, op: ops.OpDef, out) -> int:
        """The node of a call of a modelled op: its first ``arity`` arguments are the
        inputs (a variadic op's are the fields of its tuple argument)."""
        name = op.name
        if op.arity is None:
            inputs = self.fields(call.args[0])
        else:
            inputs = []
            for a in call.args[:op.arity]:
                if isinstance(a.checked_type, relay.TupleType):
                    raise NotModelled("tuple argument")
                inputs.append(self.value(a))
        ts = [self.g[i].type for i in inputs]
        for t in ts + (list(out.fields) if isinstance(out, TupleType) else [out]):
            if t.dtype not in FLOAT_DTYPES:
                raise NotModelled(f"dtype {t.dtype}")
        attrs = ops.normalize_attrs(name, Attrs(op.conversion(FRONTEND).from_ir(call, ts, out)), ts)
        inferred = ops.infer_type(name, attrs, ts)
        if inferred != out:
            log.warning("%s%r: ops.infer_type gives %s but Relay says %s; kept opaque",
                        name, attrs, inferred, out)
            raise NotModelled(f"type mismatch: inferred {inferred}, Relay {out}")
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
