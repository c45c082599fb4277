# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The e-graph: ``EGraph``, the composition of the e-graph's parts, with its queries, its
fingerprint and its flat view; the names ``relay_eqsat.egraph`` exports.

``EGraph`` is one extension type built in layers, one concept per module,
each a ``cdef class`` extending the one before (declared in its ``.pxd``, so
that every layer calls the ones below as C):

    interning.pyx    process-wide ids: operators, attribute sets, types,
                     values, origins, node signatures (and type inference)
    store.pyx        EGraphStore: flat arrays, hashcons, per-op index,
                     union-find, adding nodes
    rebuild.pyx      EGraphRebuild: deferred rebuild (congruence), analysis
    cyclefilter.pyx  EGraphCycles: blacklist, DescendantsMap, cycle removal
    ematch.pyx       EGraphMatch: compiled patterns (Program), search, join_flat
    apply.pyx        EGraphApply: planned rule application (CompiledPlan)
    core.pyx         EGraph: copying, adding by name and whole graphs, queries,
                     fingerprint, ``arrays()``

``arrays()`` copies the canonical classes and alive nodes into flat numpy
arrays (``EGraphArrays``): what extraction (``relay_eqsat.extract``) reads.
"""
cimport cython
from libc.stdlib cimport malloc, free
from libc.stdint cimport int32_t, uint8_t, uint64_t

import numpy as _np

from .interning cimport op_id as _op_id, attrs_id as _attrs_id
from .store cimport N_ALIVE, N_BLACK, N_CONST
from .apply cimport EGraphApply
from .arrays import EGraphArrays
from .interning import (  # re-exported: the names this module has always had
    _ATTR_IDS, _ATTRS, _INFER_MEMO, _OP_IDS, _OP_NAMES, _ORIGIN_IDS, _ORIGINS, _SIGNATURE_IDS, _SIGNATURES,
    _TYPE_IDS, _TYPES, _VALUE_IDS, _VALUES, attrs_id, attrs_of, infer_type_id, infer_type_memo, op_id, op_name,
    origin_id, origin_name, signature_id, signature_of, type_id, type_of, value_id, value_of)
from .cyclefilter import DescendantsMap
from .ematch import AttrFilter, Program, join_flat
from .apply import PLACEHOLDER, CompiledPlan


@cython.auto_pickle(False)  # pickling refused by the store's, as before the split
cdef class EGraph(EGraphApply):
    """An e-graph of tensor operations with shape/constant analysis.

    Class ids and node ids are ints. A class id stays valid after merges
    (``find`` gives its representative). Node ids are the insertion order.
    ``type_mismatches`` counts rule applications skipped because their
    right-hand side's type differs from the matched class's (see
    ``apply_matches_planned``; ``union`` itself refuses such merges).
    """

    def copy(self):
        """An independent e-graph with the same contents (array copies)."""
        cdef EGraph g = EGraph.__new__(EGraph)
        self._copy_into(g)
        return g

    def __copy__(self):
        return self.copy()

    # ------------------------------------------------------------------
    # adding by name, adding a graph
    # ------------------------------------------------------------------
    def add(self, str op, attrs=None, children=()):
        """Add an e-node ``op(children)`` with ``attrs``; returns its class id."""
        return self.add_ids(_op_id(op), _attrs_id(attrs), children)

    def lookup(self, str op, attrs=None, children=()):
        """The class of an existing e-node ``op(children)``, or None."""
        cdef int32_t o = _op_id(op), a = _attrs_id(attrs), n
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
            cls = self.add_ids(_op_id(node.op), _attrs_id(attrs), [classes[i] for i in node.inputs])
            classes.append(cls)
        if mapping is not None:
            mapping.extend(classes)
        if graph.output is None:
            raise ValueError("graph has no output")
        return classes[graph.output]

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

