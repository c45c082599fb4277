"""Process-wide interning: ids of operator names, attribute sets, types, attribute values, origins and
e-node signatures (``interning.pyx``), shared by every e-graph."""

cpdef int op_id(str name)
cpdef int origin_id(str name)
cpdef int attrs_id(object attrs)
cpdef int type_id(object t)
cpdef int value_id(object v)
cpdef object infer_type_memo(str op, object attrs, tuple input_types)
cpdef int signature_id(int op, int attrs, tuple child_types) except -1
