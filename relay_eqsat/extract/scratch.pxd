# cython: language_level=3
cdef class Scratch:
    cdef void** ptrs
    cdef Py_ssize_t n, cap
    cdef void* take(self, Py_ssize_t nbytes) except NULL
