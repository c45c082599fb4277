"""Progress on stderr for every step that can take long: the package's one helper.

``bar(total, desc, unit)`` counts units (iterations, e-nodes, kernels, timing rounds);
``ticking(desc, limit)`` shows the seconds a step has run, against its time limit when it has
one, updated from a thread: for steps that block in native code and report nothing while they
run (a MILP/MaxSAT solver, a TVM build, a model import).

Both are tqdm bars on stderr, shown only when stderr is a terminal unless forced
(:func:`set_enabled`, which the command line's ``--progress/--no-progress`` sets, or a call's
own ``enabled``); they appear only once a step has lasted :data:`DELAY_S` (quick steps print
nothing) and are cleared when the step ends. Log records emitted while a bar is shown go
through :class:`LogHandler`, which writes above the bars instead of through them.
"""
from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from typing import Iterator

#: a bar appears only once its step has lasted this long (seconds)
DELAY_S = 1.0
#: how often a ticking bar is redrawn (seconds)
TICK_S = 0.5

_forced: bool | None = None


def set_enabled(value: bool | None) -> bool | None:
    """Force progress bars on (True) or off (False), or back to "when stderr is a terminal"
    (None); returns the previous setting."""
    global _forced
    previous, _forced = _forced, value
    return previous


def is_enabled(explicit: bool | None = None) -> bool:
    """Whether a bar shows: ``explicit`` if given, else the forced setting, else whether stderr
    is a terminal."""
    if explicit is not None:
        return bool(explicit)
    if _forced is not None:
        return _forced
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


class NoBar:
    """What :func:`bar` returns when bars are off: the calls a step makes, doing nothing."""

    def __init__(self, total: float | None = None):
        self.total = total
        self.n = 0

    def update(self, n: float = 1) -> None:
        self.n += n

    def set_postfix(self, *args, **kwargs) -> None:
        pass

    def set_postfix_str(self, *args, **kwargs) -> None:
        pass

    def set_description_str(self, *args, **kwargs) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> "NoBar":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def bar(total: float | None = None, desc: str = "", unit: str = "it", enabled: bool | None = None, **kwargs):
    """A transient tqdm bar on stderr (a :class:`NoBar` when bars are off); ``kwargs`` go to tqdm."""
    if not is_enabled(enabled):
        return NoBar(total)
    from tqdm import tqdm

    options = dict(total=total, desc=desc, unit=unit, leave=False, delay=DELAY_S, file=sys.stderr,
                   dynamic_ncols=True)
    options.update(kwargs)
    return tqdm(**options)


@contextlib.contextmanager
def ticking(desc: str, limit: float | None = None, enabled: bool | None = None) -> Iterator[None]:
    """A bar of the seconds the ``with`` block has run ("extracting (ilp-acyc): 12/30 s"),
    redrawn every :data:`TICK_S` from a thread while the block runs."""
    if not is_enabled(enabled):
        yield
        return
    if limit:
        fmt = "{desc}: {n:.0f}/{total:.0f} s |{bar}|"
    else:
        fmt = "{desc}: {elapsed}"
    b = bar(total=limit or None, desc=desc, unit="s", enabled=True, bar_format=fmt)
    stop = threading.Event()
    start = time.monotonic()

    def tick():
        while not stop.wait(TICK_S):
            elapsed = time.monotonic() - start
            target = min(elapsed, limit) if limit else elapsed
            b.update(target - b.n)

    thread = threading.Thread(target=tick, name="relay-eqsat-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        b.close()


class LogHandler(logging.Handler):
    """Writes log records to the current ``sys.stderr``, above any progress bar shown."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
            if "tqdm" in sys.modules:
                from tqdm import tqdm

                tqdm.write(text, file=sys.stderr)
            else:
                sys.stderr.write(text + "\n")
                sys.stderr.flush()
        except Exception:  # noqa: BLE001 - logging must not raise
            self.handleError(record)
