"""Which measured CPU stands in for one nobody measured: the nearest shipped model.

A learned model is trained on one CPU. On a CPU the project ships no model
for (a new CPU name, or a known CPU under a name LLVM's host detection gives
it wrongly: a virtual machine's Sapphire Rapids reporting CPUID model 167
becomes ``rocketlake``, a Zen 5 ``skylake-avx512``), the pass borrows another
CPU's model. The one borrowed should be the one whose kernels run most alike:
kernel times follow the vector width TVM's schedules pick first (16, 8 or 4
fp32 lanes, :func:`relay_eqsat.cost.simd.simd_lanes`), then the vendor's
microarchitecture, then whether its vector units are as wide as its
registers (Zen 1 runs each 256-bit AVX2 instruction as two 128-bit halves,
Zen 2 and later and Intel's AVX2 cores do not). Measured on that Sapphire-Rapids-class VM (211 kernels of
five zoo models): the shipped Sapphire Rapids measurements give this
machine's times up to one scale with a spread of 0.21 in log-time, the
znver4 ones 0.79, znver3's 0.97.

:func:`rank` orders candidate targets by (same lanes, same vendor, same
vector-unit width); a
candidate with other lanes is never chosen over the default. Vendors are
read from the ``-mcpu`` name; the generic names (``x86-64*``, and the
``skylake-avx512``/``core-avx2`` the project's host detection falls back to
for CPUs LLVM does not know) name none, and then ``host_vendor`` (the
caller's, e.g. from ``/proc/cpuinfo`` when the target is the host) decides.
No TVM here.
"""
from __future__ import annotations

import re

from .simd import is_x86, simd_lanes

#: -mcpu names that say nothing of the vendor: generic levels and the host fallbacks
GENERIC_CPUS = frozenset({"x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4", "skylake-avx512", "core-avx2",
                          "generic", ""})
_AMD = re.compile(r"^(znver|bdver|btver|amdfam|barcelona|athlon|opteron|k8)")
#: -mcpu names whose 256-bit vector instructions run on 128-bit units, in two halves (Zen 1, the
#: Bulldozer and Jaguar families): of two candidates alike otherwise, one of these is nearest to
#: another of these and farthest from a CPU with full-width units
_HALF_WIDTH = re.compile(r"^(znver1|bdver\d|btver\d)$")


def _mcpu(target: str) -> str:
    m = re.search(r"(?:^|\s)-mcpu=(\S+)", str(target))
    return m.group(1) if m else ""


def vendor(target: str | None) -> str | None:
    """``"amd"``, ``"intel"`` or None (not x86, or a generic ``-mcpu``) for a target."""
    if not target or not is_x86(target):
        return None
    cpu = _mcpu(target)
    if cpu in GENERIC_CPUS:
        return None
    return "amd" if _AMD.match(cpu) else "intel"


def half_width(target: str | None) -> bool:
    """Whether ``target``'s CPU runs its widest vector instructions on units half as wide."""
    return bool(target) and bool(_HALF_WIDTH.match(_mcpu(target)))


def host_vendor() -> str | None:
    """This machine's x86 vendor from ``/proc/cpuinfo`` (None elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = [line for line in f if line.startswith("vendor_id")]
    except OSError:  # not Linux: no vendor known
        return None
    vendor_id = lines[0].split(":", 1)[1].strip() if lines else ""
    return {"AuthenticAMD": "amd", "GenuineIntel": "intel"}.get(vendor_id)


def rank(target: str, candidates: list[str], host: str | None = None) -> list[str]:
    """The candidate targets that may stand in for ``target``, nearest first: those with the
    same SIMD lanes as ``target`` (x86 only), the same vendor before another, then the same
    vector-unit width (:func:`half_width`) before another. ``host``: the vendor to assume when
    ``target``'s ``-mcpu`` names none. Ties keep the candidates' order."""
    lanes = simd_lanes(target)
    if lanes is None:
        return []
    own = vendor(target) or host
    same_lanes = [c for c in candidates if simd_lanes(c) == lanes]
    half = half_width(target)
    return sorted(same_lanes, key=lambda c: (0 if own is not None and vendor(c) == own else 1,
                                             0 if half_width(c) == half else 1))
