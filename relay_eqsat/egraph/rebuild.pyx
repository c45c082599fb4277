# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Rebuilding and the analysis: congruence restored after unions, constness propagated, and the
analysis data (type, constant, opaque) each class exposes.

Congruence is restored egg-style: ``union`` (``store.pyx``) only records the
merge; ``rebuild`` re-canonicalizes the parents of merged classes (their
children, their hashcons entries), merging those that become equal, until the
worklist is empty. The analysis is merged on union (flags are or-ed; a type
disagreement is a bug and raises); a class that became constant makes its
parents' nodes constant when all their inputs are (``_propagate_const``).
"""
cimport cython
from libc.stdint cimport int32_t

from .store cimport EGraphStore, N_ALIVE, N_BLACK, N_CONST, C_CONST, C_OPAQUE
from .interning import _TYPES


@cython.auto_pickle(False)  # pickling refused by the store's, as before the split
cdef class EGraphRebuild(EGraphStore):
    """Rebuild (congruence closure) and the analysis queries over ``EGraphStore``."""

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
    # analysis
    # ------------------------------------------------------------------
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
