"""Model zoo: benchmark graphs built directly in Relay.

``get(name, small=False, batch=1, seed=0)`` returns ``(mod, params)``: an
``IRModule`` whose ``main`` takes the input ``data`` and then every weight as a
Relay variable, and a dict of the weights' seeded random values (float32), so
``relay.build(mod, target, params=params)`` binds them. Hyperparameters follow
TASO's examples (used by TENSAT and the MCTS paper); every model also has a
``small`` configuration with the same characteristic structure that builds in
seconds.

Inputs (``input_shapes``) and outputs, full size with batch 1:

=============  ======================  ==============================================
model          data                    output
=============  ======================  ==============================================
bert           [64, 1024]              [64, 1024] (tokens; batch b: [64b, 1024])
nasrnn         [5, 512]                [1, 512] final state (step t = row t; batch b:
                                       [5b, 512], step t = rows [tb, (t+1)b))
nasnet_a       [1, 3, 224, 224]        [1, 5120, 7, 7] (last reduction cell)
resnext50      [1, 3, 224, 224]        [1, 2048, 7, 7] (last stage)
resnet50       [1, 64, 56, 56]         [1, 2048, 7, 7] (TASO: bottleneck stages only)
resnet50_full  [1, 3, 224, 224]        [1, 1000]
inception_v3   [1, 3, 299, 299]        [1, 1000]
squeezenet     [1, 3, 224, 224]        [1, 1000]
vgg19          [1, 3, 224, 224]        [1, 1000]
mobilenet_v2   [1, 3, 224, 224]        [1, 1000]
vit            [1, 3, 224, 224]        [1, 1000]
=============  ======================  ==============================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from tvm import relay

from . import (
    bert,
    inception_v3,
    mobilenet_v2,
    nasnet_a,
    nasrnn,
    resnet50,
    resnext50,
    squeezenet,
    vgg19,
    vit,
)
from .layers import DTYPE, ParamBuilder


@dataclass(frozen=True)
class ModelSpec:
    """How to build one zoo model: its two configurations, input shape and graph builder."""

    name: str
    full: Any
    small: Any
    input_shape: Callable[[Any, int], tuple[int, ...]]
    build: Callable[[ParamBuilder, Any, Any, int], Any]

    def config(self, small: bool) -> Any:
        return self.small if small else self.full


def _spec(module, name: str | None = None) -> ModelSpec:
    return ModelSpec(
        name or module.__name__.rsplit(".", 1)[1], module.FULL, module.SMALL, module.input_shape, module.build
    )


_SPECS = {
    spec.name: spec
    for spec in (
        _spec(bert),
        _spec(nasrnn),
        _spec(nasnet_a),
        _spec(resnext50),
        ModelSpec(
            "resnet50",
            resnet50.TASO_FULL,
            resnet50.TASO_SMALL,
            resnet50.taso_input_shape,
            resnet50.build_taso,
        ),
        _spec(resnet50, "resnet50_full"),
        _spec(inception_v3),
        _spec(squeezenet),
        _spec(vgg19),
        _spec(mobilenet_v2),
        _spec(vit),
    )
}

MODELS: list[str] = list(_SPECS)
"""Names accepted by :func:`get`."""


def spec(name: str) -> ModelSpec:
    """The :class:`ModelSpec` of ``name``; ``ValueError`` for an unknown name."""
    try:
        return _SPECS[name]
    except KeyError:
        raise ValueError(f"unknown zoo model {name!r}; known models: {', '.join(MODELS)}") from None


def _check_batch(batch: int) -> int:
    if not isinstance(batch, (int, np.integer)) or isinstance(batch, bool) or batch < 1:
        raise ValueError(f"batch must be a positive integer, got {batch!r}")
    return int(batch)


def input_shapes(name: str, small: bool = False, batch: int = 1) -> dict[str, tuple[int, ...]]:
    """The model's inputs: ``{"data": shape}``."""
    s = spec(name)
    return {"data": tuple(s.input_shape(s.config(small), _check_batch(batch)))}


def get(name: str, small: bool = False, batch: int = 1, seed: int = 0):
    """Build zoo model ``name``: ``(tvm.IRModule, {param name: np.ndarray})``.

    The module's ``main`` takes ``data`` (see :func:`input_shapes`) and then the
    parameters; the weights are drawn from ``np.random.default_rng(seed)``, so the
    same arguments give the same module and the same values.
    """
    s = spec(name)
    batch = _check_batch(batch)
    cfg = s.config(small)
    b = ParamBuilder(seed)
    data = relay.var("data", shape=s.input_shape(cfg, batch), dtype=DTYPE)
    return b.module(data, s.build(b, data, cfg, batch)), b.params


__all__ = ["MODELS", "ModelSpec", "get", "input_shapes", "spec"]
