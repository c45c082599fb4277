"""The rule object: a named rewrite rule's patterns, templates, preconditions and examples.

Built by ``relay_eqsat.rewrite.files`` (rule files) or ``relay_eqsat.rewrite.tensat_format``.
Matching (``matching``) and application (``application``) read the layouts it
computes once: canonical patterns, the variables each target needs, and the
flat-match layout of ``apply_search_matches``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

from relay_eqsat import ops
from relay_eqsat.egraph import attrs_of, infer_type_memo, value_of
from relay_eqsat.graph import Attrs
from .language import ExprContext, RuleSyntaxError
from .patterns import Template, canonical_pattern, template_vars


def _operator_nodes(t: Template) -> int:
    return 0 if t.kind == "var" else 1 + sum(_operator_nodes(c) for c in t.children)


@dataclass
class Rule:
    """A named rewrite rule with one or more source/target pairs."""

    name: str
    lhs: list                       # Program trees (original variable names)
    rhs: list[Template]
    lets: list[tuple[str, Template]] = field(default_factory=list)
    where: list[tuple[str, Callable]] = field(default_factory=list)
    examples: list[dict] = field(default_factory=list)
    kinds: dict = field(default_factory=dict)
    source: str = ""
    lhs_text: list[str] = field(default_factory=list)
    origin: str = ""                # "file:line" of its ``rule`` line (error messages)
    avoid: tuple[str, ...] = ()     # device kinds the rule is not used for ("cpu", "gpu"): ``avoid`` clause
    approx: bool = False            # the right side approximates the left (``approx`` clause; option fast_math)
    phase: str = "search"           # "search", "finish" or "both" (``phase`` clause; relay_eqsat.finishing)

    def __post_init__(self):
        if len(self.lhs) != len(self.rhs):
            raise RuleSyntaxError(f"rule {self.name}: {len(self.lhs)} source patterns but {len(self.rhs)} targets")
        if not self.lhs:
            raise RuleSyntaxError(f"rule {self.name}: no source pattern")
        for t in self.lhs:
            if t[0] == "var":
                raise RuleSyntaxError(f"rule {self.name}: a source pattern must be an operator")
        self.canon = [canonical_pattern(t) for t in self.lhs]
        letmap = dict(self.lets)
        self.rhs_vars = [template_vars(t, letmap) for t in self.rhs]
        self.bare = [t.kind == "var" and t.name not in letmap for t in self.rhs]
        self.const_vars = set()
        for text, _ in self.where:
            for m in re.finditer(r"\(const (\?[^\s()]+)\)", text):
                self.const_vars.add(m.group(1))
        # raw-environment layout and memoized application plans (``application.plan``)
        self.class_names = tuple(sorted({n for _, cls_order, _ in self.canon for n in cls_order}))
        self.other_names = tuple(sorted({n for _, _, attr_order in self.canon for n in attr_order}))
        self.plans: dict = {}
        #: at most this many e-nodes one application adds (the right sides' and lets' operator nodes)
        self.new_nodes = sum(_operator_nodes(t) for t in (*self.rhs, *(t for _, t in self.lets)))
        self.flat_plans: dict = {}  # plans keyed on flat matches (apply_search_matches)
        # flat matches (``application.apply_search_matches``): (roots..., values of ``flat_names``)
        self.flat_names = tuple(sorted({n for _, c, a in self.canon for n in (*c, *a)}))
        k = len(self.lhs)
        slot = {n: k + i for i, n in enumerate(self.flat_names)}
        self.flat_layout = None
        if all(v in slot for vs in self.rhs_vars for v in vs):
            self.flat_layout = (
                tuple(slot[n] for n in self.class_names),
                tuple(() if self.bare[i] else tuple(slot[v] for v in sorted(self.rhs_vars[i])) for i in range(k)),
                [tuple(slot[n] for n in (*c, *a)) for _, c, a in self.canon],
            )

    @property
    def multi(self) -> bool:
        """More than one source pattern."""
        return len(self.lhs) > 1

    def __repr__(self):
        return f"Rule({self.name!r}, {' ; '.join(self.lhs_text)})"

    def decode(self, raw: dict) -> dict:
        """Raw ids -> values: class vars stay class ids; attr vars become values, attrs vars Attrs."""
        env = {}
        for k, v in raw.items():
            if isinstance(k, tuple):
                continue
            if k.startswith("*"):
                env[k[1:]] = attrs_of(v)
            elif self.kinds.get(k) == "value":
                env[k] = value_of(v)
            else:
                env[k] = v
        return env

    def check(self, env: dict, type_of, const_of) -> bool:
        """Evaluate the preconditions; a ShapeError counts as false."""
        ctx = ExprContext(env, type_of, const_of)
        try:
            return all(bool(f(ctx)) for _, f in self.where)
        except (ops.ShapeError, IndexError, KeyError, TypeError, ZeroDivisionError):
            return False

    # -- instantiation --------------------------------------------------
    def instantiate(self, env: dict, type_of, const_of, add, out_types: list | None = None) -> list:
        """Build the targets: returns one handle per output.

        ``env`` binds class variables to handles and attribute variables to
        values; ``type_of(handle)``/``const_of(handle)`` describe handles;
        ``add(op, attrs, child_handles) -> handle`` creates nodes. All new
        nodes are typed first (``ops.infer_type``), so a ShapeError leaves
        nothing added. ``out_types``, when given, receives each output's type.
        """
        pending = []  # (op, attrs, children refs); ref = ("h", handle) | ("p", index)
        ptypes = []
        pconst = []
        local = dict(env)

        def ref_type(r):
            return type_of(r[1]) if r[0] == "h" else ptypes[r[1]]

        def ref_const(r):
            return const_of(r[1]) if r[0] == "h" else pconst[r[1]]

        def expr_type(r):  # a reference or a bare handle
            if isinstance(r, tuple):
                return type_of(r[1]) if r[0] == "h" else ptypes[r[1]]
            return type_of(r)

        def expr_const(r):
            if isinstance(r, tuple):
                return const_of(r[1]) if r[0] == "h" else pconst[r[1]]
            return const_of(r)

        # one context for every node's attribute expressions; ``inputs`` is set per node
        ctx = ExprContext(local, expr_type, expr_const)

        def plan(t: Template):
            if t.kind == "var":
                v = local[t.name]
                return v if isinstance(v, tuple) else ("h", v)
            kids = [plan(c) for c in t.children]
            in_types = tuple([ref_type(k) for k in kids])
            if t.items:
                attrs = {}
                if t.whole is not None:
                    attrs.update(local[t.whole])
                ctx.inputs = kids
                for key, f in t.items:
                    attrs[key] = f(ctx)
            else:  # a bound node's attributes as they are (an Attrs), or none
                attrs = local[t.whole] if t.whole is not None else _NO_ATTRS
            a, out_t = _typed_node(t.op, attrs, in_types)
            pending.append((t.op, a, kids))
            ptypes.append(out_t)
            pconst.append(t.op == "constant" or (bool(kids) and t.op not in ("var", "opaque")
                                                 and all(ref_const(k) for k in kids)))
            return ("p", len(pending) - 1)

        try:
            for name, t in self.lets:
                local[name] = plan(t)
            outs = [plan(t) for t in self.rhs]
        except (KeyError, IndexError, TypeError, ZeroDivisionError) as e:
            raise ops.ShapeError(f"rule {self.name}: {e}") from e
        if out_types is not None:
            out_types.extend(ref_type(o) for o in outs)
        handles = []
        for op, a, kids in pending:
            handles.append(add(op, a, [k[1] if k[0] == "h" else handles[k[1]] for k in kids]))
        return [o[1] if o[0] == "h" else handles[o[1]] for o in outs]


_NO_ATTRS = Attrs()
_NORMALIZE_CACHE: dict = {}  # (op, Attrs, input types) -> canonical Attrs
_NODE_CACHE: dict = {}  # (op, the attribute dict's items as built or an Attrs, input types) -> (canonical Attrs, type)
_CACHE_SIZE = 200000


def _typed_node(op: str, attrs, input_types: tuple):
    """A new node's canonical attributes and type: ``(_node_attrs(...), _infer(...))``.

    ``attrs``: a dict the template built, or a bound node's ``Attrs`` used as
    they are. Memoized on the dict's items as built (no ``Attrs`` to build
    when they repeat; unhashable values skip this memo), or on the ``Attrs``.
    Raises ShapeError like ``_node_attrs`` and ``_infer``."""
    try:
        key = (op, attrs if type(attrs) is Attrs else tuple(attrs.items()), input_types)
        hit = _NODE_CACHE.get(key)
    except TypeError:  # a list value: only the frozen form hashes
        key = hit = None
    if hit is None:
        a = _node_attrs(op, attrs, input_types)
        try:
            t = _infer(op, a, input_types)
        except ops.ShapeError as e:
            t = e
        hit = (a, t)
        if key is not None:
            if len(_NODE_CACHE) > _CACHE_SIZE:
                _NODE_CACHE.clear()
            _NODE_CACHE[key] = hit
    if isinstance(hit[1], ops.ShapeError):
        raise hit[1]
    return hit


def _node_attrs(op: str, attrs: dict, input_types) -> Attrs:
    """Canonical attributes of a new node (defaults filled, as the frontend does)."""
    a = Attrs(attrs)
    key = (op, a, tuple(input_types))
    hit = _NORMALIZE_CACHE.get(key)
    if hit is None:
        normalize = getattr(ops, "normalize_attrs", None)
        if normalize is not None:
            hit = normalize(op, a, list(input_types))
        else:
            defaults = ops.get(op).defaults or {}
            hit = Attrs({**defaults, **a})
        if len(_NORMALIZE_CACHE) > _CACHE_SIZE:
            _NORMALIZE_CACHE.clear()
        _NORMALIZE_CACHE[key] = hit
    return hit


def _infer(op: str, attrs: Attrs, input_types):
    """ops.infer_type, memoized (ShapeErrors too) in the memo the e-graph types added nodes with."""
    return infer_type_memo(op, attrs, tuple(input_types))
