"""Operator instances: one op with its attributes and types, the unit a cost is known for.

An ``OpInstance`` is what gets measured, cached and predicted. Its cache key is
text: the op name, the canonical attributes as compact sorted JSON, the input
shapes as JSON and the input dtype(s). The output type is stored beside the
key (it follows from the rest) so that training never needs shape inference.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from .. import ops
from ..extract.egraph_io import egraph_problem
from ..graph import Attrs, TensorGraph, TensorType, TupleType, Type

# Ops that never run as kernels (``OpDef.fusion`` "free"): they cost nothing and are never measured.
GRAPH_LEVEL_OPS = frozenset(name for name, d in ops.OPS.items() if d.fusion == "free")
#: the op name of a fused group's instance: an anchor and the element-wise epilogue fused into its
#: kernel; what is measured for it is the seconds the epilogue adds (`relay_eqsat.cost.groups`)
GROUP_OP = "fused_group"
#: the op name of a weight-stream probe: a chain of one-row dense layers with weights of their own;
#: what is measured for it is the seconds a layer adds in the chain over one timed alone
#: (`relay_eqsat.cost.streams`)
STREAM_OP = "weight_stream"


def _encode_value(v: Any) -> Any:
    if isinstance(v, TensorType):
        return {"__tensor__": [list(v.shape), v.dtype]}
    if isinstance(v, TupleType):
        return {"__tuple__": [_encode_value(f) for f in v.fields]}
    if isinstance(v, Attrs):
        return {"__attrs__": {k: _encode_value(x) for k, x in v.items_tuple()}}
    if isinstance(v, tuple):
        return [_encode_value(x) for x in v]
    return v


def _decode_value(v: Any) -> Any:
    if isinstance(v, dict):
        if "__tensor__" in v:
            shape, dtype = v["__tensor__"]
            return TensorType(tuple(shape), dtype)
        if "__tuple__" in v:
            return TupleType(tuple(_decode_value(f) for f in v["__tuple__"]))
        if "__attrs__" in v:
            return Attrs({k: _decode_value(x) for k, x in v["__attrs__"].items()})
        raise ValueError(f"cannot decode attribute value {v!r}")
    if isinstance(v, list):
        return tuple(_decode_value(x) for x in v)
    return v


def attrs_to_str(attrs: Attrs) -> str:
    """Canonical text of an op's attributes (compact JSON, sorted keys)."""
    return json.dumps({k: _encode_value(v) for k, v in attrs.items_tuple()},
                      sort_keys=True, separators=(",", ":"))


def attrs_from_str(text: str) -> Attrs:
    return Attrs({k: _decode_value(v) for k, v in json.loads(text).items()})


def type_to_str(t: Type) -> str:
    return json.dumps(_encode_value(t), separators=(",", ":"))


def type_from_str(text: str) -> Type:
    return _decode_value(json.loads(text))


@dataclass(frozen=True)
class OpInstance:
    """One operator application: op name, canonical attrs, input types, output type."""

    op: str
    attrs: Attrs
    input_types: tuple[TensorType, ...]
    out_type: Type

    def __post_init__(self):
        if not isinstance(self.attrs, Attrs):
            object.__setattr__(self, "attrs", Attrs(self.attrs or {}))
        object.__setattr__(self, "input_types", tuple(self.input_types))
        for t in self.input_types:
            if not isinstance(t, TensorType):
                raise TypeError(f"{self.op}: measured ops take tensor inputs, got {t}")

    @classmethod
    def make(cls, op: str, attrs=None, input_types: Sequence[TensorType] = (),
             out_type: Type | None = None) -> "OpInstance":
        """An instance; the output type is inferred with ``ops`` when not given."""
        attrs = attrs if isinstance(attrs, Attrs) else Attrs(attrs or {})
        if out_type is None and op == GROUP_OP:
            out_type = group_out_type(attrs, input_types)
        elif out_type is None and op == STREAM_OP:
            out_type = ops.infer_type("nn.dense", Attrs(), list(input_types))
        elif out_type is None:
            out_type = ops.infer_type(op, attrs, list(input_types))
        return cls(op, attrs, tuple(input_types), out_type)

    # -- the cache key --------------------------------------------------------
    @property
    def attrs_str(self) -> str:
        return attrs_to_str(self.attrs)

    @property
    def shapes_str(self) -> str:
        return json.dumps([list(t.shape) for t in self.input_types], separators=(",", ":"))

    @property
    def dtype_str(self) -> str:
        """The input dtype, or the comma-joined input dtypes when they differ."""
        dts = [t.dtype for t in self.input_types]
        if not dts:
            return ""
        return dts[0] if all(d == dts[0] for d in dts) else ",".join(dts)

    @property
    def out_str(self) -> str:
        return type_to_str(self.out_type)

    def key(self) -> tuple[str, str, str, str]:
        """(op, attrs, shapes, dtype): the target-independent part of a cache key."""
        return (self.op, self.attrs_str, self.shapes_str, self.dtype_str)

    @classmethod
    def from_key(cls, op: str, attrs: str, shapes: str, dtype: str, out: str) -> "OpInstance":
        shape_list = json.loads(shapes)
        dts = dtype.split(",") if "," in dtype else [dtype] * len(shape_list)
        types = tuple(TensorType(tuple(s), d) for s, d in zip(shape_list, dts))
        return cls(op, attrs_from_str(attrs), types, type_from_str(out))

    def __str__(self) -> str:
        ins = ", ".join(map(repr, self.input_types))
        a = "" if not len(self.attrs) else " " + repr(self.attrs)
        return f"{self.op}({ins}){a} -> {self.out_type!r}"


def instances_from_graph(graph: TensorGraph, include_constant: bool = False) -> list[OpInstance]:
    """The distinct kernel instances a graph runs (reachable nodes, first-seen order).

    Leaves, tuples, ``tuple_get_item`` and opaque nodes are skipped, and so are
    constant-only nodes unless ``include_constant`` (TVM folds them at build time).
    """
    const = graph.is_constant()
    seen: dict[tuple, OpInstance] = {}
    for i in graph.reachable():
        n = graph.nodes[i]
        if n.op in GRAPH_LEVEL_OPS or n.op == "opaque":
            continue
        if const[i] and not include_constant:
            continue
        types = tuple(graph.nodes[j].type for j in n.inputs)
        if not all(isinstance(t, TensorType) for t in types):
            continue
        inst = OpInstance(n.op, n.attrs, types, n.type)
        seen.setdefault(inst.key(), inst)
    return list(seen.values())


def instances_from_egraph(egraph, root: int, include_constant: bool = False) -> list[OpInstance]:
    """The distinct kernel instances of every e-node of an e-graph (what an
    extractor may choose from), with the same exclusions as ``instances_from_graph``."""
    seen: dict[tuple, OpInstance] = {}

    def visit(op, attrs, input_types, out_type, const):
        if op not in GRAPH_LEVEL_OPS and op != "opaque" and (include_constant or not const) \
                and all(isinstance(t, TensorType) for t in input_types):
            inst = OpInstance(op, attrs, tuple(input_types), out_type)
            seen.setdefault(inst.key(), inst)
        return 0.0

    egraph_problem(egraph, visit, [root])
    return list(seen.values())


def unique(instances: Iterable[OpInstance]) -> list[OpInstance]:
    """Instances with duplicate keys removed, order kept."""
    out: dict[tuple, OpInstance] = {}
    for inst in instances:
        out.setdefault(inst.key(), inst)
    return list(out.values())


def group_out_type(attrs: Attrs, input_types: Sequence[TensorType]) -> Type:
    """The output type of a fused group (``GROUP_OP``) with these attributes and external input
    types: its nodes' types inferred in order, the last one's."""
    types = list(input_types)
    for spec in attrs["nodes"]:
        types.append(ops.infer_type(spec["op"], spec["attrs"], [types[r] for r in spec["inputs"]]))
    return types[-1]
