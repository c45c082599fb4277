"""How fast TVM runs a linear layer in each of its equivalent forms on this CPU (issue 15, a lead for a rule).

A linear layer y = x W^T (x: [M, K] activations, W: [N, K] a constant weight,
bound as TVM binds params) can reach TVM's x86 build as

  dense          nn.dense(x, W): the form the zoo and the rewritten ONNX BERT use;
                 AlterOpLayout packs the constant weight once, at build time
  swapped        transpose(nn.dense(W, x)) = (W x^T)^T: the weight becomes the
                 data operand and the activations are packed at run time
  batch_matmul   reshape(nn.batch_matmul([1, M, K], W^T broadcast [1, K, N],
                 transpose_b=False)): what the ONNX frontend hands TVM for a
                 MatMul by a constant (issue 15's BERT finding; --no-batch-matmul
                 skips it: it is the slow one)

Each is built alone (opt_level 3, the host target, weights constant) and the
forms of one shape are timed in --rounds interleaved rounds (order rotating),
--repeat timings in all of at least --min-repeat-ms each; the table gives the
medians, each form's time over ``dense``'s and dense's GFLOP/s. The outputs of
every form are checked against dense's (max |a - b| / max(1, max |a|) <= 1e-4).

The shapes are the linear layers of bert-base at sequence 128 (transformers'
BERT, as bench/real_models.py runs it: Q/K/V/output 768 -> 768, Q/K/V merged
768 -> 2304, FFN 768 -> 3072 and 3072 -> 768), of the zoo's BERT (TASO's: 64
tokens, 1024 -> 1024, 1024 -> 4096, 4096 -> 1024) and of ViT-B (197 tokens).

    python bench/dense_forms.py [--shapes M:K:N,...] [--rounds 9] [--repeat 9] [--min-repeat-ms 100]
                                [--no-batch-matmul] [--out bench/results/dense_forms.json]
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tables  # noqa: E402

SHAPES = ("128:768:768", "128:768:2304", "128:768:3072", "128:3072:768",
          "64:1024:1024", "64:1024:4096", "64:4096:1024",
          "197:768:768", "197:768:3072", "197:3072:768")
FORMS = ("dense", "swapped", "batch_matmul")
RTOL = 1e-4


def parse_shape(text: str) -> tuple[int, int, int]:
    try:
        m, k, n = (int(v) for v in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape {text!r}: expected M:K:N (three integers)") from None
    if min(m, k, n) < 1:
        raise argparse.ArgumentTypeError(f"shape {text!r}: sizes must be positive")
    return m, k, n


def form_module(form: str, x_shape: tuple[int, int], weight: np.ndarray):
    """The Relay module of one form of x W^T, the weight a constant."""
    import tvm
    from tvm import relay

    m, k = x_shape
    n = weight.shape[0]
    x = relay.var("x", shape=(m, k), dtype="float32")
    if form == "dense":
        y = relay.nn.dense(x, relay.const(weight))
    elif form == "swapped":
        y = relay.transpose(relay.nn.dense(relay.const(weight), x), axes=(1, 0))
    elif form == "batch_matmul":
        wt = relay.const(np.ascontiguousarray(weight.T)[None])
        y = relay.reshape(relay.nn.batch_matmul(relay.reshape(x, (1, m, k)), wt, transpose_b=False), (m, n))
    else:
        raise ValueError(f"unknown form {form!r}; known: {', '.join(FORMS)}")
    return tvm.IRModule.from_expr(relay.Function([x], y))


def run_shape(shape: tuple[int, int, int], forms: list[str], args) -> dict:
    import runtime_stats

    from relay_eqsat.passes.runtime.build import output_error

    m, k, n = shape
    rng = np.random.default_rng(0)
    x = rng.standard_normal((m, k)).astype("float32")
    weight = (rng.standard_normal((n, k)) / np.sqrt(k)).astype("float32")
    built = {f: runtime_stats.build_module(form_module(f, (m, k), weight), {"x": x}) for f in forms}
    timings = runtime_stats.time_built(built, repeat=args.repeat, min_repeat_ms=args.min_repeat_ms,
                                       rounds=args.rounds)
    ref = built["dense"].outputs
    row = {"M": m, "K": k, "N": n, "gflop": 2 * m * k * n / 1e9, "forms": {}}
    for f in forms:
        err = output_error(ref, built[f].outputs)[0]
        row["forms"][f] = dict(timings[f].to_dict(), max_rel_error=err, ok=err <= RTOL,
                               over_dense=timings[f].median / timings["dense"].median)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated M:K:N")
    ap.add_argument("--rounds", type=int, default=9, help="interleaved timing rounds")
    ap.add_argument("--repeat", type=int, default=9, help="timings per form in all")
    ap.add_argument("--min-repeat-ms", type=int, default=100, help="each timing runs at least this long")
    ap.add_argument("--threads", type=int, default=1, help="TVM_NUM_THREADS")
    ap.add_argument("--no-batch-matmul", action="store_true", help="skip the (slow) batch_matmul form")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "dense_forms.json"))
    args = ap.parse_args(argv)
    try:
        shapes = [parse_shape(s.strip()) for s in args.shapes.split(",") if s.strip()]
    except argparse.ArgumentTypeError as e:
        ap.error(f"--shapes: {e}")
    if not shapes:
        ap.error("--shapes: no shape given")
    os.environ["TVM_NUM_THREADS"] = str(args.threads)  # before TVM's runtime starts its thread pool
    forms = [f for f in FORMS if not (args.no_batch_matmul and f == "batch_matmul")]

    rows = []
    for shape in shapes:
        rows.append(run_shape(shape, forms, args))
        print(f"{'x'.join(map(str, shape))}: " + ", ".join(
            f"{f} {rows[-1]['forms'][f]['median_s'] * 1e3:.3f} ms" for f in forms), flush=True)
    headers = ["M", "K", "N"] + [f"{f} ms" for f in forms] + [f"{f}/dense" for f in forms[1:]] + [
        "dense GFLOP/s", "outputs agree"]
    table = []
    for r in rows:
        fs = r["forms"]
        table.append([r["M"], r["K"], r["N"]] + [fs[f]["median_s"] * 1e3 for f in forms]
                     + [fs[f]["over_dense"] for f in forms[1:]]
                     + [r["gflop"] / fs["dense"]["median_s"], all(fs[f]["ok"] for f in forms)])
    machine = tables.machine_info()
    print()
    tables.print_table(headers, table, title=(
        f"Linear layer forms (x: [M, K], constant weight [N, K]; medians of {args.repeat} timings in "
        f"{args.rounds} interleaved rounds; {args.threads} thread; target {machine.get('target')})"))
    tables.write_json(args.out, {"machine": machine, "args": vars(args), "rows": rows})
    return 0 if all(f["ok"] for r in rows for f in r["forms"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
