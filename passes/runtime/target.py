"""Target facts: the host's LLVM target, and whether code built for a target runs here.

This TVM build (hhb-tvm) defaults a plain ``llvm`` target to riscv64, so every
build in the project goes through :func:`host_target`, which names the host's
triple and CPU explicitly. Building and timing are in :mod:`relay_eqsat.passes.runtime.build`.
"""
from __future__ import annotations

import functools
import logging
import platform

import tvm

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
