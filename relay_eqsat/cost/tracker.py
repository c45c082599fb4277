"""Asking a TVM RPC tracker what devices it has, in bounded time, without TVM.

TVM's users register their boards with a tracker (``python -m tvm.exec.rpc_tracker``) and
``python -m tvm.exec.rpc_server --tracker HOST:PORT --key KEY`` on each board. Before the pass
measures anything over RPC it asks the tracker (:func:`summary`) whether it answers and how many
devices under the key are free (:func:`devices`): a tracker that is down, or a host that does not
answer, fails within ``timeout`` seconds with a :class:`TrackerError` naming the address, instead
of TVM's own client, which retries for minutes. The sessions themselves are TVM's
(``relay_eqsat.passes.runtime.remote``).

The protocol (TVM's ``tvm.rpc.base``): the client sends the tracker's magic number as a
little-endian int32 and reads it back; then each message is a JSON value preceded by its length
(int32). ``[SUMMARY]`` is answered ``[SUCCESS, {"queue_info": {key: {"free": n, "pending": m}},
"server_info": [{"key": "server:KEY", "addr": [host, port]}, ...]}]``.
"""
from __future__ import annotations

import json
import socket
import struct
from dataclasses import dataclass, field

#: TVM's tracker magic number and codes (tvm/rpc/base.py)
TRACKER_MAGIC = 0x2F271
CODE_SUCCESS = 0
CODE_REQUEST = 4
CODE_SUMMARY = 6
#: seconds within which a tracker must answer
DEFAULT_TIMEOUT = 10.0


class TrackerError(RuntimeError):
    """The tracker cannot be used: it does not answer, or it has no device under the key."""


@dataclass(frozen=True)
class Remote:
    """Where to measure: devices registered under ``key`` with the tracker at ``host:port``."""

    host: str
    port: int
    key: str
    timeout: float = DEFAULT_TIMEOUT

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def describe(self) -> str:
        return f"key {self.key!r} at tracker {self.address}"


def parse_address(text: str) -> tuple[str, int]:
    """("host", port) of ``"host:port"``; ValueError saying what is wrong."""
    host, sep, port = str(text).strip().rpartition(":")
    if not sep or not host:
        raise ValueError(f"{text!r} is not host:port (e.g. 127.0.0.1:9190)")
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"{text!r}: the port {port!r} is not a number") from None
    if not 0 < number < 65536:
        raise ValueError(f"{text!r}: the port {number} is out of range")
    return host.strip("[]"), number


def remote_from_options(tracker: str | None, key: str | None, timeout: float = DEFAULT_TIMEOUT) -> Remote | None:
    """The :class:`Remote` of the ``rpc_tracker``/``rpc_key`` options (None when neither is set);
    ValueError when only one is."""
    if not tracker and not key:
        return None
    if not tracker or not key:
        given, missing = ("rpc_tracker", "rpc_key") if tracker else ("rpc_key", "rpc_tracker")
        raise ValueError(f"option {given} needs {missing} too (the tracker's host:port and the devices' key)")
    host, port = parse_address(tracker)
    return Remote(host, port, str(key), timeout)


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the connection closed")
        data += chunk
    return data


def _ask(remote: Remote, message: list, silent: str | None = None) -> list:
    """Send one message to the tracker and return its answer, all within ``remote.timeout``
    (``silent``: what a tracker that says nothing in that time means, if not that it is down)."""
    try:
        with socket.create_connection((remote.host, remote.port), timeout=remote.timeout) as sock:
            sock.settimeout(remote.timeout)
            sock.sendall(struct.pack("<i", TRACKER_MAGIC))
            (magic,) = struct.unpack("<i", _recv_exactly(sock, 4))
            if magic != TRACKER_MAGIC:
                raise TrackerError(f"{remote.address} is not a TVM RPC tracker (it answered {magic:#x})")
            data = json.dumps(message).encode()
            sock.sendall(struct.pack("<i", len(data)) + data)
            (size,) = struct.unpack("<i", _recv_exactly(sock, 4))
            return json.loads(_recv_exactly(sock, size).decode())
    except TrackerError:
        raise
    except socket.timeout:
        raise TrackerError(silent or f"the RPC tracker at {remote.address} did not answer within "
                                     f"{remote.timeout:g} s") from None
    except (OSError, ConnectionError, ValueError) as e:
        raise TrackerError(f"the RPC tracker at {remote.address} cannot be reached "
                           f"({type(e).__name__}: {e})") from None


@dataclass
class Summary:
    """What the tracker said: per key, free devices and requests waiting; the servers' addresses."""

    queue: dict[str, dict] = field(default_factory=dict)
    servers: list[tuple[str, str]] = field(default_factory=list)  # (key, "host:port")

    def free(self, key: str) -> int:
        return int(self.queue.get(key, {}).get("free", 0))

    def total(self, key: str) -> int:
        return sum(k == key for k, _ in self.servers) or self.free(key)


def summary(remote: Remote) -> Summary:
    """The tracker's summary; TrackerError within ``remote.timeout`` when it does not answer."""
    answer = _ask(remote, [CODE_SUMMARY])
    if not isinstance(answer, list) or not answer or answer[0] != CODE_SUCCESS:
        raise TrackerError(f"the RPC tracker at {remote.address} refused a summary ({answer!r})")
    info = answer[1] if len(answer) > 1 and isinstance(answer[1], dict) else {}
    servers = []
    for s in info.get("server_info", []):
        key = str(s.get("key", ""))
        key = key.split(":", 1)[1] if key.startswith("server:") else key
        addr = s.get("addr") or ["?", "?"]
        servers.append((key, f"{addr[0]}:{addr[1]}"))
    return Summary(dict(info.get("queue_info", {})), servers)


def request(remote: Remote, priority: int = 1) -> tuple[str, int, str]:
    """(host, port, match key) of a device under the key, as the tracker hands it to a client that
    asks for a session, within ``remote.timeout`` (a request not answered by then is dropped: the
    tracker forgets it when the connection closes). TVM's ``rpc.connect`` opens the session."""
    answer = _ask(remote, [CODE_REQUEST, remote.key, "", priority],
                  silent=f"no device under key {remote.key!r} at the RPC tracker {remote.address} became free "
                         f"within {remote.timeout:g} s")
    if not isinstance(answer, list) or not answer or answer[0] != CODE_SUCCESS or len(answer) < 2:
        raise TrackerError(f"the RPC tracker at {remote.address} refused a session ({answer!r})")
    host, port, match = answer[1]
    return str(host), int(port), str(match)


def devices(remote: Remote) -> int:
    """How many devices are registered under ``remote.key`` (at least one, else TrackerError
    naming the keys the tracker has)."""
    s = summary(remote)
    n = s.total(remote.key)
    if n == 0:
        keys = sorted(set(s.queue) | {k for k, _ in s.servers})
        raise TrackerError(f"no device under key {remote.key!r} at the RPC tracker {remote.address} "
                           f"(its keys: {', '.join(keys) if keys else 'none'})")
    return n
