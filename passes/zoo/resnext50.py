"""ResNeXt-50 (32x4d) as in TASO's benchmark graph.

Stem (7x7 stride-2 convolution, 3x3 stride-2 max pool), then bottleneck stages
of 3/4/6/3 blocks whose 3x3 convolution is grouped (32 groups), widths
128/256/512/1024 with expansion 2. As in TASO: convolutions with ``bias_add``
(batch norm folded) and ReLU, a ReLU after each projection shortcut, no
classifier; the output is the last stage's feature map.
"""

from __future__ import annotations

from dataclasses import dataclass

from .layers import ParamBuilder, resnet_stages, stem


@dataclass(frozen=True)
class ResNeXtConfig:
    image: int
    stem: int
    widths: tuple[int, ...]
    blocks: tuple[int, ...]
    groups: int
    expansion: int = 2


FULL = ResNeXtConfig(image=224, stem=64, widths=(128, 256, 512, 1024), blocks=(3, 4, 6, 3), groups=32)
SMALL = ResNeXtConfig(image=32, stem=16, widths=(16, 32, 64, 128), blocks=(2, 1, 1, 1), groups=8)


def input_shape(cfg: ResNeXtConfig, batch: int) -> tuple[int, ...]:
    return (batch, 3, cfg.image, cfg.image)


def build(b: ParamBuilder, data, cfg: ResNeXtConfig, batch: int):
    x = stem(b, data, 3, cfg.stem, norm="bias")
    out, _ = resnet_stages(
        b, x, cfg.stem, cfg.widths, cfg.blocks, cfg.expansion, cfg.groups, norm="bias", shortcut_act="relu"
    )
    return out
