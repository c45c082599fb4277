# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The merge-aware local search kernel (``merge_greedy.py`` describes the algorithm), on CSR arrays.

A state is one chosen node per class (``-1``: none); its cost is the cost of
the DAG the roots reach, each class once, evaluated by a depth-first walk that
also finds cycles. A *group move* on a class ``s`` outside that DAG switches
every DAG class that has a node reading ``s`` to such a node (its cheapest
one); if that alone does not pay, the classes the switched nodes stop reading
and that are left with one reader (the other half of a pairing the move
competes with) get that reader switched to its best other node. A move on
``s`` that keeps nothing is tried once more lifted: its users then include the
DAG classes that reach ``s`` through up to ``max_lift`` classes outside the
DAG by those classes' chosen nodes (a breadth-first walk up the parents). The
move is kept when the DAG's cost drops and the chosen nodes stay acyclic. Passes over
all classes repeat until one keeps nothing (or ``max_passes``). Scratch
arrays are stamped with a counter instead of cleared.
"""
import numpy as np

from libc.stdint cimport int32_t, int64_t, uint8_t

from relay_eqsat.extract.scratch cimport Scratch, check_csr
from libc.string cimport memset


cdef struct _Dag:
    # the graph
    const int32_t* node_class
    const int32_t* child_start
    const int32_t* children
    const double* cost
    int32_t* choice
    int32_t* roots
    Py_ssize_t nroots
    # one evaluation: classes visited (in preorder), stamps, the DFS stack
    int64_t* seen        # == stamp: visited in the evaluation with that stamp
    int64_t* active      # == stamp: on the DFS path
    int64_t stamp
    int32_t* visited
    Py_ssize_t nvisited
    int32_t* stack_c
    int32_t* stack_p


cdef double _evaluate(_Dag* g) noexcept nogil:
    """The cost of the DAG ``g.choice`` gives the roots, each class once; -1 when a reached class
    has no choice or the chosen nodes form a cycle. Fills ``g.visited`` with the reached classes."""
    cdef Py_ssize_t top, i
    cdef int32_t c, n, d, p
    cdef double total = 0.0
    g.stamp += 1
    g.nvisited = 0
    for i in range(g.nroots):
        c = g.roots[i]
        if g.seen[c] == g.stamp:
            continue
        n = g.choice[c]
        if n < 0:
            return -1.0
        g.seen[c] = g.stamp
        g.active[c] = g.stamp
        g.visited[g.nvisited] = c
        g.nvisited += 1
        total += g.cost[n]
        top = 0
        g.stack_c[0] = c
        g.stack_p[0] = g.child_start[n]
        while top >= 0:
            c = g.stack_c[top]
            n = g.choice[c]
            p = g.stack_p[top]
            if p < g.child_start[n + 1]:
                g.stack_p[top] = p + 1
                d = g.children[p]
                if g.seen[d] == g.stamp:
                    if g.active[d] == g.stamp:
                        return -1.0  # a cycle through d
                    continue
                n = g.choice[d]
                if n < 0:
                    return -1.0
                g.seen[d] = g.stamp
                g.active[d] = g.stamp
                g.visited[g.nvisited] = d
                g.nvisited += 1
                total += g.cost[n]
                top += 1
                g.stack_c[top] = d
                g.stack_p[top] = g.child_start[n]
            else:
                g.active[c] = 0
                top -= 1
    return total


def improve_shared(const int32_t[::1] node_class, const int32_t[::1] child_start, const int32_t[::1] children,
                   const double[::1] node_cost, const uint8_t[::1] blacklisted, int32_t[::1] choice, roots,
                   Py_ssize_t max_passes=20, Py_ssize_t max_lift=3):
    """Improve ``choice`` (class -> node, -1: none; changed in place) by group moves until a pass keeps
    none or after ``max_passes`` passes (``max_lift``: how many outside classes a lifted move reaches
    its users through; 0: no lifted moves). ``choice`` must give the roots an acyclic DAG (e.g. the OCF
    greedy's choice of every class). Returns ``(cost, moves kept, evaluations, passes)``; the cost
    is that of the DAG the roots reach, each class once."""
    cdef Py_ssize_t N = node_class.shape[0], C = choice.shape[0], M = children.shape[0]
    cdef Py_ssize_t i, j, k, nusers, nrep, kept = 0, evaluations = 0, passes = 0
    cdef int32_t c, n, s, d, u, t, m, reader, readers, best_m
    cdef bint improved, ready
    cdef double best, value, v, best_v
    cdef int64_t ustamp = 0, tstamp = 0, wstamp = 0
    cdef Py_ssize_t nq, qi, lifted, lift
    cdef int32_t x
    if child_start.shape[0] != N + 1 or node_cost.shape[0] != N or blacklisted.shape[0] != N:
        raise ValueError("node_class, child_start (one longer), node_cost and blacklisted must match")
    check_csr(node_class, child_start, children, C)
    for c in range(C):
        n = choice[c]
        if n >= N or (n >= 0 and node_class[n] != c):
            raise ValueError(f"class {c}'s choice {n} is not one of its nodes")
    root_list = [int(r) for r in roots]
    for r in root_list:
        if not 0 <= r < C:
            raise ValueError(f"root class {r} is out of range")
    cdef Scratch buf = Scratch()
    cdef _Dag g
    g.node_class = &node_class[0] if N else NULL
    g.child_start = &child_start[0]
    g.children = &children[0] if M else NULL
    g.cost = &node_cost[0] if N else NULL
    g.choice = &choice[0] if C else NULL
    g.nroots = len(root_list)
    g.roots = <int32_t*> buf.take(g.nroots * sizeof(int32_t))
    for i in range(g.nroots):
        g.roots[i] = root_list[i]
    g.seen = <int64_t*> buf.take(C * sizeof(int64_t))
    g.active = <int64_t*> buf.take(C * sizeof(int64_t))
    memset(g.seen, 0, C * sizeof(int64_t))
    memset(g.active, 0, C * sizeof(int64_t))
    g.stamp = 0
    g.visited = <int32_t*> buf.take(C * sizeof(int32_t))
    g.stack_c = <int32_t*> buf.take((C + 1) * sizeof(int32_t))
    g.stack_p = <int32_t*> buf.take((C + 1) * sizeof(int32_t))
    # parents: the allowed nodes having each class as a child (each node once per class); class members
    cdef int32_t* par_off = <int32_t*> buf.take((C + 1) * sizeof(int32_t))
    cdef int32_t* par = <int32_t*> buf.take(M * sizeof(int32_t))
    cdef int32_t* cn_off = <int32_t*> buf.take((C + 1) * sizeof(int32_t))
    cdef int32_t* cn = <int32_t*> buf.take(N * sizeof(int32_t))
    cdef int32_t* mark = <int32_t*> buf.take(C * sizeof(int32_t))
    cdef int32_t* fill = <int32_t*> buf.take((C + 1) * sizeof(int32_t))
    memset(par_off, 0, (C + 1) * sizeof(int32_t))
    memset(cn_off, 0, (C + 1) * sizeof(int32_t))
    memset(mark, 0xff, C * sizeof(int32_t))
    for n in range(N):
        cn_off[node_class[n] + 1] += 1
        if blacklisted[n]:
            continue
        for j in range(child_start[n], child_start[n + 1]):
            d = children[j]
            if mark[d] != n:
                mark[d] = n
                par_off[d + 1] += 1
    for c in range(C):
        par_off[c + 1] += par_off[c]
        cn_off[c + 1] += cn_off[c]
    for c in range(C + 1):
        fill[c] = par_off[c]
    memset(mark, 0xff, C * sizeof(int32_t))
    for n in range(N):
        if blacklisted[n]:
            continue
        for j in range(child_start[n], child_start[n + 1]):
            d = children[j]
            if mark[d] != n:
                mark[d] = n
                par[fill[d]] = n
                fill[d] += 1
    for c in range(C + 1):
        fill[c] = cn_off[c]
    for n in range(N):
        cn[fill[node_class[n]]] = n
        fill[node_class[n]] += 1
    # the kept state's DAG membership; one move's users (switched classes) and repaired readers
    cdef uint8_t* in_dag = <uint8_t*> buf.take(C * sizeof(uint8_t))
    cdef int64_t* user_stamp = <int64_t*> buf.take(C * sizeof(int64_t))
    cdef int64_t* t_stamp = <int64_t*> buf.take(C * sizeof(int64_t))
    cdef int32_t* user_slot = <int32_t*> buf.take(C * sizeof(int32_t))
    cdef int32_t* user_class = <int32_t*> buf.take(C * sizeof(int32_t))
    cdef int32_t* user_node = <int32_t*> buf.take(C * sizeof(int32_t))
    cdef int32_t* user_old = <int32_t*> buf.take(C * sizeof(int32_t))
    cdef int32_t* rep_class = <int32_t*> buf.take(C * sizeof(int32_t))
    cdef int32_t* rep_t = <int32_t*> buf.take(C * sizeof(int32_t))
    cdef int32_t* rep_old = <int32_t*> buf.take(C * sizeof(int32_t))
    cdef int32_t* q_class = <int32_t*> buf.take(C * sizeof(int32_t))
    cdef int32_t* q_depth = <int32_t*> buf.take(C * sizeof(int32_t))
    cdef int64_t* w_stamp = <int64_t*> buf.take(C * sizeof(int64_t))
    memset(w_stamp, 0, C * sizeof(int64_t))
    memset(user_stamp, 0, C * sizeof(int64_t))
    memset(t_stamp, 0, C * sizeof(int64_t))
    memset(in_dag, 0, C * sizeof(uint8_t))
    with nogil:
        best = _evaluate(&g)
        evaluations += 1
    if best < 0:
        raise ValueError("the starting choice does not give the roots an acyclic DAG")
    for i in range(g.nvisited):
        in_dag[g.visited[i]] = 1
    with nogil:
        improved = True
        while improved and passes < max_passes:
            improved = False
            passes += 1
            for s in range(C):
                if in_dag[s] or choice[s] < 0:
                    continue
                for lift in range(2):
                    # the users: per DAG class, its cheapest node reading s whose children all have a choice;
                    # with lift, also the DAG classes that reach s through classes outside the DAG by their
                    # chosen nodes, up to max_lift levels up (a merged op's pieces: reshape(get(split(...))))
                    ustamp += 1
                    wstamp += 1
                    nusers = 0
                    lifted = 0
                    nq = 1
                    q_class[0] = s
                    q_depth[0] = 0
                    w_stamp[s] = wstamp
                    qi = 0
                    while qi < nq:
                        x = q_class[qi]
                        qi += 1
                        for j in range(par_off[x], par_off[x + 1]):
                            n = par[j]
                            c = node_class[n]
                            if c == s or c == x:
                                continue
                            if not in_dag[c]:
                                # an outside class whose chosen node reads x carries x into the DAG with it
                                if lift and choice[c] == n and q_depth[qi - 1] < max_lift and w_stamp[c] != wstamp:
                                    w_stamp[c] = wstamp
                                    q_class[nq] = c
                                    q_depth[nq] = q_depth[qi - 1] + 1
                                    nq += 1
                                continue
                            if choice[c] == n:
                                continue
                            ready = True
                            for k in range(child_start[n], child_start[n + 1]):
                                if choice[children[k]] < 0:
                                    ready = False
                                    break
                            if not ready:
                                continue
                            if user_stamp[c] != ustamp:
                                user_stamp[c] = ustamp
                                user_slot[c] = <int32_t> nusers
                                user_class[nusers] = c
                                user_node[nusers] = n
                                nusers += 1
                                lifted += x != s
                            elif node_cost[n] < node_cost[user_node[user_slot[c]]]:
                                user_node[user_slot[c]] = n
                        if not lift:
                            break
                    if nusers < 2 or (lift and not lifted):
                        continue
                    for i in range(nusers):
                        u = user_class[i]
                        user_old[i] = choice[u]
                        choice[u] = user_node[i]
                    value = _evaluate(&g)
                    evaluations += 1
                    nrep = 0
                    if value >= 0 and value >= best - 1e-12 * best:
                        # repair: a class the users stopped reading, still in the DAG with a single reader
                        # left (not a user), loses what sharing paid for it; that reader may do better
                        tstamp += 1
                        for i in range(nusers):
                            n = user_old[i]
                            for k in range(child_start[n], child_start[n + 1]):
                                t = children[k]
                                if t_stamp[t] == tstamp or g.seen[t] != g.stamp:
                                    continue
                                t_stamp[t] = tstamp
                                readers = 0
                                reader = -1
                                for j in range(par_off[t], par_off[t + 1]):
                                    m = par[j]
                                    c = node_class[m]
                                    if g.seen[c] == g.stamp and choice[c] == m:
                                        readers += 1
                                        reader = c
                                        if readers > 1:
                                            break
                                if readers == 1 and user_stamp[reader] != ustamp and t_stamp[reader] != -tstamp:
                                    t_stamp[reader] = -tstamp  # one repair per reader
                                    rep_class[nrep] = reader
                                    rep_t[nrep] = t
                                    nrep += 1
                        for i in range(nrep):
                            c = rep_class[i]
                            t = rep_t[i]
                            rep_old[i] = choice[c]
                            best_m = choice[c]
                            best_v = value
                            for j in range(cn_off[c], cn_off[c + 1]):
                                m = cn[j]
                                if m == rep_old[i] or blacklisted[m]:
                                    continue
                                ready = True
                                for k in range(child_start[m], child_start[m + 1]):
                                    d = children[k]
                                    if d == t or choice[d] < 0:
                                        ready = False
                                        break
                                if not ready:
                                    continue
                                choice[c] = m
                                v = _evaluate(&g)
                                evaluations += 1
                                if v >= 0 and v < best_v:
                                    best_v = v
                                    best_m = m
                            choice[c] = best_m
                            value = best_v
                        if nrep:
                            value = _evaluate(&g)  # the visited classes of the state kept
                            evaluations += 1
                    if value >= 0 and value < best - 1e-12 * best:
                        best = value
                        kept += 1
                        improved = True
                        memset(in_dag, 0, C * sizeof(uint8_t))
                        for i in range(g.nvisited):
                            in_dag[g.visited[i]] = 1
                        break  # s is in the DAG now
                    else:
                        for i in range(nrep - 1, -1, -1):
                            choice[rep_class[i]] = rep_old[i]
                        for i in range(nusers):
                            choice[user_class[i]] = user_old[i]
    return best, kept, evaluations, passes
