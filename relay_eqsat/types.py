"""The values graph nodes carry: their types (``TensorType``, ``TupleType``) and attributes (``Attrs``).

All are immutable and hashable, so that equal nodes hash equal (the e-graph
interns attributes). ``freeze`` turns an attribute value into that form.
Both :mod:`relay_eqsat.graph` and :mod:`relay_eqsat.ops` build on this module.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Iterator, Union

import numpy as np


_INT_TYPE = {int}


@dataclass(frozen=True)
class TensorType:
    """A tensor with a static shape and a dtype string (``"float32"``)."""

    shape: tuple[int, ...]
    dtype: str = "float32"

    def __post_init__(self):
        shape = self.shape
        if type(shape) is not tuple or not set(map(type, shape)) <= _INT_TYPE:  # else already plain ints
            object.__setattr__(self, "shape", tuple(int(d) for d in shape))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize

    def __repr__(self) -> str:
        return f"{self.dtype}{list(self.shape)}"


@dataclass(frozen=True)
class TupleType:
    """A tuple of tensors (the output of split, batch_norm, tuple)."""

    fields: tuple[TensorType, ...]

    def __post_init__(self):
        object.__setattr__(self, "fields", tuple(self.fields))

    @property
    def nbytes(self) -> int:
        return sum(f.nbytes for f in self.fields)

    def __repr__(self) -> str:
        return "(" + ", ".join(map(repr, self.fields)) + ")"


Type = Union[TensorType, TupleType]


_FROZEN_SCALARS = frozenset((int, float, str, bool, type(None), TensorType, TupleType))


def freeze(value: Any) -> Any:
    """Normalize an attribute value to a hashable Python value."""
    t = type(value)
    if t in _FROZEN_SCALARS:  # the common cases, by exact type (subclasses take the checks below)
        return value
    if t is tuple and all(type(v) is int for v in value):
        return value
    if isinstance(value, (TensorType, TupleType, str, bool, type(None))):
        return value
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, np.ndarray):
        return freeze(value.tolist())
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, Mapping):
        return Attrs(value)
    raise TypeError(f"unsupported attribute value {value!r} of type {type(value).__name__}")


class Attrs(Mapping):
    """An immutable, hashable mapping of operator attributes.

    Values are Python scalars, strings, nested tuples or types, so that two
    nodes with equal attributes hash equal (the e-graph interns them).
    """

    __slots__ = ("_items", "_dict", "_hash")

    def __init__(self, items: Mapping[str, Any] | None = None, **kwargs: Any):
        if type(items) is Attrs and not kwargs:  # already frozen and sorted
            self._items, self._dict, self._hash = items._items, items._dict, items._hash
            return
        d = dict(items) if items else {}
        if kwargs:
            d.update(kwargs)
        scalars = _FROZEN_SCALARS
        frozen = tuple(sorted([(k if type(k) is str else str(k), v if type(v) in scalars else freeze(v))
                               for k, v in d.items()]))
        self._items = frozen
        self._dict = dict(frozen)
        self._hash = hash(frozen)

    def __reduce__(self):
        # rebuilt from the items, never from the pickled ``_hash``: string hashes differ between
        # processes, and a stale one made equal attributes intern apart (a different e-graph)
        return (Attrs, (dict(self._items),))

    def __getitem__(self, key: str) -> Any:
        return self._dict[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._dict)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Attrs):
            return self._items == other._items
        if isinstance(other, Mapping):
            return self._items == Attrs(other)._items
        return NotImplemented

    def items_tuple(self) -> tuple:
        return self._items

    def replace(self, **changes: Any) -> "Attrs":
        d = dict(self._dict)
        d.update(changes)
        return Attrs(d)

    def __repr__(self) -> str:
        return "{" + ", ".join(f"{k}={v!r}" for k, v in self._items) + "}"
