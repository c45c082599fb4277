"""What TVM builds worse than the pass's form of the same program, per model: SimplifyExpr's copies and
FoldScaleAxis's run-time weight scaling.

This TVM's ``SimplifyExpr`` (run by every ``relay.build``) rewrites
``add(x, x)`` to ``multiply(x, 2)`` without keeping the program's sharing,
so operators upstream of it that are used elsewhere are built once per use
(``relay_eqsat.passes.relay.simplify_copies``); its ``FoldScaleAxis`` folds a
per-channel scale computed at run time (a squeeze-and-excitation gate, a
hardswish before a batch-1 dense) into the weight, which is then scaled and
re-packed on every inference (``relay_eqsat.passes.relay.scale_guard``). For each
model the bench counts both in the model's own module (weights bound, as the
user hands it to ``relay.build``) and in the same program in the frontend's
form (``to_relay(from_relay(...))``, what EqSatPass hands back: it writes
``add(x, x)`` as ``multiply(x, 2)`` and guards run-time scales with a
``copy``). Where they differ, both are built at opt_level 3 and the kernels
TVM runs are counted, their outputs compared, and both timed in paired rounds
(``--rounds``, order rotating; one thread unless ``TVM_NUM_THREADS`` says
otherwise): the speedup is the median per-round ratio. ``--onnx`` adds models
exported by ``bench/real_models.py`` (``bench/models/NAME.onnx``), no search
either.

    python bench/simplify_copies.py [--models all] [--small] [--small-models nasnet_a] [--rounds 9]
                                    [--onnx mobilenet_v3_large,efficientnet_b0,...]

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
    from relay_eqsat.passes.relay.eqsat_pass import bind_params
    from tvm import relay

    mod, params, _ = zoo_models.load_model(name, small)
    own = relay.transform.InferType()(bind_params(mod, params))
    return compare_forms({"model": name, "small": small}, own, zoo_models.model_inputs(name, small), rounds,
                         min_repeat_ms)


def run_onnx(name: str, models_dir: str, rounds: int, min_repeat_ms: int) -> dict:
    """An export of ``bench/real_models.py`` (its cached ONNX file, seeded inputs) as the user loads it."""
    from pathlib import Path

    import real_models
    from tvm import relay

    path = Path(models_dir) / f"{name}.onnx"
    meta = json.loads(path.with_suffix(".json").read_text())
    own = relay.transform.InferType()(real_models.load_onnx(path, meta["inputs"]))
    return compare_forms({"model": name, "small": False, "onnx": True}, own,
                         real_models.make_inputs(meta["inputs"]), rounds, min_repeat_ms)


def compare_forms(row: dict, own, inputs: dict, rounds: int, min_repeat_ms: int) -> dict:
    """``row`` with the copies and run-time scaled weights of ``own`` and of its frontend form and,
    where they differ, both built, checked and timed."""
    import tvm

    from relay_eqsat.passes.relay.frontend import from_relay
    from relay_eqsat.passes.relay.backend import to_relay
    from relay_eqsat.passes.runtime.build import build, executor, output_error, run
    from relay_eqsat.passes.runtime.timing import paired_ratio, time_rounds
    from relay_eqsat.passes.relay.scale_guard import runtime_scaled_weights
    from relay_eqsat.passes.relay.simplify_copies import copied_ops
    from tvm import relay

    form = relay.transform.InferType()(tvm.IRModule.from_expr(to_relay(from_relay(own))))
    row.update(copies_own=copied_ops(own), copies_form=copied_ops(form),
               scaled_own=runtime_scaled_weights(own), scaled_form=runtime_scaled_weights(form))
    if (row["copies_own"], row["scaled_own"]) == (row["copies_form"], row["scaled_form"]):
        return row  # the same program for TVM: nothing to build
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
    ap.add_argument("--onnx", default="", metavar="NAMES",
                    help="also these exports of bench/real_models.py (comma-separated; cached in --models-dir)")
    ap.add_argument("--models-dir", default=str(zoo_models.RESULTS_DIR.parent / "models"), help="exported ONNX cache")
    args = ap.parse_args(argv)
    os.environ.setdefault("TVM_NUM_THREADS", "1")  # before TVM's runtime starts its thread pool
    jobs = [(name, lambda n=name: run_model(n, zoo_models.small_for(args, n), args.rounds, args.min_repeat_ms))
            for name in zoo_models.model_names(args.models)]
    jobs += [(name, lambda n=name: run_onnx(n, args.models_dir, args.rounds, args.min_repeat_ms))
             for name in (s.strip() for s in args.onnx.split(",")) if name]
    rows = []
    for name, job in jobs:
        row = job()
        rows.append(row)
        print(f"{name}{' (small)' if row['small'] else ''}: SimplifyExpr adds {row['copies_own']} operator calls "
              f"to the model's module, {row['copies_form']} to the pass's form; FoldScaleAxis scales "
              f"{row['scaled_own']} weights at run time, {row['scaled_form']} in the pass's form"
              + (f"; kernels {row['kernels_own']} -> {row['kernels_form']}, {row['ms_own']:.4f} -> "
                 f"{row['ms_form']:.4f} ms ({row['speedup']:.2f}x, {row['rounds_won']} rounds)"
                 if "speedup" in row else ""), flush=True)
    text = tables.print_table(
        ["model", "ops copied: own", "pass's form", "weights scaled at run time: own", "pass's form",
         "kernels: own", "pass's form", "own ms", "pass's form ms", "speedup (rounds)", "max error"],
        [[r["model"] + (" (small)" if r["small"] else ""), r["copies_own"], r["copies_form"], r["scaled_own"],
          r["scaled_form"], r.get("kernels_own", "-"), r.get("kernels_form", "-"), tables.fmt(r.get("ms_own")),
          tables.fmt(r.get("ms_form")),
          f"{r['speedup']:.2f}x ({r['rounds_won']})" if "speedup" in r else "-", tables.fmt(r.get("max_error"))]
         for r in rows],
        title="What TVM builds worse than the pass's form: SimplifyExpr's copies, FoldScaleAxis's run-time "
              f"weight scaling (opt_level 3, TVM_NUM_THREADS={os.environ.get('TVM_NUM_THREADS')})")
    out = tables.write_json(args.out, {"machine": tables.machine_info(), "args": vars(args), "rows": rows})
    out.with_suffix(".log").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
