"""The ``relay-eqsat`` command.

Subcommands are registered by functions that take argparse's subparsers object,
add one subcommand and set its handler with ``set_defaults(func=handler)``; the
handler receives the parsed arguments and returns an exit status. A module
that adds a subcommand lists its registration function in ``COMMANDS`` as
"name=module:function". The module is imported only when that subcommand runs
(or for the top-level ``--help``), so a subcommand whose module imports TVM
costs nothing to the others and ``relay-eqsat extract`` works without TVM.
Import TVM inside handlers where you can all the same.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
from typing import Callable, Sequence

# "name=module:function" for every subcommand, in the order `--help` lists them.
COMMANDS: list[str] = [
    "optimize=relay_eqsat.passes.cli:add_optimize_command",
    "tvmc=relay_eqsat.passes.cli:add_tvmc_command",
    "extract=relay_eqsat.cli:add_extract_command",
    "measure=relay_eqsat.passes.measure_cli:register",
    "profile=relay_eqsat.passes.profile:add_profile_command",
]


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
    p.add_argument("--engine", choices=ENGINES, default="rc2", help="MaxSAT engine (maxsat)")
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
    from .serialize import load_problem

    problem = load_problem(args.file)
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


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The full parser, or (``command`` given) one where only that subcommand's module is imported
    and the others are placeholders."""
    parser = argparse.ArgumentParser(prog="relay-eqsat", description="Equality-saturation tensor-graph optimizer.")
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


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(_command_in(argv)).parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
