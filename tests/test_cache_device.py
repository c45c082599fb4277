"""Cost measurements keyed per device: two boards with one target string keep their own rows,
failures and learned model; a database of the older schema (no device column) is migrated."""
from __future__ import annotations

import argparse
import sqlite3

import numpy as np
import pytest

from relay_eqsat.cost import AnalyticModel, CostCache, CostModel, OpInstance
from relay_eqsat.cost.base import ANALYTIC_ERROR
from relay_eqsat.cost.cache import all_samples, normalize_target, shipped_samples, shipped_table, target_slug
from relay_eqsat.cost.learned import LearnedCostModel, find_model, load_model, model_dir, model_filename
from relay_eqsat.graph import TensorType
from relay_eqsat.pipeline import resolve_cost

TARGET = "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72"
SHIPPED = "llvm -mtriple=x86_64-linux-gnu -mcpu=znver3"  # a target with shipped measurements and model
BOARD_A, BOARD_B = "aarch64-linux-gnu cortex-a72 (rk3399)", "aarch64-linux-gnu cortex-a72 (bcm2711)"
CONV_ATTRS = dict(strides=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), groups=1,
                  data_layout="NCHW", kernel_layout="OIHW", out_dtype="")

#: the schema before the device column, as databases written by earlier versions have it
OLD_SCHEMA = """
CREATE TABLE IF NOT EXISTS costs (
    op TEXT NOT NULL, attrs TEXT NOT NULL, shapes TEXT NOT NULL, dtype TEXT NOT NULL,
    target TEXT NOT NULL, backend TEXT NOT NULL,
    out_type TEXT NOT NULL, seconds REAL NOT NULL, repeats INTEGER NOT NULL, timestamp REAL NOT NULL,
    PRIMARY KEY (op, attrs, shapes, dtype, target, backend));
CREATE TABLE IF NOT EXISTS failures (
    op TEXT NOT NULL, attrs TEXT NOT NULL, shapes TEXT NOT NULL, dtype TEXT NOT NULL,
    target TEXT NOT NULL, backend TEXT NOT NULL,
    out_type TEXT NOT NULL, error TEXT NOT NULL, timestamp REAL NOT NULL,
    PRIMARY KEY (op, attrs, shapes, dtype, target, backend));
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAY_EQSAT_COST_DB", str(tmp_path / "costs.sqlite"))
    monkeypatch.setenv("RELAY_EQSAT_MODEL_DIR", str(tmp_path / "models"))
    monkeypatch.delenv("RELAY_EQSAT_IGNORE_SHIPPED", raising=False)


def conv(c=16, h=8) -> OpInstance:
    return OpInstance.make("nn.conv2d", CONV_ATTRS, [TensorType((1, c, h, h)), TensorType((16, c, 3, 3))])


def add(*shape) -> OpInstance:
    return OpInstance.make("add", {}, [TensorType(shape), TensorType(shape)])


def _samples(n, seed=0):
    """(instance, seconds) of distinct adds and convolutions, a noisy roofline as their time."""
    rng = np.random.default_rng(seed)
    truth = AnalyticModel(peak_flops=50e9, bandwidth=10e9, launch_overhead=4e-6)
    out = {}
    while len(out) < n:
        inst = add(int(rng.integers(1, 64)), int(rng.integers(1, 64))) if rng.random() < 0.5 else \
            conv(int(rng.choice([4, 8, 16])), int(rng.choice([4, 8, 14])))
        t = truth.kernel_cost(inst.op, inst.attrs, inst.input_types, inst.out_type) * rng.uniform(0.9, 1.1)
        out.setdefault(inst.key(), (inst, float(t)))
    return list(out.values())


# -- the cache ----------------------------------------------------------------------------------

def test_devices_do_not_mix(tmp_path):
    c = CostCache(tmp_path / "c.sqlite")
    a, b = conv(), add(4, 16)
    c.put(a, TARGET, "tvm-llvm", 1e-3, 3)  # this machine
    c.put(a, TARGET, "tvm-llvm", 2e-3, 5, device=BOARD_A)
    c.put(a, TARGET, "tvm-llvm", 3e-3, 7, device=BOARD_B)
    c.put(b, TARGET, "tvm-llvm", 4e-6, 9, device=BOARD_A)
    c.close()
    c = CostCache(tmp_path / "c.sqlite")
    assert c.get(a, TARGET).seconds == 1e-3 and c.get(a, TARGET).device == ""
    assert c.get(a, TARGET, "tvm-llvm", device=BOARD_A).seconds == 2e-3
    row = c.get(a, TARGET, device=BOARD_B)
    assert (row.seconds, row.repeats, row.device) == (3e-3, 7, BOARD_B)
    assert c.get(b, TARGET) is None and c.get(b, TARGET, device=BOARD_B) is None
    assert c.get(b, TARGET, device=BOARD_A).seconds == 4e-6
    assert c.get(a, TARGET, device="another board") is None
    assert c.lookup_table(TARGET, "tvm-llvm") == {a.key(): 1e-3}
    assert c.lookup_table(TARGET, "tvm-llvm", device=BOARD_A) == {a.key(): 2e-3, b.key(): 4e-6}
    assert c.lookup_table(TARGET, device=BOARD_B) == {a.key(): 3e-3}
    assert c.count() == 4 and c.count(TARGET, "tvm-llvm") == 4
    assert c.count(device="") == 1 and c.count(TARGET, device=BOARD_A) == 2 and c.count(device=BOARD_B) == 1
    assert c.count(TARGET, "torch-cuda", device=BOARD_A) == 0
    assert sorted((r.device, r.seconds) for r in c.rows(TARGET)) == sorted([
        ("", 1e-3), (BOARD_A, 4e-6), (BOARD_A, 2e-3), (BOARD_B, 3e-3)])
    assert [(r.instance, r.seconds) for r in c.rows(TARGET, "tvm-llvm", device=BOARD_A)] == [(a, 2e-3), (b, 4e-6)]
    assert [r.seconds for r in c.rows(device="")] == [1e-3]
    # replacing one device's row leaves the others'
    c.put(a, TARGET, "tvm-llvm", 2.5e-3, 5, device=BOARD_A)
    assert c.count() == 4 and c.get(a, TARGET, device=BOARD_A).seconds == 2.5e-3
    assert c.get(a, TARGET).seconds == 1e-3 and c.get(a, TARGET, device=BOARD_B).seconds == 3e-3
    assert c.export_rows(TARGET, "tvm-llvm") == {
        "target": normalize_target(TARGET), "backend": "tvm-llvm", "rows": [[*a.key(), 1e-3]]}
    board = c.export_rows(TARGET, "tvm-llvm", device=BOARD_A)
    assert board["device"] == BOARD_A and sorted(r[-1] for r in board["rows"]) == [4e-6, 2.5e-3]


def test_failures_per_device(tmp_path):
    c = CostCache(tmp_path / "c.sqlite")
    a = conv()
    c.put_failure(a, TARGET, "tvm-llvm", "boom on A", device=BOARD_A)
    c.put_failure(a, TARGET, "tvm-llvm", "boom on B", device=BOARD_B)
    assert c.get_failure(a, TARGET, "tvm-llvm") is None
    assert c.get_failure(a, TARGET, "tvm-llvm", device=BOARD_A) == "boom on A"
    assert c.get_failure(a, TARGET, "tvm-llvm", since=0.0, device=BOARD_B) == "boom on B"
    # a measurement clears its own device's failure only
    c.put(a, TARGET, "tvm-llvm", 1e-3, 3, device=BOARD_A)
    assert c.get_failure(a, TARGET, "tvm-llvm", device=BOARD_A) is None
    assert c.get_failure(a, TARGET, "tvm-llvm", device=BOARD_B) == "boom on B"
    c.put_failure(a, TARGET, "tvm-llvm", "boom here")
    c.put(a, TARGET, "tvm-llvm", 5e-4, 3, device=BOARD_B)
    assert c.get_failure(a, TARGET, "tvm-llvm") == "boom here"


def _old_database(path, wal: bool = False):
    """A database of the schema before the device column, with two costs, a failure and a meta row."""
    a, b, f = conv(), add(4, 16), add(8, 8)
    conn = sqlite3.connect(path)
    if wal:
        conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(OLD_SCHEMA)
    # b first: the migrated table keeps the rows' order
    conn.execute("INSERT INTO costs VALUES (?,?,?,?,?,?,?,?,?,?)",
                 b.key() + (normalize_target(TARGET), "tvm-llvm", b.out_str, 2e-6, 5, 100.0))
    conn.execute("INSERT INTO costs VALUES (?,?,?,?,?,?,?,?,?,?)",
                 a.key() + (normalize_target(TARGET), "tvm-llvm", a.out_str, 1.5e-4, 7, 200.0))
    conn.execute("INSERT INTO failures VALUES (?,?,?,?,?,?,?,?,?)",
                 f.key() + (normalize_target(TARGET), "tvm-llvm", f.out_str, "old boom", 300.0))
    conn.execute("INSERT INTO meta VALUES ('host_target', 'llvm -mcpu=x')")
    conn.commit()
    conn.close()
    return a, b, f


def test_old_schema_is_migrated_keeping_its_rows_as_this_machine(tmp_path):
    db = tmp_path / "old.sqlite"
    a, b, f = _old_database(db)
    c = CostCache(db)
    assert [(r.instance, r.seconds, r.repeats, r.timestamp, r.device) for r in c.rows()] == [
        (b, 2e-6, 5, 100.0, ""), (a, 1.5e-4, 7, 200.0, "")]
    assert c.error is None
    assert c.count(device="") == 2 and c.count(device=BOARD_A) == 0
    assert c.get(a, TARGET, "tvm-llvm").seconds == 1.5e-4
    assert c.lookup_table(TARGET, "tvm-llvm") == {a.key(): 1.5e-4, b.key(): 2e-6}
    assert c.get_failure(f, TARGET, "tvm-llvm") == "old boom"
    assert c.get_failure(f, TARGET, "tvm-llvm", device=BOARD_A) is None
    assert c.get_meta("host_target") == "llvm -mcpu=x"
    # the device is part of the key now: another device's row of the same kernel is a row of its own
    c.put(a, TARGET, "tvm-llvm", 9e-4, 3, device=BOARD_A)
    c.put_failure(f, TARGET, "tvm-llvm", "new boom", device=BOARD_A)
    assert c.count() == 3 and c.get(a, TARGET).seconds == 1.5e-4
    c.close()
    conn = sqlite3.connect(db)
    for table in ("costs", "failures"):
        cols = {row[1]: row for row in conn.execute(f"PRAGMA table_info({table})")}
        assert cols["device"][5] > 0  # in the primary key
    assert {t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")} == {
        "costs", "failures", "meta"}
    conn.close()
    again = CostCache(db)  # a migrated database is opened as it is
    assert again.count() == 3 and again.get(a, TARGET, device=BOARD_A).seconds == 9e-4
    assert again.get_failure(f, TARGET, "tvm-llvm") == "old boom"
    assert again.get_failure(f, TARGET, "tvm-llvm", device=BOARD_A) == "new boom"


def test_old_schema_that_cannot_be_written_is_read_as_this_machine(tmp_path, monkeypatch):
    db = tmp_path / "old.sqlite"
    a, b, f = _old_database(db, wal=True)
    connect = sqlite3.connect
    # a read-only file (the tests run as root, so chmod would not do it)
    monkeypatch.setattr(sqlite3, "connect", lambda path, *args, **kw: connect(f"file:{path}?mode=ro", *args,
                                                                              uri=True, **kw))
    c = CostCache(db)
    assert [(r.instance, r.seconds, r.device) for r in c.rows()] == [(b, 2e-6, ""), (a, 1.5e-4, "")]
    assert "readonly" in c.error
    assert c.lookup_table(TARGET, "tvm-llvm") == {a.key(): 1.5e-4, b.key(): 2e-6}
    assert c.lookup_table(TARGET, "tvm-llvm", device=BOARD_A) == {}
    assert c.get_failure(f, TARGET, "tvm-llvm") == "old boom"
    c.put(a, TARGET, "tvm-llvm", 9e-4, 3, device=BOARD_A)  # dropped
    assert c.count() == 2 and c.count(device=BOARD_A) == 0
    monkeypatch.setattr(sqlite3, "connect", connect)
    conn = sqlite3.connect(db)
    assert "device" not in {row[1] for row in conn.execute("PRAGMA table_info(costs)")}  # left as it was
    conn.close()


def test_all_samples_per_device(tmp_path):
    c = CostCache(tmp_path / "c.sqlite")
    shipped = shipped_samples(SHIPPED, "tvm-llvm")
    assert len(shipped) > 10
    first, _ = shipped[0]
    mine, board = _samples(2, seed=1), _samples(3, seed=2)
    for inst, t in mine:
        c.put(inst, SHIPPED, "tvm-llvm", t, 3)
    c.put(first, SHIPPED, "tvm-llvm", 0.125, 3)  # overrides the shipped row
    for inst, t in board:
        c.put(inst, SHIPPED, "tvm-llvm", t, 3, device=BOARD_A)
    here = dict((i.key(), t) for i, t in all_samples(c, SHIPPED, "tvm-llvm"))
    expected = {i.key(): t for i, t in shipped} | {i.key(): t for i, t in mine} | {first.key(): 0.125}
    assert here == expected
    on_a = all_samples(c, SHIPPED, "tvm-llvm", device=BOARD_A)
    assert sorted(t for _, t in on_a) == sorted(t for _, t in board)
    assert {i.key() for i, _ in on_a} == {i.key() for i, _ in board}
    assert all_samples(c, SHIPPED, "tvm-llvm", device=BOARD_B) == []
    assert all_samples(c, TARGET, "tvm-llvm", device=BOARD_A) == []


# -- models -------------------------------------------------------------------------------------

def test_model_filename_per_device():
    here = model_filename(TARGET, "tvm-llvm")
    assert here == f"tvm-llvm__{target_slug(TARGET)}.json"
    names = {model_filename(TARGET, "tvm-llvm", d) for d in (BOARD_A, BOARD_B, "a b", "a_b", "!!")}
    assert len(names) == 5 and here not in names
    for d in (BOARD_A, "!!"):
        name = model_filename(TARGET, "tvm-llvm", d)
        assert name.startswith(here[:-len(".json")] + "__") and name.endswith(".json") and "/" not in name
        assert name == model_filename(TARGET, "tvm-llvm", d)  # stable
    assert "rk3399" in model_filename(TARGET, "tvm-llvm", BOARD_A)


def test_device_model_is_its_own(tmp_path):
    c = CostCache(tmp_path / "c.sqlite")
    for inst, t in _samples(30, seed=3):
        c.put(inst, SHIPPED, "tvm-llvm", t, 3, device=BOARD_A)
    for inst, t in _samples(12, seed=4):
        c.put(inst, SHIPPED, "tvm-llvm", t, 3)
    # a device has no model but its own: never the shipped one of its target, nor this machine's
    assert find_model(SHIPPED, "tvm-llvm") is not None and load_model(SHIPPED, "tvm-llvm").meta.get("shipped")
    assert find_model(SHIPPED, "tvm-llvm", BOARD_A) is None and load_model(SHIPPED, "tvm-llvm", BOARD_A) is None
    model, report = LearnedCostModel.train_from_cache(c, SHIPPED, "tvm-llvm", device=BOARD_A, rounds=10)
    assert report.n_rows == 30 and model.device == BOARD_A and model.meta["device"] == BOARD_A
    here, here_report = LearnedCostModel.train_from_cache(c, SHIPPED, "tvm-llvm", rounds=10)
    assert here_report.n_rows == 12 and here.device == "" and "device" not in here.meta
    with pytest.raises(ValueError, match="no measurements"):
        LearnedCostModel.train_from_cache(c, SHIPPED, "tvm-llvm", device=BOARD_B)
    path = model.save(model_dir() / model_filename(SHIPPED, "tvm-llvm", BOARD_A))
    assert find_model(SHIPPED, "tvm-llvm", BOARD_A) == path
    assert load_model(SHIPPED, "tvm-llvm", BOARD_A).meta["report"]["n_rows"] == 30
    assert load_model(SHIPPED, "tvm-llvm", BOARD_B) is None
    assert load_model(SHIPPED, "tvm-llvm").meta.get("shipped")  # this machine's unchanged
    assert load_model(SHIPPED, None, BOARD_A).meta["device"] == BOARD_A  # the target's backends tried


# -- the cost model ------------------------------------------------------------------------------

def test_cost_model_reads_only_its_device(tmp_path):
    db = tmp_path / "c.sqlite"
    c = CostCache(db)
    a, b, mine = conv(), add(4, 16), add(3, 5)
    c.put(a, SHIPPED, "tvm-llvm", 0.5, 3)
    c.put(mine, SHIPPED, "tvm-llvm", 0.25, 3)
    c.put(a, SHIPPED, "tvm-llvm", 2.0, 3, device=BOARD_A)
    c.put(b, SHIPPED, "tvm-llvm", 3.0, 3, device=BOARD_A)
    c.put(b, SHIPPED, "tvm-llvm", 7.0, 3, device=BOARD_B)
    shipped = shipped_table(SHIPPED, "tvm-llvm")
    assert shipped and mine.key() not in shipped

    local = CostModel("auto", SHIPPED, "tvm-llvm", cache=db)
    assert local.device == "" and local.remote is None and local.jobs is None
    table = local._lookup_table()
    assert table == {**shipped, a.key(): 0.5, mine.key(): 0.25}
    assert local.has_host_data and local.learned is not None and not local.foreign_model

    on_a = CostModel("auto", SHIPPED, "tvm-llvm", cache=db, device=BOARD_A)
    assert on_a.device == BOARD_A
    assert on_a._lookup_table() == {a.key(): 2.0, b.key(): 3.0}
    assert on_a.kernel_cost(a.op, a.attrs, a.input_types, a.out_type) == 2.0
    assert on_a.kernel_cost(b.op, b.attrs, b.input_types, b.out_type) == 3.0
    analytic = on_a.analytic.kernel_cost(mine.op, mine.attrs, mine.input_types, mine.out_type)
    assert on_a.kernel_cost(mine.op, mine.attrs, mine.input_types, mine.out_type) == analytic != 0.25
    assert on_a.is_measured(a) and not on_a.is_measured(mine)
    first_shipped = shipped_samples(SHIPPED, "tvm-llvm")[0][0]
    assert local.is_measured(first_shipped) and not on_a.is_measured(first_shipped)
    assert on_a.learned is None and not on_a.has_host_data and on_a.calibrated_error() == ANALYTIC_ERROR
    assert "device=" in repr(on_a)
    on_b = CostModel("auto", SHIPPED, "tvm-llvm", cache=db, device=BOARD_B)
    assert on_b._lookup_table() == {b.key(): 7.0}
    with pytest.raises(ValueError, match="no learned cost model"):
        CostModel("learned", SHIPPED, "tvm-llvm", cache=db, device=BOARD_A)

    # with a model trained on its own rows, the device has data of its own
    for inst, t in _samples(20, seed=5):
        c.put(inst, SHIPPED, "tvm-llvm", t, 3, device=BOARD_A)
    model, _ = LearnedCostModel.train_from_cache(c, SHIPPED, "tvm-llvm", device=BOARD_A, rounds=10)
    model.meta["whole_graph_error"] = 0.123
    model.save(model_dir() / model_filename(SHIPPED, "tvm-llvm", BOARD_A))
    on_a = CostModel("auto", SHIPPED, "tvm-llvm", cache=db, device=BOARD_A)
    assert on_a.learned.device == BOARD_A and not on_a.foreign_model
    assert on_a.has_host_data and on_a.calibrated_error() == 0.123
    assert CostModel("auto", SHIPPED, "tvm-llvm", cache=db, device=BOARD_B).learned is None
    # another device's model, handed over, is foreign
    foreign = CostModel("auto", SHIPPED, "tvm-llvm", cache=db, device=BOARD_B, learned=model)
    assert foreign.foreign_model and not foreign.has_host_data
    assert CostModel("auto", SHIPPED, "tvm-llvm", cache=db, learned=model).foreign_model
    local = CostModel("auto", SHIPPED, "tvm-llvm", cache=db)
    assert local.learned.meta.get("shipped") and local.learned.device == ""


def test_resolve_cost_passes_device_remote_and_jobs(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAY_EQSAT_COST_DB", str(tmp_path / "c.sqlite"))
    remote = object()
    cm = resolve_cost("analytic", SHIPPED, device=BOARD_A, remote=remote, jobs=3)
    assert (cm.kind, cm.device, cm.remote, cm.jobs) == ("analytic", BOARD_A, remote, 3)
    CostCache().put(conv(), SHIPPED, "tvm-llvm", 4.0, 3, device=BOARD_A)
    auto = resolve_cost("auto", SHIPPED, device=BOARD_A, jobs=2)
    assert (auto.device, auto.jobs, auto.remote) == (BOARD_A, 2, None)
    a = conv()
    assert auto.kernel_cost(a.op, a.attrs, a.input_types, a.out_type) == 4.0
    assert resolve_cost(cm) is cm
    assert resolve_cost("analytic").device == ""


# -- relay-eqsat measure: training and saving a device's model ------------------------------------

def test_cli_trains_and_saves_a_device_model(tmp_path, capsys):
    cli = pytest.importorskip("relay_eqsat.passes.cli.measure")
    c = CostCache()
    for inst, t in _samples(15, seed=6):
        c.put(inst, SHIPPED, "tvm-llvm", t, 3, device=BOARD_A)
    for inst, t in _samples(25, seed=7):
        c.put(inst, SHIPPED, "tvm-llvm", t, 3)
    args = argparse.Namespace(ship=False, ship_default=False, model_out=None, whole_times=None)
    assert cli.train_and_save(args, c, SHIPPED, "tvm-llvm", {}, {}, device=BOARD_A) == 0
    path = model_dir() / model_filename(SHIPPED, "tvm-llvm", BOARD_A)
    assert path.is_file() and str(path) in capsys.readouterr().out
    model = load_model(SHIPPED, "tvm-llvm", BOARD_A)
    assert model.meta["report"]["n_rows"] == 15 and model.device == BOARD_A
    assert not (model_dir() / model_filename(SHIPPED, "tvm-llvm")).exists()
    assert cli.train_and_save(args, c, SHIPPED, "tvm-llvm", {}, {}, device=BOARD_B) == 1
    assert "no measurements" in capsys.readouterr().err
    # a device's measurements do not ship with the package
    ship = argparse.Namespace(ship=True, ship_default=False, model_out=None, whole_times=None)
    assert cli._save(model, ship, "tvm-llvm", SHIPPED, c, device=BOARD_A) == 2
    assert "this machine" in capsys.readouterr().err
