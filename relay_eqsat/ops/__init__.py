"""The operator table: one ``OpDef`` per op, declared once, in the module of its family.

An OpDef (:mod:`.opdef`) holds the op's attributes (defaults, required, Relay-style
normalization), shape inference, FLOPs and bytes, numpy semantics, TVM fusion pattern, cost-model
class (fused / injective / anchor, convolution, weight operands), its index in the learned cost
model's vocabulary, and the slots ``relay_eqsat.passes`` fills: the Relay conversions in both
directions and the torch-cuda measuring callable. Families: :mod:`.graph_level`,
:mod:`.elementwise`, :mod:`.products` (dense, matmuls, conv2d), :mod:`.pools`, :mod:`.movement`,
:mod:`.normalization` (bias_add, batch_norm, layer_norm, softmax, mean).

Operator names are Relay's (``nn.conv2d``, ``add``...), plus the graph-level
``var``, ``constant``, ``opaque``, ``tuple`` and ``tuple_get_item``.
Attributes are normalized by the frontend to the canonical forms below, so
that equal computations have equal attributes (the e-graph interns them):

=====================  ======================================================
op (inputs)            attrs (canonical form)
=====================  ======================================================
var ()                 name: str, type: TensorType
constant ()            name: str, type: TensorType
opaque (any)           key: int, type: Type, name: str
tuple (*xs)            -
tuple_get_item (t)     index: int
nn.conv2d (x, w)       strides (2), padding (4: top, left, bottom, right),
                       dilation (2), groups: int, data_layout "NCHW",
                       kernel_layout "OIHW", out_dtype: str ("" = input dtype)
nn.dense (x, w)        out_dtype ("" ); x [..., K], w [N, K] -> [..., N]
nn.matmul (a, b)       transpose_a: bool, transpose_b: bool, out_dtype
nn.batch_matmul (a,b)  transpose_a: bool, transpose_b: bool, out_dtype
                       (Relay default transpose_b=True: [B,M,K] x [B,N,K])
batch_dense (a, b)     out_dtype; [B,M,K] x [B,N,K] -> [B,M,N] (batch_matmul NT
                       run as B nn.dense calls: no Relay op of its own)
add subtract multiply  - (numpy broadcasting)
divide maximum minimum
power
nn.relu tanh sigmoid   -
erf exp sqrt rsqrt
negative
clip (x)               a_min: float, a_max: float
nn.leaky_relu (x)      alpha: float
nn.max_pool2d (x)      pool_size (2), strides (2), dilation (2), padding (4),
                       layout "NCHW", ceil_mode: bool
nn.avg_pool2d (x)      as max_pool2d plus count_include_pad: bool
nn.global_avg_pool2d   layout "NCHW"
nn.global_max_pool2d   layout "NCHW"
transpose (x)          axes: full permutation tuple
reshape (x)            newshape: the concrete output shape (no -1/0 codes)
concatenate (*xs)      axis: int >= 0
split (x)              indices: tuple of split points (ascending), axis: int >= 0
strided_slice (x)      begin, end, strides: full-rank tuples (end clamped to dim;
                       0 <= begin < end <= dim, strides >= 1)
nn.pad (x)             pad_width: ((lo, hi), ...) per axis, pad_value: float,
                       pad_mode "constant"
nn.bias_add (x, b)     axis: int >= 0
nn.batch_norm          axis: int >= 0, epsilon: float, center: bool, scale: bool;
 (x, g, b, mean, var)  output (out, mean, var) as in Relay
nn.softmax (x)         axis: int >= 0
nn.layer_norm (x,g,b)  axis: int >= 0, epsilon: float, center: bool, scale: bool
mean (x)               axis: sorted tuple of ints >= 0, keepdims: bool
=====================  ======================================================

Every op defines ``infer`` (raising ``ShapeError``, a ``ValueError``, on bad
inputs or attributes, never an IndexError/KeyError), ``flops``, ``bytes``
(inputs read + output written) and ``evaluate`` (numpy reference, Relay's
semantics, float32 out; matmul/conv/reductions accumulate in float64).
Attributes missing from a node fall back to the op's ``defaults``; a missing
attribute without a default is a ``ShapeError`` naming it.
``normalize_attrs`` turns Relay-style attributes (negative axes, ``None``,
short padding forms, reshape codes, ``indices_or_sections``, slice ``axes``
and ``slice_mode``...) into the canonical form above and drops the rest.
An ``out_dtype`` equal to the input's dtype becomes "".
Canonical axes are non-negative, so softmax/layer_norm (Relay default -1)
and mean have no ``axis`` default: ``normalize_attrs`` supplies it.

FLOPs: a multiply-add is 2; element-wise arithmetic is 1 per output element;
a transcendental function (exp, tanh, sigmoid, erf, sqrt, rsqrt, power)
counts ``TRANSCENDENTAL_FLOPS`` per element; data movement (transpose,
reshape, concatenate, split, strided_slice, pad) is 0 FLOPs.

``pattern`` mirrors TVM's fusion classes (``TOpPattern`` of TVM 0.16):
``elemwise``, ``broadcast``, ``injective``, ``reduce``, ``out_fusable``
(kOutEWiseFusable: conv2d, dense, matmul, batch_matmul, the pools,
batch_norm, softmax: element-wise consumers fuse into them), ``opaque``
(layer_norm), ``leaf`` or ``tuple``.

Adding an op:

1. declare its ``OpDef`` in its family module (``register(OpDef(...))``): arity, pattern, infer,
   evaluate, flops (and ``bytes`` if not inputs + output), defaults/required/normalize, and the
   cost fields that apply (``fusion`` when it differs from the pattern's, ``conv``,
   ``streamed_weights``, ``weight_slots``, ``kernels`` for an op TVM runs as several kernels,
   which the cost model then prices as their sum); leave ``vocab`` None (a new index changes the learned
   model's feature layout: bump ``FEATURE_VERSION`` in ``cost/learned.py`` and retrain);
2. register its Relay conversions in ``passes/relay/conversions.py`` (``register_conversion("relay",
   name, from_ir=..., to_ir=...)``; another TVM frontend registers its own under its name), and its PyTorch equivalent in ``passes/runtime/torch_ops.py``
   (the torch-cuda measuring backend; ``tests/test_op_table.py`` checks every op has one);
3. nothing else: the frontend, backend, cost model, measuring and learned features read the table.
"""
from __future__ import annotations

# importing a family module declares its ops (in this order in ``OPS``)
from . import graph_level, elementwise, products, pools, movement, normalization  # noqa: F401,I001
from .elementwise import TRANSCENDENTAL_FLOPS, broadcast_shape
from .opdef import (
    FUSION_CLASSES, OPS, PATTERNS, OpAttrs, OpDef, Conversion, ShapeError, bytes_moved, evaluate, flops,
    get, infer_type, normalize_attrs, pattern, register, register_conversion, register_torch, vocabulary)
from .products import conv2d_out_hw

__all__ = [
    "FUSION_CLASSES", "OPS", "PATTERNS", "TRANSCENDENTAL_FLOPS", "OpAttrs", "OpDef", "Conversion",
    "ShapeError", "broadcast_shape", "bytes_moved", "conv2d_out_hw", "evaluate", "flops", "get", "infer_type",
    "normalize_attrs", "pattern", "register", "register_conversion", "register_torch", "vocabulary",
]
