"""The plugin's settings and where they come from: the plugin's defaults, the ini key
``eqsat_options``, the command line, the ``eqsat`` marker and the call, merged by :func:`resolve`
(highest last). TVM-free, read by the plugin (:mod:`.plugin`) and the fixture (:mod:`.fixture`)."""
from __future__ import annotations

from typing import Any, Iterable, Mapping

import pytest

from relay_eqsat.options import OPTIONS, coerce


#: pass options the plugin sets unless the user does: the pass decides on the cost model alone
#: (no timing, no kernel measurement on this machine), so the optimized program depends on the
#: options and the package's data, not on the machine's speed or load, and any predicted gain is
#: kept, so the rewritten program is the one checked against the original
PINNED: dict[str, Any] = {"check_runtime": "off", "calibrate": "off", "min_gain": 0.0}


#: the plugin's own settings: name -> (type, default, help)
SETTINGS: dict[str, tuple[type, Any, str]] = {
    "rtol": (float, 1e-4, "output check: relative tolerance, times the output's largest magnitude"),
    "atol": (float, 1e-5, "output check: absolute tolerance"),
    "input_seed": (int, 0, "seed of the random inputs"),
    "input_ranges": (dict, None, "{input: (low, high)}: the range random values of an input are drawn from "
                                 "(marker or call only)"),
    "snapshot": (bool, True, "compare with (or write) the test's snapshot"),
    "cost_tolerance": (float, 0.01, "snapshot: relative increase of the predicted cost after the pass "
                                    "that fails the test"),
    "measure": (bool, False, "build both programs, time them in paired rounds and fail if the optimized "
                             "one is slower beyond measure_threshold"),
    "measure_threshold": (float, 0.05, "measure: the median runtime ratio optimized/original may exceed 1 "
                                       "by this much"),
    "measure_rounds": (int, 9, "measure: paired timing rounds (each timing at least 50 ms)"),
    "cost_db": (str, "isolated", "cost database the pass reads: 'isolated' (an empty one per session: costs "
                                 "rest on the package's shipped data only), 'default' ($RELAY_EQSAT_COST_DB or "
                                 "the user cache) or a path"),
}


#: settings that make no sense on the command line or in the ini file
_CALL_ONLY = ("input_ranges", "snapshot")


#: the layers of :func:`resolve`, lowest precedence first
SOURCES = ("plugin default", "ini eqsat_options", "command line", "marker", "call")


class SettingError(ValueError):
    """A plugin setting or pass option with an unknown name or a bad value."""


def _coerce_setting(name: str, value: Any) -> Any:
    typ, _default, _ = SETTINGS[name]
    if value is None or typ is dict:
        if typ is dict and value is not None and not isinstance(value, Mapping):
            raise SettingError(f"{name}: {value!r} is not a mapping {{input name: (low, high)}}")
        return value
    if typ is bool:
        if isinstance(value, str):
            text = value.strip().lower()
            if text in ("true", "1", "yes", "on"):
                return True
            if text in ("false", "0", "no", "off"):
                return False
        elif isinstance(value, (bool, int)) and value in (0, 1):
            return bool(value)
        raise SettingError(f"{name}: {value!r} is not a boolean")
    try:
        out = typ(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise SettingError(f"{name}: {value!r} is not {'an integer' if typ is int else 'a ' + typ.__name__}"
                           ) from None
    if typ in (int, float) and not out >= (1 if name == "measure_rounds" else 0):
        raise SettingError(f"{name}: {value!r} must be >= {1 if name == 'measure_rounds' else 0}")
    return out


def split(values: Mapping[str, Any], where: str) -> tuple[dict, dict]:
    """(pass options, plugin settings) of ``values``, each coerced; :class:`SettingError` naming
    ``where`` for an unknown name or a bad value."""
    options, settings = {}, {}
    for name, value in values.items():
        try:
            if name in SETTINGS:
                settings[name] = _coerce_setting(name, value)
            elif name in OPTIONS:
                options[name] = coerce(name, value)
            else:
                raise SettingError(f"unknown name {name!r}; EqSatPass options: {', '.join(OPTIONS)}; "
                                   f"plugin settings: {', '.join(SETTINGS)}")
        except (SettingError, ValueError) as e:
            raise SettingError(f"{where}: {e}") from None
    return options, settings


def resolve(layers: Iterable[tuple[str, Mapping[str, Any]]]) -> tuple[dict, dict, dict]:
    """Merge ``(source, values)`` layers, lowest precedence first: (pass options, plugin settings,
    {name: source of its value}). The plugin's defaults come first; pass options not set anywhere
    are left to the pass's own defaults."""
    options: dict[str, Any] = dict(PINNED)
    settings: dict[str, Any] = {name: spec[1] for name, spec in SETTINGS.items()}
    sources = {name: SOURCES[0] for name in (*PINNED, *SETTINGS)}
    for source, values in layers:
        opts, sets = split(values, source)
        options.update(opts)
        settings.update(sets)
        sources.update({name: source for name in (*opts, *sets)})
    return options, settings, sources


def parse_ini_lines(lines: Iterable[str]) -> dict[str, str]:
    """``name = value`` lines (the ini key ``eqsat_options``) as a dict; blank lines and ``#``
    comments are skipped."""
    out = {}
    for line in lines:
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        name, sep, value = text.partition("=")
        if not sep or not name.strip():
            raise SettingError(f"ini eqsat_options: {line.strip()!r} is not 'name = value'")
        out[name.strip().replace("-", "_")] = value.strip()
    return out


def config_layers(config: pytest.Config) -> list[tuple[str, dict]]:
    """The ini and command-line layers of ``config`` (raw values)."""
    ini = parse_ini_lines(config.getini("eqsat_options"))
    cli = {}
    for name in (*OPTIONS, *SETTINGS):
        value = getattr(config.option, f"eqsat_{name}", None)
        if value is not None:
            cli[name] = value
    return [(SOURCES[1], ini), (SOURCES[2], cli)]


def marker_values(node: pytest.Item) -> dict[str, Any]:
    """The keyword arguments of the ``eqsat`` markers on ``node``, the closest one winning."""
    merged: dict[str, Any] = {}
    for mark in reversed(list(node.iter_markers("eqsat"))):
        if mark.args:
            raise SettingError(f"marker eqsat takes keyword arguments only, not {mark.args!r}")
        merged.update(mark.kwargs)
    return merged
