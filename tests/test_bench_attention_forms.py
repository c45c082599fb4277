"""bench/attention_forms.py: both batch_matmul forms and both constant layouts compute the same values."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

attention_forms = pytest.importorskip("attention_forms")
pytest.importorskip("tvm")


@pytest.mark.parametrize("form", ["nn", "nt", "dense"])
def test_each_product_form_is_a_times_b(form):
    import runtime_stats

    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, 5, 3)).astype("float32")
    b = rng.standard_normal((2, 3, 4)).astype("float32")
    built = runtime_stats.build_module(attention_forms.product_module(form, 2, 5, 3, 4), {"a": a, "b": b})
    np.testing.assert_allclose(built.outputs[0], a @ b, rtol=1e-5, atol=1e-5)


def test_layer_norms_agree_and_only_the_shared_constants_become_build_params():
    import runtime_stats

    x = np.random.default_rng(2).standard_normal((1, 4, 16)).astype("float32")
    ref = x
    for _ in range(3):
        d = ref - ref.mean(-1, keepdims=True)
        ref = d / np.sqrt((d ** 2).mean(-1, keepdims=True) + 1e-12)
    for shared in (False, True):
        mod = attention_forms.norms_module(shared, 3, shape=(1, 4, 16))
        out = runtime_stats.build_module(mod, {"x": x}).outputs[0]
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
        assert attention_forms.scalar_params(mod) == (2 if shared else 0)


def test_run_writes_every_case_checked(tmp_path):
    out = tmp_path / "attention.json"
    rc = attention_forms.main(["--rounds", "1", "--repeat", "1", "--min-repeat-ms", "0", "--norms", "2",
                               "--out", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    assert [r["case"] for r in data["products"]] == [p[0] for p in attention_forms.PRODUCTS]
    assert all(f["ok"] for r in data["products"] for f in r["forms"].values())
    assert data["norms"]["separate"]["scalar_params"] == 0 and data["norms"]["shared"]["scalar_params"] == 2
    assert data["machine"]["TVM_NUM_THREADS"] == "1"


def test_bad_norm_count_is_refused(tmp_path):
    with pytest.raises(SystemExit):
        attention_forms.main(["--norms", "0", "--out", str(tmp_path / "x.json")])
