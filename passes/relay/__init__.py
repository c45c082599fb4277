"""The Relay side: frontend (Relay -> TensorGraph), backend (TensorGraph -> Relay), the ops' Relay
conversions, EqSatPass with its decision inputs, and ``tvmc compile --eqsat``.

Importing it installs the PassContext hook (:mod:`.config`), so that
``PassContext(config={"relay.eqsat.<option>": ...})`` accepts the pass's options.
"""
from . import config  # noqa: F401 - the PassContext hook, installed on import
