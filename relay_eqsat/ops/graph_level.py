"""Graph-level ops: the leaves ``var`` and ``constant``, ``opaque``, ``tuple`` and ``tuple_get_item``.

None of them runs as a kernel of its own: they move no bytes and cost nothing,
except an opaque node, which the cost model charges its inputs' and output's traffic.
"""
from __future__ import annotations

from ..types import TensorType, TupleType, Type
from .checks import tensor
from .opdef import OpDef, ShapeError, is_int, no_bytes, register


def _leaf_infer(kind):
    def infer(a, ins) -> Type:
        t = a["type"]
        if not isinstance(t, kind):
            raise ShapeError(f"{a.op}: attribute 'type' must be a {kind}, got {t!r}")
        return t
    return infer


def _leaf_eval(attrs, ins):
    raise ValueError("leaves are evaluated by TensorGraph.evaluate")


register(OpDef("var", 0, "leaf", _leaf_infer(TensorType), _leaf_eval, bytes=no_bytes, required=("name", "type")))
# a constant: its name (the value in ``TensorGraph.constants``) and type; a scalar (0-d) one also its
# ``value`` (`TensorGraph.const`), so that rules can match a scalar operand ``(constant :value 3.0)``
register(OpDef("constant", 0, "leaf", _leaf_infer(TensorType), _leaf_eval, bytes=no_bytes,
               required=("name", "type"), optional=("value",)))
register(OpDef("opaque", None, "opaque", _leaf_infer((TensorType, TupleType)), _leaf_eval,
               required=("key", "type", "name"), fusion="opaque"))


def _tuple_infer(a, ins):
    return TupleType(tuple(tensor(t, "tuple field") for t in ins))


register(OpDef("tuple", None, "tuple", _tuple_infer, lambda a, ins: tuple(ins), bytes=no_bytes))


def _tgi_infer(a, ins):
    (t,) = ins
    if not isinstance(t, TupleType):
        raise ShapeError(f"tuple_get_item needs a tuple, got {t}")
    i = a.integer("index")
    if not 0 <= i < len(t.fields):
        raise ShapeError(f"tuple_get_item index {i} out of range for {len(t.fields)} fields")
    return t.fields[i]


def _tgi_normalize(op, raw, ins):
    if ins and isinstance(ins[0], TupleType) and is_int(raw.get("index")) and raw["index"] < 0:
        raw["index"] += len(ins[0].fields)
    return raw


register(OpDef("tuple_get_item", 1, "injective", _tgi_infer, lambda a, ins: ins[0][a["index"]], bytes=no_bytes,
               required=("index",), normalize=_tgi_normalize, fusion="free"))
