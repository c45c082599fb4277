"""What a bench script prints and writes: tables, goal lines, JSON results (with where they were
measured), and the summary figures in them (geomean, ratios, rules used)."""
from __future__ import annotations

import json
import math
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence


def cpu_model() -> str | None:
    """The CPU's model name (/proc/cpuinfo), or None."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), None)
    except OSError:
        return None


def machine_info() -> dict:
    """Where the figures were measured."""
    import os

    info = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "argv": sys.argv, "time": time.strftime("%Y-%m-%d %H:%M:%S"),
            "TVM_NUM_THREADS": os.environ.get("TVM_NUM_THREADS"), "cpu_model": cpu_model()}
    try:
        import tvm

        from relay_eqsat.passes.runtime.build import thread_count
        from relay_eqsat.passes.runtime.target import host_target

        info["tvm"] = tvm.__version__
        info["target"] = host_target()
        threads = thread_count()
        if threads is not None:
            info["tvm_threads"] = threads
    except ImportError:
        pass
    return info


def code_version() -> dict:
    """The commit measured (``commit``) and the tracked files that differ from it (``modified``, git's
    short status; empty when none), both empty where this is not a git checkout."""
    root = Path(__file__).resolve().parent.parent

    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""
    return {"commit": git("log", "-1", "--format=%h"), "modified": git("status", "--short", "--untracked-files=no")}


# -- summary figures ------------------------------------------------------------------------------

def geomean(values: Iterable[float]) -> float | None:
    vals = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is missing or b is 0."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def rules_used(fired: Mapping[str, int]) -> tuple[int, int]:
    """(distinct rules that fired, total applications)."""
    used = [v for v in fired.values() if v]
    return len(used), int(sum(used))


# -- output ---------------------------------------------------------------------------------------

def fmt(value: Any, digits: int = 3) -> str:
    """A table cell: numbers to ``digits`` significant digits, None as '-'."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value == 0:
            return "0"
        if abs(value) >= 10 ** digits or abs(value) < 10 ** -3:
            return f"{value:.{digits - 1}e}"
        return f"{value:.{digits}g}"
    return str(value)


def ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None) -> str:
    """Print (and return) an aligned text table; cells go through :func:`fmt`."""
    cells = [[fmt(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = []
    if title:
        lines.append(title)
    lines.append("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
    lines.append("  ".join("-" * w for w in widths))
    for r in cells:
        lines.append("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))))
    text = "\n".join(lines)
    print(text, flush=True)
    return text


def error_text(e: BaseException, limit: int = 400) -> str:
    """A failure as a table cell or JSON value: the exception's type and last line."""
    lines = [ln.strip() for ln in str(e).strip().splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[-1] if lines else ''}"[:limit]


def goal(description: str, met: bool | None, detail: str = "") -> dict:
    """Print one goal line (MET / NOT MET / NOT MEASURED) and return it as a dict."""
    status = "NOT MEASURED" if met is None else ("MET" if met else "NOT MET")
    print(f"goal: {description}: {status}{' (' + detail + ')' if detail else ''}", flush=True)
    return {"goal": description, "met": met, "detail": detail}


def _jsonable(x: Any) -> Any:
    import numpy as np

    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, float) and not math.isfinite(x):
        return str(x)
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return str(x)


def write_json(path: str | Path, data: Any) -> Path:
    """Write ``data`` as JSON (numpy scalars and non-finite floats made portable)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(_jsonable(data), indent=2) + "\n")
    tmp.replace(path)
    print(f"wrote {path}", flush=True)
    return path
