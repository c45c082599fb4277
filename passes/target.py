"""Building, running and timing Relay programs on the host CPU.

This TVM build (hhb-tvm) defaults a plain ``llvm`` target to riscv64, so every
build in the project goes through :func:`host_target`, which names the host's
triple and CPU explicitly.
"""
from __future__ import annotations

import functools
import logging
import platform
import statistics
import time
from typing import Mapping, Sequence

import numpy as np
import tvm
from tvm import relay
from tvm.contrib import graph_executor

log = logging.getLogger(__name__)

_TRIPLES = {"x86_64": "x86_64-linux-gnu", "amd64": "x86_64-linux-gnu",
            "aarch64": "aarch64-linux-gnu", "arm64": "aarch64-linux-gnu"}


def _cpuinfo_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _known_cpus(triple: str) -> set[str]:
    try:
        return set(tvm.target.codegen.llvm_get_cpu_archlist(tvm.target.Target(f"llvm -mtriple={triple}")))
    except Exception:  # noqa: BLE001 - older LLVM builds lack the query
        return set()


@functools.lru_cache(maxsize=None)
def host_target() -> str:
    """The LLVM target string for this machine, e.g.
    ``"llvm -mtriple=x86_64-linux-gnu -mcpu=znver4"`` (cached).

    The CPU is LLVM's host detection when this LLVM knows it, else derived
    from /proc/cpuinfo flags (skylake-avx512, core-avx2, x86-64).
    """
    machine = platform.machine().lower()
    triple = _TRIPLES.get(machine)
    if triple is None:
        log.warning("unknown host architecture %r; using plain llvm", machine)
        return "llvm"
    known = _known_cpus(triple)
    cpu = None
    try:
        cpu = str(tvm.target.codegen.llvm_get_system_cpu())
    except Exception:  # noqa: BLE001
        cpu = None
    if not cpu or cpu == "generic" or (known and cpu not in known):
        if triple.startswith("x86_64"):
            flags = _cpuinfo_flags()
            if "avx512f" in flags:
                cpu = "skylake-avx512"
            elif "avx2" in flags:
                cpu = "core-avx2"
            else:
                cpu = "x86-64"
        else:
            cpu = "generic"
    return f"llvm -mtriple={triple} -mcpu={cpu}"


#: -mcpu -> the /proc/cpuinfo flags a CPU needs to run code LLVM builds for it (x86)
_CPU_NEEDS = {
    "x86-64": (),
    "x86-64-v2": ("sse4_2", "popcnt"),
    "x86-64-v3": ("avx2", "fma", "bmi2"),
    "x86-64-v4": ("avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"),
    "haswell": ("avx2", "fma", "bmi2"),
    "core-avx2": ("avx2", "fma", "bmi2"),
    "skylake": ("avx2", "fma", "bmi2", "adx"),
    "skylake-avx512": ("avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd"),
    "cascadelake": ("avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd", "avx512_vnni"),
    "icelake-server": ("avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd", "avx512_vnni",
                       "avx512vbmi", "avx512_vbmi2", "avx512_bitalg", "avx512_vpopcntdq", "gfni", "vaes"),
    "znver2": ("avx2", "fma", "bmi2", "sha_ni"),
    "znver3": ("avx2", "fma", "bmi2", "sha_ni", "vaes", "vpclmulqdq"),
    "znver4": ("avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512cd", "avx512_vnni", "avx512vbmi",
               "avx512_vbmi2", "avx512_bitalg", "avx512_vpopcntdq", "avx512_bf16", "gfni", "vaes"),
}


def runs_here(target) -> bool:
    """Whether code built for ``target`` (None: the host) runs on this machine, so that
    programs built for it can be timed here: an LLVM target for this machine's
    triple whose ``-mcpu`` is the host's own or one whose instruction set this CPU
    has (``-mattr`` features included). A plain ``llvm`` is riscv64 in this TVM; a
    GPU target, another triple or an unknown CPU name count as cross-compiling."""
    if target is None:
        return True
    try:
        t = tvm.target.Target(str(target))
    except Exception:  # noqa: BLE001 - not a target string TVM knows
        return False
    if t.kind.name != "llvm":
        return False
    host = host_target()
    host_t = tvm.target.Target(host)
    triple = str(t.attrs.get("mtriple", "") or "")
    if triple != str(host_t.attrs.get("mtriple", "")):
        return False
    flags = _cpuinfo_flags()
    mcpu = str(t.attrs.get("mcpu", "") or "generic")
    if mcpu not in (str(host_t.attrs.get("mcpu", "")), "generic"):
        needs = _CPU_NEEDS.get(mcpu)
        if needs is None or not set(needs) <= flags:
            return False
    for feature in t.attrs.get("mattr", None) or []:
        feature = str(feature)
        if feature.startswith("+") and feature[1:].replace("-", "_") not in flags \
                and feature[1:].replace("-", "") not in flags:
            return False
    return True


def _as_module(mod) -> tvm.IRModule:
    if isinstance(mod, relay.Function):
        return tvm.IRModule.from_expr(mod)
    return mod


def build(mod, params: Mapping | None = None, target: str | None = None, opt_level: int = 3):
    """Compile a Relay module (or function) with ``relay.build`` for ``target``
    (default: :func:`host_target`). Returns the graph executor factory."""
    with tvm.transform.PassContext(opt_level=opt_level):
        return relay.build(_as_module(mod), target=target or host_target(), params=params)


def _executor(lib) -> graph_executor.GraphModule:
    if isinstance(lib, graph_executor.GraphModule):
        return lib
    return graph_executor.GraphModule(lib["default"](tvm.cpu(0)))


def run(lib, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Run a built module (factory from :func:`build`, or a GraphModule) on
    named inputs; returns every output as a numpy array, in order."""
    m = _executor(lib)
    for name, value in inputs.items():
        m.set_input(name, value)
    m.run()
    return [m.get_output(i).numpy() for i in range(m.get_num_outputs())]


def measure(mod, params: Mapping | None, inputs: Mapping[str, np.ndarray],
            number: int = 10, repeat: int = 3, target: str | None = None) -> float:
    """Median wall time in seconds of one inference of ``mod`` (built at
    opt_level 3), from ``repeat`` timings each averaging ``number`` runs."""
    m = _executor(build(mod, params=params, target=target))
    for name, value in inputs.items():
        m.set_input(name, value)
    timer = m.module.time_evaluator("run", tvm.cpu(0), number=number, repeat=repeat)
    return float(statistics.median(timer().results))


def random_inputs(types: Mapping[str, tuple[Sequence[int], str]], seed: int = 0) -> dict[str, np.ndarray]:
    """Random arrays for ``{name: (shape, dtype)}``: standard normal floats,
    integers in [0, 4)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, (shape, dtype) in types.items():
        if np.issubdtype(np.dtype(dtype), np.integer):
            out[name] = rng.integers(0, 4, size=tuple(shape)).astype(dtype)
        elif np.dtype(dtype) == np.bool_:
            out[name] = rng.integers(0, 2, size=tuple(shape)).astype(bool)
        else:
            out[name] = rng.standard_normal(tuple(shape)).astype(dtype)
    return out


# -- comparing two programs ---------------------------------------------------------

def build_and_run(mod, inputs: Mapping[str, np.ndarray], target: str | None = None):
    """Build ``mod`` at opt_level 3 for ``target`` (default: the host) and run
    it once on ``inputs``; returns (GraphModule, outputs, build seconds)."""
    t0 = time.perf_counter()
    lib = build(mod, target=target, opt_level=3)
    build_seconds = time.perf_counter() - t0
    m = _executor(lib)
    return m, run(m, inputs), build_seconds


def time_rounds(modules: Sequence[graph_executor.GraphModule], number: int = 0, repeat: int = 10,
                min_repeat_ms: int = 0) -> list[list[float]]:
    """Seconds per run of each graph executor module, one sample per round:
    the timings alternate between the modules (``repeat`` rounds; each timing
    averages ``number`` runs, or as many as fill ``min_repeat_ms``), so load
    from other processes affects all of them alike (the order rotates from
    round to round, so none is always timed first), and sample ``k`` of one
    module can be paired with sample ``k`` of another."""
    timers = [m.module.time_evaluator("run", tvm.cpu(0), number=max(1, number), repeat=1,
                                      min_repeat_ms=min_repeat_ms) for m in modules]
    for t in timers:  # warm up
        t()
    samples: list[list[float]] = [[] for _ in modules]
    n = len(timers)
    for r in range(repeat):
        for k in [(r + j) % n for j in range(n)]:
            samples[k].append(float(timers[k]().results[0]))
    return samples


def paired_ratio(before: Sequence[float], after: Sequence[float]) -> tuple[float, int]:
    """(median of the per-round ratios after / before, rounds in which ``after`` was faster)
    of two modules' :func:`time_rounds` samples."""
    ratio = float(statistics.median(a / b for a, b in zip(after, before)))
    return ratio, sum(a < b for a, b in zip(after, before))


def time_interleaved(modules: Sequence[graph_executor.GraphModule], number: int = 0, repeat: int = 10,
                     min_repeat_ms: int = 0) -> list[float]:
    """Median seconds per run of each module, timed by :func:`time_rounds`."""
    return [float(statistics.median(s)) for s in time_rounds(modules, number, repeat, min_repeat_ms)]


def output_error(ref: Sequence[np.ndarray], got: Sequence[np.ndarray]) -> tuple[float, str | None]:
    """(largest ``max|a-b| / max(1, max|a|)`` over the outputs, why it is
    infinite or None): inf when the outputs differ in count, shape or dtype,
    or one has inf/nan where the other has not."""
    if len(ref) != len(got):
        return float("inf"), f"{len(ref)} outputs before, {len(got)} after"
    worst = 0.0
    for k, (r, g) in enumerate(zip(ref, got)):
        if r.shape != g.shape or r.dtype != g.dtype:
            return float("inf"), (f"output {k}: {r.dtype}{list(r.shape)} before, "
                                  f"{g.dtype}{list(g.shape)} after")
        if r.size == 0:
            continue
        rf, gf = r.astype(np.float64), g.astype(np.float64)
        finite = np.isfinite(rf) & np.isfinite(gf)
        same = (rf == gf) | (np.isnan(rf) & np.isnan(gf))
        if not np.all(same | finite):
            return float("inf"), f"output {k}: inf/nan in one program and not the other"
        if finite.any():
            scale = max(1.0, float(np.abs(rf[finite]).max()))
            worst = max(worst, float(np.abs(rf - gf)[finite].max()) / scale)
    return worst, None
