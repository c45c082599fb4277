"""What TVM's x86 schedules do with odd channel counts, and that every cost model kind knows it.

TVM's fallback conv2d schedule blocks channels by the largest divisor of the
channel count within the SIMD width (``relay_eqsat/cost/simd.py``), so on an
AVX-512 CPU a 1x1 convolution with 58 channels runs 2-wide and takes 4x longer
than one with 64 (docs/design-notes.md, "Rules that pay on a CPU"). These tests check the
lane facts per target (against TVM itself where it is installed), the blocks,
and that the auto, learned and analytic cost models rank the odd shapes above
the padded ones on x86 targets, and leave GPU targets alone.
"""
from __future__ import annotations

import logging

import numpy as np
import pytest

from relay_eqsat.cost import AnalyticModel, CostModel, OpInstance
from relay_eqsat.cost.learned import FEATURE_NAMES, LearnedCostModel, baseline, feature_matrix
from relay_eqsat.cost.simd import channel_blocks, conv_kind, is_x86, lane_efficiency, simd_lanes
from relay_eqsat.graph import TensorType

SPR = "llvm -mtriple=x86_64-linux-gnu -mcpu=sapphirerapids"
ZNVER4 = "llvm -mtriple=x86_64-linux-gnu -mcpu=znver4"
ZNVER3 = "llvm -mtriple=x86_64-linux-gnu -mcpu=znver3"
HASWELL = "llvm -mtriple=x86_64-linux-gnu -mcpu=haswell"
AVX512_TARGETS = (SPR, ZNVER4, "llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512")
AVX2_TARGETS = (ZNVER3, HASWELL)

LANES = [
    (SPR, 16), (ZNVER4, 16), ("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake-avx512", 16),
    ("llvm -mtriple=x86_64-linux-gnu -mcpu=cascadelake", 16), ("llvm -mtriple=x86_64-linux-gnu -mcpu=cooperlake", 16),
    ("llvm -mtriple=x86_64-linux-gnu -mcpu=icelake-server", 16), ("llvm -mtriple=x86_64-linux-gnu -mcpu=tigerlake", 16),
    ("llvm -mcpu=znver4 -mtriple=x86_64-linux-gnu", 16), ("llvm -mcpu=sapphirerapids", 16),
    (HASWELL, 8), (ZNVER3, 8), ("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake", 8),
    ("llvm -mtriple=x86_64-linux-gnu -mcpu=znver1", 8), ("llvm -mtriple=x86_64-linux-gnu -mcpu=core-avx2", 8),
    ("llvm -mtriple=x86_64-linux-gnu -mcpu=alderlake", 8),
    ("llvm -mtriple=x86_64-linux-gnu -mcpu=knl", 8),  # AVX-512 F without BW: TVM says 8
    ("llvm -mtriple=x86_64-linux-gnu -mcpu=sandybridge", 4), ("llvm -mtriple=x86_64-linux-gnu", 4),
    ("llvm -mtriple=x86_64-linux-gnu -mattr=+avx512bw", 16),
    ("llvm -mtriple=x86_64-linux-gnu -mattr=+avx512f", 8),  # as TVM: it asks for BW and F
    ("llvm -mtriple=x86_64-linux-gnu -mattr=+avx2", 8),
    ("llvm -mtriple=x86_64-linux-gnu -mcpu=haswell -mattr=+avx512f,+avx512bw", 16),
    ("llvm -mtriple=x86_64-linux-gnu -mcpu=sapphirerapids -mattr=-avx512bw", 8),
    ("llvm -mtriple=x86_64-linux-gnu -mcpu=znver4 -mattr=-avx512f", 8),
    ("llvm -mtriple=x86_64-linux-gnu -mcpu=skylake -mattr=-avx2", 4),
    ("cuda", None), ("cuda -arch=sm_80", None), ("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1", None),
    ("llvm", None), (None, None), ("", None),
]


def conv(cin, cout, hw, k=1, groups=1, dtype="float32", dilation=1) -> OpInstance:
    p = k // 2 * dilation
    attrs = dict(strides=(1, 1), padding=(p, p, p, p), dilation=(dilation, dilation), groups=groups,
                 data_layout="NCHW", kernel_layout="OIHW", out_dtype="")
    return OpInstance.make("nn.conv2d", attrs, [TensorType((1, cin, hw, hw), dtype),
                                               TensorType((cout, cin // groups, k, k), dtype)])


def block(cin, cmid, cout, hw) -> list[OpInstance]:
    """ShuffleNet-v2's branch: conv 1x1, depthwise 3x3, conv 1x1."""
    return [conv(cin, cmid, hw), conv(cmid, cmid, hw, 3, groups=cmid), conv(cmid, cout, hw)]


def kernel_seconds(cm: CostModel, insts) -> float:
    return sum(cm.kernel_cost(i.op, i.attrs, i.input_types, i.out_type) for i in insts)


def node_seconds(cm: CostModel, insts) -> float:
    return sum(cm.op_cost(i.op, i.attrs, i.input_types, i.out_type) for i in insts)


@pytest.fixture(autouse=True)
def _shipped_models_only(tmp_path, monkeypatch):
    """No user model or measurement: the shipped data decide."""
    monkeypatch.setenv("RELAY_EQSAT_MODEL_DIR", str(tmp_path / "models"))
    for var in ("RELAY_EQSAT_IGNORE_SHIPPED", "RELAY_EQSAT_TARGET", "RELAY_EQSAT_PEAK_GFLOPS",
                "RELAY_EQSAT_BANDWIDTH_GBS", "RELAY_EQSAT_LAUNCH_US"):
        monkeypatch.delenv(var, raising=False)
    logging.getLogger("relay_eqsat.cost.base").setLevel(logging.ERROR)  # "another CPU's model"


# -- lane facts ----------------------------------------------------------------------------

@pytest.mark.parametrize("target,lanes", LANES)
def test_simd_lanes(target, lanes):
    assert simd_lanes(target) == lanes
    assert is_x86(target) == (lanes is not None)


@pytest.mark.tvm
def test_simd_lanes_agree_with_tvm():
    """What ``tvm.target.x86.get_simd_32bit_lanes`` answers, for every x86 CPU this LLVM knows
    and the -mattr cases of the table."""
    tvm = pytest.importorskip("tvm")
    from tvm.target.x86 import get_simd_32bit_lanes

    triple = "llvm -mtriple=x86_64-linux-gnu"
    cpus = tvm.target.codegen.llvm_get_cpu_archlist(tvm.target.Target(triple))
    targets = [f"{triple} -mcpu={c}" for c in cpus]
    targets += [t for t, lanes in LANES if lanes is not None and "-mtriple=x86_64" in str(t)]
    assert len(targets) > 50
    wrong = []
    for t in targets:
        with tvm.target.Target(t):
            want = get_simd_32bit_lanes()
        if simd_lanes(t) != want:
            wrong.append((t, simd_lanes(t), want))
    assert not wrong, f"(target, ours, TVM's): {wrong[:5]}"


def test_channel_blocks():
    assert channel_blocks(*_args(conv(58, 58, 28)), 16) == (2, 2)
    assert channel_blocks(*_args(conv(64, 64, 28)), 16) == (16, 16)
    assert channel_blocks(*_args(conv(58, 64, 28)), 16) == (2, 16)  # ic_bn divides cin, at most oc_bn
    assert channel_blocks(*_args(conv(64, 58, 28)), 16) == (2, 2)
    assert channel_blocks(*_args(conv(116, 116, 14)), 16) == (4, 4)
    assert channel_blocks(*_args(conv(116, 116, 14)), 8) == (4, 4)
    assert channel_blocks(*_args(conv(24, 24, 14)), 16) == (12, 12)
    assert channel_blocks(*_args(conv(24, 24, 14)), 8) == (8, 8)
    assert channel_blocks(*_args(conv(3, 64, 56, 7)), 16) == (3, 16)
    assert channel_blocks(*_args(conv(58, 58, 28, 3, groups=58)), 16) == (2, 2)  # depthwise
    assert channel_blocks(*_args(conv(232, 232, 28, 3, groups=232)), 16) == (8, 8)
    assert channel_blocks(*_args(conv(128, 128, 28, 3, groups=32)), 16) == (4, 4)  # per group
    assert channel_blocks(*_args(conv(116, 116, 28, 3, groups=2)), 16) == (2, 2)
    assert conv_kind(*_args(conv(58, 58, 28, 3, groups=58))) == "depthwise"
    assert conv_kind(*_args(conv(128, 128, 28, 3, groups=32))) == "group"
    # no lane effect: no lanes, another dtype, a dilated depthwise (TVM's generic schedule), other ops
    assert channel_blocks(*_args(conv(58, 58, 28)), None) is None
    assert channel_blocks(*_args(conv(58, 58, 28, dtype="float16")), 16) is None
    assert channel_blocks(*_args(conv(58, 58, 28, 3, groups=58, dilation=2)), 16) is None
    dense = OpInstance.make("nn.dense", {"out_dtype": ""}, [TensorType((1, 58)), TensorType((58, 58))])
    assert channel_blocks(*_args(dense), 16) is None and lane_efficiency(*_args(dense), 16) == 1.0


def _args(inst):
    return inst.op, inst.attrs, inst.input_types


def test_lane_efficiency_shape():
    """1 for full blocks, less for narrower ones, falling with the block, never above 1."""
    kinds = {"conv": (lambda c: conv(c, c, 28), (128, 232, 116, 58)),
             "depthwise": (lambda c: conv(c, c, 28, 3, groups=c), (128, 232, 116, 58)),
             "group": (lambda c: conv(c, c, 28, 3, groups=2), (256, 464, 232, 116))}
    for kind, (make, chans) in kinds.items():
        effs = [lane_efficiency(*_args(make(c)), 16) for c in chans]  # blocks 16, 8, 4, 2
        assert [channel_blocks(*_args(make(c)), 16)[1] for c in chans] == [16, 8, 4, 2], kind
        assert effs[0] == 1.0 and 1.0 >= effs[1] >= effs[2] >= effs[3] > 0 and effs[3] < 1.0, (kind, effs)
    assert lane_efficiency(*_args(conv(58, 58, 28)), None) == 1.0


# -- the cost models -----------------------------------------------------------------------

@pytest.mark.parametrize("target", AVX512_TARGETS)
@pytest.mark.parametrize("kind", ("auto", "learned", "analytic"))
def test_odd_channels_cost_more_on_avx512(kind, target):
    """58 and 116 channels (2- and 4-wide blocks) cost more than 64 and 128 despite fewer FLOPs,
    and ShuffleNet's block is cheaper with its middle padded to 64 (or all of it)."""
    cm = CostModel(kind, target=target)
    assert kernel_seconds(cm, [conv(58, 58, 28)]) > 1.5 * kernel_seconds(cm, [conv(64, 64, 28)])
    assert kernel_seconds(cm, [conv(116, 116, 14)]) > 1.5 * kernel_seconds(cm, [conv(128, 128, 14)])
    for cost in (kernel_seconds, node_seconds):
        assert cost(cm, block(58, 58, 58, 28)) > cost(cm, block(58, 64, 58, 28))
        assert cost(cm, block(58, 58, 58, 28)) > cost(cm, block(64, 64, 64, 28))
        assert cost(cm, block(116, 116, 116, 14)) > cost(cm, block(116, 128, 116, 14))
        assert cost(cm, block(116, 116, 116, 14)) > cost(cm, block(128, 128, 128, 14))


@pytest.mark.parametrize("target", AVX2_TARGETS)
@pytest.mark.parametrize("kind", ("auto", "learned", "analytic"))
def test_odd_channels_cost_more_on_avx2(kind, target):
    """With 8 lanes 58 channels still run 2-wide and 116 4-wide (bench/channel_blocks.py
    --target ...haswell measured it on AVX2 code)."""
    cm = CostModel(kind, target=target)
    assert kernel_seconds(cm, [conv(58, 58, 28)]) > 1.2 * kernel_seconds(cm, [conv(64, 64, 28)])
    assert kernel_seconds(cm, [conv(116, 116, 14)]) > 1.2 * kernel_seconds(cm, [conv(128, 128, 14)])
    assert node_seconds(cm, block(58, 58, 58, 28)) > node_seconds(cm, block(64, 64, 64, 28))


@pytest.mark.parametrize("kind", ("auto", "analytic"))
def test_gpu_targets_unaffected(kind):
    """On cuda the costs follow the FLOPs: no lane penalty, the bigger convolution costs more."""
    cm = CostModel(kind, target="cuda", backend="tvm-cuda")
    assert cm.analytic.lanes is None
    assert kernel_seconds(cm, [conv(58, 58, 28)]) <= kernel_seconds(cm, [conv(64, 64, 28)])
    assert AnalyticModel.for_target("cuda").lanes is None


def test_baseline_follows_the_lanes():
    """The learned models' roofline baseline is divided by the lane efficiency; the tree
    features do not depend on the target (7 x 7 outputs: tiles of 7 columns, no spill on AVX2)."""
    insts = [conv(58, 58, 7), conv(64, 64, 7), conv(58, 64, 7), conv(58, 58, 7, 3, groups=58)]
    b16, b8, b0 = baseline(insts, 16), baseline(insts, 8), baseline(insts, None)
    assert b16[0] > b8[0] > b0[0] and b16[3] > b0[3]
    assert b16[1] == b8[1] == b0[1] and b16[2] == b0[2]  # full output blocks
    assert feature_matrix(insts).shape == (4, len(FEATURE_NAMES))


def test_learned_prediction_uses_the_target_lanes():
    """A model predicts for the target it is asked about: the same conv is slower where it runs
    2-wide of 16 than 2-wide of 8 (the baseline's efficiency), and not slowed on a GPU target.
    A model trained on the v1 baseline keeps predicting with it."""
    from relay_eqsat.cost.learned import BASELINE_V1

    model = CostModel("learned", target=SPR).learned
    c = conv(58, 58, 7)  # 7 x 7: a tile of 7 columns, no spill on AVX2
    t16, t8, t_gpu = (model.predict([c], target=t)[0] for t in (SPR, HASWELL, "cuda"))
    assert t16 > t8 > t_gpu
    full = conv(64, 64, 7)  # full blocks on both: the same features, the same prediction
    assert model.predict([full], target=SPR)[0] == model.predict([full], target=HASWELL)[0]
    v1 = LearnedCostModel(model.model, dict(model.meta, baseline=BASELINE_V1))
    assert v1.predict([c], target=SPR)[0] == pytest.approx(t_gpu, rel=1e-12)


def test_shipped_models_are_current():
    """Every shipped model predicts the ratio to the current baseline and carries its refitted fusion
    weights."""
    from relay_eqsat.cost.learned import BASELINE, FEATURE_VERSION, SHIPPED_DIR

    files = sorted(SHIPPED_DIR.glob("*.json"))
    assert files
    for f in files:
        m = LearnedCostModel.load(f)
        assert m.meta["feature_version"] == FEATURE_VERSION and m.meta["baseline"] == BASELINE
        assert m.meta.get("fusion") and m.meta.get("whole_graph_error") is not None


def test_stale_user_model_is_passed_over(tmp_path, monkeypatch, caplog):
    """A model trained here on other features is skipped with a warning, not an error."""
    import json

    from relay_eqsat.cost.learned import default_model_path, load_model, model_dir, model_filename

    shipped = json.loads(default_model_path("tvm-llvm").read_text())
    meta = json.loads(shipped["learner"]["attributes"]["relay_eqsat"])
    meta["feature_version"] = 0
    shipped["learner"]["attributes"]["relay_eqsat"] = json.dumps(meta)
    path = model_dir() / model_filename(SPR, "tvm-llvm")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(shipped))
    with caplog.at_level(logging.WARNING, logger="relay_eqsat.cost.learned"):
        m = load_model(SPR, "tvm-llvm")
    assert m is not None and m.meta["feature_version"] != 0
    assert "feature version 0" in caplog.text


@pytest.mark.tvm
def test_retrain_shipped_rewrites_the_shipped_model(tmp_path, monkeypatch, capsys):
    """``relay-eqsat measure --retrain-shipped`` retrains the model shipped for a target from the
    measurements shipped for it (nothing measured), refits its fusion weights and writes it over
    the shipped file; a target with nothing shipped is an error."""
    pytest.importorskip("tvm")
    import argparse
    import gzip
    import json

    from relay_eqsat.cost import cache as cache_mod, learned as learned_mod
    from relay_eqsat.cost.cache import CostCache, shipped_samples, shipped_table_path
    from relay_eqsat.passes.cli import measure as cli

    monkeypatch.setattr(cache_mod, "SHIPPED_MEASUREMENTS", tmp_path)
    monkeypatch.setattr(learned_mod, "SHIPPED_DIR", tmp_path)
    target = "llvm -mcpu=skylake-avx512 -mtriple=x86_64-linux-gnu"
    rng = np.random.default_rng(0)
    roofline = AnalyticModel()
    insts = [conv(c, o, hw, k) for c in (16, 58, 64) for o in (24, 58, 64) for hw in (7, 14) for k in (1, 3)]
    cache = CostCache(tmp_path / "c.sqlite")
    for i in insts:
        cache.put(i, target, "tvm-llvm", roofline.kernel_cost(i.op, i.attrs, i.input_types, i.out_type)
                  * rng.uniform(0.8, 1.25), 3)
    with gzip.open(shipped_table_path(target, "tvm-llvm"), "wt") as f:
        json.dump(cache.export_rows(target, "tvm-llvm"), f)
    assert len(shipped_samples(target, "tvm-llvm")) == len(insts)
    old, _ = LearnedCostModel.train(shipped_samples(target, "tvm-llvm"), target, "tvm-llvm", rounds=5)
    old.meta["shipped"] = True
    old.save(learned_mod.default_model_path("tvm-llvm"))
    times = tmp_path / "times.json"
    times.write_text(json.dumps({"zoo:squeezenet": 2e-3, "zoo:nasrnn": 1e-3}))
    parser = argparse.ArgumentParser(prog="relay-eqsat")
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["measure", "--target", target, "--retrain-shipped", "--small",
                              "--models", "zoo:squeezenet,zoo:nasrnn", "--whole-times", str(times)])
    assert args.func(args) == 0
    text = capsys.readouterr().out
    assert "retrained: trained on 36 rows" in text and "fusion rule fit on 2 graphs" in text
    new = LearnedCostModel.load(learned_mod.default_model_path("tvm-llvm"))
    assert new.meta["shipped"] and new.meta["rounds"] == 400 and new.meta["fusion"]
    assert new.meta["whole_graph_error"] == round(new.meta["whole_graph_error"], 3)
    assert CostCache(tmp_path / "c.sqlite").count() == len(insts)  # nothing measured
    args = parser.parse_args(["measure", "--target", "llvm -mtriple=x86_64-linux-gnu -mcpu=znver1",
                              "--retrain-shipped"])
    assert args.func(args) == 1
    assert "no model is shipped" in capsys.readouterr().err


# -- output-width blocks and row tiles (simd.schedule_efficiency) ---------------------------

def _wide_conv(width, k=3):
    """A conv k x k 64->64 on 8 rows whose output is ``width`` columns wide."""
    attrs = dict(strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1,
                 data_layout="NCHW", kernel_layout="OIHW", out_dtype="")
    return OpInstance.make("nn.conv2d", attrs, [TensorType((1, 64, 8 + k - 1, width + k - 1), "float32"),
                                               TensorType((64, 64, k, k), "float32")])


def _dense(rows, k=768, n=3072):
    return OpInstance.make("nn.dense", {"out_dtype": ""}, [TensorType((rows, k), "float32"),
                                                           TensorType((n, k), "float32")])


def _eff(inst, lanes=16):
    from relay_eqsat.cost.simd import schedule_efficiency
    return schedule_efficiency(inst.op, inst.attrs, inst.input_types, inst.out_type, lanes)


def test_schedule_efficiency_blocks_and_tiles():
    from relay_eqsat.cost.simd import row_tile, width_block
    assert width_block(*_args(_wide_conv(71)), _wide_conv(71).out_type) == 1
    assert width_block(*_args(_wide_conv(72)), _wide_conv(72).out_type) == 24
    assert width_block(*_args(_wide_conv(71, k=1)), _wide_conv(71, k=1).out_type) is None  # 1x1: no effect
    assert [row_tile(*_args(_dense(m))) for m in (197, 200, 50, 64, 1)] == [1, 8, 2, 8, 1]
    assert _eff(_wide_conv(71)) < _eff(_wide_conv(148)) < _eff(_wide_conv(72)) == 1.0
    assert _eff(_dense(197)) < _eff(_dense(50)) < _eff(_dense(200)) == 1.0
    assert _eff(_dense(197), lanes=None) == 1.0 and _eff(_wide_conv(71), lanes=None) == 1.0


def _stem(cin, width=109, k=7):
    """A conv k x k cin->96 with stride 2 whose output is ``width`` columns wide (SqueezeNet's
    3-channel stem: 109, prime, one column at a time)."""
    attrs = dict(strides=(2, 2), padding=(0, 0, 0, 0), dilation=(1, 1), groups=1,
                 data_layout="NCHW", kernel_layout="OIHW", out_dtype="")
    side = 2 * (width - 1) + k
    return OpInstance.make("nn.conv2d", attrs, [TensorType((1, cin, side, side), "float32"),
                                               TensorType((96, cin, k, k), "float32")])


def test_width_blocks_count_the_chains_the_cpu_overlaps():
    """One column at a time, a short accumulation chain (3 channels x 3x3: 27 FMAs) overlaps with the
    next columns' and runs near full speed; a long one (64 x 3x3) alone: v4 of the baseline counts it,
    v2 and v3 (``chains=False``) do not, and the column blocks of full width are unaffected."""
    from relay_eqsat.cost.simd import WIDTH_BLOCK, chain_length, chain_width, schedule_efficiency

    def eff(inst, chains=True):
        return schedule_efficiency(inst.op, inst.attrs, inst.input_types, inst.out_type, 16, chains=chains)

    assert chain_length(_stem(3).input_types) == 147 and chain_length(_wide_conv(71).input_types) == 576
    assert chain_width(1, 27) > 2 * chain_width(1, 576) and chain_width(8, 576) > 8
    short, mid, long = _stem(3, k=3), _stem(3), _wide_conv(71)
    assert eff(short) > eff(mid) > eff(long) > eff(long, chains=False) == (1 / 8) ** WIDTH_BLOCK[1]
    assert eff(short, chains=False) == eff(mid, chains=False) == (1 / 8) ** WIDTH_BLOCK[1]  # 96 channels: full lanes
    assert eff(_wide_conv(72)) == eff(_wide_conv(72), chains=False) == 1.0  # 24 columns: full speed either way
    # the learned models keep the baseline they were trained on
    from relay_eqsat.cost.learned import BASELINE, BASELINE_V3, lane_efficiencies
    assert lane_efficiencies([mid], 16, BASELINE)[0] == eff(mid)
    assert lane_efficiencies([mid], 16, BASELINE_V3)[0] == eff(mid, chains=False)


def test_dense_column_blocks():
    """A dense's output columns are blocked by their largest divisor up to twice the lanes (TVM's
    _default_dense_pack_config): multiples of the lanes run at full speed, smaller blocks in partial
    vectors, blocks between the lanes and twice them (N = 1000: 25) far slower, less so on few rows."""
    from relay_eqsat.cost.simd import column_block, column_efficiency, row_tile

    blocks = {n: column_block(*_args(_dense(128, n=n)), 16) for n in (3072, 1000, 48, 49, 197, 224, 64, 16)}
    assert blocks == {3072: 32, 1000: 25, 48: 24, 49: 7, 197: 1, 224: 32, 64: 32, 16: 16}
    assert column_block(*_args(_dense(128, n=48)), 8) == 16  # AVX2: blocks up to 16
    assert column_block(*_args(_dense(128, n=48)), None) is None
    conv = _wide_conv(72)
    assert column_block(conv.op, conv.attrs, conv.input_types, 16) is None
    eff = {n: _eff(_dense(128, n=n)) for n in (1024, 1000, 48, 49, 197)}
    assert eff[1024] == 1.0 and eff[1000] < eff[197] < eff[49] < 1.0
    assert eff[1000] == pytest.approx(0.02) and eff[48] == eff[1000]
    # the split-block slowdown shrinks with the row tile (measured 0.02 at 8 rows, 0.13 at 2)
    assert column_efficiency(25, 8, 16) < column_efficiency(25, 2, 16) < column_efficiency(25, 1, 16) <= 1.0
    assert [row_tile(*_args(_dense(m))) for m in (8, 2)] == [8, 2]
    # baseline v2's efficiency leaves the column blocks out
    from relay_eqsat.cost.simd import schedule_efficiency
    d = _dense(128, n=1000)
    assert schedule_efficiency(d.op, d.attrs, d.input_types, d.out_type, 16, columns=False) == 1.0


@pytest.mark.parametrize("kind", ["auto", "learned", "analytic"])
def test_cost_models_price_padding_to_the_tile_cheaper(kind):
    """ViT's 197-token dense (measured 64.9 ms) against the same on 200 rows (11.3 ms),
    Inception-v3's 71-wide conv against the 72-wide one that replaces it, and a 1000-wide dense
    on 128 rows (57.2 ms) against a 1024-wide one (1.23 ms): dearer on x86."""
    for target in AVX512_TARGETS + AVX2_TARGETS:
        cm = CostModel(kind, target=target)
        try:
            for odd, padded in ((_dense(197), _dense(200)), (_wide_conv(71), _wide_conv(72)),
                                (_dense(128, n=1000), _dense(128, n=1024))):
                assert cm.kernel_cost(odd.op, odd.attrs, odd.input_types, odd.out_type) > \
                    1.5 * cm.kernel_cost(padded.op, padded.attrs, padded.input_types, padded.out_type), (kind, target)
        finally:
            cm.close()


# -- register tiles (simd.accumulators, register_efficiency; baseline v5) -------------------

def _tile_conv(h, w, k, c=64, pad=None):
    """A conv k x k c->c whose output is h x w (padding k // 2 unless ``pad``)."""
    p = k // 2 if pad is None else pad
    attrs = dict(strides=(1, 1), padding=(p, p, p, p), dilation=(1, 1), groups=1,
                 data_layout="NCHW", kernel_layout="OIHW", out_dtype="")
    return OpInstance.make("nn.conv2d", attrs, [TensorType((1, c, h + k - 1 - 2 * p, w + k - 1 - 2 * p), "float32"),
                                               TensorType((c, c, k, k), "float32")])


TILE_SHAPES = [(28, 28, 3), (28, 56, 3), (28, 14, 3), (14, 14, 3), (7, 7, 3), (27, 27, 3), (55, 55, 3),
               (14, 14, 1), (14, 7, 1), (28, 28, 1), (28, 7, 1), (9, 9, 1), (16, 8, 1), (13, 7, 1), (27, 27, 1),
               (55, 55, 1), (15, 15, 1), (7, 7, 1)]


def test_accumulators_of_the_fallback_tiles():
    """A 3x3 tile is its width block (largest divisor up to 31), a 1x1 one ow x oh below 32; on AVX2
    a tile above 14 spills (0.65 of the speed), on AVX-512 none of these does; not a convolution or
    not x86: no effect."""
    from relay_eqsat.cost.simd import REGISTER_SPILL, accumulators, register_efficiency

    acc = {(h, w, k): accumulators(*_args(_tile_conv(h, w, k)), _tile_conv(h, w, k).out_type, 8)
           for h, w, k in TILE_SHAPES}
    assert acc == {(28, 28, 3): 28, (28, 56, 3): 28, (28, 14, 3): 14, (14, 14, 3): 14, (7, 7, 3): 7,
                   (27, 27, 3): 27, (55, 55, 3): 11, (14, 14, 1): 28, (14, 7, 1): 14, (28, 28, 1): 28,
                   (28, 7, 1): 28, (9, 9, 1): 27, (16, 8, 1): 16, (13, 7, 1): 7, (27, 27, 1): 27,
                   (55, 55, 1): 11, (15, 15, 1): 15, (7, 7, 1): 7}
    for (h, w, k), a in acc.items():
        inst = _tile_conv(h, w, k)
        assert register_efficiency(*_args(inst), inst.out_type, 8) == (REGISTER_SPILL if a > 14 else 1.0)
        assert register_efficiency(*_args(inst), inst.out_type, 16) == 1.0
        assert register_efficiency(*_args(inst), inst.out_type, None) == 1.0
    d = _dense(128)
    assert accumulators(*_args(d), d.out_type, 8) is None and register_efficiency(*_args(d), d.out_type, 8) == 1.0
    dw = conv(64, 64, 28, k=3, groups=64)
    assert accumulators(*_args(dw), dw.out_type, 8) is None


@pytest.mark.tvm
def test_accumulators_agree_with_tvm():
    """The tiles TVM's own fallback (``topi.x86.conv2d._get_default_config``) picks, on an AVX2
    target: reg_n for kernels larger than 1x1, oh x ow for 1x1 ones."""
    tvm = pytest.importorskip("tvm")
    from tvm import te
    from tvm.autotvm.task.space import FallbackConfigEntity
    from tvm.topi.x86.conv2d import _get_default_config

    from relay_eqsat.cost.simd import accumulators

    for h, w, k in TILE_SHAPES:
        inst = _tile_conv(h, w, k, c=16)
        x, wt = inst.input_types
        cfg = FallbackConfigEntity()
        with tvm.target.Target(HASWELL):
            _get_default_config(cfg, te.placeholder(x.shape, "float32"), te.placeholder(wt.shape, "float32"),
                                (1, 1), inst.attrs["padding"], (1, 1), "float32")
        tvm_tile = cfg["tile_ow"].size[-1] * (cfg["tile_oh"].val if k == 1 else 1)
        assert accumulators(*_args(inst), inst.out_type, 8) == tvm_tile, (h, w, k)


def test_baseline_v5_prices_spilled_tiles_on_avx2_only():
    """Baseline v5 divides a spilling tile's time by the spill factor on AVX2; v4 (models trained
    before it) does not; on AVX-512 the two agree."""
    from relay_eqsat.cost.learned import BASELINE, BASELINE_V4, lane_efficiencies
    from relay_eqsat.cost.simd import REGISTER_SPILL

    wide, narrow = _tile_conv(28, 28, 3), _tile_conv(28, 14, 3)
    v5, v4 = lane_efficiencies([wide, narrow], 8, BASELINE), lane_efficiencies([wide, narrow], 8, BASELINE_V4)
    assert v5[0] == pytest.approx(v4[0] * REGISTER_SPILL) and v5[1] == v4[1]
    assert list(lane_efficiencies([wide, narrow], 16, BASELINE)) == list(lane_efficiencies([wide, narrow], 16,
                                                                                         BASELINE_V4))


@pytest.mark.parametrize("kind", ["auto", "learned", "analytic"])
def test_split_halves_of_a_spilling_conv_cost_less_on_avx2(kind):
    """A 3x3 conv 64->64 with 28 columns against its two 14-column halves (what conv-split-width
    builds; measured on a Zen 1: 2.77 ms against 2 x 0.96): cheaper on AVX2 targets, not on AVX-512."""
    whole, half = _tile_conv(28, 28, 3), _tile_conv(28, 14, 3)
    for target in AVX2_TARGETS + ("llvm -mtriple=x86_64-linux-gnu -mcpu=znver1",):
        cm = CostModel(kind, target=target)
        try:
            assert 2 * cm.kernel_cost(*_args(half), half.out_type) < \
                0.85 * cm.kernel_cost(*_args(whole), whole.out_type), (kind, target)
        finally:
            cm.close()
    cm = CostModel(kind, target=ZNVER4)
    try:
        assert 2 * cm.kernel_cost(*_args(half), half.out_type) > 0.9 * cm.kernel_cost(*_args(whole), whole.out_type)
    finally:
        cm.close()
