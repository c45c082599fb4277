"""egraph-serialize JSON in and out: the e-graph format of egg, egglog and extraction-gym.

    {
      "nodes": {
        "<node id>": {"op": "Relu", "children": ["<node id>", ...], "eclass": "<class id>",
                      "cost": 1.0, "subsumed": false},
        ...
      },
      "root_eclasses": ["<class id>", ...],
      "class_data": {"<class id>": {"type": "..."}, ...}
    }

A child is a node id and stands for that node's e-class (any node of the class
may be named). Read leniently, as the egraph-serialize crate does: "children"
may be absent (a leaf), "cost" may be absent (1.0), a number or a numeric
string; "root_eclasses" and "class_data" may be absent; the older "classes"
map (class id -> type string) is read as class data; unknown keys (e.g.
"comment") are ignored; a child that names no node but does name a class is
taken as that class. egglog's "subsumed": true (the node may not be extracted)
becomes a blacklisted node, and a blacklisted node is written back as
subsumed.
"""
from __future__ import annotations

import gzip
import json
import os
from typing import Any

import numpy as np

from .problem import ExtractionProblem


def _read(path_or_dict: Any) -> dict:
    """The JSON of an egraph-serialize file, plain or gzipped (as bench/extraction.py writes them)."""
    if isinstance(path_or_dict, dict):
        return path_or_dict
    path = os.fspath(path_or_dict)
    with open(path, "rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    if gzipped:
        with gzip.open(path, "rt") as f:
            return json.load(f)
    with open(path) as f:
        return json.load(f)


def _cost(value: Any, node_id: str) -> float:
    if value is None:
        return 1.0
    try:
        cost = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"node {node_id!r}: cost {value!r} is not a number") from None
    if not np.isfinite(cost) or cost < 0:
        raise ValueError(f"node {node_id!r}: cost {value!r} must be finite and non-negative")
    return cost


def load_problem(path_or_dict: Any) -> ExtractionProblem:
    """Read an egraph-serialize JSON file (or its parsed dict) as an ExtractionProblem.

    Classes are numbered in order of first appearance among the nodes; node
    and class ids are kept in ``node_key`` / ``class_key`` for writing back.
    """
    data = _read(path_or_dict)
    nodes = data.get("nodes")
    if not isinstance(nodes, dict):
        raise ValueError('egraph-serialize JSON needs a "nodes" object')
    class_index: dict[str, int] = {}
    node_index: dict[str, int] = {}
    node_key: list[str] = []
    node_class: list[int] = []
    for nid, node in nodes.items():
        if "eclass" not in node:
            raise ValueError(f"node {nid!r} has no eclass")
        cid = str(node["eclass"])
        if cid not in class_index:
            class_index[cid] = len(class_index)
        node_index[str(nid)] = len(node_key)
        node_key.append(str(nid))
        node_class.append(class_index[cid])
    children: list[tuple[int, ...]] = []
    cost: list[float] = []
    label: list[str] = []
    subsumed: list[bool] = []
    for nid, node in nodes.items():
        kids = []
        for child in node.get("children") or ():
            child = str(child)
            if child in node_index:
                kids.append(node_class[node_index[child]])
            elif child in class_index:
                kids.append(class_index[child])
            else:
                raise ValueError(f"node {nid!r} has child {child!r}, which is neither a node nor an e-class")
        children.append(tuple(kids))
        cost.append(_cost(node.get("cost"), nid))
        label.append(str(node.get("op", "")))
        subsumed.append(bool(node.get("subsumed", False)))
    roots = []
    for cid in data.get("root_eclasses") or ():
        cid = str(cid)
        if cid not in class_index:
            raise ValueError(f"root e-class {cid!r} has no e-nodes")
        roots.append(class_index[cid])
    class_key = list(class_index)
    raw_data = data.get("class_data")
    if raw_data is None and isinstance(data.get("classes"), dict):
        raw_data = {cid: {"type": typ} for cid, typ in data["classes"].items()}
    class_data = None
    if raw_data:
        class_data = [raw_data.get(cid) for cid in class_key]
    return ExtractionProblem(
        node_class=np.array(node_class, dtype=np.int64),
        node_children=children,
        node_cost=np.array(cost, dtype=np.float64),
        roots=roots,
        node_label=label,
        blacklisted=np.array(subsumed, dtype=bool),
        class_key=class_key,
        node_key=node_key,
        class_data=class_data,
    )


def problem_to_dict(problem: ExtractionProblem) -> dict:
    """The egraph-serialize form of a problem; each child is named by the first node of its class."""
    node_ids = [str(k) for k in problem.node_key]
    if len(set(node_ids)) != len(node_ids):
        raise ValueError("node keys are not unique as strings")
    class_ids = [str(k) for k in problem.class_key]
    if len(set(class_ids)) != len(class_ids):
        raise ValueError("class keys are not unique as strings")
    representative = []
    for c, members in enumerate(problem.class_nodes):
        representative.append(node_ids[members[0]] if members else None)
    nodes: dict[str, dict] = {}
    for n, nid in enumerate(node_ids):
        kids = []
        for d in problem.node_children[n]:
            if representative[d] is None:
                raise ValueError(f"class {class_ids[d]!r} is a child but has no nodes")
            kids.append(representative[d])
        entry = {"op": problem.node_label[n], "children": kids, "eclass": class_ids[problem.node_class[n]],
                 "cost": float(problem.node_cost[n])}
        if problem.blacklisted[n]:
            entry["subsumed"] = True
        nodes[nid] = entry
    out: dict[str, Any] = {"nodes": nodes, "root_eclasses": [class_ids[r] for r in problem.roots]}
    if problem.class_data is not None:
        out["class_data"] = {class_ids[c]: _json_class_data(d)
                             for c, d in enumerate(problem.class_data) if d is not None}
    return out


def dump_problem(problem: ExtractionProblem, path: Any) -> None:
    """Write a problem as egraph-serialize JSON."""
    with open(os.fspath(path), "w") as f:
        json.dump(problem_to_dict(problem), f, indent=1)
        f.write("\n")


def _json_class_data(d):
    """Class data as JSON: dicts/lists/scalars as they are; anything else (an
    e-graph's TensorType, say) as ``{"type": str(d)}``."""
    if isinstance(d, (dict, list, str, int, float, bool)):
        return d
    return {"type": str(d)}
