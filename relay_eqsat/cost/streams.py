"""How fast a whole model reads its weights: the stream a kernel timed alone never pays.

A kernel measured alone runs in a loop with its weight cached after the first run; in a
model each weight is read once per inference, from memory when the model's weights exceed
the caches. ``relay_eqsat.cost.base`` adds that difference per weight byte (the ``weights``
term). Two sources give the price of a byte:

- ``weight_rates``: from the measured matrix-vector products (dense layers of at most four
  rows: they do nothing but read their weight), the median rate of those with a weight of at
  least ``STREAM_MIN_BYTES`` (streamed from memory even alone) and of those whose weight stays
  cached (``CACHED_BYTES``). Zen 4: 30 and 92 GB/s; Sapphire Rapids: 15 and 30 GB/s.
- **stream probes** (:data:`STREAM_OP`), measured with the model where the target is a CPU: a
  chain of ``layers`` matrix-vector products, each with a weight of its own (together at least
  ``STREAM_MIN_BYTES``), timed whole against one of them timed alone; what a layer adds in the
  chain, per byte of its weight, at a few weight sizes. On the Zen 4 a layer of a chain of 1-MiB
  weights takes 43.5 µs (24 GB/s) against 11.1 µs alone: 31 ps a byte, 26 at 4 MiB and 22 at
  16 MiB, where the two rates above give 22.5 for every size. Each weight is a stream of its own
  that the prefetchers start anew (NasRNN's 72 distinct 1-MiB layers, priced by the two rates,
  were predicted 15% fast).

With probes the price of a byte is interpolated between the probes' weight sizes (in log
size), the largest probe's price beyond it, and below the smallest the rates' figure where the
model has them (the probes measure nothing under 1 MiB: a small model's weights, a few hundred
KiB in all, stay cached; priced at the 1-MiB probe's price they pulled the Zen 4 fit's stream
weight to 0.71); without probes it is that one figure, ``1/memory - 1/cache``. A weight of
``STREAM_MIN_BYTES`` or more adds nothing: it streamed when timed alone too.
"""
from __future__ import annotations

import bisect
import math
from typing import Sequence

import numpy as np

from ..graph import Attrs, TensorType
from .instance import STREAM_OP, OpInstance

#: a weight this large streams from memory even when its kernel is timed alone in a loop: larger
#: than the last-level cache of the CPUs measured (Sapphire Rapids' 2-core VMs see 105 MB; their
#: 48-96 MiB matrix-vector products still ran at twice the speed of the larger ones)
STREAM_MIN_BYTES = 128 << 20
#: weights this size stay cached between the timings of a kernel run alone (L2 or L3)
CACHED_BYTES = (1 << 20, 8 << 20)
#: the probes' weight sizes (square float32 weights of 512, 1,024 and 2,048 columns)
PROBE_BYTES = (1 << 20, 4 << 20, 16 << 20)


def probe_instance(weight_bytes: int, chain_bytes: int = STREAM_MIN_BYTES) -> OpInstance:
    """The stream probe of square float32 weights of ``weight_bytes``: a chain of
    ``chain_bytes / weight_bytes`` one-row dense layers (at least two)."""
    n = math.isqrt(weight_bytes // 4)
    if n < 1 or 4 * n * n != weight_bytes:
        raise ValueError(f"a stream probe's weight is a square float32 matrix, not {weight_bytes} bytes")
    layers = max(2, -(-chain_bytes // weight_bytes))
    return OpInstance.make(STREAM_OP, Attrs(layers=layers), (TensorType((1, n)), TensorType((n, n))))


def probe_instances() -> list[OpInstance]:
    """The probes measured with a CPU's model (`PROBE_BYTES`)."""
    return [probe_instance(b) for b in PROBE_BYTES]


def probe_layer(inst: OpInstance) -> tuple[TensorType, TensorType]:
    """The operand types of one layer of the probe ``inst`` (activations, weight)."""
    if inst.op != STREAM_OP or len(inst.input_types) != 2:
        raise ValueError(f"not a stream probe: {inst}")
    x, w = inst.input_types
    if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[1] or w.shape[0] != w.shape[1]:
        raise ValueError(f"a stream probe chains square dense layers: {inst}")
    return x, w


def probe_dense(inst: OpInstance) -> OpInstance:
    """One layer of the probe ``inst`` as the kernel measured alone (a model's ``nn.dense``)."""
    return OpInstance.make("nn.dense", Attrs(out_dtype=""), probe_layer(inst))


def weight_rates(samples: Sequence[tuple[OpInstance, float]]) -> dict | None:
    """The weight-stream figures of measured ``samples`` (None without any): ``memory`` and
    ``cache``, bytes per second of the matrix-vector products with weights streamed alone and
    cached (both or neither), and ``stream``, [weight bytes, seconds per byte] of each stream
    probe in the samples (what a layer of that weight size adds per byte in a chain of distinct
    weights), by size."""
    memory, cache, stream = [], [], []
    for inst, secs in samples:
        if inst.op == STREAM_OP:
            w = probe_layer(inst)[1]
            if math.isfinite(secs):
                stream.append([w.nbytes, max(0.0, secs) / w.nbytes])
            continue
        if inst.op != "nn.dense" or len(inst.input_types) != 2 or secs <= 0:
            continue
        x, w = inst.input_types
        if not (isinstance(x, TensorType) and isinstance(w, TensorType) and x.ndim == 2 and x.shape[0] <= 4):
            continue
        if w.nbytes >= STREAM_MIN_BYTES:
            memory.append(w.nbytes / secs)
        elif CACHED_BYTES[0] <= w.nbytes <= CACHED_BYTES[1]:
            cache.append(w.nbytes / secs)
    rates: dict = {}
    if memory and cache:
        rates.update(memory=float(np.median(memory)), cache=float(np.median(cache)))
    if stream:
        rates["stream"] = sorted(stream)
    return rates or None


class StreamPrice:
    """Seconds per weight byte a whole model adds to a kernel timed alone, by weight size."""

    def __init__(self, rates: dict):
        """``rates``: `weight_rates`' figures (a model's ``weight_rates`` metadata)."""
        probes = rates.get("stream") or []
        self.sizes = [float(b) for b, _ in probes]
        self.prices = [float(p) for _, p in probes]
        flat = "memory" in rates and "cache" in rates
        if not probes and not flat:
            raise ValueError("weight rates need the probes or both the memory and the cache rate")
        self.flat = max(0.0, 1.0 / rates["memory"] - 1.0 / rates["cache"]) if flat else None

    def __call__(self, nbytes: int) -> float:
        """Seconds per byte for a weight of ``nbytes`` (0 from ``STREAM_MIN_BYTES`` on)."""
        if nbytes >= STREAM_MIN_BYTES:
            return 0.0
        if not self.sizes or (nbytes < self.sizes[0] and self.flat is not None):
            return self.flat
        i = bisect.bisect_left(self.sizes, nbytes)
        if i == 0:
            return self.prices[0]
        if i == len(self.sizes):
            return self.prices[-1]
        lo, hi = math.log(self.sizes[i - 1]), math.log(self.sizes[i])
        f = (math.log(max(nbytes, 1)) - lo) / (hi - lo)
        return self.prices[i - 1] + f * (self.prices[i] - self.prices[i - 1])

    def seconds(self, weight_bytes: Sequence[int]) -> float:
        """Seconds streaming weights of these sizes adds."""
        return sum(n * self(n) for n in weight_bytes)
