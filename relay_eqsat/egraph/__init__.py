"""The e-graph: Cython core (storage, union-find, hashcons, rebuild, analysis,
e-matching, cycle filtering, planned application; one module each, composed in
``core.pyx``) and its flat view for extraction.

    EGraph          the e-graph (``relay_eqsat.egraph.core``)
    EGraphArrays    its canonical classes and alive nodes as arrays (``EGraph.arrays()``)
    Program         a compiled pattern for ``EGraph.search``
    DescendantsMap  TENSAT's per-iteration cycle pre-filter snapshot
    join_flat       the join of a multi-pattern rule's matches (``rules.flat_join``)
"""
from .arrays import EGraphArrays
from .core import (
    DescendantsMap,
    EGraph,
    Program,
    attrs_id,
    attrs_of,
    infer_type_id,
    infer_type_memo,
    join_flat,
    op_id,
    op_name,
    origin_id,
    origin_name,
    signature_id,
    signature_of,
    type_id,
    type_of,
    value_id,
    value_of,
)

__all__ = [
    "EGraph", "EGraphArrays", "Program", "DescendantsMap", "op_id", "op_name", "attrs_id", "attrs_of",
    "origin_id", "origin_name",
    "type_id", "type_of", "value_id", "value_of", "infer_type_id", "infer_type_memo", "signature_id", "signature_of",
    "join_flat",
]
