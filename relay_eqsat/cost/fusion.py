"""What TVM's build fuses: the op classes of the cost model, which element-wise ops fuse into a
producer's kernel in a whole program (``standalone_elementwise``, ``fusion_hosts``), the share of an
op's traffic its other operands add (``extra_read_share``) and what a fused epilogue computes
(``epilogue_features``, ``epilogue_seconds``). ``CostModel`` (:mod:`.base`) prices nodes with
them; fused groups (:mod:`.groups`) are found with them."""
from __future__ import annotations

import math
from collections import Counter
from typing import Sequence


from .. import ops
from ..graph import TensorGraph, TensorType, Type
from .analytic import type_bytes
from .inlining import fusion_cuts


def fusion_class(op: str) -> str:
    """``free``, ``opaque``, ``fused`` (element-wise/broadcast), ``injective`` or ``anchor``:
    the op's ``OpDef.fusion`` (an op outside the table is an anchor)."""
    d = ops.OPS.get(op)
    return d.fusion if d is not None else "anchor"


def is_conv(op: str) -> bool:
    d = ops.OPS.get(op)
    return d is not None and d.conv


#: patterns of ops whose kernel can take an element-wise epilogue (TVM's FuseOps): out_fusable
#: anchors, injective and element-wise ops; not reductions, opaque ops or tuple producers
_EPILOGUE_HOSTS = ("elemwise", "broadcast", "injective", "out_fusable")


def standalone_elementwise(graph: TensorGraph, live: Sequence[int] | None = None,
                           const: Sequence[bool] | None = None) -> dict[int, int]:
    """The live element-wise (``fused``-class) nodes of ``graph`` that run as kernels of their own,
    each mapped to the node that keeps it from fusing: the producer of its largest operand
    (`fusion_hosts`)."""
    return fusion_hosts(graph, live, const)[1]


def fusion_hosts(graph: TensorGraph, live: Sequence[int] | None = None,
                 const: Sequence[bool] | None = None) -> tuple[dict[int, int], dict[int, int]]:
    """(hosted, alone): each live, non-constant element-wise (``fused``-class) node of ``graph``
    either joins the kernel of an operand's producer (``hosted``: node -> that producer; for a
    tuple's field, the tuple's producer) or runs as a kernel of its own (``alone``: node -> the
    producer of its largest operand, the node that keeps it from fusing).

    Mirrors what TVM's ``FuseOps`` does with the program: an element-wise op
    joins the kernel of an operand's producer when that producer has no other
    consumer (a tensor read by two ops is written out; the graph's output
    counts as a consumer) and its pattern takes an epilogue
    (``_EPILOGUE_HOSTS``); a tuple's field only in the cases of `_piece_hosts`.
    A graph input, a reduction, an opaque op or a constant operand host nothing. A tensor read by
    several element-wise ops that meet again (a GELU's ``x * ... * x``) fuses as FuseOps fuses
    it through their post-dominator (`_rejoins`). No op joins a producer's kernel across a cut
    of `relay_eqsat.cost.inlining.fusion_cuts` (the backend stops TVM's fusion there).
    """
    live = graph.reachable() if live is None else live
    const = graph.is_constant() if const is None else const
    nodes = graph.nodes
    users: dict[int, list[int]] = {}
    for i in live:
        for j in set(nodes[i].inputs):
            users.setdefault(j, []).append(i)
    consumers: Counter = Counter({j: len(u) for j, u in users.items()})
    consumers[graph.output] += 1
    for j in list(consumers):  # a tensor whose element-wise readers meet again fuses as if read once
        if consumers[j] > 1 and j != graph.output and _rejoins(nodes, users, j):
            consumers[j] = 1
    cuts = fusion_cuts(graph, live, const)
    hosts: dict[int, int] = {}
    out: dict[int, int] = {}
    for i in live:
        n = nodes[i]
        if fusion_class(n.op) != "fused" or const[i] or not n.inputs:
            continue
        host = None
        cut = cuts.get(i, ())
        for k, j in enumerate(n.inputs):
            if const[j] or consumers[j] != 1 or k in cut:
                continue
            p = nodes[j]
            if p.op == "tuple_get_item":
                if _piece_hosts(nodes, p.inputs[0], consumers):
                    host = p.inputs[0]
                    break
                continue
            d = ops.OPS.get(p.op)
            if d is not None and d.pattern in _EPILOGUE_HOSTS and fusion_class(p.op) != "free":
                host = j
                break
        if host is not None:
            hosts[i] = host
        else:
            operands = [j for j in n.inputs if not const[j]] or list(n.inputs)
            out[i] = max(operands, key=lambda j: _bytes(nodes[j]))
    return hosts, out


def _rejoins(nodes, users: dict[int, list[int]], j: int, steps: int = 32) -> bool:
    """Whether every path from node ``j`` runs through element-wise ops only until they meet in one
    node (its post-dominator in FuseOps' terms), within ``steps`` nodes: then FuseOps puts them all
    in ``j``'s kernel."""
    pending = set(users.get(j, ()))
    for _ in range(steps):
        if any(fusion_class(nodes[q].op) != "fused" for q in pending):
            return False
        if len(pending) == 1:
            return True
        q = min(pending)  # topological order: node ids grow along edges
        if not users.get(q):
            return False  # a path ends at the output before the others meet it
        pending.remove(q)
        pending.update(users[q])
    return False


def _bytes(node) -> int:
    return type_bytes(node.type) if isinstance(node.type, TensorType) else 0


def _piece_hosts(nodes, src: int, consumers: Counter) -> bool:
    """Whether an element-wise op reading a field of tuple ``src`` joins the kernel that computes it:
    a batch_norm's normalized output does (a scale-and-shift chain, when nothing else reads it);
    a split's piece does, except a split of a convolution's output (or of an element-wise chain on
    it, `_in_conv_layout`): the convolution's blocked
    (NCHWc) layout is converted back for the split, which ends the kernel (the pieces'
    element-wise consumers then run as kernels of their own, as TVM builds merged convolutions)."""
    s = nodes[src]
    if fusion_class(s.op) == "fused":
        return consumers[src] == 1
    if s.op != "split" or not s.inputs:
        return False
    return not _in_conv_layout(nodes, s.inputs[0])


def _in_conv_layout(nodes, i: int) -> bool:
    """Whether node ``i`` is computed in a convolution's kernel: the convolution itself or an
    element-wise chain on it (the chain keeps the blocked layout; its largest operand leads back)."""
    for _ in range(64):
        n = nodes[i]
        if is_conv(n.op):
            return True
        if n.op == "tuple_get_item":  # a batch_norm's output: on to the batch_norm
            i = n.inputs[0]
        elif fusion_class(n.op) == "fused" and n.inputs:
            i = max(n.inputs, key=lambda j: _bytes(nodes[j]))
        else:
            return False
    return False


def extra_read_share(input_types: Sequence[Type], out_type: Type) -> float:
    """Bytes of every operand but the largest, over all bytes read and written."""
    sizes = [type_bytes(t) for t in input_types]
    total = sum(sizes) + type_bytes(out_type)
    if not sizes or total == 0:
        return 0.0
    return (sum(sizes) - max(sizes)) / total


#: key of the epilogue fit's shared coefficient: seconds per element of an element-wise op's
#: operands other than the largest (`epilogue_seconds`)
EPILOGUE_READ = "_read"


def epilogue_features(input_types: Sequence[Type], out_type: Type) -> tuple[int, int]:
    """(output elements, elements of every operand but the largest): what an element-wise op's
    cost inside a kernel is linear in."""
    sizes = [_elements(t) for t in input_types]
    return _elements(out_type), (sum(sizes) - max(sizes)) if sizes else 0


def _elements(t: Type) -> int:
    return math.prod(t.shape) if isinstance(t, TensorType) else 0


def epilogue_seconds(coefs: dict[str, float], op: str, input_types: Sequence[Type],
                     out_type: Type) -> float | None:
    """Seconds element-wise ``op`` computes inside the kernel it fuses into, from coefficients
    fitted to measured fused groups (`relay_eqsat.cost.groups.fit_epilogue`); None when they have
    none for the op."""
    c = coefs.get(op)
    if c is None or not isinstance(out_type, TensorType):
        return None
    out, extra = epilogue_features(input_types, out_type)
    return c * out + coefs.get(EPILOGUE_READ, 0.0) * extra
