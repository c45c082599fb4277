"""SqueezeNet1.1's first convolution (3->64, 3x3, stride 2, 111 wide) with its bias, relu, max pool and the
next 1x1 convolution, plain and with conv-widen-output's form (2 more columns of padding, 112 wide, sliced back):
9 paired timings of each built at opt_level 3, then the cost model's prediction of each (per node).
    RELAY_EQSAT_COST_DB=<a run's database> TVM_NUM_THREADS=1 .venv/bin/python bench/analysis/conv_widen_subgraph.py

Reads the cost database RELAY_EQSAT_COST_DB names; prints its timings and predictions (the run of
2026-11-29 on the Zen 4 was logged to bench/results/conv_widen_z4/subgraph_and_predicted.log).
"""
import numpy as np, tvm, time
from tvm import relay
from tvm.contrib import graph_executor
import os
tgt = "llvm -mtriple=x86_64-linux-gnu -mcpu=znver4"
def net(widen):
    x = relay.var("x", shape=(1,3,224,224))
    w = relay.const(np.random.randn(64,3,3,3).astype("float32"))
    b = relay.const(np.random.randn(64).astype("float32"))
    pad = (0,0,0,1*2) if widen else (0,0,0,0)
    y = relay.nn.conv2d(x, w, strides=(2,2), padding=pad, channels=64, kernel_size=(3,3))
    if widen:
        y = relay.strided_slice(y, [0,0,0,0], [1,64,111,111], [1,1,1,1])
    y = relay.nn.bias_add(y, b)
    y = relay.nn.relu(y)
    y = relay.nn.max_pool2d(y, (3,3), (2,2), ceil_mode=True)
    # next: squeeze conv 64->16
    w2 = relay.const(np.random.randn(16,64,1,1).astype("float32"))
    y = relay.nn.relu(relay.nn.conv2d(y, w2, channels=16, kernel_size=(1,1)))
    return tvm.IRModule.from_expr(relay.Function([x], y))
mods = {}
for wd in (False, True):
    with tvm.transform.PassContext(opt_level=3):
        lib = relay.build(net(wd), target=tgt)
    m = graph_executor.GraphModule(lib["default"](tvm.cpu()))
    m.set_input("x", np.random.randn(1,3,224,224).astype("float32"))
    mods[wd] = m
res = {False: [], True: []}
for r in range(9):
    for wd in (False, True):
        f = mods[wd].module.time_evaluator("run", tvm.cpu(), number=50, repeat=1)
        res[wd].append(f().mean*1e3)
for wd in (False, True):
    print("widen" if wd else "plain", np.median(res[wd]))
print("ratio", np.median(np.array(res[True])/np.array(res[False])))

from relay_eqsat.passes.relay.frontend import from_relay as relay_to_graph
from relay_eqsat.cost import make_cost_model
from relay_eqsat.cost.fusion import standalone_elementwise
cm = make_cost_model("auto", target=tgt)
for wd in (False, True):
    mod = relay.transform.InferType()(net(wd))
    g = relay_to_graph(mod["main"]) if True else None
    g = g[0] if isinstance(g, tuple) else g
    tot = 0
    for n, ins, ac, bl in cm._graph_nodes(g):
        c = cm.op_cost(n.op, n.attrs, ins, n.type, ac, bl is not None)
        tot += c
        if c: print("  ", n.op, n.type, "%.4f ms" % (c*1e3), "standalone" if bl is not None else "")
    print("widen" if wd else "plain", "predicted %.4f ms" % (tot*1e3), "graph_cost %.4f" % (cm.graph_cost(g)*1e3))
