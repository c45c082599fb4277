"""TVM's SimplifyExpr copies shared work at add(x, x); the pass hands back the program in its own
form (multiply(x, 2)), which TVM builds without the copies, even when nothing cheaper is found."""
from __future__ import annotations

import numpy as np
import pytest

tvm = pytest.importorskip("tvm")
from tvm import relay  # noqa: E402

from relay_eqsat.passes import EqSatPass, from_relay  # noqa: E402
from relay_eqsat.passes.relay.backend import to_relay  # noqa: E402
from relay_eqsat.passes.runtime.build import build, random_inputs, run  # noqa: E402
from relay_eqsat.passes.relay.simplify_copies import copied_ops, op_calls  # noqa: E402

pytestmark = pytest.mark.tvm

#: the pass trusting a cost model that finds nothing cheaper (this file is about what it returns)
NOTHING_CHEAPER = dict(search="none", check_runtime="off", calibrate="off", min_gain=0.0, verify=True)


def _cell(twice: bool):
    """A conv whose output is used twice, then ``add(p, p)`` of a pooled copy of it (a NasNet-A
    cell's shape) when ``twice``, else ``multiply(p, 2)``."""
    d = relay.var("d", shape=(1, 8, 8, 8))
    w = relay.const(np.random.default_rng(0).standard_normal((8, 8, 3, 3)).astype("float32"))
    x = relay.nn.relu(relay.nn.conv2d(d, w, padding=(1, 1), channels=8, kernel_size=(3, 3)))
    p = relay.nn.avg_pool2d(x, (3, 3), padding=(1, 1))
    y = relay.add(p, p) if twice else relay.multiply(p, relay.const(np.float32(2.0)))
    out = relay.concatenate([y, x], axis=1)
    z = relay.add(out, out) if twice else relay.multiply(out, relay.const(np.float32(2.0)))
    f = relay.Function([d], relay.concatenate([z, out], axis=1))
    return relay.transform.InferType()(tvm.IRModule.from_expr(f))


def test_simplify_expr_copies_shared_work_at_add_x_x():
    mod = _cell(twice=True)
    assert op_calls(mod)["nn.conv2d"] == 1
    assert copied_ops(mod) > 0  # this TVM rebuilds the shared convolution per use
    assert copied_ops(_cell(twice=False)) == 0
    # the frontend's form of the same program holds multiply(x, 2): nothing to copy
    canon = relay.transform.InferType()(tvm.IRModule.from_expr(to_relay(from_relay(mod))))
    assert op_calls(canon)["multiply"] == 2 and copied_ops(canon) == 0


def test_pass_returns_its_form_when_tvm_would_copy():
    mod = _cell(twice=True)
    eqsat = EqSatPass(**NOTHING_CHEAPER)
    out = eqsat(mod)
    report = eqsat.last_report
    assert report["changed"] and not out.same_as(mod)
    assert report["simplify_copies"][0] == copied_ops(mod) and report["simplify_copies"][1] == 0
    assert "SimplifyExpr" in report["reason"] and report["verify_error"] <= 1e-5
    assert copied_ops(out) == 0 and op_calls(out)["nn.conv2d"] == 1
    inputs = random_inputs({"d": ((1, 8, 8, 8), "float32")})
    ref, got = run(build(mod), inputs)[0], run(build(out), inputs)[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_pass_leaves_a_program_tvm_does_not_copy_alone():
    mod = _cell(twice=False)
    eqsat = EqSatPass(**NOTHING_CHEAPER)
    assert eqsat(mod).same_as(mod)
    assert not eqsat.last_report["changed"] and "simplify_copies" not in eqsat.last_report


def test_copies_counted_with_the_weights_unbound():
    """A module whose weights relay.build binds later (params=): this TVM's SimplifyExpr fails on it
    where it would copy, so the count binds stand-ins; the same count as the bound module's."""
    from relay_eqsat.passes import zoo
    from relay_eqsat.passes.relay.eqsat_pass import bind_params

    mod, params = zoo.get("nasnet_a", small=True)
    unbound = relay.transform.InferType()(mod)
    assert copied_ops(unbound) == copied_ops(bind_params(mod, params)) > 0
    assert copied_ops(relay.transform.InferType()(zoo.get("squeezenet", small=True)[0])) == 0
