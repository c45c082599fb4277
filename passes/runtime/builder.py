"""Building programs in child processes: several at once, and beside the pass's other work.

A TVM build is one CPU for tens of seconds (ShuffleNet-v2: 18 s on a Zen 5) and cannot share a
process (two ``relay.build`` in two threads of one process fail in TOPI's tag scope), so the
runtime check's programs, built one after the other in the pass's process, left every other CPU
idle. A :class:`Builder` builds each program in its own process
(:mod:`.build_worker`, started by module name), at most ``slots`` at once (the pass's ``jobs``),
the rest queued; each exports a shared library that is loaded here (:class:`Prebuilt`, which
:func:`~.build.executor` takes as it takes ``relay.build``'s factory).

A build submitted with ``background`` runs at the lowest CPU priority (``SCHED_IDLE``): the pass
starts its input's build before the optimizer, and it takes only the CPU time the search and the
extraction leave; it is stopped while calibration times kernels (:meth:`Builder.paused`: even at
idle priority a build beside them disturbed their timings). When the runtime check starts, it
runs beside the check's own builds as any other.

Builds in child processes need a target that runs here or on an RPC device, and the host's C++
compiler where the library is for this machine's architecture: :func:`unavailable` says why not,
and the caller builds in its own process.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass

import tvm

from relay_eqsat.cost.measure import child_env
from relay_eqsat.cost.pool import default_jobs

from .build import host_arch_target
from .target import runs_here

WORKER_MODULE = "relay_eqsat.passes.runtime.build_worker"


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)


class BuildError(RuntimeError):
    """A program failed to build in its child process (the message is the error's last line)."""


class Prebuilt:
    """A program built by a child process: its exported library (``path``, which a
    :class:`~.remote.RemotePlace` uploads as it is) and, loaded here when first asked, what
    :func:`~.build.executor` needs of ``relay.build``'s factory (``get_lib()`` and ``["default"]``),
    its graph and parameters. ``build_s``: the child's seconds in ``relay.build``."""

    def __init__(self, path: str, build_s: float):
        self.path = path
        self.build_s = build_s
        self._factory = None
        weakref.finalize(self, _remove, path)  # the library goes with the last reference to it

    @property
    def factory(self):
        if self._factory is None:
            self._factory = tvm.runtime.load_module(self.path)
        return self._factory

    def get_lib(self):
        return self.factory

    def __getitem__(self, name: str):
        return self.factory[name]

    def get_graph_json(self) -> str:
        return self.factory["get_graph_json"]()

    def get_params(self) -> dict:
        return dict(self.factory["get_graph_params"]())


def _own_file(path: str) -> str:
    """Move a built library out of the builder's folder, into a file of its own that lives as long
    as the :class:`Prebuilt` made of it (``relay-eqsat optimize`` uploads the pass's programs to a
    device again after the pass, and its builder, ended)."""
    fd, own = tempfile.mkstemp(prefix="relay-eqsat-program-", suffix=os.path.splitext(path)[1])
    os.close(fd)
    shutil.move(path, own)
    return own


@dataclass(eq=False)
class BuildJob:
    """One program's build: queued, running (``proc``) or finished (``result``/``error``)."""

    mod: tvm.IRModule
    what: str
    background: bool
    spec: str
    out: str
    proc: subprocess.Popen | None = None
    started: float | None = None
    seconds: float | None = None  # from start to finish (the child's own build seconds: result.build_s)
    result: Prebuilt | None = None
    error: str | None = None
    cancelled: bool = False

    @property
    def finished(self) -> bool:
        return self.result is not None or self.error is not None or self.cancelled


def unavailable(target, remote: bool = False) -> str | None:
    """Why programs for ``target`` cannot be built in child processes here (None: they can): the
    target must run on this machine, or (``remote``) on a device of the RPC tracker, and a library
    for this machine's architecture be exported by the host's C++ compiler (another's is linked by
    ``<triple>-g++`` or by the device)."""
    if not remote and not runs_here(target):
        return f"{target} does not run on this machine"
    compiler = os.environ.get("CXX", "g++")
    if host_arch_target(target) and shutil.which(compiler) is None:
        return f"no C++ compiler ({compiler}) to export the built library"
    return None


class Builder:
    """Builds programs for ``target`` in child processes, at most ``slots`` at once (None:
    :func:`~relay_eqsat.cost.pool.default_jobs`), in the order submitted, under the tuning
    ``records`` (a :class:`~.records.TuningRecords`). Use as a context
    manager, or :meth:`close`: unfinished builds are stopped and their files removed."""

    def __init__(self, target, slots: int | None = None, records=None):
        self.target = str(target)
        self.records = records  # the TuningRecords every program is built under (None: none)
        self.slots = max(1, int(slots) if slots else default_jobs())
        self.jobs: list[BuildJob] = []
        self._dir = tempfile.mkdtemp(prefix="relay-eqsat-build-")
        self._t0 = time.perf_counter()

    def summary(self) -> list[dict]:
        """Each build so far: what, when it started and finished (seconds since the builder was
        made; None: not yet), its seconds in ``relay.build`` and how it ended."""
        def at(t):
            return None if t is None else round(t - self._t0, 2)

        return [{"what": j.what, "background": j.background, "started": at(j.started),
                 "finished": at(None if j.seconds is None else j.started + j.seconds),
                 "build_s": None if j.result is None else round(j.result.build_s, 2),
                 "state": ("built" if j.result is not None else "failed" if j.error is not None
                           else "cancelled" if j.cancelled else "running" if j.proc is not None else "queued")}
                for j in self.jobs]

    def __enter__(self) -> "Builder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def running(self) -> int:
        """Builds running now."""
        self._poll()
        return self._running()

    def _running(self) -> int:
        return sum(1 for j in self.jobs if j.proc is not None and not j.finished)

    def find(self, mod: tvm.IRModule) -> BuildJob | None:
        """The build of ``mod`` submitted before (the same module object), if any, not cancelled."""
        for job in self.jobs:
            if job.mod.same_as(mod) and not job.cancelled:
                return job
        return None

    def submit(self, mod: tvm.IRModule, what: str = "the program", background: bool = False,
               beside: bool = False) -> BuildJob | None:
        """Build ``mod``: now when a slot is free, else when one frees (``beside``: only now, else
        nothing is submitted and None returned). ``background``: at the lowest CPU priority."""
        found = self.find(mod)
        if found is not None:
            return found
        if beside and self.running() >= self.slots:
            return None
        n = len(self.jobs)
        module_path = os.path.join(self._dir, f"module{n}.json")
        with open(module_path, "w") as f:
            f.write(tvm.ir.save_json(mod))
        out = os.path.join(self._dir, f"program{n}")
        spec = os.path.join(self._dir, f"spec{n}.json")
        with open(spec, "w") as f:
            json.dump({"module": module_path, "target": self.target, "opt_level": 3, "out": out,
                       "background": background,
                       "tuning_records": None if self.records is None else self.records.path}, f)
        job = BuildJob(mod, what, background, spec, out)
        self.jobs.append(job)
        self._poll()
        return job

    def _start(self, job: BuildJob) -> None:
        job.started = time.perf_counter()
        job.proc = subprocess.Popen([sys.executable, "-m", WORKER_MODULE, job.spec], env=child_env(),
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _finish(self, job: BuildJob) -> None:
        rc = job.proc.returncode
        job.seconds = time.perf_counter() - job.started
        if rc == 0 and os.path.exists(job.out + ".json"):
            with open(job.out + ".json") as f:
                done = json.load(f)
            job.result = Prebuilt(_own_file(done["path"]), float(done["build_s"]))
            return
        if os.path.exists(job.out + ".err"):
            with open(job.out + ".err") as f:
                job.error = f.read()
        else:
            job.error = (f"the build process of {job.what} died (signal {-rc})" if rc < 0
                         else f"the build process of {job.what} ended with status {rc}")

    def _poll(self) -> None:
        """Collect finished builds and start queued ones in free slots."""
        for job in self.jobs:
            if job.proc is not None and not job.finished and job.proc.poll() is not None:
                self._finish(job)
        free = self.slots - self._running()
        for job in self.jobs:
            if free <= 0:
                break
            if job.proc is None and not job.cancelled:
                self._start(job)
                free -= 1

    def wait(self, job: BuildJob) -> Prebuilt:
        """The built program of ``job`` (waiting for it, and starting queued builds as slots free);
        :class:`BuildError` when it failed."""
        while not job.finished:
            self._poll()
            if job.proc is not None and not job.finished:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    job.proc.wait(timeout=0.05)
        if job.cancelled:
            raise BuildError(f"the build of {job.what} was cancelled")
        if job.error is not None:
            raise BuildError(job.error.splitlines()[0] if job.error.strip() else f"the build of {job.what} failed")
        return job.result

    @contextlib.contextmanager
    def paused(self):
        """Within this block the background builds running now are stopped (``SIGSTOP``), and go
        on after it: kernels timed while a build ran beside them at idle priority disagreed with
        their undisturbed times by a median 17% where alone they disagree by 4% (SqueezeNet1.1's,
        ``bench/rpc_measure.py``'s ``local2+build``)."""
        stopped = []
        for job in self.jobs:
            if job.background and job.proc is not None and job.proc.poll() is None:
                with contextlib.suppress(OSError):
                    os.kill(job.proc.pid, signal.SIGSTOP)
                    stopped.append(job)
        try:
            yield
        finally:
            for job in stopped:
                with contextlib.suppress(OSError):
                    os.kill(job.proc.pid, signal.SIGCONT)

    def cancel(self, job: BuildJob) -> None:
        """Stop ``job`` (queued or running); its slot frees."""
        if job.finished:
            return
        job.cancelled = True
        if job.proc is not None and job.proc.poll() is None:
            job.proc.kill()
            job.proc.wait()
        self._poll()

    def close(self) -> None:
        """Stop every unfinished build and remove the files (loaded libraries stay loaded)."""
        for job in self.jobs:
            if job.proc is not None and job.proc.poll() is None:
                job.proc.kill()
                with contextlib.suppress(Exception):
                    job.proc.wait(timeout=10)
            if not job.finished:
                job.cancelled = True
        shutil.rmtree(self._dir, ignore_errors=True)
