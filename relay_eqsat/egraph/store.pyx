# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The e-graph's storage: flat arrays, the hashcons, the per-op index, union-find and adding nodes.

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

``union`` only records the merge (egg-style: congruence is restored by
``rebuild``, ``rebuild.pyx``); it merges the class flags and refuses classes of
different types. Adding a node computes its analysis data: its type from its
signature (``interning.signature_id``), constness and opacity.

``EGraphStore`` is the base of ``EGraph`` (``core.pyx``); its fields, flags and
inline methods (``_find``, the hashcons' key match) are declared in
``store.pxd`` so that the modules extending it call them as C.
"""
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcpy, memset
from libc.stdint cimport int32_t, uint8_t, uint32_t, uint64_t

from .interning cimport op_id, signature_id
from .interning import _SIGNATURES, _TYPES

cdef int OP_VAR = op_id("var")
cdef int OP_CONSTANT = op_id("constant")
cdef int OP_OPAQUE = op_id("opaque")


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


cdef class EGraphStore:
    """An e-graph's storage, hashcons, union-find and node adding (the base of ``EGraph``)."""

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
    cdef int _copy_into(self, EGraphStore g) except -1:
        """Copy this e-graph's contents into the fresh (``__new__``) e-graph ``g`` (``EGraph.copy``)."""
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
        return 0

    # ------------------------------------------------------------------
    # union-find
    # ------------------------------------------------------------------
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

    cdef int _check_node(self, int n) except -1:
        if n < 0 or n >= self.nn:
            raise IndexError(f"node {n} out of range")
        return 0
