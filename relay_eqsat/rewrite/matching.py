"""Matching rules on an e-graph: searching source patterns and joining their matches.

A :class:`Matcher` compiles the rules' source patterns once and searches each
canonical pattern once per e-graph state (TENSAT Algorithm 1, lines 1-10).
A multi-pattern rule's matches are the compatible combinations of its
patterns' matches: :func:`join` gives them as raw environments (dicts),
:func:`flat_join` as flat tuples for ``apply_search_matches`` (joined in
Cython, ``egraph.join_flat``).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Iterable, Sequence

from relay_eqsat.egraph import Program, join_flat, op_id
from .patterns import rename_tree
from .rule import Rule


class Programs(Mapping):
    """Canonical pattern text -> compiled ``Program``, each compiled on first access.

    The operator names of a pattern are interned when it is added, in the
    order compiling it would intern them, so operator ids do not depend on
    which patterns were compiled."""

    def __init__(self):
        self._trees: dict[str, tuple] = {}
        self._compiled: dict[str, Program] = {}
        self.root_ops: dict[str, int] = {}  # text -> op id of the pattern's root

    def add(self, text: str, tree: tuple) -> None:
        self._trees[text] = tree
        work = [tree]
        while work:  # breadth-first, as ``Program`` compiles
            node = work.pop(0)
            if node[0] == "op":
                i = op_id(node[1])
                if node is tree:
                    self.root_ops[text] = i
                work.extend(node[5])

    def __getitem__(self, text: str) -> Program:
        p = self._compiled.get(text)
        if p is None:
            p = self._compiled[text] = Program(self._trees[text])
        return p

    def __contains__(self, text) -> bool:
        return text in self._trees

    def __iter__(self):
        return iter(self._trees)

    def __len__(self) -> int:
        return len(self._trees)


class Matcher:
    """Compiles rules' source patterns (on first use); searches each canonical
    pattern once per e-graph state (TENSAT Algorithm 1, lines 1-10)."""

    def __init__(self, rules: Iterable[Rule]):
        self.rules = list(rules)
        self.programs = Programs()
        self.rule_keys: dict[str, list[str]] = {}
        for r in self.rules:
            keys = []
            for tree, (text, cls_order, attr_order) in zip(r.lhs, r.canon):
                if text not in self.programs:
                    cmap = {n: f"?{i}" for i, n in enumerate(cls_order)}
                    amap = {n: ("*" if n.startswith("*") else "") + f"${i}" for i, n in enumerate(attr_order)}
                    self.programs.add(text, rename_tree(tree, cmap, amap))
                keys.append(text)
            self.rule_keys[r.name] = keys

    def search(self, egraph, keys: Iterable[str] | None = None) -> dict[str, list]:
        """Matches of every (or the given) canonical pattern (none, uncompiled,
        when the e-graph has no node with the pattern's root operator)."""
        keys = self.programs.keys() if keys is None else keys
        roots, count = self.programs.root_ops, egraph.op_count
        return {k: egraph.search(self.programs[k]) if count(roots[k]) else [] for k in keys}

    def matches(self, rule: Rule, found: dict[str, list]) -> list[dict]:
        """Raw environments of ``rule`` (see :func:`join`) from ``search``'s matches."""
        return join(rule, [found[k] for k in self.rule_keys[rule.name]])


def join(rule: Rule, matches: Sequence[list[tuple]]) -> list[dict]:
    """Compatible combinations of per-pattern matches (decanonicalized).

    ``matches[i]`` are the raw matches of the canonical program of
    pattern ``i``. Returns raw environments: name -> class id / value id /
    attrs id, plus ``("root", i)`` -> matched class of pattern ``i``.
    Combinations where two patterns match the same class are skipped.
    """
    per = []
    for (text, cls_order, attr_order), ms in zip(rule.canon, matches):
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


def flat_join(rule: Rule, matches: Sequence[list[tuple]], limit: int | None = None) -> list[tuple]:
    """:func:`join` as flat tuples ``(root_0, ..., root_{k-1}, *values of rule.flat_names)``, same order.

    ``limit``: at most this many results (the first ones, in the same order;
    every stage of the join stops there), so a multi-pattern rule whose
    sources share a class with many matching nodes (e.g. dozens of ``dense``
    over one input after merges of merges) costs bounded time and memory."""
    k = len(rule.lhs)
    if k == 1:
        m0 = matches[0]  # a search tuple is already flat: (root, *vars in canonical order)
        return m0 if limit is None or len(m0) <= limit else m0[:limit]
    return join_flat(list(matches), list(rule.flat_layout[2]), k + len(rule.flat_names),
                     -1 if limit is None else limit)
