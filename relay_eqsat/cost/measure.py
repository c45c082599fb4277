"""Measured operator costs: one op built alone and timed, in a worker process.

A ``Measurer`` owns one worker process, started by module name
(``python -m relay_eqsat.passes.runtime.measure_worker FD``, :data:`WORKER_MODULE`), that
imports TVM (or PyTorch) and measures op instances sent to it one at a time.
Every job has a timeout: a build that hangs is killed, one that crashes the
process is reported, and either way the caller gets an error result and the
next job starts a fresh worker. Batches go through
:class:`relay_eqsat.cost.pool.MeasurePool`, which skips what the cache already holds, runs
one or more measurers at once and writes each result to the cache as it arrives, so an
interrupted batch keeps everything it measured.

Backends (named in every result and cache row; the kernels are built and timed by
``relay_eqsat.passes.runtime.kernels``):

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

This module imports neither TVM nor PyTorch nor ``relay_eqsat.passes``: the worker,
the backend probe and the host-target probe run in child processes started by name.
"""
from __future__ import annotations

import os
import pickle
import platform
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from functools import lru_cache
from multiprocessing.connection import Connection
from typing import Callable

from .cache import CostCache, normalize_target
from .instance import GRAPH_LEVEL_OPS, OpInstance

FALLBACK_TARGET = "llvm -mtriple=x86_64-linux-gnu -mcpu=core-avx2"
ENV_TARGET = "RELAY_EQSAT_TARGET"
BACKENDS = ("tvm-llvm", "tvm-cuda", "torch-cuda")

#: the worker process's module, run as ``python -m WORKER_MODULE FD``
WORKER_MODULE = "relay_eqsat.passes.runtime.measure_worker"
#: "module:function" probes run in a child process: the host target, and {backend: why not usable}
PROBE_HOST_TARGET = WORKER_MODULE + ":probe_host_target"
PROBE_BACKENDS = WORKER_MODULE + ":probe_backends"
#: the module whose ``host_target()`` is asked in this process when it is loaded already
HOST_TARGET_MODULE = "relay_eqsat.passes.runtime.target"
#: when the measuring worker last learned to build kernels it could not (a time.time()): failures
#: recorded before are tried again (2026-11-28: batch_norm, which failed on every CPU since the
#: 2026-11-27 change to how weights are drawn)
HARNESS_CHANGED = 1795865400.0  # 2026-11-28 11:30 UTC
#: how long a fresh worker may take to import TVM and say it is ready (not part of any job's timeout)
WORKER_START_S = 120.0


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
    startup_s      extra time allowed to a fresh worker's first job (TVM's first build)
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
    device: str = ""      # the device it was measured on ("": this machine; else what the remote reports)
    lost: bool = False    # the device went away during the job: not the kernel's failure, measure it elsewhere
    where: str = ""       # the measurer's place in words (an RPC device: its key and address)
    tuned: bool | None = None  # built under tuning records: whether they had its kernel's schedule

    @property
    def ok(self) -> bool:
        return self.seconds is not None


# -- targets and backends -------------------------------------------------------

def child_env() -> dict:
    """The environment of a child Python: this process's, with its ``sys.path``, so that the
    child imports the same packages (and the picklable hooks tests hand the worker)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


def _run_in_subprocess(spec: str, timeout: float = 120.0):
    """Call the function ``spec`` ("module:function", no arguments) in a fresh Python process,
    started by module name (never re-running the caller's ``__main__`` script, as
    multiprocessing's spawn does), and return its (pickled) result."""
    module, _, function = spec.partition(":")
    code = ("import pickle, sys, importlib; m = importlib.import_module(sys.argv[1]); "
            "sys.stdout.buffer.write(pickle.dumps(getattr(m, sys.argv[2])()))")
    out = subprocess.run([sys.executable, "-c", code, module, function], capture_output=True,
                         timeout=timeout, env=child_env(), stdin=subprocess.DEVNULL, check=True)
    return pickle.loads(out.stdout)


_HOST_TARGET: str | None = None


def resolve_target(target=None, cache: CostCache | None = None) -> str:
    """The normalized target text: ``target``, else ``$RELAY_EQSAT_TARGET``, else the host.

    The host target is ``relay_eqsat.passes.runtime.target.host_target()`` (asked directly
    when that module is loaded already, as inside the Relay pass, else found in a
    subprocess, since it needs TVM; remembered in the cache database per host
    name), or ``llvm -mtriple=x86_64-linux-gnu -mcpu=core-avx2`` when TVM is
    unavailable.
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
        loaded = sys.modules.get(HOST_TARGET_MODULE)
        if loaded is not None:  # TVM is loaded already (inside the Relay pass): ask here
            found = str(loaded.host_target())
        else:
            found = _run_in_subprocess(PROBE_HOST_TARGET)
    except Exception:  # noqa: BLE001 - no TVM, or it failed: use the portable default
        found = FALLBACK_TARGET
    _HOST_TARGET = normalize_target(found)
    if cache is not None:
        cache.set_meta(meta_key, _HOST_TARGET)
    return _HOST_TARGET


@lru_cache(maxsize=None)
def available_backends() -> dict[str, str | None]:
    """{backend: None if it can measure here, else the reason it cannot} (probed once, in a
    subprocess)."""
    try:
        return _run_in_subprocess(PROBE_BACKENDS)
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


# -- the parent side ------------------------------------------------------------

class Measurer:
    """Measures op instances on one target with one backend, in a worker process.

    ``hook`` (a picklable zero-argument callable) runs in the worker before
    each job: tests use it to make the worker hang or crash. ``remote`` (a
    :class:`~relay_eqsat.cost.tracker.Remote`): the worker takes a device from that RPC
    tracker and builds every kernel for it, uploads and times it there; ``device`` then says
    which (what the remote reports of its CPU), and ``lost`` that it went away. ``timing_lock``:
    a file whose lock the worker holds while it times (local workers measuring at once build in
    parallel and time one at a time). ``records``: the path of a tuning log (AutoTVM or
    auto-scheduler) every kernel is built under; each result's ``tuned`` then says whether the log
    had its kernel's schedule.
    """

    def __init__(self, target=None, backend: str | None = None, config: MeasureConfig | None = None,
                 cache: CostCache | None = None, hook: Callable[[], object] | None = None,
                 remote=None, timing_lock: str | None = None, records: str | None = None):
        self.remote = remote
        self.timing_lock = timing_lock
        self.records = records
        self.device = ""
        self.where = "this machine"
        self.lost: str | None = None
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
    def _start(self) -> str | None:
        """Start a worker and wait until it is ready (its imports done): None, or why it failed."""
        # started by name (python -m), connected through a socket pair: the caller's __main__
        # script is never imported again in the worker (as multiprocessing's spawn would)
        parent, child = socket.socketpair()
        with child:
            # its own session: a Ctrl-C at the terminal interrupts the parent only, which kills
            # the worker (a worker whose parent is gone sees its connection close and ends)
            proc = subprocess.Popen([sys.executable, "-m", WORKER_MODULE, str(child.fileno())],
                                    pass_fds=(child.fileno(),), stdin=subprocess.DEVNULL, env=child_env(),
                                    start_new_session=True)
        conn = Connection(parent.detach())
        self._proc, self._conn, self._fresh = proc, conn, True
        try:
            conn.send((self.target, self.backend, asdict(self.config), self.hook,
                       {"remote": self.remote, "timing_lock": self.timing_lock, "records": self.records}))
            deadline = time.monotonic() + WORKER_START_S + (self.remote.timeout * 2 if self.remote else 0.0)
            while not conn.poll(0.5):
                if time.monotonic() >= deadline:
                    self._stop(kill=True)
                    return f"timeout: the worker was not ready after {WORKER_START_S:.0f} s (killed)"
                if proc.poll() is not None:
                    break
            reply = conn.recv()  # ("ready", {device, where}) or ("unavailable", why)
        except (EOFError, OSError):
            return self._died()
        if reply[0] != "ready":
            self.lost = str(reply[1])
            self._stop(kill=True)
            return self.lost
        self.device, self.where = reply[1]["device"], reply[1]["where"]
        return None

    def start(self) -> str | None:
        """Start the worker now (else the first job does): None, or why it could not start (a
        remote worker: no device). ``device`` and ``where`` then say where it measures."""
        if self._proc is not None and self._proc.poll() is None:
            return None
        return self._start()

    def _died(self) -> str:
        """Stop a worker that closed its connection; the error text saying so."""
        proc = self._proc
        code = None
        if proc is not None:
            try:
                code = proc.wait(5)
            except subprocess.TimeoutExpired:
                code = None
        self._stop(kill=True)
        return f"worker process died (exit code {code})"

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

    def close(self, kill: bool = False) -> None:
        """Stop the worker process (``kill``: at once, even in the middle of a job)."""
        self._stop(kill=kill)

    def __enter__(self) -> "Measurer":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(kill=exc_type is not None)  # an exception (Ctrl-C): no waiting for the job

    def __del__(self):
        try:
            self._stop(kill=True)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # -- measuring ----------------------------------------------------------------
    def _job(self, msg: tuple) -> tuple[float | None, int, str | None, bool | None]:
        """Send one job to the worker (starting one if needed): (seconds, repeats, error, tuned: see
        ``MeasureResult.tuned``); a remote device that went away (or never came) sets ``lost``."""
        if self.lost:
            return None, 0, self.lost, None
        if self._proc is None or self._proc.poll() is not None:
            if self._proc is not None:
                self._stop(kill=True)
            error = self._start()
            if error is not None:
                return None, 0, error, None
        timeout = self.config.timeout_s + (self.config.startup_s if self._fresh else 0.0)
        self._fresh = False
        try:
            self._conn.send(msg)
            deadline = time.monotonic() + timeout
            while not self._conn.poll(min(0.5, max(0.0, deadline - time.monotonic()))):
                if time.monotonic() >= deadline:
                    self._stop(kill=True)
                    if self.remote is not None:  # a device that stops answering is taken for gone
                        self.lost = f"{self.where} did not answer within {timeout:.0f} s"
                        return None, 0, self.lost, None
                    return None, 0, f"timeout: no result after {timeout:.0f} s (worker killed)", None
                if self._proc.poll() is not None:
                    break
            reply = self._conn.recv()
        except (EOFError, OSError):
            return None, 0, self._died(), None
        if reply[0] == "ok":
            return reply[1], reply[2], None, reply[3]
        if reply[0] == "lost":
            self.lost = reply[1]
            self._stop(kill=True)
        return None, 0, reply[1], None

    def measure(self, inst: OpInstance) -> MeasureResult:
        """Measure one instance (no cache involved); failures come back as error results."""
        t0 = time.perf_counter()
        res = MeasureResult(inst, self.target, self.backend)
        if inst.op in GRAPH_LEVEL_OPS or inst.op == "opaque":
            res.error = f"{inst.op} is not a kernel and is never measured"
            return res
        res.seconds, res.repeats, res.error, res.tuned = self._job(("op",) + inst.key() + (inst.out_str,))
        res.wall_s = time.perf_counter() - t0
        res.device, res.lost, res.where = self.device, bool(self.lost), self.where
        return res

    def measure_zoo_model(self, name: str, small: bool = False) -> tuple[float | None, str | None]:
        """End-to-end seconds of a zoo model built whole by TVM: (seconds, error)."""
        seconds, _, error, _ = self._job(("zoo", name, bool(small)))
        return seconds, error
