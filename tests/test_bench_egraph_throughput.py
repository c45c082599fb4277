"""bench/egraph_throughput.py: ours and egglog on the same rules grow the same e-graph.

The bench's ``same`` rows compare e-nodes added per second of two engines on
one workload; that is only a comparison if the workloads are the same. Two
independent implementations (our shape-checked rules with the cycle filter,
egglog's syntactic program) agree here on the e-nodes they add, model by
model, which also checks the egglog program's rules against ours (a merge of
grouped convolutions, which ours refuses, grew egglog's NasNet-A e-graph 5x).
Structure only, no timing.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("tvm")  # the zoo models are built as Relay modules
pytest.importorskip("egglog")
BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

bench = pytest.importorskip("egraph_throughput")

pytestmark = pytest.mark.tvm


@pytest.mark.parametrize("model", ["bert", "nasnet_a", "inception_v3"])
@pytest.mark.parametrize("k_multi", [1, 2])
def test_same_rules_grow_the_same_e_graph_in_both_engines(model, k_multi):
    row = bench.worker(model, True, k_multi, 10_000, 15, "same")
    ours, egglog = row["ours"], row["egglog"]
    assert ours["stop_reason"] == "saturated" and egglog["iterations"] == ours["iterations"]
    added_ours = ours["nodes_after"] - ours["nodes_before"]
    added_egglog = egglog["nodes_after"] - egglog["nodes_before"]
    assert added_ours > 0
    # egglog also counts the one string literal its merges add (the concat axis "0")
    assert added_egglog - added_ours == 1


def test_same_rules_are_rules_of_the_default_set():
    from relay_eqsat.rewrite import load_rules

    names = {r.name for r in load_rules()}
    assert set(bench.SAME_RULES) <= names


def test_grouped_convolutions_have_their_own_egglog_constructor():
    """egglog's merge concatenates weights along the output channels: only plain convolutions may match."""
    from relay_eqsat.passes import zoo
    from relay_eqsat.passes.relay.frontend import from_relay

    graph = from_relay(*zoo.get("nasnet_a", small=True))
    head, _ = bench.build_egglog_program(graph, 1, 1)
    assert "O_nn_conv2d_grouped_2" in head and "O_nn_conv2d_2" in head
    merge = [line for line in head.splitlines() if line.startswith("(rule") and "conv2d" in line]
    assert merge and all("O_nn_conv2d_2 " in line and "grouped" not in line for line in merge)


def test_cli_rows_for_each_rule_set(tmp_path):
    out = tmp_path / "t.json"
    bench.main(["--models", "bert", "--small", "--k-multi", "1", "--node-limits", "2000", "--repeat", "1",
                "--rules", "same,full", "--out", str(out)])
    rows = json.loads(out.read_text())["rows"]
    assert [r["rules"] for r in rows] == ["same", "full"]
    same, full = rows
    assert full["ours"]["nodes_after"] > same["ours"]["nodes_after"]  # the whole rule set grows more
    assert same["ratio_ours_over_egglog"] > 0 and full["ratio_ours_over_egglog"] > 0
    assert "added ours/egglog" in out.with_suffix(".log").read_text()
    with pytest.raises(SystemExit):
        bench.main(["--rules", "some", "--out", str(out)])


def test_plan_replay_plans_the_same_right_hand_sides_again():
    row = bench.plan_replay("nasnet_a", True, 2, 10_000, 15, "same", repeat=2)  # raises if a plan differs
    assert row["plans"] > 0 and row["ms"] > 0
