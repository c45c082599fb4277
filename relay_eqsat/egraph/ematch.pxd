"""E-matching (``ematch.pyx``): compiled patterns and the VM that runs them over ``EGraphCycles``."""
from libc.stdint cimport int32_t
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_SET_ITEM

from .cyclefilter cimport EGraphCycles


cdef inline void _tuple_set(object t, Py_ssize_t i, object v):
    """PyTuple_SET_ITEM with the reference it steals (filling a new tuple: a match, a plan key)."""
    Py_INCREF(v)
    PyTuple_SET_ITEM(t, i, v)


cdef class AttrFilter:
    cdef public dict literals
    cdef public list var_keys
    cdef public list slots
    cdef public list first
    cdef dict cache

    cdef object check(self, int32_t aid)


cdef class Program:
    cdef int32_t ninstr, nregs, nvars, nattr
    cdef int32_t* kind
    cdef int32_t* in_reg
    cdef int32_t* other_reg
    cdef int32_t* op
    cdef int32_t* nch
    cdef int32_t* child_reg
    cdef int32_t* var_reg
    cdef list filters
    cdef public list vars
    cdef public list attr_vars
    cdef public object tree


cdef class EGraphMatch(EGraphCycles):
    cpdef Py_ssize_t op_count(self, int op)
    cdef int _run(self, Program p, int ip, int32_t fixed, int32_t* regs, int32_t* aslots,
                  set seen, list out) except -1
