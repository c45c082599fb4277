"""Exact transcendental functions against TVM's vectorized approximations (the ``approx`` rules, issue 15).

TVM's x86 code computes ``exp``, ``tanh`` and ``erf`` (and the exp inside
``sigmoid`` and ``nn.softmax``) with one libm call per value; its FastMath ops
(``fast_exp``, ``fast_tanh``, ``fast_erf``, ``nn.fast_softmax``; TVM turns
them on at opt_level 4 only) compute them SIMD-wide with polynomials, and
the table's ``fast_sigmoid`` is 0.5 + 0.5 * fast_tanh(0.5 * x). The default rule set's
``approx`` rules (``exp-fast``, ``tanh-fast``, ``erf-fast``, ``sigmoid-fast``,
``softmax-fast``; option ``fast_math``) rewrite one into the other. Each case
is a TensorGraph built in both forms and handed to TVM through the pass's
backend (``graph_to_module``: fast_erf with its NaN guard), at bert-base's
sizes:

  GELU      x * (1 + erf(x / sqrt 2)) * 0.5 over [1, 128, 3072], as ONNX
            exports transformers' GELU (erf vs fast_erf)
  softmax   over the last axis of [1, 12, 128, 128] (attention scores)
  tanh      over [128, 3072] (GELU's tanh form, RNN gates)
  sigmoid   over [128, 3072] (RNN gates, SiLU)
  exp       over [128, 3072]

Inputs are normal with standard deviation 3; the error columns are the
largest |TVM - reference| of each form, the reference being the table's numpy
evaluation (float64, rounded to float32), and the fast form's over
max(1, max |reference|) (the pass's output check's measure until 2026-11-27; it is relative
to max |reference| since).
The forms of one case are timed in --rounds interleaved rounds.

    python bench/fast_math.py [--rounds 9] [--repeat 9] [--min-repeat-ms 100] [--scale 1]
                              [--out bench/results/fast_math.json]
"""
from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tables  # noqa: E402

#: (case, shape at --scale 1, exact op, fast op)
CASES = (("GELU", (1, 128, 3072), "erf", "fast_erf"), ("softmax", (1, 12, 128, 128), "nn.softmax", "nn.fast_softmax"),
         ("tanh", (128, 3072), "tanh", "fast_tanh"), ("sigmoid", (128, 3072), "sigmoid", "fast_sigmoid"),
         ("exp", (128, 3072), "exp", "fast_exp"))
INPUT_STD = 3.0


def case_graph(case: str, shape, op: str):
    """The TensorGraph of ``case`` over an input ``x`` of ``shape``, its function computed by ``op``."""
    from relay_eqsat.graph import TensorGraph

    g = TensorGraph()
    x = g.var("x", shape)
    if case == "GELU":
        e = g.add(op, [g.add("divide", [x, g.const(np.float32(math.sqrt(2.0)))])])
        y = g.add("multiply", [g.add("multiply", [x, g.add("add", [e, g.const(np.float32(1.0))])]),
                               g.const(np.float32(0.5))])
    elif case == "softmax":
        y = g.add(op, [x], {"axis": len(shape) - 1})
    else:
        y = g.add(op, [x])
    g.set_output(y)
    return g


def scaled(shape, scale: float) -> tuple[int, ...]:
    """``shape`` with its last dimension scaled (at least 1): smaller cases for the tests."""
    return (*shape[:-1], max(1, int(round(shape[-1] * scale))))


def run_case(case: str, shape, exact: str, fast: str, args) -> dict:
    import runtime_stats

    from relay_eqsat.passes.relay.backend import graph_to_module

    graphs = {"exact": case_graph(case, shape, exact), "fast": case_graph(case, shape, fast)}
    x = (np.random.default_rng(0).standard_normal(shape) * INPUT_STD).astype("float32")
    ref = graphs["exact"].evaluate({"x": x}).astype(np.float64)  # float64 inside, rounded to float32
    built = {f: runtime_stats.build_module(graph_to_module(g), {"x": x}) for f, g in graphs.items()}
    timings = runtime_stats.time_built(built, repeat=args.repeat, min_repeat_ms=args.min_repeat_ms,
                                       rounds=args.rounds)
    row = {"case": case, "shape": list(shape), "exact_op": exact, "fast_op": fast}
    for f in graphs:
        out = built[f].outputs[0].astype(np.float64)
        row[f] = dict(timings[f].to_dict(), max_abs_error=float(np.max(np.abs(out - ref))),
                      max_error_over_scale=float(np.max(np.abs(out - ref)) / max(1.0, float(np.max(np.abs(ref))))))
    row["fast_over_exact"] = timings["fast"].median / timings["exact"].median
    return row


def main(argv=None) -> int:
    import runtime_stats

    ap = runtime_stats.forms_parser(__doc__, "fast_math.json")
    ap.add_argument("--scale", type=float, default=1.0, help="scale of each case's last dimension")
    args = ap.parse_args(argv)
    if not args.scale > 0:
        ap.error("--scale must be positive")
    os.environ["TVM_NUM_THREADS"] = str(args.threads)  # before TVM's runtime starts its thread pool

    rows = []
    for case, shape, exact, fast in CASES:
        rows.append(run_case(case, scaled(shape, args.scale), exact, fast, args))
        r = rows[-1]
        print(f"{case}: exact {r['exact']['median_s'] * 1e3:.3f} ms, fast {r['fast']['median_s'] * 1e3:.3f} ms",
              flush=True)
    print()
    tables.print_table(
        ["case", "shape", "exact op", "exact ms", "fast ms", "fast/exact", "exact max |err|", "fast max |err|",
         "fast err / max(1, max |y|)"],
        [[r["case"], "x".join(map(str, r["shape"])), r["exact_op"], r["exact"]["median_s"] * 1e3,
          r["fast"]["median_s"] * 1e3, r["fast_over_exact"], f"{r['exact']['max_abs_error']:.2e}",
          f"{r['fast']['max_abs_error']:.2e}", f"{r['fast']['max_error_over_scale']:.2e}"] for r in rows],
        title=(f"exact vs fast transcendental functions (medians of {args.repeat} timings in {args.rounds} "
               f"interleaved rounds, TVM opt_level 3, {args.threads} thread(s); errors against float64)"))
    tables.write_json(args.out, {"machine": tables.machine_info(), "args": vars(args), "cases": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
