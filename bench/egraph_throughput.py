"""E-graph growth throughput: our Cython e-graph + TENSAT scheduler vs egglog.

For each zoo model (BERT and NasNet-A by default), the Relay model is
converted to a TensorGraph, inserted into an e-graph, and grown with the
TENSAT scheduler and the default rule set (k_multi=1, node limit 50,000).
We report e-nodes added per second and total time. The same workload is then
expressed in egglog (the Rust library's Python bindings, same process): the
same initial e-graph (one constructor per operator and arity, attributes as a
string) and the syntactic rules of the default set that need no shape
reasoning (commutativity, associativity, distributivity, factoring, the
dense/conv merges as multi-pattern rules), with the multi-pattern ruleset
run only in the first iteration and the rest for as many iterations as our
run took. egglog does no shape checking, so its e-graph can differ; the
comparison is of e-nodes added per second. The ratio ours/egglog goes to
``bench/results/egraph_throughput.json``.

    python bench/egraph_throughput.py [--small] [--models bert,nasnet_a] [--node-limit 50000]
"""
from __future__ import annotations

import json
import re
import time
from pathlib import Path

import zoo_models


def load_graph(name: str, small: bool):
    from relay_eqsat.passes import zoo
    from relay_eqsat.passes.relay import from_relay

    return from_relay(*zoo.get(name, small=small))


def run_ours(graph, node_limit: int, iter_limit: int, k_multi: int):
    from relay_eqsat.egraph import EGraph
    from relay_eqsat.rules import load_rules
    from relay_eqsat.search import Limits, TensatScheduler

    eg = EGraph()
    eg.add_graph(graph)
    rules = load_rules()
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


def build_egglog_program(graph, iterations: int, k_multi: int):
    used = set()
    for n in graph.nodes:
        used.add((n.op, len(n.inputs)))
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
        lines.append(f"(let n{i} ({_ctor(n.op, len(n.inputs))} \"{key}\"{' ' + args if args else ''}))")
    sched = []
    for it in range(iterations):
        sched.append("(run multi)" if it < k_multi else "")
        sched.append("(run single)")
    lines.append("(run-schedule " + " ".join(s for s in sched if s) + ")" if sched else "")
    return "\n".join(lines)


def egglog_size(egraph) -> int:
    ser = egraph.serialize([])
    nodes = json.loads(ser.to_json())["nodes"]
    return len(nodes)


def run_egglog(graph, iterations: int, k_multi: int):
    from egglog import bindings

    prog = build_egglog_program(graph, iterations, k_multi)
    head, _, run = prog.rpartition("\n")
    eg = bindings.EGraph()
    eg.run_program(*eg.parse_program(head))
    before = egglog_size(eg)
    t = time.perf_counter()
    eg.run_program(*eg.parse_program(run))
    elapsed = time.perf_counter() - t
    after = egglog_size(eg)
    return before, after, elapsed


def main(argv=None):
    ap = zoo_models.base_parser(__doc__, "egraph_throughput.json", models="bert,nasnet_a")
    ap.add_argument("--node-limit", type=int, default=50_000)
    ap.add_argument("--iter-limit", type=int, default=15)
    ap.add_argument("--k-multi", type=int, default=1)
    args = ap.parse_args(argv)
    results = []
    for name in zoo_models.model_names(args.models):
        graph = load_graph(name, zoo_models.small_for(args, name))
        eg, rep = run_ours(graph, args.node_limit, args.iter_limit, args.k_multi)
        ours_rate = rep.nodes_added / rep.total_time if rep.total_time else 0.0
        print(f"{name}: ours   {rep.nodes_before} -> {rep.nodes_after} e-nodes in {rep.total_time:.3f}s "
              f"({ours_rate:,.0f} e-nodes/s), {rep.iterations} iterations, stop: {rep.stop_reason}")
        row = dict(model=name, small=zoo_models.small_for(args, name), graph_nodes=len(graph), ours=dict(
            nodes_before=rep.nodes_before, nodes_after=rep.nodes_after, seconds=rep.total_time,
            nodes_per_second=ours_rate, iterations=rep.iterations, stop_reason=rep.stop_reason,
            blacklisted=rep.blacklisted, search=rep.search_time, apply=rep.apply_time,
            rebuild=rep.rebuild_time, filter=rep.filter_time))
        try:
            before, after, secs = run_egglog(graph, max(rep.iterations, 1), args.k_multi)
            rate = (after - before) / secs if secs else 0.0
            print(f"{name}: egglog {before} -> {after} e-nodes in {secs:.3f}s ({rate:,.0f} e-nodes/s)")
            row["egglog"] = dict(nodes_before=before, nodes_after=after, seconds=secs, nodes_per_second=rate)
            row["ratio_ours_over_egglog"] = ours_rate / rate if rate else None
            if rate:
                print(f"{name}: ratio ours/egglog (e-nodes/s) = {ours_rate / rate:.2f}")
        except ImportError as e:
            row["egglog"] = dict(error=f"egglog not installed: {e}")
        results.append(row)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")
    return results


if __name__ == "__main__":
    main()
