"""Rebuilding and the analysis (``rebuild.pyx``): ``EGraphStore`` extended with congruence closure."""
from libc.stdint cimport int32_t

from .store cimport EGraphStore


cdef class EGraphRebuild(EGraphStore):
    cdef int _repair(self, int32_t c) except -1
    cdef int _propagate_const(self, int32_t c) except -1
