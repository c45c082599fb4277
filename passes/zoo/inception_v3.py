"""Inception-v3 (torchvision layout) on [1, 3, 299, 299].

Every convolution is a "BasicConv2d": convolution without bias, inference
``batch_norm`` (eps 0.001), ReLU. Stem, 3 InceptionA, InceptionB (reduction),
4 InceptionC (factorized 1x7/7x1 convolutions), InceptionD (reduction), 2
InceptionE (split 1x3/3x1 branches), global average pool, classifier. The
branches of a module are concatenated along channels; several 1x1
convolutions of a module share its input. ``width`` scales every channel count
(the small configuration), the module counts are configurable.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import relay

from .layers import ParamBuilder, avg_pool, classifier, conv_bn_act, max_pool


@dataclass(frozen=True)
class InceptionConfig:
    image: int
    width: float
    a_pool_features: tuple[int, ...]
    c_channels: tuple[int, ...]
    e_modules: int
    classes: int


FULL = InceptionConfig(
    image=299,
    width=1.0,
    a_pool_features=(32, 64, 64),
    c_channels=(128, 160, 160, 192),
    e_modules=2,
    classes=1000,
)
SMALL = InceptionConfig(
    image=75, width=0.125, a_pool_features=(32,), c_channels=(128,), e_modules=1, classes=10
)


def input_shape(cfg: InceptionConfig, batch: int) -> tuple[int, ...]:
    return (batch, 3, cfg.image, cfg.image)


class _Builder:
    """Convolutions with channel counts scaled by the configuration's width."""

    def __init__(self, b: ParamBuilder, width: float):
        self.b, self.width = b, width

    def ch(self, channels: int) -> int:
        return max(4, int(round(channels * self.width)))

    def conv(self, name: str, x, cin: int, cout: int, kernel, stride: int = 1, padding=0):
        """BasicConv2d; ``cin`` is already scaled, ``cout`` is the unscaled count. Returns (expr, channels)."""
        cout = self.ch(cout)
        return conv_bn_act(self.b, name, x, cin, cout, kernel, stride, padding, bn_epsilon=1e-3), cout

    def chain(self, name: str, x, cin: int, layers):
        """Convolutions in sequence; ``layers`` is a list of (cout, kernel, stride, padding)."""
        for i, (cout, kernel, stride, padding) in enumerate(layers):
            x, cin = self.conv(f"{name}_{i}", x, cin, cout, kernel, stride, padding)
        return x, cin


def _concat(branches):
    return relay.concatenate([e for e, _ in branches], axis=1), sum(c for _, c in branches)


def _pool_branch(ib: _Builder, x, cin: int, cout: int):
    return ib.conv("branch_pool", avg_pool(x, 3, 1, padding=1, count_include_pad=True), cin, cout, 1)


def _inception_a(ib: _Builder, x, cin: int, pool_features: int):
    return _concat(
        [
            ib.conv("branch1x1", x, cin, 64, 1),
            ib.chain("branch5x5", x, cin, [(48, 1, 1, 0), (64, 5, 1, 2)]),
            ib.chain("branch3x3dbl", x, cin, [(64, 1, 1, 0), (96, 3, 1, 1), (96, 3, 1, 1)]),
            _pool_branch(ib, x, cin, pool_features),
        ]
    )


def _inception_b(ib: _Builder, x, cin: int):
    return _concat(
        [
            ib.conv("branch3x3", x, cin, 384, 3, 2),
            ib.chain("branch3x3dbl", x, cin, [(64, 1, 1, 0), (96, 3, 1, 1), (96, 3, 2, 0)]),
            (max_pool(x, 3, 2), cin),
        ]
    )


def _inception_c(ib: _Builder, x, cin: int, c7: int):
    row, col = ((1, 7), 1, (0, 3)), ((7, 1), 1, (3, 0))
    return _concat(
        [
            ib.conv("branch1x1", x, cin, 192, 1),
            ib.chain("branch7x7", x, cin, [(c7, 1, 1, 0), (c7, *row), (192, *col)]),
            ib.chain(
                "branch7x7dbl", x, cin, [(c7, 1, 1, 0), (c7, *col), (c7, *row), (c7, *col), (192, *row)]
            ),
            _pool_branch(ib, x, cin, 192),
        ]
    )


def _inception_d(ib: _Builder, x, cin: int):
    return _concat(
        [
            ib.chain("branch3x3", x, cin, [(192, 1, 1, 0), (320, 3, 2, 0)]),
            ib.chain(
                "branch7x7x3",
                x,
                cin,
                [(192, 1, 1, 0), (192, (1, 7), 1, (0, 3)), (192, (7, 1), 1, (3, 0)), (192, 3, 2, 0)],
            ),
            (max_pool(x, 3, 2), cin),
        ]
    )


def _split_1x3_3x1(ib: _Builder, name: str, x, cin: int):
    """The InceptionE split: a 1x3 and a 3x1 convolution of the same input, concatenated."""
    return _concat(
        [
            ib.conv(f"{name}a", x, cin, 384, (1, 3), 1, (0, 1)),
            ib.conv(f"{name}b", x, cin, 384, (3, 1), 1, (1, 0)),
        ]
    )


def _inception_e(ib: _Builder, x, cin: int):
    b3, c3 = ib.conv("branch3x3_1", x, cin, 384, 1)
    d3, cd = ib.chain("branch3x3dbl", x, cin, [(448, 1, 1, 0), (384, 3, 1, 1)])
    return _concat(
        [
            ib.conv("branch1x1", x, cin, 320, 1),
            _split_1x3_3x1(ib, "branch3x3_2", b3, c3),
            _split_1x3_3x1(ib, "branch3x3dbl_3", d3, cd),
            _pool_branch(ib, x, cin, 192),
        ]
    )


def _stem(ib: _Builder, x):
    x, c = ib.chain("stem_a", x, 3, [(32, 3, 2, 0), (32, 3, 1, 0), (64, 3, 1, 1)])
    x, c = ib.chain("stem_b", max_pool(x, 3, 2), c, [(80, 1, 1, 0), (192, 3, 1, 0)])
    return max_pool(x, 3, 2), c


def build(b: ParamBuilder, data, cfg: InceptionConfig, batch: int):
    ib = _Builder(b, cfg.width)
    x, c = _stem(ib, data)
    stages = (
        [(f"mixed_5{i}", _inception_a, (pf,)) for i, pf in enumerate(cfg.a_pool_features)]
        + [("mixed_6a", _inception_b, ())]
        + [(f"mixed_6{i + 1}", _inception_c, (c7,)) for i, c7 in enumerate(cfg.c_channels)]
        + [("mixed_7a", _inception_d, ())]
        + [(f"mixed_7{i + 1}", _inception_e, ()) for i in range(cfg.e_modules)]
    )
    for name, module, args in stages:
        with b.scope(name):
            x, c = module(ib, x, c, *args)
    return classifier(b, x, batch, c, cfg.classes)
