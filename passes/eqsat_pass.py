"""EqSatPass: the Relay module pass (main -> TensorGraph -> optimize -> Relay).

Options come from the constructor, else from the PassContext config
(``relay.eqsat.<option>``), else from :data:`DEFAULT_OPTIONS`.

PassContext config keys: this TVM (0.16, C++ ``PassConfigManager``) rejects
unregistered keys and offers no Python API to register them. Importing this
module therefore wraps ``tvm.transform.PassContext.__init__``: keys starting
with ``relay.eqsat.`` are taken out of ``config`` before the C++ constructor
sees them and kept in a side table keyed by the context object; the pass
reads them back with :func:`eqsat_config`. ``PassContext.list_configs()``
also lists them (IntImm for int/bool options, runtime.String otherwise, parsed
by the pass), so ``tvmc compile --pass-config relay.eqsat.budget=8`` works.
``relay_eqsat.passes`` must be imported before such a PassContext is created
(importing ``EqSatPass`` does it); ``PassContext.current().config`` does not
show these keys.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import statistics
import time
import warnings
import weakref
from typing import Any, Mapping

import numpy as np
import tvm
from tvm import relay

from relay_eqsat.graph import TensorGraph, TensorType
from relay_eqsat.optimize import OptimizeOptions, optimize_graph

from .relay import UnsupportedProgram, from_relay, main_function, to_relay
from .target import build_and_run, host_target, output_error, paired_ratio, random_inputs, time_rounds

log = logging.getLogger(__name__)

CONFIG_PREFIX = "relay.eqsat."

#: option -> default value: the optimizer's options (relay_eqsat.optimize.OptimizeOptions) plus ``verify``.
DEFAULT_OPTIONS: dict[str, Any] = {
    **{f.name: f.default for f in dataclasses.fields(OptimizeOptions)},
    "verify": False,             # compare TVM outputs before/after on random inputs
    "check_runtime": False,      # build and time both; keep the result only if measured faster
}

#: with ``check_runtime``, the optimized program is kept only if its median
#: per-round time ratio (after / before) is at most 1 - RUNTIME_MARGIN and it
#: was the faster of the two in at least RUNTIME_MIN_WINS of the
#: RUNTIME_REPEAT interleaved rounds (a sign test: by chance alone, 8 of 9
#: happens with probability 0.02). Each timing lasts at least
#: RUNTIME_MIN_REPEAT_MS. A 2-core machine shared with other jobs varies by
#: several percent between runs; a single median-vs-median comparison with a
#: 1% margin kept slower programs.
RUNTIME_MARGIN = 0.02
RUNTIME_REPEAT = 9
RUNTIME_MIN_WINS = 8
RUNTIME_MIN_REPEAT_MS = 50

#: option -> type its values are coerced to; ``object``: a name (str) or, from
#: Python, an instance (a CostModel, a list of rules...).
_OPTION_TYPES = {"search": str, "extractor": str, "final_extractor": str, "cost": object,
                 "target": str, "node_limit": int, "iter_limit": int, "budget": int, "max_sim_steps": int,
                 "k_multi": int, "seed": int, "time_limit": float, "extract_time_limit": float,
                 "verify": bool, "check_runtime": bool, "rules": object, "cycle_filter": str}


#: function attribute of an optimized ``main`` holding the report's summary (JSON)
REPORT_ATTR = "relay_eqsat.report"

_SUMMARY_KEYS = ("search", "stop_reason", "iterations", "rules_fired", "egraph_nodes", "cost_before",
                 "cost_after", "predicted_speedup", "extractor", "extract_status", "optimal",
                 "search_time", "extract_time", "total_time", "runtime_before", "runtime_after",
                 "measured_speedup")


def _report_summary(report: Mapping[str, Any]) -> dict:
    return {k: report[k] for k in _SUMMARY_KEYS if k in report}


class EqSatVerificationError(RuntimeError):
    """``verify=True`` and the optimized module computes different outputs."""


# -- PassContext config side table ----------------------------------------------

_CONFIG: dict[int, dict[str, Any]] = {}


def _ctx_key(ctx) -> int:
    return int(ctx.handle.value)


def _install_config_hook() -> None:
    cls = tvm.transform.PassContext
    if getattr(cls.__init__, "_relay_eqsat_hook", False):
        return
    original = cls.__init__

    def __init__(self, *args, **kwargs):
        # config is the 5th positional parameter of PassContext.__init__
        config = kwargs.get("config", args[4] if len(args) > 4 else None)
        ours = {}
        if config:
            config = dict(config)
            for k in [k for k in config if str(k).startswith(CONFIG_PREFIX)]:
                ours[k[len(CONFIG_PREFIX):]] = config.pop(k)
            if len(args) > 4:
                args = args[:4] + (config,) + args[5:]
            else:
                kwargs["config"] = config
        original(self, *args, **kwargs)
        if ours:
            key = _ctx_key(self)
            _CONFIG[key] = ours
            # the wrapper keeps the C++ context alive, so the key is not reused before this runs
            weakref.finalize(self, _CONFIG.pop, key, None)

    __init__._relay_eqsat_hook = True
    __init__.__wrapped__ = original
    __init__.__doc__ = original.__doc__
    cls.__init__ = __init__

    # list them too, so tools that validate keys against list_configs() (tvmc
    # --pass-config) accept them; tvmc parses IntImm (ints, true/false) and strings
    original_list = cls.list_configs

    def list_configs():
        configs = dict(original_list())
        for name in DEFAULT_OPTIONS:
            typ = _OPTION_TYPES.get(name)
            configs[CONFIG_PREFIX + name] = {"type": "IntImm" if typ in (int, bool) else "runtime.String"}
        return configs

    list_configs.__doc__ = original_list.__doc__
    cls.list_configs = staticmethod(list_configs)


_install_config_hook()


def eqsat_config(ctx=None) -> dict[str, Any]:
    """The ``relay.eqsat.*`` options of a PassContext (default: the current
    one), without the prefix."""
    ctx = ctx if ctx is not None else tvm.transform.PassContext.current()
    return dict(_CONFIG.get(_ctx_key(ctx), {}))


def _coerce(name: str, value: Any) -> Any:
    """``value`` as the option's type (strings from configs and tvmc parsed);
    ValueError for unknown options and values that do not fit."""
    if name not in DEFAULT_OPTIONS:
        raise ValueError(f"unknown EqSatPass option {name!r}; known: {sorted(DEFAULT_OPTIONS)}")
    typ = _OPTION_TYPES[name]
    if isinstance(value, tvm.runtime.String):
        value = str(value)
    elif isinstance(value, (tvm.tir.IntImm, tvm.tir.FloatImm)):
        value = value.value
    if value is None:
        if DEFAULT_OPTIONS[name] is None:
            return None
        raise ValueError(f"option {name} cannot be None")
    if typ is object:
        return value
    if typ is str:
        if not isinstance(value, str):
            raise ValueError(f"option {name}: expected a string, got {value!r}")
        return value
    if typ is bool:
        if isinstance(value, str):
            if value.lower() in ("1", "true", "yes", "on"):
                return True
            if value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"option {name}: {value!r} is not a boolean")
        if value not in (0, 1):
            raise ValueError(f"option {name}: {value!r} is not a boolean")
        return bool(value)
    if isinstance(value, bool):
        raise ValueError(f"option {name}: expected {typ.__name__}, got a bool")
    if typ is int and isinstance(value, float) and not value.is_integer():
        raise ValueError(f"option {name}: {value!r} is not an integer")
    try:
        return typ(value)
    except (TypeError, ValueError):
        raise ValueError(f"option {name}: {value!r} is not {typ.__name__}") from None


def resolve_options(explicit: Mapping[str, Any], ctx=None) -> dict[str, Any]:
    """Constructor options over PassContext config over defaults."""
    opts = dict(DEFAULT_OPTIONS)
    for name, value in eqsat_config(ctx).items():
        opts[name] = _coerce(name, value)
    for name, value in explicit.items():
        opts[name] = _coerce(name, value)
    return opts


# -- the optimizer seam ---------------------------------------------------------------

def optimize(graph: TensorGraph, options: Mapping[str, Any]) -> tuple[TensorGraph, dict]:
    """The optimizer between frontend and backend: TensorGraph -> cheaper
    equivalent TensorGraph (or the input itself), plus the report as a dict."""
    opts = {k: v for k, v in options.items() if k not in ("verify", "check_runtime")}
    if opts.get("target") is None:
        opts["target"] = host_target()
    new_graph, report = optimize_graph(graph, opts)
    return new_graph, report.to_dict()


# -- the pass -------------------------------------------------------------------------

def _signature(graph: TensorGraph) -> list[tuple[str, TensorType]]:
    """(name, type) of the graph's var nodes in order: the frontend adds every
    parameter, so unused ones survive an optimizer that drops them."""
    return [(graph[i].attrs["name"], graph[i].type) for i in graph.inputs]


def _check_inputs(mod: tvm.IRModule, seed: int) -> dict[str, np.ndarray]:
    _, func = main_function(mod)
    types = {v.name_hint: ([int(d) for d in v.checked_type.shape], str(v.checked_type.dtype))
             for v in func.params}
    return random_inputs(types, seed)


def compare_modules(before: tvm.IRModule, after: tvm.IRModule, seed: int = 0, rtol: float = 1e-4,
                    target: str | None = None, time_repeat: int = 0) -> dict[str, float]:
    """Build both modules for ``target`` (default: the host), run them on the
    same random inputs and raise :class:`EqSatVerificationError` if an output
    differs by more than ``rtol * max(1, max|output|)``. With ``time_repeat``,
    also time both in ``time_repeat`` interleaved rounds. Returns
    ``max_error`` and, when timed, ``runtime_before`` and ``runtime_after``
    (medians, seconds), ``ratio`` (the median of the per-round ratios after /
    before) and ``wins`` (rounds in which ``after`` was faster)."""
    inputs = _check_inputs(before, seed)
    m_before, ref, _ = build_and_run(before, inputs, target)
    m_after, got, _ = build_and_run(after, inputs, target)
    err, why = output_error(ref, got)
    if why is not None:
        raise EqSatVerificationError(why)
    if not err <= rtol:
        raise EqSatVerificationError(f"max error {err:.3g} (relative) > {rtol:g}")
    out = {"max_error": err}
    if time_repeat > 0:
        t_before, t_after = time_rounds([m_before, m_after], repeat=time_repeat,
                                        min_repeat_ms=RUNTIME_MIN_REPEAT_MS)
        ratio, wins = paired_ratio(t_before, t_after)
        out.update(runtime_before=statistics.median(t_before), runtime_after=statistics.median(t_after),
                   ratio=ratio, wins=wins)
    return out


def verify_modules(before: tvm.IRModule, after: tvm.IRModule, seed: int = 0,
                   rtol: float = 1e-4, target: str | None = None) -> float:
    """:func:`compare_modules` without timing; returns the largest relative error."""
    return compare_modules(before, after, seed, rtol, target)["max_error"]


def _is_cpu_target(target: str | None) -> bool:
    """Whether programs for ``target`` run here (None: the host; else an LLVM target)."""
    if target is None:
        return True
    try:
        return tvm.target.Target(target).kind.name == "llvm"
    except Exception:  # noqa: BLE001 - a bad target string: not runnable
        return False


def runtime_check(before: tvm.IRModule, after: tvm.IRModule, opts: Mapping[str, Any],
                  report: dict) -> bool:
    """``verify`` and ``check_runtime``: whether to keep ``after``; notes what
    it found in ``report``. A numerical mismatch raises with ``verify``, else
    (or when ``after`` fails to build) rejects it with a warning; with
    ``check_runtime``, ``after`` is kept only if measured faster: a median
    per-round speedup of at least :data:`RUNTIME_MARGIN`, and faster in at
    least :data:`RUNTIME_MIN_WINS` of :data:`RUNTIME_REPEAT` rounds."""
    timed = bool(opts.get("check_runtime"))
    target = opts.get("target")
    if timed and not _is_cpu_target(target):
        warnings.warn(f"EqSatPass: check_runtime needs a CPU (llvm) target, not {target!r}; "
                      "runtime not checked", stacklevel=3)
        timed = False
    target = target if _is_cpu_target(target) else None  # outputs are compared on the host
    try:
        res = compare_modules(before, after, seed=opts["seed"], target=target,
                              time_repeat=RUNTIME_REPEAT if timed else 0)
    except EqSatVerificationError as e:
        if opts.get("verify"):
            raise
        warnings.warn(f"EqSatPass: the optimized program computes different outputs ({e}); "
                      "module left unchanged", stacklevel=3)
        report.update(changed=False, reason=f"rejected: outputs differ ({e})")
        return False
    except Exception as e:  # noqa: BLE001 - TVM failing to build either program
        if opts.get("verify"):
            raise
        warnings.warn(f"EqSatPass: building for the runtime check failed ({type(e).__name__}: "
                      f"{str(e).strip().splitlines()[-1] if str(e).strip() else ''}); module left unchanged",
                      stacklevel=3)
        report.update(changed=False, reason=f"rejected: build failed ({type(e).__name__})")
        return False
    report["verify_error"] = res["max_error"]
    if not timed:
        return True
    before_s, after_s, ratio, wins = res["runtime_before"], res["runtime_after"], res["ratio"], res["wins"]
    report.update(runtime_before=before_s, runtime_after=after_s, measured_speedup=1.0 / ratio,
                  runtime_wins=f"{wins}/{RUNTIME_REPEAT}")
    if ratio <= 1 - RUNTIME_MARGIN and wins >= RUNTIME_MIN_WINS:
        return True
    report.update(changed=False, reason=(f"measured no faster ({before_s * 1e3:.3f} ms -> {after_s * 1e3:.3f} ms, "
                                         f"median ratio {ratio:.3f}, faster in {wins}/{RUNTIME_REPEAT} rounds); "
                                         "input kept"))
    return False


def bind_params(mod: tvm.IRModule, params: Mapping[str, Any]) -> tvm.IRModule:
    """``mod`` with the parameters of ``main`` named in ``params`` replaced by
    constants (as ``relay.build(..., params=)`` does; names ``main`` does not
    take are ignored), type-checked. The rewrite rules' ``(const ?w)``
    preconditions only hold for weights bound this way."""
    values = {k: v if isinstance(v, tvm.nd.NDArray) else tvm.nd.array(np.asarray(v))
              for k, v in params.items()}
    mod = relay.transform.InferType()(mod)
    func = relay.build_module.bind_params_by_name(mod["main"], values)
    new_mod = tvm.IRModule({gv: (func if gv.name_hint == "main" else f)
                            for gv, f in mod.functions.items()}, mod.type_definitions)
    return relay.transform.InferType()(new_mod)


def format_summary(report: Mapping[str, Any]) -> str:
    """One line for the log: what changed, why the search stopped, costs, times, rules fired."""
    fired = report.get("rules_fired") or {}
    top = sorted(((k, v) for k, v in fired.items() if v), key=lambda kv: -kv[1])
    rules = ", ".join(f"{k}x{v}" for k, v in top[:5]) + (f", +{len(top) - 5} more" if len(top) > 5 else "")
    before, after = report.get("cost_before", 0.0), report.get("cost_after", 0.0)
    return (f"{'changed' if report.get('changed') else 'unchanged'} ({report.get('reason', '')}); "
            f"search {report.get('search', '?')} stopped: {report.get('stop_reason', '?')}, "
            f"e-graph {report.get('egraph_nodes', 0)} nodes; predicted cost {before * 1e3:.4f} ms -> "
            f"{after * 1e3:.4f} ms ({before / after if after > 0 else 1.0:.3f}x); "
            + (f"measured {report['runtime_before'] * 1e3:.3f} ms -> {report['runtime_after'] * 1e3:.3f} ms; "
               if "runtime_after" in report else "")
            + f"{report.get('seconds', report.get('total_time', 0.0)):.2f} s; "
            f"{sum(fired.values())} rule applications [{rules}]")


@tvm.transform.module_pass(opt_level=0, name="EqSatPass")
class EqSatPass:
    """Optimize ``main`` by equality saturation (see :data:`DEFAULT_OPTIONS`).

    The rewrite rules only fire on weights that are constants: pass
    ``params={name: array}`` to bind them by name first (as ``relay.build``
    does; the result's ``main`` then no longer takes them, whether or not the
    program changed, and ``relay.build`` ignores param names ``main`` does not
    take), or bind them yourself with
    ``relay.build_module.bind_params_by_name``. ``params`` is a constructor
    option only (not read from the PassContext).

    An optimized ``main`` carries the report's summary as JSON in its function
    attribute ``relay_eqsat.report`` (:data:`REPORT_ATTR`); the summary is
    logged at INFO on ``relay_eqsat.passes.eqsat_pass``.

    A program the frontend cannot take (dynamic shapes, control flow...) or
    any internal failure gives a warning and the module back unchanged;
    ``verify=True`` raises :class:`EqSatVerificationError` on a numerical
    mismatch. ``check_runtime=True`` builds the input and the result for the
    target (a CPU target; the host's by default), checks their outputs agree
    and times both, and keeps the result only if it is measured faster (see
    :data:`RUNTIME_MARGIN`; the cost model's "never worse" made
    "never slower"; a mismatch or a failed build also keeps the input, with a
    warning). After a run, ``last_options`` and ``last_report`` hold the
    options used and the optimizer's report (``None`` if skipped).
    """

    def __init__(self, params: Mapping[str, Any] | None = None, **options: Any):
        for name, value in options.items():
            _coerce(name, value)  # unknown names and bad values fail here, early
        self.options = dict(options)
        self.params = dict(params) if params else None
        self.last_options: dict[str, Any] | None = None
        self.last_report: dict | None = None

    def transform_module(self, mod: tvm.IRModule, ctx) -> tvm.IRModule:
        self.last_report = None
        try:
            opts = resolve_options(self.options, ctx)
        except (ValueError, TypeError) as e:
            warnings.warn(f"EqSatPass: bad option ({e}); module left unchanged", stacklevel=2)
            return mod
        self.last_options = opts
        if self.params:
            mod = bind_params(mod, self.params)
        t0 = time.perf_counter()
        try:
            typed, func = main_function(mod)
            graph = from_relay(typed)
            signature = _signature(graph)
            new_graph, report = optimize(graph, opts)
            if not report.get("changed", True):
                # never worse: nothing cheaper was found, the input goes on untouched
                report["seconds"] = time.perf_counter() - t0
                if opts["verify"]:
                    report["verify_error"] = 0.0  # the output is the input itself
                self.last_report = report
                log.info("EqSatPass: %s", format_summary(report))
                return mod
            new_func = to_relay(new_graph, signature=signature, attrs=func.attrs)
            new_func = new_func.with_attr(REPORT_ATTR, json.dumps(_report_summary(report)))
            new_mod = tvm.IRModule({gv: (new_func if gv.name_hint == "main" else f)
                                    for gv, f in typed.functions.items()}, typed.type_definitions)
            new_mod = relay.transform.InferType()(new_mod)
            if not tvm.ir.structural_equal(new_mod["main"].checked_type, func.checked_type):
                raise RuntimeError(f"the optimized main has type {new_mod['main'].checked_type}, "
                                   f"not {func.checked_type}")
        except UnsupportedProgram as e:
            warnings.warn(f"EqSatPass: unsupported program ({e.reason}); module left unchanged",
                          stacklevel=2)
            return mod
        except Exception as e:  # noqa: BLE001 - a pass must not break the build
            log.exception("EqSatPass failed")
            warnings.warn(f"EqSatPass: failed ({type(e).__name__}: {e}); module left unchanged",
                          stacklevel=2)
            return mod
        report = dict(report)
        keep = True
        if opts["verify"] or opts["check_runtime"]:
            keep = runtime_check(typed, new_mod, opts, report)
        report["seconds"] = time.perf_counter() - t0
        self.last_report = report
        log.info("EqSatPass: %s", format_summary(report))
        return new_mod if keep else mod
