"""Remembered runtime verdicts: a model whose optimization was measured once is not measured again.

The runtime check builds and times two programs, which costs far more than the
search; its verdicts are kept in the cost database (the ``meta`` table of the
sqlite file the cost model uses, ``$RELAY_EQSAT_COST_DB`` by default), keyed by
what decides them:

- ``pair``: (input program, result program, host, target, the check's settings)
  -> keep or not, with the figures that decided it;
- ``input``: (input program, every option, host, package version) -> "the result
  was measured no faster": a later run on the same model with the same options
  returns the input at once, without searching.

Programs are identified by the structural hash of ``main``'s parameters and
body (constants' values included). Mismatches and failed builds are never
remembered: they warn on every run. Delete the database (or point
``RELAY_EQSAT_COST_DB`` elsewhere) to measure again.
"""
from __future__ import annotations

import json
from typing import Any, Mapping

import tvm
from tvm import relay

from .target import host_target

#: report keys a verdict carries
VERDICT_KEYS = ("changed", "reason", "verify_error", "runtime_before", "runtime_after", "measured_speedup",
                "runtime_wins", "runtime_untimed")


def program_hash(mod: tvm.IRModule) -> str:
    """Structural hash of ``main``'s parameters and body (not its attributes, which hold the
    report with this run's times)."""
    func = mod["main"]
    return str(tvm.ir.structural_hash(relay.Function(func.params, func.body)))


def _options_text(opts: Mapping[str, Any]) -> str | None:
    """The options as canonical JSON; None when one is a Python object (a CostModel, a rule list)
    whose identity a key cannot capture."""
    try:
        return json.dumps({k: v for k, v in opts.items() if k != "verify"}, sort_keys=True)
    except TypeError:
        return None


class Verdicts:
    """The verdicts kept in ``cache`` (a CostCache, or None: nothing is remembered)."""

    def __init__(self, cache, settings: str):
        self.cache = cache
        self.settings = settings  # the runtime check's constants: a verdict under others is not reused

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
        return ":".join(["eqsat_input", program_hash(before), host_target(), self.settings, __version__, text])

    def pair_key(self, before: tvm.IRModule, after: tvm.IRModule, opts: Mapping[str, Any]) -> str:
        return ":".join(["runtime_check", program_hash(before), program_hash(after), host_target(),
                         str(opts.get("target")), str(opts.get("seed")), self.settings,
                         str(opts.get("check_time_limit"))])

    def rejected_input(self, before: tvm.IRModule, opts: Mapping[str, Any]) -> dict | None:
        """The remembered report of a run whose result was measured no faster, or None."""
        return self._get(self.input_key(before, opts))

    def pair(self, before: tvm.IRModule, after: tvm.IRModule, opts: Mapping[str, Any]) -> dict | None:
        """The remembered verdict on (before, after): {"keep": bool, "report": {...}}, or None."""
        return self._get(self.pair_key(before, after, opts))

    def remember(self, before: tvm.IRModule, after: tvm.IRModule, opts: Mapping[str, Any], keep: bool,
                 report: Mapping[str, Any]) -> None:
        """Keep a measured verdict (not a rejection for a mismatch or a failed build)."""
        if str(report.get("reason", "")).startswith("rejected"):
            return
        found = {k: report[k] for k in VERDICT_KEYS if k in report}
        self._put(self.pair_key(before, after, opts), {"keep": keep, "report": found})
        if not keep:
            self._put(self.input_key(before, opts), found)
