"""TVM integration: the Relay pass, the Relay frontend/backend, tvmc, the model zoo.

Importing this package imports TVM and lets ``PassContext(config=
{"relay.eqsat.<option>": ...})`` accept the pass's options (see
:mod:`relay_eqsat.passes.eqsat_pass`).
"""
from .eqsat_pass import DEFAULT_OPTIONS, EqSatPass, EqSatVerificationError, eqsat_config, optimize
from .relay import UnsupportedProgram, from_relay, graph_to_module, opaque_evaluator, to_relay

__all__ = ["DEFAULT_OPTIONS", "EqSatPass", "EqSatVerificationError", "UnsupportedProgram",
           "eqsat_config", "from_relay", "graph_to_module", "opaque_evaluator", "optimize", "to_relay"]
