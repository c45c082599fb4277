"""Tuning records: the AutoTVM or auto-scheduler log a user tuned with, read, checked and applied.

``tvmc tune`` (AutoTVM, or ``--enable-autoscheduler``) writes one JSON record a line, and
``tvmc compile --tuning-records F`` builds under it. The pass builds what ships the same way:
:func:`load_records` reads a log (which kind, by its records' keys, as tvmc tells them apart),
rejecting a corrupt one with :class:`RecordsError` that names the file and line; :func:`applied`
is the context a build runs in (AutoTVM's ``apply_history_best``, or the auto-scheduler's
``ApplyHistoryBest`` with the PassContext config that makes Relay use it:
:data:`AUTO_SCHEDULER_CONFIG`). ``digest`` keys what depends on the records' content (remembered
verdicts, reused builds).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
from dataclasses import dataclass

#: the PassContext config under which Relay's build takes auto-scheduler records
AUTO_SCHEDULER_CONFIG = {"relay.backend.use_auto_scheduler": True}


class RecordsError(ValueError):
    """A tuning-records file that cannot be read (missing, empty, not JSON lines, or records of
    neither kind); the message names the file and the line."""


@dataclass(frozen=True)
class TuningRecords:
    """A tuning log: its ``path``, ``kind`` ("autotvm" or "auto_scheduler"), how many records and
    a ``digest`` of its content."""

    path: str
    kind: str
    count: int
    digest: str

    def describe(self) -> str:
        return f"{self.count} {self.kind} records from {self.path}"


def _kind(record, path: str, line: int) -> str:
    if isinstance(record, dict) and {"i", "r"} <= record.keys():
        inp = record["i"]
        if isinstance(inp, list) and len(inp) == 2 and isinstance(inp[0], list) and inp[0] and isinstance(inp[0][0], str):
            return "auto_scheduler"
    if isinstance(record, dict) and {"input", "config", "result"} <= record.keys():
        inp = record["input"]
        if isinstance(inp, list) and len(inp) >= 3 and isinstance(inp[0], str) and isinstance(inp[1], str):
            return "autotvm"
    raise RecordsError(f"{path}, line {line}: not an AutoTVM or auto-scheduler tuning record")


def load_records(path: str | os.PathLike) -> TuningRecords:
    """Read and check the tuning log ``path`` (:class:`RecordsError` when it cannot be used)."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise RecordsError(f"cannot read tuning records {path}: {e.strerror or e}") from None
    kinds, count = set(), 0
    for n, raw in enumerate(data.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise RecordsError(f"{path}, line {n}: not JSON ({e})") from None
        kinds.add(_kind(record, path, n))
        if "autotvm" in kinds:
            _check_autotvm(raw.decode("utf-8"), path, n)
        count += 1
    if not count:
        raise RecordsError(f"{path}: no tuning records in it")
    if len(kinds) > 1:
        raise RecordsError(f"{path}: AutoTVM and auto-scheduler records mixed in one file")
    return TuningRecords(path, kinds.pop(), count, hashlib.sha256(data).hexdigest()[:16])


def _check_autotvm(line: str, path: str, n: int) -> None:
    from tvm import autotvm

    try:
        decoded = autotvm.record.decode(line)
    except Exception as e:  # noqa: BLE001 - a record AutoTVM cannot take
        raise RecordsError(f"{path}, line {n}: AutoTVM cannot read this record ({type(e).__name__}: {e})") from None
    if decoded is None:
        raise RecordsError(f"{path}, line {n}: AutoTVM cannot read this record")


def history(path: str) -> str:
    """The file beside the tuning log ``path`` that holds its trials no longer in it (records a joint
    choice of the convolutions' records displaced, :mod:`.layouts`): tuning reads both as trials measured."""
    return path + ".trials"


def has_records(path: str) -> bool:
    """Whether the tuning log ``path`` exists with something in it (tuning starts one that does not)."""
    return os.path.exists(path) and os.path.getsize(path) > 0


def resolve(records) -> TuningRecords | None:
    """A :class:`TuningRecords` of the ``tuning_records`` option (a path, or records read already; None: none)."""
    if records is None or isinstance(records, TuningRecords):
        return records
    return load_records(records)


class Hits:
    """The workloads a build looked up in the records (``asked``: TVM asks for every implementation
    it weighs, several times over) and those they had (``found``): a kernel none of whose
    workloads were found runs TVM's untuned schedule."""

    def __init__(self) -> None:
        self.asked: set = set()
        self.found: set = set()


def _counting(context_class, hits: Hits):
    """A subclass of a dispatch context class (AutoTVM's or the auto-scheduler's ApplyHistoryBest)
    whose lookups are noted in ``hits``."""
    class Counting(context_class):
        def _query_inside(self, target, workload, *args, **kwargs):
            found = super()._query_inside(target, workload, *args, **kwargs)
            key = (str(target), str(workload))
            hits.asked.add(key)
            if found is not None:
                hits.found.add(key)
            return found
    return Counting


@contextlib.contextmanager
def applied(records: TuningRecords | None, hits: Hits | None = None):
    """The context a build under ``records`` runs in (nothing for None), yielding the
    :class:`Hits` (``hits``, or new ones) its kernels' lookups count into; the PassContext config it
    needs: :func:`pass_config`."""
    hits = hits if hits is not None else Hits()
    if records is None:
        yield hits
        return
    if records.kind == "autotvm":
        from tvm.autotvm.task.dispatcher import ApplyHistoryBest
    else:
        from tvm.auto_scheduler import ApplyHistoryBest
    with _counting(ApplyHistoryBest, hits)(records.path):
        yield hits


def pass_config(records: TuningRecords | None) -> dict:
    """The PassContext config a build under ``records`` needs."""
    return dict(AUTO_SCHEDULER_CONFIG) if records is not None and records.kind == "auto_scheduler" else {}
