"""The operator definition (``OpDef``), the registry of every op, and attribute access.

``OPS`` maps an op name to its ``OpDef``; the family modules declare them with
``register``, and ``relay_eqsat.passes`` fills the TVM-specific slots with
``register_conversion`` (per frontend) and ``register_torch``. The functions below (``infer_type``,
``evaluate``, ``flops``, ``bytes_moved``, ``pattern``, ``normalize_attrs``) read
a node's attributes through ``OpAttrs``, which fills the op's defaults and
checks each attribute's kind.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ..types import Attrs, TensorType, Type

PATTERNS = ("elemwise", "broadcast", "injective", "reduce", "out_fusable", "opaque", "leaf", "tuple")
"""TVM's fusion classes (``TOpPattern``), plus ``leaf`` and ``tuple`` for graph-level ops."""

FUSION_CLASSES = ("free", "opaque", "fused", "injective", "anchor")
"""How the cost model treats a node (``cost/base.py``)."""


class ShapeError(ValueError):
    """Raised when an operator's inputs have shapes or attributes it cannot take."""


def no_flops(attrs, input_types, out_type) -> int:
    return 0


def inputs_and_output(attrs, input_types, out_type) -> int:
    """Bytes read from every input plus bytes written to the output (the default ``bytes``)."""
    return sum(t.nbytes for t in input_types) + out_type.nbytes


def no_bytes(attrs, input_types, out_type) -> int:
    return 0


def _fusion_of(pattern: str) -> str:
    if pattern in ("leaf", "tuple"):
        return "free"
    if pattern in ("elemwise", "broadcast"):
        return "fused"
    if pattern == "injective":
        return "injective"
    return "anchor"


@dataclass(frozen=True)
class Conversion:
    """An op's conversions for one TVM frontend (an IR: ``"relay"``, later ``"relax"``), registered
    from that frontend's subpackage of ``relay_eqsat.passes``: ``from_ir`` gives the attributes of
    a call of the IR, ``to_ir`` builds the IR's expression of a node."""

    from_ir: Callable
    to_ir: Callable


@dataclass(frozen=True)
class OpDef:
    """Everything about one operator.

    name, arity     Relay's op name; the number of inputs (None: variadic, at least one)
    pattern         TVM's fusion class (``PATTERNS``)
    infer           (OpAttrs, input types) -> output type; raises ShapeError
    evaluate        (OpAttrs, input arrays) -> output: numpy reference semantics
    flops, bytes    (OpAttrs, input types, output type) -> FLOPs / bytes moved of one run
    defaults        attribute defaults; ``required``: canonical attributes without one;
                    ``optional``: canonical attributes without a default, kept when given
    normalize       (op, Relay-style attrs, input types) -> canonical attrs, before defaults
    fusion          cost-model class (``FUSION_CLASSES``); "" derives it from ``pattern``
    conv            an anchor weighted by ``FusionRule.conv`` instead of ``FusionRule.anchor``
    streamed_weights  input positions whose bytes the cost model charges as weights
                    streamed from memory once per inference (``FusionRule.weights``)
    weight_slots    input positions that are weights in a model (bound as constants when measuring)
    vocab           fixed index in the learned cost model's op vocabulary (None: "op=<other>")
    inline_reads    how many times TVM's lowering of the op for llvm reads each operand's expression
                    (``fast_tanh`` 19: a polynomial in x and x*x); the expression a fused
                    producer inlines into it is copied that many times (`relay_eqsat.cost.inlining`)
    kernels         for an op TVM runs as several kernels (the backend writes it as several
                    Relay calls): (OpAttrs, input types, output type) -> [(count, op, attrs,
                    input types, output type)], the kernels whose times the cost model sums
                    when it has no time for the op itself; None: one kernel of its own
    conversions     (frontend name, Conversion) pairs registered by each TVM frontend of
                    ``relay_eqsat.passes`` (``register_conversion``; read with ``conversion``)
    torch           the torch-cuda measuring backend's op, registered from ``relay_eqsat.passes``
                    (None until registered)
    """

    name: str
    arity: int | None
    pattern: str
    infer: Callable[["OpAttrs", Sequence[Type]], Type]
    evaluate: Callable[["OpAttrs", list], Any]
    flops: Callable[["OpAttrs", Sequence[Type], Type], int] = no_flops
    bytes: Callable[["OpAttrs", Sequence[Type], Type], int] = inputs_and_output
    defaults: dict | None = None
    required: tuple = ()
    optional: tuple = ()
    normalize: Callable[[str, dict, list], dict] | None = None
    fusion: str = ""
    conv: bool = False
    streamed_weights: tuple[int, ...] = ()
    weight_slots: tuple[int, ...] = ()
    vocab: int | None = None
    inline_reads: int = 1
    kernels: Callable | None = None
    conversions: tuple[tuple[str, Conversion], ...] = ()
    torch: Callable | None = None

    def __post_init__(self):
        if self.pattern not in PATTERNS:
            raise ValueError(f"{self.name}: unknown pattern {self.pattern!r}")
        if not self.fusion:
            object.__setattr__(self, "fusion", _fusion_of(self.pattern))
        if self.fusion not in FUSION_CLASSES:
            raise ValueError(f"{self.name}: unknown fusion class {self.fusion!r}")
        object.__setattr__(self, "required", tuple(self.required))
        object.__setattr__(self, "optional", tuple(self.optional))

    def conversion(self, frontend: str) -> Conversion | None:
        """The op's conversions for ``frontend`` (None: that frontend keeps the op opaque)."""
        return next((c for name, c in self.conversions if name == frontend), None)


OPS: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    """Add ``op`` to the table (an op is declared once)."""
    if op.name in OPS:
        raise ValueError(f"operator {op.name!r} is declared twice")
    OPS[op.name] = op
    return op


def get(op: str) -> OpDef:
    try:
        return OPS[op]
    except KeyError:
        raise ShapeError(f"unknown operator {op!r}") from None


def register_conversion(frontend: str, name: str, from_ir: Callable, to_ir: Callable) -> None:
    """Attach ``frontend``'s conversions of op ``name`` (called by that frontend's subpackage of
    ``relay_eqsat.passes``; a second registration for the same frontend replaces the first)."""
    op = get(name)
    others = tuple((f, c) for f, c in op.conversions if f != frontend)
    OPS[name] = replace(op, conversions=others + ((frontend, Conversion(from_ir, to_ir)),))


def register_torch(name: str, fn: Callable) -> None:
    """Attach the torch-cuda measuring backend's callable for op ``name``."""
    OPS[name] = replace(get(name), torch=fn)


def vocabulary() -> tuple[str, ...]:
    """The learned cost model's op vocabulary: op names in ``vocab`` order (indices 0..n-1)."""
    named = sorted((d.vocab, d.name) for d in OPS.values() if d.vocab is not None)
    if [i for i, _ in named] != list(range(len(named))):
        raise ValueError(f"op vocabulary indices are not 0..{len(named) - 1}: {named}")
    return tuple(name for _, name in named)


def is_int(v) -> bool:
    if type(v) is int:
        return True
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


_INT_TYPE = {int}


class OpAttrs(Mapping):
    """A node's attributes with the op's defaults filled in, plus checked accessors.

    A missing attribute without a default, or one of the wrong kind, raises
    ``ShapeError`` naming the op and the attribute.
    """

    def __init__(self, op: OpDef, attrs: Mapping | None):
        self.op = op.name
        if type(attrs) is Attrs:  # its plain dict, without the Mapping protocol's calls
            attrs = attrs._dict
        self._d = {**(op.defaults or {}), **(attrs or {})}

    def __getitem__(self, key: str) -> Any:
        try:
            return self._d[key]
        except KeyError:
            raise ShapeError(f"{self.op}: missing required attribute {key!r}") from None

    def __contains__(self, key) -> bool:
        return key in self._d

    def get(self, key, default=None):
        return self._d.get(key, default)

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def _bad(self, key, want) -> ShapeError:
        return ShapeError(f"{self.op}: attribute {key!r} must be {want}, got {self._d.get(key)!r}")

    def integer(self, key: str, lo: int | None = None) -> int:
        v = self[key]
        if not is_int(v) or (lo is not None and v < lo):
            raise self._bad(key, "an int" + (f" >= {lo}" if lo is not None else ""))
        return int(v)

    def ints(self, key: str, n: int | None = None, lo: int | None = None) -> tuple[int, ...]:
        v = self[key]
        if (type(v) is tuple and (n is None or len(v) == n) and set(map(type, v)) <= _INT_TYPE
                and (lo is None or not v or min(v) >= lo)):
            return v  # the canonical form: a tuple of plain ints
        want = "a tuple of " + (f"{n} " if n is not None else "") + "ints" + (f" >= {lo}" if lo is not None else "")
        if (not isinstance(v, (tuple, list)) or not all(is_int(e) for e in v)
                or (n is not None and len(v) != n) or (lo is not None and any(e < lo for e in v))):
            raise self._bad(key, want)
        return tuple(int(e) for e in v)

    def number(self, key: str) -> float:
        v = self[key]
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise self._bad(key, "a number")
        return float(v)

    def flag(self, key: str) -> bool:
        v = self[key]
        if not isinstance(v, (bool, int, np.bool_, np.integer)) or v not in (0, 1):
            raise self._bad(key, "a bool")
        return bool(v)

    def choice(self, key: str, options: Sequence[str]) -> str:
        v = self[key]
        if v not in options:
            raise self._bad(key, " or ".join(map(repr, options)))
        return v

    def axis(self, key: str, ndim: int) -> int:
        v = self[key]
        if not is_int(v) or not 0 <= v < ndim:
            raise self._bad(key, f"an axis in [0, {ndim}) of a {ndim}-d input")
        return int(v)

    def out_dtype(self, default: str) -> str:
        v = self.get("out_dtype") or default
        if v == default:
            return v  # the inputs' dtype: a valid name
        try:
            np.dtype(v)
        except TypeError:
            raise self._bad("out_dtype", "a dtype name") from None
        return v


def _check_arity(op: OpDef, input_types: Sequence[Type]) -> None:
    if op.arity is None:
        if not input_types and op.name != "opaque":  # an opaque op may take no inputs
            raise ShapeError(f"{op.name} needs at least one input")
    elif len(input_types) != op.arity:
        raise ShapeError(f"{op.name} takes {op.arity} inputs, got {len(input_types)}")


def infer_type(op: str, attrs: Mapping, input_types: Sequence[Type]) -> Type:
    """Output type of ``op`` on inputs of these types; ShapeError if invalid."""
    d = get(op)
    _check_arity(d, input_types)
    if op not in ("tuple", "opaque", "tuple_get_item"):
        for t in input_types:
            if not isinstance(t, TensorType):
                raise ShapeError(f"{op} takes tensors, got {t}")
    try:
        return d.infer(OpAttrs(d, attrs), input_types)
    except (TypeError, IndexError, KeyError) as e:  # malformed attribute values
        raise ShapeError(f"{op}: invalid attributes {dict(attrs or {})!r}: {e}") from e


def evaluate(op: str, attrs: Mapping, inputs: list) -> Any:
    """Numpy reference semantics of ``op``."""
    d = get(op)
    return d.evaluate(OpAttrs(d, attrs), inputs)


def flops(op: str, attrs: Mapping, input_types: Sequence[Type], out_type: Type) -> int:
    """Floating-point operations of one execution (multiply-add = 2)."""
    d = get(op)
    return int(d.flops(OpAttrs(d, attrs), input_types, out_type))


def bytes_moved(op: str, attrs: Mapping, input_types: Sequence[Type], out_type: Type) -> int:
    """Bytes read from inputs plus bytes written to the output (0 for graph-level ops)."""
    d = get(op)
    return int(d.bytes(OpAttrs(d, attrs), input_types, out_type))


def pattern(op: str) -> str:
    return get(op).pattern


def _coerce(op: str, key: str, value, default):
    """A Relay attribute value (0/1 for bools, ints for floats...) in the type of its default."""
    try:
        if isinstance(default, bool):
            if not isinstance(value, (bool, int, np.bool_, np.integer)) or value not in (0, 1):
                raise ValueError(value)
            return bool(value)
        if isinstance(default, (float, int, str)):
            return type(default)(value)
    except (TypeError, ValueError):
        raise ShapeError(f"{op}: attribute {key!r} must be like {default!r}, got {value!r}") from None
    return value


def normalize_attrs(op: str, attrs: Mapping, input_types: Sequence[Type]) -> Attrs:
    """Relay-style attributes of ``op`` -> the canonical form (see the package docstring).

    Fills defaults, wraps negative axes and indices using ``input_types``,
    expands Relay's short forms, coerces 0/1 to bools and ints to floats
    where the default is one, and drops attributes that are not canonical
    (``units``, ``channels``, ``kernel_size``, an ``out_layout`` equal to
    the input layout...). ShapeError on a missing required attribute or one
    that cannot be normalized.
    """
    d = get(op)
    items = attrs._dict.items() if type(attrs) is Attrs else dict(attrs or {}).items()
    raw = {str(k): v for k, v in items if v is not None}
    layout = raw.get("layout", raw.get("data_layout", "NCHW"))
    if raw.get("out_layout", "") not in ("", layout):
        raise ShapeError(f"{op}: out_layout {raw['out_layout']!r} differs from the input layout {layout!r}")
    if d.normalize is not None:
        try:
            raw = d.normalize(op, raw, list(input_types))
        except ShapeError:
            raise
        except (TypeError, ValueError, IndexError, KeyError) as e:
            raise ShapeError(f"{op}: cannot normalize attributes {raw!r}: {e}") from e
    out = {}
    for k, v in (d.defaults or {}).items():
        value = raw.get(k, v)
        # a value already of its default's type is its own coercion
        out[k] = value if type(value) is type(v) else _coerce(op, k, value, v)
    for k in d.required:
        if k not in raw:
            raise ShapeError(f"{op}: missing required attribute {k!r}")
        out[k] = raw[k]
    for k in d.optional:
        if k in raw:
            out[k] = raw[k]
    if out.get("out_dtype") and input_types and getattr(input_types[0], "dtype", None) == out["out_dtype"]:
        out["out_dtype"] = ""  # "the input's dtype" has one spelling, as the frontend writes it
    return Attrs(out)
