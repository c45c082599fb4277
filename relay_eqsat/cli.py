"""The ``relay-eqsat`` command.

Subcommands are registered by functions that take argparse's subparsers object,
add one subcommand and set its handler with ``set_defaults(func=handler)``; the
handler receives the parsed arguments and returns an exit status. A module
that adds a subcommand lists its registration function in ``COMMANDS`` as
"name=module:function". The module is imported only when that subcommand runs
(or for the top-level ``--help``), so a subcommand whose module imports TVM
costs nothing to the others and ``relay-eqsat extract`` works without TVM.
Import TVM inside handlers where you can all the same.

Every subcommand but ``tvmc`` (whose flags are tvmc's) takes the common flags of
:func:`add_common_arguments`: ``-v`` (this package's log at INFO, ``-vv`` DEBUG,
``-vvv`` TVM's Python log too; TVM's compiler log stays at WARNING below that) and
``--progress/--no-progress`` (bars on stderr, :mod:`relay_eqsat.progress`; default:
when stderr is a terminal). :func:`main` sets both up for the handler and undoes
them after, and turns Ctrl-C into one line and exit status 130
(:mod:`relay_eqsat.interrupt`). ``relay-eqsat --version`` prints the package's
version and TVM's, without importing either.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.metadata
import importlib.util
import json
import logging
import re
import sys
import time
from pathlib import Path
from typing import Callable, Iterator, Sequence

from . import progress
from .interrupt import Interrupts

log = logging.getLogger(__name__)

# "name=module:function" for every subcommand, in the order `--help` lists them.
COMMANDS: list[str] = [
    "optimize=relay_eqsat.passes.cli.optimize:add_optimize_command",
    "tune=relay_eqsat.passes.cli.optimize:add_tune_command",
    "tvmc=relay_eqsat.passes.cli.optimize:add_tvmc_command",
    "extract=relay_eqsat.cli:add_extract_command",
    "measure=relay_eqsat.passes.cli.measure:register",
    "profile=relay_eqsat.passes.cli.profile:add_profile_command",
]


def add_common_arguments(p: argparse.ArgumentParser) -> None:
    """``-v`` (repeatable) and ``--progress/--no-progress``, read by :func:`main`."""
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help="-v: log this package's steps (INFO) and print an internal error's traceback; "
                        "-vv: DEBUG; -vvv: TVM's Python log too")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bars on stderr (default: when stderr is a terminal)")


def add_extract_command(subparsers) -> None:
    """``relay-eqsat extract FILE.json``: run one extractor on an egraph-serialize file."""
    from .extract import EXTRACTORS
    from .extract.ilp import CYCLE_MODES, SOLVERS
    from .extract.maxsat import ENGINES

    p = subparsers.add_parser(
        "extract", help="extract the cheapest acyclic term from an egraph-serialize JSON e-graph",
        description="Read an e-graph in egraph-serialize JSON (egg, egglog, extraction-gym), extract, "
                    "and print the extracted cost, whether it is proven optimal, and the times.")
    p.add_argument("file", help="egraph-serialize JSON file")
    p.add_argument("--extractor", "-e", choices=sorted(EXTRACTORS), default="greedy-ocf")
    p.add_argument("--time-limit", "-t", type=float, default=None, metavar="S",
                   help="time limit in seconds for the exact extractors (default: none)")
    p.add_argument("--solver", choices=SOLVERS, default="cp-sat", help="ILP solver (ilp-topo, ilp-acyc)")
    p.add_argument("--engine", choices=ENGINES, default="auto",
                   help="MaxSAT engine (maxsat; auto: rc2 and rc2-stratified raced on two cores)")
    p.add_argument("--cycles", choices=CYCLE_MODES, default="auto",
                   help="class cycles encoded up front (ilp-acyc, maxsat)")
    p.add_argument("--order", choices=("int", "real"), default="int",
                   help="topological-order variables (ilp-topo; real needs --solver scip)")
    p.add_argument("--threads", type=int, default=None, help="solver threads (ilp-topo, ilp-acyc)")
    p.add_argument("--root", action="append", default=None, metavar="ECLASS",
                   help="root e-class id (repeatable; default: the file's root_eclasses)")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.add_argument("--choices", metavar="OUT.json", default=None,
                   help="write the chosen node id of every extracted e-class as JSON")
    add_common_arguments(p)
    p.set_defaults(func=run_extract)


def _extractor_options(args) -> dict:
    if args.extractor in ("ilp-topo", "ilp-acyc"):
        options = {"solver": args.solver, "threads": args.threads}
        if args.extractor == "ilp-topo":
            options["order"] = args.order
        else:
            options["cycles"] = args.cycles
        return options
    if args.extractor == "maxsat":
        return {"engine": args.engine, "cycles": args.cycles}
    return {}


def run_extract(args) -> int:
    from .extract import get_extractor
    from relay_eqsat.extract.serialize import load_problem

    with progress.ticking(f"reading {args.file}"):
        problem = load_problem(args.file)
    log.info("read %s: %d e-classes, %d e-nodes", args.file, problem.num_classes, problem.num_nodes)
    roots = None
    if args.root:
        index = {str(k): c for c, k in enumerate(problem.class_key)}
        try:
            roots = [index[r] for r in args.root]
        except KeyError as e:
            print(f"relay-eqsat extract: no e-class {e.args[0]!r} in {args.file}", file=sys.stderr)
            return 2
    elif not problem.roots:
        print(f"relay-eqsat extract: {args.file} names no root_eclasses; pass --root", file=sys.stderr)
        return 2
    extractor = get_extractor(args.extractor, **_extractor_options(args))
    with progress.ticking(f"extracting ({args.extractor})", args.time_limit):
        solution = extractor.extract(problem, roots, time_limit=args.time_limit)
    if args.choices:
        with open(args.choices, "w") as f:
            json.dump({str(problem.class_key[c]): str(problem.node_key[n]) for c, n in solution.choice.items()},
                      f, indent=1)
    if args.json:
        print(json.dumps({"extractor": args.extractor, "cost": solution.cost, "optimal": solution.optimal,
                          "status": solution.status, "solve_time": solution.solve_time,
                          "encode_time": solution.encode_time, "classes": len(solution.choice)}))
    else:
        print(f"extractor:   {args.extractor}")
        print(f"cost:        {solution.cost:.9g}")
        print(f"optimal:     {'yes' if solution.optimal else 'no'}")
        print(f"status:      {solution.status}")
        print(f"solve time:  {solution.solve_time:.3f} s")
        print(f"encode time: {solution.encode_time:.3f} s")
        print(f"classes:     {len(solution.choice)} extracted of {problem.num_classes}")
    return 0


def _load(target: str) -> Callable:
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(module), function)


def version_text() -> str:
    """"relay-eqsat VERSION (TVM VERSION)": read from the installed metadata and TVM's source,
    without importing either (``--version`` stays fast)."""
    try:
        ours = importlib.metadata.version("relay-eqsat")
    except importlib.metadata.PackageNotFoundError:
        from . import __version__ as ours
    tvm = "not installed"
    spec = importlib.util.find_spec("tvm")
    if spec is not None and spec.submodule_search_locations:
        info = Path(list(spec.submodule_search_locations)[0]) / "_ffi" / "libinfo.py"
        try:
            found = re.search(r"^__version__\s*=\s*[\"']([^\"']+)[\"']", info.read_text(), re.M)
            tvm = found.group(1) if found else "unknown version"
        except OSError:
            tvm = "unknown version"
    return f"relay-eqsat {ours} (TVM {tvm})"


class _VersionAction(argparse.Action):
    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print the package's and TVM's versions and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The full parser, or (``command`` given) one where only that subcommand's module is imported
    and the others are placeholders."""
    parser = argparse.ArgumentParser(prog="relay-eqsat", description="Equality-saturation tensor-graph optimizer.")
    parser.add_argument("--version", action=_VersionAction)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for spec in COMMANDS:
        name, _, target = spec.rpartition("=")
        if name and command is not None and name != command:
            subparsers.add_parser(name, help=f"see `relay-eqsat {name} --help`")
            continue
        _load(target)(subparsers)
    return parser


def _command_in(argv: Sequence[str]) -> str | None:
    """The subcommand named in argv (the first argument not starting with '-'), if any."""
    for arg in argv:
        if not arg.startswith("-"):
            return arg
    return None


#: the level of the other loggers (TVM's: te_compiler logs a line per operator strategy chosen at
#: INFO, some 1500 while importing an ONNX BERT) below -vvv
OTHERS_LEVEL = logging.WARNING


@contextlib.contextmanager
def logging_for(verbosity: int) -> Iterator[None]:
    """This package's log on stderr at WARNING (0), INFO (1) or DEBUG (2+); other loggers (TVM's)
    at WARNING unless ``verbosity`` >= 3 (INFO, 4+: DEBUG). Restored on exit."""
    package, root = logging.getLogger("relay_eqsat"), logging.getLogger()
    saved = (package.level, package.propagate, root.level)
    handler = progress.LogHandler()
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s" if verbosity else "%(message)s"))
    package.addHandler(handler)
    package.setLevel(logging.WARNING if verbosity <= 0 else logging.INFO if verbosity == 1 else logging.DEBUG)
    package.propagate = False
    root_handler = None
    if verbosity >= 3:
        root.setLevel(logging.INFO if verbosity == 3 else logging.DEBUG)
        root_handler = progress.LogHandler()
        root_handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        root.addHandler(root_handler)
    elif root.level < OTHERS_LEVEL:
        root.setLevel(OTHERS_LEVEL)
    try:
        yield
    finally:
        package.removeHandler(handler)
        package.setLevel(saved[0])
        package.propagate = saved[1]
        root.setLevel(saved[2])
        if root_handler is not None:
            root.removeHandler(root_handler)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = _command_in(argv)
    if command is None and "--version" in argv:  # before any command module is imported
        print(version_text())
        return 0
    args = build_parser(command).parse_args(argv)
    previous = progress.set_enabled(getattr(args, "progress", None))
    verbosity = getattr(args, "verbose", None)  # None: the subcommand's flags are another tool's (tvmc)
    try:
        with (logging_for(verbosity) if verbosity is not None else contextlib.nullcontext()), \
                Interrupts(f"relay-eqsat {args.command}") as interrupts:
            start = time.perf_counter()
            try:
                status = args.func(args)
            except KeyboardInterrupt:
                return interrupts.finish()
            log.debug("relay-eqsat %s: exit status %s after %.1f s", args.command, status,
                      time.perf_counter() - start)
            return status
    finally:
        progress.set_enabled(previous)


if __name__ == "__main__":
    sys.exit(main())
