"""The export venv (Python 3.11: torch, torchvision, transformers, onnxruntime) that
``bench/export_onnx.py`` runs in: created when missing; models exported to ONNX (cached) and
run by onnxruntime there, the reference of ``bench/real_models.py``."""
from __future__ import annotations

import glob
import json
import os
import subprocess
from pathlib import Path
from typing import Mapping

import tables

BENCH_DIR = Path(__file__).resolve().parent
EXPORT_VENV = BENCH_DIR.parent / ".venv-export"
EXPORT_SCRIPT = BENCH_DIR / "export_onnx.py"
EXPORT_PACKAGES = ["torch==2.14.*", "torchvision==0.29.*", "transformers>=5,<6", "onnx", "onnxruntime",
                   "onnxscript"]
EXPORT_IMPORTS = "import torch, torchvision, transformers, onnx, onnxruntime, onnxscript"


def find_python311() -> str | None:
    """A Python 3.11 interpreter, looked for where the Makefile looks for 3.10."""
    candidates = ["python3.11", *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.11*/bin/python3.11"))),
                  "/usr/local/bin/python3.11", "/usr/bin/python3.11"]
    for p in candidates:
        try:
            ok = subprocess.run([p, "-c", "import sys; assert sys.version_info[:2] == (3, 11)"],
                                capture_output=True, timeout=60).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return p
    return None


def _tail(text: str, lines: int = 5) -> str:
    return " | ".join(ln.strip() for ln in text.strip().splitlines()[-lines:] if ln.strip())


def ensure_export_venv(venv: Path = EXPORT_VENV) -> Path:
    """The export venv's python, creating the venv and installing its packages when missing."""
    py = venv / "bin" / "python"
    if py.exists() and subprocess.run([str(py), "-c", EXPORT_IMPORTS], capture_output=True).returncode == 0:
        return py
    if not py.exists():
        base = find_python311()
        if base is None:
            raise RuntimeError("python3.11 not found: the export venv (torch, torchvision, transformers) needs it")
        print(f"creating {venv} with {base}", flush=True)
        subprocess.run([base, "-m", "venv", str(venv)], check=True)
    print(f"installing {' '.join(EXPORT_PACKAGES)} into {venv} (once)", flush=True)
    subprocess.run([str(py), "-m", "pip", "install", *EXPORT_PACKAGES], check=True)
    return py


def _every_cpu() -> None:
    """In the child before it runs: every CPU, not the parent's. Once TVM's runtime has started its
    thread pool at one thread it binds the process's main thread to CPU 0, and a child inherits
    that: onnxruntime asked for more threads than TVM runs would share one core."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, range(os.cpu_count() or 1))


def _run_helper(py: Path, *args: str, timeout: float = 3600) -> str:
    proc = subprocess.run([str(py), str(EXPORT_SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          preexec_fn=_every_cpu)
    if proc.returncode != 0:
        raise RuntimeError(f"export_onnx.py {args[0]} failed: {_tail(proc.stderr or proc.stdout)}")
    return proc.stdout


def export_model(py: Path, name: str, models_dir: Path) -> tuple[Path, dict]:
    """The model's ONNX file and its metadata, exporting it when not cached."""
    path = models_dir / f"{name}.onnx"
    meta = path.with_suffix(".json")
    if not (path.exists() and meta.exists()):
        print(f"{name}: exporting to {path}", flush=True)
        _run_helper(py, "export", name, str(path))
    return path, json.loads(meta.read_text())


class OrtProcess:
    """onnxruntime serving one model in the export venv (``export_onnx.py ort-serve``), so that a
    bench can interleave its timings with TVM's, round by round: ``outputs`` (its outputs on
    ``inputs``: the reference), ``info`` (its first run's seconds, threads, providers, versions),
    :meth:`time` (one timing's seconds, also kept in ``samples``). A context manager: leaving it
    ends the process."""

    def __init__(self, py: Path, onnx_path: Path, inputs: Mapping, workdir: Path, threads: int = 1,
                 min_repeat_ms: float = 200.0, start_timeout: float = 3600.0):
        import numpy as np

        stem = workdir / onnx_path.stem
        np.savez(f"{stem}_in.npz", **inputs)
        self._stderr_path = Path(f"{stem}_ort.stderr")
        self._stderr = open(self._stderr_path, "w")
        self.samples: list[float] = []
        self._proc = subprocess.Popen(
            [str(py), str(EXPORT_SCRIPT), "ort-serve", str(onnx_path), f"{stem}_in.npz", f"{stem}_out.npz",
             "--threads", str(threads), "--min-repeat-ms", str(min_repeat_ms)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True, preexec_fn=_every_cpu)
        try:
            self.info = json.loads(self._line(start_timeout))
            with np.load(f"{stem}_out.npz") as z:
                self.outputs = [z[f"output_{k}"] for k in range(len(z.files))]
        except BaseException:
            self.close()
            raise

    @property
    def first_run_s(self) -> float:
        return float(self.info["first_run_s"])

    def _line(self, timeout: float) -> str:
        import select

        ready, _, _ = select.select([self._proc.stdout], [], [], timeout)
        line = self._proc.stdout.readline() if ready else ""
        if not line and not ready:
            raise RuntimeError(f"export_onnx.py ort-serve: no answer in {timeout} s")
        if not line:  # it ended: why is on its stderr
            self._proc.wait(timeout=60)
            why = _tail(self._stderr_path.read_text()) or f"exit status {self._proc.returncode}"
            raise RuntimeError(f"export_onnx.py ort-serve: {why}")
        return line

    def time(self, timeout: float = 600.0) -> float:
        """One timing: the mean seconds of as many runs as fill ``min_repeat_ms``."""
        self._proc.stdin.write("time\n")
        self._proc.stdin.flush()
        seconds = float(self._line(timeout))
        self.samples.append(seconds)
        return seconds

    def close(self) -> None:
        if self._proc.poll() is None:
            try:
                self._proc.stdin.write("quit\n")
                self._proc.stdin.close()
                self._proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
        self._stderr.close()

    def __enter__(self) -> "OrtProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def export_versions(py: Path | None) -> dict | None:
    if py is None:
        return None
    try:
        return json.loads(_run_helper(py, "versions", timeout=300))
    except Exception as e:  # noqa: BLE001 - versions are informative only
        return {"error": tables.error_text(e)}
