"""A model's variants built and timed for a bench table: :class:`Timed`.

Building, running, the timer, the interleaving loop and the statistics (``Samples``) are
``relay_eqsat.passes.runtime``'s (``build``, ``timing``); here
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

from relay_eqsat.passes.runtime.timing import Samples


@dataclass
class Timed(Samples):
    """A built module's runtime (:class:`~relay_eqsat.passes.runtime.timing.Samples`), its outputs
    and its build's seconds."""

    outputs: list = field(repr=False, default_factory=list)
    build_time: float = 0.0

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
               rounds: int = 1) -> dict[str, Timed]:
    """Time each built module: ``repeat`` timings (each at least ``min_repeat_ms`` long)
    per module, taken in ``rounds`` interleaved rounds (:func:`~relay_eqsat.passes.runtime.timing.interleave`)
    so that drift of the machine's speed affects every module alike; the median of each module's
    samples."""
    from relay_eqsat.passes.runtime.timing import interleave, timer

    per_round = [repeat // rounds + (1 if r < repeat % rounds else 0) for r in range(rounds)]

    def timing(module):
        return lambda r: timer(module, number=1, repeat=per_round[r], min_repeat_ms=min_repeat_ms)() if per_round[r] else []

    names = list(built)
    samples = interleave([timing(built[k].module) for k in names], rounds)
    return {k: Timed(statistics.median(v), v, built[k].outputs, built[k].build_s) for k, v in zip(names, samples)}


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
