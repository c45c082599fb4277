"""Stream price per byte by weight shape: L one-row dense layers on one input, each its own
weight [N, K] (128 MiB in all), outputs concatenated; paired against one layer alone.

Reads nothing; prints one line per shape (the run of 2026-11-27 on the Zen 4 was logged to
bench/results/nasrnn_merges/stream_by_shape.log).

    TVM_NUM_THREADS=1 .venv/bin/python bench/analysis/stream_by_shape.py 1024x256,512x512 [fan|chain]
"""
import statistics, sys
import numpy as np, tvm
from relay_eqsat.graph import TensorGraph, Attrs, TensorType
from relay_eqsat.passes.relay.backend import to_relay
from relay_eqsat.passes.runtime.build import build, executor, set_inputs
from relay_eqsat.passes.runtime.timing import time_module
T = "llvm -mtriple=x86_64-linux-gnu -mcpu=znver4"
rng = np.random.default_rng(0)
def load(N, K, L, chain):
    g = TensorGraph(); x = g.var("x0", (1, K), "float32"); params = {}; outs = []
    for i in range(L):
        params[f"p{i}"] = (rng.standard_normal((N, K)) / np.sqrt(K)).astype("float32")
        outs.append(g.add("nn.dense", [x, g.var(f"p{i}", (N, K), "float32")], Attrs(out_dtype="")))
        if chain and i + 1 < L:  # a chain: the next layer reads this one's output (square only)
            x = outs[-1]
    g.set_output(outs[-1] if chain else g.add("concatenate", outs, Attrs(axis=1)))
    lib = build(to_relay(g), params={k: tvm.nd.array(v) for k, v in params.items()}, target=T, opt_level=3)
    dev = tvm.cpu(0); m = executor(lib, dev)
    set_inputs(m, {"x0": rng.standard_normal((1, K)).astype("float32")}); return m, dev
shapes = [tuple(map(int, s.split("x"))) for s in sys.argv[1].split(",")]
mode = sys.argv[2] if len(sys.argv) > 2 else "fan"
for N, K in shapes:
    nbytes = 4 * N * K; L = max(2, (128 << 20) // nbytes)
    whole, one = load(N, K, L, mode == "chain"), load(N, K, 1, True)
    rounds = []
    for _ in range(9):
        a = time_module(whole[0], whole[1], 1, 0, 200, 1)[0]; b = time_module(one[0], one[1], 1, 0, 200, 1)[0]
        rounds.append((a / L - b, b))
    d = statistics.median(r[0] for r in rounds); b = statistics.median(r[1] for r in rounds)
    print(f"W [{N},{K}] {nbytes/2**20:.0f} MiB x{L} ({mode}): alone {b*1e6:.1f} us, adds {d*1e6:.1f} us a layer, "
          f"{d/nbytes*1e12:.1f} ps/B", flush=True)
