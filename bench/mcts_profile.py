"""Time (and optionally profile) MCTS on zoo models at the issue-6 settings.

For each model: node limit 2,000, budget 128, at most 10 simulation steps,
merge-aware greedy rewards (--reward; greedy-ocf: the paper's), ILP-ACyc final
extraction, analytic cost (--cost). Prints the
optimizer's summary, the search/extract times and the MCTS counters; with
``--profile`` also the top functions of a cProfile run (cumulative and own
time).

    python bench/mcts_profile.py [--models bert,squeezenet] [--budget 128] [--reward greedy-merge] [--profile]
                                 [--time-limit 600] [--small] [--top 35] [--json out.json]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import time


def run_model(name: str, args) -> dict:
    from relay_eqsat.pipeline import optimize_graph
    from relay_eqsat.passes import zoo
    from relay_eqsat.passes.relay.frontend import from_relay

    t0 = time.perf_counter()
    mod, params = zoo.get(name, small=True) if args.small else zoo.get(name)
    g = from_relay(mod, params)
    t_load = time.perf_counter() - t0
    opts = {"search": "mcts", "node_limit": args.node_limit, "budget": args.budget,
            "max_sim_steps": args.max_sim_steps, "extractor": args.reward, "final_extractor": args.final_extractor,
            "cost": args.cost, "time_limit": args.time_limit, "seed": args.seed}
    prof = cProfile.Profile() if args.profile else None
    t0 = time.perf_counter()
    if prof is not None:
        prof.enable()
    _, rep = optimize_graph(g, opts)
    if prof is not None:
        prof.disable()
    wall = time.perf_counter() - t0
    mcts = rep.info.get("mcts", {})
    print(f"== {name}: {len(g)} graph nodes, load {t_load:.1f}s")
    print("  ", rep.summary())
    print(f"   wall {wall:.2f}s  search {rep.search_time:.2f}s  extract {rep.extract_time:.2f}s  "
          f"mcts_iterations {mcts.get('mcts_iterations')}  extractions {mcts.get('extractions')}  "
          f"cache_hits {mcts.get('cache_hits')}  applied {len(mcts.get('applied', []))}")
    extra = {k: v for k, v in mcts.items() if k.startswith("n_") or k.endswith("_time")}
    if extra:
        print("  ", {k: (round(v, 3) if isinstance(v, float) else v) for k, v in extra.items()})
    if prof is not None:
        for key in ("cumulative", "tottime"):
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats(key).print_stats(args.top)
            print(s.getvalue())
    return {"model": name, "wall": wall, "search_time": rep.search_time, "extract_time": rep.extract_time,
            "cost_before": rep.cost_before, "cost_after": rep.cost_after, "stop_reason": rep.stop_reason,
            "steps": rep.iterations, "egraph_nodes": rep.egraph_nodes,
            "applied": mcts.get("applied"), "mcts_iterations": mcts.get("mcts_iterations"),
            "final_cost": mcts.get("final_cost")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="bert,squeezenet,nasnet_a,inception_v3")
    ap.add_argument("--node-limit", type=int, default=2000)
    ap.add_argument("--budget", type=int, default=128)
    ap.add_argument("--max-sim-steps", type=int, default=10)
    ap.add_argument("--final-extractor", default="ilp-acyc")
    ap.add_argument("--reward", default="greedy-merge", help="extractor scoring the rollouts")
    ap.add_argument("--time-limit", type=float, default=600.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cost", default="analytic", help="cost model kind (the pass uses auto)")
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--top", type=int, default=35)
    ap.add_argument("--json")
    args = ap.parse_args()
    from relay_eqsat.passes import zoo

    names = zoo.MODELS if args.models == "all" else args.models.split(",")
    rows = [run_model(n, args) for n in names]
    print(f"{'model':14s} {'wall s':>8s} {'search s':>9s} {'steps':>6s} {'nodes':>6s} {'stop':>11s} "
          f"{'cost before':>12s} {'after':>10s}")
    for r in rows:
        print(f"{r['model']:14s} {r['wall']:8.2f} {r['search_time']:9.2f} {r['steps']:6d} {r['egraph_nodes']:6d} "
              f"{r['stop_reason']:>11s} {r['cost_before'] * 1e3:12.4f} {r['cost_after'] * 1e3:10.4f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
