"""Shared pytest fixtures. TVM-dependent fixtures import TVM lazily, so unit
tests of the TVM-free core run without it."""
from __future__ import annotations

import os

import numpy as np
import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):
    # TVM's runtime pins its main thread to CPU 0 (and whatever the process starts later inherits
    # it): every pytest-xdist worker would then share one core (seen on 2 cores: two workers at
    # 50% each, the other core idle). Unpinned, the workers spread over the cores.
    os.environ.setdefault("TVM_BIND_THREADS", "0")


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded numpy generator (fresh per test)."""
    return np.random.default_rng(0)


@pytest.fixture(scope="session")
def host_target() -> str:
    """The x86 LLVM target string for this machine (TVM's plain ``llvm`` is riscv64 here)."""
    pytest.importorskip("tvm")
    from relay_eqsat.passes.runtime.target import host_target as _host_target

    return _host_target()


@pytest.fixture(autouse=True)
def _own_cost_db(tmp_path_factory, monkeypatch):
    """Every test reads and writes a cost database of its own, never the user's: measurements and
    remembered runtime verdicts do not leak between tests or runs (a test may set its own)."""
    monkeypatch.setenv("RELAY_EQSAT_COST_DB", str(tmp_path_factory.mktemp("costdb") / "costs.sqlite"))


@pytest.fixture
def no_host_data(monkeypatch):
    """The default cost model as on a CPU the project shipped no data for (the shipped default
    model, another CPU's), whatever CPU runs the tests: for tests that need the default model to
    find a rewrite, which a CPU's own data may rightly not (at one thread, Sapphire Rapids' data
    says a merge of two small dense layers saves nothing)."""
    monkeypatch.setenv("RELAY_EQSAT_IGNORE_SHIPPED", "1")
