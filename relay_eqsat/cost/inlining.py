"""How large an expression TVM compiles for one fused kernel, and where to cut a kernel that is too large.

TVM builds a fused kernel by inlining each element-wise or injective producer's
expression into its consumer's, and a consumer that reads its operand k times
gets k copies of it (``OpDef.inline_reads``: a ``tanh`` as this TVM lowers it
for llvm reads x 5 times, a ``fast_tanh`` 19). Nested, the copies multiply: four
``fast_tanh`` in a chain make an expression of 19^4 = 130,000 reads, which this
TVM takes 30 s to compile (Zen 4; three take 1.2 s, eight exact ``tanh`` 57 s:
``bench/build_time.py``). The pass's NasRNN program, where the ``approx`` rules had
turned an RNN cell's gates into fast ops fused into one kernel with 8 ``fast_tanh``
and 5 ``fast_exp`` (2.3 million reads), did not finish compiling in 9.5 minutes;
cut, it builds in 8 s.

``inlined_reads(graph)`` counts, per node, the reads of the expression TVM would
build for it if every element-wise and injective producer were inlined into it
(an over-estimate: FuseOps does not fuse everything, and some schedules keep a
stage): a node's own reads times the sum of its operands' counts, 1 for an
operand TVM reads from memory (a graph input, a constant, an anchor's output).
``fusion_cuts(graph)`` names the operands at which a kernel is cut so that no
node's count exceeds :data:`MAX_INLINED_READS`, largest operand first: the
Relay backend writes ``annotation.stop_fusion`` there (the operand is written
to memory and read back by a kernel of its own), and the cost model's copy of
FuseOps (`relay_eqsat.cost.fusion.fusion_hosts`) does not fuse across them. A
cut costs one round trip of a tensor through memory; the zoo's models as
written need none.
"""
from __future__ import annotations

from typing import Sequence

from .. import ops
from ..graph import TensorGraph, TensorType

#: the most reads one node's inlined expression may make. TVM compiles 1,000 reads in a few
#: hundredths of a second, 7,000 in one or two seconds and 130,000 in 30 s (one kernel; module
#: docstring); the zoo's NasRNN as written (its cells' exact tanh, nested) reaches 4,200 and
#: builds whole in 6 s: it is left as it is. Two nested fast ops (19 x 18 = 342) are within it,
#: three (6,498) are, four are not.
MAX_INLINED_READS = 8192

#: fusion classes whose expressions TVM inlines into their consumers' kernels
_INLINED = ("fused", "injective")


def _role(op: str) -> str:
    """``inlined`` (element-wise, injective: its expression goes into its consumer's), ``reduce``
    (a reduction: FuseOps inlines its injective producers, its consumers read its output),
    ``pass`` (a tuple or a tuple's field: a split's piece inlines the split) or ``read`` (anything
    else, a graph input, an anchor: its consumers read it from memory)."""
    if op in ("tuple", "tuple_get_item"):
        return "pass"
    d = ops.OPS.get(op)
    if d is None:
        return "read"
    if d.fusion in _INLINED:
        return "inlined"
    return "reduce" if d.pattern == "reduce" else "read"


def _operand(count: dict[int, int], j: int, const: Sequence[bool]) -> int:
    return 1 if const[j] else count.get(j, 1)


def _expression(graph: TensorGraph, i: int, const: Sequence[bool], count: dict[int, int],
                cut: frozenset[int]) -> int:
    """The reads of node ``i``'s expression in its kernel, its operands' counts taken from
    ``count`` (1 across ``cut``)."""
    n = graph.nodes[i]
    role = _role(n.op)
    if const[i] or not n.inputs or role == "read":
        return 1
    total = sum(1 if k in cut else _operand(count, j, const) for k, j in enumerate(n.inputs))
    return ops.OPS[n.op].inline_reads * total if role == "inlined" else total


def inlined_reads(graph: TensorGraph, live: Sequence[int] | None = None, const: Sequence[bool] | None = None,
                  cuts: dict[int, frozenset[int]] | None = None) -> dict[int, int]:
    """Per live node: the reads of the expression TVM would compile for it with every element-wise
    and injective producer inlined, except across ``cuts`` (node -> operand positions cut). A
    graph input, a constant (folded at build time), an opaque op or an anchor is one read; a
    reduction counts its inlined operands, but is one read to its consumers; a tuple or a tuple's
    field passes its operands' count on."""
    return _walk(graph, live, const, given=cuts or {})[0]


def fusion_cuts(graph: TensorGraph, live: Sequence[int] | None = None, const: Sequence[bool] | None = None,
                limit: int = MAX_INLINED_READS) -> dict[int, frozenset[int]]:
    """{node: operand positions}: where to stop TVM's fusion so that no node's inlined expression
    (`inlined_reads`) exceeds ``limit`` reads. Nodes in topological order; at an element-wise,
    injective or reduction node over the limit, its tensor operands are cut largest first until it
    is within it. Empty for a program whose kernels are all within the limit."""
    return _walk(graph, live, const, limit=limit)[1]


def _walk(graph: TensorGraph, live: Sequence[int] | None, const: Sequence[bool] | None, limit: int | None = None,
          given: dict[int, frozenset[int]] | None = None) -> tuple[dict[int, int], dict[int, frozenset[int]]]:
    """(reads per node, cuts): with ``given`` cuts, or cutting where a node exceeds ``limit``."""
    live = graph.reachable() if live is None else live
    const = graph.is_constant() if const is None else const
    kernel: dict[int, int] = {}
    count: dict[int, int] = {}  # what a consumer inlines: a reduction's output is one read
    cuts: dict[int, frozenset[int]] = dict(given or {})
    for i in live:
        n = graph.nodes[i]
        role = _role(n.op)
        c = _expression(graph, i, const, count, cuts.get(i, frozenset()))
        if limit is not None and c > limit and role in ("inlined", "reduce"):
            cut: set[int] = set()
            by_size = sorted((k for k, j in enumerate(n.inputs) if isinstance(graph.nodes[j].type, TensorType)),
                             key=lambda k: -_operand(count, n.inputs[k], const))
            for k in by_size:
                if c <= limit or _operand(count, n.inputs[k], const) <= 1:
                    break
                cut.add(k)
                c = _expression(graph, i, const, count, frozenset(cut))
            if cut:
                cuts[i] = frozenset(cut)
        kernel[i] = c
        count[i] = 1 if role == "reduce" else c
    return kernel, cuts
