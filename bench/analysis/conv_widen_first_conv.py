"""SqueezeNet1.1's first convolution plain (111 wide) and widened by conv-widen-output (112), each form
measured as calibration measures a kernel: four times by the Measurer with calibration's settings (the
worker process, no cost database), then six times in a row by hand the way the worker does it (the whole
one-op program less its layout transforms) beside TVM's debug-executor time of the convolution kernel
itself.
    TVM_NUM_THREADS=1 .venv/bin/python bench/analysis/conv_widen_first_conv.py

Reads nothing; prints its measurements (the run of 2026-11-29 on the Zen 4 was logged to
bench/results/conv_widen_z4/first_conv_measurements.log).
"""
import numpy as np, tvm
from tvm import relay
from relay_eqsat.passes.relay.frontend import from_relay
from relay_eqsat.cost.instance import instances_from_graph
from relay_eqsat.cost.pool import MeasurePool
from relay_eqsat.cost.calibrate import CALIBRATION_CONFIG as cfg
from relay_eqsat.passes.runtime.kernels import TVMRunner
from relay_eqsat.passes.runtime.timing import time_module, layout_transform_seconds, node_times
tgt = "llvm -mtriple=x86_64-linux-gnu -mcpu=znver4"
def net(pw):
    x = relay.var("x", shape=(1,3,224,224))
    w = relay.var("w", shape=(64,3,3,3))
    y = relay.nn.conv2d(x, w, strides=(2,2), padding=(0,0,0,pw), channels=64, kernel_size=(3,3))
    return relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x,w], y)))
insts = []
for pw in (0, 2):
    g = from_relay(net(pw))
    insts += [i for i in instances_from_graph(g) if i.op == "nn.conv2d"]
print([str(i.out_type) for i in insts])
print("Measurer, four times (ms):")
measurer = MeasurePool(tgt, None, cfg, None)
for r in range(4):
    res = measurer.measure_many(insts, progress=False)
    print(["%.4f" % (x.seconds*1e3) for x in res])
measurer.close()
print("whole less layout transforms (how the worker measures) vs the debug executor's convolution kernel (ms):")
r = TVMRunner(tgt, cfg)
loaded = [r._load(i) for i in insts]
for rep in range(6):
    row = []
    for (m, lib, inputs, dev) in loaded:
        whole = time_module(m, dev, cfg.repeat, cfg.number, cfg.min_repeat_ms, cfg.warmup)[0]
        lay = layout_transform_seconds(lib, dev, inputs, cfg.repeat, cfg.min_repeat_ms, r.debug_overhead)
        nt = node_times(lib, dev, inputs, 10, cfg.repeat, 5)
        conv = [t for n, t in nt if n["op"] == "tvm_op" and "conv" in n["attrs"]["func_name"]]
        row.append("whole %.3f lay %.3f diff %.3f | debug conv %s" % (whole*1e3, lay*1e3, (whole-lay)*1e3, ["%.3f" % (c*1e3) for c in conv]))
    print(" || ".join(row), flush=True)
