"""relay_eqsat.cost: operator and graph costs for the extractors and the search.

``make_cost_model(kind, target, db)`` gives a ``CostModel``:

- ``auto``: cached measurement, else the learned model's prediction, else the roofline
- ``measured``: cached measurement, else measure now with TVM (slow; for final decisions)
- ``learned``: the XGBoost prediction only
- ``analytic``: the roofline only

Modules: ``base`` (CostModel, fusion rule, graph cost), ``fusion`` (what TVM fuses),
``fit`` (fusion weights fitted to runtimes), ``analytic`` (roofline),
``cache`` (sqlite), ``measure`` (the Measurer: kernels timed in a worker process),
``pool`` (MeasurePool: several measurers, local or RPC devices, pulling from one queue),
``tracker`` (asking a TVM RPC tracker for devices, in bounded time),
``learned`` (XGBoost), ``nearest`` (which shipped CPU's model serves a CPU with none),
``instance`` (op instances and cache keys), ``calibrate``,
``groups`` (fused groups measured whole), ``held_out`` (leave-one-model-out whole-graph error).
Nothing here imports TVM or ``relay_eqsat.passes``: the worker process
(``relay_eqsat.passes.runtime.measure_worker``) builds and times the kernels, and the
``relay-eqsat measure`` subcommand is ``relay_eqsat.passes.cli.measure``.
"""
from __future__ import annotations

from .analytic import AnalyticModel
from .base import KINDS, CostModel, FitReport, FusionRule
from .cache import CostCache, default_db_path
from .fit import fit_fusion
from .fusion import fusion_class
from .instance import OpInstance, instances_from_graph
from .learned import LearnedCostModel, TrainReport
from .measure import BackendUnavailable, MeasureConfig, Measurer, MeasureResult
from .pool import MeasurePool
from .tracker import Remote, TrackerError

__all__ = [
    "AnalyticModel", "BackendUnavailable", "CostCache", "CostModel", "FitReport", "FusionRule", "KINDS",
    "LearnedCostModel", "MeasureConfig", "MeasurePool", "MeasureResult", "Measurer", "OpInstance", "Remote",
    "TrackerError", "TrainReport",
    "default_db_path", "fit_fusion", "fusion_class", "instances_from_graph", "make_cost_model",
]


def make_cost_model(kind: str = "auto", target=None, db=None, **options) -> CostModel:
    """A CostModel of ``kind`` for ``target`` (default: the host CPU) reading the
    cost database ``db`` (default: ``$RELAY_EQSAT_COST_DB`` or the user cache).

    ``options`` go to ``CostModel`` (backend, learned, analytic, fusion, measure_config, device,
    remote, jobs, records).
    """
    return CostModel(kind=kind, target=target, cache=db, **options)
