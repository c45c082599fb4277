"""Where built programs run: this machine, or a device taken from a TVM RPC tracker.

A :class:`Place` loads a built factory into a graph executor on its device (:meth:`Place.load`),
and gives the device to time on; the base class is this machine. :class:`RemotePlace` asks
the tracker for a session on a device under the key (bounded in time: the tracker is asked by
:mod:`relay_eqsat.cost.tracker` first, so one that is down fails within its timeout, and a request
no device takes in ``timeout`` seconds fails too), exports each program as a shared library
(the host's compiler for this machine's architecture, ``<triple>-g++`` when there is one, else
a tar of object files that the remote links itself), uploads it, loads it there and removes the
file (:func:`~.build.export`). ``device`` is what the remote reports of its CPU (:func:`cpu_fingerprint`; the key when it
reports nothing), ``where`` the key and the server's address. :meth:`Place.alive` tells a device
that went away from a program that failed.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid

import tvm
from tvm import rpc
from tvm.contrib import graph_executor

from relay_eqsat.cost.tracker import Remote, TrackerError, devices, remote_from_options, request

from .build import executor, export, loaded_executor
from .builder import Prebuilt

class RemoteLost(RuntimeError):
    """The remote device went away (its session broke)."""


class Place:
    """This machine: programs run on ``dev``."""

    remote: Remote | None = None
    device = ""
    where = "this machine"

    def __init__(self, target=None):
        kind = tvm.target.Target(str(target)).kind.name if target is not None else "cpu"
        self.dev = tvm.device(kind, 0)

    def load(self, lib) -> graph_executor.GraphModule:
        """A graph executor of the built factory ``lib`` on this place's device."""
        return executor(lib, self.dev)

    def alive(self) -> bool:
        return True

    def close(self) -> None:
        """Release the device (this machine's holds nothing)."""


#: sysfs files a remote's CPU is told by (proc files cannot be downloaded: they report no size)
CPU_FILES = ("/sys/devices/system/cpu/modalias", "/sys/devices/system/cpu/cpu0/regs/identification/midr_el1")


def cpu_fingerprint(modalias: str = "", midr: str = "", llvm_cpu: str = "", threads: int | None = None) -> str:
    """A CPU's identity from what its remote sends: the type part of its sysfs ``modalias``
    (``x86,ven0002fam001Amod0002``: vendor, family, model), an Arm core's ``midr_el1``
    (implementer, part, variant), LLVM's name for it (unless "generic") and the runtime's thread
    count; "" when there is none of these."""
    parts = []
    kind = modalias.strip("\x00 \n").split(":feature:")[0]
    if kind.startswith("cpu:type:"):
        kind = kind[len("cpu:type:"):]
    if kind:
        parts.append(kind)
    if midr.strip("\x00 \n"):
        parts.append(f"midr {midr.strip(chr(0) + ' ' + chr(10))}")
    if llvm_cpu and llvm_cpu != "generic":
        parts.append(llvm_cpu)
    if parts and threads:
        parts.append(f"threads {threads}")
    return ", ".join(parts)


def _remote_text(session, path: str) -> str:
    try:
        return bytes(session.download(path)).decode("utf-8", "replace").strip("\x00 \n")
    except Exception:  # noqa: BLE001 - not on this remote, or outside what it serves
        return ""


def _fingerprint(session, key: str) -> str:
    """What the remote reports of its CPU (:func:`cpu_fingerprint`), else the key."""
    def call(name, *args):
        try:
            return session.get_function(name)(*args)
        except Exception:  # noqa: BLE001 - a runtime without it
            return None

    cpu = call("target.llvm_get_system_cpu")
    cpu = call("runtime.GetFFIString", cpu) if cpu is not None else None
    threads = call("runtime.NumThreads")
    text = cpu_fingerprint(_remote_text(session, CPU_FILES[0]), _remote_text(session, CPU_FILES[1]),
                           str(cpu or ""), int(threads) if threads else None)
    return text or f"key:{key}"


class RemotePlace(Place):
    """A device under ``remote.key``, in a session from the tracker, for programs built for
    ``target``."""

    def __init__(self, remote: Remote, target):
        devices(remote)  # a tracker that is down, or no device under the key: TrackerError now
        host, port, match = request(remote)
        self.remote = remote
        self.target = tvm.target.Target(str(target))
        try:
            self.session = rpc.connect(host, port, key=match, session_timeout=0)
        except Exception as e:  # noqa: BLE001 - TVM raises TVMError
            raise TrackerError(f"the device at {host}:{port} (key {remote.key!r}) refused a session: "
                               f"{str(e).strip().splitlines()[-1] if str(e).strip() else e}") from None
        self.where = f"{remote.key} at {host}:{port} (tracker {remote.address})"
        self.dev = self.session.device(self.target.kind.name, 0)
        self.device = _fingerprint(self.session, remote.key)
        self._dir = tempfile.mkdtemp(prefix="relay-eqsat-rpc-")

    def _upload(self, lib):
        """``lib`` exported (a :class:`~.builder.Prebuilt` is, by its build process), uploaded and
        loaded on the device: its runtime module there."""
        prebuilt = isinstance(lib, Prebuilt)
        path = lib.path if prebuilt else export(lib, self.target, self._dir, f"relay_eqsat_{uuid.uuid4().hex[:12]}")
        name = os.path.basename(path)
        try:
            self.session.upload(path)
            # the server's own loader (hhb-tvm's client passes it arguments its Python server does not take)
            loaded = self.session.get_function("tvm.rpc.server.load_module")(name)
        except Exception as e:  # noqa: BLE001
            self._raise_if_lost(e)
            raise
        finally:
            if not prebuilt:  # the builder removes its own files
                os.remove(path)
        with contextlib.suppress(Exception):  # else the file stays in the server's temporary folder
            self.session.remove(name)
        return loaded

    def load(self, lib) -> graph_executor.GraphModule:
        if isinstance(lib, graph_executor.GraphModule):
            return lib
        loaded = self._upload(lib)
        try:
            return loaded_executor(loaded, loaded["default"], self.dev)
        except Exception as e:  # noqa: BLE001
            self._raise_if_lost(e)
            raise

    def alive(self) -> bool:
        """Whether the session still answers."""
        try:
            self.session.get_function("runtime.GetDeviceAttr")
            return bool(self.dev.exist)
        except Exception:  # noqa: BLE001
            return False

    def _raise_if_lost(self, e: BaseException) -> None:
        if not self.alive():
            raise RemoteLost(f"{self.where} went away ({type(e).__name__}: "
                             f"{str(e).strip().splitlines()[-1] if str(e).strip() else ''})") from e

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)
        self.session = self.dev = None


class RemoteUnavailable(RuntimeError):
    """The pass was told to measure over RPC and cannot: the tracker does not answer, or no
    device under the key can be had (the message says which, and where)."""


def probe_device(remote: Remote, target) -> str:
    """What the device the pass will measure on reports of its CPU: a session is opened and
    closed again (the device goes back to the tracker for calibration's workers).
    :class:`RemoteUnavailable` within the tracker's timeout when there is none."""
    try:
        place = RemotePlace(remote, target)
    except TrackerError as e:
        raise RemoteUnavailable(f"EqSatPass: cannot measure over RPC: {e}") from None
    device = place.device
    place.close()
    return device


def check_remote(tracker: str | None, key: str | None) -> Remote | None:
    """The :class:`Remote` of the ``rpc_tracker``/``rpc_key`` options, its tracker asked now
    (None without them): ValueError when only one is given, :class:`RemoteUnavailable` (within
    the tracker's timeout) when it does not answer or has no device under the key. The command
    lines call it before any work."""
    remote = remote_from_options(tracker, key)
    if remote is not None:
        try:
            devices(remote)
        except TrackerError as e:
            raise RemoteUnavailable(str(e)) from None
    return remote


def open_place(remote: Remote | None, target=None) -> Place:
    """The place programs for ``target`` run: a device from ``remote``'s tracker, else here."""
    return RemotePlace(remote, target) if remote is not None else Place(target)
