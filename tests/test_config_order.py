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


def conv_tile(oc_bn, columns, width, lanes):
    vectors = math.ceil(oc_bn / lanes)
    return config_order.Tile(oc_bn, columns * vectors, vectors + columns,
                             width / (math.ceil(width / columns) * columns))


def score(oc_bn, columns, width=28, lanes=8):
    return config_order.tile_score(conv_tile(oc_bn, columns, width, lanes), lanes)


def test_tile_score_prices_spills_idle_pipes_starved_pipes_odd_vector_counts_and_partial_tiles():
    assert score(8, 14) > score(8, 28)  # 28 accumulators do not fit AVX2's 16 registers
    assert score(16, 28, lanes=16) > score(8, 28)  # they fit AVX-512's 32
    assert score(8, 2) < score(8, 7)  # FMA pipes idle
    assert score(24, 4) < score(16, 4)  # 3 vectors
    assert score(12, 4) < score(16, 4)  # one and a half
    assert score(4, 7) < score(8, 7)  # half the lanes
    assert score(16, 5) < score(16, 4)  # a partial tile
    # a dense tile of 8 rows x 1 vector loads 9 operands for 8 FMAs; 4 rows x 2 vectors 6 for 8
    assert (config_order.tile_score(config_order.Tile(8, 8, 9), 8)
            < config_order.tile_score(config_order.Tile(16, 8, 6), 8))


@pytest.mark.parametrize("target,lanes", [(AVX2, 8), (AVX512, 16)])
def test_a_convolutions_space_is_ordered_untuned_layout_first_tiles_that_fit_first_several_shapes_early(
        target, lanes):
    task = conv_task(target)
    order = config_order.ranked(task, target)
    space = task.config_space
    assert sorted(order) == [i for i in range(space.range_length) if space.is_index_valid(i)]
    blocks = config_order.untuned_blocks(space, lanes)
    assert blocks == (min(16, lanes), min(32, lanes))  # 16 channels in, 32 out: TVM's untuned choice

    def described(index):
        cfg = space.get(index)
        return (cfg["tile_ic"].size[-1], cfg["tile_oc"].size[-1]), cfg["tile_ow"].size[-1]

    # every configuration that keeps the untuned layout (no layout transform to its neighbours) comes first
    keeps = [described(i)[0] == blocks for i in order]
    assert keeps == sorted(keeps, reverse=True) and 0 < sum(keeps) < len(keeps)
    registers = 32 if lanes == 16 else 16
    widths = [described(i)[1] for i in order[:config_order.SPREAD]]
    assert len(set(widths)) == len(widths)  # the first trials cover as many tile shapes
    assert all(w <= registers - 2 for w in widths[:3])  # one vector of channels: the first three do not spill
    assert widths[0] >= config_order.FMA_DEPTH
    # TVM's own choice on AVX2 (28 columns) spills: it comes after those
    if lanes == 8:
        fallback = tuning.fallback_index(task)
        assert described(fallback)[1] == 28 and order.index(fallback) > config_order.SPREAD


def test_on_a_narrow_map_the_channel_blocks_are_ranked_with_the_tile():
    # a 1x1 convolution 64 -> 64: TVM's untuned blocks are 16 in, 16 out on AVX-512 (one vector)
    def first_blocks(size):
        task = conv_task(AVX512, channels=64, out=64, size=size, kernel=1)
        space = task.config_space
        cfg = space.get(config_order.ranked(task, AVX512)[0])
        return (cfg["tile_ic"].size[-1], cfg["tile_oc"].size[-1]), config_order.untuned_blocks(space, 16)

    wide, untuned = first_blocks(config_order.LAYOUT_COLUMNS)
    assert wide == untuned == (16, 16)  # a transform to its neighbours would cost: their layout first
    narrow, _ = first_blocks(14)
    assert narrow[1] == 32  # two vectors of output channels: the tile with the most accumulators that fit


def test_no_order_where_there_is_no_model():
    assert config_order.ranked(conv_task(AVX2), "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72") is None
    x, y = relay.var("x", shape=(2, 16, 32)), relay.var("y", shape=(2, 24, 32))
    mod = tvm.IRModule.from_expr(relay.Function([x, y], relay.nn.batch_matmul(x, y)))
    (bmm,) = [t.task for t in tuning.program_tasks({"m": relay.transform.InferType()(mod)}, AVX2)]
    assert bmm.name == "batch_matmul.x86" and config_order.ranked(bmm, AVX2) is None


@pytest.mark.parametrize("target,lanes", [(AVX2, 8), (AVX512, 16)])
def test_a_dense_space_is_ordered_by_its_register_tile(target, lanes):
    x = relay.var("x", shape=(16, 64))
    w = relay.const(np.random.default_rng(0).standard_normal((64, 64)).astype("float32"))
    mod = relay.transform.InferType()(tvm.IRModule.from_expr(relay.Function([x], relay.nn.dense(x, w))))
    tasks = {t.task.name: t.task for t in tuning.program_tasks({"m": mod}, target)}
    assert set(tasks) == {"dense_pack.x86", "dense_nopack.x86"}
    for name, task in tasks.items():
        order = config_order.ranked(task, target)
        space = task.config_space
        assert sorted(order) == [i for i in range(space.range_length) if space.is_index_valid(i)]
        first = space.get(order[0])
        width = first["tile_x" if name == "dense_pack.x86" else "tile_k"].size[-1]
        assert width % lanes == 0  # whole vectors: every lane used


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


def test_fallback_share_finds_the_untuned_tiles_that_spill():
    # AVX2, 1x1 at 28 columns: TVM's untuned tile is all 28 columns, 28 accumulators for 16 registers
    wide = conv_task(AVX2, channels=144, out=32, size=28, kernel=1)
    share = config_order.fallback_share(wide, AVX2, tuning.fallback_index(wide))
    assert 0 < share <= config_order.REGISTER_SPILL
    # 7 columns fit: the untuned tile is as good as the model's best there
    narrow = conv_task(AVX2, channels=160, out=64, size=7, kernel=1)
    assert config_order.fallback_share(narrow, AVX2, tuning.fallback_index(narrow)) > config_order.REGISTER_SPILL
    # AVX-512's 32 registers hold the 28 columns
    wide512 = conv_task(AVX512, channels=144, out=32, size=28, kernel=1)
    assert config_order.fallback_share(wide512, AVX512, tuning.fallback_index(wide512)) > config_order.REGISTER_SPILL
    # no model: no share
    assert config_order.fallback_share(wide, "llvm -mtriple=aarch64-linux-gnu", 0) is None
    assert config_order.fallback_share(wide, AVX2, None) is None
