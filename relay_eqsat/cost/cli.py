"""``relay-eqsat measure``: measure the operators a set of models needs, then retrain.

    relay-eqsat measure --target T --models zoo:bert,zoo:resnet50 [--small]

Collects the distinct kernel instances of each model (through the Relay
frontend), measures those the cache lacks (progress bar, each result written
as it comes), retrains the learned model of (target, backend) on every cached
row and prints its held-out error. With ``--fit-fusion`` it also times each
model whole and fits the fusion weights of the node cost to those runtimes
(stored with the model). ``register(subparsers)`` adds the subcommand to the
``relay-eqsat`` parser; its handler is ``run(args) -> exit status``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


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
    p.add_argument("--db", default=None, help="cost database (default: $RELAY_EQSAT_COST_DB or the user cache)")
    p.add_argument("--repeat", type=int, default=7, help="timings per op; the median is kept")
    p.add_argument("--min-repeat-ms", type=float, default=20.0, help="least duration of one timing")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds per op before the worker is killed")
    p.add_argument("--retry-failed", action="store_true", help="measure again ops that failed before")
    p.add_argument("--limit", type=int, default=None, help="measure at most this many new ops")
    p.add_argument("--no-train", action="store_true", help="measure only")
    p.add_argument("--fit-fusion", action="store_true",
                   help="time each model whole and fit the fusion weights to those runtimes")
    p.add_argument("--model-out", default=None,
                   help="where to save the model (default: the user model directory)")
    p.add_argument("--ship", action="store_true",
                   help="save the model as the package's shipped default (relay_eqsat/cost/data)")
    p.set_defaults(func=run)
    return p


def _load_graph(spec: str, small: bool):
    """A model spec (``zoo:NAME``) as a TensorGraph (weights bound as constants)."""
    from relay_eqsat.passes import zoo
    from relay_eqsat.passes.relay import from_relay

    if not spec.startswith("zoo:"):
        raise SystemExit(f"relay-eqsat measure: unsupported model {spec!r} (use zoo:NAME; "
                         f"known: {', '.join(zoo.MODELS)})")
    mod, params = zoo.get(spec[4:], small=small)
    return from_relay(mod, params)


def _rewritten_instances(graphs, node_limit: int):
    """Kernel instances of every e-node of each graph's saturated e-graph."""
    from relay_eqsat.egraph import EGraph
    from relay_eqsat.rules import load_rules
    from relay_eqsat.search.tensat import run_tensat

    from .instance import instances_from_egraph

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


def run(args: argparse.Namespace) -> int:
    from .base import CostModel, fit_fusion
    from .cache import CostCache
    from .instance import instances_from_graph, unique
    from .learned import LearnedCostModel, default_model_path, model_dir, model_filename
    from .measure import BackendUnavailable, MeasureConfig, Measurer

    cache = CostCache(args.db)
    config = MeasureConfig(repeat=args.repeat, min_repeat_ms=args.min_repeat_ms, timeout_s=args.timeout)
    try:
        measurer = Measurer(args.target, args.backend, config, cache)
    except BackendUnavailable as e:
        print(f"relay-eqsat measure: {e}", file=sys.stderr)
        return 2
    print(f"target {measurer.target}, backend {measurer.backend}, database {cache.path}")

    specs = [s.strip() for s in args.models.split(",") if s.strip()]
    graphs = {}
    for spec in specs:
        graphs[spec] = _load_graph(spec, args.small)
        print(f"{spec}: {len(graphs[spec])} nodes, "
              f"{len(instances_from_graph(graphs[spec]))} distinct kernels")
    instances = unique(i for g in graphs.values() for i in instances_from_graph(g))
    if args.saturate:
        instances = unique(instances + _rewritten_instances(graphs, args.saturate))
        print(f"with rewritten variants: {len(instances)} distinct kernels")
    if args.limit is not None:
        fresh = [i for i in instances if cache.get(i, measurer.target, measurer.backend) is None]
        instances = [i for i in instances if i not in set(fresh[args.limit:])]
    with measurer:
        results = measurer.measure_many(instances, retry_failed=args.retry_failed)
        new = [r for r in results if not r.cached]
        failed = [r for r in results if not r.ok]
        print(f"{len(results)} kernels: {len(results) - len(new)} cached, {len(new)} measured now, "
              f"{len(failed)} failed")
        for r in failed[:10]:
            print(f"  failed: {r.instance}: {r.error.splitlines()[0] if r.error else ''}")
        whole = {}
        if args.fit_fusion:
            for spec, g in graphs.items():
                secs, err = measurer.measure_zoo_model(spec[4:], args.small)
                if secs is None:
                    print(f"  {spec}: whole-model timing failed: {err.splitlines()[0]}")
                else:
                    whole[spec] = secs
    if args.no_train:
        return 0
    try:
        model, report = LearnedCostModel.train_from_cache(cache, measurer.target, measurer.backend)
    except ValueError as e:
        print(f"relay-eqsat measure: {e}", file=sys.stderr)
        return 1
    print(f"learned model: {report}")
    if whole:
        cm = CostModel("auto", measurer.target, measurer.backend, cache=cache, learned=model)
        fit = fit_fusion(cm, [(graphs[s], t) for s, t in whole.items()])
        print(fit)
        cm.fusion = fit.rule
        for spec, t in whole.items():
            print(f"  {spec}: measured {t * 1e3:.3f} ms, predicted {cm.graph_cost(graphs[spec]) * 1e3:.3f} ms")
        model.meta["fusion"] = {k: getattr(fit.rule, k) for k in fit.rule.TERMS}
        model.meta["fusion_fit"] = str(fit)
    if args.ship:
        model.meta["shipped"] = True
        out = default_model_path(measurer.backend)
    elif args.model_out:
        out = Path(args.model_out)
    else:
        out = model_dir() / model_filename(measurer.target, measurer.backend)
    model.save(out)
    print(f"saved {out}")
    return 0
