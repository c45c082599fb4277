"""Rule files: parsing the rule language's clauses, loading shipped and user rule
sets, and choosing the rules for a target (``avoid`` clauses) and for exact math (``approx``).

``parse_rules(text)`` reads rules in the language of ``relay_eqsat.rewrite``;
``load_rules(name)`` a shipped set (``rules/<name>.rules``, through
``importlib.resources``); ``load_rule_file(path)`` any file.
"""
from __future__ import annotations

import importlib.resources
import re
from typing import Iterable

from relay_eqsat.graph import freeze
from .language import (NOT_LITERAL, RuleSyntaxError, Sym, compile_expr, is_var, literal, read_all, split_on, to_text,
    tokenize)
from .patterns import parse_pattern, parse_template
from .rule import Rule

_CLAUSES = ("rule", "for", "lhs", "rhs", "let", "where", "example", "avoid", "approx", "phase")
#: the phases a ``phase`` clause names: the e-graph search, the finishing of the extracted program, both
PHASES = ("search", "finish", "both")


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
    for lineno, family, family_clauses in blocks:
        for name, clauses in _expand(family, family_clauses, f"{origin}:{lineno} rule {family}"):
            where = f"{origin}:{lineno} rule {name}"
            if name in names:
                raise RuleSyntaxError(f"{where}: duplicate rule name")
            names.add(name)
            rules.append(_build_rule(name, clauses, where))
            rules[-1].origin = f"{origin}:{lineno}"
    return rules


_LOOP_VAR = re.compile(r"\$[A-Za-z_][A-Za-z0-9_]*")


def _expand(name: str, clauses: list, where: str) -> list[tuple[str, list]]:
    """A rule's ``(name, clauses)``; with a ``for $v OP...`` clause, one rule per ``OP``, named
    ``name.OP``, with ``$v`` replaced by ``OP`` in every other clause."""
    loops = [body for kw, body in clauses if kw == "for"]
    if not loops:
        return [(name, clauses)]
    words = loops[0].split()
    if len(loops) > 1 or len(words) < 2 or not _LOOP_VAR.fullmatch(words[0]):
        raise RuleSyntaxError(f"{where}: one clause for $name OP OP... (the ops the rule is written for)")
    var, values = words[0], words[1:]
    bad = [v for v in values if not re.fullmatch(r"[A-Za-z0-9_.]+", v)]
    if bad or len(set(values)) != len(values):
        raise RuleSyntaxError(f"{where}: for {var} takes distinct op names, got {' '.join(values)}")
    body = [(kw, text) for kw, text in clauses if kw != "for"]
    unknown = {m for _, text in body for m in _LOOP_VAR.findall(text)} - {var}
    if unknown:
        raise RuleSyntaxError(f"{where}: {', '.join(sorted(unknown))} is not the for clause's {var}")
    if not any(var in text for kw, text in body if kw == "lhs"):
        raise RuleSyntaxError(f"{where}: the lhs does not use {var}")
    return [(f"{name}.{v}", [[kw, text.replace(var, v)] for kw, text in body]) for v in values]


def _build_rule(name: str, clauses: list, where: str) -> Rule:
    kinds: dict[str, str] = {}
    lhs_src = [c[1] for c in clauses if c[0] == "lhs"]
    rhs_src = [c[1] for c in clauses if c[0] == "rhs"]
    if len(lhs_src) != 1 or len(rhs_src) != 1:
        raise RuleSyntaxError(f"{where}: needs exactly one lhs and one rhs clause")
    try:
        lhs_x = split_on(read_all(tokenize(lhs_src[0])), ";")
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
            if len(xs) != 3 or not is_var(xs[0]) or xs[1] != "=":
                raise RuleSyntaxError(f"{where}: let ?name = TEMPLATE")
            if xs[0] in kinds:
                raise RuleSyntaxError(f"{where}: let rebinds {xs[0]}")
            t = parse_template(xs[2], kinds, where)
            kinds[str(xs[0])] = "class"
            lets.append((str(xs[0]), t))
        rhs = []
        for g in split_on(read_all(tokenize(rhs_src[0])), ";"):
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
        approx = False
        for kw, body in clauses:
            if kw == "approx":
                if body.strip():  # comments are stripped already
                    raise RuleSyntaxError(f"{where}: approx takes nothing (a comment may say why)")
                approx = True
        phases = [body.strip() for kw, body in clauses if kw == "phase"]
        if len(phases) > 1 or (phases and phases[0] not in PHASES):
            raise RuleSyntaxError(f"{where}: one phase clause, one of {', '.join(PHASES)}")
        phase = phases[0] if phases else "search"
    except RuleSyntaxError:
        raise
    except (ValueError, IndexError) as e:
        raise RuleSyntaxError(f"{where}: {e}") from e
    source = "\n".join(f"  {kw} {body}" for kw, body in clauses)
    return Rule(name, lhs, rhs, lets, conds, examples, kinds, source, lhs_text, avoid=tuple(avoid), approx=approx,
                phase=phase)


#: the device kinds an ``avoid`` clause names: ``avx512`` is a CPU whose TVM code uses AVX-512
#: (16 fp32 lanes, 32 vector registers; ``relay_eqsat.cost.simd.simd_lanes``); ``tuned``: kernels
#: built under tuning records (their register tiles chosen by tuning, not TVM's fallback)
DEVICE_KINDS = ("cpu", "gpu", "avx512", "tuned")
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


def rules_for_target(rules: Iterable[Rule], target, fast_math: bool = True,
                     tuned: bool = False) -> tuple[list[Rule], list[str]]:
    """(the rules usable for ``target``, the names of those left out: the ones its device kind
    avoids, with ``tuned`` (kernels built under tuning records) the ones ``tuned`` avoids, and
    without ``fast_math`` the approximate ones)."""
    device = device_kind(target) if target is not None else "cpu"  # None: the host CPU
    kinds = {device} | ({"tuned"} if tuned else set())
    if device == "cpu" and target is not None:
        from relay_eqsat.cost.simd import simd_lanes  # no TVM: the target string's -mcpu/-mattr

        if simd_lanes(str(target)) == 16:
            kinds.add("avx512")
    kept, avoided = [], []
    for r in rules:
        if kinds & set(r.avoid) or (r.approx and not fast_math):
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
        lit = literal(value)
        if lit is NOT_LITERAL:
            raise RuleSyntaxError(f"{where}: example value for {name} must be a literal")
        out[str(name)] = freeze(lit)
    return out


def load_rule_file(path) -> list[Rule]:
    with open(path) as f:
        return parse_rules(f.read(), str(path))


def rules_root():
    """The folder of shipped rule files, as an ``importlib.resources`` Traversable.

    The repository's ``rules/`` folder is installed as the data package
    ``relay_eqsat.rulesets`` (``relay_eqsat.rewrite`` is this code's package).
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
