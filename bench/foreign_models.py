"""Which shipped cost model predicts a CPU nobody measured best: every shipped model against kernels timed here.

On a CPU the project ships no model for, the pass borrows another CPU's
(``relay_eqsat.cost.nearest``: same SIMD lanes, same vendor first). This bench
times the kernels of some zoo models on this machine (``relay-eqsat measure
--no-train`` into a database of its own; ``--saturate N`` adds the kernels of
rewritten variants, which no model was trained on when no shipped table has
them) and scores every shipped model's predictions of them for the target:

- median absolute error, and the median ratio predicted/measured (the scale);
- the spread of log(predicted/measured) (what no single scale fixes), and the
  median error once the median scale is divided out;
- same-op pairs ranked right: pairs of kernels of one operator whose measured
  times differ by more than 5%, ordered the same way by the prediction (what
  the extractors' choices rest on).

Rows "all" (every kernel timed) and "unseen" (kernels in no shipped
measurement table). The model ``find_model`` picks for the target is marked.

    python bench/foreign_models.py [--models squeezenet,nasrnn,...] [--saturate 3000 --limit 300]
        [--target T] [--db FILE]

``--db`` reuses (and extends) a database; by default a fresh one under
``bench/results/``. Results: ``bench/results/foreign_models.{json,log}``.
"""
from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

import tables
import zoo_models


def measure(target: str, models: list[str], db: Path, small: bool, saturate: int | None, limit: int | None):
    cmd = [sys.executable, "-m", "relay_eqsat.cli", "measure", "--target", target, "--no-train", "--db", str(db),
           "--models", ",".join(f"zoo:{m}" for m in models), "--no-progress"]
    if small:
        cmd.append("--small")
    if saturate:
        cmd += ["--saturate", str(saturate)]
    if limit:
        cmd += ["--limit", str(limit)]
    env = dict(os.environ, TVM_NUM_THREADS=os.environ.get("TVM_NUM_THREADS", "1"))
    print(" ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=env)


def score(pred: np.ndarray, meas: np.ndarray, ops: list[str]) -> dict:
    lr = np.log(pred / meas)
    scale = float(np.exp(np.median(lr)))
    right = counted = 0
    for a, b in itertools.combinations(range(len(meas)), 2):
        if ops[a] != ops[b] or abs(meas[a] / meas[b] - 1) <= 0.05:
            continue
        counted += 1
        right += bool((meas[a] < meas[b]) == (pred[a] < pred[b]))
    return dict(kernels=len(meas), median_error=float(np.median(np.abs(pred / meas - 1))), scale=scale,
                log_spread=float(np.std(lr)), median_error_scaled=float(np.median(np.abs(pred / scale / meas - 1))),
                pairs=counted, pairs_right=right, pairs_share=right / counted if counted else None)


def main(argv=None):
    ap = zoo_models.base_parser(__doc__, "foreign_models.json",
                                models="squeezenet,nasrnn,mobilenet_v2,resnet50,bert,vit,inception_v3")
    ap.add_argument("--target", default=None, help="TVM target (default: the host's)")
    ap.add_argument("--db", default=None, help="cost database of kernels timed here (reused and extended)")
    ap.add_argument("--saturate", type=int, default=None, help="also time rewritten variants' kernels")
    ap.add_argument("--limit", type=int, default=None, help="time at most this many new kernels")
    ap.add_argument("--no-measure", action="store_true", help="score what --db holds, time nothing")
    args = ap.parse_args(argv)
    from relay_eqsat.cost.cache import CostCache, SHIPPED_MEASUREMENTS, _read_shipped, normalize_target
    from relay_eqsat.cost.learned import SHIPPED_DIR, LearnedCostModel, find_model, shipped_model_targets

    if args.target is None:
        from relay_eqsat.passes.runtime.target import host_target

        args.target = host_target()
    target = normalize_target(args.target)
    db = Path(args.db) if args.db else Path(args.out).with_suffix(".sqlite")
    if not args.no_measure:
        measure(target, zoo_models.model_names(args.models), db, args.small, args.saturate, args.limit)
    rows = [(r.instance, r.seconds) for r in CostCache(db).rows(target, "tvm-llvm")]
    if not rows:
        sys.exit(f"{db} holds no measurements for {target}")
    shipped_keys = set()
    for path in SHIPPED_MEASUREMENTS.glob("measured-tvm-llvm__*.json.gz"):
        shipped_keys |= {(op, a, sh, dt) for op, a, sh, dt, _ in _read_shipped(path)["rows"]}
    chosen = find_model(target, "tvm-llvm")
    results, table = [], []
    for model_target, path in shipped_model_targets(SHIPPED_DIR, "tvm-llvm").items():
        model = LearnedCostModel.load(path)
        for subset in ("all", "unseen"):
            sel = [(i, s) for i, s in rows if subset == "all" or i.key() not in shipped_keys]
            if not sel:
                continue
            insts = [i for i, _ in sel]
            sc = score(model.predict(insts, target), np.array([s for _, s in sel]), [i.op for i in insts])
            results.append(dict(model_target=model_target, file=path.name, chosen=path == chosen, subset=subset, **sc))
            table.append([model_target.split("-mcpu=")[-1].split()[0] + (" (picked)" if path == chosen else ""),
                          subset, sc["kernels"], f"{sc['median_error'] * 100:.1f}%", round(sc["scale"], 2),
                          round(sc["log_spread"], 3), f"{sc['median_error_scaled'] * 100:.1f}%",
                          f"{sc['pairs_right']}/{sc['pairs']} = {sc['pairs_share'] * 100:.1f}%"])
    text = tables.print_table(["model (trained on)", "subset", "kernels", "median error", "scale pred/meas",
                               "log spread", "median error, scaled", "same-op pairs ranked right"], table,
                              title=f"shipped models predicting kernels timed here ({target})")
    out = Path(args.out)
    tables.write_json(out, dict(machine=tables.machine_info(), target=target, db=str(db), models=args.models,
                                saturate=args.saturate, chosen=chosen.name if chosen else None, rows=results))
    out.with_suffix(".log").write_text(text + "\n")
    print(f"wrote {out.with_suffix('.log')}")
    return results


if __name__ == "__main__":
    main()
