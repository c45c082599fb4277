"""A model with its exact transcendental functions against the same model with every one of them as
TVM's vectorized approximation, untuned and under an AutoTVM log, in paired rounds.

What the ``approx`` rules (``sigmoid-fast``, ``tanh-fast``, ``exp-fast``, ``erf-fast``,
``softmax-fast``) are worth in a whole model where the cost model does not say: the model
(bench/models/<model>.onnx) read into the pass's graph, written back as the pass writes its
programs (``graph_to_module``: fast_sigmoid as 0.5 + 0.5 * fast_tanh(0.5 * x), fast_erf with its NaN
guard), once as it is and once with each op of ``--ops`` replaced by its approximation, both built
at opt_level 3 untuned and under LOG (as ``tvmc compile --tuning-records`` builds them); outputs
checked against the exact untuned build's, the four timed in interleaved rounds.

    python bench/approx_under_logs.py MODEL LOG [--ops sigmoid,tanh,exp,erf,nn.softmax]
                                      [--rounds 9] [--out bench/results/approx_under_logs.json]

Nothing else may run while this times.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import tables  # noqa: E402

MODELS_DIR = Path(__file__).resolve().parent / "models"
#: each exact op and the approximation its ``approx`` rule writes (rules/default.rules)
APPROX = {"sigmoid": "fast_sigmoid", "tanh": "fast_tanh", "exp": "fast_exp", "erf": "fast_erf",
          "nn.softmax": "nn.fast_softmax"}
VARIANTS = ("exact", "exact, log", "approx", "approx, log")
RTOL = 1e-4


def approximated(graph, ops):
    """``graph`` with every node of an op in ``ops`` computing its approximation instead (same
    operands, attributes and type), and how many were replaced."""
    replaced = sum(1 for i in graph.reachable() if graph[i].op in ops)
    return graph.compact(rename={op: APPROX[op] for op in ops}), replaced


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a model of bench/models (its .onnx and .json)")
    ap.add_argument("log", help="an AutoTVM log of the model (bench/real_models.py --tune-trials writes them)")
    ap.add_argument("--ops", default=",".join(APPROX), help="the exact ops to approximate, comma-separated")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--out", default="bench/results/approx_under_logs.json")
    args = ap.parse_args(argv)
    ops = [o for o in args.ops.split(",") if o]
    unknown = [o for o in ops if o not in APPROX]
    if unknown or not ops:
        ap.error(f"--ops: {', '.join(unknown) or 'none given'}; known: {', '.join(APPROX)}")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if not Path(args.log).is_file():
        ap.error(f"no log at {args.log}")

    from model_inputs import load_onnx
    from relay_eqsat.passes.relay.backend import graph_to_module
    from relay_eqsat.passes.relay.frontend import from_relay, main_function
    from relay_eqsat.passes.runtime.build import random_inputs
    from under_logs import paired_builds

    meta = json.loads((MODELS_DIR / f"{args.model}.json").read_text())
    typed, _ = main_function(load_onnx(MODELS_DIR / f"{args.model}.onnx", meta["inputs"]))
    graph = from_relay(typed)
    fast, replaced = approximated(graph, set(ops))
    exact_mod, fast_mod = graph_to_module(graph), graph_to_module(fast)
    inputs = random_inputs({s["name"]: (list(s["shape"]), s["dtype"]) for s in meta["inputs"]}, seed=0)
    timed = paired_builds([(exact_mod, None), (exact_mod, args.log), (fast_mod, None), (fast_mod, args.log)],
                          inputs, VARIANTS, args.rounds)
    row = {"model": args.model, "log": args.log, "ops": ops, "replaced": replaced,
           "max_error": timed["max_error"], "ms": timed["ms"],
           "approx_over_exact": timed["ratios"]["approx/exact"],
           "approx_over_exact_under_log": timed["ratios"]["approx, log/exact, log"]}
    tables.print_table(["model", "replaced", *(f"{v} ms" for v in VARIANTS), "approx / exact (won)",
                        "under the log (won)", "max error"],
                       [[args.model, replaced, *(row["ms"][v] for v in VARIANTS),
                         f"{tables.fmt(row['approx_over_exact']['ratio'])} ({row['approx_over_exact']['wins']})",
                         f"{tables.fmt(row['approx_over_exact_under_log']['ratio'])} "
                         f"({row['approx_over_exact_under_log']['wins']})", row["max_error"]]],
                       title="exact against approximated transcendental ops, paired rounds "
                             "(ratios: medians of per-round ratios)")
    tables.write_json(args.out, {"machine": tables.machine_info(), "args": vars(args), "rows": [row]})
    if not row["max_error"] <= RTOL:
        print(f"outputs differ: max relative error {row['max_error']:.3g} > {RTOL:g}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
