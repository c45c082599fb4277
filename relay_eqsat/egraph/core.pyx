# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The e-graph core: flat arrays, union-find, hashcons, deferred rebuild, analysis.

Storage (all int32 C arrays, grown by doubling, copied with ``memcpy``):

* e-nodes ``0..nn-1`` in insertion order (the node id *is* the insertion
  order): op id, attrs id, children (a slice of one flat child array, kept
  canonical by rebuild), the class the node was added to, the scheduler
  iteration that added it, flags (alive, blacklisted, all-inputs-constant) and
  the next node of its class (each class is a linked list of its nodes).
* e-classes ``0..nc-1``: union-find parent, node-list head/tail, analysis data
  (interned type id; flags: constant, opaque), and a linked list of parent
  entries (the nodes that use the class), spliced in O(1) on union.
* the hashcons: a Python dict from (op, attrs, *canonical children) to node id.

Operator names, attribute sets, types and attribute values are interned in
process-wide append-only tables, so ids stay valid across ``copy()`` and
compiled patterns can cache per-attrs-id decisions.

Congruence is restored egg-style: ``union`` only records the merge;
``rebuild`` re-canonicalizes the parents of merged classes, merging those that
become equal, until the worklist is empty. The analysis (type, constant,
opaque) is merged on union; a type disagreement is a bug and raises.
"""
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcpy, memset
from libc.stdint cimport int32_t, uint8_t, uint64_t

from ..graph import Attrs, TensorGraph, TensorType, TupleType
from .. import ops as _ops

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
_INFER_CACHE = {}


cpdef int op_id(str name):
    """Interned id of an operator name."""
    cdef object i = _OP_IDS.get(name)
    if i is None:
        i = len(_OP_NAMES)
        _OP_NAMES.append(name)
        _OP_IDS[name] = i
    return i


def op_name(int i):
    return _OP_NAMES[i]


cpdef int attrs_id(object attrs):
    """Interned id of an attribute set (a Mapping; normalized to ``Attrs``)."""
    if not isinstance(attrs, Attrs):
        attrs = Attrs(attrs or {})
    cdef object i = _ATTR_IDS.get(attrs)
    if i is None:
        i = len(_ATTRS)
        _ATTRS.append(attrs)
        _ATTR_IDS[attrs] = i
    return i


def attrs_of(int i):
    return _ATTRS[i]


cpdef int type_id(object t):
    cdef object i = _TYPE_IDS.get(t)
    if i is None:
        i = len(_TYPES)
        _TYPES.append(t)
        _TYPE_IDS[t] = i
    return i


def type_of(int i):
    return _TYPES[i]


cpdef int value_id(object v):
    """Interned id of an attribute value (any hashable, frozen value)."""
    cdef object i = _VALUE_IDS.get(v)
    if i is None:
        i = len(_VALUES)
        _VALUES.append(v)
        _VALUE_IDS[v] = i
    return i


def value_of(int i):
    return _VALUES[i]


def infer_type_id(int op, int attrs, tuple child_types):
    """ops.infer_type on interned ids, memoized; raises ShapeError (cached too)."""
    key = (op, attrs, child_types)
    r = _INFER_CACHE.get(key)
    if r is None:
        try:
            t = _ops.infer_type(_OP_NAMES[op], _ATTRS[attrs], [_TYPES[c] for c in child_types])
            r = type_id(t)
        except _ops.ShapeError as e:
            r = e
        _INFER_CACHE[key] = r
    if isinstance(r, BaseException):
        raise r
    return r


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


cdef class EGraph:
    """An e-graph of tensor operations with shape/constant analysis.

    Class ids and node ids are ints. A class id stays valid after merges
    (``find`` gives its representative). Node ids are the insertion order.
    """

    # nodes
    cdef int32_t* n_op
    cdef int32_t* n_attrs
    cdef int32_t* n_cstart
    cdef int32_t* n_nch
    cdef int32_t* n_class
    cdef int32_t* n_iter
    cdef int32_t* n_next
    cdef int32_t* n_stamp
    cdef uint8_t* n_flags
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

    cdef dict hashcons
    cdef list pending
    cdef list apending
    cdef int32_t stamp
    cdef Py_ssize_t n_alive, n_canon, n_black
    cdef public int iteration
    cdef public dict constants
    cdef public dict opaque
    cdef public object last_problem

    def __cinit__(self, *args, **kwargs):
        self.n_op = self.n_attrs = self.n_cstart = self.n_nch = NULL
        self.n_class = self.n_iter = self.n_next = self.n_stamp = NULL
        self.n_flags = NULL
        self.ch = NULL
        self.uf = self.c_head = self.c_tail = self.c_type = NULL
        self.c_phead = self.c_ptail = self.c_stamp = NULL
        self.c_flags = NULL
        self.p_node = self.p_next = NULL
        self.nn = self.ncap = self.nch = self.chcap = 0
        self.nc = self.ccap = self.np = self.pcap = 0

    def __init__(self):
        self._alloc(256, 512, 256, 512)
        self.hashcons = {}
        self.pending = []
        self.apending = []
        self.stamp = 0
        self.n_alive = self.n_canon = self.n_black = 0
        self.iteration = 0
        self.constants = {}
        self.opaque = {}
        self.last_problem = None

    def __dealloc__(self):
        free(self.n_op); free(self.n_attrs); free(self.n_cstart); free(self.n_nch)
        free(self.n_class); free(self.n_iter); free(self.n_next); free(self.n_stamp)
        free(self.n_flags); free(self.ch)
        free(self.uf); free(self.c_head); free(self.c_tail); free(self.c_type)
        free(self.c_phead); free(self.c_ptail); free(self.c_stamp); free(self.c_flags)
        free(self.p_node); free(self.p_next)

    cdef int _alloc(self, Py_ssize_t ncap, Py_ssize_t chcap, Py_ssize_t ccap, Py_ssize_t pcap) except -1:
        if ncap > self.ncap:
            self.n_op = _grow32(self.n_op, ncap)
            self.n_attrs = _grow32(self.n_attrs, ncap)
            self.n_cstart = _grow32(self.n_cstart, ncap)
            self.n_nch = _grow32(self.n_nch, ncap)
            self.n_class = _grow32(self.n_class, ncap)
            self.n_iter = _grow32(self.n_iter, ncap)
            self.n_next = _grow32(self.n_next, ncap)
            self.n_stamp = _grow32(self.n_stamp, ncap)
            self.n_flags = _grow8(self.n_flags, ncap)
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
        g.ncap = self.ncap; g.nn = self.nn
        g.n_op = _dup32(self.n_op, self.nn, self.ncap)
        g.n_attrs = _dup32(self.n_attrs, self.nn, self.ncap)
        g.n_cstart = _dup32(self.n_cstart, self.nn, self.ncap)
        g.n_nch = _dup32(self.n_nch, self.nn, self.ncap)
        g.n_class = _dup32(self.n_class, self.nn, self.ncap)
        g.n_iter = _dup32(self.n_iter, self.nn, self.ncap)
        g.n_next = _dup32(self.n_next, self.nn, self.ncap)
        g.n_stamp = <int32_t*> malloc(self.ncap * sizeof(int32_t))
        if g.n_stamp == NULL:
            raise MemoryError()
        memset(g.n_stamp, 0, self.ncap * sizeof(int32_t))
        g.n_flags = _dup8(self.n_flags, self.nn, self.ncap)
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
        g.hashcons = self.hashcons.copy()
        g.pending = list(self.pending)
        g.apending = list(self.apending)
        g.stamp = 0
        g.n_alive = self.n_alive; g.n_canon = self.n_canon; g.n_black = self.n_black
        g.iteration = self.iteration
        g.constants = dict(self.constants)
        g.opaque = dict(self.opaque)
        g.last_problem = None
        return g

    def __copy__(self):
        return self.copy()

    # ------------------------------------------------------------------
    # union-find
    # ------------------------------------------------------------------
    cdef inline int32_t _find(self, int32_t c) nogil:
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
        cdef Py_ssize_t k, j, m = len(children)
        cdef int32_t c, n, cls, tid
        cdef bint dup
        canon = [0] * m
        for k in range(m):
            c = children[k]
            if c < 0 or c >= self.nc:
                raise IndexError(f"child class {c} out of range")
            canon[k] = self._find(c)
        key = (op, attrs, *canon)
        hit = self.hashcons.get(key)
        if hit is not None:
            return self._find(self.n_class[<int32_t> hit])
        tid = infer_type_id(op, attrs, tuple([self.c_type[c] for c in canon]))
        if self.nn >= self.ncap:
            self._alloc(self.ncap * 2, 0, 0, 0)
        if self.nch + m > self.chcap:
            self._alloc(0, max(self.chcap * 2, self.nch + m), 0, 0)
        if self.nc >= self.ccap:
            self._alloc(0, 0, self.ccap * 2, 0)
        n = self.nn
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
        self.n_next[n] = -1
        self.n_flags[n] = N_ALIVE
        self.uf[cls] = cls
        self.c_head[cls] = n
        self.c_tail[cls] = n
        self.c_type[cls] = tid
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
        self.hashcons[key] = n
        self.n_alive += 1
        self.n_canon += 1
        return cls

    def add(self, str op, attrs=None, children=()):
        """Add an e-node ``op(children)`` with ``attrs``; returns its class id."""
        return self.add_ids(op_id(op), attrs_id(attrs), children)

    def lookup(self, str op, attrs=None, children=()):
        """The class of an existing e-node ``op(children)``, or None."""
        key = (op_id(op), attrs_id(attrs), *[self._find(c) for c in children])
        hit = self.hashcons.get(key)
        return None if hit is None else self._find(self.n_class[<int32_t> hit])

    def add_graph(self, graph, list mapping=None):
        """Insert a TensorGraph; returns the class of its output.

        The graph's constants and opaque payloads are kept (renamed when they
        collide with different ones already here) so that ``build_graph`` can
        rebuild a TensorGraph. If ``mapping`` is a list, it receives the class
        of every graph node.
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

    # ------------------------------------------------------------------
    # rebuilding
    # ------------------------------------------------------------------
    cdef tuple _key(self, int32_t n):
        cdef int32_t k, s = self.n_cstart[n]
        return (self.n_op[n], self.n_attrs[n], *[self.ch[s + k] for k in range(self.n_nch[n])])

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
            oldkey = self._key(p)
            hit = self.hashcons.get(oldkey)
            if hit is not None and <int32_t> hit == p:
                del self.hashcons[oldkey]
            s = self.n_cstart[p]
            for k in range(self.n_nch[p]):
                self.ch[s + k] = self._find(self.ch[s + k])
            newkey = self._key(p)
            hit = self.hashcons.get(newkey)
            if hit is None:
                self.hashcons[newkey] = p
                continue
            other = <int32_t> hit
            if other == p:
                continue
            # congruent nodes: keep one (not blacklisted if possible, else the older)
            if (self.n_flags[p] & N_BLACK) != (self.n_flags[other] & N_BLACK):
                keep = other if (self.n_flags[p] & N_BLACK) else p
            else:
                keep = p if p < other else other
            drop = other if keep == p else p
            self.hashcons[newkey] = keep
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
    def search(self, Program prog, int limit=-1):
        """All matches of a compiled pattern: a list of tuples
        ``(root class, class-var classes..., attr-var value ids...)``, deduplicated."""
        cdef int32_t n, root_op = prog.op[0], root_nch = prog.nch[0]
        cdef int32_t* regs = <int32_t*> malloc((prog.nregs + 1) * sizeof(int32_t))
        cdef int32_t* aslots = <int32_t*> malloc((prog.nattr + 1) * sizeof(int32_t))
        cdef set seen = set()
        cdef list out = []
        if regs == NULL or aslots == NULL:
            free(regs); free(aslots)
            raise MemoryError()
        try:
            for n in range(self.nn):
                if self.n_op[n] != root_op or self.n_nch[n] != root_nch:
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
            m = (regs[0],) + tuple([self._find(regs[p.var_reg[j]]) for j in range(p.nvars)]) \
                + tuple([aslots[j] for j in range(p.nattr)])
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
    # extraction interface
    # ------------------------------------------------------------------
    def to_problem(self, node_cost, roots):
        """Flatten into an ``ExtractionProblem``.

        ``node_cost(op, attrs, input_types, out_type, all_inputs_constant) -> float``
        is called once per distinct (op, attrs, input types, constness).
        ``roots`` are e-graph class ids. The problem's ``class_key``/``node_key``
        hold the e-graph ids, ``blacklisted`` marks the filter list, and
        ``class_data`` the class types. The problem is remembered as
        ``last_problem`` for ``build_graph``.
        """
        import numpy as np
        from ..extract.problem import ExtractionProblem

        if not self.clean:
            self.rebuild()
        cdef int32_t c, n, k, s, idx = 0
        cdef Py_ssize_t nc = self.nc
        cls_index = {}
        class_key = []
        class_data = []
        for c in range(nc):
            if self.uf[c] == c:
                cls_index[c] = idx
                class_key.append(c)
                class_data.append(_TYPES[self.c_type[c]])
                idx += 1
        node_class = []
        node_children = []
        node_costs = []
        node_label = []
        blacklisted = []
        node_key = []
        cache = {}
        for c in class_key:
            n = self.c_head[c]
            while n >= 0:
                if self.n_flags[n] & N_ALIVE:
                    s = self.n_cstart[n]
                    chs = tuple([self._find(self.ch[s + k]) for k in range(self.n_nch[n])])
                    const = bool(self.n_flags[n] & N_CONST)
                    ckey = (self.n_op[n], self.n_attrs[n], tuple([self.c_type[x] for x in chs]), const)
                    cost = cache.get(ckey)
                    if cost is None:
                        cost = float(node_cost(_OP_NAMES[self.n_op[n]], _ATTRS[self.n_attrs[n]],
                                               [_TYPES[self.c_type[x]] for x in chs],
                                               _TYPES[self.c_type[c]], const))
                        cache[ckey] = cost
                    node_class.append(cls_index[c])
                    node_children.append(tuple([cls_index[x] for x in chs]))
                    node_costs.append(cost)
                    node_label.append(_OP_NAMES[self.n_op[n]])
                    blacklisted.append(bool(self.n_flags[n] & N_BLACK))
                    node_key.append(n)
                n = self.n_next[n]
        problem = ExtractionProblem(
            node_class=np.asarray(node_class, dtype=np.int64),
            node_children=node_children,
            node_cost=np.asarray(node_costs, dtype=np.float64),
            roots=[cls_index[self._find(r)] for r in roots],
            node_label=node_label,
            blacklisted=np.asarray(blacklisted, dtype=bool),
            class_key=class_key,
            node_key=node_key,
            class_data=class_data,
        )
        self.last_problem = problem
        return problem

    def build_graph(self, choice, root=None, problem=None):
        """Rebuild a TensorGraph from an extraction ``choice`` (problem class
        index -> problem node index), rooted at problem class ``root`` (default:
        the problem's first root). ``problem`` defaults to the last one made by
        ``to_problem``. Shared classes are emitted once; raises ValueError on a
        cycle or a class the choice does not cover.
        """
        if problem is None:
            problem = self.last_problem
        if problem is None:
            raise ValueError("build_graph needs the ExtractionProblem the choice was made on")
        if root is None:
            root = problem.roots[0]
        g = TensorGraph()
        emitted = {}
        state = {}
        stack = [(int(root), False)]
        while stack:
            c, done = stack.pop()
            if done:
                n = choice[c]
                enode = problem.node_key[n]
                op = _OP_NAMES[self.n_op[enode]]
                attrs = _ATTRS[self.n_attrs[enode]]
                inputs = [emitted[x] for x in problem.node_children[n]]
                if op == "constant":
                    g.constants[attrs["name"]] = self.constants[attrs["name"]]
                    nid = g.add(op, inputs, attrs)
                elif op == "opaque":
                    g.opaque[attrs["key"]] = self.opaque[attrs["key"]]
                    nid = g.add(op, inputs, attrs, dedup=False)
                else:
                    nid = g.add(op, inputs, attrs)
                emitted[c] = nid
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
