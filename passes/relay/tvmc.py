"""``tvmc compile`` with EqSatPass inside its pipeline.

Two routes, both running tvmc's own ``compile_model`` (model loading, graph
transforms, PassContext with ``--opt-level``/``--pass-config``/
``--disabled-pass``, ``relay.build``, packaging):

1. A composite target. :func:`register` adds ``"eqsat"`` to tvmc's
   ``composite_target.REGISTERED_CODEGEN`` with :func:`eqsat_pass_pipeline` as
   its ``pass_pipeline``. tvmc calls every composite target's pipeline as
   ``pipeline(mod, params, mod_name=..., **opts)`` inside its PassContext,
   before ``relay.build``, so::

       tvmc compile --target "eqsat -search=mcts -budget=8, llvm -mtriple=..." model.onnx

   optimizes the model; the target's ``-key=value`` options are EqSatPass
   options (``node-limit`` or ``node_limit``), over ``--pass-config
   relay.eqsat.<option>=...`` values, over the defaults.
2. Flags. :func:`register` also adds ``--eqsat`` and one ``--eqsat-<option>``
   flag per EqSatPass option to tvmc's ``compile`` subcommand (through tvmc's
   ``register_parser`` hook, which runs after ``compile`` has added its
   parser) and wraps its handler: with ``--eqsat``, ``eqsat`` is put in
   front of the ``--target`` string (route 1) and the flags' values become
   options of the pass for this compile, over the target's options and
   ``--pass-config`` values (flags take values with spaces, e.g. ``--eqsat-target
   "llvm -mcpu=..."``, which neither tvmc's target syntax nor its
   ``--pass-config`` parser can carry). The flags' ``choices`` and ``type``
   come from the options schema (:mod:`relay_eqsat.options`), so a bad value
   is an argparse error (exit status 2); a bad value in the composite target
   is one ``Error:`` line (tvmc's exit status 4).

A model file that cannot be read (missing, empty, corrupt) gives one line
``relay-eqsat tvmc: cannot read model ...`` and exit status 2.

Through :func:`tvmc_main` (``relay-eqsat tvmc``), ``compile`` without
``--target`` builds for the host CPU's LLVM target
(:func:`~relay_eqsat.passes.runtime.target.host_target`) instead of tvmc's default
plain ``llvm``, which this TVM build takes as riscv64.

Parameters: tvmc hands the pipeline the model's ``params`` before
``relay.build`` binds them; the pipeline binds them by name first, since the
rewrite rules need weights as constants (the ONNX frontend already freezes
initializers into constants). ``relay.build`` ignores params ``main`` no
longer takes.

``relay-eqsat tvmc ARGS...`` (:func:`tvmc_main`) registers both and runs
tvmc's own command line on ARGS; ``--eqsat-report PATH`` additionally writes
the optimizer's report as JSON.
"""
from __future__ import annotations

import json
import logging
import shlex
import sys
from typing import Any, Mapping, Sequence

import tvm

from relay_eqsat.options import OPTIONS, argparse_kwargs, flag_name

from .config import DEFAULT_OPTIONS
from .eqsat_pass import EqSatPass, format_summary
from relay_eqsat.passes.cli.model_file import ModelFileError, check_model_file, model_load_errors
from relay_eqsat.passes.runtime.records import RecordsError, load_records
from relay_eqsat.passes.runtime.remote import RemoteUnavailable, check_remote
from relay_eqsat.passes.runtime.target import host_target

log = logging.getLogger(__name__)

CODEGEN_NAME = "eqsat"

#: options offered as ``--eqsat-<option>`` flags (every option of the schema; ``rules`` and ``cost`` as names)
FLAG_OPTIONS = list(OPTIONS)

#: the report of the last :func:`eqsat_pass_pipeline` run (None: none ran or it was skipped)
LAST_REPORT: dict | None = None

#: ``--eqsat-<option>`` values of the compile command running now (pipeline options)
_FLAG_OPTIONS: dict[str, Any] = {}


def _option_name(key: str) -> str:
    name = key.replace("-", "_")
    if name not in DEFAULT_OPTIONS:
        raise tvm.driver.tvmc.TVMCException(
            f"unknown eqsat option {key!r}; known: {', '.join(sorted(DEFAULT_OPTIONS))}")
    return name


def eqsat_pass_pipeline(mod: tvm.IRModule, params: Mapping[str, Any] | None = None,
                        mod_name: str = "default", **opts: Any) -> tvm.IRModule:
    """tvmc's composite-target hook: bind ``params``, run EqSatPass with
    ``opts`` (target options, strings) in the current PassContext.

    Skipped when the PassContext disables ``EqSatPass`` (``--disabled-pass``).
    """
    global LAST_REPORT
    LAST_REPORT = None
    ctx = tvm.transform.PassContext.current()
    if "EqSatPass" in [str(p) for p in ctx.disabled_pass]:
        log.info("EqSatPass disabled by the PassContext")
        return mod
    options = dict(_FLAG_OPTIONS)
    options.update({_option_name(k): v for k, v in opts.items()})
    try:
        eqsat = EqSatPass(params=dict(params) if params else None, **options)
    except ValueError as e:  # a bad value in the composite target (the flags are checked by argparse)
        raise tvm.driver.tvmc.TVMCException(f"eqsat target: {e}") from None
    out = eqsat(mod)
    LAST_REPORT = eqsat.last_report
    if LAST_REPORT is not None:
        LAST_REPORT = dict(LAST_REPORT, options={k: v for k, v in (eqsat.last_options or {}).items()
                                                 if isinstance(v, (str, int, float, bool, type(None)))})
    return out


# -- registration with tvmc ---------------------------------------------------------

def add_eqsat_arguments(parser) -> None:
    """``--eqsat`` and ``--eqsat-<option>`` flags on tvmc's compile parser."""
    group = parser.add_argument_group(
        "eqsat", "equality-saturation optimization (relay-eqsat's EqSatPass) before relay.build")
    group.add_argument("--eqsat", action="store_true",
                       help="run EqSatPass on the model inside tvmc's pipeline (a composite target)")
    for name in FLAG_OPTIONS:
        group.add_argument(flag_name(name, "--eqsat-"), dest="eqsat_" + name,
                           **argparse_kwargs(name, help_prefix=f"EqSatPass option {name}: "))
    group.add_argument("--eqsat-report", metavar="PATH", default=None,
                       help="write the optimizer's report as JSON to PATH")


def _parsed_targets(target: str) -> list[dict]:
    from tvm.driver.tvmc.target import parse_target

    return parse_target(target)


def _target_names(target: str) -> list[str]:
    return [t["name"] for t in _parsed_targets(target)]


def eqsat_args_to_tvmc(args) -> None:
    """Take the ``--eqsat-*`` flags as options of the pass for this compile
    and put the ``eqsat`` composite target in front of ``--target``."""
    from tvm.driver.tvmc import TVMCException
    from tvm.driver.tvmc.target import is_inline_json

    for name in FLAG_OPTIONS:
        value = getattr(args, "eqsat_" + name, None)
        if value is not None:
            _FLAG_OPTIONS[name] = value
    target = args.target or host_target()
    if is_inline_json(target) or target.endswith(".json"):
        raise TVMCException("--eqsat needs --target as a plain string (or put 'eqsat, ' in the target yourself)")
    if CODEGEN_NAME not in _target_names(target):
        target = f"{CODEGEN_NAME}, {target}"
    args.target = target


#: the argv of the running :func:`tvmc_main` (None: tvmc runs some other way)
_ARGV: list[str] | None = None


def _target_given() -> bool:
    """Whether ``--target`` is on the command line (tvmc's default config sets ``llvm``)."""
    if _ARGV is None:
        return True
    return any(a == "--target" or a.startswith("--target=") for a in _ARGV)


def _wrap_compile(drive_compile):
    def drive_compile_with_eqsat(args):
        global LAST_REPORT
        LAST_REPORT = None
        if args.target is None or not _target_given():
            args.target = host_target()  # this TVM's plain llvm (tvmc's default) is riscv64
        if getattr(args, "eqsat", False):
            eqsat_args_to_tvmc(args)
        if getattr(args, "tuning_records", None) and "tuning_records" not in _FLAG_OPTIONS:
            # tvmc builds under its --tuning-records: the pass judges the programs built the same way
            _FLAG_OPTIONS["tuning_records"] = args.tuning_records
        if CODEGEN_NAME in _target_names(args.target) and "target" not in _FLAG_OPTIONS:
            # the pass costs, measures and checks for the target tvmc builds for (a board's, say)
            built_for = [t["raw"] for t in _parsed_targets(args.target) if t["is_tvm_target"]]
            if built_for:
                _FLAG_OPTIONS["target"] = built_for[0]
        try:
            if getattr(args, "eqsat", False):  # a tracker named and down: said now, not after the model loads
                try:
                    check_remote(_FLAG_OPTIONS.get("rpc_tracker"), _FLAG_OPTIONS.get("rpc_key"))
                except ValueError as e:  # one of the two flags without the other
                    raise RemoteUnavailable(f"--eqsat-rpc-*: {e}") from None
            if CODEGEN_NAME in _target_names(args.target) and _FLAG_OPTIONS.get("tuning_records"):
                load_records(_FLAG_OPTIONS["tuning_records"])  # a corrupt log: said now, nothing built
            check_model_file(args.FILE)
            with model_load_errors():
                status = drive_compile(args)
        except (ModelFileError, RemoteUnavailable, RecordsError) as e:
            print(f"relay-eqsat tvmc: {e}", file=sys.stderr)
            return 2
        finally:
            _FLAG_OPTIONS.clear()
        if LAST_REPORT is not None:
            print(f"eqsat: {format_summary(LAST_REPORT)}")
            if getattr(args, "eqsat_report", None):
                with open(args.eqsat_report, "w") as f:
                    json.dump(LAST_REPORT, f, indent=1, default=str)
        elif getattr(args, "eqsat", False) or CODEGEN_NAME in _target_names(args.target):
            print("eqsat: not run (disabled, bad option or unsupported program; see warnings)")
        return status

    drive_compile_with_eqsat.__wrapped__ = drive_compile
    return drive_compile_with_eqsat


def _register_compile_flags(subparsers, parser, json_params) -> None:
    compile_parser = subparsers.choices.get("compile")
    if compile_parser is None:
        return
    add_eqsat_arguments(compile_parser)
    drive = compile_parser.get_default("func")
    compile_parser.set_defaults(func=_wrap_compile(drive))


_registered = False


def register() -> None:
    """Add the ``eqsat`` composite target and the compile flags to tvmc (idempotent)."""
    global _registered
    if _registered:
        return
    from tvm.driver import tvmc  # noqa: F401 - imports every subcommand, so compile registers first
    from tvm.driver.tvmc import composite_target, main

    composite_target.REGISTERED_CODEGEN[CODEGEN_NAME] = {
        "config_key": None,
        "pass_pipeline": eqsat_pass_pipeline,
    }
    main.REGISTERED_PARSER.append(_register_compile_flags)
    _registered = True


def tvmc_main(argv: Sequence[str]) -> int:
    """tvmc's command line with eqsat registered: ``tvmc_main(["compile", "--eqsat", ...])``."""
    global _ARGV
    register()
    from tvm.driver.tvmc.main import _main

    log.debug("tvmc %s", shlex.join(argv))
    _ARGV = list(argv)
    try:
        return _main(list(argv))
    finally:
        _ARGV = None


if __name__ == "__main__":
    sys.exit(tvmc_main(sys.argv[1:]))
