"""Numpy helpers of the reference semantics: float64 accumulation, the cast back, per-axis vectors."""
from __future__ import annotations

import numpy as np


def cast(value, dtype) -> np.ndarray:
    return np.asarray(value).astype(dtype, copy=False)


def f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def along(v, axis: int, ndim: int) -> np.ndarray:
    """A 1-d array shaped to broadcast along ``axis`` of an ``ndim``-d tensor."""
    return np.reshape(v, [-1 if i == axis else 1 for i in range(ndim)])
