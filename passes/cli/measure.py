"""``relay-eqsat measure``: measure the operators a set of models needs, then retrain.

    relay-eqsat measure --target T --models zoo:bert,zoo:resnet50 [--small]

Collects the distinct kernel instances of each model (through the Relay
frontend), measures those the cache lacks (progress bar, each result written
as it comes), retrains the learned model of (target, backend) on every cached
row and prints its held-out error (``--sweep N`` adds N kernels of a generic
shape sweep to the models' kernels, ``--sweep-large``, ``--sweep-heavy``,
``--sweep-matvec``, ``--sweep-small``, ``--sweep-columns``, ``--sweep-stem`` and
``--sweep-elementwise`` its tiers past that grid, ``--sweep-epilogues`` fused groups
of its own; ``--groups`` the models' fused groups, an
anchor with its element-wise epilogue, from which what a fused element-wise
op costs is learned). On a CPU it also measures the weight-stream probes
(`relay_eqsat.cost.streams`; ``--no-streams`` skips them): what a model's weights
cost to read from memory. With ``--fit-fusion`` it also times each
model whole and fits the fusion weights of the node cost to those runtimes
(stored with the model). ``--fit-only`` refits the fusion weights of the
existing model (the user's, else the shipped one) without measuring or
training, and ``--whole-times FILE`` takes the whole-model runtimes from a
benchmark's JSON (``bench/end_to_end.py``: opt_level 3 medians;
``bench/cost_accuracy.py``: measured) instead of timing the models again.
``--retrain-shipped`` retrains the model shipped for ``--target`` from the
measurements shipped for it (no measuring: the target need not be this CPU),
refits its fusion weights to ``--whole-times`` and writes it over the shipped
file (what a change of the features or the baseline needs).
``register(subparsers)`` adds the subcommand to the ``relay-eqsat`` parser; its
handler is ``run(args) -> exit status``. The kernels are measured in the
``Measurer``'s worker process (:mod:`relay_eqsat.passes.runtime.measure_worker`).
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
from pathlib import Path

from relay_eqsat import progress
from relay_eqsat.cli import add_common_arguments
from relay_eqsat.cost.base import CostModel, FusionRule
from relay_eqsat.cost.fit import fit_fusion
from relay_eqsat.cost.cache import CostCache, all_samples, normalize_target, shipped_samples, shipped_table_path
from relay_eqsat.cost.groups import fused_groups, group_anchor
from relay_eqsat.cost.instance import GROUP_OP, instances_from_egraph, instances_from_graph, unique
from relay_eqsat.cost import learned
from relay_eqsat.cost.learned import LearnedCostModel, default_model_path, load_model, model_dir, model_filename
from relay_eqsat.cost.measure import BackendUnavailable, MeasureConfig, Measurer
from relay_eqsat.cost.pool import MeasurePool
from relay_eqsat.cost.tracker import TrackerError, remote_from_options
from relay_eqsat.cost.sweep import sweep_instances
from relay_eqsat.cost.streams import probe_instances
from relay_eqsat.cost.held_out import held_out
from relay_eqsat.egraph import EGraph
from relay_eqsat.rewrite import load_rules
from relay_eqsat.search.tensat import run_tensat

from relay_eqsat.passes import zoo
from relay_eqsat.passes.relay.frontend import from_relay


#: the sweep's flags: (flag, tier of ``relay_eqsat.cost.sweep.TIERS``, what it is, what it draws)
SWEEP_FLAGS = (
    ("--sweep", "default", "generic", "dense, batch_matmul, convolutions, pools up to 2 GFLOP, so that models never "
     "measured are predicted from nearby shapes; 240 take about 5 minutes on one core"),
    ("--sweep-large", "large", "high-resolution", "convolutions and pools on 112-224 px maps, up to 8 GFLOP each: "
     "VGG-style first stages, U-Nets"),
    ("--sweep-heavy", "heavy", "heavy", "convolutions of 2-8 GFLOP on 14-73 px maps: VGG's 256-512-channel layers, "
     "wide ResNets"),
    ("--sweep-matvec", "matvec", "matrix-vector", "dense layers of 1-4 rows on 256-8192 widths: RNN cells, "
     "classifier heads, weights from cache or from memory"),
    ("--sweep-small", "small", "small-kernel", "convolutions, pools and dense layers of a few microseconds: 32 px "
     "inputs, RNN cells with small states"),
    ("--sweep-columns", "columns", "output-column", "dense layers whose output width x86 blocks well or badly "
     "(N = 24, 48, 197, 1000...), tall ones too: swapped operands, classifier heads"),
    ("--sweep-stem", "stem", "stem", "a network's first convolution: 1-4 input channels, 3-11 px kernels with "
     "strides, odd output widths, patch embeddings"),
    ("--sweep-elementwise", "elementwise", "element-wise", "every element-wise, broadcast and normalizing op "
     "(activations and their approximations, arithmetic, bias add, softmax, layer and batch norm, mean) on "
     "2-D to 4-D tensors of 64 to 4M values"),
    ("--sweep-epilogues", "epilogues", "fused-epilogue", "fused groups: a dense, convolution or batch_matmul "
     "with the activation a model fuses into it (GELU, SiLU, hardswish, sigmoid, tanh, their fast "
     "approximations, a residual add), from which a fused op's cost is learned beside the models' groups"),
)


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``measure`` subcommand to an ``argparse`` subparsers object."""
    p = subparsers.add_parser(
        "measure", help="measure the operators of models on a target and retrain the learned cost model",
        description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default=None,
                   help="TVM target string, or 'cuda' (default: $RELAY_EQSAT_TARGET or the host CPU)")
    p.add_argument("--backend", default=None, choices=("tvm-llvm", "tvm-cuda", "torch-cuda"),
                   help="measuring backend (default: chosen from the target)")
    p.add_argument("--models", default="zoo:bert,zoo:resnet50",
                   help="comma-separated models, zoo:NAME (default: %(default)s)")
    p.add_argument("--small", action="store_true", help="the zoo models' small configurations")
    p.add_argument("--saturate", type=int, default=0, metavar="NODES",
                   help="also measure the kernels of rewritten variants: every e-node of each model's "
                        "e-graph grown by the TENSAT scheduler (default rules, k_multi=1) up to NODES e-nodes")
    for flag, tier, what, helptext in SWEEP_FLAGS:
        p.add_argument(flag, type=int, default=0, metavar="N",
                       help=f"also measure N kernels of the sweep's {what} tier ({helptext})")
    p.add_argument("--sweep-seed", type=int, default=0, help="seed of the sweep's draw")
    p.add_argument("--groups", action="store_true",
                   help="also measure each model's fused groups (an anchor with the element-wise ops TVM "
                        "fuses into its kernel), from which the cost of a fused epilogue is learned")
    p.add_argument("--no-streams", dest="streams", action="store_false",
                   help="skip the weight-stream probes measured on a CPU: chains of one-row dense layers with "
                        "weights of their own (128 MiB in all) timed against one layer alone, what a model's "
                        "weights cost to read from memory (relay_eqsat.cost.streams)")
    p.add_argument("--db", default=None, help="cost database (default: $RELAY_EQSAT_COST_DB or the user cache)")
    p.add_argument("--rpc-tracker", default=None, metavar="HOST:PORT",
                   help="measure on the devices registered with this TVM RPC tracker (as tvmc's --rpc-tracker), "
                        "every free one under --rpc-key at once; the rows are kept per device")
    p.add_argument("--rpc-key", default=None, metavar="KEY", help="the devices' key at the RPC tracker")
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="kernels measured at once on this machine: they build in parallel and take turns "
                        "to time (default: 2 where there are two CPUs or more; see docs/measuring.md)")
    p.add_argument("--repeat", type=int, default=7, help="timings per op; the median is kept")
    p.add_argument("--min-repeat-ms", type=float, default=20.0, help="least duration of one timing")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds per op before the worker is killed")
    p.add_argument("--retry-failed", action="store_true", help="measure again ops that failed before")
    p.add_argument("--limit", type=int, default=None, help="measure at most this many new ops")
    p.add_argument("--remeasure", default="", metavar="OPS",
                   help="first measure again every row of the database for the target whose op is one of "
                        "OPS (comma-separated), e.g. nn.conv2d: measured before 2026-11-29, a convolution "
                        "came out 1-2 us low (the debug executor's own cost per kernel, left in the layout "
                        "transforms taken off it), one under 2 us at 5%% of its time")
    p.add_argument("--no-train", action="store_true", help="measure only")
    p.add_argument("--fit-fusion", action="store_true",
                   help="time each model whole and fit the fusion weights to those runtimes")
    p.add_argument("--fit-only", action="store_true",
                   help="only refit the fusion weights of the existing model (implies --fit-fusion; no measuring)")
    p.add_argument("--whole-times", default=None, metavar="FILE.json",
                   help="whole-model runtimes for the fit from a bench JSON (end_to_end or cost_accuracy) "
                        "or {\"zoo:NAME\": seconds}, instead of timing the models")
    p.add_argument("--model-out", default=None,
                   help="where to save the model (default: the user model directory)")
    p.add_argument("--ship", action="store_true",
                   help="ship the model and the measurements with the package for this target "
                        "(relay_eqsat/cost/data)")
    p.add_argument("--ship-default", action="store_true",
                   help="as --ship, and make the model the default for every target of its backend")
    p.add_argument("--retrain-shipped", action="store_true",
                   help="retrain the model shipped for --target from the measurements shipped for it, "
                        "refit its fusion weights to --whole-times and write it over the shipped file "
                        "(nothing measured)")
    add_common_arguments(p)
    p.set_defaults(func=run)
    return p


def _load_graph(spec: str, small: bool):
    """A model spec (``zoo:NAME``) as a TensorGraph (weights bound as constants)."""
    if not spec.startswith("zoo:"):
        raise SystemExit(f"relay-eqsat measure: unsupported model {spec!r} (use zoo:NAME; "
                         f"known: {', '.join(zoo.MODELS)})")
    with progress.ticking(f"loading {spec}"):
        mod, params = zoo.get(spec[4:], small=small)
        return from_relay(mod, params)


def _rewritten_instances(graphs, node_limit: int):
    """Kernel instances of every e-node of each graph's saturated e-graph."""
    rules = load_rules()
    out = []
    for spec, g in graphs.items():
        eg = EGraph()
        root = eg.add_graph(g)
        rep = run_tensat(eg, rules, node_limit=node_limit, k_multi=1, time_limit=60)
        found = instances_from_egraph(eg, root)
        print(f"{spec}: e-graph {rep.stop_reason} at {eg.num_nodes} e-nodes, {len(found)} distinct kernels")
        out.extend(found)
    return out


def read_whole_times(path: str, small: bool) -> dict[str, tuple[float, bool]]:
    """{"zoo:NAME": (seconds, small)} from a bench result (end_to_end.json: the
    opt_level 3 medians; cost_accuracy.json: the measured runtimes), each at
    the size its row was run at, or from a plain {"zoo:NAME": seconds} mapping
    (taken to be at size ``small``)."""
    with open(path) as f:
        data = json.load(f)
    if isinstance(data, dict) and "rows" in data:
        out = {}
        for row in data["rows"]:
            if row.get("fit_only"):  # cost_accuracy --held-out: a model's second size, not its row
                continue
            secs = row.get("variants", {}).get("opt3", {}).get("median_s", row.get("measured"))
            if secs:
                out["zoo:" + row["model"]] = (float(secs), bool(row.get("small")))
        return out
    return {str(k): (float(v), small) for k, v in data.items()}


def other_sizes(path: str | None, specs) -> dict[str, tuple]:
    """``{"zoo:NAME (small)": (graph, seconds)}``: the fit-only rows of a ``cost_accuracy.py
    --held-out`` result (each model's other size) for the models ``specs``; empty for other files.
    They teach the leave-one-model-out fits what the judged sizes alone cannot (a small model's
    per-kernel costs); a model's two sizes are held out together."""
    if not path:
        return {}
    with open(path) as f:
        data = json.load(f)
    out = {}
    for row in data.get("rows", []) if isinstance(data, dict) else []:
        spec = "zoo:" + row["model"]
        if row.get("fit_only") and row.get("measured") and spec in specs:
            small = bool(row.get("small"))
            out[f"{spec} ({'small' if small else 'full'})"] = (_load_graph(spec, small), float(row["measured"]))
    return out


def run(args: argparse.Namespace) -> int:
    cache = CostCache(args.db)
    config = MeasureConfig(repeat=args.repeat, min_repeat_ms=args.min_repeat_ms, timeout_s=args.timeout)
    if args.jobs is not None and args.jobs < 1:
        print(f"relay-eqsat measure: --jobs must be at least 1, got {args.jobs}", file=sys.stderr)
        return 2
    try:
        remote = remote_from_options(args.rpc_tracker, args.rpc_key)
        # local workers measure whole models (--fit-fusion) and the shipped data; the pool the kernels
        measurer = Measurer(args.target, args.backend, config, cache)
        pool = MeasurePool(measurer.target, measurer.backend, config, cache, jobs=args.jobs, remote=remote)
    except (BackendUnavailable, TrackerError, ValueError) as e:
        print(f"relay-eqsat measure: {e}", file=sys.stderr)
        return 2
    device = pool.device or ""
    print(f"target {measurer.target}, backend {measurer.backend}, database {cache.path}, measured on {pool.where()}"
          + (f" ({device})" if device else ""))

    specs = [s.strip() for s in args.models.split(",") if s.strip()]
    sweeps = [(getattr(args, flag[2:].replace("-", "_")), flag, tier, what) for flag, tier, what, _ in SWEEP_FLAGS]
    if any(n < 0 for n, *_ in sweeps):
        print(f"relay-eqsat measure: {', '.join(flag for _, flag, _, _ in sweeps)} take a number of kernels >= 0",
              file=sys.stderr)
        return 2
    if args.retrain_shipped:
        return retrain_shipped(args, measurer, specs)
    if args.fit_only:
        return refit_only(args, measurer, cache, specs, device=device)
    graphs = {}
    for spec in specs:
        graphs[spec] = _load_graph(spec, args.small)
        print(f"{spec}: {len(graphs[spec])} nodes, "
              f"{len(instances_from_graph(graphs[spec]))} distinct kernels")
    instances = unique(i for g in graphs.values() for i in instances_from_graph(g))
    for n, _, tier, what in sweeps:
        if n:
            instances = unique(instances + sweep_instances(n, args.sweep_seed, tier=tier))
            print(f"with {n} {what} sweep kernels: {len(instances)} distinct kernels")
    if args.groups:
        instances = unique(instances + [grp for g in graphs.values() for grp in fused_groups(g)])
        print(f"with the models' fused groups: {len(instances)} distinct kernels and groups")
    if args.saturate:
        instances = unique(instances + _rewritten_instances(graphs, args.saturate))
        print(f"with rewritten variants: {len(instances)} distinct kernels")
    # a group's epilogue is learned against its anchor timed alone (`LearnedCostModel.train`)
    anchors = unique(instances + [group_anchor(i) for i in instances if i.op == GROUP_OP])
    if len(anchors) > len(instances):
        print(f"with the anchors of the groups: {len(anchors)} distinct kernels")
        instances = anchors
    if args.streams and measurer.backend == "tvm-llvm":  # what a CPU model's weight term is priced by
        probes = probe_instances()
        instances = unique(instances + probes)
        print(f"with {len(probes)} weight-stream probes ({', '.join(str(p.input_types[1]) for p in probes)})")
    if args.limit is not None:
        fresh = [i for i in instances if cache.get(i, measurer.target, measurer.backend, device=device) is None]
        instances = [i for i in instances if i not in set(fresh[args.limit:])]
    redo = sorted({o.strip() for o in args.remeasure.split(",") if o.strip()})
    again = [r.instance for r in cache.rows(measurer.target, measurer.backend, device=device) if r.instance.op in redo]
    with measurer, pool:
        if redo:
            redone = pool.measure_many(again, skip_cached=False, retry_failed=True, desc="measure again")
            print(f"measured again: {len(again)} rows of {', '.join(redo)}, "
                  f"{sum(1 for r in redone if not r.ok)} failed (their earlier rows kept)")
        results = pool.measure_many(instances, retry_failed=args.retry_failed)
        for note in pool.notes:
            print(f"  {note}")
        new = [r for r in results if not r.cached]
        failed = [r for r in results if not r.ok]
        print(f"{len(results)} kernels: {len(results) - len(new)} cached, {len(new)} measured now, "
              f"{len(failed)} failed")
        for r in failed[:10]:
            print(f"  failed: {r.instance}: {r.error.splitlines()[0] if r.error else ''}")
        whole = {}
        if args.whole_times:  # the models measured here, at this size
            whole = {k: t for k, (t, small) in read_whole_times(args.whole_times, args.small).items()
                     if small == args.small and k in graphs}
        if args.fit_fusion and not whole and remote is None:
            for spec, g in graphs.items():
                with progress.ticking(f"timing {spec} whole"):
                    secs, err = measurer.measure_zoo_model(spec[4:], args.small)
                if secs is None:
                    print(f"  {spec}: whole-model timing failed: {err.splitlines()[0]}")
                else:
                    whole[spec] = secs
    if args.no_train:
        return 0
    return train_and_save(args, cache, measurer.target, measurer.backend, graphs, whole, device=device)


def train_and_save(args, cache, target: str, backend: str, graphs: dict, whole: dict, device: str = "") -> int:
    """Train the learned model of (target, backend) on the cache's rows of ``device`` (``''``: this
    machine), fit its fusion weights to the whole-model times ``whole`` (if any) and save it."""
    try:
        with progress.ticking("training the learned cost model"):
            model, report = LearnedCostModel.train_from_cache(cache, target, backend, device=device)
    except ValueError as e:
        print(f"relay-eqsat measure: {e}", file=sys.stderr)
        return 1
    print(f"learned model: {report}")
    if whole:
        _fit_into(model, target, backend, graphs, whole,
                  [(r.instance, r.seconds) for r in cache.rows(target, backend, device=device)],
                  other_sizes(args.whole_times, whole), device=device)
    return _save(model, args, backend, target, cache, device=device)


def _fit_into(model, target: str, backend: str, graphs: dict, whole: dict, samples=None,
              others: dict | None = None, device: str = "") -> None:
    """Fit the fusion weights of ``model`` (from the defaults) to the whole-model times and store them
    in its metadata. The kernel times are ``model``'s predictions, as a model nobody measured is
    costed and as `relay_eqsat.cost.held_out.held_out` fits. With the kernel measurements
    ``samples`` and three models or more, the
    error stored for the model (what a predicted gain must exceed) is the leave-one-model-out error:
    each model predicted without its kernels' measurements and runtime; ``others`` (`other_sizes`)
    join those fits. ``device``: the one ``model`` was trained for (``''``: this machine)."""
    with tempfile.TemporaryDirectory() as tmp:  # kind "learned" reads no measurement
        cm = CostModel("learned", target, backend, cache=CostCache(Path(tmp) / "empty.sqlite"), learned=model,
                       fusion=FusionRule(), device=device)
        _fit_with(model, cm, graphs, whole, samples, others or {})


def _fit_with(model, cm, graphs: dict, whole: dict, samples, others: dict) -> None:
    used = {s: t for s, t in whole.items() if s in graphs}
    missing = sorted(set(graphs) - set(used))
    if missing:
        print(f"  no whole-model time for {', '.join(missing)}: left out of the fit")
    # the models' other sizes (``others``) join the fit: a small configuration teaches it the per-kernel
    # costs, and its choice of weights and prior leaves a model's two sizes out together
    fitted = [(s, graphs[s], t) for s, t in used.items()] + [(s, g, t) for s, (g, t) in others.items()]
    fit = fit_fusion(cm, [(g, t) for _, g, t in fitted], families=[s.split(" ")[0] for s, _, _ in fitted])
    print(fit)
    cm.fusion = fit.rule
    for spec, t in used.items():
        p = cm.graph_cost(graphs[spec])
        print(f"  {spec}: measured {t * 1e3:.3f} ms, predicted {p * 1e3:.3f} ms ({p / t - 1:+.1%})")
    model.meta["fusion"] = {k: getattr(fit.rule, k) for k in fit.rule.TERMS}
    model.meta["fusion_fit"] = str(fit)
    # the error a predicted gain must exceed before it is trusted without measuring (CostModel.calibrated_error)
    err = fit.loo_mean_ape if fit.loo_mean_ape is not None else fit.after_mean_ape
    if samples and len(used) >= 3:
        with progress.ticking("leave-one-model-out: training without each model's kernels"):
            res = held_out(samples, {**{s: (graphs[s], t) for s, t in used.items()}, **others}, cm.target,
                           cm.backend, family=lambda name: name.split(" ")[0], evaluate=used)
        for spec, h in res.items():
            print(f"  {spec}: held out, predicted {h.predicted * 1e3:.3f} ms ({h.rel_error:+.1%}; "
                  f"its {h.n_left_out} kernels left out of training)")
        err = sum(abs(h.rel_error) for h in res.values()) / len(res)
        print(f"leave-one-model-out whole-graph error: mean {err:.1%}, "
              f"max {max(abs(h.rel_error) for h in res.values()):.1%}")
        model.meta["held_out"] = {spec: round(h.rel_error, 3) for spec, h in res.items()}
    model.meta["whole_graph_error"] = round(err, 3)  # a relative error: three decimals say it all


def refit_only(args, measurer, cache, specs, device: str = "") -> int:
    """``--fit-only``: the existing model's fusion weights refitted, nothing measured or trained
    (``device``: the model of that device, ``''`` this machine's)."""
    model = load_model(measurer.target, measurer.backend, device)
    if model is None:
        on = f" on device {device!r}" if device else ""
        print(f"relay-eqsat measure: no learned model for {measurer.target}{on} to refit", file=sys.stderr)
        return 1
    if args.whole_times:  # each model at the size its runtime was measured at
        times = {k: v for k, v in read_whole_times(args.whole_times, args.small).items() if k in specs}
        graphs = {spec: _load_graph(spec, small) for spec, (_, small) in times.items()}
        whole = {spec: t for spec, (t, _) in times.items()}
    else:
        graphs = {spec: _load_graph(spec, args.small) for spec in specs}
        whole = {}
    if not whole:
        with measurer:
            for spec in specs:
                with progress.ticking(f"timing {spec} whole"):
                    secs, err = measurer.measure_zoo_model(spec[4:], args.small)
                if secs is None:
                    print(f"  {spec}: whole-model timing failed: {err.splitlines()[0]}")
                else:
                    whole[spec] = secs
    if not whole:
        print("relay-eqsat measure: no whole-model times to fit to", file=sys.stderr)
        return 1
    _fit_into(model, measurer.target, measurer.backend, graphs, whole,
              all_samples(cache, measurer.target, measurer.backend, device), other_sizes(args.whole_times, whole),
              device=device)
    return _save(model, args, measurer.backend, measurer.target, cache, device=device)


def retrain_shipped(args, measurer, specs) -> int:
    """``--retrain-shipped``: the shipped model of the target retrained on the shipped
    measurements (in their file's order) and its fusion weights refitted to ``--whole-times``
    (without them the shipped model's weights are kept), written over the shipped file."""
    target, backend = measurer.target, measurer.backend
    path = shipped_model_path(target, backend)
    if path is None:
        print(f"relay-eqsat measure: no model is shipped for {target} ({backend})", file=sys.stderr)
        return 1
    samples = shipped_samples(target, backend)
    if not samples:
        print(f"relay-eqsat measure: no measurements are shipped for {target} ({backend})", file=sys.stderr)
        return 1
    old = _model_meta(path)
    if old.get("report"):
        print(f"shipped model before: {learned.TrainReport(**old['report'])}")
    with progress.ticking("training the learned cost model"):
        model, report = LearnedCostModel.train(samples, target, backend)
    print(f"retrained: {report}")
    model.meta["shipped"] = True
    if args.whole_times:
        times = {k: v for k, v in read_whole_times(args.whole_times, args.small).items() if k in specs}
        graphs = {spec: _load_graph(spec, small) for spec, (_, small) in times.items()}
        whole = {spec: t for spec, (t, _) in times.items()}
        _fit_into(model, target, backend, graphs, whole, samples, other_sizes(args.whole_times, whole))
    else:
        model.meta.update({k: old[k] for k in ("fusion", "fusion_fit", "whole_graph_error") if k in old})
        # the kept weights were fitted to the weight term the old model had (`CostModel._weight_traffic`)
        if "weight_rates" in old:
            model.meta["weight_rates"] = old["weight_rates"]
        else:
            model.meta.pop("weight_rates", None)
        print("no --whole-times: the shipped model's fusion weights are kept, not refitted")
    model.save(path)
    print(f"saved {path}")
    return 0


def _model_meta(path) -> dict:
    """A model file's relay-eqsat metadata, whatever its feature version."""
    return json.loads(json.loads(Path(path).read_text())["learner"]["attributes"]["relay_eqsat"])


def shipped_model_path(target: str, backend: str):
    """The shipped model file that serves exactly ``target``: its own, else the backend's
    default when that was trained on ``target``."""
    own = learned.SHIPPED_DIR / model_filename(target, backend)
    if own.is_file():
        return own
    default = default_model_path(backend)
    if default.is_file() and _model_meta(default).get("target") == normalize_target(target):
        return default
    return None


def _save(model, args, backend: str, target: str, cache, device: str = "") -> int:
    """Save ``model``: shipped with the package (``--ship``, ``--ship-default``: this machine's
    measurements only), to ``--model-out``, else as the user's model of (target, backend, device)."""
    if (args.ship or args.ship_default) and device:
        print(f"relay-eqsat measure: only measurements of this machine ship with the package, not device "
              f"{device!r}'s", file=sys.stderr)
        return 2
    if args.ship or args.ship_default:
        # the package's model and measurements for this very target (CPU)
        model.meta["shipped"] = True
        out = learned.SHIPPED_DIR / model_filename(target, backend)  # read at call time: tests redirect it
        table = cache.export_rows(target, backend)
        if table["rows"]:
            path = shipped_table_path(target, backend)
            with gzip.open(path, "wt") as f:
                json.dump(table, f)
            print(f"saved {path} ({len(table['rows'])} measurements)")
        if args.ship_default:
            model.save(default_model_path(backend))
            print(f"saved {default_model_path(backend)}")
    elif args.model_out:
        out = Path(args.model_out)
    else:
        out = model_dir() / model_filename(target, backend, device)
    model.save(out)
    print(f"saved {out}")
    return 0
