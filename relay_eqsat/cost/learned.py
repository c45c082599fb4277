"""Learned operator costs: an XGBoost regressor of log-time over operator features.

Trained on the cache's measurements for one (target, backend), it predicts the
cost of ops never measured. The trees predict log(seconds / roofline), the
ratio of the time to a fixed roofline estimate (``baseline``), so a kernel
smaller or larger than every measured one keeps the roofline's scale instead
of the nearest leaf's (models saved before that predict log-seconds, and are
still read so). Since baseline v2 the roofline time is divided by the lane
efficiency of the channel blocks TVM's x86 schedules give a convolution
(``simd.py``, ``analytic.py``), for the SIMD lanes of the target predicted
for, so a convolution with 58 channels is predicted slower than one with 64
even where no such shape was measured. The blocks are not tree features: the
training data hold narrow blocks only where something else makes a kernel slow
(3-channel stems, 1000-class heads, grouped convolutions of 4 channels a group),
and trees that saw them as features charged 58-channel convolutions about 2x
what ``bench/channel_blocks.py`` measured. Training reports its held-out error
(median absolute percentage error and R² of log-time on a random 20% split),
then refits on every row. A model is one XGBoost JSON file whose ``relay_eqsat``
attribute holds its metadata (target, backend, feature version, report, and
the fitted fusion weights when ``relay-eqsat measure --fit-fusion`` made it).

Prediction walks the trees with numpy (``TreeEnsemble``) and never calls
libxgboost, which crashes in a process that imported TVM first; training
runs in a fresh process when TVM is loaded.

Where models live: ``$RELAY_EQSAT_MODEL_DIR`` or ``<user cache
dir>/relay-eqsat/models/<backend>__<target>.json`` for models trained here, and
``relay_eqsat/cost/data/`` for the ones shipped with the package
(``default-<backend>.json`` serves any target of its backend when nothing
closer exists: no model of this CPU, none of a shipped CPU with the same SIMD
lanes, ``nearest``). A model of another device than this machine (measured
remotely, ``device`` as the cost cache keys it) is
``<backend>__<target>__<device slug>.json`` in the same directory, trained on
that device's rows only, and is the only model that device's costs use.
"""
from __future__ import annotations

import functools
import json
import logging
import math
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from .. import ops
from ..graph import Attrs, TensorType, TupleType, Type
from .analytic import AnalyticModel, op_flops_bytes
from . import nearest
from .cache import CostCache, cache_dir, device_slug, ignore_shipped, normalize_target, target_slug
from .instance import GROUP_OP, STREAM_OP, OpInstance
from .measure import target_backends
from .streams import weight_rates
from .simd import schedule_efficiency, simd_lanes

log = logging.getLogger(__name__)

FEATURE_VERSION = 1
ENV_MODEL_DIR = "RELAY_EQSAT_MODEL_DIR"
SHIPPED_DIR = Path(__file__).parent / "data"

#: the op vocabulary, in the order baked into the shipped models' features (``OpDef.vocab``)
OP_VOCAB = ops.vocabulary()
PATTERNS = ("elemwise", "broadcast", "injective", "reduce", "out_fusable", "opaque")
MAX_INPUTS = 3
RANK = 4

_NUMERIC = (
    "log_flops", "log_bytes", "intensity", "log_intensity", "log_out_elems", "log_in_elems",
    "n_inputs", "dtype_bytes", "n_outputs",
    *[f"in{i}_log_d{d}" for i in range(MAX_INPUTS) for d in range(RANK)],
    *[f"in{i}_rank" for i in range(MAX_INPUTS)],
    *[f"out_log_d{d}" for d in range(RANK)], "out_rank",
    "out_last_mod16", "in0_last_mod16", "in0_equals_out",
    "kernel_h", "kernel_w", "stride_h", "stride_w", "dilation_h", "dilation_w",
    "log_groups", "depthwise", "pad_total",
    "transpose_a", "transpose_b", "axis_is_last", "n_axes", "log_reduced", "moves_last_axis",
)
FEATURE_NAMES = (*[f"op={o}" for o in OP_VOCAB], "op=<other>",
                 *[f"pattern={p}" for p in PATTERNS], "pattern=<other>", *_NUMERIC)
_LOG_FLOPS = FEATURE_NAMES.index("log_flops")
_LOG_BYTES = FEATURE_NAMES.index("log_bytes")


#: what the trees of a model predict the log-ratio to (models without it predict log-seconds):
#: v2 is v1's roofline time divided by the schedule efficiency (``simd.schedule_efficiency``: channel lanes,
#: width blocks, row tiles of TVM's x86 fallback schedules; as ``AnalyticModel.kernel_cost``); v3 also
#: counts a dense's output-column block (``simd.column_block``); v4 a width block's accumulation chains
#: the CPU overlaps (``simd.chain_width``); v5 a convolution tile's accumulators that spill out of the vector
#: registers (``simd.register_efficiency``: AVX2 only). Models of each stay readable.
BASELINE = "roofline-cpu-v5"
BASELINE_V4 = "roofline-cpu-v4"
BASELINE_V3 = "roofline-cpu-v3"
BASELINE_V2 = "roofline-cpu-v2"
BASELINE_V1 = "roofline-cpu-v1"
_BASELINE_MODEL = AnalyticModel()  # fixed constants, never the environment's: a model must not move


def lane_efficiencies(instances: Sequence[OpInstance], lanes: int | None, kind: str = BASELINE) -> np.ndarray:
    """``simd.schedule_efficiency`` of each instance on a CPU of ``lanes`` fp32 lanes, as baseline
    ``kind`` (v2 to v5) counts it."""
    columns, chains, registers = kind != BASELINE_V2, kind in (BASELINE, BASELINE_V4), kind == BASELINE
    return np.array([schedule_efficiency(i.op, i.attrs, i.input_types, i.out_type, lanes, columns=columns,
                                         chains=chains, registers=registers) for i in instances],
                    dtype=np.float64)


def baseline(instances: Sequence[OpInstance], lanes: int | None = None) -> np.ndarray:
    """The fixed roofline estimate (default CPU constants, divided by the lane efficiency
    on a CPU of ``lanes`` fp32 lanes) of each instance, in seconds."""
    return _baseline_of(feature_matrix(instances), lane_efficiencies(instances, lanes))


def _baseline_of(X: np.ndarray, efficiency: np.ndarray | None = None) -> np.ndarray:
    """``baseline`` from feature rows (their FLOPs and bytes, not computed again) and the
    instances' lane efficiencies (None: 1, baseline v1)."""
    flops = np.exp2(X[:, _LOG_FLOPS].astype(np.float64)) - 1.0
    nbytes = np.exp2(X[:, _LOG_BYTES].astype(np.float64)) - 1.0
    m = _BASELINE_MODEL
    eff = 1.0 if efficiency is None else efficiency
    return np.maximum(flops / m.peak_flops, nbytes / m.bandwidth) / eff + m.launch_overhead


def _log2p(x: float) -> float:
    return math.log2(1.0 + max(0.0, float(x)))


def _rank4(shape: Sequence[int]) -> list[int]:
    """A shape as exactly 4 dims: leading dims merged, or left-padded with 1."""
    s = list(shape)
    if len(s) > RANK:
        lead = 1
        for d in s[: len(s) - RANK + 1]:
            lead *= d
        s = [lead] + s[len(s) - RANK + 1:]
    return [1] * (RANK - len(s)) + s


def _pattern(op: str) -> str:
    return ops.OPS[op].pattern if op in ops.OPS else "<other>"


def features(op: str, attrs: Attrs, input_types: Sequence[Type], out_type: Type) -> np.ndarray:
    """The feature vector of one op instance (float32, ``len(FEATURE_NAMES)`` entries)."""
    f = dict.fromkeys(FEATURE_NAMES, 0.0)
    f[f"op={op}" if op in OP_VOCAB else "op=<other>"] = 1.0
    pat = _pattern(op)
    f[f"pattern={pat}" if pat in PATTERNS else "pattern=<other>"] = 1.0

    flops, nbytes = op_flops_bytes(op, attrs, input_types, out_type)
    tensors_in = [t for t in input_types if isinstance(t, TensorType)]
    outs = list(out_type.fields) if isinstance(out_type, TupleType) else [out_type]
    out0 = outs[0] if outs else TensorType(())
    f["log_flops"] = _log2p(flops)
    f["log_bytes"] = _log2p(nbytes)
    f["intensity"] = flops / nbytes if nbytes else 0.0
    f["log_intensity"] = _log2p(f["intensity"])
    f["log_out_elems"] = _log2p(sum(t.size for t in outs))
    f["log_in_elems"] = _log2p(sum(t.size for t in tensors_in))
    f["n_inputs"] = len(input_types)
    f["dtype_bytes"] = np.dtype(out0.dtype).itemsize
    f["n_outputs"] = len(outs)
    for i, t in enumerate(tensors_in[:MAX_INPUTS]):
        for d, v in enumerate(_rank4(t.shape)):
            f[f"in{i}_log_d{d}"] = _log2p(v)
        f[f"in{i}_rank"] = t.ndim
    for d, v in enumerate(_rank4(out0.shape)):
        f[f"out_log_d{d}"] = _log2p(v)
    f["out_rank"] = out0.ndim
    f["out_last_mod16"] = float(bool(out0.shape) and out0.shape[-1] % 16 == 0)
    if tensors_in:
        x = tensors_in[0]
        f["in0_last_mod16"] = float(bool(x.shape) and x.shape[-1] % 16 == 0)
        f["in0_equals_out"] = float(x.shape == out0.shape)

    a = attrs
    if op == "nn.conv2d" and len(tensors_in) == 2 and tensors_in[1].ndim == 4:
        _, cin_g, kh, kw = tensors_in[1].shape
        f["kernel_h"], f["kernel_w"] = kh, kw
        g = a.get("groups", 1)
        f["log_groups"] = _log2p(g)
        f["depthwise"] = float(g > 1 and cin_g == 1)
    elif "pool_size" in a:
        f["kernel_h"], f["kernel_w"] = a["pool_size"]
    if "strides" in a and op != "strided_slice" and len(a["strides"]) == 2:
        f["stride_h"], f["stride_w"] = a["strides"]
    if "dilation" in a and len(a["dilation"]) == 2:
        f["dilation_h"], f["dilation_w"] = a["dilation"]
    if "padding" in a:
        f["pad_total"] = float(sum(a["padding"]))
    elif "pad_width" in a:
        f["pad_total"] = float(sum(lo + hi for lo, hi in a["pad_width"]))
    f["transpose_a"] = float(bool(a.get("transpose_a", False)))
    f["transpose_b"] = float(bool(a.get("transpose_b", False)))
    rank_in = tensors_in[0].ndim if tensors_in else 0
    if "axis" in a and tensors_in:
        axes = a["axis"] if isinstance(a["axis"], tuple) else (a["axis"],)
        f["n_axes"] = len(axes)
        f["axis_is_last"] = float(rank_in - 1 in axes)
        reduced = 1
        for ax in axes:
            if 0 <= ax < rank_in:
                reduced *= tensors_in[0].shape[ax]
        f["log_reduced"] = _log2p(reduced)
    if op == "transpose" and "axes" in a and a["axes"]:
        f["moves_last_axis"] = float(a["axes"][-1] != len(a["axes"]) - 1)
    return np.fromiter((f[k] for k in FEATURE_NAMES), dtype=np.float32, count=len(FEATURE_NAMES))


def instance_features(inst: OpInstance) -> np.ndarray:
    return features(inst.op, inst.attrs, inst.input_types, inst.out_type)


def feature_matrix(instances: Sequence[OpInstance]) -> np.ndarray:
    if not instances:
        return np.zeros((0, len(FEATURE_NAMES)), dtype=np.float32)
    return np.stack([instance_features(i) for i in instances])


@dataclass
class TrainReport:
    """Held-out accuracy of a training run (None where the data were too few to split)."""

    n_rows: int
    n_train: int
    n_test: int
    median_ape: float | None  # median |pred - measured| / measured on the held-out rows
    mean_ape: float | None
    r2_log: float | None  # R² of log-time on the held-out rows

    def __str__(self) -> str:
        if self.n_test == 0:
            return f"trained on {self.n_rows} rows (too few for a held-out split)"
        return (f"trained on {self.n_rows} rows; held-out {self.n_test}: median abs error "
                f"{100 * self.median_ape:.1f}%, mean abs error {100 * self.mean_ape:.1f}%, "
                f"R² (log-time) {self.r2_log:.3f}")


DEFAULT_PARAMS = dict(objective="reg:squarederror", eta=0.05, max_depth=6, subsample=0.85,
                      colsample_bytree=0.85, min_child_weight=1.0, reg_lambda=1.0, nthread=1,
                      tree_method="hist", seed=0)


class TreeEnsemble:
    """An XGBoost regression forest evaluated with numpy, read from XGBoost's JSON model.

    Prediction never calls into libxgboost: TVM loads its runtime with
    RTLD_GLOBAL, and libxgboost's data-parsing entry points (DMatrix,
    inplace_predict) then crash in a process that imported TVM first. All
    trees advance one level per step, vectorized over trees and rows.
    """

    def __init__(self, model: dict):
        learner = model["learner"]
        self.base = float(str(learner["learner_model_param"]["base_score"]).strip("[]"))
        trees = learner["gradient_booster"]["model"]["trees"]
        # All trees in flat arrays; a node's children are global indices, and a
        # leaf is its own child, so every row can take `depth` steps blindly.
        left, right, feat, cond, roots = [], [], [], [], []
        for t in trees:
            off = len(left)
            roots.append(off)
            lc, rc = t["left_children"], t["right_children"]
            for i in range(len(lc)):
                leaf = lc[i] < 0
                left.append(off + i if leaf else off + lc[i])
                right.append(off + i if leaf else off + rc[i])
            feat += [0 if lc[i] < 0 else t["split_indices"][i] for i in range(len(lc))]
            cond += t["split_conditions"]
        self.left = np.asarray(left, dtype=np.int64)
        self.right = np.asarray(right, dtype=np.int64)
        self.feat = np.asarray(feat, dtype=np.int64)
        self.cond = np.asarray(cond, dtype=np.float32)  # split threshold, or the leaf's value
        self.roots = np.asarray(roots, dtype=np.int64)
        self.depth = self._max_depth()

    def _max_depth(self) -> int:
        depth, frontier = 0, self.roots
        while True:
            inner = frontier[self.left[frontier] != frontier]
            if len(inner) == 0:
                return depth
            frontier = np.concatenate([self.left[inner], self.right[inner]])
            depth += 1

    def predict(self, X: np.ndarray) -> np.ndarray:
        """The margin (here: log-seconds) per row of the float32 feature matrix ``X``."""
        X = np.ascontiguousarray(X, dtype=np.float32)
        n, nf = X.shape
        if len(self.roots) == 0:
            return np.full(n, self.base)
        flat = X.ravel()
        row_off = (np.arange(n, dtype=np.int64) * nf)[None, :]
        node = np.broadcast_to(self.roots[:, None], (len(self.roots), n)).copy()
        for _ in range(self.depth):
            v = flat.take(self.feat.take(node) + row_off)
            node = np.where(v < self.cond.take(node), self.left.take(node), self.right.take(node))
        return self.base + self.cond.take(node).astype(np.float64).sum(axis=0)


def _ensemble_predict(model_json: str, X: np.ndarray) -> np.ndarray:
    return TreeEnsemble(json.loads(model_json)).predict(X)


def _train_core(X: np.ndarray, y: np.ndarray, holdout: float, seed: int, rounds: int,
                params: dict, offset: np.ndarray | None = None) -> tuple[str, dict]:
    """Fit (and evaluate on a held-out split); returns (XGBoost JSON model, report fields).
    ``y + offset`` is log-seconds (``offset``: the log baseline), for the R² of log-time."""
    import xgboost as xgb

    def fit(Xs, ys) -> str:
        booster = xgb.train(params, xgb.DMatrix(Xs, label=ys), num_boost_round=rounds)
        return bytes(booster.save_raw("json")).decode()

    n = len(y)
    n_test = int(round(holdout * n)) if n >= 10 else 0
    report = dict(n_rows=n, n_train=n, n_test=0, median_ape=None, mean_ape=None, r2_log=None)
    if n_test:
        perm = np.random.default_rng(seed).permutation(n)
        test, train = perm[:n_test], perm[n_test:]
        pred = _ensemble_predict(fit(X[train], y[train]), X[test])
        ape = np.abs(np.exp(pred - y[test]) - 1.0)
        ss_res = float(np.sum((pred - y[test]) ** 2))
        logt = y[test] + (offset[test] if offset is not None else 0.0)
        ss_tot = float(np.sum((logt - logt.mean()) ** 2))
        r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 0.0
        report.update(n_train=len(train), n_test=n_test, median_ape=float(np.median(ape)),
                      mean_ape=float(np.mean(ape)), r2_log=r2)
    return fit(X, y), report


_TRAIN_CHILD = """
import json, sys
import numpy as np
from relay_eqsat.cost.learned import _train_core
data = np.load(sys.argv[1])
args = json.load(open(sys.argv[2]))
model, report = _train_core(data["X"], data["y"], args["holdout"], args["seed"], args["rounds"], args["params"],
                            data["offset"])
json.dump({"model": model, "report": report}, open(sys.argv[3], "w"))
"""


def _train_isolated(X: np.ndarray, y: np.ndarray, holdout: float, seed: int, rounds: int,
                    params: dict, offset: np.ndarray) -> tuple[str, dict]:
    """``_train_core`` here, or in a fresh interpreter when TVM is loaded
    (XGBoost's native library and TVM's runtime do not share a process here,
    see TreeEnsemble): the arrays go through a temporary .npz file, the child
    is ``python -c`` (it imports neither TVM nor the caller's ``__main__``)."""
    if "tvm" not in sys.modules:
        return _train_core(X, y, holdout, seed, rounds, params, offset)
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [package_root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    with tempfile.TemporaryDirectory(prefix="relay-eqsat-train-") as tmp:
        data, args, out = (os.path.join(tmp, n) for n in ("data.npz", "args.json", "out.json"))
        np.savez(data, X=X, y=y, offset=offset)
        with open(args, "w") as f:
            json.dump({"holdout": holdout, "seed": seed, "rounds": rounds, "params": params}, f)
        proc = subprocess.run([sys.executable, "-c", _TRAIN_CHILD, data, args, out], env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"training the cost model failed (exit {proc.returncode}): "
                               f"{proc.stderr.strip()[-2000:]}")
        with open(out) as f:
            res = json.load(f)
    return res["model"], res["report"]


def _fit_epilogue(groups: Sequence[tuple[OpInstance, float]],
                  kernels: Sequence[tuple[OpInstance, float]]) -> tuple[dict[str, float], dict]:
    """`relay_eqsat.cost.groups.fit_epilogue` on the measured groups (the seconds each epilogue
    adds) whose anchor was measured alone too (among ``kernels``: the fit's weights)."""
    from .groups import fit_epilogue, group_anchor  # groups builds on the cost model

    alone = {inst.key(): t for inst, t in kernels}
    rows = []
    for inst, t in groups:
        ta = alone.get(group_anchor(inst).key())
        if ta is not None:
            rows.append((inst, t, ta))
    return fit_epilogue(rows)


class LearnedCostModel:
    """An XGBoost regressor of log-seconds for one target and backend."""

    def __init__(self, model: dict, meta: dict):
        """``model``: XGBoost's JSON model (parsed); ``meta``: target, backend, report..."""
        self.model = model
        self.meta = meta
        self.ensemble = TreeEnsemble(model)
        self.source: Path | None = None  # the file it was loaded from (`load`)

    @property
    def target(self) -> str:
        return self.meta["target"]

    @property
    def backend(self) -> str:
        return self.meta["backend"]

    @property
    def device(self) -> str:
        """The device its measurements were taken on (``''``: not a remote device)."""
        return self.meta.get("device", "")

    @property
    def report(self) -> TrainReport | None:
        r = self.meta.get("report")
        return TrainReport(**r) if r else None

    # -- training ----------------------------------------------------------------
    @classmethod
    def train(cls, samples: Sequence[tuple[OpInstance, float]], target: str, backend: str,
              holdout: float = 0.2, seed: int = 0, rounds: int = 400,
              params: dict | None = None, device: str = "") -> tuple["LearnedCostModel", TrainReport]:
        """Fit on (instance, seconds) samples; report the error on a random ``holdout`` split.
        ``device``: the device the samples were measured on (``''``: this machine; another is
        kept in the metadata).

        The split is evaluated with a model fit on the rest; the returned model
        is then refit on every sample. Needs at least 10 samples for a split.
        Fused-group samples (:data:`GROUP_OP`: the seconds an epilogue adds) are
        not kernels: they fit the per-op epilogue costs stored in the metadata
        (``epilogue``, ``epilogue_fit``; `relay_eqsat.cost.groups.fit_epilogue`); the
        matrix-vector products and the stream probes (:data:`STREAM_OP`, not kernels either)
        give ``weight_rates`` (`relay_eqsat.cost.streams.weight_rates`).
        """
        groups = [s for s in samples if s[0].op == GROUP_OP]
        rates = weight_rates(samples)
        samples = [s for s in samples if s[0].op not in (GROUP_OP, STREAM_OP)]
        if not samples:
            raise ValueError("no samples to train on")
        p = dict(DEFAULT_PARAMS, **(params or {}))
        p["seed"] = seed
        insts = [s[0] for s in samples]
        X = feature_matrix(insts)
        secs = np.array([s[1] for s in samples], dtype=np.float64)
        if not np.all(secs > 0):
            raise ValueError("measured seconds must be positive")
        # the trees learn log(measured / roofline): the roofline carries the scale, so
        # kernels smaller or larger than any measured one keep a sensible size
        log_base = np.log(_baseline_of(X, lane_efficiencies(insts, simd_lanes(target))))
        model_json, rep = _train_isolated(X, np.log(secs) - log_base, holdout, seed, rounds, p, log_base)
        report = TrainReport(**rep)
        meta = dict(target=normalize_target(target), backend=backend, feature_version=FEATURE_VERSION,
                    n_features=len(FEATURE_NAMES), rounds=rounds, report=rep, baseline=BASELINE)
        if device:
            meta["device"] = device
        if rates is not None:
            meta["weight_rates"] = rates
        if groups:  # what each element-wise op adds to the kernel it fuses into
            coefs, fit = _fit_epilogue(groups, samples)
            if coefs:
                meta["epilogue"] = coefs
            meta["epilogue_fit"] = fit
        return cls(json.loads(model_json), meta), report

    @classmethod
    def train_from_cache(cls, cache: CostCache, target: str, backend: str, device: str = "", **kw):
        """Fit on every measurement the cache holds for (target, backend) on ``device``."""
        samples = [(r.instance, r.seconds) for r in cache.rows(target, backend, device=device)]
        if not samples:
            on = f" on device {device!r}" if device else ""
            raise ValueError(f"the cache {cache.path} has no measurements for {target!r} / {backend}{on}")
        return cls.train(samples, target, backend, device=device, **kw)

    # -- prediction -----------------------------------------------------------------
    def predict(self, instances: Sequence[OpInstance], target: str | None = None) -> np.ndarray:
        """Predicted seconds per instance on ``target`` (default: the one the model was
        trained on; its SIMD lanes decide the baseline's lane efficiency)."""
        if not instances:
            return np.zeros(0)
        X = feature_matrix(instances)
        t = np.exp(self.ensemble.predict(X))
        kind = self.meta.get("baseline")
        if kind in (BASELINE, BASELINE_V4, BASELINE_V3, BASELINE_V2):
            lanes = simd_lanes(target if target is not None else self.target)
            return t * _baseline_of(X, lane_efficiencies(instances, lanes, kind))
        return t * _baseline_of(X) if kind == BASELINE_V1 else t

    def predict_one(self, op: str, attrs: Attrs, input_types: Sequence[Type], out_type: Type,
                    target: str | None = None) -> float:
        return float(self.predict([OpInstance(op, attrs, tuple(input_types), out_type)], target)[0])

    # -- files ------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Write XGBoost's JSON model with the metadata as its ``relay_eqsat`` attribute."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        model = dict(self.model)
        learner = dict(model["learner"])
        learner["attributes"] = dict(learner.get("attributes") or {}, relay_eqsat=json.dumps(self.meta))
        model["learner"] = learner
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(model))
        os.replace(tmp, path)  # atomic: a reader never sees half a model
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "LearnedCostModel":
        model = json.loads(Path(path).read_text())
        raw = (model.get("learner", {}).get("attributes") or {}).get("relay_eqsat")
        if raw is None:
            raise ValueError(f"{path} is not a relay-eqsat cost model (no metadata)")
        meta = json.loads(raw)
        if meta.get("feature_version") != FEATURE_VERSION or meta.get("n_features") != len(FEATURE_NAMES):
            raise ValueError(f"{path} was trained on feature version {meta.get('feature_version')}, "
                             f"this is version {FEATURE_VERSION}: retrain it")
        loaded = cls(model, meta)
        loaded.source = Path(path)
        return loaded


def model_dir() -> Path:
    """Where models trained here are saved: ``$RELAY_EQSAT_MODEL_DIR`` or the user cache."""
    env = os.environ.get(ENV_MODEL_DIR)
    return Path(env).expanduser() if env else cache_dir() / "models"


def model_filename(target: str, backend: str, device: str = "") -> str:
    """``<backend>__<target>.json``; for another device than this machine
    ``<backend>__<target>__<device slug>.json`` (`cache.device_slug`)."""
    if device:
        return f"{backend}__{target_slug(target)}__{device_slug(device)}.json"
    return f"{backend}__{target_slug(target)}.json"


def default_model_path(backend: str) -> Path:
    """The shipped model that serves any target of ``backend``."""
    return SHIPPED_DIR / f"default-{backend}.json"


def _model_files(target: str, backend: str | None, device: str = "") -> Iterable[Path]:
    """Existing model files for (target, backend), best first, each once: trained here, shipped
    for this target, shipped for the nearest other CPU (:mod:`relay_eqsat.cost.nearest`: same
    SIMD lanes, same vendor first), then the shipped default of the backend. For another
    ``device`` than this machine only the model trained here on that device's measurements."""
    backends = [backend] if backend else list(target_backends(target))
    seen: set[Path] = set()

    def candidates():
        if device:
            for b in backends:
                yield model_dir() / model_filename(target, b, device)
            return
        for b in backends:
            for d in (model_dir(),) if ignore_shipped() else (model_dir(), SHIPPED_DIR):
                yield d / model_filename(target, b)
        for b in () if ignore_shipped() else backends:
            others = shipped_model_targets(SHIPPED_DIR, b)
            own = others.get(normalize_target(target))
            if own is not None:  # the shipped file for this very target (its own, else a default trained on it)
                yield own
            for t in nearest.rank(target, list(others), host=nearest.host_vendor()):
                yield others[t]
        for b in backends:
            yield default_model_path(b)
    for p in candidates():
        if p not in seen and p.is_file():
            seen.add(p)
            yield p


@functools.lru_cache(maxsize=None)
def shipped_model_targets(directory: Path, backend: str) -> dict[str, Path]:
    """The targets the models shipped in ``directory`` for ``backend`` were trained on -> their
    files, a target's own file before the backend's default trained on the same target (read from
    each model's metadata, once)."""
    files = [default_model_path(backend)] if directory == SHIPPED_DIR else []
    files = sorted(directory.glob(f"{backend}__*.json")) + [p for p in files if p.is_file()]
    out: dict[str, Path] = {}
    for p in files:
        try:
            raw = (json.loads(p.read_text()).get("learner", {}).get("attributes") or {}).get("relay_eqsat")
            meta = json.loads(raw) if raw else {}
        except (OSError, ValueError) as e:
            log.warning("relay-eqsat cost model: %s unreadable (%s)", p, e)
            continue
        if meta.get("backend", backend) == backend and meta.get("target"):
            out.setdefault(normalize_target(meta["target"]), p)
    return out


def find_model(target: str, backend: str | None, device: str = "") -> Path | None:
    """The best model file for (target, backend), in :func:`_model_files`' order: trained here,
    shipped for this target, shipped for the nearest other CPU, then the backend's default (for
    another ``device``: its own model trained here, or None)."""
    return next(iter(_model_files(target, backend, device)), None)


def load_model(target: str, backend: str | None, device: str = "") -> LearnedCostModel | None:
    """The best available model for (target, backend) on ``device`` (``''``: this machine; another
    device has only its own model trained here), or None. A model of another feature version
    (trained here before an upgrade) is passed over with a warning to retrain it."""
    for p in _model_files(target, backend, device):
        try:
            return LearnedCostModel.load(p)
        except ValueError as e:
            log.warning("relay-eqsat cost model: %s; using the next model available", e)
    return None
