"""Cycles (``cyclefilter.pyx``): the blacklist, TENSAT's cycle pre-filter and post-processing."""
from libc.stdint cimport int32_t

from .rebuild cimport EGraphRebuild


cdef class EGraphCycles(EGraphRebuild):
    cdef int _dfs_blacklist(self, list out) except -1


cdef class DescendantsMap:
    cdef int32_t* off
    cdef int32_t* adj
    cdef int32_t* pos
    cdef int32_t* mark
    cdef int32_t stamp
    cdef Py_ssize_t nc
    cdef dict memo

    cpdef bint reaches(self, int v, int r)
