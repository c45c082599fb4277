"""The e-graph's storage: flat arrays, the hashcons, the per-op index, union-find and adding nodes
(``store.pyx``); the base of ``EGraph``, declared here for the modules that extend it."""
from libc.stdint cimport int32_t, uint8_t, uint64_t

# node flags
cdef enum:
    N_ALIVE = 1
    N_BLACK = 2
    N_CONST = 4
# class flags
cdef enum:
    C_CONST = 1
    C_OPAQUE = 2
# hashcons slots
cdef enum:
    H_EMPTY = -1
    H_TOMB = -2


cdef class EGraphStore:
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

    cdef void _free_op_index(self) noexcept

    # hashcons (open addressing, linear probing, tombstones)
    cdef int _hc_init(self, Py_ssize_t cap) except -1

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

    cdef int32_t _hc_get(self, int32_t op, int32_t attrs, const int32_t* kids, int32_t m) noexcept nogil

    cdef inline int32_t _hc_get_node(self, int32_t p) noexcept nogil:
        """The node stored under node ``p``'s current key, or -1."""
        return self._hc_get(self.n_op[p], self.n_attrs[p], self.ch + self.n_cstart[p], self.n_nch[p])

    cdef int _hc_set_node(self, int32_t p) except -1
    cdef int _hc_del_node(self, int32_t p) except -1
    cdef int _hc_resize(self) except -1

    # per-op node index, allocation, copying
    cdef int _index_op(self, int32_t op, int32_t n) except -1
    cdef int _alloc(self, Py_ssize_t ncap, Py_ssize_t chcap, Py_ssize_t ccap, Py_ssize_t pcap) except -1
    cdef int _copy_into(self, EGraphStore g) except -1

    # union-find
    cdef inline int32_t _find(self, int32_t c) noexcept nogil:
        cdef int32_t* uf = self.uf
        while uf[c] != c:
            uf[c] = uf[uf[c]]
            c = uf[c]
        return c

    cpdef int find(self, int c)
    cpdef int union(self, int a, int b) except -1

    # adding
    cdef int _node_const(self, int32_t n)
    cdef int _add_parent(self, int32_t c, int32_t n) except -1
    cpdef int add_ids(self, int op, int attrs, object children) except -1
    cdef int32_t _add(self, int32_t op, int32_t attrs, int32_t* canon, int32_t m,
                      int32_t* sig_slot=*) except -1
    cdef int _check_node(self, int n) except -1
