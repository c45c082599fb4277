# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Applying rules: a planned right-hand side added and merged with the matched classes, at every
match of a rule (memoized plans, the cycle pre-filter, node limits, non-overlapping application).

A rule's right-hand side is planned in Python (``relay_eqsat.rewrite``: its
preconditions, its new nodes' types) once per shape of match: the plan is a
template over the match's classes (``PLACEHOLDER + i`` for the ``i``-th
distinct class), compiled into one int32 array (``CompiledPlan``) and
memoized on everything the rule can observe of the match. Applying a compiled
plan is C: each step's node is added (its signature cached in the plan) and
each output merged with its root.
"""
cimport cython
from libc.stdlib cimport malloc, free
from libc.stdint cimport int32_t
from cpython.tuple cimport PyTuple_New
from cpython.long cimport PyLong_FromLong

from .store cimport C_CONST
from .cyclefilter cimport DescendantsMap
from .ematch cimport EGraphMatch, _tuple_set

PLACEHOLDER = 1 << 30  # class references in plan templates (see apply_matches_planned)
DEF C_PLACEHOLDER = 1073741824


@cython.auto_pickle(False)  # pickling refused by the store's, as before the split
cdef class EGraphApply(EGraphMatch):
    """Rule application (planned right-hand sides) over ``EGraphMatch``."""

    cpdef bint apply_plan(self, tuple steps, tuple outs, list roots) except -1:
        """Add a rule application planned by ``Rule.plan`` and merge its outputs with ``roots``.

        ``steps``: ``(op id, attrs id, children)``, a child being a class id
        or ``-(i + 1)`` for the node of step ``i``; ``outs``: one such
        reference per root. True when the e-graph changed (new nodes or merges).
        """
        cdef Py_ssize_t before_nodes = self.n_alive, before_classes = self.n_canon, i
        cdef list handles = []
        cdef tuple st
        cdef bint changed
        cdef int o, r
        for st in steps:
            kids = [k if k >= 0 else handles[-k - 1] for k in <tuple> st[2]]
            handles.append(self.add_ids(st[0], st[1], kids))
        changed = self.n_alive != before_nodes
        for i in range(len(outs)):
            o = outs[i]
            if o < 0:
                o = handles[-o - 1]
            r = roots[i]
            if self.find(r) != self.find(o):
                self.union(r, o)
                changed = True
        return changed or self.n_canon != before_classes

    def apply_matches_planned(self, list matches, dict plans, object make_plan, int nroots, tuple cls_pos,
                              tuple other_pos, tuple rhs_pos, object cycle, object node_limit=None,
                              Py_ssize_t cache_size=500000, set used=None):
        """Apply a rule at each flat match; returns (fired, filtered).

        A match is a tuple ``(root_0, ..., root_{nroots-1}, *vars)`` (for a
        single-pattern rule, an ``EGraph.search`` tuple). It is skipped, and
        counted as filtered, when ``cycle`` says that for some output ``i`` a
        variable at ``rhs_pos[i]`` reaches ``root_i`` (``cycle``: None, a
        ``DescendantsMap`` or a callable ``(var class, root) -> bool``).
        Otherwise its plan is added (``apply_plan``). Plans are templates over
        the match's classes: ``make_plan(match, classes)`` plans with class
        ``classes[i]`` (the distinct classes at ``cls_pos``, ascending) standing
        as ``PLACEHOLDER + i``; they are memoized in ``plans`` on the values at
        ``other_pos``, the types/constness of the classes at ``cls_pos`` and
        their order pattern, i.e. on all a rule's preconditions and right-hand
        side can observe. A plan is None (a precondition fails or a new node
        does not type-check: skipped) or False (its outputs' types differ from
        the roots' classes: skipped and counted in ``type_mismatches``).
        Stops at ``node_limit`` nodes (None: no limit). ``fired`` counts
        applications that changed the e-graph. ``used`` (a set, or None):
        non-overlapping application -- a match is skipped (not counted) when
        one of its roots is in ``used``, and an application that changed the
        e-graph adds its roots to it.
        """
        cdef Py_ssize_t fired = 0, filtered = 0, i, j, r, ncls = len(cls_pos), nout = len(rhs_pos)
        cdef Py_ssize_t noth = len(other_pos), nd, nkey = noth + 2 * ncls, npos, nm = len(matches), mi
        cdef Py_ssize_t limit = -1 if node_limit is None else node_limit  # -1: none, inside this loop only
        cdef tuple m, pos
        cdef int32_t c, root, v
        cdef bint bad
        cdef DescendantsMap dmap = cycle if isinstance(cycle, DescendantsMap) else None
        cdef bint use_call = cycle is not None and dmap is None
        cdef int32_t vals[64]
        cdef int32_t dist[64]
        cdef int32_t roots[64]
        cdef int32_t ipos_cls[64]
        cdef int32_t ipos_oth[128]
        cdef object key, plan
        cdef CompiledPlan cp
        if ncls > 64 or nroots > 64 or noth > 128:
            raise ValueError("too many variables in one rule")
        for i in range(ncls):
            ipos_cls[i] = cls_pos[i]
        for i in range(noth):
            ipos_oth[i] = other_pos[i]
        for mi in range(nm):
            m = matches[mi]
            if limit >= 0 and self.n_alive >= limit:
                break
            if used is not None:
                bad = False
                for i in range(nroots):
                    if m[i] in used:
                        bad = True
                        break
                if bad:
                    continue
            if dmap is not None or use_call:
                bad = False
                for i in range(nout):
                    pos = <tuple> rhs_pos[i]
                    root = m[i]
                    npos = len(pos)
                    for j in range(npos):
                        if dmap is not None:
                            bad = dmap.reaches(m[<Py_ssize_t> pos[j]], root)
                        else:
                            bad = bool(cycle(m[<Py_ssize_t> pos[j]], root))
                        if bad:
                            break
                    if bad:
                        break
                if bad:
                    filtered += 1
                    continue
            # distinct classes, ascending (insertion sort: a handful of variables)
            nd = 0
            for i in range(ncls):
                v = m[ipos_cls[i]]
                vals[i] = v
                j = nd
                while j > 0 and dist[j - 1] > v:
                    j -= 1
                if j > 0 and dist[j - 1] == v:
                    continue
                for r in range(nd, j, -1):
                    dist[r] = dist[r - 1]
                dist[j] = v
                nd += 1
            key = PyTuple_New(nkey)
            for i in range(noth):
                _tuple_set(key, i, m[ipos_oth[i]])
            for i in range(ncls):
                c = self._find(vals[i])
                _tuple_set(key, noth + i, PyLong_FromLong((self.c_type[c] << 1) | (self.c_flags[c] & C_CONST)))
                for j in range(nd):
                    if dist[j] == vals[i]:
                        _tuple_set(key, noth + ncls + i, PyLong_FromLong(j))
                        break
            plan = plans.get(key, plans)  # ``plans`` itself marks a miss
            if plan is plans:
                plan = make_plan(m, [dist[j] for j in range(nd)])
                if plan is not None and plan is not False:
                    plan = CompiledPlan(<tuple> plan[0], <tuple> plan[1])
                if len(plans) >= cache_size:
                    plans.clear()
                plans[key] = plan
            if plan is None:
                continue
            if plan is False:
                self.type_mismatches += 1
                continue
            for i in range(nroots):
                roots[i] = m[i]
            if self._apply_compiled(<CompiledPlan> plan, roots, dist, <int32_t> nd):
                fired += 1
                if used is not None:
                    for i in range(nroots):
                        used.add(m[i])
        return fired, filtered

    cdef bint _apply_compiled(self, CompiledPlan cp, const int32_t* roots, const int32_t* classes,
                              int32_t ncls) except -1:
        """Apply a compiled plan template: a reference >= PLACEHOLDER is ``classes[ref - PLACEHOLDER]``,
        ``-(i + 1)`` the class of step ``i``'s node; outputs are merged with ``roots``."""
        cdef Py_ssize_t before_nodes = self.n_alive, before_classes = self.n_canon
        cdef int32_t i, k, nk, q = 0, ref, o, r, op, attrs
        cdef int32_t kbuf[16]
        cdef int32_t hbuf[32]
        cdef int32_t* kids = kbuf
        cdef int32_t* handles = hbuf
        cdef bint changed
        cdef const int32_t* d = cp.data
        if cp.nsteps > 32:
            handles = <int32_t*> malloc(cp.nsteps * sizeof(int32_t))
            if handles == NULL:
                raise MemoryError()
        if cp.maxkids > 16:
            kids = <int32_t*> malloc(cp.maxkids * sizeof(int32_t))
            if kids == NULL:
                if handles != hbuf:
                    free(handles)
                raise MemoryError()
        try:
            for i in range(cp.nsteps):
                op = d[q]
                attrs = d[q + 1]
                nk = d[q + 2]
                q += 3
                for k in range(nk):
                    ref = d[q + k]
                    if ref < 0:
                        ref = handles[-ref - 1]
                    elif ref >= C_PLACEHOLDER:
                        ref = classes[ref - C_PLACEHOLDER]
                    if ref < 0 or ref >= self.nc:
                        raise IndexError(f"child class {ref} out of range")
                    kids[k] = self._find(ref)
                q += nk
                handles[i] = self._add(op, attrs, kids, nk, cp.sigs + i)
            changed = self.n_alive != before_nodes
            for i in range(cp.nouts):
                o = d[q + i]
                if o < 0:
                    o = handles[-o - 1]
                elif o >= C_PLACEHOLDER:
                    o = classes[o - C_PLACEHOLDER]
                r = roots[i]
                if self.find(r) != self.find(o):
                    self.union(r, o)
                    changed = True
        finally:
            if handles != hbuf:
                free(handles)
            if kids != kbuf:
                free(kids)
        return changed or self.n_canon != before_classes


# ---------------------------------------------------------------------------
# compiled plans
# ---------------------------------------------------------------------------
cdef class CompiledPlan:
    """An application plan (``(steps, outs)``, see ``apply_plan``) as one int32 array:
    per step op, attrs, number of children, the children; then the outputs.

    ``sigs``: each step's signature id once known (-1 before). A plan is a
    template over classes of fixed types (``apply_matches_planned`` keys plans
    on them), so each step's children have the same types, hence the same
    signature, at every application."""

    def __cinit__(self, tuple steps, tuple outs):
        cdef Py_ssize_t size = len(outs), q = 0
        cdef tuple st, kids
        self.data = NULL
        self.sigs = NULL
        self.maxkids = 0
        for st in steps:
            size += 3 + len(<tuple> st[2])
            if len(<tuple> st[2]) > self.maxkids:
                self.maxkids = len(<tuple> st[2])
        self.data = <int32_t*> malloc((size if size else 1) * sizeof(int32_t))
        if self.data == NULL:
            raise MemoryError()
        self.nsteps = len(steps)
        self.nouts = len(outs)
        self.sigs = <int32_t*> malloc((self.nsteps if self.nsteps else 1) * sizeof(int32_t))
        if self.sigs == NULL:
            raise MemoryError()
        for q in range(self.nsteps):
            self.sigs[q] = -1
        q = 0
        for st in steps:
            kids = <tuple> st[2]
            self.data[q] = st[0]
            self.data[q + 1] = st[1]
            self.data[q + 2] = len(kids)
            q += 3
            for k in kids:
                self.data[q] = k
                q += 1
        for o in outs:
            self.data[q] = o
            q += 1

    def __dealloc__(self):
        free(self.data)
        free(self.sigs)
