"""How a kernel is measured (TVMRunner: the whole program less its layout transforms) against the debug
executor's time of the convolution kernel itself, six times in a row for each form of the first convolution.
    TVM_NUM_THREADS=1 .venv/bin/python bench/results/conv_widen_z4/whole_less_layout_vs_debug.py
"""
import numpy as np, tvm, sys
from tvm import relay
from relay_eqsat.passes.relay import from_relay
from relay_eqsat.cost.instance import instances_from_graph
from relay_eqsat.passes.kernels import TVMRunner
from relay_eqsat.passes.runtime import time_module, layout_transform_seconds, node_times
from relay_eqsat.cost.calibrate import CALIBRATION_CONFIG as cfg
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
