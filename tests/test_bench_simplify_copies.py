"""bench/simplify_copies.py: the work TVM's SimplifyExpr copies, measured on the small NasNet-A."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("tvm")
BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

bench = pytest.importorskip("simplify_copies")

#: NasNet-A built and timed twice: over a minute here, run by `make bench` (-m slow)
pytestmark = [pytest.mark.tvm, pytest.mark.slow]


def test_bench_counts_copies_kernels_and_checks_outputs(tmp_path):
    out = tmp_path / "sc.json"
    assert bench.main(["--models", "nasnet_a,squeezenet", "--small", "--rounds", "2", "--min-repeat-ms", "1",
                       "--out", str(out)]) == 0
    rows = {r["model"]: r for r in json.loads(out.read_text())["rows"]}
    nas, squeeze = rows["nasnet_a"], rows["squeezenet"]
    assert nas["copies_own"] > 0 and nas["copies_form"] == 0  # its add(x, x) cells
    assert nas["kernels_own"] > nas["kernels_form"] and nas["max_error"] <= 1e-4
    assert nas["ms_own"] > 0 and nas["ms_form"] > 0 and nas["speedup"] > 0
    assert squeeze["copies_own"] == squeeze["copies_form"] == 0 and "kernels_own" not in squeeze  # nothing built
    assert nas["scaled_own"] == nas["scaled_form"] == 0  # no run-time scale on a weighted op
    assert "SimplifyExpr" in out.with_suffix(".log").read_text()
