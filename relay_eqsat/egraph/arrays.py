"""A flat copy of an e-graph: what ``EGraph.arrays()`` returns.

Classes are the canonical ones, indexed ``0..C-1`` in increasing e-graph id;
nodes are the alive ones (blacklisted included), indexed ``0..N-1`` class by
class, each class's nodes in its list order. Children are class indices, in
CSR form: node ``j``'s are ``children[child_start[j]:child_start[j + 1]]``, in
order, repeats kept. Ids (op, attrs, type, signature) are the process-wide
interned ones of ``relay_eqsat.egraph``. The arrays are views of one int32
block and one flag block: a snapshot, not linked to the e-graph.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(eq=False)
class EGraphArrays:
    """Canonical classes and alive nodes of an e-graph as flat arrays (int32 unless said).

    class_id[i]      e-graph id of class i
    class_type[i]    type id of class i (``type_of``)
    class_index[c]   class index of any e-graph class id c (merged ids map to their class)
    node_id[j]       e-graph id of node j
    node_class[j]    class index of node j
    node_op[j], node_attrs[j]  op and attrs ids (``op_name``, ``attrs_of``)
    node_sig[j]      signature id: op, attrs and child types (``signature_of``)
    node_const[j]    bool: all of node j's inputs are constant
    node_black[j]    bool: node j is blacklisted (TENSAT's filter list)
    child_start[j]   start of node j's children in ``children`` (length N + 1)
    children         child class indices of all nodes, node after node
    """

    class_id: np.ndarray
    class_type: np.ndarray
    class_index: np.ndarray
    node_id: np.ndarray
    node_class: np.ndarray
    node_op: np.ndarray
    node_attrs: np.ndarray
    node_sig: np.ndarray
    node_const: np.ndarray
    node_black: np.ndarray
    child_start: np.ndarray
    children: np.ndarray

    @property
    def num_classes(self) -> int:
        return len(self.class_id)

    @property
    def num_nodes(self) -> int:
        return len(self.node_id)
