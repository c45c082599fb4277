"""pytest plugin for users' regression suites: the ``eqsat`` fixture, the ``eqsat`` marker,
the ``--eqsat-*`` options and snapshots of what the pass did.

Installed with the package (entry point ``pytest11``), so pytest loads it in every run of an
environment that has relay-eqsat; it therefore imports no TVM (the fixture's body imports
the TVM side, :mod:`relay_eqsat.passes.regression.fixture`, when a test asks for ``eqsat``).

A test::

    def test_squeezenet(eqsat):
        result = eqsat("zoo:squeezenet", small=True)     # or eqsat(mod, params), eqsat("m.onnx", input_shapes=...)
        assert result.report["stop_reason"] == "saturated"

runs EqSatPass, asserts that the optimized module computes the original's outputs on seeded
random inputs and compares what the pass did with a JSON snapshot beside the test file
(``__eqsat_snapshots__/<test file>/<test name>.json``).

Where a setting comes from, highest first (a value set at a higher level wins):

1. the call: ``eqsat(mod, params, node_limit=2000, rtol=1e-3)``
2. the test's ``@pytest.mark.eqsat(...)`` marker (closest first: function, class, module)
3. the command line: ``--eqsat-node-limit 2000``, ``--eqsat-rtol 1e-3``...
4. the ini file: ``eqsat_options`` lines ``name = value``
5. the plugin's defaults: :data:`PINNED` for the pass (decide on the cost model, not on
   timings of this machine) and :data:`SETTINGS` for the checks
6. the pass's own defaults (``relay_eqsat.options``)
"""
from __future__ import annotations

import json
from typing import Any, Mapping

import pytest

from relay_eqsat.options import OPTIONS, flag_name

from .settings import _CALL_ONLY, PINNED, SETTINGS, SettingError, config_layers, split




#: the terminal summary's records (one per eqsat call), gathered from the test reports
_RECORDS = pytest.StashKey[list]()
#: a test's own records, filled by its eqsat calls and sent with its teardown report: a
#: pytest-xdist worker's reports reach the controller, whose terminal summary lists them
_ITEM_RECORDS = pytest.StashKey[list]()
#: the attribute of a teardown report carrying its test's records
REPORT_ATTR = "eqsat_records"


# -- hooks ----------------------------------------------------------------------------

def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("eqsat", "relay-eqsat regression checks (the eqsat fixture)")
    group.addoption("--eqsat-update-snapshots", action="store_true", default=False,
                    help="write the eqsat snapshots of the tests that run (missing or different ones)")
    for name, (typ, default, text) in SETTINGS.items():
        if name in _CALL_ONLY:
            continue
        kwargs: dict[str, Any] = ({"action": "store_const", "const": True} if typ is bool
                                  else {"metavar": name.upper()})
        group.addoption(flag_name(name, "--eqsat-"), dest=f"eqsat_{name}", default=None,
                        help=f"{text} (default: {default})".replace("%", "%%"), **kwargs)
    for name, opt in OPTIONS.items():
        kwargs = {"action": "store_const", "const": True} if opt.type is bool else {"metavar": name.upper()}
        default = PINNED.get(name, opt.default)
        group.addoption(flag_name(name, "--eqsat-"), dest=f"eqsat_{name}", default=None,
                        help=f"EqSatPass option {name}: {opt.help} (default here: {default})".replace("%", "%%"),
                        **kwargs)
    parser.addini("eqsat_options", type="linelist", default=[],
                  help="'name = value' lines: EqSatPass options and eqsat plugin settings for every test")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "eqsat(**options): EqSatPass options and eqsat plugin settings for this test's eqsat "
                   "calls (over the command line and the ini file; a call's own keywords win)")
    config.stash[_RECORDS] = []
    config.pluginmanager.register(_Gatherer(config.stash[_RECORDS]), "relay-eqsat-records")
    try:
        for source, values in config_layers(config):
            split(values, source)
    except SettingError as e:
        raise pytest.UsageError(f"relay-eqsat: {e}") from None


@pytest.fixture
def eqsat(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Run EqSatPass on a model and check it: ``eqsat(mod, params=None, **options)``,
    ``eqsat("zoo:NAME", small=True)`` or ``eqsat("model.onnx", input_shapes={...})``; returns the
    result (``.module``, ``.params``, ``.report``, ``.changed``...). See
    :class:`relay_eqsat.passes.regression.fixture.EqSat`."""
    from .fixture import EqSat

    records = request.node.stash.setdefault(_ITEM_RECORDS, [])
    return EqSat(request.node, request.config, tmp_path_factory, records)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    outcome = yield
    records = item.stash.get(_ITEM_RECORDS, None)
    if call.when == "teardown" and records:
        # plain JSON values: pytest-xdist sends the report to the controller (execnet, no numpy types)
        setattr(outcome.get_result(), REPORT_ATTR, json.loads(json.dumps(records, default=_plain)))


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else str(value)


class _Gatherer:
    """Gathers the records the test reports carry (a pytest-xdist worker's too) for the summary."""

    def __init__(self, records: list):
        self.records = records

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.records.extend(getattr(report, REPORT_ATTR, None) or ())


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    records = config.stash.get(_RECORDS, [])
    if not records:
        return
    terminalreporter.write_sep("-", "relay-eqsat")
    for rec in records:
        terminalreporter.write_line(format_record(rec))
    counts: dict[str, int] = {}
    for rec in records:
        status = rec.get("snapshot", "").split(" ")[0]
        counts[status] = counts.get(status, 0) + 1
    parts = [f"{n} {status}" for status, n in sorted(counts.items()) if status]
    terminalreporter.write_line(f"{len(records)} eqsat call{'s' if len(records) != 1 else ''}; snapshots: "
                                + (", ".join(parts) or "none"))


def format_record(rec: Mapping[str, Any]) -> str:
    """The terminal summary's line for one eqsat call."""
    before, after = rec.get("cost_before"), rec.get("cost_after")
    cost = ("cost ?" if before is None or after is None else
            f"cost {before * 1e3:.4f} -> {after * 1e3:.4f} ms ({before / after if after else 1.0:.3f}x)")
    parts = [f"{rec['test']}: {rec['model']}", cost, "changed" if rec.get("changed") else "unchanged",
             f"snapshot {rec.get('snapshot', '-')}"]
    if rec.get("measured"):
        parts.append(rec["measured"])
    if rec.get("failed"):
        parts.append(f"FAILED: {rec['failed']}")
    return ", ".join(parts)
