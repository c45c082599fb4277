"""Applying rules to an e-graph: application plans and the two application loops.

An application's *plan* (:func:`application_plan`) is what it adds: new nodes
and the classes to merge; it depends only on the bound ids and their classes'
types and constness, so it is memoized per rule. :func:`apply_matches` applies
raw environments (``Matcher.matches``) in Python; :func:`apply_search_matches`
applies flat joins of search tuples in Cython (``EGraph.apply_matches_planned``),
the same applications in the same order. Both skip matches the cycle filter
rejects and stop at the node cap they are given (the runner's node limit).
"""
from __future__ import annotations

import logging
from typing import Sequence

from relay_eqsat import ops
from relay_eqsat.egraph import attrs_id, op_id
from .matching import flat_join
from .rule import Rule

log = logging.getLogger(__name__)

PLACEHOLDER = 1 << 30  # = relay_eqsat.egraph.core.PLACEHOLDER: class references in plan templates
TYPE_MISMATCH = False
""":func:`application_plan`'s value for an application whose right side's type differs from the matched class's."""
_NO_PLAN = object()
_PLAN_CACHE_SIZE = 500_000
_MISMATCH_LOGGED: set = set()  # rule names already warned about


def application_plan(rule: Rule, raw: dict, type_of, const_of):
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
    :func:`apply_matches` memoizes it on exactly those.
    """
    env = rule.decode(raw)
    if rule.where and not rule.check(env, type_of, const_of):
        return None
    steps = []

    def record(op, attrs, children):
        steps.append((op_id(op), attrs_id(attrs), tuple(children)))
        return -len(steps)
    out_types: list = []
    try:
        outs = rule.instantiate(env, type_of, const_of, record, out_types)
    except ops.ShapeError:
        return None
    for i, t in enumerate(out_types):
        root = raw.get(("root", i))
        if root is not None and type_of(root) != t:
            if rule.name not in _MISMATCH_LOGGED:
                _MISMATCH_LOGGED.add(rule.name)
                log.warning("rule %s (%s): right side %d has type %s, the matched class %s; "
                            "application skipped", rule.name, rule.origin or "?", i, t, type_of(root))
            return TYPE_MISMATCH
    return tuple(steps), tuple(outs)


def apply_matches(egraph, rule: Rule, envs: list[dict], cycle_check=None, node_limit: int | None = None,
                  disjoint: bool = False) -> int:
    """Apply ``rule`` at each raw environment (from ``Matcher.matches``).

    ``cycle_check(var_class, root_class) -> bool`` says whether ``root_class``
    is ``var_class`` or one of its descendants (a match is skipped if so for
    any output's variables, TENSAT's WILLCREATECYCLE); None disables it.
    Stops when the e-graph reaches ``node_limit`` nodes. Returns the number
    of applications that changed the e-graph (new nodes or merges).
    ``disjoint``: apply non-overlapping matches only -- a match sharing a root
    class with an earlier application that changed the e-graph is skipped (a
    later call applies it, once the earlier ones are in: ``Runner.step``).
    Call ``egraph.rebuild()`` afterwards.
    """
    type_of = egraph.class_type
    const_of = egraph.class_const
    sigs = egraph.class_sigs
    apply_plan = egraph.apply_plan
    plans = rule.plans
    class_names, other_names = rule.class_names, rule.other_names
    n = len(rule.lhs)
    fired = 0
    used = set() if disjoint else None
    for raw in envs:
        if node_limit is not None and egraph.num_nodes >= node_limit:
            break
        roots = [raw[("root", i)] for i in range(n)]
        if used is not None and not used.isdisjoint(roots):
            continue
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
            plan = application_plan(rule, raw, type_of, const_of)
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
            if used is not None:
                used.update(roots)
    return fired


def apply_search_matches(egraph, rule: Rule, matches: Sequence[list[tuple]] | None, cycle=None,
                         node_limit: int | None = None, joined: list[tuple] | None = None,
                         disjoint: bool = False) -> tuple[int, int]:
    """:func:`apply_matches` straight from ``EGraph.search`` tuples, one list per
    source pattern (its canonical program's matches): returns (fired, filtered).

    Same applications, in the same order, as ``apply_matches`` on
    ``Matcher.matches``, but joined as flat tuples and applied in Cython
    (``EGraph.apply_matches_planned``) with memoized plans. ``cycle`` is
    None, a ``DescendantsMap`` (TENSAT's pre-filter) or a callable
    ``(var class, root class) -> bool``; ``filtered`` counts the matches it
    rejected. ``joined``: the matches already joined by ``flat_join`` (then
    ``matches`` is not used).
    """
    if rule.flat_layout is None:
        raise ValueError(f"rule {rule.name} needs the general path (apply_matches)")
    cls_pos, rhs_pos, _ = rule.flat_layout
    k = len(rule.lhs)
    flat = flat_join(rule, matches) if joined is None else joined
    if not flat:
        return 0, 0
    names = rule.flat_names if k > 1 else tuple(n for _, c, a in rule.canon for n in (*c, *a))
    if k == 1:
        # search tuples list their variables in canonical order, not sorted: remap positions
        order = {n: 1 + j for j, n in enumerate(names)}
        cls_pos = tuple(order[n] for n in rule.class_names)
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

        types = [class_type(c) for c in classes]
        consts = [class_const(c) for c in classes]

        def type_of(h):
            return types[h - PLACEHOLDER] if h >= PLACEHOLDER else class_type(h)

        def const_of(h):
            return consts[h - PLACEHOLDER] if h >= PLACEHOLDER else class_const(h)
        return application_plan(rule, raw, type_of, const_of)
    return egraph.apply_matches_planned(flat, rule.flat_plans, make_plan, k, cls_pos, other_pos, rhs_pos, cycle,
                                        node_limit, _PLAN_CACHE_SIZE,
                                        set() if disjoint else None)
