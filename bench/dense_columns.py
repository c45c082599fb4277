"""How a dense kernel's output width decides its speed under TVM's untuned x86 schedule (issue 15).

TVM's x86 ``dense_pack`` fallback (``_default_dense_pack_config``) blocks the
output columns N (the weight's rows) by their largest divisor up to twice the
fp32 SIMD lanes and the rows M by the largest power of two up to 8 dividing
them. This times single ``nn.dense`` kernels, as the cost model measures them
(``relay_eqsat.cost.measure.Measurer``: alone, in a worker, median of
--repeat timings), over widths whose block is a multiple of the lanes, below
them and between the lanes and twice them, on several row counts, and sets
each against the nearest width of the same M and K whose block is a multiple
of the lanes: the measured share of that speed beside
``simd.column_efficiency``'s (what the cost model's baseline assumes).

    python bench/dense_columns.py [--shapes M:K:N,...] [--db costs.sqlite] [--repeat 5]
                                  [--out bench/results/dense_columns.json]

Measurements go to --db (a cost database; default: a temporary one, not
kept), so a second run with the same --db reprints the table without timing
again.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tables  # noqa: E402
from dense_forms import parse_shape  # noqa: E402

#: (M, K, N): 128 rows over every kind of column block, the rows' own tiles on a few widths, and the
#: tall-narrow kernels of a swapped dense (the weight's thousands of rows as M, activations' rows as N)
SHAPES = ([(128, 768, n) for n in (8, 16, 24, 32, 40, 48, 49, 50, 56, 64, 80, 96, 100, 112, 120, 128, 144, 160,
                                   176, 192, 196, 197, 200, 208, 224, 256, 384, 512, 768, 1000, 1024, 1536, 2048,
                                   3072, 4096)]
          + [(m, 768, n) for m in (1, 2, 4, 8, 196, 197, 200) for n in (7, 24, 48, 49, 64, 1000, 1024)]
          + [(3072, 768, n) for n in (1, 4, 49, 50, 64, 128, 197, 200)]
          + [(768, 3072, n) for n in (64, 128, 197, 200)])


def dense_instance(m: int, k: int, n: int):
    from relay_eqsat import ops
    from relay_eqsat.cost.instance import OpInstance
    from relay_eqsat.graph import TensorType

    ins = [TensorType((m, k), "float32"), TensorType((n, k), "float32")]
    return OpInstance.make("nn.dense", ops.normalize_attrs("nn.dense", {}, ins), ins)


def _blocks(m: int, n: int, lanes: int) -> tuple[int, int]:
    """(column block, row tile) the cost model assigns an m x 768 -> n dense (``simd``)."""
    from relay_eqsat.cost.simd import column_block, row_tile

    inst = dense_instance(m, 768, n)
    args = (inst.op, inst.attrs, inst.input_types)
    return column_block(*args, lanes), row_tile(*args)


def well_blocked(n: int, lanes: int) -> bool:
    return _blocks(1, n, lanes)[0] % lanes == 0


def compare(results: dict, lanes: int) -> list[dict]:
    """Each kernel whose column block is not a multiple of the lanes against the nearest width of
    the same M and K whose block is: measured share of its GFLOP/s, and the model's."""
    from relay_eqsat.cost.simd import column_efficiency

    rows = []
    for (m, k, n), secs in sorted(results.items()):
        if secs is None or well_blocked(n, lanes):
            continue
        refs = sorted((abs(n2 - n), n2) for (m2, k2, n2), s2 in results.items()
                      if (m2, k2) == (m, k) and s2 is not None and well_blocked(n2, lanes))
        if not refs:
            continue
        n_ref = refs[0][1]
        gflops = 2 * m * k * n / secs / 1e9
        ref_gflops = 2 * m * k * n_ref / results[(m, k, n_ref)] / 1e9
        block, tile = _blocks(m, n, lanes)
        rows.append(dict(M=m, K=k, N=n, ms=secs * 1e3, gflops=gflops, block=block, row_tile=tile, ref_N=n_ref,
                         measured_share=gflops / ref_gflops, model_share=column_efficiency(block, tile, lanes)))
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(__doc__.splitlines()[1:]))
    ap.add_argument("--shapes", default=None, help="comma-separated M:K:N (default: the built-in set)")
    ap.add_argument("--db", default=None, help="cost database the timings go to (default: a temporary one)")
    ap.add_argument("--repeat", type=int, default=5, help="timings per kernel; the median is kept")
    ap.add_argument("--min-repeat-ms", type=float, default=50.0, help="least duration of one timing")
    ap.add_argument("--threads", type=int, default=1, help="TVM_NUM_THREADS")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "dense_columns.json"))
    args = ap.parse_args(argv)
    try:
        shapes = SHAPES if args.shapes is None else [parse_shape(s.strip()) for s in args.shapes.split(",")
                                                     if s.strip()]
    except argparse.ArgumentTypeError as e:
        ap.error(f"--shapes: {e}")
    if not shapes:
        ap.error("--shapes: no shape given")
    os.environ["TVM_NUM_THREADS"] = str(args.threads)

    from relay_eqsat.cost.cache import CostCache
    from relay_eqsat.cost.measure import MeasureConfig
    from relay_eqsat.cost.pool import MeasurePool
    from relay_eqsat.cost.simd import simd_lanes

    with tempfile.TemporaryDirectory() as tmp:
        cache = CostCache(args.db or Path(tmp) / "columns.sqlite")
        measurer = MeasurePool(None, None, MeasureConfig(repeat=args.repeat, min_repeat_ms=args.min_repeat_ms), cache)
        with measurer:
            res = measurer.measure_many([dense_instance(*s) for s in shapes])
        cache.close()
    lanes = simd_lanes(measurer.target)
    if not lanes:
        print(f"dense_columns: {measurer.target} is not an x86 target with known SIMD lanes", file=sys.stderr)
        return 2
    results = {s: (r.seconds if r.ok else None) for s, r in zip(shapes, res)}
    failed = [s for s, t in results.items() if t is None]
    rows = compare(results, lanes)
    machine = tables.machine_info()
    tables.print_table(
        ["M", "K", "N", "ms", "GFLOP/s", "block", "row tile", "ref N", "measured share", "model share"],
        [[r["M"], r["K"], r["N"], r["ms"], r["gflops"], r["block"], r["row_tile"], r["ref_N"],
          r["measured_share"], r["model_share"]] for r in rows],
        title=(f"nn.dense by output width (column block = largest divisor of N up to {2 * lanes}; "
               f"share of the speed of the nearest N blocked by a multiple of {lanes}; target {measurer.target}, "
               f"{args.threads} thread)"))
    if failed:
        print(f"failed: {failed}")
    tables.write_json(args.out, {"machine": machine, "args": vars(args), "lanes": lanes,
                                 "kernels": [dict(M=m, K=k, N=n, seconds=t) for (m, k, n), t in results.items()],
                                 "rows": rows})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
