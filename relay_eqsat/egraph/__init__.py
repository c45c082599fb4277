"""The e-graph: Cython core (storage, union-find, hashcons, rebuild, analysis,
e-matching, cycle filtering) and the extraction interface.

    EGraph          the e-graph (``relay_eqsat.egraph.core``)
    Program         a compiled pattern for ``EGraph.search``
    DescendantsMap  TENSAT's per-iteration cycle pre-filter snapshot
"""
from .core import (
    DescendantsMap,
    EGraph,
    Program,
    attrs_id,
    attrs_of,
    infer_type_id,
    op_id,
    op_name,
    type_id,
    type_of,
    value_id,
    value_of,
)

__all__ = [
    "EGraph", "Program", "DescendantsMap", "op_id", "op_name", "attrs_id", "attrs_of",
    "type_id", "type_of", "value_id", "value_of", "infer_type_id",
]
