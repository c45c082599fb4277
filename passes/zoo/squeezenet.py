"""SqueezeNet 1.0: Fire modules (1x1 squeeze, then 1x1 and 3x3 expands of the same input, concatenated).

Stem 7x7/2 convolution (96 channels), ceil-mode 3x3/2 max pools between groups
of Fire modules, a final 1x1 convolution to the classes with ReLU, global
average pool. Convolutions have ``bias_add`` and ReLU, no batch norm (as the
real model).
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import relay

from .layers import ParamBuilder, conv_bias_act, flatten, max_pool

POOL = "M"


@dataclass(frozen=True)
class SqueezeNetConfig:
    image: int
    stem: int
    layers: tuple  # Fire modules as (squeeze, expand1x1, expand3x3), or POOL
    classes: int


# fmt: off
FULL = SqueezeNetConfig(
    image=224,
    stem=96,
    layers=(
        POOL, (16, 64, 64), (16, 64, 64), (32, 128, 128),
        POOL, (32, 128, 128), (48, 192, 192), (48, 192, 192), (64, 256, 256),
        POOL, (64, 256, 256),
    ),
    classes=1000,
)
# fmt: on
SMALL = SqueezeNetConfig(
    image=64, stem=16, layers=(POOL, (4, 8, 8), (4, 8, 8), POOL, (8, 16, 16), POOL, (8, 16, 16)), classes=10
)


def input_shape(cfg: SqueezeNetConfig, batch: int) -> tuple[int, ...]:
    return (batch, 3, cfg.image, cfg.image)


def _fire(b: ParamBuilder, x, cin: int, squeeze: int, e1: int, e3: int):
    s = conv_bias_act(b, "squeeze", x, cin, squeeze, 1)
    expand1 = conv_bias_act(b, "expand1x1", s, squeeze, e1, 1)
    expand3 = conv_bias_act(b, "expand3x3", s, squeeze, e3, 3)
    return relay.concatenate([expand1, expand3], axis=1)


def build(b: ParamBuilder, data, cfg: SqueezeNetConfig, batch: int):
    x = conv_bias_act(b, "stem", data, 3, cfg.stem, 7, stride=2, padding=0)
    c = cfg.stem
    for i, layer in enumerate(cfg.layers):
        if layer == POOL:
            x = max_pool(x, 3, 2, ceil_mode=True)
            continue
        with b.scope(f"fire{i}"):
            x = _fire(b, x, c, *layer)
        c = layer[1] + layer[2]
    x = conv_bias_act(b, "classifier", x, c, cfg.classes, 1)
    return flatten(relay.nn.global_avg_pool2d(x), batch, cfg.classes)
