"""Numerical verification of rewrite rules; user rules are verified on load.

:func:`verify_rule` checks a rule on concrete instances of its left side
(``relay_eqsat.rewrite.instances``): the rule's ``example`` bindings, or, for a
rule without any, instances drawn at random until ``trials`` of them are
found on which the left side type-checks and the preconditions hold. On each
instance it checks that

* the e-matcher finds the instance, with the preconditions true (else the
  example is no instance of the rule; a drawn one is skipped);
* the right side, instantiated by the code the e-graph uses, type-checks and
  has the left side's type;
* both sides compute the same outputs with the numpy semantics of the op
  table (``|right - left| <= atol + rtol * |left|``, :data:`RTOL`,
  :data:`ATOL`) on random inputs and constants twice: standard normal, and
  positive (``|z| + 0.5``: batch_norm variances, square roots); a NaN on one
  side only is a difference;
* applying the rule inside an e-graph merges each matched class with its
  target.

The verdict is a :class:`RuleCheck`: ``verified``, ``wrong`` (a check failed)
or ``unverifiable`` (no instance: an example that does not fit the rule, or
none found in ``draws`` random draws).

:func:`check_user_rules` (called by ``relay_eqsat.pipeline.resolve_rules``
for rule files and Rule lists, so by every entry point) verifies each rule
once per process (verdicts cached per rule text) and raises
:class:`RuleVerificationError`, a ValueError naming the rule, its file and
line and what failed, for a wrong rule and, unless ``trust=True``, an
unverifiable one. The shipped rule sets are verified by the test suite
(tests/test_rules.py), not on load. TVM-free.
"""
from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from relay_eqsat import ops
from relay_eqsat.egraph import EGraph
from .instances import Instance, NoInstance, draw, from_example, value_text
from . import Matcher, Rule, apply_matches, load_rules, parse_rules, shipped_rule_files

RTOL = 1e-4
ATOL = 1e-5
#: instances checked per rule without examples, and random draws allowed to find them
TRIALS = 3
DRAWS = 300
#: most constness assignments tried for an example whose (const ?v) preconditions fail as written
_MAX_CONST_ASSIGNMENTS = 16

VERIFIED, WRONG, UNVERIFIABLE = "verified", "wrong", "unverifiable"


@dataclass
class InstanceResult:
    label: str          # "example 1", "drawn instance 2"
    bindings: str       # the instance in the example syntax
    max_error: float    # largest |right - left| over both input draws


@dataclass
class RuleCheck:
    """The verdict on one rule."""

    rule: str
    origin: str
    status: str                   # VERIFIED, WRONG or UNVERIFIABLE
    problem: str = ""
    instances: list[InstanceResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == VERIFIED

    def __bool__(self) -> bool:
        return self.ok

    @property
    def message(self) -> str:
        where = f" ({self.origin})" if self.origin else ""
        return f"rule {self.rule!r}{where}: {self.problem or self.status}"


class RuleVerificationError(ValueError):
    """A user rule is wrong or cannot be verified; ``checks`` holds the failed verdicts."""

    def __init__(self, checks: Sequence[RuleCheck]):
        self.checks = list(checks)
        msg = self.checks[0].message
        if len(self.checks) > 1:
            msg += f" (and {len(self.checks) - 1} more: {', '.join(c.rule for c in self.checks[1:])})"
        super().__init__(msg)


class _Fail(Exception):
    def __init__(self, status: str, problem: str):
        super().__init__(problem)
        self.status, self.problem = status, problem


class _Skip(Exception):
    """A drawn instance on which the right side does not type-check: the
    e-graph skips such a match (the rule language's shape check), so it is no
    counterexample."""


# -- one rule ---------------------------------------------------------------------

def verify_rule(rule, examples: Iterable[dict] | None = None, trials: int = TRIALS, seed: int = 0,
                draws: int = DRAWS) -> RuleCheck:
    """Verify ``rule`` on ``examples`` (default: its own ``example`` bindings;
    example ``i`` uses inputs of seed ``seed + i``) or, without any, on
    ``trials`` instances drawn at random (at most ``draws`` draws)."""
    examples = list(rule.examples if examples is None else examples)
    check = RuleCheck(rule.name, getattr(rule, "origin", ""), VERIFIED)
    matcher = Matcher([rule])
    try:
        if examples:
            for i, example in enumerate(examples):
                label = f"example {i + 1}"
                inst, match = _example_instance(rule, matcher, example, label)
                check.instances.append(_guarded(_check_instance, rule, inst, match, seed + i, label))
        else:
            rng = np.random.default_rng(seed)
            skipped = ""
            for _ in range(draws):
                if len(check.instances) >= trials:
                    break
                consts = {v for v in sorted(rule.const_vars) if rng.random() < 0.75}
                try:
                    inst = draw(rule, rng, consts)
                except NoInstance:
                    continue
                match = _match(rule, matcher, inst)
                if isinstance(match, str):
                    continue
                label = f"drawn instance {len(check.instances) + 1}"
                try:
                    check.instances.append(_guarded(_check_instance, rule, inst, match, seed + len(check.instances),
                                                    label, drawn=True))
                except _Skip as e:
                    skipped = skipped or str(e)
            if not check.instances:
                found = (f"the right side never type-checks where the left side matches (e.g. {skipped})"
                         if skipped else "no instance on which the left side type-checks and the "
                                         "preconditions hold was found")
                raise _Fail(UNVERIFIABLE, f"no example, and {found} in {draws} random draws; add an `example` line")
    except _Fail as e:
        check.status, check.problem = e.status, e.problem
    return check


def _guarded(check, rule, inst: Instance, match, seed: int, label: str, drawn: bool = False) -> InstanceResult:
    """``check`` on one instance; an unexpected error in the rule's
    expressions or the evaluation is a verdict, not a crash."""
    try:
        return check(rule, inst, match, seed, label, drawn)
    except (_Fail, _Skip):
        raise
    except Exception as e:  # noqa: BLE001 - reported in the verdict
        raise _Fail(UNVERIFIABLE, f"checking {label} ({inst.describe()}) failed: {type(e).__name__}: {e}") from e


def _example_instance(rule, matcher, example: dict, label: str):
    """The instance of an example and its match; tries other constness for (const ?v) variables."""
    base = set(rule.const_vars)
    names = sorted(base)
    options = [base] + [set(c) for r in range(len(names) + 1) for c in itertools.combinations(names, r)
                        if set(c) != base][:_MAX_CONST_ASSIGNMENTS - 1]
    why = ""
    for consts in options:
        try:
            inst = from_example(rule, example, consts)
        except NoInstance as e:
            raise _Fail(UNVERIFIABLE, f"{label} is no instance of the left side: {e}") from None
        match = _match(rule, matcher, inst)
        if not isinstance(match, str):
            return inst, match
        why = why or match
    raise _Fail(UNVERIFIABLE, f"{label} ({_bindings(example)}) is no instance of the rule: {why}")


def _bindings(example: dict) -> str:
    return " ".join(f"{k} {value_text(v)}" for k, v in example.items())


def _match(rule, matcher, inst: Instance):
    """(e-graph, graph node -> class, raw environment) of the match on the
    instance's roots with true preconditions; a string saying why not."""
    g, roots = inst.graph, inst.roots
    g.set_output(roots[0])  # add_graph inserts every node; the output only names a class
    eg = EGraph()
    mapping: list[int] = []
    eg.add_graph(g, mapping)
    want = [eg.find(mapping[r]) for r in roots]
    envs = [e for e in matcher.matches(rule, matcher.search(eg))
            if [eg.find(e[("root", i)]) for i in range(len(roots))] == want]
    if not envs:
        return "the e-matcher does not find the left side on it"
    for raw in envs:
        if rule.check(rule.decode(raw), eg.class_type, eg.class_const):
            return eg, mapping, raw
    return "the preconditions are false on it"


def _check_instance(rule, inst: Instance, match, seed: int, label: str, drawn: bool = False) -> InstanceResult:
    eg, mapping, raw = match
    g, roots = inst.graph, inst.roots
    where = f"{label} ({inst.describe()})"
    class_to_node: dict[int, int] = {}
    for nid, c in enumerate(mapping):
        class_to_node.setdefault(eg.find(c), nid)
    env = {k: (class_to_node[eg.find(v)] if rule.kinds.get(k) == "class" else v)
           for k, v in rule.decode(raw).items()}
    is_const = g.is_constant()
    try:
        outs = rule.instantiate(env, lambda h: g[h].type, lambda h: is_const[h],
                                lambda op, attrs, kids: g.add(op, kids, attrs))
    except (ops.ShapeError, ValueError) as e:
        if drawn:
            raise _Skip(f"{inst.describe()}: {e}") from None
        raise _Fail(WRONG, f"the right side does not type-check on {where}: {e}") from None
    for i, (left, right) in enumerate(zip(roots, outs)):
        if g[left].type != g[right].type:
            which = f" {i + 1}" if len(roots) > 1 else ""
            raise _Fail(WRONG, f"the right side{which} has type {g[right].type}, the left side {g[left].type}, "
                               f"on {where}")
    worst = 0.0
    finite = False
    for positive in (False, True):
        inputs = _fill(g, seed, positive)
        lhs_finite = True
        for left, right in zip(roots, outs):
            a, b = _evaluate(g, left, inputs), _evaluate(g, right, inputs)
            lhs_finite = lhs_finite and all(np.isfinite(x).all() for x in a)
            err = _difference(a, b)
            if err is not None:
                what = (f"differ by {err:.3g}" if np.isfinite(err)
                        else "differ (a NaN or an infinity on one side only)")
                inputs_kind = "positive" if positive else "standard normal"
                raise _Fail(WRONG, f"left and right {what} on {where}, {inputs_kind} inputs")
            worst = max(worst, _max_abs(a, b))
        finite = finite or lhs_finite
    if not finite:
        raise _Fail(UNVERIFIABLE, f"the left side computes NaN or infinity on {where} for every input tried")
    # the same application inside the e-graph merges each matched class with its target
    apply_matches(eg, rule, [raw])
    eg.rebuild()
    targets = rule.instantiate(rule.decode(raw), eg.class_type, eg.class_const, eg.add)
    eg.rebuild()
    if any(eg.find(t) != eg.find(raw[("root", i)]) for i, t in enumerate(targets)):
        raise _Fail(WRONG, f"applying it in an e-graph does not merge the matched classes with the right "
                           f"side on {where}")
    return InstanceResult(label, inst.describe(), worst)


def _fill(g, seed: int, positive: bool) -> dict:
    """Random constants (written into ``g``; a scalar the rule names by value keeps it) and inputs:
    standard normal, or |z| + 0.5."""
    rng = np.random.default_rng(seed if not positive else seed + 104729)
    draw_ = (lambda shape: np.abs(rng.standard_normal(shape)) + 0.5) if positive else rng.standard_normal
    for n in g.nodes:
        if n.op == "constant" and "value" not in n.attrs:
            g.constants[n.attrs["name"]] = np.asarray(draw_(n.type.shape)).astype(n.type.dtype)
    if not positive:
        return g.random_inputs(seed)
    return {name: np.asarray(draw_(t.shape)).astype(t.dtype) for name, t in g.input_types().items()}


def _evaluate(g, node: int, inputs: dict) -> list:
    g.set_output(node)
    with np.errstate(all="ignore"):  # NaN from sqrt of a negative variance: compared, not warned about
        value = g.evaluate(inputs)
    return [np.asarray(v, dtype=np.float64) for v in (value if isinstance(value, tuple) else (value,))]


def _difference(a: list, b: list) -> float | None:
    """None if ``b`` matches ``a`` within tolerance; else the largest |b - a| (inf: NaN/inf on one side)."""
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
        return float("inf")
    for x, y in zip(a, b):
        if not np.isclose(y, x, rtol=RTOL, atol=ATOL, equal_nan=True).all():
            both = np.isfinite(x) & np.isfinite(y)
            if (np.isfinite(x) != np.isfinite(y)).any() or not both.any():
                return float("inf")
            return _max_abs(a, b)
    return None


def _max_abs(a: list, b: list) -> float:
    out = 0.0
    for x, y in zip(a, b):
        both = np.isfinite(x) & np.isfinite(y)
        if both.any():
            out = max(out, float(np.abs(x[both] - y[both]).max()))
    return out


# -- user rules on load -------------------------------------------------------------

_VERDICTS: dict[tuple, RuleCheck] = {}
_TRUSTED: set[tuple] = set()
_SHIPPED: set[tuple] | None = None


def rule_key(rule) -> tuple:
    """What a verdict is cached on: the rule's name and text (clauses, examples included)."""
    return rule.name, rule.source


def _shipped_keys() -> set[tuple]:
    global _SHIPPED
    if _SHIPPED is None:
        _SHIPPED = {rule_key(r) for f in shipped_rule_files() for r in load_rules(f)}
    return _SHIPPED


def check_user_rules(rules: Sequence, trust: bool = False) -> list[RuleCheck]:
    """Verify user rules (each rule text once per process; shipped rules are
    skipped: the test suite verifies them). Raises RuleVerificationError for a
    wrong rule and, unless ``trust`` (remembered for the rest of the process),
    an unverifiable one. Returns the verdicts of the rules checked."""
    bad = [r for r in rules if not isinstance(r, Rule)]
    if bad:
        raise ValueError(f"rules must be Rule objects (relay_eqsat.rewrite.Rule), not {bad[0]!r}")
    checks, failed = [], []
    for rule in rules:
        key = rule_key(rule)
        if key in _shipped_keys():
            continue
        check = _VERDICTS.get(key)
        if check is None:
            check = _VERDICTS[key] = verify_rule(rule)
        if check.origin != getattr(rule, "origin", check.origin):
            check = RuleCheck(check.rule, rule.origin, check.status, check.problem, check.instances)
        checks.append(check)
        if check.status == UNVERIFIABLE and trust:
            _TRUSTED.add(key)
        if check.status == WRONG or (check.status == UNVERIFIABLE and key not in _TRUSTED):
            failed.append(check)
    if failed:
        raise RuleVerificationError(failed)
    return checks


def load_user_rule_file(path, trust: bool = False) -> list:
    """Rules of a user rule file, verified (:func:`check_user_rules`).
    ValueError if it cannot be read or parsed; RuleVerificationError if a rule fails."""
    path = os.fspath(path)
    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise ValueError(f"cannot read rule file {path!r}: {e.strerror or e}") from None
    rules = parse_rules(text, path)
    check_user_rules(rules, trust=trust)
    return rules


__all__ = ["verify_rule", "check_user_rules", "load_user_rule_file", "RuleCheck", "InstanceResult",
           "RuleVerificationError", "VERIFIED", "WRONG", "UNVERIFIABLE", "RTOL", "ATOL"]
