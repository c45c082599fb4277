"""Building blocks shared by the zoo models: parameters, convolutions, dense layers, attention.

Every block takes a :class:`ParamBuilder` (which creates the weight variables and
their random values), the input expression and the sizes it needs, and returns
a Relay expression. Sizes are passed explicitly: the models know their channel
counts, and explicit sizes keep construction linear in the graph size (no type
inference while building).

Initialization keeps activations at roughly unit scale through deep networks:
He-normal for layers followed by a ReLU, Glorot-style for linear layers, and a
small ``gain`` for the last layer of a residual branch so sums of many blocks
do not blow up.
"""

from __future__ import annotations

import contextlib
import math
from typing import Iterator, Sequence

import numpy as np
import tvm
from tvm import relay

DTYPE = "float32"
BIAS_STD = 0.02


class ParamBuilder:
    """Creates named Relay parameter variables and their seeded random values."""

    def __init__(self, seed: int = 0):
        self._rng = np.random.default_rng(seed)
        self._prefix: list[str] = []
        self._vars: list[relay.Var] = []
        self.params: dict[str, np.ndarray] = {}

    @contextlib.contextmanager
    def scope(self, name: str) -> Iterator[None]:
        """Prefix the names of parameters created inside with ``name.``."""
        self._prefix.append(name)
        try:
            yield
        finally:
            self._prefix.pop()

    def new(self, name: str, value: np.ndarray) -> relay.Var:
        """A parameter variable holding ``value``; names must be unique."""
        full = ".".join(self._prefix + [name])
        if full in self.params:
            raise ValueError(f"duplicate parameter name {full!r}")
        value = np.ascontiguousarray(value, dtype=DTYPE)
        var = relay.var(full, shape=value.shape, dtype=DTYPE)
        self.params[full] = value
        self._vars.append(var)
        return var

    def normal(self, name: str, shape: Sequence[int], std: float) -> relay.Var:
        """A parameter drawn from N(0, std^2)."""
        value = self._rng.standard_normal(tuple(shape), dtype=np.float32)
        value *= np.float32(std)
        return self.new(name, value)

    def uniform(self, name: str, shape: Sequence[int], low: float, high: float) -> relay.Var:
        """A parameter drawn from U(low, high)."""
        return self.new(name, self._rng.uniform(low, high, size=tuple(shape)).astype(DTYPE))

    def module(self, data: relay.Var, body: relay.Expr) -> tvm.IRModule:
        """The IRModule whose main takes ``data`` and then every parameter, in creation order."""
        return tvm.IRModule.from_expr(relay.Function([data] + self._vars, body))


# ---------------------------------------------------------------- pooling


def max_pool(x, kernel: int, stride: int, padding=0, ceil_mode: bool = False):
    """``nn.max_pool2d`` with a square window."""
    return relay.nn.max_pool2d(
        x, (kernel, kernel), (stride, stride), padding=_pad4(padding), ceil_mode=ceil_mode
    )


def avg_pool(x, kernel: int, stride: int, padding=0, count_include_pad: bool = False):
    """``nn.avg_pool2d`` with a square window."""
    return relay.nn.avg_pool2d(
        x, (kernel, kernel), (stride, stride), padding=_pad4(padding), count_include_pad=count_include_pad
    )


def _pad4(padding) -> tuple[int, int, int, int]:
    if isinstance(padding, int):
        return (padding,) * 4
    if len(padding) == 2:
        return (padding[0], padding[1], padding[0], padding[1])
    return tuple(padding)


def _pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


# ---------------------------------------------------------------- convolutions


def conv2d(
    b: ParamBuilder,
    name: str,
    x,
    cin: int,
    cout: int,
    kernel,
    stride: int = 1,
    padding=None,
    groups: int = 1,
    bias: bool = True,
    gain: float = 2.0,
):
    """``nn.conv2d`` (NCHW/OIHW) with He-style init (std = sqrt(gain / fan_in)), then ``nn.bias_add``.

    ``padding`` defaults to "half the kernel" (same size at stride 1); it may be an
    int, a (h, w) pair or a (top, left, bottom, right) tuple.
    """
    kh, kw = _pair(kernel)
    if padding is None:
        padding = (kh // 2, kw // 2)
    fan_in = (cin // groups) * kh * kw
    with b.scope(name):
        w = b.normal("weight", (cout, cin // groups, kh, kw), math.sqrt(gain / fan_in))
        y = relay.nn.conv2d(
            x,
            w,
            strides=(stride, stride),
            padding=_pad4(padding),
            groups=groups,
            channels=cout,
            kernel_size=(kh, kw),
        )
        if bias:
            y = relay.nn.bias_add(y, b.normal("bias", (cout,), BIAS_STD), axis=1)
    return y


def batch_norm(
    b: ParamBuilder, name: str, x, channels: int, gain: float = 1.0, epsilon: float = 1e-5, axis: int = 1
):
    """Inference ``nn.batch_norm`` (output 0) with random statistics near the identity, scaled by ``gain``."""
    with b.scope(name):
        gamma = b.uniform("gamma", (channels,), 0.8 * gain, 1.2 * gain)
        beta = b.normal("beta", (channels,), BIAS_STD)
        mean = b.normal("moving_mean", (channels,), 0.05)
        var = b.uniform("moving_var", (channels,), 0.8, 1.2)
    return relay.nn.batch_norm(x, gamma, beta, mean, var, axis=axis, epsilon=epsilon)[0]


def activation(x, kind: str | None):
    """Apply "relu", "relu6" (``clip`` to [0, 6]), "gelu", "tanh", "sigmoid" or nothing (None)."""
    if kind is None:
        return x
    if kind == "relu":
        return relay.nn.relu(x)
    if kind == "relu6":
        return relay.clip(x, 0.0, 6.0)
    if kind == "gelu":
        return gelu(x)
    if kind == "tanh":
        return relay.tanh(x)
    if kind == "sigmoid":
        return relay.sigmoid(x)
    raise ValueError(f"unknown activation {kind!r}")


def conv_bn_act(
    b: ParamBuilder,
    name: str,
    x,
    cin: int,
    cout: int,
    kernel,
    stride: int = 1,
    padding=None,
    groups: int = 1,
    act: str | None = "relu",
    bn_gain: float = 1.0,
    bn_epsilon: float = 1e-5,
):
    """Convolution without bias, inference batch norm, activation (the torchvision "BasicConv2d")."""
    with b.scope(name):
        y = conv2d(b, "conv", x, cin, cout, kernel, stride, padding, groups, bias=False)
        y = batch_norm(b, "bn", y, cout, gain=bn_gain, epsilon=bn_epsilon)
    return activation(y, act)


def conv_bias_act(
    b: ParamBuilder,
    name: str,
    x,
    cin: int,
    cout: int,
    kernel,
    stride: int = 1,
    padding=None,
    groups: int = 1,
    act: str | None = "relu",
    gain: float = 2.0,
):
    """Convolution with ``bias_add`` and an activation (batch norm folded into the conv, as in TASO's graphs)."""
    return activation(conv2d(b, name, x, cin, cout, kernel, stride, padding, groups, True, gain), act)


def conv_norm_act(
    b: ParamBuilder,
    name: str,
    x,
    cin: int,
    cout: int,
    kernel,
    stride: int = 1,
    groups: int = 1,
    act: str | None = "relu",
    norm: str = "bn",
    scale: float = 1.0,
):
    """``conv_bn_act`` (norm="bn") or ``conv_bias_act`` (norm="bias"), output scaled by about ``scale``."""
    if norm == "bn":
        return conv_bn_act(b, name, x, cin, cout, kernel, stride, groups=groups, act=act, bn_gain=scale)
    if norm == "bias":
        return conv_bias_act(
            b, name, x, cin, cout, kernel, stride, groups=groups, act=act, gain=2.0 * scale**2
        )
    raise ValueError(f"unknown norm {norm!r}")


RESIDUAL_SCALE = 0.3
"""Scale of a residual branch's last layer, so long chains of residual adds stay near unit scale."""


def bottleneck(
    b: ParamBuilder,
    name: str,
    x,
    cin: int,
    width: int,
    cout: int,
    stride: int,
    groups: int = 1,
    norm: str = "bn",
    shortcut_act: str | None = None,
):
    """ResNet/ResNeXt bottleneck: 1x1 -> 3x3 (stride, ``groups``) -> 1x1, plus shortcut, add, relu.

    The shortcut is a strided 1x1 projection when the stride or channel count
    changes (followed by ``shortcut_act``: TASO's graphs put a ReLU there), else identity.
    """
    with b.scope(name):
        y = conv_norm_act(b, "conv1", x, cin, width, 1, norm=norm)
        y = conv_norm_act(b, "conv2", y, width, width, 3, stride, groups=groups, norm=norm)
        y = conv_norm_act(b, "conv3", y, width, cout, 1, act=None, norm=norm, scale=RESIDUAL_SCALE)
        if stride != 1 or cin != cout:
            x = conv_norm_act(
                b, "downsample", x, cin, cout, 1, stride, act=shortcut_act, norm=norm, scale=0.7
            )
    return relay.nn.relu(relay.add(x, y))


def stem(b: ParamBuilder, x, cin: int, cout: int, norm: str = "bn"):
    """The ResNet stem: 7x7 stride-2 convolution, activation, 3x3 stride-2 max pool (4x downsampling)."""
    return max_pool(conv_norm_act(b, "stem", x, cin, cout, 7, 2, norm=norm), 3, 2, padding=1)


def resnet_stages(
    b: ParamBuilder,
    x,
    cin: int,
    widths: Sequence[int],
    blocks: Sequence[int],
    expansion: int,
    groups: int = 1,
    norm: str = "bn",
    shortcut_act: str | None = None,
):
    """The four bottleneck stages of ResNet-50/ResNeXt-50; the first block of stages 2.. has stride 2.

    Returns (output, output channels).
    """
    for stage, (width, count) in enumerate(zip(widths, blocks)):
        for i in range(count):
            stride = 2 if stage > 0 and i == 0 else 1
            cout = width * expansion
            x = bottleneck(
                b, f"layer{stage + 1}.{i}", x, cin, width, cout, stride, groups, norm, shortcut_act
            )
            cin = cout
    return x, cin


# ---------------------------------------------------------------- dense layers, heads


def dense(b: ParamBuilder, name: str, x, cin: int, cout: int, bias: bool = True, gain: float = 1.0):
    """``nn.dense`` (weight [cout, cin], std = sqrt(gain / cin)), then ``nn.bias_add``."""
    with b.scope(name):
        y = relay.nn.dense(x, b.normal("weight", (cout, cin), math.sqrt(gain / cin)), units=cout)
        if bias:
            y = relay.nn.bias_add(y, b.normal("bias", (cout,), BIAS_STD), axis=-1)
    return y


def flatten(x, batch: int, features: int):
    """Reshape to [batch, features] (a static ``reshape``, no ``batch_flatten``)."""
    return relay.reshape(x, (batch, features))


def classifier(b: ParamBuilder, x, batch: int, channels: int, classes: int, name: str = "fc"):
    """Global average pool, flatten, dense to ``classes`` logits."""
    y = flatten(relay.nn.global_avg_pool2d(x), batch, channels)
    return dense(b, name, y, channels, classes)


def layer_norm(b: ParamBuilder, name: str, x, dim: int, epsilon: float = 1e-5):
    """``nn.layer_norm`` over the last axis with random affine parameters near the identity."""
    with b.scope(name):
        gamma = b.uniform("gamma", (dim,), 0.8, 1.2)
        beta = b.normal("beta", (dim,), BIAS_STD)
    return relay.nn.layer_norm(x, gamma, beta, axis=-1, epsilon=epsilon)


def gelu(x):
    """GELU, erf form: x * (0.5 + 0.5 * erf(x / sqrt(2)))."""
    half = relay.const(0.5, DTYPE)
    cdf = relay.add(
        half, relay.multiply(half, relay.erf(relay.multiply(x, relay.const(1 / math.sqrt(2), DTYPE))))
    )
    return relay.multiply(x, cdf)


# ---------------------------------------------------------------- transformers


def _split_heads(x, batch: int, seq: int, heads: int, head_dim: int, keys_last: bool):
    """[batch*seq, heads*head_dim] -> [batch*heads, seq, head_dim] (or [.., head_dim, seq] if ``keys_last``).

    With batch 1 this is TASO's reshape to [seq, heads, head_dim] and one transpose.
    """
    if batch == 1:
        y = relay.reshape(x, (seq, heads, head_dim))
        return relay.transpose(y, (1, 2, 0) if keys_last else (1, 0, 2))
    y = relay.reshape(x, (batch, seq, heads, head_dim))
    y = relay.transpose(y, (0, 2, 3, 1) if keys_last else (0, 2, 1, 3))
    shape = (batch * heads, head_dim, seq) if keys_last else (batch * heads, seq, head_dim)
    return relay.reshape(y, shape)


def _merge_heads(x, batch: int, seq: int, heads: int, head_dim: int):
    """[batch*heads, seq, head_dim] -> [batch*seq, heads*head_dim]."""
    if batch > 1:
        x = relay.reshape(x, (batch, heads, seq, head_dim))
        x = relay.transpose(x, (0, 2, 1, 3))
    else:
        x = relay.transpose(x, (1, 0, 2))
    return relay.reshape(x, (batch * seq, heads * head_dim))


def multi_head_attention(b: ParamBuilder, name: str, x, batch: int, seq: int, hidden: int, heads: int):
    """Self-attention on tokens laid out as [batch*seq, hidden].

    Q, K and V are three ``nn.dense`` ops on the same input; scores are
    ``nn.batch_matmul`` (NT form) scaled by 1/sqrt(head_dim), then ``nn.softmax``,
    a second ``nn.batch_matmul`` with V transposed, and an output projection.
    """
    if hidden % heads:
        raise ValueError(f"hidden {hidden} not divisible by heads {heads}")
    head_dim = hidden // heads
    with b.scope(name):
        q = dense(b, "query", x, hidden, hidden)
        k = dense(b, "key", x, hidden, hidden)
        v = dense(b, "value", x, hidden, hidden)
        q = _split_heads(q, batch, seq, heads, head_dim, keys_last=False)
        k = _split_heads(k, batch, seq, heads, head_dim, keys_last=False)
        vt = _split_heads(v, batch, seq, heads, head_dim, keys_last=True)
        scores = relay.multiply(relay.nn.batch_matmul(q, k), relay.const(1 / math.sqrt(head_dim), DTYPE))
        probs = relay.nn.softmax(scores, axis=-1)
        ctx = _merge_heads(relay.nn.batch_matmul(probs, vt), batch, seq, heads, head_dim)
        return dense(b, "output", ctx, hidden, hidden, gain=0.5)


def feed_forward(b: ParamBuilder, name: str, x, hidden: int, inner: int, act: str):
    """Position-wise MLP: dense to ``inner``, activation, dense back to ``hidden``."""
    with b.scope(name):
        y = activation(dense(b, "fc1", x, hidden, inner, gain=2.0), act)
        return dense(b, "fc2", y, inner, hidden, gain=0.5)


def transformer_layer(
    b: ParamBuilder,
    name: str,
    x,
    batch: int,
    seq: int,
    hidden: int,
    heads: int,
    inner: int,
    act: str,
    pre_norm: bool,
    epsilon: float,
):
    """One encoder layer on [batch*seq, hidden] tokens.

    ``pre_norm`` (ViT): x + attn(LN(x)), then x + mlp(LN(x)).
    Post-norm (BERT): LN(x + attn(x)), then LN(x + mlp(x)).
    """
    with b.scope(name):
        if pre_norm:
            x = relay.add(
                x,
                multi_head_attention(
                    b, "attn", layer_norm(b, "ln1", x, hidden, epsilon), batch, seq, hidden, heads
                ),
            )
            return relay.add(
                x, feed_forward(b, "mlp", layer_norm(b, "ln2", x, hidden, epsilon), hidden, inner, act)
            )
        x = layer_norm(
            b,
            "ln1",
            relay.add(x, multi_head_attention(b, "attn", x, batch, seq, hidden, heads)),
            hidden,
            epsilon,
        )
        return layer_norm(
            b, "ln2", relay.add(x, feed_forward(b, "mlp", x, hidden, inner, act)), hidden, epsilon
        )
