"""The `flex` contract through the Python package (issue 39): attnsim.attention(q, k, v,
method="flex", causal=..., sm_scale=...) returns O in the input's dtype and the natural-log LSE
FlexAttention returns, bit for bit as the H100 computed them (data/hw/h100/serving/flex_h100.h5,
a prefill and a decode case made here from the lattice as the recorder made them), and
`flex:window=128` / `flex:softcap=30` change the problem the golden measures."""
import os
import sys

import h5py
import ml_dtypes
import numpy as np
import pytest

import attnsim

REPO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(REPO, "cuda_check", "serving"))
from serving_cases import FLEX_CASES, flex_inputs  # noqa: E402

H5 = os.path.join(REPO, "data", "hw", "h100", "serving", "flex_h100.h5")
DT = {"fp16": np.float16, "bf16": ml_dtypes.bfloat16}


def case(name):
    return next(c for c in FLEX_CASES if c["name"] == name)


@pytest.mark.parametrize("name,method", [
    ("pre512_causal_bf16_d128", "flex"),
    ("dec4097_gqa_fp16_d128", "flex"),
    ("pre1000_window128_bf16_d128", "flex:window=128"),
    ("dec777_gqa_softcap30_bf16_d128", "flex:softcap=30"),
])
def test_the_recorded_outputs_and_lse_bit_for_bit(name, method):
    c = case(name)
    q, k, v, _ = flex_inputs(c)
    dt = DT[c["dtype"]]
    r = attnsim.attention(q.astype(dt), k.astype(dt), v.astype(dt), method=method,
                          causal=c["mask"] in ("causal", "window"), sm_scale=c["scale"])
    assert r.o.dtype == dt
    with h5py.File(H5, "r") as f:
        o_hw, lse_hw = f[name]["o"][()], f[name]["lse"][()]
    assert np.array_equal(np.asarray(r.o).view(np.uint16), o_hw)
    lse = np.asarray(r.lse, np.float32).reshape(lse_hw.shape)
    assert np.array_equal(lse.view(np.uint32), lse_hw.view(np.uint32))


def test_window_and_softcap_are_the_problem_golden_measures():
    rng = np.random.default_rng(5)
    q = rng.standard_normal((1, 2, 256, 64)).astype(ml_dtypes.bfloat16)
    k = rng.standard_normal((1, 2, 256, 64)).astype(ml_dtypes.bfloat16)
    v = rng.standard_normal((1, 2, 256, 64)).astype(ml_dtypes.bfloat16)
    plain = attnsim.attention(q, k, v, method="flex", causal=True)
    win = attnsim.attention(q, k, v, method="flex:window=16", causal=True)
    # The window changes the output: row 100 sees 16 keys, not 101.
    assert not np.array_equal(np.asarray(plain.o), np.asarray(win.o))
    # Rows inside the window's reach are the causal rows (the same keys in the same order).
    assert np.array_equal(np.asarray(plain.o)[..., :16, :].view(np.uint16),
                          np.asarray(win.o)[..., :16, :].view(np.uint16))
    with pytest.raises(Exception, match="needs the causal mask"):
        attnsim.attention(q, k, v, method="flex:window=16", causal=False)
    with pytest.raises(Exception, match="softcap"):
        attnsim.attention(q, k, v, method="flex:softcap=-1")
