"""Relay <-> TensorGraph: the frontend (:func:`from_relay`) and backend (:func:`to_relay`).

The frontend takes the ``main`` function of a type-checked Relay module, a pure
dataflow graph with static shapes, and turns every call of an operator of the
:mod:`relay_eqsat.ops` table with Relay conversions (registered by
:mod:`relay_eqsat.passes.relay_ops`) into a node with canonical attributes. Anything
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
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import tvm
from tvm import relay

from relay_eqsat import ops
from relay_eqsat.cost.inlining import fusion_cuts
from relay_eqsat.graph import Attrs, TensorGraph, TensorType, TupleType, Type

from .relay_ops import NotModelled  # importing it registers every op's Relay conversions
from .scale_guard import guards
from .runtime import build, executor
from .target import host_target

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


#: ops with Relay conversions (``passes/relay_ops.py``); the frontend keeps any other call opaque
MODELLED_OPS = frozenset(name for name, d in ops.OPS.items() if d.relay is not None)


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
        attrs = ops.normalize_attrs(name, Attrs(op.relay.from_relay(call, ts, out)), ts)
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
             attrs=None, stop_fusion: bool = True) -> relay.Function:
    """The Relay function computing ``graph``'s output, one expression per node.

    Parameters are the graph's ``var`` nodes in order, or ``signature``
    (name, type) pairs when given (to keep the original function's signature
    even when the graph no longer uses some parameter). ``attrs`` are the
    function attributes to keep. An operand at a cut of
    `relay_eqsat.cost.inlining.fusion_cuts` (a kernel whose inlined expression TVM
    would take minutes to compile) is written as ``annotation.stop_fusion(x)``;
    ``stop_fusion`` False writes none (``bench/build_time.py`` measures what they save).

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

    def use(j: int) -> relay.Expr:
        # One Relay constant shared by several calls is no longer inlined by FuseOps: each
        # fused kernel gets the scalar as a buffer argument, and e.g. power(x, 2f) can no
        # longer become x * x (bert-base's 25 layer norms: 0.94 ms per variance kernel
        # against 0.13). The graph holds one node per value; Relay gets a 0-d one per use.
        m = graph[j]
        if m.op == "constant" and not m.type.shape:
            return _relay_const(graph.constants[m.attrs["name"]])
        return exprs[j]

    live = graph.reachable()
    constant = graph.is_constant()
    readers = Counter(j for i in live for j in graph[i].inputs)
    cuts = fusion_cuts(graph, live, constant) if stop_fusion else {}
    stopped: dict[int, relay.Expr] = {}

    def stop(j: int) -> relay.Expr:  # one stop_fusion per tensor, however many readers it cuts
        if j not in stopped:
            stopped[j] = relay.annotation.stop_fusion(exprs[j])
        return stopped[j]

    for i in live:
        n = graph[i]
        cut = cuts.get(i, ())
        xs = [stop(j) if k in cut else use(j) for k, j in enumerate(n.inputs)]
        if guards(graph, i, constant, readers):  # a run-time scale TVM would fold into the weight
            xs[0] = relay.copy(xs[0])
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
            d = ops.OPS.get(n.op)
            if d is None or d.relay is None:
                raise ValueError(f"no Relay builder for op {n.op!r}")
            full = {**(d.defaults or {}), **n.attrs}
            e = d.relay.to_relay(full, xs, [graph[j].type for j in n.inputs], n.type)
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
    tgt = target or host_target()

    def evaluate(payload: OpaqueCall, inputs: list):
        func = payload.function()
        h = (tvm.ir.structural_hash(func), tgt)
        entries = _OPAQUE_CACHE.setdefault(h, [])
        for f, m in entries:
            if tvm.ir.structural_equal(f, func):
                break
        else:
            m = executor(build(func, target=tgt))
            entries.append((func, m))
        for k, v in enumerate(inputs):
            m.set_input(f"p{k}", _c_array(v))
        m.run()
        outs = [m.get_output(k).numpy() for k in range(m.get_num_outputs())]
        return tuple(outs) if isinstance(payload.out_type, TupleType) else outs[0]

    return evaluate
