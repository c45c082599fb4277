"""bench/build_time.py: nested chains built in child processes, whole and cut, within a time limit."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

build_time = pytest.importorskip("build_time")
pytest.importorskip("tvm")

pytestmark = pytest.mark.tvm


def test_run_writes_each_depth_built_and_checked(tmp_path):
    out = tmp_path / "build_time.json"
    assert build_time.main(["--cases", "fast_tanh:2", "--timeout", "120", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    assert [r["case"] for r in data["cases"]] == ["fast_tanh x1", "fast_tanh x2"]
    assert [r["max_reads"] for r in data["cases"]] == [19, 361] and data["limit"] == 8192
    for r in data["cases"]:
        assert r["cuts"] == 0 and r["whole"]["finished"] and r["whole"]["max_error"] < 1e-5
    assert data["machine"]["TVM_NUM_THREADS"] == "1"


def test_a_build_past_the_limit_is_killed_and_the_cut_program_builds_right():
    g = build_time.chain_graph("fast_tanh", 4)  # 130,321 reads whole
    # a limit shorter than the child's start (it imports TVM): the kill path, whatever the CPU
    whole = build_time.timed_build(g, stop_fusion=False, timeout=0.01)
    assert not whole["finished"] and whole["build_s"] is None and "not finished after 0.01 s" in whole["note"]
    cut = build_time.timed_build(g, stop_fusion=True, timeout=120.0)
    assert cut["finished"] and cut["max_error"] < 1e-5 and cut["error_note"] is None


def test_cases_are_checked():
    assert build_time.parse_cases("tanh:2,fast_exp:1") == [("tanh", 1), ("tanh", 2), ("fast_exp", 1)]
    for bad in ("add:2", "tanh:0", "tanh:x", "nosuch:1"):
        with pytest.raises(ValueError):
            build_time.parse_cases(bad)
    with pytest.raises(SystemExit):
        build_time.main(["--timeout", "0"])
