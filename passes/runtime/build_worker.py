"""The build process of a :class:`~relay_eqsat.passes.runtime.builder.Builder`:
``python -m relay_eqsat.passes.runtime.build_worker SPEC``.

SPEC is a JSON file: ``module`` (the Relay module, ``tvm.ir.save_json``'s text, in its own
file), ``target``, ``opt_level``, ``tuning_records`` (a log's path, or null), ``out`` (the stem of the library to write) and ``background``
(build only on a CPU nothing else wants: ``SCHED_IDLE``, taken before TVM is imported). The
program is built with :func:`~relay_eqsat.passes.runtime.build.build` and exported by
:func:`~relay_eqsat.passes.runtime.build.export` (a shared library, or object files in a tar for
a device that links them); ``out + ".json"`` then says its path and the build's seconds. A
failure writes ``out + ".err"`` (the error's last line first) and exits with status 1. Started by module name,
so the parent's ``__main__`` script is never run again here.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
import traceback


def lower_priority() -> str:
    """Run from now on only on CPUs nothing else wants (``SCHED_IDLE``; else the lowest nice):
    what this process got."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return "idle"
    except (AttributeError, OSError):
        try:
            os.nice(19)
            return "nice 19"
        except OSError:
            return "normal"


def end_with_parent() -> None:
    """Be killed when the parent dies (Linux's ``PR_SET_PDEATHSIG``): a build it stopped
    (``SIGSTOP``) must not outlive it."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def main(spec_path: str) -> int:
    end_with_parent()
    with open(spec_path) as f:
        spec = json.load(f)
    out = spec["out"]
    try:
        if spec.get("background"):
            lower_priority()
        import tvm

        from relay_eqsat.passes.runtime.build import build, export

        from relay_eqsat.passes.runtime.records import resolve

        with open(spec["module"]) as f:
            mod = tvm.ir.load_json(f.read())
        t0 = time.perf_counter()
        lib = build(mod, target=spec["target"], opt_level=int(spec.get("opt_level", 3)),
                    records=resolve(spec.get("tuning_records")))
        build_s = time.perf_counter() - t0
        path = export(lib, spec["target"], os.path.dirname(out), os.path.basename(out))
        with open(out + ".json.part", "w") as f:
            json.dump({"path": path, "build_s": build_s, "export_s": time.perf_counter() - t0 - build_s}, f)
        os.replace(out + ".json.part", out + ".json")
        return 0
    except BaseException as e:  # noqa: BLE001 - every failure is told to the parent
        lines = [ln for ln in str(e).strip().splitlines() if ln.strip()] or [type(e).__name__]
        with open(out + ".err", "w") as f:
            f.write(f"{type(e).__name__}: {lines[-1][:500]}\n{traceback.format_exc()[-4000:]}")
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
