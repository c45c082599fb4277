"""The persistent operator-cost cache: an sqlite database shared by every process.

Rows are keyed by (op, canonical attrs, input shapes, dtype, target, backend,
device) and hold the median seconds of a measurement, the number of timed
repeats and when it was taken. ``device`` is ``''`` for a measurement taken on
this machine, else an opaque name of the device it was taken on (what a remote
reports of its CPU), so two boards with one target string keep their own rows.
Kernels built under a user's tuning records are kept beside the untuned ones, under the device
:func:`tuned_device` names (the device, then ``|tuned:`` and the records' digest).
Failed measurements (a build error, a crash, a timeout) go to a separate table
so that a batch does not retry them forever. A database of the older schema
(no ``device`` column) is migrated on connect, its rows becoming device ``''``
(read through temporary views that say so when the file cannot be written).

The default location is ``<user cache dir>/relay-eqsat/costs.sqlite``
(platformdirs), overridden by the ``path`` argument or the
``RELAY_EQSAT_COST_DB`` environment variable. The database runs in WAL mode
with a busy timeout, and every write is one short ``INSERT OR REPLACE``
transaction, so several processes (a measuring batch, a search reading
costs) share it safely, and an interrupted run keeps every row it committed.

A database that cannot be used (a path that is a directory or lies under a
file, a file that is not sqlite, a directory without write permission) does
not stop anything: the cache falls back to holding nothing (reads see no
rows, writes are dropped; a database that reads but cannot be written keeps
its rows) and logs one warning per path saying that the shipped data is used
and measurements will not be kept (``CostCache.error`` says why).
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import os
import re
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..graph import TensorType
from .instance import GROUP_OP, STREAM_OP, OpInstance, attrs_from_str

log = logging.getLogger(__name__)

ENV_DB = "RELAY_EQSAT_COST_DB"
#: set to 1 to ignore the measurements and models shipped for particular CPUs (the path a CPU the
#: project never measured takes; benchmarks use it to exercise calibration on a CPU that has data)
ENV_IGNORE_SHIPPED = "RELAY_EQSAT_IGNORE_SHIPPED"
APP_NAME = "relay-eqsat"

_KEY = ("op TEXT NOT NULL, attrs TEXT NOT NULL, shapes TEXT NOT NULL, dtype TEXT NOT NULL, "
        "target TEXT NOT NULL, backend TEXT NOT NULL, device TEXT NOT NULL DEFAULT ''")
_PRIMARY_KEY = "PRIMARY KEY (op, attrs, shapes, dtype, target, backend, device)"
#: the columns of each table after the key (the key's are the same in both)
_VALUES = {
    "costs": "out_type TEXT NOT NULL, seconds REAL NOT NULL, repeats INTEGER NOT NULL, timestamp REAL NOT NULL",
    "failures": "out_type TEXT NOT NULL, error TEXT NOT NULL, timestamp REAL NOT NULL",
}
_KEY_COLUMNS = ("op", "attrs", "shapes", "dtype", "target", "backend")  # without device: the older schema's
_VALUE_COLUMNS = {"costs": ("out_type", "seconds", "repeats", "timestamp"),
                  "failures": ("out_type", "error", "timestamp")}


def _create_table(name: str, table: str, if_not_exists: bool = True) -> str:
    """The ``CREATE TABLE`` statement of ``table`` (costs or failures) under the name ``name``."""
    return (f"CREATE TABLE {'IF NOT EXISTS ' if if_not_exists else ''}{name} "
            f"({_KEY}, {_VALUES[table]}, {_PRIMARY_KEY})")


_SCHEMA = ";\n".join([_create_table("costs", "costs"), _create_table("failures", "failures"),
                      "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"]) + ";"


def cache_dir() -> Path:
    """The user cache directory of relay-eqsat (platformdirs)."""
    import platformdirs

    return Path(platformdirs.user_cache_dir(APP_NAME))


def default_db_path() -> Path:
    """``$RELAY_EQSAT_COST_DB``, else ``<user cache dir>/relay-eqsat/costs.sqlite``."""
    env = os.environ.get(ENV_DB)
    if env:
        return Path(env).expanduser()
    return cache_dir() / "costs.sqlite"


def normalize_target(target) -> str:
    """Canonical target text: the kind, then its options sorted (``llvm -mcpu=.. -mtriple=..``).

    ``-keys=`` is dropped: TVM adds it when printing a Target (``-keys=cpu``),
    so a Target object and the string it was made from give the same text.
    """
    parts = str(target).split()
    if not parts:
        raise ValueError("empty target")
    return " ".join([parts[0]] + sorted(p for p in parts[1:] if not p.startswith("-keys=")))


@dataclass(frozen=True)
class CostRow:
    """One cached measurement (``device``: ``''`` for this machine)."""

    instance: OpInstance
    target: str
    backend: str
    seconds: float
    repeats: int
    timestamp: float
    device: str = ""


#: what :func:`tuned_device` puts between a device and the records' digest
TUNED_MARK = "|tuned:"


def tuned_device(device: str, tuning: str | None) -> str:
    """The ``device`` key of measurements taken on ``device`` with kernels built under the tuning
    records of digest ``tuning`` (``device`` itself for none): the same kernel's tuned and
    untuned times are two rows."""
    return f"{device}{TUNED_MARK}{tuning[:16]}" if tuning else device


def _where(target: str | None, backend: str | None, device: str | None = None) -> tuple[str, tuple]:
    """An SQL ``WHERE`` clause (or nothing) selecting one target, backend and/or device, and its
    parameters (None: any)."""
    cond, params = [], []
    if target is not None:
        cond.append("target=?")
        params.append(normalize_target(target))
    if backend is not None:
        cond.append("backend=?")
        params.append(backend)
    if device is not None:
        cond.append("device=?")
        params.append(device)
    return (" WHERE " + " AND ".join(cond) if cond else ""), tuple(params)


def _old_tables(conn: sqlite3.Connection) -> list[str]:
    """The tables (costs, failures) of the file still of the schema without the ``device`` column."""
    return [t for t in ("costs", "failures")
            if "device" not in {row[1] for row in conn.execute(f"PRAGMA main.table_info({t})")}]


def _migrate(conn: sqlite3.Connection) -> None:
    """Give the tables of an older database the ``device`` column (their rows: device ``''``), all
    rebuilt (the primary key changes) in one immediate transaction, in their order; nothing when
    already done."""
    if not _old_tables(conn):
        return
    try:
        conn.execute("BEGIN IMMEDIATE")
        for t in _old_tables(conn):  # again, in the transaction: another process may have done it
            cols = ", ".join(_KEY_COLUMNS + _VALUE_COLUMNS[t])
            conn.execute(_create_table(f"{t}_new", t, if_not_exists=False))
            conn.execute(f"INSERT INTO {t}_new ({cols}, device) SELECT {cols}, '' FROM main.{t} ORDER BY rowid")
            conn.execute(f"DROP TABLE main.{t}")
            conn.execute(f"ALTER TABLE {t}_new RENAME TO {t}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


#: the pooling ops: since 2026-12-06 timed on x86 on the channel blocks a convolution hands them
#: (``passes/runtime/kernels.py``, ``blocked_pool``), before on channels-first maps, where a global
#: pool and its whole-map window ran alike; a database's rows of before are dropped once
#: (:func:`_forget_remeasured`), the meta key marking it done
POOL_OPS = ("nn.max_pool2d", "nn.avg_pool2d", "nn.global_avg_pool2d", "nn.global_max_pool2d")
_REMEASURED_KEY = "pools_on_channel_blocks"


def _forget_remeasured(conn: sqlite3.Connection) -> None:
    """Drop the TVM rows of :data:`POOL_OPS` measured before their measurement changed (once per
    database, in one immediate transaction; the meta key says it was done)."""
    if conn.execute("SELECT 1 FROM meta WHERE key=?", (_REMEASURED_KEY,)).fetchall():
        return
    marks = ",".join("?" * len(POOL_OPS))
    try:
        conn.execute("BEGIN IMMEDIATE")
        if not conn.execute("SELECT 1 FROM meta WHERE key=?", (_REMEASURED_KEY,)).fetchall():
            conn.execute(f"DELETE FROM costs WHERE op IN ({marks}) AND backend LIKE 'tvm-%'", POOL_OPS)
            conn.execute("INSERT OR REPLACE INTO meta VALUES (?,?)", (_REMEASURED_KEY, "1"))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _old_tables_as_views(conn: sqlite3.Connection) -> None:
    """Read an older database that cannot be migrated (cannot be written) through temporary views
    that add ``device`` ``''`` to its rows (a temporary name shadows the file's table)."""
    for t in _old_tables(conn):
        cols = ", ".join(_KEY_COLUMNS + _VALUE_COLUMNS[t])
        conn.execute(f"CREATE TEMP VIEW IF NOT EXISTS {t} AS SELECT rowid AS rowid, {cols}, '' AS device "
                     f"FROM main.{t}")


#: database paths already warned about (one warning per path and process)
_WARNED: set[str] = set()


def _storage_error(e: BaseException) -> bool:
    """Whether ``e`` says the database file cannot be used (not a bug in a statement)."""
    return isinstance(e, (OSError, sqlite3.OperationalError)) or type(e) is sqlite3.DatabaseError


class CostCache:
    """An sqlite-backed cost cache (one connection per process, opened lazily).

    ``error`` is None while the database works; else why it cannot be read
    (the cache then holds nothing) or written (rows read, writes dropped)."""

    def __init__(self, path: str | os.PathLike | None = None, timeout: float = 60.0):
        self.path = Path(path).expanduser() if path is not None else default_db_path()
        self.timeout = timeout
        self.error: str | None = None
        self._readable = True
        self._writable = True
        self._conn: sqlite3.Connection | None = None
        self._pid: int | None = None
        self._lock = threading.Lock()

    # -- connection -----------------------------------------------------------
    def _connect(self) -> sqlite3.Connection | None:
        """The connection (None once the database proved unusable); call with the lock held."""
        if not self._readable:
            return None
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        conn = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(self.path), timeout=self.timeout, isolation_level=None,
                                   check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout={int(self.timeout * 1000)}")
            self._retry(lambda: conn.execute("PRAGMA journal_mode=WAL"))
            conn.execute("PRAGMA synchronous=NORMAL")
            self._retry(lambda: conn.executescript(_SCHEMA))
        except Exception as e:  # noqa: BLE001 - filtered by _storage_error
            if conn is not None:
                conn.close()
            if not _storage_error(e):
                raise
            self._unusable(e, readable=False)
            return None
        self._conn, self._pid = conn, os.getpid()
        try:
            self._retry(lambda: _migrate(conn))
            self._retry(lambda: _forget_remeasured(conn))
        except Exception as e:  # noqa: BLE001 - filtered by _storage_error
            if not _storage_error(e):
                raise
            self._unusable(e, readable=True)  # an older file that cannot be written: read it as it is
            try:
                _old_tables_as_views(conn)
            except Exception as e2:  # noqa: BLE001 - filtered by _storage_error
                if not _storage_error(e2):
                    raise
                self._unusable(e2, readable=False)
                return None
        return conn

    def _unusable(self, error: BaseException, readable: bool) -> None:
        """Stop using the database (or only stop writing to it) and warn once per path."""
        self.error = f"{type(error).__name__}: {error}"
        self._writable = False
        if not readable:
            self._readable = False
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None
        key = str(self.path)
        if key not in _WARNED:
            _WARNED.add(key)
            log.warning("relay-eqsat: the cost database %s cannot be %s (%s); using the shipped cost data, "
                        "and measurements will not be kept", self.path, "read" if not readable else "written",
                        self.error)

    def _retry(self, fn):
        """Run ``fn``, retrying 'database is locked' past sqlite's own busy handler."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _write(self, *statements: tuple[str, tuple]) -> None:
        """Run (sql, params) statements in one short immediate transaction
        (dropped when the database cannot be written)."""
        with self._lock:
            conn = self._connect() if self._writable else None
            if conn is None:
                return

            def tx():
                try:
                    conn.execute("BEGIN IMMEDIATE")
                    for sql, params in statements:
                        conn.execute(sql, params)
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise

            try:
                self._retry(tx)
            except Exception as e:  # noqa: BLE001 - filtered by _storage_error
                if not _storage_error(e):
                    raise
                self._unusable(e, readable=True)

    def _query(self, sql: str, params: tuple = ()) -> list[tuple]:
        """The rows of a query (none when the database cannot be read)."""
        with self._lock:
            conn = self._connect()
            if conn is None:
                return []
            try:
                return self._retry(lambda: conn.execute(sql, params).fetchall())
            except Exception as e:  # noqa: BLE001 - filtered by _storage_error
                if not _storage_error(e):
                    raise
                self._unusable(e, readable=False)
                return []

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            self._conn = None

    def __enter__(self) -> "CostCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getstate__(self):
        return {"path": self.path, "timeout": self.timeout}

    def __setstate__(self, state):
        self.__init__(state["path"], state["timeout"])

    # -- costs ----------------------------------------------------------------
    # ``device`` in each: ``''`` is this machine, else the device a measurement was taken on
    def put(self, inst: OpInstance, target: str, backend: str, seconds: float, repeats: int,
            timestamp: float | None = None, device: str = "") -> None:
        """Store (or replace) a measurement; clears a recorded failure of the same key. A time must
        be positive, except a fused group's or a stream probe's (what an epilogue or a weight's stream
        adds: timing noise can make it slightly negative; `relay_eqsat.cost.groups`, `.streams`)."""
        if not (seconds > 0 or (inst.op in (GROUP_OP, STREAM_OP) and math.isfinite(seconds))):
            raise ValueError(f"a measured time must be positive, got {seconds}")
        target = normalize_target(target)
        key = inst.key() + (target, backend, str(device))
        ts = time.time() if timestamp is None else timestamp
        self._write(("INSERT OR REPLACE INTO costs (op, attrs, shapes, dtype, target, backend, device, out_type, "
                     "seconds, repeats, timestamp) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                     key + (inst.out_str, float(seconds), int(repeats), ts)),
                    ("DELETE FROM failures WHERE op=? AND attrs=? AND shapes=? AND dtype=? "
                     "AND target=? AND backend=? AND device=?", key))

    def get(self, inst: OpInstance, target: str, backend: str | None = None, device: str = "") -> CostRow | None:
        """The cached row for ``inst`` on ``target`` and ``device`` (any backend when ``backend`` is None)."""
        target = normalize_target(target)
        sql = ("SELECT backend, seconds, repeats, timestamp FROM costs WHERE op=? AND attrs=? "
               "AND shapes=? AND dtype=? AND target=? AND device=?")
        params = inst.key() + (target, device)
        if backend is not None:
            sql += " AND backend=?"
            params += (backend,)
        rows = self._query(sql + " ORDER BY timestamp DESC LIMIT 1", params)
        if not rows:
            return None
        b, s, r, ts = rows[0]
        return CostRow(inst, target, b, s, r, ts, device)

    def rows(self, target: str | None = None, backend: str | None = None,
             device: str | None = None) -> Iterator[CostRow]:
        """Every cached measurement, optionally of one target, backend and/or device (None: any)."""
        where, params = _where(target, backend, device)
        sql = ("SELECT op, attrs, shapes, dtype, out_type, target, backend, seconds, repeats, timestamp, device "
               "FROM costs" + where)
        for op, a, sh, dt, out, t, b, s, r, ts, d in self._query(sql + " ORDER BY rowid", params):
            yield CostRow(OpInstance.from_key(op, a, sh, dt, out), t, b, s, r, ts, d)

    def lookup_table(self, target: str, backend: str | None = None, device: str = "") -> dict[tuple, float]:
        """{instance key: seconds} for one target (and backend) on one device, for fast in-memory lookups."""
        table: dict[tuple, float] = {}
        sql = "SELECT op, attrs, shapes, dtype, seconds FROM costs WHERE target=? AND device=?"
        params: tuple = (normalize_target(target), device)
        if backend is not None:
            sql += " AND backend=?"
            params += (backend,)
        for op, a, sh, dt, s in self._query(sql + " ORDER BY timestamp", params):
            table[(op, a, sh, dt)] = s
        return table

    def export_rows(self, target: str, backend: str, device: str = "") -> dict:
        """The measurements of (target, backend) on ``device`` as a JSON-able dict (see `shipped_table`;
        a ``device`` key only for another device than this machine)."""
        rows = [[op, a, sh, dt, s] for (op, a, sh, dt), s in self.lookup_table(target, backend, device).items()]
        out = {"target": normalize_target(target), "backend": backend, "rows": rows}
        if device:
            out["device"] = device
        return out

    def count(self, target: str | None = None, backend: str | None = None, device: str | None = None) -> int:
        """How many measurements the cache holds, optionally of one target, backend and/or device."""
        where, params = _where(target, backend, device)
        rows = self._query("SELECT COUNT(*) FROM costs" + where, params)
        return rows[0][0] if rows else 0

    # -- failures -------------------------------------------------------------
    def put_failure(self, inst: OpInstance, target: str, backend: str, error: str, device: str = "") -> None:
        key = inst.key() + (normalize_target(target), backend, str(device))
        self._write(("INSERT OR REPLACE INTO failures (op, attrs, shapes, dtype, target, backend, device, "
                     "out_type, error, timestamp) VALUES (?,?,?,?,?,?,?,?,?,?)",
                     key + (inst.out_str, str(error)[-4000:], time.time())))

    def get_failure(self, inst: OpInstance, target: str, backend: str, since: float = 0.0,
                    device: str = "") -> str | None:
        """Why ``inst`` could not be measured on ``device``, as recorded at ``since`` (a time.time())
        or later; None if no such failure is recorded."""
        rows = self._query("SELECT error FROM failures WHERE op=? AND attrs=? AND shapes=? AND dtype=? "
                           "AND target=? AND backend=? AND device=? AND timestamp>=?",
                           inst.key() + (normalize_target(target), backend, device, since))
        return rows[0][0] if rows else None

    # -- small key/value store (e.g. the resolved host target) -----------------
    def get_meta(self, key: str) -> str | None:
        rows = self._query("SELECT value FROM meta WHERE key=?", (key,))
        return rows[0][0] if rows else None

    def set_meta(self, key: str, value: str) -> None:
        self._write(("INSERT OR REPLACE INTO meta VALUES (?,?)", (key, value)))


SHIPPED_MEASUREMENTS = Path(__file__).parent / "data"


def shipped_table_path(target: str, backend: str) -> Path:
    """Where the measurements of (target, backend) ship: ``data/measured-<backend>__<target>.json.gz``."""
    return SHIPPED_MEASUREMENTS / f"measured-{backend}__{target_slug(target)}.json.gz"


def target_slug(target: str) -> str:
    """The normalized target string as a file-name part."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", normalize_target(target)).strip("_")


def device_slug(device: str) -> str:
    """A device name as a file-name part: its characters sanitized as `target_slug`'s, then a short
    hash of the exact name (two names that sanitize alike stay apart)."""
    digest = hashlib.sha1(device.encode()).hexdigest()[:8]
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", device).strip("_")
    return f"{slug}-{digest}" if slug else digest


def ignore_shipped() -> bool:
    """Whether ``$RELAY_EQSAT_IGNORE_SHIPPED`` hides the per-CPU shipped data."""
    return os.environ.get(ENV_IGNORE_SHIPPED, "").strip().lower() in ("1", "true", "yes", "on")


def shipped_table(target: str, backend: str | None) -> dict[tuple, float]:
    """Measurements shipped with the package (``data/measured-<backend>__<target>.json.gz``,
    one file per CPU they were taken on) if one was taken on this very target; else empty
    (also when :func:`ignore_shipped`)."""
    if backend is None or ignore_shipped():
        return {}
    path = shipped_table_path(target, backend)
    if not path.exists():
        return {}
    data = _read_shipped(path)
    if data.get("target") != normalize_target(target):
        return {}
    return {(op, a, sh, dt): s for op, a, sh, dt, s in data["rows"]}


def shipped_samples(target: str, backend: str) -> list[tuple[OpInstance, float]]:
    """(instance, seconds) of every measurement shipped for (target, backend), in the file's
    order, the output types inferred (what retraining a shipped model reads)."""
    path = shipped_table_path(target, backend)
    if not path.exists():
        return []
    out = []
    for op, a, sh, dt, s in _read_shipped(path)["rows"]:
        shapes = json.loads(sh)
        dts = dt.split(",") if "," in dt else [dt] * len(shapes)
        types = [TensorType(tuple(shape), d) for shape, d in zip(shapes, dts)]
        out.append((OpInstance.make(op, attrs_from_str(a), types), float(s)))
    return out


def all_samples(cache: CostCache, target: str, backend: str, device: str = "") -> list[tuple[OpInstance, float]]:
    """(instance, seconds) of every measurement of (target, backend) on ``device``: on this machine
    (``''``) those shipped for the target and the cache's own (which win where both measured a
    kernel); on another device only the cache's rows of that device (the shipped data are this
    machine kind's)."""
    rows = {} if device or ignore_shipped() else {i.key(): (i, s) for i, s in shipped_samples(target, backend)}
    rows.update({r.instance.key(): (r.instance, r.seconds) for r in cache.rows(target, backend, device=device)})
    return list(rows.values())


@functools.lru_cache(maxsize=8)
def _read_shipped(path: Path) -> dict:
    import gzip

    with gzip.open(path, "rt") as f:
        return json.load(f)
