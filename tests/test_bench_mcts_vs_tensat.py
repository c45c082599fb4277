"""bench/mcts_vs_tensat.py: the goals, the reference run's closure, one small run end to end."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

mvt = pytest.importorskip("mcts_vs_tensat")


def _row(model: str, tensat: float, mcts: float, time: float = 1.0, ref: float | None = None) -> dict:
    row = {"model": model, "tensat": {"cost_after": tensat}, "mcts": {"cost_after": mcts, "time": time}}
    if ref is not None:
        row["reference"] = {"best_cost_after": ref}
    return row


def test_closure_names_the_deepest_saturated_k_and_how_the_next_stopped():
    assert mvt.closure({"k_tried": [(1, "saturated", 197), (2, "saturated", 451), (3, "node_limit", 20001)]}) \
        == "saturated k<=2, node_limit at k=3"
    assert mvt.closure({"k_tried": [(1, "saturated", 100), (2, "saturated", 100)]}) == "saturated k<=2"
    assert mvt.closure({"k_tried": [(1, "node_limit", 20001)]}) == "not saturated, node_limit at k=1"
    assert mvt.closure({}) == "not saturated"


def test_goals_count_better_only_on_the_paper_models_and_beyond_the_threshold():
    rows = [_row("bert", 1.0, 0.99), _row("nasnet_a", 1.0, 0.98), _row("nasrnn", 1.0, 1.0 - 1e-6),
            _row("resnext50", 1.0, 1.0), _row("mobilenet_v2", 1.0, 0.95), _row("squeezenet", 1.0, 0.9, time=70.0),
            _row("vit", 1.0, 0.3)]
    goals = {g["goal"]: g for g in mvt.evaluate_goals(rows)}
    not_worse, better, fast = goals.values()
    assert not_worse["met"] is True and not_worse["detail"].startswith("7/7")
    assert better["met"] is True and "4/6" in better["detail"]  # vit is off the list; nasrnn within 1e-4
    assert fast["met"] is False and "slowest 70.0 s" in fast["detail"]
    rows[0]["mcts"]["cost_after"] = 1.01  # worse than TENSAT on one model
    assert mvt.evaluate_goals(rows)[0]["met"] is False


def test_goal_is_undecided_when_the_paper_models_were_not_all_run():
    goals = mvt.evaluate_goals([_row("bert", 1.0, 0.99)])
    assert goals[1]["met"] is None


def test_small_run_with_a_reference_writes_the_table_and_json(tmp_path, capsys):
    out = tmp_path / "m.json"
    rows = mvt.main(["--models", "squeezenet", "--small", "--node-limit", "300", "--budget", "4",
                     "--max-sim-steps", "3", "--max-k", "2", "--reference-node-limit", "3000",
                     "--extract-time-limit", "10", "--cost", "analytic", "--out", str(out)])
    data = json.loads(out.read_text())
    (row,) = data["rows"]
    assert [r["model"] for r in rows] == ["squeezenet"] and row["small"] is True
    for side in ("tensat", "mcts", "reference"):
        assert row[side]["cost_after"] <= row[side]["cost_before"] * (1 + 1e-9)
    # the reference grows to ten times the node limit: never worse than TENSAT at the limit
    assert row["reference"]["best_cost_after"] <= row["tensat"]["cost_after"] * (1 + 1e-9)
    assert row["reference"]["k_tried"][0][0] == 1
    printed = capsys.readouterr().out
    assert "ref e-graphs" in printed and mvt.closure(row["reference"]) in printed
    assert len(data["goals"]) == 3


def test_the_reference_runs_only_on_the_models_named(tmp_path, capsys):
    out = tmp_path / "m.json"
    mvt.main(["--models", "squeezenet,nasrnn", "--small", "--node-limit", "200", "--budget", "2",
              "--max-sim-steps", "2", "--max-k", "1", "--reference-node-limit", "400",
              "--reference-models", "nasrnn", "--extract-time-limit", "10", "--cost", "analytic",
              "--out", str(out)])
    rows = {r["model"]: r for r in json.loads(out.read_text())["rows"]}
    assert "reference" in rows["nasrnn"] and "reference" not in rows["squeezenet"]
    assert "not run (--reference-models)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        mvt.main(["--models", "squeezenet", "--reference-node-limit", "400", "--reference-models", "nosuch",
                  "--out", str(out)])
