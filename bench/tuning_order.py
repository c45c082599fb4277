"""Which configurations a few tuning trials should try: the register-tile order against random search.

For the largest tasks of each model that ``passes/runtime/config_order.py`` orders (x86 convolutions,
depthwise convolutions, dense_pack / dense_nopack), and for BERT-base's linear layers (``--dense``:
128 x 768 -> 3072, 3072 -> 768 and the swapped operands the pass makes), this times, as
``relay-eqsat tune`` does (AutoTVM, built and timed here one trial at a time): TVM's fallback
configuration (every task's first trial), the first K configurations of the order, and the K that
random search (the tuner before the order, seeded by the task as tune() seeds it) would have tried
next. What a task gains from K trials of each search is the fallback's time over the best of the
fallback and those K.

    python bench/tuning_order.py [--models squeezenet1_1,mobilenet_v2] [--tasks 6] [--trials 8] [--dense]
                                 [--out bench/results/tuning_order.json]

Writes the JSON and prints the table (per task, then the geometric means).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import tables  # noqa: E402

MODELS_DIR = Path(__file__).resolve().parent / "models"
BERT_DENSE = ((128, 3072, 768), (3072, 128, 768), (128, 768, 3072), (768, 128, 3072))


def model_tasks(name: str, target: str, count: int) -> list:
    from model_inputs import load_onnx
    from relay_eqsat.passes.runtime import config_order, tuning

    meta = json.loads((MODELS_DIR / f"{name}.json").read_text())
    mod = load_onnx(MODELS_DIR / f"{name}.onnx", meta["inputs"])
    tasks = [t for t in tuning.program_tasks({name: mod}, target) if t.task.name in config_order.TEMPLATES]
    return sorted(tasks, key=lambda t: (-t.flop, t.key))[:count]


def dense_tasks(target: str) -> list:
    import numpy as np
    import tvm
    from tvm import relay

    from relay_eqsat.passes.runtime import tuning

    out = []
    for m, n, k in BERT_DENSE:
        x = relay.var("x", shape=(m, k))
        w = relay.const(np.zeros((n, k), "float32"))
        mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], relay.nn.dense(x, w))))
        out += tuning.program_tasks({f"dense {m}x{k} -> {n}": mod}, target)
    return out


def measure_task(t, trials: int, option) -> dict:
    """The fallback, the order's first ``trials`` and random search's next ``trials``, timed."""
    from tvm import autotvm
    from tvm.autotvm.measure import MeasureInput, create_measure_batch

    from relay_eqsat.passes.runtime import config_order, tuning

    task = t.task
    fallback = tuning.fallback_index(task)
    seen = [] if fallback is None else [fallback]
    ordered = [i for i in config_order.ranked(task, str(task.target)) if i not in seen][:trials]
    rnd = autotvm.tuner.RandomTuner(task)
    rnd.visited.extend(seen)
    with tuning._seeded(t.key):  # as tune() draws them
        drawn = [c.index for c in rnd.next_batch(trials)]
    picks = [("fallback", i) for i in seen] + [("ordered", i) for i in ordered] + [("random", i) for i in drawn]
    results = create_measure_batch(task, option)([MeasureInput(task.target, task, task.config_space.get(i))
                                                  for _, i in picks])
    rows = [{"search": s, "index": i, "config": str(task.config_space.get(i)),
             "seconds": float(min(r.costs)) if r.error_no == 0 else None} for (s, i), r in zip(picks, results)]

    def best(search):
        times = [r["seconds"] for r in rows if r["search"] in ("fallback", search) and r["seconds"]]
        return min(times) if times else None

    base = next((r["seconds"] for r in rows if r["search"] == "fallback"), None)
    return {"task": task.name, "args": str(task.args), "programs": sorted(t.programs), "flop": t.flop,
            "space": len(task.config_space), "fallback_s": base, "ordered_best_s": best("ordered"),
            "random_best_s": best("random"), "rows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="squeezenet1_1,mobilenet_v2")
    ap.add_argument("--tasks", type=int, default=6, help="the largest tasks of each model (by work)")
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--dense", action="store_true", help="BERT-base's linear layers too")
    ap.add_argument("--out", default="bench/results/tuning_order.json")
    args = ap.parse_args(argv)

    from relay_eqsat.passes.runtime import tuning
    from relay_eqsat.passes.runtime.target import host_target

    target = host_target()
    groups = [(m, model_tasks(m, target, args.tasks)) for m in args.models.split(",") if m]
    if args.dense:
        groups.append(("bert dense", dense_tasks(target)))
    option = tuning.measure_option()
    rows, table = [], []
    for model, tasks in groups:
        for t in tasks:
            r = dict(measure_task(t, args.trials, option), model=model)
            rows.append(r)
            base = r["fallback_s"]
            table.append([model, r["task"], r["args"][:60], tables.ms(base), tables.ms(r["ordered_best_s"]),
                          tables.ms(r["random_best_s"]), tables.ratio(base, r["ordered_best_s"]),
                          tables.ratio(base, r["random_best_s"])])
            print(" | ".join(tables.fmt(c) for c in table[-1]), flush=True)

    def gain(key):
        vals = [r["fallback_s"] / r[key] for r in rows if r["fallback_s"] and r[key]]
        return tables.geomean(vals), sum(v > 1.02 for v in vals), len(vals)

    summary = {k: dict(zip(("geomean", "faster_than_fallback", "tasks"), gain(k)))
               for k in ("ordered_best_s", "random_best_s")}
    text = tables.print_table(["model", "task", "workload", "fallback ms", f"ordered best ms ({args.trials})",
                               f"random best ms ({args.trials})", "ordered gain", "random gain"], table,
                              title=f"{args.trials} trials a task after the fallback, {target}, 1 thread")
    lines = [f"{k.split('_')[0]}: geometric mean gain over the fallback {tables.fmt(v['geomean'])}, "
             f"more than 2% faster on {v['faster_than_fallback']} of {v['tasks']} tasks" for k, v in summary.items()]
    print("\n".join(lines))
    out = Path(args.out)
    tables.write_json(out, dict(machine=tables.machine_info(), args=vars(args), target=target, summary=summary,
                                rows=rows))
    out.with_suffix(".txt").write_text(text + "\n" + "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
