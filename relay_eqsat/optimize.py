"""The optimizer between frontend and backend: TensorGraph in, a cheaper equivalent TensorGraph out.

Pipeline (DESIGN.md): insert the graph into an e-graph, grow it with a
scheduler (TENSAT's sequential saturation or MCTS), extract the cheapest
acyclic program under the cost model, and keep it only if it is cheaper than
the input ("never worse"). Used by the Relay pass, the CLI and the benchmarks.
"""
from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping, Sequence

from .graph import TensorGraph

log = logging.getLogger("relay_eqsat")

SEARCHES = ("tensat", "mcts", "none")


@dataclass
class OptimizeOptions:
    """Every knob of the optimizer (also the pass's and the CLI's options).

    search           "tensat" (all rules per iteration), "mcts" or "none"
    extractor        extractor scoring MCTS rollouts ("greedy-ocf" as in the paper)
    final_extractor  extractor for the result ("ilp-acyc", falls back to OCF greedy on time-out)
    cost             "auto" | "measured" | "learned" | "analytic", or a CostModel
    target           TVM target string the costs are for (None: the host CPU)
    node_limit       e-graph size limit in e-nodes
    iter_limit       TENSAT iterations
    k_multi          iterations in which multi-pattern rules run (TENSAT)
    budget           MCTS iterations per applied rule
    max_sim_steps    MCTS rollout length
    time_limit       seconds for the search; extraction gets ``extract_time_limit``
    seed             MCTS randomness
    rules            rule set name (shipped), a path to a .rules file, or a list of Rule
    cycle_filter     "efficient" | "vanilla" | "none" (TENSAT §5.2)
    """

    search: str = "tensat"
    extractor: str = "greedy-ocf"
    final_extractor: str = "ilp-acyc"
    cost: Any = "auto"
    target: str | None = None
    node_limit: int = 10_000
    iter_limit: int = 15
    k_multi: int = 1
    budget: int = 128
    max_sim_steps: int = 10
    time_limit: float = 60.0
    extract_time_limit: float = 30.0
    seed: int = 0
    rules: Any = "default"
    cycle_filter: str = "efficient"

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | None) -> "OptimizeOptions":
        """Options from a dict; unknown keys raise ValueError naming them."""
        options = dict(options or {})
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - names)
        if unknown:
            raise ValueError(f"unknown optimizer options {unknown}; known: {sorted(names)}")
        opts = cls(**{k: v for k, v in options.items() if v is not None})
        opts.check()
        return opts

    def check(self) -> None:
        if self.search not in SEARCHES:
            raise ValueError(f"search must be one of {SEARCHES}, not {self.search!r}")
        for name in ("node_limit", "budget", "max_sim_steps"):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.time_limit <= 0 or self.extract_time_limit <= 0:
            raise ValueError("time limits must be positive")


@dataclass
class OptimizeReport:
    """What the optimizer did; attached to the pass's result and printed by the CLI."""

    changed: bool = False
    reason: str = ""
    search: str = ""
    stop_reason: str = ""
    iterations: int = 0
    rules_fired: dict[str, int] = field(default_factory=dict)
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

    @property
    def speedup(self) -> float:
        """Predicted speedup (cost before / cost after)."""
        return self.cost_before / self.cost_after if self.cost_after > 0 else 1.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["predicted_speedup"] = self.speedup
        return d

    def summary(self) -> str:
        fired = {k: v for k, v in sorted(self.rules_fired.items(), key=lambda kv: -kv[1]) if v}
        return (f"{'changed' if self.changed else 'unchanged'} ({self.reason}); search {self.search}: "
                f"{self.stop_reason} after {self.iterations} steps, e-graph {self.egraph_nodes} nodes; "
                f"cost {self.cost_before * 1e3:.3f} ms -> {self.cost_after * 1e3:.3f} ms "
                f"({self.speedup:.3f}x predicted) by {self.extractor} [{self.extract_status}]; "
                f"{self.total_time:.2f}s; rules {fired}")


def resolve_rules(rules: Any) -> list:
    """A rule list from a shipped set name, a .rules path, or a list of rules."""
    from . import rules as rules_mod

    if isinstance(rules, (list, tuple)):
        return list(rules)
    if isinstance(rules, str):
        if rules.endswith(".rules") and ("/" in rules or "\\" in rules):
            return rules_mod.load_rule_file(rules)
        return rules_mod.load_rules(rules)
    raise ValueError(f"rules must be a rule-set name, a .rules path or a list of rules, not {rules!r}")


def resolve_cost(cost: Any, target: str | None = None):
    """A CostModel from a kind name, or the model itself."""
    from .cost import CostModel, make_cost_model

    if isinstance(cost, CostModel):
        return cost
    if isinstance(cost, str):
        return make_cost_model(cost, target=target)
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


def optimize_graph(graph: TensorGraph, options: OptimizeOptions | Mapping[str, Any] | None = None,
                   cost_model=None, rules: Sequence | None = None) -> tuple[TensorGraph, OptimizeReport]:
    """Optimize ``graph``; returns (graph', report). graph' is ``graph`` itself
    when nothing cheaper was found (never worse under the cost model)."""
    from .egraph import EGraph
    from .extract import get_extractor
    from .search.base import Limits
    from .search.mcts import MCTSOptions, MCTSScheduler
    from .search.tensat import TensatScheduler

    t0 = time.perf_counter()
    opts = options if isinstance(options, OptimizeOptions) else OptimizeOptions.from_mapping(options)
    cost_model = cost_model if cost_model is not None else resolve_cost(opts.cost, opts.target)
    rules = resolve_rules(rules if rules is not None else opts.rules)
    rep = OptimizeReport(search=opts.search)
    graph = graph.compact()
    rep.nodes_before = len(graph)
    rep.ops_before = graph.op_counts()
    rep.cost_before = cost_model.graph_cost(graph)

    egraph = EGraph()
    root = egraph.add_graph(graph)
    limits = Limits(node_limit=opts.node_limit, iter_limit=opts.iter_limit, time_limit=opts.time_limit,
                    k_multi=opts.k_multi, cycle_filter=opts.cycle_filter)
    ts = time.perf_counter()
    if opts.search == "tensat":
        srep = TensatScheduler().run(egraph, rules, limits)
    elif opts.search == "mcts":
        mopts = MCTSOptions(budget=opts.budget, max_sim_steps=opts.max_sim_steps, node_limit=opts.node_limit,
                            time_limit=opts.time_limit, seed=opts.seed)
        srep = MCTSScheduler(mopts, extractor=get_extractor(opts.extractor), root=root).run(
            egraph, rules, limits, cost_model.node_cost)
        rep.info["mcts"] = {k: v for k, v in srep.info.items() if k != "history"}
    else:
        srep = None
    rep.search_time = time.perf_counter() - ts
    if srep is not None:
        rep.stop_reason, rep.iterations = srep.stop_reason, srep.iterations
        rep.rules_fired = dict(srep.fired)
        rep.blacklisted = srep.blacklisted
    else:
        rep.stop_reason = "no search"
    rep.egraph_nodes, rep.egraph_classes = egraph.num_nodes, egraph.num_classes

    te = time.perf_counter()
    problem = egraph.to_problem(cost_model.node_cost, [root])
    extractor = get_extractor(opts.final_extractor)
    solution = extractor.solve(problem, time_limit=opts.extract_time_limit)
    out = egraph.build_graph(solution.choice, problem.roots[0], problem).compact()
    rep.extract_time = time.perf_counter() - te
    rep.extractor, rep.extract_status, rep.optimal = extractor.name, solution.status, solution.optimal
    rep.info["extraction_cost"] = solution.cost

    check_equivalent_interface(graph, out)
    rep.cost_after = cost_model.graph_cost(out)
    rep.nodes_after = len(out)
    rep.ops_after = out.op_counts()
    rep.total_time = time.perf_counter() - t0
    if rep.cost_after < rep.cost_before * (1 - 1e-6):
        rep.changed, rep.reason = True, "cheaper program found"
        log.info("relay-eqsat: %s", rep.summary())
        return out, rep
    rep.changed = False
    rep.reason = "no cheaper program under the cost model; input kept"
    rep.cost_after = rep.cost_before
    rep.nodes_after, rep.ops_after = rep.nodes_before, rep.ops_before
    log.info("relay-eqsat: %s", rep.summary())
    return graph, rep
