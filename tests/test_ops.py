"""The operator table: shape inference for every op, numpy semantics, FLOPs, attribute normalization.

The pooling, conv2d, batch_norm, layer_norm, softmax, slicing and matmul
semantics checked here were cross-checked against TVM 0.16 (hhb-tvm) builds;
these tests compare against independent naive loops and hand-computed values
so that they run without TVM.
"""
import math

import numpy as np
import pytest

from relay_eqsat import ops
from relay_eqsat.graph import Attrs, TensorType, TupleType
from relay_eqsat.ops import ShapeError


def t(*shape, dtype="float32"):
    return TensorType(shape, dtype)


def tup(*fields):
    return TupleType(fields)


UNARY = ["nn.relu", "tanh", "sigmoid", "erf", "exp", "sqrt", "rsqrt", "negative", "fast_exp", "fast_tanh", "fast_erf",
         "fast_sigmoid"]
BINARY = ["add", "subtract", "multiply", "divide", "maximum", "minimum", "power"]
POOLS = ["nn.max_pool2d", "nn.avg_pool2d"]
GLOBAL_POOLS = ["nn.global_avg_pool2d", "nn.global_max_pool2d"]
MATMUL_BAD_K = "reduction dims differ"

# op -> [(attrs, input types, expected output type)]
GOOD = {
    "var": [({"name": "x", "type": t(2, 3)}, [], t(2, 3))],
    "constant": [({"name": "w", "type": t(4, dtype="int32")}, [], t(4, dtype="int32"))],
    "opaque": [({"key": 0, "type": tup(t(1), t(2)), "name": "topk"}, [t(3)], tup(t(1), t(2))),
               ({"key": 1, "type": t(2, 3), "name": "zeros"}, [], t(2, 3))],
    "tuple": [({}, [t(2), t(3, 4)], tup(t(2), t(3, 4)))],
    "tuple_get_item": [({"index": 1}, [tup(t(2), t(3))], t(3))],
    **{op: [({}, [t(3, 1, 5), t(4, 1)], t(3, 4, 5)), ({}, [t(2, 3), t()], t(2, 3))] for op in BINARY},
    **{op: [({}, [t(2, 3)], t(2, 3))] for op in UNARY},
    "clip": [({"a_min": -1.0, "a_max": 1}, [t(5)], t(5))],
    "nn.leaky_relu": [({}, [t(5, 2)], t(5, 2)), ({"alpha": 0.2}, [t(1)], t(1))],
    "nn.conv2d": [
        ({}, [t(1, 3, 8, 8), t(16, 3, 3, 3)], t(1, 16, 6, 6)),
        ({"strides": (2, 1), "padding": (1, 0, 2, 1), "dilation": (1, 2), "groups": 2},
         [t(2, 4, 9, 8), t(6, 2, 3, 2)], t(2, 6, 5, 7)),
        ({"out_dtype": "float64"}, [t(1, 1, 3, 3), t(1, 1, 3, 3)], t(1, 1, 1, 1, dtype="float64")),
    ],
    "nn.dense": [({}, [t(8, 16), t(32, 16)], t(8, 32)), ({}, [t(2, 3, 4), t(5, 4)], t(2, 3, 5)),
                 ({}, [t(4), t(5, 4)], t(5))],
    "nn.matmul": [({}, [t(3, 4), t(4, 5)], t(3, 5)),
                  ({"transpose_a": True}, [t(2, 4, 3), t(4, 5)], t(2, 3, 5)),
                  ({"transpose_b": True}, [t(3, 4), t(5, 4)], t(3, 5))],
    "nn.batch_matmul": [({}, [t(2, 3, 4), t(2, 5, 4)], t(2, 3, 5)),
                        ({"transpose_a": True, "transpose_b": False}, [t(2, 4, 3), t(2, 4, 5)], t(2, 3, 5)),
                        ({}, [t(1, 3, 4), t(6, 5, 4)], t(6, 3, 5))],
    "batch_dense": [({}, [t(2, 3, 4), t(2, 5, 4)], t(2, 3, 5)), ({}, [t(1, 1, 4), t(1, 7, 4)], t(1, 1, 7)),
                    ({"out_dtype": "float64"}, [t(3, 2, 2), t(3, 2, 2)], t(3, 2, 2, dtype="float64"))],
    "nn.max_pool2d": [({"pool_size": (2, 2), "strides": (2, 2)}, [t(1, 3, 8, 8)], t(1, 3, 4, 4)),
                      ({"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1), "ceil_mode": True},
                       [t(1, 2, 4, 4)], t(1, 2, 3, 3)),
                      ({"pool_size": (1, 1), "strides": (3, 3), "ceil_mode": True}, [t(1, 1, 5, 5)], t(1, 1, 3, 3))],
    "nn.avg_pool2d": [({"pool_size": (3, 2), "strides": (1, 2), "dilation": (2, 2), "padding": (2, 0, 1, 1)},
                       [t(2, 3, 7, 8)], t(2, 3, 6, 4)),
                      ({"pool_size": (2, 2), "strides": (2, 2), "count_include_pad": True, "ceil_mode": True},
                       [t(1, 1, 5, 5)], t(1, 1, 3, 3))],
    **{op: [({}, [t(2, 3, 7, 5)], t(2, 3, 1, 1))] for op in GLOBAL_POOLS},
    "transpose": [({"axes": (2, 0, 1)}, [t(2, 3, 4)], t(4, 2, 3)), ({"axes": ()}, [t()], t())],
    "reshape": [({"newshape": (6, 4)}, [t(2, 3, 4)], t(6, 4)), ({"newshape": ()}, [t(1, 1)], t())],
    "concatenate": [({"axis": 1}, [t(2, 3), t(2, 5), t(2, 1)], t(2, 9)), ({}, [t(4, 2)], t(4, 2))],
    "split": [({"indices": (1, 4), "axis": 1}, [t(2, 6)], tup(t(2, 1), t(2, 3), t(2, 2))),
              ({"indices": ()}, [t(3)], tup(t(3)))],
    "strided_slice": [({"begin": (0, 1, 1), "end": (2, 3, 7), "strides": (1, 2, 3)}, [t(2, 3, 7)], t(2, 1, 2))],
    "nn.pad": [({"pad_width": ((0, 0), (1, 2))}, [t(2, 3)], t(2, 6)),
               ({"pad_width": ((1, 1), (2, 2)), "pad_mode": "reflect"}, [t(2, 3)], t(4, 7))],
    "nn.bias_add": [({}, [t(2, 3, 4), t(3)], t(2, 3, 4)), ({"axis": 2}, [t(2, 3, 4), t(4)], t(2, 3, 4))],
    "nn.batch_norm": [({}, [t(2, 3, 4), t(3), t(3), t(3), t(3)], tup(t(2, 3, 4), t(3), t(3)))],
    "nn.softmax": [({"axis": 1}, [t(2, 5)], t(2, 5))],
    "nn.fast_softmax": [({"axis": 1}, [t(2, 5)], t(2, 5))],
    "nn.layer_norm": [({"axis": 2}, [t(2, 3, 4), t(4), t(4)], t(2, 3, 4))],
    "mean": [({"axis": (0, 2)}, [t(2, 3, 4)], t(3)), ({"axis": (1,), "keepdims": True}, [t(2, 3, 4)], t(2, 1, 4)),
             ({"axis": (0, 1)}, [t(2, 3)], t())],
}

# op -> [(attrs, input types, regex the ShapeError message must match)]
BAD = {
    "var": [({"name": "x"}, [], "missing required attribute 'type'")],
    "constant": [({"name": "w", "type": "float32"}, [], "'type' must be")],
    "opaque": [({"key": 0, "name": "f"}, [t(2)], "'type'")],
    "tuple": [({}, [], "at least one input"), ({}, [tup(t(1))], "must be a tensor")],
    "tuple_get_item": [({"index": 2}, [tup(t(2), t(3))], "out of range"), ({"index": 0}, [t(2)], "needs a tuple"),
                       ({}, [tup(t(2))], "missing required attribute 'index'")],
    **{op: [({}, [t(3, 2), t(4)], "do not broadcast"), ({}, [t(3), t(3, dtype="int32")], "different dtypes"),
            ({}, [t(3)], "takes 2 inputs")] for op in BINARY},
    **{op: [({}, [t(2), t(2)], "takes 1 inputs"), ({}, [tup(t(2))], "takes tensors")] for op in UNARY},
    "clip": [({"a_min": 0.0}, [t(2)], "missing required attribute 'a_max'"),
             ({"a_min": 0.0, "a_max": "x"}, [t(2)], "'a_max' must be a number")],
    "nn.leaky_relu": [({"alpha": None}, [t(2)], "'alpha' must be a number")],
    "nn.conv2d": [({}, [t(3, 8, 8), t(16, 3, 3, 3)], "4-d"),
                  ({"groups": 2}, [t(1, 3, 8, 8), t(4, 3, 3, 3)], "groups=2 disagree"),
                  ({}, [t(1, 3, 2, 2), t(4, 3, 3, 3)], "empty output"),
                  ({"strides": (0, 1)}, [t(1, 3, 8, 8), t(4, 3, 3, 3)], "'strides' must be a tuple of 2 ints >= 1"),
                  ({"padding": (1, 1)}, [t(1, 3, 8, 8), t(4, 3, 3, 3)], "'padding' must be a tuple of 4"),
                  ({"data_layout": "NHWC"}, [t(1, 8, 8, 3), t(4, 3, 3, 3)], "data_layout"),
                  ({"strides": "ab"}, [t(1, 3, 8, 8), t(4, 3, 3, 3)], "strides")],
    "nn.dense": [({}, [t(8, 16), t(32, 15)], MATMUL_BAD_K), ({}, [t(8, 16), t(2, 32, 16)], "2-d"),
                 ({}, [t(8, 16), t(32, 16, dtype="float16")], "different dtypes")],
    "nn.matmul": [({}, [t(3, 4), t(5, 4)], MATMUL_BAD_K), ({"transpose_a": True}, [t(4), t(4, 5)], "at least 2-d"),
                  ({"transpose_a": 3}, [t(3, 4), t(4, 5)], "'transpose_a' must be a bool")],
    "nn.batch_matmul": [({}, [t(2, 3, 4), t(2, 4, 5)], MATMUL_BAD_K), ({}, [t(2, 3, 4), t(3, 5, 4)], "broadcast"),
                        ({}, [t(3, 4), t(5, 4)], "3-d")],
    "batch_dense": [({}, [t(2, 3, 4), t(2, 5, 3)], MATMUL_BAD_K), ({}, [t(1, 3, 4), t(2, 5, 4)], "batch sizes differ"),
                    ({}, [t(3, 4), t(5, 4)], "3-d"), ({}, [t(0, 3, 4), t(0, 5, 4)], "empty batch"),
                    ({}, [t(2, 3, 4), t(2, 5, 4, dtype="float16")], "different dtypes")],
    "nn.max_pool2d": [({"pool_size": (5, 5)}, [t(1, 1, 4, 4)], "does not fit"),
                      ({"pool_size": (2,)}, [t(1, 1, 4, 4)], "'pool_size' must be a tuple of 2"),
                      ({"layout": "NHWC"}, [t(1, 4, 4, 1)], "layout"), ({}, [t(4, 4)], "4-d")],
    "nn.avg_pool2d": [({"count_include_pad": "yes"}, [t(1, 1, 4, 4)], "'count_include_pad' must be a bool"),
                      ({"padding": (-1, 0, 0, 0)}, [t(1, 1, 4, 4)], "'padding'")],
    **{op: [({}, [t(2, 3, 4)], "4-d"), ({"layout": "NHWC"}, [t(1, 2, 2, 3)], "layout")] for op in GLOBAL_POOLS},
    "transpose": [({"axes": (0, 0, 1)}, [t(2, 3, 4)], "not a permutation"), ({"axes": (1, 0)}, [t(2, 3, 4)],
                                                                            "not a permutation"),
                  ({}, [t(2)], "missing required attribute 'axes'")],
    "reshape": [({"newshape": (5, 5)}, [t(2, 3, 4)], "cannot reshape"), ({"newshape": (-1, 4)}, [t(2, 3, 4)], ">= 1")],
    "concatenate": [({"axis": 1}, [t(2, 3), t(3, 3)], "outside axis 1"), ({"axis": 2}, [t(2, 3), t(2, 3)], "axis"),
                    ({"axis": -1}, [t(2, 3), t(2, 3)], "axis"), ({}, [t(2, 3), t(2)], "does not match"),
                    ({}, [], "at least one input")],
    "split": [({"indices": (4, 1), "axis": 1}, [t(2, 6)], "ascend"),
              ({"indices": (6,), "axis": 1}, [t(2, 6)], "ascend"),
              ({"indices": (0, 3)}, [t(6)], "ascend"), ({"indices": (1,), "axis": 1}, [t(6)], "axis"),
              ({"axis": 0}, [t(6)], "missing required attribute 'indices'")],
    "strided_slice": [({"begin": (0, 0), "end": (2, 3), "strides": (1, 1)}, [t(2, 3, 4)], "tuple of 3 ints"),
                      ({"begin": (1,), "end": (1,), "strides": (1,)}, [t(4)], "begin < end"),
                      ({"begin": (0,), "end": (5,), "strides": (1,)}, [t(4)], "begin < end"),
                      ({"begin": (0,), "end": (4,), "strides": (0,)}, [t(4)], "'strides'"),
                      ({"begin": (0,), "end": (4,)}, [t(4)], "missing required attribute 'strides'")],
    "nn.pad": [({"pad_width": ((0, 0),)}, [t(2, 3)], "pad_width must be 2"),
               ({"pad_width": ((0, 0), (-1, 0))}, [t(2, 3)], "pad_width"),
               ({"pad_width": ((0, 0), (3, 0)), "pad_mode": "reflect"}, [t(2, 3)], "reflect"),
               ({"pad_width": ((0, 0), (1, 0)), "pad_mode": "wrap"}, [t(2, 3)], "pad_mode")],
    "nn.bias_add": [({}, [t(2, 3, 4), t(4)], r"shape \[3\]"), ({"axis": 3}, [t(2, 3, 4), t(4)], "axis"),
                    ({}, [t(2, 3), t(3, 1)], r"shape \[3\]")],
    "nn.batch_norm": [({}, [t(2, 3, 4), t(3), t(3), t(4), t(3)], r"shape \[3\]"),
                      ({"epsilon": "small"}, [t(2, 3), t(3), t(3), t(3), t(3)], "epsilon"),
                      ({}, [t(2, 3), t(3), t(3), t(3)], "takes 5 inputs")],
    "nn.softmax": [({"axis": 2}, [t(2, 5)], "axis"), ({}, [t(2, 5)], "missing required attribute 'axis'")],
    "nn.fast_softmax": [({"axis": 2}, [t(2, 5)], "axis"), ({}, [t(2, 5)], "missing required attribute 'axis'")],
    "nn.layer_norm": [({"axis": 1}, [t(2, 3, 4), t(4), t(4)], r"shape \[3\]"),
                      ({"axis": 2, "center": 2}, [t(2, 3, 4), t(4), t(4)], "'center' must be a bool")],
    "mean": [({"axis": (2, 0)}, [t(2, 3, 4)], "sorted"), ({"axis": (3,)}, [t(2, 3, 4)], "axes of"),
             ({"axis": ()}, [t(2, 3)], "non-empty"), ({"axis": (1, 1)}, [t(2, 3)], "distinct"),
             ({"axis": (-1,)}, [t(2, 3)], "'axis'")],
}

PATTERNS = {
    **{op: "broadcast" for op in BINARY + ["nn.bias_add"]},
    **{op: "elemwise" for op in UNARY + ["clip", "nn.leaky_relu"]},
    **{op: "out_fusable" for op in ["nn.conv2d", "nn.dense", "nn.matmul", "nn.batch_matmul", "batch_dense", "nn.batch_norm",
                                    "nn.softmax", "nn.fast_softmax"] + POOLS + GLOBAL_POOLS},
    **{op: "injective" for op in ["transpose", "reshape", "concatenate", "split", "strided_slice", "nn.pad",
                                  "tuple_get_item"]},
    "mean": "reduce", "nn.layer_norm": "opaque", "opaque": "opaque", "var": "leaf", "constant": "leaf",
    "tuple": "tuple",
}


def _cases(table):
    return [pytest.param(op, *case, id=f"{op}-{i}") for op, cases in table.items() for i, case in enumerate(cases)]


def test_every_registered_op_has_good_and_bad_shape_cases():
    assert set(GOOD) == set(ops.OPS)
    assert set(BAD) == set(ops.OPS)
    assert set(PATTERNS) == set(ops.OPS)


@pytest.mark.parametrize("op,attrs,ins,expected", _cases(GOOD))
def test_infer_type_good(op, attrs, ins, expected):
    assert ops.infer_type(op, attrs, ins) == expected
    assert ops.infer_type(op, Attrs(attrs), ins) == expected


@pytest.mark.parametrize("op,attrs,ins,message", _cases(BAD))
def test_infer_type_bad(op, attrs, ins, message):
    with pytest.raises(ShapeError, match=message):
        ops.infer_type(op, attrs, ins)


def test_unknown_op_is_a_shape_error():
    with pytest.raises(ShapeError, match="unknown operator"):
        ops.infer_type("nn.conv3d", {}, [t(1)])
    assert issubclass(ShapeError, ValueError)


@pytest.mark.parametrize("op", sorted(PATTERNS))
def test_pattern_matches_tvm_fusion_class(op):
    assert ops.pattern(op) == PATTERNS[op]


def _random_inputs(types, rng):
    def one(ty):
        if isinstance(ty, TupleType):
            return tuple(one(f) for f in ty.fields)
        return rng.uniform(0.5, 2.0, size=ty.shape).astype(ty.dtype)  # positive: sqrt, rsqrt, power, variances
    return [one(ty) for ty in types]


def _check_value_type(value, ty):
    if isinstance(ty, TupleType):
        assert isinstance(value, tuple) and len(value) == len(ty.fields)
        for v, f in zip(value, ty.fields):
            _check_value_type(v, f)
    else:
        assert value.shape == ty.shape and value.dtype == np.dtype(ty.dtype)


@pytest.mark.parametrize("op,attrs,ins,expected",
                         [p for p in _cases(GOOD) if p.values[0] not in ("var", "constant", "opaque")])
def test_evaluate_agrees_with_inferred_type(op, attrs, ins, expected):
    value = ops.evaluate(op, attrs, _random_inputs(ins, np.random.default_rng(0)))
    _check_value_type(value, expected)
    if isinstance(expected, TensorType) and np.issubdtype(np.dtype(expected.dtype), np.floating):
        assert np.all(np.isfinite(value))


# -- semantics against independent computations ---------------------------------

def naive_conv2d(x, w, strides, padding, dilation, groups):
    n, c, h, wd = x.shape
    o, ci, kh, kw = w.shape
    pt, pl, pb, pr = padding
    oh = (h + pt + pb - dilation[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (wd + pl + pr - dilation[1] * (kw - 1) - 1) // strides[1] + 1
    out = np.zeros((n, o, oh, ow))
    per_group = o // groups
    for b in range(n):
        for oc in range(o):
            g = oc // per_group
            for i in range(oh):
                for j in range(ow):
                    acc = 0.0
                    for ic in range(ci):
                        for a in range(kh):
                            for e in range(kw):
                                r = i * strides[0] + a * dilation[0] - pt
                                s = j * strides[1] + e * dilation[1] - pl
                                if 0 <= r < h and 0 <= s < wd:
                                    acc += x[b, g * ci + ic, r, s] * w[oc, ic, a, e]
                    out[b, oc, i, j] = acc
    return out


@pytest.mark.parametrize("strides,padding,dilation,groups", [
    ((1, 1), (0, 0, 0, 0), (1, 1), 1),
    ((2, 1), (1, 0, 2, 1), (1, 2), 2),
    ((1, 2), (2, 1, 0, 3), (2, 1), 4),
])
def test_conv2d_matches_naive_loop(strides, padding, dilation, groups):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 7, 6)).astype("float32")
    w = rng.standard_normal((8, 4 // groups, 3, 2)).astype("float32")
    attrs = dict(strides=strides, padding=padding, dilation=dilation, groups=groups)
    got = ops.evaluate("nn.conv2d", attrs, [x, w])
    assert got.shape == ops.infer_type("nn.conv2d", attrs, [t(*x.shape), t(*w.shape)]).shape
    np.testing.assert_allclose(got, naive_conv2d(x, w, strides, padding, dilation, groups), rtol=1e-5, atol=1e-5)


def naive_pool(x, kind, k, s, d, p, ceil_mode, include_pad):
    """TVM's pooling, one window at a time: the extra ceil_mode padding never counts."""
    n, c, h, w = x.shape
    extra = (s[0] - 1, s[1] - 1) if ceil_mode else (0, 0)
    oh = (h + p[0] + p[2] + extra[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    ow = (w + p[1] + p[3] + extra[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    out = np.empty((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            rows = [i * s[0] - p[0] + a * d[0] for a in range(k[0])]
            cols = [j * s[1] - p[1] + b * d[1] for b in range(k[1])]
            vals = [x[:, :, r, q] for r in rows for q in cols if 0 <= r < h and 0 <= q < w]
            if kind == "max":
                out[:, :, i, j] = np.max(vals, axis=0) if vals else np.finfo(np.float32).min
                continue
            total = np.sum(vals, axis=0) if vals else 0.0
            if include_pad:
                count = sum(1 for r in rows for q in cols if -p[0] <= r < h + p[2] and -p[1] <= q < w + p[3])
            else:
                count = max(len(vals), 1)
            out[:, :, i, j] = total / count
    return out


POOL_GEOMETRIES = [  # pool_size, strides, dilation, padding
    ((3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    ((2, 3), (2, 3), (1, 1), (0, 1, 1, 0)),
    ((3, 2), (1, 2), (2, 2), (2, 0, 1, 1)),
    ((3, 3), (2, 2), (2, 1), (1, 2, 0, 1)),
]


@pytest.mark.parametrize("geometry", POOL_GEOMETRIES)
@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("kind,include_pad", [("max", False), ("avg", False), ("avg", True)])
def test_pool_matches_naive_loop(geometry, ceil_mode, kind, include_pad):
    k, s, d, p = geometry
    x = np.random.default_rng(2).standard_normal((2, 3, 7, 8)).astype("float32")
    attrs = dict(pool_size=k, strides=s, dilation=d, padding=p, ceil_mode=ceil_mode)
    if kind == "avg":
        attrs["count_include_pad"] = include_pad
    op = f"nn.{kind}_pool2d"
    got = ops.evaluate(op, attrs, [x])
    assert got.shape == ops.infer_type(op, attrs, [t(*x.shape)]).shape
    np.testing.assert_allclose(got, naive_pool(x, kind, k, s, d, p, ceil_mode, include_pad), rtol=1e-5, atol=1e-6)


def test_pool_ceil_mode_and_padding_by_hand():
    x = np.arange(16, dtype="float32").reshape(1, 1, 4, 4)
    geo = dict(pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), ceil_mode=True)
    # 3 outputs per axis; the last window covers row 3, bottom padding row 4 and ceil row 5
    excl = ops.evaluate("nn.avg_pool2d", {**geo, "count_include_pad": False}, [x])[0, 0]
    assert excl[0, 0] == pytest.approx((0 + 1 + 4 + 5) / 4)
    assert excl[0, 2] == pytest.approx((3 + 7) / 2)
    assert excl[2, 2] == pytest.approx(15.0)
    incl = ops.evaluate("nn.avg_pool2d", {**geo, "count_include_pad": True}, [x])[0, 0]
    assert incl[0, 0] == pytest.approx(10 / 9)
    assert incl[2, 2] == pytest.approx(15 / 4)  # the explicit padding counts, the ceil row does not
    assert incl[1, 1] == pytest.approx(x[0, 0, 1:4, 1:4].mean())
    mx = ops.evaluate("nn.max_pool2d", geo, [x])[0, 0]
    np.testing.assert_array_equal(mx, [[5, 7, 7], [13, 15, 15], [13, 15, 15]])
    floor = ops.evaluate("nn.max_pool2d", {**geo, "ceil_mode": False}, [x])
    assert floor.shape == (1, 1, 2, 2)


def test_global_pools():
    x = np.random.default_rng(3).standard_normal((2, 3, 4, 5)).astype("float32")
    np.testing.assert_allclose(ops.evaluate("nn.global_avg_pool2d", {}, [x])[:, :, 0, 0], x.mean(axis=(2, 3)),
                               rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(ops.evaluate("nn.global_max_pool2d", {}, [x])[:, :, 0, 0], x.max(axis=(2, 3)))


@pytest.mark.parametrize("center,scale", [(True, True), (False, True), (True, False), (False, False)])
def test_batch_norm_inference(center, scale):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 4)).astype("float32")
    gamma, beta, mean = (rng.standard_normal(3).astype("float32") for _ in range(3))
    var = rng.uniform(0.5, 2, 3).astype("float32")
    attrs = dict(axis=1, epsilon=1e-3, center=center, scale=scale)
    out, m, v = ops.evaluate("nn.batch_norm", attrs, [x, gamma, beta, mean, var])
    np.testing.assert_array_equal(m, mean)
    np.testing.assert_array_equal(v, var)
    for c in range(3):
        want = (x[:, c].astype(np.float64) - mean[c]) / math.sqrt(var[c] + 1e-3)
        want = want * (gamma[c] if scale else 1.0) + (beta[c] if center else 0.0)
        np.testing.assert_allclose(out[:, c], want, rtol=1e-5, atol=1e-6)


def test_layer_norm_over_one_axis():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 4)).astype("float32")
    gamma, beta = rng.standard_normal(3).astype("float32"), rng.standard_normal(3).astype("float32")
    out = ops.evaluate("nn.layer_norm", dict(axis=1, epsilon=1e-5), [x, gamma, beta])
    for b in range(2):
        for k in range(4):
            col = x[b, :, k].astype(np.float64)
            want = (col - col.mean()) / math.sqrt(col.var() + 1e-5) * gamma + beta
            np.testing.assert_allclose(out[b, :, k], want, rtol=1e-5, atol=1e-5)
    plain = ops.evaluate("nn.layer_norm", dict(axis=1, center=False, scale=False), [x, gamma, beta])
    np.testing.assert_allclose(plain.mean(axis=1), 0, atol=1e-6)


def test_softmax_is_exact_and_stable():
    x = np.array([[1.0, 2.0, 3.0], [1000.0, 1000.0, -1000.0]], dtype="float32")
    out = ops.evaluate("nn.softmax", {"axis": 1}, [x])
    e = np.exp([1.0, 2.0, 3.0])
    np.testing.assert_allclose(out[0], e / e.sum(), rtol=1e-6)
    np.testing.assert_allclose(out[1], [0.5, 0.5, 0.0], atol=1e-7)
    cols = ops.evaluate("nn.softmax", {"axis": 0}, [x])
    np.testing.assert_allclose(cols.sum(axis=0), 1.0, rtol=1e-6)


def test_split_and_strided_slice_by_hand():
    x = np.arange(12, dtype="float32").reshape(2, 6)
    a, b, c = ops.evaluate("split", {"indices": (1, 4), "axis": 1}, [x])
    np.testing.assert_array_equal(a, [[0], [6]])
    np.testing.assert_array_equal(b, [[1, 2, 3], [7, 8, 9]])
    np.testing.assert_array_equal(c, [[4, 5], [10, 11]])
    (whole,) = ops.evaluate("split", {"indices": ()}, [x])
    np.testing.assert_array_equal(whole, x)
    s = ops.evaluate("strided_slice", {"begin": (1, 1), "end": (2, 6), "strides": (1, 2)}, [x])
    np.testing.assert_array_equal(s, [[7, 9, 11]])
    s = ops.evaluate("strided_slice", {"begin": (0, 0), "end": (2, 5), "strides": (1, 3)}, [x])
    np.testing.assert_array_equal(s, [[0, 3], [6, 9]])
    assert ops.infer_type("strided_slice", {"begin": (0, 0), "end": (2, 5), "strides": (1, 3)}, [t(2, 6)]) == t(2, 2)


@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False), (True, True)])
def test_batch_matmul_transposes_and_broadcast(ta, tb):
    rng = np.random.default_rng(6)
    a = rng.standard_normal((1, 4, 3) if ta else (1, 3, 4)).astype("float32")
    b = rng.standard_normal((2, 5, 4) if tb else (2, 4, 5)).astype("float32")
    out = ops.evaluate("nn.batch_matmul", {"transpose_a": ta, "transpose_b": tb}, [a, b])
    assert out.shape == (2, 3, 5)
    for batch in range(2):
        for i in range(3):
            for j in range(5):
                want = sum((a[0, k, i] if ta else a[0, i, k]) * (b[batch, j, k] if tb else b[batch, k, j])
                           for k in range(4))
                assert out[batch, i, j] == pytest.approx(want, rel=1e-5, abs=1e-5)


def test_batch_dense_is_batch_matmul_nt():
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((3, 4, 5)).astype("float32"), rng.standard_normal((3, 6, 5)).astype("float32")
    np.testing.assert_array_equal(ops.evaluate("batch_dense", {}, [a, b]), ops.evaluate("nn.batch_matmul", {}, [a, b]))
    assert _flops("batch_dense", {}, [t(3, 4, 5), t(3, 6, 5)]) == _flops("nn.batch_matmul", {}, [t(3, 4, 5), t(3, 6, 5)])


def test_dense_and_matmul_by_hand():
    x = np.array([[1, 2], [3, 4]], dtype="float32")
    w = np.array([[1, 0], [0, 1], [1, 1]], dtype="float32")
    np.testing.assert_array_equal(ops.evaluate("nn.dense", {}, [x, w]), [[1, 2, 3], [3, 4, 7]])
    np.testing.assert_array_equal(ops.evaluate("nn.matmul", {"transpose_b": True}, [x, w]), [[1, 2, 3], [3, 4, 7]])
    np.testing.assert_array_equal(ops.evaluate("nn.matmul", {"transpose_a": True}, [x, x]), [[10, 14], [14, 20]])


def test_elementwise_semantics():
    x = np.array([-3.0, -0.5, 0.0, 0.5, 100.0], dtype="float32")
    np.testing.assert_array_equal(ops.evaluate("nn.relu", {}, [x]), [0, 0, 0, 0.5, 100])
    np.testing.assert_allclose(ops.evaluate("nn.leaky_relu", {}, [x]), [-0.03, -0.005, 0, 0.5, 100], rtol=1e-6)
    np.testing.assert_array_equal(ops.evaluate("clip", {"a_min": -1, "a_max": 0.25}, [x]), [-1, -0.5, 0, 0.25, 0.25])
    np.testing.assert_array_equal(ops.evaluate("negative", {}, [x]), -x)
    np.testing.assert_allclose(ops.evaluate("erf", {}, [x]), [math.erf(v) for v in x], rtol=1e-6)
    sig = ops.evaluate("sigmoid", {}, [np.array([-1000.0, 0.0, 1000.0, 1.0], dtype="float32")])
    np.testing.assert_allclose(sig, [0.0, 0.5, 1.0, 1 / (1 + math.exp(-1))], rtol=1e-6)
    np.testing.assert_allclose(ops.evaluate("rsqrt", {}, [np.array([4.0, 0.25], dtype="float32")]), [0.5, 2.0])
    np.testing.assert_allclose(ops.evaluate("power", {}, [np.array([2.0, 9.0], "float32"), np.array(0.5, "float32")]),
                               [math.sqrt(2), 3.0], rtol=1e-6)
    np.testing.assert_array_equal(ops.evaluate("maximum", {}, [x, np.float32(0.25)]), [0.25, 0.25, 0.25, 0.5, 100])
    assert ops.evaluate("tanh", {}, [x]).dtype == np.float32


def test_data_movement_semantics():
    x = np.arange(24, dtype="float32").reshape(2, 3, 4)
    np.testing.assert_array_equal(ops.evaluate("transpose", {"axes": (2, 0, 1)}, [x])[3, 1, 2], x[1, 2, 3])
    np.testing.assert_array_equal(ops.evaluate("reshape", {"newshape": (4, 6)}, [x]), x.ravel().reshape(4, 6))
    cat = ops.evaluate("concatenate", {"axis": 2}, [x, x[:, :, :1]])
    assert cat.shape == (2, 3, 5) and cat[1, 2, 4] == x[1, 2, 0]
    p = ops.evaluate("nn.pad", {"pad_width": ((0, 0), (1, 0), (0, 2)), "pad_value": -1.0}, [x])
    assert p.shape == (2, 4, 6) and p[0, 0, 0] == -1 and p[1, 1, 3] == x[1, 0, 3] and p[0, 1, 5] == -1
    row = np.array([[1.0, 2.0, 3.0]], dtype="float32")
    np.testing.assert_array_equal(ops.evaluate("nn.pad", {"pad_width": ((0, 0), (2, 1)), "pad_mode": "reflect"}, [row]),
                                  [[3, 2, 1, 2, 3, 2]])
    np.testing.assert_array_equal(ops.evaluate("nn.pad", {"pad_width": ((0, 0), (2, 1)), "pad_mode": "edge"}, [row]),
                                  [[1, 1, 1, 2, 3, 3]])
    b = np.array([10.0, 20.0, 30.0], dtype="float32")
    np.testing.assert_array_equal(ops.evaluate("nn.bias_add", {}, [x, b]), x + b[None, :, None])
    np.testing.assert_allclose(ops.evaluate("mean", {"axis": (0, 2)}, [x]), x.mean(axis=(0, 2)))
    assert ops.evaluate("mean", {"axis": (1,), "keepdims": True}, [x]).shape == (2, 1, 4)


def test_tuple_ops_evaluate():
    a, b = np.zeros(2, "float32"), np.ones(3, "float32")
    assert ops.evaluate("tuple", {}, [a, b])[1] is b
    assert ops.evaluate("tuple_get_item", {"index": 0}, [(a, b)]) is a
    with pytest.raises(ValueError, match="leaves"):
        ops.evaluate("var", {"name": "x", "type": t(2)}, [])


# -- FLOPs and bytes ------------------------------------------------------------------

def _flops(op, attrs, ins):
    return ops.flops(op, attrs, ins, ops.infer_type(op, attrs, ins))


def test_flops():
    m, n, k = 8, 32, 16
    assert _flops("nn.dense", {}, [t(m, k), t(n, k)]) == 2 * m * n * k
    assert _flops("nn.dense", {}, [t(2, m, k), t(n, k)]) == 2 * 2 * m * n * k
    assert _flops("nn.matmul", {"transpose_a": True}, [t(k, m), t(k, n)]) == 2 * m * n * k
    assert _flops("nn.batch_matmul", {}, [t(4, m, k), t(4, n, k)]) == 4 * 2 * m * n * k
    assert _flops("nn.conv2d", {"groups": 2}, [t(1, 4, 8, 8), t(6, 2, 3, 3)]) == 2 * (6 * 6 * 6) * (2 * 3 * 3)
    assert _flops("add", {}, [t(3, 1), t(1, 4)]) == 12
    assert _flops("nn.relu", {}, [t(5, 5)]) == 25
    assert _flops("exp", {}, [t(5, 5)]) == 25 * ops.TRANSCENDENTAL_FLOPS
    assert _flops("nn.max_pool2d", {"pool_size": (2, 2), "strides": (2, 2)}, [t(1, 3, 8, 8)]) == 3 * 16 * 4
    assert _flops("mean", {"axis": (1,)}, [t(4, 5)]) == 20
    for op, attrs, ins in [("transpose", {"axes": (1, 0)}, [t(4, 5)]), ("reshape", {"newshape": (20,)}, [t(4, 5)]),
                           ("split", {"indices": (2,)}, [t(4, 5)]), ("concatenate", {}, [t(4, 5), t(1, 5)])]:
        assert _flops(op, attrs, ins) == 0
    for op, cases in GOOD.items():
        for attrs, ins, out in cases:
            assert ops.flops(op, attrs, ins, out) >= 0


def test_bytes_moved():
    assert ops.bytes_moved("add", {}, [t(4), t(4)], t(4)) == 3 * 16
    assert ops.bytes_moved("split", {"indices": (1,)}, [t(4)], tup(t(1), t(3))) == 32
    assert ops.bytes_moved("tuple_get_item", {"index": 0}, [tup(t(4))], t(4)) == 0
    assert ops.bytes_moved("var", {}, [], t(4)) == 0


# -- attribute defaults and normalization ---------------------------------------------

def test_defaults_fill_missing_attributes():
    assert ops.OPS["nn.batch_matmul"].defaults["transpose_b"] is True
    assert ops.OPS["nn.leaky_relu"].defaults["alpha"] == 0.01
    x = np.array([-1.0], dtype="float32")
    assert ops.evaluate("nn.leaky_relu", {}, [x])[0] == pytest.approx(-0.01)


NORMALIZE = [  # op, Relay-style attrs, input types, canonical attrs
    ("reshape", {"newshape": (0, -1, 3)}, [t(2, 3, 4, 6)], {"newshape": (2, 24, 3)}),
    ("reshape", {"newshape": (-3, -2)}, [t(2, 3, 4, 6)], {"newshape": (6, 4, 6)}),
    ("reshape", {"newshape": (-4, 1, -1, 0, 0, 0)}, [t(2, 3, 4, 6)], {"newshape": (1, 2, 3, 4, 6)}),
    ("reshape", {"newshape": (0, 0, -4, 2, 2, 6), "allowzero": 0}, [t(2, 3, 4, 6)], {"newshape": (2, 3, 2, 2, 6)}),
    ("split", {"indices_or_sections": 3, "axis": -1}, [t(2, 6)], {"indices": (2, 4), "axis": 1}),
    ("split", {"indices_or_sections": (1, -2)}, [t(6)], {"indices": (1, 4), "axis": 0}),
    ("strided_slice", {"begin": [1], "end": [2], "strides": [1], "slice_mode": "end", "axes": None},
     [t(2, 3, 4)], {"begin": (1, 0, 0), "end": (2, 3, 4), "strides": (1, 1, 1)}),
    ("strided_slice", {"begin": [0, -2], "end": [2, 100]}, [t(2, 3)],
     {"begin": (0, 1), "end": (2, 3), "strides": (1, 1)}),
    ("strided_slice", {"begin": [1], "end": [-1], "strides": [2], "axes": [2]}, [t(2, 3, 6)],
     {"begin": (0, 0, 1), "end": (2, 3, 5), "strides": (1, 1, 2)}),
    ("strided_slice", {"begin": [0, 1], "end": [1, -1], "strides": [3], "slice_mode": "size"}, [t(2, 3)],
     {"begin": (0, 1), "end": (1, 3), "strides": (1, 1)}),
    ("mean", {"axis": None, "keepdims": 0, "exclude": 0}, [t(2, 3)], {"axis": (0, 1), "keepdims": False}),
    ("mean", {"axis": [-1, 1], "keepdims": 1}, [t(2, 3, 4, 6)], {"axis": (1, 3), "keepdims": True}),
    ("mean", {"axis": [1], "exclude": True}, [t(2, 3, 4)], {"axis": (0, 2), "keepdims": False}),
    ("mean", {"axis": -1}, [t(2, 3)], {"axis": (1,), "keepdims": False}),
    ("transpose", {"axes": None}, [t(2, 3, 4)], {"axes": (2, 1, 0)}),
    ("transpose", {"axes": [0, -1, 1]}, [t(2, 3, 4)], {"axes": (0, 2, 1)}),
    ("nn.softmax", {"axis": -1}, [t(2, 3)], {"axis": 1}),
    ("nn.softmax", {}, [t(2, 3, 5)], {"axis": 2}),
    ("nn.layer_norm", {"axis": -1, "epsilon": 1e-5, "center": 1, "scale": 0}, [t(2, 4), t(4), t(4)],
     {"axis": 1, "epsilon": 1e-5, "center": True, "scale": False}),
    ("nn.batch_norm", {"axis": -1}, [t(2, 4), t(4), t(4), t(4), t(4)],
     {"axis": 1, "epsilon": 1e-5, "center": True, "scale": True}),
    ("concatenate", {"axis": -2}, [t(2, 3), t(2, 3)], {"axis": 0}),
    ("nn.bias_add", {}, [t(2, 3), t(3)], {"axis": 1}),
    ("nn.max_pool2d",
     {"pool_size": 2, "strides": [2], "padding": 1, "layout": "NCHW", "out_layout": "", "ceil_mode": 0},
     [t(1, 1, 4, 4)], {"pool_size": (2, 2), "strides": (2, 2), "padding": (1, 1, 1, 1), "dilation": (1, 1),
                       "layout": "NCHW", "ceil_mode": False}),
    ("nn.avg_pool2d", {"pool_size": (3, 3), "padding": (1, 2)}, [t(1, 1, 4, 4)],
     {"pool_size": (3, 3), "strides": (1, 1), "padding": (1, 2, 1, 2), "dilation": (1, 1), "layout": "NCHW",
      "ceil_mode": False, "count_include_pad": False}),
    ("nn.conv2d", {"padding": (1, 1), "channels": 6, "kernel_size": (3, 3), "out_layout": "NCHW", "groups": 1},
     [t(1, 3, 8, 8), t(6, 3, 3, 3)],
     {"strides": (1, 1), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": 1, "data_layout": "NCHW",
      "kernel_layout": "OIHW", "out_dtype": ""}),
    ("nn.dense", {"units": 7, "out_dtype": ""}, [t(5, 6), t(7, 6)], {"out_dtype": ""}),
    ("nn.batch_matmul", {"transpose_a": 0, "transpose_b": 1, "out_dtype": ""}, [t(2, 3, 4), t(2, 5, 4)],
     {"transpose_a": False, "transpose_b": True, "out_dtype": ""}),
    ("nn.leaky_relu", {}, [t(3)], {"alpha": 0.01}),
    ("clip", {"a_min": 0, "a_max": 6}, [t(3)], {"a_min": 0.0, "a_max": 6.0}),
    ("nn.pad", {"pad_width": [[0, 0], [1, 1]], "pad_mode": "constant", "pad_value": 0}, [t(2, 3)],
     {"pad_width": ((0, 0), (1, 1)), "pad_mode": "constant", "pad_value": 0.0}),
    ("tuple_get_item", {"index": -1}, [tup(t(1), t(2))], {"index": 1}),
    ("tuple", {}, [t(1), t(2)], {}),
]


@pytest.mark.parametrize("op,raw,ins,canonical", NORMALIZE, ids=[f"{c[0]}-{i}" for i, c in enumerate(NORMALIZE)])
def test_normalize_attrs(op, raw, ins, canonical):
    attrs = ops.normalize_attrs(op, raw, ins)
    assert isinstance(attrs, Attrs)
    assert dict(attrs) == canonical
    assert ops.normalize_attrs(op, attrs, ins) == attrs  # idempotent
    ops.infer_type(op, attrs, ins)


def test_normalize_attrs_types_are_canonical():
    attrs = ops.normalize_attrs("nn.avg_pool2d", {"ceil_mode": 1, "count_include_pad": np.int64(0)}, [t(1, 1, 4, 4)])
    assert attrs["ceil_mode"] is True and attrs["count_include_pad"] is False
    assert isinstance(ops.normalize_attrs("nn.pad", {"pad_width": ((1, 1),), "pad_value": 2}, [t(3)])["pad_value"],
                      float)
    assert isinstance(ops.normalize_attrs("clip", {"a_min": 0, "a_max": 6}, [t(3)])["a_min"], float)
    # equal computations written differently intern to equal attributes
    assert (ops.normalize_attrs("nn.softmax", {"axis": -1}, [t(2, 3)])
            == ops.normalize_attrs("nn.softmax", {"axis": 1}, [t(2, 3)]))


@pytest.mark.parametrize("op,raw,ins,message", [
    ("nn.conv2d", {"out_layout": "NHWC"}, [t(1, 3, 8, 8), t(6, 3, 3, 3)], "out_layout"),
    ("clip", {"a_min": 0.0}, [t(3)], "missing required attribute 'a_max'"),
    ("transpose", {"axes": (0, 3)}, [t(2, 3)], "out of range"),
    ("nn.softmax", {"axis": 2}, [t(2, 3)], "out of range"),
    ("split", {"indices_or_sections": 4}, [t(6)], "equal sections"),
    ("strided_slice", {"begin": [3], "end": [0], "strides": [-1]}, [t(4)], "positive strides"),
    ("strided_slice", {"begin": [0], "end": [1], "slice_mode": "bogus"}, [t(4)], "slice_mode"),
    ("reshape", {"newshape": (-1, -1)}, [t(4)], "more than one -1"),
    ("reshape", {"newshape": (-1, 5)}, [t(4)], "cannot infer"),
    ("reshape", {"newshape": (0, 0, 0)}, [t(2, 2)], "cannot normalize"),
    ("reshape", {"newshape": (-7,)}, [t(4)], "unknown newshape code"),
    ("mean", {"axis": 0}, [tup(t(2))], "tensor type"),
    ("nn.max_pool2d", {"ceil_mode": 2}, [t(1, 1, 4, 4)], "'ceil_mode'"),
    ("nn.relu6", {}, [t(3)], "unknown operator"),
    ("clip", {"a_min": "low", "a_max": 1.0}, [t(3)], "cannot normalize"),
])
def test_normalize_attrs_errors(op, raw, ins, message):
    with pytest.raises(ShapeError, match=message):
        ops.normalize_attrs(op, raw, ins)
