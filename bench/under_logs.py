"""A model built untuned and under AutoTVM logs, its outputs compared and the builds timed in
paired rounds: what bench/tuning_logs.py and bench/approx_under_logs.py compare."""
from __future__ import annotations

import statistics
from typing import Mapping, Sequence


def paired_under_logs(mod, inputs: Mapping, logs: Sequence, names: Sequence[str], rounds: int) -> dict:
    """``mod`` built at opt_level 3 untuned and under each of ``logs`` (``names``: the untuned build's
    name, then each log's): :func:`paired_builds` of those builds."""
    return paired_builds([(mod, None), *((mod, log) for log in logs)], inputs, names, rounds)


def paired_builds(builds: Sequence, inputs: Mapping, names: Sequence[str], rounds: int) -> dict:
    """Each ``(module, log or None)`` of ``builds`` built at opt_level 3 (under its AutoTVM log, if
    any), run on ``inputs`` and timed in ``rounds`` interleaved rounds: ``ms`` (each build's
    median), ``max_error`` (the largest output difference from the first build's, relative to its
    max|out|) and ``ratios`` (for each later build over each earlier one, ``"<b>/<a>"``: the median
    per-round ratio and the rounds the later one won)."""
    import numpy as np
    import tvm

    from relay_eqsat.passes.runtime.build import build, executor
    from relay_eqsat.passes.runtime.records import load_records
    from relay_eqsat.passes.runtime.target import host_target
    from relay_eqsat.passes.runtime.timing import paired_ratio, time_rounds

    target = host_target()
    libs = [build(m, target=target, records=load_records(str(log)) if log is not None else None)
            for m, log in builds]
    mods = []
    for lib in libs:
        m = executor(lib, tvm.cpu(0))
        for k, v in inputs.items():
            m.set_input(k, v)
        m.run()
        mods.append(m)
    ref = mods[0].get_output(0).numpy()
    scale = float(np.abs(ref).max()) or 1.0
    out: dict = {"max_error": max(float(np.abs(m.get_output(0).numpy() - ref).max()) / scale for m in mods[1:])}
    times = time_rounds(mods, repeat=rounds, min_repeat_ms=200)
    out["ms"] = {v: statistics.median(t) * 1e3 for v, t in zip(names, times)}
    out["ratios"] = {}
    for b in range(1, len(names)):
        for a in range(b):
            ratio, wins = paired_ratio(times[a], times[b])
            out["ratios"][f"{names[b]}/{names[a]}"] = {"ratio": ratio, "wins": f"{wins}/{rounds}"}
    return out
