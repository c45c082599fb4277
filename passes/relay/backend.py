"""TensorGraph -> Relay: the backend (:func:`to_relay`, :func:`graph_to_module`).

It rebuilds one Relay expression per node, so shared values stay shared, with each op's Relay
conversion from the operator table (``OpDef.conversion("relay")``) and the opaque nodes' own
calls, and leaves weight-only subgraphs as constant expressions for ``relay.build``'s
FoldConstant. :func:`check_types` refuses an ill-typed graph before TVM sees it (this TVM can
crash on one); :func:`opaque_evaluator` runs opaque nodes for the numpy reference.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, Callable

import numpy as np
import tvm
from tvm import relay

from relay_eqsat import ops
from relay_eqsat.cost.inlining import fusion_cuts
from relay_eqsat.graph import TensorGraph, TensorType, TupleType

from .conversions import FRONTEND
from .frontend import OpaqueCall, relay_type
from .pad_in_producer import producer_pads
from .scale_guard import guards
from relay_eqsat.passes.runtime.build import build, executor
from relay_eqsat.passes.runtime.target import host_target


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
    pads = producer_pads(graph, live, constant, cuts)  # depthwise padding written by the 1x1 producer
    padding = {p.producer: p.pad for p in pads.values()} | {d: (0, 0, 0, 0) for d in pads}
    masked = {p.last: p for p in pads.values()}
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
            if d is None or d.conversion(FRONTEND) is None:
                raise ValueError(f"no Relay builder for op {n.op!r}")
            full = {**(d.defaults or {}), **n.attrs}
            if i in padding:
                full["padding"] = padding[i]
            e = d.conversion(FRONTEND).to_ir(full, xs, [graph[j].type for j in n.inputs], n.type)
        if i in masked:  # the rows and columns the producer added, zero again after the element-wise ops
            e = relay.multiply(e, _relay_const(masked[i].mask(n.type.shape, n.type.dtype)))
        exprs[i] = e
    return relay.Function(list(params.values()), exprs[graph.output], attrs=attrs)


def graph_to_module(graph: TensorGraph, **kwargs) -> tvm.IRModule:
    """``to_relay(graph)`` as the ``main`` of a type-checked IRModule."""
    return relay.transform.InferType()(tvm.IRModule.from_expr(to_relay(graph, **kwargs)))


#: opaque calls built and run once per program: hash -> [(call, compiled function)]
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
