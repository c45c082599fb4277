"""The motifs random fuzzing graphs are built from (:mod:`relay_eqsat.testing.fuzz`).

A motif reads its choices from a :class:`Choices` (small integers; choice 0 is always the
simplest option) and adds a few nodes to a :class:`GraphBuilder`, on top of an earlier value
of the type it needs or, when there is none, a fresh input: every sequence of motifs builds
a well-typed graph. Each motif is shaped to meet left-hand sides of ``rules/default.rules``
(the rules are named beside the branches that target them).
"""
from __future__ import annotations

import numpy as np

from .builder import DIMS, Choices, GraphBuilder


#: motif names, the simplest first (hypothesis shrinks a step's motif toward the front)
MOTIFS = ("unary", "binary", "dense", "conv", "matmul", "batch_matmul", "concat", "split", "movement",
          "pool", "norm", "slice_pad", "input")
#: relative frequency of each motif in :func:`random_recipe` (rule-targeted motifs more often)
MOTIF_WEIGHTS = {"unary": 2, "binary": 3, "dense": 3, "conv": 3, "matmul": 2, "batch_matmul": 2, "concat": 3,
                 "split": 3, "movement": 2, "pool": 1, "norm": 2, "slice_pad": 2, "input": 1}
#: choices per step (a motif reading more gets 0, the simplest option)
CHOICES = 16
CHOICE_RANGE = 1 << 16
#: ops never drawn, and why
EXCLUDED_OPS = {
    "var": "a leaf: every graph has inputs",
    "constant": "a leaf: weights and parameters are constants",
    "opaque": "an op kept verbatim by the frontend: it needs a Relay payload and computes nothing comparable",
    "tuple": "only as the output of a graph with several sinks: no rule matches a tuple",
    **{op: "an approx rule's right side: drawn graphs hold the exact function, which the rule rewrites"
       for op in ("fast_exp", "fast_tanh", "fast_erf", "fast_sigmoid", "nn.fast_softmax")},
    "batch_dense": "a rule's right side (batch-matmul-dense-per-batch): drawn graphs hold the batch_matmul "
                   "it rewrites",
}

WIDTHS = (4, 3, 2, 6, 5)
AWKWARD_ROWS = (9, 13, 10, 11)  # dense-pad-rows, batch-matmul-pad-rows/columns: > 8, not a multiple of 8
AWKWARD_CHANNELS = (18, 17, 20)  # conv-pad-out/in-channels, depthwise-conv-pad-channels: > 16, not of 16
WIDE = (37, 41)  # conv-widen-output: width > 31 whose largest divisor up to 31 is below 8
EPSILONS = (1e-5, 1e-3)
UNARY = ("nn.relu", "tanh", "sigmoid", "negative", "erf", "clip", "nn.leaky_relu", "exp", "sqrt", "rsqrt")
SPLIT_UNARY = ("nn.relu", "tanh", "sigmoid", "clip", "erf")  # the ops with an X-over-split rule
CONCAT_OPS = ("none", "nn.relu", "tanh", "sigmoid", "clip", "nn.leaky_relu", "erf", "add", "nn.bias_add",
              "nn.batch_norm", "nn.max_pool2d", "nn.avg_pool2d")


# -- element-wise --------------------------------------------------------------------------

def _unary(b: GraphBuilder, c: Choices, x: int, op: str) -> int:
    if op == "exp":
        return b.op("exp", [b.op("clip", [x], {"a_min": -4.0, "a_max": 4.0})])
    if op in ("sqrt", "rsqrt"):
        return b.op(op, [b.positive(x)])
    attrs = None
    if op == "clip":
        lo, hi = c.pick(((-1.0, 1.0), (0.0, 6.0), (-0.5, 0.5)))
        attrs = {"a_min": lo, "a_max": hi}
    elif op == "nn.leaky_relu":
        attrs = {"alpha": c.pick((0.1, 0.01, 0.2))}
    return b.op(op, [x], attrs)


def m_unary(b: GraphBuilder, c: Choices) -> None:
    """A chain of 1..3 element-wise functions."""
    x = b.source(c, lambda t: True)
    for _ in range(c.int(1, 3)):
        x = _unary(b, c, x, c.pick(UNARY))


def _partner(b: GraphBuilder, c: Choices, a: int) -> int:
    """A second operand for an element-wise op on ``a``: a broadcasting value, a constant, an input, a itself."""
    t = b.type(a)
    kind = c.pick(("const", "value", "vector", "scalar", "var", "self"))
    if kind == "value":
        cands = [v for v in reversed(b.values) if v != a and _broadcasts_to(b.type(v).shape, t.shape)]
        if cands:
            return cands[c.int(0, len(cands) - 1)]
    if kind == "vector" and t.ndim:
        return b.const(t.shape[-1:])
    if kind == "scalar":
        return b.const(())
    if kind == "var":
        return b.var(t.shape)
    if kind == "self":
        return a
    return b.const(t.shape)


def _broadcasts_to(s: tuple, target: tuple) -> bool:
    return len(s) <= len(target) and all(d in (1, e) for d, e in zip(reversed(s), reversed(target)))


def m_binary(b: GraphBuilder, c: Choices) -> None:
    """An element-wise binary op, or an algebraic shape over three operands (chain, distribute, factor)."""
    a = b.source(c, lambda t: True)
    op = c.pick(("add", "multiply", "subtract", "maximum", "minimum", "divide", "power"))
    form = c.pick(("plain", "chain", "distrib", "factor"))
    p, q = _partner(b, c, a), _partner(b, c, a)
    if c.flag():
        a, p = p, a
    if op == "divide":
        b.op("divide", [a, b.positive(p)])
    elif op == "power":
        b.op("power", [b.positive(a), b.const((), value=c.pick((2.0, 0.5, 3.0)))])
    elif form == "chain":
        b.op(op, [b.op(op, [a, p]), q])
    elif form == "distrib":
        b.op("multiply", [a, b.op("add", [p, q])])
    elif form == "factor":
        b.op("add", [b.op("multiply", [a, p]), b.op("multiply", [a, q])])
    else:
        b.op(op, [a, p])


# -- products ----------------------------------------------------------------------------

def _widths(c: Choices, n: int, awkward: bool = False) -> list[int]:
    options = AWKWARD_ROWS if awkward else WIDTHS
    if c.flag():
        return [c.pick(options) for _ in range(n)]
    return [c.pick(options)] * n


def _combine(b: GraphBuilder, c: Choices, ys: list[int], axis: int, how: str) -> None:
    """Branches left as outputs, concatenated along ``axis``, or summed (equal shapes)."""
    if how == "concat" and len(ys) > 1:
        b.op("concatenate", ys, {"axis": axis})
    elif how == "add" and len(ys) > 1 and len({b.type(y) for y in ys}) == 1:
        acc = ys[0]
        for y in ys[1:]:
            acc = b.op("add", [acc, y])


def m_dense(b: GraphBuilder, c: Choices) -> None:
    """dense layers over one input: parallel branches (+ bias, relu), a dense-dense chain, shared weights."""
    x = b.source(c, lambda t: 1 <= t.ndim <= 3,
                 lambda c: (c.pick(AWKWARD_ROWS), c.pick(DIMS)) if c.rare() else c.shape(c.pick((2, 3, 1))))
    t = b.type(x)
    k, last = t.shape[-1], t.ndim - 1
    form = c.pick(("branches", "chain", "shared-weight"))
    if form == "chain":  # dense-dense-fold
        n1, n2 = c.pick(WIDTHS), c.pick(WIDTHS)
        h = b.op("nn.dense", [x, b.const((n1, k), fan_in=k)])
        b.op("nn.dense", [h, b.const((n2, n1), fan_in=n1)])
        return
    if form == "shared-weight":  # dense-factor-inputs
        w = b.operand(c, (c.pick(WIDTHS), k), fan_in=k)
        x2 = _same_shape(b, c, x)
        b.op("add", [b.op("nn.dense", [x, w]), b.op("nn.dense", [x2, w])])
        return
    n = c.pick((2, 3, 1))
    bias, relu = c.flag(), c.rare()
    ys = []
    for width in _widths(c, n):
        y = b.op("nn.dense", [x, b.operand(c, (width, k), fan_in=k)])
        if bias:
            y = b.op("nn.bias_add", [y, b.const((width,))], {"axis": last})
        ys.append(b.op("nn.relu", [y]) if relu else y)
    _combine(b, c, ys, last, c.pick(("outputs", "concat", "add")))


def _same_shape(b: GraphBuilder, c: Choices, x: int) -> int:
    """Another value of ``x``'s type, or a fresh input of it."""
    cands = [v for v in reversed(b.values) if v != x and b.type(v) == b.type(x)]
    i = c.int(0, len(cands))
    return cands[i] if i < len(cands) else b.var(b.type(x).shape)


def m_matmul(b: GraphBuilder, c: Choices) -> None:
    """nn.matmul: parallel right-hand sides, shared left weight, association, distribution over add."""
    x = b.source(c, lambda t: t.ndim in (2, 3), lambda c: c.shape(c.pick((2, 3))))
    t = b.type(x)
    ta = t.ndim == 2 and c.rare()
    k = t.shape[-2] if ta else t.shape[-1]
    form = c.pick(("parallel", "assoc", "distrib", "factor", "shared-weight"))
    if form == "parallel":  # matmul-merge-rhs, concat-matmul-weights
        tb = c.flag()
        ys = [b.op("nn.matmul", [x, b.operand(c, (w, k) if tb else (k, w), fan_in=k)],
                   {"transpose_a": ta, "transpose_b": tb}) for w in _widths(c, c.pick((2, 3)))]
        _combine(b, c, ys, t.ndim - 1, c.pick(("outputs", "concat")))
        return
    if form == "shared-weight" and t.ndim == 2 and not ta:  # matmul-merge-lhs
        w = b.operand(c, (k, c.pick(WIDTHS)), fan_in=k)
        x2 = b.var((c.pick(DIMS), k))
        b.op("nn.matmul", [x, w])
        b.op("nn.matmul", [x2, w])
        return
    mm = {"transpose_a": ta}
    n = c.pick(WIDTHS)
    if form == "assoc" and t.ndim == 2:  # matmul-assoc, matmul-assoc-rev
        p = c.pick(WIDTHS)
        u, v = b.operand(c, (k, p), fan_in=k), b.operand(c, (p, n), fan_in=p)
        if c.flag():
            b.op("nn.matmul", [b.op("nn.matmul", [x, u], mm), v])
        else:
            b.op("nn.matmul", [x, b.op("nn.matmul", [u, v])], mm)
        return
    u, v = b.operand(c, (k, n), fan_in=k), b.operand(c, (k, n), fan_in=k)
    if form == "distrib":  # matmul-distrib-add
        b.op("nn.matmul", [x, b.op("add", [u, v])], mm)
    else:  # matmul-factor-add
        b.op("add", [b.op("nn.matmul", [x, u], mm), b.op("nn.matmul", [x, v], mm)])


def m_batch_matmul(b: GraphBuilder, c: Choices) -> None:
    """nn.batch_matmul: parallel right-hand sides, concatenated, a constant batch-1 weight, a transposed operand."""
    x = b.source(c, lambda t: t.ndim == 3, lambda c: (c.pick(DIMS), c.pick(AWKWARD_ROWS) if c.rare() else
                                                        c.pick(DIMS), c.pick(DIMS)))
    bsz, d1, d2 = b.type(x).shape
    ta, tb = c.rare(), c.pick((True, False))
    k = d1 if ta else d2
    attrs = {"transpose_a": ta, "transpose_b": tb}

    def rhs(n, batch=bsz, const=False):
        shape = (batch, n, k) if tb else (batch, k, n)
        return b.const(shape, fan_in=k) if const else b.operand(c, shape, fan_in=k, const_first=False)

    form = c.pick(("parallel", "const-weight", "transposed-b", "transposed-a"))
    if form == "parallel":  # batch-matmul-merge, concat-batch-matmul, batch-matmul-pad-columns
        ys = [b.op("nn.batch_matmul", [x, rhs(w)], attrs) for w in _widths(c, c.pick((2, 1, 3)), c.rare())]
        _combine(b, c, ys, 2, c.pick(("outputs", "concat")))
    elif form == "const-weight":  # batch-matmul-const-to-dense(-tb)
        b.op("nn.batch_matmul", [x, rhs(c.pick(WIDTHS), batch=1, const=True)], attrs)
    elif form == "transposed-b":  # batch-matmul-absorb-transpose-b: y = transpose(z, perm)
        n = c.pick(WIDTHS)
        y = (bsz, n, k) if tb else (bsz, k, n)
        perm = c.perm(3)
        z = b.var(tuple(y[perm.index(j)] for j in range(3)))
        b.op("nn.batch_matmul", [x, b.op("transpose", [z], {"axes": perm})], attrs)
    else:  # batch-matmul-absorb-transpose-a: x as transpose(transpose(x, perm), perm^-1)
        perm = c.perm(3)
        z = b.op("transpose", [x], {"axes": perm})
        xt = b.op("transpose", [z], {"axes": tuple(perm.index(j) for j in range(3))})
        b.op("nn.batch_matmul", [xt, rhs(c.pick(WIDTHS))], attrs)


def _conv_window(c: Choices, h: int, w: int, k: int) -> dict:
    """strides, padding, dilation for a ``k`` x ``k`` kernel on ``h`` x ``w`` (a valid output)."""
    s, p, d = c.pick((1, 2)), c.pick((0, 1)) if k > 1 else c.pick((0, 0, 1)), c.pick((1, 1, 2))
    for s, p, d in ((s, p, d), (1, k // 2, 1), (1, k // 2 + 1, 1)):
        oh = (h + 2 * p - d * (k - 1) - 1) // s + 1
        ow = (w + 2 * p - d * (k - 1) - 1) // s + 1
        if oh > 0 and ow > 0:
            break
    return {"strides": (s, s), "padding": (p, p, p, p), "dilation": (d, d)}


def _conv4d(c: Choices) -> tuple:
    """A fresh NCHW input: small, sometimes with 17..20 channels or a 37/41-wide image."""
    kind = c.pick(("small", "small", "small", "channels", "wide"))
    n = c.pick((1, 2))
    if kind == "channels":
        return (n, c.pick(AWKWARD_CHANNELS), c.pick((4, 3)), c.pick((4, 3)))
    if kind == "wide":
        return (1, c.pick((2, 1)), c.pick((3, 2)), c.pick(WIDE))
    return (n, c.pick((3, 4, 2, 6)), c.pick((5, 4, 6, 3)), c.pick((5, 4, 6, 3)))


def _batch_norm(b: GraphBuilder, x: int, axis: int, epsilon: float) -> int:
    """batch_norm(x, gamma, beta, mean, var)[0] with constant parameters."""
    ch = b.type(x).shape[axis]
    params = [b.const((ch,)), b.const((ch,)), b.const((ch,)), b.const((ch,), "positive")]
    bn = b.node("nn.batch_norm", [x] + params, {"axis": axis, "epsilon": epsilon})
    return b.op("tuple_get_item", [bn], {"index": 0})


def m_conv(b: GraphBuilder, c: Choices) -> None:
    """conv2d branches over one input (plain, depthwise, grouped; + bias, batch_norm, relu), combined."""
    x = b.source(c, lambda t: t.ndim == 4, _conv4d)
    _, ch, h, w = b.type(x).shape
    kind = c.pick(("plain", "plain", "depthwise", "grouped"))
    k = c.pick((1, 3, 2))
    window = _conv_window(c, h, w, k)
    groups = 1
    if kind == "depthwise" and ch > 1:
        groups = ch
    elif kind == "grouped":
        groups = next((g for g in (2, 3) if ch % g == 0), 1)
    n = c.pick((2, 1, 3))
    if groups == ch and groups > 1:
        outs = [ch * c.pick((1, 1, 2))] * n
    else:
        outs = [o * groups for o in _widths(c, n)] if not c.rare(5) else [c.pick(AWKWARD_CHANNELS)] * n
        if groups > 1 and any(o % groups for o in outs):
            outs = [groups * 2] * n
    post, eps = c.pick(("none", "bias", "bn", "relu")), c.pick(EPSILONS)
    how = c.pick(("outputs", "concat", "add", "shared-weight"))
    attrs = {**window, "groups": groups}
    if how == "shared-weight":  # conv-factor-inputs
        wt = b.operand(c, (outs[0], ch // groups, k, k), fan_in=ch // groups * k * k)
        b.op("add", [b.op("nn.conv2d", [x, wt], attrs), b.op("nn.conv2d", [_same_shape(b, c, x), wt], attrs)])
        return
    ys = []
    for o in outs:
        y = b.op("nn.conv2d", [x, b.operand(c, (o, ch // groups, k, k), fan_in=ch // groups * k * k)], attrs)
        if post == "bias":
            y = b.op("nn.bias_add", [y, b.const((o,))], {"axis": 1})
        elif post == "bn":
            y = _batch_norm(b, y, 1, eps)
        elif post == "relu":
            y = b.op("nn.relu", [y])
        ys.append(y)
    _combine(b, c, ys, 1, how)


# -- concatenate / split -------------------------------------------------------------------

def _resized(shape: tuple, axis: int, d: int) -> tuple:
    return shape[:axis] + (d,) + shape[axis + 1:]


def _per_part(b: GraphBuilder, c: Choices, op: str, parts: list[int], axis: int) -> list[int]:
    """``op`` applied to each part with the same attributes (what the concat-X rules match)."""
    if op == "none":
        return parts
    if op == "add":
        return [b.op("add", [p, _same_shape(b, c, p)]) for p in parts]
    if op == "nn.bias_add":
        return [b.op("nn.bias_add", [p, b.const((b.type(p).shape[axis],))], {"axis": axis}) for p in parts]
    if op == "nn.batch_norm":
        eps = c.pick(EPSILONS)
        return [_batch_norm(b, p, axis, eps) for p in parts]
    if op in ("nn.max_pool2d", "nn.avg_pool2d"):
        attrs = _pool_attrs(c, op, b.type(parts[0]).shape)
        return [b.op(op, [p], attrs) for p in parts]
    attrs = None
    if op == "clip":
        attrs = {"a_min": -1.0, "a_max": c.pick((1.0, 6.0))}
    elif op == "nn.leaky_relu":
        attrs = {"alpha": c.pick((0.1, 0.2))}
    return [b.op(op, [p], attrs) for p in parts]


def m_concat(b: GraphBuilder, c: Choices) -> None:
    """concatenate of 2..4 parts (each maybe through one op); then relu, split back, or add of two concats."""
    op = c.pick(CONCAT_OPS)
    pooled = op in ("nn.max_pool2d", "nn.avg_pool2d")
    x = b.source(c, (lambda t: t.ndim == 4) if pooled else (lambda t: t.ndim >= 1),
                 _conv4d if pooled else None)
    shape = b.type(x).shape
    axis = c.int(0, 1 if pooled else len(shape) - 1)
    n = c.pick((2, 3, 4))

    def fresh_parts():
        return [x] + [b.var(_resized(shape, axis, c.pick(DIMS))) for _ in range(n - 1)]

    parts = fresh_parts()
    post = c.pick(("none", "relu", "split-back", "add-concat"))
    ys = _per_part(b, c, op, parts, axis)
    cat = b.op("concatenate", ys, {"axis": axis})
    if post == "relu":  # relu-over-concat
        b.op("nn.relu", [cat])
    elif post == "split-back":  # split-concat-0/1
        bounds = np.cumsum([b.type(y).shape[axis] for y in ys[:-1]])
        s = b.node("split", [cat], {"indices": tuple(int(i) for i in bounds), "axis": axis})
        for i in range(len(ys)):
            if i == 0 or c.flag():
                b.op("tuple_get_item", [s], {"index": i})
    elif post == "add-concat" and len(ys) == 2:  # add-over-concat
        other = [b.var(b.type(y).shape) for y in ys]
        b.op("add", [cat, b.op("concatenate", other, {"axis": axis})])


def m_split(b: GraphBuilder, c: Choices) -> None:
    """split into 2..3 pieces, then per-piece ops that move through a split, or a re-concatenation."""
    x = b.source(c, lambda t: any(d >= 2 for d in t.shape),
                 lambda c: _resized(c.shape(c.pick((2, 3, 4))), 0, c.pick((4, 6, 5, 8))))
    shape = b.type(x).shape
    axes = [i for i, d in enumerate(shape) if d >= 2]
    post = c.pick(("unary", "concat-back", "transpose", "reshape-heads", "bias", "bn", "split-again", "none"))
    if post == "reshape-heads":  # the last axis, split at multiples of the head size
        axis = len(shape) - 1
        if shape[axis] % 2 or shape[axis] < 4:
            x = b.var(_resized(shape, axis, c.pick((8, 4, 12))))
            shape = b.type(x).shape
    else:
        axis = axes[c.int(0, len(axes) - 1)]
    dim = shape[axis]
    step = 2 if post == "reshape-heads" else 1
    points = list(range(step, dim, step))
    n = min(c.pick((2, 3)), len(points) + 1)
    first = points[c.int(0, len(points) - 1)] if n >= 2 else None
    rest = [p for p in points if p > first]
    indices = (first,) if n == 2 or not rest else (first, rest[c.int(0, len(rest) - 1)])
    s = b.node("split", [x], {"indices": indices, "axis": axis})
    pieces = [b.op("tuple_get_item", [s], {"index": i}) for i in range(len(indices) + 1)]
    if post == "unary":
        op = c.pick(SPLIT_UNARY)
        for p in pieces:
            if p == pieces[0] or c.flag():
                _unary(b, c, p, op)
    elif post == "concat-back":  # concat-split, concat-split-3
        b.op("concatenate", pieces, {"axis": axis})
    elif post == "transpose":  # transpose-over-split
        b.op("transpose", [pieces[c.int(0, len(pieces) - 1)]], {"axes": c.perm(len(shape))})
    elif post == "reshape-heads":  # reshape-heads-over-split
        p = pieces[c.int(0, len(pieces) - 1)]
        ps = b.type(p).shape
        b.op("reshape", [p], {"newshape": ps[:-1] + (ps[-1] // 2, 2)})
    elif post == "bias":  # split-bias-add-merge, split3-bias-add-merge
        for p in pieces:
            b.op("nn.bias_add", [p, b.const((b.type(p).shape[axis],))], {"axis": axis})
    elif post == "bn":  # split-batch-norm-merge
        eps = c.pick(EPSILONS)
        for p in pieces[:2]:
            _batch_norm(b, p, axis, eps)
    elif post == "split-again" and len(pieces) == 2:  # split-split-flatten-0/1
        j = c.int(0, 1)
        d = b.type(pieces[j]).shape[axis]
        if d >= 2:
            s2 = b.node("split", [pieces[j]], {"indices": (c.int(1, d - 1),), "axis": axis})
            for i in (0, 1):
                b.op("tuple_get_item", [s2], {"index": i})


# -- movement, pools, normalization, slices ---------------------------------------------------

def m_movement(b: GraphBuilder, c: Choices) -> None:
    """transpose/reshape pairs and identities."""
    x = b.source(c)
    t = b.type(x)
    kind = c.pick(("transpose2", "reshape2", "transpose", "reshape", "transpose-id", "reshape-id"))
    if kind.startswith("transpose"):
        first = c.perm(t.ndim) if kind != "transpose-id" else tuple(range(t.ndim))
        y = b.op("transpose", [x], {"axes": first})
        if kind == "transpose2":
            b.op("transpose", [y], {"axes": c.perm(t.ndim)})
    else:
        y = b.op("reshape", [x], {"newshape": t.shape if kind == "reshape-id" else c.factor_shape(t.size)})
        if kind == "reshape2":
            b.op("reshape", [y], {"newshape": c.factor_shape(t.size)})


def _pool_attrs(c: Choices, op: str, shape: tuple) -> dict:
    k = c.pick((2, 3, 1))
    s, p = c.pick((1, 2)), c.pick((0, k // 2))
    h, w = shape[2:]
    if min(h, w) + 2 * p < k:
        k, p = 1, 0
    ceil = c.rare()
    if ceil:  # no window may lie wholly in ceil_mode's extra padding (max_pool2d would give the lowest float)
        out = [(d + 2 * p - k + s - 1) // s + 1 for d in (h, w)]
        ceil = all((o - 1) * s <= d - 1 + p for o, d in zip(out, (h, w)))
    attrs = {"pool_size": (k, k), "strides": (s, s), "padding": (p, p, p, p), "ceil_mode": ceil}
    if op == "nn.avg_pool2d":
        attrs["count_include_pad"] = c.flag()
    return attrs


def m_pool(b: GraphBuilder, c: Choices) -> None:
    x = b.source(c, lambda t: t.ndim == 4, _conv4d)
    op = c.pick(("nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.global_max_pool2d"))
    attrs = _pool_attrs(c, op, b.type(x).shape) if op in ("nn.max_pool2d", "nn.avg_pool2d") else None
    b.op(op, [x], attrs)


def m_norm(b: GraphBuilder, c: Choices) -> None:
    """softmax, layer_norm, mean, batch_norm or bias_add along a drawn axis."""
    x = b.source(c)
    t = b.type(x)
    op = c.pick(("nn.softmax", "nn.layer_norm", "mean", "nn.batch_norm", "nn.bias_add"))
    axis = c.int(0, t.ndim - 1)
    if op == "nn.softmax":
        b.op(op, [x], {"axis": axis})
    elif op == "nn.layer_norm":
        ch = t.shape[axis]
        b.op(op, [x, b.const((ch,)), b.const((ch,))], {"axis": axis, "epsilon": c.pick(EPSILONS),
                                                         "center": not c.rare(), "scale": not c.rare()})
    elif op == "mean":
        axes = tuple(i for i in range(t.ndim) if i == axis or c.rare(3))
        b.op("mean", [x], {"axis": axes, "keepdims": c.flag()})
    elif op == "nn.batch_norm":
        _batch_norm(b, x, axis, c.pick(EPSILONS))
    else:
        b.op(op, [x, b.const((t.shape[axis],))], {"axis": axis})


def m_slice_pad(b: GraphBuilder, c: Choices) -> None:
    """strided_slice, nn.pad, or a leading-channel slice feeding a conv, relu or bias_add."""
    kind = c.pick(("channel-slice", "slice", "pad"))
    if kind == "channel-slice":  # conv-absorb-, relu-, bias-add-, depthwise-conv-channel-slice
        y = b.source(c, lambda t: t.ndim == 4 and t.shape[1] >= 3,
                     lambda c: (1, c.pick((20, 6, 5)), c.pick((4, 3)), c.pick((4, 3))))
        n, ch, h, w = b.type(y).shape
        keep = c.int(2, ch - 1)
        s = b.op("strided_slice", [y], {"begin": (0, 0, 0, 0), "end": (n, keep, h, w), "strides": (1, 1, 1, 1)})
        post = c.pick(("conv", "relu", "bias", "depthwise"))
        if post == "conv":
            k = c.pick((1, 3))
            b.op("nn.conv2d", [s, b.const((c.pick(WIDTHS), keep, k, k), fan_in=keep * k * k)],
                 _conv_window(c, h, w, k))
        elif post == "depthwise":
            b.op("nn.conv2d", [s, b.const((keep, 1, 3, 3), fan_in=9)], {**_conv_window(c, h, w, 3), "groups": keep})
        elif post == "bias":
            b.op("nn.bias_add", [s, b.const((keep,))], {"axis": 1})
        else:
            b.op("nn.relu", [s])
        return
    x = b.source(c)
    shape = b.type(x).shape
    if kind == "slice":
        begin = tuple(c.int(0, d - 1) for d in shape)
        end = tuple(c.int(lo + 1, d) for lo, d in zip(begin, shape))
        b.op("strided_slice", [x], {"begin": begin, "end": end, "strides": tuple(c.pick((1, 1, 2)) for _ in shape)})
    else:
        mode = c.pick(("constant", "constant", "edge", "reflect"))
        width = tuple((c.int(0, 1), c.int(0, 1)) for _ in shape)
        if mode == "reflect" and any(max(p) >= d for p, d in zip(width, shape)):
            mode = "constant"
        b.op("nn.pad", [x], {"pad_width": width, "pad_value": c.pick((0.0, 1.5)), "pad_mode": mode})


def m_input(b: GraphBuilder, c: Choices) -> None:
    b.var(c.shape(c.pick((2, 4, 3, 1))))


MOTIF_FUNCS = {"unary": m_unary, "binary": m_binary, "dense": m_dense, "conv": m_conv, "matmul": m_matmul,
                "batch_matmul": m_batch_matmul, "concat": m_concat, "split": m_split, "movement": m_movement,
                "pool": m_pool, "norm": m_norm, "slice_pad": m_slice_pad, "input": m_input}
assert tuple(MOTIF_FUNCS) == MOTIFS


