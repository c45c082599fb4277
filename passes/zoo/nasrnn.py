"""NasRNN: the recurrent cell found by neural architecture search, unrolled as in TASO's benchmark.

Input: one variable ``data`` of shape [steps*batch, hidden]; step t reads rows
[t*batch, (t+1)*batch) with ``strided_slice``. The initial state is a parameter
``h0`` of shape [1, hidden] (broadcast over the batch, as TASO's weight).

Per step, eight "combine" nodes W_i x_t + b_i + U_i h (sixteen ``nn.dense`` ops,
eight sharing x_t and eight sharing h) are mixed by add/multiply and
relu/sigmoid/tanh in the NAS cell's tree; the new state is the cell's output.
As in TASO's graph every step has its own weights (the unrolled steps are not
tied). The output is the final state [batch, hidden].
"""

from __future__ import annotations

from dataclasses import dataclass

from tvm import relay

from .layers import ParamBuilder, activation, dense


@dataclass(frozen=True)
class NasRNNConfig:
    steps: int
    hidden: int


FULL = NasRNNConfig(steps=5, hidden=512)
SMALL = NasRNNConfig(steps=2, hidden=32)

# The cell's tree: (left activation, left operand, right activation, right operand, combine op).
# Operands 0-7 are the combines, 8.. the cell's earlier intermediates (as in TASO's nasrnn.py).
_CELL = (
    ("relu", 0, "sigmoid", 3, relay.add),
    ("sigmoid", 1, "tanh", 2, relay.add),
    ("sigmoid", 4, "tanh", 5, relay.multiply),
    ("sigmoid", 6, "relu", 7, relay.multiply),
    ("sigmoid", 9, "tanh", 10, relay.add),
    ("tanh", 8, "tanh", 11, relay.multiply),
    ("tanh", 12, "tanh", 13, relay.multiply),
)


def input_shape(cfg: NasRNNConfig, batch: int) -> tuple[int, ...]:
    return (cfg.steps * batch, cfg.hidden)


def _cell(b: ParamBuilder, x, h, hidden: int):
    values = []
    for i in range(8):
        with b.scope(f"combine{i}"):
            wx = dense(b, "x", x, hidden, hidden)
            uh = dense(b, "h", h, hidden, hidden, bias=False)
        values.append(relay.add(wx, uh))
    for left_act, left, right_act, right, op in _CELL:
        values.append(op(activation(values[left], left_act), activation(values[right], right_act)))
    return relay.tanh(values[-1])


def build(b: ParamBuilder, data, cfg: NasRNNConfig, batch: int):
    h = b.normal("h0", (1, cfg.hidden), 0.5)
    for t in range(cfg.steps):
        x = relay.strided_slice(data, (t * batch, 0), ((t + 1) * batch, cfg.hidden))
        with b.scope(f"step{t}"):
            h = _cell(b, x, h, cfg.hidden)
    return h
