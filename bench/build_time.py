"""TVM's build time of nested element-wise chains, written whole and cut by the backend (issue 15).

TVM inlines a fused kernel's element-wise producers into their consumers, one
copy per read (``OpDef.inline_reads``: ``fast_tanh`` 19, ``fast_exp`` and a
fast sigmoid 18, ``tanh`` 5), so nested chains grow the kernel's expression
geometrically (``relay_eqsat.cost.inlining``). The backend cuts a kernel whose
expression would exceed ``MAX_INLINED_READS`` reads with ``stop_fusion``. Each
case is a dense layer (1 x 256 -> 256) followed by an op applied ``depth`` times,
built by ``relay.build`` at opt_level 3 through the backend twice: without the
cuts (``to_relay(stop_fusion=False)``) and with them (the pass's output). With
``--nasrnn`` also the program the pass extracts for the zoo's NasRNN (its
defaults on this CPU's costs; the first one found with fast gates nested).

Each build runs in a child process with a time limit (``--timeout``; past it the
build is reported as not finished and killed); the child runs the built module
on a random input and compares it with the graph's numpy evaluation (max error
relative to max |reference|).

    python bench/build_time.py [--cases fast_tanh:4,fast_sigmoid:4,tanh:8] [--nasrnn]
                               [--timeout 180] [--out bench/results/build_time.json]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import pickle
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import tables  # noqa: E402

DEFAULT_CASES = "fast_tanh:4,fast_sigmoid:4,tanh:8"
WIDTH = 256


def chain_graph(op: str, depth: int, width: int = WIDTH):
    """x [1, width] -> dense (weights N(0, 1/width)) -> ``op`` applied ``depth`` times."""
    from relay_eqsat.graph import TensorGraph

    g = TensorGraph()
    rng = np.random.default_rng(0)
    x = g.var("x", (1, width))
    w = (rng.standard_normal((width, width)) / np.sqrt(width)).astype("float32")
    y = g.add("nn.dense", [x, g.const(w, "w")], {"out_dtype": ""})
    for _ in range(depth):
        y = g.add(op, [y], dedup=False)
    g.set_output(y)
    return g


def parse_cases(text: str) -> list[tuple[str, int]]:
    """``op:depth,...`` -> [(op, depth)]: every depth from 1 to the one given."""
    from relay_eqsat import ops

    out = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        op, _, depth = item.partition(":")
        if op not in ops.OPS or ops.OPS[op].arity != 1 or ops.OPS[op].pattern != "elemwise":
            raise ValueError(f"{op!r} is not a unary element-wise op of the table")
        if not depth.isdigit() or int(depth) < 1:
            raise ValueError(f"{item!r}: the depth must be a positive integer")
        out.extend((op, d) for d in range(1, int(depth) + 1))
    return out


def _child(conn, graph_bytes: bytes, stop_fusion: bool) -> None:
    """Build the graph through the backend, run it once and send (build seconds, max error)."""
    try:
        from relay_eqsat.passes.relay.backend import graph_to_module
        from relay_eqsat.passes.runtime.build import build, output_error, random_inputs, run

        graph = pickle.loads(graph_bytes)
        mod = graph_to_module(graph, stop_fusion=stop_fusion)
        t0 = time.perf_counter()
        lib = build(mod)
        seconds = time.perf_counter() - t0
        inputs = random_inputs({graph[i].attrs["name"]: (graph[i].type.shape, graph[i].type.dtype)
                                for i in graph.inputs})
        want = graph.evaluate(inputs)
        err, why = output_error([np.asarray(want)], run(lib, inputs))
        conn.send(("ok", seconds, err, why))
    except Exception as e:  # noqa: BLE001 - reported in the table
        conn.send(("error", tables.error_text(e)))


def timed_build(graph, stop_fusion: bool, timeout: float) -> dict:
    """Build ``graph`` in a child process within ``timeout`` seconds: build seconds (None when it
    did not finish), the output's max error, or the error."""
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(child, pickle.dumps(graph), stop_fusion), daemon=True)
    t0 = time.perf_counter()
    proc.start()
    child.close()
    try:
        if not parent.poll(timeout):
            return {"build_s": None, "finished": False, "note": f"not finished after {timeout:g} s (killed)",
                    "wall_s": time.perf_counter() - t0}
        msg = parent.recv()
    except EOFError:
        proc.join(5)
        return {"build_s": None, "finished": False, "note": f"the child died (exit code {proc.exitcode})"}
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
    if msg[0] != "ok":
        return {"build_s": None, "finished": False, "note": msg[1]}
    _, seconds, err, why = msg
    return {"build_s": seconds, "finished": True, "max_error": err, "error_note": why}


def measure(name: str, graph, timeout: float) -> dict:
    from relay_eqsat.cost.inlining import fusion_cuts, inlined_reads

    cuts = fusion_cuts(graph)
    row = {"case": name, "nodes": len(graph.reachable()), "max_reads": max(inlined_reads(graph).values()),
           "max_reads_cut": max(inlined_reads(graph, cuts=cuts).values()),
           "cuts": sum(len(v) for v in cuts.values())}
    row["whole"] = timed_build(graph, False, timeout)
    row["cut"] = timed_build(graph, True, timeout) if cuts else dict(row["whole"], note="no cut: as written")
    w, c = row["whole"], row["cut"]
    print(f"{name}: reads {row['max_reads']:,} -> {row['max_reads_cut']:,} ({row['cuts']} cuts); build "
          f"{_secs(w)} whole, {_secs(c)} cut", flush=True)
    return row


def nasrnn_program():
    """The program the pass's optimizer extracts for the zoo's NasRNN on this CPU's costs."""
    import zoo_models

    from relay_eqsat.pipeline import optimize_graph
    from relay_eqsat.passes.runtime.target import host_target

    graph = zoo_models.load_model("nasrnn", False)[2]
    out, rep = optimize_graph(graph, {"target": str(host_target()), "cost": "auto"}, progress=False)
    return out, rep


def _secs(r: dict) -> str:
    return f"{r['build_s']:.2f} s" if r.get("finished") else "not finished"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("--cases", default=DEFAULT_CASES, help="op:depth,... (every depth from 1)")
    ap.add_argument("--nasrnn", action="store_true", help="also the pass's program for the zoo's NasRNN")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds per build")
    ap.add_argument("--threads", type=int, default=1, help="TVM_NUM_THREADS")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "build_time.json"))
    args = ap.parse_args(argv)
    if not args.timeout > 0:
        ap.error("--timeout must be positive")
    try:
        cases = parse_cases(args.cases)
    except ValueError as e:
        ap.error(str(e))
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    from relay_eqsat.cost.inlining import MAX_INLINED_READS

    rows = [measure(f"{op} x{depth}", chain_graph(op, depth), args.timeout) for op, depth in cases]
    extra = {}
    if args.nasrnn:
        program, rep = nasrnn_program()
        extra["nasrnn"] = {"changed": rep.changed, "predicted_speedup": rep.cost_before / rep.cost_after,
                           "ops_after": dict(program.op_counts())}
        rows.append(measure("zoo NasRNN, the pass's program", program, args.timeout))
    print()
    tables.print_table(
        ["case", "nodes", "max reads", "cuts", "reads cut", "build s whole", "build s cut", "max err cut"],
        [[r["case"], r["nodes"], f"{r['max_reads']:,}", r["cuts"], f"{r['max_reads_cut']:,}",
          r["whole"]["build_s"] if r["whole"].get("finished") else f"> {args.timeout:g}",
          r["cut"]["build_s"] if r["cut"].get("finished") else r["cut"].get("note", "-"),
          f"{r['cut']['max_error']:.1e}" if r["cut"].get("finished") else "-"] for r in rows],
        title=(f"TVM build of nested element-wise chains, whole and cut at {MAX_INLINED_READS} reads (relay.build, "
               f"opt_level 3, a child process per build, {args.timeout:g} s limit)"))
    tables.write_json(args.out, {"machine": tables.machine_info(), "args": vars(args), "limit": MAX_INLINED_READS,
                                 "cases": rows, **extra})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
