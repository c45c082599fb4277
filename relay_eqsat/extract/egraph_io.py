"""From an e-graph to an ExtractionProblem and from a choice back to a TensorGraph.

The e-graph only exposes its arrays (``EGraph.arrays()``); node costs come
from a cost callable

    node_cost(op, attrs, input_types, out_type, all_inputs_constant) -> float

called once per distinct key (op, attrs, input types, constness), which
``NodeCosts`` remembers. A problem's ``class_key``/``node_key`` are the
e-graph's class and node ids, ``class_data`` the class types, so
``build_graph`` can rebuild the extracted TensorGraph from a choice.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

import numpy as np

from ..egraph import EGraphArrays, attrs_of, op_name, signature_of, type_of
from ..graph import TensorGraph
from .problem import ExtractionProblem

NodeCost = Callable[..., float]


class NodeCosts:
    """A node cost callable, memoized per node signature and constness.

    A signature (``egraph.signature_of``) fixes op, attrs, input types and
    output type, so ``node_cost`` is called once per distinct key, whatever
    e-graphs (and copies) the memo is used with.
    """

    def __init__(self, node_cost: NodeCost) -> None:
        self.node_cost = node_cost
        self._value = np.zeros(0, dtype=np.float64)  # at 2 * signature + constness
        self._known = np.zeros(0, dtype=bool)

    def of(self, arrays: EGraphArrays) -> np.ndarray:
        """The cost of every node of ``arrays`` (float64, in node order); new keys are costed in node order."""
        key = arrays.node_sig * 2 + arrays.node_const  # int32: signatures stay far below 2**30
        if key.size and key.max() >= self._known.size:
            size = max(2 * self._known.size, int(key.max()) + 1, 64)
            self._value = np.concatenate([self._value, np.zeros(size - self._value.size)])
            self._known = np.concatenate([self._known, np.zeros(size - self._known.size, dtype=bool)])
        known = self._known[key]
        if not known.all():
            new, first = np.unique(key[~known], return_index=True)
            for k in new[np.argsort(first)].tolist():  # in the order of their first node
                op, attrs, input_types, out_type = signature_of(k >> 1)
                self._value[k] = float(self.node_cost(op_name(op), attrs_of(attrs),
                                                      [type_of(t) for t in input_types],
                                                      type_of(out_type), bool(k & 1)))
                self._known[k] = True
        return self._value[key]


def node_costs(node_cost: NodeCost | NodeCosts) -> NodeCosts:
    """``node_cost`` as a NodeCosts (itself if it is one; a fresh memo otherwise)."""
    return node_cost if isinstance(node_cost, NodeCosts) else NodeCosts(node_cost)


def class_indices(arrays: EGraphArrays, classes: Iterable[int]) -> list[int]:
    """The class indices of e-graph class ids (merged ids map to their class)."""
    out = []
    for c in classes:
        c = int(c)
        if not 0 <= c < len(arrays.class_index):
            raise IndexError(f"class {c} out of range")
        out.append(int(arrays.class_index[c]))
    return out


def egraph_problem(egraph: Any, node_cost: NodeCost | NodeCosts, roots: Iterable[int]) -> ExtractionProblem:
    """The ExtractionProblem of an e-graph: its canonical classes and alive nodes (blacklisted
    ones marked), costed by ``node_cost`` (a callable or a NodeCosts), rooted at e-graph class ids."""
    arrays = egraph.arrays()
    cost = node_costs(node_cost).of(arrays)
    flat = arrays.children.tolist()
    start = arrays.child_start.tolist()
    return ExtractionProblem(
        node_class=arrays.node_class.astype(np.int64),
        node_children=[tuple(flat[start[j]:start[j + 1]]) for j in range(arrays.num_nodes)],
        node_cost=cost,
        roots=class_indices(arrays, roots),
        node_label=[op_name(o) for o in arrays.node_op.tolist()],
        blacklisted=arrays.node_black,
        class_key=arrays.class_id.tolist(),
        node_key=arrays.node_id.tolist(),
        class_data=[type_of(t) for t in arrays.class_type.tolist()],
    )


def build_graph(egraph: Any, problem: ExtractionProblem, choice: Mapping[int, int],
                root: int | None = None, origin: dict[int, list[int]] | None = None) -> TensorGraph:
    """The TensorGraph of an extraction ``choice`` (problem class index -> problem node index) of
    ``egraph_problem(egraph, ...)``, rooted at problem class ``root`` (default: the problem's first
    root). Shared classes are emitted once; raises ValueError on a cycle, a class the choice does
    not cover, a node of another class or a blacklisted node. ``origin``, when given, is filled
    with graph node id -> the problem nodes it was built from (several when equal nodes merge)."""
    if root is None:
        root = problem.roots[0]
    g = TensorGraph()
    emitted: dict[int, int] = {}
    state: dict[int, int] = {}  # 1: on the stack, 2: emitted
    stack = [(int(root), False)]
    while stack:
        c, done = stack.pop()
        if done:
            n = choice[c]
            enode = problem.node_key[n]
            op = egraph.node_op(enode)
            attrs = egraph.node_attrs(enode)
            inputs = [emitted[x] for x in problem.node_children[n]]
            if op == "constant":
                g.constants[attrs["name"]] = egraph.constants[attrs["name"]]
                nid = g.add(op, inputs, attrs)
            elif op == "opaque":
                g.opaque[attrs["key"]] = egraph.opaque[attrs["key"]]
                nid = g.add(op, inputs, attrs, dedup=False)
            else:
                nid = g.add(op, inputs, attrs)
            emitted[c] = nid
            if origin is not None:
                origin.setdefault(nid, []).append(n)
            state[c] = 2
            continue
        st = state.get(c, 0)
        if st == 2:
            continue
        if st == 1:
            raise ValueError(f"extraction choice has a cycle through class {c}")
        if c not in choice:
            raise ValueError(f"extraction choice does not cover class {c}")
        n = choice[c]
        if problem.node_class[n] != c:
            raise ValueError(f"choice for class {c} is node {n} of class {problem.node_class[n]}")
        if problem.blacklisted[n]:
            raise ValueError(f"choice for class {c} is blacklisted node {n}")
        state[c] = 1
        stack.append((c, True))
        for x in reversed(problem.node_children[n]):
            sx = state.get(x, 0)
            if sx == 1:
                raise ValueError(f"extraction choice has a cycle through class {x}")
            if sx == 0:
                stack.append((x, False))
    g.set_output(emitted[int(root)])
    return g
