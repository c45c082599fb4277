# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The merge-aware local search kernel (``merge_greedy.py`` describes the algorithm), on CSR arrays.

A state is one chosen node per class (``-1``: none); its cost is the cost of
the DAG the roots reach, each class once. A *group move* on a class ``s``
outside that DAG switches every DAG class that has a node reading ``s`` to
such a node (its cheapest one); if that alone does not pay, the classes the
switched nodes stop reading and that are left with one reader (the other half
of a pairing the move competes with) get that reader switched to its best
other node. A move on ``s`` that keeps nothing is tried once more lifted: its
users then include the DAG classes that reach ``s`` through up to
``max_lift`` classes outside the DAG by those classes' chosen nodes (a
breadth-first walk up the parents). The move is kept when the DAG's cost
drops and the chosen nodes stay acyclic. Passes over all classes repeat until
one keeps nothing (or ``max_passes``). Scratch arrays are stamped with a
counter instead of cleared.

Evaluating a trial state. A depth-first walk of the whole DAG (``_evaluate``)
costs its size for every move and every repair tried: on the rollout e-graphs
of an MCTS run on ViT (about 1,800 e-nodes, DAGs of about 460 classes) that
was 6 microseconds an evaluation and 91% of the search. The trial is instead
kept *incrementally*: each class's reference count (the chosen-node edges of
the DAG's classes reading it, plus one per root) and membership change in
place as nodes are switched, a class whose count drops to zero leaves with
its cost and releases its children, one that gains its first reader joins and
counts its chosen node's children; every change is logged and undone when the
move is rejected. Reference counts are exact while the chosen nodes are
acyclic, and only a switched class or one that joined from outside the kept
DAG can close a cycle, so the cycle check walks from those alone; it stops at
an unswitched class of the kept DAG that comes before every switched one in
the kept DAG's postorder (the kept DAG's edges only go down that order, so it
cannot reach a switched class). When the check finds a cycle, the whole walk
decides (the cycle may hang off the DAG, unreachable), and the trial's counts
are rebuilt from it. A kept state is always confirmed by the whole walk. The
result is the whole walk's, move for move (``check=True`` compares every
evaluation with it).
"""
import numpy as np

from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.stdlib cimport free, realloc

from relay_eqsat.extract.scratch cimport Scratch, check_csr
from libc.string cimport memcpy, memset


include "merge_dag.pxi"


cdef struct _Vec:
    int32_t* a
    Py_ssize_t n
    Py_ssize_t cap


cdef int _push(_Vec* v, int32_t x) except -1:
    cdef int32_t* p
    cdef Py_ssize_t cap
    if v.n == v.cap:
        cap = 2 * v.cap + 64
        p = <int32_t*> realloc(v.a, cap * sizeof(int32_t))
        if p == NULL:
            raise MemoryError()
        v.a = p
        v.cap = cap
    v.a[v.n] = x
    v.n += 1
    return 0


cdef struct _Trial:
    # a state changed in place from the kept one (module docstring), and what undoes it
    const int32_t* child_start
    const int32_t* children
    const double* cost
    int32_t* choice
    const uint8_t* in_dag    # the kept state's DAG
    const int32_t* post      # the kept DAG's postorder
    int32_t* rc              # readers: chosen-node edges from members, plus one per root
    uint8_t* member          # in the trial's DAG
    double total             # the members' cost
    Py_ssize_t bad           # members without a choice
    _Vec log                 # (class, old rc * 2 + old member) pairs, in order
    _Vec changed             # classes switched, and members that joined from outside the kept DAG
    _Vec work                # the cascades' work list
    # the cycle check: stamps, the DFS stack
    int64_t* cseen
    int64_t* cactive
    int64_t* cchanged
    int64_t cstamp
    int32_t* dfs_c
    int32_t* dfs_p


cdef inline int _log(_Trial* T, int32_t c) except -1:
    _push(&T.log, c)
    _push(&T.log, T.rc[c] * 2 + T.member[c])
    return 0


cdef int _readers(_Trial* T, int32_t n, int delta) except -1:
    """Node ``n``'s children each gain a reader (``delta`` 1: a member now chooses ``n``) or lose
    one (-1). A class that gains its first joins with its chosen node's cost and brings that
    node's children in with it; one left with none leaves and releases them."""
    cdef Py_ssize_t base = T.work.n, k
    cdef int32_t d, m
    for k in range(T.child_start[n], T.child_start[n + 1]):
        _push(&T.work, T.children[k])
    while T.work.n > base:
        T.work.n -= 1
        d = T.work.a[T.work.n]
        _log(T, d)
        T.rc[d] += delta
        if delta > 0:
            if T.member[d]:
                continue
            T.member[d] = 1
            if not T.in_dag[d]:
                _push(&T.changed, d)
        elif T.rc[d] > 0:
            continue
        else:
            T.member[d] = 0
        m = T.choice[d]
        if m < 0:
            T.bad += delta
            continue
        T.total += delta * T.cost[m]
        for k in range(T.child_start[m], T.child_start[m + 1]):
            _push(&T.work, T.children[k])
    return 0


cdef int _switch(_Trial* T, int32_t c, int32_t n) except -1:
    """Class ``c`` chooses node ``n``; a member's edges and cost follow. The choice is set first:
    if ``c`` leaves while its old node's children are released, it releases the new node's."""
    cdef int32_t old = T.choice[c]
    _push(&T.changed, c)
    T.choice[c] = n
    if T.member[c]:
        T.total += T.cost[n] - T.cost[old]
        _readers(T, n, 1)
        _readers(T, old, -1)
    return 0


cdef struct _Mark:
    # a trial state to return to: the log's and the changed list's lengths, the cost, the bad count
    Py_ssize_t log
    Py_ssize_t changed
    double total
    Py_ssize_t bad


cdef inline _Mark _mark(_Trial* T) noexcept nogil:
    cdef _Mark m
    m.log = T.log.n
    m.changed = T.changed.n
    m.total = T.total
    m.bad = T.bad
    return m


cdef void _rollback(_Trial* T, _Mark m) noexcept nogil:
    """Back to the state of mark ``m``: the counts and memberships logged since restored (choices
    are the caller's to restore)."""
    cdef Py_ssize_t i = T.log.n
    cdef int32_t c, v
    while i > m.log:
        i -= 2
        c = T.log.a[i]
        v = T.log.a[i + 1]
        T.rc[c] = v >> 1
        T.member[c] = v & 1
    T.log.n = m.log
    T.changed.n = m.changed
    T.total = m.total
    T.bad = m.bad


cdef int _keep(_Trial* T, _Dag* g, uint8_t* in_dag, Py_ssize_t C, double cost) except -1:
    """Make the DAG the last whole walk visited (of cost ``cost``) the kept state, its trial empty."""
    cdef Py_ssize_t i
    memset(in_dag, 0, C * sizeof(uint8_t))
    for i in range(g.nvisited):
        in_dag[g.visited[i]] = 1
    memcpy(T.member, in_dag, C * sizeof(uint8_t))
    _count(g, T.rc, C)
    T.log.n = 0
    T.changed.n = 0
    T.total = cost
    T.bad = 0
    return 0


cdef bint _cyclic(_Trial* T) noexcept nogil:
    """Whether the members' chosen nodes form a cycle: a walk from every changed member, passing
    over unswitched classes of the kept DAG placed before every switched one in its postorder."""
    cdef Py_ssize_t i
    cdef int32_t c
    cdef _Walk w
    T.cstamp += 1
    _walk_init(&w, T.child_start, T.children, T.choice, T.cost, T.cseen, T.cactive, T.cstamp, T.dfs_c, T.dfs_p)
    w.in_dag = T.in_dag
    w.minpost = 2147483647
    for i in range(T.changed.n):
        c = T.changed.a[i]
        T.cchanged[c] = T.cstamp
        if T.in_dag[c] and T.member[c] and T.post[c] < w.minpost:
            w.minpost = T.post[c]
    w.changed = T.cchanged
    w.kept_post = T.post
    for i in range(T.changed.n):
        c = T.changed.a[i]
        if T.member[c] and T.cseen[c] != T.cstamp and T.choice[c] >= 0 and _walk_from(&w, c) == 1:
            return True
    return False


cdef int _count(_Dag* g, int32_t* rc, Py_ssize_t C) except -1:
    """``rc``: each class's readers in the DAG the last evaluation visited (plus one per root)."""
    cdef Py_ssize_t i, k
    cdef int32_t c, n
    memset(rc, 0, C * sizeof(int32_t))
    for i in range(g.nroots):
        rc[g.roots[i]] += 1
    for i in range(g.nvisited):
        n = g.choice[g.visited[i]]
        for k in range(g.child_start[n], g.child_start[n + 1]):
            rc[g.children[k]] += 1
    return 0


cdef double _value(_Trial* T, _Dag* g, int32_t* tmp, Py_ssize_t C) except? -2:
    """The trial's cost; -1 when a member has no choice or the chosen nodes close a cycle. With a
    cycle the whole walk decides, and a state it accepts (the cycle hangs off the DAG) has its
    counts rebuilt from that walk, logged."""
    cdef double v
    cdef int32_t c
    if not _cyclic(T):
        return -1.0 if T.bad > 0 else T.total
    v = _evaluate(g, False)
    if v < 0:
        return -1.0
    _count(g, tmp, C)
    for c in range(C):
        if T.rc[c] != tmp[c] or T.member[c] != (g.seen[c] == g.stamp):
            _log(T, c)
            T.rc[c] = tmp[c]
            T.member[c] = g.seen[c] == g.stamp
            if T.member[c] and not T.in_dag[c]:
                _push(&T.changed, c)
    T.total = v
    T.bad = 0
    return v


cdef double _checked(_Trial* T, _Dag* g, int32_t* tmp, Py_ssize_t C, bint check) except? -2:
    """``_value``; with ``check``, compared with the whole walk (RuntimeError when they differ)."""
    cdef double v = _value(T, g, tmp, C), w
    if check:
        w = _evaluate(g, False)
        if (v < 0) != (w < 0) or (v >= 0 and abs(v - w) > 1e-9 * max(abs(w), 1e-300)):
            raise RuntimeError(f"incremental DAG cost {v!r} differs from the whole walk's {w!r}")
    return v


def improve_shared(const int32_t[::1] node_class, const int32_t[::1] child_start, const int32_t[::1] children,
                   const double[::1] node_cost, const uint8_t[::1] blacklisted, int32_t[::1] choice, roots,
                   Py_ssize_t max_passes=20, Py_ssize_t max_lift=3, bint check=False):
    """Improve ``choice`` (class -> node, -1: none; changed in place) by group moves until a pass keeps
    none or after ``max_passes`` passes (``max_lift``: how many outside classes a lifted move reaches
    its users through; 0: no lifted moves). ``choice`` must give the roots an acyclic DAG (e.g. the OCF
    greedy's choice of every class). Returns ``(cost, moves kept, evaluations, passes)``; the cost
    is that of the DAG the roots reach, each class once. ``check``: compare every incremental
    evaluation with a walk of the whole DAG (RuntimeError when they differ; for tests)."""
    cdef Py_ssize_t N = node_class.shape[0], C = choice.shape[0], M = children.shape[0]
    cdef Py_ssize_t i, j, k, nusers, nrep, kept = 0, evaluations = 0, passes = 0
    cdef int32_t c, n, s, d, u, t, m, reader, readers, best_m
    cdef bint improved, ready
    cdef double best, value, v, best_v, full
    cdef int64_t ustamp = 0, tstamp = 0, wstamp = 0
    cdef Py_ssize_t nq, qi, lifted, lift
    cdef _Mark kept_mark, alt_mark
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
    g.post = <int32_t*> buf.take(C * sizeof(int32_t))
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
    # the trial state
    cdef _Trial T
    cdef int32_t* tmp = <int32_t*> buf.take(C * sizeof(int32_t))
    T.child_start = g.child_start
    T.children = g.children
    T.cost = g.cost
    T.choice = g.choice
    T.in_dag = in_dag
    T.post = g.post
    T.rc = <int32_t*> buf.take(C * sizeof(int32_t))
    T.member = <uint8_t*> buf.take(C * sizeof(uint8_t))
    T.cseen = <int64_t*> buf.take(C * sizeof(int64_t))
    T.cactive = <int64_t*> buf.take(C * sizeof(int64_t))
    T.cchanged = <int64_t*> buf.take(C * sizeof(int64_t))
    memset(T.cseen, 0, C * sizeof(int64_t))
    memset(T.cactive, 0, C * sizeof(int64_t))
    memset(T.cchanged, 0, C * sizeof(int64_t))
    T.cstamp = 0
    T.dfs_c = <int32_t*> buf.take((C + 1) * sizeof(int32_t))
    T.dfs_p = <int32_t*> buf.take((C + 1) * sizeof(int32_t))
    T.log.a = NULL
    T.log.n = T.log.cap = 0
    T.changed.a = NULL
    T.changed.n = T.changed.cap = 0
    T.work.a = NULL
    T.work.n = T.work.cap = 0
    best = _evaluate(&g, True)
    evaluations += 1
    if best < 0:
        raise ValueError("the starting choice does not give the roots an acyclic DAG")
    try:
        _keep(&T, &g, in_dag, C, best)
        kept_mark = _mark(&T)
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
                    # the trial starts from the kept state: an empty log, nothing changed
                    for i in range(nusers):
                        u = user_class[i]
                        user_old[i] = choice[u]
                        _switch(&T, u, user_node[i])
                    value = _checked(&T, &g, tmp, C, check)
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
                                if t_stamp[t] == tstamp or not T.member[t]:
                                    continue
                                t_stamp[t] = tstamp
                                readers = 0
                                reader = -1
                                for j in range(par_off[t], par_off[t + 1]):
                                    m = par[j]
                                    c = node_class[m]
                                    if T.member[c] and choice[c] == m:
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
                                alt_mark = _mark(&T)
                                _switch(&T, c, m)
                                v = _checked(&T, &g, tmp, C, check)
                                evaluations += 1
                                _rollback(&T, alt_mark)
                                choice[c] = rep_old[i]
                                if v >= 0 and v < best_v:
                                    best_v = v
                                    best_m = m
                            if best_m != rep_old[i]:
                                _switch(&T, c, best_m)
                            value = best_v
                        if nrep:
                            value = _checked(&T, &g, tmp, C, check)
                            evaluations += 1
                    if value >= 0 and value < best - 1e-12 * best:
                        # kept: confirmed by the whole walk, which also gives the new DAG's postorder
                        full = _evaluate(&g, True)
                        if full < 0 or abs(full - value) > 1e-9 * max(abs(full), 1e-300):
                            raise RuntimeError(f"incremental DAG cost {value!r} differs from the whole walk's {full!r}")
                        best = full
                        kept += 1
                        improved = True
                        _keep(&T, &g, in_dag, C, best)
                        kept_mark = _mark(&T)
                        break  # s is in the DAG now
                    else:
                        _rollback(&T, kept_mark)
                        for i in range(nrep - 1, -1, -1):
                            choice[rep_class[i]] = rep_old[i]
                        for i in range(nusers):
                            choice[user_class[i]] = user_old[i]
    finally:
        free(T.log.a)
        free(T.changed.a)
        free(T.work.a)
    return best, kept, evaluations, passes
