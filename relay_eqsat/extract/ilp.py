"""Exact extraction as an integer program: ILP-Topo (TENSAT) and ILP-ACyc (He et al.).

Both share TENSAT's core (§5.1 of Yang et al., MLSys 2021): a binary x_n per
node, "some node of each root class is chosen", and for every node and each of
its child classes "x_n implies some node of the child class is chosen"; the
objective is sum(cost_n * x_n). Blacklisted nodes, nodes that need their own
class and nodes no acyclic term can use are fixed to 0 by leaving them out
(see presolve.py), which is TENSAT's "x_i = 0 for filtered nodes".

They differ in how cycles are forbidden:

- ILP-Topo: a topological-order variable t_m per class and, for every node n
  and child class m, "x_n implies t_class(n) >= t_m + gap". Integer orders
  (0..M-1, gap 1) or TENSAT's real orders (0..1, gap epsilon < 1/M, big-M
  A > 1 + epsilon). With CP-SAT the implication is an enforcement literal;
  with SCIP it is the big-M row, as in the paper.
- ILP-ACyc: for each class cycle, constraints (4)-(6) of He et al.: a Tseitin
  auxiliary v per class of the cycle with v <-> "no node of the class with a
  child in the cycle is chosen", and "some v is true". A class with a single
  such node uses that node's negated variable directly (Lemma 5.1). Cycles come
  from Johnson's algorithm (capped), or from a small cycle basis; whenever the
  encoded set is not known to be complete, each solution is checked and the
  cycle it contains, if any, is added as a cut before solving again.

When the class graph has no cycle (TENSAT's and MCTS's e-graphs, whose cycle
filter keeps them acyclic) ILP-ACyc has nothing to forbid: it then fixes the
nodes every solution takes and solves the independent parts that remain one
by one (components.py, ``decompose=True``; MaxSAT does the same), which proves
the same optimum several times faster than one model of the whole. ILP-Topo is
kept whole, as TENSAT formulates it: the baseline.

Solvers: OR-Tools CP-SAT (default; the objective uses integer weights from
presolve.integer_weights, tie-broken by presolve.tie_break_weights so that its
parallel workers agree on one program among equal-cost optima) or SCIP through
pywraplp (real costs). The merge-aware greedy solution (merge_greedy.py, never
dearer than OCF greedy) is given as a hint. Under a time limit the best feasible
solution is returned with optimal=False; if the solver found none, or none
cheaper than the greedy one, the greedy solution is returned and the status
says so — also when the solver proved its solution optimal, for that is
optimal under its rounded weights or within its gap, and can cost more than
the greedy one in real costs. Every returned choice is validated.
"""
from __future__ import annotations

import math
import threading
import time
from typing import Iterable, Sequence

import numpy as np

from .components import PartResult, Split, pack, solve_parts, split
from .cycles import acyclic_groups, cyclic_components, cycle_basis, find_cycle_in_choice, simple_cycles
from .presolve import Reduced, integer_weights, rounding_slack, tie_break_weights
from .problem import ExtractionProblem, Solution
from .validity import ExtractionError, solution_cost, validate_solution
from .warm import WARM, dearer_than_warm, prepare, warm_nodes, warm_solution

SOLVERS = ("cp-sat", "scip")
CYCLE_MODES = ("auto", "all", "basis", "lazy")
DEFAULT_MAX_CYCLES = 2_000

Literal = tuple[int, bool]  # (variable index, positive)


def default_threads() -> int:
    """CP-SAT search workers. Eight even on fewer cores: with one or two workers CP-SAT runs no
    LP-based worker and its bound stalls on extraction ILPs (measured: ILP-ACyc on a 700-node cyclic
    e-graph solved in 3.8 s with 8 workers on 2 cores, not in 20 s with 1 or 2)."""
    return 8


class _CpSat:
    """CP-SAT behind the small interface the encodings use.

    Clauses are written straight into the model proto: going through
    ``add_bool_or`` costs microseconds per literal in Python, which dominates
    encoding when there are many cycles.
    """

    def __init__(self, stall: bool = False) -> None:
        from ortools.sat.python import cp_model

        self._cp = cp_model
        self.stall = stall
        self.stalled = False
        self.model = cp_model.CpModel()
        self._constraints = self.model.proto.constraints
        self.vars: list = []

    @property
    def num_constraints(self) -> int:
        return len(self._constraints)

    def bool_var(self) -> int:
        self.vars.append(self.model.new_bool_var(""))
        return len(self.vars) - 1

    def order_var(self, upper: float, integral: bool) -> int:
        if not integral:
            raise ValueError("CP-SAT has no real variables: use order='int' or solver='scip'")
        self.vars.append(self.model.new_int_var(0, int(upper), ""))
        return len(self.vars) - 1

    def _lit(self, lit: Literal) -> int:
        index = self.vars[lit[0]].index
        return index if lit[1] else -index - 1

    def clause(self, lits: Sequence[Literal]) -> None:
        self._constraints.add().bool_or.literals.extend([self._lit(l) for l in lits])

    def implies_all(self, condition: Literal, lits: Sequence[Literal]) -> None:
        """condition -> every literal in ``lits``; one enforced bool_and instead of len(lits) clauses."""
        constraint = self._constraints.add()
        constraint.enforcement_literal.append(self._lit(condition))
        constraint.bool_and.literals.extend([self._lit(l) for l in lits])

    def order(self, parent: int, child: int, x: int, gap: float, big_m: float) -> None:
        self.model.add(self.vars[parent] >= self.vars[child] + int(gap)).only_enforce_if(self.vars[x])

    def minimize(self, variables: Sequence[int], weights: Sequence[float]) -> None:
        pairs = [(self.vars[v], int(w)) for v, w in zip(variables, weights) if w]
        self.model.minimize(self._cp.LinearExpr.weighted_sum([p[0] for p in pairs], [p[1] for p in pairs]))

    def hint(self, values: dict[int, float]) -> None:
        self.model.clear_hints()
        for v, value in values.items():
            self.model.add_hint(self.vars[v], int(round(value)))

    def solve(self, time_limit: float | None, threads: int):
        solver = self._cp.CpSolver()
        if time_limit is not None:
            solver.parameters.max_time_in_seconds = max(time_limit, 0.001)
        solver.parameters.num_workers = threads
        # CP-SAT's own SIGINT handler (on by default) stops the solve on Ctrl-C and then leaves SIGINT
        # at SIG_DFL: Python would never see a Ctrl-C again in this process
        solver.parameters.catch_sigint_signal = False
        if self.stall:
            status = self._solve_until_stall(solver)
        else:
            status = solver.solve(self.model)
        name = solver.status_name(status)
        if self.stalled and status == self._cp.FEASIBLE:
            name = "STALLED"  # stopped: no better program came for a while (part_statuses counts them)
        if status == self._cp.MODEL_INVALID:
            raise ExtractionError(f"CP-SAT rejected the model: {self.model.validate()}")
        has = status in (self._cp.OPTIMAL, self._cp.FEASIBLE)
        optimal = status == self._cp.OPTIMAL
        infeasible = status == self._cp.INFEASIBLE
        values = (lambda v: solver.value(self.vars[v])) if has else None
        # the bound holds whether or not a solution was found (CP-SAT's initial domain at worst)
        bound = None if infeasible or status == self._cp.MODEL_INVALID else solver.best_objective_bound
        return name, has, optimal, infeasible, values, bound


    def _solve_until_stall(self, solver):
        """``solver.solve`` stopped once no better solution came for :func:`stall_seconds`."""
        cp = self._cp
        found = [None, math.inf]  # when the last solution better by STALL_IMPROVEMENT came, and its objective
        done = threading.Event()

        class Found(cp.CpSolverSolutionCallback):
            def on_solution_callback(self):
                value = self.objective_value
                if value < found[1] - STALL_IMPROVEMENT * abs(found[1]) or found[0] is None:
                    found[0], found[1] = time.perf_counter(), value

        def watch(start: float) -> None:
            while not done.wait(0.05):
                last = found[0]
                if last is not None and time.perf_counter() - last > stall_seconds(last - start):
                    self.stalled = True
                    solver.stop_search()
                    return

        watcher = threading.Thread(target=watch, args=(time.perf_counter(),), daemon=True)
        watcher.start()
        try:
            return solver.solve(self.model, Found())
        finally:
            done.set()
            watcher.join()


#: ILP-ACyc stops a solve when no better program came for this long, or for half the time it took to
#: find the last one if that is longer: on NasRNN's 10,000-node e-graph (10 parts, the largest 3,264
#: nodes) CP-SAT found its final program in under 5 s and spent the rest of a 30-s limit raising the
#: bound (a 6% gap it never closed); the calibration rounds paid that twice (2026-12-02, Zen 5). 1 s,
#: not 3: on a Zen 3 the default search's e-graphs of ten models (the zoo's eight, SqueezeNet1.1 and
#: ShuffleNet-v2 from torchvision) extracted to programs of the same cost with 3, 1 and 0.5 s, and
#: the stalled parts' waits were most of the time (NasRNN 35.8 -> 17.2 s, ResNeXt-50 10.7 -> 4.2 s,
#: ShuffleNet-v2 9.8 -> 4.4 s an extraction, four of them in a first run's calibration rounds;
#: docs/design-notes.md)
STALL_MIN_S = 1.0
STALL_FRACTION = 0.5
#: a solution better than the last by less than this (relative) does not count as one: the objective's
#: tie-break weights (presolve.tie_break_weights) move it by 1e-8 between programs of equal cost
STALL_IMPROVEMENT = 1e-5


def stall_seconds(found_after: float) -> float:
    """How long a solve goes on without a better solution, its last one found ``found_after``
    seconds after it started."""
    return max(STALL_MIN_S, STALL_FRACTION * found_after)


class _Scip:
    """SCIP through pywraplp; clauses become linear rows, order implications big-M rows."""

    def __init__(self) -> None:
        from ortools.linear_solver import pywraplp

        self._lp = pywraplp
        self.solver = pywraplp.Solver.CreateSolver("SCIP")
        if self.solver is None:
            raise RuntimeError("this OR-Tools build has no SCIP")
        self.vars: list = []
        self.hints: dict[int, float] = {}

    @property
    def num_constraints(self) -> int:
        return self.solver.NumConstraints()

    def bool_var(self) -> int:
        self.vars.append(self.solver.BoolVar(f"b{len(self.vars)}"))
        return len(self.vars) - 1

    def order_var(self, upper: float, integral: bool) -> int:
        make = self.solver.IntVar if integral else self.solver.NumVar
        self.vars.append(make(0.0, float(upper), f"t{len(self.vars)}"))
        return len(self.vars) - 1

    def clause(self, lits: Sequence[Literal]) -> None:
        negatives = sum(1 for _, positive in lits if not positive)
        row = self.solver.Constraint(1.0 - negatives, self.solver.infinity())
        for v, positive in lits:
            row.SetCoefficient(self.vars[v], 1.0 if positive else -1.0)

    def order(self, parent: int, child: int, x: int, gap: float, big_m: float) -> None:
        # t_parent - t_child - gap + big_m * (1 - x) >= 0
        row = self.solver.Constraint(gap - big_m, self.solver.infinity())
        row.SetCoefficient(self.vars[parent], 1.0)
        row.SetCoefficient(self.vars[child], -1.0)
        row.SetCoefficient(self.vars[x], -big_m)

    def minimize(self, variables: Sequence[int], weights: Sequence[float]) -> None:
        objective = self.solver.Objective()
        for v, w in zip(variables, weights):
            if w:
                objective.SetCoefficient(self.vars[v], float(w))
        objective.SetMinimization()

    def hint(self, values: dict[int, float]) -> None:
        self.hints = dict(values)

    def solve(self, time_limit: float | None, threads: int):
        lp = self._lp
        if time_limit is not None:
            self.solver.SetTimeLimit(max(1, int(time_limit * 1000)))
        # ``threads`` is ignored: SCIP through pywraplp with more than one thread runs concurrent SCIP,
        # which crashed (segmentation fault) on cyclic extraction ILPs in OR-Tools 9.14.
        if self.hints:
            keys = list(self.hints)
            self.solver.SetHint([self.vars[k] for k in keys], [float(self.hints[k]) for k in keys])
        status = self.solver.Solve()
        names = {lp.Solver.OPTIMAL: "OPTIMAL", lp.Solver.FEASIBLE: "FEASIBLE", lp.Solver.INFEASIBLE: "INFEASIBLE",
                 lp.Solver.UNBOUNDED: "UNBOUNDED", lp.Solver.ABNORMAL: "ABNORMAL", lp.Solver.NOT_SOLVED: "NOT_SOLVED"}
        name = names.get(status, str(status))
        has = status in (lp.Solver.OPTIMAL, lp.Solver.FEASIBLE)
        values = (lambda v: self.vars[v].solution_value()) if has else None
        bound = self.solver.Objective().BestBound() if has else None
        return name, has, status == lp.Solver.OPTIMAL, status == lp.Solver.INFEASIBLE, values, bound


def _backend(solver: str, stall: bool = False):
    if solver == "cp-sat":
        return _CpSat(stall)
    if solver == "scip":
        return _Scip()
    raise ValueError(f"unknown solver {solver!r}; choose from {SOLVERS}")


def reduced_class_graph(problem: ExtractionProblem, red: Reduced) -> list[list[int]]:
    """The class graph over usable nodes of the relevant classes."""
    succ: list[list[int]] = [[] for _ in range(problem.num_classes)]
    for c in red.classes:
        kids: set[int] = set()
        for n in red.class_nodes[c]:
            kids.update(red.child_sets[n])
        succ[c] = sorted(kids)
    return succ


def choice_from_values(problem: ExtractionProblem, red: Reduced, chosen: set[int]) -> dict[int, int]:
    """One chosen node per class the roots need; the cheapest if a solution picked several."""
    choice: dict[int, int] = {}
    stack = list(red.roots)
    cost = problem.node_cost
    while stack:
        c = stack.pop()
        if c in choice:
            continue
        picked = [n for n in red.class_nodes.get(c, ()) if n in chosen]
        if not picked:
            raise ExtractionError(f"solver solution chose no node for needed class {c}")
        n = min(picked, key=lambda m: (cost[m], m))
        choice[c] = n
        stack.extend(red.child_sets[n])
    return choice


def topological_ranks(problem: ExtractionProblem, choice: dict[int, int], roots: Iterable[int]) -> dict[int, int]:
    """Rank of each chosen class with every child ranked below its parent (choice must be acyclic)."""
    ranks: dict[int, int] = {}
    children = problem.node_children
    for root in roots:
        if root in ranks:
            continue
        work = [(root, iter(children[choice[root]]))]
        on_path = {root}
        while work:
            c, it = work[-1]
            for d in it:
                if d not in ranks and d not in on_path:
                    on_path.add(d)
                    work.append((d, iter(children[choice[d]])))
                    break
            else:
                work.pop()
                on_path.discard(c)
                ranks[c] = len(ranks)
    return ranks


class Encoding:
    """Variables and constraints shared by ILP-Topo, ILP-ACyc (and reused by MaxSAT's clause view)."""

    def __init__(self, backend, problem: ExtractionProblem, red: Reduced, integral_weights: bool,
                 tie_break: bool = False) -> None:
        self.backend = backend
        self.problem = problem
        self.red = red
        self.x: dict[int, int] = {}
        self.num_cycles = 0
        nodes = red.nodes
        for n in nodes:
            self.x[n] = backend.bool_var()
        for r in set(red.roots):
            backend.clause([(self.x[n], True) for n in red.class_nodes[r]])
        for n in nodes:
            for d in red.child_sets[n]:
                backend.clause([(self.x[n], False)] + [(self.x[m], True) for m in red.class_nodes[d]])
        self.tie_slack = 0  # the tie-break's share of a solver bound (see presolve.tie_break_weights)
        self.parts = 1  # weight units per unit of the rounded weights (the tie-break's K)
        self.rounding = 0.0  # how much the rounded weights can overstate a solution (presolve.rounding_slack)
        if integral_weights:
            costs = problem.node_cost[nodes] if nodes else np.zeros(0)
            weights, self.scale = integer_weights(costs)
            self.rounding = rounding_slack(weights, costs, self.scale, problem.node_class[nodes])
            if tie_break:
                weights, self.parts, self.tie_slack = tie_break_weights(weights, nodes, problem.node_class,
                                                                        exact=self.scale == 1.0)
                self.scale *= self.parts
        else:
            weights, self.scale = problem.node_cost[nodes], 1.0
        backend.minimize([self.x[n] for n in nodes], list(weights))

    def cost_bound(self, bound: float | None) -> float | None:
        """A lower bound on the optimum's cost from a solver's bound on the weighted objective:
        the tie-break's and the rounding's share taken off, then unscaled."""
        if bound is None or not np.isfinite(bound):
            return None
        if self.parts == 1 and self.scale == 1.0 and not self.rounding:
            return max(float(bound), 0.0)  # real costs (SCIP), or integral ones without a tie-break
        # every solution's rounded weight is an integer: at least the ceiling of the bound's share
        rounded = math.ceil((bound - self.tie_slack) / self.parts - 1e-9) - self.rounding
        return max(rounded * self.parts / self.scale, 0.0)

    def add_cycle(self, cycle: Sequence[int]) -> bool:
        """Constraints (4)-(6) for one class cycle; False when the cycle needs none."""
        groups = acyclic_groups(cycle, self.red.class_nodes, self.red.child_sets)
        if groups is None:
            return False
        b = self.backend
        some: list[Literal] = []
        for group in groups:
            if len(group) == 1:
                some.append((self.x[group[0]], False))
                continue
            v = b.bool_var()
            negated = [(self.x[n], False) for n in group]
            if hasattr(b, "implies_all"):
                b.implies_all((v, True), negated)  # (4) as one enforced conjunction
            else:
                for lit in negated:
                    b.clause([(v, False), lit])  # (4)
            b.clause([(v, True)] + [(self.x[n], True) for n in group])  # (5)
            some.append((v, True))
        b.clause(some)  # (6)
        self.num_cycles += 1
        return True


def _solve_loop(problem, red, roots, enc: Encoding, warm: Solution, time_limit, threads, lazy: bool,
                started: float, encode_time: float, name: str, extra_info: dict) -> Solution:
    deadline = None if time_limit is None else started + time_limit
    solve_time = 0.0
    rounds = 0
    bound = None
    added_keys: set[frozenset] = set()
    while True:
        remaining = None if deadline is None else deadline - time.perf_counter()
        if remaining is not None and remaining <= 0:
            status, has, optimal, values = "TIME_LIMIT", False, False, None
            break
        t0 = time.perf_counter()
        status, has, optimal, infeasible, values, bound = enc.backend.solve(remaining, threads)
        solve_time += time.perf_counter() - t0
        if infeasible:
            raise ExtractionError(f"{name}: solver reports INFEASIBLE although the greedy extraction is feasible")
        if not has:
            break
        choice = choice_from_values(problem, red, {n for n, v in enc.x.items() if values(v) > 0.5})
        cycle = find_cycle_in_choice(problem, choice, roots) if lazy else None
        if cycle is None:
            validate_solution(problem, choice, roots)
            info = dict(extra_info, solver_status=status, lazy_rounds=rounds, cycles=enc.num_cycles,
                        variables=len(enc.backend.vars), constraints=enc.backend.num_constraints,
                        weight_scale=enc.scale)
            cost = solution_cost(problem, choice, roots)
            lower = enc.cost_bound(bound)
            if dearer_than_warm(cost, warm):
                # stopped by the time limit with an incumbent dearer than the warm start, or optimal under
                # the rounded weights (or the solver's gap) but dearer in real costs: never worse than greedy
                return warm_solution(warm, f"{WARM} ({name}: {status}, its best was dearer)", lower,
                                     solve_time=solve_time, encode_time=encode_time, info=info)
            return Solution(choice=choice, cost=cost, optimal=optimal, status=status, solve_time=solve_time,
                            encode_time=encode_time, info=info, bound=None if lower is None else min(lower, cost))
        key = frozenset(cycle)
        if key in added_keys or not enc.add_cycle(cycle):
            raise ExtractionError(f"{name}: cycle {cycle} survived its own acyclic constraint")
        added_keys.add(key)
        rounds += 1
    info = dict(extra_info, solver_status=status, lazy_rounds=rounds, cycles=enc.num_cycles,
                variables=len(enc.backend.vars), constraints=enc.backend.num_constraints)
    lower = enc.cost_bound(bound)
    return warm_solution(warm, f"fallback {WARM} ({name}: {status}, no solution in the time limit)", lower,
                         solve_time=solve_time, encode_time=encode_time, info=info)


def solve_split(problem: ExtractionProblem, red: Reduced, roots: list[int], warm: Solution, the_split: Split,
                solve_part, time_limit: float | None, started: float, name: str, extra_info: dict) -> Solution:
    """An acyclic problem solved part by part (components.py): ``solve_part(part, hint nodes,
    seconds) -> PartResult`` on each packed part under the one time limit, the results joined,
    validated and, if dearer than the warm start, replaced by it (never worse than greedy)."""
    parts = Split(the_split.fixed, pack(the_split.parts))
    encode_time = time.perf_counter() - started
    deadline = None if time_limit is None else started + time_limit
    t0 = time.perf_counter()
    out = solve_parts(problem.node_cost, parts, warm_nodes(problem, red, warm), solve_part, deadline)
    solve_time = time.perf_counter() - t0
    info = dict(extra_info, **out.info)  # its counts are of the packed parts (solver calls): name them so
    info.update(packed_parts=out.info["parts"], parts=len(the_split.parts),
                largest_part=max((len(p.nodes) for p in the_split.parts), default=0))
    choice = choice_from_values(problem, red, out.chosen)
    validate_solution(problem, choice, roots)
    cost = solution_cost(problem, choice, roots)
    if dearer_than_warm(cost, warm) or (not out.optimal and not out.info["parts_solved"]):
        status = (f"fallback {WARM} ({name}: no solution in the time limit)" if not out.info["parts_solved"]
                  else f"{WARM} ({name}: its parts' best was dearer)")
        return warm_solution(warm, status, out.bound, solve_time=solve_time, encode_time=encode_time, info=info)
    return Solution(choice=choice, cost=cost, optimal=out.optimal, status="OPTIMAL" if out.optimal else "FEASIBLE",
                    solve_time=solve_time, encode_time=encode_time, info=info, bound=min(out.bound, cost))


def _ilp_part(problem: ExtractionProblem, solver: str, threads: int, tie_break: bool, warm_start: bool,
              stall: bool = False):
    """A per-part solver for :func:`solve_split`: the part's ILP (no cycles to forbid), hinted."""
    def solve(part: Reduced, hint: set[int], limit: float | None) -> PartResult:
        backend = _backend(solver, stall)
        enc = Encoding(backend, problem, part, integral_weights=(solver == "cp-sat"),
                       tie_break=tie_break and solver == "cp-sat")
        if warm_start:
            backend.hint({v: (1.0 if n in hint else 0.0) for n, v in enc.x.items()})
        status, has, optimal, infeasible, values, bound = backend.solve(limit, threads)
        if infeasible:
            raise ExtractionError(f"ilp-acyc/{solver}: a part is infeasible although the greedy extraction is not")
        chosen = {n for n, v in enc.x.items() if values(v) > 0.5} if has else None
        return PartResult(chosen, optimal, enc.cost_bound(bound), status)
    return solve


def _hint_nodes(enc: Encoding, warm: Solution) -> dict[int, float]:
    chosen = warm_nodes(enc.problem, enc.red, warm)
    return {v: (1.0 if n in chosen else 0.0) for n, v in enc.x.items()}


def ilp_topo(problem: ExtractionProblem, roots: Iterable[int] | None = None, *, time_limit: float | None = None,
             solver: str = "cp-sat", order: str = "int", order_scope: str = "all", warm_start: bool = True,
             threads: int | None = None, tie_break: bool = True) -> Solution:
    """TENSAT's ILP with topological-order variables.

    order: "int" (0..M-1) or "real" (0..1, SCIP only). order_scope: "all" puts
    an order variable on every relevant class, as TENSAT does; "scc" only on
    classes inside cyclic SCCs (edges between SCCs cannot close a cycle).
    tie_break (CP-SAT): break equal-cost ties by fixed per-node values, so runs
    agree on one program (see presolve.tie_break_weights); it can make proving
    optimality slower on e-graphs with many equal-cost alternatives.
    """
    if order not in ("int", "real"):
        raise ValueError("order must be 'int' or 'real'")
    if order_scope not in ("all", "scc"):
        raise ValueError("order_scope must be 'all' or 'scc'")
    started, roots, red, warm = prepare(problem, roots)
    backend = _backend(solver)
    enc = Encoding(backend, problem, red, integral_weights=(solver == "cp-sat"),
                   tie_break=tie_break and solver == "cp-sat")
    if order_scope == "all":
        component = {c: 0 for c in red.classes}
    else:
        component = {}
        for i, comp in enumerate(cyclic_components(reduced_class_graph(problem, red))):
            for c in comp:
                component[c] = i
    scope = sorted(component)
    size = max(len(scope), 1)
    integral = order == "int"
    if integral:
        upper, gap, big_m = size - 1, 1.0, float(size)
    else:
        eps = 1.0 / (size + 1)
        upper, gap, big_m = 1.0, eps, 1.0 + 2 * eps
    t = {c: backend.order_var(upper, integral) for c in scope}
    for c in scope:
        for n in red.class_nodes[c]:
            for d in red.child_sets[n]:
                if d in t and component[d] == component[c]:
                    backend.order(t[c], t[d], enc.x[n], gap, big_m)
    if warm_start:
        hints = _hint_nodes(enc, warm)
        ranks = topological_ranks(problem, warm.choice, roots)
        ordered = sorted((r, c) for c, r in ranks.items() if c in t)
        for position, (_, c) in enumerate(ordered):
            hints[t[c]] = position if integral else position * gap
        backend.hint(hints)
    encode_time = time.perf_counter() - started
    return _solve_loop(problem, red, roots, enc, warm, time_limit, threads or default_threads(), lazy=False,
                       started=started, encode_time=encode_time, name=f"ilp-topo/{solver}",
                       extra_info={"order": order, "order_scope": order_scope, "order_vars": len(t)})


def enumerate_cycles(problem: ExtractionProblem, red: Reduced, cycles: str, max_cycles: int | None,
                     deadline: float | None = None) -> tuple[list[list[int]], bool]:
    """The class cycles to encode up front, and whether they are all of them.

    Enumeration stops at ``max_cycles`` or at the ``deadline``; the caller then
    checks solutions and adds missing cycles lazily.
    """
    succ = reduced_class_graph(problem, red)
    if cycles == "all":
        return simple_cycles(succ, max_cycles, deadline)
    if cycles == "auto":
        found, complete = simple_cycles(succ, max_cycles, deadline)
        return (found, True) if complete else (cycle_basis(succ), False)
    if cycles == "basis":
        return cycle_basis(succ), False
    if cycles == "lazy":
        return [], False
    raise ValueError(f"cycles must be one of {CYCLE_MODES}")


def enumeration_deadline(started: float, time_limit: float | None) -> float | None:
    """Cycle enumeration may use half of the time limit; solving needs the rest."""
    return None if time_limit is None else started + time_limit / 2


def encode_cycles(enc: Encoding, cycles: Iterable[Sequence[int]]) -> None:
    """Acyclic constraints for each distinct class set among ``cycles`` (Algorithm 1 depends on the set only)."""
    seen: set[frozenset] = set()
    for cycle in cycles:
        key = frozenset(cycle)
        if key not in seen:
            seen.add(key)
            enc.add_cycle(cycle)


def ilp_acyc(problem: ExtractionProblem, roots: Iterable[int] | None = None, *, time_limit: float | None = None,
             solver: str = "cp-sat", cycles: str = "auto", max_cycles: int | None = DEFAULT_MAX_CYCLES,
             warm_start: bool = True, threads: int | None = None, tie_break: bool = True,
             decompose: bool = True, stall: bool = True) -> Solution:
    """He et al.'s ILP-ACyc: acyclic constraints per class cycle instead of order variables.

    cycles: "all" (Johnson, at most ``max_cycles``), "basis" (one cycle per
    non-tree edge of each SCC), "lazy" (none up front), or "auto" (all of
    them if Johnson finds no more than ``max_cycles``, else the basis). Unless
    all cycles were enumerated, each solution is checked and a cycle it
    contains is added before solving again. tie_break: as for :func:`ilp_topo`.
    decompose: when the class graph has no cycle (nothing to forbid), solve the problem's
    independent parts one by one (components.py); the optimum is the same.
    stall: (CP-SAT) stop a solve that found no better program for :func:`stall_seconds` (its best
    is returned, not proven optimal; the info's ``stalled`` counts such solves).
    """
    started, roots, red, warm = prepare(problem, roots)
    the_split = split(red) if decompose else None
    if the_split is not None:
        return solve_split(problem, red, roots, warm, the_split,
                           _ilp_part(problem, solver, threads or default_threads(), tie_break, warm_start, stall),
                           time_limit, started, f"ilp-acyc/{solver}", {"cycle_mode": cycles, "cycles_enumerated": 0,
                                                                       "cycles_complete": True})
    backend = _backend(solver, stall)
    enc = Encoding(backend, problem, red, integral_weights=(solver == "cp-sat"),
                   tie_break=tie_break and solver == "cp-sat")
    found, complete = enumerate_cycles(problem, red, cycles, max_cycles, enumeration_deadline(started, time_limit))
    encode_cycles(enc, found)
    if warm_start:
        backend.hint(_hint_nodes(enc, warm))
    encode_time = time.perf_counter() - started
    return _solve_loop(problem, red, roots, enc, warm, time_limit, threads or default_threads(),
                       lazy=not complete, started=started, encode_time=encode_time, name=f"ilp-acyc/{solver}",
                       extra_info={"cycle_mode": cycles, "cycles_enumerated": len(found),
                                   "cycles_complete": complete})
