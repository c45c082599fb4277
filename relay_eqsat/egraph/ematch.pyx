# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""E-matching: patterns compiled into programs for a small backtracking VM, run over the e-graph,
and the join of a multi-pattern rule's matches.

A ``Program`` is a pattern tree flattened into instructions (egg's
``machine.rs``): BIND (the nodes of a class with the pattern node's operator
and arity, the attribute constraints checked by its ``AttrFilter``, memoized
per attrs id, the children bound to registers) and COMPARE (a repeated
variable: two registers in the same class). ``search`` runs a program from
every alive, non-blacklisted node with the root's operator (the per-op index),
``search_class`` from one class. ``join_flat`` combines the matches of a
multi-pattern rule's patterns on their shared variables (a hash join per
pattern, in nested-loop order).
"""
cimport cython
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcpy
from libc.stdint cimport int32_t
from cpython.tuple cimport PyTuple_New
from cpython.long cimport PyLong_FromLong

from .interning cimport op_id, value_id
from .interning import _ATTRS, _OP_NAMES
from .store cimport N_ALIVE, N_BLACK
from .cyclefilter cimport EGraphCycles


# ---------------------------------------------------------------------------
# compiled patterns
# ---------------------------------------------------------------------------
cdef class AttrFilter:
    """Attribute constraints of one pattern node, memoized per attrs id.

    ``literals``: {key: value} the attrs must contain; ``vars``: [(key, slot,
    first)] attribute values bound to attr-var slots; ``whole``: (slot, first)
    binding the whole attribute set (its attrs id) or None.
    """

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


# ---------------------------------------------------------------------------
# the VM
# ---------------------------------------------------------------------------
@cython.auto_pickle(False)  # pickling refused by the store's, as before the split
cdef class EGraphMatch(EGraphCycles):
    """Searching compiled patterns (``Program``) over ``EGraphCycles``."""

    cpdef Py_ssize_t op_count(self, int op):
        """How many nodes with operator id ``op`` were ever added (dead ones included):
        0 means ``search`` of a pattern rooted at ``op`` finds nothing."""
        return self.o_len[op] if 0 <= op < self.o_n else 0

    def search(self, Program prog, int limit=-1):
        """All matches of a compiled pattern: a list of tuples
        ``(root class, class-var classes..., attr-var value ids...)``, deduplicated."""
        cdef int32_t n, root_op = prog.op[0], root_nch = prog.nch[0], i, cnt
        cdef int32_t* regs = <int32_t*> malloc((prog.nregs + 1) * sizeof(int32_t))
        cdef int32_t* aslots = <int32_t*> malloc((prog.nattr + 1) * sizeof(int32_t))
        cdef set seen = set()
        cdef list out = []
        if regs == NULL or aslots == NULL:
            free(regs); free(aslots)
            raise MemoryError()
        cnt = self.o_len[root_op] if root_op < self.o_n else 0
        try:
            for i in range(cnt):
                n = self.o_nodes[root_op][i]
                if self.n_nch[n] != root_nch:
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
            m = PyTuple_New(1 + p.nvars + p.nattr)
            _tuple_set(m, 0, PyLong_FromLong(regs[0]))
            for j in range(p.nvars):
                _tuple_set(m, 1 + j, PyLong_FromLong(self._find(regs[p.var_reg[j]])))
            for j in range(p.nattr):
                _tuple_set(m, 1 + p.nvars + j, PyLong_FromLong(aslots[j]))
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


# ---------------------------------------------------------------------------
# multi-pattern join
# ---------------------------------------------------------------------------
def join_flat(list matches, list slots, Py_ssize_t width, Py_ssize_t limit=-1):
    """The join of a multi-pattern rule's search matches as flat tuples (see ``rules.flat_join``).

    ``matches[i]``: the search tuples ``(root, *values)`` of pattern ``i``;
    ``slots[i]``: the position in the result of each of its values. A result
    is ``(root_0, ..., root_{k-1}, ...)`` of width ``width``: combinations
    agreeing on shared positions, no root twice, in the order of a nested
    loop over the patterns. ``limit`` >= 0: at most that many (every stage
    stops there).
    """
    cdef Py_ssize_t k = len(matches), i, j, r, nrow, nnext, cap, ncap, ns, ni, q, mi
    cdef int32_t* rows = NULL
    cdef int32_t* nxt = NULL
    cdef int32_t* tmp
    cdef int32_t* row
    cdef int32_t* out_row
    cdef int32_t shared_pos[64]
    cdef int32_t shared_slot[64]
    cdef int32_t si_slot[64]
    cdef bint bound[256]
    cdef bint dup
    cdef tuple m, si
    cdef list hits, result
    cdef dict index
    cdef int32_t root
    if k == 0:
        return []
    if width > 256:
        raise ValueError("too many variables in one rule")
    for i in range(width):
        bound[i] = False
    nrow = len(<list> matches[0])
    rows = <int32_t*> malloc((nrow if nrow else 1) * width * sizeof(int32_t))
    if rows == NULL:
        raise MemoryError()
    try:
        si = <tuple> slots[0]
        for r in range(nrow):
            m = (<list> matches[0])[r]
            row = rows + r * width
            for j in range(width):
                row[j] = -1
            row[0] = m[0]
            for j in range(len(si)):
                row[<int32_t> si[j]] = m[1 + j]
        for j in range(len(si)):
            bound[<int32_t> si[j]] = True
        for i in range(1, k):
            si = <tuple> slots[i]
            ni = len(si)
            if ni > 64:
                raise ValueError("too many variables in one pattern")
            ns = 0
            for j in range(ni):
                si_slot[j] = si[j]
                if bound[si_slot[j]]:
                    shared_pos[ns] = <int32_t> j
                    shared_slot[ns] = si_slot[j]
                    ns += 1
            index = {}
            for mi in range(len(<list> matches[i])):
                m = (<list> matches[i])[mi]
                if ns == 1:
                    key = m[1 + shared_pos[0]]
                else:
                    key = tuple([m[1 + shared_pos[q]] for q in range(ns)])
                hits = index.get(key)
                if hits is None:
                    index[key] = [m]
                else:
                    hits.append(m)
            ncap = 1024
            nnext = 0
            nxt = <int32_t*> malloc(ncap * width * sizeof(int32_t))
            if nxt == NULL:
                raise MemoryError()
            for r in range(nrow):
                row = rows + r * width
                if ns == 1:
                    key = row[shared_slot[0]]
                else:
                    key = tuple([row[shared_slot[q]] for q in range(ns)])
                hits = index.get(key)
                if hits is None:
                    continue
                for m in hits:
                    root = m[0]
                    dup = False
                    for j in range(i):
                        if row[j] == root:
                            dup = True
                            break
                    if dup:
                        continue
                    if nnext == ncap:
                        ncap *= 2
                        tmp = <int32_t*> realloc(nxt, ncap * width * sizeof(int32_t))
                        if tmp == NULL:
                            raise MemoryError()
                        nxt = tmp
                    out_row = nxt + nnext * width
                    memcpy(out_row, row, width * sizeof(int32_t))
                    out_row[i] = root
                    for j in range(ni):
                        out_row[si_slot[j]] = m[1 + j]
                    nnext += 1
                    if nnext == limit:
                        break
                if nnext == limit:
                    break
            free(rows)
            rows = nxt
            nxt = NULL
            nrow = nnext
            if nrow == 0:
                return []
            for j in range(ni):
                bound[si_slot[j]] = True
        result = []
        for r in range(nrow):
            row = rows + r * width
            t = PyTuple_New(width)
            for j in range(width):
                _tuple_set(t, j, PyLong_FromLong(row[j]))
            result.append(t)
        return result
    finally:
        free(rows)
        free(nxt)
