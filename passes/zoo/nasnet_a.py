"""NasNet-A as in TASO's benchmark graph: a stem, then 3 x (5 normal cells + 1 reduction cell).

Cells follow TASO's nasnet_a.py: both cell inputs (the previous two cells'
outputs) are squeezed to the cell's channel count with a 1x1 convolution and
ReLU. Separable convolutions are a depthwise convolution (``groups`` =
channels) followed by a pointwise one; branches are combined pairwise with
``add`` and the five results concatenated along channels, so a cell outputs
5x its channel count. The channel count doubles at each reduction cell (128 ->
256 -> 512 -> 1024). Padding keeps "SAME" sizes; average pools exclude padding.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import relay

from .layers import ParamBuilder, avg_pool, conv2d, conv_bias_act, max_pool, stem


@dataclass(frozen=True)
class NasNetConfig:
    image: int
    stem: int
    channels: int
    stages: int
    normal_cells: int


FULL = NasNetConfig(image=224, stem=64, channels=128, stages=3, normal_cells=5)
SMALL = NasNetConfig(image=32, stem=16, channels=8, stages=2, normal_cells=1)

CELL_OUTPUTS = 5


def input_shape(cfg: NasNetConfig, batch: int) -> tuple[int, ...]:
    return (batch, 3, cfg.image, cfg.image)


def _sep(b: ParamBuilder, name: str, x, channels: int, kernel: int, stride: int = 1):
    """Separable convolution: depthwise kernel x kernel (stride), then pointwise 1x1 with bias."""
    with b.scope(name):
        y = conv2d(
            b, "depthwise", x, channels, channels, kernel, stride, groups=channels, bias=False, gain=1.0
        )
        return conv2d(b, "pointwise", y, channels, channels, 1, gain=0.5)


def _avg(x, stride: int = 1):
    return avg_pool(x, 3, stride, padding=1)


def _max(x, stride: int = 1):
    return max_pool(x, 3, stride, padding=1)


def _squeeze_inputs(b: ParamBuilder, prev, prev_channels: int, cur, cur_channels: int, channels: int):
    """1x1 convolutions (bias, ReLU) of both cell inputs to the cell's channel count.

    Gain 1 (not He's 2): a cell's output has about twice the second moment of its
    squeezed inputs (identity and pooled branches are summed), so this keeps the
    scale steady from cell to cell.
    """
    cur = conv_bias_act(b, "squeeze_cur", cur, cur_channels, channels, 1, gain=1.0)
    prev = conv_bias_act(b, "squeeze_prev", prev, prev_channels, channels, 1, gain=1.0)
    return prev, cur


def _normal_cell(b: ParamBuilder, prev, cur, c: int):
    return [
        relay.add(_sep(b, "sep0", cur, c, 3), cur),
        relay.add(_sep(b, "sep1", prev, c, 3), _sep(b, "sep2", cur, c, 3)),
        relay.add(_avg(cur), prev),
        relay.add(_avg(prev), _avg(prev)),
        relay.add(_sep(b, "sep3", prev, c, 3), _sep(b, "sep4", prev, c, 3)),
    ]


def _reduction_cell(b: ParamBuilder, prev, cur, c: int):
    out0 = relay.add(_sep(b, "sep0", prev, c, 7, 2), _sep(b, "sep1", cur, c, 5, 2))
    out1 = relay.add(_max(cur, 2), _sep(b, "sep2", prev, c, 7, 2))
    out2 = relay.add(_avg(cur, 2), _sep(b, "sep3", prev, c, 5, 2))
    out3 = relay.add(_max(cur, 2), _sep(b, "sep4", out0, c, 3))
    out4 = relay.add(_avg(out0), out1)
    return [out0, out1, out2, out3, out4]


def build(b: ParamBuilder, data, cfg: NasNetConfig, batch: int):
    x, x_channels = stem(b, data, 3, cfg.stem, norm="bias"), cfg.stem
    c = cfg.channels
    for stage in range(cfg.stages):
        (prev, prev_c), (cur, cur_c) = (x, x_channels), (x, x_channels)
        cells = [(f"normal{i}", _normal_cell, c) for i in range(cfg.normal_cells)] + [
            ("reduction", _reduction_cell, 2 * c)
        ]
        for name, cell, channels in cells:
            with b.scope(f"stage{stage}.{name}"):
                p, q = _squeeze_inputs(b, prev, prev_c, cur, cur_c, channels)
                out = relay.concatenate(cell(b, p, q, channels), axis=1)
            (prev, prev_c), (cur, cur_c) = (cur, cur_c), (out, CELL_OUTPUTS * channels)
        x, x_channels = cur, cur_c
        c *= 2
    return x
