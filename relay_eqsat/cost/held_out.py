"""Leave-one-model-out validation of whole-graph costs on one target.

``held_out(samples, models, target, backend)`` answers: how far off is the
predicted runtime of a model none of whose kernels was measured? For each
model in turn, a learned model is trained on the measurements of every kernel
that model does not contain (a kernel it shares with another model is left
out too; so are its fused groups), the fusion weights are fitted to the *other* models' measured
runtimes under that learned model, and the model's whole-graph cost is
predicted with every kernel time a prediction (which weights the fit fits, and its prior, chosen by
leave-one-family-out among the other models, `fit_fusion`). That is the error a user can
expect on a model of their own on a CPU the cost model was trained on (the
in-sample fits of ``relay-eqsat measure`` report less). Models of one family
(a network at two sizes) are held out together.

No TVM here: training runs through ``LearnedCostModel.train`` (in a child
process when TVM is loaded).
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Collection, Mapping, Sequence

from relay_eqsat.graph import TensorGraph
from .base import CostModel, FusionRule
from .fit import fit_fusion
from .cache import CostCache
from .groups import fused_groups
from .instance import OpInstance, instances_from_graph
from .learned import LearnedCostModel


@dataclass
class HeldOut:
    """One model predicted by a cost model that never saw its kernels or its runtime."""

    predicted: float
    measured: float
    n_train: int  # measurements the learned model was trained on
    n_left_out: int  # measurements of this model's kernels left out of training
    fusion: FusionRule  # the weights fitted to the other models

    @property
    def rel_error(self) -> float:
        return (self.predicted - self.measured) / self.measured


def held_out(samples: Sequence[tuple[OpInstance, float]], models: Mapping[str, tuple[TensorGraph, float]],
             target: str, backend: str, rounds: int = 400, family: Callable[[str], str] = str,
             evaluate: Collection[str] | None = None) -> dict[str, HeldOut]:
    """Each model of ``evaluate`` (default: all of ``models``, name -> (graph, measured seconds))
    predicted without its family's data.

    ``samples``: (kernel instance, measured seconds) on ``target``, e.g. a cost database's rows.
    ``family(name)``: models of one family (one network at two sizes) are held out together: none
    of their kernels is trained on and none of their runtimes is fitted to. Every model outside
    the family is (a small configuration, say, teaches the fit the per-kernel overhead).
    Needs at least two other families for each fusion fit."""
    names = list(models) if evaluate is None else [n for n in models if n in evaluate]
    if any(len({family(m) for m in models} - {family(n)}) < 2 for n in names):
        raise ValueError("leave-one-model-out needs at least three model families")
    keys = {name: {i.key() for i in instances_from_graph(g) + fused_groups(g)} for name, (g, _) in models.items()}
    out: dict[str, HeldOut] = {}
    with tempfile.TemporaryDirectory() as tmp:
        empty = CostCache(Path(tmp) / "empty.sqlite")  # kind "learned" reads no measurement
        for name in names:
            graph, measured = models[name]
            kin = [m for m in models if family(m) == family(name)]
            others = [(m, g, t) for m, (g, t) in models.items() if m not in kin]
            left_out = set().union(*(keys[m] for m in kin))
            train = [(inst, s) for inst, s in samples if inst.key() not in left_out]
            if not train:
                raise ValueError(f"no measurements outside {name}'s kernels to train on")
            model, _ = LearnedCostModel.train(train, target, backend, holdout=0.0, rounds=rounds)
            cm = CostModel("learned", target, backend, cache=empty, learned=model, fusion=FusionRule())
            cm.fusion = fit_fusion(cm, [(g, t) for _, g, t in others],
                                   families=[family(m) for m, _, _ in others]).rule
            out[name] = HeldOut(cm.graph_cost(graph), measured, len(train), len(samples) - len(train), cm.fusion)
        empty.close()
    return out
