"""bench/foreign_models.py: scoring shipped models against kernels timed on this CPU."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

foreign = pytest.importorskip("foreign_models")


def test_score_counts_same_op_pairs_that_differ_and_divides_out_the_scale():
    meas = np.array([1.0, 2.0, 4.0, 1.02, 3.0])
    ops = ["a", "a", "a", "a", "b"]
    pred = 2 * np.array([1.0, 4.0, 3.0, 1.0, 9.0])  # 2x too slow; 2 and 4 swapped
    s = foreign.score(pred, meas, ops)
    # pairs of op a differing by > 5%: (0,1) (0,2) (1,2) (1,3) (2,3); (0,3) are within 5%
    assert s["pairs"] == 5 and s["pairs_right"] == 4
    assert s["scale"] == pytest.approx(2.0)  # ratios 2, 4, 1.5, 1.96, 6: median 2
    exact = foreign.score(meas * 3, meas, ops)
    assert exact["scale"] == pytest.approx(3) and exact["log_spread"] == pytest.approx(0, abs=1e-12)
    assert exact["median_error_scaled"] == pytest.approx(0, abs=1e-12) and exact["pairs_share"] == 1


def test_bench_scores_every_shipped_model_and_marks_the_one_picked(tmp_path):
    from relay_eqsat.cost import CostCache
    from relay_eqsat.cost.learned import SHIPPED_DIR, find_model, shipped_model_targets
    from test_cost import _synthetic_samples

    target = "llvm -mtriple=x86_64-linux-gnu -mcpu=rocketlake"
    db = tmp_path / "here.sqlite"
    cache = CostCache(db)
    for inst, t in _synthetic_samples(30):
        cache.put(inst, target, "tvm-llvm", t, 3)
    out = tmp_path / "fm.json"
    foreign.main(["--db", str(db), "--no-measure", "--target", target, "--out", str(out)])
    data = json.loads(out.read_text())
    shipped = shipped_model_targets(SHIPPED_DIR, "tvm-llvm")
    assert {r["model_target"] for r in data["rows"]} == set(shipped)
    assert {r["subset"] for r in data["rows"]} == {"all", "unseen"}  # most synthetic shapes: in no shipped table
    picked = [r for r in data["rows"] if r["chosen"]]
    assert picked and {r["file"] for r in picked} == {find_model(target, "tvm-llvm").name}
    distinct = len(list(cache.rows(target, "tvm-llvm")))
    assert all(r["kernels"] == distinct for r in data["rows"] if r["subset"] == "all")
    assert all(0 < r["kernels"] <= distinct and 0 <= r["pairs_right"] <= r["pairs"] for r in data["rows"])
    assert out.with_suffix(".log").read_text().count("(picked)") == 2
