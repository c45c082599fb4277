"""Analytic operator costs: a roofline estimate, the fallback when nothing is measured.

A kernel takes ``max(flops / peak_flops, bytes / bandwidth) + launch_overhead``
seconds, with FLOPs and bytes (inputs read plus output written) from the
operator table. On an x86 CPU a convolution's time is divided by the lane
efficiency of the channel blocks TVM's schedule gives it (``simd.py``: 58
channels run 2-wide on a 16-lane CPU). For the compute-bound dense
convolutions that is the peak divided by it; TVM's depthwise kernels run far
below the roofline's memory bound and narrow blocks slow them too, as
measured, so the whole roofline time is scaled. The constants are per target
kind: defaults below, overridden by constructor arguments, by the environment
(``RELAY_EQSAT_PEAK_GFLOPS``, ``RELAY_EQSAT_BANDWIDTH_GBS``,
``RELAY_EQSAT_LAUNCH_US``) or by :meth:`AnalyticModel.calibrate`, which times a
numpy matmul and a large copy on this machine.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np

from .. import ops
from ..graph import Attrs, TensorType, TupleType, Type
from .simd import schedule_efficiency, simd_lanes

# Achievable (not theoretical) figures. cpu: measured on the development
# machine (2 Zen 4 cores: numpy sgemm ~170 GFLOP/s, copy ~21 GB/s); cuda: an
# A100/H100-class GPU with cuDNN fp32.
DEFAULTS = {
    "cpu": dict(peak_flops=150e9, bandwidth=20e9, launch_overhead=3e-6),
    "cuda": dict(peak_flops=15e12, bandwidth=1.5e12, launch_overhead=5e-6),
}


def target_kind(target: str | None) -> str:
    """``"cuda"`` for GPU targets, ``"cpu"`` for everything else (llvm, c)."""
    kind = str(target).split()[0] if target else "llvm"
    return "cuda" if kind in ("cuda", "nvptx", "rocm", "vulkan", "opencl") else "cpu"


def type_bytes(t: Type) -> int:
    return t.nbytes if isinstance(t, (TensorType, TupleType)) else 0


def op_flops_bytes(op: str, attrs: Attrs, input_types: Sequence[Type], out_type: Type) -> tuple[int, int]:
    """(FLOPs, bytes moved) from the operator table; an op it does not know
    counts one FLOP per output element and its inputs read plus output written."""
    nbytes = sum(type_bytes(t) for t in input_types) + type_bytes(out_type)
    if op not in ops.OPS:
        out_elems = out_type.size if isinstance(out_type, TensorType) else 0
        return out_elems, nbytes
    try:
        return ops.flops(op, attrs, input_types, out_type), ops.bytes_moved(op, attrs, input_types, out_type)
    except (KeyError, ValueError, TypeError, IndexError):
        return 0, nbytes


@dataclass(frozen=True)
class AnalyticModel:
    """Roofline kernel costs in seconds."""

    peak_flops: float = DEFAULTS["cpu"]["peak_flops"]
    bandwidth: float = DEFAULTS["cpu"]["bandwidth"]
    launch_overhead: float = DEFAULTS["cpu"]["launch_overhead"]
    #: fp32 SIMD lanes of the target (``simd.simd_lanes``); None: no lane effect
    lanes: int | None = None

    @classmethod
    def for_target(cls, target: str | None = None, **overrides) -> "AnalyticModel":
        """Defaults for the target's kind, then the environment, then ``overrides``."""
        params = dict(DEFAULTS[target_kind(target)], lanes=simd_lanes(target))
        env = {"RELAY_EQSAT_PEAK_GFLOPS": ("peak_flops", 1e9),
               "RELAY_EQSAT_BANDWIDTH_GBS": ("bandwidth", 1e9),
               "RELAY_EQSAT_LAUNCH_US": ("launch_overhead", 1e-6)}
        for var, (field, scale) in env.items():
            if os.environ.get(var):
                params[field] = float(os.environ[var]) * scale
        params.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**params)

    def kernel_cost(self, op: str, attrs: Attrs, input_types: Sequence[Type], out_type: Type) -> float:
        """Seconds for one standalone kernel of ``op``."""
        flops, nbytes = op_flops_bytes(op, attrs, input_types, out_type)
        eff = schedule_efficiency(op, attrs, input_types, out_type, self.lanes)
        return self.roofline(flops, nbytes, eff)

    def roofline(self, flops: float, nbytes: float, efficiency: float = 1.0) -> float:
        """``max(flops / peak, bytes / bandwidth) / efficiency + launch overhead``."""
        return max(flops / self.peak_flops, nbytes / self.bandwidth) / efficiency + self.launch_overhead

    def bytes_cost(self, nbytes: float) -> float:
        """Seconds to move ``nbytes`` through memory (no launch overhead)."""
        return nbytes / self.bandwidth

    def calibrate(self, size: int = 1024, copy_mib: int = 64, repeats: int = 5) -> "AnalyticModel":
        """A copy with peak FLOP/s and bandwidth measured here with numpy (about a second)."""
        rng = np.random.default_rng(0)
        a = rng.standard_normal((size, size), dtype=np.float32)
        b = rng.standard_normal((size, size), dtype=np.float32)
        a @ b
        best = float("inf")
        for _ in range(repeats):
            t = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - t)
        peak = 2.0 * size ** 3 / best
        x = np.ones(copy_mib * (1 << 20) // 4, dtype=np.float32)
        y = np.empty_like(x)
        np.copyto(y, x)
        best = float("inf")
        for _ in range(repeats):
            t = time.perf_counter()
            np.copyto(y, x)
            best = min(best, time.perf_counter() - t)
        bw = 2.0 * x.nbytes / best
        return replace(self, peak_flops=peak, bandwidth=bw)
