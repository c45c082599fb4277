"""Measuring kernels on every device and core there is: a job queue its measurers pull from.

A ``MeasurePool`` owns one :class:`~relay_eqsat.cost.measure.Measurer` per place that measures:

- with a :class:`~relay_eqsat.cost.tracker.Remote` (an RPC tracker and a key), one per device
  registered under the key: each worker process takes a device from the tracker, cross-compiles
  each kernel for the target, uploads it and times it there;
- else ``jobs`` local workers (:func:`default_jobs`: two on two CPUs or more), which build in
  parallel and take turns to time (they share a lock file), so that one kernel's timing never
  shares the CPU with another's.

Every measurer runs in a thread of its own that takes the next kernel from one queue, so a fast
device measures more. Each result goes to the sqlite cost database as it arrives, keyed by the
device it was measured on. A device that goes away mid-run (its worker reports the session
lost, or stops answering) leaves the pool; the kernel it was measuring goes back on the queue for
the others, and a free device under the key, if the tracker has one, takes its place. A run
interrupted (Ctrl-C) or past its deadline keeps everything measured so far. TVM-free: the
workers import TVM.
"""
from __future__ import annotations

import os
import queue
import threading
import time
from typing import Callable, Iterable

from ..progress import bar as progress_bar
from .cache import CostCache, cache_dir, tuned_device
from .instance import GRAPH_LEVEL_OPS, OpInstance
from .measure import HARNESS_CHANGED, MeasureConfig, Measurer, MeasureResult
from .tracker import Remote, TrackerError, devices, summary

#: attempts at one kernel on devices that went away before it is given up (unmeasured, not failed)
MAX_LOST_ATTEMPTS = 3


def default_jobs() -> int:
    """Local measuring workers by default: two where this process may use two CPUs or more, else
    one. Workers take turns to time (a lock), so a second one overlaps the next kernel's build with
    this one's timing: on 2 cores that measured about 1.5x as many kernels a second, and the
    kernels' times disagreed with one worker's no more than one worker's disagreed with themselves
    measured again (docs/measuring.md; bench/rpc_measure.py). More workers help only where a
    kernel's build takes longer than its timing: ``--jobs`` asks for them."""
    return min(2, max_jobs())


def max_jobs() -> int:
    """The most local workers that make sense: one per CPU this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def timing_lock_path() -> str:
    """The lock file local workers share while timing (one per user, in the cache directory)."""
    try:
        d = cache_dir()
        d.mkdir(parents=True, exist_ok=True)
        return str(d / "timing.lock")
    except Exception:  # noqa: BLE001 - no cache directory: a temporary one
        import tempfile

        return os.path.join(tempfile.gettempdir(), f"relay-eqsat-timing-{os.getuid()}.lock")


class MeasurePool:
    """Measures kernels for one target and backend on several measurers at once.

    ``measurers``: use these (the pool does not close them); else made from the rest: with
    ``remote``, one per device the tracker has under the key (TrackerError, within the
    tracker's timeout, when it does not answer or has none); else ``jobs`` local ones (None:
    :func:`default_jobs`). ``device``: when set, only measurers whose device reports this
    identifier keep measuring (two kinds of board under one key do not mix their rows).
    ``records``: tuning records (anything with the log's ``path`` and ``digest``) every kernel is
    built under; the rows are the device's under the records (`tuned_device`), and a kernel
    they had no schedule for is its untuned row too.
    """

    def __init__(self, target=None, backend: str | None = None, config: MeasureConfig | None = None,
                 cache: CostCache | None = None, jobs: int | None = None, remote: Remote | None = None,
                 hook: Callable[[], object] | None = None, measurers: list[Measurer] | None = None,
                 device: str | None = None, records=None):
        self.config = config or MeasureConfig()
        self.cache = cache
        self.remote = remote
        self.records = records
        self.tuning = records.digest if records is not None else ""
        self.hook = hook
        self.device = device
        self.notes: list[str] = []
        self._own = measurers is None
        if measurers is not None:
            self.measurers = list(measurers)
        elif remote is not None:
            n = devices(remote)  # TrackerError: down, or no device under the key
            self.measurers = [self._remote_measurer(target, backend) for _ in range(n)]
        else:
            n = jobs if jobs is not None else default_jobs()
            lock = timing_lock_path() if n > 1 else None
            self.measurers = [Measurer(target, backend, self.config, cache, hook, timing_lock=lock,
                                       records=self._records_path) for _ in range(max(1, int(n)))]
        if not self.measurers:
            raise ValueError("a MeasurePool needs at least one measurer")
        first = self.measurers[0]
        self.target, self.backend = first.target, first.backend
        if remote is not None and device is None:
            # the first device says what it is before anything is looked up: its rows are its own
            error = first.start()
            if error is not None:
                self.close(kill=True)
                raise TrackerError(error)
            self.device = first.device

    @property
    def _records_path(self) -> str | None:
        return None if self.records is None else str(self.records.path)

    def _remote_measurer(self, target, backend) -> Measurer:
        return Measurer(target, backend, self.config, self.cache, self.hook, remote=self.remote,
                        records=self._records_path)

    @property
    def jobs(self) -> int:
        return len(self.measurers)

    def where(self) -> str:
        """Where the kernels were measured, in words."""
        if self.remote is None:
            return "this machine" + (f" ({self.jobs} workers)" if self.jobs > 1 else "")
        places = sorted({m.where for m in self.measurers if m.device})
        return f"{self.remote.describe()}" + (f": {', '.join(places)}" if places else "")

    # -- lifecycle --------------------------------------------------------------------
    def close(self, kill: bool = False) -> None:
        if self._own:
            for m in self.measurers:
                m.close(kill=kill)

    def __enter__(self) -> "MeasurePool":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(kill=exc_type is not None)

    # -- measuring --------------------------------------------------------------------
    def _split(self, instances: Iterable[OpInstance], cache: CostCache | None, skip_cached: bool,
               retry_failed: bool) -> tuple[list[MeasureResult], list[OpInstance]]:
        """(results the cache answers, instances to measure)."""
        device = self.device or ""
        rows = tuned_device(device, self.tuning)  # the rows of the kernels built as these will be
        done: list[MeasureResult] = []
        todo: list[OpInstance] = []
        for inst in instances:
            if inst.op in GRAPH_LEVEL_OPS or inst.op == "opaque":
                continue
            if cache is not None and skip_cached:
                row = cache.get(inst, self.target, self.backend, device=rows)
                if row is not None:
                    done.append(MeasureResult(inst, self.target, self.backend, row.seconds, row.repeats,
                                              cached=True, device=device))
                    continue
                if not retry_failed:
                    err = cache.get_failure(inst, self.target, self.backend, since=HARNESS_CHANGED, device=rows)
                    if err is not None:
                        done.append(MeasureResult(inst, self.target, self.backend, error=err, cached=True,
                                                  device=device))
                        continue
            todo.append(inst)
        return done, todo

    def _record(self, cache: CostCache | None, res: MeasureResult) -> None:
        if cache is None or res.lost:
            return  # a device lost is not the kernel's failure
        # under records: the device's rows under them, and its untuned row when they had no schedule
        devices = [tuned_device(res.device, self.tuning)] + ([res.device] if self.tuning and res.tuned is False else [])
        for device in devices:
            if res.ok:
                cache.put(res.instance, self.target, self.backend, res.seconds, res.repeats, device=device)
            else:
                cache.put_failure(res.instance, self.target, self.backend, res.error, device=device)

    def _replacement(self) -> Measurer | None:
        """A new measurer for a device that went away, when the tracker has a free one."""
        if self.remote is None or not self._own:
            return None
        try:
            if summary(self.remote).free(self.remote.key) < 1:
                return None
        except TrackerError:
            return None
        m = self._remote_measurer(self.target, self.backend)
        self.measurers.append(m)
        return m

    def measure_many(self, instances: Iterable[OpInstance], cache: CostCache | None = None,
                     skip_cached: bool = True, retry_failed: bool = False,
                     progress: bool | None = None, deadline: float | None = None,
                     desc: str | None = None) -> list[MeasureResult]:
        """Measure a batch on every measurer at once, writing each result to the cache as it
        arrives. Cache hits (and, unless ``retry_failed``, recorded failures) are not measured
        again; they come back with ``cached=True``. Past ``deadline`` (``time.monotonic()``) no
        new measurement starts, and kernels no device could measure (every one went away) are
        left out of the results, as are those a Ctrl-C interrupted (the exception propagates;
        the cache has the rest). The progress bar shows only when stderr is a terminal, unless
        ``progress`` says otherwise."""
        cache = cache if cache is not None else self.cache
        results, todo = self._split(instances, cache, skip_cached, retry_failed)
        jobs: queue.Queue = queue.Queue()
        for inst in todo:
            jobs.put((inst, 0))
        lock = threading.Lock()
        stop = threading.Event()
        active = [0]
        errors: list[BaseException] = []

        def take() -> tuple[OpInstance, int] | None:
            while not stop.is_set():
                if deadline is not None and time.monotonic() >= deadline:
                    return None
                try:
                    return jobs.get(timeout=0.2)
                except queue.Empty:
                    with lock:
                        if active[0] == 0 or jobs.unfinished_tasks == 0:
                            return None  # nothing queued and nobody who could requeue
            return None

        def run(measurer: Measurer | None) -> None:
            try:
                while measurer is not None:
                    job = take()
                    if job is None:
                        return
                    inst, attempts = job
                    try:
                        bar.set_postfix_str(inst.op, refresh=False)
                        res = measurer.measure(inst)
                        if self.device and res.device and res.device != self.device and not res.lost:
                            # a device of another kind under the key: its rows would be another device's
                            res.lost = True
                            measurer.lost = f"{measurer.where} is {res.device}, not {self.device}"
                        if res.lost:
                            with lock:
                                self.notes.append(f"{measurer.where}: {measurer.lost}")
                            if attempts + 1 < MAX_LOST_ATTEMPTS:
                                jobs.put((inst, attempts + 1))
                            measurer = self._replacement()
                            if measurer is None:
                                return
                            continue
                        self._record(cache, res)
                        with lock:
                            results.append(res)
                        bar.update(1)
                    finally:
                        jobs.task_done()
            except BaseException as e:  # noqa: BLE001 - handed to the calling thread
                errors.append(e)
                stop.set()
            finally:
                with lock:
                    active[0] -= 1

        with progress_bar(total=len(todo), desc=desc or f"measure {self.backend}", unit="op",
                          enabled=progress) as bar:
            if not todo:
                return results
            threads = []
            active[0] = len(self.measurers)
            for m in list(self.measurers):
                t = threading.Thread(target=run, args=(m,), daemon=True, name="relay-eqsat-measure")
                t.start()
                threads.append(t)
            try:
                for t in threads:
                    while t.is_alive():
                        t.join(0.2)
            except BaseException:  # Ctrl-C: stop taking jobs; the measurers are killed by the caller
                stop.set()
                raise
        if errors:
            raise errors[0]
        return results
