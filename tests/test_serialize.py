"""egraph-serialize JSON round trips and the `relay-eqsat extract` command."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from relay_eqsat.cli import build_parser, main
from relay_eqsat.extract import ExtractionProblem, egraph_problem, get_extractor
from relay_eqsat.extract.serialize import dump_problem, load_problem, problem_to_dict

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).parent.parent


def same_problem(a: ExtractionProblem, b: ExtractionProblem) -> None:
    """Equal up to renumbering: compare through the original ids."""
    assert sorted(map(str, a.node_key)) == sorted(map(str, b.node_key))
    b_node = {str(k): i for i, k in enumerate(b.node_key)}
    for n, key in enumerate(a.node_key):
        m = b_node[str(key)]
        assert str(a.class_key[a.node_class[n]]) == str(b.class_key[b.node_class[m]])
        assert [str(a.class_key[c]) for c in a.node_children[n]] == [str(b.class_key[c]) for c in b.node_children[m]]
        assert a.node_cost[n] == b.node_cost[m]
        assert a.node_label[n] == b.node_label[m]
        assert a.blacklisted[n] == b.blacklisted[m]
    assert [str(a.class_key[r]) for r in a.roots] == [str(b.class_key[r]) for r in b.roots]


@pytest.mark.parametrize("name", ["shared_subgraph", "he_figure1", "gym_style"])
def test_round_trip(tmp_path, name):
    p = load_problem(DATA / f"{name}.json")
    dump_problem(p, tmp_path / "out.json")
    q = load_problem(tmp_path / "out.json")
    same_problem(p, q)
    assert problem_to_dict(q) == problem_to_dict(p)
    assert get_extractor("maxsat").extract(q).cost == get_extractor("maxsat").extract(p).cost


def test_lenient_reading_of_extraction_gym_files():
    p = load_problem(DATA / "gym_style.json")
    key = {k: i for i, k in enumerate(p.node_key)}
    assert p.node_cost[key["2__0"]] == 0.5  # cost given as a string
    assert p.node_cost[key["3__0"]] == 1.0  # cost absent
    assert p.blacklisted[key["3__1"]] and p.blacklisted.sum() == 1  # subsumed
    # "2__1" and "2__0" name the same class: children are resolved to e-classes
    assert p.node_children[key["3__0"]] == (p.node_class[key["1__0"]], p.node_class[key["2__0"]])
    assert p.class_data[p.class_key.index("4")] == {"type": "Tensor"}  # old "classes" map
    assert [p.class_key[r] for r in p.roots] == ["4"]


def test_reading_a_dict_with_class_children_and_no_roots():
    data = {"nodes": {"x": {"op": "x", "eclass": "c0"}, "f": {"op": "f", "children": ["c0"], "eclass": "c1",
                                                             "cost": 2}}}
    p = load_problem(data)
    assert p.roots == [] and p.node_children[1] == (0,) and list(p.node_cost) == [1.0, 2.0]
    assert p.node_children[0] == ()


@pytest.mark.parametrize("bad, message", [
    ({}, "nodes"),
    ({"nodes": {"a": {"op": "a"}}}, "eclass"),
    ({"nodes": {"a": {"op": "a", "eclass": "0", "children": ["zz"]}}}, "neither"),
    ({"nodes": {"a": {"op": "a", "eclass": "0", "cost": "cheap"}}}, "not a number"),
    ({"nodes": {"a": {"op": "a", "eclass": "0", "cost": -1}}}, "non-negative"),
    ({"nodes": {"a": {"op": "a", "eclass": "0"}}, "root_eclasses": ["9"]}, "no e-nodes"),
])
def test_malformed_files_are_rejected(bad, message):
    with pytest.raises(ValueError, match=message):
        load_problem(bad)


def test_dump_of_an_integer_keyed_problem(tmp_path):
    p = ExtractionProblem(node_class=np.array([0, 1, 1]), node_children=[(), (0, 0), ()],
                          node_cost=np.array([1.0, 2.0, 5.0]), roots=[1], node_label=["x", "add", "c"],
                          blacklisted=np.array([False, False, True]))
    data = problem_to_dict(p)
    assert data["nodes"]["1"] == {"op": "add", "children": ["0", "0"], "eclass": "1", "cost": 2.0}
    assert data["nodes"]["2"]["subsumed"] is True
    assert data["root_eclasses"] == ["1"] and "class_data" not in data
    dump_problem(p, tmp_path / "p.json")
    same_problem(p, load_problem(tmp_path / "p.json"))
    assert json.loads((tmp_path / "p.json").read_text()) == data


def test_cli_extract_prints_cost(capsys, tmp_path):
    assert main(["extract", str(DATA / "shared_subgraph.json"), "--extractor", "ilp-acyc", "--time-limit", "10"]) == 0
    out = capsys.readouterr().out
    assert "cost:        13" in out and "optimal:     yes" in out
    assert "solve time:" in out and "encode time:" in out
    assert main(["extract", str(DATA / "shared_subgraph.json"), "-e", "greedy"]) == 0
    out = capsys.readouterr().out
    assert "cost:        16" in out and "optimal:     no" in out
    choices = tmp_path / "choices.json"
    assert main(["extract", str(DATA / "he_figure1.json"), "-e", "maxsat", "--json", "--choices", str(choices)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["cost"] == 7.0 and result["optimal"] is True
    assert json.loads(choices.read_text()) == {"R": "n2", "B": "b"}
    assert main(["extract", str(DATA / "he_figure1.json"), "-e", "ilp-topo", "--solver", "scip",
                 "--order", "real", "--root", "A"]) == 0
    assert "cost:        7\n" in capsys.readouterr().out  # A -> n3 -> B -> b
    assert main(["extract", str(DATA / "he_figure1.json"), "--root", "nope"]) == 2


def test_cli_subprocess_smoke():
    result = subprocess.run([sys.executable, "-m", "relay_eqsat.cli", "extract", str(DATA / "gym_style.json"),
                             "--extractor", "ilp-topo", "--time-limit", "10"],
                            capture_output=True, text=True, cwd=REPO, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "cost:        1.75" in result.stdout and "optimal:     yes" in result.stdout


def test_cli_extract_does_not_import_tvm(tmp_path):
    code = ("import sys, relay_eqsat.cli as c; c.main(['extract', sys.argv[1], '-e', 'greedy-ocf']); "
            "print('tvm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(DATA / "he_figure1.json")], capture_output=True,
                         text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False"
    parser = build_parser("extract")
    with pytest.raises(SystemExit):
        parser.parse_args(["extract", "x.json", "--extractor", "nope"])


def test_dump_an_egraph_problem(tmp_path):
    """Problems made from our e-graphs (TensorType class data) write and read back."""
    import numpy as np

    from relay_eqsat.egraph import EGraph
    from relay_eqsat.graph import TensorGraph

    g = TensorGraph()
    x = g.var("x", (2, 3))
    g.set_output(g.add("nn.relu", (g.add("add", (x, g.const(np.ones((2, 3), "float32"), "one"))),)))
    eg = EGraph()
    root = eg.add_graph(g)
    problem = egraph_problem(eg, lambda *a: 1.0, [root])
    dump_problem(problem, tmp_path / "g.json")
    back = load_problem(tmp_path / "g.json")
    assert back.num_nodes == problem.num_nodes and back.num_classes == problem.num_classes
    assert {d["type"] for d in back.class_data} == {"float32[2, 3]"}


def test_gzipped_files_read_like_plain_ones(tmp_path):
    """bench/extraction.py writes its e-graphs gzipped; load_problem and `relay-eqsat extract` read them."""
    import gzip

    p = ExtractionProblem(node_class=[0, 0, 1], node_children=[(1,), (), ()], node_cost=[1.0, 5.0, 1.0], roots=[0])
    plain = tmp_path / "e.json"
    dump_problem(p, plain)
    packed = tmp_path / "e.json.gz"
    with gzip.open(packed, "wt") as f:
        f.write(plain.read_text())
    a, b = load_problem(plain), load_problem(packed)
    assert a.node_children == b.node_children and list(a.node_cost) == list(b.node_cost) and a.roots == b.roots
    assert get_extractor("ilp-acyc").extract(b).cost == get_extractor("ilp-acyc").extract(a).cost == 2.0
