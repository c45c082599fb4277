"""Exact extraction as acyclic weighted partial MaxSAT (He et al., §4.1 and Algorithm 1).

Hard clauses: the root clause (some node of each root class), the children
clauses (w_n -> some node of each child class), and for every class cycle the
Tseitin-encoded acyclic clauses (1)-(3) of Algorithm 1 — the same clauses that
ILP-ACyc writes as rows (4)-(6); both are produced by ``ilp.Encoding``.
Soft clauses: (not w_n) with weight = the node's cost as an integer (see
``presolve.integer_weights``: exact for integral costs, otherwise scaled to a
resolution of max_cost / 1e7 with distinct costs kept distinct and in order;
zero-cost nodes get no soft clause).

Engines (PySAT): "rc2" (RC2, core-guided), "rc2-stratified" (RC2 with Boolean
lexicographic optimization and diversity stratification), "portfolio" (both
raced in two forked processes, the first optimum wins; the default, "auto",
where the machine has two cores or more, else "rc2") and "fm" (Fu & Malik /
WMSU1). Neither RC2 variant dominates on zoo e-graphs (bench/extraction.py,
time limit 30 s): stratification proves BERT at k_multi 1 in 0.14 s (plain:
1.7 s) and ViT's 10,000-node e-graph in 2.6 s (plain: not in 30 s), plain RC2
proves NasNet-A and NasRNN in 0.6-0.7 s (stratified: not in 30 s). RC2 is
stopped at the time limit by a timer that calls ``RC2.interrupt()`` (SAT
calls made with expect_interrupt); FM cannot be interrupted, so it runs in a
forked child process that is killed at the limit. These engines are
core-guided: they have no feasible solution before the optimum, so on a
timeout the merge-aware greedy solution is returned, flagged, with the weight
of the cores relaxed so far as its lower bound.
An acyclic class graph is solved part by part as in ILP-ACyc (components.py;
``decompose=True``): per part, RC2 proves in a fraction of a second what it
could not prove of the whole in a minute on NasNet-A's 20,000-node e-graph.
Cycles as in ILP-ACyc ("auto": all of them when Johnson's algorithm finds at
most max_cycles, else a cycle basis; "all", "basis", "lazy"), with lazy cuts
whenever the encoded set is incomplete.
"""
from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import threading
import time
from typing import Iterable

from .components import PartResult, split
from .cycles import find_cycle_in_choice
from .ilp import (DEFAULT_MAX_CYCLES, Encoding, choice_from_values, encode_cycles, enumerate_cycles,
                  enumeration_deadline, solve_split)
from .warm import WARM, dearer_than_warm, prepare, warm_solution
from .problem import ExtractionProblem, Solution
from .validity import ExtractionError, solution_cost, validate_solution

ENGINES = ("auto", "portfolio", "rc2", "rc2-stratified", "fm")
#: the engines "portfolio" races
PORTFOLIO = ("rc2", "rc2-stratified")


def resolve_engine(engine: str) -> str:
    """"auto": the portfolio where two cores can race it, else plain RC2."""
    if engine not in ENGINES:
        raise ValueError(f"unknown MaxSAT engine {engine!r}; choose from {ENGINES}")
    if engine == "auto":
        return "portfolio" if (os.cpu_count() or 1) >= 2 else "rc2"
    return engine


class _Clauses:
    """Collects the encoding as CNF: variable i is the DIMACS variable i + 1."""

    def __init__(self) -> None:
        self.vars: list[int] = []
        self.hard: list[list[int]] = []
        self.soft: list[tuple[int, int]] = []  # (variable, weight) for the soft clause (not variable)

    @property
    def num_constraints(self) -> int:
        return len(self.hard)

    def bool_var(self) -> int:
        self.vars.append(len(self.vars) + 1)
        return len(self.vars) - 1

    def clause(self, lits) -> None:
        self.hard.append([v + 1 if positive else -(v + 1) for v, positive in lits])

    def minimize(self, variables, weights) -> None:
        self.soft = [(v, int(w)) for v, w in zip(variables, weights) if w > 0]

    def wcnf(self):
        from pysat.formula import WCNF

        formula = WCNF()
        for cl in self.hard:
            formula.append(cl)
        for v, w in self.soft:
            formula.append([-(v + 1)], weight=w)
        return formula


def _rc2(formula, engine: str, time_limit: float | None):
    """Run RC2 in this process under a timer; returns (model or None, timed_out, lower bound on the
    optimum's weight: the cost of the cores RC2 has relaxed, valid also when interrupted)."""
    from pysat.examples.rc2 import RC2, RC2Stratified

    solver = RC2Stratified(formula, blo="div") if engine == "rc2-stratified" else RC2(formula)
    fired = threading.Event()

    def stop() -> None:
        fired.set()
        solver.interrupt()

    timer = threading.Timer(time_limit, stop) if time_limit is not None else None
    try:
        if timer is not None:
            timer.start()
        model = solver.compute(expect_interrupt=timer is not None)
        lower = solver.cost
    finally:
        if timer is not None:
            timer.cancel()
        solver.delete()
    if model is None:
        return None, fired.is_set(), lower
    return list(model), False, lower


def _rc2_child(formula, engine: str, time_limit: float | None, conn) -> None:
    try:
        conn.send(_rc2(formula, engine, time_limit))
    finally:
        conn.close()


def _fm_child(formula, conn) -> None:
    from pysat.examples.fm import FM

    fm = FM(formula, verbose=0)
    try:
        conn.send((list(fm.model), False, fm.cost) if fm.compute() else (None, False, None))
    finally:
        fm.delete()
        conn.close()


def _race(runs, wait: float | None):
    """Run each ``(target, args)`` in a forked process (``target(*args, conn)`` sends one
    ``(model or None, timed_out, lower bound)``) and return the first answer that is not a
    timeout (a model, or None for unsatisfiable hard clauses), else
    ``(None, True, the best lower bound)`` once all answered or ``wait`` seconds passed.
    Children still running are killed; raises ExtractionError when every child died silently."""
    context = multiprocessing.get_context("fork")
    children, pipes = [], []
    for target, args in runs:
        receive, send = context.Pipe(duplex=False)
        child = context.Process(target=target, args=(*args, send), daemon=True)
        child.start()
        send.close()
        children.append(child)
        pipes.append(receive)
    started = time.perf_counter()
    lowers: list[int] = []
    died = 0
    try:
        waiting = list(pipes)
        while waiting:
            remaining = None if wait is None else max(wait - (time.perf_counter() - started), 0.0)
            ready = multiprocessing.connection.wait(waiting, timeout=remaining)
            if not ready:
                break
            for conn in ready:
                waiting.remove(conn)
                try:
                    model, timed_out, lower = conn.recv()
                except EOFError:
                    died += 1  # a child that died without an answer: another may still have one
                    continue
                if lower is not None:
                    lowers.append(lower)
                if model is not None or not timed_out:  # an optimum, or a proof that there is none
                    return model, timed_out, lower
        if died == len(children):
            raise ExtractionError("every MaxSAT process died without an answer")
        return None, True, (max(lowers) if lowers else None)
    finally:
        for child in children:
            if child.is_alive():
                child.kill()
            child.join()
        for conn in pipes:
            conn.close()


def _portfolio(formula, time_limit: float | None):
    """Race the PORTFOLIO engines; each stops itself at the limit and reports its core bound."""
    grace = None if time_limit is None else time_limit + 5.0
    return _race([(_rc2_child, (formula, engine, time_limit)) for engine in PORTFOLIO], grace)


def _fm(formula, time_limit: float | None):
    """FM cannot be interrupted: it runs in a forked process killed at the limit."""
    return _race([(_fm_child, (formula,))], time_limit)


def _run_engine(formula, engine: str, time_limit: float | None):
    """(model or None, timed out, lower bound on the optimum's weight) from ``engine``."""
    if not formula.soft:  # nothing to optimize; RC2Stratified cannot handle an empty objective
        return _rc2(formula, "rc2", time_limit)
    if engine == "fm":
        return _fm(formula, time_limit)
    if engine == "portfolio":
        return _portfolio(formula, time_limit)
    return _rc2(formula, engine, time_limit)


def _maxsat_part(problem: ExtractionProblem, engine: str):
    """A per-part solver for ``ilp.solve_split``: ``engine`` on the part (the portfolio on
    small parts too: Inception-v3's 385-node parts at k_multi 1 take plain RC2 over 5 s and
    stratified RC2 0.02 s)."""
    def solve(part, hint, limit) -> PartResult:
        cnf = _Clauses()
        enc = Encoding(cnf, problem, part, integral_weights=True)
        model, timed_out, lower = _run_engine(cnf.wcnf(), engine, limit)
        if model is None:
            if not timed_out:
                raise ExtractionError("maxsat: a part's hard clauses are unsatisfiable although the greedy "
                                      "extraction satisfies them")
            return PartResult(None, False, enc.cost_bound(lower), "TIME_LIMIT")
        true = {lit for lit in model if lit > 0}
        return PartResult({n for n, v in enc.x.items() if v + 1 in true}, True, enc.cost_bound(lower), "OPTIMAL")
    return solve


def maxsat(problem: ExtractionProblem, roots: Iterable[int] | None = None, *, time_limit: float | None = None,
           engine: str = "auto", cycles: str = "auto", max_cycles: int | None = DEFAULT_MAX_CYCLES,
           decompose: bool = True) -> Solution:
    """Acyclic WPMaxSAT extraction; see the module docstring. decompose: as for ``ilp_acyc``."""
    engine = resolve_engine(engine)
    started, roots, red, warm = prepare(problem, roots)
    the_split = split(red) if decompose else None
    if the_split is not None:
        return solve_split(problem, red, roots, warm, the_split, _maxsat_part(problem, engine), time_limit, started,
                           f"maxsat/{engine}", {"engine": engine, "cycle_mode": cycles, "cycles_enumerated": 0,
                                                "cycles_complete": True})
    cnf = _Clauses()
    enc = Encoding(cnf, problem, red, integral_weights=True)
    found, complete = enumerate_cycles(problem, red, cycles, max_cycles, enumeration_deadline(started, time_limit))
    encode_cycles(enc, found)
    encode_time = time.perf_counter() - started
    deadline = None if time_limit is None else started + time_limit
    solve_time = 0.0
    rounds = 0
    lower = None  # the best lower bound on the weighted optimum so far
    info = {"engine": engine, "cycle_mode": cycles, "cycles_enumerated": len(found), "cycles_complete": complete,
            "weight_scale": enc.scale}
    while True:
        remaining = None if deadline is None else deadline - time.perf_counter()
        if remaining is not None and remaining <= 0:
            break
        t0 = time.perf_counter()
        model, timed_out, bound = _run_engine(cnf.wcnf(), engine, remaining)
        solve_time += time.perf_counter() - t0
        if bound is not None:  # a round with more cycle cuts is no easier: its bound holds too
            lower = bound if lower is None else max(lower, bound)
        if model is None:
            if timed_out:
                break
            raise ExtractionError("maxsat: hard clauses reported unsatisfiable although the greedy "
                                  "extraction satisfies them")
        true = {lit for lit in model if lit > 0}
        chosen = {n for n, v in enc.x.items() if v + 1 in true}
        choice = choice_from_values(problem, red, chosen)
        cycle = None if complete else find_cycle_in_choice(problem, choice, roots)
        if cycle is None:
            validate_solution(problem, choice, roots)
            info.update(lazy_rounds=rounds, cycles=enc.num_cycles, variables=len(cnf.vars),
                        hard_clauses=len(cnf.hard), soft_clauses=len(cnf.soft))
            cost = solution_cost(problem, choice, roots)
            # the engines report the optimum's weight, which bounds every solution's from below
            bound = enc.cost_bound(lower)
            if dearer_than_warm(cost, warm):  # optimal for the rounded weights only
                return warm_solution(warm, f"{WARM} (maxsat/{engine}: OPTIMAL, its best was dearer)", bound,
                                     solve_time=solve_time, encode_time=encode_time, info=info)
            return Solution(choice=choice, cost=cost, optimal=True, status="OPTIMAL", solve_time=solve_time,
                            encode_time=encode_time, info=info, bound=None if bound is None else min(bound, cost))
        if not enc.add_cycle(cycle):
            raise ExtractionError(f"maxsat: cycle {cycle} survived its own acyclic constraint")
        rounds += 1
    info.update(lazy_rounds=rounds, cycles=enc.num_cycles, variables=len(cnf.vars), hard_clauses=len(cnf.hard),
                soft_clauses=len(cnf.soft))
    bound = enc.cost_bound(lower)
    return warm_solution(warm, f"fallback {WARM} (maxsat/{engine}: no solution in the time limit)", bound,
                         solve_time=solve_time, encode_time=encode_time, info=info)
