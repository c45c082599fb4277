# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The e-graph core: flat arrays, union-find, hashcons, deferred rebuild, analysis.

Storage (all int32 C arrays, grown by doubling, copied with ``memcpy``):

* e-nodes ``0..nn-1`` in insertion order (the node id *is* the insertion
  order): op id, attrs id, children (a slice of one flat child array, kept
  canonical by rebuild), its signature id (op, attrs and child types), the
  class the node was added to, the scheduler iteration that added it, the
  rule whose application added it (its origin, ``origin``), flags
  (alive, blacklisted, all-inputs-constant) and the next node of its class
  (each class is a linked list of its nodes).
* e-classes ``0..nc-1``: union-find parent, node-list head/tail, analysis data
  (interned type id; flags: constant, opaque), and a linked list of parent
  entries (the nodes that use the class), spliced in O(1) on union.
* the hashcons: an open-addressing hash table (linear probing) of node ids,
  keyed by each node's (op, attrs, children) as stored in the node arrays
  (the children are canonical when the node is added or repaired, and only
  ``rebuild`` rewrites them, deleting and re-inserting the entry around it).
* per operator id, the ids of the nodes with that op in insertion order (what
  ``search`` scans instead of every node).

Operator names, attribute sets, types, attribute values and node signatures
are interned in process-wide append-only tables, so ids stay valid across
``copy()``, compiled patterns can cache per-attrs-id decisions and node costs
can be memoized per signature.

``arrays()`` copies the canonical classes and alive nodes into flat numpy
arrays (``EGraphArrays``): what extraction (``relay_eqsat.extract``) reads.

Congruence is restored egg-style: ``union`` only records the merge;
``rebuild`` re-canonicalizes the parents of merged classes, merging those that
become equal, until the worklist is empty. The analysis (type, constant,
opaque) is merged on union; a type disagreement is a bug and raises.
"""
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcpy, memset
from libc.stdint cimport int32_t, uint8_t, uint32_t, uint64_t
from cpython.ref cimport PyObject, Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.long cimport PyLong_FromLong

import numpy as _np

from ..graph import Attrs
from .. import ops as _ops
from .arrays import EGraphArrays

# ---------------------------------------------------------------------------
# process-wide interning
# ---------------------------------------------------------------------------
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


PLACEHOLDER = 1 << 30  # class references in plan templates (see apply_matches_planned)
DEF C_PLACEHOLDER = 1073741824

cdef int OP_VAR = op_id("var")
cdef int OP_CONSTANT = op_id("constant")
cdef int OP_OPAQUE = op_id("opaque")

# node flags
DEF N_ALIVE = 1
DEF N_BLACK = 2
DEF N_CONST = 4
# class flags
DEF C_CONST = 1
DEF C_OPAQUE = 2
# hashcons slots
DEF H_EMPTY = -1
DEF H_TOMB = -2


cdef inline uint64_t _key_hash(int32_t op, int32_t attrs, const int32_t* kids, int32_t m) noexcept nogil:
    """A 64-bit hash of an e-node key (op, attrs, children); a multiply-xorshift mix."""
    cdef uint64_t h = (<uint64_t> <uint32_t> op) * 0x9E3779B97F4A7C15ULL
    cdef int32_t k
    h = (h ^ (<uint64_t> <uint32_t> attrs) ^ (h >> 29)) * 0xBF58476D1CE4E5B9ULL
    for k in range(m):
        h = (h ^ (<uint64_t> <uint32_t> kids[k]) ^ (h >> 31)) * 0x94D049BB133111EBULL
    h ^= h >> 32
    return h


cdef int32_t* _grow32(int32_t* p, Py_ssize_t n) except NULL:
    cdef int32_t* q = <int32_t*> realloc(p, (n if n > 0 else 1) * sizeof(int32_t))
    if q == NULL:
        raise MemoryError()
    return q


cdef uint8_t* _grow8(uint8_t* p, Py_ssize_t n) except NULL:
    cdef uint8_t* q = <uint8_t*> realloc(p, (n if n > 0 else 1) * sizeof(uint8_t))
    if q == NULL:
        raise MemoryError()
    return q


cdef int32_t* _dup32(int32_t* p, Py_ssize_t n, Py_ssize_t cap) except NULL:
    cdef int32_t* q = <int32_t*> malloc((cap if cap > 0 else 1) * sizeof(int32_t))
    if q == NULL:
        raise MemoryError()
    if n:
        memcpy(q, p, n * sizeof(int32_t))
    return q


cdef uint8_t* _dup8(uint8_t* p, Py_ssize_t n, Py_ssize_t cap) except NULL:
    cdef uint8_t* q = <uint8_t*> malloc((cap if cap > 0 else 1) * sizeof(uint8_t))
    if q == NULL:
        raise MemoryError()
    if n:
        memcpy(q, p, n * sizeof(uint8_t))
    return q


cdef class DescendantsMap
cdef class CompiledPlan


cdef class EGraph:
    """An e-graph of tensor operations with shape/constant analysis.

    Class ids and node ids are ints. A class id stays valid after merges
    (``find`` gives its representative). Node ids are the insertion order.
    ``type_mismatches`` counts rule applications skipped because their
    right-hand side's type differs from the matched class's (see
    ``apply_matches_planned``; ``union`` itself refuses such merges).
    """

    # nodes
    cdef int32_t* n_op
    cdef int32_t* n_attrs
    cdef int32_t* n_cstart
    cdef int32_t* n_nch
    cdef int32_t* n_class
    cdef int32_t* n_iter
    cdef int32_t* n_origin   # origin id of what added the node (-1: the input graph)
    cdef int32_t* n_next
    cdef int32_t* n_stamp
    cdef uint8_t* n_flags
    cdef int32_t* n_sig      # signature id (``signature_id``)
    cdef Py_ssize_t nn, ncap
    # children
    cdef int32_t* ch
    cdef Py_ssize_t nch, chcap
    # classes
    cdef int32_t* uf
    cdef int32_t* c_head
    cdef int32_t* c_tail
    cdef int32_t* c_type
    cdef int32_t* c_phead
    cdef int32_t* c_ptail
    cdef int32_t* c_stamp
    cdef uint8_t* c_flags
    cdef Py_ssize_t nc, ccap
    # parent entries
    cdef int32_t* p_node
    cdef int32_t* p_next
    cdef Py_ssize_t np, pcap

    # hashcons: slot -> node id (H_EMPTY, H_TOMB), with the key's hash per slot
    cdef int32_t* h_node
    cdef uint64_t* h_hash
    cdef Py_ssize_t h_cap, h_used
    # per op id: node ids in insertion order
    cdef int32_t** o_nodes
    cdef int32_t* o_len
    cdef int32_t* o_cap
    cdef Py_ssize_t o_n
    cdef list pending
    cdef list apending
    cdef int32_t stamp
    cdef Py_ssize_t n_alive, n_canon, n_black
    cdef public int iteration
    cdef public int origin   # origin id stamped on the nodes added from now on (``origin_id``)
    cdef public dict constants
    cdef public dict opaque
    cdef public Py_ssize_t type_mismatches

    def __cinit__(self, *args, **kwargs):
        self.n_op = self.n_attrs = self.n_cstart = self.n_nch = NULL
        self.n_class = self.n_iter = self.n_next = self.n_stamp = NULL
        self.n_origin = NULL
        self.n_flags = NULL
        self.n_sig = NULL
        self.ch = NULL
        self.uf = self.c_head = self.c_tail = self.c_type = NULL
        self.c_phead = self.c_ptail = self.c_stamp = NULL
        self.c_flags = NULL
        self.p_node = self.p_next = NULL
        self.h_node = NULL
        self.h_hash = NULL
        self.h_cap = self.h_used = 0
        self.o_nodes = NULL
        self.o_len = self.o_cap = NULL
        self.o_n = 0
        self.nn = self.ncap = self.nch = self.chcap = 0
        self.nc = self.ccap = self.np = self.pcap = 0

    def __init__(self):
        self._alloc(256, 512, 256, 512)
        self._hc_init(1024)
        self.pending = []
        self.apending = []
        self.stamp = 0
        self.n_alive = self.n_canon = self.n_black = 0
        self.iteration = 0
        self.origin = -1
        self.constants = {}
        self.opaque = {}
        self.type_mismatches = 0

    def __dealloc__(self):
        free(self.n_op); free(self.n_attrs); free(self.n_cstart); free(self.n_nch)
        free(self.n_class); free(self.n_iter); free(self.n_next); free(self.n_stamp); free(self.n_origin)
        free(self.n_flags); free(self.n_sig); free(self.ch)
        free(self.uf); free(self.c_head); free(self.c_tail); free(self.c_type)
        free(self.c_phead); free(self.c_ptail); free(self.c_stamp); free(self.c_flags)
        free(self.p_node); free(self.p_next)
        free(self.h_node); free(self.h_hash)
        self._free_op_index()

    cdef void _free_op_index(self) noexcept:
        cdef Py_ssize_t i
        if self.o_nodes != NULL:
            for i in range(self.o_n):
                free(self.o_nodes[i])
        free(self.o_nodes); free(self.o_len); free(self.o_cap)
        self.o_nodes = NULL
        self.o_len = self.o_cap = NULL
        self.o_n = 0

    # ------------------------------------------------------------------
    # hashcons (open addressing, linear probing, tombstones)
    # ------------------------------------------------------------------
    cdef int _hc_init(self, Py_ssize_t cap) except -1:
        cdef Py_ssize_t i
        free(self.h_node); free(self.h_hash)
        self.h_node = <int32_t*> malloc(cap * sizeof(int32_t))
        self.h_hash = <uint64_t*> malloc(cap * sizeof(uint64_t))
        if self.h_node == NULL or self.h_hash == NULL:
            raise MemoryError()
        for i in range(cap):
            self.h_node[i] = H_EMPTY
        self.h_cap = cap
        self.h_used = 0
        return 0

    cdef inline bint _hc_match(self, int32_t n, int32_t op, int32_t attrs, const int32_t* kids,
                               int32_t m) noexcept nogil:
        cdef int32_t k, s
        if self.n_op[n] != op or self.n_attrs[n] != attrs or self.n_nch[n] != m:
            return False
        s = self.n_cstart[n]
        for k in range(m):
            if self.ch[s + k] != kids[k]:
                return False
        return True

    cdef int32_t _hc_get(self, int32_t op, int32_t attrs, const int32_t* kids, int32_t m) noexcept nogil:
        """The node stored under (op, attrs, kids), or -1."""
        cdef uint64_t h = _key_hash(op, attrs, kids, m)
        cdef Py_ssize_t mask = self.h_cap - 1, i = <Py_ssize_t> (h & <uint64_t> mask)
        cdef int32_t n
        while True:
            n = self.h_node[i]
            if n == H_EMPTY:
                return -1
            if n >= 0 and self.h_hash[i] == h and self._hc_match(n, op, attrs, kids, m):
                return n
            i = (i + 1) & mask

    cdef inline int32_t _hc_get_node(self, int32_t p) noexcept nogil:
        """The node stored under node ``p``'s current key, or -1."""
        return self._hc_get(self.n_op[p], self.n_attrs[p], self.ch + self.n_cstart[p], self.n_nch[p])

    cdef int _hc_set_node(self, int32_t p) except -1:
        """Store node ``p`` under its current key (replacing the node stored there, if any)."""
        cdef int32_t op = self.n_op[p], attrs = self.n_attrs[p], m = self.n_nch[p], n
        cdef const int32_t* kids = self.ch + self.n_cstart[p]
        cdef uint64_t h = _key_hash(op, attrs, kids, m)
        cdef Py_ssize_t mask, i, tomb = -1
        if (self.h_used + 1) * 2 > self.h_cap:
            self._hc_resize()
        mask = self.h_cap - 1
        i = <Py_ssize_t> (h & <uint64_t> mask)
        while True:
            n = self.h_node[i]
            if n == H_EMPTY:
                break
            if n == H_TOMB:
                if tomb < 0:
                    tomb = i
            elif self.h_hash[i] == h and self._hc_match(n, op, attrs, kids, m):
                self.h_node[i] = p
                return 0
            i = (i + 1) & mask
        if tomb >= 0:
            i = tomb
        else:
            self.h_used += 1
        self.h_node[i] = p
        self.h_hash[i] = h
        return 0

    cdef int _hc_del_node(self, int32_t p) except -1:
        """Remove the entry of node ``p``'s current key if it is ``p``'s."""
        cdef int32_t op = self.n_op[p], attrs = self.n_attrs[p], m = self.n_nch[p], n
        cdef const int32_t* kids = self.ch + self.n_cstart[p]
        cdef uint64_t h = _key_hash(op, attrs, kids, m)
        cdef Py_ssize_t mask = self.h_cap - 1, i = <Py_ssize_t> (h & <uint64_t> mask)
        while True:
            n = self.h_node[i]
            if n == H_EMPTY:
                return 0
            if n >= 0 and self.h_hash[i] == h and self._hc_match(n, op, attrs, kids, m):
                if n == p:
                    self.h_node[i] = H_TOMB
                return 0
            i = (i + 1) & mask

    cdef int _hc_resize(self) except -1:
        cdef int32_t* old_node = self.h_node
        cdef uint64_t* old_hash = self.h_hash
        cdef Py_ssize_t old_cap = self.h_cap, live = 0, i, j, cap, mask
        for i in range(old_cap):
            if old_node[i] >= 0:
                live += 1
        cap = old_cap
        while (live + 1) * 4 > cap:
            cap *= 2
        self.h_node = NULL
        self.h_hash = NULL
        try:
            self._hc_init(cap)
        except MemoryError:
            free(self.h_node); free(self.h_hash)
            self.h_node, self.h_hash, self.h_cap = old_node, old_hash, old_cap
            raise
        mask = cap - 1
        for i in range(old_cap):
            if old_node[i] >= 0:
                j = <Py_ssize_t> (old_hash[i] & <uint64_t> mask)
                while self.h_node[j] != H_EMPTY:
                    j = (j + 1) & mask
                self.h_node[j] = old_node[i]
                self.h_hash[j] = old_hash[i]
                self.h_used += 1
        free(old_node); free(old_hash)
        return 0

    # ------------------------------------------------------------------
    # per-op node index
    # ------------------------------------------------------------------
    cdef int _index_op(self, int32_t op, int32_t n) except -1:
        cdef Py_ssize_t i, newn
        cdef int32_t cap
        cdef int32_t** nodes
        cdef int32_t* lens
        cdef int32_t* caps
        cdef int32_t* q
        if op >= self.o_n:
            newn = max(op + 1, 2 * self.o_n, 64)
            nodes = <int32_t**> realloc(self.o_nodes, newn * sizeof(int32_t*))
            if nodes == NULL:
                raise MemoryError()
            self.o_nodes = nodes
            lens = <int32_t*> realloc(self.o_len, newn * sizeof(int32_t))
            if lens == NULL:
                raise MemoryError()
            self.o_len = lens
            caps = <int32_t*> realloc(self.o_cap, newn * sizeof(int32_t))
            if caps == NULL:
                raise MemoryError()
            self.o_cap = caps
            for i in range(self.o_n, newn):
                self.o_nodes[i] = NULL
                self.o_len[i] = 0
                self.o_cap[i] = 0
            self.o_n = newn
        if self.o_len[op] >= self.o_cap[op]:
            cap = self.o_cap[op] * 2 if self.o_cap[op] else 16
            q = <int32_t*> realloc(self.o_nodes[op], cap * sizeof(int32_t))
            if q == NULL:
                raise MemoryError()
            self.o_nodes[op] = q
            self.o_cap[op] = cap
        self.o_nodes[op][self.o_len[op]] = n
        self.o_len[op] += 1
        return 0

    cdef int _alloc(self, Py_ssize_t ncap, Py_ssize_t chcap, Py_ssize_t ccap, Py_ssize_t pcap) except -1:
        if ncap > self.ncap:
            self.n_op = _grow32(self.n_op, ncap)
            self.n_attrs = _grow32(self.n_attrs, ncap)
            self.n_cstart = _grow32(self.n_cstart, ncap)
            self.n_nch = _grow32(self.n_nch, ncap)
            self.n_class = _grow32(self.n_class, ncap)
            self.n_iter = _grow32(self.n_iter, ncap)
            self.n_origin = _grow32(self.n_origin, ncap)
            self.n_next = _grow32(self.n_next, ncap)
            self.n_stamp = _grow32(self.n_stamp, ncap)
            self.n_flags = _grow8(self.n_flags, ncap)
            self.n_sig = _grow32(self.n_sig, ncap)
            memset(self.n_stamp + self.ncap, 0, (ncap - self.ncap) * sizeof(int32_t))
            self.ncap = ncap
        if chcap > self.chcap:
            self.ch = _grow32(self.ch, chcap)
            self.chcap = chcap
        if ccap > self.ccap:
            self.uf = _grow32(self.uf, ccap)
            self.c_head = _grow32(self.c_head, ccap)
            self.c_tail = _grow32(self.c_tail, ccap)
            self.c_type = _grow32(self.c_type, ccap)
            self.c_phead = _grow32(self.c_phead, ccap)
            self.c_ptail = _grow32(self.c_ptail, ccap)
            self.c_stamp = _grow32(self.c_stamp, ccap)
            self.c_flags = _grow8(self.c_flags, ccap)
            memset(self.c_stamp + self.ccap, 0, (ccap - self.ccap) * sizeof(int32_t))
            self.ccap = ccap
        if pcap > self.pcap:
            self.p_node = _grow32(self.p_node, pcap)
            self.p_next = _grow32(self.p_next, pcap)
            self.pcap = pcap
        return 0

    # ------------------------------------------------------------------
    # copying
    # ------------------------------------------------------------------
    def copy(self):
        """An independent e-graph with the same contents (array copies)."""
        cdef EGraph g = EGraph.__new__(EGraph)
        cdef Py_ssize_t i
        g.ncap = self.ncap; g.nn = self.nn
        g.n_op = _dup32(self.n_op, self.nn, self.ncap)
        g.n_attrs = _dup32(self.n_attrs, self.nn, self.ncap)
        g.n_cstart = _dup32(self.n_cstart, self.nn, self.ncap)
        g.n_nch = _dup32(self.n_nch, self.nn, self.ncap)
        g.n_class = _dup32(self.n_class, self.nn, self.ncap)
        g.n_iter = _dup32(self.n_iter, self.nn, self.ncap)
        g.n_origin = _dup32(self.n_origin, self.nn, self.ncap)
        g.n_next = _dup32(self.n_next, self.nn, self.ncap)
        g.n_stamp = <int32_t*> malloc(self.ncap * sizeof(int32_t))
        if g.n_stamp == NULL:
            raise MemoryError()
        memset(g.n_stamp, 0, self.ncap * sizeof(int32_t))
        g.n_flags = _dup8(self.n_flags, self.nn, self.ncap)
        g.n_sig = _dup32(self.n_sig, self.nn, self.ncap)
        g.chcap = self.chcap; g.nch = self.nch
        g.ch = _dup32(self.ch, self.nch, self.chcap)
        g.ccap = self.ccap; g.nc = self.nc
        g.uf = _dup32(self.uf, self.nc, self.ccap)
        g.c_head = _dup32(self.c_head, self.nc, self.ccap)
        g.c_tail = _dup32(self.c_tail, self.nc, self.ccap)
        g.c_type = _dup32(self.c_type, self.nc, self.ccap)
        g.c_phead = _dup32(self.c_phead, self.nc, self.ccap)
        g.c_ptail = _dup32(self.c_ptail, self.nc, self.ccap)
        g.c_stamp = <int32_t*> malloc(self.ccap * sizeof(int32_t))
        if g.c_stamp == NULL:
            raise MemoryError()
        memset(g.c_stamp, 0, self.ccap * sizeof(int32_t))
        g.c_flags = _dup8(self.c_flags, self.nc, self.ccap)
        g.pcap = self.pcap; g.np = self.np
        g.p_node = _dup32(self.p_node, self.np, self.pcap)
        g.p_next = _dup32(self.p_next, self.np, self.pcap)
        g.h_cap = self.h_cap; g.h_used = self.h_used
        g.h_node = <int32_t*> malloc(self.h_cap * sizeof(int32_t))
        g.h_hash = <uint64_t*> malloc(self.h_cap * sizeof(uint64_t))
        if g.h_node == NULL or g.h_hash == NULL:
            raise MemoryError()
        memcpy(g.h_node, self.h_node, self.h_cap * sizeof(int32_t))
        memcpy(g.h_hash, self.h_hash, self.h_cap * sizeof(uint64_t))
        g.o_n = self.o_n
        if self.o_n:
            g.o_nodes = <int32_t**> malloc(self.o_n * sizeof(int32_t*))
            g.o_len = <int32_t*> malloc(self.o_n * sizeof(int32_t))
            g.o_cap = <int32_t*> malloc(self.o_n * sizeof(int32_t))
            if g.o_nodes == NULL or g.o_len == NULL or g.o_cap == NULL:
                raise MemoryError()
            for i in range(self.o_n):
                g.o_nodes[i] = NULL
            for i in range(self.o_n):
                g.o_len[i] = self.o_len[i]
                g.o_cap[i] = self.o_cap[i]
                if self.o_cap[i]:
                    g.o_nodes[i] = _dup32(self.o_nodes[i], self.o_len[i], self.o_cap[i])
        g.pending = list(self.pending)
        g.apending = list(self.apending)
        g.stamp = 0
        g.n_alive = self.n_alive; g.n_canon = self.n_canon; g.n_black = self.n_black
        g.iteration = self.iteration
        g.origin = self.origin
        g.constants = dict(self.constants)
        g.opaque = dict(self.opaque)
        g.type_mismatches = self.type_mismatches
        return g

    def __copy__(self):
        return self.copy()

    # ------------------------------------------------------------------
    # union-find
    # ------------------------------------------------------------------
    cdef inline int32_t _find(self, int32_t c) noexcept nogil:
        cdef int32_t* uf = self.uf
        while uf[c] != c:
            uf[c] = uf[uf[c]]
            c = uf[c]
        return c

    cpdef int find(self, int c):
        """The representative id of class ``c``."""
        if c < 0 or c >= self.nc:
            raise IndexError(f"class {c} out of range")
        return self._find(c)

    cpdef int union(self, int a, int b) except -1:
        """Merge two classes (congruence is restored by ``rebuild``); returns the root."""
        cdef int32_t ra, rb, root, other
        cdef uint8_t fa, fb
        if a < 0 or a >= self.nc or b < 0 or b >= self.nc:
            raise IndexError("class id out of range")
        ra = self._find(a)
        rb = self._find(b)
        if ra == rb:
            return ra
        if self.c_type[ra] != self.c_type[rb]:
            raise ValueError(
                f"merging classes of different types: {_TYPES[self.c_type[ra]]} (class {ra}) "
                f"and {_TYPES[self.c_type[rb]]} (class {rb})")
        root = ra if ra < rb else rb
        other = rb if ra < rb else ra
        self.uf[other] = root
        # splice node lists
        if self.c_head[other] >= 0:
            if self.c_head[root] >= 0:
                self.n_next[self.c_tail[root]] = self.c_head[other]
            else:
                self.c_head[root] = self.c_head[other]
            self.c_tail[root] = self.c_tail[other]
        # splice parent lists
        if self.c_phead[other] >= 0:
            if self.c_phead[root] >= 0:
                self.p_next[self.c_ptail[root]] = self.c_phead[other]
            else:
                self.c_phead[root] = self.c_phead[other]
            self.c_ptail[root] = self.c_ptail[other]
        fa = self.c_flags[root]
        fb = self.c_flags[other]
        self.c_flags[root] = fa | fb
        if (fa & C_CONST) != (fb & C_CONST):
            self.apending.append(root)
        self.n_canon -= 1
        self.pending.append(root)
        return root

    # ------------------------------------------------------------------
    # adding
    # ------------------------------------------------------------------
    cdef int _node_const(self, int32_t n):
        cdef int32_t k, op = self.n_op[n]
        if op == OP_CONSTANT:
            return 1
        if op == OP_VAR or op == OP_OPAQUE or self.n_nch[n] == 0:
            return 0
        for k in range(self.n_nch[n]):
            if not (self.c_flags[self._find(self.ch[self.n_cstart[n] + k])] & C_CONST):
                return 0
        return 1

    cdef int _add_parent(self, int32_t c, int32_t n) except -1:
        cdef int32_t e
        if self.np >= self.pcap:
            self._alloc(0, 0, 0, self.pcap * 2)
        e = self.np
        self.np += 1
        self.p_node[e] = n
        self.p_next[e] = -1
        if self.c_phead[c] >= 0:
            self.p_next[self.c_ptail[c]] = e
        else:
            self.c_phead[c] = e
        self.c_ptail[c] = e
        return 0

    cpdef int add_ids(self, int op, int attrs, object children) except -1:
        """Add an e-node by interned op/attrs ids; returns its (canonical) class.

        Raises ShapeError when the operator rejects its children's types.
        """
        cdef Py_ssize_t k, m = len(children)
        cdef int32_t c
        cdef int32_t buf[16]
        cdef int32_t* canon = buf
        if m > 16:
            canon = <int32_t*> malloc(m * sizeof(int32_t))
            if canon == NULL:
                raise MemoryError()
        try:
            for k in range(m):
                c = children[k]
                if c < 0 or c >= self.nc:
                    raise IndexError(f"child class {c} out of range")
                canon[k] = self._find(c)
            return self._add(op, attrs, canon, <int32_t> m)
        finally:
            if canon != buf:
                free(canon)

    cdef int32_t _add(self, int32_t op, int32_t attrs, int32_t* canon, int32_t m,
                      int32_t* sig_slot=NULL) except -1:
        """``add_ids`` with canonical children ``canon[0..m-1]``.

        ``sig_slot``: where the caller keeps this node's signature id when it
        knows the children's types in advance (a compiled plan's step): read
        when >= 0, else computed and stored there."""
        cdef Py_ssize_t k, j
        cdef int32_t c, n, cls, sig, hit
        cdef bint dup
        hit = self._hc_get(op, attrs, canon, m)
        if hit >= 0:
            return self._find(self.n_class[hit])
        if sig_slot != NULL and sig_slot[0] >= 0:
            sig = sig_slot[0]
        else:
            sig = signature_id(op, attrs, tuple([self.c_type[canon[k]] for k in range(m)]))
            if sig_slot != NULL:
                sig_slot[0] = sig
        if self.nn >= self.ncap:
            self._alloc(self.ncap * 2, 0, 0, 0)
        if self.nch + m > self.chcap:
            self._alloc(0, max(self.chcap * 2, self.nch + m), 0, 0)
        if self.nc >= self.ccap:
            self._alloc(0, 0, self.ccap * 2, 0)
        n = self.nn
        self._index_op(op, n)
        self.nn += 1
        cls = self.nc
        self.nc += 1
        self.n_op[n] = op
        self.n_attrs[n] = attrs
        self.n_cstart[n] = self.nch
        self.n_nch[n] = m
        for k in range(m):
            self.ch[self.nch + k] = canon[k]
        self.nch += m
        self.n_class[n] = cls
        self.n_iter[n] = self.iteration
        self.n_origin[n] = self.origin
        self.n_next[n] = -1
        self.n_flags[n] = N_ALIVE
        self.n_sig[n] = sig
        self.uf[cls] = cls
        self.c_head[cls] = n
        self.c_tail[cls] = n
        self.c_type[cls] = <int32_t> (<tuple> _SIGNATURES[sig])[3]
        self.c_phead[cls] = -1
        self.c_ptail[cls] = -1
        self.c_flags[cls] = 0
        if self._node_const(n):
            self.n_flags[n] |= N_CONST
            self.c_flags[cls] |= C_CONST
        if op == OP_OPAQUE:
            self.c_flags[cls] |= C_OPAQUE
        for k in range(m):
            c = canon[k]
            dup = False
            for j in range(k):
                if canon[j] == c:
                    dup = True
                    break
            if not dup:
                self._add_parent(c, n)
        self._hc_set_node(n)
        self.n_alive += 1
        self.n_canon += 1
        return cls

    def add(self, str op, attrs=None, children=()):
        """Add an e-node ``op(children)`` with ``attrs``; returns its class id."""
        return self.add_ids(op_id(op), attrs_id(attrs), children)

    def lookup(self, str op, attrs=None, children=()):
        """The class of an existing e-node ``op(children)``, or None."""
        cdef int32_t o = op_id(op), a = attrs_id(attrs), n
        cdef Py_ssize_t k, m = len(children)
        cdef int32_t* canon = <int32_t*> malloc((m if m else 1) * sizeof(int32_t))
        if canon == NULL:
            raise MemoryError()
        try:
            for k in range(m):
                canon[k] = self.find(children[k])
            n = self._hc_get(o, a, canon, <int32_t> m)
        finally:
            free(canon)
        return None if n < 0 else self._find(self.n_class[n])

    def add_graph(self, graph, list mapping=None):
        """Insert a TensorGraph; returns the class of its output.

        The graph's constants and opaque payloads are kept (renamed when they
        collide with different ones already here) so that an extracted
        TensorGraph can be rebuilt (``extract.build_graph``). If ``mapping``
        is a list, it receives the class of every graph node.
        """
        classes = []
        for node in graph.nodes:
            attrs = node.attrs
            if node.op == "constant":
                name = attrs["name"]
                value = graph.constants[name]
                if name in self.constants and self.constants[name] is not value:
                    base = name
                    i = 1
                    while f"{base}_{i}" in self.constants:
                        i += 1
                    name = f"{base}_{i}"
                    attrs = attrs.replace(name=name)
                self.constants[name] = value
            elif node.op == "opaque":
                key = len(self.opaque)
                while key in self.opaque:
                    key += 1
                self.opaque[key] = graph.opaque[attrs["key"]]
                attrs = attrs.replace(key=key)
            cls = self.add_ids(op_id(node.op), attrs_id(attrs), [classes[i] for i in node.inputs])
            classes.append(cls)
        if mapping is not None:
            mapping.extend(classes)
        if graph.output is None:
            raise ValueError("graph has no output")
        return classes[graph.output]

    def class_sigs(self, tuple classes):
        """Per class id: ``type id * 2 + constant flag`` of its class (-1 for an unknown id).

        Together with the ids themselves this is everything a rule's
        preconditions and right-hand side can see of the classes it binds.
        """
        cdef Py_ssize_t i, m = len(classes)
        cdef int32_t c
        out = [0] * m
        for i in range(m):
            c = classes[i]
            if c < 0 or c >= self.nc:
                out[i] = -1
            else:
                c = self._find(c)
                out[i] = (self.c_type[c] << 1) | (self.c_flags[c] & C_CONST)
        return tuple(out)

    cpdef bint apply_plan(self, tuple steps, tuple outs, list roots) except -1:
        """Add a rule application planned by ``Rule.plan`` and merge its outputs with ``roots``.

        ``steps``: ``(op id, attrs id, children)``, a child being a class id
        or ``-(i + 1)`` for the node of step ``i``; ``outs``: one such
        reference per root. True when the e-graph changed (new nodes or merges).
        """
        cdef Py_ssize_t before_nodes = self.n_alive, before_classes = self.n_canon, i
        cdef list handles = []
        cdef tuple st
        cdef bint changed
        cdef int o, r
        for st in steps:
            kids = [k if k >= 0 else handles[-k - 1] for k in <tuple> st[2]]
            handles.append(self.add_ids(st[0], st[1], kids))
        changed = self.n_alive != before_nodes
        for i in range(len(outs)):
            o = outs[i]
            if o < 0:
                o = handles[-o - 1]
            r = roots[i]
            if self.find(r) != self.find(o):
                self.union(r, o)
                changed = True
        return changed or self.n_canon != before_classes

    def apply_matches_planned(self, list matches, dict plans, object make_plan, int nroots, tuple cls_pos,
                              tuple other_pos, tuple rhs_pos, object cycle, Py_ssize_t node_limit=-1,
                              Py_ssize_t cache_size=500000, set used=None):
        """Apply a rule at each flat match; returns (fired, filtered).

        A match is a tuple ``(root_0, ..., root_{nroots-1}, *vars)`` (for a
        single-pattern rule, an ``EGraph.search`` tuple). It is skipped, and
        counted as filtered, when ``cycle`` says that for some output ``i`` a
        variable at ``rhs_pos[i]`` reaches ``root_i`` (``cycle``: None, a
        ``DescendantsMap`` or a callable ``(var class, root) -> bool``).
        Otherwise its plan is added (``apply_plan``). Plans are templates over
        the match's classes: ``make_plan(match, classes)`` plans with class
        ``classes[i]`` (the distinct classes at ``cls_pos``, ascending) standing
        as ``PLACEHOLDER + i``; they are memoized in ``plans`` on the values at
        ``other_pos``, the types/constness of the classes at ``cls_pos`` and
        their order pattern, i.e. on all a rule's preconditions and right-hand
        side can observe. A plan is None (a precondition fails or a new node
        does not type-check: skipped) or False (its outputs' types differ from
        the roots' classes: skipped and counted in ``type_mismatches``).
        Stops at ``node_limit`` nodes (-1: none). ``fired`` counts
        applications that changed the e-graph. ``used`` (a set, or None):
        non-overlapping application -- a match is skipped (not counted) when
        one of its roots is in ``used``, and an application that changed the
        e-graph adds its roots to it.
        """
        cdef Py_ssize_t fired = 0, filtered = 0, i, j, r, ncls = len(cls_pos), nout = len(rhs_pos)
        cdef Py_ssize_t noth = len(other_pos), nd, nkey = noth + 2 * ncls, npos, nm = len(matches), mi
        cdef tuple m, pos
        cdef int32_t c, root, v
        cdef bint bad
        cdef DescendantsMap dmap = cycle if isinstance(cycle, DescendantsMap) else None
        cdef bint use_call = cycle is not None and dmap is None
        cdef int32_t vals[64]
        cdef int32_t dist[64]
        cdef int32_t roots[64]
        cdef int32_t ipos_cls[64]
        cdef int32_t ipos_oth[128]
        cdef object key, plan
        cdef CompiledPlan cp
        if ncls > 64 or nroots > 64 or noth > 128:
            raise ValueError("too many variables in one rule")
        for i in range(ncls):
            ipos_cls[i] = cls_pos[i]
        for i in range(noth):
            ipos_oth[i] = other_pos[i]
        for mi in range(nm):
            m = matches[mi]
            if node_limit >= 0 and self.n_alive >= node_limit:
                break
            if used is not None:
                bad = False
                for i in range(nroots):
                    if m[i] in used:
                        bad = True
                        break
                if bad:
                    continue
            if dmap is not None or use_call:
                bad = False
                for i in range(nout):
                    pos = <tuple> rhs_pos[i]
                    root = m[i]
                    npos = len(pos)
                    for j in range(npos):
                        if dmap is not None:
                            bad = dmap.reaches(m[<Py_ssize_t> pos[j]], root)
                        else:
                            bad = bool(cycle(m[<Py_ssize_t> pos[j]], root))
                        if bad:
                            break
                    if bad:
                        break
                if bad:
                    filtered += 1
                    continue
            # distinct classes, ascending (insertion sort: a handful of variables)
            nd = 0
            for i in range(ncls):
                v = m[ipos_cls[i]]
                vals[i] = v
                j = nd
                while j > 0 and dist[j - 1] > v:
                    j -= 1
                if j > 0 and dist[j - 1] == v:
                    continue
                for r in range(nd, j, -1):
                    dist[r] = dist[r - 1]
                dist[j] = v
                nd += 1
            key = PyTuple_New(nkey)
            for i in range(noth):
                _tuple_set(key, i, m[ipos_oth[i]])
            for i in range(ncls):
                c = self._find(vals[i])
                _tuple_set(key, noth + i, PyLong_FromLong((self.c_type[c] << 1) | (self.c_flags[c] & C_CONST)))
                for j in range(nd):
                    if dist[j] == vals[i]:
                        _tuple_set(key, noth + ncls + i, PyLong_FromLong(j))
                        break
            plan = plans.get(key, plans)  # ``plans`` itself marks a miss
            if plan is plans:
                plan = make_plan(m, [dist[j] for j in range(nd)])
                if plan is not None and plan is not False:
                    plan = CompiledPlan(<tuple> plan[0], <tuple> plan[1])
                if len(plans) >= cache_size:
                    plans.clear()
                plans[key] = plan
            if plan is None:
                continue
            if plan is False:
                self.type_mismatches += 1
                continue
            for i in range(nroots):
                roots[i] = m[i]
            if self._apply_compiled(<CompiledPlan> plan, roots, dist, <int32_t> nd):
                fired += 1
                if used is not None:
                    for i in range(nroots):
                        used.add(m[i])
        return fired, filtered

    cdef bint _apply_compiled(self, CompiledPlan cp, const int32_t* roots, const int32_t* classes,
                              int32_t ncls) except -1:
        """Apply a compiled plan template: a reference >= PLACEHOLDER is ``classes[ref - PLACEHOLDER]``,
        ``-(i + 1)`` the class of step ``i``'s node; outputs are merged with ``roots``."""
        cdef Py_ssize_t before_nodes = self.n_alive, before_classes = self.n_canon
        cdef int32_t i, k, nk, q = 0, ref, o, r, op, attrs
        cdef int32_t kbuf[16]
        cdef int32_t hbuf[32]
        cdef int32_t* kids = kbuf
        cdef int32_t* handles = hbuf
        cdef bint changed
        cdef const int32_t* d = cp.data
        if cp.nsteps > 32:
            handles = <int32_t*> malloc(cp.nsteps * sizeof(int32_t))
            if handles == NULL:
                raise MemoryError()
        if cp.maxkids > 16:
            kids = <int32_t*> malloc(cp.maxkids * sizeof(int32_t))
            if kids == NULL:
                if handles != hbuf:
                    free(handles)
                raise MemoryError()
        try:
            for i in range(cp.nsteps):
                op = d[q]
                attrs = d[q + 1]
                nk = d[q + 2]
                q += 3
                for k in range(nk):
                    ref = d[q + k]
                    if ref < 0:
                        ref = handles[-ref - 1]
                    elif ref >= C_PLACEHOLDER:
                        ref = classes[ref - C_PLACEHOLDER]
                    if ref < 0 or ref >= self.nc:
                        raise IndexError(f"child class {ref} out of range")
                    kids[k] = self._find(ref)
                q += nk
                handles[i] = self._add(op, attrs, kids, nk, cp.sigs + i)
            changed = self.n_alive != before_nodes
            for i in range(cp.nouts):
                o = d[q + i]
                if o < 0:
                    o = handles[-o - 1]
                elif o >= C_PLACEHOLDER:
                    o = classes[o - C_PLACEHOLDER]
                r = roots[i]
                if self.find(r) != self.find(o):
                    self.union(r, o)
                    changed = True
        finally:
            if handles != hbuf:
                free(handles)
            if kids != kbuf:
                free(kids)
        return changed or self.n_canon != before_classes

    # ------------------------------------------------------------------
    # rebuilding
    # ------------------------------------------------------------------
    cdef int _repair(self, int32_t c) except -1:
        cdef int32_t e, p, other, keep, drop, k, s, prev
        cdef list parents = []
        e = self.c_phead[c]
        while e >= 0:
            parents.append(self.p_node[e])
            e = self.p_next[e]
        for p in parents:
            if not (self.n_flags[p] & N_ALIVE):
                continue
            self._hc_del_node(p)
            s = self.n_cstart[p]
            for k in range(self.n_nch[p]):
                self.ch[s + k] = self._find(self.ch[s + k])
            other = self._hc_get_node(p)
            if other < 0:
                self._hc_set_node(p)
                continue
            if other == p:
                continue
            # congruent nodes: keep one (not blacklisted if possible, else the older)
            if (self.n_flags[p] & N_BLACK) != (self.n_flags[other] & N_BLACK):
                keep = other if (self.n_flags[p] & N_BLACK) else p
            else:
                keep = p if p < other else other
            drop = other if keep == p else p
            if keep == p:
                self._hc_set_node(p)
            if self.n_flags[drop] & N_BLACK:
                self.n_black -= 1
            self.n_flags[drop] &= ~(N_ALIVE | N_BLACK)
            self.n_alive -= 1
            self.union(self.n_class[p], self.n_class[other])
        # dedupe the (now canonical) class's parent list and drop dead nodes
        c = self._find(c)
        self.stamp += 1
        prev = -1
        e = self.c_phead[c]
        while e >= 0:
            p = self.p_node[e]
            if (self.n_flags[p] & N_ALIVE) and self.n_stamp[p] != self.stamp:
                self.n_stamp[p] = self.stamp
                if prev >= 0:
                    self.p_next[prev] = e
                else:
                    self.c_phead[c] = e
                prev = e
            e = self.p_next[e]
        if prev >= 0:
            self.p_next[prev] = -1
        else:
            self.c_phead[c] = -1
        self.c_ptail[c] = prev
        # drop dead nodes from the class's node list
        prev = -1
        e = self.c_head[c]
        while e >= 0:
            if self.n_flags[e] & N_ALIVE:
                if prev >= 0:
                    self.n_next[prev] = e
                else:
                    self.c_head[c] = e
                prev = e
            e = self.n_next[e]
        if prev >= 0:
            self.n_next[prev] = -1
        else:
            self.c_head[c] = -1
        self.c_tail[c] = prev
        return 0

    cdef int _propagate_const(self, int32_t c) except -1:
        cdef int32_t e, p, pc
        e = self.c_phead[c]
        while e >= 0:
            p = self.p_node[e]
            e = self.p_next[e]
            if (self.n_flags[p] & N_ALIVE) and not (self.n_flags[p] & N_CONST) and self._node_const(p):
                self.n_flags[p] |= N_CONST
                pc = self._find(self.n_class[p])
                if not (self.c_flags[pc] & C_CONST):
                    self.c_flags[pc] |= C_CONST
                    self.apending.append(pc)
        return 0

    def rebuild(self):
        """Restore congruence and the analysis after unions; returns the number of repairs."""
        cdef int repairs = 0
        while self.pending or self.apending:
            while self.pending:
                todo = {self._find(c) for c in self.pending}
                self.pending = []
                for c in todo:
                    self._repair(self._find(c))
                    repairs += 1
            while self.apending:
                c = self.apending.pop()
                self._propagate_const(self._find(c))
        return repairs

    @property
    def clean(self):
        """True when no union awaits a rebuild."""
        return not self.pending and not self.apending

    # ------------------------------------------------------------------
    # queries
    # ------------------------------------------------------------------
    @property
    def num_classes(self):
        """Number of e-classes (canonical)."""
        return self.n_canon

    @property
    def num_nodes(self):
        """Number of e-nodes (alive: congruent duplicates removed), blacklisted included."""
        return self.n_alive

    @property
    def num_blacklisted(self):
        return self.n_black

    @property
    def total_nodes(self):
        """Node ids allocated so far (ids are 0..total_nodes-1, some dead)."""
        return self.nn

    @property
    def total_classes(self):
        return self.nc

    def classes(self):
        """Canonical class ids, ascending."""
        cdef int32_t c
        return [c for c in range(self.nc) if self.uf[c] == c]

    def class_nodes(self, int c):
        """Alive node ids of class ``c`` (blacklisted included), in list order."""
        cdef int32_t n
        out = []
        n = self.c_head[self._find(c)]
        while n >= 0:
            if self.n_flags[n] & N_ALIVE:
                out.append(n)
            n = self.n_next[n]
        return out

    def nodes(self):
        """All alive node ids, ascending (insertion order)."""
        cdef int32_t n
        return [n for n in range(self.nn) if self.n_flags[n] & N_ALIVE]

    cdef int _check_node(self, int n) except -1:
        if n < 0 or n >= self.nn:
            raise IndexError(f"node {n} out of range")
        return 0

    def node_op(self, int n):
        self._check_node(n)
        return _OP_NAMES[self.n_op[n]]

    def node_op_id(self, int n):
        self._check_node(n)
        return self.n_op[n]

    def node_attrs(self, int n):
        self._check_node(n)
        return _ATTRS[self.n_attrs[n]]

    def node_attrs_id(self, int n):
        self._check_node(n)
        return self.n_attrs[n]

    def node_children(self, int n):
        """Canonical child classes of node ``n``."""
        self._check_node(n)
        cdef int32_t k, s = self.n_cstart[n]
        return tuple([self._find(self.ch[s + k]) for k in range(self.n_nch[n])])

    def node_class(self, int n):
        self._check_node(n)
        return self._find(self.n_class[n])

    def node_iteration(self, int n):
        """The scheduler iteration during which node ``n`` was added (0: the input graph)."""
        self._check_node(n)
        return self.n_iter[n]

    def node_origin(self, int n):
        """The name of what added node ``n`` (the rule whose application added it first; None:
        the input graph)."""
        self._check_node(n)
        return origin_name(self.n_origin[n])

    def node_alive(self, int n):
        self._check_node(n)
        return bool(self.n_flags[n] & N_ALIVE)

    def node_constant(self, int n):
        """True when all the node's inputs are constant (a constant leaf is constant)."""
        self._check_node(n)
        return bool(self.n_flags[n] & N_CONST)

    def node(self, int n):
        """(op, attrs, canonical children) of node ``n``."""
        return self.node_op(n), self.node_attrs(n), self.node_children(n)

    def class_type(self, int c):
        """The class's type (TensorType or TupleType)."""
        return _TYPES[self.c_type[self.find(c)]]

    def class_type_id(self, int c):
        return self.c_type[self.find(c)]

    def class_const(self, int c):
        """True when the class's value can be computed from constants alone."""
        return bool(self.c_flags[self.find(c)] & C_CONST)

    def class_opaque(self, int c):
        """True when the class contains an opaque operator."""
        return bool(self.c_flags[self.find(c)] & C_OPAQUE)

    def __len__(self):
        return self.n_alive

    def __repr__(self):
        return f"EGraph({self.n_canon} classes, {self.n_alive} nodes, {self.n_black} blacklisted)"

    def dump(self):
        """A readable listing of classes and nodes (for debugging)."""
        lines = []
        for c in self.classes():
            lines.append(f"class {c}: {self.class_type(c)}" + (" const" if self.class_const(c) else ""))
            for n in self.class_nodes(c):
                op, attrs, chs = self.node(n)
                bl = " [blacklisted]" if self.is_blacklisted(n) else ""
                a = "" if not attrs else " " + repr(attrs)
                lines.append(f"  n{n} {op}({', '.join(map(str, chs))}){a}{bl}")
        return "\n".join(lines)

    # ------------------------------------------------------------------
    # blacklist (TENSAT's filter list)
    # ------------------------------------------------------------------
    def blacklist(self, int n):
        self._check_node(n)
        if (self.n_flags[n] & N_ALIVE) and not (self.n_flags[n] & N_BLACK):
            self.n_flags[n] |= N_BLACK
            self.n_black += 1

    def is_blacklisted(self, int n):
        self._check_node(n)
        return bool(self.n_flags[n] & N_BLACK)

    def blacklisted_nodes(self):
        cdef int32_t n
        return [n for n in range(self.nn) if (self.n_flags[n] & N_BLACK) and (self.n_flags[n] & N_ALIVE)]

    # ------------------------------------------------------------------
    # fingerprint
    # ------------------------------------------------------------------
    def fingerprint(self):
        """A 64-bit hash of the e-graph's state (nodes, classes, blacklist).

        Equal for e-graphs with identical contents built in the same order
        (copies, or replays of the same rule applications); used to cache
        extraction results.
        """
        cdef uint64_t h = 1469598103934665603ULL
        cdef uint64_t P = 1099511628211ULL
        cdef int32_t n, k, s
        for n in range(self.nn):
            if not (self.n_flags[n] & N_ALIVE):
                continue
            h = (h ^ <uint64_t> n) * P
            h = (h ^ <uint64_t> self.n_op[n]) * P
            h = (h ^ <uint64_t> self.n_attrs[n]) * P
            h = (h ^ <uint64_t> self._find(self.n_class[n])) * P
            h = (h ^ <uint64_t> (self.n_flags[n] & N_BLACK)) * P
            s = self.n_cstart[n]
            for k in range(self.n_nch[n]):
                h = (h ^ <uint64_t> self._find(self.ch[s + k])) * P
        return h

    # ------------------------------------------------------------------
    # cycles
    # ------------------------------------------------------------------
    def reachable(self, int src, int dst):
        """True if class ``dst`` is reachable from class ``src`` (src == dst counts)
        through alive, non-blacklisted nodes of the current e-graph (vanilla check)."""
        cdef int32_t s = self.find(src), d = self.find(dst), c, n, k, cc
        if s == d:
            return True
        self.stamp += 1
        cdef list stack = [s]
        self.c_stamp[s] = self.stamp
        while stack:
            c = stack.pop()
            n = self.c_head[c]
            while n >= 0:
                if (self.n_flags[n] & N_ALIVE) and not (self.n_flags[n] & N_BLACK):
                    for k in range(self.n_nch[n]):
                        cc = self._find(self.ch[self.n_cstart[n] + k])
                        if cc == d:
                            return True
                        if self.c_stamp[cc] != self.stamp:
                            self.c_stamp[cc] = self.stamp
                            stack.append(cc)
                n = self.n_next[n]
        return False

    def resolve_cycles(self):
        """TENSAT's post-processing: DFS for cycles among alive, non-blacklisted
        nodes and blacklist the newest node of each cycle, until none remain.

        Returns the list of nodes blacklisted. Call after ``rebuild``.
        """
        out = []
        while True:
            found = self._dfs_blacklist(out)
            if not found:
                return out

    cdef int _dfs_blacklist(self, list out) except -1:
        cdef Py_ssize_t nc = self.nc
        cdef uint8_t* state = <uint8_t*> malloc(nc if nc else 1)
        cdef int32_t* spos = <int32_t*> malloc((nc if nc else 1) * sizeof(int32_t))
        cdef int32_t* st_c = <int32_t*> malloc((nc if nc else 1) * sizeof(int32_t))
        cdef int32_t* st_n = <int32_t*> malloc((nc if nc else 1) * sizeof(int32_t))
        cdef int32_t* st_k = <int32_t*> malloc((nc if nc else 1) * sizeof(int32_t))
        cdef int32_t top, c, n, k, child, s0, i, newest, found = 0
        if state == NULL or spos == NULL or st_c == NULL or st_n == NULL or st_k == NULL:
            free(state); free(spos); free(st_c); free(st_n); free(st_k)
            raise MemoryError()
        try:
            memset(state, 0, nc)
            for s0 in range(nc):
                if self.uf[s0] != s0 or state[s0] != 0:
                    continue
                top = 0
                st_c[0] = s0
                st_n[0] = self.c_head[s0]
                st_k[0] = 0
                state[s0] = 1
                spos[s0] = 0
                while top >= 0:
                    c = st_c[top]
                    n = st_n[top]
                    if n < 0:
                        state[c] = 2
                        top -= 1
                        continue
                    if not (self.n_flags[n] & N_ALIVE) or (self.n_flags[n] & N_BLACK) or st_k[top] >= self.n_nch[n]:
                        st_n[top] = self.n_next[n]
                        st_k[top] = 0
                        continue
                    k = st_k[top]
                    st_k[top] = k + 1
                    child = self._find(self.ch[self.n_cstart[n] + k])
                    if state[child] == 0:
                        top += 1
                        st_c[top] = child
                        st_n[top] = self.c_head[child]
                        st_k[top] = 0
                        state[child] = 1
                        spos[child] = top
                    elif state[child] == 1:
                        # cycle: the nodes st_n[spos[child]..top]
                        newest = -1
                        for i in range(spos[child], top + 1):
                            if st_n[i] > newest:
                                newest = st_n[i]
                        self.n_flags[newest] |= N_BLACK
                        self.n_black += 1
                        out.append(newest)
                        found += 1
        finally:
            free(state); free(spos); free(st_c); free(st_n); free(st_k)
        return found

    def has_cycle(self):
        """True if the alive, non-blacklisted nodes contain a cycle."""
        cdef EGraph g = self.copy()
        return len(g.resolve_cycles()) > 0

    def descendants_map(self):
        """A snapshot for TENSAT's cycle pre-filter (see ``DescendantsMap``)."""
        return DescendantsMap(self)

    # ------------------------------------------------------------------
    # e-matching
    # ------------------------------------------------------------------
    cpdef Py_ssize_t op_count(self, int op):
        """How many nodes with operator id ``op`` were ever added (dead ones included):
        0 means ``search`` of a pattern rooted at ``op`` finds nothing."""
        return self.o_len[op] if 0 <= op < self.o_n else 0

    def search(self, Program prog, int limit=-1):
        """All matches of a compiled pattern: a list of tuples
        ``(root class, class-var classes..., attr-var value ids...)``, deduplicated."""
        cdef int32_t n, root_op = prog.op[0], root_nch = prog.nch[0], i, cnt
        cdef int32_t* regs = <int32_t*> malloc((prog.nregs + 1) * sizeof(int32_t))
        cdef int32_t* aslots = <int32_t*> malloc((prog.nattr + 1) * sizeof(int32_t))
        cdef set seen = set()
        cdef list out = []
        if regs == NULL or aslots == NULL:
            free(regs); free(aslots)
            raise MemoryError()
        cnt = self.o_len[root_op] if root_op < self.o_n else 0
        try:
            for i in range(cnt):
                n = self.o_nodes[root_op][i]
                if self.n_nch[n] != root_nch:
                    continue
                if not (self.n_flags[n] & N_ALIVE) or (self.n_flags[n] & N_BLACK):
                    continue
                regs[0] = self._find(self.n_class[n])
                self._run(prog, 0, n, regs, aslots, seen, out)
                if limit >= 0 and len(out) >= limit:
                    break
        finally:
            free(regs); free(aslots)
        return out

    def search_class(self, Program prog, int c):
        """Matches of a compiled pattern rooted at class ``c``."""
        cdef int32_t* regs = <int32_t*> malloc((prog.nregs + 1) * sizeof(int32_t))
        cdef int32_t* aslots = <int32_t*> malloc((prog.nattr + 1) * sizeof(int32_t))
        cdef set seen = set()
        cdef list out = []
        if regs == NULL or aslots == NULL:
            free(regs); free(aslots)
            raise MemoryError()
        try:
            regs[0] = self.find(c)
            self._run(prog, 0, -1, regs, aslots, seen, out)
        finally:
            free(regs); free(aslots)
        return out

    cdef int _run(self, Program p, int ip, int32_t fixed, int32_t* regs, int32_t* aslots,
                  set seen, list out) except -1:
        cdef int32_t n, k, s, cls, op, nch, j, slot
        cdef object vals
        if ip == p.ninstr:
            m = PyTuple_New(1 + p.nvars + p.nattr)
            _tuple_set(m, 0, PyLong_FromLong(regs[0]))
            for j in range(p.nvars):
                _tuple_set(m, 1 + j, PyLong_FromLong(self._find(regs[p.var_reg[j]])))
            for j in range(p.nattr):
                _tuple_set(m, 1 + p.nvars + j, PyLong_FromLong(aslots[j]))
            if m not in seen:
                seen.add(m)
                out.append(m)
            return 0
        if p.kind[ip] == 1:  # compare two registers
            if self._find(regs[p.in_reg[ip]]) == self._find(regs[p.other_reg[ip]]):
                self._run(p, ip + 1, -1, regs, aslots, seen, out)
            return 0
        cls = self._find(regs[p.in_reg[ip]])
        op = p.op[ip]
        nch = p.nch[ip]
        n = fixed if fixed >= 0 else self.c_head[cls]
        while n >= 0:
            if self.n_op[n] == op and self.n_nch[n] == nch and (self.n_flags[n] & N_ALIVE) \
                    and not (self.n_flags[n] & N_BLACK):
                ok = True
                filt = p.filters[ip]
                if filt is not None:
                    vals = (<AttrFilter> filt).check(self.n_attrs[n])
                    if vals is None:
                        ok = False
                    else:
                        for j in range(len(<tuple> vals)):
                            slot = (<AttrFilter> filt).slots[j]
                            if (<AttrFilter> filt).first[j]:
                                aslots[slot] = <int32_t> (<tuple> vals)[j]
                            elif aslots[slot] != <int32_t> (<tuple> vals)[j]:
                                ok = False
                                break
                if ok:
                    s = self.n_cstart[n]
                    for k in range(nch):
                        regs[p.child_reg[ip] + k] = self._find(self.ch[s + k])
                    self._run(p, ip + 1, -1, regs, aslots, seen, out)
            if fixed >= 0:
                break
            n = self.n_next[n]
        return 0

    # ------------------------------------------------------------------
    # flat view
    # ------------------------------------------------------------------
    def arrays(self):
        """The canonical classes and alive nodes as flat numpy arrays (one copy; see
        ``EGraphArrays``), after a rebuild if one is pending."""
        if not self.clean:
            self.rebuild()
        cdef Py_ssize_t nc = self.nc, nn = self.nn, C = 0, N = 0, M = 0, i, j, m, k
        cdef int32_t c, n, s
        for c in range(nc):
            if self.uf[c] == c:
                C += 1
        for n in range(nn):
            if self.n_flags[n] & N_ALIVE:
                N += 1
                M += self.n_nch[n]
        # one int32 block and one flag block, sliced into the fields
        ints = _np.empty(2 * C + nc + 6 * N + 1 + M, _np.int32)
        flags = _np.empty(2 * N + 1, _np.uint8)
        cdef int32_t[::1] iview = ints
        cdef uint8_t[::1] fview = flags
        cdef int32_t* class_id = &iview[0]
        cdef int32_t* class_type = class_id + C
        cdef int32_t* class_index = class_type + C
        cdef int32_t* node_id = class_index + nc
        cdef int32_t* node_class = node_id + N
        cdef int32_t* node_op = node_class + N
        cdef int32_t* node_attrs = node_op + N
        cdef int32_t* node_sig = node_attrs + N
        cdef int32_t* child_start = node_sig + N
        cdef int32_t* children = child_start + N + 1
        cdef uint8_t* node_const = &fview[0]
        cdef uint8_t* node_black = node_const + N
        i = 0
        for c in range(nc):
            if self.uf[c] == c:
                class_id[i] = c
                class_type[i] = self.c_type[c]
                class_index[c] = <int32_t> i
                i += 1
        for c in range(nc):
            class_index[c] = class_index[self._find(c)]
        j = 0
        m = 0
        for i in range(C):
            n = self.c_head[class_id[i]]
            while n >= 0:
                if self.n_flags[n] & N_ALIVE:
                    if j == N:
                        raise RuntimeError("alive nodes outside their class lists")
                    node_id[j] = n
                    node_class[j] = <int32_t> i
                    node_op[j] = self.n_op[n]
                    node_attrs[j] = self.n_attrs[n]
                    node_sig[j] = self.n_sig[n]
                    node_const[j] = (self.n_flags[n] & N_CONST) != 0
                    node_black[j] = (self.n_flags[n] & N_BLACK) != 0
                    child_start[j] = <int32_t> m
                    s = self.n_cstart[n]
                    for k in range(self.n_nch[n]):
                        children[m] = class_index[self._find(self.ch[s + k])]
                        m += 1
                    j += 1
                n = self.n_next[n]
        if j != N:
            raise RuntimeError("alive nodes outside their class lists")
        child_start[N] = <int32_t> m
        o = 2 * C + nc
        return EGraphArrays(
            class_id=ints[:C], class_type=ints[C:2 * C], class_index=ints[2 * C:o],
            node_id=ints[o:o + N], node_class=ints[o + N:o + 2 * N], node_op=ints[o + 2 * N:o + 3 * N],
            node_attrs=ints[o + 3 * N:o + 4 * N], node_sig=ints[o + 4 * N:o + 5 * N],
            child_start=ints[o + 5 * N:o + 6 * N + 1], children=ints[o + 6 * N + 1:],
            node_const=flags[:N].view(_np.bool_), node_black=flags[N:2 * N].view(_np.bool_))


cdef inline void _tuple_set(object t, Py_ssize_t i, object v):
    """PyTuple_SET_ITEM with the reference it steals."""
    Py_INCREF(v)
    PyTuple_SET_ITEM(t, i, v)


def join_flat(list matches, list slots, Py_ssize_t width, Py_ssize_t limit=-1):
    """The join of a multi-pattern rule's search matches as flat tuples (see ``rules.flat_join``).

    ``matches[i]``: the search tuples ``(root, *values)`` of pattern ``i``;
    ``slots[i]``: the position in the result of each of its values. A result
    is ``(root_0, ..., root_{k-1}, ...)`` of width ``width``: combinations
    agreeing on shared positions, no root twice, in the order of a nested
    loop over the patterns. ``limit`` >= 0: at most that many (every stage
    stops there).
    """
    cdef Py_ssize_t k = len(matches), i, j, r, nrow, nnext, cap, ncap, ns, ni, q, mi
    cdef int32_t* rows = NULL
    cdef int32_t* nxt = NULL
    cdef int32_t* tmp
    cdef int32_t* row
    cdef int32_t* out_row
    cdef int32_t shared_pos[64]
    cdef int32_t shared_slot[64]
    cdef int32_t si_slot[64]
    cdef bint bound[256]
    cdef bint dup
    cdef tuple m, si
    cdef list hits, result
    cdef dict index
    cdef int32_t root
    if k == 0:
        return []
    if width > 256:
        raise ValueError("too many variables in one rule")
    for i in range(width):
        bound[i] = False
    nrow = len(<list> matches[0])
    rows = <int32_t*> malloc((nrow if nrow else 1) * width * sizeof(int32_t))
    if rows == NULL:
        raise MemoryError()
    try:
        si = <tuple> slots[0]
        for r in range(nrow):
            m = (<list> matches[0])[r]
            row = rows + r * width
            for j in range(width):
                row[j] = -1
            row[0] = m[0]
            for j in range(len(si)):
                row[<int32_t> si[j]] = m[1 + j]
        for j in range(len(si)):
            bound[<int32_t> si[j]] = True
        for i in range(1, k):
            si = <tuple> slots[i]
            ni = len(si)
            if ni > 64:
                raise ValueError("too many variables in one pattern")
            ns = 0
            for j in range(ni):
                si_slot[j] = si[j]
                if bound[si_slot[j]]:
                    shared_pos[ns] = <int32_t> j
                    shared_slot[ns] = si_slot[j]
                    ns += 1
            index = {}
            for mi in range(len(<list> matches[i])):
                m = (<list> matches[i])[mi]
                if ns == 1:
                    key = m[1 + shared_pos[0]]
                else:
                    key = tuple([m[1 + shared_pos[q]] for q in range(ns)])
                hits = index.get(key)
                if hits is None:
                    index[key] = [m]
                else:
                    hits.append(m)
            ncap = 1024
            nnext = 0
            nxt = <int32_t*> malloc(ncap * width * sizeof(int32_t))
            if nxt == NULL:
                raise MemoryError()
            for r in range(nrow):
                row = rows + r * width
                if ns == 1:
                    key = row[shared_slot[0]]
                else:
                    key = tuple([row[shared_slot[q]] for q in range(ns)])
                hits = index.get(key)
                if hits is None:
                    continue
                for m in hits:
                    root = m[0]
                    dup = False
                    for j in range(i):
                        if row[j] == root:
                            dup = True
                            break
                    if dup:
                        continue
                    if nnext == ncap:
                        ncap *= 2
                        tmp = <int32_t*> realloc(nxt, ncap * width * sizeof(int32_t))
                        if tmp == NULL:
                            raise MemoryError()
                        nxt = tmp
                    out_row = nxt + nnext * width
                    memcpy(out_row, row, width * sizeof(int32_t))
                    out_row[i] = root
                    for j in range(ni):
                        out_row[si_slot[j]] = m[1 + j]
                    nnext += 1
                    if nnext == limit:
                        break
                if nnext == limit:
                    break
            free(rows)
            rows = nxt
            nxt = NULL
            nrow = nnext
            if nrow == 0:
                return []
            for j in range(ni):
                bound[si_slot[j]] = True
        result = []
        for r in range(nrow):
            row = rows + r * width
            t = PyTuple_New(width)
            for j in range(width):
                _tuple_set(t, j, PyLong_FromLong(row[j]))
            result.append(t)
        return result
    finally:
        free(rows)
        free(nxt)


cdef class CompiledPlan:
    """An application plan (``(steps, outs)``, see ``apply_plan``) as one int32 array:
    per step op, attrs, number of children, the children; then the outputs.

    ``sigs``: each step's signature id once known (-1 before). A plan is a
    template over classes of fixed types (``apply_matches_planned`` keys plans
    on them), so each step's children have the same types, hence the same
    signature, at every application."""

    cdef int32_t* data
    cdef int32_t* sigs
    cdef int32_t nsteps, nouts, maxkids

    def __cinit__(self, tuple steps, tuple outs):
        cdef Py_ssize_t size = len(outs), q = 0
        cdef tuple st, kids
        self.data = NULL
        self.sigs = NULL
        self.maxkids = 0
        for st in steps:
            size += 3 + len(<tuple> st[2])
            if len(<tuple> st[2]) > self.maxkids:
                self.maxkids = len(<tuple> st[2])
        self.data = <int32_t*> malloc((size if size else 1) * sizeof(int32_t))
        if self.data == NULL:
            raise MemoryError()
        self.nsteps = len(steps)
        self.nouts = len(outs)
        self.sigs = <int32_t*> malloc((self.nsteps if self.nsteps else 1) * sizeof(int32_t))
        if self.sigs == NULL:
            raise MemoryError()
        for q in range(self.nsteps):
            self.sigs[q] = -1
        q = 0
        for st in steps:
            kids = <tuple> st[2]
            self.data[q] = st[0]
            self.data[q + 1] = st[1]
            self.data[q + 2] = len(kids)
            q += 3
            for k in kids:
                self.data[q] = k
                q += 1
        for o in outs:
            self.data[q] = o
            q += 1

    def __dealloc__(self):
        free(self.data)
        free(self.sigs)


# ---------------------------------------------------------------------------
# cycle pre-filter
# ---------------------------------------------------------------------------
cdef class DescendantsMap:
    """TENSAT's per-iteration descendants map, stored compactly.

    A snapshot of the class graph (canonical classes; edges through alive,
    non-blacklisted nodes) taken at the start of an iteration, with a
    post-order position per class. ``reaches(v, r)`` answers "is r a
    descendant of v (or v itself)" in that snapshot: O(1) when the positions
    rule it out (the common case: inputs and weights sit early in post-order),
    otherwise a DFS pruned to classes after r, memoized. Class ids created
    after the snapshot have no descendants in it.
    """

    cdef int32_t* off
    cdef int32_t* adj
    cdef int32_t* pos
    cdef int32_t* mark
    cdef int32_t stamp
    cdef Py_ssize_t nc
    cdef dict memo

    def __cinit__(self, EGraph g):
        cdef Py_ssize_t nc = g.nc
        cdef int32_t c, n, k, cc, e, top, cnt = 0, p
        self.nc = nc
        self.memo = {}
        self.stamp = 0
        self.off = <int32_t*> malloc((nc + 1) * sizeof(int32_t))
        self.pos = <int32_t*> malloc((nc + 1) * sizeof(int32_t))
        self.mark = <int32_t*> malloc((nc + 1) * sizeof(int32_t))
        if self.off == NULL or self.pos == NULL or self.mark == NULL:
            raise MemoryError()
        memset(self.mark, 0, (nc + 1) * sizeof(int32_t))
        # count edges, then fill (dedupe with the mark array)
        edges = []
        for c in range(nc):
            self.off[c] = cnt
            if g.uf[c] != c:
                continue
            self.stamp += 1
            n = g.c_head[c]
            while n >= 0:
                if (g.n_flags[n] & N_ALIVE) and not (g.n_flags[n] & N_BLACK):
                    for k in range(g.n_nch[n]):
                        cc = g._find(g.ch[g.n_cstart[n] + k])
                        if self.mark[cc] != self.stamp:
                            self.mark[cc] = self.stamp
                            edges.append(cc)
                            cnt += 1
                n = g.n_next[n]
        self.off[nc] = cnt
        self.adj = <int32_t*> malloc((cnt + 1) * sizeof(int32_t))
        if self.adj == NULL:
            raise MemoryError()
        for e in range(cnt):
            self.adj[e] = edges[e]
        # post-order positions (iterative DFS); cycles (if any) are tolerated
        memset(self.mark, 0, (nc + 1) * sizeof(int32_t))
        for c in range(nc):
            self.pos[c] = -1
        cdef int32_t* st_c = <int32_t*> malloc((nc + 1) * sizeof(int32_t))
        cdef int32_t* st_e = <int32_t*> malloc((nc + 1) * sizeof(int32_t))
        if st_c == NULL or st_e == NULL:
            free(st_c); free(st_e)
            raise MemoryError()
        p = 0
        for c in range(nc):
            if g.uf[c] != c or self.mark[c]:
                continue
            top = 0
            st_c[0] = c
            st_e[0] = self.off[c]
            self.mark[c] = 1
            while top >= 0:
                cc = st_c[top]
                if st_e[top] < self.off[cc + 1]:
                    e = self.adj[st_e[top]]
                    st_e[top] += 1
                    if not self.mark[e]:
                        self.mark[e] = 1
                        top += 1
                        st_c[top] = e
                        st_e[top] = self.off[e]
                else:
                    self.pos[cc] = p
                    p += 1
                    top -= 1
        free(st_c); free(st_e)
        memset(self.mark, 0, (nc + 1) * sizeof(int32_t))
        self.stamp = 0

    def __dealloc__(self):
        free(self.off); free(self.adj); free(self.pos); free(self.mark)

    cpdef bint reaches(self, int v, int r):
        """True if class ``r`` is ``v`` or a descendant of ``v`` in the snapshot."""
        cdef int32_t c, e, pr
        if v == r:
            return True
        if v < 0 or r < 0 or v >= self.nc or r >= self.nc:
            return False
        pr = self.pos[r]
        if pr < 0 or self.pos[v] < pr:
            return False
        key = (v, r)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        self.stamp += 1
        cdef list stack = [v]
        self.mark[v] = self.stamp
        found = False
        while stack and not found:
            c = stack.pop()
            for e in range(self.off[c], self.off[c + 1]):
                cc = self.adj[e]
                if cc == r:
                    found = True
                    break
                if self.mark[cc] != self.stamp and self.pos[cc] > pr:
                    self.mark[cc] = self.stamp
                    stack.append(cc)
        self.memo[key] = found
        return found


# ---------------------------------------------------------------------------
# compiled patterns
# ---------------------------------------------------------------------------
cdef class AttrFilter:
    """Attribute constraints of one pattern node, memoized per attrs id.

    ``literals``: {key: value} the attrs must contain; ``vars``: [(key, slot,
    first)] attribute values bound to attr-var slots; ``whole``: (slot, first)
    binding the whole attribute set (its attrs id) or None.
    """

    cdef public dict literals
    cdef public list var_keys
    cdef public list slots
    cdef public list first
    cdef dict cache

    def __init__(self, dict literals, list vars, object whole):
        self.literals = literals
        self.var_keys = []
        self.slots = []
        self.first = []
        self.cache = {}
        if whole is not None:
            self.var_keys.append(None)
            self.slots.append(whole[0])
            self.first.append(bool(whole[1]))
        for key, slot, first in vars:
            self.var_keys.append(key)
            self.slots.append(slot)
            self.first.append(bool(first))

    cdef object check(self, int32_t aid):
        r = self.cache.get(aid)
        if r is None:
            attrs = _ATTRS[aid]
            r = False
            for k, v in self.literals.items():
                if k not in attrs or attrs[k] != v:
                    break
            else:
                vals = []
                for k in self.var_keys:
                    if k is None:
                        vals.append(aid)
                    elif k not in attrs:
                        break
                    else:
                        vals.append(value_id(attrs[k]))
                else:
                    r = tuple(vals)
            self.cache[aid] = r
        return None if r is False else r


cdef class Program:
    """A pattern compiled for the e-matching VM.

    Build from a pattern tree: ``("var", name)`` or
    ``("op", opname, literals: dict, attr_vars: [(key, name)], whole: name|None, children[, bind])``
    where ``bind`` (optional) names the node's class like a variable.
    Attribute-variable names live in their own namespace. Matches are tuples
    ``(root, *classes of vars, *attr-var ids)`` in the order of ``vars`` and
    ``attr_vars``; an attrs-var binds the attrs id (``attrs_of``), a value var
    binds a value id (``value_of``).
    """

    cdef int32_t ninstr, nregs, nvars, nattr
    cdef int32_t* kind
    cdef int32_t* in_reg
    cdef int32_t* other_reg
    cdef int32_t* op
    cdef int32_t* nch
    cdef int32_t* child_reg
    cdef int32_t* var_reg
    cdef list filters
    cdef public list vars
    cdef public list attr_vars
    cdef public object tree

    def __cinit__(self, tree):
        self.kind = self.in_reg = self.other_reg = self.op = self.nch = self.child_reg = self.var_reg = NULL

    def __init__(self, tree):
        if tree[0] != "op":
            raise ValueError("a pattern's root must be an operator, not a variable")
        self.tree = tree
        instrs = []  # (kind, in_reg, other, op, nch, child_reg, filter)
        var_reg = {}
        attr_slot = {}
        self.vars = []
        self.attr_vars = []
        nregs = [1]

        def slot_of(name):
            if name in attr_slot:
                return attr_slot[name], False
            attr_slot[name] = len(self.attr_vars)
            self.attr_vars.append(name)
            return attr_slot[name], True

        # pre-order; each op node is one BIND; repeated vars emit COMPARE
        work = [(tree, 0)]
        while work:
            node, reg = work.pop(0)
            if node[0] == "var":
                name = node[1]
                if name in var_reg:
                    instrs.append((1, reg, var_reg[name], 0, 0, 0, None))
                else:
                    var_reg[name] = reg
                    self.vars.append(name)
                continue
            _, opname, literals, avars, whole, children = node[:6]
            bind = node[6] if len(node) > 6 else None
            if bind is not None:
                if bind in var_reg:
                    instrs.append((1, reg, var_reg[bind], 0, 0, 0, None))
                else:
                    var_reg[bind] = reg
                    self.vars.append(bind)
            base = nregs[0]
            nregs[0] += len(children)
            filt = None
            if literals or avars or whole is not None:
                wslot = None
                if whole is not None:
                    wslot = slot_of("*" + whole)
                vlist = []
                for key, name in avars:
                    s, first = slot_of(name)
                    vlist.append((key, s, first))
                filt = AttrFilter(dict(literals), vlist, wslot)
            instrs.append((0, reg, 0, op_id(opname), len(children), base, filt))
            # children are visited breadth-first after this BIND (their regs are set by it)
            work.extend((child, base + i) for i, child in enumerate(children))
        # order: a BIND must come after the BIND that sets its in_reg; BFS order guarantees it
        self.ninstr = len(instrs)
        self.nregs = nregs[0]
        self.nvars = len(self.vars)
        self.nattr = len(self.attr_vars)
        m = max(self.ninstr, 1)
        self.kind = <int32_t*> malloc(m * sizeof(int32_t))
        self.in_reg = <int32_t*> malloc(m * sizeof(int32_t))
        self.other_reg = <int32_t*> malloc(m * sizeof(int32_t))
        self.op = <int32_t*> malloc(m * sizeof(int32_t))
        self.nch = <int32_t*> malloc(m * sizeof(int32_t))
        self.child_reg = <int32_t*> malloc(m * sizeof(int32_t))
        self.var_reg = <int32_t*> malloc(max(self.nvars, 1) * sizeof(int32_t))
        self.filters = []
        for i, (k, r, o, opi, nc_, cr, f) in enumerate(instrs):
            self.kind[i] = k
            self.in_reg[i] = r
            self.other_reg[i] = o
            self.op[i] = opi
            self.nch[i] = nc_
            self.child_reg[i] = cr
            self.filters.append(f)
        for i, name in enumerate(self.vars):
            self.var_reg[i] = var_reg[name]

    def __dealloc__(self):
        free(self.kind); free(self.in_reg); free(self.other_reg); free(self.op)
        free(self.nch); free(self.child_reg); free(self.var_reg)

    @property
    def root_op(self):
        return _OP_NAMES[self.op[0]]
