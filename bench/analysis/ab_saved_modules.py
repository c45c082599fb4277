"""Time TVM opt_level 3 of an ONNX model against two saved optimized modules, paired rounds.

Reads bench/models/NAME.onnx and the two modules saved by `relay-eqsat optimize --save-module`
as DIR/{old,new}_NAME.json (two versions of the code; DIR default
bench/results/ab_z4_nov27_vs_now: commit 9ba6ebf's code, of 2026-11-27, and the code of
2026-11-29 morning); writes DIR/time_NAME.json (medians and samples).

    TVM_NUM_THREADS=1 .venv/bin/python bench/analysis/ab_saved_modules.py shufflenet_v2_x1_0 [DIR]
"""
import json, statistics, sys
import numpy as np
import tvm
from relay_eqsat.passes.cli.optimize import load_model
from relay_eqsat.passes.runtime import build as runtime, timing

name = sys.argv[1]
out_dir = sys.argv[2] if len(sys.argv) > 2 else "bench/results/ab_z4_nov27_vs_now"
mod, params = load_model(f"bench/models/{name}.onnx")
mods = {"opt3": (mod, params)}
for tag in ("old", "new"):
    m = tvm.ir.load_json(open(f"{out_dir}/{tag}_{name}.json").read())
    mods[tag] = (m, None)
types = {v.name_hint: ([int(d) for d in v.checked_type.shape], str(v.checked_type.dtype))
         for v in tvm.relay.transform.InferType()(mod)["main"].params if v.name_hint not in params}
inputs = runtime.random_inputs(types)
gms, outs = [], {}
for tag, (m, p) in mods.items():
    lib = runtime.build(m, p)
    gm = runtime.executor(lib)
    runtime.set_inputs(gm, inputs)
    gm.run()
    outs[tag] = gm.get_output(0).numpy()
    gms.append(gm)
for tag in ("old", "new"):
    print(tag, "max abs diff vs opt3", float(np.abs(outs[tag] - outs["opt3"]).max()))
samples = timing.time_rounds(gms, repeat=9, min_repeat_ms=200)
res = {t: statistics.median(s) * 1e3 for t, s in zip(mods, samples)}
for k, t in enumerate(("old", "new")):
    r, w = timing.paired_ratio(samples[0], samples[k + 1])
    print(f"{name} {t}: median {res[t]:.3f} ms vs opt3 {res['opt3']:.3f} ms, ratio {r:.4f} (speedup {1/r:.3f}x), faster in {w}/9")
r, w = timing.paired_ratio(samples[1], samples[2])
print(f"{name} new/old ratio {r:.4f}, new faster in {w}/9")
json.dump({"model": name, "median_ms": res, "samples_s": dict(zip(mods, samples))}, open(f"{out_dir}/time_{name}.json", "w"))
