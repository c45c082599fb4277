"""bench/fast_math.py: each case's exact and fast forms, built by TVM through the backend, agree."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

fast_math = pytest.importorskip("fast_math")
pytest.importorskip("tvm")


def test_run_writes_every_case_within_rounding_error(tmp_path):
    out = tmp_path / "fast_math.json"
    rc = fast_math.main(["--rounds", "1", "--repeat", "1", "--min-repeat-ms", "0", "--scale", "0.02",
                         "--out", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    assert [r["case"] for r in data["cases"]] == [c[0] for c in fast_math.CASES]
    for r in data["cases"]:
        assert r["exact"]["max_error_over_scale"] <= 1e-6, r["case"]
        assert r["fast"]["max_error_over_scale"] <= 2e-6, r["case"]
    assert data["machine"]["TVM_NUM_THREADS"] == "1"


def test_case_graphs_use_the_op_given():
    g = fast_math.case_graph("GELU", (2, 8), "fast_erf")
    assert g.op_counts()["fast_erf"] == 1 and "erf" not in g.op_counts()
    g = fast_math.case_graph("softmax", (2, 3, 4), "nn.softmax")
    assert g[g.output].op == "nn.softmax" and g[g.output].attrs["axis"] == 2


def test_bad_scale_is_refused(tmp_path):
    with pytest.raises(SystemExit):
        fast_math.main(["--scale", "0", "--out", str(tmp_path / "x.json")])
