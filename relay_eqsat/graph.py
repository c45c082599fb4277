"""TensorGraph: the TVM-free tensor program IR, the only currency between stages.

A TensorGraph is a DAG of nodes kept in topological order (a node's inputs are
always earlier nodes). Every node has exactly one output value whose type is a
`TensorType` or a `TupleType` (``split``, ``nn.batch_norm`` and ``tuple``
produce tuples; ``tuple_get_item`` projects a field). The graph has a single
output node; a function returning several values returns a ``tuple`` node.

Leaves are ``var`` (a function parameter, attrs ``name``) and ``constant``
(attrs ``name``; the array lives in ``graph.constants[name]``). An operator the
optimizer does not model is an ``opaque`` node: attrs ``key`` (index into
``graph.opaque``, which holds the frontend's payload, e.g. the Relay op and
attrs), ``type`` (its output type) and ``name`` (for display).

Node types and attributes (``TensorType``, ``TupleType``, ``Attrs``) are
defined in :mod:`relay_eqsat.types` and re-exported here.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from . import ops
from .types import Attrs, TensorType, TupleType, Type, freeze

__all__ = ["Attrs", "Node", "TensorGraph", "TensorType", "TupleType", "Type", "freeze"]



@dataclass(frozen=True)
class Node:
    """One operation: op name, input node ids, attributes, output type."""

    op: str
    inputs: tuple[int, ...]
    attrs: Attrs
    type: Type


class TensorGraph:
    """A DAG of tensor operations with static types, in topological order."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.output: int | None = None
        self.constants: dict[str, np.ndarray] = {}
        self.opaque: dict[int, Any] = {}
        self._hashcons: dict[tuple, int] = {}

    # -- construction -------------------------------------------------------
    def add(self, op: str, inputs=(), attrs: Mapping | None = None, type: Type | None = None,
            dedup: bool = True) -> int:
        """Append a node (its type inferred when not given) and return its id.

        Structurally equal nodes are shared (hash-consed) when ``dedup``.
        """
        inputs = tuple(int(i) for i in inputs)
        for i in inputs:
            if not 0 <= i < len(self.nodes):
                raise ValueError(f"{op}: input {i} is not an earlier node of the graph")
        attrs = attrs if isinstance(attrs, Attrs) else Attrs(attrs or {})
        key = (op, inputs, attrs)
        if dedup and op not in ("var",) and key in self._hashcons:
            return self._hashcons[key]
        inferred = ops.infer_type(op, attrs, [self.nodes[i].type for i in inputs])
        if type is not None and type != inferred:
            raise ValueError(f"{op}: given type {type} differs from inferred {inferred}")
        self.nodes.append(Node(op, inputs, attrs, inferred))
        nid = len(self.nodes) - 1
        if dedup:
            self._hashcons[key] = nid
        return nid

    def var(self, name: str, shape, dtype: str = "float32") -> int:
        """A function parameter."""
        for n in self.nodes:
            if n.op == "var" and n.attrs["name"] == name:
                raise ValueError(f"duplicate input name {name!r}")
        return self.add("var", (), {"name": name, "type": TensorType(tuple(shape), dtype)})

    def const(self, value, name: str | None = None) -> int:
        """A constant tensor (weights); stored in ``self.constants``. A scalar (0-d) one's node
        also carries its ``value`` (a finite number: NaN is unequal to itself), which rules match
        (``(power ?x (constant :value 3.0))``)."""
        value = np.asarray(value)
        if name is None:
            name = f"c{len(self.constants)}"
            while name in self.constants:
                name += "_"
        if name in self.constants and self.constants[name] is not value:
            raise ValueError(f"duplicate constant name {name!r}")
        self.constants[name] = value
        attrs = {"name": name, "type": TensorType(value.shape, str(value.dtype))}
        if value.ndim == 0 and value.dtype.kind in "biuf" and np.isfinite(value):
            attrs["value"] = value.item()
        return self.add("constant", (), attrs)

    def add_opaque(self, payload: Any, inputs, type: Type, name: str = "opaque") -> int:
        """An operator kept verbatim: ``payload`` is the frontend's description of it."""
        key = len(self.opaque)
        self.opaque[key] = payload
        return self.add("opaque", inputs, {"key": key, "type": type, "name": name}, dedup=False)

    def set_output(self, nid: int) -> None:
        self.output = int(nid)

    # -- queries ------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.nodes)

    def __getitem__(self, nid: int) -> Node:
        return self.nodes[nid]

    @property
    def inputs(self) -> list[int]:
        """Ids of ``var`` nodes, in order of appearance."""
        return [i for i, n in enumerate(self.nodes) if n.op == "var"]

    def input_types(self) -> dict[str, TensorType]:
        return {self.nodes[i].attrs["name"]: self.nodes[i].type for i in self.inputs}

    def reachable(self) -> list[int]:
        """Ids of nodes the output depends on, in topological order."""
        if self.output is None:
            raise ValueError("graph has no output")
        seen = set()
        stack = [self.output]
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            stack.extend(self.nodes[n].inputs)
        return sorted(seen)

    def users(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {i: [] for i in range(len(self.nodes))}
        for i, n in enumerate(self.nodes):
            for j in n.inputs:
                out[j].append(i)
        return out

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for i in self.reachable():
            op = self.nodes[i].op
            counts[op] = counts.get(op, 0) + 1
        return counts

    def is_constant(self) -> list[bool]:
        """Per node: whether it depends on constants only (no var, no opaque)."""
        flags: list[bool] = []
        for n in self.nodes:
            if n.op == "constant":
                flags.append(True)
            elif n.op in ("var", "opaque"):
                flags.append(False)
            else:
                flags.append(all(flags[i] for i in n.inputs) and bool(n.inputs))
        return flags

    def validate(self) -> None:
        """Check topological order and re-infer every type; raise ValueError if broken."""
        if self.output is None or not 0 <= self.output < len(self.nodes):
            raise ValueError("graph output is not set to a node")
        for i, n in enumerate(self.nodes):
            for j in n.inputs:
                if not 0 <= j < i:
                    raise ValueError(f"node {i} ({n.op}) uses node {j}, not an earlier node")
            t = ops.infer_type(n.op, n.attrs, [self.nodes[j].type for j in n.inputs])
            if t != n.type:
                raise ValueError(f"node {i} ({n.op}) has type {n.type}, inferred {t}")
            if n.op == "constant" and n.attrs["name"] not in self.constants:
                raise ValueError(f"node {i}: constant {n.attrs['name']!r} has no value")

    # -- evaluation ---------------------------------------------------------
    def evaluate(self, inputs: Mapping[str, np.ndarray],
                 opaque_eval: Callable[[Any, list], Any] | None = None):
        """Run the graph with the numpy reference semantics of ``ops``.

        ``inputs`` maps var names to arrays. Opaque nodes need ``opaque_eval
        (payload, input_values) -> value``. Returns the output value (an array,
        or a tuple of arrays for a tuple output).
        """
        values: dict[int, Any] = {}
        for i in self.reachable():
            n = self.nodes[i]
            if n.op == "var":
                name = n.attrs["name"]
                if name not in inputs:
                    raise ValueError(f"missing input {name!r}")
                values[i] = np.asarray(inputs[name], dtype=n.type.dtype)
            elif n.op == "constant":
                values[i] = self.constants[n.attrs["name"]]
            elif n.op == "opaque":
                if opaque_eval is None:
                    raise ValueError(f"opaque node {n.attrs['name']} needs an opaque_eval callback")
                values[i] = opaque_eval(self.opaque[n.attrs["key"]], [values[j] for j in n.inputs])
            else:
                values[i] = ops.evaluate(n.op, n.attrs, [values[j] for j in n.inputs])
        return values[self.output]

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Random input arrays for every var (standard normal, or small ints)."""
        rng = np.random.default_rng(seed)
        out = {}
        for name, t in self.input_types().items():
            if np.issubdtype(np.dtype(t.dtype), np.integer):
                out[name] = rng.integers(0, 4, size=t.shape).astype(t.dtype)
            else:
                out[name] = rng.standard_normal(t.shape).astype(t.dtype)
        return out

    # -- transformation -----------------------------------------------------
    def compact(self, rename: Mapping[str, str] | None = None) -> "TensorGraph":
        """A copy holding only the nodes the output needs, renumbered; a node whose op is a key of
        ``rename`` computes the op it maps to instead (same operands, attributes and type: an op
        and its approximation, say)."""
        g = TensorGraph()
        remap: dict[int, int] = {}
        rename = rename or {}
        for i in self.reachable():
            n = self.nodes[i]
            n = Node(rename[n.op], n.inputs, n.attrs, n.type) if n.op in rename else n
            attrs = n.attrs
            if n.op == "constant":
                g.constants[attrs["name"]] = self.constants[attrs["name"]]
            if n.op == "opaque":
                g.opaque[attrs["key"]] = self.opaque[attrs["key"]]
            g.nodes.append(Node(n.op, tuple(remap[j] for j in n.inputs), attrs, n.type))
            remap[i] = len(g.nodes) - 1
            g._hashcons.setdefault((n.op, g.nodes[-1].inputs, attrs), remap[i])
        g.output = remap[self.output]
        return g

    def __repr__(self) -> str:
        lines = []
        for i, n in enumerate(self.nodes):
            a = "" if not n.attrs else " " + repr(n.attrs)
            lines.append(f"%{i} = {n.op}({', '.join(f'%{j}' for j in n.inputs)}){a} : {n.type}")
        lines.append(f"return %{self.output}")
        return "\n".join(lines)
