"""Two AutoTVM logs of one model against each other and against no log, in paired rounds.

The model (bench/models/<model>.onnx) is built at opt_level 3 untuned, under log A and under log B
(as ``tvmc compile --tuning-records`` builds it), its outputs checked against the untuned build's,
and the three timed in interleaved rounds. Log B is made first where it does not exist: B AutoTVM
trials on the model's tasks, planned and measured as ``relay-eqsat tune`` and bench/real_models.py
``--tune-trials`` do (passes/runtime/tuning.py), so that a change to the search can be compared
with a log the earlier search wrote.

    python bench/tuning_logs.py MODEL LOG_A LOG_B [--trials 128] [--rounds 9]
                                [--out bench/results/tuning_logs.json]

Nothing else may run while this times.
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
VARIANTS = ("untuned", "log A", "log B")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("log_a")
    ap.add_argument("log_b", help="made with --trials trials on the model's tasks where it does not exist")
    ap.add_argument("--trials", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--out", default="bench/results/tuning_logs.json")
    args = ap.parse_args(argv)

    from model_inputs import load_onnx
    from relay_eqsat.passes.runtime import tuning
    from relay_eqsat.passes.runtime.build import random_inputs
    from relay_eqsat.passes.runtime.target import host_target
    from under_logs import paired_under_logs

    meta = json.loads((MODELS_DIR / f"{args.model}.json").read_text())
    mod = load_onnx(MODELS_DIR / f"{args.model}.onnx", meta["inputs"])
    target = host_target()
    row: dict = {"model": args.model, "log_a": args.log_a, "log_b": args.log_b}
    if not Path(args.log_b).exists():
        plan = tuning.plan_trials(tuning.program_tasks({"the input": mod}, target), args.trials, 1)
        row["log_b_trials"] = tuning.tune(plan, args.log_b, enabled=False)
    inputs = random_inputs({s["name"]: (list(s["shape"]), s["dtype"]) for s in meta["inputs"]}, seed=0)
    timed = paired_under_logs(mod, inputs, [args.log_a, args.log_b], VARIANTS, args.rounds)
    row.update(max_error=timed["max_error"], ms=timed["ms"])
    for what, pair in {"a_over_untuned": "log A/untuned", "b_over_untuned": "log B/untuned",
                       "b_over_a": "log B/log A"}.items():
        row[what] = timed["ratios"][pair]
    tables.print_table(["model", *(f"{v} ms" for v in VARIANTS), "A / untuned", "B / untuned", "B / A (rounds B won)",
                        "max error"],
                       [[args.model, *(row["ms"][v] for v in VARIANTS), row["a_over_untuned"]["ratio"],
                         row["b_over_untuned"]["ratio"], f"{tables.fmt(row['b_over_a']['ratio'])} "
                         f"({row['b_over_a']['wins']})", row["max_error"]]],
                       title="two tuning logs of one model, paired rounds (ratios: medians of per-round ratios)")
    path = tables.write_json(args.out, {"machine": tables.machine_info(), "args": vars(args), "rows": [row]})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
