"""relay_eqsat.passes (the folder ``passes/``): everything that talks to TVM, one subpackage a concern.

==============  =====================================================================================
``relay/``      the Relay frontend and backend, the ops' Relay conversions, EqSatPass and its
                PassContext options, ``tvmc compile --eqsat``
``runtime/``    building, running, timing and measuring on the target, the runtime check's decision
                and its remembered verdicts: shared by every TVM IR
``cli/``        the TVM-backed subcommands of ``relay-eqsat`` (optimize, measure, profile)
``zoo/``        the benchmark models, built in Relay
``regression/`` the users' pytest plugin (``pytest11`` entry point), its ``eqsat`` fixture, snapshots
==============  =====================================================================================

A second TVM IR (Relax) is one more subpackage beside ``relay/``: it registers its ops'
conversions under its own frontend name (:func:`relay_eqsat.ops.register_conversion`) and reuses
``runtime/``; the core and ``relay/`` do not change.

Importing this package imports no TVM; the names below are loaded on first use. Importing
``relay_eqsat.passes.relay`` (``from relay_eqsat.passes import EqSatPass`` does) lets
``PassContext(config={"relay.eqsat.<option>": ...})`` accept the pass's options
(:mod:`relay_eqsat.passes.relay.config`).
"""
import importlib

#: public name -> the module that defines it
_EXPORTS = {
    "DEFAULT_OPTIONS": "relay_eqsat.passes.relay.config",
    "EqSatPass": "relay_eqsat.passes.relay.eqsat_pass",
    "optimize": "relay_eqsat.passes.relay.eqsat_pass",
    "EqSatVerificationError": "relay_eqsat.passes.runtime.decision",
    "RemoteUnavailable": "relay_eqsat.passes.runtime.remote",
    "eqsat_config": "relay_eqsat.passes.relay.config",
    "UnsupportedProgram": "relay_eqsat.passes.relay.frontend",
    "from_relay": "relay_eqsat.passes.relay.frontend",
    "graph_to_module": "relay_eqsat.passes.relay.backend",
    "opaque_evaluator": "relay_eqsat.passes.relay.backend",
    "to_relay": "relay_eqsat.passes.relay.backend",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'relay_eqsat.passes' has no attribute {name!r}")
