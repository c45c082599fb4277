"""Zoo NasRNN at opt_level 3, with the pass's merged dense layers and with the default rules less the
three dense merges (dense-merge, dense-bias-merge, dense-bias-merge-3), each kept whatever its
predicted gain (check_runtime/calibrate off, min_gain 0): 15 rounds of paired timings in rotating
order, each at least 200 ms; prints each program's median and ratio to opt_level 3, and merged/unmerged.

Reads nothing but the zoo model and the cost database RELAY_EQSAT_COST_DB names (the run of 2026-11-27
on the Zen 4 was logged to bench/results/nasrnn_merges/ab_paired.log).

    TVM_NUM_THREADS=1 .venv/bin/python bench/analysis/nasrnn_merges_ab.py
"""
import statistics, tvm
from relay_eqsat.passes.relay.eqsat_pass import EqSatPass, bind_params
from relay_eqsat.passes.cli.optimize import load_model
from relay_eqsat.passes.runtime.build import build, executor, set_inputs, random_inputs
from relay_eqsat.passes.runtime.timing import time_module
from relay_eqsat.passes.runtime.target import host_target
from relay_eqsat.pipeline import resolve_rules
mod, params = load_model("zoo:nasrnn")
m0 = bind_params(mod, params) if params else mod
drop = {"dense-merge", "dense-bias-merge", "dense-bias-merge-3"}
rules = [r for r in resolve_rules("default") if r.name not in drop]
T = host_target(); mods = {"opt3": m0}
for name, opts in (("merged", {}), ("nomerge", {"rules": rules})):
    with tvm.transform.PassContext(opt_level=3):
        mods[name] = EqSatPass(check_runtime="off", calibrate="off", min_gain=0.0, **opts)(m0)
ex = {}
for name, m in mods.items():
    lib = build(m["main"], target=T, opt_level=3) if False else build(m, target=T, opt_level=3)
    e = executor(lib, tvm.cpu(0)); ex[name] = e
inputs = None
times = {n: [] for n in ex}
names = list(ex)
for r in range(15):
    order = names[r % 3:] + names[:r % 3]
    for n in order:
        times[n].append(time_module(ex[n], tvm.cpu(0), 1, 0, 200, 1)[0])
for n in names:
    rat = [a / b for a, b in zip(times[n], times["opt3"])]
    print(n, f"median {statistics.median(times[n])*1e3:.3f} ms, ratio to opt3 {statistics.median(rat):.4f}")
rat = [a / b for a, b in zip(times["merged"], times["nomerge"])]
print("merged/nomerge", f"{statistics.median(rat):.4f}", sum(x < 1 for x in rat), "of", len(rat), "rounds merged faster")
