"""bench/extraction.py: bounds, best exact extractor, goals, per-k node limits (issue 17)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

extraction = pytest.importorskip("extraction")


def _res():
    return {
        "greedy-ocf": {"cost": 1.10, "time": 0.01, "optimal": False, "bound": None, "gap": None},
        "greedy-merge": {"cost": 1.00, "time": 0.02, "optimal": False, "bound": None, "gap": None},
        "ilp-topo": {"cost": 1.00, "time": 9.0, "optimal": False, "bound": 0.97, "gap": 0.03},
        "ilp-acyc": {"cost": 1.00, "time": 4.0, "optimal": False, "bound": 0.995, "gap": 0.005},
        "maxsat": {"cost": 1.00, "time": 2.0, "optimal": False, "bound": 0.99, "gap": 0.01},
    }


def test_summary_takes_the_best_bound_and_the_fastest_cheapest_exact_extractor():
    s = extraction.summarize(_res())
    assert s["optimum"] is None and s["best_bound"] == pytest.approx(0.995)
    assert s["best_exact"] == "maxsat"  # same cost as the others, fastest
    assert s["best_exact_gap"] == pytest.approx(1 / 0.995 - 1)
    assert s["best_exact_time"] == 2.0 and s["worse_than_greedy"] == []
    assert s["acyc_over_topo"] == pytest.approx(4 / 9) and s["maxsat_over_topo"] == pytest.approx(2 / 9)


def test_a_proven_optimum_caps_the_bound_and_dearer_than_greedy_is_flagged():
    res = _res()
    res["ilp-acyc"].update(optimal=True, cost=1.0, bound=0.9999)
    res["maxsat"].update(cost=1.2)
    s = extraction.summarize(res)
    assert s["optimum"] == 1.0 and s["best_bound"] == pytest.approx(0.9999)
    assert s["worse_than_greedy"] == ["maxsat"]


def test_large_goal_counts_gap_time_and_greedy():
    def row(enodes, gap_ok=True, slow=False):
        res = _res()
        if not gap_ok:
            for n in ("ilp-topo", "ilp-acyc", "maxsat"):
                res[n]["bound"] = 0.9
        if slow:
            for n in ("ilp-topo", "ilp-acyc", "maxsat"):
                res[n]["time"] = 61.0
        return {"model": "m", "config": "k_multi=2", "enodes": enodes, "extractors": res,
                "summary": extraction.summarize(res)}

    def large_goal(rows):
        return [g for g in extraction.evaluate_goals(rows) if "20,000" in g["goal"]]

    assert large_goal([row(1000)]) == []
    (g,) = large_goal([row(20_000), row(50_000)])
    assert g["met"] is True
    (g,) = large_goal([row(20_000), row(50_000, gap_ok=False)])
    assert g["met"] is False and "1/2" in g["detail"]
    (g,) = large_goal([row(20_000, slow=True)])
    assert g["met"] is False


def test_small_run_with_a_node_limit_per_k_multi(tmp_path):
    out = tmp_path / "x.json"
    extraction.main(["--models", "squeezenet", "--small", "--k-multi", "1,2", "--node-limit", "300,600",
                     "--no-initial", "--no-dump", "--time-limit", "10",
                     "--extractors", "greedy-merge,ilp-acyc,maxsat", "--out", str(out)])
    data = json.loads(out.read_text())
    rows = data["rows"]
    assert [r["k_multi"] for r in rows] == [1, 2]
    for r in rows:
        acyc, merge = r["extractors"]["ilp-acyc"], r["extractors"]["greedy-merge"]
        assert acyc["cost"] <= merge["cost"] * (1 + 1e-12)
        assert acyc["bound"] is not None and acyc["bound"] <= acyc["cost"] * (1 + 1e-12)
        assert r["summary"]["best_bound"] is not None


def test_node_limits_must_pair_with_k_multi():
    with pytest.raises(SystemExit):
        extraction.main(["--models", "squeezenet", "--k-multi", "1,2", "--node-limit", "1,2,3"])
