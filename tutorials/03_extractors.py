"""Choosing an extractor: greedy, greedy-ocf, ilp-topo, ilp-acyc and maxsat on one saturated e-graph.

Steps:

1. Turn a zoo model (weights bound as constants) into a ``TensorGraph`` with
   the Relay frontend, insert it into an ``EGraph`` and grow it with the
   TENSAT scheduler until saturation or the node limit - the same steps
   ``optimize_graph`` (behind EqSatPass) takes.
2. Flatten the e-graph once into an ``ExtractionProblem`` with the cost
   model's node costs (``egraph_problem(egraph, cost.node_cost, [root])``).
3. Solve it with every extractor (``relay_eqsat.extract.get_extractor``):

   - ``greedy``: bottom-up, tree cost (counts a shared subgraph once per use)
   - ``greedy-ocf``: bottom-up, sharing-aware cost (Hartmann et al.); fast,
     what MCTS uses for rewards
   - ``ilp-topo``: TENSAT's ILP with topological-order variables; exact but slow
   - ``ilp-acyc``: ILP with "never pick a whole class cycle" constraints (He et
     al.); exact, usually much faster; the default final extractor
   - ``maxsat``: the same acyclicity as weighted partial MaxSAT

   and print each one's cost, whether it is proven optimal, and its time.
   The solution cost is the DAG cost (shared nodes once), the quantity the
   pass compares with the input's cost.
4. Pick: ``EqSatPass(final_extractor=...)``, ``relay-eqsat optimize
   --final-extractor ...`` or ``tvmc compile --eqsat --eqsat-final-extractor
   ...``. Exact extractors fall back to their best feasible solution at the
   time limit.

Run: ``.venv/bin/python tutorials/03_extractors.py [--small] [--model NAME] [--time-limit S]``.
"""
import argparse
import time

from relay_eqsat.cost import make_cost_model
from relay_eqsat.egraph import EGraph
from relay_eqsat.extract import EXTRACTORS, build_graph, egraph_problem, get_extractor
from relay_eqsat.pipeline import resolve_rules
from relay_eqsat.passes import from_relay, zoo
from relay_eqsat.passes.relay.eqsat_pass import bind_params
from relay_eqsat.search.base import Limits
from relay_eqsat.search.tensat import TensatScheduler


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--small", action="store_true", help="small model configuration (fast)")
    ap.add_argument("--model", default="inception_v3", choices=zoo.MODELS)
    ap.add_argument("--node-limit", type=int, default=3000)
    ap.add_argument("--time-limit", type=float, default=None, help="seconds per exact extractor (default 30; 5 with --small)")
    args = ap.parse_args()
    if args.time_limit is None:
        args.time_limit = 5.0 if args.small else 30.0

    # 1. model -> TensorGraph -> saturated e-graph
    mod, params = zoo.get(args.model, small=args.small)
    graph = from_relay(bind_params(mod, params)).compact()
    cost = make_cost_model("auto")
    egraph = EGraph()
    root = egraph.add_graph(graph)
    t0 = time.perf_counter()
    search = TensatScheduler().run(egraph, resolve_rules("default"), Limits(node_limit=args.node_limit))
    print(f"{args.model}{' (small)' if args.small else ''}: {len(graph)} nodes, input cost "
          f"{cost.graph_cost(graph) * 1e3:.4f} ms")
    print(f"e-graph: {egraph.num_nodes} e-nodes, {egraph.num_classes} e-classes, {search.stop_reason} "
          f"after {search.iterations} iterations ({time.perf_counter() - t0:.2f} s)")

    # 2. one extraction problem for every extractor
    problem = egraph_problem(egraph, cost.node_cost, [root])

    # 3. every extractor on it
    print(f"{'extractor':<12} {'cost (ms)':>10} {'optimal':>8} {'status':>12} {'time (s)':>9}")
    results = {}
    for name in EXTRACTORS:
        extractor = get_extractor(name)
        t0 = time.perf_counter()
        solution = extractor.solve(problem, time_limit=args.time_limit)
        seconds = time.perf_counter() - t0
        results[name] = solution.cost
        print(f"{name:<12} {solution.cost * 1e3:>10.4f} {str(bool(solution.optimal)):>8} "
              f"{str(solution.status):>12} {seconds:>9.3f}")
        # the chosen program is a valid graph with the same interface
        out = build_graph(egraph, problem, solution.choice).compact()
        assert out[out.output].type == graph[graph.output].type

    best = min(results, key=results.get)
    print(f"cheapest: {best}; greedy-ocf is within {results['greedy-ocf'] / results[best]:.4f}x of it")
    print("OK")


if __name__ == "__main__":
    main()
