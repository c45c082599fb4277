"""bench/dense_forms.py: the forms of a linear layer compute the same values; bad shapes are refused."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

dense_forms = pytest.importorskip("dense_forms")


@pytest.mark.parametrize("form", dense_forms.FORMS)
def test_each_form_computes_x_times_w_transposed(form):
    import runtime_stats

    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 7)).astype("float32")
    w = rng.standard_normal((3, 7)).astype("float32")
    built = runtime_stats.build_module(dense_forms.form_module(form, x.shape, w), {"x": x})
    np.testing.assert_allclose(built.outputs[0], x @ w.T, rtol=1e-5, atol=1e-5)


def test_run_writes_rows_with_every_form_checked(tmp_path):
    out = tmp_path / "forms.json"
    rc = dense_forms.main(["--shapes", "4:8:16,3:5:7", "--rounds", "1", "--repeat", "1", "--min-repeat-ms", "0",
                           "--out", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    assert [(r["M"], r["K"], r["N"]) for r in data["rows"]] == [(4, 8, 16), (3, 5, 7)]
    for r in data["rows"]:
        assert set(r["forms"]) == set(dense_forms.FORMS)
        assert all(f["ok"] and f["max_rel_error"] <= dense_forms.RTOL for f in r["forms"].values())
        assert r["forms"]["dense"]["over_dense"] == 1.0
    assert data["machine"]["TVM_NUM_THREADS"] == "1"


@pytest.mark.parametrize("bad", ["4:8", "a:b:c", "0:8:16", "4:-1:2"])
def test_bad_shapes_are_refused(bad, tmp_path):
    with pytest.raises(SystemExit):
        dense_forms.main(["--shapes", bad, "--out", str(tmp_path / "x.json")])
