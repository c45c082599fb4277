"""Calibrating a cost model on this machine: measure the kernels a decision rests on.

With no measurements shipped for the host and no learned model trained on it,
kernel costs come from another CPU's model, whose predictions keep their
ranking but not their scale: far too coarse to trust a gain of a few percent.
With data shipped for the host, the kernels a rewrite creates are still
predicted (the data covers the models it was measured on): those are measured.
A ``Calibrator`` measures, on this machine, the kernels of the programs being
compared (the optimizer's input and its candidate), within a time limit, with
a progress bar; every result goes to the sqlite cost database as it arrives
(a later run on the same model finds them there and measures nothing) and
into the cost model, so re-extraction and the keep-or-not decision rest on
this CPU's numbers. The kernels are measured by a ``MeasurePool``: on the devices of the
cost model's RPC tracker and key (``cost_model.remote``) when it has one, else by local
workers (``cost_model.jobs``), each kernel built under the cost model's tuning records
(``cost_model.records``) when it has them; this module imports no TVM.
"""
from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import asdict, dataclass
from typing import Iterable

from ..graph import TensorGraph
from .instance import OpInstance, instances_from_graph, unique
from .measure import BackendUnavailable, MeasureConfig
from .pool import MeasurePool
from .tracker import TrackerError

log = logging.getLogger(__name__)

#: how kernels are timed while calibrating: shorter than `relay-eqsat measure`'s defaults (a user is
#: waiting), long enough that a kernel's median is stable to a few percent
CALIBRATION_CONFIG = MeasureConfig(repeat=5, min_repeat_ms=20.0, warmup=2, timeout_s=60.0, startup_s=60.0)


@dataclass
class CalibrationReport:
    """What a calibration measured (attached to the optimizer's report as ``calibration``)."""

    target: str = ""
    db: str = ""
    where: str = ""        # where the kernels were measured (this machine, or the RPC devices)
    measured: int = 0      # kernels measured in this run
    reused: int = 0        # kernels found in the cost database (measured by an earlier run)
    failed: int = 0        # kernels that could not be built or timed alone (their cost stays predicted)
    unmeasured: int = 0    # kernels left unmeasured when the time limit ran out
    shared: int = 0        # kernels both compared programs run, left as the model prices them (differences_only)
    seconds: float = 0.0   # time spent measuring
    rounds: int = 0        # measure-and-re-extract rounds
    error: str = ""        # why nothing could be measured, if so

    @property
    def complete(self) -> bool:
        """Every kernel of the compared programs has a measured (or failed) time."""
        return self.unmeasured == 0 and not self.error

    def to_dict(self) -> dict:
        return dict(asdict(self), complete=self.complete)

    def summary(self) -> str:
        if self.error:
            return f"kernels not measured ({self.error})"
        on = f" on {self.where}" if self.where and not self.where.startswith("this machine") else ""
        text = (f"{self.measured} kernels measured{on} in {self.seconds:.1f} s, {self.reused} reused from "
                "earlier runs")
        if self.failed:
            text += f", {self.failed} failed to build alone (predicted)"
        if self.unmeasured:
            text += f", {self.unmeasured} left unmeasured (time limit)"
        if self.shared:
            text += f", {self.shared} run by both programs left predicted"
        return text


class Calibrator:
    """Measures the kernels of given graphs for ``cost_model`` (a CostModel of kind auto or
    measured), within ``time_limit`` seconds over all its calls.

    ``differences_only``: of two graphs (the input and a candidate), only the kernels one runs and
    the other does not. A kernel both run adds the same to both costs, so which of the two is
    cheaper rests on the others alone; where the whole programs are timed next (the runtime check
    decides), that is all calibration must tell. SqueezeNet1.1's candidate differs from its input
    in 3 of 48 kernels, ShuffleNet-v2's in 68 of 95. The costs then mix the model's scale (the
    shared kernels) with this machine's: their ratio is no measured speedup.

    ``while_measuring``: a context manager factory entered while kernels are measured (the pass
    pauses its background builds: a build beside calibration's timings disturbed them)."""

    def __init__(self, cost_model, time_limit: float = 300.0, progress: bool | None = None,
                 config: MeasureConfig | None = None, differences_only: bool = False, while_measuring=None):
        self.cost_model = cost_model
        self.differences_only = differences_only
        self.while_measuring = while_measuring or contextlib.nullcontext
        self.deadline = time.monotonic() + time_limit
        self.progress = progress
        self.config = config or CALIBRATION_CONFIG
        cache = cost_model.cache
        self.report = CalibrationReport(target=str(cost_model.target), db=str(cache.path) if cache else "")
        self._attempted: set[tuple] = set()
        self._seen: set[tuple] = set()
        self._shared: set[tuple] = set()  # kernels seen shared by the compared graphs
        self._measurer: MeasurePool | None = None

    def pending(self, graphs: Iterable[TensorGraph]) -> list[OpInstance]:
        """The distinct kernels of ``graphs`` with neither a measured time nor a failed attempt
        (kernels seen for the first time with a measured time count as reused)."""
        graphs = list(graphs)
        per_graph = [instances_from_graph(g) for g in graphs]
        shared: set = set()
        if self.differences_only and len(graphs) == 2:
            shared = {i.key() for i in per_graph[0]} & {i.key() for i in per_graph[1]}
        todo = []
        for inst in unique(inst for insts in per_graph for inst in insts):
            key = inst.key()
            if key in shared:
                if not self.cost_model.is_measured(inst):
                    self._shared.add(key)
                continue
            measured = self.cost_model.is_measured(inst)
            if key not in self._seen:
                self._seen.add(key)
                self.report.reused += measured
            if not measured and key not in self._attempted:
                todo.append(inst)
        return todo

    def measure(self, graphs: Iterable[TensorGraph]) -> int:
        """Measure the pending kernels of ``graphs`` (until the deadline); returns how many
        kernel times the cost model gained."""
        todo = self.pending(graphs)
        if not todo or self.report.error:
            return 0
        self.report.rounds += 1
        if time.monotonic() >= self.deadline:
            self.report.unmeasured += len(todo)
            return 0
        if self.cost_model.cache is None or self.cost_model.backend is None:
            self.report.error = "the cost model has no database or no measuring backend"
            return 0
        t0 = time.perf_counter()
        try:
            if self._measurer is None:
                model = self.cost_model
                self._measurer = MeasurePool(model.target, model.backend, self.config, model.cache,
                                             jobs=getattr(model, "jobs", None), remote=getattr(model, "remote", None),
                                             device=getattr(model, "device", "") or None,
                                             records=getattr(model, "records", None))
            with self.while_measuring():
                results = self._measurer.measure_many(todo, progress=self.progress, deadline=self.deadline,
                                                      desc="measuring kernels")
            self.report.where = self._measurer.where()
        except (BackendUnavailable, TrackerError) as e:
            self.report.error = str(e)
            return 0
        except BaseException:  # Ctrl-C: what was measured is in the database; the worker goes now
            if self._measurer is not None:
                self._measurer.close(kill=True)
                self._measurer = None
            raise
        finally:
            self.report.seconds += time.perf_counter() - t0
        times = {}
        for res in results:
            self._attempted.add(res.instance.key())
            if res.ok:
                times[res.instance.key()] = res.seconds
                if res.cached:  # written by another process since the model read the database
                    self.report.reused += 1
                else:
                    self.report.measured += 1
            else:
                self.report.failed += 1
        self.report.unmeasured += len(todo) - len(results)
        self.cost_model.add_measurements(times)
        return len(times)

    def close(self) -> CalibrationReport:
        """Stop the measuring worker and tell the user what was measured and where it is kept."""
        if self._measurer is not None:
            self._measurer.close()
            self._measurer = None
        rep = self.report
        rep.shared = len(self._shared - self._seen)  # shared in every round that saw them
        shipped = getattr(self.cost_model, "has_host_data", False)
        what = "kernels the data shipped for this CPU lacks" if shipped else "no cost data shipped for this CPU"
        if rep.measured:
            log.warning("relay-eqsat: %s (%s): %s; cached in %s, where later runs find them",
                        what, rep.target, rep.summary(), rep.db)
        elif rep.error:
            log.warning("relay-eqsat: %s (%s), and %s", what, rep.target, rep.summary())
        elif rep.rounds:
            log.info("relay-eqsat: %s", rep.summary())
        return rep
