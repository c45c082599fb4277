"""Source patterns and target templates of rules.

A source pattern compiles to a Program tree for ``EGraph.search``
(``parse_pattern``); ``canonical_pattern`` renames its variables by first
appearance (TENSAT's CANONICAL) so that patterns equal up to renaming are
searched once. A target template (:class:`Template`, ``parse_template``) is
instantiated by ``Rule.instantiate``.
"""
from __future__ import annotations

from dataclasses import dataclass

from relay_eqsat import ops
from relay_eqsat.graph import freeze
from .language import NOT_LITERAL, RuleSyntaxError, Sym, compile_expr, is_var, literal, to_text


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
                if not is_var(x[i + 1]):
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
    if is_var(x):
        _set_kind(kinds, x, "class", where)
        return ("var", str(x))
    if isinstance(x, list) and x and x[0] == "as":
        if len(x) != 3 or not is_var(x[1]):
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
        if is_var(v):
            _set_kind(kinds, v, "value", where)
            avars.append((key, str(v)))
        else:
            lit = literal(v)
            if lit is NOT_LITERAL:
                raise RuleSyntaxError(f"{where}: LHS attribute :{key} must be a literal or a variable")
            literals[key] = freeze(lit)
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


def rename_tree(tree, cmap, amap):
    """A Program tree with class variables renamed by ``cmap`` and attribute variables by ``amap``."""
    if tree[0] == "var":
        return ("var", cmap[tree[1]])
    _, op, literals, vs, whole, kids, bind = tree
    return ("op", op, dict(literals), [(k, amap[n]) for k, n in vs],
            amap["*" + whole][1:] if whole else None,
            tuple(rename_tree(k, cmap, amap) for k in kids),
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
    """An RHS (or let) S-expr -> a :class:`Template`; its variables must be bound in ``kinds``."""
    if is_var(x):
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


def template_vars(t: Template, lets: dict) -> set:
    """The source-pattern class variables a template needs (through ``lets``)."""
    if t.kind == "var":
        if t.name in lets:
            return template_vars(lets[t.name], lets)
        return {t.name}
    out = set()
    for c in t.children:
        out |= template_vars(c, lets)
    return out

