# The whole-DAG walk of the merge-aware local search (included by merge_kernel.pyx: one
# compiled module, so these nogil helpers stay inlined where the search calls them): a
# state's DAG from its roots, its cost (each reached class once) and its postorder.

cdef struct _Dag:
    # the graph
    const int32_t* node_class
    const int32_t* child_start
    const int32_t* children
    const double* cost
    int32_t* choice
    int32_t* roots
    Py_ssize_t nroots
    # one evaluation: classes visited (in preorder), stamps, the DFS stack, the postorder
    int64_t* seen        # == stamp: visited in the evaluation with that stamp
    int64_t* active      # == stamp: on the DFS path
    int64_t stamp
    int32_t* visited
    Py_ssize_t nvisited
    int32_t* stack_c
    int32_t* stack_p
    int32_t* post        # each visited class's place in the postorder (children first), when recorded


cdef struct _Walk:
    # one depth-first walk over the chosen nodes, from classes given one by one (``_walk_from``)
    const int32_t* child_start
    const int32_t* children
    const int32_t* choice
    const double* cost
    int64_t* seen          # == stamp: reached
    int64_t* active        # == stamp: on the path
    int64_t stamp
    int32_t* stack_c
    int32_t* stack_p
    bint strict            # a reached class without a choice fails the walk (else it is passed over)
    int32_t* visited       # the reached classes, in preorder, with their cost summed (NULL: not recorded)
    Py_ssize_t nvisited
    double total
    int32_t* post          # each reached class's place in the postorder (NULL: not recorded)
    int32_t npost
    # passed over (NULL: none): a class of the kept DAG, not changed (changed[c] != stamp), placed
    # before ``minpost`` in the kept DAG's postorder ``kept_post``
    const uint8_t* in_dag
    const int64_t* changed
    const int32_t* kept_post
    int32_t minpost


cdef void _walk_init(_Walk* w, const int32_t* child_start, const int32_t* children, const int32_t* choice,
                     const double* cost, int64_t* seen, int64_t* active, int64_t stamp, int32_t* stack_c,
                     int32_t* stack_p) noexcept nogil:
    """A walk over these arrays that records nothing, passes over nothing and is not strict."""
    w.child_start = child_start
    w.children = children
    w.choice = choice
    w.cost = cost
    w.seen = seen
    w.active = active
    w.stamp = stamp
    w.stack_c = stack_c
    w.stack_p = stack_p
    w.strict = False
    w.visited = NULL
    w.nvisited = 0
    w.total = 0.0
    w.post = NULL
    w.npost = 0
    w.in_dag = NULL


cdef inline void _reach(_Walk* w, int32_t c) noexcept nogil:
    w.seen[c] = w.stamp
    w.active[c] = w.stamp
    if w.visited != NULL:
        w.visited[w.nvisited] = c
        w.nvisited += 1
        w.total += w.cost[w.choice[c]]


cdef int _walk_from(_Walk* w, int32_t c) noexcept nogil:
    """Walk depth-first from class ``c`` (not yet reached, with a choice): 1 when the chosen nodes
    close a cycle, -1 when ``strict`` and a reached class has no choice, else 0."""
    cdef Py_ssize_t top = 0
    cdef int32_t n, d, p
    _reach(w, c)
    w.stack_c[0] = c
    w.stack_p[0] = w.child_start[w.choice[c]]
    while top >= 0:
        c = w.stack_c[top]
        n = w.choice[c]
        p = w.stack_p[top]
        if p < w.child_start[n + 1]:
            w.stack_p[top] = p + 1
            d = w.children[p]
            if w.seen[d] == w.stamp:
                if w.active[d] == w.stamp:
                    return 1  # a cycle through d
                continue
            if w.choice[d] < 0:
                if w.strict:
                    return -1
                continue
            if w.in_dag != NULL and w.in_dag[d] and w.changed[d] != w.stamp and w.kept_post[d] < w.minpost:
                continue
            _reach(w, d)
            top += 1
            w.stack_c[top] = d
            w.stack_p[top] = w.child_start[w.choice[d]]
        else:
            w.active[c] = 0
            if w.post != NULL:
                w.post[c] = w.npost
                w.npost += 1
            top -= 1
    return 0


cdef double _evaluate(_Dag* g, bint record_post) noexcept nogil:
    """The cost of the DAG ``g.choice`` gives the roots, each class once; -1 when a reached class
    has no choice or the chosen nodes form a cycle. Fills ``g.visited`` with the reached classes
    and, with ``record_post``, ``g.post`` with their postorder."""
    cdef Py_ssize_t i
    cdef int32_t c
    cdef _Walk w
    g.stamp += 1
    _walk_init(&w, g.child_start, g.children, g.choice, g.cost, g.seen, g.active, g.stamp, g.stack_c, g.stack_p)
    w.strict = True
    w.visited = g.visited
    if record_post:
        w.post = g.post
    for i in range(g.nroots):
        c = g.roots[i]
        if g.seen[c] == g.stamp:
            continue
        if g.choice[c] < 0 or _walk_from(&w, c) != 0:
            g.nvisited = w.nvisited
            return -1.0
    g.nvisited = w.nvisited
    return w.total
