"""The rule language's reader and expressions (syntax: see ``relay_eqsat.rewrite``).

The reader turns text into S-expressions (``tokenize``, ``read_all``,
``read_one``; ``to_text`` prints them back): ``(...)`` is a list, ``[...]`` a
:class:`LitList`, symbols :class:`Sym`, quoted strings :class:`Str`.
``compile_expr`` compiles an expression (preconditions, attribute values) into
a function of an :class:`ExprContext`.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from relay_eqsat import ops
from relay_eqsat.graph import TensorType


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
    """Tokens of ``text``: brackets, ``;``, ``=>``, :class:`Str` and :class:`Sym` (commas dropped)."""
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
    """The one S-expression in ``text``."""
    xs = read_all(tokenize(text))
    if len(xs) != 1:
        raise RuleSyntaxError(f"expected one expression in {text!r}")
    return xs[0]


def is_var(x) -> bool:
    """``?name``: a variable."""
    return isinstance(x, Sym) and x.startswith("?") and len(x) > 1


def is_input_ref(x) -> bool:
    """``%i``: a template node's own input ``i``."""
    return isinstance(x, Sym) and re.fullmatch(r"%\d+", x) is not None


def split_on(items: list, sep: str) -> list[list]:
    """``items`` cut at every symbol ``sep``."""
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


def literal(x):
    """A literal S-expression as a frozen attribute value; :data:`NOT_LITERAL` if not literal."""
    if isinstance(x, LitList):
        vals = [literal(v) for v in x]
        if any(v is NOT_LITERAL for v in vals):
            return NOT_LITERAL
        return tuple(vals)
    if isinstance(x, (bool, int, float, Str)):
        return str(x) if isinstance(x, Str) else x
    return NOT_LITERAL


NOT_LITERAL = object()  # literal()'s value for a non-literal



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


def _max_divisor(n, limit):
    """The largest divisor of ``n`` that is at most ``limit`` (1 if none is larger)."""
    n, limit = int(n), int(limit)
    return next((d for d in range(min(n, limit), 1, -1) if n % d == 0), 1)


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
    "max-divisor": (2, _max_divisor),
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
    lit = literal(x)
    if lit is not NOT_LITERAL:
        return lambda ctx, v=lit: v
    if isinstance(x, LitList):
        parts = [compile_expr(v, kinds, where) for v in x]
        return lambda ctx: tuple(p(ctx) for p in parts)
    if is_var(x):
        kind = kinds.get(x)
        if kind is None:
            raise RuleSyntaxError(f"{where}: unbound variable {x}")
        if kind == "class":
            return lambda ctx, n=x: ("class", ctx.env[n])
        return lambda ctx, n=x: ctx.env[n]
    if is_input_ref(x):
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
