"""MobileNet-v2: inverted residual blocks (1x1 expand, 3x3 depthwise, 1x1 linear projection).

Convolutions are followed by inference ``batch_norm`` and ReLU6 (``clip`` to
[0, 6]) except the linear projection; blocks with stride 1 and equal channel
counts add their input. Stem 3x3/2 convolution, final 1x1 convolution, global
average pool, classifier.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import relay

from .layers import RESIDUAL_SCALE, ParamBuilder, classifier, conv_bn_act


@dataclass(frozen=True)
class MobileNetV2Config:
    image: int
    stem: int
    blocks: tuple  # (expansion t, output channels c, repeats n, first stride s)
    last: int
    classes: int


FULL = MobileNetV2Config(
    image=224,
    stem=32,
    blocks=(
        (1, 16, 1, 1),
        (6, 24, 2, 2),
        (6, 32, 3, 2),
        (6, 64, 4, 2),
        (6, 96, 3, 1),
        (6, 160, 3, 2),
        (6, 320, 1, 1),
    ),
    last=1280,
    classes=1000,
)
SMALL = MobileNetV2Config(
    image=32, stem=8, blocks=((1, 8, 1, 1), (6, 12, 2, 2), (6, 16, 2, 2)), last=64, classes=10
)


def input_shape(cfg: MobileNetV2Config, batch: int) -> tuple[int, ...]:
    return (batch, 3, cfg.image, cfg.image)


def _inverted_residual(b: ParamBuilder, x, cin: int, cout: int, expansion: int, stride: int):
    hidden = cin * expansion
    y = x
    if expansion != 1:
        y = conv_bn_act(b, "expand", y, cin, hidden, 1, act="relu6")
    y = conv_bn_act(b, "depthwise", y, hidden, hidden, 3, stride, groups=hidden, act="relu6")
    residual = stride == 1 and cin == cout
    y = conv_bn_act(b, "project", y, hidden, cout, 1, act=None, bn_gain=RESIDUAL_SCALE if residual else 1.0)
    return relay.add(x, y) if residual else y


def build(b: ParamBuilder, data, cfg: MobileNetV2Config, batch: int):
    x = conv_bn_act(b, "stem", data, 3, cfg.stem, 3, 2, act="relu6")
    c, index = cfg.stem, 0
    for expansion, cout, repeats, first_stride in cfg.blocks:
        for i in range(repeats):
            with b.scope(f"block{index}"):
                x = _inverted_residual(b, x, c, cout, expansion, first_stride if i == 0 else 1)
            c, index = cout, index + 1
    x = conv_bn_act(b, "last", x, c, cfg.last, 1, act="relu6")
    return classifier(b, x, batch, cfg.last, cfg.classes)
