"""Differential fuzzing, long runs: random graphs through the whole pass, compared with the input.

Graph i is built from the i-th recipe of ``relay_eqsat.testing.fuzz.draw_recipes(N, seed)``. The pass
(``optimize_graph``, small limits: ``relay_eqsat.testing.fuzz.PASS_OPTIONS``) runs on it ``--runs`` times:
the (scheduler, final extractor) pairs of the registries in turn, each for a CPU target or a
GPU one (so the rules marked ``avoid cpu`` run too), under the analytic cost or the same
cost jittered per node (``relay_eqsat.testing.fuzz.JitterCost``: extraction then picks rewritten
forms the real model would not), with TENSAT's cycle filter (efficient, vanilla, none),
``k_multi`` (1, 2) and the MCTS seed varied, and one run in seven stopped by a 150-node
limit (mid-iteration). Each result must be a valid acyclic graph with the input's
interface that computes the input's outputs (numpy reference, seeded random inputs, a
tolerance scaled to the magnitudes the input computes). Every ``--tvm-every``-th graph is
also translated to Relay with its results, type-checked, built for the host and run, and
compared with numpy; each Relay program is read back by the frontend and that graph compared too.

A failure is a miscompile (a result computes something else or changed the interface) or
a crash (the pass raised); each is reduced (steps dropped, choices zeroed while it still
fails) and printed and saved with its reproducer: ``Recipe.from_dict(...).build()``.

    python bench/fuzz.py --graphs 1000 [--seed 0] [--runs 4] [--tvm-every 10] [--out bench/results/fuzz.json]
"""
from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections import Counter, defaultdict
from pathlib import Path

import tables

RESULTS = Path(__file__).resolve().parent / "results"


def parse_args(argv=None) -> argparse.Namespace:
    doc = __doc__.splitlines()
    ap = argparse.ArgumentParser(description=doc[0], epilog="\n".join(doc[1:]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graphs", type=int, default=100, help="random graphs to run (default 100)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the recipes (default 0)")
    ap.add_argument("--max-steps", type=int, default=6, help="motifs per graph, at most (default 6)")
    ap.add_argument("--runs", type=int, default=4, help="pass configurations per graph (default 4)")
    ap.add_argument("--tvm-every", type=int, default=10, metavar="K",
                    help="build and run every K-th graph and its results with TVM (0: never; default 10)")
    ap.add_argument("--node-limit", type=int, default=800, help="e-graph node limit (default 800)")
    ap.add_argument("--time-limit", type=float, default=5.0,
                    help="seconds for the search, and for extraction (default 5)")
    ap.add_argument("--out", default=str(RESULTS / "fuzz.json"), help="JSON result file")
    args = ap.parse_args(argv)
    if args.graphs < 1 or args.runs < 1 or args.tvm_every < 0:
        ap.error("--graphs and --runs must be >= 1, --tvm-every >= 0")
    return args


#: search knobs varied between runs (the first of each is the default): TENSAT's cycle filter, the
#: iterations multi-pattern rules run in, and a small node limit (the search stops mid-iteration)
CYCLE_FILTERS = ("efficient", "vanilla", "none")
K_MULTI = (1, 2)


def configuration(i: int, j: int, options: dict) -> dict:
    """The j-th pass configuration of graph i: every (scheduler, extractor) pair in turn, with the
    target (CPU, GPU), the cost (analytic, jittered) and the search knobs changing at other rates."""
    from relay_eqsat.testing import fuzz

    pairs = [(s, e) for s in fuzz.searches() for e in fuzz.extractors()]
    k = i * 7 + j  # 7 is prime to the 18 pairs: consecutive graphs start at other pairs
    search, extractor = pairs[k % len(pairs)]
    target = fuzz.CPU_TARGET if (i + j) % 2 == 0 else fuzz.GPU_TARGET
    jitter = None if (i // 2 + j) % 2 == 0 else i
    knobs = {"cycle_filter": CYCLE_FILTERS[(i // 3 + j) % 3], "k_multi": K_MULTI[(i // 5 + j) % 2], "seed": i}
    if (i + 2 * j) % 7 == 6:
        knobs["node_limit"] = 150
    return {"search": search, "extractor": extractor, "target": target, "jitter": jitter,
            "options": {**options, **knobs}}


def run_graph(graph, ref, configs):
    from relay_eqsat.testing import fuzz

    return [fuzz.check_pass(graph, ref=ref, **c) for c in configs]


def tvm_check(graph, results, ref) -> list[str]:
    """Translate the input and each changed result to Relay (type-checked), build them for the host,
    run them, and compare their outputs with numpy's; also read each Relay program back with the
    frontend and compare what that graph computes."""
    from relay_eqsat.testing import fuzz
    from relay_eqsat.passes.relay.frontend import from_relay
    from relay_eqsat.passes.relay.backend import graph_to_module, opaque_evaluator
    from relay_eqsat.passes.runtime.build import build_and_run

    signature = [(graph[i].attrs["name"], graph[i].type) for i in graph.inputs]
    problems = []
    for what, g in [("input", graph)] + [(f"result of {r.search}/{r.extractor}", r.output)
                                         for r in results if r.output is not None and r.changed]:
        try:
            mod = graph_to_module(g, signature=signature)
            outputs = build_and_run(mod, ref.inputs).outputs
        except Exception as e:  # noqa: BLE001 - reported
            problems.append(f"TVM cannot build/run the {what}: {tables.error_text(e)}")
            continue
        _, why = fuzz.compare(ref, outputs)
        if why is not None:
            problems.append(f"TVM runs the {what} differently from numpy: {why}")
        try:
            _, why = fuzz.compare(ref, from_relay(mod).evaluate(ref.inputs, opaque_evaluator()))
        except Exception as e:  # noqa: BLE001 - reported
            why = tables.error_text(e)
        if why is not None:
            problems.append(f"the frontend reads the Relay of the {what} back differently: {why}")
    return problems


def reduce_recipe(recipe, fails):
    """A smaller recipe that still ``fails``: steps dropped, then choices set to 0, one at a time."""
    from relay_eqsat.testing.fuzz import Recipe

    steps = list(recipe.steps)
    k = 0
    while k < len(steps) and len(steps) > 1:
        trial = Recipe(tuple(steps[:k] + steps[k + 1:]), recipe.seed)
        if fails(trial):
            steps = list(trial.steps)
        else:
            k += 1
    for k, (motif, choices) in enumerate(steps):
        choices = list(choices)
        for c in range(len(choices)):
            if choices[c]:
                old, choices[c] = choices[c], 0
                trial = steps[:k] + [(motif, tuple(choices))] + steps[k + 1:]
                if fails(Recipe(tuple(trial), recipe.seed)):
                    steps = trial
                else:
                    choices[c] = old
    return Recipe(tuple(steps), recipe.seed)


def failure_record(i, recipe, res):
    """A failure with its reproducer, reduced to a small recipe that fails the same way."""
    from relay_eqsat.testing import fuzz

    config = {"search": res.search, "extractor": res.extractor, "target": res.target,
              "jitter": None if res.cost == "analytic" else int(res.cost.split(":")[1]), "options": res.options}

    def fails(r):
        return fuzz.check_pass(r.build(), **config).status == res.status

    small = reduce_recipe(recipe, fails)
    return {"graph": i, "status": res.status, "config": config, "message": res.message,
            "recipe": recipe.to_dict(), "reduced_recipe": small.to_dict(), "reduced_graph": repr(small.build()),
            "reproducer": (f"relay_eqsat.testing.fuzz.check_pass(relay_eqsat.testing.fuzz.Recipe.from_dict({small.to_dict()}).build(), "
                           + ", ".join(f"{k}={v!r}" for k, v in config.items()) + ")")}


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor()


def main(argv=None) -> dict:
    args = parse_args(argv)
    from relay_eqsat.testing import fuzz
    from relay_eqsat import ops
    from relay_eqsat.rewrite import load_rules

    options = {"node_limit": args.node_limit, "time_limit": args.time_limit, "extract_time_limit": args.time_limit}
    rule_names = [r.name for r in load_rules("default")]
    fired, ops_in, ops_out, status = Counter(), Counter(), Counter(), Counter()
    seconds, failures, tvm_problems = defaultdict(list), [], []
    runs = changed = tvm_graphs = graphs = 0
    t0 = time.perf_counter()
    recipes = fuzz.draw_recipes(args.graphs, args.seed, args.max_steps)
    try:
        for i, recipe in enumerate(recipes):
            try:
                graph = recipe.build()
                ref = fuzz.reference(graph)
            except Exception as e:  # noqa: BLE001 - a generator bug: reported, the run goes on
                status["generator error"] += 1
                failures.append({"graph": i, "status": "generator error", "message": tables.error_text(e),
                                 "recipe": recipe.to_dict()})
                print(f"graph {i}: generator error {tables.error_text(e)}: {recipe.to_dict()}", flush=True)
                continue
            ops_in.update(graph.op_counts())
            results = run_graph(graph, ref, [configuration(i, j, options) for j in range(args.runs)])
            for res in results:
                runs += 1
                status[res.status] += 1
                changed += res.changed
                fired.update(res.rules_fired)
                ops_out.update(res.ops_after)
                seconds[f"{res.search}/{res.extractor}"].append(res.seconds)
                if not res.ok:
                    rec = failure_record(i, recipe, res)
                    failures.append(rec)
                    print(f"graph {i}: {res.describe()}\n  reproducer: {rec['reproducer']}\n"
                          f"{rec['reduced_graph']}", flush=True)
            if args.tvm_every and i % args.tvm_every == 0:
                tvm_graphs += 1
                for problem in tvm_check(graph, results, ref):
                    tvm_problems.append({"graph": i, "problem": problem, "recipe": recipe.to_dict()})
                    print(f"graph {i}: {problem}\n  recipe: {recipe.to_dict()}", flush=True)
            graphs += 1
            if graphs % 50 == 0 or graphs == len(recipes):
                print(f"{graphs}/{len(recipes)} graphs, {runs} runs ({changed} changed), "
                      f"{sum(fired.values())} rewrites, {len(fired)} rules, {status['miscompile']} miscompiles, "
                      f"{status['crash']} crashes, {len(tvm_problems)} TVM problems, "
                      f"{time.perf_counter() - t0:.0f} s", flush=True)
    except KeyboardInterrupt:
        print(f"interrupted after {graphs} graphs", flush=True)
    wall = time.perf_counter() - t0

    drawable = sorted(set(ops.OPS) - set(fuzz.EXCLUDED_OPS))
    summary = {
        "graphs": graphs, "runs": runs, "changed_runs": changed, "rewrites": int(sum(fired.values())),
        "rules_fired": sum(1 for r in rule_names if fired[r]), "rules_total": len(rule_names),
        "ops_covered": sum(1 for o in drawable if ops_in[o]), "ops_drawable": len(drawable),
        "miscompiles": status["miscompile"], "crashes": status["crash"],
        "generator_errors": status["generator error"], "tvm_graphs": tvm_graphs,
        "tvm_problems": len(tvm_problems), "seconds": wall, "cpu": cpu_name(),
    }
    print()
    tables.print_table(["graphs", "runs", "changed", "rewrites", "rules fired", "ops covered", "miscompiles",
                        "crashes", "TVM graphs", "TVM problems", "time s"],
                       [[graphs, runs, changed, summary["rewrites"], f"{summary['rules_fired']}/{len(rule_names)}",
                         f"{summary['ops_covered']}/{len(drawable)}", summary["miscompiles"], summary["crashes"],
                         tvm_graphs, len(tvm_problems), wall]],
                       title=f"Differential fuzzing: seed {args.seed}, {args.runs} pass runs per graph ({cpu_name()})")
    print()
    tables.print_table(["rule", "applications"], [[r, fired[r]] for r in sorted(rule_names, key=lambda r: -fired[r])
                                                  if fired[r]], title="Rewrites per rule")
    never = [r for r in rule_names if not fired[r]]
    print(f"\nrules never fired ({len(never)}): {', '.join(never) or '-'}")
    print(f"ops never drawn: {', '.join(o for o in drawable if not ops_in[o]) or '-'}")
    print()
    tables.print_table(["scheduler/extractor", "runs", "median ms", "max ms"],
                       [[k, len(v), 1e3 * statistics.median(v), 1e3 * max(v)] for k, v in sorted(seconds.items())],
                       title="Time of one pass run")
    tables.goal("no miscompiles", summary["miscompiles"] == 0, f"{summary['miscompiles']} in {runs} runs")
    tables.goal("no crashes", summary["crashes"] == 0, f"{summary['crashes']} in {runs} runs")
    data = {"machine": tables.machine_info(), "args": vars(args), "summary": summary,
            "pass_options": {**fuzz.PASS_OPTIONS, **options},
            "rules": {r: fired[r] for r in rule_names}, "rules_never_fired": never,
            "ops_covered": {o: ops_in[o] for o in drawable if ops_in[o]},
            "ops_in_results": dict(ops_out), "excluded_ops": fuzz.EXCLUDED_OPS,
            "seconds_per_run": {k: {"runs": len(v), "median": statistics.median(v), "max": max(v)}
                                for k, v in seconds.items()},
            "failures": failures, "tvm_problems": tvm_problems}
    tables.write_json(args.out, data)
    return data


if __name__ == "__main__":
    for name in ("topi", "autotvm", "strategy"):  # TVM's per-build schedule warnings ("... is not optimized")
        logging.getLogger(name).setLevel(logging.ERROR)
    main()
