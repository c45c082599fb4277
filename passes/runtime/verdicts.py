"""Remembered runtime verdicts: a model whose optimization was measured once is not measured again.

The runtime check builds and times two programs, which costs far more than the
search; its verdicts are kept in the cost database (the ``meta`` table of the
sqlite file the cost model uses, ``$RELAY_EQSAT_COST_DB`` by default), keyed by
what decides them:

- ``pair``: (input program, result program, host (and the RPC device, when the programs were
  timed on one), the runtime's thread count, target, the check's settings) -> keep or not, with
  the figures that decided it;
- ``input``: (input program, every option, host, thread count, package version, the content
  the options name: `content_fingerprint`) -> "the result was measured no faster": a later run
  on the same model with the same options, rules and cost model returns the input at once,
  without searching;
- ``win``: the same key -> the program that was measured faster (its nodes,
  constants by name: their values are the input's) and its report: a later
  run returns it without searching. Searching again would not do: the first
  run's kernel measurements are in the database by then, and a candidate only
  the whole programs' runtime found faster (the measured kernels called it a
  tie) is no longer the cheapest extraction.

Programs are identified by the structural hash of ``main``'s parameters and
body (constants' values included). Mismatches and failed builds are never
remembered: they warn on every run. Delete the database (or point
``RELAY_EQSAT_COST_DB`` elsewhere) to measure again.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Mapping

import tvm
from tvm import relay

from relay_eqsat.cost.instance import attrs_from_str, attrs_to_str
from relay_eqsat.graph import TensorGraph, TensorType

from .build import thread_count
from .target import host_target

#: report keys a verdict carries
VERDICT_KEYS = ("changed", "reason", "verify_error", "runtime_before", "runtime_after", "measured_speedup",
                "runtime_wins", "runtime_untimed")


def runtime_threads() -> str:
    """The thread count TVM's runtime is set to run a kernel with (``TVM_NUM_THREADS``, or its
    default): part of a verdict's key, since a program measured faster on one thread need not be
    on eight."""
    threads = thread_count()
    if threads is not None:
        return str(threads)
    return os.environ.get("TVM_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS") or "default"


def program_hash(mod: tvm.IRModule) -> str:
    """Structural hash of ``main``'s parameters and body (not its attributes, which hold the
    report with this run's times)."""
    func = mod["main"]
    return str(tvm.ir.structural_hash(relay.Function(func.params, func.body)))


def program_record(graph: TensorGraph) -> dict | None:
    """``graph`` as JSON-able data: per node its op, inputs and canonical attributes (a constant by
    its name and type, not its value; an opaque node by its key, type and name, not its payload,
    the frontend's object). None for a graph without an output."""
    if graph.output is None:
        return None
    return {"nodes": [[n.op, list(n.inputs), attrs_to_str(n.attrs)] for n in graph.nodes], "output": graph.output}


def program_from_record(record: Mapping[str, Any], source: TensorGraph) -> TensorGraph | None:
    """The program of a ``program_record``, its constants' values taken by name and its opaque
    nodes' payloads by key from ``source`` (the input program it was optimized from, converted
    again: the same program, so the same keys), every node's type inferred again; None when it
    does not fit (a constant ``source`` lacks or holds with another type, an opaque node it lacks
    or holds with another type or name, a node that does not type)."""
    g = TensorGraph()
    opaque = {n.attrs["key"]: n.attrs for n in source.nodes if n.op == "opaque"}  # key -> key, type, name
    try:
        for op, inputs, attrs_text in record["nodes"]:
            attrs = attrs_from_str(attrs_text)
            if op == "constant":
                value = source.constants.get(attrs["name"])
                if value is None or attrs["type"] != TensorType(tuple(value.shape), str(value.dtype)):
                    return None
                g.constants[attrs["name"]] = value
            elif op == "opaque":
                if opaque.get(attrs["key"]) != attrs:
                    return None
                g.opaque[attrs["key"]] = source.opaque[attrs["key"]]
            g.add(op, inputs, attrs, dedup=False)
        g.set_output(record["output"])
    except (KeyError, TypeError, ValueError):  # ops.ShapeError is a ValueError
        return None
    return g


@functools.lru_cache(maxsize=64)
def _file_digest(path: str, mtime_ns: int, size: int) -> str:
    """sha256 of a file's bytes (cached by path, modification time and size)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _digest(f) -> str:
    """The digest of a file: a path, or an ``importlib.resources`` file (read whole when it is not
    a plain file, as inside a zip); a path that is no file (a rule file deleted since the pass
    was made) digests as missing."""
    if isinstance(f, (str, os.PathLike)):
        if not os.path.isfile(f):
            return "missing:" + os.fspath(f)
        st = os.stat(f)
        return _file_digest(os.path.abspath(f), st.st_mtime_ns, st.st_size)
    return hashlib.sha256(f.read_bytes()).hexdigest()


def content_fingerprint(rules: Any, cost_model) -> str:
    """A digest of what the options name without holding it: the rule file the ``rules`` option
    names (a shipped set's, or a path's) and the cost model's files (the learned model it loaded
    and the measurements shipped for its target). A verdict remembered under other rules or
    other costs is not reused, so an upgrade that adds a rule or retrains a model searches again
    (a verdict keyed by the option's name alone kept answering with the program of an older rule
    set). "" for a rule list or a cost model object: such options are never remembered."""
    from relay_eqsat.cost.cache import shipped_table_path
    from relay_eqsat.pipeline import rule_file

    if not isinstance(rules, (str, os.PathLike)) or not hasattr(cost_model, "backend"):
        return ""
    files = [rule_file(rules)[0]]
    for f in (getattr(cost_model.learned, "source", None), shipped_table_path(cost_model.target, cost_model.backend)):
        if f is not None and Path(f).is_file():
            files.append(f)
    h = hashlib.sha256()
    for f in files:
        h.update(_digest(f).encode())
    return h.hexdigest()[:16]


def _options_text(opts: Mapping[str, Any]) -> str | None:
    """The options as canonical JSON; None when one is a Python object (a CostModel, a rule list)
    whose identity a key cannot capture."""
    try:  # the tuning log is keyed by its content (Verdicts' settings), not its path or how it was tuned:
        # `tvmc compile --tuning-records LOG --eqsat` finds what `relay-eqsat tune` decided under LOG
        return json.dumps({k: v for k, v in opts.items() if k not in ("verify", "tune_trials", "tuning_records")},
                          sort_keys=True)
    except TypeError:
        return None


class Verdicts:
    """The verdicts kept in ``cache`` (a CostCache, or None: nothing is remembered)."""

    @classmethod
    def of(cls, cost_model, settings: str, rules: Any, records=None) -> "Verdicts":
        """The store of the database ``cost_model`` reads (this package's ``CostModel``: its
        sqlite file, the ``meta`` table); a cost object of the user's own keeps no verdicts.
        ``settings``: the runtime check's; ``rules``: the ``rules`` option (its file's content
        is part of every key, `content_fingerprint`); ``records``: the tuning records the programs
        were built under (their content is part of every key: a verdict on untuned kernels is not
        one on tuned ones)."""
        from relay_eqsat.cost.base import CostModel

        if records is not None:
            settings = f"{settings}|records={records.digest}"

        if not isinstance(cost_model, CostModel) or cost_model.cache is None:
            return cls(None, settings)
        return cls(cost_model.cache, settings, content_fingerprint(rules, cost_model), cost_model.device)

    def __init__(self, cache, settings: str, content: str = "", device: str = ""):
        self.cache = cache
        # the machine the programs are timed on: this one (its target), or an RPC device (what it reports)
        self.machine = host_target() + (f"|device={device}" if device else "")
        self.settings = settings  # the runtime check's constants: a verdict under others is not reused
        self.content = content  # `content_fingerprint`: the rules' and the cost model's files
        self.threads = f"threads={runtime_threads()}"  # read once: every key of one run names the same count

    def _get(self, key: str | None) -> dict | None:
        if self.cache is None or key is None:
            return None
        stored = self.cache.get_meta(key)
        return json.loads(stored) if stored else None

    def _put(self, key: str | None, value: dict) -> None:
        if self.cache is not None and key is not None:
            self.cache.set_meta(key, json.dumps(value))

    def input_key(self, before: tvm.IRModule, opts: Mapping[str, Any]) -> str | None:
        from relay_eqsat import __version__

        text = _options_text(opts)
        if text is None:
            return None
        return ":".join(["eqsat_input", program_hash(before), self.machine, self.threads, self.settings,
                         __version__, self.content, text])

    def win_key(self, before: tvm.IRModule, opts: Mapping[str, Any]) -> str | None:
        key = self.input_key(before, opts)
        return None if key is None else "eqsat_win" + key[len("eqsat_input"):]

    def pair_key(self, before: tvm.IRModule, after: tvm.IRModule, opts: Mapping[str, Any]) -> str:
        return ":".join(["runtime_check", program_hash(before), program_hash(after), self.machine,
                         self.threads, str(opts.get("target")), str(opts.get("seed")), self.settings,
                         str(opts.get("check_time_limit"))])

    def rejected_input(self, before: tvm.IRModule, opts: Mapping[str, Any]) -> dict | None:
        """The remembered report of a run whose result was measured no faster, or None."""
        return self._get(self.input_key(before, opts))

    def won_input(self, before: tvm.IRModule, opts: Mapping[str, Any],
                  source: TensorGraph) -> tuple[TensorGraph, dict] | None:
        """(program, report) of a run whose result was measured faster, the program rebuilt on
        ``source`` (``before`` as a TensorGraph), or None."""
        stored = self._get(self.win_key(before, opts))
        graph = None if stored is None else program_from_record(stored["program"], source)
        return None if graph is None else (graph, stored["report"])

    def pair(self, before: tvm.IRModule, after: tvm.IRModule, opts: Mapping[str, Any]) -> dict | None:
        """The remembered verdict on (before, after): {"keep": bool, "report": {...}}, or None."""
        return self._get(self.pair_key(before, after, opts))

    def remember(self, before: tvm.IRModule, after: tvm.IRModule, opts: Mapping[str, Any], keep: bool,
                 report: Mapping[str, Any], won: tuple[dict | None, Mapping[str, Any]] | None = None) -> None:
        """Keep a measured verdict (not a rejection for a mismatch or a failed build); ``won``:
        (``program_record`` of ``after``'s program, its report's summary) to keep with a win."""
        if str(report.get("reason", "")).startswith("rejected"):
            return
        found = {k: report[k] for k in VERDICT_KEYS if k in report}
        self._put(self.pair_key(before, after, opts), {"keep": keep, "report": found})
        if not keep:
            self._put(self.input_key(before, opts), found)
        elif won is not None and won[0] is not None:
            self._put(self.win_key(before, opts), {"program": won[0], "report": dict(won[1], **found)})
