"""Rewrite rules: a text language over our operators, TENSAT's format, and application.

Rule files (``rules/*.rules``, shipped as package data) hold named rules::

    # a comment runs to the end of the line
    rule dense-merge                       # a name: letters, digits, - _ .
      lhs   (nn.dense ?x ?w1 :* ?a) ; (nn.dense ?x ?w2 :* ?a)
      let   ?s = (split (nn.dense ?x (concatenate ?w1 ?w2 :axis 0) :* ?a)
                        :indices [(dim ?w1 0)] :axis (- (ndim ?x) 1))
      rhs   (tuple_get_item ?s :index 0) ; (tuple_get_item ?s :index 1)
      where (const ?w1) (const ?w2)
      example ?x [2,8] ?w1 [4,8] ?w2 [6,8]

Clauses (each starts a line; a line that starts with no clause keyword, or
one ending inside open brackets, continues the previous clause):

``lhs P1 ; P2 ...``
    Source patterns, one per matched output. Several patterns make a
    multi-pattern rule (TENSAT Algorithm 1): each is searched on its own and
    the Cartesian product of the matches is joined on shared variables; a
    combination where two patterns match the same e-class is skipped.
``rhs T1 ; T2 ...``
    Target templates, one per source pattern; ``Ti`` is merged with the
    class ``Pi`` matched.
``let ?v = T``
    A template instantiated once and usable as ``?v`` in later lets and the
    right-hand sides (to share a node between outputs, e.g. one split).
``where C1 C2 ...``
    Preconditions (expressions, below); all must be true for a match to
    apply. After them, every new node is shape-checked with
    ``ops.infer_type``: a match whose target does not type-check is skipped.
``example BINDINGS``
    Concrete bindings for the verifier (``relay_eqsat.rule_check``; it runs
    on every user rule file when loaded, and on the shipped ones in
    tests/test_rules.py): ``?x [2,8]``
    gives a class variable's shape (a variable with ``(const ?x)`` among the
    preconditions becomes a constant), ``?v VALUE`` an attribute variable's
    value, ``?a.key VALUE`` one attribute of a whole-attribute variable.
    A rule may have several examples; every shipped rule needs one. A rule
    without one is verified on instances drawn from its own patterns.
``avoid cpu`` / ``avoid gpu``
    The rule is not used when optimizing for that kind of device (the
    target's kind: ``llvm``/``c`` are cpu; ``cuda``, ``rocm``, ``vulkan``...
    gpu): for rewrites measured to lose there (the evidence goes in a comment
    beside the clause). The report names the rules left out.

Patterns (left-hand side)::

    ?x                         a class variable (any e-class)
    (op P... :key LIT ...)     an e-node of ``op`` with exactly these children,
                               whose attribute ``key`` equals ``LIT``
    (op P... :key ?v)          binds attribute ``key``'s value to ``?v``
                               (an *attribute variable*; a repeated ``?v``
                               must be equal)
    (op P... :* ?a)            binds the node's whole attribute set to ``?a``
                               (repeated: the attribute sets must be equal)
    (as ?r P)                  names the class matched by ``P`` as ``?r``

Templates (right-hand side and lets)::

    ?x                         a bound class (from the LHS or a let)
    (op T... :key EXPR ...)    a new node; attributes are the op's canonical
                               defaults, then the attributes of ``:* ?a``
                               (copied from a matched node), then each
                               ``:key EXPR`` (overrides)

Literals: integers, floats, ``true``/``false``, ``"strings"``, lists
``[1, 1]`` (tuples; commas optional, nesting allowed). Expressions are
literals, variables, or calls ``(fn args...)``:

``(dim ?x i)`` ``(ndim ?x)`` ``(shape ?x)`` ``(dtype ?x)`` ``(const ?x)``
    the type of a class variable (or a let) and whether it is constant;
    inside a template ``%0``, ``%1``... stand for the node's own inputs.
``(attr ?a key)``
    one attribute of a whole-attribute variable.
``+ - * // %`` ``neg`` ``min`` ``max`` ``sum`` ``len``
    arithmetic; ``+ - *`` work element-wise on lists of equal length (or a
    list and a number).
``== != < <= > >=`` ``and`` ``or`` ``not`` ``(if C A B)``
``(list A B ...)`` ``(get L i)`` ``(cat L1 L2)`` ``(set L i V)`` ``(cumsum L)``
``(compose-perm P Q)``  axes of ``transpose(transpose(x, P), Q)``
``(identity-perm P)``   true if ``P`` is ``0, 1, ..., n-1``
``(inverse-perm P)``
``(same-pad ?x ?w SH SW)``  TASO's SAME padding of a convolution (4-tuple)
``(enlarge-pad ?w ?ref)``   pad_width growing a kernel to ``?ref``'s size

Rules are loaded with ``load_rules(name)`` (a shipped file, through
``importlib.resources``), ``load_rule_file(path)`` or ``parse_rules(text)``.
``load_tensat(text)`` reads TENSAT's format (see its docstring).
"""
from __future__ import annotations

import importlib.resources
import itertools
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from . import ops
from .graph import Attrs, TensorType, TupleType, _freeze

log = logging.getLogger(__name__)


class RuleSyntaxError(ValueError):
    """A rule file or S-expression could not be parsed or is ill-formed."""


# ---------------------------------------------------------------------------
# S-expression reader
# ---------------------------------------------------------------------------

class Sym(str):
    """An unquoted symbol (operator name, variable, keyword)."""


class Str(str):
    """A quoted string literal."""


class LitList(list):
    """A bracketed list ``[...]``."""


_TOKEN = re.compile(r'\s*(?:(\()|(\))|(\[)|(\])|(;)|(=>)|(,)|"((?:[^"\\]|\\.)*)"|([^\s()\[\];,"]+))')


def tokenize(text: str) -> list:
    out = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise RuleSyntaxError(f"cannot read {text[pos:pos + 20]!r}")
        pos = m.end()
        lp, rp, lb, rb, semi, arrow, comma, string, atom = m.groups()
        if lp:
            out.append("(")
        elif rp:
            out.append(")")
        elif lb:
            out.append("[")
        elif rb:
            out.append("]")
        elif semi:
            out.append(";")
        elif arrow:
            out.append("=>")
        elif comma:
            continue
        elif string is not None:
            out.append(Str(string))
        elif atom is not None:
            out.append(Sym(atom))
    return out


def _atom(tok: str):
    if isinstance(tok, Str):
        return tok
    if tok == "true":
        return True
    if tok == "false":
        return False
    try:
        return int(tok)
    except ValueError:
        pass
    try:
        return float(tok)
    except ValueError:
        return Sym(tok)


def read_all(tokens: list) -> list:
    """Read S-expressions: ``(...)`` -> list, ``[...]`` -> LitList, ``;`` and ``=>`` kept as Sym."""
    pos = 0

    def read():
        nonlocal pos
        tok = tokens[pos]
        pos += 1
        if tok in ("(", "["):
            close = ")" if tok == "(" else "]"
            items = []
            while True:
                if pos >= len(tokens):
                    raise RuleSyntaxError(f"missing {close!r}")
                if tokens[pos] == close:
                    pos += 1
                    return items if tok == "(" else LitList(items)
                items.append(read())
        if tok in (")", "]"):
            raise RuleSyntaxError(f"unexpected {tok!r}")
        if tok in (";", "=>"):
            return Sym(tok)
        return _atom(tok)

    out = []
    while pos < len(tokens):
        out.append(read())
    return out


def read_one(text: str):
    xs = read_all(tokenize(text))
    if len(xs) != 1:
        raise RuleSyntaxError(f"expected one expression in {text!r}")
    return xs[0]


def _is_var(x) -> bool:
    return isinstance(x, Sym) and x.startswith("?") and len(x) > 1


def _is_input_ref(x) -> bool:
    return isinstance(x, Sym) and re.fullmatch(r"%\d+", x) is not None


def _split_on(items: list, sep: str) -> list[list]:
    groups = [[]]
    for x in items:
        if isinstance(x, Sym) and x == sep:
            groups.append([])
        else:
            groups[-1].append(x)
    return groups


def to_text(x) -> str:
    """Print an S-expression back."""
    if isinstance(x, LitList):
        return "[" + " ".join(to_text(v) for v in x) + "]"
    if isinstance(x, list):
        return "(" + " ".join(to_text(v) for v in x) + ")"
    if isinstance(x, Str):
        return '"' + x + '"'
    if isinstance(x, bool):
        return "true" if x else "false"
    return str(x)


def _literal(x):
    """A literal S-expression as a frozen attribute value; None if not literal."""
    if isinstance(x, LitList):
        vals = [_literal(v) for v in x]
        if any(v is _NOT_LITERAL for v in vals):
            return _NOT_LITERAL
        return tuple(vals)
    if isinstance(x, (bool, int, float, Str)):
        return str(x) if isinstance(x, Str) else x
    return _NOT_LITERAL


_NOT_LITERAL = object()


# ---------------------------------------------------------------------------
# expressions
# ---------------------------------------------------------------------------

class ExprContext:
    """What expressions see: bound variables, their types and constness."""

    __slots__ = ("env", "type_of", "const_of", "inputs")

    def __init__(self, env: dict, type_of: Callable, const_of: Callable, inputs=()):
        self.env = env
        self.type_of = type_of
        self.const_of = const_of
        self.inputs = inputs


def _elementwise(fn):
    def op(a, b):
        if isinstance(a, tuple) and isinstance(b, tuple):
            if len(a) != len(b):
                raise ops.ShapeError(f"element-wise op on lists of lengths {len(a)} and {len(b)}")
            return tuple(fn(x, y) for x, y in zip(a, b))
        if isinstance(a, tuple):
            return tuple(fn(x, b) for x in a)
        if isinstance(b, tuple):
            return tuple(fn(a, y) for y in b)
        return fn(a, b)
    return op


def _tensor_type(t) -> TensorType:
    if not isinstance(t, TensorType):
        raise ops.ShapeError(f"expected a tensor, got {t}")
    return t


def _dim(t, i):
    t = _tensor_type(t)
    if not -t.ndim <= i < t.ndim:
        raise ops.ShapeError(f"dim {i} out of range for {t}")
    return t.shape[i]


def _same_pad(x, w, sh, sw):
    """TASO's SAME padding for a convolution of x [N,C,H,W] with w [O,I,KH,KW]."""
    x, w = _tensor_type(x), _tensor_type(w)
    out = []
    for size, k, s in ((x.shape[2], w.shape[2], sh), (x.shape[3], w.shape[3], sw)):
        o = -(-size // s)
        out.append(max((o - 1) * s + k - size, 0))
    ph, pw = out
    return (ph // 2, pw // 2, ph - ph // 2, pw - pw // 2)


def _enlarge_pad(w, ref):
    w, ref = _tensor_type(w), _tensor_type(ref)
    if w.ndim != 4 or ref.ndim != 4:
        raise ops.ShapeError("enlarge needs 4-d kernels")
    dh, dw = ref.shape[2] - w.shape[2], ref.shape[3] - w.shape[3]
    if dh < 0 or dw < 0 or dh % 2 or dw % 2:
        raise ops.ShapeError(f"cannot enlarge {w} to {ref}")
    return ((0, 0), (0, 0), (dh // 2, dh // 2), (dw // 2, dw // 2))


def _compose_perm(p, q):
    if len(p) != len(q):
        raise ops.ShapeError("permutations of different lengths")
    return tuple(p[i] for i in q)


def _inverse_perm(p):
    out = [0] * len(p)
    for i, a in enumerate(p):
        out[a] = i
    return tuple(out)


def _cumsum(xs):
    out, s = [], 0
    for x in xs:
        s += x
        out.append(s)
    return tuple(out)


def _set(xs, i, v):
    xs = list(xs)
    xs[i] = v
    return tuple(xs)


_FUNCS: dict[str, tuple[int | None, Callable]] = {
    "+": (2, _elementwise(lambda a, b: a + b)),
    "-": (2, _elementwise(lambda a, b: a - b)),
    "*": (2, _elementwise(lambda a, b: a * b)),
    "//": (2, _elementwise(lambda a, b: a // b)),
    "%": (2, _elementwise(lambda a, b: a % b)),
    "neg": (1, lambda a: tuple(-x for x in a) if isinstance(a, tuple) else -a),
    "min": (None, lambda *a: min(a[0]) if len(a) == 1 else min(a)),
    "max": (None, lambda *a: max(a[0]) if len(a) == 1 else max(a)),
    "sum": (1, lambda a: sum(a)),
    "len": (1, lambda a: len(a)),
    "==": (2, lambda a, b: a == b),
    "!=": (2, lambda a, b: a != b),
    "<": (2, lambda a, b: a < b),
    "<=": (2, lambda a, b: a <= b),
    ">": (2, lambda a, b: a > b),
    ">=": (2, lambda a, b: a >= b),
    "not": (1, lambda a: not a),
    "list": (None, lambda *a: tuple(a)),
    "get": (2, lambda a, i: a[i]),
    "cat": (2, lambda a, b: tuple(a) + tuple(b)),
    "set": (3, _set),
    "cumsum": (1, _cumsum),
    "compose-perm": (2, _compose_perm),
    "inverse-perm": (1, _inverse_perm),
    "identity-perm": (1, lambda p: tuple(p) == tuple(range(len(p)))),
    "same-pad": (4, _same_pad),
    "enlarge-pad": (2, _enlarge_pad),
}
# functions whose first argument is a class (they receive its type)
_TYPE_FUNCS = {
    "dim": (2, _dim),
    "ndim": (1, lambda t: _tensor_type(t).ndim),
    "shape": (1, lambda t: _tensor_type(t).shape),
    "dtype": (1, lambda t: _tensor_type(t).dtype),
}


def compile_expr(x, kinds: dict[str, str], where: str = "") -> Callable[[ExprContext], Any]:
    """Compile an expression S-expr into ``f(ctx) -> value``.

    ``kinds`` maps variable names to "class", "value" or "attrs".
    """
    lit = _literal(x)
    if lit is not _NOT_LITERAL:
        return lambda ctx, v=lit: v
    if isinstance(x, LitList):
        parts = [compile_expr(v, kinds, where) for v in x]
        return lambda ctx: tuple(p(ctx) for p in parts)
    if _is_var(x):
        kind = kinds.get(x)
        if kind is None:
            raise RuleSyntaxError(f"{where}: unbound variable {x}")
        if kind == "class":
            return lambda ctx, n=x: ("class", ctx.env[n])
        return lambda ctx, n=x: ctx.env[n]
    if _is_input_ref(x):
        i = int(x[1:])
        return lambda ctx: ("class", ctx.inputs[i])
    if isinstance(x, list) and x and isinstance(x[0], Sym):
        fn = str(x[0])
        args = x[1:]
        if fn == "and":
            ps = [compile_expr(a, kinds, where) for a in args]
            return lambda ctx: all(p(ctx) for p in ps)
        if fn == "or":
            ps = [compile_expr(a, kinds, where) for a in args]
            return lambda ctx: any(p(ctx) for p in ps)
        if fn == "if":
            if len(args) != 3:
                raise RuleSyntaxError(f"{where}: if takes 3 arguments")
            c, a, b = (compile_expr(v, kinds, where) for v in args)
            return lambda ctx: a(ctx) if c(ctx) else b(ctx)
        if fn == "attr":
            if len(args) != 2 or kinds.get(args[0]) != "attrs" or not isinstance(args[1], Sym):
                raise RuleSyntaxError(f"{where}: (attr ?a key) needs a whole-attribute variable ?a")
            name, key = args[0], str(args[1])

            def get_attr(ctx, name=name, key=key):
                attrs = ctx.env[name]
                if key not in attrs:
                    raise ops.ShapeError(f"attribute {key!r} missing")
                return attrs[key]
            return get_attr
        if fn == "const":
            if len(args) != 1:
                raise RuleSyntaxError(f"{where}: const takes one class")
            a = compile_expr(args[0], kinds, where)

            def is_const(ctx):
                v = a(ctx)
                if not (isinstance(v, tuple) and len(v) == 2 and v[0] == "class"):
                    raise RuleSyntaxError(f"{where}: const needs a class")
                return ctx.const_of(v[1])
            return is_const
        if fn in _TYPE_FUNCS:
            arity, f = _TYPE_FUNCS[fn]
            if len(args) != arity:
                raise RuleSyntaxError(f"{where}: {fn} takes {arity} arguments")
            first = compile_expr(args[0], kinds, where)
            rest = [compile_expr(a, kinds, where) for a in args[1:]]

            def tf(ctx, first=first, rest=rest, f=f):
                v = first(ctx)
                return f(ctx.type_of(v[1]), *[_value(r(ctx), ctx) for r in rest])
            return tf
        if fn in _FUNCS:
            arity, f = _FUNCS[fn]
            if arity is not None and len(args) != arity:
                raise RuleSyntaxError(f"{where}: {fn} takes {arity} arguments")
            ps = [compile_expr(a, kinds, where) for a in args]
            if fn in ("same-pad", "enlarge-pad"):
                return lambda ctx, ps=ps, f=f: f(*[_typed(p(ctx), ctx) for p in ps])
            return lambda ctx, ps=ps, f=f: f(*[_value(p(ctx), ctx) for p in ps])
        raise RuleSyntaxError(f"{where}: unknown function {fn!r}")
    raise RuleSyntaxError(f"{where}: cannot read expression {to_text(x)}")


def _value(v, ctx):
    if isinstance(v, tuple) and len(v) == 2 and v[0] == "class":
        raise ops.ShapeError("a class used where a value is expected")
    return v


def _typed(v, ctx):
    if isinstance(v, tuple) and len(v) == 2 and v[0] == "class":
        return ctx.type_of(v[1])
    return v


# ---------------------------------------------------------------------------
# patterns and templates
# ---------------------------------------------------------------------------

def _op_call(x, where):
    if not (isinstance(x, list) and x and isinstance(x[0], Sym)):
        raise RuleSyntaxError(f"{where}: expected (op ...), got {to_text(x)}")
    op = str(x[0])
    children, attrs, whole = [], [], None
    i = 1
    while i < len(x):
        a = x[i]
        if isinstance(a, Sym) and a.startswith(":"):
            if i + 1 >= len(x):
                raise RuleSyntaxError(f"{where}: attribute {a} has no value")
            key = a[1:]
            if key == "*":
                if not _is_var(x[i + 1]):
                    raise RuleSyntaxError(f"{where}: ':*' needs a variable")
                whole = x[i + 1]
            else:
                attrs.append((key, x[i + 1]))
            i += 2
        else:
            if attrs or whole is not None:
                raise RuleSyntaxError(f"{where}: inputs must come before attributes in {to_text(x)}")
            children.append(a)
            i += 1
    return op, children, attrs, whole


def parse_pattern(x, kinds: dict, where: str = ""):
    """An LHS S-expr -> a Program tree (see ``egraph.Program``); fills ``kinds``."""
    if _is_var(x):
        _set_kind(kinds, x, "class", where)
        return ("var", str(x))
    if isinstance(x, list) and x and x[0] == "as":
        if len(x) != 3 or not _is_var(x[1]):
            raise RuleSyntaxError(f"{where}: (as ?name PATTERN)")
        inner = parse_pattern(x[2], kinds, where)
        if inner[0] == "var":
            raise RuleSyntaxError(f"{where}: (as ...) needs an operator pattern")
        _set_kind(kinds, x[1], "class", where)
        if inner[6] is not None:
            raise RuleSyntaxError(f"{where}: a pattern can have one name")
        return inner[:6] + (str(x[1]),)
    op, children, attrs, whole = _op_call(x, where)
    if op not in ops.OPS:
        raise RuleSyntaxError(f"{where}: unknown operator {op!r}")
    literals, avars = {}, []
    for key, v in attrs:
        if _is_var(v):
            _set_kind(kinds, v, "value", where)
            avars.append((key, str(v)))
        else:
            lit = _literal(v)
            if lit is _NOT_LITERAL:
                raise RuleSyntaxError(f"{where}: LHS attribute :{key} must be a literal or a variable")
            literals[key] = _freeze(lit)
    if whole is not None:
        _set_kind(kinds, whole, "attrs", where)
        whole = str(whole)
    kids = tuple(parse_pattern(c, kinds, where) for c in children)
    return ("op", op, literals, avars, whole, kids, None)


def _set_kind(kinds, name, kind, where):
    old = kinds.get(name)
    if old is not None and old != kind:
        raise RuleSyntaxError(f"{where}: {name} used both as {old} and {kind} variable")
    kinds[name] = kind


def canonical_pattern(tree) -> tuple[str, list[str], list[str]]:
    """TENSAT's CANONICAL: rename variables by first appearance.

    Returns (canonical text, original class-var names in canonical order,
    original attr-var names in canonical order, ``*`` marking whole-attrs).
    Two patterns equal up to renaming get the same text.
    """
    cvars: dict[str, str] = {}
    avars: dict[str, str] = {}

    def cv(n):
        if n not in cvars:
            cvars[n] = f"?{len(cvars)}"
        return cvars[n]

    def av(n):
        if n not in avars:
            avars[n] = f"${len(avars)}"
        return avars[n]

    def go(t):
        if t[0] == "var":
            return cv(t[1])
        _, op, literals, vs, whole, kids, bind = t
        parts = [op]
        parts += [go(k) for k in kids]
        # mirror Program's slot order: whole first, then value vars (per node, BFS order)
        return (op, tuple(go(k) for k in kids), tuple(sorted(literals.items(), key=lambda kv: kv[0])),
                tuple((k, av(n)) for k, n in vs), av("*" + whole) if whole else None,
                cv(bind) if bind else None)

    # BFS to mirror the Program's compile order for attr vars and binds
    def bfs_names(t):
        cls, attr = [], []
        work = [t]
        while work:
            node = work.pop(0)
            if node[0] == "var":
                if node[1] not in cls:
                    cls.append(node[1])
                continue
            _, op, literals, vs, whole, kids, bind = node
            if bind and bind not in cls:
                cls.append(bind)
            if whole and "*" + whole not in attr:
                attr.append("*" + whole)
            for k, n in vs:
                if n not in attr:
                    attr.append(n)
            work.extend(kids)
        return cls, attr

    cls_order, attr_order = bfs_names(tree)
    for n in cls_order:
        cv(n)
    for n in attr_order:
        av(n)
    text = repr(go(tree))
    return text, cls_order, attr_order


def _rename_tree(tree, cmap, amap):
    if tree[0] == "var":
        return ("var", cmap[tree[1]])
    _, op, literals, vs, whole, kids, bind = tree
    return ("op", op, dict(literals), [(k, amap[n]) for k, n in vs],
            amap["*" + whole][1:] if whole else None,
            tuple(_rename_tree(k, cmap, amap) for k in kids),
            cmap[bind] if bind else None)


@dataclass
class Template:
    """A compiled RHS node: an existing class, a let, or a new operator node."""

    kind: str                     # "var" | "node"
    name: str = ""                # var name
    op: str = ""
    children: tuple = ()
    items: tuple = ()             # ((key, compiled expr), ...)
    whole: str | None = None
    text: str = ""


def parse_template(x, kinds: dict, where: str) -> Template:
    if _is_var(x):
        if kinds.get(x) != "class":
            raise RuleSyntaxError(f"{where}: {x} is not a bound class variable")
        return Template("var", name=str(x), text=str(x))
    op, children, attrs, whole = _op_call(x, where)
    if op not in ops.OPS:
        raise RuleSyntaxError(f"{where}: unknown operator {op!r}")
    if whole is not None and kinds.get(whole) != "attrs":
        raise RuleSyntaxError(f"{where}: {whole} is not a whole-attribute variable")
    kids = tuple(parse_template(c, kinds, where) for c in children)
    items = tuple((key, compile_expr(v, kinds, where)) for key, v in attrs)
    return Template("node", op=op, children=kids, items=items, whole=str(whole) if whole else None,
                    text=to_text(x))


def _template_vars(t: Template, lets: dict) -> set:
    if t.kind == "var":
        if t.name in lets:
            return _template_vars(lets[t.name], lets)
        return {t.name}
    out = set()
    for c in t.children:
        out |= _template_vars(c, lets)
    return out


_NORMALIZE_CACHE: dict = {}


def _node_attrs(op: str, attrs: dict, input_types: list) -> Attrs:
    """Canonical attributes of a new node (defaults filled, as the frontend does)."""
    a = Attrs(attrs)
    key = (op, a, tuple(input_types))
    hit = _NORMALIZE_CACHE.get(key)
    if hit is None:
        normalize = getattr(ops, "normalize_attrs", None)
        if normalize is not None:
            hit = normalize(op, a, input_types)
        else:
            defaults = ops.get(op).defaults or {}
            hit = Attrs({**defaults, **a})
        if len(_NORMALIZE_CACHE) > 200000:
            _NORMALIZE_CACHE.clear()
        _NORMALIZE_CACHE[key] = hit
    return hit


_INFER_CACHE: dict = {}


def _infer(op: str, attrs: Attrs, input_types: list):
    """ops.infer_type, memoized (ShapeErrors too)."""
    key = (op, attrs, tuple(input_types))
    hit = _INFER_CACHE.get(key)
    if hit is None:
        try:
            hit = ops.infer_type(op, attrs, input_types)
        except ops.ShapeError as e:
            hit = e
        if len(_INFER_CACHE) > 200000:
            _INFER_CACHE.clear()
        _INFER_CACHE[key] = hit
    if isinstance(hit, ops.ShapeError):
        raise hit
    return hit


# ---------------------------------------------------------------------------
# rules
# ---------------------------------------------------------------------------

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
        self.rhs_vars = [_template_vars(t, letmap) for t in self.rhs]
        self.bare = [t.kind == "var" and t.name not in letmap for t in self.rhs]
        self.const_vars = set()
        for text, _ in self.where:
            for m in re.finditer(r"\(const (\?[^\s()]+)\)", text):
                self.const_vars.add(m.group(1))
        # raw-environment layout and memoized application plans (see `plan`)
        self._class_names = tuple(sorted({n for _, cls_order, _ in self.canon for n in cls_order}))
        self._other_names = tuple(sorted({n for _, _, attr_order in self.canon for n in attr_order}))
        self._plans: dict = {}
        self._plans_t: dict = {}  # single-pattern rules: plans keyed on search tuples
        # flat matches (see `apply_search_matches`): (roots..., values of `_flat_names`)
        self._flat_names = tuple(sorted({n for _, c, a in self.canon for n in (*c, *a)}))
        k = len(self.lhs)
        slot = {n: k + i for i, n in enumerate(self._flat_names)}
        self._flat = None
        if all(v in slot for vs in self.rhs_vars for v in vs):
            self._flat = (
                tuple(slot[n] for n in self._class_names),
                tuple(() if self.bare[i] else tuple(slot[v] for v in sorted(self.rhs_vars[i])) for i in range(k)),
                [tuple(slot[n] for n in (*c, *a)) for _, c, a in self.canon],
            )

    @property
    def multi(self) -> bool:
        return len(self.lhs) > 1

    def __repr__(self):
        return f"Rule({self.name!r}, {' ; '.join(self.lhs_text)})"

    # -- matching -------------------------------------------------------
    def join(self, matches: Sequence[list[tuple]]) -> list[dict]:
        """Compatible combinations of per-pattern matches (decanonicalized).

        ``matches[i]`` are the raw matches of the canonical program of
        pattern ``i``. Returns raw environments: name -> class id / value id /
        attrs id, plus ``("root", i)`` -> matched class of pattern ``i``.
        Combinations where two patterns match the same class are skipped.
        """
        per = []
        for (text, cls_order, attr_order), ms in zip(self.canon, matches):
            names = list(cls_order) + list(attr_order)
            per.append([(m[0], dict(zip(names, m[1:]))) for m in ms])
        if len(per) == 1:
            out = []
            for root, env in per[0]:
                env = dict(env)
                env[("root", 0)] = root
                out.append(env)
            return out
        partial = [({("root", 0): root}, env) for root, env in per[0]]
        for i in range(1, len(per)):
            bound = set()
            for _, env in partial[:1]:
                bound = set(env)
            names_i = set(per[i][0][1]) if per[i] else set()
            shared = sorted(bound & names_i)
            index: dict[tuple, list] = {}
            for root, env in per[i]:
                index.setdefault(tuple(env[n] for n in shared), []).append((root, env))
            nxt = []
            for roots, env in partial:
                for root, env_i in index.get(tuple(env[n] for n in shared), ()):
                    if root in roots.values():
                        continue
                    r2 = dict(roots)
                    r2[("root", i)] = root
                    e2 = dict(env)
                    e2.update(env_i)
                    nxt.append((r2, e2))
            partial = nxt
            if not partial:
                return []
        out = []
        for roots, env in partial:
            env = dict(env)
            env.update(roots)
            out.append(env)
        return out

    def decode(self, raw: dict) -> dict:
        """Raw ids -> values: class vars stay class ids; attr vars become values, attrs vars Attrs."""
        from .egraph import attrs_of, value_of

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

        def plan(t: Template):
            if t.kind == "var":
                v = local[t.name]
                return v if isinstance(v, tuple) else ("h", v)
            kids = [plan(c) for c in t.children]
            in_types = [ref_type(k) for k in kids]
            attrs = {}
            if t.whole is not None:
                attrs.update(local[t.whole])
            if t.items:
                ctx = ExprContext(local, lambda r: ref_type(r if isinstance(r, tuple) else ("h", r)),
                                  lambda r: ref_const(r if isinstance(r, tuple) else ("h", r)), kids)
                for key, f in t.items:
                    attrs[key] = f(ctx)
            a = _node_attrs(t.op, attrs, in_types)
            out_t = _infer(t.op, a, in_types)
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


    # -- memoized application -------------------------------------------
    def plan(self, raw: dict, type_of, const_of):
        """What applying the raw environment ``raw`` adds: ``(steps, outs)``, None or False.

        None when a precondition fails or a new node does not type-check;
        :data:`TYPE_MISMATCH` (False) when an output's type differs from its
        root class's (``("root", i)`` in ``raw``): merging them would break
        the e-graph's one-type-per-class invariant, so the application is
        skipped (and counted in ``EGraph.type_mismatches``). The roots' types
        follow from the bound classes' types and the attributes (a class's
        nodes all have its type), so memoizing on those stays valid.
        ``steps`` are ``(op id, attrs id, children)`` in creation order and
        ``outs`` one reference per output; a reference is a class id (>= 0) or
        ``-(i + 1)`` for the node created by step ``i``. The plan depends only
        on the environment's ids and its classes' types and constness, so
        ``apply_matches`` memoizes it on exactly those.
        """
        from .egraph import attrs_id, op_id

        env = self.decode(raw)
        if self.where and not self.check(env, type_of, const_of):
            return None
        steps = []

        def record(op, attrs, children):
            steps.append((op_id(op), attrs_id(attrs), tuple(children)))
            return -len(steps)
        out_types: list = []
        try:
            outs = self.instantiate(env, type_of, const_of, record, out_types)
        except ops.ShapeError:
            return None
        for i, t in enumerate(out_types):
            root = raw.get(("root", i))
            if root is not None and type_of(root) != t:
                if self.name not in _MISMATCH_LOGGED:
                    _MISMATCH_LOGGED.add(self.name)
                    log.warning("rule %s (%s): right side %d has type %s, the matched class %s; "
                                "application skipped", self.name, self.origin or "?", i, t, type_of(root))
                return TYPE_MISMATCH
        return tuple(steps), tuple(outs)


# ---------------------------------------------------------------------------
# rule files
# ---------------------------------------------------------------------------

_CLAUSES = ("rule", "lhs", "rhs", "let", "where", "example", "avoid")


def _strip_comment(line: str) -> str:
    out, in_str = [], False
    for ch in line:
        if ch == '"':
            in_str = not in_str
        if ch == "#" and not in_str:
            break
        out.append(ch)
    return "".join(out)


def _balance(text: str) -> int:
    depth, in_str = 0, False
    for ch in text:
        if ch == '"':
            in_str = not in_str
        elif not in_str:
            if ch in "([":
                depth += 1
            elif ch in ")]":
                depth -= 1
    return depth


def parse_rules(text: str, origin: str = "<string>") -> list[Rule]:
    """Parse rules in the language described in the module docstring."""
    blocks: list[tuple[int, str, list[tuple[str, str]]]] = []
    clause: list | None = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = _strip_comment(raw).strip()
        if not line:
            continue
        word = line.split(None, 1)[0]
        continuing = clause is not None and _balance(clause[1]) > 0
        if word in _CLAUSES and not continuing:
            rest = line[len(word):].strip()
            if word == "rule":
                if not re.fullmatch(r"[A-Za-z0-9_.\-]+", rest or ""):
                    raise RuleSyntaxError(f"{origin}:{lineno}: rule needs a name, got {rest!r}")
                blocks.append((lineno, rest, []))
                clause = None
                continue
            if not blocks:
                raise RuleSyntaxError(f"{origin}:{lineno}: {word} outside a rule")
            clause = [word, rest]
            blocks[-1][2].append(clause)
        else:
            if clause is None:
                raise RuleSyntaxError(f"{origin}:{lineno}: text outside a clause: {line!r}")
            clause[1] += " " + line
    rules = []
    names = set()
    for lineno, name, clauses in blocks:
        where = f"{origin}:{lineno} rule {name}"
        if name in names:
            raise RuleSyntaxError(f"{where}: duplicate rule name")
        names.add(name)
        rules.append(_build_rule(name, clauses, where))
        rules[-1].origin = f"{origin}:{lineno}"
    return rules


def _build_rule(name: str, clauses: list, where: str) -> Rule:
    kinds: dict[str, str] = {}
    lhs_src = [c[1] for c in clauses if c[0] == "lhs"]
    rhs_src = [c[1] for c in clauses if c[0] == "rhs"]
    if len(lhs_src) != 1 or len(rhs_src) != 1:
        raise RuleSyntaxError(f"{where}: needs exactly one lhs and one rhs clause")
    try:
        lhs_x = _split_on(read_all(tokenize(lhs_src[0])), ";")
        lhs = []
        lhs_text = []
        for g in lhs_x:
            if len(g) != 1:
                raise RuleSyntaxError(f"{where}: each source pattern must be one S-expression")
            lhs.append(parse_pattern(g[0], kinds, where))
            lhs_text.append(to_text(g[0]))
        lets = []
        for kw, body in clauses:
            if kw != "let":
                continue
            xs = read_all(tokenize(body))
            if len(xs) != 3 or not _is_var(xs[0]) or xs[1] != "=":
                raise RuleSyntaxError(f"{where}: let ?name = TEMPLATE")
            if xs[0] in kinds:
                raise RuleSyntaxError(f"{where}: let rebinds {xs[0]}")
            t = parse_template(xs[2], kinds, where)
            kinds[str(xs[0])] = "class"
            lets.append((str(xs[0]), t))
        rhs = []
        for g in _split_on(read_all(tokenize(rhs_src[0])), ";"):
            if len(g) != 1:
                raise RuleSyntaxError(f"{where}: each target must be one S-expression")
            rhs.append(parse_template(g[0], kinds, where))
        conds = []
        for kw, body in clauses:
            if kw == "where":
                for x in read_all(tokenize(body)):
                    conds.append((to_text(x), compile_expr(x, kinds, where)))
        examples = []
        for kw, body in clauses:
            if kw == "example":
                examples.append(_parse_example(body, kinds, where))
        avoid = []
        for kw, body in clauses:
            if kw == "avoid":
                for device in body.split("#", 1)[0].split():
                    if device not in DEVICE_KINDS:
                        raise RuleSyntaxError(f"{where}: avoid takes device kinds {DEVICE_KINDS}, not {device!r}")
                    avoid.append(device)
    except RuleSyntaxError:
        raise
    except (ValueError, IndexError) as e:
        raise RuleSyntaxError(f"{where}: {e}") from e
    source = "\n".join(f"  {kw} {body}" for kw, body in clauses)
    return Rule(name, lhs, rhs, lets, conds, examples, kinds, source, lhs_text, avoid=tuple(avoid))


#: the device kinds an ``avoid`` clause names
DEVICE_KINDS = ("cpu", "gpu")
_GPU_TARGET_KINDS = ("cuda", "rocm", "vulkan", "opencl", "metal", "nvptx", "webgpu")


def device_kind(target) -> str | None:
    """``cpu`` for an LLVM or C target, ``gpu`` for CUDA, ROCm, Vulkan..., None otherwise
    (the kind is the target string's first word: no TVM needed)."""
    words = str(target or "").split()
    kind = words[0] if words else ""
    if kind in ("llvm", "c"):
        return "cpu"
    if kind in _GPU_TARGET_KINDS:
        return "gpu"
    return None


def rules_for_target(rules: Iterable[Rule], target) -> tuple[list[Rule], list[str]]:
    """(the rules usable for ``target``, the names of those its device kind avoids)."""
    device = device_kind(target) if target is not None else "cpu"  # None: the host CPU
    kept, avoided = [], []
    for r in rules:
        if device in r.avoid:
            avoided.append(r.name)
        else:
            kept.append(r)
    return kept, avoided


def _parse_example(body: str, kinds: dict, where: str) -> dict:
    xs = read_all(tokenize(body))
    if len(xs) % 2:
        raise RuleSyntaxError(f"{where}: example needs ?var VALUE pairs")
    out: dict = {}
    for name, value in zip(xs[::2], xs[1::2]):
        if not isinstance(name, Sym) or not name.startswith("?"):
            raise RuleSyntaxError(f"{where}: example binding {name!r} is not a variable")
        base = name.split(".", 1)[0]
        if base not in kinds:
            raise RuleSyntaxError(f"{where}: example binds unknown variable {base}")
        lit = _literal(value)
        if lit is _NOT_LITERAL:
            raise RuleSyntaxError(f"{where}: example value for {name} must be a literal")
        out[str(name)] = _freeze(lit)
    return out


def load_rule_file(path) -> list[Rule]:
    with open(path) as f:
        return parse_rules(f.read(), str(path))


def rules_root():
    """The folder of shipped rule files, as an ``importlib.resources`` Traversable.

    The repository's ``rules/`` folder is installed as the data package
    ``relay_eqsat.rulesets`` (it cannot be ``relay_eqsat.rules``: this module
    has that name).
    """
    return importlib.resources.files("relay_eqsat.rulesets")


def shipped_rule_files() -> list[str]:
    """Names of the ``*.rules`` files shipped with the package."""
    return sorted(p.name for p in rules_root().iterdir() if p.name.endswith(".rules"))


def load_rules(name: str = "default") -> list[Rule]:
    """A shipped rule set by name (``default`` -> ``rules/default.rules``)."""
    fname = name if name.endswith(".rules") else name + ".rules"
    text = rules_root().joinpath(fname).read_text()
    return parse_rules(text, fname)


# ---------------------------------------------------------------------------
# applying rules to an e-graph
# ---------------------------------------------------------------------------

class Matcher:
    """Compiles rules' source patterns once; searches each canonical pattern
    once per e-graph state (TENSAT Algorithm 1, lines 1-10)."""

    def __init__(self, rules: Iterable[Rule]):
        from .egraph import Program

        self.rules = list(rules)
        self.programs: dict[str, Any] = {}
        self.rule_keys: dict[str, list[str]] = {}
        for r in self.rules:
            keys = []
            for tree, (text, cls_order, attr_order) in zip(r.lhs, r.canon):
                if text not in self.programs:
                    cmap = {n: f"?{i}" for i, n in enumerate(cls_order)}
                    amap = {n: ("*" if n.startswith("*") else "") + f"${i}" for i, n in enumerate(attr_order)}
                    self.programs[text] = Program(_rename_tree(tree, cmap, amap))
                keys.append(text)
            self.rule_keys[r.name] = keys

    def search(self, egraph, keys: Iterable[str] | None = None) -> dict[str, list]:
        """Matches of every (or the given) canonical pattern."""
        keys = self.programs.keys() if keys is None else keys
        return {k: egraph.search(self.programs[k]) for k in keys}

    def matches(self, rule: Rule, found: dict[str, list]) -> list[dict]:
        return rule.join([found[k] for k in self.rule_keys[rule.name]])


def egraph_add(egraph):
    """An ``add`` callback for ``Rule.instantiate`` on an e-graph."""
    from .egraph import attrs_id, op_id

    def add(op, attrs, children):
        return egraph.add_ids(op_id(op), attrs_id(attrs), children)
    return add


def apply_matches(egraph, rule: Rule, envs: list[dict], cycle_check=None, node_limit: int | None = None) -> int:
    """Apply ``rule`` at each raw environment (from ``Matcher.matches``).

    ``cycle_check(var_class, root_class) -> bool`` says whether ``root_class``
    is ``var_class`` or one of its descendants (a match is skipped if so for
    any output's variables, TENSAT's WILLCREATECYCLE); None disables it.
    Stops when the e-graph reaches ``node_limit`` nodes. Returns the number
    of applications that changed the e-graph (new nodes or merges).
    Call ``egraph.rebuild()`` afterwards.
    """
    type_of = egraph.class_type
    const_of = egraph.class_const
    sigs = egraph.class_sigs
    apply_plan = egraph.apply_plan
    plans = rule._plans
    class_names, other_names = rule._class_names, rule._other_names
    n = len(rule.lhs)
    fired = 0
    for raw in envs:
        if node_limit is not None and egraph.num_nodes >= node_limit:
            break
        roots = [raw[("root", i)] for i in range(n)]
        if cycle_check is not None:
            bad = False
            for i in range(n):
                if rule.bare[i]:
                    continue
                r = roots[i]
                for v in rule.rhs_vars[i]:
                    if cycle_check(raw[v], r):
                        bad = True
                        break
                if bad:
                    break
            if bad:
                continue
        # the plan is a function of the ids bound and the bound classes' types and constness
        classes = tuple([raw[k] for k in class_names])
        key = (classes, sigs(classes), tuple([raw[k] for k in other_names]))
        plan = plans.get(key, _NO_PLAN)
        if plan is _NO_PLAN:
            plan = rule.plan(raw, type_of, const_of)
            if len(plans) >= _PLAN_CACHE_SIZE:
                plans.clear()
            plans[key] = plan
        if plan is None:
            continue
        if plan is TYPE_MISMATCH:
            egraph.type_mismatches += 1
            continue
        if apply_plan(plan[0], plan[1], roots):
            fired += 1
    return fired


PLACEHOLDER = 1 << 30  # = relay_eqsat.egraph.core.PLACEHOLDER: class references in plan templates


def _flat_join(rule: Rule, matches: Sequence[list[tuple]], limit: int | None = None) -> list[tuple]:
    """`Rule.join` as flat tuples ``(root_0, ..., root_{k-1}, *values of rule._flat_names)``, same order.

    ``limit``: at most this many results (the first ones, in the same order;
    every stage of the join stops there), so a multi-pattern rule whose
    sources share a class with many matching nodes (e.g. dozens of ``dense``
    over one input after merges of merges) costs bounded time and memory."""
    k = len(rule.lhs)
    slots = rule._flat[2]
    if k == 1:
        m0 = matches[0]  # a search tuple is already flat: (root, *vars in canonical order)
        return m0 if limit is None or len(m0) <= limit else m0[:limit]
    width = k + len(rule._flat_names)
    partial = []
    for m in matches[0]:
        vals = [None] * width
        vals[0] = m[0]
        for j, sl in enumerate(slots[0]):
            vals[sl] = m[1 + j]
        partial.append(vals)
    bound = set(slots[0])
    for i in range(1, k):
        si = slots[i]
        shared = [(j, sl) for j, sl in enumerate(si) if sl in bound]
        index: dict[tuple, list] = {}
        for m in matches[i]:
            index.setdefault(tuple([m[1 + j] for j, _ in shared]), []).append(m)
        shared_slots = [sl for _, sl in shared]
        nxt = []
        cap = limit if limit is not None else -1
        for vals in partial:
            for m in index.get(tuple([vals[sl] for sl in shared_slots]), ()):
                root = m[0]
                if root in vals[:i]:
                    continue
                v2 = list(vals)
                v2[i] = root
                for j, sl in enumerate(si):
                    v2[sl] = m[1 + j]
                nxt.append(v2)
                if len(nxt) == cap:
                    break
            if len(nxt) == cap:
                break
        partial = nxt
        if not partial:
            return []
        bound |= set(si)
    return [tuple(v) for v in partial]


def apply_search_matches(egraph, rule: Rule, matches: Sequence[list[tuple]] | None, cycle=None,
                         node_limit: int | None = None, joined: list[tuple] | None = None) -> tuple[int, int]:
    """`apply_matches` straight from ``EGraph.search`` tuples, one list per
    source pattern (its canonical program's matches): returns (fired, filtered).

    Same applications, in the same order, as ``apply_matches`` on
    ``Matcher.matches``, but joined as flat tuples and applied in Cython
    (``EGraph.apply_matches_planned``) with memoized plans. ``cycle`` is
    None, a ``DescendantsMap`` (TENSAT's pre-filter) or a callable
    ``(var class, root class) -> bool``; ``filtered`` counts the matches it
    rejected. ``joined``: the matches already joined by ``_flat_join`` (then
    ``matches`` is not used).
    """
    if rule._flat is None:
        raise ValueError(f"rule {rule.name} needs the general path (apply_matches)")
    cls_pos, rhs_pos, _ = rule._flat
    k = len(rule.lhs)
    flat = _flat_join(rule, matches) if joined is None else joined
    if not flat:
        return 0, 0
    names = rule._flat_names if k > 1 else tuple(n for _, c, a in rule.canon for n in (*c, *a))
    if k == 1:
        # search tuples list their variables in canonical order, not sorted: remap positions
        order = {n: 1 + j for j, n in enumerate(names)}
        cls_pos = tuple(order[n] for n in rule._class_names)
        rhs_pos = (() if rule.bare[0] else tuple(order[v] for v in sorted(rule.rhs_vars[0])),)
    class_slots = set(cls_pos)
    other_pos = tuple(i for i in range(k, k + len(names)) if i not in class_slots)
    class_type, class_const = egraph.class_type, egraph.class_const

    def make_plan(m, classes):
        # a template: class classes[i] stands as PLACEHOLDER + i (order-preserving)
        where = {c: PLACEHOLDER + i for i, c in enumerate(classes)}
        raw = {n: where.get(v, v) if 0 <= i - k < len(names) and i in class_slots else v
               for i, (n, v) in enumerate(zip(names, m[k:]), start=k)}
        for i in range(k):
            raw[("root", i)] = m[i]

        def type_of(h):
            return class_type(classes[h - PLACEHOLDER] if h >= PLACEHOLDER else h)

        def const_of(h):
            return class_const(classes[h - PLACEHOLDER] if h >= PLACEHOLDER else h)
        return rule.plan(raw, type_of, const_of)
    return egraph.apply_matches_planned(flat, rule._plans_t, make_plan, k, cls_pos, other_pos, rhs_pos, cycle,
                                        -1 if node_limit is None else node_limit, _PLAN_CACHE_SIZE)


_NO_PLAN = object()
_PLAN_CACHE_SIZE = 500_000
TYPE_MISMATCH = False
"""``Rule.plan``'s value for an application whose right side's type differs from the matched class's."""
_MISMATCH_LOGGED: set = set()  # rule names already warned about


# ---------------------------------------------------------------------------
# TENSAT's rule format
# ---------------------------------------------------------------------------

_TENSAT_ACT = {0: None, 1: "sigmoid", 2: "nn.relu", 3: "tanh"}


@dataclass
class SkippedRule:
    line: str
    reason: str


class _Unmappable(Exception):
    pass


def load_tensat(text: str, multi: bool = False, prefix: str = "tensat") -> tuple[list[Rule], list[SkippedRule]]:
    """Read TENSAT's rule files (``converted.txt`` / ``converted_multi.txt``).

    One rule per line, ``LHS=>RHS`` in egg S-expressions over TENSAT's
    operators; with ``multi=True`` every two consecutive lines form one
    multi-pattern rule (TENSAT reads its multi-pattern file that way). The
    mapping onto our operators:

    * ``ewadd``/``ewmul``/``smul`` -> ``add``/``multiply``/``multiply``
    * ``matmul ACT a b`` (or the older ``matmul a b``) -> ``nn.matmul``
      (no transposes), wrapped in the activation (0 none, 1 sigmoid,
      2 relu, 3 tanh)
    * ``conv2d SH SW PAD ACT x w`` -> ``nn.conv2d`` with strides (SH, SW),
      dilation 1, groups ``C_in / w.shape[1]`` and padding SAME (PAD 0,
      TASO's formula) or VALID (PAD 1), then the activation; on the source
      side the padding/groups become preconditions
    * ``concat AXIS NDIM a b`` (or ``concat AXIS a b``) -> ``concatenate``
    * ``split_0``/``split_1 (split AXIS x)`` -> ``tuple_get_item`` of a
      ``split`` at the position of the nearest ``concat`` inside ``x`` (as
      TENSAT's analysis does): the first concatenated operand's size on the
      concat axis (that operand must be a variable)
    * ``relu``/``tanh``/``sigmoid`` -> ``nn.relu``/``tanh``/``sigmoid``;
      ``transpose x "1_0"`` -> ``transpose`` with those axes
    * ``enlarge a ref`` / ``enlarge KH KW a`` -> ``nn.pad`` of the kernel
      (``ref`` must be a variable)

    Rules using ``Iconv``, ``Cpool``, ``poolavg``, ``poolmax``, ``merge``,
    ``reshape``, ``noop``, ``input``/``weight`` leaves or anything else are
    returned as skipped, with the reason. Returns (rules, skipped).
    """
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    groups = [lines[i:i + 2] for i in range(0, len(lines), 2)] if multi else [[ln] for ln in lines]
    rules, skipped = [], []
    for idx, group in enumerate(groups):
        name = f"{prefix}-{'multi' if multi else 'single'}-{idx}"
        try:
            if multi and len(group) != 2:
                raise _Unmappable("a multi-pattern rule needs two lines")
            lhs_parts, rhs_parts, conds = [], [], []
            counter = itertools.count()
            for ln in group:
                if "=>" not in ln:
                    raise _Unmappable("no '=>'")
                l, r = ln.split("=>", 1)
                lx, rx = read_one(l), read_one(r)
                lhs_parts.append(_tensat_lhs(lx, conds, counter))
                rhs_parts.append(_tensat_rhs(rx))
            text_rule = (f"rule {name}\n  lhs " + " ; ".join(map(to_text, lhs_parts))
                         + "\n  rhs " + " ; ".join(map(to_text, rhs_parts)))
            if conds:
                text_rule += "\n  where " + " ".join(map(to_text, conds))
            rules.extend(parse_rules(text_rule, "tensat"))
        except (_Unmappable, RuleSyntaxError) as e:
            skipped.append(SkippedRule(" / ".join(group), str(e)))
    return rules, skipped


def _S(x):
    return Sym(x)


def _tensat_int(x) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise _Unmappable(f"expected an integer parameter, got {to_text(x)}")
    return x


def _wrap_act(act: int, expr):
    if act not in _TENSAT_ACT:
        raise _Unmappable(f"unknown activation mode {act}")
    name = _TENSAT_ACT[act]
    return expr if name is None else [_S(name), expr]


def _tensat_common(x, recur, side, conds=None, counter=None):
    """Translate one TENSAT node; ``recur`` translates children."""
    if _is_var(x):
        return x
    if not (isinstance(x, list) and x and isinstance(x[0], Sym)):
        raise _Unmappable(f"cannot map {to_text(x)}")
    op, args = str(x[0]), x[1:]
    if op in ("ewadd", "ewmul", "smul"):
        ours = "add" if op == "ewadd" else "multiply"
        return [_S(ours), recur(args[0]), recur(args[1])]
    if op in ("relu", "tanh", "sigmoid"):
        return [_S("nn.relu" if op == "relu" else op), recur(args[0])]
    if op == "matmul":
        if len(args) == 3:
            act, a, b = _tensat_int(args[0]), args[1], args[2]
        elif len(args) == 2:
            act, (a, b) = 0, args
        else:
            raise _Unmappable("matmul arity")
        core = [_S("nn.matmul"), recur(a), recur(b), _S(":transpose_a"), False, _S(":transpose_b"), False]
        return _wrap_act(act, core)
    if op == "conv2d":
        if len(args) != 6:
            raise _Unmappable("conv2d arity")
        sh, sw, pad, act = (_tensat_int(a) for a in args[:4])
        if pad not in (0, 1):
            raise _Unmappable(f"padding mode {pad}")
        x_, w_ = recur(args[4]), recur(args[5])
        if side == "rhs":
            padding = [_S("same-pad"), _S("%0"), _S("%1"), sh, sw] if pad == 0 else LitList([0, 0, 0, 0])
            core = [_S("nn.conv2d"), x_, w_, _S(":strides"), LitList([sh, sw]), _S(":padding"), padding,
                    _S(":dilation"), LitList([1, 1]),
                    _S(":groups"), [_S("//"), [_S("dim"), _S("%0"), 1], [_S("dim"), _S("%1"), 1]]]
        else:
            k = next(counter)
            xv = x_ if _is_var(x_) else _S(f"?cx{k}")
            wv = w_ if _is_var(w_) else _S(f"?cw{k}")
            av = _S(f"?ca{k}")
            core = [_S("nn.conv2d"), _as(xv, x_), _as(wv, w_), _S(":strides"), LitList([sh, sw]),
                    _S(":dilation"), LitList([1, 1]), _S(":*"), av]
            want_pad = [_S("same-pad"), xv, wv, sh, sw] if pad == 0 else LitList([0, 0, 0, 0])
            conds.append([_S("=="), [_S("attr"), av, _S("padding")], want_pad])
            conds.append([_S("=="), [_S("attr"), av, _S("groups")],
                          [_S("//"), [_S("dim"), xv, 1], [_S("dim"), wv, 1]]])
        return _wrap_act(act, core)
    if op == "concat":
        if len(args) == 4:
            axis, a, b = _tensat_int(args[0]), args[2], args[3]
        elif len(args) == 3:
            axis, a, b = _tensat_int(args[0]), args[1], args[2]
        else:
            raise _Unmappable("concat arity")
        return [_S("concatenate"), recur(a), recur(b), _S(":axis"), axis]
    if op == "transpose":
        if len(args) != 2 or not isinstance(args[1], (Str, Sym)):
            raise _Unmappable("transpose needs a permutation string")
        perm = LitList(int(p) for p in re.split(r"[-_]", str(args[1])) if p)
        return [_S("transpose"), recur(args[0]), _S(":axes"), perm]
    raise _Unmappable(f"operator {op!r} has no mapping")


def _as(name, pattern):
    if _is_var(pattern):
        return pattern
    return [_S("as"), name, pattern]


def _tensat_lhs(x, conds, counter):
    if isinstance(x, list) and x and x[0] in ("split_0", "split_1", "split", "enlarge"):
        raise _Unmappable(f"{x[0]} on the source side has no mapping")
    return _tensat_common(x, lambda c: _tensat_lhs(c, conds, counter), "lhs", conds, counter)


def _first_concat(x):
    """(first operand, axis) of the nearest concat inside a TENSAT expression (BFS)."""
    work = [x]
    while work:
        y = work.pop(0)
        if isinstance(y, list) and y and y[0] == "concat":
            axis = _tensat_int(y[1])
            first = y[3] if len(y) == 5 else y[2]
            return first, axis
        if isinstance(y, list):
            work.extend(y[1:])
    return None


def _tensat_rhs(x):
    if isinstance(x, list) and x and x[0] in ("split_0", "split_1"):
        inner = x[1]
        if not (isinstance(inner, list) and inner and inner[0] == "split" and len(inner) == 3):
            raise _Unmappable(f"{x[0]} of something other than split")
        axis = _tensat_int(inner[1])
        found = _first_concat(inner[2])
        if found is None or not _is_var(found[0]):
            raise _Unmappable("split without a concat of a variable to take its position from")
        first, caxis = found
        split = [_S("split"), _tensat_rhs(inner[2]), _S(":indices"), LitList([[_S("dim"), first, caxis]]),
                 _S(":axis"), axis]
        return [_S("tuple_get_item"), split, _S(":index"), 0 if x[0] == "split_0" else 1]
    if isinstance(x, list) and x and x[0] == "enlarge":
        args = x[1:]
        if len(args) == 2 and _is_var(args[1]):
            return [_S("nn.pad"), _tensat_rhs(args[0]), _S(":pad_width"),
                    [_S("enlarge-pad"), _S("%0"), args[1]], _S(":pad_value"), 0.0]
        if len(args) == 3 and all(isinstance(a, int) for a in args[:2]):
            kh, kw = args[0], args[1]
            return [_S("nn.pad"), _tensat_rhs(args[2]), _S(":pad_width"),
                    [_S("list"), LitList([0, 0]), LitList([0, 0]),
                     [_S("list"), [_S("//"), [_S("-"), kh, [_S("dim"), _S("%0"), 2]], 2],
                      [_S("//"), [_S("-"), kh, [_S("dim"), _S("%0"), 2]], 2]],
                     [_S("list"), [_S("//"), [_S("-"), kw, [_S("dim"), _S("%0"), 3]], 2],
                      [_S("//"), [_S("-"), kw, [_S("dim"), _S("%0"), 3]], 2]]],
                    _S(":pad_value"), 0.0]
        raise _Unmappable("enlarge with a non-variable reference")
    if isinstance(x, list) and x and x[0] == "split":
        raise _Unmappable("bare split (a tuple) as a target")
    return _tensat_common(x, _tensat_rhs, "rhs")
