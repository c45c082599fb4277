"""Merge-aware greedy extraction: the OCF greedy, then group moves that let pieces share a class.

Why OCF misses merges. A merge rewrite (two dense layers or convolutions on
one input, per-piece activations pushed through a split) puts in each of the
classes ``A`` and ``B`` a new node ``tuple_get_item(S, i)`` over one new class
``S = split(merged op)``. The merged op pays only when *both* ``A`` and ``B``
read it: the greedy costs each class alone, where ``tuple_get_item(S, i)``
carries all of ``S`` (more than ``A``'s own operator), so it keeps the
separate operators and the merge earns nothing. An exact extractor (ILP)
sees it, but takes 0.05-1.5 s on a 2,000-node e-graph: too slow for the
thousands of rollouts of an MCTS run.

The search. Start from the OCF greedy's choice for every class (the choice of
classes outside the extracted DAG is what a move brings in with them). A
*group move* on a class ``s`` outside the DAG switches every DAG class that
has a node reading ``s`` to such a node (its cheapest one), so ``s`` is paid
once for all of them. When that alone does not pay, it may be competing with
an earlier pairing (three layers on one input: a+b merged, b+c cheaper): each
class the switched nodes stopped reading that is left with a single reader
gets that reader switched to its best other node. When the move on ``s``
keeps nothing, it is tried once more *lifted*: the users then also include
the DAG classes that reach ``s`` through up to three classes outside the DAG
by those classes' chosen nodes (a grouped convolution's merge reaches each of
its two classes as ``reshape(get(split(reshape(merged))))``: no DAG class
reads the split itself, so the plain move never sees it). The move is kept if
the true DAG cost (every class once) drops and the chosen nodes stay acyclic.
Passes over all classes repeat until one keeps nothing. Every kept state is a
valid extraction, so the result is never cheaper than the exact optimum and
never dearer than the OCF greedy; it is deterministic (fixed class order, no
randomness). It can miss a merge that pays only in two stages, one whose
pieces reach their classes through more than three outside classes, a move whose
readers cannot all switch (one switch would close a cycle), and a class the
OCF greedy chose badly on its own. ``bench/mcts_reward.py`` measures it: on
87 rollout e-graphs of the zoo (commit 8407f39) it found the ILP optimum on
86 (the other 0.0008% above it; OCF on 66, up to 5.1% above) in a median
0.56 ms (OCF 0.21 ms, ILP-ACyc 78 ms).

The kernel is ``shared.pyx``; it keeps each trial state's cost incrementally
(reference counts and an undo log instead of a walk of the whole DAG per
trial: the same choices, move for move). On 98 rollout e-graphs under
znver4's model on a Zen 4 (``bench/mcts_reward.py``, 2026-11-27) a reward took
a median 0.37 ms against 0.66 ms walking the whole DAG (BERT's 0.65 against
9.1 ms, ViT's 0.42 against 4.4). ``greedy_merge`` is the extractor over an
``ExtractionProblem`` ("greedy-merge"); ``merge_cost`` the same cost straight
from an e-graph's arrays, the MCTS reward (``ocf_cost``'s counterpart).
"""
from __future__ import annotations

import time
from typing import Any, Iterable

import numpy as np

from .egraph_io import NodeCost, NodeCosts, class_indices, node_costs
from .ocf import dag_cost, ocf_choice
from .problem import ExtractionProblem, Solution
from .merge_kernel import improve_shared
from .validity import InfeasibleError, reachable_classes, solution_cost, validate_solution

#: passes over all classes at most (a pass that keeps no move ends the search first)
MAX_PASSES = 20
#: outside classes a lifted move reaches its users through at most (0: plain moves only)
MAX_LIFT = 3


def _search(node_class, child_start, children, cost, blacklisted, num_classes, roots, max_passes,
            max_lift=MAX_LIFT):
    """The OCF choice of every class, improved by group moves; (choice, stats) or None when a root
    has no acyclic extraction."""
    choice = ocf_choice(node_class, child_start, children, cost, blacklisted, num_classes, roots, False)
    if any(choice[r] < 0 for r in roots):
        return None
    _, kept, evaluations, passes = improve_shared(node_class, child_start, children, cost, blacklisted, choice,
                                                  roots, max_passes, max_lift)
    return choice, {"moves": kept, "evaluations": evaluations, "passes": passes}


def greedy_merge(problem: ExtractionProblem, roots: Iterable[int] | None = None, *,
                 max_passes: int = MAX_PASSES, max_lift: int = MAX_LIFT, validate: bool = True) -> Solution:
    """Merge-aware greedy extraction: OCF greedy, then group moves (module docstring).
    ``info`` holds the moves kept, the DAG evaluations and the passes."""
    started = time.perf_counter()
    roots = list(problem.roots) if roots is None else [int(r) for r in roots]
    start, flat = problem.children_csr()
    found = _search(np.ascontiguousarray(problem.node_class, dtype=np.int32), start, flat,
                    np.ascontiguousarray(problem.node_cost, dtype=np.float64),
                    np.ascontiguousarray(problem.blacklisted).view(np.uint8), problem.num_classes, roots,
                    max_passes, max_lift)
    if found is None:
        raise InfeasibleError(f"root classes {[problem.class_key[r] for r in roots]} have no acyclic extraction "
                              "that avoids the blacklisted nodes")
    chosen, info = found
    choice = {c: int(chosen[c]) for c in reachable_classes(problem, {c: int(n) for c, n in enumerate(chosen)
                                                                     if n >= 0}, roots)}
    if validate:
        validate_solution(problem, choice, roots)
    return Solution(choice=choice, cost=solution_cost(problem, choice, roots), optimal=False,
                    status="greedy-merge", solve_time=time.perf_counter() - started, info=info)


def merge_cost(egraph: Any, node_cost: NodeCost | NodeCosts, root: int, max_passes: int = MAX_PASSES,
               max_lift: int = MAX_LIFT) -> float:
    """Cost of the merge-aware greedy extraction of e-graph class ``root``: ``greedy_merge``'s cost on
    ``egraph_problem(egraph, node_cost, [root])``, computed on the e-graph's arrays. The MCTS reward
    that sees merges; pass one NodeCosts to every call. Raises InfeasibleError when ``root`` cannot
    be extracted without blacklisted nodes."""
    arrays = egraph.arrays()
    (r,) = class_indices(arrays, [root])
    cost = node_costs(node_cost).of(arrays)
    found = _search(arrays.node_class, arrays.child_start, arrays.children, cost, arrays.node_black.view(np.uint8),
                    arrays.num_classes, (r,), max_passes, max_lift)
    if found is None:
        raise InfeasibleError(f"root class {int(arrays.class_id[r])} has no acyclic extraction that avoids "
                              "the blacklisted nodes")
    return dag_cost(found[0], arrays.child_start, arrays.children, cost, (r,))
