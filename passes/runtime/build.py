"""Building, running and comparing programs' outputs: the project's one implementation.

The pass's runtime check, the measuring worker (:mod:`relay_eqsat.passes.runtime.kernels`) and
the benchmarks all build with :func:`build` (or :func:`build_and_run`, which also runs once and
records the build's seconds), and compare outputs with :func:`output_error`; timing is
:mod:`.timing`'s. Builds default to :func:`~relay_eqsat.passes.runtime.target.host_target`
(this TVM's plain ``llvm`` is riscv64).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import time
from dataclasses import dataclass, field
from typing import Mapping, NamedTuple, Sequence

import numpy as np
import tvm
from tvm import relay
from tvm.contrib import graph_executor

from relay_eqsat import progress

from .target import host_target


def _as_module(mod) -> tvm.IRModule:
    if isinstance(mod, relay.Function):
        return tvm.IRModule.from_expr(mod)
    return mod


@dataclass
class BuildReuse:
    """The builds kept inside one :func:`reuse_builds` block: (module, factory) per key, how
    many builds it saved, and the seconds :func:`build_and_run` took to build each factory
    (by ``id``: a reused build reports its first build's seconds)."""

    kept: dict = field(default_factory=dict)
    hits: int = 0
    build_s: dict = field(default_factory=dict)


_REUSE: list[BuildReuse] = []  # the active reuse_builds blocks, innermost last


@contextlib.contextmanager
def reuse_builds():
    """Within this block :func:`build` compiles a module (no ``params``, no ``sequence``) only
    once per target and opt level: a structurally equal module built before in the block gets
    the same factory. ``relay-eqsat optimize`` wraps the pass and its own before/after builds
    in one, so the programs the pass's runtime check built are not built again. The factories
    are dropped when the block ends (nothing is kept across a user's pipeline)."""
    reuse = BuildReuse()
    _REUSE.append(reuse)
    try:
        yield reuse
    finally:
        _REUSE.remove(reuse)
        reuse.kept.clear()
        reuse.build_s.clear()


def build(mod, params: Mapping | None = None, target: str | None = None, opt_level: int = 3,
          sequence: Sequence = (), records=None, hits=None):
    """Compile a Relay module (or function) with ``relay.build`` for ``target``
    (default: :func:`host_target`), running the passes ``sequence`` first inside the same
    PassContext, under the tuning ``records`` (a :class:`~.records.TuningRecords`, or None;
    ``hits``: a :class:`~.records.Hits` that counts the kernels' lookups in them).
    Returns the graph executor factory (inside :func:`reuse_builds`, the one built before for
    an equal module, target, opt level and records)."""
    from .records import applied, pass_config

    target = target or host_target()
    reusable = params is None and not sequence and hits is None
    if reusable:
        kept = _reused(mod, target, opt_level, records)
        if kept is not None:
            return kept
    with applied(records, hits), tvm.transform.PassContext(opt_level=opt_level, config=pass_config(records)):
        built = _as_module(mod)
        if sequence:
            built = tvm.transform.Sequential(list(sequence))(built)
        lib = relay.build(built, target=target, params=params)
    if reusable:
        keep_build(mod, target, opt_level, lib, records)
    return lib


def _reuse_key(mod, target, opt_level, records=None) -> tuple:
    return (tvm.ir.structural_hash(_as_module(mod)), str(target), opt_level,
            None if records is None else records.digest)


def _reused(mod, target, opt_level, records=None):
    """The factory of an equal module built before inside the active :func:`reuse_builds` block
    (counted as a hit), else None."""
    if not _REUSE:
        return None
    reuse, module = _REUSE[-1], _as_module(mod)
    for kept, lib in reuse.kept.get(_reuse_key(module, target, opt_level, records), ()):
        if tvm.ir.structural_equal(kept, module):
            reuse.hits += 1
            return lib
    return None


def keep_build(mod, target, opt_level: int, lib, records=None) -> None:
    """Keep ``lib`` (``mod`` built for ``target`` under ``records``: a factory, or a
    :class:`~.builder.Prebuilt`) for the active :func:`reuse_builds` block, if any."""
    if _REUSE:
        module = _as_module(mod)
        _REUSE[-1].kept.setdefault(_reuse_key(module, target, opt_level, records), []).append((module, lib))


def thread_count() -> int | None:
    """The threads TVM's runtime runs a kernel with (``TVM_NUM_THREADS`` or its default); None
    when this TVM cannot say. Asking starts TVM's thread pool, which pins the calling thread to
    one CPU (on 2 cores: {0, 1} -> {0}), and every thread or process it starts later inherits
    that (onnxruntime or torch run after the pass in the same process: one core). The caller's
    CPUs are given back."""
    num_threads = tvm.get_global_func("runtime.NumThreads", True)
    if num_threads is None:
        return None
    cpus = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    try:
        return int(num_threads())
    finally:
        if cpus is not None and os.sched_getaffinity(0) != cpus:
            os.sched_setaffinity(0, cpus)


def executor(lib, dev=None) -> graph_executor.GraphModule:
    """A graph executor on ``dev`` (default: the CPU) for a factory from :func:`build`
    (a GraphModule is returned as it is). The executor remembers its device
    (:func:`module_device`), so that timers time it there."""
    if isinstance(lib, graph_executor.GraphModule):
        return lib
    return loaded_executor(lib.get_lib(), lib["default"], dev if dev is not None else tvm.cpu(0))


def loaded_executor(library, factory, dev) -> graph_executor.GraphModule:
    """A graph executor from ``factory`` on ``dev`` that remembers both ``dev`` and the runtime
    module its kernels were loaded from (``library``: this machine's, or a remote device's), for
    :func:`module_device` and :func:`module_library`."""
    m = graph_executor.GraphModule(factory(dev))
    m.relay_eqsat_device, m.relay_eqsat_library = dev, library
    return m


def module_device(m):
    """The device a graph executor runs on (:func:`loaded_executor` records it; the CPU otherwise)."""
    return getattr(m, "relay_eqsat_device", None) or tvm.cpu(0)


def module_library(m, lib):
    """The runtime module a graph executor's kernels come from (:func:`loaded_executor` records it;
    else the built factory ``lib``'s own)."""
    return getattr(m, "relay_eqsat_library", None) or lib.get_lib()


def set_inputs(m: graph_executor.GraphModule, inputs: Mapping[str, np.ndarray]) -> None:
    """Set the named inputs of a graph executor."""
    for name, value in inputs.items():
        m.set_input(name, value)


def run(lib, inputs: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Run a built module (factory from :func:`build`, or a GraphModule) on
    named inputs; returns every output as a numpy array, in order."""
    m = executor(lib)
    set_inputs(m, inputs)
    m.run()
    return [m.get_output(i).numpy() for i in range(m.get_num_outputs())]


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


class Built(NamedTuple):
    """A program built and run once by :func:`build_and_run`."""

    module: graph_executor.GraphModule
    outputs: list[np.ndarray]
    build_s: float  # compiling and making the executor (this TVM's LLVM JIT runs then); a build
    # reused inside reuse_builds: the seconds its first build took
    first_run_s: float  # the program's own first run: what one timing of it costs at least


def build_and_run(mod, inputs: Mapping[str, np.ndarray], target: str | None = None, opt_level: int = 3,
                  sequence: Sequence = (), what: str = "the program", place=None, built=None,
                  records=None) -> Built:
    """:func:`build` ``mod`` for ``target`` (default: the host) and run it once on
    ``inputs``. The build seconds include creating the executor: this TVM's LLVM module
    turns into machine code when the executor first looks up its kernels (11 s of
    DenseNet-121 on a Zen 1, whose runs take 0.3 s), so the first run is the program's
    own. Inside :func:`reuse_builds` a program built before is not built again and its build
    seconds are the first build's. Progress (``what`` names the program) shows while it builds
    and runs. ``place`` (:mod:`.remote`): where it runs (default: here); a remote one has it
    uploaded and loaded in the build's seconds. ``built``: a function giving ``mod`` built already
    (a :class:`~.builder.Builder`'s, waited for here; its build seconds are the child's), kept for
    :func:`reuse_builds` as a build here would be. ``records``: the tuning records it is built under."""
    reuse = _REUSE[-1] if _REUSE else None
    hits = reuse.hits if reuse is not None else 0
    t0 = time.perf_counter()
    with progress.ticking(f"building {what}"):
        if built is not None:
            lib = built()
            keep_build(mod, target or host_target(), opt_level, lib, records)
        else:
            lib = build(mod, target=target, opt_level=opt_level, sequence=sequence, records=records)
        m = executor(lib) if place is None else place.load(lib)
    t1 = time.perf_counter()
    build_s = t1 - t0 if built is None else lib.build_s
    if reuse is not None:
        if reuse.hits > hits:
            build_s = reuse.build_s.get(id(lib), build_s)
        elif any(kept is lib for entries in reuse.kept.values() for _, kept in entries):
            reuse.build_s[id(lib)] = build_s
    with progress.ticking(f"running {what}"):
        outputs = run(m, inputs)
    return Built(m, outputs, build_s, time.perf_counter() - t1)


def export(lib, target, folder: str, name: str) -> str:
    """Write the built ``lib`` (for ``target``) into ``folder`` as a file a runtime of the target's
    machine loads: a shared library linked by the host's compiler when the target's architecture
    is this machine's, by ``<triple>-g++`` when that is on the PATH, else a tar of object files
    (a remote links them itself). Returns its path."""
    if host_arch_target(target):
        path = os.path.join(folder, name + ".so")
        lib.export_library(path)
        return path
    triple, arch = _triple(target)
    cross = shutil.which(f"{triple}-g++") or shutil.which(f"{arch}-linux-gnu-g++")
    if cross:
        from tvm.contrib import cc

        path = os.path.join(folder, name + ".so")
        lib.export_library(path, fcompile=cc.cross_compiler(cross))
        return path
    path = os.path.join(folder, name + ".tar")  # object files: the remote links them itself
    lib.export_library(path)
    return path


def _triple(target) -> tuple[str, str]:
    """(``target``'s triple, its architecture); ("", "") when it names none."""
    triple = str(tvm.target.Target(str(target)).attrs.get("mtriple", "") or "")
    return triple, triple.split("-")[0]


def host_arch_target(target) -> bool:
    """Whether ``target``'s library is linked by the host's own compiler (:func:`export`)."""
    triple, arch = _triple(target)
    host_arch = os.uname().machine
    return not triple or arch == host_arch or (arch, host_arch) in (("x86_64", "amd64"), ("aarch64", "arm64"))




def output_error(ref: Sequence[np.ndarray], got: Sequence[np.ndarray]) -> tuple[float, str | None]:
    """(largest ``max|a-b| / max|a|`` over the outputs, why it is infinite or None): each output's
    error relative to its own scale, so a classifier whose random weights leave logits of 1e-9 (or
    1e-14) is held to the same digits as one with logits of 10 (relative to ``max(1, max|a|)``, as
    before 2026-11-27, any program passes there). Infinite when the outputs differ in count, shape
    or dtype, when one has inf/nan where the other has not, or when an output that is all zeros
    (a zero-initialized head) is not matched exactly."""
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
        if not finite.any():
            continue
        diff = float(np.abs(rf - gf)[finite].max())
        scale = float(np.abs(rf[finite]).max())
        if diff > 0 and scale == 0:
            return float("inf"), f"output {k}: all zeros before, up to {diff:.3g} after"
        if diff > 0:
            worst = max(worst, diff / scale)
    return worst, None
