"""The causal mask a kernel applies, and the arguments that choose it, taken strictly.

- A top-left kernel (SDPA, SageAttention) on a causal input with fewer queries than keys is
  measured against golden with the same mask: ``metrics`` refuses a golden with the other mask,
  ``golden(causal="top_left")`` gives it, and the command line's sweep takes it by itself and says
  so (``golden_mask=top_left`` in ``resolved``). Before, such a sweep reported cosine 0.044 for
  sage2 and sdpa against the bottom-right golden, with no note.
- Causal inputs with more queries than keys are refused as by the command line (their first rows
  see no key and would count as agreement).
- ``causal`` is True/False (0/1), never Python truthiness; ``sm_scale`` is None or a number that
  is finite and non-zero in FP32 (0 no longer means "the default").
"""
import subprocess

import numpy as np
import pytest

import attnsim


def _qkv(nq, nk, d=64, h=2, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((1, h, nq, d), dtype=np.float32),
            rng.standard_normal((1, h, nk, d), dtype=np.float32),
            rng.standard_normal((1, h, nk, d), dtype=np.float32))


@pytest.mark.parametrize("method,mask", [("sage2:arch=sm90", "top_left"), ("sdpa", "top_left"),
                                         ("flash", "bottom_right"),
                                         ("amla", "bottom_right")])
def test_metrics_take_golden_with_the_kernels_mask(method, mask):
    q, k, v = _qkv(17, 1000)
    r = attnsim.attention(q, k, v, method, causal=True)
    assert r.causal_mask == mask
    g = attnsim.golden(q, k, v, causal=mask)
    assert g.causal_mask == mask
    assert attnsim.metrics(r, g)["cosine"] > 0.999
    other = "bottom_right" if mask == "top_left" else "top_left"
    with pytest.raises(ValueError, match=f"causal mask '{mask}' and ref with '{other}'"):
        attnsim.metrics(r, attnsim.golden(q, k, v, causal=other))
    # The arrays themselves (no AttentionResult): the caller's choice, not checked.
    assert attnsim.metrics(r.o, g.o)["cosine"] > 0.999


def test_golden_masks_differ_only_where_they_should():
    q, k, v = _qkv(17, 1000)
    tl = attnsim.golden(q, k, v, causal="top_left").o
    br = attnsim.golden(q, k, v, causal=True).o
    assert attnsim.metrics(tl, br)["cosine"] < 0.5   # different attention altogether
    q, k, v = _qkv(64, 64)
    a, b = attnsim.golden(q, k, v, causal="top_left"), attnsim.golden(q, k, v, causal=True)
    np.testing.assert_array_equal(a.o, b.o)
    assert a.causal_mask == b.causal_mask == "causal"
    assert attnsim.golden(q, k, v).causal_mask == "none"
    assert attnsim.canonical("golden:causal=top_left") == "golden:causal=top_left"
    assert attnsim.canonical("golden") == "golden"


def test_sweep_measures_a_top_left_kernel_against_a_top_left_golden(exe, tmp_path):
    spec = "normal:nq=17,nkv=1000,causal=1,hq=2,d=64"
    out = tmp_path / "r.h5"
    p = subprocess.run([exe, "sweep", "--methods", "flash,sage2,sdpa", "--synthetic", spec,
                        "--output", str(out), "--quiet"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    import h5py
    with h5py.File(out) as f:
        labels = [x.decode() for x in f["label"][()]]
        resolved = [x.decode() for x in f["resolved"][()]]
        cos = f["cosine"][()]
    by = dict(zip(labels, zip(resolved, cos)))
    assert "golden_mask=top_left" in by["sage2"][0] and by["sage2"][1] > 0.999
    assert "golden_mask=top_left" in by["sdpa"][0] and by["sdpa"][1] > 0.999
    assert "golden_mask" not in by["flash"][0]
    # `run` writes the golden's mask as an attribute of o.
    o = tmp_path / "o.h5"
    p = subprocess.run([exe, "run", "--method", "sage2", "--synthetic", spec, "--output", str(o),
                        "--quiet"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    with h5py.File(o) as f:
        assert f["o"].attrs["golden_mask"] in ("top_left", b"top_left")
        assert f["o"].attrs["cosine"] > 0.999


def test_more_queries_than_keys_under_a_causal_mask_is_refused():
    q, k, v = _qkv(64, 16)
    with pytest.raises(ValueError, match=r"more queries \(64\) than keys \(16\).*causal=False"):
        attnsim.attention(q, k, v, "flash", causal=True)
    with pytest.raises(ValueError, match="more queries"):
        attnsim.golden(q, k, v, causal=True)
    assert attnsim.attention(q, k, v, "flash", causal=False).o.shape == (1, 2, 64, 64)


@pytest.mark.parametrize("bad", ["no", "False", "0", 2, 0.5, None, [1]])
def test_causal_is_true_or_false(bad):
    q, k, v = _qkv(8, 8, d=16)
    with pytest.raises(ValueError, match="causal must be True or False"):
        attnsim.attention(q, k, v, "flash", causal=bad)
    with pytest.raises(ValueError, match="causal must be"):
        attnsim.golden(q, k, v, causal=bad)


@pytest.mark.parametrize("good", [True, False, 0, 1, np.bool_(True), np.int64(1)])
def test_causal_accepts_bools_and_0_1(good):
    q, k, v = _qkv(8, 8, d=16)
    assert attnsim.attention(q, k, v, "flash", causal=good).causal_mask == (
        "causal" if bool(good) else "none")


@pytest.mark.parametrize("bad,msg", [(0.0, "must be a finite number > 0"),
                                     (-1, "must be a finite number > 0"),
                                     (float("nan"), "must be a finite number > 0"),
                                     (1e-50, "zero or subnormal in FP32"),
                                     (1e300, "infinite in FP32"),
                                     (np.array([0.1, 0.2]), "must be a number > 0 or None"),
                                     ("0.1", "must be a number > 0 or None"),
                                     (True, "must be a number > 0 or None")])
def test_sm_scale_is_none_or_a_number_that_fp32_holds(bad, msg):
    q, k, v = _qkv(8, 8, d=16)
    with pytest.raises(ValueError, match=msg):
        attnsim.attention(q, k, v, "flash", sm_scale=bad)


def test_sm_scale_accepts_numbers_and_0d_arrays():
    q, k, v = _qkv(8, 8, d=16)
    a = attnsim.attention(q, k, v, "flash", sm_scale=0.25).o
    np.testing.assert_array_equal(a, attnsim.attention(q, k, v, "flash", sm_scale=np.float32(0.25)).o)
    np.testing.assert_array_equal(a, attnsim.attention(q, k, v, "flash", sm_scale=np.array(0.25)).o)
    np.testing.assert_array_equal(attnsim.attention(q, k, v, "flash").o,
                                  attnsim.attention(q, k, v, "flash", sm_scale=0.25).o)  # 1/sqrt(16)
