"""Two transformer findings on this CPU: batch_matmul's forms, and scalar constants shared by calls (issue 15).

1. Attention products. TVM's ONNX frontend hands transformers' MatMuls over as
   ``nn.batch_matmul(a, b, transpose_b=False)`` (the NN form: b is [B, K, N],
   K^T and V as they come), and TVM's x86 schedule reads b down its columns.
   Each product is built in two forms:

     nn   nn.batch_matmul(a, b, transpose_b=False)
     nt   nn.batch_matmul(a, transpose(b, [0, 2, 1]), transpose_b=True): the
          rewrite of rule ``batch-matmul-nn-to-nt``; here the transpose is a
          kernel of its own (in a model it fuses into b's producer), so the
          time is an upper bound
     dense  batch_dense(a, transpose(b, [0, 2, 1])) as the pass's backend
          writes it (rule ``batch-matmul-dense-per-batch``): one nn.dense per
          batch entry (TVM's packed dense schedule), stacked; the transpose
          as in nt

   Shapes: bert-base at 128 tokens (12 heads of 64: Q.K^T and P.V), ViT-B
   (197 tokens) and TASO's BERT (the zoo's: 16 heads of 64, 64 tokens).

2. Scalar constants. A Relay constant used by several calls is handed to
   every fused kernel as a buffer argument (a 0-d build parameter) instead of
   being inlined, so ``power(x, 2f)`` is no longer ``x * x`` for LLVM. The
   pass's backend used to emit one Relay constant per distinct value (the
   graph merges equal values) and so made bert-base's 25 layer-norm variance
   kernels 7x slower than TVM alone; it now emits one per use. Timed: --norms
   layer norms of [1, 128, 768] as ONNX exports them (mean, subtract,
   power 2, mean, add eps, sqrt, divide) with a constant per use ("separate")
   and with the 2f and eps shared by all ("shared").

Each program is built alone (opt_level 3, the host target) and the forms of
one case are timed in --rounds interleaved rounds; outputs are checked against
the first form's (max |a - b| / max(1, max |a|) <= 1e-4).

    python bench/attention_forms.py [--rounds 9] [--repeat 9] [--min-repeat-ms 100] [--norms 12]
                                    [--out bench/results/attention_forms.json]
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tables  # noqa: E402

#: (name, batch x heads, M, K, N) of a = [B, M, K] times b = [B, K, N]
PRODUCTS = (("bert-base Q.K^T", 12, 128, 64, 128), ("bert-base P.V", 12, 128, 128, 64),
            ("ViT-B Q.K^T", 12, 197, 64, 197), ("ViT-B P.V", 12, 197, 197, 64),
            ("TASO BERT Q.K^T", 16, 64, 64, 64), ("TASO BERT P.V", 16, 64, 64, 64))
RTOL = 1e-4
FORMS = ("nn", "nt", "dense")


def product_module(form: str, b: int, m: int, k: int, n: int):
    """The Relay module of a [b, m, k] x [b, k, n] product in ``form`` ("nn" or "nt")."""
    import tvm
    from tvm import relay

    x = relay.var("a", shape=(b, m, k), dtype="float32")
    y = relay.var("b", shape=(b, k, n), dtype="float32")
    if form == "nn":
        out = relay.nn.batch_matmul(x, y, transpose_b=False)
    elif form == "nt":
        out = relay.nn.batch_matmul(x, relay.transpose(y, axes=(0, 2, 1)), transpose_b=True)
    elif form == "dense":
        import relay_eqsat.passes  # noqa: F401 - registers the Relay conversions
        from relay_eqsat import ops
        from relay_eqsat.types import TensorType

        ts = [TensorType((b, m, k), "float32"), TensorType((b, n, k), "float32")]
        out = ops.get("batch_dense").conversion("relay").to_ir({"out_dtype": ""}, [x, relay.transpose(y, axes=(0, 2, 1))],
                                                    ts, TensorType((b, m, n), "float32"))
    else:
        raise ValueError(f"unknown form {form!r}")
    return tvm.IRModule.from_expr(relay.Function([x, y], out))


def norms_module(shared: bool, norms: int, shape=(1, 128, 768)):
    """``norms`` ONNX-style layer norms (no affine part) in a chain, their scalar constants
    one Relay constant per use, or one shared by all (``shared``)."""
    import tvm
    from tvm import relay

    x = relay.var("x", shape=shape, dtype="float32")
    two, eps = relay.const(np.float32(2.0)), relay.const(np.float32(1e-12))
    y = x
    for _ in range(norms):
        d = relay.subtract(y, relay.mean(y, axis=-1, keepdims=True))
        var = relay.mean(relay.power(d, two if shared else relay.const(np.float32(2.0))), axis=-1, keepdims=True)
        y = relay.divide(d, relay.sqrt(relay.add(var, eps if shared else relay.const(np.float32(1e-12)))))
    return tvm.IRModule.from_expr(relay.Function([x], y))


def run_case(modules: dict, inputs: dict, args) -> dict:
    """Build and time the forms of one case; each form's median, ratio to the first, output check."""
    import runtime_stats

    from relay_eqsat.passes.runtime.build import output_error

    built = {f: runtime_stats.build_module(mod, inputs) for f, mod in modules.items()}
    timings = runtime_stats.time_built(built, repeat=args.repeat, min_repeat_ms=args.min_repeat_ms,
                                       rounds=args.rounds)
    first = next(iter(modules))
    out = {}
    for f in modules:
        err = output_error(built[first].outputs, built[f].outputs)[0]
        out[f] = dict(timings[f].to_dict(), max_rel_error=err, ok=err <= RTOL,
                      over_first=timings[f].median / timings[first].median)
    return out


def scalar_params(mod) -> int:
    """How many 0-d constants TVM's build of ``mod`` passes to its kernels as parameters."""
    from relay_eqsat.passes.runtime.build import build

    return sum(1 for p in build(mod).get_params().values() if not p.shape)


def main(argv=None) -> int:
    import runtime_stats

    ap = runtime_stats.forms_parser(__doc__, "attention_forms.json")
    ap.add_argument("--norms", type=int, default=12, help="layer norms in the scalar-constant program")
    args = ap.parse_args(argv)
    if args.norms < 1:
        ap.error("--norms must be at least 1")
    os.environ["TVM_NUM_THREADS"] = str(args.threads)  # before TVM's runtime starts its thread pool

    rng = np.random.default_rng(0)
    rows = []
    for name, b, m, k, n in PRODUCTS:
        inputs = {"a": rng.standard_normal((b, m, k)).astype("float32"),
                  "b": rng.standard_normal((b, k, n)).astype("float32")}
        forms = run_case({f: product_module(f, b, m, k, n) for f in FORMS}, inputs, args)
        rows.append({"case": name, "shape": [b, m, k, n], "gflop": 2 * b * m * k * n / 1e9, "forms": forms})
        print(f"{name}: " + ", ".join(f"{f} {forms[f]['median_s'] * 1e3:.3f} ms" for f in FORMS), flush=True)
    inputs = {"x": rng.standard_normal((1, 128, 768)).astype("float32")}
    modules = {"separate": norms_module(False, args.norms), "shared": norms_module(True, args.norms)}
    norms = run_case(modules, inputs, args)
    for f, mod in modules.items():
        norms[f]["scalar_params"] = scalar_params(mod)
    print(f"{args.norms} layer norms: separate {norms['separate']['median_s'] * 1e3:.3f} ms, "
          f"shared {norms['shared']['median_s'] * 1e3:.3f} ms", flush=True)

    machine = tables.machine_info()
    print()
    tables.print_table(
        ["product", "B", "M", "K", "N", *(f"{f} ms" for f in FORMS), "nt/nn", "dense/nt",
         *(f"{f} GFLOP/s" for f in FORMS), "outputs agree"],
        [[r["case"], *r["shape"], *(r["forms"][f]["median_s"] * 1e3 for f in FORMS), r["forms"]["nt"]["over_first"],
          r["forms"]["dense"]["median_s"] / r["forms"]["nt"]["median_s"],
          *(r["gflop"] / r["forms"][f]["median_s"] for f in FORMS), all(r["forms"][f]["ok"] for f in FORMS)]
         for r in rows],
        title=(f"batch_matmul NN form, NT with the transpose, and one dense per batch entry (medians of "
               f"{args.repeat} timings in {args.rounds} interleaved rounds; {args.threads} thread; "
               f"target {machine.get('target')})"))
    print()
    tables.print_table(
        ["scalar constants", "ms", "over separate", "0-d build params", "outputs agree"],
        [[f, norms[f]["median_s"] * 1e3, norms[f]["over_first"], norms[f]["scalar_params"], norms[f]["ok"]]
         for f in ("separate", "shared")],
        title=f"{args.norms} layer norms of [1, 128, 768] (power 2, eps) with a constant per use or shared")
    tables.write_json(args.out, {"machine": machine, "args": vars(args), "products": rows, "norms": norms})
    return 0 if all(f["ok"] for r in rows for f in r["forms"].values()) and all(
        v["ok"] for v in norms.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
