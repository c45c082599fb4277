"""``relay-eqsat profile MODEL``: where TVM spends the time of one inference.

Builds MODEL (``zoo:NAME`` or a model file, as ``relay-eqsat optimize`` loads
it) with ``relay.build`` at opt_level 3, times every fused kernel on its own
with TVM's debug executor (:func:`relay_eqsat.passes.runtime.timing.node_times`) and
prints, per kernel, its median time, its share of the kernels' total, its TVM
op pattern, the Relay ops inside it, the constant inputs and the TensorGraph
nodes it came from, then the totals per kind (conv, dense/matmul,
layout_transform, injective, reduction, pool, elementwise, other) and per
fused op sequence.

How kernels are tied to Relay and to the TensorGraph:

- *Kernel -> fused Relay function: exact.* ``relay.optimize`` runs the
  passes ``relay.build`` runs (FuseOps included) and gives every fused
  (``Primitive``) function a ``hash`` attribute; the graph JSON's kernel
  nodes carry the same ``hash``, and calls of one function are paired with
  its kernel nodes in the order both are visited. The op pattern is the
  largest ``TOpPattern`` of the function's ops (FuseOps' group pattern).
- *Fused function -> TensorGraph nodes: approximate.* The optimization
  passes drop Relay spans, so there is no recorded link back to the input
  program. Each kernel op is matched to a TensorGraph node of the same op
  (``nn.contrib_conv2d_NCHWc`` is a ``nn.conv2d``, ``add`` may be a
  ``nn.bias_add``...): first the heavy ("anchor") ops, k-th to k-th in
  order; then the other ops of those kernels, each to the earliest unmatched
  node within a few ids before the anchor (ops computing its inputs) or after
  it (its epilogue) and after the producers' nodes; then the
  kernels without an anchor the same way after their producers' nodes, except
  that a kernel of reductions and arithmetic (mean, variance, sqrt...) is the
  next normalization node (layer_norm, batch_norm: SimplifyInference splits
  one into several kernels, which share it). Nodes left over were removed or
  rewritten by TVM (batch_norm folded into convolutions, dropout...) or the
  matching missed them; they are counted. Ops TVM inserted
  (``layout_transform``) have no node.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import textwrap
import time
from collections import Counter, defaultdict
from typing import Any

from relay_eqsat import progress
from relay_eqsat.cli import add_common_arguments

from .optimize import DEFAULT_TIME_BUDGET, EXIT_BAD_INPUT, EXIT_OK, add_model_arguments, guarded, load_model

#: TVM's TOpPattern values (include/tvm/relay/op_attr_types.h)
PATTERNS = {0: "elemwise", 1: "broadcast", 2: "injective", 3: "comm_reduce", 4: "out_elemwise_fusable",
            7: "tuple", 8: "opaque"}

#: kinds in the order the summary lists them
KINDS = ("conv", "dense/matmul", "pool", "reduction", "layout_transform", "injective", "elementwise", "other")

DENSE_OPS = frozenset({"nn.dense", "nn.contrib_dense_pack", "nn.matmul", "nn.batch_matmul"})
REDUCTION_OPS = frozenset({"sum", "mean", "max", "min", "prod", "argmax", "argmin", "variance", "std",
                           "nn.softmax", "nn.fast_softmax", "nn.log_softmax", "nn.layer_norm"})

#: a kernel op -> the TensorGraph ops it may come from (default: its own name)
ORIGINS = {
    "nn.contrib_conv2d_NCHWc": ("nn.conv2d",),
    "nn.contrib_depthwise_conv2d_NCHWc": ("nn.conv2d",),
    "nn.contrib_conv2d_winograd_without_weight_transform": ("nn.conv2d",),
    "nn.contrib_dense_pack": ("nn.dense", "nn.matmul"),
    "nn.dense": ("nn.dense", "nn.matmul"),
    "nn.matmul": ("nn.matmul", "nn.dense"),
    "add": ("add", "nn.bias_add"),
    "nn.fast_softmax": ("nn.softmax",),
}

#: normalizations TVM's SimplifyInference decomposes into reductions and elementwise kernels
NORM_OPS = ("nn.layer_norm", "nn.batch_norm", "nn.instance_norm", "nn.group_norm")
NORM_PARTS = frozenset({"mean", "variance", "subtract", "add", "sqrt", "rsqrt", "divide", "multiply"})
NORM_MARKERS = frozenset({"mean", "variance", "sqrt", "rsqrt"})

#: how far after its anchor (in TensorGraph node ids) a kernel's other ops are looked for
WINDOW = 12

EXIT_CODES = """exit status:
  0  done
  2  bad input: usage, an option's value, a model file that cannot be read, --input-shapes
  3  internal error (one line; run with -v for the traceback)
  130  interrupted (Ctrl-C)"""


def add_profile_command(subparsers) -> None:
    """``relay-eqsat profile MODEL``: per fused kernel time, share, pattern, ops, graph nodes."""
    p = subparsers.add_parser(
        "profile", help="time every fused TVM kernel of a model (debug executor) and group them by kind",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXIT_CODES,
        description=textwrap.fill(
            "Build MODEL (zoo:NAME or a model file, e.g. model.onnx) with TVM at opt_level 3, time every "
            "fused kernel with TVM's debug executor (median of --repeat timings) and print per kernel its "
            "time, share, op pattern, Relay ops, constant inputs and the TensorGraph nodes it came from "
            "(approximate: TVM's passes keep no link), totals per kind and per fused op sequence.", 79))
    add_model_arguments(p)
    p.add_argument("--target", default=None, help="TVM target (default: the host CPU)")
    p.add_argument("--threads", type=int, default=None,
                   help="TVM runtime threads (sets TVM_NUM_THREADS; default: the environment's)")
    p.add_argument("--repeat", type=int, default=5, help="timings per kernel (median reported)")
    p.add_argument("--number", type=int, default=1, help="runs per timing (at least)")
    p.add_argument("--min-repeat-ms", type=int, default=5,
                   help="least duration of one timing of a kernel, in ms (0: exactly --number runs)")
    p.add_argument("--no-whole", action="store_true", help="do not time the whole inference as well")
    p.add_argument("--time-budget", type=float, default=DEFAULT_TIME_BUDGET, metavar="S",
                   help="seconds for timing the whole inference: the timings and the runs each averages are "
                        "chosen from a first run's time to fit, never fewer than 3 timings (default %(default)g)")
    p.add_argument("--top", type=int, default=25, help="kernels listed (the slowest first; 0: all)")
    p.add_argument("--json", metavar="FILE", default=None, help="write the profile as JSON")
    p.add_argument("--eqsat", action="store_true",
                   help="profile the program EqSatPass (its defaults, for --target) returns instead")
    p.add_argument("--tuning-records", default=None, metavar="LOG",
                   help="build under this AutoTVM or auto-scheduler tuning log (as tvmc compile's "
                        "--tuning-records; with --eqsat the pass decides under it too)")
    add_common_arguments(p)
    p.set_defaults(func=run_profile)


def run_profile(args) -> int:
    return guarded("profile", args.verbose, _run_profile, args)


def _bad(message: str) -> int:
    print(f"relay-eqsat profile: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _run_profile(args) -> int:
    for name in ("repeat", "number", "batch"):
        if getattr(args, name) < 1:
            return _bad(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.min_repeat_ms < 0 or args.top < 0 or not args.time_budget >= 0:
        return _bad("--min-repeat-ms, --top and --time-budget must not be negative")
    if args.threads is not None:
        if args.threads < 1:
            return _bad(f"--threads must be at least 1, got {args.threads}")
        # before anything runs a TVM kernel (constant folding does): the pool reads it once
        os.environ["TVM_NUM_THREADS"] = str(args.threads)
    import tvm

    from relay_eqsat.passes.runtime.target import host_target, runs_here

    target = args.target or host_target()
    try:
        tvm.target.Target(target)
    except Exception as e:  # noqa: BLE001 - TVM raises its own error types for a bad target
        return _bad(f"bad --target {target!r}: {str(e).strip().splitlines()[-1] if str(e).strip() else e}")
    if not runs_here(target):
        return _bad(f"--target {target!r} does not run on this machine; profiling runs the kernels here")
    from relay_eqsat.passes.runtime.records import load_records

    try:  # RecordsError (a ValueError): the log and its line named
        records = load_records(args.tuning_records) if args.tuning_records else None
        mod, params = load_model(args.model, args.small, args.batch, args.input_shapes)
    except (ValueError, OSError) as e:  # ModelFileError and ShapesError are ValueErrors
        return _bad(str(e))
    eqsat = None
    if args.eqsat:
        mod, params, eqsat = optimized(mod, params, target, records)
    result = profile_module(mod, params, target, repeat=args.repeat, number=args.number,
                            min_repeat_ms=args.min_repeat_ms, whole=not args.no_whole,
                            time_budget=args.time_budget, records=records)
    result["model"] = args.model + (" (small)" if args.small else "") + (" after EqSatPass" if eqsat else "")
    result["eqsat"] = eqsat
    print(format_profile(result, args.top))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        print(f"profile: {args.json}")
    return EXIT_OK


# -- profiling ---------------------------------------------------------------------------

def make_pass(target: str, records=None):
    """The pass ``--eqsat`` runs: EqSatPass with its defaults for ``target`` (under the tuning
    ``records``, a TuningRecords, when given)."""
    from relay_eqsat.passes.relay.eqsat_pass import EqSatPass

    return EqSatPass(target=target, **({"tuning_records": records.path} if records is not None else {}))


def optimized(mod, params: dict | None, target: str, records=None) -> tuple[Any, None, str]:
    """``(module, None, summary)``: ``mod`` with ``params`` bound, through ``EqSatPass`` with its
    defaults for ``target`` (what a user's pipeline runs; under ``records``), and one line on what
    it did."""
    from tvm import relay

    from relay_eqsat.pipeline import rules_in_words

    from relay_eqsat.passes.relay.eqsat_pass import bind_params

    mod = relay.transform.InferType()(mod)
    mod = bind_params(mod, params) if params else mod
    p = make_pass(target, records)
    out = p(mod)
    rep = p.last_report or {}
    rules = rules_in_words(rep.get("rules_in_result") or {})
    text = (f"{'rewritten' if rep.get('changed') else 'kept its input'} ({rep.get('reason', '?')}); "
            f"predicted {rep.get('predicted_speedup', 1.0):.3f}x"
            + (f"; the program's rewrites: {rules}" if rules and rep.get("changed") else ""))
    return out, None, text


def profile_module(mod, params: dict | None = None, target: str | None = None, repeat: int = 5, number: int = 1,
                   min_repeat_ms: int = 5, whole: bool = True,
                   time_budget: float = DEFAULT_TIME_BUDGET, records=None) -> dict[str, Any]:
    """The profile of a Relay module (``params`` bound as constants) built at opt_level 3 for
    ``target`` (default: the host), under the tuning ``records`` (a TuningRecords) when given: a
    JSON-able dict (see :func:`format_profile`). The whole inference is timed within
    ``time_budget`` seconds (:func:`~relay_eqsat.passes.runtime.timing.time_within`)."""
    import tvm
    from tvm import relay

    from relay_eqsat.passes.relay.eqsat_pass import bind_params
    from relay_eqsat.passes.relay.frontend import UnsupportedProgram, from_relay
    from relay_eqsat.passes.runtime.build import build, executor, random_inputs, thread_count
    from relay_eqsat.passes.runtime.timing import node_times, time_within
    from relay_eqsat.passes.runtime.target import host_target
    from relay_eqsat.passes.runtime.records import Hits, applied, pass_config

    target = target or host_target()
    mod = relay.transform.InferType()(mod)
    mod = bind_params(mod, params) if params else mod
    try:
        graph = from_relay(mod)
        graph_note = None
    except UnsupportedProgram as e:
        graph, graph_note = None, f"no TensorGraph: {e}"
    # the fused functions as the build makes them: under the records (a tuned layout can differ)
    with progress.ticking("optimizing with TVM's passes"), applied(records), \
            tvm.transform.PassContext(opt_level=3, config=pass_config(records)):
        fused, _ = relay.optimize(mod, target=target)
    functions = fused_functions(fused["main"])
    hits = Hits() if records is not None else None
    with progress.ticking("building"):
        lib = build(mod, target=target, records=records, hits=hits)
    inputs = random_inputs({v.name_hint: ([int(d) for d in v.checked_type.shape], str(v.checked_type.dtype))
                            for v in mod["main"].params}, seed=0)
    dev = tvm.cpu(0)
    with progress.ticking("timing every kernel (debug executor)"):
        times = node_times(lib, dev, inputs, number, repeat, min_repeat_ms)
    kernels = kernel_rows(times, functions)
    unmatched = match_graph_nodes(kernels, graph) if graph is not None else {}
    total = sum(k["seconds"] for k in kernels)
    for k in kernels:
        k["share"] = k["seconds"] / total if total > 0 else 0.0
    whole_seconds = whole_timing = None
    if whole:
        m = executor(lib, dev)
        for name, value in inputs.items():
            m.set_input(name, value)
        t0 = time.perf_counter()
        with progress.ticking("running the whole inference"):
            m.run()
        timing = time_within([m], time_budget, [time.perf_counter() - t0])
        whole_seconds, whole_timing = timing.medians[0], timing.describe()
    threads = thread_count()
    tuned = None if records is None else {"records": records.describe(), "workloads_asked": len(hits.asked),
                                          "workloads_found": len(hits.found)}
    return {"model": None, "target": target, "threads": threads, "repeat": repeat, "number": number,
            "tuning": tuned,
            "min_repeat_ms": min_repeat_ms, "kernel_seconds": total, "whole_seconds": whole_seconds,
            "whole_timing": whole_timing,
            "kernels": kernels, "kinds": kind_totals(kernels), "sequences": sequence_totals(kernels),
            "graph_nodes": None if graph is None else sum(1 for n in graph.nodes if _is_op_node(n)),
            "graph_nodes_unmatched": unmatched, "graph_note": graph_note,
            "mapping": "kernel -> fused Relay function exact (hash); -> TensorGraph nodes approximate "
                       "(matched by op and order)"}


def fused_functions(main) -> dict[str, list[dict]]:
    """hash -> one dict per call of a fused (Primitive) function of ``main``, in post-order:
    its ``ops`` (post-order), ``pattern``, ``const_inputs`` (argument positions bound to constants)
    and ``shape`` (the output type)."""
    import tvm
    from tvm import relay

    out: dict[str, list[dict]] = defaultdict(list)

    def visit(expr):
        if not (isinstance(expr, relay.Call) and isinstance(expr.op, relay.Function)):
            return
        fn = expr.op
        if fn.attrs is None or "Primitive" not in fn.attrs or "hash" not in fn.attrs:
            return
        ops: list[str] = []
        patterns: list[int] = []

        def inner(e):
            if isinstance(e, relay.Call) and isinstance(e.op, tvm.ir.Op):
                ops.append(str(e.op.name))
                pattern = e.op.get_attr("TOpPattern")
                patterns.append(8 if pattern is None else int(pattern))

        relay.analysis.post_order_visit(fn.body, inner)
        out[str(fn.attrs["hash"])].append({
            "ops": ops, "pattern": PATTERNS.get(max(patterns, default=8), str(max(patterns, default=8))),
            "const_inputs": [i for i, a in enumerate(expr.args) if isinstance(a, relay.Constant)],
            "shape": str(expr.checked_type)})

    relay.analysis.post_order_visit(main.body, visit)
    return out


def kernel_rows(times: list[tuple[dict, float | None]], functions: dict[str, list[dict]]) -> list[dict]:
    """One row per timed kernel node of the graph JSON (``__nop`` nodes left out), in execution order."""
    used: Counter = Counter()
    index = {}  # graph node index -> kernel row
    rows = []
    for i, (node, seconds) in enumerate(times):
        if node["op"] != "tvm_op" or node["attrs"].get("func_name") == "__nop":
            continue
        attrs = node["attrs"]
        h = attrs.get("hash")
        calls = functions.get(h, [])
        if used[h] < len(calls):
            fn, exact = calls[used[h]], True
            used[h] += 1
        elif calls:
            fn, exact = calls[-1], True
        else:  # no fused function with this hash: the ops from the kernel's name only
            fn, exact = {"ops": [attrs["func_name"]], "pattern": "?", "const_inputs": [], "shape": "?"}, False
        row = {"node": node["name"], "func_name": attrs["func_name"], "seconds": float(seconds or 0.0),
               "ops": fn["ops"], "pattern": fn["pattern"], "kind": kernel_kind(fn["ops"], fn["pattern"]),
               "const_inputs": fn["const_inputs"], "shape": fn["shape"], "function_matched": exact,
               "layout": {k: attrs[k] for k in ("data_layout", "kernel_layout", "out_layout", "layout",
                                                 "src_layout", "dst_layout") if attrs.get(k)},
               "producers": sorted({index[j] for j, *_ in node["inputs"] if j in index}),
               "graph_nodes": []}
        index[i] = len(rows)
        rows.append(row)
    return rows


def kernel_kind(ops: list[str], pattern: str) -> str:
    """The kind a kernel is counted under, by its heaviest op."""
    if any("conv" in op for op in ops):
        return "conv"
    if any(op in DENSE_OPS for op in ops):
        return "dense/matmul"
    if any("pool" in op for op in ops):
        return "pool"
    if any(op in REDUCTION_OPS for op in ops) or pattern == "comm_reduce":
        return "reduction"
    if pattern in ("elemwise", "broadcast"):
        return "elementwise"
    if pattern == "injective":
        return "layout_transform" if "layout_transform" in ops else "injective"
    return "other"


def _is_anchor(op: str) -> bool:
    return "conv" in op or op in DENSE_OPS or "pool" in op or op in REDUCTION_OPS


def _is_op_node(node) -> bool:
    return node.op not in ("var", "constant", "tuple", "tuple_get_item")


def _graph_op(node) -> str:
    return node.attrs["name"] if node.op == "opaque" else node.op


def match_graph_nodes(kernels: list[dict], graph) -> dict[str, int]:
    """Fill each kernel's ``graph_nodes`` (``[id, op]`` pairs, approximate; see the module
    docstring) and return the TensorGraph ops no kernel took, counted by op."""
    free: dict[str, list[int]] = defaultdict(list)
    for i, n in enumerate(graph.nodes):
        if _is_op_node(n):
            free[_graph_op(n)].append(i)
    taken: set[int] = set()

    def take(op: str, lo: int = -1, hi: float = float("inf")) -> int | None:
        best = None
        for origin in ORIGINS.get(op, (op,)):
            for i in free.get(origin, ()):
                if i not in taken and lo < i <= hi:
                    best = i if best is None or i < best else best
                    break
        if best is not None:
            taken.add(best)
        return best

    anchor: dict[int, int] = {}
    for k, row in enumerate(kernels):  # 1. anchors: k-th to k-th, in order
        for op in row["ops"]:
            if _is_anchor(op):
                i = take(op)
                if i is not None:
                    row["graph_nodes"].append(i)
                    anchor.setdefault(k, i)

    def bound(k: int, skip: tuple = ()) -> int:
        """The largest node id of the kernel's producers (ops in ``skip`` not counted)."""
        return max([-1] + [i for p in kernels[k]["producers"] for i in kernels[p]["graph_nodes"]
                           if _graph_op(graph.nodes[i]) not in skip])

    for k in sorted(anchor):  # 2. the other ops of anchored kernels: near the anchor, on its side
        a, lo = anchor[k], bound(k)
        seen_anchor = False
        for op in kernels[k]["ops"]:  # post-order: ops before the anchor compute its inputs
            if _is_anchor(op):
                seen_anchor = True
                continue
            i = take(op, max(a, lo), a + WINDOW) if seen_anchor else take(op, max(lo, a - WINDOW), a - 1)
            if i is not None:
                kernels[k]["graph_nodes"].append(i)
    norms = sorted(i for op in NORM_OPS for i in free.get(op, ()))
    for k, row in enumerate(kernels):  # 3. the rest: a normalization TVM decomposed, else op by op
        if k in anchor:
            continue
        ops = set(row["ops"])
        if ops <= NORM_PARTS and ops & NORM_MARKERS:
            lo = bound(k, NORM_OPS)
            i = next((i for i in norms if i > lo), None)
            if i is not None:  # one normalization node feeds several kernels: shared
                taken.add(i)
                row["graph_nodes"].append(i)
                continue
        lo = bound(k)
        for op in row["ops"]:
            i = take(op, lo, lo + WINDOW if lo >= 0 else float("inf"))
            if i is not None:
                row["graph_nodes"].append(i)
    for row in kernels:
        row["graph_nodes"] = [[i, _graph_op(graph.nodes[i])] for i in sorted(set(row["graph_nodes"]))]
    left = Counter(_graph_op(graph.nodes[i]) for ids in free.values() for i in ids if i not in taken)
    return dict(left.most_common())


def kind_totals(kernels: list[dict]) -> dict[str, dict]:
    """kind -> kernels, seconds, share (the kinds present, in :data:`KINDS` order)."""
    out = {}
    for kind in KINDS:
        rows = [k for k in kernels if k["kind"] == kind]
        if rows:
            out[kind] = {"kernels": len(rows), "seconds": sum(k["seconds"] for k in rows),
                         "share": sum(k["share"] for k in rows)}
    return out


def sequence_totals(kernels: list[dict]) -> list[dict]:
    """Totals per fused op sequence (e.g. ``nn.contrib_conv2d_NCHWc+add+nn.relu``), slowest first."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for k in kernels:
        groups["+".join(k["ops"])].append(k)
    rows = [{"ops": ops, "kind": ks[0]["kind"], "kernels": len(ks), "seconds": sum(k["seconds"] for k in ks),
             "share": sum(k["share"] for k in ks), "median_seconds": statistics.median(k["seconds"] for k in ks)}
            for ops, ks in groups.items()]
    return sorted(rows, key=lambda r: -r["seconds"])


# -- printing ------------------------------------------------------------------------------

def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def _table(header: list[str], rows: list[list[str]], left: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]

    def line(r):
        return "  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()

    return [line(header), "-" * len(line(header))] + [line(r) for r in rows]


def _graph_text(pairs: list) -> str:
    return ", ".join(f"#{i} {op}" for i, op in pairs) if pairs else "-"


def format_profile(result: dict, top: int = 25) -> str:
    """The printed profile: header, totals per kind, per fused op sequence, the slowest kernels."""
    kernels = result["kernels"]
    lines = [f"model:   {result['model']}  (target {result['target']}, {result['threads']} thread"
             f"{'s' if result['threads'] != 1 else ''})",
             f"kernels: {len(kernels)}, sum of kernel medians {_ms(result['kernel_seconds'])} ms"
             + (f"; whole inference (graph executor, median) {_ms(result['whole_seconds'])} ms"
                if result.get("whole_seconds") is not None else ""),
             f"timing:  debug executor, median of {result['repeat']} timings per kernel "
             f"(each >= {result['number']} runs and >= {result['min_repeat_ms']} ms)"
             + (f"; whole inference: {result['whole_timing']}" if result.get("whole_timing") else "")]
    if result.get("tuning"):
        t = result["tuning"]
        lines.append(f"tuning:  built under {t['records']}: {t['workloads_found']} of the "
                     f"{t['workloads_asked']} workloads TVM looked up had a record (the rest ran untuned)")
    if result.get("eqsat"):
        lines.append(f"eqsat:   {result['eqsat']}")
    lines.append("")
    kinds = [[kind, str(v["kernels"]), _ms(v["seconds"]), f"{100 * v['share']:.1f}%"]
             for kind, v in sorted(result["kinds"].items(), key=lambda kv: -kv[1]["seconds"])]
    lines += _table(["kind", "kernels", "ms", "share"], kinds, {0}) + [""]
    seqs = result["sequences"][:top or None]
    lines += _table(["fused op sequence", "kind", "kernels", "ms", "share"],
                    [[s["ops"], s["kind"], str(s["kernels"]), _ms(s["seconds"]), f"{100 * s['share']:.1f}%"]
                     for s in seqs], {0, 1})
    if len(result["sequences"]) > len(seqs):
        lines.append(f"... {len(result['sequences']) - len(seqs)} more sequences")
    lines.append("")
    ranked = sorted(kernels, key=lambda k: -k["seconds"])[:top or None]
    lines += _table(["#", "ms", "share", "kind", "pattern", "ops", "const in", "output", "graph nodes (approx.)"],
                    [[str(kernels.index(k)), _ms(k["seconds"]), f"{100 * k['share']:.1f}%", k["kind"], k["pattern"],
                      "+".join(k["ops"]), ",".join(map(str, k["const_inputs"])) or "-", k["shape"],
                      _graph_text(k["graph_nodes"])] for k in ranked], {3, 4, 5, 6, 7, 8})
    if len(kernels) > len(ranked):
        lines.append(f"... {len(kernels) - len(ranked)} more kernels (--top 0 lists all)")
    lines.append("")
    if result.get("graph_note"):
        lines.append(f"graph nodes: {result['graph_note']}")
    elif result.get("graph_nodes") is not None:
        left = result["graph_nodes_unmatched"]
        lines.append(f"graph nodes: {result['graph_nodes']} TensorGraph op nodes; "
                     f"{sum(left.values())} in no kernel (folded or rewritten by TVM)"
                     + (": " + ", ".join(f"{op} x{n}" for op, n in left.items()) if left else ""))
    lines.append(f"mapping: {result['mapping']}")
    return "\n".join(lines)
