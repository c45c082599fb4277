"""Snapshots of what EqSatPass did to a model, for the users' pytest plugin.

A snapshot is a JSON file beside the test (``__eqsat_snapshots__/<test file>/<test name>.json``)
holding the pass's predicted cost before and after, the rules fired (counts), the e-graph's size,
why the search stopped, whether the program changed, its op counts, the options and target used,
and a fingerprint of the optimized program. A later run fails when (:data:`COMPARED`) the target,
the program (its fingerprint), the rules fired, the e-graph size, the stop reason or ``changed``
differ, or when the predicted cost after the pass grew by more than the cost tolerance; other
fields (:data:`CONTEXT`) are shown with such a failure but never fail alone. A missing snapshot
fails too (as in syrupy and pytest-snapshot); ``--eqsat-update-snapshots`` writes the missing and
the different ones.
"""
from __future__ import annotations

import difflib
import hashlib
import json
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Mapping

import tvm
from tvm import relay

#: the folder, beside the test file, holding one folder of snapshots per test file
DIRECTORY = "__eqsat_snapshots__"
#: the snapshot format's version
FORMAT = 1
#: fields that fail the test when they differ (``cost_after`` too, beyond the cost tolerance)
COMPARED = ("target", "changed", "fingerprint", "rules_fired", "egraph_nodes", "stop_reason")
#: fields shown with a failure when they differ, never failing alone
CONTEXT = ("model", "cost_before", "ops_after", "rules_in_result", "iterations", "extractor", "optimal",
           "options", "relay_eqsat_version")
#: extractors whose result depends on a solver's time limit when it is not proven optimal
EXACT_EXTRACTORS = ("ilp-topo", "ilp-acyc", "maxsat")
UPDATE_HINT = "run pytest with --eqsat-update-snapshots to accept this run's result"

_CONSTANT = re.compile(r"meta\[relay\.Constant\]\[\d+\]")
#: a frontend's source span in a type annotation (``/* ty=... span=Gather_0:0:0 */``)
_SPAN = re.compile(r" span=.*?(?= \*/)")


def short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def program_text(mod: tvm.IRModule) -> str:
    """The module's functions as Relay text, ``main`` first, without function attributes (an
    optimized ``main`` carries the report, with this run's times), without the frontend's source
    spans, and with every constant written ``const``: its type stays in the text, its values do not."""
    names = sorted((gv.name_hint for gv in mod.get_global_vars()), key=lambda n: (n != "main", n))
    parts = []
    for name in names:
        func = mod[name]
        if isinstance(func, relay.Function):
            func = relay.Function(func.params, func.body, func.ret_type, func.type_params)
        text = func.astext(show_meta_data=False)
        text = text.split("/* For debugging purposes", 1)[0].rstrip()
        parts.append(f"{name} = " + _SPAN.sub("", _CONSTANT.sub("const", text)))
    return "\n".join(parts)


def fingerprint(mod: tvm.IRModule) -> str:
    """A short hash of :func:`program_text`: the program's ops, attributes, types and structure.
    Weights' values do not enter it (the output check covers them), so it is the same wherever the
    same program is built; a TVM whose Relay text prints differently changes it."""
    return "sha256:" + short_hash(program_text(mod))


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (list, tuple)):
        return f"<{len(value)} {type(value[0]).__name__ if value else 'item'}s>"
    return f"<{type(value).__name__}>"


def make(report: Mapping[str, Any], module: tvm.IRModule, target: str, options: Mapping[str, Any],
         model: str) -> dict:
    """The snapshot of one run: ``report`` is EqSatPass's ``last_report``, ``module`` its result."""
    from relay_eqsat import __version__

    return {
        "format": FORMAT,
        "model": model,
        "target": target,
        "changed": bool(report.get("changed")),
        "fingerprint": fingerprint(module),
        "cost_before": float(report.get("cost_before", 0.0)),
        "cost_after": float(report.get("cost_after", 0.0)),
        "rules_fired": {k: int(v) for k, v in sorted((report.get("rules_fired") or {}).items()) if v},
        "rules_in_result": {k: int(v) for k, v in sorted((report.get("rules_in_result") or {}).items())},
        "egraph_nodes": int(report.get("egraph_nodes", 0)),
        "stop_reason": str(report.get("stop_reason", "")),
        "iterations": int(report.get("iterations", 0)),
        "extractor": str(report.get("extractor", "")),
        "optimal": bool(report.get("optimal")),
        "ops_after": {k: int(v) for k, v in sorted((report.get("ops_after") or {}).items())},
        "options": {k: _plain(v) for k, v in sorted(options.items())},
        "relay_eqsat_version": __version__,
    }


def nondeterminism(report: Mapping[str, Any]) -> list[str]:
    """Why this run's result may depend on the machine's speed (empty: it does not)."""
    out = []
    if report.get("stop_reason") == "time_limit":
        out.append("the search stopped on its time limit (set node_limit or iter_limit so that one of them "
                   "stops it first)")
    if report.get("extractor") in EXACT_EXTRACTORS and not report.get("optimal"):
        out.append(f"the {report.get('extractor')} extractor stopped on its time limit without proving its "
                   f"result optimal ({report.get('extract_status')}; raise extract_time_limit)")
    return out


def load(path: Path) -> dict | None:
    """The snapshot at ``path``, None if there is none; ValueError if it cannot be read."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"not JSON ({e})") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    return data


def dump(data: Mapping[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def write(path: Path, data: Mapping[str, Any]) -> None:
    """Write the snapshot (atomically: a reader never sees half of it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(dump(data))
    os.replace(tmp, path)


def _ms(seconds: Any) -> str:
    return f"{seconds * 1e3:.4f} ms" if isinstance(seconds, (int, float)) else repr(seconds)


def _counts_diff(old: Any, new: Any) -> list[str]:
    """A unified diff of two {name: count} mappings, one ``name: count`` line each."""
    def lines(d):
        return [f"{k}: {v}" for k, v in sorted(d.items())] if isinstance(d, dict) else [repr(d)]

    diff = difflib.unified_diff(lines(old), lines(new), "snapshot", "this run", n=0, lineterm="")
    return ["    " + line for line in diff if not line.startswith("@@")]


def _field(name: str, old: Any, new: Any) -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        if name == "options":
            changed = [f"{k} {old.get(k)!r} -> {new.get(k)!r}" for k in sorted(set(old) | set(new))
                       if old.get(k) != new.get(k)]
            return [f"  options: {'; '.join(changed)}"]
        return [f"  {name}:", *_counts_diff(old, new)]
    if name.startswith("cost"):
        return [f"  {name}: {_ms(old)} -> {_ms(new)}"]
    return [f"  {name}: {old!r} -> {new!r}"]


def differences(old: Mapping[str, Any], new: Mapping[str, Any], cost_tolerance: float) -> tuple[list, list]:
    """(lines of the differences that fail, lines of the others) between a snapshot and this run."""
    failing, context = [], []
    if old.get("target") != new.get("target"):
        failing.append(f"  target: {old.get('target')!r} -> {new.get('target')!r} (the snapshot was recorded for "
                       "another target; pin it with --eqsat-target or eqsat_options so every machine agrees)")
    before, after = old.get("cost_after"), new.get("cost_after")
    if isinstance(before, (int, float)) and isinstance(after, (int, float)):
        growth = after / before - 1 if before > 0 else (0.0 if after <= 0 else math.inf)
        line = (f"  predicted cost after: {_ms(before)} -> {_ms(after)} ({growth:+.1%}, tolerance "
                f"{cost_tolerance:.1%})")
        if growth > cost_tolerance:
            failing.append(line + ": regressed")
        elif after != before:
            context.append(line)
    elif before != after:
        failing.append(f"  predicted cost after: {before!r} -> {after!r}")
    for name in COMPARED[1:]:
        if old.get(name) != new.get(name):
            failing += _field(name, old.get(name), new.get(name))
    for name in CONTEXT:
        if old.get(name) != new.get(name):
            context += _field(name, old.get(name), new.get(name))
    return failing, context


def check(path: Path, current: Mapping[str, Any], cost_tolerance: float, update: bool,
          shown: str | None = None) -> tuple[str, str | None]:
    """Compare ``current`` with the snapshot at ``path`` (writing it with ``update``): (status,
    failure message or None). Status: matched, written, updated, missing, differs or unreadable;
    a match with differences the comparison allows says which."""
    shown = shown or str(path)
    try:
        old = load(path)
    except ValueError as e:
        if update:
            write(path, current)
            return "updated (was unreadable)", None
        return "unreadable", f"eqsat snapshot {shown} cannot be read: {e}; {UPDATE_HINT}"
    if old is None:
        if update:
            write(path, current)
            return "written", None
        return "missing", (f"eqsat snapshot {shown} does not exist ({current['model']}): "
                           "run pytest with --eqsat-update-snapshots to write it")
    if dump(old) == dump(current):
        return "matched", None
    failing, context = differences(old, current, cost_tolerance)
    if update:
        write(path, current)
        return "updated", None
    if not failing:
        return "matched (differences allowed: " + "; ".join(c.strip() for c in context) + ")", None
    lines = [f"eqsat snapshot differs: {shown} ({current['model']})", *failing]
    if context:
        lines += ["  also different (not compared):", *("  " + c for c in context)]
    return "differs", "\n".join(lines + [UPDATE_HINT])
