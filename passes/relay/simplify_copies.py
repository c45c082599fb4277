"""Work TVM's SimplifyExpr copies: shared operators rebuilt once per use.

This TVM's ``relay.transform.SimplifyExpr`` (run by ``relay.build`` at every
opt level) rewrites ``add(x, x)`` to ``multiply(x, 2)`` without keeping the
program's sharing: every operator upstream of the rewrite that is also used
elsewhere comes out once per path to it. A NasNet-A cell adds a pooled input
to itself; in the small NasNet-A this turns the model's 49 convolutions into
79 and its 66 kernels into 109 (2.4x the time at one thread). The frontend
(`relay.from_relay`) already writes ``add(x, x)`` as ``multiply(x, 2)``, so
the program the pass hands back never triggers it: the pass returns that
program when its input would (`copied_ops`), even where the search found
nothing cheaper.
"""
from __future__ import annotations

import logging
from collections import Counter

import numpy as np
import tvm
from tvm import relay

log = logging.getLogger(__name__)

#: the op the rewrite itself adds (one per ``add(x, x)``): not a copy
_REWRITE_OPS = ("multiply",)


def op_calls(mod: tvm.IRModule) -> Counter:
    """Distinct operator calls of ``main``, per operator name (a shared call counts once)."""
    counts: Counter = Counter()

    def visit(e):
        if isinstance(e, relay.Call) and isinstance(e.op, tvm.ir.Op):
            counts[e.op.name] += 1
    relay.analysis.post_order_visit(mod["main"], visit)
    return counts


def adds_self(mod: tvm.IRModule) -> bool:
    """Whether ``main`` holds an ``add(x, x)`` (both operands one expression)."""
    found = []

    def visit(e):
        if (isinstance(e, relay.Call) and isinstance(e.op, tvm.ir.Op) and e.op.name == "add"
                and len(e.args) == 2 and e.args[0].same_as(e.args[1])):
            found.append(e)
    relay.analysis.post_order_visit(mod["main"], visit)
    return bool(found)


def copied_ops(mod: tvm.IRModule) -> int:
    """How many operator calls TVM's SimplifyExpr adds to ``main`` of the well-typed ``mod``
    (copies of shared work; 0 when it adds none, or when it fails). As in ``relay.build``, common
    subexpressions are eliminated first: that is what makes NasNet-A's ``add(avg_pool(p),
    avg_pool(p))`` an ``add(x, x)``. With its weights still parameters (bound later, by
    ``relay.build(..., params=)``), this TVM's SimplifyExpr fails where it would copy; they are
    bound to stand-in constants for the count."""
    try:
        with tvm.transform.PassContext(opt_level=3):
            mod = relay.transform.InferType()(relay.transform.EliminateCommonSubexpr()(mod))
            if not adds_self(mod):
                return 0
            before = op_calls(mod)
            try:
                after = op_calls(relay.transform.SimplifyExpr()(mod))
            except tvm.TVMError:  # free weight parameters: count on stand-ins
                after = op_calls(relay.transform.SimplifyExpr()(_stand_in_weights(mod)))
    except tvm.TVMError as e:  # TVM's own pass on a typed module: not expected, never fatal
        log.debug("SimplifyExpr failed while counting its copies: %s", e)
        return 0
    return sum(max(0, n - before.get(op, 0)) for op, n in after.items() if op not in _REWRITE_OPS)


def _stand_in_weights(mod: tvm.IRModule) -> tvm.IRModule:
    """``mod`` with every parameter of ``main`` but the first bound to a distinct constant of its
    type (each filled with its own value, so no two are common subexpressions)."""
    main = mod["main"]
    binds = {p: relay.const(np.full([int(d) for d in p.checked_type.shape], k + 1,
                                    dtype=p.checked_type.dtype))
             for k, p in enumerate(main.params[1:])}
    func = relay.Function(main.params[:1], relay.bind(main.body, binds), main.ret_type)
    return relay.transform.InferType()(tvm.IRModule.from_expr(func))
