"""Shared helpers of the benchmark scripts: model lists, graphs, tables, JSON, timing, goals.

The scripts run as ``python bench/NAME.py`` (this folder is then on
``sys.path``), import what they need from here, and write their JSON under
``bench/results/``. Nothing here hard-codes a result: every figure a script
prints is measured when it runs.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

RESULTS_DIR = Path(__file__).resolve().parent / "results"


# -- command lines ----------------------------------------------------------------------

def model_names(spec: str) -> list[str]:
    """Zoo model names from a comma-separated list; ``all`` is every zoo model."""
    from relay_eqsat.passes import zoo

    if spec.strip() == "all":
        return list(zoo.MODELS)
    names = [s.strip() for s in spec.split(",") if s.strip()]
    for n in names:
        zoo.spec(n)  # ValueError naming the known models
    return names


def small_for(args, name: str) -> bool:
    """Whether ``name`` runs at its small configuration (``--small`` or ``--small-models``)."""
    return bool(args.small) or name in {m.strip() for m in getattr(args, "small_models", "").split(",")}


def base_parser(doc: str, out_name: str, models: str = "all") -> argparse.ArgumentParser:
    """An argument parser with the options every bench script shares:
    ``--models``, ``--small`` and ``--out`` (default ``bench/results/<out_name>``)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(doc.splitlines()[1:]))
    ap.add_argument("--models", default=models,
                    help=f"comma-separated zoo models, or 'all' (default: {models})")
    ap.add_argument("--small", action="store_true", help="use the zoo's small configurations")
    ap.add_argument("--small-models", default="", metavar="NAMES",
                    help="comma-separated models to run at their small configuration even without --small "
                         "(e.g. nasnet_a: TVM takes over 12 minutes to build the full model on 2 cores)")
    ap.add_argument("--out", default=str(RESULTS_DIR / out_name), help="JSON result file")
    return ap


def machine_info() -> dict:
    """Where the figures were measured."""
    import os

    info = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "argv": sys.argv, "time": time.strftime("%Y-%m-%d %H:%M:%S")}
    try:
        import tvm

        from relay_eqsat.passes.target import host_target

        info["tvm"] = tvm.__version__
        info["target"] = host_target()
        num_threads = tvm.get_global_func("runtime.NumThreads", True)
        if num_threads is not None:
            info["tvm_threads"] = int(num_threads())
    except ImportError:
        pass
    return info


# -- models ------------------------------------------------------------------------------

def load_model(name: str, small: bool):
    """``(mod, params, graph)``: the zoo model and its TensorGraph with the weights bound."""
    from relay_eqsat.passes import zoo
    from relay_eqsat.passes.relay import from_relay

    mod, params = zoo.get(name, small=small)
    return mod, params, from_relay(mod, params)


def bind_params(mod, params: Mapping):
    """The module with ``main``'s weight parameters bound as constants (type-checked)."""
    import tvm
    from tvm import relay

    func = relay.build_module.bind_params_by_name(mod["main"], dict(params))
    return relay.transform.InferType()(tvm.IRModule.from_expr(func))


def model_inputs(name: str, small: bool, seed: int = 0) -> dict:
    """Seeded random inputs for a zoo model."""
    from relay_eqsat.passes import zoo
    from relay_eqsat.passes.target import random_inputs

    return random_inputs({k: (s, "float32") for k, s in zoo.input_shapes(name, small=small).items()}, seed)


# -- TVM builds and timings -------------------------------------------------------------------

@dataclass
class Timing:
    """A built module's runtime: median seconds over the timing samples, and its outputs."""

    median: float
    samples: list[float]
    outputs: list = field(repr=False, default_factory=list)
    build_time: float = 0.0

    @property
    def quartiles(self) -> tuple[float, float]:
        """(lower, upper) quartile of the samples (min and max with fewer than 4)."""
        if len(self.samples) < 4:
            return min(self.samples), max(self.samples)
        q = statistics.quantiles(self.samples, n=4)
        return q[0], q[2]

    @property
    def spread(self) -> float:
        """Relative inter-quartile range of the samples."""
        lo, hi = self.quartiles
        return (hi - lo) / self.median if self.median > 0 else 0.0

    def slower_than(self, other: "Timing", noise: float) -> bool:
        """Slower beyond noise: the median more than ``noise`` (relative) above the other's
        and the lower quartile above the other's upper quartile."""
        return self.median > other.median * (1 + noise) and self.quartiles[0] > other.quartiles[1]

    def to_dict(self) -> dict:
        return {"median_s": self.median, "samples_s": self.samples, "spread": self.spread,
                "build_s": self.build_time}


@dataclass
class Built:
    """A module built for the host and run once: the executor, its outputs, the build seconds."""

    module: Any
    outputs: list
    build_time: float


def build_module(mod, inputs: Mapping, target: str | None = None, opt_level: int = 3,
                 sequence: Sequence = ()) -> Built:
    """Build ``mod`` for ``target`` (default: the host) at ``opt_level`` — running the
    passes ``sequence`` first, inside the same PassContext — and run it once on ``inputs``."""
    import tvm
    from tvm import relay
    from tvm.contrib import graph_executor

    from relay_eqsat.passes.target import host_target

    t0 = time.perf_counter()
    with tvm.transform.PassContext(opt_level=opt_level):
        if sequence:
            mod = tvm.transform.Sequential(list(sequence))(mod)
        lib = relay.build(mod, target=target or host_target())
    build_time = time.perf_counter() - t0
    m = graph_executor.GraphModule(lib["default"](tvm.cpu(0)))
    for k, v in inputs.items():
        m.set_input(k, v)
    m.run()
    outputs = [m.get_output(i).numpy() for i in range(m.get_num_outputs())]
    return Built(m, outputs, build_time)


def time_built(built: Mapping[str, Built], repeat: int = 10, min_repeat_ms: int = 100,
               rounds: int = 1) -> dict[str, Timing]:
    """Time each built module: ``repeat`` timings (each at least ``min_repeat_ms`` long)
    per module, taken in ``rounds`` interleaved rounds so that drift of the machine's
    speed affects every module alike (the order rotates from round to round, so
    no module is always timed first); the median of each module's samples."""
    import tvm

    samples: dict[str, list[float]] = {k: [] for k in built}
    names = list(built)
    per_round = [repeat // rounds + (1 if r < repeat % rounds else 0) for r in range(rounds)]
    for r, n in enumerate(per_round):
        for k in names[r % len(names):] + names[:r % len(names)]:
            b = built[k]
            if n:
                timer = b.module.module.time_evaluator("run", tvm.cpu(0), number=1, repeat=n,
                                                       min_repeat_ms=min_repeat_ms)
                samples[k] += [float(s) for s in timer().results]
    return {k: Timing(statistics.median(v), v, built[k].outputs, built[k].build_time) for k, v in samples.items()}


def build_and_time(mod, inputs: Mapping, repeat: int = 10, min_repeat_ms: int = 100,
                   target: str | None = None, opt_level: int = 3, sequence: Sequence = ()) -> Timing:
    """:func:`build_module` then :func:`time_built` for one module."""
    built = build_module(mod, inputs, target=target, opt_level=opt_level, sequence=sequence)
    return time_built({"m": built}, repeat=repeat, min_repeat_ms=min_repeat_ms)["m"]


def max_rel_error(ref: Sequence, got: Sequence) -> float:
    """Largest |ref - got| / max(1, max|ref|) over all outputs (inf on a shape mismatch)."""
    import numpy as np

    if len(ref) != len(got):
        return float("inf")
    worst = 0.0
    for r, g in zip(ref, got):
        if r.shape != g.shape:
            return float("inf")
        if r.size == 0:
            continue
        r64, g64 = r.astype(np.float64), g.astype(np.float64)
        if not (np.isfinite(r64).all() and np.isfinite(g64).all()):
            return float("inf")
        worst = max(worst, float(np.abs(r64 - g64).max()) / max(1.0, float(np.abs(r64).max())))
    return worst


# -- small numeric helpers --------------------------------------------------------------------------

@contextmanager
def stopwatch():
    """``with stopwatch() as t: ...`` then ``t()`` is the seconds the block took."""
    t0 = time.perf_counter()
    end = [None]
    yield lambda: (end[0] if end[0] is not None else time.perf_counter()) - t0
    end[0] = time.perf_counter()


def geomean(values: Iterable[float]) -> float | None:
    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is missing or b is 0."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def rules_used(fired: Mapping[str, int]) -> tuple[int, int]:
    """(distinct rules that fired, total applications)."""
    used = [v for v in fired.values() if v]
    return len(used), int(sum(used))


# -- output ---------------------------------------------------------------------------------------

def fmt(value: Any, digits: int = 3) -> str:
    """A table cell: numbers to ``digits`` significant digits, None as '-'."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value == 0:
            return "0"
        if abs(value) >= 10 ** digits or abs(value) < 10 ** -3:
            return f"{value:.{digits - 1}e}"
        return f"{value:.{digits}g}"
    return str(value)


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None) -> str:
    """Print (and return) an aligned text table; cells go through :func:`fmt`."""
    cells = [[fmt(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = []
    if title:
        lines.append(title)
    lines.append("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
    lines.append("  ".join("-" * w for w in widths))
    for r in cells:
        lines.append("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))
    text = "\n".join(lines)
    print(text, flush=True)
    return text


def goal(description: str, met: bool | None, detail: str = "") -> dict:
    """Print one goal line (MET / NOT MET / NOT MEASURED) and return it as a dict."""
    status = "NOT MEASURED" if met is None else ("MET" if met else "NOT MET")
    print(f"goal: {description}: {status}{' (' + detail + ')' if detail else ''}", flush=True)
    return {"goal": description, "met": met, "detail": detail}


def _jsonable(x: Any) -> Any:
    import numpy as np

    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return str(x)


def write_json(path: str | Path, data: Any) -> Path:
    """Write ``data`` as JSON (numpy scalars and non-finite floats made portable)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(_jsonable(data), indent=2) + "\n")
    tmp.replace(path)
    print(f"wrote {path}", flush=True)
    return path
