"""Concrete instances of a rule's source patterns, for verifying the rule.

An :class:`Instance` is a TensorGraph holding the rule's left-hand side on
concrete leaves (``var`` nodes, or ``constant`` nodes for the variables
chosen constant) and the graph node of each source pattern. Shapes and
attribute values come from one of the rule's ``example`` bindings
(:func:`from_example`, as the rule language documents them) or are drawn at
random (:func:`draw`): leaf shapes of ranks 1..4 and sizes 1..6, proposed
from the shapes around each leaf (a sibling's shape, one of its dimensions,
...), and per-operator attributes, retried until every node type-checks.
Constants hold zeros: the verifier fills in values.

Only shapes and attributes are decided here; whether the e-matcher finds the
instance and the preconditions hold is the verifier's business
(``relay_eqsat.rewrite.check``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from relay_eqsat import ops
from relay_eqsat.graph import TensorGraph, TensorType, TupleType

#: largest dimension of a drawn shape, highest rank
MAX_DIM = 6
MAX_RANK = 4
#: leaf shape and attribute proposals tried per operator node of a drawn instance
NODE_TRIES = 60

_MISSING = object()


class NoInstance(Exception):
    """The example (or this draw) gives no well-typed instance of the left side."""


@dataclass
class Instance:
    graph: TensorGraph
    roots: list[int]                                   # graph node of each source pattern
    shapes: dict[str, tuple] = field(default_factory=dict)   # leaf variable -> shape
    consts: set = field(default_factory=set)           # leaf variables made constants
    values: dict[str, Any] = field(default_factory=dict)     # attribute variable -> value
    whole: dict[str, dict] = field(default_factory=dict)     # whole-attribute variable -> non-default attributes

    def describe(self) -> str:
        """The bindings, in the ``example`` syntax (constants marked)."""
        parts = [f"{n} [{','.join(map(str, s))}]" + (" (const)" if n in self.consts else "")
                 for n, s in self.shapes.items()]
        parts += [f"{n} {value_text(v)}" for n, v in self.values.items()]
        parts += [f"{n}.{k} {value_text(v)}" for n, attrs in self.whole.items() for k, v in sorted(attrs.items())]
        return " ".join(parts)


def value_text(v) -> str:
    """An attribute value in the rule language's literal syntax."""
    if isinstance(v, tuple):
        return "[" + ",".join(value_text(x) for x in v) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    return f'"{v}"' if isinstance(v, str) else str(v)


def from_example(rule, example: dict, consts: set) -> Instance:
    """The left side on an ``example`` binding; ``consts``: leaf variables made constants."""
    return _ExampleBuilder(rule, consts, example).run()


def draw(rule, rng, consts: set) -> Instance:
    """A random well-typed instance of the left side; NoInstance if this draw found none."""
    return _DrawBuilder(rule, consts, rng).run()


def _walk(t):
    yield t
    if t[0] == "op":
        for k in t[5]:
            yield from _walk(k)


class _Builder:
    """Builds the source patterns bottom-up; subclasses choose leaf shapes and attributes."""

    def __init__(self, rule, consts: set):
        self.rule = rule
        self.consts = consts
        self.g = TensorGraph()
        self.nodes: dict[str, int] = {}      # class variable -> graph node
        self.values: dict[str, Any] = {}     # attribute variable -> normalized value
        self.whole: dict[str, dict] = {}     # whole-attribute variable -> attributes
        self.whole_seen: dict[str, tuple] = {}  # whole-attribute variable -> (op, normalized attributes)
        self.shapes: dict[str, tuple] = {}
        # literals of every node sharing a whole-attribute variable (they are one attribute set)
        self.whole_literals: dict[str, dict] = {}
        self.whole_avars: dict[str, list] = {}
        for t in rule.lhs:
            for n in _walk(t):
                if n[0] == "op" and n[4] is not None:
                    self.whole_literals.setdefault(n[4], {}).update(n[2])
                    self.whole_avars.setdefault(n[4], []).extend(n[3])

    def run(self) -> Instance:
        roots = [self.build(t) for t in self.rule.lhs]
        whole = {}
        for name, (op, attrs) in self.whole_seen.items():
            defaults = ops.get(op).defaults or {}
            whole[name] = {k: v for k, v in attrs.items() if k not in defaults or defaults[k] != v}
        return Instance(self.g, roots, dict(self.shapes), {n for n in self.shapes if n in self.consts},
                        dict(self.values), whole)

    def build(self, t) -> int:
        if t[0] == "var":
            return self.nodes[t[1]]
        _, op, literals, avars, whole, kids, bind = t
        fresh: list[str] = []
        known: list = []   # per input: its graph node, or None for a fresh leaf
        for k in kids:
            if k[0] == "var" and k[1] not in self.nodes:
                if k[1] not in fresh:
                    fresh.append(k[1])
                known.append(None)
            else:
                known.append(self.build(k))
        if op == "constant":  # a scalar operand the rule names by value: (constant :value 3.0)
            if set(literals) != {"value"} or avars or whole is not None or kids:
                raise NoInstance("a constant in a pattern is matched by its :value alone")
            nid = self.g.const(np.asarray(literals["value"], "float32"))
            if bind is not None:
                self.nodes[bind] = nid
            return nid
        shapes, raw_whole, drawn = self.choose(t, fresh, known)
        try:
            for name in fresh:
                self.leaf(name, shapes[name])
            inputs = [self.nodes[k[1]] if n is None else n for k, n in zip(kids, known)]
            attrs, _ = self.attrs(t, [self.g[i].type for i in inputs], raw_whole, drawn)
            nid = self.g.add(op, inputs, attrs)
        except (ValueError, TypeError) as e:  # ShapeError included; TypeError: a shape that is no list
            raise NoInstance(f"the left side does not type-check on it: {e}") from None
        if whole is not None and whole not in self.whole:
            self.whole[whole] = raw_whole
            self.whole_seen[whole] = (op, dict(attrs))
        for key, name in avars:
            if name not in self.values and key in attrs:
                self.values[name] = attrs[key]
        if bind is not None:
            if bind in self.nodes:
                raise NoInstance(f"{bind} is used before its (as {bind} ...) pattern")
            self.nodes[bind] = nid
        return nid

    def leaf(self, name: str, shape) -> None:
        shape = tuple(int(d) for d in shape)
        if any(d < 0 for d in shape):
            raise ValueError(f"{name} has a negative dimension: {list(shape)}")
        label = name.lstrip("?")
        if name in self.consts:
            # any constant (its value drawn when checked: no scalar ``value`` attribute to match)
            self.g.constants[label] = np.zeros(shape, "float32")
            self.nodes[name] = self.g.add("constant", (), {"name": label, "type": TensorType(shape, "float32")})
        else:
            self.nodes[name] = self.g.var(label, shape)
        self.shapes[name] = shape

    def attrs(self, t, in_types: list, raw_whole, drawn):
        """(normalized attributes, output type) of node ``t`` on inputs of ``in_types``; ShapeError if invalid."""
        _, op, literals, avars, whole, kids, bind = t
        attrs: dict = {}
        if whole is not None:
            attrs.update(self.whole.get(whole, raw_whole) or {})
        attrs.update(literals)
        for key, name in avars:
            value = self.values.get(name, _MISSING)
            if value is _MISSING:
                value = self.value(name, key, drawn)
            if value is not _MISSING:
                attrs[key] = value
        norm = ops.normalize_attrs(op, attrs, in_types)
        return norm, ops.infer_type(op, norm, in_types)

    # -- strategy -----------------------------------------------------------
    def choose(self, t, fresh: list[str], known: list) -> tuple[dict, dict | None, dict]:
        """Shapes of the fresh leaves of node ``t`` (``known``: the graph node
        of each other input), its whole attributes if not bound yet, and
        drawn attribute values."""
        raise NotImplementedError

    def value(self, name: str, key: str, drawn: dict):
        """An unbound attribute variable's value (``_MISSING``: the op's default)."""
        raise NotImplementedError


class _ExampleBuilder(_Builder):
    def __init__(self, rule, consts, example: dict):
        super().__init__(rule, consts)
        self.example = example

    def choose(self, t, fresh, known):
        shapes = {}
        for name in fresh:
            if name not in self.example:
                raise NoInstance(f"it gives no shape for {name}")
            shapes[name] = self.example[name]
        whole = t[4]
        raw_whole = None
        if whole is not None and whole not in self.whole:
            raw_whole = dict(self.whole_literals.get(whole, {}))
            for key, name in self.whole_avars.get(whole, []):
                if name in self.example:
                    raw_whole[key] = self.example[name]
            for key, value in self.example.items():
                if key.startswith(whole + "."):
                    raw_whole[key[len(whole) + 1:]] = value
        return shapes, raw_whole, {}

    def value(self, name, key, drawn):
        return self.example.get(name, _MISSING)


class _DrawBuilder(_Builder):
    def __init__(self, rule, consts, rng):
        super().__init__(rule, consts)
        self.rng = rng

    def pool(self) -> list[int]:
        return [d for s in self.shapes.values() for d in s]

    def choose(self, t, fresh, known):
        _, op, literals, avars, whole, kids, bind = t
        for _ in range(NODE_TRIES):
            shapes: dict[str, tuple] = {}
            in_types: list = []
            drawn = None
            prev = None
            for k, nid in zip(kids, known):
                if nid is not None:
                    in_types.append(self.g[nid].type)
                    continue
                if k[1] not in shapes:
                    if not in_types:
                        leaves = list(self.shapes.values())
                        shapes[k[1]] = (_pick(self.rng, leaves) if leaves and self.rng.random() < 0.3
                                        else random_shape(self.rng, self.pool()))
                    else:
                        if drawn is None:
                            drawn = draw_attrs(op, in_types[0], self.rng)
                        shapes[k[1]] = propose_shape(self.rng, in_types[0], prev, self.axis_hint(t, drawn),
                                                     self.pool())
                    prev = shapes[k[1]]
                in_types.append(TensorType(shapes[k[1]]))
            if drawn is None:
                drawn = draw_attrs(op, in_types[0] if in_types else None, self.rng)
            fit_attrs(op, drawn, in_types)
            raw_whole = None
            if whole is not None and whole not in self.whole:
                raw_whole = {**drawn, **self.whole_literals.get(whole, {})}
            try:
                self.attrs(t, in_types, raw_whole, drawn)
            except ops.ShapeError:
                continue
            return shapes, raw_whole, drawn
        raise NoInstance(f"no well-typed {op} node found")

    def value(self, name, key, drawn):
        return drawn.get(key, _MISSING)

    def axis_hint(self, t, drawn: dict):
        """The ``axis`` node ``t`` will have, as far as known (per-channel parameter shapes)."""
        _, op, literals, avars, whole, kids, bind = t
        axis = self.whole.get(whole, {}).get("axis", drawn.get("axis")) if whole is not None else drawn.get("axis")
        axis = literals.get("axis", axis)
        for key, name in avars:
            if key == "axis" and name in self.values:
                axis = self.values[name]
        return axis


# -- random shapes ------------------------------------------------------------

def _dim(rng, pool: list[int], p_pool: float = 0.4) -> int:
    if pool and rng.random() < p_pool:
        return int(pool[int(rng.integers(len(pool)))])
    return int(rng.integers(1, MAX_DIM + 1))


def random_shape(rng, pool: list[int], rank: int | None = None) -> tuple:
    """A shape of ``rank`` (else 1..4) with sizes 1..6, some taken from ``pool``."""
    if rank is None:
        rank = _pick(rng, (1, 2, 2, 3, 4, 4))
    return tuple(_dim(rng, pool) for _ in range(rank))


def propose_shape(rng, x, prev: tuple | None, axis, pool: list[int]) -> tuple:
    """A shape for a fresh input of a node whose first input has type ``x``:
    the previous fresh input's shape, ``x``'s shape, one of its dimensions as
    a vector (per-channel parameters), ``x`` with one dimension changed
    (concatenation), a matrix sharing its last dimension (dense, matmul), a
    mix of its dimensions, or a random shape."""
    if prev is not None and rng.random() < 0.5:
        return prev
    if not isinstance(x, TensorType) or x.ndim == 0:
        return random_shape(rng, pool)
    u = rng.random()
    ax = axis if isinstance(axis, int) and 0 <= axis < x.ndim and rng.random() < 0.7 else int(rng.integers(x.ndim))
    if u < 0.25:
        return x.shape
    if u < 0.45:
        return (x.shape[ax],)
    if u < 0.6:
        return x.shape[:ax] + (int(rng.integers(1, MAX_DIM + 1)),) + x.shape[ax + 1:]
    if u < 0.72:
        r = int(rng.integers(1, MAX_DIM + 1))
        return (r, x.shape[-1]) if rng.random() < 0.5 else (x.shape[-1], r)
    if u < 0.87:
        return tuple(_related_dim(rng, x.shape) if rng.random() < 0.6 else int(rng.integers(1, MAX_DIM + 1))
                     for _ in range(x.ndim))
    return random_shape(rng, pool + list(x.shape))


def _related_dim(rng, shape: tuple) -> int:
    """One of ``shape``'s dimensions, sometimes divided by 2 or 3 (grouped convolutions' weights)."""
    d = shape[int(rng.integers(len(shape)))]
    q = _pick(rng, (2, 3))
    return d // q if d % q == 0 and rng.random() < 0.2 else d


# -- random attributes ----------------------------------------------------------

def _pick(rng, options):
    return options[int(rng.integers(len(options)))]


def _factorization(rng, size: int) -> tuple:
    """A random shape of 1..4 dimensions holding ``size`` elements."""
    rank = int(rng.integers(1, MAX_RANK + 1))
    dims = []
    rest = size
    for _ in range(rank - 1):
        divisors = [d for d in range(1, rest + 1) if rest % d == 0]
        d = _pick(rng, divisors)
        dims.append(d)
        rest //= d
    dims.append(rest)
    rng.shuffle(dims)
    return tuple(int(d) for d in dims)


def _window(rng) -> dict:
    s = _pick(rng, (1, 1, 2))
    p = _pick(rng, (0, 0, 1))
    return {"strides": (s, s), "padding": (p, p, p, p), "dilation": _pick(rng, ((1, 1), (1, 1), (1, 1), (2, 2)))}


def draw_attrs(op: str, x, rng) -> dict:
    """Random values for the attributes of ``op`` that vary between instances,
    given its first input's type ``x`` (None if unknown). Layouts and dtypes
    keep their defaults."""
    n = x.ndim if isinstance(x, TensorType) else 0
    flag = lambda p=0.5: bool(rng.random() < p)  # noqa: E731
    if op == "tuple_get_item":
        return {"index": int(rng.integers(len(x.fields)))} if isinstance(x, TupleType) and x.fields else {}
    if op == "nn.conv2d":
        return {**_window(rng), "groups": 1}
    if op in ("nn.max_pool2d", "nn.avg_pool2d"):
        k = _pick(rng, (1, 2, 3))
        out = {**_window(rng), "pool_size": (k, k), "ceil_mode": flag(0.25)}
        out["dilation"] = (1, 1)
        if op == "nn.avg_pool2d":
            out["count_include_pad"] = flag()
        return out
    if op in ("nn.matmul", "nn.batch_matmul"):
        return {"transpose_a": flag(0.3), "transpose_b": flag(0.7 if op == "nn.batch_matmul" else 0.3)}
    if op == "clip":
        return {"a_min": _pick(rng, (-1.0, -0.5, 0.0)), "a_max": _pick(rng, (0.5, 1.0, 6.0))}
    if op == "nn.leaky_relu":
        return {"alpha": _pick(rng, (0.01, 0.1, 0.2))}
    if n == 0:
        return {}
    if op == "transpose":
        return {"axes": tuple(int(a) for a in rng.permutation(n))}
    if op == "reshape":
        return {"newshape": _factorization(rng, x.size)}
    if op in ("concatenate", "nn.bias_add", "nn.softmax", "nn.layer_norm", "nn.batch_norm"):
        out = {"axis": int(rng.integers(n))}
        if op in ("nn.layer_norm", "nn.batch_norm"):
            out.update(epsilon=_pick(rng, (1e-5, 1e-3)), center=flag(0.8), scale=flag(0.8))
        return out
    if op == "split":
        axis = int(rng.integers(n))
        dim = x.shape[axis]
        k = min(int(rng.integers(1, 3)), dim - 1)
        points = sorted(int(p) for p in rng.choice(np.arange(1, dim), size=k, replace=False)) if k > 0 else []
        return {"axis": axis, "indices": tuple(points)}
    if op == "mean":
        k = int(rng.integers(1, n + 1))
        return {"axis": tuple(sorted(int(a) for a in rng.choice(n, size=k, replace=False))), "keepdims": flag()}
    if op == "strided_slice":
        begin = tuple(int(rng.integers(d)) for d in x.shape)
        end = tuple(int(rng.integers(b + 1, d + 1)) for b, d in zip(begin, x.shape))
        return {"begin": begin, "end": end, "strides": tuple(_pick(rng, (1, 1, 2)) for _ in x.shape)}
    if op == "nn.pad":
        return {"pad_width": tuple((int(rng.integers(2)), int(rng.integers(2))) for _ in range(n)),
                "pad_value": _pick(rng, (0.0, 0.0, 1.5))}
    return {}


def fit_attrs(op: str, drawn: dict, in_types: list) -> None:
    """Attributes decided by the inputs once their shapes are known: a
    convolution's groups (input channels / weight input channels)."""
    if op == "nn.conv2d" and len(in_types) == 2 and all(isinstance(t, TensorType) and t.ndim == 4
                                                         for t in in_types):
        c, i, o = in_types[0].shape[1], in_types[1].shape[1], in_types[1].shape[0]
        if i and c % i == 0 and o % (c // i) == 0:
            drawn["groups"] = c // i


__all__ = ["Instance", "NoInstance", "from_example", "draw", "value_text", "draw_attrs", "propose_shape",
           "random_shape"]
