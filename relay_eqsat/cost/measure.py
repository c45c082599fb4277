"""Measured operator costs: build one op alone, time it, in a worker process.

A ``Measurer`` owns one worker process (``python -m relay_eqsat.cost.worker``) that
imports TVM (or PyTorch) and measures op instances sent to it one at a time.
Every job has a timeout: a build that hangs is killed, one that crashes the
process is reported, and either way the caller gets an error result and the
next job starts a fresh worker. ``measure_many`` measures a list with a
progress bar, skips what the cache already holds and writes each result to the
cache as it arrives, so an interrupted batch keeps everything it measured.

Backends (named in every result and cache row):

- ``tvm-llvm``: the op built alone by ``relay.build`` (opt_level 3) for an
  llvm target and timed with ``time_evaluator`` (warm-up runs, then the median
  of ``repeat`` timings, each long enough to last ``min_repeat_ms``), less the
  activation layout transforms AlterOpLayout wraps around x86 convolutions
  (they cancel between consecutive convolutions in a model). Weight
  operands (conv2d/dense weights, bias, batch-norm and layer-norm parameters)
  are bound as constants, as they are in a model, so the weight layout
  transforms TVM inserts fold away as they do in a real build; the activation
  inputs stay runtime inputs, so the kernel itself is measured, never folded.
- ``tvm-cuda``: the same through TVM's CUDA target, when the installed TVM has
  CUDA and a GPU is present.
- ``torch-cuda``: for a ``cuda`` target when TVM has no CUDA: the equivalent
  PyTorch op (cuDNN / cuBLAS kernels, as TASO measured), timed with CUDA
  events. Needs ``torch`` with CUDA and an NVIDIA GPU.

TVM and PyTorch are imported only inside the worker process.
"""
from __future__ import annotations

import contextlib
import os
import pickle
import platform
import socket
import subprocess
import statistics
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from functools import lru_cache
from multiprocessing.connection import Connection
from typing import Callable, Iterable

from ..graph import TensorGraph
from .cache import CostCache, normalize_target
from .instance import GRAPH_LEVEL_OPS, OpInstance

FALLBACK_TARGET = "llvm -mtriple=x86_64-linux-gnu -mcpu=core-avx2"
ENV_TARGET = "RELAY_EQSAT_TARGET"
BACKENDS = ("tvm-llvm", "tvm-cuda", "torch-cuda")

# Operand positions bound as constants when measuring (weights in a model).
WEIGHT_SLOTS = {
    "nn.conv2d": (1,),
    "nn.dense": (1,),
    "nn.bias_add": (1,),
    "nn.batch_norm": (1, 2, 3, 4),
    "nn.layer_norm": (1, 2),
}


class BackendUnavailable(RuntimeError):
    """No measuring backend can serve the requested target on this machine."""


@dataclass
class MeasureConfig:
    """How to time one op.

    repeat         timings whose median is the result
    number         runs averaged per timing; 0: as many as ``min_repeat_ms`` needs
    min_repeat_ms  the least duration of one timing when ``number`` is 0
    warmup         untimed runs before timing
    timeout_s      per job (build + timing); the worker is killed past it
    startup_s      extra time allowed to a fresh worker's first job (importing TVM)
    opt_level      Relay build opt_level
    """

    repeat: int = 7
    number: int = 0
    min_repeat_ms: float = 20.0
    warmup: int = 2
    timeout_s: float = 180.0
    startup_s: float = 60.0
    opt_level: int = 3


@dataclass
class MeasureResult:
    """The outcome of measuring one instance (``seconds`` None on failure)."""

    instance: OpInstance
    target: str
    backend: str
    seconds: float | None = None
    repeats: int = 0
    error: str | None = None
    wall_s: float = 0.0
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.seconds is not None


# -- targets and backends -------------------------------------------------------

def _probe_host_target() -> str:
    """Run in a worker: the host target of ``relay_eqsat.passes.target``, else the fallback."""
    try:
        from relay_eqsat.passes.target import host_target
    except ImportError:
        return FALLBACK_TARGET
    return str(host_target())


def _probe_backends() -> dict[str, str | None]:
    """Run in a worker: {backend: None if usable, else why not}."""
    out: dict[str, str | None] = {}
    try:
        import tvm

        out["tvm-llvm"] = None if tvm.runtime.enabled("llvm") else "the installed TVM has no LLVM"
        if not tvm.runtime.enabled("cuda"):
            out["tvm-cuda"] = "the installed TVM was built without CUDA"
        elif not tvm.cuda(0).exist:
            out["tvm-cuda"] = "TVM has CUDA but no GPU is visible"
        else:
            out["tvm-cuda"] = None
    except ImportError:
        out["tvm-llvm"] = out["tvm-cuda"] = "TVM is not installed"
    try:
        import torch

        if not torch.cuda.is_available():
            out["torch-cuda"] = "PyTorch is installed but sees no CUDA GPU"
        else:
            out["torch-cuda"] = None
    except ImportError:
        out["torch-cuda"] = "PyTorch is not installed"
    return out


def _child_env() -> dict:
    """The environment of a child Python: this process's, with its ``sys.path``, so that the
    child imports the same packages (and the picklable hooks tests hand the worker)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


def _run_in_subprocess(fn: Callable, timeout: float = 120.0):
    """Call a module-level function in a fresh Python process, started by module name (never
    re-running the caller's ``__main__`` script, as multiprocessing's spawn does), and return
    its (pickled) result."""
    code = ("import pickle, sys, importlib; m = importlib.import_module(sys.argv[1]); "
            "sys.stdout.buffer.write(pickle.dumps(getattr(m, sys.argv[2])()))")
    out = subprocess.run([sys.executable, "-c", code, fn.__module__, fn.__qualname__], capture_output=True,
                         timeout=timeout, env=_child_env(), stdin=subprocess.DEVNULL, check=True)
    return pickle.loads(out.stdout)


_HOST_TARGET: str | None = None


def resolve_target(target=None, cache: CostCache | None = None) -> str:
    """The normalized target text: ``target``, else ``$RELAY_EQSAT_TARGET``, else the host.

    The host target is ``relay_eqsat.passes.target.host_target()`` (found in a
    subprocess, since it needs TVM, and remembered in the cache database per
    host name), or ``llvm -mtriple=x86_64-linux-gnu -mcpu=core-avx2`` when
    TVM is unavailable.
    """
    global _HOST_TARGET
    if target is not None:
        return normalize_target(target)
    if os.environ.get(ENV_TARGET):
        return normalize_target(os.environ[ENV_TARGET])
    if _HOST_TARGET is not None:
        return _HOST_TARGET
    meta_key = f"host_target:{platform.node()}"
    if cache is not None:
        stored = cache.get_meta(meta_key)
        if stored:
            _HOST_TARGET = stored
            return stored
    try:
        if "tvm" in sys.modules:  # TVM is loaded already (inside the Relay pass): ask here
            found = _probe_host_target()
        else:
            found = _run_in_subprocess(_probe_host_target)
    except Exception:  # noqa: BLE001 - no TVM, or it failed: use the portable default
        found = FALLBACK_TARGET
    _HOST_TARGET = normalize_target(found)
    if cache is not None:
        cache.set_meta(meta_key, _HOST_TARGET)
    return _HOST_TARGET


@lru_cache(maxsize=None)
def available_backends() -> dict[str, str | None]:
    """{backend: None if it can measure here, else the reason it cannot} (probed once)."""
    try:
        return _run_in_subprocess(_probe_backends)
    except Exception as e:  # noqa: BLE001
        return {b: f"probing failed: {e}" for b in BACKENDS}


def target_backends(target: str) -> tuple[str, ...]:
    """Backends that can serve ``target``, in order of preference."""
    kind = str(target).split()[0]
    if kind in ("llvm", "c"):
        return ("tvm-llvm",)
    if kind == "cuda":
        return ("tvm-cuda", "torch-cuda")
    return ()


def select_backend(target: str) -> str:
    """The backend that measures ``target`` here; BackendUnavailable says why none can."""
    candidates = target_backends(target)
    if not candidates:
        raise BackendUnavailable(f"no measuring backend for target {target!r} "
                                 f"(supported: llvm via TVM, cuda via TVM or PyTorch)")
    if candidates == ("tvm-llvm",):
        return "tvm-llvm"  # hhb-tvm always ships LLVM; probing would cost a process start
    avail = available_backends()
    for b in candidates:
        if avail.get(b) is None:
            return b
    reasons = "; ".join(f"{b}: {avail.get(b)}" for b in candidates)
    raise BackendUnavailable(f"target {target!r} cannot be measured on this machine ({reasons})")


# -- building one op as Relay (worker side) ---------------------------------------

def _input_array(np, t, rng):
    """Random input values: positive floats (no NaN, no denormals), small ints."""
    if np.issubdtype(np.dtype(t.dtype), np.integer):
        return rng.integers(0, 4, size=t.shape).astype(t.dtype)
    if np.dtype(t.dtype) == np.bool_:
        return rng.integers(0, 2, size=t.shape).astype(bool)
    return rng.uniform(0.5, 1.5, size=t.shape).astype(t.dtype)


def relay_function(inst: OpInstance, seed: int = 0):
    """(relay.Function, params, runtime inputs) computing ``inst`` alone.

    A one-op TensorGraph goes through the project's one Relay backend
    (``relay_eqsat.passes.relay.to_relay``). Every operand is a parameter:
    weight slots are returned in ``params`` (bound at build time), the others
    in the runtime inputs. For batch_norm only field 0 is returned, as in
    inference, so SimplifyInference turns it into a scale and shift.
    """
    import numpy as np

    from relay_eqsat.passes.relay import to_relay

    rng = np.random.default_rng(seed)
    weights = WEIGHT_SLOTS.get(inst.op, ())
    g = TensorGraph()
    ids, params, inputs = [], {}, {}
    for i, t in enumerate(inst.input_types):
        name = f"p{i}" if i in weights else f"x{i}"
        ids.append(g.var(name, t.shape, t.dtype))
        (params if i in weights else inputs)[name] = _input_array(np, t, rng)
    out = g.add(inst.op, ids, inst.attrs, type=inst.out_type)
    if inst.op == "nn.batch_norm":
        out = g.add("tuple_get_item", [out], {"index": 0})
    g.set_output(out)
    return to_relay(g), params, inputs


class _TVMRunner:
    def __init__(self, target: str, config: MeasureConfig):
        import tvm  # noqa: F401 - imported here, in the worker only

        self.target = target
        self.config = config

    def __call__(self, inst: OpInstance) -> tuple[float, int]:
        import tvm
        from tvm import relay
        from tvm.contrib import graph_executor

        func, params, inputs = relay_function(inst)
        mod = tvm.IRModule.from_expr(func)
        tgt = tvm.target.Target(self.target)
        with tvm.transform.PassContext(opt_level=self.config.opt_level):
            lib = relay.build(mod, target=tgt, params={k: tvm.nd.array(v) for k, v in params.items()})
        dev = tvm.device(tgt.kind.name, 0)
        m = graph_executor.GraphModule(lib["default"](dev))
        for k, v in inputs.items():
            m.set_input(k, v)
        seconds, repeats = _time_module(m, dev, self.config)
        layout = _layout_transform_seconds(lib, dev, inputs, self.config)
        return max(seconds - layout, seconds * 0.05), repeats


@contextlib.contextmanager
def _quiet_stderr():
    """Silence file descriptor 2 (the debug executor logs every iteration from C++)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _layout_transform_seconds(lib, dev, inputs: dict, config: MeasureConfig) -> float:
    """Time spent in the activation layout transforms of a one-op build.

    On x86, AlterOpLayout runs conv2d in a blocked layout (NCHWc) with a
    layout_transform before and after it. In a model those cancel between
    consecutive convolutions, so they are not part of the kernel's cost: their
    per-node times (debug executor) are subtracted from the run time.
    """
    import json
    import tempfile

    import numpy as np
    from tvm.contrib.debugger import debug_executor

    graph_json = lib.get_graph_json()
    nodes = json.loads(graph_json)["nodes"]
    if not any(n["op"] == "tvm_op" and "layout_transform" in n["attrs"]["func_name"] for n in nodes):
        return 0.0
    with tempfile.TemporaryDirectory(prefix="relay-eqsat-debug-") as dump, _quiet_stderr():
        m = debug_executor.create(graph_json, lib.get_lib(), dev, dump_root=dump)
        m.set_input(**lib.get_params())
        for k, v in inputs.items():
            m.set_input(k, v)
        per_node = m.run_individual(10, repeat=config.repeat,
                                    min_repeat_ms=max(1, int(round(config.min_repeat_ms / 4))))
    total = 0.0
    for n, times in zip(nodes, per_node):
        if n["op"] == "tvm_op" and "layout_transform" in n["attrs"]["func_name"] and len(times):
            total += float(np.median(times))
    return total


def _torch_op(torch, inst: OpInstance, dev):
    """A zero-argument closure running the PyTorch equivalent of ``inst`` on ``dev``."""
    F = torch.nn.functional
    a = inst.attrs
    xs = [torch.rand(t.shape, device=dev, dtype=getattr(torch, t.dtype)) + 0.5 for t in inst.input_types]
    op = inst.op
    unary = {"nn.relu": torch.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "erf": torch.erf,
             "exp": torch.exp, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "negative": torch.neg}
    binary = {"add": torch.add, "subtract": torch.sub, "multiply": torch.mul, "divide": torch.div,
              "maximum": torch.maximum, "minimum": torch.minimum, "power": torch.pow}
    if op in unary:
        f = unary[op]
        return lambda: f(xs[0])
    if op in binary:
        f = binary[op]
        return lambda: f(xs[0], xs[1])
    if op == "nn.conv2d":
        pt, pl, pb, pr = a["padding"]
        x, w = xs
        if pt == pb and pl == pr:
            return lambda: F.conv2d(x, w, stride=a["strides"], padding=(pt, pl), dilation=a["dilation"],
                                    groups=a["groups"])
        return lambda: F.conv2d(F.pad(x, (pl, pr, pt, pb)), w, stride=a["strides"], dilation=a["dilation"],
                                groups=a["groups"])
    if op == "nn.dense":
        return lambda: F.linear(xs[0], xs[1])
    if op in ("nn.matmul", "nn.batch_matmul"):
        ta, tb = a["transpose_a"], a["transpose_b"]
        A = xs[0].transpose(-1, -2) if ta else xs[0]
        B = xs[1].transpose(-1, -2) if tb else xs[1]
        return lambda: torch.matmul(A, B)
    if op == "clip":
        return lambda: torch.clamp(xs[0], a["a_min"], a["a_max"])
    if op == "nn.leaky_relu":
        return lambda: F.leaky_relu(xs[0], a["alpha"])
    if op in ("nn.max_pool2d", "nn.avg_pool2d"):
        pt, pl, pb, pr = a["padding"]
        x = xs[0]
        if (pt, pl) != (pb, pr):
            x = F.pad(x, (pl, pr, pt, pb), value=float("-inf") if op == "nn.max_pool2d" else 0.0)
            pt = pl = 0
        if op == "nn.max_pool2d":
            return lambda: F.max_pool2d(x, a["pool_size"], a["strides"], (pt, pl), a["dilation"],
                                        ceil_mode=a["ceil_mode"])
        return lambda: F.avg_pool2d(x, a["pool_size"], a["strides"], (pt, pl), ceil_mode=a["ceil_mode"],
                                    count_include_pad=a["count_include_pad"])
    if op == "nn.global_avg_pool2d":
        return lambda: F.adaptive_avg_pool2d(xs[0], 1)
    if op == "nn.global_max_pool2d":
        return lambda: F.adaptive_max_pool2d(xs[0], 1)
    if op == "transpose":
        return lambda: xs[0].permute(*a["axes"]).contiguous()
    if op == "reshape":
        return lambda: xs[0].reshape(a["newshape"])
    if op == "concatenate":
        return lambda: torch.cat(xs, dim=a["axis"])
    if op == "split":
        n = inst.input_types[0].shape[a["axis"]]
        bounds = [0, *a["indices"], n]
        sizes = [hi - lo for lo, hi in zip(bounds, bounds[1:])]
        return lambda: [t.contiguous() for t in torch.split(xs[0], sizes, dim=a["axis"])]
    if op == "strided_slice":
        sl = tuple(slice(b, e, s) for b, e, s in zip(a["begin"], a["end"], a["strides"]))
        return lambda: xs[0][sl].contiguous()
    if op == "nn.pad":
        flat = []
        for lo, hi in reversed(a["pad_width"]):
            flat += [lo, hi]
        return lambda: F.pad(xs[0], flat, value=float(a.get("pad_value", 0.0)))
    if op == "nn.bias_add":
        shape = [1] * inst.input_types[0].ndim
        shape[a["axis"]] = -1
        b = xs[1].reshape(shape)
        return lambda: xs[0] + b
    if op == "nn.batch_norm":
        x, g, b, m, v = xs
        if a["axis"] != 1:
            raise ValueError("torch-cuda: batch_norm measured for axis 1 only")
        return lambda: F.batch_norm(x, m, v, g if a["scale"] else None, b if a["center"] else None,
                                    False, 0.0, a["epsilon"])
    if op == "nn.softmax":
        return lambda: torch.softmax(xs[0], dim=a["axis"])
    if op == "nn.layer_norm":
        if a["axis"] != inst.input_types[0].ndim - 1:
            raise ValueError("torch-cuda: layer_norm measured over the last axis only")
        shape = (inst.input_types[0].shape[-1],)
        return lambda: F.layer_norm(xs[0], shape, xs[1] if a["scale"] else None,
                                    xs[2] if a["center"] else None, a["epsilon"])
    if op == "mean":
        return lambda: torch.mean(xs[0], dim=tuple(a["axis"]), keepdim=a["keepdims"])
    raise ValueError(f"no PyTorch mapping for operator {op!r}")


class _TorchRunner:
    def __init__(self, config: MeasureConfig):
        import torch

        if not torch.cuda.is_available():
            raise BackendUnavailable("torch-cuda: PyTorch sees no CUDA GPU")
        torch.backends.cudnn.benchmark = True
        self.torch = torch
        self.config = config

    def __call__(self, inst: OpInstance) -> tuple[float, int]:
        torch = self.torch
        dev = torch.device("cuda")
        with torch.no_grad():
            fn = _torch_op(torch, inst, dev)
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


def _make_runner(target: str, backend: str, config: MeasureConfig):
    if backend in ("tvm-llvm", "tvm-cuda"):
        return _TVMRunner(target, config)
    if backend == "torch-cuda":
        return _TorchRunner(config)
    raise BackendUnavailable(f"unknown backend {backend!r}")


def _time_module(m, dev, config: MeasureConfig) -> tuple[float, int]:
    """Median seconds of ``m.run()`` by ``time_evaluator`` after warm-up runs."""
    import numpy as np

    for _ in range(config.warmup):
        m.run()
    dev.sync()
    timer = m.module.time_evaluator("run", dev, number=max(1, config.number), repeat=config.repeat,
                                    min_repeat_ms=0 if config.number else max(1, int(round(config.min_repeat_ms))))
    results = [float(r) for r in timer().results]
    if not all(np.isfinite(results)):
        raise RuntimeError(f"non-finite timings {results}")
    return statistics.median(results), len(results)


def _measure_zoo_model(name: str, small: bool, target: str, config: MeasureConfig) -> tuple[float, int]:
    """Build a whole zoo model with TVM (weights bound) and time one inference."""
    import numpy as np
    import tvm
    from tvm import relay
    from tvm.contrib import graph_executor

    from relay_eqsat.passes import zoo

    mod, params = zoo.get(name, small=small)
    tgt = tvm.target.Target(target)
    with tvm.transform.PassContext(opt_level=config.opt_level):
        lib = relay.build(mod, target=tgt, params=params)
    dev = tvm.device(tgt.kind.name, 0)
    m = graph_executor.GraphModule(lib["default"](dev))
    rng = np.random.default_rng(0)
    for k, shape in zoo.input_shapes(name, small=small).items():
        m.set_input(k, rng.uniform(0.5, 1.5, size=shape).astype("float32"))
    return _time_module(m, dev, config)


def _worker_main(conn, target: str, backend: str, config: dict, hook) -> None:
    """The worker loop.

    Jobs: ("op", op, attrs, shapes, dtype, out) measures one op instance;
    ("zoo", name, small) times a whole zoo model (TVM backends only).
    Answers: ("ok", seconds, repeats) or ("error", text). None stops the loop.
    """
    cfg = MeasureConfig(**config)
    runner = None
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        try:
            if hook is not None:
                hook()
            if msg[0] == "op":
                inst = OpInstance.from_key(*msg[1:])
                if runner is None:
                    runner = _make_runner(target, backend, cfg)
                seconds, repeats = runner(inst)
            elif msg[0] == "zoo":
                if not backend.startswith("tvm-"):
                    raise BackendUnavailable(f"whole models are timed with TVM backends only, not {backend}")
                seconds, repeats = _measure_zoo_model(msg[1], msg[2], target, cfg)
            else:
                raise ValueError(f"unknown job {msg[0]!r}")
            conn.send(("ok", float(seconds), int(repeats)))
        except Exception as e:  # noqa: BLE001 - every failure becomes an error result
            # the last line of a TVM error says what went wrong; the traceback follows it
            lines = [ln for ln in str(e).strip().splitlines() if ln.strip()] or [""]
            tb = "\n".join(traceback.format_exc().strip().splitlines()[-8:])
            conn.send(("error", f"{type(e).__name__}: {lines[-1][:500]}\n{tb}"))


# -- the parent side ------------------------------------------------------------

class Measurer:
    """Measures op instances on one target with one backend, in a worker process.

    ``hook`` (a picklable zero-argument callable) runs in the worker before
    each job: tests use it to make the worker hang or crash.
    """

    def __init__(self, target=None, backend: str | None = None, config: MeasureConfig | None = None,
                 cache: CostCache | None = None, hook: Callable[[], object] | None = None):
        self.cache = cache
        self.target = resolve_target(target, cache)
        self.backend = backend or select_backend(self.target)
        if self.backend not in BACKENDS:
            raise BackendUnavailable(f"unknown backend {self.backend!r} (known: {', '.join(BACKENDS)})")
        self.config = config or MeasureConfig()
        self.hook = hook
        self._proc = None
        self._conn = None
        self._fresh = True

    # -- worker lifecycle --------------------------------------------------------
    def _start(self) -> None:
        # started by name (python -m), connected through a socket pair: the caller's __main__
        # script is never imported again in the worker (as multiprocessing's spawn would)
        parent, child = socket.socketpair()
        with child:
            proc = subprocess.Popen([sys.executable, "-m", "relay_eqsat.cost.worker", str(child.fileno())],
                                    pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL, env=_child_env())
        conn = Connection(parent.detach())
        conn.send((self.target, self.backend, asdict(self.config), self.hook))
        self._proc, self._conn, self._fresh = proc, conn, True

    def _stop(self, kill: bool = False) -> None:
        proc, conn = self._proc, self._conn
        self._proc = self._conn = None
        if proc is None:
            return
        if not kill and proc.poll() is None:
            try:
                conn.send(None)
                proc.wait(5)
            except (OSError, BrokenPipeError, subprocess.TimeoutExpired):
                pass
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        conn.close()

    def close(self) -> None:
        """Stop the worker process."""
        self._stop()

    def __enter__(self) -> "Measurer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self._stop(kill=True)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # -- measuring ----------------------------------------------------------------
    def _job(self, msg: tuple) -> tuple[float | None, int, str | None]:
        """Send one job to the worker (starting one if needed): (seconds, repeats, error)."""
        if self._proc is None or self._proc.poll() is not None:
            if self._proc is not None:
                self._stop(kill=True)
            self._start()
        timeout = self.config.timeout_s + (self.config.startup_s if self._fresh else 0.0)
        self._fresh = False
        try:
            self._conn.send(msg)
            deadline = time.monotonic() + timeout
            while not self._conn.poll(min(0.5, max(0.0, deadline - time.monotonic()))):
                if time.monotonic() >= deadline:
                    self._stop(kill=True)
                    return None, 0, f"timeout: no result after {timeout:.0f} s (worker killed)"
                if self._proc.poll() is not None:
                    break
            reply = self._conn.recv()
        except (EOFError, OSError):
            proc = self._proc
            code = None
            if proc is not None:
                try:
                    code = proc.wait(5)
                except subprocess.TimeoutExpired:
                    code = None
            self._stop(kill=True)
            return None, 0, f"worker process died (exit code {code})"
        if reply[0] == "ok":
            return reply[1], reply[2], None
        return None, 0, reply[1]

    def measure(self, inst: OpInstance) -> MeasureResult:
        """Measure one instance (no cache involved); failures come back as error results."""
        t0 = time.perf_counter()
        res = MeasureResult(inst, self.target, self.backend)
        if inst.op in GRAPH_LEVEL_OPS or inst.op == "opaque":
            res.error = f"{inst.op} is not a kernel and is never measured"
            return res
        res.seconds, res.repeats, res.error = self._job(("op",) + inst.key() + (inst.out_str,))
        res.wall_s = time.perf_counter() - t0
        return res

    def measure_zoo_model(self, name: str, small: bool = False) -> tuple[float | None, str | None]:
        """End-to-end seconds of a zoo model built whole by TVM: (seconds, error)."""
        seconds, _, error = self._job(("zoo", name, bool(small)))
        return seconds, error

    def measure_many(self, instances: Iterable[OpInstance], cache: CostCache | None = None,
                     skip_cached: bool = True, retry_failed: bool = False,
                     progress: bool | None = None, deadline: float | None = None,
                     desc: str | None = None) -> list[MeasureResult]:
        """Measure a batch, writing each result to the cache as it arrives.

        Cache hits (and, unless ``retry_failed``, recorded failures) are not
        measured again; they come back with ``cached=True``. The progress bar
        (tqdm, on stderr) shows only when stderr is a terminal, unless
        ``progress`` says otherwise. Past ``deadline`` (``time.monotonic()``)
        no new measurement starts: the rest are left out of the results.
        """
        cache = cache if cache is not None else self.cache
        results: list[MeasureResult] = []
        todo: list[OpInstance] = []
        for inst in instances:
            if inst.op in GRAPH_LEVEL_OPS or inst.op == "opaque":
                continue
            if cache is not None and skip_cached:
                row = cache.get(inst, self.target, self.backend)
                if row is not None:
                    results.append(MeasureResult(inst, self.target, self.backend, row.seconds,
                                                 row.repeats, cached=True))
                    continue
                if not retry_failed:
                    err = cache.get_failure(inst, self.target, self.backend)
                    if err is not None:
                        results.append(MeasureResult(inst, self.target, self.backend, error=err, cached=True))
                        continue
            todo.append(inst)
        from tqdm import tqdm

        show = sys.stderr.isatty() if progress is None else progress
        with tqdm(total=len(todo), desc=desc or f"measure {self.backend}", unit="op", disable=not show,
                  file=sys.stderr) as bar:
            for inst in todo:
                if deadline is not None and time.monotonic() >= deadline:
                    break
                bar.set_postfix_str(inst.op, refresh=False)
                res = self.measure(inst)
                if cache is not None:
                    if res.ok:
                        cache.put(inst, self.target, self.backend, res.seconds, res.repeats)
                    else:
                        cache.put_failure(inst, self.target, self.backend, res.error)
                results.append(res)
                bar.update(1)
        return results
