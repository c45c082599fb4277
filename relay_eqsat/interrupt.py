"""Ctrl-C for the command line: one line, exit status 130, no child process left behind.

In this package's own Python code a SIGINT raises ``KeyboardInterrupt``, which unwinds (closing
what it holds: the measuring worker is killed; every kernel measured so far is in the sqlite
cost database already, committed row by row) to the command's ``except KeyboardInterrupt``,
which calls :meth:`Interrupts.finish`: it kills any child process left, prints ``relay-eqsat
COMMAND: interrupted`` and returns :data:`EXIT_INTERRUPTED`.

Inside TVM that is not safe: the pass itself, TVM's operator strategies and compute rules run
as Python callbacks of TVM's C++ code, which does not expect a ``KeyboardInterrupt`` (it is
"ignored" by the FFI and the process may crash). So when the signal finds a TVM frame on the
stack, the handler ends the process itself: children killed, the line printed, stdout and
stderr flushed, ``os._exit(130)``. And a signal arriving while the main thread runs native code
that never returns to Python for long (a build, a solver, a long inference) reaches no Python
handler: it also wakes a watchdog thread (``signal.set_wakeup_fd``), which does the same once
the main thread has not finished within :data:`GRACE_S` (a second Ctrl-C: at once). The
database's writes are sqlite transactions (WAL): an exit between two, or in one, leaves it
consistent.
"""
from __future__ import annotations

import os
import signal
import socket
import sys
import threading

EXIT_INTERRUPTED = 128 + signal.SIGINT
#: seconds the main thread has, after a Ctrl-C, to unwind before the process is ended for it
GRACE_S = 2.0
#: packages whose Python code runs as callbacks of native code a KeyboardInterrupt must not cross
NATIVE_CALLERS = ("tvm",)


def in_native_caller(frame, packages: tuple[str, ...] = NATIVE_CALLERS) -> bool:
    """Whether ``frame`` or a frame below it belongs to one of ``packages``."""
    while frame is not None:
        name = frame.f_globals.get("__name__") or ""
        if any(name == p or name.startswith(p + ".") for p in packages):
            return True
        frame = frame.f_back
    return False


def child_pids(pid: int | None = None) -> list[int]:
    """The ids of the live child processes of ``pid`` (default: this process), from /proc
    (empty where there is no /proc)."""
    pid = os.getpid() if pid is None else pid
    out = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 1 and int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(entry))
    return out


def kill_children() -> None:
    """SIGKILL every live child of this process (the measuring worker, a probe)."""
    for pid in child_pids():
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


class Interrupts:
    """``with Interrupts("relay-eqsat optimize") as it: ... except KeyboardInterrupt: return it.finish()``.

    Outside the main thread (where signal handlers cannot be set) it does nothing but
    :meth:`finish`."""

    def __init__(self, command: str, grace: float = GRACE_S):
        self.command = command
        self.grace = grace
        self._lock = threading.Lock()
        self._finished = False
        self._done = threading.Event()
        self._active = False

    def __enter__(self) -> "Interrupts":
        if threading.current_thread() is not threading.main_thread():
            return self
        self._reader, self._writer = socket.socketpair()
        self._writer.setblocking(False)
        self._old_wakeup = signal.set_wakeup_fd(self._writer.fileno(), warn_on_full_buffer=False)
        self._old_handler = signal.signal(signal.SIGINT, self._handler)
        self._active = True
        self._thread = threading.Thread(target=self._watch, name="relay-eqsat-interrupts", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        if not self._active:
            return
        self._active = False
        signal.set_wakeup_fd(self._old_wakeup)
        signal.signal(signal.SIGINT, self._old_handler)
        try:
            self._writer.send(b"\0")  # wakes the watchdog, which sees done and returns
        except OSError:
            pass
        self._thread.join(1.0)
        self._writer.close()
        self._reader.close()

    def _handler(self, signum, frame) -> None:
        if in_native_caller(frame):
            self._end()  # a KeyboardInterrupt must not cross TVM's FFI; returns if ending already
            return
        raise KeyboardInterrupt

    def _end(self) -> None:
        """Report and end the process now (unless the main thread is finishing already)."""
        if self._claim():
            self._report()
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            os._exit(EXIT_INTERRUPTED)

    def _watch(self) -> None:
        seen = 0
        while True:
            try:
                data = self._reader.recv(64)
            except OSError:
                return
            if not data or self._done.is_set():
                return
            if signal.SIGINT not in data:
                continue
            seen += 1
            if self._done.wait(self.grace if seen == 1 else 0.0):
                return
            self._end()

    def _claim(self) -> bool:
        with self._lock:
            if self._finished:
                return False
            self._finished = True
            return True

    def _report(self) -> None:
        kill_children()
        try:
            clear = "\r\x1b[K" if sys.stderr.isatty() else ""  # over a progress bar's line
            sys.stderr.write(f"{clear}{self.command}: interrupted\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass

    def finish(self) -> int:
        """Kill the children left, print the one line; :data:`EXIT_INTERRUPTED`."""
        self._done.set()
        if self._claim():
            self._report()
        return EXIT_INTERRUPTED
