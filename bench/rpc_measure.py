"""Measuring kernels on this machine's cores and on TVM RPC devices (issue 59).

Three parts, on real models exported from torchvision (``bench/models/<name>.onnx``, exported
once by ``bench/export_onnx.py`` in the export venv):

1. ``throughput``: the distinct kernels of each model (what calibration measures of the input)
   measured with calibration's settings, each configuration with an empty cost database:
   ``local1``/``local2`` (``--jobs 1``/``2``: local workers that build in parallel and take turns
   to time) and ``rpc1``/``rpc2`` (one or two ``tvm.exec.rpc_server`` on 127.0.0.1 under one key
   of a ``tvm.exec.rpc_tracker``, every server measuring at once). Kernels per second, and each
   kernel's time against ``local1``'s (median and 90th percentile of |ratio - 1|): how far a
   configuration disturbs the timings it takes.
   ``local2+build``: ``local2`` while the model builds beside it at the lowest CPU priority, as the
   pass's input would (``passes/runtime/builder.py``): whether that disturbs the timings (it did,
   on small kernels: the pass stops its background builds while calibration measures).
2. ``verdicts``: the pass's candidate for each model (its defaults with the runtime check off and
   min_gain 0, so there is one), judged by the runtime check here and over RPC (the same programs
   uploaded to the server and timed there): both verdicts and measured speedups.
3. ``first_run``: ``relay-eqsat optimize MODEL`` in a child process with an empty cost database and
   the shipped data hidden (a CPU the project never measured), once per configuration; the pass's
   seconds and where they went (calibration, search, extraction, runtime check), against TVM's own
   build of the model.

The RPC servers run on the same cores as everything else: two servers on 2 cores time two
kernels at once. Nothing else may run while this times.

    python bench/rpc_measure.py [--models squeezenet1_1,shufflenet_v2_x1_0]
        [--parts throughput,verdicts,first_run] [--configs local1,local2,rpc1,rpc2]
        [--first-run-configs before,local1,local2,rpc2] [--before-tree DIR] [--out bench/results/rpc_measure.json]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import tables  # noqa: E402

MODELS_DIR = Path(__file__).resolve().parent / "models"
KEY = "relay-eqsat-bench"
CONFIGS = ("local1", "local1", "local2", "local2+build", "rpc1", "rpc2")


def config_kind(name: str) -> tuple[str, int]:
    """("local" | "rpc", count) of a configuration name like ``local2`` or ``rpc1`` (a ``+build``
    suffix: see :func:`building_beside`)."""
    name = name.removesuffix("+build")
    for kind in ("local", "rpc"):
        if name.startswith(kind) and name[len(kind):].isdigit() and int(name[len(kind):]) > 0:
            return kind, int(name[len(kind):])
    raise ValueError(f"unknown configuration {name!r} (localN or rpcN)")


def remote_spelling(target: str) -> str:
    """The host's target with another spelling of its triple: this process takes it for another
    machine's (so only a device measures it), the 127.0.0.1 servers run it."""
    return target.replace("x86_64-linux-gnu", "x86_64-pc-linux-gnu")


def load_model(name: str):
    from model_inputs import load_onnx

    path = MODELS_DIR / f"{name}.onnx"
    meta = json.loads(path.with_suffix(".json").read_text())
    return load_onnx(path, meta["inputs"]), meta


def disagreement(times: dict, reference: dict) -> tuple[float | None, float | None]:
    """(median, 90th percentile) of |t / t_ref - 1| over the kernels both measured."""
    devs = sorted(abs(times[k] / reference[k] - 1) for k in times if k in reference and reference[k] > 0)
    if not devs:
        return None, None
    return statistics.median(devs), devs[min(len(devs) - 1, int(0.9 * len(devs)))]


@contextlib.contextmanager
def building_beside(mod, target):
    """The model built over and over in the background while the block runs, at the priority of the
    pass's input build (``Builder(...).submit(background=True)``), not stopped while kernels are timed."""
    import tvm

    from relay_eqsat.passes.runtime.builder import Builder

    stop = threading.Event()
    builds = Builder(target, slots=1)
    text = tvm.ir.save_json(mod)

    def loop():
        while not stop.is_set():
            job = builds.submit(tvm.ir.load_json(text), "the model", background=True)
            while not job.finished and not stop.is_set():
                builds.running()
                time.sleep(0.1)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield builds
    finally:
        stop.set()
        thread.join()
        builds.close()


def throughput(models, configs, target) -> list[dict]:
    from relay_eqsat.cost.cache import CostCache
    from relay_eqsat.cost.calibrate import CALIBRATION_CONFIG
    from relay_eqsat.cost.instance import instances_from_graph, unique
    from relay_eqsat.cost.pool import MeasurePool
    from relay_eqsat.passes.relay.frontend import from_relay
    from relay_eqsat.testing.rpc import RpcCluster

    rows = []
    for name in models:
        mod, _ = load_model(name)
        kernels = unique(instances_from_graph(from_relay(mod)))
        reference = None
        for config in configs:
            kind, n = config_kind(config)
            with tempfile.TemporaryDirectory() as tmp:
                cache = CostCache(Path(tmp) / "costs.sqlite")
                cluster = RpcCluster(servers=n, key=KEY).start() if kind == "rpc" else None
                try:
                    pool = MeasurePool(target, "tvm-llvm", CALIBRATION_CONFIG, cache,
                                       jobs=n if kind == "local" else None,
                                       remote=cluster.remote if cluster else None)
                    beside = building_beside(mod, target) if config.endswith("+build") else contextlib.nullcontext()
                    with pool, beside:
                        t0 = time.perf_counter()
                        results = pool.measure_many(kernels, progress=False)
                        seconds = time.perf_counter() - t0
                    devices = sorted({r.where for r in results})
                finally:
                    if cluster is not None:
                        cluster.stop()
            times = {r.instance.key(): r.seconds for r in results if r.ok}
            again = reference is not None and config == "local1"  # the noise floor: local1 measured twice
            if reference is None and config == "local1":
                reference = times
                med, p90 = None, None
            else:
                med, p90 = disagreement(times, reference) if reference is not None else (None, None)
            row = {"model": name, "config": config + (" again" if again else ""), "kernels": len(kernels), "measured": len(times),
                   "failed": sum(not r.ok for r in results), "seconds": seconds,
                   "kernels_per_s": len(times) / seconds if seconds > 0 else None,
                   "vs_local1_median": med, "vs_local1_p90": p90, "places": devices,
                   "kernel_seconds": {json.dumps(k): v for k, v in times.items()}}
            rows.append(row)
            print(f"{name} {config}: {len(times)}/{len(kernels)} kernels in {seconds:.1f} s "
                  f"({row['kernels_per_s']:.2f}/s)", flush=True)
    for model in models:  # speedup over local1 per configuration
        base = next((r for r in rows if r["model"] == model and r["config"] == "local1"), None)
        for r in rows:
            if r["model"] == model:
                r["speedup_vs_local1"] = tables.ratio(base["seconds"], r["seconds"]) if base else None
    threads = os.environ.get("TVM_NUM_THREADS")
    if threads is None:
        print("note: TVM_NUM_THREADS is not set: local workers and servers run TVM's default thread count",
              flush=True)
    return rows


def verdicts(models, target) -> list[dict]:
    import tvm

    from relay_eqsat.passes import EqSatPass
    from relay_eqsat.passes.runtime import decision
    from relay_eqsat.passes.runtime.decision import Judgement, runtime_check
    from relay_eqsat.testing.rpc import RpcCluster

    rows = []
    scratch = tempfile.TemporaryDirectory()  # the user's cost database is not touched
    os.environ["RELAY_EQSAT_COST_DB"] = str(Path(scratch.name) / "costs.sqlite")
    for name in models:
        mod, _ = load_model(name)
        p = EqSatPass(target=target, check_runtime="off", min_gain=0.0)
        with tvm.transform.PassContext(opt_level=3):
            cand = p(mod)
        rep = p.last_report
        row = {"model": name, "changed": bool(rep.get("changed")), "predicted_speedup": rep.get("predicted_speedup"),
               "rules": rep.get("rules_in_result")}
        if cand.same_as(mod):
            row["note"] = "no candidate"
            rows.append(row)
            continue
        opts = dict(p.last_options, target=target, verify=False)
        with RpcCluster(servers=1, key=KEY) as cluster:
            for where, remote, tgt in (("local", None, target),
                                       ("rpc", cluster.remote, remote_spelling(target))):
                report: dict = {}
                judgement = Judgement(True, False, 0.0, 0.0, "bench", remote)
                t0 = time.perf_counter()
                kept = runtime_check(mod, cand, dict(opts, target=tgt), report, judgement)
                row[where] = {"kept": kept is not None, "seconds": time.perf_counter() - t0,
                              **{k: report.get(k) for k in ("measured_speedup", "runtime_wins", "runtime_before",
                                                            "runtime_after", "reason", "judged_on")}}
        row["same_verdict"] = row["local"]["kept"] == row["rpc"]["kept"]
        rows.append(row)
        print(f"{name}: local {row['local']['kept']} ({row['local']['measured_speedup']}), "
              f"rpc {row['rpc']['kept']} ({row['rpc']['measured_speedup']})", flush=True)
    return rows


#: TVM's own build of a model, as a user makes it: tvmc's frontend, relay.build at opt_level 3 and the
#: graph executor (this TVM turns its LLVM module into machine code then), in a fresh process
TVM_BUILD = """
import json, sys, time
from pathlib import Path
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/bench"]
import model_inputs
from relay_eqsat.passes.runtime.build import build, executor
meta = json.loads(Path(sys.argv[2] + ".json").read_text())
mod = model_inputs.load_onnx(Path(sys.argv[2] + ".onnx"), meta["inputs"])
t0 = time.perf_counter()
executor(build(mod, target=sys.argv[3]))
print(json.dumps({"seconds": time.perf_counter() - t0}))
"""


def tvm_build_seconds(name: str, target: str, repeat: int = 2) -> float:
    """The median seconds of TVM's own build of ``name`` for ``target`` (:data:`TVM_BUILD`), over
    ``repeat`` fresh processes, nothing else running."""
    root = str(Path(__file__).resolve().parents[1])
    times = []
    for _ in range(repeat):
        proc = subprocess.run([sys.executable, "-c", TVM_BUILD, root, str(MODELS_DIR / name), target],
                              capture_output=True, text=True, timeout=1800, check=True)
        times.append(json.loads(proc.stdout.strip().splitlines()[-1])["seconds"])
    return statistics.median(times)


def first_run(models, configs, target, time_budget: float, before_tree: str | None = None) -> list[dict]:
    from relay_eqsat.testing.rpc import RpcCluster

    rows = []
    for name in models:
        meta = json.loads((MODELS_DIR / f"{name}.json").read_text())
        from model_inputs import shapes_arg

        tvm_build = tvm_build_seconds(name, target)
        print(f"{name}: TVM's own build {tvm_build:.1f} s", flush=True)

        for config in configs:
            kind, n = ("before", 1) if config == "before" else config_kind(config)
            if kind == "before" and not before_tree:
                raise SystemExit("first-run configuration 'before' needs --before-tree")
            with tempfile.TemporaryDirectory() as tmp:
                env = dict(os.environ, RELAY_EQSAT_COST_DB=str(Path(tmp) / "costs.sqlite"),
                           RELAY_EQSAT_IGNORE_SHIPPED="1")
                if kind == "before":  # the package as it was, run from its own tree
                    env["PYTHONPATH"] = str(Path(before_tree).resolve())
                out = Path(tmp) / "report.json"
                cmd = [sys.executable, "-m", "relay_eqsat.cli", "optimize", str(MODELS_DIR / f"{name}.onnx"),
                       "--input-shapes", shapes_arg(meta["inputs"]), "--time-budget", str(time_budget),
                       "-o", str(out)]
                cluster = None
                if kind == "before":
                    cmd += ["--target", target]
                elif kind == "local":
                    cmd += ["--target", target, "--jobs", str(n)]
                else:
                    cluster = RpcCluster(servers=n, key=KEY).start()
                    cmd += ["--target", remote_spelling(target), "--rpc-tracker", cluster.address, "--rpc-key", KEY]
                try:
                    t0 = time.perf_counter()
                    # run from the scratch folder: `python -m` puts the working directory first on sys.path
                    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=3600, cwd=tmp)
                    wall = time.perf_counter() - t0
                finally:
                    if cluster is not None:
                        cluster.stop()
                if proc.returncode != 0 or not out.exists():
                    rows.append({"model": name, "config": config, "error": (proc.stderr or proc.stdout)[-800:]})
                    print(f"{name} {config}: failed: {(proc.stderr or proc.stdout)[-300:]}", flush=True)
                    continue
                result = json.loads(out.read_text())
            rep, measured = result["report"], result.get("measured", {})
            first, recal = rep.get("first_check"), rep.get("recalibration")
            # calibration after the check: in the second candidate's report, or (nothing else chosen) beside it
            cal = (rep.get("info") or {}).get("calibration") or (recal or {}).get("calibration") or {}
            row = {"model": name, "config": config, "wall_s": wall, "pass_s": rep.get("seconds"),
                   "calibration_s": cal.get("seconds"), "kernels_measured": cal.get("measured"),
                   "search_s": rep.get("search_time"), "extract_s": rep.get("extract_time"),
                   "check_s": rep.get("check_seconds"), "check_timing_s": rep.get("check_timing_seconds"),
                   "tvm_build_s": tvm_build, "optimize_build_s": measured.get("build_original"),
                   "changed": rep.get("changed"), "measured_speedup": rep.get("measured_speedup"),
                   "others_timed": len(rep.get("runtime_candidates") or [None]) - 1 if rep.get("changed") else None,
                   "judged_by": rep.get("judged_by"), "reason": rep.get("reason"),
                   # the model's pick measured no faster, then calibrated: what the first check measured
                   "first_check_speedup": (first or {}).get("measured_speedup") if first or recal else None,
                   "recalibrated": "second check" if first else "nothing else chosen" if recal else None}
            if recal and not first:
                row["first_check_speedup"] = rep.get("measured_speedup")
            build = row["tvm_build_s"]
            row["pass_over_build"] = tables.ratio(row["pass_s"], build)
            if row["check_timing_s"] is not None:  # the goal: twice TVM's build plus the paired timing
                row["goal_s"] = 2 * build + row["check_timing_s"]
                row["within_goal"] = row["pass_s"] <= row["goal_s"]
            rows.append(row)
            print(f"{name} {config}: pass {row['pass_s']:.1f} s (calibration {row['calibration_s']}, "
                  f"check {row['check_s']}), TVM build {build}", flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="squeezenet1_1,shufflenet_v2_x1_0")
    ap.add_argument("--parts", default="throughput,verdicts,first_run")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="throughput configurations")
    ap.add_argument("--first-run-configs", default="local1,local2,rpc2",
                    help="localN, rpcN, and 'before': the package of --before-tree (a checkout whose compiled "
                         "modules are built, with relay_eqsat/passes and relay_eqsat/rulesets linked to its "
                         "passes/ and rules/) run the same way")
    ap.add_argument("--before-tree", default=None, metavar="DIR")
    ap.add_argument("--time-budget", type=float, default=10.0, help="relay-eqsat optimize's own timing budget")
    ap.add_argument("--out", default="bench/results/rpc_measure.json")
    args = ap.parse_args(argv)
    from relay_eqsat.passes.runtime.target import host_target

    models = [m.strip() for m in args.models.split(",") if m.strip()]
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    missing = [m for m in models if not (MODELS_DIR / f"{m}.onnx").exists()]
    if missing:
        import export_venv

        py = export_venv.ensure_export_venv()
        for m in missing:
            export_venv.export_model(py, m, MODELS_DIR)
    target = host_target()
    data = {"machine": tables.machine_info(), "code": tables.code_version(), "target": target, "models": models}
    goals = []
    if "throughput" in parts:
        rows = data["throughput"] = throughput(models, [c.strip() for c in args.configs.split(",")], target)
        tables.print_table(["model", "config", "kernels", "failed", "seconds", "kernels/s", "x local1",
                            "|dt| median", "|dt| p90"],
                           [[r["model"], r["config"], r["measured"], r["failed"], r["seconds"], r["kernels_per_s"],
                             r["speedup_vs_local1"], r["vs_local1_median"], r["vs_local1_p90"]] for r in rows],
                           title="kernels measured, each configuration from an empty database")
    if "verdicts" in parts:
        rows = data["verdicts"] = verdicts(models, target)
        tables.print_table(["model", "predicted", "local kept", "local speedup", "local wins", "rpc kept",
                            "rpc speedup", "rpc wins"],
                           [[r["model"], r.get("predicted_speedup"), r.get("local", {}).get("kept"),
                             r.get("local", {}).get("measured_speedup"), r.get("local", {}).get("runtime_wins"),
                             r.get("rpc", {}).get("kept"), r.get("rpc", {}).get("measured_speedup"),
                             r.get("rpc", {}).get("runtime_wins")] for r in rows],
                           title="the runtime check's verdict on the pass's candidate, here and over RPC")
        judged = [r for r in rows if "same_verdict" in r]
        goals.append(tables.goal("the runtime check's verdict over RPC equals the local one",
                                 all(r["same_verdict"] for r in judged) if judged else None,
                                 f"{sum(r['same_verdict'] for r in judged)}/{len(judged)} models"))
    if "first_run" in parts:
        rows = data["first_run"] = first_run(models, [c.strip() for c in args.first_run_configs.split(",")],
                                             target, args.time_budget, args.before_tree)
        tables.print_table(["model", "config", "pass s", "calibration s", "kernels", "search s", "extract s",
                            "check s", "of it timing s", "TVM build s", "pass / build", "goal s", "changed",
                            "speedup", "others timed", "first check", "after it"],
                           [[r["model"], r["config"], r.get("pass_s"), r.get("calibration_s"),
                             r.get("kernels_measured"), r.get("search_s"), r.get("extract_s"), r.get("check_s"),
                             r.get("check_timing_s"), r.get("tvm_build_s"), r.get("pass_over_build"), r.get("goal_s"),
                             r.get("changed"), r.get("measured_speedup"), r.get("others_timed"),
                             r.get("first_check_speedup"), r.get("recalibrated")] for r in rows],
                           title="the pass's first run on a CPU without shipped data (relay-eqsat optimize)")
        judged = [r for r in rows if r.get("config") != "before" and "within_goal" in r]
        goals.append(tables.goal("a first run within twice TVM's build plus the paired timing",
                                 all(r["within_goal"] for r in judged) if judged else None,
                                 ", ".join(f"{r['model']} {r['config']} {r['pass_s']:.0f} s of {r['goal_s']:.0f} s"
                                           for r in judged)))
    data["goals"] = goals
    path = tables.write_json(args.out, data)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
