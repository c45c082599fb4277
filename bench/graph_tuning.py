"""Whether AutoTVM's graph tuner helps a tuned model here (issue 58, what a tuned program leaves).

Under a tuning log each convolution runs its record's channel blocking, and TVM puts a
``layout_transform`` between two whose blocks differ (``relay-eqsat profile MODEL
--tuning-records LOG`` lists them). AutoTVM's graph tuner (``DPTuner``) chooses each
convolution's record with those transforms priced. For each model and its AutoTVM log (from
``bench/real_models.py --tune-trials B``: ``<logs>/<model>.opt3_tuned.log``):

1. the log is completed: a task it has no trial for gets its fallback configuration measured
   (the graph tuner needs a record for every convolution), into a copy;
2. the graph tuner times the layout transforms (trials timed here, as the pass's tuning does) and
   writes its choice, a log of one record per convolution;
3. the model built untuned, under the log and under the graph tuner's choice is checked for equal
   outputs and timed in paired rounds.

    python bench/graph_tuning.py --logs bench/results/bench_tuning_1/tuning [--models mobilenet_v2]
        [--out bench/results/graph_tuning.json]

Nothing else may run while this times.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import tables  # noqa: E402

MODELS_DIR = Path(__file__).resolve().parent / "models"
VARIANTS = ("untuned", "log", "graph")


def graph_tune(name: str, log: Path, work: Path, rounds: int) -> dict:
    from tvm import relay
    from tvm.autotvm.graph_tuner import DPTuner

    from model_inputs import load_onnx
    from relay_eqsat.passes.runtime import tuning
    from relay_eqsat.passes.runtime.build import random_inputs
    from relay_eqsat.passes.runtime.target import host_target
    from under_logs import paired_under_logs

    meta = json.loads((MODELS_DIR / f"{name}.json").read_text())
    mod = load_onnx(MODELS_DIR / f"{name}.onnx", meta["inputs"])
    target = host_target()
    row: dict = {"model": name, "log": str(log)}
    full = work / f"{name}.full.log"
    shutil.copy(log, full)
    tasks = tuning.program_tasks({"the input": mod}, target)
    for t in tasks:
        t.trials = 1  # trials in the log count: only a task without one is measured (its fallback first)
    t0 = time.perf_counter()
    row["fallbacks_measured"] = tuning.tune(tasks, str(full), enabled=False)
    row["fallbacks_s"] = time.perf_counter() - t0
    chosen = work / f"{name}.graph.log"
    t0 = time.perf_counter()
    shapes = {s["name"]: tuple(s["shape"]) for s in meta["inputs"]}
    gt = DPTuner(mod["main"], shapes, str(full), [relay.op.get("nn.conv2d")], target,
                 log_file=str(work / "graph_tuner.log"))
    gt.benchmark_layout_transform(min_exec_num=20, runner=tuning._here_runner_class()(number=20, repeat=1, timeout=20))
    gt.run()
    gt.write_opt_sch2record_file(str(chosen))
    row["graph_tuning_s"] = time.perf_counter() - t0
    inputs = random_inputs({s["name"]: (list(s["shape"]), s["dtype"]) for s in meta["inputs"]}, seed=0)
    timed = paired_under_logs(mod, inputs, [full, chosen], VARIANTS, rounds)
    row.update(max_error=timed["max_error"], ms=timed["ms"])
    for what, pair in {"log_over_untuned": "log/untuned", "graph_over_untuned": "graph/untuned",
                       "graph_over_log": "graph/log"}.items():
        row[what] = timed["ratios"][pair]
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--logs", required=True, help="folder of <model>.opt3_tuned.log (real_models.py --tune-trials)")
    ap.add_argument("--models", default="mobilenet_v2")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--out", default="bench/results/graph_tuning.json")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in [m.strip() for m in args.models.split(",") if m.strip()]:
            log = Path(args.logs) / f"{name}.opt3_tuned.log"
            try:
                rows.append(graph_tune(name, log, Path(tmp), args.rounds))
            except Exception as e:  # noqa: BLE001 - a model that fails is a row that says why
                rows.append({"model": name, "log": str(log), "error": tables.error_text(e)})
            print(f"{name}: {rows[-1].get('error') or rows[-1]['ms']}", flush=True)
    tables.print_table(
        ["model", "untuned ms", "log ms", "graph ms", "log / untuned", "graph / log", "fallbacks", "graph tuning s"],
        [[r["model"], *(r.get("ms", {}).get(v) for v in VARIANTS),
          (r.get("log_over_untuned") or {}).get("ratio"), (r.get("graph_over_log") or {}).get("ratio"),
          r.get("fallbacks_measured"), r.get("graph_tuning_s")] for r in rows],
        title="AutoTVM's graph tuner over a model's tuning log (paired rounds; ratios are medians of per-round ratios)")
    path = tables.write_json(args.out, {"machine": tables.machine_info(), "args": vars(args), "rows": rows})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
