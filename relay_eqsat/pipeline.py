"""The optimizer between frontend and backend: TensorGraph in, a cheaper equivalent TensorGraph out.

Pipeline (DESIGN.md): insert the graph into an e-graph, grow it with a
scheduler (TENSAT's sequential saturation or MCTS), extract the cheapest
acyclic program under the cost model, and keep it only if it is cheaper than
the input ("never worse"). Used by the Relay pass, the CLI and the benchmarks.
"""
from __future__ import annotations

import logging
import os
import time
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Iterable, Mapping, Sequence

from . import rewrite as rules_mod
from .cost import CostModel, make_cost_model
from relay_eqsat.cost.calibrate import Calibrator
from relay_eqsat.cost.instance import instances_from_graph
from relay_eqsat.cost.inlining import fusion_cuts
from .egraph import EGraph
from .finishing import finish, finishing_rules, search_rules
from .extract import get_extractor
from .graph import TensorGraph
from .options import DEFAULTS, OPTIMIZER_OPTIONS, validate
from .progress import ticking
from relay_eqsat.rewrite.check import check_user_rules, load_user_rule_file
from .rewrite import rules_for_target
from .search import Limits, get_scheduler
from .search.base import LIMIT_OPTIONS

log = logging.getLogger("relay_eqsat")


@dataclass
class OptimizeOptions:
    """Every knob of the optimizer, typed: the ``optimizer`` options of the one schema
    (:mod:`relay_eqsat.options`, which declares each one's type, default, allowed values and help;
    ``tests/test_optimize.py`` checks that these fields are exactly those, with the same defaults),
    validated and coerced on construction ("5000" -> 5000; ValueError naming a bad value). The
    search's limits are :attr:`limits`, made here and nowhere else."""

    search: str = DEFAULTS["search"]
    extractor: str = DEFAULTS["extractor"]
    final_extractor: str = DEFAULTS["final_extractor"]
    cost: Any = DEFAULTS["cost"]                  # a kind name, or a CostModel
    target: str | None = DEFAULTS["target"]       # None: the host
    node_limit: int = DEFAULTS["node_limit"]
    iter_limit: int = DEFAULTS["iter_limit"]
    k_multi: int = DEFAULTS["k_multi"]
    budget: int = DEFAULTS["budget"]
    max_sim_steps: int = DEFAULTS["max_sim_steps"]
    patience: int = DEFAULTS["patience"]
    time_limit: float = DEFAULTS["time_limit"]
    extract_time_limit: float = DEFAULTS["extract_time_limit"]
    seed: int = DEFAULTS["seed"]
    rules: Any = DEFAULTS["rules"]                # a rule set's name, a rule file, or a list of Rule
    fast_math: bool = DEFAULTS["fast_math"]
    cycle_filter: str = DEFAULTS["cycle_filter"]

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Validate every field through the options schema, coercing strings; ValueError naming
        a bad one."""
        for name, value in validate({f.name: getattr(self, f.name) for f in fields(self)}).items():
            setattr(self, name, value)

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | None) -> "OptimizeOptions":
        """Options from a dict (None values: the defaults); unknown keys raise ValueError naming them."""
        options = dict(options or {})
        unknown = [k for k in options if k not in OPTIMIZER_OPTIONS]
        if unknown:
            raise ValueError(f"unknown optimizer options {unknown}; known: {list(OPTIMIZER_OPTIONS)}")
        return cls(**{k: v for k, v in options.items() if v is not None})

    @property
    def limits(self) -> Limits:
        """The search's limits (node, iteration and time limits, ``k_multi``, the cycle filter)."""
        return Limits(**{name: getattr(self, name) for name in LIMIT_OPTIONS})


@dataclass
class OptimizeReport:
    """What the optimizer did; attached to the pass's result and printed by the CLI."""

    changed: bool = False
    reason: str = ""
    search: str = ""
    stop_reason: str = ""
    iterations: int = 0
    rules_fired: dict[str, int] = field(default_factory=dict)
    #: per rule, how many of the returned program's nodes its applications added (a node two rules
    #: would add counts for the first); empty when the input is returned
    rules_in_result: dict[str, int] = field(default_factory=dict)
    egraph_nodes: int = 0
    egraph_classes: int = 0
    blacklisted: int = 0
    cost_before: float = 0.0
    cost_after: float = 0.0
    extractor: str = ""
    extract_status: str = ""
    optimal: bool = False
    nodes_before: int = 0
    nodes_after: int = 0
    ops_before: dict[str, int] = field(default_factory=dict)
    ops_after: dict[str, int] = field(default_factory=dict)
    search_time: float = 0.0
    extract_time: float = 0.0
    total_time: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)
    #: with ``runtime_decides``: the other programs calibration chose in its rounds, cheaper than
    #: the input under the measured kernels, cheapest first (at most :data:`RUNTIME_ALTERNATIVES`),
    #: for the caller's runtime check to time beside the result (not in ``to_dict``: programs)
    alternatives: list[Candidate] = field(default_factory=list, repr=False)
    #: with ``calibrate_after_check``: a :class:`Recalibration` to call when the runtime measured the
    #: result no faster (not in ``to_dict``)
    recalibrate: Any = field(default=None, repr=False, compare=False)

    @property
    def speedup(self) -> float:
        """Predicted speedup (cost before / cost after)."""
        return self.cost_before / self.cost_after if self.cost_after > 0 else 1.0

    def to_dict(self) -> dict:
        d = asdict(replace(self, alternatives=[], recalibrate=None))
        del d["alternatives"], d["recalibrate"]
        d["predicted_speedup"] = self.speedup
        return d

    def summary(self) -> str:
        fired = {k: v for k, v in sorted(self.rules_fired.items(), key=lambda kv: -kv[1]) if v}
        return (f"{'changed' if self.changed else 'unchanged'} ({self.reason}); search {self.search}: "
                f"{self.stop_reason} after {self.iterations} steps, e-graph {self.egraph_nodes} nodes; "
                f"cost {self.cost_before * 1e3:.3f} ms -> {self.cost_after * 1e3:.3f} ms "
                f"({self.speedup:.3f}x predicted) by {self.extractor} [{self.extract_status}]; "
                f"{self.total_time:.2f}s; rules {fired}; in the result {self.rules_in_result}")


@dataclass
class Candidate:
    """A program the optimizer could return instead of its result: the program, its cost under the
    cost model and, per rule, the nodes its applications added (as ``OptimizeReport``'s fields)."""

    graph: TensorGraph
    cost: float
    rules_in_result: dict[str, int]

    def report_fields(self) -> dict:
        """The fields of ``OptimizeReport.to_dict()`` that describe the returned program, for this one."""
        return {"cost_after": self.cost, "rules_in_result": dict(self.rules_in_result),
                "nodes_after": len(self.graph), "ops_after": self.graph.op_counts()}


def rule_file(rules: str | os.PathLike) -> tuple[Any, bool]:
    """``(file, user)``: the rule file a rule-set option names and whether it is the user's.

    ``NAME.rules`` is a path first (relative to the working directory), then a
    shipped set; ``NAME`` is a shipped set (an ``importlib.resources`` file);
    ValueError for a name that is neither."""
    rules = os.fspath(rules)
    plain = "/" not in rules and "\\" not in rules
    if rules.endswith(".rules") and os.path.isfile(rules):
        # a file in the working directory comes before a shipped set of the same name
        return rules, True
    fname = rules if rules.endswith(".rules") else rules + ".rules"
    if plain and fname in rules_mod.shipped_rule_files():
        return rules_mod.rules_root().joinpath(fname), False
    if rules.endswith(".rules") or not plain:
        return rules, True
    shipped = ", ".join(f[:-len(".rules")] for f in rules_mod.shipped_rule_files())
    raise ValueError(f"no shipped rule set {rules!r} (shipped: {shipped}); a rule file path ends in .rules")


def resolve_rules(rules: Any, trust: bool = False) -> list:
    """A rule list from a shipped set name, a .rules path, or a list of rules
    (which file a name or path means: `rule_file`).

    User rules (a rule file, or Rule objects other than the shipped ones) are
    verified numerically once per process (``relay_eqsat.rewrite.check``): a
    wrong rule, or one without a verifiable instance unless ``trust``, raises
    ``RuleVerificationError`` (a ValueError) naming the rule, its file and
    line, and what failed. Shipped sets are verified by the test suite."""
    if isinstance(rules, (list, tuple)):
        rules = list(rules)
        check_user_rules(rules, trust=trust)
        return rules
    if isinstance(rules, (str, os.PathLike)):
        path, user = rule_file(rules)
        return load_user_rule_file(path, trust=trust) if user else rules_mod.load_rules(path.name)
    raise ValueError(f"rules must be a rule-set name, a .rules path or a list of rules, not {rules!r}")


def resolve_cost(cost: Any, target: str | None = None, device: str = "", remote=None, jobs: int | None = None,
                 records=None):
    """A CostModel from a kind name (of ``target`` on ``device``, measuring through ``remote`` with
    ``jobs``, pricing kernels built under the tuning ``records``: see `CostModel`), or the model itself."""
    if isinstance(cost, CostModel):
        return cost
    if isinstance(cost, str):
        return make_cost_model(cost, target=target, device=device, remote=remote, jobs=jobs, records=records)
    if callable(getattr(cost, "node_cost", None)) and callable(getattr(cost, "graph_cost", None)):
        return cost
    raise ValueError(f"cost must be a kind name or a CostModel, not {cost!r}")


def check_equivalent_interface(before: TensorGraph, after: TensorGraph) -> None:
    """The optimized graph must take the same inputs and return the same type."""
    after.validate()
    if before[before.output].type != after[after.output].type:
        raise ValueError(f"output type changed: {before[before.output].type} -> {after[after.output].type}")
    tin, tout = before.input_types(), after.input_types()
    for name, t in tout.items():
        if tin.get(name) != t:
            raise ValueError(f"input {name!r} changed type or appeared: {tin.get(name)} -> {t}")


#: measure-and-re-extract rounds of a calibration (each round measures the kernels the new candidate
#: adds, then extracts again with their measured times)
CALIBRATION_ROUNDS = 3
#: at most this many of calibration's other candidates go to a runtime check beside the result: near
#: ties between them flip with a kernel's measurement (SqueezeNet1.1 on a Zen 4: a second round's
#: timings chose a program that also widens the first convolution, predicted 1.13x, timed 1.10x;
#: the first round's, predicted 1.12x, timed 1.12-1.15x)
RUNTIME_ALTERNATIVES = 2


def rules_in_program(egraph, enodes: Iterable[int]) -> dict[str, int]:
    """Per rule, how many of the e-nodes ``enodes`` (a program extracted from ``egraph``) its
    applications added (``EGraph.node_origin``), most first; the input's nodes count for none."""
    counts: dict[str, int] = {}
    for n in enodes:
        rule = egraph.node_origin(n)
        if rule is not None:
            counts[rule] = counts.get(rule, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def rules_in_words(used: Mapping[str, int], top: int | None = None) -> str:
    """``OptimizeReport.rules_in_result`` as text, most nodes first: ``"dense-merge (2 nodes), ..."``."""
    items = sorted(((k, v) for k, v in used.items() if v), key=lambda kv: (-kv[1], kv[0]))
    shown = items if top is None else items[:top]
    text = ", ".join(f"{k} ({v} node{'s' if v != 1 else ''})" for k, v in shown)
    return text + (f", +{len(items) - len(shown)} more" if len(items) > len(shown) else "")


def _same_program(a: TensorGraph, b: TensorGraph) -> bool:
    return a.output == b.output and a.nodes == b.nodes


def _alternatives(rules_in, candidates: Sequence[tuple], out: TensorGraph, below: float,
                  cost_model) -> list[Candidate]:
    """Calibration's candidates other than ``out`` (each distinct once) that the measured kernels
    price below ``below``, cheapest first, at most :data:`RUNTIME_ALTERNATIVES`."""
    found: list[Candidate] = []
    for g, solution in candidates:
        if _same_program(g, out) or any(_same_program(g, c.graph) for c in found):
            continue
        cost = cost_model.graph_cost(g)
        if cost < below:
            found.append(Candidate(g, cost, rules_in(g, solution)))
    return sorted(found, key=lambda c: c.cost)[:RUNTIME_ALTERNATIVES]


def optimize_graph(graph: TensorGraph, options: OptimizeOptions | Mapping[str, Any] | None = None,
                   cost_model=None, rules: Sequence | None = None, *, min_gain: float = 0.0,
                   calibrate: bool = False, calibrate_time_limit: float = 300.0,
                   runtime_decides: bool = False, calibrate_after_check: bool = False,
                   progress: bool | None = None, while_measuring=None,
                   tuned: bool | None = None) -> tuple[TensorGraph, OptimizeReport]:
    """Optimize ``graph``; returns (graph', report). graph' is ``graph`` itself
    unless the result is predicted faster by more than ``min_gain`` (0.1: 10%;
    0: any gain; never worse under the cost model).

    ``calibrate``: measure on this machine, within ``calibrate_time_limit``
    seconds, the kernels of the input and of each candidate extraction, and
    extract again with their measured times (up to :data:`CALIBRATION_ROUNDS`
    rounds; out of rounds, the candidate cheapest under the measured times is
    taken, not the last extraction, whose kernels were measured after it was
    chosen), so the result and the decision rest on this CPU's kernel times
    (``cost.calibrate``; the report's ``info["calibration"]`` says what was
    measured). Kernel times measured alone miss what happens between kernels
    (launch overheads, fusion), so with ``runtime_decides`` (the caller times
    the whole programs next) calibration chooses the candidate but does not
    veto one: when the measured kernels make no candidate cheaper, the first
    one (the shipped model's) is returned for the runtime to decide on; when
    they do, the report's ``alternatives`` hold the rounds' other candidates
    they price below the input, for the runtime to time beside the result. ``while_measuring``: a
    context manager factory calibration enters while it measures (the pass pauses its background
    builds there). ``tuned``: the program ships built under tuning records, and the rules that
    ``avoid tuned`` are left out (None: when the cost model prices kernels under records).

    ``calibrate_after_check`` (with ``calibrate`` and ``runtime_decides``): nothing is measured
    before the runtime judges the cost model's own pick; the report's ``recalibrate`` (see
    :class:`Recalibration`) calibrates on the caller's word that the runtime rejected it, and
    extracts again from the same e-graph; it is None where most of the kernels the pick and the
    input do not share have measured times already (:func:`unmeasured_difference`)."""
    t0 = time.perf_counter()
    opts = options if isinstance(options, OptimizeOptions) else OptimizeOptions.from_mapping(options)
    cost_model = cost_model if cost_model is not None else resolve_cost(opts.cost, opts.target)
    if tuned is None:  # kernels priced under tuning records ship under them
        tuned = getattr(cost_model, "records", None) is not None
    rules, avoided = rules_for_target(resolve_rules(rules if rules is not None else opts.rules), opts.target,
                                      opts.fast_math, tuned=tuned)
    rep = OptimizeReport(search=opts.search)
    if avoided:
        rep.info["rules_avoided"] = avoided
    graph = graph.compact()
    rep.nodes_before = len(graph)
    rep.ops_before = graph.op_counts()
    rep.cost_before = cost_model.graph_cost(graph)

    egraph = EGraph()
    root = egraph.add_graph(graph)
    limits = opts.limits
    ts = time.perf_counter()
    scheduler = get_scheduler(opts.search, opts, root=root)  # None: no search
    srep = None if scheduler is None else scheduler.run(egraph, search_rules(rules), limits, cost_model.node_cost)
    if srep is not None and srep.info:  # what the scheduler adds (MCTS: its counters), its history left out
        rep.info[opts.search] = {k: v for k, v in srep.info.items() if k != "history"}
    rep.search_time = time.perf_counter() - ts
    if srep is not None:
        rep.stop_reason, rep.iterations = srep.stop_reason, srep.iterations
        rep.rules_fired = dict(srep.fired)
        rep.blacklisted = srep.blacklisted
    else:
        rep.stop_reason = "no search"
    rep.egraph_nodes, rep.egraph_classes = egraph.num_nodes, egraph.num_classes
    rep.info["type_mismatch"] = egraph.type_mismatches  # rule applications skipped: right side's type differs

    choice = _Choice(egraph, root, graph, cost_model, get_extractor(opts.final_extractor), opts, progress,
                     finishing_rules(rules))
    deferred = calibrate and runtime_decides and calibrate_after_check
    te = time.perf_counter()
    calibrator = None
    if calibrate and not deferred:
        calibrator = Calibrator(cost_model, calibrate_time_limit, progress=progress,
                                differences_only=runtime_decides, while_measuring=while_measuring)
    out, solution, candidates = choice.rounds(calibrator)
    rep.extract_time = time.perf_counter() - te
    out, rep = choice.conclude(rep, out, solution, candidates, calibrator, runtime_decides, min_gain, t0)
    if deferred and rep.changed:
        unmeasured, differing = unmeasured_difference(cost_model, graph, out)
        rep.info["calibration_deferred"] = {"unmeasured": unmeasured, "differing": differing}
        if unmeasured * 2 > differing:  # the pick rests mostly on predicted times: worth a second chance
            rep.recalibrate = Recalibration(choice, rep, out, solution, calibrate_time_limit, min_gain)
    return out, rep


def unmeasured_difference(cost_model, graph: TensorGraph, other: TensorGraph) -> tuple[int, int]:
    """(unmeasured, differing): of the distinct kernels one of the two programs runs and the other
    does not, those ``cost_model`` has no measured time for. Where most are measured, the cost
    model's choice between the two already rests on this machine's times: calibrating after a
    runtime check rejected it would measure little and choose about the same (NasRNN with the
    Zen 3's shipped data: 1 of 8), so the rejection stands."""
    mine = {i.key(): i for i in instances_from_graph(graph)}
    theirs = {i.key(): i for i in instances_from_graph(other)}
    differing = [i for k, i in {**mine, **theirs}.items() if (k in mine) != (k in theirs)]
    measured = getattr(cost_model, "is_measured", None)
    unmeasured = sum(1 for i in differing if measured is None or not measured(i))
    return unmeasured, len(differing)


class _Choice:
    """Extracting from one searched e-graph: the calibration rounds and the decision."""

    def __init__(self, egraph, root, graph: TensorGraph, cost_model, extractor, opts: OptimizeOptions,
                 progress: bool | None, finishing: Sequence = ()):
        self.egraph, self.root, self.graph, self.cost_model = egraph, root, graph, cost_model
        self.extractor, self.opts, self.progress = extractor, opts, progress
        self.finishing = list(finishing)
        self.finished: dict[int, dict[str, int]] = {}  # id of an extracted program -> finishing's rules in it

    def extract(self) -> tuple[TensorGraph, Any]:
        """The e-graph's extraction, finished (`relay_eqsat.finishing`) with the finishing rules."""
        opts, cost_model = self.opts, self.cost_model
        program_cost = getattr(cost_model, "program_cost", None)
        with ticking(f"extracting ({self.extractor.name})", opts.extract_time_limit, enabled=self.progress):
            out, solution = self.extractor.extract_graph(self.egraph, self.root, cost_model.node_cost,
                                                         opts.extract_time_limit, program_cost=program_cost)
            log.debug("extracted (%s): cost %.6g, %s", self.extractor.name, solution.cost, solution.status)
            done = finish(out.compact(), self.finishing, cost_model.node_cost, self.extractor,
                          cost_model.graph_cost, opts.extract_time_limit, opts.cycle_filter, program_cost)
        if done.changed:
            self.finished[id(done.graph)] = rules_in_program(done.egraph, done.enodes)
        return done.graph, solution

    def rules_in(self, out: TensorGraph, solution) -> dict[str, int]:
        """Per rule, the nodes of ``out`` its applications added: in the search's e-graph (the
        solution's) and in finishing."""
        counts = rules_in_program(self.egraph, solution.info.get("enodes", ()))
        for rule, n in self.finished.get(id(out), {}).items():
            counts[rule] = counts.get(rule, 0) + n
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    def cheaper(self, out: TensorGraph) -> bool:
        return self.cost_model.graph_cost(out) < self.cost_model.graph_cost(self.graph) * (1 - 1e-6)

    def rounds(self, calibrator, first: tuple | None = None) -> tuple[TensorGraph, Any, list]:
        """Extract (``first``: the first extraction, already made); with a ``calibrator``, measure
        the kernels the candidate and the input do not share and extract again, up to
        :data:`CALIBRATION_ROUNDS` times. Returns the program, its solution and each round's
        candidate (whose kernels were measured after it was chosen)."""
        candidates: list = []  # each calibration round's extraction, its kernels measured after it
        for r in range(CALIBRATION_ROUNDS + 1):
            out, solution = first if r == 0 and first is not None else self.extract()
            if calibrator is None or not self.cheaper(out):
                return out, solution, candidates  # nothing to calibrate, or no candidate: the input stands
            candidates.append((out, solution))
            if not calibrator.measure([self.graph, out]):
                return out, solution, candidates  # the compared kernels' costs did not change: it stands
        # out of rounds (every round calibrated a candidate): the last extraction's kernels were
        # measured after it was chosen: each round, the borrowed model priced some alternative it had
        # not measured too low (bert-base on a Zen 1: dense, batch_matmul and per-batch dense forms of
        # the linear layers; the fourth candidate measured 1.5x dearer than the first), so the
        # cheapest candidate under the measured times
        costs = [self.cost_model.graph_cost(c[0]) for c in candidates]
        log.debug("calibration out of rounds; the candidates' measured costs: %s", costs)
        out, solution = candidates[costs.index(min(costs))]
        return out, solution, candidates

    def conclude(self, rep: OptimizeReport, out: TensorGraph, solution, candidates: list, calibrator,
                 runtime_decides: bool, min_gain: float, t0: float,
                 rejected: TensorGraph | None = None) -> tuple[TensorGraph, OptimizeReport]:
        """Fill ``rep`` for the extracted ``out`` and decide: ``out`` and the report, or the input
        (unchanged). ``rejected``: a program the runtime measured no faster, never returned."""
        graph, cost_model = self.graph, self.cost_model
        if calibrator is not None and not candidates:  # no candidate: nothing was calibrated
            calibrator.close()
            calibrator = None
        if calibrator is not None:
            rep.info["calibration"] = calibrator.close().to_dict()
            rep.cost_before = cost_model.graph_cost(graph)  # now with the measured kernel times
            if runtime_decides and rejected is None and cost_model.graph_cost(out) >= rep.cost_before * (1 - 1e-6):
                out, solution = candidates[0]  # measured kernels favour no candidate: the runtime will decide
                rep.info["calibration"]["vetoed"] = True
            elif runtime_decides:  # what a result must cost to be kept (below): the alternatives too
                rep.alternatives = [c for c in _alternatives(self.rules_in, candidates, out,
                                                             rep.cost_before / (1 + min_gain) * (1 - 1e-6),
                                                             cost_model)
                                    if rejected is None or not _same_program(c.graph, rejected)]
        rep.extractor, rep.extract_status, rep.optimal = self.extractor.name, solution.status, solution.optimal
        rep.info["extraction_cost"] = solution.cost

        check_equivalent_interface(graph, out)
        rep.rules_in_result = self.rules_in(out, solution)
        rep.cost_after = cost_model.graph_cost(out)
        rep.nodes_after = len(out)
        rep.ops_after = out.op_counts()
        cuts = sum(len(c) for c in fusion_cuts(out).values())
        if cuts:  # kernels TVM would take minutes to compile whole: the backend stops fusion there
            rep.info["fusion_cuts"] = cuts
        rep.total_time = time.perf_counter() - t0
        rep.info["min_gain"] = min_gain
        if rep.info.get("calibration", {}).get("vetoed"):
            rep.changed = True
            rep.reason = ("cheaper under the shipped model, not under this CPU's measured kernels "
                          f"({rep.speedup:.3f}x); the whole programs' runtime decides")
            log.info("relay-eqsat: %s", rep.summary())
            return out, rep
        cheaper = rep.cost_after < rep.cost_before / (1 + min_gain) * (1 - 1e-6)
        if cheaper and rejected is not None and _same_program(out, rejected):
            rep.reason = "the measured kernels choose the program the runtime measured no faster; input kept"
        elif cheaper:
            rep.changed, rep.reason = True, "cheaper program found"
            log.info("relay-eqsat: %s", rep.summary())
            return out, rep
        elif rep.cost_after < rep.cost_before * (1 - 1e-6):
            rep.reason = (f"predicted {rep.speedup:.3f}x, within the cost model's error for this target "
                          f"(a gain over {min_gain:.0%} is required); input kept")
        else:
            rep.reason = "no cheaper program under the cost model; input kept"
        rep.changed, rep.alternatives = False, []
        rep.cost_after = rep.cost_before
        rep.nodes_after, rep.ops_after = rep.nodes_before, rep.ops_before
        rep.rules_in_result = {}
        log.info("relay-eqsat: %s", rep.summary())
        return graph, rep


class Recalibration:
    """The second chance of ``optimize_graph(..., calibrate_after_check=True)``: the runtime measured
    the cost model's pick no faster, so the kernels it and the input do not share are measured on
    this machine (or the cost model's RPC devices) and the same e-graph is extracted again, in
    calibration's rounds. Calling it returns (graph', report) as ``optimize_graph`` does: a program
    other than the rejected one, cheaper than the input under the measured kernels, for the runtime
    to judge, or the input (unchanged) when the measured kernels choose no other.

    Why after and not before: where the whole programs are timed anyway, the model's pick is
    usually kept (ShuffleNet-v2 and SqueezeNet1.1 on a Zen 3 without shipped data: calibration
    measured 98 and 24 kernels in 33 and 14 s and extracted the very same program), and calibrating
    first costs that much on every first run."""

    def __init__(self, choice: _Choice, rep: OptimizeReport, rejected: TensorGraph, solution,
                 time_limit: float, min_gain: float):
        self.choice, self.rep, self.rejected, self.solution = choice, rep, rejected, solution
        self.time_limit, self.min_gain = time_limit, min_gain

    def __call__(self, while_measuring=None) -> tuple[TensorGraph, OptimizeReport]:
        t0 = time.perf_counter()
        choice = self.choice
        rep = replace(self.rep, info=dict(self.rep.info), alternatives=[], recalibrate=None)
        calibrator = Calibrator(choice.cost_model, self.time_limit, progress=choice.progress,
                                differences_only=True, while_measuring=while_measuring)
        out, solution, candidates = choice.rounds(calibrator, first=(self.rejected, self.solution))
        rep.extract_time = self.rep.extract_time + time.perf_counter() - t0
        out, rep = choice.conclude(rep, out, solution, candidates, calibrator, True, self.min_gain,
                                   t0 - self.rep.total_time, rejected=self.rejected)
        rep.info["calibration"]["after_check"] = True
        if rep.changed and rep.cost_after > 0:  # how much cheaper the measured kernels price it than the pick
            rep.info["calibration"]["rejected_over_result"] = choice.cost_model.graph_cost(self.rejected) / rep.cost_after
        return out, rep
