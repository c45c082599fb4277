# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Process-wide interning: operator names, attribute sets, types, attribute values, origins and
e-node signatures, each in an append-only table (``table[id] == key``).

Ids stay valid across e-graphs and their ``copy()``, so compiled patterns can
cache per-attrs-id decisions, application plans can be keyed on type ids and
node costs memoized per signature. A signature (op, attrs, child types) fixes
a node's type: ``signature_id`` runs the operator's type inference once per
signature (``infer_type_memo``: once per (op, attrs, input types)).
"""
from ..graph import Attrs
from .. import ops as _ops

_OP_NAMES = []
_OP_IDS = {}
_ATTRS = []
_ATTR_IDS = {}
_TYPES = []
_TYPE_IDS = {}
_VALUES = []
_VALUE_IDS = {}
_SIGNATURES = []    # signature id -> (op id, attrs id, child type ids, type id)
_SIGNATURE_IDS = {}  # (op id, attrs id, child type ids) -> signature id, or the ShapeError it raised
_ORIGINS = []       # origin id -> the name of what added nodes (a rule's name)
_ORIGIN_IDS = {}


cdef inline int _intern(list table, dict ids, object key) except -1:
    """The id of ``key`` in an append-only interning table (``table[id] == key``), added if new."""
    cdef object i = ids.get(key)
    if i is None:
        i = len(table)
        table.append(key)
        ids[key] = i
    return i


cpdef int op_id(str name):
    """Interned id of an operator name."""
    return _intern(_OP_NAMES, _OP_IDS, name)


def op_name(int i):
    return _OP_NAMES[i]


cpdef int origin_id(str name):
    """The interned id of an origin name (what ``EGraph.origin`` is set to before adding nodes)."""
    return _intern(_ORIGINS, _ORIGIN_IDS, name)


def origin_name(int i):
    """The origin name of id ``i``; None for -1 (the input graph)."""
    return None if i < 0 else _ORIGINS[i]


cpdef int attrs_id(object attrs):
    """Interned id of an attribute set (a Mapping; normalized to ``Attrs``)."""
    if not isinstance(attrs, Attrs):
        attrs = Attrs(attrs or {})
    return _intern(_ATTRS, _ATTR_IDS, attrs)


def attrs_of(int i):
    return _ATTRS[i]


cpdef int type_id(object t):
    return _intern(_TYPES, _TYPE_IDS, t)


def type_of(int i):
    return _TYPES[i]


cpdef int value_id(object v):
    """Interned id of an attribute value (any hashable, frozen value)."""
    return _intern(_VALUES, _VALUE_IDS, v)


def value_of(int i):
    return _VALUES[i]


_INFER_MEMO = {}  # (op name, Attrs, input types) -> output type, or the ShapeError it raised
DEF INFER_MEMO_SIZE = 200000


cpdef object infer_type_memo(str op, object attrs, tuple input_types):
    """``ops.infer_type`` memoized on (op, attrs, input types); raises ShapeError (cached too).

    One memo for the signatures of added nodes (``signature_id``) and the
    right-hand sides that rules plan (``relay_eqsat.rewrite``), so a node a rule
    planned is not typed again when it is added.
    """
    key = (op, attrs, input_types)
    r = _INFER_MEMO.get(key)
    if r is None:
        try:
            r = _ops.infer_type(op, attrs, list(input_types))
        except _ops.ShapeError as e:
            r = e
        if len(_INFER_MEMO) >= INFER_MEMO_SIZE:
            _INFER_MEMO.clear()
        _INFER_MEMO[key] = r
    if isinstance(r, BaseException):
        raise r
    return r


cpdef int signature_id(int op, int attrs, tuple child_types) except -1:
    """Interned id of an e-node's signature: its op, attrs and child types (ids).

    The signature fixes the node's type (ops.infer_type, computed once here)
    and everything a node cost depends on besides constness. Raises
    ShapeError (cached too) when the operator rejects the child types.
    """
    key = (op, attrs, child_types)
    r = _SIGNATURE_IDS.get(key)
    if r is None:
        try:
            t = infer_type_memo(_OP_NAMES[op], _ATTRS[attrs], tuple([_TYPES[c] for c in child_types]))
            r = len(_SIGNATURES)
            _SIGNATURES.append((op, attrs, child_types, type_id(t)))
        except _ops.ShapeError as e:
            r = e
        _SIGNATURE_IDS[key] = r
    if isinstance(r, BaseException):
        raise r
    return r


def signature_of(int i):
    """(op id, attrs id, child type ids, type id) of signature ``i``."""
    return _SIGNATURES[i]


def infer_type_id(int op, int attrs, tuple child_types):
    """ops.infer_type on interned ids, memoized; raises ShapeError (cached too)."""
    return _SIGNATURES[signature_id(op, attrs, child_types)][3]
