# cython: language_level=3
"""Scratch memory of one kernel run, freed together (the extraction kernels' one allocator)."""
from libc.stdlib cimport free, malloc


cdef class Scratch:
    """Up to 32 malloc'd arrays of one run, all freed when the object goes away."""

    def __cinit__(self):
        self.cap = 32
        self.n = 0
        self.ptrs = <void**> malloc(self.cap * sizeof(void*))
        if self.ptrs == NULL:
            raise MemoryError()

    cdef void* take(self, Py_ssize_t nbytes) except NULL:
        cdef void* p
        if self.n == self.cap:
            raise RuntimeError("out of scratch slots")
        p = malloc(nbytes if nbytes > 0 else 1)
        if p == NULL:
            raise MemoryError()
        self.ptrs[self.n] = p
        self.n += 1
        return p

    def __dealloc__(self):
        cdef Py_ssize_t i
        for i in range(self.n):
            free(self.ptrs[i])
        free(self.ptrs)
