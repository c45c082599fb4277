"""The e-graph (``core.pyx``): ``EGraph``, the last of the layers, for modules that cimport it."""
from .apply cimport EGraphApply


cdef class EGraph(EGraphApply):
    pass
