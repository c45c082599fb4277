"""VGG-19: sixteen 3x3 convolutions (bias, ReLU) in five blocks with 2x2 max pools, then three dense layers."""

from __future__ import annotations

from dataclasses import dataclass

from tvm import relay

from .layers import ParamBuilder, conv_bias_act, dense, flatten, max_pool

POOL = "M"


@dataclass(frozen=True)
class VGGConfig:
    image: int
    layers: tuple  # output channels of each 3x3 convolution, or POOL
    hidden: int
    classes: int


# fmt: off
FULL = VGGConfig(
    image=224,
    layers=(
        64, 64, POOL, 128, 128, POOL, 256, 256, 256, 256, POOL,
        512, 512, 512, 512, POOL, 512, 512, 512, 512, POOL,
    ),
    hidden=4096,
    classes=1000,
)
# fmt: on
SMALL = VGGConfig(image=32, layers=(8, 8, POOL, 16, 16, POOL, 32, 32, 32, 32, POOL), hidden=64, classes=10)


def input_shape(cfg: VGGConfig, batch: int) -> tuple[int, ...]:
    return (batch, 3, cfg.image, cfg.image)


def build(b: ParamBuilder, data, cfg: VGGConfig, batch: int):
    x, c, size = data, 3, cfg.image
    for i, layer in enumerate(cfg.layers):
        if layer == POOL:
            x, size = max_pool(x, 2, 2), size // 2
        else:
            x, c = conv_bias_act(b, f"conv{i}", x, c, layer, 3), layer
    features = c * size * size
    x = relay.nn.relu(dense(b, "fc1", flatten(x, batch, features), features, cfg.hidden, gain=2.0))
    x = relay.nn.relu(dense(b, "fc2", x, cfg.hidden, cfg.hidden, gain=2.0))
    return dense(b, "fc3", x, cfg.hidden, cfg.classes)
