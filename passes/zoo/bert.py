"""BERT encoder as in TASO's benchmark: tokens [seq, hidden] (no batch axis), dense-based layers.

Each layer: Q, K, V as three ``nn.dense`` on the same input, reshape/transpose to
heads, ``nn.batch_matmul`` for Q K^T, scale, ``nn.softmax``, ``nn.batch_matmul``
with V, transpose/reshape back, output dense, residual add, ``nn.layer_norm``;
then the FFN (dense to 4x hidden, GELU in erf form, dense back), residual,
``nn.layer_norm``. With ``batch`` > 1 the input is [batch*seq, hidden].
"""

from __future__ import annotations

from dataclasses import dataclass

from .layers import ParamBuilder, transformer_layer


@dataclass(frozen=True)
class BertConfig:
    seq: int
    hidden: int
    heads: int
    layers: int
    ffn: int
    act: str = "gelu"


FULL = BertConfig(seq=64, hidden=1024, heads=16, layers=8, ffn=4096)
SMALL = BertConfig(seq=16, hidden=64, heads=4, layers=2, ffn=256)


def input_shape(cfg: BertConfig, batch: int) -> tuple[int, ...]:
    return (batch * cfg.seq, cfg.hidden)


def build(b: ParamBuilder, data, cfg: BertConfig, batch: int):
    x = data
    for i in range(cfg.layers):
        x = transformer_layer(
            b,
            f"layer{i}",
            x,
            batch,
            cfg.seq,
            cfg.hidden,
            cfg.heads,
            cfg.ffn,
            cfg.act,
            pre_norm=False,
            epsilon=1e-12,
        )
    return x
