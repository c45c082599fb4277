"""ViT-Base/16: patch embedding, class token, position embedding, pre-norm encoder, classifier head.

The patch embedding is a ``nn.conv2d`` with kernel and stride equal to the patch
size; patches are flattened to tokens [batch, patches, hidden], the class token is
concatenated in front and the position embedding added. The encoder works on
tokens laid out as [batch*tokens, hidden] (see ``layers.transformer_layer``); the
head reads the class token after the final ``nn.layer_norm``.
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import relay

from .layers import ParamBuilder, conv2d, dense, layer_norm, transformer_layer


@dataclass(frozen=True)
class ViTConfig:
    image: int
    patch: int
    hidden: int
    heads: int
    layers: int
    mlp: int
    classes: int

    @property
    def tokens(self) -> int:
        return (self.image // self.patch) ** 2 + 1


FULL = ViTConfig(image=224, patch=16, hidden=768, heads=12, layers=12, mlp=3072, classes=1000)
SMALL = ViTConfig(image=32, patch=8, hidden=64, heads=4, layers=2, mlp=128, classes=10)


def input_shape(cfg: ViTConfig, batch: int) -> tuple[int, ...]:
    return (batch, 3, cfg.image, cfg.image)


def _embed(b: ParamBuilder, data, cfg: ViTConfig, batch: int):
    """Patch embedding + class token + position embedding -> [batch*tokens, hidden]."""
    d, patches = cfg.hidden, cfg.tokens - 1
    x = conv2d(b, "patch_embed", data, 3, d, cfg.patch, stride=cfg.patch, padding=0, gain=1.0)
    x = relay.transpose(relay.reshape(x, (batch, d, patches)), (0, 2, 1))
    cls = b.normal("cls_token", (1, 1, d), 0.02)
    cls = relay.concatenate([cls] * batch, axis=0) if batch > 1 else cls
    x = relay.concatenate([cls, x], axis=1)
    x = relay.add(x, b.normal("pos_embed", (1, cfg.tokens, d), 0.02))
    return relay.reshape(x, (batch * cfg.tokens, d))


def build(b: ParamBuilder, data, cfg: ViTConfig, batch: int):
    x = _embed(b, data, cfg, batch)
    for i in range(cfg.layers):
        x = transformer_layer(
            b,
            f"block{i}",
            x,
            batch,
            cfg.tokens,
            cfg.hidden,
            cfg.heads,
            cfg.mlp,
            "gelu",
            pre_norm=True,
            epsilon=1e-6,
        )
    x = layer_norm(b, "norm", x, cfg.hidden, epsilon=1e-6)
    x = relay.reshape(x, (batch, cfg.tokens, cfg.hidden))
    cls = relay.reshape(relay.strided_slice(x, (0, 0, 0), (batch, 1, cfg.hidden)), (batch, cfg.hidden))
    return dense(b, "head", cls, cfg.hidden, cfg.classes)
