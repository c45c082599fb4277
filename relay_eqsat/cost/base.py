"""The cost model the extractors minimize: per-node seconds that track TVM's build.

``CostModel.op_cost(op, attrs, input_types, out_type, all_inputs_constant)``
is a node's cost in seconds; ``node_cost`` is the same callable, in the
signature ``extract.egraph_problem(egraph, node_cost, roots)`` expects; and
``graph_cost(graph)`` is the sum over a graph's live nodes, the quantity every
extractor minimizes.

A node's cost starts from its *kernel time*: the time of the op built and run
alone, from the cache (measured), the learned model (predicted) or the
roofline (analytic), as the model's ``kind`` says:

- ``auto``: cache hit, else prediction, else analytic
- ``measured``: cache hit, else measure now (and cache), else as ``auto``
- ``learned``: prediction (an error at construction if no model exists)
- ``analytic``: roofline only

It then follows what TVM's build does with the node (``FusionRule``), by the op's
class in the operator table (``OpDef.fusion``, ``conv`` and ``streamed_weights``):

- graph-level ops (var, constant, tuple, tuple_get_item) cost 0;
- a node whose inputs are all constant costs 0: ``FoldConstant`` computes it
  at build time;
- an opaque node costs the memory traffic of its inputs and output (analytic):
  it never changes, so only consistency matters;
- *anchors* (conv2d, dense, matmuls, pools, reductions, softmax, layer_norm):
  ``anchor × kernel``, convolutions ``conv × kernel`` (timed alone, a
  convolution converts its input and output to and from TVM's blocked NCHWc
  layout; in a model the layout stays blocked between convolutions, so alone
  overstates them, while dense layers are understated);
- element-wise and broadcast ops (with bias_add and batch_norm, which TVM
  turns into a scale-and-shift) fuse into their producer's kernel, so they do
  not pay a memory round trip: ``fused × kernel + fused_read × kernel ×
  extra_share``, where ``extra_share`` is the share of the op's traffic that
  comes from operands other than its largest one (a residual add still reads
  its second tensor; a relu or a bias add reads next to nothing new), plus
  ``epilogue ×`` what the op computes inside its host's kernel, learned from
  fused groups measured whole (`relay_eqsat.cost.groups`; 0 for a model
  without that fit): TVM computes a fused epilogue element by element, so a
  fused ``tanh``, ``sigmoid`` or ``erf`` costs several ns per value, a relu
  or an add nothing measurable;
- but in a whole program (``graph_cost``) an element-wise op fuses only where
  ``FuseOps`` can put it into a producer's kernel (`standalone_elementwise`):
  one of its operands comes from an op whose only consumer it is and which
  can take an epilogue (a convolution, dense, pool, an injective or another
  element-wise op; not a reduction, a graph input, a piece of a split of a
  convolution's output). Else it
  runs as a kernel of its own: ``standalone × kernel`` plus a kernel start.
  A merge of sibling layers makes exactly this happen: the merged output is
  split, and the bias and activation each branch fused before now run
  behind the split;
- injective ops (transpose, reshape, concatenate, split, strided_slice, pad)
  often fuse with their neighbours but not always: ``injective × kernel``;
- ops with a weight operand (dense and conv2d: operand 1) also pay
  ``weights × weight bytes × seconds per streamed byte``. A kernel
  timed alone runs with its weights in cache, but a whole model streams every
  weight from memory once per inference (NasRNN's 80 dense layers at batch 1
  read 84 MB: 11 µs each alone, at the 95 GB/s a matrix-vector product reads
  a cached weight at on a Zen 4, about 43 µs in the model, at the 24 GB/s a
  chain of distinct 1-MiB weights reads at). The price of a byte is measured
  with the learned model (`relay_eqsat.cost.streams`: stream probes by weight
  size, else one figure from the memory and cache rates of matrix-vector
  products); a model without it pays ``weight bytes / roofline bandwidth``
  instead. Merging
  layers concatenates their weights, so at one price a byte the term would not
  reward merges; priced by size it does a little (NasRNN's merged gates: 6%
  less, which they do not run faster: a known limitation in the README), and
  enlarging a kernel (1×1 to 3×3) pays for the zeros it reads;
- every node that starts a kernel of its own (anchors, injective and opaque
  ops; element-wise ones fuse) pays ``launch × the roofline's launch
  overhead``: the graph executor's per-kernel cost, which dominates models of
  many tiny ops (small NasNet-A) and which a kernel timed alone in a loop
  hardly shows.

The extractors need a sum of per-node costs, and a node's cost cannot depend
on which producer the extractor picks, so for them (``node_cost``) fusion is
an expected discount per op class rather than a decision per edge;
``graph_cost``, which judges whole programs (the pass's decision, its
calibration), decides it per edge. Every weight is a coefficient of a
linear model of whole-graph time, so ``fit_fusion`` fits them (non-negative
least squares on relative error) against measured whole-graph runtimes.
"""
from __future__ import annotations

import functools
import logging
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

from .. import ops
from ..graph import Attrs, TensorGraph, TensorType, Type
from .analytic import AnalyticModel, type_bytes
from .cache import CostCache, ignore_shipped, normalize_target, shipped_table, tuned_device
from .fusion import epilogue_seconds, extra_read_share, fusion_class, is_conv, standalone_elementwise
from .instance import OpInstance
from .learned import LearnedCostModel, load_model
from .measure import BackendUnavailable, resolve_target, select_backend
from .pool import MeasurePool
from .streams import StreamPrice

log = logging.getLogger(__name__)

KINDS = ("auto", "measured", "learned", "analytic")

#: relative whole-graph error assumed where no calibrated figure exists. The roofline alone was
#: measured 71.7% off on the zoo (README, cost_accuracy); a learned model trained on another CPU
#: predicted 38-67% below the measured whole-model times on znver3 (stop 10's bench run).
ANALYTIC_ERROR = 0.72
FOREIGN_ERROR = 0.5



@dataclass(frozen=True)
class FusionRule:
    """Weights of the node-cost terms (see the module docstring)."""

    anchor: float = 1.0
    fused: float = 0.15
    fused_read: float = 1.0
    injective: float = 0.5
    opaque: float = 1.0
    weights: float = 0.0
    launch: float = 0.0
    conv: float = 1.0
    standalone: float = 1.0
    epilogue: float = 1.0

    TERMS = ("anchor", "fused", "fused_read", "injective", "opaque", "weights", "launch", "conv", "standalone",
             "epilogue")

    def vector(self) -> np.ndarray:
        return np.array([getattr(self, t) for t in self.TERMS])


@dataclass
class FitReport:
    """What ``fit_fusion`` found: the rule and the whole-graph errors before and after."""

    rule: FusionRule
    before_mean_ape: float
    after_mean_ape: float
    after_max_ape: float
    n_graphs: int
    #: leave-one-out: each graph predicted by the weights fitted on the other families' graphs
    #: (None with fewer than 3 families): the error to expect on a model not fitted on
    loo_mean_ape: float | None = None
    loo_max_ape: float | None = None
    #: the prior's strength the fit used and the weights it fitted (chosen by that leave-one-out
    #: where not given)
    prior_strength: float | None = None
    fitted: tuple[str, ...] = ()

    def __str__(self) -> str:
        w = ", ".join(f"{k}={v:.3g}" for k, v in asdict(self.rule).items())
        loo = ("" if self.loo_mean_ape is None else
               f"; leave-one-out {100 * self.loo_mean_ape:.1f}% (max {100 * self.loo_max_ape:.1f}%)")
        prior = "" if self.prior_strength is None else f", prior {self.prior_strength:g}"
        if self.fitted:
            prior += f", fitted {'/'.join(self.fitted)}"
        return (f"fusion rule fit on {self.n_graphs} graphs{prior}: {w}; whole-graph mean abs error "
                f"{100 * self.before_mean_ape:.1f}% -> {100 * self.after_mean_ape:.1f}% "
                f"(max {100 * self.after_max_ape:.1f}%) in sample{loo}")


class CostModel:
    """Per-node and whole-graph costs in seconds for one target (on one device)."""

    def __init__(self, kind: str = "auto", target=None, backend: str | None = None,
                 cache: CostCache | str | None = None, learned=None, analytic: AnalyticModel | None = None,
                 fusion: FusionRule | None = None, measure_config=None, device: str = "",
                 remote=None, jobs: int | None = None, records=None):
        """``learned``: a LearnedCostModel, a model file path, None (find one) or False (none).
        ``cache``: a CostCache or a database path (None: the default database).
        ``fusion``: the FusionRule; None: the one fitted with the learned model, else defaults.
        ``device``: the device the costs are of (``''``: this machine; another, as the cache keys
        it, reads only that device's measurements and model, never the shipped data).
        ``remote`` (an RPC tracker and key) and ``jobs`` (parallel measurements, None: default):
        where and how wide measurements are taken, kept for the measuring code.
        ``records``: the tuning records the priced programs are built under (anything with the
        log's ``path`` and ``digest``): a kernel measured under them is priced at that time (the
        cache's rows under `tuned_device`), over its untuned one, and counts as measured
        (:meth:`is_measured`) only then; kernels are measured under them."""
        if kind not in KINDS:
            raise ValueError(f"unknown cost model kind {kind!r} (one of {', '.join(KINDS)})")
        self.kind = kind
        self.fusion = fusion or FusionRule()
        self.measure_config = measure_config
        self.device = str(device or "")
        self.remote = remote
        self.jobs = jobs
        self.records = records
        self.tuning = records.digest if records is not None else ""
        self._tuned: set[tuple] = set()  # instance keys measured under the records
        self.cache: CostCache | None = None
        self.learned: LearnedCostModel | None = None
        self._measurer = None
        if kind == "analytic":
            self.target = str(target) if target is not None else None
            self.backend = backend
        else:
            self.cache = cache if isinstance(cache, CostCache) else CostCache(cache)
            self.target = resolve_target(target, self.cache)
            if backend is None:
                try:
                    backend = select_backend(self.target)
                except BackendUnavailable:
                    if kind == "measured":
                        raise
                    backend = None  # read cached rows of any backend of this target
            self.backend = backend
            if isinstance(learned, LearnedCostModel):
                self.learned = learned
            elif learned is not None and learned is not False:
                self.learned = LearnedCostModel.load(learned)
            elif learned is None:
                self.learned = load_model(self.target, self.backend, self.device)
            if kind == "learned" and self.learned is None:
                on = f" on device {self.device!r}" if self.device else ""
                raise ValueError(f"no learned cost model for target {self.target!r}{on} (backend "
                                 f"{self.backend}); run `relay-eqsat measure --target ...` to train one")
        if fusion is None and self.learned is not None and self.learned.meta.get("fusion"):
            self.fusion = FusionRule(**self.learned.meta["fusion"])  # fitted with the model
        #: seconds per element a fused element-wise op adds to its host's kernel, per op (learned
        #: from measured fused groups with the model; empty: the discounted kernel time instead)
        self.epilogue: dict[str, float] = dict(self.learned.meta.get("epilogue") or {}) \
            if self.learned is not None and kind != "analytic" else {}
        #: seconds per weight byte a whole model adds to a kernel timed alone, by weight size: the
        #: byte streamed from memory instead of read from cache (`relay_eqsat.cost.streams`, measured
        #: with the model); None: the older term, weight bytes at the roofline's bandwidth
        rates = self.learned.meta.get("weight_rates") if self.learned is not None and kind != "analytic" else None
        self.weight_stream: StreamPrice | None = StreamPrice(rates) if rates else None
        if self.foreign_model and kind in ("auto", "learned"):
            _warn_foreign(_on(self.learned.meta.get("target"), self.learned.meta.get("device", "")),
                          _on(self.target, self.device))
        self.analytic = analytic or AnalyticModel.for_target(self.target)
        self.sources: Counter = Counter()  # where kernel times came from
        self._kernel: dict[tuple, float] = {}
        self._table: dict[tuple, float] | None = None

    # -- kernel times ---------------------------------------------------------------
    def _cached(self, inst: OpInstance) -> float | None:
        if self.cache is None or self.kind == "learned":
            return None
        return self._lookup_table().get(inst.key())

    def _lookup_table(self) -> dict[tuple, float]:
        if self._table is None:
            # the user's own measurements over those shipped for this very CPU (this machine's kind:
            # another device has its own measurements only)
            self._table = {**(shipped_table(self.target, self.backend) if not self.device else {}),
                           **(self.cache.lookup_table(self.target, self.backend, device=self.device)
                              if self.cache else {})}
            if self.tuning and self.cache:  # the kernels built under the records, over their untuned times
                tuned = self.cache.lookup_table(self.target, self.backend,
                                                device=tuned_device(self.device, self.tuning))
                self._table.update(tuned)
                self._tuned.update(tuned)
        return self._table

    def _measure(self, inst: OpInstance) -> float | None:
        if self._measurer is None:  # one worker: here, or a device of the RPC tracker
            self._measurer = MeasurePool(self.target, self.backend, self.measure_config, self.cache, jobs=1,
                                         remote=self.remote, device=self.device or None, records=self.records)
        (res,) = self._measurer.measure_many([inst], progress=False) or [None]
        if res is not None and res.ok:
            self.add_measurements({inst.key(): res.seconds})
            return res.seconds
        return None

    def kernel_cost(self, op: str, attrs: Attrs, input_types: Sequence[Type], out_type: Type) -> float:
        """Seconds of ``op`` built and run alone (no fusion, no folding)."""
        key = (op, attrs, tuple(input_types), out_type)
        t = self._kernel.get(key)
        if t is not None:
            return t
        t, source = None, None
        measurable = all(isinstance(x, TensorType) for x in input_types)
        if measurable and self.kind != "analytic":
            inst = OpInstance(op, attrs, tuple(input_types), out_type)
            if self.kind != "learned":
                t = self._cached(inst)
                source = "cache"
            if t is None and self.kind == "measured":
                t = self._measure(inst)
                source = "measured"
            parts = self._parts(op, attrs, input_types, out_type) if t is None else []
            if parts:
                t = sum(count * self.kernel_cost(*part) for count, *part in parts)
                source = "kernels"
            if t is None and self.learned is not None:
                t = self.learned.predict_one(op, attrs, input_types, out_type, self.target)
                source = "learned"
        if t is None:
            t = self.analytic.kernel_cost(op, attrs, input_types, out_type)
            source = "analytic"
        self.sources[source] += 1
        self._kernel[key] = t
        return t

    @staticmethod
    def _parts(op: str, attrs: Attrs, input_types: Sequence[Type], out_type: Type) -> list[tuple]:
        """[(count, op, attrs, input types, output type)] of the kernels TVM runs for an op
        written as several (``OpDef.kernels``); [] for an op that is one kernel."""
        d = ops.OPS.get(op)
        if d is None or d.kernels is None:
            return []
        return [(count, o, ops.normalize_attrs(o, a, list(ins)), tuple(ins), out)
                for count, o, a, ins, out in d.kernels(ops.OpAttrs(d, attrs), input_types, out_type)]

    def prefetch(self, instances: Sequence[OpInstance]) -> None:
        """Fill kernel times for many instances at once (one batched prediction); an op written
        as several kernels has theirs prefetched."""
        kernels = []
        for i in instances:
            parts = self._parts(i.op, i.attrs, i.input_types, i.out_type)
            kernels += [OpInstance(o, a, ins, out) for _, o, a, ins, out in parts] if parts else [i]
        instances = kernels
        todo = [i for i in instances if (i.op, i.attrs, i.input_types, i.out_type) not in self._kernel]
        if self.kind in ("auto", "measured"):
            todo = [i for i in todo if self._cached(i) is None]
        if self.kind == "measured" or self.learned is None or not todo:
            return
        for inst, t in zip(todo, self.learned.predict(todo, self.target)):
            self._kernel[(inst.op, inst.attrs, inst.input_types, inst.out_type)] = float(t)
            self.sources["learned"] += 1

    # -- node and graph costs ------------------------------------------------------------
    def cost_terms(self, op: str, attrs: Attrs, input_types: Sequence[Type], out_type: Type,
                   all_inputs_constant: bool = False, standalone: bool = False) -> np.ndarray:
        """The node's unweighted terms, in ``FusionRule.TERMS`` order (cost = terms · weights).
        ``standalone``: an element-wise node that runs as a kernel of its own (not fused)."""
        terms = np.zeros(len(FusionRule.TERMS))
        cls = fusion_class(op)
        if cls == "free" or (all_inputs_constant and cls != "opaque" and len(input_types) > 0):
            return terms
        standalone = standalone and cls == "fused"
        if cls != "fused" or standalone:
            terms[6] = self.analytic.launch_overhead
        if cls == "opaque":
            nbytes = sum(type_bytes(t) for t in input_types) + type_bytes(out_type)
            terms[4] = self.analytic.roofline(0, nbytes)
            return terms
        k = self.kernel_cost(op, attrs, input_types, out_type)
        terms[5] = self._weight_traffic(op, input_types)
        if cls == "anchor":
            terms[7 if is_conv(op) else 0] = k
        elif standalone:
            terms[8] = k
        elif cls == "fused":
            terms[1] = k
            terms[2] = k * extra_read_share(input_types, out_type)
            terms[9] = self._epilogue(op, input_types, out_type)
        else:
            terms[3] = k
        return terms

    def op_cost(self, op: str, attrs: Attrs, input_types: Sequence[Type], out_type: Type,
                all_inputs_constant: bool = False, standalone: bool = False) -> float:
        """Seconds this node adds to the graph, fusion and constant folding included
        (``standalone``: an element-wise node known to run as a kernel of its own)."""
        cls = fusion_class(op)
        if cls == "free" or (all_inputs_constant and cls != "opaque" and len(input_types) > 0):
            return 0.0
        f = self.fusion
        standalone = standalone and cls == "fused"
        launch = f.launch * self.analytic.launch_overhead if cls != "fused" or standalone else 0.0
        if cls == "opaque":
            nbytes = sum(type_bytes(t) for t in input_types) + type_bytes(out_type)
            return f.opaque * self.analytic.roofline(0, nbytes) + launch
        k = self.kernel_cost(op, attrs, input_types, out_type)
        w = (f.weights * self._weight_traffic(op, input_types) if f.weights else 0.0) + launch
        if cls == "anchor":
            return (f.conv if is_conv(op) else f.anchor) * k + w
        if standalone:
            return f.standalone * k + w
        if cls == "fused":
            return (k * (f.fused + f.fused_read * extra_read_share(input_types, out_type))
                    + f.epilogue * self._epilogue(op, input_types, out_type) + w)
        return f.injective * k + w

    def _epilogue(self, op: str, input_types: Sequence[Type], out_type: Type) -> float:
        """Seconds a fused element-wise op computes inside its host's kernel, learned from
        measured fused groups (`relay_eqsat.cost.groups`); 0 without such a fit for the op."""
        if not self.epilogue:
            return 0.0
        return epilogue_seconds(self.epilogue, op, input_types, out_type) or 0.0

    def _weight_traffic(self, op: str, input_types: Sequence[Type]) -> float:
        """Seconds streaming the op's weight operands (``OpDef.streamed_weights``) from memory adds
        to its kernel time (timed alone, with the weights cached): with the model's
        ``weight_stream``, each byte at its measured price (a weight too large for any cache,
        ``streams.STREAM_MIN_BYTES``, streamed alone too: nothing added); without it, all of it at
        the roofline's bandwidth (the older term)."""
        d = ops.OPS.get(op)
        nbytes = [type_bytes(input_types[i]) for i in (d.streamed_weights if d is not None else ())
                  if i < len(input_types) and isinstance(input_types[i], TensorType)]
        if not nbytes:
            return 0.0
        if self.weight_stream is not None:
            return self.weight_stream.seconds(nbytes)
        return self.analytic.bytes_cost(sum(nbytes))

    def node_cost(self, op: str, attrs: Attrs, input_types: Sequence[Type], out_type: Type,
                  all_inputs_constant: bool = False) -> float:
        """``op_cost`` in the signature ``extract.egraph_problem(egraph, node_cost, roots)`` expects."""
        return self.op_cost(op, attrs, input_types, out_type, all_inputs_constant)

    __call__ = node_cost

    def _graph_nodes(self, graph: TensorGraph):
        """(node, input types, all inputs constant, the node keeping it from fusing or None) per
        live node; the last is set for an element-wise node that runs as a kernel of its own
        (`standalone_elementwise`)."""
        const = graph.is_constant()
        live = graph.reachable()
        alone = standalone_elementwise(graph, live, const)
        for i in live:
            n = graph.nodes[i]
            ins = [graph.nodes[j].type for j in n.inputs]
            all_const = bool(n.inputs) and all(const[j] for j in n.inputs)
            yield n, ins, all_const, alone.get(i)

    def graph_terms(self, graph: TensorGraph) -> np.ndarray:
        """Sum of the live nodes' unweighted terms (the row ``fit_fusion`` regresses on)."""
        total = np.zeros(len(FusionRule.TERMS))
        for n, ins, all_const, blocker in self._graph_nodes(graph):
            total += self.cost_terms(n.op, n.attrs, ins, n.type, all_const, blocker is not None)
        return total

    def graph_cost(self, graph: TensorGraph) -> float:
        """Seconds of the whole program: the sum of its live nodes' costs (shared nodes once), each
        element-wise node's fusion decided by the program (`standalone_elementwise`)."""
        return self.program_cost(graph)[0]

    def program_cost(self, graph: TensorGraph) -> tuple[float, dict[int, float]]:
        """``graph_cost(graph)`` and the seconds this program costs beyond its nodes' ``node_cost``
        (element-wise ops that run as kernels of their own), charged to the nodes that keep
        them from fusing (`standalone_elementwise`: a split's piece, a tensor read twice): the
        choices ``Extractor.extract_graph`` re-extracts against."""
        total, extra = 0.0, {}
        for n, ins, all_const, blocker in self._graph_nodes(graph):
            total += self.op_cost(n.op, n.attrs, ins, n.type, all_const)  # a subclass's override counts
            if blocker is not None:  # what running alone adds to the fused node's cost
                more = (CostModel.op_cost(self, n.op, n.attrs, ins, n.type, all_const, True)
                        - CostModel.op_cost(self, n.op, n.attrs, ins, n.type, all_const))
                if more > 0:
                    total += more
                    extra[blocker] = extra.get(blocker, 0.0) + more
        return float(total), extra

    def close(self) -> None:
        """Stop a measuring worker, if one was started."""
        if self._measurer is not None:
            self._measurer.close()
            self._measurer = None

    # -- what the costs rest on -------------------------------------------------------------
    @property
    def has_host_data(self) -> bool:
        """Whether the kernel costs rest on data taken on this very target (and device): measurements
        shipped for it (never for another device than this machine), or a learned model trained on
        it (a shipped one counts unless ``$RELAY_EQSAT_IGNORE_SHIPPED`` hides the shipped data)."""
        if self.kind == "analytic" or self.target is None:
            return False
        if not self.device and shipped_table(self.target, self.backend):
            return True
        own = self.learned is not None and not self.foreign_model
        return own and not (ignore_shipped() and self.learned.meta.get("shipped"))

    def calibrated_error(self) -> float:
        """The relative error of this model's whole-graph predictions on its target: the
        leave-one-out error of the fusion fit of a model trained on this CPU
        (``whole_graph_error`` in its metadata), else :data:`FOREIGN_ERROR` (another CPU's model),
        else :data:`ANALYTIC_ERROR` (the roofline alone). A predicted gain smaller than this
        is inside the model's error."""
        if self.kind == "analytic" or self.learned is None:
            return ANALYTIC_ERROR
        err = self.learned.meta.get("whole_graph_error")
        if not self.has_host_data or err is None:
            return FOREIGN_ERROR
        return float(err)

    def is_measured(self, inst: OpInstance) -> bool:
        """Whether ``inst``'s kernel time comes from a measurement on this target and device (shipped
        or cached; with ``records``, one of the kernel built under them)."""
        if self.kind == "learned" or self._cached(inst) is None:
            return False
        return not self.tuning or inst.key() in self._tuned

    def add_measurements(self, seconds: dict[tuple, float]) -> None:
        """Take freshly measured kernel times (instance key -> seconds; with ``records``, of kernels
        built under them) into account from now on."""
        if not seconds:
            return
        self._lookup_table().update(seconds)
        if self.tuning:
            self._tuned.update(seconds)
        self._kernel.clear()

    @property
    def foreign_model(self) -> bool:
        """Whether the learned model was trained on another target (another CPU) or device than this one."""
        return (self.learned is not None and self.target is not None
                and (self.learned.meta.get("target") != normalize_target(self.target)
                     or self.learned.meta.get("device", "") != self.device))

    def __repr__(self) -> str:
        learned = "no" if self.learned is None else repr(self.learned.meta.get("target"))
        device = f", device={self.device!r}" if self.device else ""
        device += f", tuning={self.tuning[:16]!r}" if self.tuning else ""
        return (f"CostModel(kind={self.kind!r}, target={self.target!r}{device}, backend={self.backend!r}, "
                f"learned={learned}{' (another CPU)' if self.foreign_model else ''})")


def _on(target: str | None, device: str) -> str | None:
    """A target, with the device it is on when that is not this machine."""
    return f"{target} on device {device!r}" if device and target else target


@functools.lru_cache(maxsize=None)
def _warn_foreign(trained_on: str | None, target: str) -> None:
    """Say once per (model target, target) that the learned costs come from another CPU."""
    log.warning("relay-eqsat cost model: no learned model for %s; using the one trained on %s. Its "
                "predictions keep their ranking but not their scale on this CPU; `relay-eqsat measure "
                "--models zoo:NAME,...` measures this one and trains its own (in the user cache).",
                target, trained_on)

