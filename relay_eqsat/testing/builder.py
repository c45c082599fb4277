"""What a fuzzing graph is built with: :class:`Choices` (the recipe's small integers, read one at a
time; choice 0 always the simplest option) and :class:`GraphBuilder` (a TensorGraph grown on
earlier values of the type a motif needs, or fresh inputs). The motifs are :mod:`.motifs`."""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from relay_eqsat import ops
from relay_eqsat.graph import TensorGraph, TensorType

#: the sizes of a fresh input's dimensions, simplest first
DIMS = (2, 3, 4, 1, 5)


class Choices:
    """A step's integers read one at a time; past the end every choice is 0."""

    def __init__(self, values: Sequence[int]):
        self._values, self._k = tuple(values), 0

    def raw(self) -> int:
        v = self._values[self._k] if self._k < len(self._values) else 0
        self._k += 1
        return v

    def pick(self, options):
        return options[self.raw() % len(options)]

    def int(self, lo: int, hi: int) -> int:
        return lo + self.raw() % (hi - lo + 1)

    def flag(self) -> bool:
        return bool(self.raw() % 2)

    def rare(self, one_in: int = 4) -> bool:
        """True once in ``one_in`` (never for choice 0)."""
        return self.raw() % one_in == one_in - 1

    def perm(self, n: int) -> tuple[int, ...]:
        """A permutation of ``range(n)`` (choice 0: the identity)."""
        r, items, out = self.raw(), list(range(n)), []
        for i in range(n, 0, -1):
            out.append(items.pop(r % i))
            r //= i
        return tuple(out)

    def shape(self, rank: int, dims=DIMS) -> tuple[int, ...]:
        return tuple(self.pick(dims) for _ in range(rank))

    def factor_shape(self, size: int) -> tuple[int, ...]:
        """A shape of 1..3 dims holding ``size`` elements."""
        dims, rest = [], size
        for _ in range(self.pick((1, 2, 0))):
            d = self.pick([d for d in range(1, rest + 1) if rest % d == 0])
            dims.append(d)
            rest //= d
        return tuple(dims) + (rest,)


class GraphBuilder:
    """The graph under construction: its tensor values (sources for later steps) and which are used."""

    def __init__(self, seed: int):
        self.g = TensorGraph()
        self.rng = np.random.default_rng(seed)
        self.values: list[int] = []
        self.used: set[int] = set()

    def type(self, v: int) -> TensorType:
        return self.g[v].type

    def keep(self, v: int) -> int:
        if isinstance(self.g[v].type, TensorType) and v not in self.values:
            self.values.append(v)
        return v

    def node(self, op: str, inputs, attrs=None) -> int:
        """Add ``op`` with its attributes in canonical form (defaults filled, as the frontend gives them:
        the rules' patterns name some defaults) and mark its inputs used."""
        attrs = ops.normalize_attrs(op, attrs or {}, [self.g[i].type for i in inputs])
        v = self.g.add(op, inputs, attrs)
        self.used.update(inputs)
        return v

    def op(self, op: str, inputs, attrs=None) -> int:
        """``node``, kept as a source for later steps when it is a tensor."""
        return self.keep(self.node(op, inputs, attrs))

    def var(self, shape) -> int:
        return self.keep(self.g.var(f"x{len(self.g.inputs)}", tuple(shape)))

    def const(self, shape, kind: str = "normal", fan_in: int = 1, value=None) -> int:
        shape = tuple(shape)
        if value is not None:
            a = np.full(shape, value)
        elif kind == "positive":  # variances
            a = np.abs(self.rng.standard_normal(shape)) + 0.5
        else:  # weights scaled so products keep unit variance
            a = self.rng.standard_normal(shape) / math.sqrt(max(1, fan_in))
        return self.g.const(np.asarray(a, dtype="float32"))

    def operand(self, c: Choices, shape, fan_in: int = 1, const_first: bool = True) -> int:
        """A weight-like operand of ``shape``: usually a constant, sometimes an input."""
        if c.rare(4 if const_first else 2):
            return self.var(shape)
        return self.const(shape, fan_in=fan_in)

    def source(self, c: Choices, ok: Callable[[TensorType], bool] = lambda t: t.ndim >= 1,
               fresh: Callable[[Choices], tuple] | None = None) -> int:
        """An earlier value whose type is ``ok`` (default: not 0-d; choice 0: the latest), or a fresh input."""
        cands = [v for v in reversed(self.values) if ok(self.type(v))]
        i = c.int(0, len(cands))
        if i < len(cands):
            return cands[i]
        return self.var(fresh(c) if fresh else c.shape(c.pick((2, 4, 3, 1))))

    def positive(self, x: int) -> int:
        """x * x + 1 (>= 1: a safe operand of sqrt, rsqrt, divide and power)."""
        return self.op("add", [self.op("multiply", [x, x]), self.const((), value=1.0)])

    def finish(self) -> TensorGraph:
        sinks = [v for v in self.values if v not in self.used] or self.values[-1:]
        self.g.set_output(sinks[0] if len(sinks) == 1 else self.g.add("tuple", sinks))
        return self.g
