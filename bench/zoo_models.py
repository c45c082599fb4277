"""The zoo models a bench script runs: the shared command line, names and sizes, graphs, inputs.

The scripts run as ``python bench/NAME.py`` (this folder is then on ``sys.path``),
import what they need from here, :mod:`runtime_stats` and :mod:`tables`, and write their
JSON under ``bench/results/`` (:data:`RESULTS_DIR`). Nothing here hard-codes a
result: every figure a script prints is measured when it runs.
"""
from __future__ import annotations

import argparse
from pathlib import Path

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def model_names(spec: str) -> list[str]:
    """Zoo model names from a comma-separated list; ``all`` is every zoo model."""
    from relay_eqsat.passes import zoo

    if spec.strip() == "all":
        return list(zoo.MODELS)
    names = [s.strip() for s in spec.split(",") if s.strip()]
    for n in names:
        zoo.spec(n)  # ValueError naming the known models
    return names


def small_for(args, name: str) -> bool:
    """Whether ``name`` runs at its small configuration (``--small`` or ``--small-models``)."""
    return bool(args.small) or name in {m.strip() for m in getattr(args, "small_models", "").split(",")}


def base_parser(doc: str, out_name: str, models: str = "all") -> argparse.ArgumentParser:
    """An argument parser with the options every bench script shares:
    ``--models``, ``--small`` and ``--out`` (default ``bench/results/<out_name>``)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(doc.splitlines()[1:]))
    ap.add_argument("--models", default=models,
                    help=f"comma-separated zoo models, or 'all' (default: {models})")
    ap.add_argument("--small", action="store_true", help="use the zoo's small configurations")
    ap.add_argument("--small-models", default="", metavar="NAMES",
                    help="comma-separated models to run at their small configuration even without --small "
                         "(e.g. nasnet_a: TVM takes over 12 minutes to build the full model on 2 cores)")
    ap.add_argument("--out", default=str(RESULTS_DIR / out_name), help="JSON result file")
    return ap


def load_model(name: str, small: bool):
    """``(mod, params, graph)``: the zoo model and its TensorGraph with the weights bound."""
    from relay_eqsat.passes import zoo
    from relay_eqsat.passes.relay.frontend import from_relay

    mod, params = zoo.get(name, small=small)
    return mod, params, from_relay(mod, params)


def model_inputs(name: str, small: bool, seed: int = 0) -> dict:
    """Seeded random inputs for a zoo model."""
    from relay_eqsat.passes import zoo
    from relay_eqsat.passes.runtime.build import random_inputs

    return random_inputs({k: (s, "float32") for k, s in zoo.input_shapes(name, small=small).items()}, seed)
