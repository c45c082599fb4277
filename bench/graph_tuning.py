"""The convolutions' records chosen together over a model's tuning log (issue 58, what a tuned program leaves).

Under a tuning log each convolution runs its record's channel blocking, and TVM puts a
``layout_transform`` between two whose blocks differ (``relay-eqsat profile MODEL
--tuning-records LOG`` lists them). The pass's tuning ends by choosing the convolutions' records
together with those transforms (``relay_eqsat.passes.runtime.layouts.choose``: AutoTVM's graph
tuner, the transforms timed here, the choice timed against each kernel's fastest record in paired
rounds and kept only when faster). This runs that step on a copy of a model's log from
``bench/real_models.py --tune-trials B`` (``<logs>/<model>.<variant>.log``; ``opt3_tuned``: tuning
alone's log, the model's input program), so what it gains tuning alone can be read beside the
pass's own (its report's ``layouts``):

    python bench/graph_tuning.py --logs bench/results/bench_tuning_11/tuning [--models mobilenet_v2]
        [--variant opt3_tuned] [--out bench/results/graph_tuning.json]

Nothing else may run while this times.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import tables  # noqa: E402

MODELS_DIR = Path(__file__).resolve().parent / "models"


def choose_on_copy(name: str, log: Path, work: Path, rounds: int) -> dict:
    """``layouts.choose`` for the model ``name``'s input program over a copy of ``log``: its report."""
    from model_inputs import load_onnx
    from relay_eqsat.passes.runtime import layouts
    from relay_eqsat.passes.runtime.target import host_target

    meta = json.loads((MODELS_DIR / f"{name}.json").read_text())
    mod = load_onnx(MODELS_DIR / f"{name}.onnx", meta["inputs"])
    copy = work / f"{name}.log"
    shutil.copy(log, copy)
    return {"model": name, "log": str(log), **layouts.choose(mod, str(copy), host_target(), rounds=rounds or None)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--logs", required=True, help="folder of <model>.<variant>.log (real_models.py --tune-trials)")
    ap.add_argument("--models", default="mobilenet_v2")
    ap.add_argument("--variant", default="opt3_tuned", help="whose log: opt3_tuned (tuning alone, default)")
    ap.add_argument("--rounds", type=int, default=0, help="paired rounds (default: the pass's, layouts.ROUNDS)")
    ap.add_argument("--out", default="bench/results/graph_tuning.json")
    args = ap.parse_args(argv)
    if args.rounds < 0:
        ap.error("--rounds must be at least 1 (0: the pass's)")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in [m.strip() for m in args.models.split(",") if m.strip()]:
            log = Path(args.logs) / f"{name}.{args.variant}.log"
            try:
                if not log.is_file():
                    raise FileNotFoundError(f"no log at {log}")
                rows.append(choose_on_copy(name, log, Path(tmp), args.rounds))
            except Exception as e:  # noqa: BLE001 - a model that fails is a row that says why
                rows.append({"model": name, "log": str(log), "error": tables.error_text(e)})
            print(f"{name}: {rows[-1].get('error') or rows[-1]['reason']}", flush=True)
    tables.print_table(
        ["model", "convolutions", "changed", "blocks raised", "fallbacks timed", "choice / fastest each", "rounds won", "kept", "s"],
        [[r["model"], r.get("convolutions"), r.get("changed"), r.get("raised"), r.get("fallbacks"), r.get("ratio"),
          f"{r['wins']}/{r['rounds']}" if "wins" in r else None, r.get("kept"), r.get("seconds")] for r in rows],
        title="the convolutions' records chosen together over a model's tuning log (paired rounds; "
              "ratio: median of per-round ratios)")
    path = tables.write_json(args.out, {"machine": tables.machine_info(), "args": vars(args), "rows": rows})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
