"""optimize_graph without TVM: hand-built TensorGraphs, the analytic cost, the default rules."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from relay_eqsat.graph import TensorGraph
from relay_eqsat.pipeline import OptimizeReport, optimize_graph

# the analytic (roofline) cost for a fixed CPU, so the result does not depend on the host
OPTIONS = {"cost": "analytic", "target": "llvm -mcpu=znver4", "rules": "default", "node_limit": 500,
           "budget": 8, "max_sim_steps": 4, "time_limit": 60.0}
# what the pass's "never worse" judgement adds is not under test: any predicted gain counts
TRUST = {"min_gain": 0.0, "calibrate": False, "runtime_decides": False}


def parallel_dense(batch: int = 1) -> TensorGraph:
    """relu(dense(x, w1)) + relu(dense(x, w2)): dense-merge makes the two layers one."""
    rng = np.random.default_rng(0)
    g = TensorGraph()
    x = g.var("x", (batch, 64))
    ws = [g.const(rng.standard_normal((96, 64)).astype("float32"), f"w{i}") for i in (1, 2)]
    g.set_output(g.add("add", [g.add("nn.relu", (g.add("nn.dense", (x, w)),)) for w in ws]))
    return g


def parallel_conv() -> TensorGraph:
    """Two 3x3 convolutions of one input, concatenated: conv-merge makes them one."""
    rng = np.random.default_rng(1)
    attrs = dict(strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1, channels=16,
                 kernel_size=(3, 3), data_layout="NCHW", kernel_layout="OIHW", out_dtype="")
    g = TensorGraph()
    x = g.var("x", (1, 8, 16, 16))
    ws = [g.const(rng.standard_normal((16, 8, 3, 3)).astype("float32"), f"w{i}") for i in (1, 2)]
    g.set_output(g.add("concatenate", [g.add("nn.relu", (g.add("nn.conv2d", (x, w), attrs),)) for w in ws],
                       {"axis": 1}))
    return g


def assert_same_program(before: TensorGraph, after: TensorGraph) -> None:
    """Same interface, same numbers (numpy reference semantics)."""
    after.validate()
    assert after.input_types() == before.input_types()
    assert after[after.output].type == before[before.output].type
    inputs = before.random_inputs(3)
    np.testing.assert_allclose(after.evaluate(inputs), before.evaluate(inputs), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("search", ["tensat", "mcts"])
@pytest.mark.parametrize("extractor", ["ilp-acyc", "maxsat"])
def test_parallel_dense_layers_merge(search, extractor):
    g = parallel_dense()
    out, rep = optimize_graph(g, {**OPTIONS, "search": search, "final_extractor": extractor}, **TRUST)
    assert isinstance(rep, OptimizeReport)
    assert rep.changed and rep.reason == "cheaper program found"
    assert rep.search == search and rep.extractor == extractor and rep.optimal
    assert rep.cost_after < rep.cost_before and rep.speedup > 1.0
    assert rep.rules_fired.get("dense-merge", 0) >= 1
    assert rep.ops_before["nn.dense"] == 2 and rep.ops_after["nn.dense"] == 1 == out.op_counts()["nn.dense"]
    assert rep.nodes_after == len(out) and rep.egraph_nodes > len(g)
    assert_same_program(g, out)


@pytest.mark.parametrize("search", ["tensat", "mcts"])
def test_parallel_convolutions_merge_with_the_greedy_extractor(search):
    g = parallel_conv()
    out, rep = optimize_graph(g, {**OPTIONS, "search": search, "final_extractor": "greedy-ocf"}, **TRUST)
    assert rep.changed and rep.extractor == "greedy-ocf" and rep.extract_status == "greedy-ocf"
    assert rep.cost_after < rep.cost_before
    assert rep.ops_after["nn.conv2d"] == 1 < rep.ops_before["nn.conv2d"]
    assert_same_program(g, out)


@pytest.mark.parametrize("search", ["tensat", "mcts"])
def test_nothing_cheaper_keeps_the_input(search):
    g = TensorGraph()
    g.set_output(g.add("nn.relu", (g.var("x", (4, 8)),)))
    out, rep = optimize_graph(g, {**OPTIONS, "search": search, "final_extractor": "ilp-acyc"}, **TRUST)
    assert not rep.changed and rep.reason == "no cheaper program under the cost model; input kept"
    assert rep.cost_after == rep.cost_before and rep.ops_after == rep.ops_before
    assert_same_program(g, out)


def test_report_names_the_rules_the_result_came_from():
    from relay_eqsat.rewrite import load_rules

    g = parallel_dense()
    opts = {**OPTIONS, "search": "tensat", "final_extractor": "ilp-acyc"}
    merge_only = [r for r in load_rules() if r.name == "dense-merge"]
    out, rep = optimize_graph(g, opts, rules=merge_only, **TRUST)
    # the weights' concatenation, the merged dense, its split and the split's two items are new;
    # the relus and the add are the input's nodes on the split's items (the same e-classes)
    assert rep.changed and rep.rules_in_result == {"dense-merge": 5}
    new = {op: n - g.op_counts().get(op, 0) for op, n in out.op_counts().items()}
    assert {op: n for op, n in new.items() if n > 0} == {"concatenate": 1, "split": 1, "tuple_get_item": 2}
    assert "dense-merge" in rep.summary() and rep.to_dict()["rules_in_result"] == {"dense-merge": 5}
    assert_same_program(g, out)

    # all rules: what the result used is a subset of what fired, the merge among it
    out, rep = optimize_graph(g, {**opts, "search": "mcts"}, **TRUST)
    assert rep.changed and rep.rules_in_result.get("dense-merge", 0) >= 2
    assert set(rep.rules_in_result) <= {k for k, v in rep.rules_fired.items() if v}
    assert sum(rep.rules_in_result.values()) <= len(out)

    # the input kept: nothing in the result came from a rule, though rules fired
    _, kept = optimize_graph(g, opts, **{**TRUST, "min_gain": 10.0})
    assert not kept.changed and kept.rules_in_result == {} and kept.rules_fired["dense-merge"] > 0


def test_a_required_gain_keeps_a_cheaper_program_out():
    g = parallel_dense()
    opts = {**OPTIONS, "search": "tensat", "final_extractor": "ilp-acyc"}
    _, rep = optimize_graph(g, opts, **TRUST)
    out, kept = optimize_graph(g, opts, **{**TRUST, "min_gain": rep.speedup - 1 + 0.05})
    assert rep.changed and not kept.changed and "within the cost model's error" in kept.reason
    assert out.op_counts() == g.op_counts()


def test_optimize_graph_imports_no_tvm():
    script = textwrap.dedent("""
        import sys
        sys.path.insert(0, sys.argv[1])
        from test_optimize import OPTIONS, TRUST, parallel_dense
        from relay_eqsat.pipeline import optimize_graph
        for search in ("tensat", "mcts"):
            out, rep = optimize_graph(parallel_dense(), {**OPTIONS, "search": search}, **TRUST)
            assert rep.changed, rep.summary()
        print(sorted(m for m in sys.modules if m == "tvm" or m.startswith("tvm.")))
    """)
    done = subprocess.run([sys.executable, "-c", script, str(Path(__file__).parent)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_optimize_options_are_the_schemas_optimizer_options():
    """OptimizeOptions declares its fields typed, in the schema's order and with its defaults; the
    search's limits come from it, and a bad value is an error naming it."""
    import dataclasses

    from relay_eqsat.options import DEFAULTS, OPTIMIZER_OPTIONS
    from relay_eqsat.pipeline import OptimizeOptions
    from relay_eqsat.search.base import LIMIT_OPTIONS, Limits

    fields = dataclasses.fields(OptimizeOptions)
    assert tuple(f.name for f in fields) == OPTIMIZER_OPTIONS
    assert {f.name: f.default for f in fields} == {n: DEFAULTS[n] for n in OPTIMIZER_OPTIONS}
    opts = OptimizeOptions(node_limit="123", time_limit=4, cycle_filter="vanilla")
    assert opts.limits == Limits(node_limit=123, time_limit=4.0, cycle_filter="vanilla")
    assert set(LIMIT_OPTIONS) <= set(OPTIMIZER_OPTIONS)
    with pytest.raises(ValueError, match="node_limit"):
        OptimizeOptions(node_limit=0)
