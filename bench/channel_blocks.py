"""How TVM's x86 convolution speed depends on the channel blocks its fallback schedule picks (issue 15).

TVM builds an fp32 conv2d on x86 without a tuning log with channel blocks
``oc_bn`` = the largest divisor of the output channels <= the SIMD width in fp32
lanes (16 with AVX-512) and ``ic_bn`` = the largest divisor of the input
channels <= ``oc_bn`` (``relay_eqsat/cost/simd.py`` cites the TVM functions):
58 channels get 2-wide vectors. This sweep measures 1x1 and 3x3 convolutions,
depthwise 3x3 (stride 1 and 2) and grouped 3x3 convolutions over channel counts
and spatial sizes, each one built alone as the measuring worker builds it
(``relay_eqsat.passes.runtime.kernels.relay_function``, opt_level 3, the host target,
``passes/runtime/build.py``) and timed by TVM's debug executor per kernel: the
convolution's own kernel (the layout transforms AlterOpLayout puts around it
are left out, as the cost model's kernel times leave them out; timing the
convolution node itself rather than subtracting the transforms from the whole
run, as the worker does, keeps memory-bound depthwise kernels from drowning in
the transforms' noise). The median of --repeat timings, each of at least
--min-repeat-ms. It then fits how the time per FLOP depends on the blocks,
per family (dense, depthwise, grouped convolutions):

    seconds = flops / (speed[kind, size] * (oc_bn / lanes) ** b)

with one full-block speed per (kind, spatial size) group (least squares on
log-seconds), the form of ``relay_eqsat.cost.simd.lane_efficiency``; for the
dense convolutions a fit with an input-block exponent too is reported beside
it. The table shows every kernel's GFLOP/s, its
blocks, the efficiency measured (its speed over its group's full-block speed)
and the one the cost model uses.

--target builds for another x86 CPU whose code runs on this one (e.g. ``llvm
-mtriple=x86_64-linux-gnu -mcpu=haswell``: TVM then picks blocks for 8 lanes
and LLVM emits AVX2 code), to see the 8-lane behaviour on an AVX-512 machine.

--refit FILE fits and prints an earlier run's measurements again (nothing
measured; the model column from the current ``simd.py``).

    python bench/channel_blocks.py [--repeat 7] [--min-repeat-ms 20] [--quick] [--target T]
                                   [--out bench/results/channel_blocks.json] [--refit FILE]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tables  # noqa: E402

from relay_eqsat.cost.instance import OpInstance  # noqa: E402
from relay_eqsat.cost.simd import channel_blocks, lane_efficiency, simd_lanes  # noqa: E402
from relay_eqsat.graph import TensorType  # noqa: E402
from relay_eqsat import ops  # noqa: E402

CHANNELS = (16, 24, 32, 48, 56, 58, 64, 96, 112, 116, 128, 232, 240, 256)
QUICK_CHANNELS = (24, 58, 64, 116, 128)
MIXED = ((58, 64), (64, 58), (116, 128), (128, 116), (24, 58), (58, 116), (116, 232), (232, 256), (256, 232))
GROUPED = ((64, 32), (128, 32), (256, 32), (512, 32), (116, 2), (128, 2))  # (channels, groups)


def conv(cin: int, cout: int, hw: int, k: int, stride: int = 1, groups: int = 1) -> OpInstance:
    p = k // 2
    attrs = dict(strides=(stride, stride), padding=(p, p, p, p), dilation=(1, 1), groups=groups,
                 data_layout="NCHW", kernel_layout="OIHW", out_dtype="")
    return OpInstance.make("nn.conv2d", attrs, [TensorType((1, cin, hw, hw)),
                                               TensorType((cout, cin // groups, k, k))])


def sweep(quick: bool) -> list[tuple[dict, OpInstance]]:
    """(labels, instance) for every kernel of the sweep."""
    chans = QUICK_CHANNELS if quick else CHANNELS
    out = []

    def add(kind, cin, cout, hw, k, stride=1, groups=1):
        out.append((dict(kind=kind, cin=cin, cout=cout, hw=hw, stride=stride, groups=groups),
                    conv(cin, cout, hw, k, stride, groups)))

    for hw in ((28, 14) if quick else (56, 28, 14, 7)):
        for c in chans:
            add("conv1x1", c, c, hw, 1)
    for hw in (28, 14):
        for cin, cout in MIXED[: 4 if quick else None]:
            add("conv1x1", cin, cout, hw, 1)
    for hw in ((14,) if quick else (28, 14, 7)):
        for c in chans:
            add("conv3x3", c, c, hw, 3)
    for hw in ((28, 14) if quick else (56, 28, 14, 7)):
        for c in chans:
            add("dw3x3", c, c, hw, 3, groups=c)
    for hw in ((28,) if quick else (56, 28)):
        for c in chans:
            add("dw3x3/s2", c, c, hw, 3, stride=2, groups=c)
    for hw in ((14,) if quick else (28, 14)):
        for c, g in GROUPED:
            add("group3x3", c, c, hw, 3, groups=g)
    return out


def time_kernel(inst: OpInstance, target: str, repeat: int, min_repeat_ms: float) -> dict:
    """Seconds of the instance's convolution kernel (debug executor, per node) and of the whole
    one-op program (layout transforms included)."""
    import tvm

    from relay_eqsat.passes.runtime.kernels import relay_function
    from relay_eqsat.passes.runtime.build import build, executor, set_inputs
    from relay_eqsat.passes.runtime.timing import node_times, time_module

    func, params, inputs = relay_function(inst)
    lib = build(func, params={k: tvm.nd.array(v) for k, v in params.items()}, target=target)
    dev = tvm.cpu(0)
    m = executor(lib, dev)
    set_inputs(m, inputs)
    total, _ = time_module(m, dev, repeat, 0, min_repeat_ms)
    nodes = node_times(lib, dev, inputs, 1, repeat, max(1, int(round(min_repeat_ms))))
    convs = [(n["attrs"]["func_name"], t) for n, t in nodes
             if n["op"] == "tvm_op" and "conv2d" in n["attrs"]["func_name"] and t is not None]
    layout = sum(t for n, t in nodes if n["op"] == "tvm_op" and "layout_transform" in n["attrs"]["func_name"]
                 and t is not None)
    if len(convs) != 1:
        raise RuntimeError(f"expected one convolution kernel, found {[c for c, _ in convs]}")
    return dict(seconds=convs[0][1], kernel=convs[0][0], total_s=total, layout_s=layout)


def group_key(r: dict) -> tuple:
    """Kernels whose full-block speed is one parameter of the fit: same kind and spatial size."""
    return (r["kind"], r["hw"])


FAMILIES = {"conv": ("conv1x1", "conv3x3"), "depthwise": ("dw3x3", "dw3x3/s2"), "group": ("group3x3",)}


def _lstsq(rs: list[dict], columns) -> tuple[np.ndarray, list, float]:
    """log(t / flops) = -log speed[group] - sum_j e_j log(x_j): (exponents, groups' log speeds,
    median |residual|)."""
    groups = sorted({group_key(r) for r in rs})
    A = np.zeros((len(rs), len(groups) + len(columns)))
    y = np.zeros(len(rs))
    for i, r in enumerate(rs):
        A[i, groups.index(group_key(r))] = 1.0
        for j, col in enumerate(columns):
            A[i, len(groups) + j] = -math.log(r[col] / r["lanes"])
        y[i] = math.log(r["seconds"] / r["flops"])
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    resid = A @ coef - y
    return coef[len(groups):], list(zip(groups, coef[: len(groups)])), float(np.median(np.abs(resid)))


def fit_efficiency(rows: list[dict]) -> dict:
    """Least squares on log-seconds, per family (dense convolutions, depthwise, grouped):
    log t = log flops - log speed[kind, size] - b log(oc_bn / lanes), the form
    ``lane_efficiency`` takes (efficiency = (oc_bn / lanes) ** b). For the dense convolutions
    the fit with an input-block exponent as well is reported beside it (``with_ic``)."""
    out = {}
    for fam, kinds in FAMILIES.items():
        rs = [r for r in rows if r["kind"] in kinds and r.get("seconds") and r.get("oc_bn")]
        if len(rs) < 4:
            continue
        (b,), groups, resid = _lstsq(rs, ["oc_bn"])
        out[fam] = dict(oc_exponent=float(b), n=len(rs), residual_median_abs=resid,
                        full_block_gflops={f"{k}@{hw}": math.exp(-c) / 1e9 for (k, hw), c in groups})
        if fam == "conv":
            (a2, b2), _, resid2 = _lstsq(rs, ["ic_bn", "oc_bn"])
            out[fam]["with_ic"] = dict(ic_exponent=float(a2), oc_exponent=float(b2), residual_median_abs=resid2)
    return out


def run_sweep(argv, description: str, out: str, quick: str, measure, report, refresh=None) -> int:
    """A kernel sweep's command line (this one, ``register_tiles.py``): options for timing, a
    small subset, the target, the output and ``--refit FILE`` (an earlier run's rows, updated by
    ``refresh(old)``, fitted and reported again); else ``measure(args, target, lanes) -> rows``
    on the target (``--target`` or the host's; exit status 2 where its code does not run here)
    and ``report(target, lanes, rows, args, machine)``."""
    from relay_eqsat.passes.runtime.target import host_target, runs_here

    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--repeat", type=int, default=7, help="timings per kernel (median kept)")
    ap.add_argument("--min-repeat-ms", type=float, default=20.0, help="least duration of one timing")
    ap.add_argument("--quick", action="store_true", help=quick)
    ap.add_argument("--target", default=None, help="LLVM target whose code runs here (default: the host)")
    ap.add_argument("--out", default=out)
    ap.add_argument("--refit", default=None, metavar="FILE.json",
                    help="no measuring: fit and print the measurements of an earlier run again")
    args = ap.parse_args(argv)
    if args.refit:
        old = json.loads(Path(args.refit).read_text())
        if refresh is not None:
            refresh(old)
        return report(old["target"], old["lanes"], old["rows"], dict(old["args"], refit=args.refit, out=args.out),
                      old["machine"])
    target = args.target or host_target()
    if not runs_here(target):
        print(f"{target}: its code does not run on this CPU", file=sys.stderr)
        return 2
    lanes = simd_lanes(target)
    return report(target, lanes, measure(args, target, lanes), vars(args), tables.machine_info())


def main(argv=None) -> int:
    def refresh(old):
        for r in old["rows"]:
            inst = conv(r["cin"], r["cout"], r["hw"], 1 if r["kind"] == "conv1x1" else 3, r["stride"], r["groups"])
            r["model_efficiency"] = lane_efficiency(inst.op, inst.attrs, inst.input_types, old["lanes"])

    def measure(args, target, lanes):
        def row_of(labels, inst):
            blocks = channel_blocks(inst.op, inst.attrs, inst.input_types, lanes) or (None, None)
            return dict(labels, ic_bn=blocks[0], oc_bn=blocks[1],
                        model_efficiency=lane_efficiency(inst.op, inst.attrs, inst.input_types, lanes))

        return time_sweep(sweep(args.quick), target, lanes, args, row_of,
                          lambda r: f"{r['kind']} {r['cin']}->{r['cout']}@{r['hw']}")

    return run_sweep(argv, __doc__.split("\n\n")[0], "bench/results/channel_blocks.json",
                     "a small subset (about 50 kernels)", measure, report, refresh)


def time_sweep(items, target: str, lanes: int, args, row_of, label) -> list[dict]:
    """Each (labels, instance) of ``items`` timed (``time_kernel``) into a row: ``row_of(labels,
    instance)`` with its FLOPs, lanes and seconds (None and an error where it failed to build);
    ``label(row)`` names it in the progress lines."""
    print(f"target {target}: {lanes} fp32 lanes; {len(items)} kernels", flush=True)
    rows = []
    for k, (labels, inst) in enumerate(items):
        row = dict(row_of(labels, inst), flops=ops.flops(inst.op, inst.attrs, inst.input_types, inst.out_type),
                   lanes=lanes, seconds=None)
        try:
            row.update(time_kernel(inst, target, args.repeat, args.min_repeat_ms))
        except Exception as e:  # noqa: BLE001 - a failed build is a row of the table
            row["error"] = tables.error_text(e)
        rows.append(row)
        print(f"[{k + 1}/{len(items)}] {label(row)}: {tables.ms(row['seconds'])} ms", flush=True)
    return rows


def report(target: str, lanes: int, rows: list[dict], args: dict, machine: dict) -> int:
    """Fit, print the table and the fit, write the JSON and the text."""
    fit = fit_efficiency(rows)
    # each kernel's measured efficiency: its speed over its group's full-block speed (from the fit)
    families = {k: fam for fam, kinds in FAMILIES.items() for k in kinds}
    table = []
    for r in rows:
        f = fit.get(families[r["kind"]])
        if r["seconds"] and f:
            full = f["full_block_gflops"][f"{r['kind']}@{r['hw']}"] * 1e9
            r["gflops"] = r["flops"] / r["seconds"] / 1e9
            r["measured_efficiency"] = r["flops"] / r["seconds"] / full
        table.append([r["kind"], f"{r['cin']}->{r['cout']}" + (f" g{r['groups']}" if r["kind"] == "group3x3" else ""),
                      r["hw"], f"{r['ic_bn']}/{r['oc_bn']}", tables.ms(r["seconds"]), r.get("gflops"),
                      r.get("measured_efficiency"), r["model_efficiency"]])
    text = tables.print_table(["kind", "channels", "hw", "ic_bn/oc_bn", "ms", "GFLOP/s", "eff measured",
                               "eff model"], table,
                              title=f"conv kernels on {target} ({lanes} lanes), TVM opt_level 3, 1 thread")
    lines = [text, ""]
    for fam, f in fit.items():
        line = (f"fit {fam}: efficiency = (oc_bn/lanes)^{f['oc_exponent']:.3f} over {f['n']} kernels; "
                f"median |log residual| {f['residual_median_abs']:.3f}")
        if "with_ic" in f:
            w = f["with_ic"]
            line += (f" (with the input block: (ic_bn/lanes)^{w['ic_exponent']:.3f} * (oc_bn/lanes)^"
                     f"{w['oc_exponent']:.3f}, residual {w['residual_median_abs']:.3f})")
        print(line)
        lines.append(line)
    out = Path(args["out"])
    tables.write_json(out, dict(machine=machine, args=args, target=target, lanes=lanes,
                                fit=fit, rows=rows))
    out.with_suffix(".txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
