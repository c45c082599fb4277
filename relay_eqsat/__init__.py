"""relay-eqsat: equality-saturation tensor-graph superoptimizer for TVM Relay.

The core (everything but ``relay_eqsat.passes``) imports neither TVM nor
``relay_eqsat.passes`` (tests/test_layering.py checks it), with one exception:
``relay_eqsat.EqSatPass``, the package's front door, imported lazily below.
"""
from .graph import Attrs, Node, TensorGraph, TensorType, TupleType

__version__ = "0.1.0"
__all__ = ["Attrs", "Node", "TensorGraph", "TensorType", "TupleType", "EqSatPass"]


def __getattr__(name):
    # EqSatPass lives in the TVM integration; import it lazily so the core stays TVM-free
    # (the layering test's one allowed exception).
    if name == "EqSatPass":
        from .passes import EqSatPass

        return EqSatPass
    raise AttributeError(name)
