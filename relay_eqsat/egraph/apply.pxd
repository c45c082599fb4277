"""Applying rules (``apply.pyx``): compiled application plans, applied over ``EGraphMatch``."""
from libc.stdint cimport int32_t

from .ematch cimport EGraphMatch


cdef class CompiledPlan:
    cdef int32_t* data
    cdef int32_t* sigs
    cdef int32_t nsteps, nouts, maxkids


cdef class EGraphApply(EGraphMatch):
    cpdef bint apply_plan(self, tuple steps, tuple outs, list roots) except -1
    cdef bint _apply_compiled(self, CompiledPlan cp, const int32_t* roots, const int32_t* classes,
                              int32_t ncls) except -1
