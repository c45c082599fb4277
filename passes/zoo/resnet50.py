"""ResNet-50, two variants.

``resnet50`` is TASO's benchmark graph: the four bottleneck stages (3/4/6/3
blocks) on an input of [1, 64, 56, 56], convolutions with ``bias_add`` (batch
norm folded) and ReLU, a ReLU after each projection shortcut, no stem and no
classifier. ``resnet50_full`` is the whole network (torchvision v1.5 layout:
stem, stages with stride on the 3x3 convolution, inference ``batch_norm``,
global average pool, classifier).
"""

from __future__ import annotations

from dataclasses import dataclass

from .layers import ParamBuilder, classifier, resnet_stages, stem


@dataclass(frozen=True)
class ResNetConfig:
    image: int
    widths: tuple[int, ...]
    blocks: tuple[int, ...]
    in_channels: int = 64
    classes: int = 1000
    expansion: int = 4


TASO_FULL = ResNetConfig(image=56, widths=(64, 128, 256, 512), blocks=(3, 4, 6, 3))
TASO_SMALL = ResNetConfig(image=16, widths=(8, 16, 32, 64), blocks=(2, 1, 1, 1), in_channels=16)
FULL = ResNetConfig(image=224, widths=(64, 128, 256, 512), blocks=(3, 4, 6, 3))
SMALL = ResNetConfig(image=32, widths=(8, 16, 32, 64), blocks=(2, 1, 1, 1), in_channels=16, classes=10)


def taso_input_shape(cfg: ResNetConfig, batch: int) -> tuple[int, ...]:
    return (batch, cfg.in_channels, cfg.image, cfg.image)


def input_shape(cfg: ResNetConfig, batch: int) -> tuple[int, ...]:
    return (batch, 3, cfg.image, cfg.image)


def build_taso(b: ParamBuilder, data, cfg: ResNetConfig, batch: int):
    out, _ = resnet_stages(
        b, data, cfg.in_channels, cfg.widths, cfg.blocks, cfg.expansion, norm="bias", shortcut_act="relu"
    )
    return out


def build(b: ParamBuilder, data, cfg: ResNetConfig, batch: int):
    x = stem(b, data, 3, cfg.in_channels, norm="bn")
    x, channels = resnet_stages(b, x, cfg.in_channels, cfg.widths, cfg.blocks, cfg.expansion, norm="bn")
    return classifier(b, x, batch, channels, cfg.classes)
