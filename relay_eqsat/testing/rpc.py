"""A real TVM RPC tracker and servers on 127.0.0.1, started and stopped in bounded time.

``RpcCluster(servers=2, key="k")`` starts ``python -m tvm.exec.rpc_tracker`` and that many
``python -m tvm.exec.rpc_server --tracker ... --key ...`` (each in a process group of its own: a
server forks a process per session, and :meth:`RpcCluster.kill` takes down the group, as a board
that loses power would), and waits until the tracker lists them all free. Tests and
``bench/rpc_measure.py`` use it; the processes are TVM's own, this module imports no TVM.
"""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

from relay_eqsat.cost.tracker import Remote, TrackerError, summary


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RpcCluster:
    """A tracker and ``servers`` RPC servers under ``key`` on 127.0.0.1 (a context manager)."""

    def __init__(self, servers: int = 2, key: str = "relay-eqsat-test", timeout: float = 60.0,
                 python: str | None = None, env: dict | None = None, log=None):
        self.key = key
        self.timeout = timeout
        self.python = python or sys.executable
        self.env = dict(os.environ if env is None else env)
        self.port = free_port()
        self.tracker: subprocess.Popen | None = None
        self.servers: list[subprocess.Popen] = []
        self._count = servers
        self.log = subprocess.DEVNULL if log is None else log

    @property
    def remote(self) -> Remote:
        return Remote("127.0.0.1", self.port, self.key, timeout=10.0)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _spawn(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen([self.python, "-m", *args], env=self.env, stdin=subprocess.DEVNULL,
                                stdout=self.log, stderr=self.log, start_new_session=True)

    def start(self) -> "RpcCluster":
        self.tracker = self._spawn("tvm.exec.rpc_tracker", "--host", "127.0.0.1", "--port", str(self.port),
                                   "--port-end", str(self.port + 1))
        self.wait(lambda s: True, "the tracker to answer")
        for _ in range(self._count):
            self.add_server()
        return self

    def add_server(self) -> subprocess.Popen:
        base = free_port()
        proc = self._spawn("tvm.exec.rpc_server", "--tracker", self.address, "--key", self.key,
                           "--host", "127.0.0.1", "--port", str(base), "--port-end", str(base + 50))
        self.servers.append(proc)
        n = sum(p.poll() is None for p in self.servers)
        self.wait(lambda s: s.free(self.key) >= n, f"{n} servers free under {self.key!r}")
        return proc

    def wait(self, ready, what: str) -> None:
        deadline = time.monotonic() + self.timeout
        last = None
        while time.monotonic() < deadline:
            try:
                if ready(summary(Remote("127.0.0.1", self.port, self.key, timeout=2.0))):
                    return
            except TrackerError as e:
                last = e
            if self.tracker is not None and self.tracker.poll() is not None:
                raise RuntimeError(f"the RPC tracker exited (code {self.tracker.returncode})")
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"timed out after {self.timeout:g} s waiting for {what} ({last})")

    def kill(self, proc: subprocess.Popen) -> None:
        """Kill a process and every process of its group (a server and its sessions) at once."""
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)

    def stop(self) -> None:
        for p in self.servers:
            self.kill(p)
        if self.tracker is not None:
            self.kill(self.tracker)

    def __enter__(self) -> "RpcCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
