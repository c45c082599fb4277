"""Differential fuzzing: random well-typed TensorGraphs, and the check that the pass keeps their meaning.

A graph is built from a :class:`Recipe`: a seed (for the constants' values) and a list of
steps, each a *motif* name and a tuple of small non-negative integers the motif reads as its
choices (an input's rank, a branch count, a weight's width, which earlier value to build
on...). The motifs (:mod:`relay_eqsat.testing.motifs`) are shaped to meet the rule set's
left-hand sides: parallel dense/matmul/batch_matmul/conv2d branches over one input (merges,
bias/batch_norm merges, their concatenations, weight factoring), chains of element-wise ops
and their algebra, concatenate/split and the ops that move through them, transposes and
reshapes (pairs, identities, heads over a split), channel slices, constant weights, and the
sizes the padding rules want (rows 9..13, channels 17..20, a 37- or 41-wide convolution
output). Choice 0 is always the simplest option, and a value a motif needs but the graph
lacks is a fresh input, so every recipe builds a well-typed graph and hypothesis shrinks a
failing one by dropping steps and lowering integers (:func:`recipes`); :func:`draw_recipes`
draws the same recipes from a numpy seed for long runs (``bench/fuzz.py``).

Values are float32 and stay finite: an op whose domain is not all reals gets a safe operand
(``sqrt(x * x + 1)``, ``exp(clip(x, -4, 4))``), weights are scaled by their fan-in. Every
``OpDef`` is drawn but those in ``EXCLUDED_OPS``; ``out_dtype`` and other dtypes are not drawn.

:func:`check_pass` runs the whole pass (``optimize_graph``) with one scheduler, final
extractor, target and cost model, and compares the result with the input: same interface,
a valid acyclic graph, and the numpy reference's outputs on seeded random inputs within a
tolerance scaled to the magnitudes the input graph computes. :class:`JitterCost` scales a
cost model's node costs by fixed pseudo-random factors, so extraction also picks rewritten
forms the real model would not (more of what the rules produce gets compared).
"""
from __future__ import annotations

import time
import traceback
import zlib
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from relay_eqsat import ops
from relay_eqsat.extract import EXTRACTORS
from .builder import Choices, GraphBuilder
from .motifs import CHOICE_RANGE, CHOICES, EXCLUDED_OPS, MOTIF_FUNCS, MOTIF_WEIGHTS, MOTIFS
from relay_eqsat.graph import TensorGraph
from relay_eqsat.pipeline import optimize_graph, resolve_cost
from relay_eqsat.search import SCHEDULERS

__all__ = ["MOTIFS", "EXCLUDED_OPS", "Recipe", "build_graph", "random_recipe", "draw_recipes", "recipes",
           "PASS_OPTIONS", "CPU_TARGET", "GPU_TARGET", "RTOL", "searches", "extractors", "JitterCost",
           "Reference", "reference", "compare", "CheckResult", "check_interface", "check_pass"]


@dataclass(frozen=True)
class Recipe:
    """The seed of the constants and the steps (motif, choices) a graph is built from."""

    steps: tuple
    seed: int = 0

    def __post_init__(self):
        steps = tuple((str(m), tuple(int(v) for v in c)) for m, c in self.steps)
        for m, c in steps:
            if m not in MOTIFS:
                raise ValueError(f"unknown motif {m!r}; known: {', '.join(MOTIFS)}")
            if any(v < 0 for v in c):
                raise ValueError(f"motif {m}: choices must be >= 0, got {list(c)}")
        object.__setattr__(self, "steps", steps)

    def build(self) -> TensorGraph:
        return build_graph(self)

    def to_dict(self) -> dict:
        """JSON-able form (a reproducer): ``Recipe.from_dict(r.to_dict()) == r``."""
        return {"seed": self.seed, "steps": [[m, list(c)] for m, c in self.steps]}

    @classmethod
    def from_dict(cls, d: dict) -> "Recipe":
        return cls(tuple((m, tuple(c)) for m, c in d["steps"]), int(d.get("seed", 0)))


def build_graph(recipe: Recipe) -> TensorGraph:
    """The well-typed TensorGraph of ``recipe`` (its output: the one value no step used, or a
    tuple of them)."""
    b = GraphBuilder(recipe.seed)
    for motif, choices in recipe.steps:
        MOTIF_FUNCS[motif](b, Choices(choices))
    if not b.values:
        b.var((2, 3))
    return b.finish()


# -- drawing recipes ------------------------------------------------------------------------

def random_recipe(rng: np.random.Generator, max_steps: int = 6) -> Recipe:
    """A recipe of 1..``max_steps`` steps drawn with numpy (motifs by ``MOTIF_WEIGHTS``)."""
    weights = np.array([MOTIF_WEIGHTS[m] for m in MOTIFS], dtype=float)
    n = int(rng.integers(1, max_steps + 1))
    motifs = rng.choice(len(MOTIFS), size=n, p=weights / weights.sum())
    steps = tuple((MOTIFS[int(m)], tuple(int(v) for v in rng.integers(0, CHOICE_RANGE, size=CHOICES)))
                  for m in motifs)
    return Recipe(steps, int(rng.integers(0, 1 << 16)))


def draw_recipes(n: int, seed: int = 0, max_steps: int = 6) -> list[Recipe]:
    """``n`` recipes from one seed (the same seed gives the same recipes)."""
    rng = np.random.default_rng(seed)
    return [random_recipe(rng, max_steps) for _ in range(n)]


def recipes(max_steps: int = 6):
    """A hypothesis strategy of recipes; shrinking drops steps, moves motifs toward ``MOTIFS[0]``
    and lowers every choice toward 0 (the simplest option)."""
    from hypothesis import strategies as st

    step = st.tuples(st.sampled_from(MOTIFS),
                     st.lists(st.integers(0, CHOICE_RANGE - 1), min_size=CHOICES, max_size=CHOICES).map(tuple))
    return st.builds(Recipe, st.lists(step, min_size=1, max_size=max_steps).map(tuple),
                     st.integers(0, (1 << 16) - 1))


# -- the differential check ------------------------------------------------------------------

#: the pass's options under fuzzing: small limits, the analytic cost (TVM-free, the same on every host)
PASS_OPTIONS = {"cost": "analytic", "node_limit": 800, "iter_limit": 6, "time_limit": 10.0,
                "extract_time_limit": 10.0, "budget": 8, "max_sim_steps": 4, "seed": 0}
#: a CPU target (the rules marked ``avoid cpu`` are left out) and a GPU one (those marked ``avoid gpu``)
CPU_TARGET = "llvm -mcpu=znver4"
GPU_TARGET = "cuda -arch=sm_80"
#: outputs may differ by this fraction of the largest magnitude their computation goes through
RTOL = 1e-4


def searches() -> tuple[str, ...]:
    """Every registered scheduler (``relay_eqsat.search.SCHEDULERS``), "none" included."""
    return tuple(SCHEDULERS)


def extractors() -> tuple[str, ...]:
    """Every registered extractor (``relay_eqsat.extract.EXTRACTORS``)."""
    return tuple(EXTRACTORS)


class JitterCost:
    """``base``'s node costs, each scaled by a factor in [1/spread, spread] fixed by the node's op,
    attributes and types (and ``seed``): a cost model under which other extractions win."""

    def __init__(self, base, seed: int = 0, spread: float = 4.0):
        self.base, self.seed, self.spread = base, int(seed), float(spread)

    def factor(self, op: str, attrs, input_types, out_type) -> float:
        key = repr((self.seed, op, attrs, tuple(input_types), out_type)).encode()
        return self.spread ** (2.0 * zlib.crc32(key) / 0xFFFFFFFF - 1.0)

    def node_cost(self, op: str, attrs, input_types: Sequence, out_type, all_inputs_constant: bool = False) -> float:
        return (self.base.node_cost(op, attrs, input_types, out_type, all_inputs_constant)
                * self.factor(op, attrs, input_types, out_type))

    __call__ = node_cost

    def graph_cost(self, graph: TensorGraph) -> float:
        const = graph.is_constant()
        total = 0.0
        for i in graph.reachable():
            n = graph[i]
            total += self.node_cost(n.op, n.attrs, [graph[j].type for j in n.inputs], n.type,
                                    bool(n.inputs) and all(const[j] for j in n.inputs))
        return total

    def __repr__(self) -> str:
        return f"JitterCost({self.base!r}, seed={self.seed}, spread={self.spread:g})"


@dataclass
class Reference:
    """A graph's outputs on ``inputs`` (numpy reference semantics, as a list) and, per output,
    the largest finite magnitude among the values it is computed from (its tolerance scale)."""

    inputs: dict
    outputs: list
    scales: list

    @property
    def finite(self) -> bool:
        return all(np.isfinite(o).all() for o in self.outputs)


def reference(graph: TensorGraph, seed: int = 0) -> Reference:
    """Evaluate every node of ``graph`` on seeded random inputs (``TensorGraph.random_inputs``)."""
    inputs = graph.random_inputs(seed)
    values: dict[int, Any] = {}
    peak: dict[int, float] = {}
    for i in graph.reachable():
        n = graph[i]
        if n.op == "var":
            v = np.asarray(inputs[n.attrs["name"]], dtype=n.type.dtype)
        elif n.op == "constant":
            v = graph.constants[n.attrs["name"]]
        else:
            with np.errstate(all="ignore"):
                v = ops.evaluate(n.op, n.attrs, [values[j] for j in n.inputs])
        values[i] = v
        mags = [float(np.abs(a[np.isfinite(a)]).max(initial=0.0)) for a in (v if isinstance(v, tuple) else (v,))]
        peak[i] = max([peak[j] for j in n.inputs] + mags)
    out = graph[graph.output]
    if out.op == "tuple":
        return Reference(inputs, [np.asarray(values[j]) for j in out.inputs], [peak[j] for j in out.inputs])
    value = values[graph.output]
    fields = list(value) if isinstance(value, tuple) else [value]
    return Reference(inputs, [np.asarray(f) for f in fields], [peak[graph.output]] * len(fields))


def _flat(value) -> list:
    return [np.asarray(v) for v in (value if isinstance(value, tuple) else (value,))]


def compare(ref: Reference, got, rtol: float = RTOL) -> tuple[float, str | None]:
    """(largest ``|got - ref| / max(1, scale)`` over the outputs, why they differ or None).

    ``got``: a graph's output value or a list of output arrays. They differ when an output has
    another shape or dtype, inf/nan where the reference has none (or the reverse), or an error
    over ``rtol``."""
    got = got if isinstance(got, list) else _flat(got)
    if len(got) != len(ref.outputs):
        return float("inf"), f"{len(got)} outputs, the reference has {len(ref.outputs)}"
    worst = 0.0
    for k, (r, g, scale) in enumerate(zip(ref.outputs, got, ref.scales)):
        if r.shape != g.shape or r.dtype != g.dtype:
            return float("inf"), f"output {k}: {g.dtype}{list(g.shape)}, the reference {r.dtype}{list(r.shape)}"
        rf, gf = r.astype(np.float64), g.astype(np.float64)
        if not np.array_equal(np.isfinite(rf), np.isfinite(gf)):
            return float("inf"), f"output {k}: inf/nan where the reference has none, or the reverse"
        both = np.isfinite(rf)
        if both.any():
            err = float(np.abs(rf[both] - gf[both]).max()) / max(1.0, scale)
            worst = max(worst, err)
            if err > rtol:
                return worst, f"output {k}: differs by {err:.3g} of its scale {scale:.3g} (tolerance {rtol:g})"
    return worst, None


@dataclass
class CheckResult:
    """One run of the pass on one graph: ``status`` is "ok", "miscompile" (the result computes
    something else, or changed the interface) or "crash" (the pass raised)."""

    search: str
    extractor: str
    target: str
    cost: str
    options: dict = field(default_factory=dict)  # what the run changed in PASS_OPTIONS
    status: str = "ok"
    message: str = ""
    changed: bool = False
    error: float = 0.0
    seconds: float = 0.0
    rules_fired: dict = field(default_factory=dict)
    ops_after: dict = field(default_factory=dict)
    stop_reason: str = ""
    output: TensorGraph | None = None  # the pass's result (None after a crash)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def describe(self) -> str:
        return (f"{self.status}: search={self.search} extractor={self.extractor} target={self.target!r} "
                f"cost={self.cost} options={self.options}: {self.message}")

    def to_dict(self) -> dict:
        d = {k: v for k, v in self.__dict__.items() if k != "output"}
        if self.status != "ok" and self.output is not None:
            d["output_graph"] = repr(self.output)
        return d


def check_interface(before: TensorGraph, after: TensorGraph) -> str | None:
    """Why ``after`` cannot stand for ``before`` (None: it can): ``after`` must be a valid graph
    (every node's inputs earlier, so acyclic, and every stored type re-inferred) with the same
    output type and no input ``before`` lacks or retypes."""
    try:
        after.validate()
    except ValueError as e:
        return f"invalid result graph: {e}"
    if after[after.output].type != before[before.output].type:
        return f"output type {after[after.output].type}, the input's {before[before.output].type}"
    tin = before.input_types()
    for name, t in after.input_types().items():
        if tin.get(name) != t:
            return f"input {name!r} has type {t}, the input graph's {tin.get(name)}"
    return None


def check_pass(graph: TensorGraph, search: str, extractor: str, target: str = CPU_TARGET,
               jitter: int | None = None, options: Mapping[str, Any] | None = None,
               ref: Reference | None = None, rtol: float = RTOL) -> CheckResult:
    """Run ``optimize_graph`` on ``graph`` (``PASS_OPTIONS`` updated by ``options``; the analytic
    cost, scaled by ``JitterCost(seed=jitter)`` when ``jitter`` is not None; any predicted gain
    accepted) and check its result against the input (see the module docstring)."""
    opts = {**PASS_OPTIONS, **dict(options or {}), "search": search, "final_extractor": extractor,
            "target": target}
    cost = resolve_cost(opts["cost"], target)
    if jitter is not None:
        cost = JitterCost(cost, jitter)
    res = CheckResult(search, extractor, target, "analytic" if jitter is None else f"jitter:{jitter}",
                      dict(options or {}))
    t0 = time.perf_counter()
    try:
        out, rep = optimize_graph(graph, opts, cost_model=cost, min_gain=0.0)
    except Exception as e:  # the pass must never raise on a well-typed graph
        res.status, res.seconds = "crash", time.perf_counter() - t0
        res.message = f"{type(e).__name__}: {e}\n" + "".join(traceback.format_exception(e)[-6:])
        return res
    res.seconds = time.perf_counter() - t0
    res.output, res.changed, res.stop_reason = out, rep.changed, rep.stop_reason
    res.rules_fired = {k: v for k, v in rep.rules_fired.items() if v}
    res.ops_after = out.op_counts()
    why = check_interface(graph, out)
    if why is None:
        ref = ref if ref is not None else reference(graph)
        with np.errstate(all="ignore"):
            got = out.evaluate(ref.inputs)
        res.error, why = compare(ref, got, rtol)
    if why is not None:
        res.status, res.message = "miscompile", why
    return res
