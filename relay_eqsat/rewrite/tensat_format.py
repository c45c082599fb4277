"""TENSAT's rule format (``converted.txt`` / ``converted_multi.txt``) read into our rules.

``load_tensat(text)`` maps TENSAT's operators onto ours (see its docstring)
and returns the rules it could map and, with the reason, those it could not.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from .files import parse_rules
from .language import LitList, RuleSyntaxError, Str, Sym, is_var, read_one, to_text
from .rule import Rule

_TENSAT_ACT = {0: None, 1: "sigmoid", 2: "nn.relu", 3: "tanh"}


@dataclass
class SkippedRule:
    """A TENSAT rule ``load_tensat`` could not map, and why."""

    line: str
    reason: str


class _Unmappable(Exception):
    """A TENSAT construct with no mapping onto our operators."""


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
    if is_var(x):
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
            xv = x_ if is_var(x_) else _S(f"?cx{k}")
            wv = w_ if is_var(w_) else _S(f"?cw{k}")
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
    if is_var(pattern):
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
        if found is None or not is_var(found[0]):
            raise _Unmappable("split without a concat of a variable to take its position from")
        first, caxis = found
        split = [_S("split"), _tensat_rhs(inner[2]), _S(":indices"), LitList([[_S("dim"), first, caxis]]),
                 _S(":axis"), axis]
        return [_S("tuple_get_item"), split, _S(":index"), 0 if x[0] == "split_0" else 1]
    if isinstance(x, list) and x and x[0] == "enlarge":
        args = x[1:]
        if len(args) == 2 and is_var(args[1]):
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
