"""Measuring over TVM's RPC: a real tracker and real RPC servers, started here on 127.0.0.1.

Kernels measured on every device under the key at once; a device killed mid-run, its kernels
finished by the other and the database left consistent; a tracker that is down or does not
answer, or has no device under the key (a clear error, in bounded time, exit status 2 from the
command lines); the pass on a target this process takes for another machine's, decided by
measurements on the device; a device that dies while the two programs are timed (not judged);
a device whose outputs differ (rejected); a cross-compiled target with no device (built,
decided by prediction, and the report says so).
"""
from __future__ import annotations

import json
import socket
import threading
import time

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
from tvm import relay  # noqa: E402

from relay_eqsat import ops  # noqa: E402
from relay_eqsat.cli import main as cli_main  # noqa: E402
from relay_eqsat.cost.cache import CostCache  # noqa: E402
from relay_eqsat.cost.instance import OpInstance  # noqa: E402
from relay_eqsat.cost.measure import MeasureConfig  # noqa: E402
from relay_eqsat.cost.pool import MeasurePool  # noqa: E402
from relay_eqsat.cost.tracker import Remote, TrackerError, devices, parse_address, remote_from_options  # noqa: E402
from relay_eqsat.graph import TensorType  # noqa: E402
from relay_eqsat.passes import EqSatPass, RemoteUnavailable  # noqa: E402
from relay_eqsat.passes.relay import eqsat_pass  # noqa: E402
from relay_eqsat.passes.runtime import decision  # noqa: E402
from relay_eqsat.passes.runtime.build import build, run  # noqa: E402
from relay_eqsat.passes.runtime.remote import cpu_fingerprint  # noqa: E402
from relay_eqsat.passes.runtime.target import host_target, runs_here  # noqa: E402
from relay_eqsat.testing.rpc import RpcCluster, free_port  # noqa: E402

pytestmark = pytest.mark.tvm

KEY = "relay-eqsat-test"
CONFIG = MeasureConfig(repeat=3, min_repeat_ms=2, timeout_s=60, startup_s=30)
AARCH64 = "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72"


def remote_target() -> str:
    """The host's CPU under another spelling of its triple: code that runs on the 127.0.0.1
    servers, on a target this process does not take for its own (so only RPC can measure it)."""
    return host_target().replace("x86_64-linux-gnu", "x86_64-pc-linux-gnu")


def conv(channels: int, size: int) -> OpInstance:
    ins = (TensorType((1, channels, size, size), "float32"), TensorType((channels, channels, 3, 3), "float32"))
    attrs = ops.normalize_attrs("nn.conv2d", {"channels": channels, "kernel_size": (3, 3), "padding": (1, 1, 1, 1)},
                                list(ins))
    return OpInstance("nn.conv2d", attrs, ins, TensorType((1, channels, size, size), "float32"))


def two_branches() -> tvm.IRModule:
    """Two 1x1 convolutions of one input, concatenated: the pass merges them into one."""
    rng = np.random.default_rng(0)
    x = relay.var("x", shape=(1, 32, 16, 16))
    ws = [relay.const((0.1 * rng.standard_normal((32, 32, 1, 1))).astype("float32")) for _ in range(2)]
    ys = [relay.nn.relu(relay.nn.conv2d(x, w, channels=32, kernel_size=(1, 1))) for w in ws]
    return tvm.IRModule.from_expr(relay.Function([x], relay.concatenate(ys, 1)))


def dead_address() -> str:
    """host:port where nothing listens."""
    return f"127.0.0.1:{free_port()}"


@pytest.fixture(scope="module")
def cluster():
    with RpcCluster(servers=2, key=KEY) as c:
        yield c


@pytest.fixture
def own_cluster():
    """A cluster of its own, for a test that kills one of its servers."""
    with RpcCluster(servers=2, key=KEY) as c:
        yield c


# -- the tracker -----------------------------------------------------------------------

def test_addresses_and_options_are_checked():
    assert parse_address("10.0.0.2:9190") == ("10.0.0.2", 9190)
    for bad in ("10.0.0.2", ":9190", "host:port", "host:70000"):
        with pytest.raises(ValueError):
            parse_address(bad)
    assert remote_from_options(None, None) is None
    with pytest.raises(ValueError, match="rpc_key"):
        remote_from_options("127.0.0.1:9190", None)
    with pytest.raises(ValueError, match="rpc_tracker"):
        remote_from_options(None, "k")
    with pytest.raises(ValueError, match="rpc_tracker"):
        EqSatPass(rpc_tracker="no-port")


#: how long a call that must not hang may take: a hang, not a speed (TVM's own tracker client retries
#: for minutes)
HANG_S = 30


def test_a_tracker_that_is_down_fails_at_once_naming_it():
    addr = dead_address()
    t0 = time.monotonic()
    with pytest.raises(TrackerError, match=addr.replace(".", r"\.")):
        devices(Remote(*parse_address(addr), "k"))
    assert time.monotonic() - t0 < HANG_S


def test_a_tracker_that_never_answers_fails_within_its_timeout():
    with socket.socket() as silent:  # accepts the connection, says nothing
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        host, port = silent.getsockname()
        t0 = time.monotonic()
        with pytest.raises(TrackerError, match="did not answer within 1 s"):
            devices(Remote(host, port, "k", timeout=1.0))
        assert time.monotonic() - t0 < HANG_S


def test_no_device_under_the_key_names_the_keys_there(cluster):
    with pytest.raises(TrackerError, match=f"no device under key 'other'.*{KEY}"):
        MeasurePool(remote_target(), "tvm-llvm", CONFIG, None, remote=Remote("127.0.0.1", cluster.port, "other"))


def test_a_cpu_is_told_by_what_its_remote_sends():
    x86 = "cpu:type:x86,ven0002fam001Amod0002:feature:,0000,0001"
    assert cpu_fingerprint(x86, "", "generic", 1) == "x86,ven0002fam001Amod0002, threads 1"
    assert cpu_fingerprint("cpu:type:aarch64:feature:,0001", "0x00000000410fd083\n", "cortex-a72", 4) == \
        "aarch64, midr 0x00000000410fd083, cortex-a72, threads 4"
    assert cpu_fingerprint("", "", "generic", 2) == ""


# -- kernels on every device -----------------------------------------------------------

def test_kernels_are_measured_on_both_servers(cluster, tmp_path):
    cache = CostCache(tmp_path / "costs.sqlite")
    kernels = [conv(8, 6 + i) for i in range(8)]
    with MeasurePool(remote_target(), "tvm-llvm", CONFIG, cache, remote=cluster.remote) as pool:
        assert pool.jobs == 2
        assert all(m.start() is None for m in pool.measurers)  # both sessions up before the queue opens
        results = pool.measure_many(kernels, progress=False)
    assert len(results) == len(kernels) and all(r.ok for r in results), [r.error for r in results if not r.ok]
    assert len({r.where for r in results}) == 2  # both devices measured
    device = results[0].device
    assert device and all(r.device == device for r in results) and device == pool.device
    # kept per device: the remote's rows are not this machine's
    assert cache.count(remote_target(), "tvm-llvm", device=device) == len(kernels)
    assert cache.count(remote_target(), "tvm-llvm", device="") == 0
    assert all(r.seconds > 0 for r in results)


def test_a_server_killed_mid_run_leaves_its_kernels_to_the_other(own_cluster, tmp_path):
    cache = CostCache(tmp_path / "costs.sqlite")
    kernels = [conv(16, 8 + i) for i in range(14)]
    victim = own_cluster.servers[0]
    with MeasurePool(remote_target(), "tvm-llvm", CONFIG, cache, remote=own_cluster.remote) as pool:
        first = pool.measure_many(kernels[:2], progress=False)  # both devices at work
        killer = threading.Timer(1.0, own_cluster.kill, (victim,))
        killer.start()
        results = pool.measure_many(kernels[2:], progress=False)
        killer.join()
    assert victim.poll() is not None
    assert any("went away" in n for n in pool.notes), pool.notes
    done = first + results
    assert len(done) == len(kernels) and all(r.ok for r in done), [r.error for r in done if not r.ok]
    assert {r.instance for r in done} == set(kernels)
    # the database holds each kernel once, measured, and no failure for the device's loss
    device = done[0].device
    rows = list(cache.rows(remote_target(), "tvm-llvm", device=device))
    assert sorted(r.instance.key() for r in rows) == sorted(k.key() for k in kernels)
    assert all(r.seconds > 0 for r in rows)
    assert all(cache.get_failure(k, remote_target(), "tvm-llvm", device=device) is None for k in kernels)


# -- the pass over RPC -----------------------------------------------------------------

def test_the_pass_on_a_remote_target_is_decided_on_the_device(cluster, no_host_data):
    target = remote_target()
    assert not runs_here(target)
    mod = two_branches()
    # calibrate="on": the kernels measured before the check (auto measures them only if the model's
    # pick is timed no faster)
    p = EqSatPass(target=target, rpc_tracker=cluster.address, rpc_key=KEY, calibrate="on")
    with tvm.transform.PassContext(opt_level=3):
        out = p(mod)
    rep = p.last_report
    assert rep["judged_on"]["key"] == KEY and rep["judged_on"]["tracker"] == cluster.address
    assert "127.0.0.1" in rep["judged_on"]["address"] and rep["judged_on"]["device"]
    assert f"key '{KEY}' at tracker {cluster.address}" in rep["judged_by"]
    assert "kernels and runtime measured on the device" in rep["judged_by"]
    assert "runtime_before" in rep and "measured_speedup" in rep  # timed on the device
    # both programs built here in child processes, their libraries uploaded as they were exported
    assert [b["state"] for b in rep["check_builds"]] == ["built", "built"]
    # calibration's kernels are in the database under the device, none under this machine
    cache = CostCache()
    assert cache.count(target, "tvm-llvm", device=rep["judged_on"]["device"]) > 0
    assert cache.count(target, "tvm-llvm", device="") == 0
    x = np.random.default_rng(1).standard_normal((1, 32, 16, 16)).astype("float32")
    np.testing.assert_allclose(run(build(out), {"x": x})[0], run(build(mod), {"x": x})[0], rtol=1e-4, atol=1e-5)


def input_kept_over_rpc(cluster: RpcCluster, warning: str) -> dict:
    """The pass's report on :func:`two_branches` judged on ``cluster``'s device, which kept the
    input (the module comes back unchanged) with a warning matching ``warning``."""
    mod = two_branches()
    p = EqSatPass(target=remote_target(), rpc_tracker=cluster.address, rpc_key=KEY, calibrate="off")
    with pytest.warns(UserWarning, match=warning):
        out = p(mod)
    assert out.same_as(mod)
    return p.last_report


def test_a_device_dying_while_timed_leaves_the_program_unjudged(own_cluster, no_host_data, monkeypatch):
    timed = decision.time_rounds

    def dies(*args, **kwargs):
        for proc in own_cluster.servers:
            own_cluster.kill(proc)
        return timed(*args, **kwargs)

    monkeypatch.setattr(decision, "time_rounds", dies)
    report = input_kept_over_rpc(own_cluster, warning="went away")
    assert report["reason"].startswith("not judged: the device")
    assert "runtime_after" not in report


def test_outputs_that_differ_on_the_device_are_rejected(cluster, monkeypatch):
    def wrong(graph, options):  # an "optimizer" that negates the output
        g = graph.copy() if hasattr(graph, "copy") else graph
        out = g.add("negative", [g.output], {})
        g.set_output(out)
        return g, {"changed": True, "reason": "cheaper program found", "cost_before": 2.0, "cost_after": 1.0,
                   "predicted_speedup": 2.0}

    monkeypatch.setattr(eqsat_pass, "optimize", wrong)
    report = input_kept_over_rpc(cluster, warning="different outputs")
    assert report["reason"].startswith("rejected: outputs differ")
    assert report["judged_on"]["key"] == KEY


def test_the_pass_with_a_tracker_that_is_down_raises_a_clear_error():
    with pytest.raises(RemoteUnavailable, match="cannot measure over RPC.*cannot be reached"):
        EqSatPass(target=remote_target(), rpc_tracker=dead_address(), rpc_key=KEY)(two_branches())


def test_a_cross_target_without_a_device_is_decided_by_prediction(monkeypatch):
    monkeypatch.setenv("TOPHUB_LOCATION", "NONE")  # no network here: TVM's ARM schedules look for tuned logs
    p = EqSatPass(target=AARCH64)
    out = p(two_branches())
    rep = p.last_report
    assert "cross-compiling for" in rep["judged_by"] and "no device" in rep["judged_by"]
    assert "predicted gain over" in rep["judged_by"] and "runtime_before" not in rep
    build(out, target=AARCH64)  # what the pass returns builds for the board


# -- the command lines -----------------------------------------------------------------

def test_command_lines_say_a_tracker_is_down_with_exit_status_2(tmp_path, capsys):
    addr = dead_address()
    assert cli_main(["optimize", "zoo:squeezenet", "--small", "--rpc-tracker", addr, "--rpc-key", KEY]) == 2
    assert f"RPC tracker at {addr} cannot be reached" in capsys.readouterr().err
    assert cli_main(["optimize", "zoo:squeezenet", "--small", "--rpc-tracker", addr]) == 2
    assert "needs rpc_key" in capsys.readouterr().err
    from tests.test_tvmc import parallel_conv_model

    path, _ = parallel_conv_model(tmp_path)
    code = cli_main(["tvmc", "compile", str(path), "-o", str(tmp_path / "m.tar"), "--eqsat",
                     "--eqsat-rpc-tracker", addr, "--eqsat-rpc-key", KEY])
    assert code == 2
    assert f"RPC tracker at {addr} cannot be reached" in capsys.readouterr().err
    assert not (tmp_path / "m.tar").exists()


def test_tvmc_compile_with_a_device_decides_there(cluster, tmp_path, no_host_data):
    from tests.test_tvmc import parallel_conv_model

    path, _ = parallel_conv_model(tmp_path)
    report = tmp_path / "report.json"
    code = cli_main(["tvmc", "compile", str(path), "-o", str(tmp_path / "m.tar"), "--target", remote_target(),
                     "--eqsat", "--eqsat-rpc-tracker", cluster.address, "--eqsat-rpc-key", KEY,
                     "--eqsat-report", str(report)])
    assert code == 0 and (tmp_path / "m.tar").exists()
    rep = json.loads(report.read_text())
    assert rep["judged_on"]["key"] == KEY and rep["judged_on"]["tracker"] == cluster.address
    assert "measured on the device under key" in rep["judged_by"]


def test_optimize_over_rpc_times_the_pass_programs_on_the_device_again(cluster, tmp_path, no_host_data):
    """``relay-eqsat optimize`` times the programs the pass built after the pass ended: the libraries
    its build processes exported are uploaded to the device again, not built anew."""
    from tests.test_tvmc import parallel_conv_model

    path, _ = parallel_conv_model(tmp_path)
    out = tmp_path / "report.json"
    code = cli_main(["optimize", str(path), "--target", remote_target(), "--rpc-tracker", cluster.address,
                     "--rpc-key", KEY, "--time-budget", "2", "-o", str(out)])
    assert code == 0
    result = json.loads(out.read_text())
    assert [b["state"] for b in result["report"]["check_builds"]] == ["built", "built"]
    assert result["measured_on"]["key"] == KEY and result["measured"]["equal"]
    # the input (and, kept, the result) timed again on the device from the pass's libraries
    assert result["measured"]["builds_reused"] == (2 if result["report"]["changed"] else 1)


def test_optimize_on_a_cross_target_builds_and_says_it_did_not_run(monkeypatch, capsys):
    monkeypatch.setenv("TOPHUB_LOCATION", "NONE")
    code = cli_main(["optimize", "zoo:squeezenet", "--small", "--target", AARCH64, "--calibrate", "off",
                     "--node-limit", "2000", "--final-extractor", "greedy-ocf"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "built, not run (no device here" in out and "cross-compiling" in out
