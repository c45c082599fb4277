"""relay-eqsat: equality-saturation tensor-graph superoptimizer for TVM Relay.

The core (everything but ``relay_eqsat.passes``) imports neither TVM nor
``relay_eqsat.passes`` (tests/test_layering.py checks it), with one exception:
``relay_eqsat.EqSatPass``, the package's front door, imported lazily below.
"""
from . import _compiled

_compiled.prefer_fresh_sources()  # before any submodule: a compiled module older than its source is not used

__version__ = "0.1.0"
__all__ = ["Attrs", "Node", "TensorGraph", "TensorType", "TupleType", "EqSatPass"]

_GRAPH_NAMES = ("Attrs", "Node", "TensorGraph", "TensorType", "TupleType")


def __getattr__(name):
    # Everything is imported on first use: importing the package (as pytest does for the users'
    # plugin in every run, or `relay-eqsat --version`) costs next to nothing (the check of the
    # compiled modules above: a few stat calls). EqSatPass lives in the TVM
    # integration, so the core stays TVM-free (the layering test's one allowed exception).
    if name in _GRAPH_NAMES:
        from . import graph

        return getattr(graph, name)
    if name == "EqSatPass":
        from .passes import EqSatPass

        return EqSatPass
    raise AttributeError(f"module 'relay_eqsat' has no attribute {name!r}")
