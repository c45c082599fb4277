# cython: language_level=3
from libc.stdint cimport int32_t

cdef class Scratch:
    cdef void** ptrs
    cdef Py_ssize_t n, cap
    cdef void* take(self, Py_ssize_t nbytes) except NULL

cdef int check_csr(const int32_t[::1] node_class, const int32_t[::1] child_start, const int32_t[::1] children,
                   Py_ssize_t num_classes) except -1
