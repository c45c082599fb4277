# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Cycles: TENSAT's blacklist, its cycle pre-filter (``DescendantsMap``) and post-processing.

An e-graph grown by rewriting can contain cycles (a class reachable from
itself), which no extracted graph may use. TENSAT handles them in two ways,
both here: before applying a rule, skip a match whose new node would close a
cycle (``DescendantsMap``: a per-iteration snapshot of which class reaches
which; or a callable, such as one on the exact ``reachable``), and after an
iteration, blacklist the newest node of each remaining cycle
(``resolve_cycles``). Blacklisted nodes stay in the e-graph but are never
matched nor extracted.
"""
cimport cython
from libc.stdlib cimport malloc, free
from libc.string cimport memset
from libc.stdint cimport int32_t, uint8_t

from .store cimport EGraphStore, N_ALIVE, N_BLACK
from .rebuild cimport EGraphRebuild


@cython.auto_pickle(False)  # pickling refused by the store's, as before the split
cdef class EGraphCycles(EGraphRebuild):
    """The blacklist and the cycle queries over ``EGraphRebuild``."""

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
        cdef EGraphCycles g = self.copy()
        return len(g.resolve_cycles()) > 0

    def descendants_map(self):
        """A snapshot for TENSAT's cycle pre-filter (see ``DescendantsMap``)."""
        return DescendantsMap(self)


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

    def __cinit__(self, EGraphStore g):
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

