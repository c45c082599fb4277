"""The options schema: every option of the optimizer and of EqSatPass, declared once.

Each :class:`Option` has a type, a default, the values it allows (names from
the real registries: ``relay_eqsat.search.SCHEDULERS``, ``relay_eqsat.extract.EXTRACTORS``,
``relay_eqsat.cost.KINDS``, the shipped rule sets), bounds and a help text.
:func:`coerce` turns a value (a Python object, or a string from a PassContext
config, a tvmc target option or a command line) into the option's type and
raises ``ValueError`` naming the option, the value and what is allowed;
:func:`validate` does it for a whole mapping and rejects unknown names.
:func:`argparse_kwargs` gives a command-line flag's ``type``/``choices``, so
the CLIs reject what the pass would.

Users: ``relay_eqsat.pipeline.OptimizeOptions`` (the ``optimizer`` options),
``relay_eqsat.search.Limits`` and ``MCTSOptions`` (defaults and checks of their fields),
``relay_eqsat.passes.relay.eqsat_pass`` (all of them; it adds a TVM check of
``target`` with :func:`set_hook`), ``relay-eqsat optimize`` and ``relay-eqsat
tvmc``. TVM-free.
"""
from __future__ import annotations

import argparse
import math
import numbers
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping

#: TENSAT's cycle filters (``relay_eqsat.search.base.Limits.cycle_filter``)
CYCLE_FILTERS = ("efficient", "vanilla", "none")
#: values of the three-way switches (``check_runtime``, ``calibrate``)
SWITCH = ("auto", "on", "off")
_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


#: the ``search`` option's names: the shipped schedulers, in this order, then any registered later
#: (``relay_eqsat.search.register_scheduler`` adds its name here: the search package imports this
#: module for its defaults, so the schema names its schedulers instead of importing their registry)
SEARCHES: list[str] = ["tensat", "mcts", "none"]


def add_search(name: str) -> None:
    """Allow ``name`` as a ``search`` value (called by ``register_scheduler``)."""
    if name not in SEARCHES:
        SEARCHES.append(name)


def _searches() -> tuple[str, ...]:
    return tuple(SEARCHES)


def _extractors() -> tuple[str, ...]:
    from .extract import EXTRACTORS

    return tuple(EXTRACTORS)


def _cost_kinds() -> tuple[str, ...]:
    from .cost.base import KINDS

    return tuple(KINDS)


def _rule_sets() -> tuple[str, ...]:
    """Names of the shipped rule sets (``rules/<name>.rules``)."""
    import importlib.resources

    root = importlib.resources.files("relay_eqsat.rulesets")
    return tuple(sorted(p.name[:-len(".rules")] for p in root.iterdir() if p.name.endswith(".rules")))


@dataclass(frozen=True)
class Option:
    """One option.

    ``type``: str, int, float, bool or object (a name, or from Python an
    instance: a CostModel, a list of rules). ``choices``: the names allowed
    (a tuple, or a function giving them, read from a registry on first use).
    ``low``: the lower bound of a number, exclusive unless ``low_inclusive``.
    ``nullable``: None is a value. ``switch``: an auto/on/off option that also
    takes booleans (True -> "on"). ``scope``: "optimizer" (an
    ``OptimizeOptions`` field) or "pass" (EqSatPass only).
    """

    name: str
    type: type
    default: Any
    help: str
    choices: tuple | Callable[[], tuple] | None = None
    low: float | None = None
    low_inclusive: bool = False
    nullable: bool = False
    switch: bool = False
    scope: str = "optimizer"

    def allowed(self) -> tuple | None:
        """The names this option takes (None: not a name option)."""
        return self.choices() if callable(self.choices) else self.choices

    def describe(self) -> str:
        """What the option allows, for error messages."""
        if self.name == "rules":
            return f"a shipped rule set ({', '.join(self.allowed())}), a path to a .rules file or a list of Rule"
        if self.name == "cost":
            return f"one of {', '.join(self.allowed())} or a CostModel"
        if self.allowed() is not None:
            text = "one of " + ", ".join(self.allowed())
            return text + (" (or a boolean: on/off)" if self.switch else "")
        if self.type is bool:
            return "a boolean (true/false, 1/0, yes/no, on/off)"
        if self.type in (int, float):
            text = "an integer" if self.type is int else "a finite number"
            if self.low is not None:
                text += f" {'>=' if self.low_inclusive else '>'} {self.low:g}"
            return text + (" or None" if self.nullable else "")
        return "a string" + (" or None" if self.nullable else "")


_OPTIONS: list[Option] = [
    Option("search", str, "tensat", "scheduler: tensat (every rule per iteration), mcts or none",
           choices=_searches),
    Option("extractor", str, "greedy-merge", "extractor scoring MCTS rollouts (greedy-merge sees merged "
           "operators, greedy-ocf does not)", choices=_extractors),
    Option("final_extractor", str, "ilp-acyc",
           "extractor for the result (ilp-acyc falls back to OCF greedy on time-out)", choices=_extractors),
    Option("cost", object, "auto", "cost model: auto (measured, else learned, else roofline), measured, "
           "learned or analytic; from Python also a CostModel", choices=_cost_kinds),
    Option("target", str, None, "TVM target string the costs are for (None: the host CPU)", nullable=True),
    Option("node_limit", int, 10_000, "e-graph size limit in e-nodes", low=0),
    Option("iter_limit", int, 15, "TENSAT iterations", low=0),
    Option("k_multi", int, 1, "iterations in which multi-pattern rules run (TENSAT)", low=0, low_inclusive=True),
    Option("budget", int, 128, "MCTS iterations per applied rule", low=0),
    Option("max_sim_steps", int, 10, "MCTS rollout length", low=0),
    Option("patience", int, 8, "MCTS stops after this many applied rules in a row below which no rollout "
           "found a cheaper program (0: never)", low=0, low_inclusive=True),
    Option("time_limit", float, 60.0, "seconds for the search", low=0),
    Option("extract_time_limit", float, 30.0, "seconds for the final extraction", low=0),
    Option("seed", int, 0, "MCTS randomness"),
    Option("rules", object, "default", "rule set: a shipped set's name, a path to a .rules file or, from "
           "Python, a list of Rule", choices=_rule_sets),
    Option("fast_math", bool, True, "use the approximate rules (``approx``: exp, tanh, erf, sigmoid and softmax "
           "as TVM's vectorized approximations, within float32 rounding error; off: they stay exact)"),
    Option("cycle_filter", str, "efficient", "TENSAT's cycle filter (efficient, vanilla or none)",
           choices=CYCLE_FILTERS),
    Option("verify", bool, False, "build and run the input and the result with TVM on random inputs and raise "
           "if their outputs differ", scope="pass"),
    Option("check_runtime", str, "auto", "build and time the input and the result on this machine (or on the "
           "RPC device of rpc_tracker/rpc_key), keep the result only if measured faster (auto: when the target runs "
           "here or there is a device)", choices=SWITCH, switch=True,
           scope="pass"),
    Option("calibrate", str, "auto", "measure on this machine (or on the RPC devices) the kernels of the input and "
           "of the candidate that no shipped or cached measurement covers, and extract again (auto: when the target runs "
           "here or there is a device, and where the runtime check decides, only once the cost model's pick was "
           "timed no faster; on: before any check)",
           choices=SWITCH, switch=True, scope="pass"),
    Option("calibrate_time_limit", float, 300.0, "seconds of kernel measurement per run (calibrate)", low=0,
           scope="pass"),
    Option("check_time_limit", float, 120.0, "seconds of runtime timing per run (check_runtime)", low=0,
           scope="pass"),
    Option("rpc_tracker", str, None, "the TVM RPC tracker (host:port) whose devices measure calibration's kernels "
           "and run the runtime check (as tvmc's --rpc-tracker); with rpc_key", nullable=True, scope="pass"),
    Option("rpc_key", str, None, "the key the devices are registered under at the RPC tracker (as tvmc's "
           "--rpc-key)", nullable=True, scope="pass"),
    Option("jobs", int, None, "kernels measured at once on this machine: they build in parallel and take turns "
           "to time (None: 2 where there are two CPUs or more, see docs/measuring.md); with rpc_tracker every free "
           "device measures at once. Also the programs the runtime check builds at once, each in a process of "
           "its own",
           low=0, nullable=True, scope="pass"),
    Option("tuning_records", str, None, "an AutoTVM or auto-scheduler tuning log (as tvmc compile's "
           "--tuning-records): calibration measures kernels built under it and the runtime check builds and times "
           "both programs under it, as they will ship; with tune_trials, the AutoTVM log the trials are added to",
           nullable=True, scope="pass"),
    Option("tune_trials", int, 0, "AutoTVM trials to spend, before optimizing under tuning_records: a few on "
           "each task the input and the pass's candidates do not share (at most half), the pass deciding under "
           "them, the rest on the tasks of the program it chose; each is added to tuning_records as it is "
           "measured, and trials already there count; then the convolutions' records are chosen together with "
           "the layout transforms between them, kept where the program runs faster (the records they displace "
           "move to tuning_records + '.trials'; the verdict, kept in tuning_records + '.choice', serves a later "
           "run on the same program and log); the trials that choice measures count in the budget (0: no tuning)", low=0,
           low_inclusive=True, scope="pass"),
    Option("min_gain", float, None, "predicted speedup margin required when the runtime is not measured, "
           "e.g. 0.1 = 10%; None: the cost model's calibrated error for the target", low=0,
           low_inclusive=True, nullable=True, scope="pass"),
]

#: name -> Option, in declaration order
OPTIONS: dict[str, Option] = {o.name: o for o in _OPTIONS}
#: name -> default value
DEFAULTS: dict[str, Any] = {o.name: o.default for o in _OPTIONS}
#: the options of the optimizer itself (``OptimizeOptions``' fields), in order
OPTIMIZER_OPTIONS: tuple[str, ...] = tuple(o.name for o in _OPTIONS if o.scope == "optimizer")

#: name -> extra check run on a coerced value (e.g. TVM parsing ``target``); see :func:`set_hook`
_HOOKS: dict[str, Callable[[Any], Any]] = {}


def _check_address(value: str) -> str:
    """An ``rpc_tracker`` value is host:port (the core's own check, not a hook of the TVM side)."""
    from .cost.tracker import parse_address

    parse_address(value)
    return value.strip()


_HOOKS["rpc_tracker"] = _check_address


def set_hook(name: str, check: Callable[[Any], Any] | None) -> None:
    """Run ``check(value)`` on every coerced non-None value of option ``name``
    (``None``: remove it). It returns the value to use, or raises ``ValueError``
    saying what is wrong (the option's name is prefixed). The TVM integration
    sets one for ``target``; the core cannot check target strings itself."""
    if name not in OPTIONS:
        raise ValueError(f"unknown option {name!r}")
    if check is None:
        _HOOKS.pop(name, None)
    else:
        _HOOKS[name] = check


def _bad(opt: Option, value: Any, why: str = "") -> ValueError:
    return ValueError(f"option {opt.name}: {value!r} is {why or 'not allowed'}; expected {opt.describe()}")


def _as_bool(opt: Option, value: Any) -> bool:
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
    elif isinstance(value, (bool, int)) and value in (0, 1):
        return bool(value)
    raise _bad(opt, value, "not a boolean")


def _as_number(opt: Option, value: Any) -> int | float:
    kind = "an integer" if opt.type is int else "a number"
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, str)):
        raise _bad(opt, value, f"not {kind}")
    try:
        if opt.type is float:
            number = float(value)
        elif isinstance(value, numbers.Integral):
            number = int(value)
        elif isinstance(value, str):
            number = int(value.strip())
        elif float(value).is_integer():
            number = int(value)
        else:
            raise ValueError
    except (TypeError, ValueError, OverflowError):
        raise _bad(opt, value, f"not {kind}") from None
    if opt.type is float and not math.isfinite(number):
        raise _bad(opt, value, "not finite")
    if opt.low is not None and not (number >= opt.low if opt.low_inclusive else number > opt.low):
        raise _bad(opt, value, "out of range")
    return number


def _as_rules(opt: Option, value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        from .rewrite import Rule

        bad = [r for r in value if not isinstance(r, Rule)]
        if bad:
            raise _bad(opt, bad[0], "not a Rule")
        return list(value)
    if not isinstance(value, str):
        raise _bad(opt, value, "neither a name nor a list of rules")
    name = value[:-len(".rules")] if value.endswith(".rules") else value
    if "/" not in value and "\\" not in value and name in opt.allowed():
        return value
    if value.endswith(".rules"):
        if os.path.isfile(value):
            # a path with a separator: relay_eqsat.pipeline.resolve_rules reads it as a file
            return value if ("/" in value or "\\" in value) else os.path.join(".", value)
        raise ValueError(f"option rules: no rule file {value!r} (the file does not exist); expected "
                         f"{opt.describe()}")
    raise _bad(opt, value, "not a shipped rule set")


def _as_cost(opt: Option, value: Any) -> Any:
    if isinstance(value, str):
        if value in opt.allowed():
            return value
        raise _bad(opt, value, "not a cost model kind")
    if callable(getattr(value, "node_cost", None)) and callable(getattr(value, "graph_cost", None)):
        return value  # a CostModel (or anything with its two methods)
    raise _bad(opt, value, "neither a kind name nor a CostModel")


def coerce(name: str, value: Any) -> Any:
    """``value`` as option ``name`` takes it (strings parsed: "5000" -> 5000,
    "true" -> True, "yes" -> "on" for a switch); ValueError naming the option,
    the value and what is allowed if it does not fit, or if ``name`` is not an option."""
    opt = OPTIONS.get(name)
    if opt is None:
        raise ValueError(f"unknown option {name!r}; known: {', '.join(OPTIONS)}")
    if value is None or (opt.nullable and isinstance(value, str) and value.strip().lower() in ("none", "")):
        if opt.nullable:
            return None
        raise _bad(opt, value, "not allowed (this option has no None)")
    if opt.name == "rules":
        out = _as_rules(opt, value)
    elif opt.name == "cost":
        out = _as_cost(opt, value)
    elif opt.switch:
        if isinstance(value, str) and value.strip().lower() in SWITCH:
            out = value.strip().lower()
        else:
            try:
                out = "on" if _as_bool(opt, value) else "off"
            except ValueError:
                raise _bad(opt, value, "not a choice") from None
    elif opt.type is bool:
        out = _as_bool(opt, value)
    elif opt.type in (int, float):
        out = _as_number(opt, value)
    else:
        if not isinstance(value, str):
            raise _bad(opt, value, "not a string")
        out = str(value)  # also turns str subclasses (tvm.runtime.String) into str
        choices = opt.allowed()
        if choices is not None and out not in choices:
            raise _bad(opt, value, "not a choice")
    hook = _HOOKS.get(name)
    if hook is not None:
        try:
            out = hook(out)
        except ValueError as e:
            raise ValueError(f"option {name}: {e}") from None
    return out


def validate(options: Mapping[str, Any] | None, what: str = "option") -> dict[str, Any]:
    """Every option of ``options`` coerced (:func:`coerce`), in a new dict;
    ValueError for an unknown name (listing the known ones; ``what`` names the
    kind of option in that message) or a bad value."""
    options = dict(options or {})
    unknown = [k for k in options if k not in OPTIONS]
    if unknown:
        raise ValueError(f"unknown {what}{'s' if len(unknown) > 1 else ''} "
                         f"{', '.join(repr(k) for k in unknown)}; known: {', '.join(OPTIONS)}")
    return {k: coerce(k, v) for k, v in options.items()}


# -- command lines -----------------------------------------------------------------------

def flag_name(name: str, prefix: str = "--") -> str:
    """The command-line flag of option ``name`` (``node_limit`` -> ``--node-limit``)."""
    return prefix + name.replace("_", "-")


def _arg_type(name: str) -> Callable[[str], Any]:
    """An argparse ``type`` that coerces through the schema (bad values: argparse errors)."""

    def convert(text: str) -> Any:
        try:
            return coerce(name, text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    convert.__name__ = name  # argparse names the type in some messages
    return convert


def argparse_kwargs(name: str, help_prefix: str = "") -> dict[str, Any]:
    """``add_argument`` keywords for option ``name``: ``choices`` for names,
    a ``type`` checking numbers and bounds, ``nargs="?"`` with ``const="on"`` for
    switches (a bare ``--check-runtime`` means on) and ``const=True`` for booleans
    (``--verify`` is true, ``--fast-math off`` false); the default is None (the
    option left to the pass)."""
    opt = OPTIONS[name]
    text = f"{help_prefix}{opt.help} (default: {opt.default})".replace("%", "%%")  # argparse formats help
    kwargs: dict[str, Any] = {"default": None, "help": text}
    if opt.type is bool:
        kwargs.update(nargs="?", const=True, type=_arg_type(name), metavar="on|off")
    elif opt.switch:
        kwargs.update(nargs="?", const="on", choices=opt.allowed())
    elif opt.allowed() is not None and opt.name != "rules":
        kwargs.update(choices=opt.allowed())
    else:
        kwargs.update(type=_arg_type(name), metavar=name.upper())
    return kwargs

