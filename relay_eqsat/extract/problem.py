"""The extraction problem: what every extractor consumes and produces.

An e-graph (ours, or one read from egraph-serialize JSON) is flattened into an
``ExtractionProblem``: classes 0..C-1, nodes 0..N-1, each node in one class,
with child classes and a cost. Extractors return a ``Solution``: one chosen
node per class the roots need. Turning a solution back into a TensorGraph is
``egraph_io.build_graph``'s job; extractors never see tensors.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np


@dataclass
class ExtractionProblem:
    """A flat e-graph for extraction.

    node_class[n]     class index of node n
    node_children[n]  class indices of node n's children (order matters, repeats allowed)
    node_cost[n]      cost of node n alone (seconds, or any additive unit)
    node_label[n]     display label (op name) used by serialization and debugging
    blacklisted[n]    True: never choose n (TENSAT's filter list)
    roots             class indices that must be computed
    class_nodes[c]    node indices of class c (derived)
    class_key[c]      the original class id (e-graph id or JSON string), for round trips
    node_key[n]       the original node id, for round trips
    class_data[c]     optional per-class payload (type, etc.) for serialization
    """

    node_class: np.ndarray
    node_children: list[tuple[int, ...]]
    node_cost: np.ndarray
    roots: list[int]
    node_label: list[str] | None = None
    blacklisted: np.ndarray | None = None
    class_key: list[Any] | None = None
    node_key: list[Any] | None = None
    class_data: list[Any] | None = None
    class_nodes: list[list[int]] = field(init=False)

    def __post_init__(self) -> None:
        self.node_class = np.asarray(self.node_class, dtype=np.int64)
        self.node_cost = np.asarray(self.node_cost, dtype=np.float64)
        n = len(self.node_class)
        if len(self.node_children) != n or len(self.node_cost) != n:
            raise ValueError("node_class, node_children and node_cost must have one entry per node")
        if self.blacklisted is None:
            self.blacklisted = np.zeros(n, dtype=bool)
        else:
            self.blacklisted = np.asarray(self.blacklisted, dtype=bool)
        if self.node_label is None:
            self.node_label = [str(i) for i in range(n)]
        num_classes = int(self.node_class.max()) + 1 if n else 0
        for ch in self.node_children:
            for c in ch:
                num_classes = max(num_classes, c + 1)
        self.class_nodes = [[] for _ in range(num_classes)]
        for i, c in enumerate(self.node_class):
            self.class_nodes[c].append(i)
        if self.class_key is None:
            self.class_key = list(range(num_classes))
        if self.node_key is None:
            self.node_key = list(range(n))
        for r in self.roots:
            if not 0 <= r < num_classes:
                raise ValueError(f"root class {r} out of range")

    @property
    def num_nodes(self) -> int:
        return len(self.node_class)

    @property
    def num_classes(self) -> int:
        return len(self.class_nodes)

    def children_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """``node_children`` in CSR form (int32): node n's are ``flat[start[n]:start[n + 1]]``."""
        n = self.num_nodes
        start = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(np.fromiter(map(len, self.node_children), dtype=np.int32, count=n), out=start[1:])
        flat = np.fromiter(chain.from_iterable(self.node_children), dtype=np.int32, count=int(start[-1]))
        return start, flat


@dataclass
class Solution:
    """An extraction result.

    choice[c]  chosen node of class c, for every class reachable from the roots
    cost       sum of node_cost over the chosen nodes that the roots reach (shared once)
    optimal    True when an exact solver proved it optimal
    status     solver status or the extractor's name
    solve_time, encode_time  seconds
    bound      a proven lower bound on the optimum's cost (exact extractors; None when
               there is none), so ``cost - bound`` bounds how far ``cost`` can be from optimal
    """

    choice: dict[int, int]
    cost: float
    optimal: bool = False
    status: str = ""
    solve_time: float = 0.0
    encode_time: float = 0.0
    info: dict = field(default_factory=dict)
    bound: float | None = None

    @property
    def gap(self) -> float | None:
        """``(cost - bound) / cost``: how far the cost can be above the optimum (0 when proven)."""
        if self.bound is None:
            return None
        if self.cost <= 0:
            return 0.0
        return max(self.cost - self.bound, 0.0) / self.cost
