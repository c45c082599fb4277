"""bench/dense_columns.py: kernels set against the nearest well-blocked width, the model's share beside."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

dense_columns = pytest.importorskip("dense_columns")


def test_compare_sets_each_badly_blocked_width_against_the_nearest_well_blocked_one():
    from relay_eqsat.cost.simd import column_efficiency

    secs = {(128, 768, 1000): 57e-3, (128, 768, 1024): 1.2e-3, (128, 768, 3072): 5.9e-3,
            (128, 768, 49): 0.15e-3, (128, 768, 64): 0.07e-3, (1, 768, 48): 6e-6, (2, 768, 48): None}
    rows = {(r["M"], r["N"]): r for r in dense_columns.compare(secs, 16)}
    assert set(rows) == {(128, 1000), (128, 49)}  # no reference for one row, no time for two
    r = rows[(128, 1000)]
    assert r["ref_N"] == 1024 and r["block"] == 25 and r["row_tile"] == 8
    assert r["measured_share"] == pytest.approx((1000 / 57e-3) / (1024 / 1.2e-3))
    assert r["model_share"] == column_efficiency(25, 8, 16)
    assert rows[(128, 49)]["ref_N"] == 64 and rows[(128, 49)]["block"] == 7
    # AVX2: 48 blocks by 16, a multiple of the lanes
    assert dense_columns.well_blocked(48, 8) and not dense_columns.well_blocked(48, 16)


@pytest.mark.tvm
def test_run_measures_and_writes_the_table(tmp_path):
    pytest.importorskip("tvm")
    out, db = tmp_path / "columns.json", tmp_path / "c.sqlite"
    rc = dense_columns.main(["--shapes", "16:32:24,16:32:32", "--repeat", "1", "--min-repeat-ms", "0",
                             "--db", str(db), "--out", str(out)])
    data = json.loads(out.read_text())
    assert rc == 0 and [(k["M"], k["N"]) for k in data["kernels"]] == [(16, 24), (16, 32)]
    assert all(k["seconds"] > 0 for k in data["kernels"])
    if data["lanes"] == 16:  # AVX-512: 24 is a split block, set against 32
        assert [(r["N"], r["ref_N"]) for r in data["rows"]] == [(24, 32)]
    assert db.is_file()  # the timings stay for a second run
    with pytest.raises(SystemExit):
        dense_columns.main(["--shapes", "1:2", "--out", str(out)])
