"""Cycles in the class graph (He et al., "Improving Term Extraction with Acyclic Constraints").

The class graph has an edge c -> d when some usable node of class c has d as a
child. An extraction is cyclic exactly when its chosen nodes close a cycle of
this graph, so only classes inside a strongly connected component with more
than one class (or with a self-loop) can ever be on one.

- ``strongly_connected_components``: iterative Tarjan.
- ``simple_cycles``: Johnson's algorithm for the elementary cycles, run per
  non-trivial SCC, with a cap on how many it enumerates.
- ``cycle_basis``: a small cycle set (one elementary cycle per edge of each SCC
  outside a BFS tree, the directed analogue of Paton's fundamental cycles); it
  does not forbid every cycle, so its users add violated cycles lazily.
- ``find_cycle_in_choice``: the cycle an extraction contains, if any.
- ``acyclic_groups``: the node groups of Algorithm 1 for one class cycle.
"""
from __future__ import annotations

import time
from collections import deque
from typing import Iterable, Mapping, Sequence

import numpy as np

from .problem import ExtractionProblem


def class_graph(problem: ExtractionProblem, usable: np.ndarray | None = None) -> list[list[int]]:
    """Successor lists of the class graph (deduplicated), over usable nodes (default: not blacklisted)."""
    if usable is None:
        usable = ~problem.blacklisted
    succ: list[set[int]] = [set() for _ in range(problem.num_classes)]
    node_class = problem.node_class.tolist()
    for n, children in enumerate(problem.node_children):
        if children and usable[n]:
            succ[node_class[n]].update(children)
    return [sorted(s) for s in succ]


def strongly_connected_components(succ: Sequence[Sequence[int]],
                                  vertices: Iterable[int] | None = None) -> list[list[int]]:
    """Tarjan's algorithm without recursion. ``vertices`` restricts the graph to an induced subgraph."""
    if vertices is None:
        inside = None
        roots = range(len(succ))
    else:
        roots = list(vertices)
        inside = set(roots)
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on_stack: set[int] = set()
    stack: list[int] = []
    components: list[list[int]] = []
    counter = 0
    for root in roots:
        if root in index:
            continue
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(succ[root]))]
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if inside is not None and w not in inside:
                    continue
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(succ[w])))
                    advanced = True
                    break
                if w in on_stack and index[w] < low[v]:
                    low[v] = index[w]
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                if low[v] < low[parent]:
                    low[parent] = low[v]
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                components.append(component)
    return components


def cyclic_components(succ: Sequence[Sequence[int]]) -> list[list[int]]:
    """The SCCs that can hold a cycle: more than one vertex, or a self-loop."""
    return [comp for comp in strongly_connected_components(succ)
            if len(comp) > 1 or comp[0] in succ[comp[0]]]


class CycleCapReached(Exception):
    pass


def simple_cycles(succ: Sequence[Sequence[int]], max_cycles: int | None = None,
                  deadline: float | None = None) -> tuple[list[list[int]], bool]:
    """Johnson's elementary cycles of the graph, each as a vertex list in edge order.

    Returns (cycles, complete); ``complete`` is False when ``max_cycles`` or the
    ``deadline`` (a time.perf_counter() value) stopped the enumeration early.
    """
    cycles: list[list[int]] = []

    def emit(cycle: list[int]) -> None:
        cycles.append(cycle)
        if max_cycles is not None and len(cycles) >= max_cycles:
            raise CycleCapReached
        if deadline is not None and len(cycles) % 256 == 0 and time.perf_counter() > deadline:
            raise CycleCapReached

    try:
        components = []
        for comp in strongly_connected_components(succ):
            for v in comp:
                if v in succ[v]:
                    emit([v])
            if len(comp) > 1:
                components.append(set(comp))
        while components:
            if deadline is not None and time.perf_counter() > deadline:
                raise CycleCapReached
            _johnson_from_one_start(succ, components, emit)
    except CycleCapReached:
        return cycles, False
    return cycles, True


def _johnson_from_one_start(succ, components: list[set[int]], emit) -> None:
    """All elementary cycles through one vertex of the last component; then drop that vertex."""
    scc = components.pop()
    start = min(scc)
    scc.discard(start)
    allowed = scc | {start}

    def nbrs(v: int) -> list[int]:
        return [w for w in succ[v] if w in allowed and w != v]

    path = [start]
    blocked = {start}
    closed: set[int] = set()
    blocked_by: dict[int, set[int]] = {}
    stack = [(start, nbrs(start))]
    while stack:
        v, todo = stack[-1]
        if todo:
            w = todo.pop()
            if w == start:
                emit(path[:])
                closed.update(path)
            elif w not in blocked:
                path.append(w)
                stack.append((w, nbrs(w)))
                closed.discard(w)
                blocked.add(w)
                continue
        if not todo:
            if v in closed:
                _unblock(v, blocked, blocked_by)
            else:
                for w in nbrs(v):
                    blocked_by.setdefault(w, set()).add(v)
            stack.pop()
            path.pop()
    components.extend(set(c) for c in strongly_connected_components(succ, scc) if len(c) > 1)


def _unblock(v: int, blocked: set[int], blocked_by: dict[int, set[int]]) -> None:
    todo = {v}
    while todo:
        u = todo.pop()
        if u in blocked:
            blocked.discard(u)
            todo.update(blocked_by.pop(u, ()))


def cycle_basis(succ: Sequence[Sequence[int]]) -> list[list[int]]:
    """A cycle set with one elementary cycle per non-tree edge of each cyclic SCC.

    In each SCC, with r its smallest vertex, a BFS from r gives forward paths
    r ~> u and a BFS on reversed edges gives paths v ~> r. For every edge u -> v
    outside the forward tree, the closed walk u -> v ~> r ~> u is made elementary
    by loop erasure; it still contains u -> v. That is e - n + 1 cycles per SCC
    (plus self-loops), every edge of the SCC lies on one of them, and all are
    found in O(e * depth). It is not a complete set: a cycle built from edges of
    several basis cycles is not forbidden, so callers verify and add cuts.
    """
    cycles: list[list[int]] = []
    seen: set[frozenset] = set()
    for comp in cyclic_components(succ):
        inside = set(comp)
        for v in comp:
            if v in succ[v]:
                cycles.append([v])
        if len(comp) == 1:
            continue
        r = min(comp)
        fwd_parent = _bfs_parents(r, lambda u: (w for w in succ[u] if w in inside and w != u))
        pred: dict[int, list[int]] = {v: [] for v in comp}
        for u in comp:
            for w in succ[u]:
                if w in inside and w != u:
                    pred[w].append(u)
        back_next = _bfs_parents(r, lambda u: pred[u])  # back_next[v]: next vertex on a path v ~> r
        for u in comp:
            for v in succ[u]:
                if v not in inside or v == u or fwd_parent.get(v) == u:
                    continue
                walk = [v]
                x = v
                while x != r:
                    x = back_next[x]
                    walk.append(x)
                down = []
                x = u
                while x != r:
                    down.append(x)
                    x = fwd_parent[x]
                walk.extend(reversed(down))  # v ~> r, then r ~> u (r itself once)
                cycle = _erase_loops(walk)
                key = frozenset(cycle)
                if key not in seen:
                    seen.add(key)
                    cycles.append(cycle)
    return cycles


def _bfs_parents(source: int, neighbours) -> dict[int, int]:
    parent = {source: source}
    queue = deque([source])
    while queue:
        u = queue.popleft()
        for w in neighbours(u):
            if w not in parent:
                parent[w] = u
                queue.append(w)
    return parent


def _erase_loops(walk: list[int]) -> list[int]:
    """Loop-erase a walk from walk[0] to walk[-1]: a simple path with the same ends."""
    path: list[int] = []
    where: dict[int, int] = {}
    for x in walk:
        if x in where:
            cut = where[x]
            for y in path[cut + 1:]:
                del where[y]
            del path[cut + 1:]
        else:
            where[x] = len(path)
            path.append(x)
    return path


def find_cycle_in_choice(problem: ExtractionProblem, choice: Mapping[int, int],
                         roots: Iterable[int] | None = None) -> list[int] | None:
    """A cycle of classes (in edge order) formed by the chosen nodes, or None.

    Searches from the roots (default: every class in ``choice``); classes with
    no chosen node are treated as leaves (completeness is checked elsewhere).
    """
    children = problem.node_children
    starts = list(choice) if roots is None else list(roots)
    color: dict[int, int] = {}  # 1: on the DFS path, 2: finished
    for s in starts:
        if s in color:
            continue
        color[s] = 1
        path = [s]
        work = [iter(children[choice[s]]) if s in choice else iter(())]
        while work:
            advanced = False
            for d in work[-1]:
                state = color.get(d)
                if state == 1:
                    return path[path.index(d):]
                if state is None:
                    color[d] = 1
                    path.append(d)
                    work.append(iter(children[choice[d]]) if d in choice else iter(()))
                    advanced = True
                    break
            if not advanced:
                color[path.pop()] = 2
                work.pop()
    return None


def nodes_on_cycles(problem: ExtractionProblem) -> np.ndarray:
    """Nodes with a child in their own cyclic SCC: egg's over-approximate cycle blacklist.

    Forbidding all of them removes every cycle, but may also remove every
    acyclic extraction (Figure 1 of He et al.).
    """
    succ = class_graph(problem)
    comp_of = np.full(problem.num_classes, -1, dtype=np.int64)
    for i, comp in enumerate(cyclic_components(succ)):
        comp_of[comp] = i
    on = np.zeros(problem.num_nodes, dtype=bool)
    for n, children in enumerate(problem.node_children):
        k = comp_of[problem.node_class[n]]
        if k >= 0 and any(comp_of[d] == k for d in children):
            on[n] = True
    return on


def acyclic_groups(cycle: Sequence[int], class_nodes: Mapping[int, Sequence[int]] | Sequence[Sequence[int]],
                   node_children: Sequence[Sequence[int]]) -> list[list[int]] | None:
    """Algorithm 1 of He et al.: for each class of the cycle, its nodes with a child in the cycle.

    The acyclic constraint is "for some class of the cycle, none of its group is
    chosen". If every class of a set P chose a node with a child in P, the chosen
    nodes would give every class of P an edge into P, hence a cycle; so the
    constraint removes no acyclic extraction, and it removes every extraction
    that closes this cycle. Returns None when some group is empty (that class
    can never close the cycle: no constraint is needed).
    """
    members = set(cycle)
    groups = []
    for c in cycle:
        group = [n for n in class_nodes[c] if any(d in members for d in node_children[n])]
        if not group:
            return None
        groups.append(group)
    return groups


def dfs_cycle_blacklist(problem: ExtractionProblem, start_order: Iterable[int] | None = None) -> np.ndarray:
    """egg's cycle breaking for its ILP extractor: a DFS over classes that blacklists every
    node with a child class on the DFS stack.

    Which nodes go depends on where the search starts (``start_order``, default
    all classes in index order). Started away from the root it can blacklist
    every node of the root class (Figure 1 of He et al.), making extraction
    infeasible although acyclic terms exist.
    """
    children = problem.node_children
    blacklist = problem.blacklisted.copy()
    state: dict[int, int] = {}  # 1: on the DFS stack, 2: finished
    order = range(problem.num_classes) if start_order is None else start_order
    for start in order:
        if start in state:
            continue
        state[start] = 1
        work = [(start, iter(problem.class_nodes[start]), None)]
        while work:
            c, nodes, kids = work[-1]
            if kids is not None:
                d = next(kids, None)
                if d is not None:
                    if d not in state:
                        state[d] = 1
                        work.append((d, iter(problem.class_nodes[d]), None))
                    continue
                work[-1] = (c, nodes, None)
                continue
            n = next(nodes, None)
            if n is None:
                state[c] = 2
                work.pop()
                continue
            if blacklist[n]:
                continue
            if any(state.get(d) == 1 for d in children[n]):
                blacklist[n] = True
                continue
            work[-1] = (c, nodes, iter(children[n]))
    return blacklist
