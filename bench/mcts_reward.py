"""How well MCTS rollout rewards score rollout e-graphs: OCF greedy and merge-aware greedy against ILP-ACyc.

For each zoo model (weights bound), a few rollout-like e-graphs are grown from
the model's e-graph the way MCTS simulations grow them: one random rule (seeded)
per step, each applied as one runner step under the node limit (2,000
e-nodes), snapshots after 3, 8, 15 and 30 steps or at the node limit. Each
snapshot is scored by

- greedy-ocf (``extract.ocf_cost``): the paper's reward, blind to merges;
- greedy-merge (``extract.merge_cost``): the OCF choice improved by group moves (and
  "no-lift": the same without lifted moves, ``max_lift=0``, as before they existed);
- ILP-ACyc (``--ilp-time-limit``, 8 CP-SAT workers): the optimum, when proved.

and the table gives, per model, how far each greedy is above the optimum
(mean and max over the snapshots), on how many snapshots it is within 1e-6
of it, and the median time of one reward (the MCTS path: straight from the
e-graph's arrays, node costs memoized) and of the ILP.

    python bench/mcts_reward.py [--models all] [--small] [--rollouts 4] [--node-limit 2000] [--cost auto]
"""
from __future__ import annotations

import random
import statistics
import time

import tables
import zoo_models

SNAPSHOT_STEPS = (3, 8, 15, 30)
EXACT = 1e-6  # relative: "found the optimum"


def rollout_snapshots(graph, rules, cost, args, seed: int):
    """E-graphs of one random rollout from the model's e-graph: (steps, e-graph copy, root)."""
    from relay_eqsat.egraph import EGraph
    from relay_eqsat.search import Limits
    from relay_eqsat.search.mcts import EGraphEnvironment

    eg = EGraph()
    root = eg.add_graph(graph)
    eg.rebuild()
    env = EGraphEnvironment(rules, root, cost.node_cost, Limits(node_limit=args.node_limit),
                            extractor="greedy-ocf")
    rng = random.Random(seed)
    steps, banned, out = 0, set(), []
    while steps < SNAPSHOT_STEPS[-1] and not env.at_limit(eg):
        choices = [a for a in range(len(rules)) if a not in banned]
        if not choices:
            break
        a = rng.choice(choices)
        if not env.apply(eg, a):
            banned.add(a)
            continue
        banned.clear()
        steps += 1
        if steps in SNAPSHOT_STEPS or env.at_limit(eg):
            out.append((steps, eg.copy(), root))
    return out


def _scaled(x: float | None, factor: float) -> float | str:
    return "-" if x is None else factor * x


def timed(fn, repeat: int):
    """(result, median seconds of ``repeat`` calls)."""
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return result, statistics.median(times)


def main(argv=None):
    ap = zoo_models.base_parser(__doc__, "mcts_reward.json")
    ap.add_argument("--rollouts", type=int, default=4, help="random rollouts per model (seeds 0..N-1)")
    ap.add_argument("--node-limit", type=int, default=2000)
    ap.add_argument("--ilp-time-limit", type=float, default=30.0)
    ap.add_argument("--repeat", type=int, default=5, help="timings per reward (median)")
    ap.add_argument("--cost", default="auto", help="cost model kind (auto, measured, learned, analytic)")
    args = ap.parse_args(argv)

    from relay_eqsat.cost import make_cost_model
    from relay_eqsat.extract import NodeCosts, egraph_problem, get_extractor, merge_cost, ocf_cost
    from relay_eqsat.pipeline import resolve_rules
    from relay_eqsat.rewrite import rules_for_target

    cost = make_cost_model(args.cost)
    rules, _ = rules_for_target(resolve_rules("default"), None)
    ilp = get_extractor("ilp-acyc")
    rows, table = [], []
    for name in zoo_models.model_names(args.models):
        small = zoo_models.small_for(args, name)
        _, _, graph = zoo_models.load_model(name, small)
        graph = graph.compact()
        memo = NodeCosts(cost.node_cost)
        snaps = []
        for seed in range(args.rollouts):
            for steps, eg, root in rollout_snapshots(graph, rules, cost, args, seed):
                ocf, t_ocf = timed(lambda: ocf_cost(eg, memo, root), args.repeat)
                merge, t_merge = timed(lambda: merge_cost(eg, memo, root), args.repeat)
                plain, t_plain = timed(lambda: merge_cost(eg, memo, root, max_lift=0), args.repeat)
                exact, t_ilp = timed(lambda: ilp.solve(egraph_problem(eg, memo, [root]),
                                                       time_limit=args.ilp_time_limit), 1)
                snaps.append({"seed": seed, "steps": steps, "egraph_nodes": eg.num_nodes, "ocf": ocf,
                              "merge": merge, "plain": plain, "ilp": exact.cost, "ilp_optimal": exact.optimal,
                              "ocf_time": t_ocf, "merge_time": t_merge, "plain_time": t_plain, "ilp_time": t_ilp})
        optimal = [s for s in snaps if s["ilp_optimal"]]

        def gaps(key):
            return [s[key] / s["ilp"] - 1 for s in optimal]
        row = {"model": name, "small": small, "snapshots": snaps, "optimal_snapshots": len(optimal)}
        for key in ("ocf", "plain", "merge"):
            g = gaps(key)
            row[key] = {"mean_gap": statistics.fmean(g) if g else None, "max_gap": max(g) if g else None,
                        "exact": sum(1 for x in g if x <= EXACT), "below_optimum": sum(1 for x in g if x < -EXACT),
                        "median_time": statistics.median(s[key + "_time"] for s in snaps) if snaps else None}
        row["ilp_median_time"] = statistics.median(s["ilp_time"] for s in snaps) if snaps else None
        rows.append(row)
        table.append([name, len(snaps), len(optimal),
                      _scaled(row["ocf"]["mean_gap"], 100), _scaled(row["ocf"]["max_gap"], 100), row["ocf"]["exact"],
                      _scaled(row["merge"]["mean_gap"], 100), _scaled(row["merge"]["max_gap"], 100),
                      row["merge"]["exact"], row["plain"]["exact"], _scaled(row["ocf"]["median_time"], 1e3),
                      _scaled(row["merge"]["median_time"], 1e3), _scaled(row["plain"]["median_time"], 1e3),
                      _scaled(row["ilp_median_time"], 1e3)])
        print(f"{name}: {len(snaps)} snapshots", flush=True)
    print()
    tables.print_table(
        ["model", "e-graphs", "ILP optimal", "ocf gap %", "ocf max %", "ocf exact", "merge gap %", "merge max %",
         "merge exact", "no-lift exact", "ocf ms", "merge ms", "no-lift ms", "ilp ms"], table,
        title=(f"Rollout rewards vs the ILP-ACyc optimum (rollout e-graphs: random single-rule steps, node limit "
               f"{args.node_limit}, {len(rules)} rules; gap = reward / optimum - 1; exact: within {EXACT:g}; "
               f"ms = median time of one reward)"))
    every = [s for r in rows for s in r["snapshots"] if s["ilp_optimal"]]
    if every:
        below = sum(1 for s in every if s["merge"] < s["ilp"] * (1 - EXACT))
        print(f"\nall models: greedy-merge exact on {sum(1 for s in every if s['merge'] <= s['ilp'] * (1 + EXACT))}"
              f"/{len(every)} e-graphs (greedy-ocf {sum(1 for s in every if s['ocf'] <= s['ilp'] * (1 + EXACT))}), "
              f"below the optimum on {below}; median reward time greedy-ocf "
              f"{1e3 * statistics.median(s['ocf_time'] for s in every):.2f} ms, greedy-merge "
              f"{1e3 * statistics.median(s['merge_time'] for s in every):.2f} ms (without lifted moves: exact on "
              f"{sum(1 for s in every if s['plain'] <= s['ilp'] * (1 + EXACT))}, "
              f"{1e3 * statistics.median(s['plain_time'] for s in every):.2f} ms), ILP-ACyc "
              f"{1e3 * statistics.median(s['ilp_time'] for s in every):.0f} ms")
    tables.write_json(args.out, {"machine": tables.machine_info(), "args": vars(args), "cost_model": repr(cost),
                                 "rules": len(rules), "rows": rows})
    return rows


if __name__ == "__main__":
    main()
