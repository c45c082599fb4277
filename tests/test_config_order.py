"""The order tuning tries a convolution's configurations in (passes/runtime/config_order.py): register
tiles that fit first, several tile shapes within the first trials, by the ISA's lanes and registers;
no order for templates or targets it has no model of; tune() measures the fallback, then that order."""
from __future__ import annotations

import math

import numpy as np
import pytest
import tvm
from tvm import autotvm, relay

from relay_eqsat.passes.runtime import config_order, tuning
from relay_eqsat.passes.runtime.target import host_target
from tests.test_records import dense_relu

AVX2 = "llvm -mtriple=x86_64-linux-gnu -mcpu=znver3"
AVX512 = "llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512"


def conv_module(channels=16, out=32, size=28, kernel=3):
    x = relay.var("x", shape=(1, channels, size, size))
    w = relay.const(np.random.default_rng(0).standard_normal((out, channels, kernel, kernel)).astype("float32"))
    y = relay.nn.conv2d(x, w, padding=(kernel // 2,) * 4, channels=out, kernel_size=(kernel, kernel))
    return relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], relay.nn.relu(y))))


def conv_task(target, **kw):
    (task,) = [t.task for t in tuning.program_tasks({"m": conv_module(**kw)}, target)]
    assert task.name == "conv2d_NCHWc.x86"
    return task


def test_tile_score_prices_spills_idle_pipes_odd_vector_counts_and_partial_tiles():
    fits, spills = config_order.tile_score(8, 14, 1, 28, 8), config_order.tile_score(8, 28, 1, 28, 8)
    assert fits > spills  # 28 accumulators do not fit AVX2's 16 registers
    assert config_order.tile_score(16, 28, 1, 28, 16) > spills  # they fit AVX-512's 32
    assert config_order.tile_score(8, 2, 1, 28, 8) < config_order.tile_score(8, 7, 1, 28, 8)  # FMA pipes idle
    assert config_order.tile_score(24, 4, 1, 28, 8) < config_order.tile_score(16, 4, 1, 28, 8)  # 3 vectors
    assert config_order.tile_score(4, 7, 1, 28, 8) < config_order.tile_score(8, 7, 1, 28, 8)  # half the lanes
    assert config_order.tile_score(16, 5, 1, 28, 8) < config_order.tile_score(16, 4, 1, 28, 8)  # a partial tile


@pytest.mark.parametrize("target,lanes", [(AVX2, 8), (AVX512, 16)])
def test_a_convolutions_space_is_ordered_tiles_that_fit_first_and_several_shapes_early(target, lanes):
    task = conv_task(target)
    order = config_order.ranked(task, target)
    space = task.config_space
    assert sorted(order) == [i for i in range(space.range_length) if space.is_index_valid(i)]
    registers = 32 if lanes == 16 else 16
    shapes = []
    for index in order[:config_order.SPREAD]:
        cfg = space.get(index)
        oc_bn, columns = cfg["tile_oc"].size[-1], cfg["tile_ow"].size[-1]
        vectors = math.ceil(oc_bn / lanes)
        assert oc_bn % lanes == 0 and vectors & (vectors - 1) == 0  # every lane used, 1, 2 or 4 vectors
        assert config_order.FMA_DEPTH <= columns * vectors <= registers - vectors - 1  # fits, pipes busy
        shapes.append((oc_bn, columns))
    assert len(set(shapes)) == len(shapes)  # the first trials cover as many tile shapes
    # TVM's own choice on AVX2 (28 columns, 8 channels) spills: it comes after all of those
    if lanes == 8:
        fallback = tuning.fallback_index(task)
        assert space.get(fallback)["tile_ow"].size[-1] == 28
        assert order.index(fallback) > config_order.SPREAD


def test_no_order_where_there_is_no_model():
    assert config_order.ranked(conv_task(AVX2), "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72") is None
    dense = [t.task for t in tuning.program_tasks({"m": dense_relu()}, AVX2)]
    assert dense and all(t.name.startswith("dense") and config_order.ranked(t, AVX2) is None for t in dense)


def test_tuning_a_convolution_measures_its_fallback_then_the_ordered_configurations(tmp_path):
    target = host_target()
    if config_order.ranked(conv_task(target, size=14), target) is None:
        pytest.skip(f"no configuration order for {target}")
    (t,) = tuning.program_tasks({"m": conv_module(size=14)}, target)
    t.trials = 3
    log = tmp_path / "conv.log"
    assert tuning.tune([t], str(log), enabled=False) == 3
    measured = [i.config.index for i, _ in autotvm.record.load_from_file(str(log))]
    fallback = tuning.fallback_index(t.task)
    assert measured == [fallback, *[i for i in config_order.ranked(t.task, target) if i != fallback][:2]]
    assert all(r.error_no == 0 for _, r in autotvm.record.load_from_file(str(log)))
