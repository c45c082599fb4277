# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The sharing-aware greedy (OCF) extraction kernel, on CSR arrays.

One implementation for both users: ``greedy.greedy_ocf`` (an ExtractionProblem)
and ``greedy.ocf_cost`` (the MCTS reward, on ``EGraph.arrays()``). The
algorithm is described in greedy.py. Here histories are bitsets of
``ceil(C / 64)`` words over finalization ranks, kept in a pool of blocks that
are recycled once no unfinalized class needs them; the heap orders nodes by
(value, node index), as a Python heap of tuples would.
"""
import numpy as np

from libc.stdint cimport int32_t, uint8_t, uint64_t
from libc.stdlib cimport free, malloc, realloc

from relay_eqsat.extract.scratch cimport Scratch, check_csr
from libc.string cimport memcpy, memset


cdef extern from *:
    int _ctz64 "__builtin_ctzll"(unsigned long long) nogil


cdef inline bint _heap_less(double* hval, int32_t* hnode, Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    return hval[a] < hval[b] or (hval[a] == hval[b] and hnode[a] < hnode[b])


cdef inline void _heap_swap(double* hval, int32_t* hnode, Py_ssize_t a, Py_ssize_t b) noexcept nogil:
    cdef double v = hval[a]
    cdef int32_t n = hnode[a]
    hval[a] = hval[b]; hnode[a] = hnode[b]
    hval[b] = v; hnode[b] = n


cdef Py_ssize_t _heap_push(double* hval, int32_t* hnode, Py_ssize_t size, double v, int32_t node) noexcept nogil:
    """Push (v, node) onto a binary min-heap; returns the new size."""
    cdef Py_ssize_t i = size, parent
    hval[i] = v; hnode[i] = node
    while i > 0:
        parent = (i - 1) >> 1
        if _heap_less(hval, hnode, i, parent):
            _heap_swap(hval, hnode, i, parent)
            i = parent
        else:
            break
    return size + 1


cdef Py_ssize_t _heap_pop(double* hval, int32_t* hnode, Py_ssize_t size) noexcept nogil:
    """Remove the minimum (read it from index 0 first); returns the new size."""
    cdef Py_ssize_t i = 0, l, r, m
    size -= 1
    if size == 0:
        return 0
    hval[0] = hval[size]; hnode[0] = hnode[size]
    while True:
        l = 2 * i + 1
        r = l + 1
        m = i
        if l < size and _heap_less(hval, hnode, l, m):
            m = l
        if r < size and _heap_less(hval, hnode, r, m):
            m = r
        if m == i:
            break
        _heap_swap(hval, hnode, i, m)
        i = m
    return size


def ocf_choice(const int32_t[::1] node_class, const int32_t[::1] child_start, const int32_t[::1] children,
               const double[::1] node_cost, const uint8_t[::1] blacklisted, Py_ssize_t num_classes,
               roots, bint stop_at_roots=True):
    """Per class, the node the sharing-aware greedy chose for it, or -1 (an int32 array).

    Nodes ``0..N-1`` (class ``node_class[n]``, children in CSR form, cost
    ``node_cost[n]``, never chosen when ``blacklisted[n]``); classes
    ``0..num_classes-1``. With ``stop_at_roots`` the run stops once every root
    class in range is chosen; classes not chosen by then stay -1.
    """
    cdef Py_ssize_t N = node_class.shape[0], C = num_classes, M = children.shape[0]
    cdef Py_ssize_t W, w, nheap, i, hcap, nfree, j, last, k, left = 0
    cdef int32_t c, n, d, b, nrank, big, p, r
    cdef double val, added
    cdef uint64_t word, bit
    cdef bint any_bit
    if child_start.shape[0] != N + 1 or node_cost.shape[0] != N or blacklisted.shape[0] != N:
        raise ValueError("node_class, child_start (one longer), node_cost and blacklisted must match")
    result = np.full(C, -1, dtype=np.int32)
    cdef int32_t[::1] choice = result
    cdef Scratch buf = Scratch()
    cdef int32_t* dk_off = <int32_t*> buf.take((N + 1) * sizeof(int32_t))  # distinct children, CSR
    cdef int32_t* dk = <int32_t*> buf.take(M * sizeof(int32_t))
    cdef int32_t* pending = <int32_t*> buf.take(N * sizeof(int32_t))       # children not yet finalized
    cdef int32_t* mark = <int32_t*> buf.take(C * sizeof(int32_t))
    cdef int32_t* par_off = <int32_t*> buf.take((C + 1) * sizeof(int32_t))  # parents (allowed nodes), CSR
    cdef int32_t* par = <int32_t*> buf.take(M * sizeof(int32_t))
    cdef int32_t* cn_off = <int32_t*> buf.take((C + 1) * sizeof(int32_t))   # nodes of each class, CSR
    cdef int32_t* cn = <int32_t*> buf.take(N * sizeof(int32_t))
    cdef int32_t* holders = <int32_t*> buf.take(C * sizeof(int32_t))  # parents in unfinalized classes
    cdef int32_t* hidx = <int32_t*> buf.take(C * sizeof(int32_t))     # history block, -1: none
    cdef uint8_t* is_root = <uint8_t*> buf.take(C * sizeof(uint8_t))
    cdef double* ccost = <double*> buf.take(C * sizeof(double))
    cdef double* rweight = <double*> buf.take(C * sizeof(double))     # node cost per finalization rank
    cdef double* hval = <double*> buf.take(N * sizeof(double))
    cdef int32_t* hnode = <int32_t*> buf.take(N * sizeof(int32_t))
    cdef uint64_t* tmp
    cdef uint64_t* hb
    cdef uint64_t* pool = NULL
    cdef int32_t* freelist = NULL
    cdef void* grown
    check_csr(node_class, child_start, children, C)
    memset(is_root, 0, C * sizeof(uint8_t))
    for r in roots:
        if 0 <= r < C and not is_root[r]:
            is_root[r] = 1
            left += 1
    # 1. distinct children, parents, class members
    memset(mark, 0xff, C * sizeof(int32_t))
    memset(par_off, 0, (C + 1) * sizeof(int32_t))
    memset(cn_off, 0, (C + 1) * sizeof(int32_t))
    k = 0
    for n in range(N):
        dk_off[n] = <int32_t> k
        for j in range(child_start[n], child_start[n + 1]):
            d = children[j]
            if mark[d] != n:
                mark[d] = n
                dk[k] = d
                k += 1
        pending[n] = <int32_t> (k - dk_off[n])
        cn_off[node_class[n] + 1] += 1
        if not blacklisted[n]:
            for j in range(dk_off[n], k):
                par_off[dk[j] + 1] += 1
    dk_off[N] = <int32_t> k
    for c in range(C):
        par_off[c + 1] += par_off[c]
        cn_off[c + 1] += cn_off[c]
        holders[c] = par_off[c + 1] - par_off[c]
        hidx[c] = -1
    memcpy(mark, par_off, C * sizeof(int32_t))  # fill cursors
    for n in range(N):
        if not blacklisted[n]:
            for j in range(dk_off[n], dk_off[n + 1]):
                d = dk[j]
                par[mark[d]] = n
                mark[d] += 1
    memcpy(mark, cn_off, C * sizeof(int32_t))
    for n in range(N):
        c = node_class[n]
        cn[mark[c]] = n
        mark[c] += 1
    # 2. histories: W-word bitsets in a pool of blocks, recycled through a free list
    W = (C + 63) // 64
    if W < 1:
        W = 1
    tmp = <uint64_t*> buf.take(W * sizeof(uint64_t))
    hcap = 64
    try:
        pool = <uint64_t*> malloc(hcap * W * sizeof(uint64_t))
        freelist = <int32_t*> malloc(hcap * sizeof(int32_t))
        if pool == NULL or freelist == NULL:
            raise MemoryError()
        nfree = hcap
        for i in range(hcap):
            freelist[i] = <int32_t> (hcap - 1 - i)
        # 3. Knuth-Dijkstra
        nheap = 0
        for n in range(N):
            if not blacklisted[n] and pending[n] == 0:
                nheap = _heap_push(hval, hnode, nheap, node_cost[n], n)
        nrank = 0
        while nheap > 0:
            val = hval[0]
            n = hnode[0]
            nheap = _heap_pop(hval, hnode, nheap)
            c = node_class[n]
            if choice[c] >= 0:
                continue
            # history of c: the union of its children's, plus its own rank
            if nfree == 0:
                grown = realloc(pool, 2 * hcap * W * sizeof(uint64_t))
                if grown == NULL:
                    raise MemoryError()
                pool = <uint64_t*> grown
                free(freelist)
                freelist = <int32_t*> malloc(2 * hcap * sizeof(int32_t))
                if freelist == NULL:
                    raise MemoryError()
                for i in range(hcap):
                    freelist[i] = <int32_t> (2 * hcap - 1 - i)
                nfree = hcap
                hcap *= 2
            nfree -= 1
            b = freelist[nfree]
            hidx[c] = b
            hb = pool + b * W
            memset(hb, 0, W * sizeof(uint64_t))
            for j in range(dk_off[n], dk_off[n + 1]):
                d = dk[j]
                for w in range(W):
                    hb[w] |= pool[hidx[d] * W + w]
            hb[nrank >> 6] |= (<uint64_t> 1) << (nrank & 63)
            rweight[nrank] = node_cost[n]
            nrank += 1
            choice[c] = n
            ccost[c] = val
            # every node of c is now moot: release the child histories it was holding
            for i in range(cn_off[c], cn_off[c + 1]):
                p = cn[i]
                if blacklisted[p]:
                    continue
                for j in range(dk_off[p], dk_off[p + 1]):
                    d = dk[j]
                    holders[d] -= 1
                    if holders[d] == 0 and choice[d] >= 0 and hidx[d] >= 0:
                        freelist[nfree] = hidx[d]
                        nfree += 1
                        hidx[d] = -1
            if holders[c] == 0 and hidx[c] >= 0:
                freelist[nfree] = hidx[c]
                nfree += 1
                hidx[c] = -1
            if is_root[c]:
                left -= 1
                if left == 0 and stop_at_roots:
                    break
            for j in range(par_off[c], par_off[c + 1]):
                p = par[j]
                pending[p] -= 1
                if pending[p] == 0 and choice[node_class[p]] < 0:
                    # node value: own cost + the cost of the union of the children's histories
                    last = dk_off[p + 1]
                    k = last - dk_off[p]
                    if k == 0:
                        val = node_cost[p]
                    elif k == 1:
                        val = node_cost[p] + ccost[dk[dk_off[p]]]
                    else:
                        big = dk[dk_off[p]]
                        for i in range(dk_off[p] + 1, last):
                            if ccost[dk[i]] > ccost[big]:
                                big = dk[i]
                        memset(tmp, 0, W * sizeof(uint64_t))
                        for i in range(dk_off[p], last):
                            d = dk[i]
                            for w in range(W):
                                tmp[w] |= pool[hidx[d] * W + w]
                        added = 0.0
                        any_bit = False
                        for w in range(W):
                            word = tmp[w] & ~pool[hidx[big] * W + w]
                            while word:
                                bit = word & (~word + 1)
                                added += rweight[w * 64 + _ctz64(bit)]
                                word ^= bit
                                any_bit = True
                        val = node_cost[p] + ccost[big]
                        if any_bit:
                            val = val + added
                    nheap = _heap_push(hval, hnode, nheap, val, p)
    finally:
        free(pool)
        free(freelist)
    return result


def dag_cost(const int32_t[::1] choice, const int32_t[::1] child_start, const int32_t[::1] children,
             const double[::1] node_cost, roots):
    """Cost of the DAG the roots reach through ``choice`` (class -> node), each class once,
    summed in depth-first preorder like ``validate.solution_cost``; raises ValueError on a
    reached class without a choice."""
    cdef Py_ssize_t C = choice.shape[0], top = 0, j
    cdef int32_t c, n
    cdef double total = 0.0
    cdef list root_list = [int(r) for r in roots]
    cdef Scratch buf = Scratch()
    cdef int32_t* stack = <int32_t*> buf.take((len(root_list) + children.shape[0] + 1) * sizeof(int32_t))
    cdef uint8_t* seen = <uint8_t*> buf.take(C * sizeof(uint8_t))
    memset(seen, 0, C * sizeof(uint8_t))
    for c in root_list:  # popped last first, as reachable_classes does
        if c < 0 or c >= C:
            raise ValueError(f"root class {c} is out of range")
        stack[top] = c
        top += 1
    while top > 0:
        top -= 1
        c = stack[top]
        if seen[c]:
            continue
        seen[c] = 1
        n = choice[c]
        if n < 0:
            raise ValueError(f"class {c} is needed but has no chosen node")
        total += node_cost[n]
        for j in range(child_start[n], child_start[n + 1]):
            stack[top] = children[j]
            top += 1
    return total
