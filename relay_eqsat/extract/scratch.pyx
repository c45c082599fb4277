# cython: language_level=3
"""What the extraction kernels share: scratch memory of one run, freed together, and the
check of the CSR arrays (node classes, child offsets, child classes) they all read."""
from libc.stdint cimport int32_t
from libc.stdlib cimport free, malloc


cdef class Scratch:
    """Up to 64 malloc'd arrays of one run, all freed when the object goes away."""

    def __cinit__(self):
        self.cap = 64
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


cdef int check_csr(const int32_t[::1] node_class, const int32_t[::1] child_start, const int32_t[::1] children,
                   Py_ssize_t num_classes) except -1:
    """ValueError unless the CSR arrays are consistent: offsets from 0 to len(children),
    nondecreasing, every node's and child's class in range."""
    cdef Py_ssize_t N = node_class.shape[0], M = children.shape[0], n, j
    if child_start[0] != 0 or child_start[N] != M:
        raise ValueError("child_start must run from 0 to len(children)")
    for n in range(N):
        if node_class[n] < 0 or node_class[n] >= num_classes:
            raise ValueError(f"node {n}'s class {node_class[n]} is out of range")
        if child_start[n + 1] < child_start[n]:
            raise ValueError("child_start must be nondecreasing")
    for j in range(M):
        if children[j] < 0 or children[j] >= num_classes:
            raise ValueError(f"child class {children[j]} is out of range")
    return 0
