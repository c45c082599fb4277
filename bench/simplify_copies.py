"""Shared work TVM's SimplifyExpr copies, per zoo model, and what the pass's form of the program saves.

This TVM's ``SimplifyExpr`` (run by every ``relay.build``) rewrites
``add(x, x)`` to ``multiply(x, 2)`` without keeping the program's sharing,
so operators upstream of it that are used elsewhere are built once per use
(``relay_eqsat.passes.simplify_copies``). For each zoo model the bench counts
the operator calls it adds to the model's own module (weights bound, as the
user hands it to ``relay.build``) and to the same program in the frontend's
form (``to_relay(from_relay(...))``, what EqSatPass hands back; it writes
``add(x, x)`` as ``multiply(x, 2)``). Where they differ, both are built at
opt_level 3 and the kernels TVM runs are counted, their outputs compared, and
both timed in paired rounds (``--rounds``, order rotating; one thread unless
``TVM_NUM_THREADS`` says otherwise): the speedup is the median per-round
ratio.

    python bench/simplify_copies.py [--models all] [--small] [--small-models nasnet_a] [--rounds 9]

Results: ``bench/results/simplify_copies.{json,log}``.
"""
from __future__ import annotations

import json
import os
import statistics
import sys

import tables
import zoo_models


def kernels(lib) -> int:
    """Kernels the graph executor runs (its ``tvm_op`` nodes)."""
    return sum(1 for n in json.loads(lib.get_graph_json())["nodes"] if n["op"] == "tvm_op")


def run_model(name: str, small: bool, rounds: int, min_repeat_ms: int) -> dict:
    import tvm

    from relay_eqsat.passes.eqsat_pass import bind_params
    from relay_eqsat.passes.relay import from_relay, to_relay
    from relay_eqsat.passes.runtime import build, executor, output_error, paired_ratio, run, time_rounds
    from relay_eqsat.passes.simplify_copies import copied_ops
    from tvm import relay

    mod, params, graph = zoo_models.load_model(name, small)
    own = relay.transform.InferType()(bind_params(mod, params))
    form = relay.transform.InferType()(tvm.IRModule.from_expr(to_relay(from_relay(own))))
    row = {"model": name, "small": small, "copies_own": copied_ops(own), "copies_form": copied_ops(form)}
    if row["copies_own"] == row["copies_form"]:
        return row  # the same program for TVM: nothing to build
    inputs = zoo_models.model_inputs(name, small)
    libs = [build(m) for m in (own, form)]
    row["kernels_own"], row["kernels_form"] = kernels(libs[0]), kernels(libs[1])
    mods = [executor(lib) for lib in libs]
    outs = [run(m, inputs) for m in mods]
    row["max_error"] = output_error(outs[0], outs[1])[0]
    t_own, t_form = time_rounds(mods, repeat=rounds, min_repeat_ms=min_repeat_ms)
    ratio, wins = paired_ratio(t_own, t_form)
    row.update(ms_own=statistics.median(t_own) * 1e3, ms_form=statistics.median(t_form) * 1e3,
               speedup=1.0 / ratio, rounds_won=f"{wins}/{rounds}")
    return row


def main(argv=None) -> int:
    ap = zoo_models.base_parser(__doc__, "simplify_copies.json")
    ap.add_argument("--rounds", type=int, default=9, help="paired timing rounds")
    ap.add_argument("--min-repeat-ms", type=int, default=200, help="least duration of one timing")
    args = ap.parse_args(argv)
    os.environ.setdefault("TVM_NUM_THREADS", "1")  # before TVM's runtime starts its thread pool
    rows = []
    for name in zoo_models.model_names(args.models):
        row = run_model(name, zoo_models.small_for(args, name), args.rounds, args.min_repeat_ms)
        rows.append(row)
        print(f"{name}{' (small)' if row['small'] else ''}: SimplifyExpr adds {row['copies_own']} operator calls "
              f"to the model's module, {row['copies_form']} to the pass's form"
              + (f"; kernels {row['kernels_own']} -> {row['kernels_form']}, {row['ms_own']:.4f} -> "
                 f"{row['ms_form']:.4f} ms ({row['speedup']:.2f}x, {row['rounds_won']} rounds)"
                 if "speedup" in row else ""), flush=True)
    text = tables.print_table(
        ["model", "ops copied: own", "pass's form", "kernels: own", "pass's form", "own ms", "pass's form ms",
         "speedup (rounds)", "max error"],
        [[r["model"] + (" (small)" if r["small"] else ""), r["copies_own"], r["copies_form"],
          r.get("kernels_own", "-"), r.get("kernels_form", "-"), tables.fmt(r.get("ms_own")),
          tables.fmt(r.get("ms_form")),
          f"{r['speedup']:.2f}x ({r['rounds_won']})" if "speedup" in r else "-", tables.fmt(r.get("max_error"))]
         for r in rows],
        title="TVM's SimplifyExpr: shared work copied (opt_level 3, "
              f"TVM_NUM_THREADS={os.environ.get('TVM_NUM_THREADS')})")
    out = tables.write_json(args.out, {"machine": tables.machine_info(), "args": vars(args), "rows": rows})
    out.with_suffix(".log").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
