"""Golden costs (tests/data/golden_costs.json, checked by tests/test_op_table.py): every zoo model (small), every shipped target,
learned predictions per op instance and CostModel node costs per node (analytic + auto).
Run: .venv/bin/python tests/data/make_golden_costs.py tests/data/golden_costs.json (after a deliberate model change)."""
import json, os, sys, tempfile
os.environ["RELAY_EQSAT_COST_DB"] = tempfile.mktemp(suffix=".db")
from relay_eqsat.passes import zoo
from relay_eqsat.passes.relay.frontend import from_relay
from relay_eqsat.cost import CostModel
from relay_eqsat.cost.instance import instances_from_graph, unique
from relay_eqsat.cost.learned import LearnedCostModel, SHIPPED_DIR, feature_matrix
from relay_eqsat.cost import nearest
nearest.host_vendor = lambda: None  # as tests/test_op_table.py: generic -mcpu names borrow the default
targets = ["llvm -mtriple=x86_64-linux-gnu -mcpu=znver3", "llvm -mtriple=x86_64-linux-gnu -mcpu=znver4",
           "llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512", "llvm -mtriple=x86_64-linux-gnu -mcpu=sapphirerapids"]
out = {"models": {}, "learned": {}}
insts = []
for name in zoo.MODELS:
    mod, params = zoo.get(name, small=True)[:2]
    g = from_relay(mod, params) if True else None
    g = g[0] if isinstance(g, tuple) else g
    insts += instances_from_graph(g)
    per = {}
    for t in targets:
        for kind in ("auto", "analytic"):
            cm = CostModel(kind, target=t)
            per[f"{kind}|{t}"] = [cm.node_cost(n.op, n.attrs, [g[i].type for i in n.inputs], n.type,
                                  all(g[i].op == "constant" for i in n.inputs) and bool(n.inputs))
                                  if n.op not in ("var", "constant") else 0.0 for n in g.nodes]
            per[f"graph|{kind}|{t}"] = cm.graph_cost(g)
    out["models"][name] = per
insts = unique(insts)
for f in sorted(SHIPPED_DIR.glob("*.json")):
    m = LearnedCostModel.load(f)
    out["learned"][f.name] = [float(x) for x in m.predict(insts)]
out["n_instances"] = len(insts)
json.dump(out, open(sys.argv[1], "w"))
print(len(insts), list(out["learned"]), {k: len(v) for k, v in out["models"].items()})
