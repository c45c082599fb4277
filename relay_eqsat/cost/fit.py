"""Fitting the cost model's fusion weights to measured whole-graph runtimes: ``fit_fusion``
(non-negative least squares on relative error, its prior chosen by leave-one-family-out from
``PRIOR_GRID``). Every weight of ``FusionRule`` is a coefficient of a linear model of
whole-graph time (:mod:`.base`), so the fit is linear."""
from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Sequence

import numpy as np

from ..graph import TensorGraph
from .base import CostModel, FitReport, FusionRule


def _nnls(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """min ||Ax - b|| subject to x >= 0, by trying every support (few columns)."""
    k = A.shape[1]
    best, best_err = np.zeros(k), float(np.sum(b ** 2))
    for r in range(1, k + 1):
        for support in itertools.combinations(range(k), r):
            cols = list(support)
            x_s, *_ = np.linalg.lstsq(A[:, cols], b, rcond=None)
            if np.any(x_s < 0):
                continue
            x = np.zeros(k)
            x[cols] = x_s
            err = float(np.sum((A @ x - b) ** 2))
            if err < best_err - 1e-15:
                best, best_err = x, err
    return best


#: the prior strengths `fit_fusion` chooses from, by leave-one-family-out error
PRIOR_GRID = (0.01, 0.03, 0.1, 0.3, 1.0)


#: the strength with fewer than three families to choose by
DEFAULT_PRIOR = 0.01


ALL_TERMS = ("anchor", "fused", "fused_read", "injective", "weights", "launch", "conv", "standalone", "epilogue")


#: the weights only whole-model times give: how much of a kernel's time alone it keeps in a model (an
#: element-wise op fused into its producer, an injective op, a convolution whose layout conversions the
#: model does not repeat, the executor's per-kernel start). The others are measured: an anchor's time
#: alone, a fused activation's seconds, the weight stream where the model measured its rates.
DISCOUNTS = ("fused", "fused_read", "injective", "weights", "launch", "conv", "standalone")


def fit_fusion(model: CostModel, samples: Sequence[tuple[TensorGraph, float]], fit: Sequence[str] | None = None,
               prior_strength: float | None = None, families: Sequence[str] | None = None) -> FitReport:
    """Fit the FusionRule weights named in ``fit`` to measured whole-graph seconds.

    Minimizes the sum of squared relative errors of ``graph_cost`` over the
    (graph, measured seconds) samples, plus ``prior_strength`` times the squared
    relative change of each fitted weight from the model's current one (1 for
    a weight that is 0: a term not used yet), so a few graphs cannot drive a
    weight to a degenerate value; weights
    non-negative; the other weights keep their values. Returns the report; the
    model is not changed (``model.fusion = report.rule`` adopts it).

    ``families``: a label per sample (default: one per graph); a model's sizes are one family.
    The report's leave-one-out predicts each family's graphs with the weights fitted to the
    others'. What is not given is chosen by that leave-one-out error (ties to the simpler:
    fewer weights fitted, the weaker prior), with three families or more: ``prior_strength``
    from ``PRIOR_GRID`` (else ``DEFAULT_PRIOR``), and ``fit`` (else every weight) from every
    weight, every weight but a measured weight stream (the model's ``weight_stream``, at
    face value 1), and the ``DISCOUNTS`` alone. A dozen graphs determine nine weights loosely:
    held out on the Zen 4 zoo, fitting every weight traded the dense layers' weight against the
    fused activations' between BERT's, ViT's and NasRNN's graphs (ViT +21%, NasRNN −25%; the
    discounts alone: +10%, −11%), while on Sapphire Rapids the discounts alone missed BERT by 30%
    (its dense layers run a third slower in the model than alone there).
    """
    if not samples:
        raise ValueError("no graphs to fit on")
    names = FusionRule.TERMS
    rows = np.stack([model.graph_terms(g) for g, _ in samples])
    y = np.array([s for _, s in samples], dtype=np.float64)
    if not np.all(y > 0):
        raise ValueError("measured seconds must be positive")
    labels = list(range(len(samples))) if families is None else list(families)
    if len(labels) != len(samples):
        raise ValueError("families needs one label per sample")
    folds = [np.array([f != g for f in labels]) for g in dict.fromkeys(labels)] if len(set(labels)) >= 3 else []
    current = model.fusion.vector()
    measured_stream = model.weight_stream is not None
    if fit is not None:
        structures = [tuple(fit)]
    else:
        structures = [tuple(t for t in DISCOUNTS if not (measured_stream and t == "weights"))]
        if measured_stream:
            structures.append(tuple(t for t in ALL_TERMS if t != "weights"))
        structures.append(ALL_TERMS)
        if not folds:
            structures = structures[-1:]

    def setup(structure: Sequence[str]) -> tuple[np.ndarray, list[int]]:
        w0 = current.copy()
        if measured_stream and "weights" not in structure:
            w0[names.index("weights")] = 1.0  # the measured stream at face value
        # a term no graph has (the epilogue term without a fit of it) keeps its weight: nothing decides it
        return w0, [names.index(t) for t in structure if rows[:, names.index(t)].any()]

    def left_out(structure: Sequence[str], prior: float) -> np.ndarray:
        w0, idx = setup(structure)
        err = np.empty(len(samples))
        for keep in folds:
            wi = _fit_weights(rows[keep], y[keep], w0, idx, prior)
            err[~keep] = np.abs(rows[~keep] @ wi / y[~keep] - 1.0)
        return err

    priors = [prior_strength] if prior_strength is not None else (PRIOR_GRID if folds else [DEFAULT_PRIOR])
    # each choice's leave-one-out errors, computed once (none without three families)
    errors = {(st, p): left_out(st, p) for st in structures for p in priors} if folds else {}
    structure, prior_strength = min(errors, key=lambda c: round(float(errors[c].mean()), 12)) if errors \
        else (structures[0], priors[0])
    w0, idx = setup(structure)
    before = np.abs(rows @ current / y - 1.0)
    w = _fit_weights(rows, y, w0, idx, prior_strength)
    rule = replace(model.fusion, **{names[i]: float(w[i]) for i in range(len(names)) if w[i] != current[i]})
    after = np.abs(rows @ w / y - 1.0)
    loo = errors.get((structure, prior_strength))
    return FitReport(rule, float(before.mean()), float(after.mean()), float(after.max()), len(samples),
                     None if loo is None else float(loo.mean()), None if loo is None else float(loo.max()),
                     prior_strength, tuple(names[i] for i in idx))


def _fit_weights(rows: np.ndarray, y: np.ndarray, w0: np.ndarray, idx: Sequence[int],
                 prior_strength: float) -> np.ndarray:
    """``w0`` with the weights at ``idx`` fitted (see `fit_fusion`) to the graphs' term rows and seconds."""
    fixed = [i for i in range(len(w0)) if i not in idx]
    A = rows[:, idx] / y[:, None]
    b = 1.0 - rows[:, fixed] @ w0[fixed] / y
    if prior_strength > 0:
        # the prior is centred on the current weight, or on 1 (the term at face
        # value) for a term the model does not use yet
        centre = np.where(w0[idx] > 0, w0[idx], 1.0)
        scale = np.sqrt(prior_strength) / centre
        A = np.vstack([A, np.diag(scale)])
        b = np.concatenate([b, scale * centre])
    w = w0.copy()
    w[idx] = _nnls(A, b)
    return w
