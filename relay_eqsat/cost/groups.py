"""Fused groups: an anchor op and the element-wise epilogue TVM's ``FuseOps`` builds into its kernel.

A kernel timed alone says nothing about what its epilogue costs inside it: a
bias add and relu on a convolution's output are nearly free (the values are in
registers), while the gates of an RNN cell fused onto a small dense layer
(``sigmoid``, ``tanh``, ``multiply``: NasRNN) cost more than the dense itself,
since TVM computes the epilogue element by element. So groups are measured as
TVM builds them, and what each element-wise op adds to its host's kernel is
learned from them.

- A group is one instance (``OpInstance`` with op :data:`GROUP_OP`): its
  attributes hold the group's nodes (op, attributes, operands: the group's
  external inputs first, then its own nodes) and which external inputs are
  constants in the model (weights, biases: bound at build time, as in the
  model). So the sqlite cache, the shipped tables and the measuring worker
  take groups as they take single ops. What is measured and stored for it is
  the seconds its epilogue adds to its anchor: the group and the anchor alone
  timed in alternating rounds in one job (an anchor measured on another day
  differs from today's by more than most epilogues cost), the median of the
  paired differences, which timing noise can make slightly negative.
- ``fused_groups(graph)``: the distinct groups of a program, as the cost model's
  copy of FuseOps' rules forms them (`relay_eqsat.cost.fusion.fusion_hosts`):
  an anchor (convolution, dense, matmul, pool) and every element-wise op that
  joins its kernel.
- ``fit_epilogue(rows)``: from (group, its seconds, its anchor's seconds alone),
  the seconds per output element each element-wise op adds inside a kernel,
  plus one shared coefficient per element of operands other than the
  largest (a residual add's second tensor), by non-negative least squares on
  relative error (a large kernel's timing noise outweighs its epilogue; small
  kernels decide the fit). ``LearnedCostModel.train`` runs it on the group rows
  it is given and stores the coefficients with the model; ``CostModel`` adds
  them to a fused element-wise op's cost (the ``epilogue`` term, weighed by the
  whole-graph fit beside the discounted kernel time, which stands for the
  traffic the op's presence brings to a model).
"""
from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np

from ..graph import Attrs, TensorGraph, TensorType, Type
from .fusion import EPILOGUE_READ as READ, epilogue_features, fusion_class, fusion_hosts
from .instance import GROUP_OP, OpInstance

#: an op is given a coefficient only when it appears in at least this many measured groups
MIN_GROUPS = 3
#: seconds below which a group's time is not known better: the paired differences of the tiny
#: kernels of the zoo's small configurations spread about +-0.5 us on the machines here
NOISE_FLOOR = 1e-6


# -- groups of a program --------------------------------------------------------------------

def fused_groups(graph: TensorGraph) -> list[OpInstance]:
    """The distinct fused groups of ``graph`` (first-seen order): each anchor-class node that hosts
    element-wise ops, with all of them (`fusion_hosts`), as a :data:`GROUP_OP` instance. Groups
    whose operands are not all tensors, or that end in more than one value, are left out."""
    const = graph.is_constant()
    live = graph.reachable()
    hosts, _ = fusion_hosts(graph, live, const)
    members: dict[int, list[int]] = {}
    for i in hosts:
        r = i
        while r in hosts:  # a host is an earlier node: the walk ends at the kernel's root
            r = hosts[r]
        members.setdefault(r, []).append(i)
    seen: dict[tuple, OpInstance] = {}
    for root, mem in members.items():
        if fusion_class(graph.nodes[root].op) != "anchor" or const[root]:
            continue
        body = {root, *mem}
        # a member hosted by a tuple's producer (a batch_norm's scale-and-shift) reads a field of it
        body |= {j for i in mem for j in graph.nodes[i].inputs
                 if graph.nodes[j].op == "tuple_get_item" and graph.nodes[j].inputs[0] in body}
        inst = group_instance(graph, sorted(body), const)
        if inst is not None:
            seen.setdefault(inst.key(), inst)
    return list(seen.values())


def group_instance(graph: TensorGraph, nodes: Sequence[int], const: Sequence[bool]) -> OpInstance | None:
    """The :data:`GROUP_OP` instance of ``graph``'s ``nodes`` (topological order, the anchor first,
    the group's value last); None when an operand is not a tensor or when some node but the last
    is read by no other node of the group (the nodes would not compute one value)."""
    index = {n: k for k, n in enumerate(nodes)}
    ext: list[int] = []
    ext_pos: dict[int, int] = {}
    specs = []
    for n in nodes:
        node = graph.nodes[n]
        refs = []
        for j in node.inputs:
            if j in index:  # an earlier node of the group (node ids are topological)
                refs.append(-1 - index[j])  # resolved below, once the external count is known
                continue
            if not isinstance(graph.nodes[j].type, TensorType):
                return None
            if j not in ext_pos:
                ext_pos[j] = len(ext)
                ext.append(j)
            refs.append(ext_pos[j])
        specs.append((node.op, node.attrs, refs))
    used = {-1 - r for _, _, refs in specs for r in refs if r < 0}
    if used != set(range(len(nodes) - 1)):  # one value leaves the group: the last node's
        return None
    n_ext = len(ext)
    body = tuple(Attrs(op=op, attrs=attrs, inputs=tuple(r if r >= 0 else n_ext + (-1 - r) for r in refs))
                 for op, attrs, refs in specs)
    consts = tuple(k for k, j in enumerate(ext) if const[j])
    out = graph.nodes[nodes[-1]].type
    if not isinstance(out, TensorType):
        return None
    return OpInstance(GROUP_OP, Attrs(nodes=body, constants=consts),
                      tuple(graph.nodes[j].type for j in ext), out)


def group_graph(inst: OpInstance) -> TensorGraph:
    """The group as a TensorGraph: its external inputs as vars (``p<k>`` for those constant in
    the model, ``x<k>`` for the others), its nodes in order, the last one the output."""
    if inst.op != GROUP_OP:
        raise ValueError(f"not a fused group: {inst.op}")
    consts = set(inst.attrs["constants"])
    g = TensorGraph()
    ids = [g.var(f"{'p' if k in consts else 'x'}{k}", t.shape, t.dtype) for k, t in enumerate(inst.input_types)]
    for spec in inst.attrs["nodes"]:
        ids.append(g.add(spec["op"], [ids[r] for r in spec["inputs"]], spec["attrs"], dedup=False))
    g.set_output(ids[-1])
    return g


def _members(inst: OpInstance) -> tuple[OpInstance, list[tuple[str, list[Type], Type]]]:
    """(the anchor alone, [(op, input types, output type)] of each element-wise node after it)."""
    g = group_graph(inst)
    n_ext = len(inst.input_types)
    body = g.nodes[n_ext:]
    anchor = body[0]
    a = OpInstance(anchor.op, anchor.attrs, tuple(g.nodes[j].type for j in anchor.inputs), anchor.type)
    return a, [(n.op, [g.nodes[j].type for j in n.inputs], n.type) for n in body[1:]
               if fusion_class(n.op) == "fused"]


def group_anchor(inst: OpInstance) -> OpInstance:
    """The group's anchor op as an instance of its own (what is timed alone)."""
    return _members(inst)[0]


# -- the epilogue fit ---------------------------------------------------------------------------

def fit_epilogue(rows: Sequence[tuple[OpInstance, float, float]],
                 min_groups: int = MIN_GROUPS) -> tuple[dict[str, float], dict]:
    """Coefficients of `epilogue_seconds` fitted to measured groups, and a report.

    ``rows``: (group instance, the seconds its epilogue adds to its anchor, the anchor's seconds
    alone). The added seconds are modelled as the sum over the group's element-wise ops of
    ``c[op] x output elements + c[READ] x elements of operands other than the largest``, fitted
    non-negative, each group weighted by one over its whole time, at least :data:`NOISE_FLOOR`
    (relative error: a large kernel's noise outweighs its epilogue). Ops seen in fewer than ``min_groups`` groups get no
    coefficient (their cost stays the discounted kernel time). Report: groups used, the ops, and
    the mean |residual| relative to the group's time with the epilogue charged nothing (before)
    and fitted (after)."""
    from scipy.optimize import nnls

    parsed = []
    for inst, added, t_anchor in rows:
        if not t_anchor > 0:
            continue
        _, epi = _members(inst)
        parsed.append((epi, added, t_anchor))
    count = Counter(op for epi, _, _ in parsed for op in {op for op, _, _ in epi})
    names = sorted(op for op, c in count.items() if c >= min_groups)
    usable = [(epi, added, ta) for epi, added, ta in parsed if all(op in names for op, _, _ in epi)]
    report = {"groups": len(usable), "ops": names}
    if not names or len(usable) < len(names) + 1:
        return {}, dict(report, reason="too few groups")
    cols = {op: k for k, op in enumerate(names)}
    A = np.zeros((len(usable), len(names) + 1))
    b = np.zeros(len(usable))
    for r, (epi, added, ta) in enumerate(usable):
        for op, ins, out in epi:
            n_out, n_extra = epilogue_features(ins, out)
            A[r, cols[op]] += n_out
            A[r, -1] += n_extra
        whole = max(ta + max(added, 0.0), NOISE_FLOOR)
        A[r] /= whole
        b[r] = added / whole
    x, _ = nnls(A, b)
    coefs = {op: float(x[k]) for op, k in cols.items()}
    coefs[READ] = float(x[-1])
    report.update(before=float(np.mean(np.abs(b))), after=float(np.mean(np.abs(A @ x - b))))
    return coefs, report
