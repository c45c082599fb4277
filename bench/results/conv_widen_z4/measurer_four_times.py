"""The first convolution plain (111 wide) and widened (112), measured four times each by the Measurer with
calibration's settings (the worker process, no cost database): what calibration would store.
    TVM_NUM_THREADS=1 .venv/bin/python bench/results/conv_widen_z4/measurer_four_times.py
"""
import numpy as np, tvm
from tvm import relay
from relay_eqsat.passes.relay import from_relay
from relay_eqsat.cost.instance import instances_from_graph
from relay_eqsat.cost.measure import Measurer
from relay_eqsat.cost.calibrate import CALIBRATION_CONFIG
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
m = Measurer(tgt, None, CALIBRATION_CONFIG, None)
for r in range(4):
    res = m.measure_many(insts, progress=False)
    print(["%.4f" % (x.seconds*1e3) for x in res])
