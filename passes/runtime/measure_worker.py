"""The measuring worker process of a ``Measurer``: ``python -m relay_eqsat.passes.runtime.measure_worker FD``.

FD is this process's end of a socket pair; the first message on it is
(target, backend, config, hook, place), answered ("ready", {device, where}) once this module's
imports (TVM) are done and, with ``place["remote"]``, a device is taken from the RPC tracker
(("unavailable", why) when none can be), then jobs as :func:`worker_main` reads them.
Started by module name (:data:`relay_eqsat.cost.measure.WORKER_MODULE`), so the
parent's ``__main__`` script is never run again here (multiprocessing's spawn
would import it). The probes the parent runs in a subprocess by name
(:data:`relay_eqsat.cost.measure.PROBE_BACKENDS`, ``PROBE_HOST_TARGET``) are here too.
"""
from __future__ import annotations

import sys
import traceback
from multiprocessing.connection import Connection

import tvm

from relay_eqsat.cost.instance import OpInstance
from relay_eqsat.cost.measure import BackendUnavailable, MeasureConfig

from .kernels import make_runner, time_zoo_model
from .remote import Place, open_place
from .target import host_target


def probe_host_target() -> str:
    """The host target (:func:`relay_eqsat.passes.runtime.target.host_target`)."""
    return str(host_target())


def probe_backends() -> dict[str, str | None]:
    """{backend: None if usable, else why not}. (Without TVM this module does not import: the
    parent then reports every backend unusable.)"""
    out: dict[str, str | None] = {}
    out["tvm-llvm"] = None if tvm.runtime.enabled("llvm") else "the installed TVM has no LLVM"
    if not tvm.runtime.enabled("cuda"):
        out["tvm-cuda"] = "the installed TVM was built without CUDA"
    elif not tvm.cuda(0).exist:
        out["tvm-cuda"] = "TVM has CUDA but no GPU is visible"
    else:
        out["tvm-cuda"] = None
    try:
        import torch

        if not torch.cuda.is_available():
            out["torch-cuda"] = "PyTorch is installed but sees no CUDA GPU"
        else:
            out["torch-cuda"] = None
    except ImportError:
        out["torch-cuda"] = "PyTorch is not installed"
    return out


def worker_main(conn, target: str, backend: str, config: dict, hook, place: dict | None = None) -> None:
    """The worker loop.

    Jobs: ("op", op, attrs, shapes, dtype, out) measures one op instance;
    ("zoo", name, small) times a whole zoo model (TVM backends only).
    Answers: ("ok", seconds, repeats, tuned), ("error", text), or ("lost", text) when the remote
    device went away (the worker then ends). None stops the loop. ``place["records"]``: the
    tuning log kernels are built under (``tuned``: whether it had the kernel's schedule; None
    without one).
    """
    cfg = MeasureConfig(**config)
    place = place or {}
    try:
        where: Place = open_place(place.get("remote"), target) if backend.startswith("tvm-") else Place()
    except Exception as e:  # noqa: BLE001 - no tracker, no device: the parent says so
        conn.send(("unavailable", str(e)))
        return
    # imports done (and the device taken): the parent's job timeouts start now
    conn.send(("ready", {"device": where.device, "where": where.where}))
    lock = place.get("timing_lock")
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
                    runner = make_runner(target, backend, cfg, where, lock, records=place.get("records"))
                seconds, repeats = runner(inst)
                tuned = getattr(runner, "tuned", None)
            elif msg[0] == "zoo":
                if not backend.startswith("tvm-"):
                    raise BackendUnavailable(f"whole models are timed with TVM backends only, not {backend}")
                seconds, repeats = time_zoo_model(msg[1], msg[2], target, cfg, where)
                tuned = None
            else:
                raise ValueError(f"unknown job {msg[0]!r}")
            conn.send(("ok", float(seconds), int(repeats), tuned))
        except Exception as e:  # noqa: BLE001 - every failure becomes an error result
            if not where.alive():  # the device went away: not this kernel's failure
                conn.send(("lost", f"{where.where} went away ({type(e).__name__})"))
                return
            # the last line of a TVM error says what went wrong; the traceback follows it
            lines = [ln for ln in str(e).strip().splitlines() if ln.strip()] or [""]
            tb = "\n".join(traceback.format_exc().strip().splitlines()[-8:])
            conn.send(("error", f"{type(e).__name__}: {lines[-1][:500]}\n{tb}"))


if __name__ == "__main__":
    connection = Connection(int(sys.argv[1]))
    worker_main(connection, *connection.recv())
