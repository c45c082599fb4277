"""The model zoo: every model type-checks, builds with TVM and computes sensible numbers."""

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
from tvm import relay  # noqa: E402
from tvm.contrib import graph_executor  # noqa: E402

from relay_eqsat.passes import zoo  # noqa: E402
from relay_eqsat.passes.relay.simplify_copies import op_calls  # noqa: E402
from relay_eqsat.passes.runtime.target import host_target  # noqa: E402

pytestmark = pytest.mark.tvm

# Expected (input, output) shapes with batch 1; written out here, not derived from the zoo.
SMALL_SHAPES = {
    "bert": ((16, 64), (16, 64)),
    "nasrnn": ((2, 32), (1, 32)),
    "nasnet_a": ((1, 3, 32, 32), (1, 160, 2, 2)),
    "resnext50": ((1, 3, 32, 32), (1, 256, 1, 1)),
    "resnet50": ((1, 16, 16, 16), (1, 256, 2, 2)),
    "resnet50_full": ((1, 3, 32, 32), (1, 10)),
    "inception_v3": ((1, 3, 75, 75), (1, 10)),
    "squeezenet": ((1, 3, 64, 64), (1, 10)),
    "vgg19": ((1, 3, 32, 32), (1, 10)),
    "mobilenet_v2": ((1, 3, 32, 32), (1, 10)),
    "vit": ((1, 3, 32, 32), (1, 10)),
}
FULL_SHAPES = {
    "bert": ((64, 1024), (64, 1024)),
    "nasrnn": ((5, 512), (1, 512)),
    "nasnet_a": ((1, 3, 224, 224), (1, 5120, 7, 7)),
    "resnext50": ((1, 3, 224, 224), (1, 2048, 7, 7)),
    "resnet50": ((1, 64, 56, 56), (1, 2048, 7, 7)),
    "resnet50_full": ((1, 3, 224, 224), (1, 1000)),
    "inception_v3": ((1, 3, 299, 299), (1, 1000)),
    "squeezenet": ((1, 3, 224, 224), (1, 1000)),
    "vgg19": ((1, 3, 224, 224), (1, 1000)),
    "mobilenet_v2": ((1, 3, 224, 224), (1, 1000)),
    "vit": ((1, 3, 224, 224), (1, 1000)),
}
# Parameter counts of the full networks (millions), as published for the real models
# (TASO's graphs: no classifier; Inception-v3 without the auxiliary head).
FULL_PARAMS_M = {
    "resnet50_full": 25.6,
    "inception_v3": 23.8,
    "squeezenet": 1.25,
    "vgg19": 143.7,
    "mobilenet_v2": 3.5,
    "vit": 86.6,
    "resnext50": 23.0,
}
# Characteristic ops each small configuration must keep.
CHARACTERISTIC_OPS = {
    "bert": {"nn.dense", "nn.batch_matmul", "nn.softmax", "nn.layer_norm", "erf"},
    "nasrnn": {"nn.dense", "strided_slice", "tanh", "sigmoid", "nn.relu", "multiply"},
    "nasnet_a": {"nn.conv2d", "nn.avg_pool2d", "nn.max_pool2d", "concatenate", "add"},
    "resnext50": {"nn.conv2d", "nn.bias_add", "nn.max_pool2d", "add", "nn.relu"},
    "resnet50": {"nn.conv2d", "nn.bias_add", "add", "nn.relu"},
    "resnet50_full": {"nn.conv2d", "nn.batch_norm", "nn.global_avg_pool2d", "nn.dense"},
    "inception_v3": {"nn.conv2d", "nn.batch_norm", "nn.avg_pool2d", "nn.max_pool2d", "concatenate"},
    "squeezenet": {"nn.conv2d", "concatenate", "nn.max_pool2d", "nn.global_avg_pool2d"},
    "vgg19": {"nn.conv2d", "nn.max_pool2d", "reshape", "nn.dense"},
    "mobilenet_v2": {"nn.conv2d", "nn.batch_norm", "clip", "add"},
    "vit": {"nn.conv2d", "concatenate", "nn.batch_matmul", "nn.layer_norm", "erf", "strided_slice"},
}


def _typed(mod):
    return relay.transform.InferType()(mod)


def _out_shape(mod):
    return tuple(int(d) for d in mod["main"].ret_type.shape)




def _conv_groups(mod):
    groups = []

    def visit(e):
        if isinstance(e, relay.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name == "nn.conv2d":
            groups.append(int(e.attrs.groups))

    relay.analysis.post_order_visit(mod["main"], visit)
    return groups


def _build(mod, params, bind: bool, opt_level: int):
    """Build for the host CPU; weights bound at build time, or left as inputs.

    Builds that leave the weights as inputs skip SimplifyExpr: it is the slowest
    pass on these graphs (it re-infers types after every match) and, at
    opt_level 3, fails on ``add(e, e)`` when ``e`` reads a free variable (NasNet's
    doubled average pool). Binding the weights avoids both (test_bound_params_match).
    """
    disabled = [] if bind else ["SimplifyExpr"]
    with tvm.transform.PassContext(opt_level=opt_level, disabled_pass=disabled):
        lib = relay.build(mod, target=host_target(), params=params if bind else None)
    return graph_executor.GraphModule(lib["default"](tvm.cpu()))


def _run(m, data, params=None):
    """Run once on ``data``; ``params`` are the weights of a build that did not bind them."""
    m.set_input("data", data)
    if params is not None:
        m.set_input(**params)
    m.run()
    return m.get_output(0).numpy()


def _random_data(name, small=True, seed=0):
    shape = zoo.input_shapes(name, small)["data"]
    return np.random.default_rng(123 + seed).standard_normal(shape).astype("float32")


def test_model_list():
    assert zoo.MODELS == list(SMALL_SHAPES)


@pytest.mark.parametrize("name", list(SMALL_SHAPES))
def test_small_builds_and_runs(name):
    mod, params = zoo.get(name, small=True)
    typed = _typed(mod)
    in_shape, out_shape = SMALL_SHAPES[name]
    assert zoo.input_shapes(name, small=True) == {"data": in_shape}
    assert _out_shape(typed) == out_shape
    assert CHARACTERISTIC_OPS[name] <= set(op_calls(typed))
    assert [p.name_hint for p in mod["main"].params] == ["data"] + list(params)
    assert all(v.dtype == np.float32 for v in params.values())

    # Weights as inputs keep the build fast: binding them makes TVM's FoldConstant
    # compile every batch norm's folding separately (test_bound_params_match binds).
    m = _build(mod, params, bind=False, opt_level=2)
    _check_output(_run(m, _random_data(name), params), _run(m, _random_data(name, seed=1), params), out_shape)


def _check_output(out, other, shape):
    """Finite, of sensible scale, not constant, and dependent on the input (no dead layer)."""
    assert out.shape == shape
    assert np.isfinite(out).all()
    assert out.std() > 1e-3, "output is (nearly) constant"
    assert np.abs(out).max() < 1e3, "activations blew up"
    assert np.abs(out - other).max() > 1e-3 * out.std(), "output does not depend on the input"


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FULL_SHAPES))
def test_full_builds_and_runs(name):
    """Full-size models keep activations at a sensible scale through the whole network."""
    mod, params = zoo.get(name)
    m = _build(mod, params, bind=False, opt_level=2)
    out = _run(m, _random_data(name, small=False), params)
    other = _run(m, _random_data(name, small=False, seed=1), params)
    _check_output(out, other, FULL_SHAPES[name][1])


def test_bound_params_match():
    """``relay.build(params=...)`` binds the weights; the result matches feeding them at run time."""
    mod, params = zoo.get("bert", small=True)
    data = _random_data("bert")
    bound = _run(_build(mod, params, bind=True, opt_level=3), data)
    fed = _run(_build(mod, params, bind=False, opt_level=2), data, params)
    np.testing.assert_allclose(bound, fed, rtol=1e-4, atol=1e-4)


def test_deterministic_under_seed():
    mod_a, params_a = zoo.get("resnext50", small=True, seed=7)
    mod_b, params_b = zoo.get("resnext50", small=True, seed=7)
    assert tvm.ir.structural_equal(mod_a, mod_b, map_free_vars=True)
    assert list(params_a) == list(params_b)
    for key in params_a:
        np.testing.assert_array_equal(params_a[key], params_b[key])
    _, params_c = zoo.get("resnext50", small=True, seed=8)
    assert any(not np.array_equal(params_a[k], params_c[k]) for k in params_a)


@pytest.mark.parametrize("name", ["bert", "nasrnn", "vit", "mobilenet_v2"])
def test_batch(name):
    mod, _ = zoo.get(name, small=True, batch=3)
    (in1, out1), shape3 = SMALL_SHAPES[name], zoo.input_shapes(name, small=True, batch=3)["data"]
    assert shape3[0] == 3 * in1[0]
    assert _out_shape(_typed(mod))[0] == 3 * out1[0]


def test_batch_attention_matches_batch_one():
    """With batch 2, each sequence of BERT is processed exactly as on its own."""
    mod1, params = zoo.get("bert", small=True)
    mod2, _ = zoo.get("bert", small=True, batch=2)
    x = _random_data("bert")
    y = np.random.default_rng(5).standard_normal(x.shape).astype("float32")
    out2 = _run(_build(mod2, params, bind=False, opt_level=2), np.concatenate([x, y]), params)
    single = _build(mod1, params, bind=False, opt_level=2)
    outx, outy = _run(single, x, params), _run(single, y, params)
    np.testing.assert_allclose(out2, np.concatenate([outx, outy]), rtol=1e-4, atol=1e-4)


def test_grouped_convolutions():
    resnext, _ = zoo.get("resnext50", small=True)
    assert max(_conv_groups(resnext)) == 8
    full, _ = zoo.get("resnext50")
    assert sorted(set(_conv_groups(full))) == [1, 32]
    nasnet, _ = zoo.get("nasnet_a", small=True)
    assert any(g > 1 for g in _conv_groups(nasnet)), "separable convolutions are depthwise + pointwise"


@pytest.mark.parametrize("name", list(FULL_SHAPES))
def test_full_constructs_and_type_checks(name):
    mod, params = zoo.get(name)
    in_shape, out_shape = FULL_SHAPES[name]
    assert zoo.input_shapes(name) == {"data": in_shape}
    assert _out_shape(_typed(mod)) == out_shape
    if name in FULL_PARAMS_M:
        count = sum(v.size for v in params.values()) / 1e6
        assert count == pytest.approx(FULL_PARAMS_M[name], rel=0.02)


def test_unknown_name():
    with pytest.raises(ValueError, match="unknown zoo model 'alexnet'.*resnet50"):
        zoo.get("alexnet")
    with pytest.raises(ValueError, match="unknown zoo model"):
        zoo.input_shapes("alexnet")


def test_bad_batch():
    with pytest.raises(ValueError, match="batch"):
        zoo.get("bert", small=True, batch=0)
