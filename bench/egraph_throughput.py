"""E-graph growth throughput: our Cython e-graph + TENSAT scheduler vs egglog.

For each zoo model (BERT, NasNet-A and Inception-v3 by default, full size)
and each row of ``--k-multi`` x ``--node-limits`` (default 1,2 x 10000,50000),
the Relay model is converted to a TensorGraph, inserted into an e-graph and
grown with the TENSAT scheduler and the default rule set (every rule
shape-checked: that time is ours) until saturation, the node limit or the
iteration limit. We report e-nodes added per second and the time to
saturation (or to the limit).

The same workload is then expressed in egglog (the Rust library's Python
bindings, same process): the same initial e-graph (one constructor per
operator and arity, attributes as a string; a grouped convolution has a
constructor of its own) and the rules of the default set that need no shape
reasoning (commutativity, associativity, distributivity, factoring, the
dense/conv merges as multi-pattern rules: ``SAME_RULES``), the multi-pattern
ruleset run only in the first ``k_multi`` iterations, for as many iterations
as our run took, one ``run`` per iteration, stopping early once its e-graph
reaches the node limit (sizes read between iterations, outside the timing).

``--rules`` says what our side runs (rows for each): ``same`` (the default's
first) runs only ``SAME_RULES``, the rules egglog's program expresses, so
both grow the same e-graph (the e-nodes each adds are printed side by side:
equal up to one where neither hits the limit); ours still checks every
rule's shapes and preconditions, types every new node and filters cycles,
and that time is ours. ``full`` runs our whole default rule set (splits,
reshapes, transposes, padding: rules egglog cannot express without shape
reasoning) against the same egglog program, so the e-graphs differ; its
ratio compares e-nodes added per second of different work. The ratio is
ours/egglog.

Each repetition runs in a fresh worker process (``--repeat``, default 3), so
that our process-wide caches (interned signatures and their shape inference,
application plans) start cold as in a real run; the table shows medians of
the repetitions, measured side by side in one invocation. Each row records
whether the planning modules ran compiled (``relay_eqsat/_compiled.py``;
``RELAY_EQSAT_PURE_PYTHON=1`` runs them from source, for a before/after).

    python bench/egraph_throughput.py [--small] [--models bert,nasnet_a,inception_v3]
        [--k-multi 1,2] [--node-limits 10000,50000] [--rules same,full] [--repeat 3]

``--node-limit N`` (one limit) is kept as an alias of ``--node-limits N``.
Results: ``bench/results/egraph_throughput.json`` and the printed table in
``egraph_throughput.log``.
"""
from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import tables
import zoo_models


def load_graph(name: str, small: bool):
    from relay_eqsat.passes import zoo
    from relay_eqsat.passes.relay.frontend import from_relay

    return from_relay(*zoo.get(name, small=small))


# our rules that the egglog program below expresses (``_egglog_rules``), rule for rule
SAME_RULES = ("add-comm", "add-assoc", "mul-comm", "mul-assoc", "mul-distrib-add", "mul-factor-add",
              "dense-factor-weights", "conv-factor-weights", "dense-merge", "conv-merge")
RULE_SETS = ("same", "full")


def run_ours(graph, node_limit: int, iter_limit: int, k_multi: int, rule_set: str = "full"):
    from relay_eqsat.egraph import EGraph
    from relay_eqsat.rewrite import load_rules
    from relay_eqsat.search import Limits, TensatScheduler

    eg = EGraph()
    eg.add_graph(graph)
    rules = load_rules()
    if rule_set == "same":
        rules = [r for r in rules if r.name in SAME_RULES]
        if len(rules) != len(SAME_RULES):
            raise RuntimeError(f"the default rule set lacks some of {SAME_RULES}")
    rep = TensatScheduler().run(eg, rules, Limits(node_limit=node_limit, iter_limit=iter_limit,
                                                  k_multi=k_multi, time_limit=600))
    return eg, rep


def _ctor(op: str, arity: int) -> str:
    return "O_" + re.sub(r"[^A-Za-z0-9]", "_", op) + f"_{arity}"


# syntactic rules: (name, multi, lhs facts, actions) over constructor templates
def _egglog_rules(used: set[tuple[str, int]]) -> tuple[list[str], list[str]]:
    A = _ctor("add", 2)
    M = _ctor("multiply", 2)
    D = _ctor("nn.dense", 2)
    C = _ctor("nn.conv2d", 2)
    CAT = "Concat"
    single, multi = [], []
    if ("add", 2) in used:
        single += [
            f"(rewrite ({A} s a b) ({A} s b a) :ruleset single)",
            f"(rewrite ({A} s ({A} s a b) c) ({A} s a ({A} s b c)) :ruleset single)",
        ]
    if ("multiply", 2) in used:
        single += [
            f"(rewrite ({M} s a b) ({M} s b a) :ruleset single)",
            f"(rewrite ({M} s ({M} s a b) c) ({M} s a ({M} s b c)) :ruleset single)",
        ]
        if ("add", 2) in used:
            single += [
                f"(rewrite ({M} m a ({A} s b c)) ({A} s ({M} m a b) ({M} m a c)) :ruleset single)",
                f"(rewrite ({A} s ({M} m a b) ({M} m a c)) ({M} m a ({A} s b c)) :ruleset single)",
            ]
    for op, ctor, ax in (("nn.dense", D, "0"), ("nn.conv2d", C, "0")):
        if (op, 2) in used:
            if ("add", 2) in used:
                single.append(f"(rewrite ({A} s ({ctor} p x w1) ({ctor} p x w2)) ({ctor} p x ({A} s w1 w2)) "
                              f":ruleset single)")
            multi.append(
                f"(rule ((= e1 ({ctor} p x w1)) (= e2 ({ctor} p x w2)) (!= e1 e2)) "
                f"((let s (Split ({ctor} p x ({CAT} \"{ax}\" w1 w2)))) "
                f"(union e1 (Get0 s)) (union e2 (Get1 s))) :ruleset multi)")
    return single, multi


def _egglog_op(node) -> str:
    """The operator name a node's egglog constructor is named after: a grouped convolution gets
    its own (``nn.conv2d.grouped``), so that the merge rules, which concatenate weights along the
    output channels, match plain convolutions only, as ours (``conv-merge``: ``:groups 1``) do."""
    if node.op == "nn.conv2d" and node.attrs.get("groups", 1) != 1:
        return "nn.conv2d.grouped"
    return node.op


def build_egglog_program(graph, iterations: int, k_multi: int):
    """The egglog program: declarations, rules and the initial e-graph, then one line per iteration."""
    used = set()
    for n in graph.nodes:
        used.add((_egglog_op(n), len(n.inputs)))
    ctors = sorted(used)
    lines = ["(datatype T (Concat String T T) (Split T) (Get0 T) (Get1 T))"]
    for op, arity in ctors:
        lines.append(f"(constructor {_ctor(op, arity)} (String{' T' * arity}) T)")
    lines.append("(ruleset single)")
    lines.append("(ruleset multi)")
    single, multi = _egglog_rules(used)
    lines += single + multi
    from relay_eqsat.egraph import attrs_id

    for i, n in enumerate(graph.nodes):
        key = f"{attrs_id(n.attrs)}"
        if n.op in ("var", "constant", "opaque"):
            key = f"{n.op}:{n.attrs.get('name', '')}:{n.attrs.get('key', '')}:{i if n.op == 'opaque' else ''}"
        args = " ".join(f"n{j}" for j in n.inputs)
        lines.append(f"(let n{i} ({_ctor(_egglog_op(n), len(n.inputs))} \"{key}\"{' ' + args if args else ''}))")
    head = "\n".join(lines)
    steps = [("(run-schedule (run multi) (run single))" if it < k_multi else "(run-schedule (run single))")
             for it in range(iterations)]
    return head, steps


def egglog_size(egraph) -> int:
    ser = egraph.serialize([])
    nodes = json.loads(ser.to_json())["nodes"]
    return len(nodes)


def run_egglog(graph, iterations: int, k_multi: int, max_added: int | None = None):
    """``(nodes before, nodes after, seconds, iterations run)``: egglog's side of the workload,
    one timed ``run`` per iteration, stopping once it has added ``max_added`` e-nodes (our node
    limit less our initial e-graph: egglog's count also has its string literals)."""
    from egglog import bindings

    head, steps = build_egglog_program(graph, iterations, k_multi)
    eg = bindings.EGraph()
    eg.run_program(*eg.parse_program(head))
    before = size = egglog_size(eg)
    elapsed = 0.0
    done = 0
    for step in steps:
        cmds = eg.parse_program(step)
        t = time.perf_counter()
        eg.run_program(*cmds)
        elapsed += time.perf_counter() - t
        done += 1
        size = egglog_size(eg)
        if max_added is not None and size - before >= max_added:
            break
    return before, size, elapsed, done


def plan_replay(name: str, small: bool, k_multi: int, node_limit: int, iter_limit: int, rule_set: str,
                repeat: int = 15) -> dict:
    """Planning alone: the right-hand sides one growth run planned (``application_plan`` calls),
    planned again ``repeat`` times with every planning memo cleared (as in a fresh process) and
    checked to come out identical; the median milliseconds."""
    from relay_eqsat.egraph import core
    from relay_eqsat.rewrite import application, rule as rule_mod

    calls = []
    plan = application.application_plan

    def recording(rule, raw, type_of, const_of):
        out = plan(rule, raw, type_of, const_of)
        calls.append((rule, dict(raw), type_of, const_of, out))
        return out
    application.application_plan = recording
    try:
        run_ours(load_graph(name, small), node_limit, iter_limit, k_multi, rule_set)
    finally:
        application.application_plan = plan
    times = []
    for _ in range(repeat):
        rule_mod._NODE_CACHE.clear()
        rule_mod._NORMALIZE_CACHE.clear()
        core._INFER_MEMO.clear()
        t = time.perf_counter()
        again = [plan(r, raw, ty, co) for r, raw, ty, co, _ in calls]
        times.append(time.perf_counter() - t)
        if again != [c[4] for c in calls]:
            raise RuntimeError(f"{name}: planning the same matches again gave other plans")
    return dict(model=name, small=small, rules=rule_set, k_multi=k_multi, node_limit=node_limit,
                plans=len(calls), ms=1e3 * statistics.median(times), compiled=_planning_compiled())


def _planning_compiled() -> bool:
    """Whether this process's rule planning runs compiled (its extension module) or from source."""
    import relay_eqsat.rewrite.rule as planning

    return not planning.__file__.endswith(".py")


def _compiled_title(results: list[dict]) -> str:
    return "planning modules compiled: " + "/".join("yes" if c else "no"
                                                   for c in sorted({r["compiled"] for r in results}))


def worker(name: str, small: bool, k_multi: int, node_limit: int, iter_limit: int, rule_set: str = "full") -> dict:
    """One repetition of one row, in this (fresh) process: ours, then egglog."""
    graph = load_graph(name, small)
    eg, rep = run_ours(graph, node_limit, iter_limit, k_multi, rule_set)
    ours = dict(nodes_before=rep.nodes_before, nodes_after=rep.nodes_after, seconds=rep.total_time,
                nodes_per_second=rep.nodes_added / rep.total_time if rep.total_time else 0.0,
                iterations=rep.iterations, stop_reason=rep.stop_reason, blacklisted=rep.blacklisted,
                search=rep.search_time, apply=rep.apply_time, rebuild=rep.rebuild_time, filter=rep.filter_time)
    row = dict(graph_nodes=len(graph), ours=ours, compiled=_planning_compiled())
    try:
        before, after, secs, its = run_egglog(graph, max(rep.iterations, 1), k_multi,
                                               node_limit - rep.nodes_before)
        row["egglog"] = dict(nodes_before=before, nodes_after=after, seconds=secs, iterations=its,
                             nodes_per_second=(after - before) / secs if secs else 0.0)
    except ImportError as e:
        row["egglog"] = dict(error=f"egglog not installed: {e}")
    return row


def run_row(name: str, small: bool, k_multi: int, node_limit: int, iter_limit: int, repeat: int,
            rule_set: str = "full") -> dict:
    """``repeat`` fresh worker processes for one row; medians of their figures."""
    reps = [_in_fresh_process("--worker", [name, small, k_multi, node_limit, iter_limit, rule_set])
            for _ in range(repeat)]
    first = reps[0]
    for r in reps[1:]:  # the e-graph growth is deterministic: every repetition the same sizes
        if (r["ours"]["nodes_after"], r["ours"]["iterations"]) != (first["ours"]["nodes_after"],
                                                                   first["ours"]["iterations"]):
            raise RuntimeError(f"{name}: repetitions grew different e-graphs")

    def med(side, key):
        vals = [r[side][key] for r in reps if key in r[side]]
        return statistics.median(vals) if vals else None

    ours = dict(first["ours"], seconds=med("ours", "seconds"), nodes_per_second=med("ours", "nodes_per_second"),
                search=med("ours", "search"), apply=med("ours", "apply"), rebuild=med("ours", "rebuild"),
                filter=med("ours", "filter"), seconds_all=[r["ours"]["seconds"] for r in reps])
    row = dict(model=name, small=small, rules=rule_set, k_multi=k_multi, node_limit=node_limit,
               graph_nodes=first["graph_nodes"], repeat=repeat, compiled=first["compiled"], ours=ours)
    if "error" in first["egglog"]:
        row["egglog"] = first["egglog"]
        row["ratio_ours_over_egglog"] = None
    else:
        row["egglog"] = dict(first["egglog"], seconds=med("egglog", "seconds"),
                             nodes_per_second=med("egglog", "nodes_per_second"),
                             seconds_all=[r["egglog"]["seconds"] for r in reps])
        rate = row["egglog"]["nodes_per_second"]
        row["ratio_ours_over_egglog"] = ours["nodes_per_second"] / rate if rate else None
    return row


def _ints(spec: str) -> list[int]:
    return [int(x) for x in str(spec).split(",") if x.strip()]


def main(argv=None):
    ap = zoo_models.base_parser(__doc__, "egraph_throughput.json", models="bert,nasnet_a,inception_v3")
    ap.add_argument("--node-limits", default="10000,50000", help="comma-separated node limits (rows)")
    ap.add_argument("--node-limit", type=int, default=None, help="one node limit (alias of --node-limits N)")
    ap.add_argument("--iter-limit", type=int, default=15)
    ap.add_argument("--k-multi", default="1,2", help="comma-separated k_multi values (rows)")
    ap.add_argument("--rules", default=",".join(RULE_SETS),
                    help="what our side runs, comma-separated (rows): same (the rules egglog's program "
                         "expresses) and/or full (our whole default rule set)")
    ap.add_argument("--repeat", type=int, default=3, help="fresh worker processes per row (medians)")
    ap.add_argument("--plan-replay", action="store_true",
                    help="instead: time planning alone (each row's plans planned again with cold memos)")
    ap.add_argument("--worker", default=None, help=argparse_hidden())
    ap.add_argument("--plan-worker", default=None, help=argparse_hidden())
    args = ap.parse_args(argv)
    if args.worker is not None:
        print(json.dumps(worker(*json.loads(args.worker))))
        return None
    if args.plan_worker is not None:
        print(json.dumps(plan_replay(*json.loads(args.plan_worker))))
        return None
    rule_sets = [r.strip() for r in args.rules.split(",") if r.strip()]
    if not rule_sets or any(r not in RULE_SETS for r in rule_sets):
        ap.error(f"--rules takes a comma-separated list of {', '.join(RULE_SETS)}, got {args.rules!r}")
    limits = [args.node_limit] if args.node_limit is not None else _ints(args.node_limits)
    ks = _ints(args.k_multi)
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    if args.plan_replay:
        return _plan_replays(args, rule_sets, ks, limits)
    results = [_row(name, small, k, limit, args, rule_set)
               for rule_set, name, small, k, limit in _grid(args, rule_sets, ks, limits)]
    headers = ["rules", "model", "k", "limit", "ours e-nodes", "it", "stop", "ours s", "ours e-nodes/s",
               "egglog e-nodes", "added ours/egglog", "egglog s", "egglog e-nodes/s", "ours/egglog"]
    rows = []
    for r in results:
        o, e = r["ours"], r["egglog"]
        ok = "error" not in e
        rows.append([r["rules"], r["model"], r["k_multi"], r["node_limit"], f"{o['nodes_before']}->{o['nodes_after']}",
                     o["iterations"], o["stop_reason"], o["seconds"], round(o["nodes_per_second"]),
                     f"{e['nodes_before']}->{e['nodes_after']}" if ok else "-",
                     f"{o['nodes_after'] - o['nodes_before']}/{e['nodes_after'] - e['nodes_before']}" if ok else "-",
                     e.get("seconds"), round(e["nodes_per_second"]) if ok else None,
                     r["ratio_ours_over_egglog"]])
    text = tables.print_table(headers, rows, title=f"e-graph growth, medians of {args.repeat} fresh processes; "
                              + _compiled_title(results))
    _write(Path(args.out), text, dict(machine=tables.machine_info(), repeat=args.repeat, rows=results))
    return results


def _grid(args, rule_sets, ks, limits):
    """The rows asked for: (rule set, model, small, k_multi, node limit)."""
    for rule_set in rule_sets:
        for name in zoo_models.model_names(args.models):
            small = zoo_models.small_for(args, name)
            for k in ks:
                for limit in limits:
                    yield rule_set, name, small, k, limit


def _in_fresh_process(flag: str, payload: list) -> dict:
    """This script's ``flag`` worker on ``payload`` in a new process (cold caches); its JSON line."""
    cmd = [sys.executable, str(Path(__file__).resolve()), flag, json.dumps(payload)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{flag} for {payload[0]} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _write(out: Path, text: str, payload: dict) -> None:
    tables.write_json(out, payload)
    out.with_suffix(".log").write_text(text + "\n")
    print(f"wrote {out.with_suffix('.log')}")


def _plan_replays(args, rule_sets, ks, limits) -> list[dict]:
    """``--plan-replay``: one fresh process per row; table and JSON like the growth rows'."""
    results = []
    for rule_set, name, small, k, limit in _grid(args, rule_sets, ks, limits):
        row = _in_fresh_process("--plan-worker", [name, small, k, limit, args.iter_limit, rule_set])
        print(f"[{rule_set}] {name} k_multi={k} limit={limit}: {row['plans']} plans in {row['ms']:.2f} ms",
              flush=True)
        results.append(row)
    text = tables.print_table(["rules", "model", "k", "limit", "plans", "ms (median, cold memos)"],
                              [[r["rules"], r["model"], r["k_multi"], r["node_limit"], r["plans"], r["ms"]]
                               for r in results],
                              title="planning alone; " + _compiled_title(results))
    _write(Path(args.out), text, dict(machine=tables.machine_info(), plan_replay=results))
    return results


def _row(name: str, small: bool, k: int, limit: int, args, rule_set: str) -> dict:
    """One row of the table, printed as it is measured."""
    row = run_row(name, small, k, limit, args.iter_limit, args.repeat, rule_set)
    o, e = row["ours"], row["egglog"]
    print(f"[{rule_set}] {name} k_multi={k} limit={limit}: ours {o['nodes_before']} -> {o['nodes_after']} e-nodes "
          f"in {o['seconds']:.3f}s ({o['nodes_per_second']:,.0f}/s, {o['iterations']} it, {o['stop_reason']}); "
          "egglog " + (e.get("error") or f"{e['nodes_before']} -> {e['nodes_after']} in {e['seconds']:.4f}s "
                                         f"({e['nodes_per_second']:,.0f}/s)"), flush=True)
    return row


def argparse_hidden():
    import argparse

    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
