"""Extraction: cost and time of every extractor on the zoo models' e-graphs (issue 4).

For each zoo model the TensorGraph (weights bound) is inserted into an
e-graph, which is extracted as it is ("initial", no rewrites) and after
TENSAT's scheduler grew it with the default rules at k_multi = 1 and 2
(node limit --node-limit). Each e-graph is written as egraph-serialize JSON
(gzipped) under bench/results/egraphs/, so extraction-gym and egglog tools can
read it, and solved by greedy (DCF), greedy-ocf, ilp-topo, ilp-acyc and maxsat
with a time limit. The table gives each extractor's cost (ms, under the cost
model --cost) and wall time (encode + solve), whether the exact ones proved
optimality, ILP-ACyc's and MaxSAT's time as a ratio to ILP-Topo's, and OCF
greedy's cost as a ratio to the optimum (the best proven-optimal cost).

Every exact extractor also reports the lower bound it proved on the optimum
(CP-SAT's bound under the time limit, corrected for the tie-break and the
integer weights' rounding; the optimum when proven): "gap" is (cost - bound) /
cost. "bound ms" is the best bound any of them proved on that e-graph, "best
exact" the exact extractor with the cheapest result and "over bound" how far
its cost is above that bound. Large e-graphs (issue 17) come from raised node
limits, one per k_multi: ``--k-multi 2,3 --node-limit 20000,50000
--no-initial``.

Goals (issue 4): ILP-ACyc or MaxSAT at least 3x faster than ILP-Topo wherever
ILP-Topo needs more than 1 s; OCF within 1% of optimal on the initial e-graph
of every zoo model. Issue 17: on every e-graph of at least 20,000 e-nodes the
best exact extractor within 1% of the optimum (or of the best proven bound) in
at most 60 s, and no exact extractor dearer than greedy.

    python bench/extraction.py [--models all] [--small] [--k-multi 1,2] [--node-limit 20000]
                               [--time-limit 60] [--cost auto] [--no-dump]
                               [--extractors greedy-ocf,ilp-acyc,ilp-acyc+tie_break=0] [--repeat 3]
    python bench/extraction.py --models bert,nasnet_a,inception_v3,vit,nasrnn --k-multi 2,3
                               --node-limit 20000,50000 --no-initial   # the large e-graphs of issue 17

An extractor may carry options (``name+key=value``); ``--repeat`` runs each
several times and counts the different programs they chose (CP-SAT's parallel
workers pick among equal-cost optima at random unless its weights are
tie-broken, the default).
"""
from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import runtime_stats
import tables
import zoo_models

EXTRACTORS = ("greedy", "greedy-ocf", "greedy-merge", "ilp-topo", "ilp-acyc", "maxsat")
EXACT = ("ilp-topo", "ilp-acyc", "maxsat")
TOPO_SLOW_S = 1.0  # the goal counts e-graphs where ILP-Topo needs more than this
SPEEDUP_GOAL = 3.0
OCF_GOAL = 0.01
LARGE_NODES = 20_000  # issue 17: "large" e-graphs, where the best exact extractor must be within
LARGE_GAP = 0.01      # this fraction of the optimum or of the best proven bound
LARGE_TIME_S = 60.0   # in at most this many seconds


def grow(graph, k_multi: int, node_limit: int, time_limit: float):
    """An e-graph of ``graph`` grown by TENSAT at ``k_multi`` (0: not grown); (egraph, root, report)."""
    from relay_eqsat.egraph import EGraph
    from relay_eqsat.rewrite import load_rules
    from relay_eqsat.search import Limits, TensatScheduler

    eg = EGraph()
    root = eg.add_graph(graph)
    rep = None
    if k_multi > 0:
        rep = TensatScheduler().run(eg, load_rules(), Limits(node_limit=node_limit, k_multi=k_multi,
                                                              time_limit=time_limit))
    return eg, root, rep


def dump(problem, path: Path) -> Path:
    """Write ``problem`` as gzipped egraph-serialize JSON."""
    from relay_eqsat.extract.serialize import problem_to_dict

    data = problem_to_dict(problem)
    # our class data are TensorType objects; egraph-serialize wants JSON: {"type": "<repr>"}
    data["class_data"] = {c: d if isinstance(d, dict) else {"type": str(d)}
                          for c, d in data.get("class_data", {}).items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        json.dump(data, f)
    return path


def parse_spec(spec: str) -> tuple[str, dict]:
    """``name[+key=value...]`` (e.g. ``ilp-acyc+tie_break=0``): the extractor and its options."""
    name, *pairs = spec.split("+")
    options = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        try:
            options[key] = json.loads(value)
        except ValueError:
            options[key] = value
    return name, options


def is_exact(spec: str) -> bool:
    return parse_spec(spec)[0] in EXACT


def run_extractors(problem, names, time_limit: float, solver: str, repeat: int = 1) -> dict:
    """Solve ``problem`` with each extractor spec ``repeat`` times; spec -> result dict (errors
    recorded, not raised): the last run's cost and status, the median wall time, and how many
    different choices the runs returned (``programs``: 1 when the extractor is deterministic)."""
    from relay_eqsat.extract import get_extractor

    out = {}
    for spec in names:
        name, options = parse_spec(spec)
        if name in ("ilp-topo", "ilp-acyc"):
            options.setdefault("solver", solver)
        try:
            times, choices = [], set()
            for _ in range(repeat):
                with runtime_stats.stopwatch() as wall:
                    sol = get_extractor(name, **options).solve(problem, time_limit=time_limit)
                times.append(wall())
                choices.add(tuple(sorted(sol.choice.items())))
            out[spec] = {"cost": sol.cost, "optimal": bool(sol.optimal), "status": sol.status,
                         "time": statistics.median(times), "times": times, "programs": len(choices),
                         "solve_time": sol.solve_time, "encode_time": sol.encode_time,
                         "bound": sol.bound, "gap": sol.gap}
        except Exception as e:  # noqa: BLE001 - a failing extractor is a result too
            out[spec] = {"error": f"{type(e).__name__}: {e}"}
    return out


def summarize(res: dict) -> dict:
    """Optimum, best bound, OCF gap and exact-solver time ratios of one e-graph's results.

    ``best_bound``: the largest lower bound any exact extractor proved (the optimum when one
    proved it); ``best_exact``: the exact extractor whose cost is least (then fastest), its cost
    over the best bound (``best_exact_gap``) and its time (costs equal up to float rounding count as
    equal); ``worse_than_greedy``: exact
    extractors that returned a dearer program than greedy-merge or greedy-ocf.
    """
    optimal = [r["cost"] for n, r in res.items() if is_exact(n) and r.get("optimal")]
    best = min(optimal) if optimal else None
    agree = None
    if len(optimal) > 1:
        agree = max(optimal) - min(optimal) <= 1e-9 * max(abs(best), 1e-30) + 1e-15
    bounds = [r["bound"] for n, r in res.items() if is_exact(n) and r.get("bound") is not None]
    best_bound = max(bounds) if bounds else None
    if best is not None:
        best_bound = best if best_bound is None else min(max(best_bound, 0.0), best)
    exact = [(r["cost"], r["time"], n) for n, r in res.items() if is_exact(n) and "cost" in r]
    best_exact = None
    if exact:  # the least cost (equal up to float rounding: the same optimum summed in another order), then fastest
        least = min(c for c, _, _ in exact)
        best_exact = min((t, n) for c, t, n in exact if c <= least * (1 + 1e-9) + 1e-15)[1]
    greedy_costs = [res[g]["cost"] for g in ("greedy-merge", "greedy-ocf") if "cost" in res.get(g, {})]
    worse = [n for c, _, n in exact if greedy_costs and c > min(greedy_costs) * (1 + 1e-12)]
    ocf = res.get("greedy-ocf", {}).get("cost")
    dcf = res.get("greedy", {}).get("cost")
    topo = res.get("ilp-topo", {}).get("time")
    return {
        "optimum": best,
        "exact_agree": agree,
        "best_bound": best_bound,
        "best_exact": best_exact,
        "best_exact_gap": (tables.ratio(res[best_exact]["cost"], best_bound) - 1
                           if best_exact and best_bound else None),
        "best_exact_time": res[best_exact]["time"] if best_exact else None,
        "worse_than_greedy": worse,
        "ocf_ratio": tables.ratio(ocf, best),
        "dcf_ratio": tables.ratio(dcf, best),
        "acyc_over_topo": tables.ratio(res.get("ilp-acyc", {}).get("time"), topo),
        "maxsat_over_topo": tables.ratio(res.get("maxsat", {}).get("time"), topo),
    }


def percent(x: float | None) -> str | None:
    return None if x is None else f"{100 * x:.2f}%"


def evaluate_goals(rows: list[dict]) -> list[dict]:
    slow = [r for r in rows if r["extractors"].get("ilp-topo", {}).get("time", 0) > TOPO_SLOW_S]
    fast_enough = []
    for r in slow:
        ratios = [x for x in (r["summary"]["acyc_over_topo"], r["summary"]["maxsat_over_topo"]) if x is not None]
        fast_enough.append(bool(ratios) and min(ratios) <= 1 / SPEEDUP_GOAL)
    detail = (f"{sum(fast_enough)}/{len(slow)} e-graphs where ILP-Topo took > {TOPO_SLOW_S:g} s"
              if slow else f"ILP-Topo never took > {TOPO_SLOW_S:g} s")
    goals = [tables.goal(f"ILP-ACyc or MaxSAT >= {SPEEDUP_GOAL:g}x faster than ILP-Topo where it needs "
                         f"> {TOPO_SLOW_S:g} s", all(fast_enough) if slow else None, detail)]
    large = [r for r in rows if r["enodes"] >= LARGE_NODES]
    if large:
        ok = [r for r in large if r["summary"]["best_exact_gap"] is not None
              and r["summary"]["best_exact_gap"] <= LARGE_GAP and r["summary"]["best_exact_time"] <= LARGE_TIME_S
              and not r["summary"]["worse_than_greedy"]]
        goals.append(tables.goal(
            f"on every e-graph of >= {LARGE_NODES:,} e-nodes the best exact extractor within {LARGE_GAP:.0%} of "
            f"the optimum or best proven bound in <= {LARGE_TIME_S:g} s, none worse than greedy",
            len(ok) == len(large), f"{len(ok)}/{len(large)} large e-graphs"))
    initial = [r for r in rows if r["config"] == "initial"]
    known = [r for r in initial if r["summary"]["ocf_ratio"] is not None]
    within = [r["model"] for r in known if r["summary"]["ocf_ratio"] <= 1 + OCF_GOAL]
    missing = [r["model"] for r in initial if r["summary"]["ocf_ratio"] is None]
    detail = f"{len(within)}/{len(known)} models within {OCF_GOAL:.0%}"
    if missing:
        detail += f"; no proven optimum for {', '.join(missing)}"
    goals.append(tables.goal(f"OCF greedy within {OCF_GOAL:.0%} of optimal on every initial e-graph",
                             (len(within) == len(initial)) if initial and not missing else
                             (False if len(within) < len(known) else None), detail))
    return goals


def main(argv=None):
    ap = zoo_models.base_parser(__doc__, "extraction.json")
    ap.add_argument("--k-multi", default="1,2", help="TENSAT k_multi values to saturate with (default 1,2)")
    ap.add_argument("--node-limit", default="20000",
                    help="node limit of the TENSAT runs: one value, or one per --k-multi value (e.g. "
                         "--k-multi 2,3 --node-limit 20000,50000)")
    ap.add_argument("--search-time-limit", type=float, default=120.0, help="seconds for each TENSAT run")
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds per exact extractor")
    ap.add_argument("--extractors", default=",".join(EXTRACTORS),
                    help="extractors, each name[+option=value...], e.g. ilp-acyc+tie_break=0")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs per extractor: the median time, and how many different programs they chose")
    ap.add_argument("--solver", default="cp-sat", choices=("cp-sat", "scip"), help="for ilp-topo and ilp-acyc")
    ap.add_argument("--cost", default="auto", help="cost model kind (auto, measured, learned, analytic)")
    ap.add_argument("--egraph-dir", default=str(zoo_models.RESULTS_DIR / "egraphs"))
    ap.add_argument("--no-dump", action="store_true", help="do not write the e-graphs as JSON")
    ap.add_argument("--no-initial", action="store_true", help="skip the initial (not grown) e-graphs")
    args = ap.parse_args(argv)

    from relay_eqsat.cost import make_cost_model
    from relay_eqsat.extract import egraph_problem

    cost = make_cost_model(args.cost)
    extractors = [e.strip() for e in args.extractors.split(",") if e.strip()]
    ks = [int(k) for k in args.k_multi.split(",") if k.strip()]
    limits = [int(x) for x in str(args.node_limit).split(",") if x.strip()]
    if len(limits) == 1:
        limits = limits * len(ks)
    if len(limits) != len(ks):
        ap.error("--node-limit takes one value or one per --k-multi value")
    configs = [(0, 0)] * (not args.no_initial) + list(zip(ks, limits))
    rows = []
    warmed = False
    for name in zoo_models.model_names(args.models):
        small = zoo_models.small_for(args, name)
        _, _, graph = zoo_models.load_model(name, small)
        for k, limit in configs:
            label = "initial" if k == 0 else f"k_multi={k}" + (f", {limit:,}" if len(set(limits)) > 1 else "")
            eg, root, rep = grow(graph, k, limit, args.search_time_limit)
            problem = egraph_problem(eg, cost.node_cost, [root])
            row = {"model": name, "small": small, "config": label, "k_multi": k,
                   "enodes": problem.num_nodes, "eclasses": problem.num_classes,
                   "blacklisted": int(problem.blacklisted.sum()),
                   "stop_reason": rep.stop_reason if rep else None,
                   "search_time": rep.total_time if rep else 0.0}
            if not args.no_dump:
                fname = (f"{name}{'-small' if small else ''}-{'initial' if k == 0 else f'k{k}'}"
                         f"{f'-{limit}' if k and len(set(limits)) > 1 else ''}.json.gz")
                row["egraph_json"] = str(dump(problem, Path(args.egraph_dir) / fname))
            if not warmed:  # solver imports and first-call set-up are not extraction time
                run_extractors(problem, extractors, args.time_limit, args.solver)
                warmed = True
            row["extractors"] = run_extractors(problem, extractors, args.time_limit, args.solver, args.repeat)
            row["summary"] = summarize(row["extractors"])
            rows.append(row)
            print(f"{name} {label}: {row['enodes']} e-nodes, {row['eclasses']} e-classes"
                  f"{', ' + row['stop_reason'] if row['stop_reason'] else ''}", flush=True)

    headers = ["model", "e-graph", "e-nodes"]
    for e in extractors:
        headers += [f"{e} ms", f"{e} s"] + ([f"{e} gap", "opt"] if is_exact(e) else []) + \
            (["progs"] if args.repeat > 1 else [])
    headers += ["bound ms", "best exact", "over bound", "acyc/topo", "maxsat/topo", "ocf/opt", "dcf/opt"]
    table = []
    for r in rows:
        line = [r["model"], r["config"], r["enodes"]]
        for e in extractors:
            x = r["extractors"].get(e, {})
            line += [tables.ms(x.get("cost")) if "error" not in x else "error", x.get("time")]
            if is_exact(e):
                line += [percent(x.get("gap")), x.get("optimal")]
            if args.repeat > 1:
                line.append(x.get("programs"))
        s = r["summary"]
        line += [tables.ms(s["best_bound"]), s["best_exact"], percent(s["best_exact_gap"]),
                 s["acyc_over_topo"], s["maxsat_over_topo"], s["ocf_ratio"], s["dcf_ratio"]]
        table.append(line)
    print()
    tables.print_table(headers, table, title=f"extraction (cost model {cost.kind}, time limit "
                                             f"{args.time_limit:g} s; ms = extracted cost, s = wall time)")
    errors = [(r["model"], r["config"], e, x["error"]) for r in rows for e, x in r["extractors"].items()
              if "error" in x]
    for m, c, e, msg in errors:
        print(f"error: {m} {c} {e}: {msg}")
    disagree = [(r["model"], r["config"]) for r in rows if r["summary"]["exact_agree"] is False]
    for m, c in disagree:
        print(f"warning: exact extractors proved different optima on {m} {c}")
    print()
    goals = evaluate_goals(rows)
    tables.write_json(args.out, {"machine": tables.machine_info(), "args": vars(args), "cost_model": repr(cost),
                                 "rows": rows, "goals": goals})
    return rows


if __name__ == "__main__":
    main()
