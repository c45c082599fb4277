"""Building programs in child processes (passes/runtime/builder.py): several at once, queued beyond
the slots, failures and dead processes told as BuildError, the background build's priority, and
the runtime check of the pass built there (or here, where it cannot be)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import tvm
from tvm import relay

from relay_eqsat.passes.runtime import builder as builder_mod
from relay_eqsat.passes.runtime.build import build, build_and_run, reuse_builds, run
from relay_eqsat.passes.runtime.builder import Builder, BuildError, Prebuilt, unavailable
from relay_eqsat.passes.runtime.target import host_target


def small_module(n: int = 32, seed: int = 0) -> tvm.IRModule:
    x = relay.var("x", shape=(1, n))
    w = relay.const(np.random.default_rng(seed).standard_normal((n, n)).astype("float32"))
    return relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], relay.nn.relu(relay.nn.dense(x, w)))))


X = {"x": np.random.default_rng(7).standard_normal((1, 32)).astype("float32")}


def test_programs_build_in_child_processes_at_once_and_compute_what_a_build_here_does():
    a, b = small_module(seed=1), small_module(seed=2)
    with Builder(host_target(), slots=2) as builds:
        ja, jb = builds.submit(a, "a"), builds.submit(b, "b")
        assert ja.proc is not None and jb.proc is not None and builds.running() <= 2
        assert builds.submit(a, "a again") is ja  # the same module: the same build
        pa, pb = builds.wait(ja), builds.wait(jb)
        assert isinstance(pa, Prebuilt) and pa.build_s > 0
        assert '"nodes"' in pa.get_graph_json() and len(pa.get_params()) >= 1
        for mod, built in ((a, pa), (b, pb)):
            np.testing.assert_allclose(run(built, X)[0], run(build(mod), X)[0], rtol=1e-6, atol=1e-6)
        assert [s["state"] for s in builds.summary()] == ["built", "built"]
        folder = builds._dir
    assert not os.path.exists(folder)


def test_builds_beyond_the_slots_wait_and_a_build_beside_takes_no_queue():
    mods = [small_module(seed=k) for k in range(3)]
    with Builder(host_target(), slots=1) as builds:
        first = builds.submit(mods[0], "first")
        second = builds.submit(mods[1], "second")
        assert first.proc is not None and second.proc is None  # queued
        assert builds.submit(mods[2], "beside", beside=True) is None  # no free slot: not submitted
        np.testing.assert_allclose(run(builds.wait(second), X)[0], run(build(mods[1]), X)[0], rtol=1e-6, atol=1e-6)
        assert first.finished and builds.running() == 0
        assert builds.submit(mods[2], "beside", beside=True) is not None


def test_a_failed_build_is_a_build_error_and_the_builder_goes_on(monkeypatch):
    with Builder(host_target(), slots=1) as builds:
        monkeypatch.setattr(builder_mod.tvm.ir, "save_json", lambda mod: "{not a module")
        bad = builds.submit(small_module(seed=3), "the bad one")
        with pytest.raises(BuildError, match=r"^\w+Error: "):
            builds.wait(bad)
        monkeypatch.undo()
        good = builds.submit(small_module(seed=4), "the good one")
        assert builds.wait(good).build_s > 0
        assert [s["state"] for s in builds.summary()] == ["failed", "built"]


def test_a_build_process_that_dies_is_a_build_error():
    with Builder(host_target(), slots=1) as builds:
        job = builds.submit(small_module(seed=5), "the program")
        os.kill(job.proc.pid, signal.SIGKILL)
        with pytest.raises(BuildError, match="died"):
            builds.wait(job)


def test_close_stops_running_builds():
    builds = Builder(host_target(), slots=2)
    job = builds.submit(small_module(seed=6), "the program")
    builds.close()
    assert job.proc.poll() is not None and job.cancelled and not os.path.exists(builds._dir)
    with pytest.raises(BuildError, match="cancelled"):
        builds.wait(job)


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_a_background_build_takes_only_idle_cpu():
    code = ("import os; from relay_eqsat.passes.runtime.build_worker import lower_priority; "
            "print(lower_priority(), os.sched_getscheduler(0) == os.SCHED_IDLE)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["idle", "True"]


def test_builds_in_children_need_a_target_that_runs_here_and_a_compiler(monkeypatch):
    assert unavailable(host_target()) is None
    assert "does not run on this machine" in unavailable("llvm -mtriple=aarch64-linux-gnu")
    monkeypatch.setenv("CXX", "no-such-compiler-here")
    assert "no C++ compiler" in unavailable(host_target())


def test_a_child_build_is_kept_for_reuse_builds():
    mod = small_module(seed=8)
    with Builder(host_target()) as builds, reuse_builds() as reuse:
        job = builds.submit(mod, "the program")
        built = build_and_run(mod, X, host_target(), built=lambda: builds.wait(job))
        assert built.build_s == job.result.build_s
        assert build(small_module(seed=8)) is job.result and reuse.hits == 1


def _state(pid: int, want: str | None = None) -> str:
    """The process's state letter (T: stopped), waited for up to 10 s when ``want`` is given (a
    signal is delivered after kill returns)."""
    import time

    deadline = time.monotonic() + 10
    while True:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        if want is None or state == want or time.monotonic() > deadline:
            return state
        time.sleep(0.01)


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads Linux's /proc")
def test_background_builds_stop_while_kernels_are_timed():
    """Calibration's timings are disturbed even by an idle-priority build beside them: the pass
    stops its background builds while it measures; they go on after, and finish."""
    mod = small_module(seed=9)
    with Builder(host_target(), slots=2) as builds:
        back = builds.submit(mod, "the input", background=True)
        front = builds.submit(small_module(seed=10), "the result")
        with builds.paused():
            assert _state(back.proc.pid, "T") == "T" and _state(front.proc.pid) != "T"
        assert back.proc.poll() is not None or _state(back.proc.pid) != "T"
        np.testing.assert_allclose(run(builds.wait(back), X)[0], run(build(mod), X)[0], rtol=1e-6, atol=1e-6)


def test_a_build_for_another_architecture_is_exported_for_its_device(monkeypatch):
    """For an RPC device of another architecture the library is linked by ``<triple>-g++`` when
    there is one, else left as object files in a tar that the device links."""
    import shutil

    monkeypatch.setenv("TOPHUB_LOCATION", "NONE")  # ARM schedules ask TopHub; offline here
    target = "llvm -mtriple=aarch64-linux-gnu"
    assert unavailable(target, remote=True) is None and unavailable(target) is not None
    with Builder(target, slots=1) as builds:
        built = builds.wait(builds.submit(small_module(seed=11), "the program"))
        cross = shutil.which("aarch64-linux-gnu-g++")
        assert built.path.endswith(".so" if cross else ".tar") and os.path.getsize(built.path) > 0


def test_a_built_library_outlives_its_builder_and_goes_with_the_program():
    """``relay-eqsat optimize`` uploads the pass's programs to a device after the pass (and its
    builder) ended: a built library stays as long as its program is referenced."""
    import gc

    with Builder(host_target(), slots=1) as builds:
        built = builds.wait(builds.submit(small_module(seed=12), "the program"))
    path = built.path
    assert os.path.exists(path) and not os.path.exists(builds._dir)
    del built, builds  # the builder's record of the build holds it too
    gc.collect()
    assert not os.path.exists(path)
