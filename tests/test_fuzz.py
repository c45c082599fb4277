"""Differential fuzzing (``relay_eqsat.testing.fuzz``) on a small budget: random well-typed graphs go
through the whole pass with every scheduler and every final extractor, and the result must
compute what the input does (numpy reference; a subset also built and run by TVM).

Deterministic: hypothesis runs derandomized, without its example database. A failure prints
the shrunk recipe (``Recipe.to_dict()``: a reproducer) and the graph. Long runs:
``bench/fuzz.py --graphs N``. Every failure found by fuzzing is pinned below as an explicit
graph (section "regressions").
"""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402

from relay_eqsat.testing import fuzz
from relay_eqsat import ops  # noqa: E402
from relay_eqsat.graph import TensorGraph  # noqa: E402
from relay_eqsat.rewrite import parse_rules  # noqa: E402

#: a fixed, small budget: the same examples on every run
FUZZ = settings(max_examples=12, derandomize=True, database=None, deadline=None, print_blob=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
#: small graphs, short searches: the whole pass 20 times per graph in well under a second each
MAX_STEPS = 4
OPTIONS = {"node_limit": 500, "iter_limit": 5, "extract_time_limit": 5.0, "time_limit": 5.0}


def assert_all_ok(recipe: fuzz.Recipe, results) -> None:
    bad = [r for r in results if not r.ok]
    assert not bad, (f"recipe {json.dumps(recipe.to_dict())}\ngraph:\n{recipe.build()!r}\n"
                     + "\n".join(r.describe() for r in bad))


# -- the generator ----------------------------------------------------------------------

@settings(max_examples=60, derandomize=True, database=None, deadline=None)
@given(fuzz.recipes())
def test_every_recipe_builds_a_valid_graph_with_finite_values(recipe):
    g = recipe.build()
    g.validate()
    assert g.output is not None and g.inputs
    assert fuzz.reference(g).finite
    assert fuzz.Recipe.from_dict(json.loads(json.dumps(recipe.to_dict()))) == recipe


def test_drawn_graphs_cover_every_op_but_the_excluded_ones():
    recipes = fuzz.draw_recipes(300, seed=0)
    assert recipes == fuzz.draw_recipes(300, seed=0)  # one seed, one sequence
    seen = Counter()
    for r in recipes:
        seen.update(r.build().op_counts())
    # never drawn: opaque, and the ops only a rule's right side makes (drawn graphs hold what it rewrites)
    assert set(ops.OPS) - set(seen) == {"opaque"} | {op for op, why in fuzz.EXCLUDED_OPS.items()
                                                     if "rule's right side" in why}
    assert set(fuzz.EXCLUDED_OPS) <= set(ops.OPS)
    # the padding rules' sizes and the merges' shapes are drawn
    sizes = Counter()
    for r in recipes:
        g = r.build()
        for n in g.nodes:
            if n.op == "nn.conv2d":
                sizes["awkward channels"] += n.type.shape[1] in (17, 18, 20)
                sizes["wide"] += n.type.shape[3] > 31
            if n.op == "nn.dense" and len(n.type.shape) == 2:
                sizes["awkward rows"] += n.type.shape[0] in (9, 10, 11, 13)
    assert all(sizes[k] > 0 for k in ("awkward channels", "wide", "awkward rows")), sizes


def test_the_simplest_recipe_is_one_relu():
    g = fuzz.Recipe((("unary", ()),)).build()
    assert [n.op for n in g.nodes] == ["var", "nn.relu"] and g[0].type.shape == (2, 2)


# a wrong rule (relu(x) => x) planted past the verifier: hypothesis must find the miscompile
# and shrink it to the smallest graph that shows it
RELU_DROP = parse_rules("rule relu-drop\n  lhs (nn.relu ?x)\n  rhs ?x\n", "planted.rules")


def test_a_planted_miscompile_shrinks_to_a_minimal_graph(monkeypatch):
    from relay_eqsat import pipeline as optimize

    monkeypatch.setattr(optimize, "check_user_rules", lambda rules, trust=False: [])

    def miscompiled(recipe):
        res = fuzz.check_pass(recipe.build(), "tensat", "greedy", options={**OPTIONS, "rules": RELU_DROP})
        assert res.status != "crash", res.message
        return res.status == "miscompile"

    minimal = hypothesis.find(fuzz.recipes(max_steps=MAX_STEPS), miscompiled,
                              settings=settings(max_examples=200, derandomize=True, database=None,
                                                deadline=None))
    assert len(minimal.steps) == 1 and minimal.steps[0][0] == "unary"
    g = minimal.build()
    assert g.op_counts() == {"var": 1, "nn.relu": 1}
    assert miscompiled(minimal)


# -- the whole pass, every scheduler and final extractor ----------------------------------

def configurations():
    """Every scheduler with every final extractor (CPU, the analytic cost), and two runs under
    jittered costs (one for a GPU target: the rules marked ``avoid cpu`` run there)."""
    for search in fuzz.searches():
        for extractor in fuzz.extractors():
            yield dict(search=search, extractor=extractor)
    yield dict(search="tensat", extractor="ilp-acyc", target=fuzz.GPU_TARGET, jitter=1)
    yield dict(search="mcts", extractor="greedy-merge", jitter=2)


def test_configurations_cover_the_registries():
    configs = list(configurations())
    assert {c["search"] for c in configs} == set(fuzz.searches()) >= {"tensat", "mcts"}
    assert {c["extractor"] for c in configs} == set(fuzz.extractors()) >= {"greedy", "ilp-acyc", "maxsat"}


@FUZZ
@given(fuzz.recipes(max_steps=MAX_STEPS))
def test_the_pass_keeps_the_meaning_of_random_graphs(recipe):
    g = recipe.build()
    ref = fuzz.reference(g)
    results = [fuzz.check_pass(g, ref=ref, options=OPTIONS, **c) for c in configurations()]
    assert_all_ok(recipe, results)


# -- TVM: the input and the result built and run -------------------------------------------

def tvm_outputs(graph: TensorGraph, signature, inputs) -> list[np.ndarray]:
    """``graph`` as Relay (type-checked by InferType), built for the host and run."""
    from relay_eqsat.passes.relay.backend import graph_to_module
    from relay_eqsat.passes.runtime.build import build_and_run

    mod = graph_to_module(graph, signature=signature)
    outputs = build_and_run(mod, inputs).outputs
    return outputs


@pytest.mark.tvm
@settings(max_examples=4, derandomize=True, database=None, deadline=None, print_blob=False,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(fuzz.recipes(max_steps=MAX_STEPS))
def test_tvm_runs_the_input_and_the_result_as_numpy_does(host_target, recipe):
    from relay_eqsat.passes.relay.frontend import from_relay
    from relay_eqsat.passes.relay.backend import graph_to_module

    g = recipe.build()
    ref = fuzz.reference(g)
    signature = [(g[i].attrs["name"], g[i].type) for i in g.inputs]
    res = fuzz.check_pass(g, "tensat", "ilp-acyc", jitter=3, ref=ref, options=OPTIONS)
    assert_all_ok(recipe, [res])
    for what, graph in (("input", g), ("result", res.output)):
        err, why = fuzz.compare(ref, tvm_outputs(graph, signature, ref.inputs))
        assert why is None, f"TVM runs the {what} differently: {why}\nrecipe {json.dumps(recipe.to_dict())}"
        # the frontend reads the Relay program back as a graph that computes the same
        back = from_relay(graph_to_module(graph, signature=signature))
        err, why = fuzz.compare(ref, back.evaluate(ref.inputs))
        assert why is None, f"the {what} read back differs: {why}\nrecipe {json.dumps(recipe.to_dict())}"


# -- bench/fuzz.py --------------------------------------------------------------------------

@pytest.fixture
def bench_fuzz(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "bench"))
    return pytest.importorskip("fuzz")


def test_bench_fuzz_writes_its_figures(bench_fuzz, tmp_path, capsys):
    out = tmp_path / "fuzz.json"
    data = bench_fuzz.main(["--graphs", "3", "--seed", "7", "--tvm-every", "0", "--out", str(out)])
    text = capsys.readouterr().out
    assert "graphs" in text and "miscompiles" in text
    saved = json.loads(out.read_text())
    assert saved["summary"]["graphs"] == 3 == data["summary"]["graphs"]
    assert saved["summary"]["miscompiles"] == 0 and saved["summary"]["crashes"] == 0
    assert saved["summary"]["rules_total"] > 80 and "machine" in saved
    assert set(saved["ops_covered"]) <= set(ops.OPS)


def test_bench_fuzz_reduces_a_failing_recipe(bench_fuzz):
    def has_relu(r):
        return "nn.relu" in r.build().op_counts()

    big = next(r for r in fuzz.draw_recipes(200, seed=1) if len(r.steps) >= 4 and has_relu(r))
    small = bench_fuzz.reduce_recipe(big, has_relu)
    assert len(small.steps) == 1 and has_relu(small)
    assert sum(map(bool, small.steps[0][1])) <= 2  # all but the choices that lead to a relu are 0


# -- regressions: failures fuzzing found, as explicit graphs ---------------------------------

@pytest.mark.tvm
def test_nd_matmul_with_transposed_constant_weight_builds(host_target):
    """bench/fuzz.py (seed 41, graph 8): ``nn.matmul(x, w, transpose_b=True)`` with 3-d ``x`` and a
    constant ``w`` did not build: ``relay.nn.matmul`` makes that form an ``nn.dense``, and TVM's x86
    dense layout rewrite takes 2-d data only. The backend now emits it as N-d dense (reshape, dense,
    reshape), as it does for ``nn.dense`` itself."""
    rng = np.random.default_rng(0)
    g = TensorGraph()
    x = g.var("x", (2, 3, 4))
    w = g.const(rng.standard_normal((5, 4)).astype("float32"), "w")
    g.set_output(g.add("nn.matmul", (x, w), {"transpose_a": False, "transpose_b": True, "out_dtype": ""}))
    ref = fuzz.reference(g)
    err, why = fuzz.compare(ref, tvm_outputs(g, None, ref.inputs))
    assert why is None and err < 1e-5
