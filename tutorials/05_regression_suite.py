"""Regression suite: pin what EqSatPass does to your models with the pytest plugin.

The package installs a pytest plugin (``relay_eqsat.passes.regression.plugin``): a test asks for the
``eqsat`` fixture and calls it on a model; the call runs EqSatPass, checks that the optimized
program computes the original's outputs on seeded random inputs (integer inputs such as token
ids are drawn in a valid range) and compares what the pass did with a JSON snapshot beside the
test file. This script plays the user:

1. Write a small test suite into a temporary directory: a test on zoo models (their small
   configuration) and one on an ONNX model it writes with ``onnx.helper`` (a token embedding
   read with int64 ids, and two projections of it), plus a
   ``pytest.ini`` whose ``eqsat_options`` pin the target and the search limits, so every
   machine (a laptop, CI) optimizes for the same CPU and gets the same snapshot.
2. Run pytest with ``--eqsat-update-snapshots``: it writes one snapshot per test
   (``__eqsat_snapshots__/test_models/<test>.json``); show one.
3. Regress the ONNX model's snapshot by hand (as if an earlier version of the pass had found
   a cheaper program: a lower recorded cost, another program fingerprint) and run pytest:
   that test fails, saying what differs.
4. Accept this run's result with ``--eqsat-update-snapshots`` and run pytest again: all pass.

Run: ``.venv/bin/python tutorials/05_regression_suite.py [--small]`` (``--small``: one zoo
model instead of three).
"""
import argparse
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

VOCAB, SEQ, HIDDEN = 100, 16, 32

TESTS = '''
"""A user's regression suite for EqSatPass (written by tutorials/05_regression_suite.py)."""
import pytest

ZOO = {zoo!r}


@pytest.mark.parametrize("name", ZOO)
def test_zoo_model(eqsat, name):
    result = eqsat(f"zoo:{{name}}", small=True)
    assert result.report["stop_reason"] != "time_limit"


@pytest.mark.eqsat(rtol=1e-3)
def test_onnx_model(eqsat):
    result = eqsat("embed.onnx", input_shapes={{"ids": [1, {seq}]}})
    assert result.changed
    assert result.inputs["ids"].max() < {vocab}  # token ids are drawn below the vocabulary size
'''

INI = """
[pytest]
eqsat_options =
    # the same CPU on every machine: costs from the data shipped for it, not from this host
    target = llvm -mtriple=x86_64-linux-gnu -mcpu=znver4
    node_limit = 2000
    iter_limit = 10
"""


def write_onnx(path):
    """ids (int64) -> embedding -> two projections (MatMul) -> their sum -> Relu."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array((0.1 * rng.standard_normal(shape)).astype(np.float32), name)
             for name, shape in (("embedding", (VOCAB, HIDDEN)), ("wq", (HIDDEN, HIDDEN)), ("wk", (HIDDEN, HIDDEN)))]
    nodes = [helper.make_node("Gather", ["embedding", "ids"], ["e"], axis=0),
             helper.make_node("MatMul", ["e", "wq"], ["q"]), helper.make_node("MatMul", ["e", "wk"], ["k"]),
             helper.make_node("Add", ["q", "k"], ["s"]), helper.make_node("Relu", ["s"], ["y"])]
    graph = helper.make_graph(nodes, "embed", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, SEQ])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, SEQ, HIDDEN])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def pytest_run(suite, *args):
    """Run pytest on the suite as a user would (a subprocess); returns (exit status, output)."""
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=suite,
                         capture_output=True, text=True, timeout=600)
    return out.returncode, out.stdout + out.stderr


def section(text, start):
    """The lines of pytest's output from the first one containing ``start`` to the end of the run."""
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if start in line)
    return "\n".join(line for line in lines[first:] if line.strip())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="one zoo model instead of three (fast)")
    args = ap.parse_args()
    zoo = ["bert"] if args.small else ["bert", "resnext50", "vit"]

    with tempfile.TemporaryDirectory(prefix="eqsat-suite-") as tmp:
        suite = Path(tmp)
        # 1. the user's suite
        (suite / "test_models.py").write_text(TESTS.format(zoo=zoo, seq=SEQ, vocab=VOCAB))
        (suite / "pytest.ini").write_text(textwrap.dedent(INI))
        write_onnx(suite / "embed.onnx")
        print(f"wrote test_models.py (zoo models {', '.join(zoo)} and embed.onnx), pytest.ini")

        # 2. first run: write the snapshots
        status, out = pytest_run(suite, "--eqsat-update-snapshots")
        print(f"\n$ pytest --eqsat-update-snapshots   (exit status {status})\n{section(out, '- relay-eqsat -')}")
        assert status == 0, out
        snap = suite / "__eqsat_snapshots__" / "test_models" / "test_onnx_model.json"
        data = json.loads(snap.read_text())
        shown = {k: data[k] for k in ("changed", "cost_before", "cost_after", "rules_fired", "egraph_nodes",
                                      "stop_reason", "fingerprint", "target")}
        print(f"\n{snap.relative_to(suite)}:\n{json.dumps(shown, indent=2)}")

        # 3. a regressed snapshot: the recorded program was cheaper and different
        data.update(cost_after=data["cost_after"] * 0.9, fingerprint="sha256:0123456789abcdef")
        snap.write_text(json.dumps(data, indent=2))
        status, out = pytest_run(suite)
        failure = textwrap.dedent("\n".join(line[1:] for line in out.splitlines() if line.startswith("E ")))
        print(f"\n$ pytest   (after lowering the recorded cost by 10%; exit status {status})\n{failure}")
        assert status == 1, out

        # 4. accept this run's result, then everything passes
        status, out = pytest_run(suite, "-k", "onnx", "--eqsat-update-snapshots")
        print(f"\n$ pytest -k onnx --eqsat-update-snapshots   (exit status {status})\n"
              f"{section(out, '- relay-eqsat -')}")
        assert status == 0, out
        status, out = pytest_run(suite)
        print(f"\n$ pytest   (exit status {status})\n{section(out, '- relay-eqsat -')}")
        assert status == 0, out
    print("OK")


if __name__ == "__main__":
    main()
