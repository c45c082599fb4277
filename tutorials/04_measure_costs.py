"""Measuring costs for a new target: op timings, the cost cache, a learned model.

The extractors minimize a cost model's per-node costs
(``relay_eqsat.cost.CostModel``). For a new target the costs come from
measurements: each distinct operator instance (op, attributes, input shapes,
dtype) is built alone with TVM and timed. Measuring is slow, so results go to
an sqlite cache shared by every process, and an XGBoost model trained on the
cache predicts costs of instances never measured.

Steps:

1. Collect the distinct kernel instances of a zoo model's graph
   (``instances_from_graph``); take only a handful here so the tutorial runs
   in well under a minute.
2. Measure them with a ``MeasurePool`` for the target (a worker process builds
   and times each op; ``MeasureConfig`` sets repeats) and store them in a
   ``CostCache`` - a temporary database here; the default one lives in the
   user cache dir or ``$RELAY_EQSAT_COST_DB``. ``relay-eqsat measure`` does
   the same from the command line for whole models.
3. Make cost models over that cache (``make_cost_model(kind, target, db)``):
   ``measured`` (cache, else measure now), ``auto`` (cache, else the learned
   prediction, else the roofline), ``analytic`` (roofline only), and compare
   their op costs.
4. Train a ``LearnedCostModel`` on the cache's measurements
   (``train_from_cache``; with TVM loaded, XGBoost's fit runs in a child
   interpreter by itself), save it, load it and predict the instances (with so few samples this only shows the API;
   train on hundreds of measurements for real use).
5. Use it: ``EqSatPass(cost=make_cost_model("auto", target=..., db=...))``
   or any CostModel instance.

Run: ``.venv/bin/python tutorials/04_measure_costs.py [--small] [--ops N]``.
"""
import argparse
import tempfile
import time
from pathlib import Path

# TVM-free: relay_eqsat.cost imports no TVM (the TVM parts are imported in main)
from relay_eqsat.cost import (CostCache, LearnedCostModel, MeasureConfig, MeasurePool, instances_from_graph,
                              make_cost_model)


def main():
    from relay_eqsat.passes import from_relay, zoo
    from relay_eqsat.passes.relay.eqsat_pass import bind_params
    from relay_eqsat.passes.runtime.target import host_target

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="a small model and 4 ops (fast)")
    ap.add_argument("--model", default="squeezenet", choices=zoo.MODELS)
    ap.add_argument("--ops", type=int, default=None, help="how many op instances to measure (default 4 / 12)")
    ap.add_argument("--target", default=None, help="TVM target (default: the host CPU)")
    args = ap.parse_args()
    n_ops = args.ops or (4 if args.small else 12)
    target = args.target or host_target()

    # 1. instances
    mod, params = zoo.get(args.model, small=True)
    graph = from_relay(bind_params(mod, params))
    instances = instances_from_graph(graph)
    # a mix of kinds: the first instance of each op, then the rest
    by_op = {}
    for inst in instances:
        by_op.setdefault(inst.op, inst)
    chosen = (list(by_op.values()) + [i for i in instances if i not in by_op.values()])[:n_ops]
    print(f"{args.model} (small): {len(instances)} distinct kernel instances; measuring {len(chosen)}")

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "costs.sqlite"
        # 2. measure into a cache
        cache = CostCache(db)
        config = MeasureConfig(repeat=3, number=0, min_repeat_ms=2.0, warmup=1)
        t0 = time.perf_counter()
        with MeasurePool(target=target, config=config, cache=cache) as measurer:
            results = measurer.measure_many(chosen, cache=cache)
        print(f"measured {sum(r.ok for r in results)}/{len(results)} in {time.perf_counter() - t0:.1f} s "
              f"({measurer.backend} backend); cache rows: {cache.count(target=measurer.target)}")

        # 3. cost models over the cache
        measured = make_cost_model("measured", target=target, db=cache)
        analytic = make_cost_model("analytic", target=target)
        print(f"{'op':<22} {'shape':<22} {'measured (us)':>13} {'analytic (us)':>13}")
        for r in results:
            inst = r.instance
            if not r.ok:
                print(f"{inst.op:<22} failed: {r.error}")
                continue
            m = measured.kernel_cost(inst.op, inst.attrs, inst.input_types, inst.out_type)
            a = analytic.kernel_cost(inst.op, inst.attrs, inst.input_types, inst.out_type)
            shape = "x".join(map(str, inst.input_types[0].shape))
            print(f"{inst.op:<22} {shape:<22} {m * 1e6:>13.2f} {a * 1e6:>13.2f}")
            assert abs(m - r.seconds) <= 1e-12 + 1e-9 * r.seconds, "the measured model reads the cache"

        # 4. a learned model from the cache
        samples = [(r.instance, r.seconds) for r in results if r.ok]
        model_path = Path(tmp) / "learned.json"
        trained, report = LearnedCostModel.train_from_cache(cache, measurer.target, measurer.backend,
                                                            holdout=0.0, rounds=50)
        print(report)
        trained.save(model_path)
        model = LearnedCostModel.load(model_path)
        predicted = model.predict([s[0] for s in samples])
        print("learned model (trained on these samples):",
              ", ".join(f"{inst.op} {p * 1e6:.1f}us" for (inst, _), p in zip(samples, predicted)))

        # 5. the same cache in a cost model for the pass
        auto = make_cost_model("auto", target=target, db=cache)
        print(f"graph cost under 'auto' with this cache: {auto.graph_cost(graph) * 1e3:.4f} ms "
              f"(analytic: {analytic.graph_cost(graph) * 1e3:.4f} ms)")
        measured.close()
        auto.close()
        cache.close()
    print("OK")


if __name__ == "__main__":
    main()
