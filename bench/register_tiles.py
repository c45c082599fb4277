"""How TVM's x86 convolution speed depends on the register tile its fallback schedule picks (issue 15).

Without a tuning log TVM (0.16, ``topi/x86``) keeps a convolution's partial sums
in vector registers: one per output column of the width block ``reg_n`` (kernels
larger than 1x1: the largest divisor of the output width up to 31) or of the
``oh x ow`` tile (1x1 kernels: the widest divisor of the width, then the tallest
divisor of the height with a product below 32), times the output-channel block
over the lanes. AVX2 has 16 vector registers: a tile of more than about 14
accumulators spills to memory in the innermost loop; AVX-512 has 32. This
sweep times 3x3 convolutions over output widths (every width a tile of its own)
and 1x1 convolutions over output shapes chosen for their tiles, each built alone
as the measuring worker builds it and timed by TVM's debug executor per kernel
(``bench/channel_blocks.time_kernel``: the convolution's own kernel), and fits

    seconds = flops / (speed[kind, channels] * schedule_efficiency_v4 * (p if acc > R else 1))

— one speed per group, the register budget ``R`` by a grid, the spill factor ``p``
by least squares on log-seconds (the form of
``relay_eqsat.cost.simd.register_efficiency``); a power law ``min(1, R / acc) ** s``
is fitted beside it for comparison.

    python bench/register_tiles.py [--repeat 7] [--min-repeat-ms 20] [--quick] [--target T]
                                   [--out bench/results/register_tiles.json] [--refit FILE]
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import tables  # noqa: E402
from channel_blocks import run_sweep, time_sweep  # noqa: E402

from relay_eqsat.cost.instance import OpInstance  # noqa: E402
from relay_eqsat.cost.simd import accumulators, register_efficiency, schedule_efficiency  # noqa: E402
from relay_eqsat.graph import TensorType  # noqa: E402

#: (channels, output height, output widths) of the 3x3 sweep: every width is its own width block
WIDTHS_3X3 = ((64, 28, (4, 6, 7, 8, 10, 12, 13, 14, 15, 16, 17, 18, 20, 21, 24, 26, 27, 28, 56)),
              (128, 28, (7, 14, 28)), (256, 14, (7, 14)))
QUICK_3X3 = ((64, 28, (7, 8, 12, 14, 16, 20, 28)),)
#: (channels, output shapes) of the 1x1 sweep, chosen for their oh x ow tiles
SHAPES_1X1 = ((256, ((7, 7), (13, 7), (9, 12), (7, 14), (14, 7), (15, 15), (16, 8), (17, 17), (18, 18), (10, 10),
                     (21, 21), (12, 12), (26, 26), (9, 9), (14, 14), (28, 7), (28, 28))),
              (128, ((14, 7), (14, 14), (56, 56))))
QUICK_1X1 = ((256, ((7, 7), (14, 7), (16, 8), (12, 12), (14, 14))),)


def conv(c: int, h: int, w: int, k: int) -> OpInstance:
    p = k // 2
    attrs = dict(strides=(1, 1), padding=(p, p, p, p), dilation=(1, 1), groups=1,
                 data_layout="NCHW", kernel_layout="OIHW", out_dtype="")
    return OpInstance.make("nn.conv2d", attrs, [TensorType((1, c, h, w)), TensorType((c, c, k, k))])


def sweep(quick: bool) -> list[tuple[dict, OpInstance]]:
    out = []
    for c, h, widths in (QUICK_3X3 if quick else WIDTHS_3X3):
        out += [(dict(kind="conv3x3", channels=c, h=h, w=w), conv(c, h, w, 3)) for w in widths]
    for c, shapes in (QUICK_1X1 if quick else SHAPES_1X1):
        out += [(dict(kind="conv1x1", channels=c, h=h, w=w), conv(c, h, w, 1)) for h, w in shapes]
    return out


def _lstsq(rs: list[dict], groups: list, y: np.ndarray, column) -> tuple[float, float, float, list]:
    A = np.zeros((len(rs), len(groups) + (column is not None)))
    for i, r in enumerate(rs):
        A[i, groups.index((r["kind"], r["channels"]))] = 1.0
        if column is not None:
            A[i, -1] = column(r)
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    res = A @ coef - y
    return (float(coef[-1]) if column is not None else 0.0, float(np.sum(res ** 2)),
            float(np.median(np.abs(res))), list(coef))


def fit(rows: list[dict], budgets=range(8, 21)) -> dict:
    """Least squares of log(flops / t / eff_v4) = log speed[kind, channels] + log p [acc > R] for
    each register budget R of ``budgets`` (the least squared residual wins), and the same with
    ``s log min(1, R / acc)`` for comparison."""
    rs = [r for r in rows if r.get("seconds")]
    groups = sorted({(r["kind"], r["channels"]) for r in rs})
    y = np.array([math.log(r["flops"] / r["seconds"] / r["v4_efficiency"]) for r in rs])
    best = power = None
    for R in budgets:
        logp, sse, med, coef = _lstsq(rs, groups, y, lambda r, R=R: 1.0 if r["acc"] > R else 0.0)
        if best is None or sse < best["sse"]:
            best = dict(budget=R, spill=math.exp(logp), sse=sse, median_abs_residual=med,
                        speed_gflops={f"{k}/{c}": math.exp(v) / 1e9 for (k, c), v in zip(groups, coef)})
        s, sse, med, _ = _lstsq(rs, groups, y, lambda r, R=R: math.log(min(1.0, R / r["acc"])))
        if power is None or sse < power["sse"]:
            power = dict(budget=R, exponent=s, sse=sse, median_abs_residual=med)
    _, sse, med, _ = _lstsq(rs, groups, y, None)
    best["power_law"] = power
    best["without"] = dict(sse=sse, median_abs_residual=med)
    return best


def main(argv=None) -> int:
    def measure(args, target, lanes):
        return time_sweep(sweep(args.quick), target, lanes, args,
                          lambda labels, inst: dict(labels, acc=accumulators(inst.op, inst.attrs, inst.input_types,
                                                                              inst.out_type, lanes)),
                          lambda r: f"{r['kind']} {r['channels']}ch {r['h']}x{r['w']} acc {r['acc']}")

    return run_sweep(argv, __doc__.split("\n\n")[0], "bench/results/register_tiles.json", "a small subset (12 kernels)",
                     measure, report)


def report(target: str, lanes: int, rows: list[dict], args: dict, machine: dict) -> int:
    for r in rows:
        inst = conv(r["channels"], r["h"], r["w"], 3 if r["kind"] == "conv3x3" else 1)
        r["v4_efficiency"] = schedule_efficiency(inst.op, inst.attrs, inst.input_types, inst.out_type, lanes,
                                                 registers=False)
        r["model_register_efficiency"] = register_efficiency(inst.op, inst.attrs, inst.input_types,
                                                             inst.out_type, lanes)
    f = fit(rows)
    table = []
    for r in rows:
        gf = r["flops"] / r["seconds"] / 1e9 if r.get("seconds") else None
        full = f["speed_gflops"][f"{r['kind']}/{r['channels']}"]
        measured = gf / full / r["v4_efficiency"] if gf else None
        r.update(gflops=gf, measured_register_efficiency=measured)
        table.append([r["kind"], r["channels"], f"{r['h']}x{r['w']}", r["acc"], tables.ms(r["seconds"]), gf,
                      r["v4_efficiency"], measured, r["model_register_efficiency"]])
    text = tables.print_table(["kind", "channels", "out", "acc", "ms", "GFLOP/s", "eff v4", "reg eff measured",
                               "reg eff model"], table,
                              title=f"conv kernels on {target} ({lanes} lanes), TVM opt_level 3, 1 thread")
    pw = f["power_law"]
    line = (f"fit: register efficiency = {f['spill']:.3f} above {f['budget']} accumulators, else 1; median |log "
            f"residual| {f['median_abs_residual']:.3f}, sum of squares {f['sse']:.3f} (without the term "
            f"{f['without']['median_abs_residual']:.3f}, {f['without']['sse']:.3f}; as min(1, {pw['budget']} / acc) ^ "
            f"{pw['exponent']:.3f}: {pw['median_abs_residual']:.3f}, {pw['sse']:.3f})")
    print(line)
    out = Path(args["out"])
    tables.write_json(out, dict(machine=machine, args=args, target=target, lanes=lanes, fit=f, rows=rows))
    out.with_suffix(".txt").write_text(text + "\n" + line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
