"""Each modelled op's PyTorch equivalent, for the ``torch-cuda`` measuring backend.

Registered into the operator table (``OpDef.torch``) at import. A registered
callable takes ``(torch, attrs, xs, inst)`` — the torch module (imported only
by the worker that uses it), the op's canonical attributes, its input tensors
on the device, and the ``OpInstance`` — and returns a zero-argument closure
that runs the op once.
"""
from __future__ import annotations

from relay_eqsat import ops

_UNARY = {"nn.relu": "relu", "tanh": "tanh", "sigmoid": "sigmoid", "erf": "erf", "exp": "exp",
          "sqrt": "sqrt", "rsqrt": "rsqrt", "negative": "neg",
          # TVM's approximations: torch's own functions are the closest equivalents on a GPU
          "fast_exp": "exp", "fast_tanh": "tanh", "fast_erf": "erf", "fast_sigmoid": "sigmoid"}
_BINARY = {"add": "add", "subtract": "sub", "multiply": "mul", "divide": "div", "maximum": "maximum",
           "minimum": "minimum", "power": "pow"}


def _unary(name):
    def make(torch, a, xs, inst):
        f = getattr(torch, name)
        return lambda: f(xs[0])
    return make


def _binary(name):
    def make(torch, a, xs, inst):
        f = getattr(torch, name)
        return lambda: f(xs[0], xs[1])
    return make


def _conv2d(torch, a, xs, inst):
    F = torch.nn.functional
    pt, pl, pb, pr = a["padding"]
    x, w = xs
    if pt == pb and pl == pr:
        return lambda: F.conv2d(x, w, stride=a["strides"], padding=(pt, pl), dilation=a["dilation"],
                                groups=a["groups"])
    return lambda: F.conv2d(F.pad(x, (pl, pr, pt, pb)), w, stride=a["strides"], dilation=a["dilation"],
                            groups=a["groups"])


def _dense(torch, a, xs, inst):
    return lambda: torch.nn.functional.linear(xs[0], xs[1])


def _matmul(torch, a, xs, inst):
    A = xs[0].transpose(-1, -2) if a["transpose_a"] else xs[0]
    B = xs[1].transpose(-1, -2) if a["transpose_b"] else xs[1]
    return lambda: torch.matmul(A, B)


def _batch_dense(torch, a, xs, inst):
    b = xs[1].transpose(-1, -2)
    return lambda: torch.bmm(xs[0], b)


def _clip(torch, a, xs, inst):
    return lambda: torch.clamp(xs[0], a["a_min"], a["a_max"])


def _leaky_relu(torch, a, xs, inst):
    return lambda: torch.nn.functional.leaky_relu(xs[0], a["alpha"])


def _pool(torch, a, xs, inst):
    F = torch.nn.functional
    is_max = inst.op == "nn.max_pool2d"
    pt, pl, pb, pr = a["padding"]
    x = xs[0]
    if (pt, pl) != (pb, pr):
        x = F.pad(x, (pl, pr, pt, pb), value=float("-inf") if is_max else 0.0)
        pt = pl = 0
    if is_max:
        return lambda: F.max_pool2d(x, a["pool_size"], a["strides"], (pt, pl), a["dilation"],
                                    ceil_mode=a["ceil_mode"])
    return lambda: F.avg_pool2d(x, a["pool_size"], a["strides"], (pt, pl), ceil_mode=a["ceil_mode"],
                                count_include_pad=a["count_include_pad"])


def _global_avg_pool(torch, a, xs, inst):
    return lambda: torch.nn.functional.adaptive_avg_pool2d(xs[0], 1)


def _global_max_pool(torch, a, xs, inst):
    return lambda: torch.nn.functional.adaptive_max_pool2d(xs[0], 1)


def _transpose(torch, a, xs, inst):
    return lambda: xs[0].permute(*a["axes"]).contiguous()


def _reshape(torch, a, xs, inst):
    return lambda: xs[0].reshape(a["newshape"])


def _concatenate(torch, a, xs, inst):
    return lambda: torch.cat(xs, dim=a["axis"])


def _split(torch, a, xs, inst):
    n = inst.input_types[0].shape[a["axis"]]
    bounds = [0, *a["indices"], n]
    sizes = [hi - lo for lo, hi in zip(bounds, bounds[1:])]
    return lambda: [t.contiguous() for t in torch.split(xs[0], sizes, dim=a["axis"])]


def _strided_slice(torch, a, xs, inst):
    sl = tuple(slice(b, e, s) for b, e, s in zip(a["begin"], a["end"], a["strides"]))
    return lambda: xs[0][sl].contiguous()


def _pad(torch, a, xs, inst):
    flat = []
    for lo, hi in reversed(a["pad_width"]):
        flat += [lo, hi]
    return lambda: torch.nn.functional.pad(xs[0], flat, value=float(a.get("pad_value", 0.0)))


def _bias_add(torch, a, xs, inst):
    shape = [1] * inst.input_types[0].ndim
    shape[a["axis"]] = -1
    b = xs[1].reshape(shape)
    return lambda: xs[0] + b


def _batch_norm(torch, a, xs, inst):
    x, g, b, m, v = xs
    if a["axis"] != 1:
        raise ValueError("torch-cuda: batch_norm measured for axis 1 only")
    return lambda: torch.nn.functional.batch_norm(x, m, v, g if a["scale"] else None,
                                                  b if a["center"] else None, False, 0.0, a["epsilon"])


def _softmax(torch, a, xs, inst):
    return lambda: torch.softmax(xs[0], dim=a["axis"])


def _layer_norm(torch, a, xs, inst):
    if a["axis"] != inst.input_types[0].ndim - 1:
        raise ValueError("torch-cuda: layer_norm measured over the last axis only")
    shape = (inst.input_types[0].shape[-1],)
    return lambda: torch.nn.functional.layer_norm(xs[0], shape, xs[1] if a["scale"] else None,
                                                  xs[2] if a["center"] else None, a["epsilon"])


def _mean(torch, a, xs, inst):
    return lambda: torch.mean(xs[0], dim=tuple(a["axis"]), keepdim=a["keepdims"])


_TORCH = {
    **{op: _unary(fn) for op, fn in _UNARY.items()},
    **{op: _binary(fn) for op, fn in _BINARY.items()},
    "nn.conv2d": _conv2d, "nn.dense": _dense, "nn.matmul": _matmul, "nn.batch_matmul": _matmul,
    "batch_dense": _batch_dense,
    "clip": _clip, "nn.leaky_relu": _leaky_relu, "nn.max_pool2d": _pool, "nn.avg_pool2d": _pool,
    "nn.global_avg_pool2d": _global_avg_pool, "nn.global_max_pool2d": _global_max_pool,
    "transpose": _transpose, "reshape": _reshape, "concatenate": _concatenate, "split": _split,
    "strided_slice": _strided_slice, "nn.pad": _pad, "nn.bias_add": _bias_add,
    "nn.batch_norm": _batch_norm, "nn.softmax": _softmax, "nn.fast_softmax": _softmax, "nn.layer_norm": _layer_norm, "mean": _mean,
}

for _name, _make in _TORCH.items():
    ops.register_torch(_name, _make)


def torch_closure(torch, inst, dev):
    """A zero-argument closure running the PyTorch equivalent of ``inst`` on ``dev``."""
    make = ops.get(inst.op).torch
    if make is None:
        raise ValueError(f"no PyTorch mapping for operator {inst.op!r}")
    xs = [torch.rand(t.shape, device=dev, dtype=getattr(torch, t.dtype)) + 0.5 for t in inst.input_types]
    return make(torch, inst.attrs, xs, inst)
