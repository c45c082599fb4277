"""A model's variants built and timed for a bench table: :class:`Timing`.

Building, running and the timer itself are ``relay_eqsat.passes.runtime.build``'s; here
are the benchmarks' own choices: interleaved rounds of several timings each, and
the statistics the tables report (median, quartiles, spread, slower beyond noise).
"""
from __future__ import annotations

import argparse
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence


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


def build_module(mod, inputs: Mapping, target: str | None = None, opt_level: int = 3,
                 sequence: Sequence = ()):
    """Build ``mod`` for ``target`` (default: the host) at ``opt_level`` — running the
    passes ``sequence`` first, inside the same PassContext — and run it once on ``inputs``:
    ``relay_eqsat.passes.runtime.build.Built``."""
    from relay_eqsat.passes.runtime.build import build_and_run

    return build_and_run(mod, inputs, target, opt_level=opt_level, sequence=sequence)


def time_built(built: Mapping[str, Any], repeat: int = 10, min_repeat_ms: int = 100,
               rounds: int = 1) -> dict[str, Timing]:
    """Time each built module: ``repeat`` timings (each at least ``min_repeat_ms`` long)
    per module, taken in ``rounds`` interleaved rounds so that drift of the machine's
    speed affects every module alike (the order rotates from round to round, so
    no module is always timed first); the median of each module's samples."""
    from relay_eqsat.passes.runtime.timing import timer

    samples: dict[str, list[float]] = {k: [] for k in built}
    names = list(built)
    per_round = [repeat // rounds + (1 if r < repeat % rounds else 0) for r in range(rounds)]
    for r, n in enumerate(per_round):
        for k in names[r % len(names):] + names[:r % len(names)]:
            if n:
                samples[k] += timer(built[k].module, number=1, repeat=n, min_repeat_ms=min_repeat_ms)()
    return {k: Timing(statistics.median(v), v, built[k].outputs, built[k].build_s) for k, v in samples.items()}


def build_and_time(mod, inputs: Mapping, repeat: int = 10, min_repeat_ms: int = 100,
                   target: str | None = None, opt_level: int = 3, sequence: Sequence = ()) -> Timing:
    """:func:`build_module` then :func:`time_built` for one module."""
    built = build_module(mod, inputs, target=target, opt_level=opt_level, sequence=sequence)
    return time_built({"m": built}, repeat=repeat, min_repeat_ms=min_repeat_ms)["m"]


@contextmanager
def stopwatch():
    """``with stopwatch() as t: ...`` then ``t()`` is the seconds the block took."""
    t0 = time.perf_counter()
    end = [None]
    yield lambda: (end[0] if end[0] is not None else time.perf_counter()) - t0
    end[0] = time.perf_counter()


def forms_parser(doc: str, out_name: str) -> argparse.ArgumentParser:
    """The command line of a bench that times a few forms of each case alone: the module's
    docstring as help, interleaved --rounds, --repeat timings of at least --min-repeat-ms,
    --threads (TVM_NUM_THREADS) and --out (default ``bench/results/<out_name>``)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="\n".join(doc.splitlines()[1:]))
    ap.add_argument("--rounds", type=int, default=9, help="interleaved timing rounds")
    ap.add_argument("--repeat", type=int, default=9, help="timings per form in all")
    ap.add_argument("--min-repeat-ms", type=int, default=100, help="each timing runs at least this long")
    ap.add_argument("--threads", type=int, default=1, help="TVM_NUM_THREADS")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / out_name))
    return ap
