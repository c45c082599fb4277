"""The ``eqsat`` fixture of the users' pytest plugin (:mod:`relay_eqsat.passes.regression.plugin`): TVM side.

``eqsat(model, ...)`` (an :class:`EqSat`) loads the model, runs EqSatPass with the options the
plugin resolved (call, marker, command line, ini, plugin defaults), builds the original and the
optimized program, runs both on seeded random inputs and fails the test if an output differs
beyond the tolerance; then compares what the pass did with the test's snapshot
(:mod:`relay_eqsat.passes.regression.snapshots`), and with ``measure`` times both programs.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import statistics
import warnings
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import tvm
from tvm import relay

from .settings import SettingError, config_layers, marker_values, resolve

from . import snapshots
from relay_eqsat.passes.relay.eqsat_pass import EqSatPass, bind_params
from relay_eqsat.passes.runtime.build import build, executor, output_error, run
from relay_eqsat.passes.runtime.timing import paired_ratio, time_rounds
from relay_eqsat.passes.runtime.target import host_target, runs_here

#: random integers for an input no index op reads: [0, 2), valid as a mask, a token type or an
#: index into any table; an input that indexes a table (take, gather, one_hot) gets [0, its size)
INT_RANGE = (0, 2)
#: each timing of ``measure`` lasts at least this long
MEASURE_MIN_REPEAT_MS = 50


class EqSatOutputMismatch(AssertionError):
    """The optimized program computes different outputs (beyond rtol/atol), or has other outputs."""


class EqSatSnapshotMismatch(AssertionError):
    """What the pass did differs from the test's snapshot, or the snapshot is missing."""


class EqSatSlower(AssertionError):
    """``measure``: the optimized program ran slower than the original beyond the threshold."""


class EqSatSnapshotWarning(UserWarning):
    """The run's result may depend on the machine's speed (a time limit stopped the search or the
    exact extractor), so its snapshot may not reproduce elsewhere."""


@dataclasses.dataclass
class EqSatResult:
    """What one ``eqsat(...)`` call did.

    module, params    the optimized module (its weights bound as constants; ``params`` is {}
                      then) to build with ``relay.build(module, target, params=params)``
    report            EqSatPass's ``last_report``; ``changed`` its verdict
    original, original_params   the module as loaded and its weights
    options           the pass options used (all of them: EqSatPass's ``last_options``)
    settings, sources the plugin's settings, and where each value set by the plugin came from
    inputs, max_error the random inputs and the largest relative output error
    snapshot, snapshot_status   the snapshot file and matched / written / updated / off
    measured          with ``measure``: runtime_before, runtime_after (medians, s), ratio, rounds
    """

    module: tvm.IRModule
    params: dict
    report: dict
    changed: bool
    original: tvm.IRModule
    original_params: dict
    options: dict
    settings: dict
    sources: dict
    target: str
    inputs: dict
    max_error: float
    snapshot: Path | None = None
    snapshot_status: str = "off"
    measured: dict | None = None

    def __repr__(self) -> str:
        before, after = self.report.get("cost_before", 0.0), self.report.get("cost_after", 0.0)
        return (f"EqSatResult(changed={self.changed}, cost {before * 1e3:.4f} -> {after * 1e3:.4f} ms, "
                f"max_error={self.max_error:.3g}, snapshot={self.snapshot_status!r})")


# -- models and inputs ---------------------------------------------------------------------

def _shape_text(shapes: Mapping[str, Any]) -> str:
    return " ".join(f"{name}:[{','.join(str(int(d)) for d in dims)}]" for name, dims in shapes.items())


def load_model(model, params=None, *, input_shapes=None, small=False, batch=1, model_format=None,
               test_dir: Path | None = None) -> tuple[tvm.IRModule, dict, str]:
    """(module, params, name) of a Relay module or function, ``zoo:NAME`` or a model file (a
    relative path is looked up beside the test file, then in the working directory)."""
    if not (isinstance(model, str) and model.startswith("zoo:")) and (small or batch != 1):
        raise ValueError("eqsat: small= and batch= are for zoo models ('zoo:NAME')")
    if isinstance(model, (tvm.IRModule, relay.Function)):
        if input_shapes is not None or model_format is not None:
            raise ValueError("eqsat: input_shapes= and model_format= are for model files")
        mod = model if isinstance(model, tvm.IRModule) else tvm.IRModule.from_expr(model)
        return mod, dict(params or {}), "module"
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"eqsat: expected a Relay IRModule or Function, 'zoo:NAME' or a model file path, "
                        f"not {type(model).__name__}")
    spec = os.fspath(model)
    if spec.startswith("zoo:"):
        from relay_eqsat.passes import zoo

        mod, zparams = zoo.get(spec[4:], small=small, batch=batch)
        return mod, {**zparams, **(params or {})}, spec + (" (small)" if small else "")
    from relay_eqsat.passes.cli.model_file import load_model_file

    path = Path(spec)
    if not path.is_absolute() and test_dir is not None and (test_dir / path).exists():
        path = test_dir / path
    shapes = _shape_text(input_shapes) if isinstance(input_shapes, Mapping) else input_shapes
    mod, fparams = load_model_file(str(path), shapes, model_format)
    fparams = {k: (v.numpy() if hasattr(v, "numpy") else np.asarray(v)) for k, v in (fparams or {}).items()}
    return mod, {**fparams, **(params or {})}, path.name


def index_bounds(func: relay.Function) -> dict[str, int]:
    """{integer input: the exclusive upper bound of the values valid wherever it is used as an
    index}: the size of the indexed axis of every ``take``/``gather`` and the depth of every
    ``one_hot`` whose indices depend on the input (through any ops: a cast, the ONNX frontend's
    negative-index normalization...)."""
    ints = {p for p in func.params if np.issubdtype(np.dtype(str(p.checked_type.dtype)), np.integer)}
    bounds: dict[str, int] = {}
    if not ints:
        return bounds

    def axis_size(data, axis) -> int | None:
        shape = [int(d) for d in data.checked_type.shape]
        if axis is None:
            return int(np.prod(shape))
        axis = int(axis)
        return shape[axis + len(shape) if axis < 0 else axis] if shape else None

    def visit(expr):
        if not (isinstance(expr, relay.Call) and isinstance(expr.op, tvm.ir.Op)):
            return
        name = expr.op.name
        if name == "take":
            size, indices = axis_size(expr.args[0], expr.attrs.axis), expr.args[1]
        elif name == "gather":
            size, indices = axis_size(expr.args[0], expr.attrs.axis), expr.args[1]
        elif name == "one_hot":
            size, indices = int(expr.attrs.depth), expr.args[0]
        else:
            return
        if not size:
            return
        for var in relay.analysis.free_vars(indices):
            if var in ints:
                bounds[var.name_hint] = min(bounds.get(var.name_hint, size), size)

    relay.analysis.post_order_visit(func.body, visit)
    return bounds


def draw_inputs(func: relay.Function, seed: int, ranges: Mapping[str, Any] | None = None,
                given: Mapping[str, Any] | None = None) -> dict[str, np.ndarray]:
    """Seeded random values for ``func``'s parameters: ``given`` arrays as they are; floats standard
    normal (uniform in ``ranges[name]`` when set); integers in [low, high) from ``ranges``, else
    [0, size) when the input indexes a table (:func:`index_bounds`), else :data:`INT_RANGE`;
    booleans uniform."""
    ranges, given = dict(ranges or {}), dict(given or {})
    names = [p.name_hint for p in func.params]
    unknown = sorted(set(ranges) - set(names)) + sorted(set(given) - set(names))
    if unknown:
        raise ValueError(f"eqsat: no input named {', '.join(map(repr, unknown))}; inputs: {', '.join(names)}")
    bounds = index_bounds(func)
    rng = np.random.default_rng(seed)
    out = {}
    for p in func.params:
        name, dtype = p.name_hint, np.dtype(str(p.checked_type.dtype))
        shape = tuple(int(d) for d in p.checked_type.shape)
        if name in given:
            value = np.asarray(given[name])
            if value.shape != shape:
                raise ValueError(f"eqsat: input {name!r} has shape {list(shape)}, not {list(value.shape)}")
            out[name] = value.astype(dtype, copy=False)
        elif dtype == np.bool_:
            out[name] = rng.integers(0, 2, size=shape).astype(bool)
        elif np.issubdtype(dtype, np.integer):
            low, high = ranges.get(name, (INT_RANGE[0], bounds.get(name, INT_RANGE[1])))
            out[name] = rng.integers(int(low), int(high), size=shape).astype(dtype)
        elif name in ranges:
            low, high = ranges[name]
            out[name] = rng.uniform(float(low), float(high), size=shape).astype(dtype)
        else:
            out[name] = rng.standard_normal(shape).astype(dtype)
    return out


# -- the pass and the checks ---------------------------------------------------------------

@contextlib.contextmanager
def cost_database(path: str | None):
    """``$RELAY_EQSAT_COST_DB`` set to ``path`` inside the block (None: left as it is)."""
    if path is None:
        yield
        return
    old = os.environ.get("RELAY_EQSAT_COST_DB")
    os.environ["RELAY_EQSAT_COST_DB"] = path
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("RELAY_EQSAT_COST_DB", None)
        else:
            os.environ["RELAY_EQSAT_COST_DB"] = old


def run_pass(mod: tvm.IRModule, options: Mapping[str, Any]) -> tuple[tvm.IRModule, dict | None, dict, list]:
    """EqSatPass with ``options`` on ``mod`` (weights bound): (module, last_report, last_options,
    the pass's own warnings). The fixture calls it through this module's namespace, so a test can
    monkeypatch it."""
    eqsat = EqSatPass(**options)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = eqsat(mod)
    for w in caught:  # hand them on to pytest's own warning capture
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return out, eqsat.last_report, eqsat.last_options or {}, [str(w.message) for w in caught]


def describe_mismatch(ref: list[np.ndarray], got: list[np.ndarray], rtol: float, atol: float) -> tuple[float, str]:
    """(largest relative error, "" or why the outputs differ): output ``k`` passes when
    ``max|got - ref| <= atol + rtol * max|ref|`` (the output's scale: rewrites reorder sums, so an
    element near 0 carries an error proportional to the output's magnitude) and both have the
    same inf/nan."""
    err, why = output_error(ref, got)
    if why is not None:
        return err, why
    lines = []
    for k, (r, g) in enumerate(zip(ref, got)):
        if r.size == 0:
            continue
        rf, gf = r.astype(np.float64), g.astype(np.float64)
        finite = np.isfinite(rf) & np.isfinite(gf)
        if not finite.any():
            continue
        diff = np.where(finite, np.abs(rf - gf), 0.0)
        scale = float(np.abs(rf[finite]).max())
        tol = atol + rtol * scale
        worst = float(diff.max())
        if worst > tol:
            at = np.unravel_index(int(diff.argmax()), diff.shape)
            lines.append(f"output {k} {r.dtype}{list(r.shape)}: max abs error {worst:.4g} at {tuple(map(int, at))} "
                         f"(original {rf[at]:.6g}, optimized {gf[at]:.6g}) > tolerance {tol:.3g} "
                         f"(atol {atol:g} + rtol {rtol:g} x max|original| {scale:.4g})")
    return err, "\n".join(lines)


def measure_pair(m_before, m_after, rounds: int) -> dict:
    """Both graph executors timed in ``rounds`` paired rounds (order rotating, each timing at least
    :data:`MEASURE_MIN_REPEAT_MS`): medians, the median per-round ratio after/before and the wins."""
    t_before, t_after = time_rounds([m_before, m_after], repeat=rounds, min_repeat_ms=MEASURE_MIN_REPEAT_MS)
    ratio, wins = paired_ratio(t_before, t_after)
    return {"runtime_before": statistics.median(t_before), "runtime_after": statistics.median(t_after),
            "ratio": ratio, "wins": wins, "rounds": len(t_before)}


def build_executor(mod: tvm.IRModule, target: str, what: str):
    """A graph executor of ``mod`` built at opt_level 3; AssertionError naming ``what`` if TVM fails."""
    __tracebackhide__ = True
    try:
        return executor(build(mod, target=target))
    except Exception as e:  # noqa: BLE001 - TVM raises TVMError and others
        text = str(e).strip()
        raise AssertionError(f"eqsat: TVM cannot build {what} for {target!r} ({type(e).__name__}: "
                             f"{text.splitlines()[-1] if text else ''})") from None


def snapshot_name(node) -> str:
    """The test's part of its snapshot file name: ``Class.test_name[params]`` (file-system safe)."""
    parts = node.nodeid.split("::")[1:] or [node.name]
    name = re.sub(r"[^\w.\-\[\],=+]", "_", ".".join(parts))
    return name if len(name) <= 120 else name[:100] + "-" + snapshots.short_hash(name)


class EqSat:
    """The ``eqsat`` fixture: ``eqsat(model, params=None, *, key=None, inputs=None,
    input_shapes=None, small=False, batch=1, model_format=None, **options)``.

    ``model``: a Relay IRModule or Function (its weights in ``params``, bound as constants before
    the pass), ``"zoo:NAME"`` (``small``, ``batch``) or a model file tvmc loads (``input_shapes``:
    ``{name: shape}`` or tvmc's text; ``model_format``). ``inputs``: arrays for some inputs (the
    others are drawn at random). ``key``: names this call's snapshot (default: the call's number in
    the test, the first one without). ``options``: EqSatPass options and plugin settings
    (``rtol``, ``atol``, ``input_ranges``, ``snapshot``, ``measure``...), over the marker's."""

    def __init__(self, node, config, tmp_path_factory, records: list):
        self.node, self.config, self.records = node, config, records
        self.tmp_path_factory = tmp_path_factory
        self.calls = 0
        self.paths: set[Path] = set()  # the snapshots this test's calls use

    def _cost_db(self, setting: str) -> str | None:
        if setting == "default":
            return None
        if setting == "isolated":
            return str(self.tmp_path_factory.getbasetemp() / "eqsat-costs.sqlite")
        return str(Path(setting).expanduser())

    def _snapshot_path(self, key: str | None) -> Path:
        __tracebackhide__ = True
        test_file = Path(str(self.node.path))
        suffix = "" if key is None and self.calls == 1 else f"-{key if key is not None else self.calls}"
        name = snapshot_name(self.node) + re.sub(r"[^\w.\-]", "_", suffix)
        path = test_file.parent / snapshots.DIRECTORY / test_file.stem / f"{name}.json"
        if path in self.paths:
            raise SettingError(f"two eqsat calls of this test use the snapshot {path.name}: give them different key=")
        self.paths.add(path)
        return path

    def __call__(self, model, params=None, *, key=None, inputs=None, input_shapes=None, small=False, batch=1,
                 model_format=None, **call_options) -> EqSatResult:
        __tracebackhide__ = True
        self.calls += 1
        try:
            layers = [*config_layers(self.config), ("marker", marker_values(self.node)), ("call", call_options)]
            options, settings, sources = resolve(layers)
        except SettingError as e:
            raise SettingError(str(e)) from None
        test_dir = Path(str(self.node.path)).parent
        original, original_params, name = load_model(model, params, input_shapes=input_shapes, small=small,
                                                     batch=batch, model_format=model_format, test_dir=test_dir)
        bound = bind_params(original, original_params) if original_params else relay.transform.InferType()(original)
        record: dict[str, Any] = {"test": self.node.nodeid + (f" [{key}]" if key is not None else ""),
                                  "model": name, "snapshot": "off"}
        self.records.append(record)
        with cost_database(self._cost_db(settings["cost_db"])):
            out, report, used, said = run_pass(bound, options)
        if report is None:
            record["failed"] = "the pass did not run"
            raise AssertionError(f"eqsat: EqSatPass left {name} unchanged without optimizing it: "
                                 + ("; ".join(said) or "no report"))
        target = used.get("target") or host_target()
        record.update(cost_before=report.get("cost_before"), cost_after=report.get("cost_after"),
                      changed=bool(report.get("changed")))

        # the outputs, on seeded random inputs
        values = draw_inputs(bound["main"], settings["input_seed"], settings["input_ranges"], inputs)
        build_target = target if runs_here(target) else host_target()
        m_before = build_executor(bound, build_target, f"the original {name}")
        m_after = m_before if out.same_as(bound) else build_executor(out, build_target, f"the optimized {name}")
        ref, got = run(m_before, values), run(m_after, values)
        err, why = describe_mismatch(ref, got, settings["rtol"], settings["atol"])
        result = EqSatResult(module=out, params={}, report=report, changed=bool(report.get("changed")),
                             original=original, original_params=original_params, options=used,
                             settings=settings, sources=sources, target=target, inputs=values, max_error=err)
        if why:
            record.update(snapshot="not compared", failed="outputs differ")
            raise EqSatOutputMismatch(f"eqsat: the optimized program computes different outputs ({name}, "
                                      f"inputs drawn with seed {settings['input_seed']}):\n{why}")
        failures = []  # (exception class, message)
        if settings["measure"]:
            failures += [(EqSatSlower, m) for m in self._measure(result, m_before, m_after, settings, record)]
        if settings["snapshot"]:
            failures += [(EqSatSnapshotMismatch, m) for m in self._snapshot(result, name, key, settings, record)]
        if failures:
            record["failed"] = "; ".join(m.splitlines()[0] for _, m in failures)
            raise failures[0][0]("\n".join(m for _, m in failures))
        return result

    def _measure(self, result: EqSatResult, m_before, m_after, settings, record) -> list[str]:
        if m_after is m_before:
            record["measured"] = "not measured (unchanged)"
            return []
        res = measure_pair(m_before, m_after, int(settings["measure_rounds"]))
        result.measured = res
        record["measured"] = (f"measured {res['runtime_before'] * 1e3:.3f} -> {res['runtime_after'] * 1e3:.3f} ms "
                              f"(ratio {res['ratio']:.3f}, {res['rounds']} rounds)")
        limit = 1 + settings["measure_threshold"]
        if res["ratio"] > limit:
            return [f"eqsat: the optimized program is slower: median runtime ratio optimized/original "
                    f"{res['ratio']:.3f} over {res['rounds']} paired rounds ({res['runtime_before'] * 1e3:.3f} ms -> "
                    f"{res['runtime_after'] * 1e3:.3f} ms) > {limit:.3f} (measure_threshold "
                    f"{settings['measure_threshold']:g})"]
        return []

    def _snapshot(self, result: EqSatResult, name: str, key, settings, record) -> list[str]:
        __tracebackhide__ = True
        path = self._snapshot_path(key)
        result.snapshot = path
        current = snapshots.make(result.report, result.module, result.target, result.options, name)
        for why in snapshots.nondeterminism(result.report):
            warnings.warn(EqSatSnapshotWarning(f"{name}: {why}; its snapshot may not reproduce on another "
                                               "machine"), stacklevel=3)
        update = self.config.getoption("eqsat_update_snapshots")
        status, message = snapshots.check(path, current, settings["cost_tolerance"], update,
                                          shown=_shown(path, self.config))
        result.snapshot_status = record["snapshot"] = status
        return [message] if message else []


def _shown(path: Path, config) -> str:
    """``path`` relative to pytest's rootdir when it is under it."""
    try:
        return str(path.relative_to(Path(str(config.rootpath))))
    except ValueError:
        return str(path)
