"""Independent parts of an acyclic extraction problem, solved one by one.

Exact extractors spend their time proving (CP-SAT's LP bound and RC2's cores
start well below the optimum), and a solver proves a sum of independent
problems much more slowly than it proves each of them: the choices inside one
transformer layer or one NasNet cell barely interact with another's. Once the
classes every solution must take are known, the rest of an acyclic problem
falls apart into such parts.

- A class is *needed* when every solution takes it: the roots, and every class
  that all nodes of a needed class require, directly or through their children
  (``needed_classes``: ``need(c)`` is the intersection over c's nodes of their
  child classes and those classes' own ``need``, computed bottom-up as bit sets
  over an acyclic class graph).
- A needed class with one node fixes that node; its children are needed too.
- A needed class with a choice keeps its clause "some node of the class"; a
  node's clause for a needed child class is then implied and dropped.
- What is left links classes only through nodes' clauses for child classes
  that are not needed: its connected components are independent problems, each
  a ``Reduced`` whose roots are its needed classes (``split``). Small ones are
  packed together (``pack``) so that one solver call serves many.

Optimal parts make an optimal whole: the objective is the fixed nodes' cost plus
each part's, and every constraint lies inside one part. With a cycle in the
class graph the acyclicity constraints would join parts, so ``split`` declines
(returns None) and the extractor solves the problem whole.
:func:`solve_parts` runs a per-part solver under one deadline, keeps for each
part the cheaper of its result and the warm start's choice there, and adds up
the parts' lower bounds. A part isomorphic to one already solved (same costs,
same structure: a recurrent network's cells, repeated NasNet cells, transformer
layers) takes that part's result through the node map :func:`isomorphism`
finds and checks, instead of a solver call.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np

from .presolve import Reduced

#: parts smaller than this many nodes are packed together, up to this many nodes per solver call
PACK_NODES = 512


@dataclass
class Split:
    """An acyclic problem taken apart.

    fixed   nodes every solution takes (the one node of a needed class)
    parts   independent sub-problems over the remaining classes; a part's roots are
            its needed classes, its nodes' child sets leave out needed classes
    """

    fixed: list[int]
    parts: list[Reduced]


@dataclass
class PartResult:
    """What a per-part solver found: ``chosen`` nodes (None: no solution in its time),
    whether it proved them optimal, a lower bound on the part's optimal cost (None: none
    known), and the solver's status."""

    chosen: set[int] | None
    optimal: bool
    bound: float | None
    status: str


@dataclass
class PartsOutcome:
    """:func:`solve_parts`'s result: the chosen nodes of the whole problem, whether every
    part was proven optimal, a lower bound on the whole optimum, and counts for reports."""

    chosen: set[int]
    optimal: bool
    bound: float
    info: dict = field(default_factory=dict)


def _children_classes(red: Reduced, c: int) -> set[int]:
    return {d for n in red.class_nodes[c] for d in red.child_sets[n]}


def topological_classes(red: Reduced) -> list[int] | None:
    """The relevant classes with every class after all of its child classes; None if the
    class graph over the usable nodes has a cycle."""
    state: dict[int, int] = {}  # 1: on the path, 2: done
    order: list[int] = []
    for start in red.classes:
        if start in state:
            continue
        state[start] = 1
        stack = [(start, iter(sorted(_children_classes(red, start))))]
        while stack:
            c, it = stack[-1]
            for d in it:
                s = state.get(d)
                if s == 1:
                    return None
                if s is None:
                    state[d] = 1
                    stack.append((d, iter(sorted(_children_classes(red, d)))))
                    break
            else:
                state[c] = 2
                order.append(c)
                stack.pop()
    return order


def needed_classes(red: Reduced, order: list[int]) -> set[int]:
    """The classes every solution takes (see the module docstring); ``order`` from
    :func:`topological_classes`. Bit sets over ``red.classes``; each class's set is
    dropped once its last parent has used it."""
    index = {c: i for i, c in enumerate(red.classes)}
    parents_left = dict.fromkeys(red.classes, 0)
    for c in red.classes:
        for d in _children_classes(red, c):
            parents_left[d] += 1
    keep = set(red.roots)
    need: dict[int, int] = {}
    for c in order:
        common = None
        for n in red.class_nodes[c]:
            mine = 0
            for d in red.child_sets[n]:
                mine |= (1 << index[d]) | need[d]
            common = mine if common is None else common & mine
        need[c] = common or 0
        for d in _children_classes(red, c):
            parents_left[d] -= 1
            if parents_left[d] == 0 and d not in keep:
                del need[d]
    bits = 0
    for r in red.roots:
        bits |= (1 << index[r]) | need[r]
    return {c for c in red.classes if (bits >> index[c]) & 1}


def split(red: Reduced) -> Split | None:
    """Fixed nodes and independent parts of ``red``; None when its class graph has a cycle."""
    order = topological_classes(red)
    if order is None:
        return None
    needed = needed_classes(red, order)
    fixed_classes = {c for c in needed if len(red.class_nodes[c]) == 1}
    fixed = sorted(red.class_nodes[c][0] for c in fixed_classes)
    free = [c for c in red.classes if c not in fixed_classes]
    parent = {c: c for c in free}

    def find(a: int) -> int:
        root = a
        while parent[root] != root:
            root = parent[root]
        while parent[a] != root:
            parent[a], a = root, parent[a]
        return root

    for c in free:
        for n in red.class_nodes[c]:
            for d in red.child_sets[n]:
                if d not in needed:
                    a, b = find(c), find(d)
                    if a != b:
                        parent[max(a, b)] = min(a, b)
    groups: dict[int, list[int]] = {}
    for c in free:
        groups.setdefault(find(c), []).append(c)
    parts = [_part(red, classes, needed) for classes in groups.values()]
    parts.sort(key=lambda p: (len(p.nodes), p.classes[0]))
    return Split(fixed=fixed, parts=parts)


def _part(red: Reduced, classes: list[int], needed: set[int]) -> Reduced:
    classes = sorted(classes)
    class_nodes = {c: red.class_nodes[c] for c in classes}
    child_sets = {n: tuple(d for d in red.child_sets[n] if d not in needed)
                  for c in classes for n in red.class_nodes[c]}
    return Reduced(roots=[c for c in classes if c in needed], usable=red.usable, classes=classes,
                   class_nodes=class_nodes, child_sets=child_sets)


def pack(parts: Iterable[Reduced], max_nodes: int | None = None) -> list[Reduced]:
    """Parts with fewer than ``max_nodes`` (default PACK_NODES) nodes merged, in order, into
    parts of at most ``max_nodes`` (still independent inside: a union of independent
    problems); larger parts unchanged. Returns them smallest first."""
    if max_nodes is None:
        max_nodes = PACK_NODES
    out: list[Reduced] = []
    bin_parts: list[Reduced] = []
    bin_nodes = 0

    def flush() -> None:
        nonlocal bin_parts, bin_nodes
        if bin_parts:
            out.append(bin_parts[0] if len(bin_parts) == 1 else _union(bin_parts))
        bin_parts, bin_nodes = [], 0

    for p in parts:
        size = len(p.nodes)
        if size >= max_nodes:
            out.append(p)
            continue
        if bin_nodes + size > max_nodes:
            flush()
        bin_parts.append(p)
        bin_nodes += size
    flush()
    out.sort(key=lambda p: (len(p.nodes), p.classes[0]))
    return out


def _union(parts: list[Reduced]) -> Reduced:
    class_nodes: dict[int, list[int]] = {}
    child_sets: dict[int, tuple[int, ...]] = {}
    roots: list[int] = []
    for p in parts:
        class_nodes.update(p.class_nodes)
        child_sets.update(p.child_sets)
        roots.extend(p.roots)
    return Reduced(roots=roots, usable=parts[0].usable, classes=sorted(class_nodes), class_nodes=class_nodes,
                   child_sets=child_sets)


def solve_parts(node_cost: np.ndarray, the_split: Split, warm: set[int],
                solve_part: Callable[[Reduced, set[int], float | None], PartResult],
                deadline: float | None) -> PartsOutcome:
    """Solve each part with ``solve_part(part, warm nodes in it, seconds or None)``.

    ``warm``: a complete solution's nodes (the warm start, in the reduced problem's
    nodes), whose restriction to a part is feasible there: it is the part's hint and
    its result when the solver returns nothing or something dearer. A part isomorphic
    to one solved before (:func:`isomorphism`: the cells of a recurrent network, a
    transformer's layers) takes that part's result, mapped, instead of a solver call.
    Parts run smallest first; each may use the time left times its share of the nodes
    of the parts still to solve (repeats of a solved part do not count).
    """
    chosen = set(the_split.fixed)
    bound = float(node_cost[the_split.fixed].sum()) if the_split.fixed else 0.0
    optimal = True
    kept_warm = reused = 0
    statuses: dict[str, int] = {}
    parts = the_split.parts
    sizes = [len(p.nodes) for p in parts]
    shapes = [_shape(p, node_cost) if p.roots else None for p in parts]
    first = {}
    for i, sh in enumerate(shapes):
        if sh is not None:
            first.setdefault(sh[0], i)
    repeat = [sh is not None and first[sh[0]] != i for i, sh in enumerate(shapes)]
    left = sum(size for size, r in zip(sizes, repeat) if not r)
    solved: dict[tuple, list[tuple[Reduced, tuple, PartResult]]] = {}
    for i, (part, size) in enumerate(zip(parts, sizes)):
        if not repeat[i]:
            left -= size
        if not part.roots:  # nothing it must take, and costs are not negative: take nothing
            statuses["empty"] = statuses.get("empty", 0) + 1
            continue
        nodes = set(part.nodes)
        hint = warm & nodes
        res = None
        for twin, twin_shape, twin_res in solved.get(shapes[i][0], ()):
            mapping = isomorphism(twin, twin_shape, part, shapes[i], node_cost)
            if mapping is not None:
                res = PartResult({mapping[n] for n in twin_res.chosen}, twin_res.optimal, twin_res.bound,
                                 "reused")
                reused += 1
                break
        if res is None:
            limit = None
            if deadline is not None:
                share = size / max(left + size, 1)
                limit = max(deadline - time.perf_counter(), 0.0) * share
            if limit is not None and limit <= 0:
                res = PartResult(None, False, None, "TIME_LIMIT")  # no time left: the warm start's choice
            else:
                res = solve_part(part, hint, limit)
            statuses[res.status] = statuses.get(res.status, 0) + 1
        found = None if res.chosen is None else res.chosen & nodes
        if found is not None and (res.optimal or _cost(node_cost, found) <= _cost(node_cost, hint)):
            chosen |= found
            optimal = optimal and res.optimal
            if res.status != "reused":
                solved.setdefault(shapes[i][0], []).append((part, shapes[i], PartResult(found, res.optimal,
                                                                                        res.bound, res.status)))
        else:  # nothing, or something dearer than the warm start's choice here
            chosen |= hint
            kept_warm += 1
            optimal = False
        bound += max(res.bound, 0.0) if res.bound is not None else 0.0
    info = {"parts": len(parts), "fixed_nodes": len(the_split.fixed),
            "largest_part": max(sizes, default=0), "parts_kept_warm": kept_warm, "parts_reused": reused,
            "parts_solved": len(parts) - statuses.get("empty", 0) - kept_warm, "part_statuses": statuses}
    return PartsOutcome(chosen=chosen, optimal=optimal, bound=bound, info=info)


def _shape(part: Reduced, node_cost: np.ndarray) -> tuple:
    """What :func:`isomorphism` compares: ``(key, class hashes, node hashes, class ranks)``.
    Hashes are bottom-up over the part's acyclic class graph (a node: its cost and its
    child classes' hashes; a class: whether it is a root and its nodes' hashes); ``key``,
    equal for isomorphic parts, is their multiset; ranks are topological positions."""
    order = topological_classes(part)
    class_hash: dict[int, int] = {}
    node_hash: dict[int, int] = {}
    roots = set(part.roots)
    for c in order:
        for n in part.class_nodes[c]:
            node_hash[n] = hash((float(node_cost[n]), tuple(sorted(class_hash[d] for d in part.child_sets[n]))))
        class_hash[c] = hash((c in roots, tuple(sorted(node_hash[n] for n in part.class_nodes[c]))))
    key = (len(node_hash), tuple(sorted(class_hash.values())))
    return key, class_hash, node_hash, {c: i for i, c in enumerate(order)}


def isomorphism(a: Reduced, shape_a: tuple, b: Reduced, shape_b: tuple,
                node_cost: np.ndarray) -> dict[int, int] | None:
    """A map of ``a``'s nodes onto ``b``'s that preserves costs, classes, child classes and
    roots (so it maps ``a``'s solutions, optimal ones included, onto ``b``'s), or None.

    Classes are paired by hash, ties by topological rank, and nodes within paired classes
    by hash, ties by index; the pairing is then checked in full, so a hash collision or
    an ambiguous pairing gives None (the part is solved instead), never a wrong map."""
    _, ca, na, ra = shape_a
    _, cb, nb, rb = shape_b
    if len(a.classes) != len(b.classes):
        return None
    classes_a = sorted(a.classes, key=lambda c: (ca[c], ra[c]))
    classes_b = sorted(b.classes, key=lambda c: (cb[c], rb[c]))
    f: dict[int, int] = {}
    g: dict[int, int] = {}
    for x, y in zip(classes_a, classes_b):
        if ca[x] != cb[y] or len(a.class_nodes[x]) != len(b.class_nodes[y]):
            return None
        f[x] = y
        for m, n in zip(sorted(a.class_nodes[x], key=lambda n: (na[n], n)),
                        sorted(b.class_nodes[y], key=lambda n: (nb[n], n))):
            g[m] = n
    if {f[r] for r in a.roots} != set(b.roots) or len(set(a.roots)) != len(set(b.roots)):
        return None
    for m, n in g.items():
        if node_cost[m] != node_cost[n] or {f[d] for d in a.child_sets[m]} != set(b.child_sets[n]):
            return None
    return g


def _cost(node_cost: np.ndarray, nodes: set[int]) -> float:
    return float(node_cost[sorted(nodes)].sum()) if nodes else 0.0
