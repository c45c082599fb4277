"""One operator instance built and timed alone: the kernels a ``Measurer``'s worker measures.

- ``tvm-llvm`` / ``tvm-cuda``: the op as a one-op Relay function (:func:`relay_function`),
  built by :func:`~relay_eqsat.passes.runtime.build.build` and timed by
  :func:`~relay_eqsat.passes.runtime.timing.time_module`, less its activation layout transforms.
- ``torch-cuda``: the equivalent PyTorch op, timed with CUDA events.

Also whole zoo models timed the same way (:func:`time_zoo_model`). Runs in the worker
process (:mod:`relay_eqsat.passes.runtime.measure_worker`).
"""
from __future__ import annotations

import contextlib
import fcntl
import statistics
import time

import numpy as np
import tvm

from relay_eqsat import ops
from relay_eqsat.cost.cache import POOL_OPS
from relay_eqsat.cost.groups import group_anchor, group_graph
from relay_eqsat.cost.instance import GROUP_OP, STREAM_OP, OpInstance
from relay_eqsat.cost.measure import BackendUnavailable, MeasureConfig
from relay_eqsat.cost.simd import output_block, simd_lanes
from relay_eqsat.cost.streams import probe_dense, probe_layer
from relay_eqsat.graph import TensorGraph, TensorType

from relay_eqsat.passes import zoo
from relay_eqsat.passes.relay.backend import to_relay
from .build import build, module_library, set_inputs
from .records import Hits, TuningRecords, load_records
from .remote import Place
from .timing import debug_overhead, layout_transform_seconds, node_times, time_module
from .torch_ops import torch_closure

def _input_array(t, rng, fan_in: int | None = None):
    """Random input values: positive floats (no NaN, no denormals), small ints. ``fan_in``: the
    operand is a product's constant (a dense or convolution weight): zero-mean normal values scaled
    by one over the root of the product's reduction length, as a model's weights are, so the
    product's output is of order one (see :func:`product_fan_in`)."""
    if np.issubdtype(np.dtype(t.dtype), np.integer):
        return rng.integers(0, 4, size=t.shape).astype(t.dtype)
    if np.dtype(t.dtype) == np.bool_:
        return rng.integers(0, 2, size=t.shape).astype(bool)
    if fan_in is not None:
        return (rng.standard_normal(t.shape) / np.sqrt(fan_in)).astype(t.dtype)
    return rng.uniform(0.5, 1.5, size=t.shape).astype(t.dtype)


def product_fan_in(op: str, attrs, input_types, out_type) -> int | None:
    """The reduction length of ``op`` when it is a product (dense, matmul, convolution: an
    out-fusable op that does arithmetic), else None. Its constant operands are drawn zero-mean
    and scaled by it: with positive weights a product's output grows with its reduction length
    (about 1,000 for BERT's dense layers), which drives a fused ``erf``, ``tanh`` or ``sigmoid``
    onto its saturated fast path; measured so, BERT's fused GELU cost 3.7 ns per element where
    it costs 15 on O(1) values (Zen 4)."""
    d = ops.get(op)
    if d.pattern != "out_fusable" or d.fusion != "anchor":
        return None  # batch_norm is out-fusable in TVM but a scale and shift (and returns a tuple)
    elements = int(np.prod(out_type.shape)) if out_type.shape else 1
    f = ops.flops(op, attrs, input_types, out_type)
    return max(1, f // (2 * elements)) if f > 0 and elements else None


def relay_function(inst: OpInstance, seed: int = 0):
    """(relay.Function, params, runtime inputs) computing ``inst`` alone.

    A one-op TensorGraph goes through the project's one Relay backend
    (:func:`~relay_eqsat.passes.relay.backend.to_relay`). Every operand is a parameter:
    weight slots are returned in ``params`` (bound at build time), the others
    in the runtime inputs. A fused group (:data:`GROUP_OP`) is built from its nodes, the operands
    constant in its model bound as weights. For batch_norm only field 0 is returned, as in
    inference, so SimplifyInference turns it into a scale and shift.
    """
    rng = np.random.default_rng(seed)
    if inst.op == STREAM_OP:  # a chain of dense layers, each with a weight of its own
        x, w = probe_layer(inst)
        g = TensorGraph()
        y = g.var("x0", x.shape, x.dtype)
        params = {}
        for i in range(int(inst.attrs["layers"])):
            params[f"p{i}"] = _input_array(w, rng, w.shape[1])
            y = g.add("nn.dense", [y, g.var(f"p{i}", w.shape, w.dtype)], probe_dense(inst).attrs)
        g.set_output(y)
        return to_relay(g), params, {"x0": _input_array(x, rng)}
    if inst.op == GROUP_OP:  # an anchor and its epilogue: the model's constants bound as weights
        g = group_graph(inst)
        anchor = g.nodes[len(g.inputs)]  # the group's first node after its inputs
        fan_in = product_fan_in(anchor.op, anchor.attrs, [g.nodes[j].type for j in anchor.inputs], anchor.type)
        params, inputs = {}, {}
        for i in g.inputs:
            n = g.nodes[i]
            name = n.attrs["name"]
            weight = name.startswith("p")
            (params if weight else inputs)[name] = _input_array(
                n.type, rng, fan_in if weight and i in anchor.inputs else None)
        return to_relay(g), params, inputs
    weights = ops.get(inst.op).weight_slots
    fan_in = product_fan_in(inst.op, inst.attrs, inst.input_types, inst.out_type)
    g = TensorGraph()
    ids, params, inputs = [], {}, {}
    for i, t in enumerate(inst.input_types):
        name = f"p{i}" if i in weights else f"x{i}"
        ids.append(g.var(name, t.shape, t.dtype))
        (params if i in weights else inputs)[name] = _input_array(t, rng, fan_in if i in weights else None)
    out = g.add(inst.op, ids, inst.attrs, type=inst.out_type)
    if inst.op == "nn.batch_norm":
        out = g.add("tuple_get_item", [out], {"index": 0})
    g.set_output(out)
    return to_relay(g), params, inputs


def blocked_pool(inst: OpInstance, lanes: int | None):
    """``relay_function(inst)`` of a pool (``cache.POOL_OPS``) as it runs after a convolution
    on an x86 target of ``lanes`` fp32 lanes: its input packed into the channel blocks the
    convolution hands it (``simd.output_block``), the pool run on the blocks, the output unpacked
    (both layout transforms kernels of their own, left out of the time as a convolution's are).
    In a model the pool's input comes from a convolution, and x86's pools run in the two layouts
    at different speeds: a global average pool of 32 x 112 x 112 channels-first 0.38 ms, on 8-channel
    blocks 0.39 ms; the same average as a 112 x 112 window 0.39 and 0.05 ms (Zen 3). None where the
    op is not such a pool, the target has no lanes (not x86) or the block would be 1 channel."""
    if inst.op not in POOL_OPS or not lanes:
        return None
    block = output_block(inst.input_types[0].shape[1], lanes)
    if block == 1:
        return None
    from tvm import relay

    from relay_eqsat.passes.relay.conversions import FRONTEND

    func, params, inputs = relay_function(inst)
    d, packed = ops.get(inst.op), f"NCHW{block}c"
    x = relay.layout_transform(func.params[0], "NCHW", packed)
    pool = d.conversion(FRONTEND).to_ir({**(d.defaults or {}), **inst.attrs, "layout": packed}, [x],
                                        list(inst.input_types), inst.out_type)
    return relay.Function(list(func.params), relay.layout_transform(pool, packed, "NCHW")), params, inputs


def _overhead_probe() -> OpInstance:
    """A 16-channel 1x1 convolution on 4x4 pixels: x86 builds it as three tiny kernels (the
    convolution between two layout transforms), on which `TVMRunner.debug_overhead` is timed."""
    ins = (TensorType((1, 16, 4, 4), "float32"), TensorType((16, 16, 1, 1), "float32"))
    attrs = ops.normalize_attrs("nn.conv2d", {"channels": 16, "kernel_size": (1, 1)}, list(ins))
    return OpInstance("nn.conv2d", attrs, ins, TensorType((1, 16, 4, 4), "float32"))


OVERHEAD_PROBE = _overhead_probe()


class TVMRunner:
    """Times op instances with TVM for one target: build, run, time, less the activation
    layout transforms AlterOpLayout wraps around x86 convolutions (in a model they cancel
    between consecutive convolutions, so they are not the kernel's cost), each timed by the
    debug executor less that executor's own cost per kernel (:meth:`debug_overhead`). With
    ``records`` (a :class:`~.records.TuningRecords`) every kernel is built under them, and
    ``tuned`` says after each call whether they had a schedule for the kernel measured."""

    def __init__(self, target: str, config: MeasureConfig, place: Place | None = None,
                 timing_lock: str | None = None, records: TuningRecords | None = None):
        self.target = target
        self.config = config
        self.place = place or Place(target)
        self.timing_lock = timing_lock
        self.records = records
        self.tuned: bool | None = None
        self._hits = Hits()
        self._overhead: float | None = None

    @contextlib.contextmanager
    def _timing(self):
        """Hold the lock local workers share while one of them times (none without one)."""
        if self.timing_lock is None:
            yield
            return
        with open(self.timing_lock, "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def __call__(self, inst: OpInstance) -> tuple[float, int]:
        self._hits = Hits()
        try:
            return self._measure(inst)
        finally:
            self.tuned = None if self.records is None else bool(self._hits.found)

    def _measure(self, inst: OpInstance) -> tuple[float, int]:
        if inst.op == GROUP_OP:
            return self.epilogue(inst)
        if inst.op == STREAM_OP:
            return self.stream(inst)
        cfg = self.config
        m, lib, inputs, dev = self._load(inst, blocked=True)
        with self._timing():
            seconds, repeats = time_module(m, dev, cfg.repeat, cfg.number, cfg.min_repeat_ms, cfg.warmup)
            layout = self._layout_seconds(m, lib, dev, inputs)
        return max(seconds - layout, seconds * 0.05), repeats

    def _layout_seconds(self, m, lib, dev, inputs) -> float:
        cfg = self.config
        return layout_transform_seconds(lib, dev, inputs, cfg.repeat, cfg.min_repeat_ms, self.debug_overhead,
                                        module=module_library(m, lib))

    def debug_overhead(self) -> float:
        """Seconds the debug executor's timing adds to each kernel here (`runtime.debug_overhead`),
        found once per runner on a program of tiny kernels: a 16-channel 1x1 convolution on 4x4
        pixels between the two layout transforms AlterOpLayout adds (on a Zen 1 the three time
        2.6 µs in the debug executor and run in 0.72; about 0.6 µs a kernel). Without it a small
        convolution less its layout transforms came out at nothing (the floor: 5% of its time)."""
        if self._overhead is None:
            cfg = self.config
            hits, self._hits = self._hits, Hits()  # the probe is not the kernel measured
            try:
                m, lib, inputs, dev = self._load(OVERHEAD_PROBE)
            finally:
                self._hits = hits
            whole = time_module(m, dev, cfg.repeat, 0, cfg.min_repeat_ms, cfg.warmup)[0]
            times = node_times(lib, dev, inputs, 10, cfg.repeat, max(1, int(round(cfg.min_repeat_ms / 4))),
                               module=module_library(m, lib))
            self._overhead = debug_overhead(times, whole)
        return self._overhead

    def _load(self, inst: OpInstance, blocked: bool = False):
        """(executor with inputs set, built lib, inputs, device) of ``inst``, its records' lookups
        counted in the call's hits; ``blocked``: a pool in the channel blocks a convolution hands it
        on x86 (:func:`blocked_pool`; a fused group's anchor and group stay as they are, both alike)."""
        made = blocked_pool(inst, simd_lanes(self.target)) if blocked else None
        func, params, inputs = made if made is not None else relay_function(inst)
        lib = build(func, params={k: tvm.nd.array(v) for k, v in params.items()}, target=self.target,
                    opt_level=self.config.opt_level, records=self.records, hits=self._hits)
        m = self.place.load(lib)
        set_inputs(m, inputs)
        return m, lib, inputs, self.place.dev

    def stream(self, inst: OpInstance) -> tuple[float, int]:
        """Seconds a layer of a stream probe (`relay_eqsat.cost.streams`) adds in its chain of
        distinct weights over the same dense layer timed alone (its weight cached): the chain per
        layer against the layer (`_paired`)."""
        first, second = self._load(inst), self._load(probe_dense(inst))
        with self._timing():
            return self._paired(first, second, per_first=int(inst.attrs["layers"]))

    def epilogue(self, inst: OpInstance) -> tuple[float, int]:
        """Seconds a fused group's epilogue adds to its anchor: the group and the anchor alone
        built from the same operands, each less its layout transforms (`_paired`; may be slightly
        negative: timing noise)."""
        loaded = [self._load(inst), self._load(group_anchor(inst))]
        with self._timing():
            layout = [self._layout_seconds(m, lib, dev, inputs) for m, lib, inputs, dev in loaded]
            return self._paired(*loaded, less=layout)

    def _paired(self, first, second, per_first: int = 1, less=(0.0, 0.0)) -> tuple[float, int]:
        """(median, rounds) of ``(first's time − less[0]) / per_first − (second's time − less[1])``
        over ``repeat`` rounds that time the two loaded modules (`_load`) alternately: a machine's
        drift between measurements taken apart would swamp a difference this small."""
        cfg = self.config
        rounds = []
        for _ in range(cfg.repeat):
            first_s, second_s = (time_module(m, dev, 1, cfg.number, cfg.min_repeat_ms, cfg.warmup)[0] - lay
                                 for (m, _, _, dev), lay in zip((first, second), less))
            rounds.append(first_s / per_first - second_s)
        return statistics.median(rounds), len(rounds)


class TorchRunner:
    """Times op instances as their PyTorch equivalents on the CUDA GPU (CUDA events)."""

    def __init__(self, config: MeasureConfig):
        import torch

        if not torch.cuda.is_available():
            raise BackendUnavailable("torch-cuda: PyTorch sees no CUDA GPU")
        torch.backends.cudnn.benchmark = True
        self.torch = torch
        self.config = config

    def __call__(self, inst: OpInstance) -> tuple[float, int]:
        if inst.op in (GROUP_OP, STREAM_OP):
            raise BackendUnavailable("torch-cuda times single ops, not fused groups or stream probes")
        torch = self.torch
        dev = torch.device("cuda")
        with torch.no_grad():
            fn = torch_closure(torch, inst, dev)
            for _ in range(self.config.warmup + 3):  # cudnn.benchmark picks its algorithm here
                fn()
            torch.cuda.synchronize()
            number = self.config.number
            if not number:  # enough runs that one timing lasts min_repeat_ms
                number = 1
                while True:
                    t = time.perf_counter()
                    for _ in range(number):
                        fn()
                    torch.cuda.synchronize()
                    if (time.perf_counter() - t) * 1e3 >= self.config.min_repeat_ms or number >= 1 << 20:
                        break
                    number *= 2
            results = []
            for _ in range(self.config.repeat):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(number):
                    fn()
                end.record()
                end.synchronize()
                results.append(start.elapsed_time(end) / 1e3 / number)
        return statistics.median(results), len(results)


def make_runner(target: str, backend: str, config: MeasureConfig, place: Place | None = None,
                timing_lock: str | None = None, records: str | None = None):
    """The callable ``inst -> (seconds, timings)`` of ``backend`` (TVM's: on ``place``, timing
    under ``timing_lock``, kernels built under the tuning log ``records``: a path)."""
    if backend in ("tvm-llvm", "tvm-cuda"):
        return TVMRunner(target, config, place, timing_lock, records=load_records(records) if records else None)
    if records:
        raise BackendUnavailable(f"tuning records apply to TVM's kernels, not to backend {backend!r}")
    if backend == "torch-cuda":
        return TorchRunner(config)
    raise BackendUnavailable(f"unknown backend {backend!r}")


def time_zoo_model(name: str, small: bool, target: str, config: MeasureConfig,
                   place: Place | None = None) -> tuple[float, int]:
    """Build a whole zoo model with TVM (weights bound) and time one inference.

    What is built is the program the cost model costs: the model's TensorGraph back in Relay.
    TVM builds the zoo's own module differently where its SimplifyExpr, rewriting ``add(x, x)``
    to ``multiply(x, 2)``, copies the shared work upstream once per use (NasNet-A small: 79
    convolutions run for the model's 49); the TensorGraph holds the multiply already."""
    from relay_eqsat.passes.relay.frontend import from_relay
    from relay_eqsat.passes.relay.backend import graph_to_module

    mod, params = zoo.get(name, small=small)
    lib = build(graph_to_module(from_relay(mod, params)), target=target, opt_level=config.opt_level)
    place = place or Place(target)
    dev = place.dev
    m = place.load(lib)
    rng = np.random.default_rng(0)
    for k, shape in zoo.input_shapes(name, small=small).items():
        m.set_input(k, rng.uniform(0.5, 1.5, size=shape).astype("float32"))
    return time_module(m, dev, config.repeat, config.number, config.min_repeat_ms, config.warmup)
