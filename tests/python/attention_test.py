"""attnsim.attention, golden, metrics and attribute against the command line: every registered
method bit for bit as `attnsim run` computes it on bundled dumps (outputs, canonical names,
metrics), inputs in every dtype and layout, thread-count independence, LSE."""
import re

import h5py
import ml_dtypes
import numpy as np
import pytest

import attnsim
from conftest import bits

KBIAS = "data/bundled/kbias_gqa.h5"  # GQA 4:2, 512 tokens, d 64, float32
MLA = "data/bundled/mla_synthetic.h5"  # 8 query heads on 1 KV head, d 576, dv 512

# Non-default variants beside every method's defaults: the recorded kernel paths and other stage
# choices (each one more `attnsim run`).
VARIANTS = [
    "flash:qkv=bf16,p=bf16,out=bf16", "flash:qkv=e4m3fn,p=e4m3fn", "sage2:arch=sm80",
    "sage2:arch=sm89,pv_accum=fp32+fp16,target=h100", "sage2:arch=paper", "amla:variant=cann",
    "splitkv:style=flashinfer", "turbo:mode=decode", "kivi:bits=2",
]
CAUSAL = "data/bundled/outlier_causal.h5"  # causal, 2 heads, 384 tokens, d 128: the decode paths


def read_dump(repo, path):
    with h5py.File(repo / path, "r") as f:
        q, k, v = (f[n][()] for n in "qkv")
        causal = bool(f.attrs.get("causal", 0))
        sm_scale = f.attrs.get("sm_scale")
    return q, k, v, causal, sm_scale


def cli_output(path):
    """o as `attnsim run --output` stores it, viewed in attnsim's dtypes, and its attributes."""
    with h5py.File(path, "r") as f:
        d = f["o"]
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in d.attrs.items()}
        raw = d[()]
    dtype = attrs["dtype"]
    o = raw.view(ml_dtypes.bfloat16) if dtype == "bfloat16" else raw
    return o, attrs


def check_against_run(cli, repo, tmp_path, dump, method):
    q, k, v, causal, sm_scale = read_dump(repo, dump)
    out = tmp_path / "o.h5"
    rc, _, err = cli("run", "--method", method, "--input", repo / dump, "--output", out, "--quiet",
                     check=False)
    if rc != 0:  # the method refuses this input: the package must refuse it with the same line
        with pytest.raises(ValueError, match=re.escape(err)):
            attnsim.attention(q, k, v, method, causal, sm_scale)
        return None
    r = attnsim.attention(q, k, v, method, causal, sm_scale)
    o, attrs = cli_output(out)
    assert r.method == attrs["method"]
    assert r.format == attrs["format"]
    assert r.o.dtype == o.dtype and r.o.shape == o.shape
    np.testing.assert_array_equal(bits(r.o), bits(o), err_msg=method)
    m = attnsim.metrics(r, attnsim.golden(q, k, v, causal, sm_scale))
    for key in ("cosine", "rel_l1", "rmse", "rel_fro", "max_abs", "nonfinite", "ulp_p50",
                "ulp_p99", "ulp_max", "ulp_row_p50", "ulp_row_p99", "ulp_row_max"):
        assert m[key] == attrs[key] or (np.isnan(m[key]) and np.isnan(attrs[key])), (method, key)
    return r


@pytest.mark.parametrize("method", [m["name"] for m in attnsim.methods()] + VARIANTS)
def test_every_method_as_attnsim_run(cli, repo, tmp_path, method):
    check_against_run(cli, repo, tmp_path, KBIAS, method)


@pytest.mark.parametrize("method", ["golden", "flash", "flash:qkv=bf16,p=bf16,out=bf16", "amla",
                                    "splitkv:style=flashmla"])
def test_mla_shapes_as_attnsim_run(cli, repo, tmp_path, method):
    check_against_run(cli, repo, tmp_path, MLA, method)


@pytest.mark.parametrize("method", ["lean", "splitkv:style=flashdecoding", "turbo:mode=decode",
                                    "kivi:mode=decode", "sage2:arch=sm90"])
def test_causal_and_decode_as_attnsim_run(cli, repo, tmp_path, method):
    assert check_against_run(cli, repo, tmp_path, CAUSAL, method) is not None


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float64"])
def test_input_dtypes_as_a_dump_of_that_dtype(cli, repo, tmp_path, dtype):
    """16-bit arrays are used as they are (as a 16-bit dump), float64 rounded to float32."""
    q, k, v, causal, _ = read_dump(repo, KBIAS)
    np_dtype = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float64": np.float64}[dtype]
    arrays = [x.astype(np_dtype) for x in (q, k, v)]
    dump = tmp_path / f"in_{dtype}.h5"
    with h5py.File(dump, "w") as f:
        for name, x in zip("qkv", arrays):
            if dtype == "bfloat16":
                f.create_dataset(name, data=x.view(np.uint16)).attrs["dtype"] = "bfloat16"
            else:
                f.create_dataset(name, data=x)
        f.attrs["causal"] = int(causal)
    for method in ("sage2:arch=sm90", "flash:qkv=bf16,p=bf16,out=bf16", "turbo"):
        out = tmp_path / "o.h5"
        cli("run", "--method", method, "--input", dump, "--output", out, "--quiet")
        o, attrs = cli_output(out)
        r = attnsim.attention(*arrays, method=method, causal=causal)
        assert r.method == attrs["method"]
        np.testing.assert_array_equal(bits(r.o), bits(o), err_msg=f"{method} on {dtype}")


def test_layouts_and_threads_do_not_change_the_bits(repo):
    q, k, v, causal, _ = read_dump(repo, KBIAS)
    ref = attnsim.attention(q, k, v, "sage2:arch=sm90", causal)
    # Non-contiguous views ([b, t, h, d] storage seen as [b, h, t, d]), reversed tokens of a
    # reversed copy, and a Fortran-ordered copy: the same values, other strides.
    strided = [np.ascontiguousarray(x.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3) for x in (q, k, v)]
    assert not strided[0].flags.c_contiguous
    reversed_ = [np.ascontiguousarray(x[:, :, ::-1])[:, :, ::-1] for x in (q, k, v)]
    fortran = [np.asfortranarray(x) for x in (q, k, v)]
    for arrays in (strided, reversed_, fortran):
        r = attnsim.attention(*arrays, method="sage2:arch=sm90", causal=causal)
        np.testing.assert_array_equal(bits(r.o), bits(ref.o))
        np.testing.assert_array_equal(r.lse, ref.lse)
    threads = attnsim.get_num_threads()
    try:
        for n in (1, 3):
            attnsim.set_num_threads(n)
            for method in ("sage2:arch=sm90", "flash", "lean:mblocks=all"):
                a = attnsim.attention(q[:, :2], k[:, :1], v[:, :1], method, causal=True)
                attnsim.set_num_threads(threads)
                b = attnsim.attention(q[:, :2], k[:, :1], v[:, :1], method, causal=True)
                attnsim.set_num_threads(n)
                np.testing.assert_array_equal(bits(a.o), bits(b.o), err_msg=f"{method}, {n} threads")
    finally:
        attnsim.set_num_threads(threads)


def test_lse_and_golden(repo):
    q, k, v, causal, _ = read_dump(repo, KBIAS)
    g = attnsim.golden(q, k, v, causal)
    assert g.o.dtype == np.float64 and g.format == "fp64" and g.method == "golden"
    assert g.lse.shape == q.shape[:3]
    # The FP32 kernel's LSE is the golden one to FP32 rounding.
    f = attnsim.attention(q, k, v, "flash", causal)
    assert f.lse.shape == q.shape[:3]
    np.testing.assert_allclose(f.lse, g.lse, rtol=0, atol=2e-6 * np.abs(g.lse).max())
    s = attnsim.attention(q, k, v, "sage2:arch=sm90", causal)
    assert np.abs(s.lse - g.lse).max() < 0.1  # INT8 Q·K: the same LSE to the quantization error
    # Methods without a final LSE say so.
    assert attnsim.attention(q[:, :2, :1], k[:, :1], v[:, :1], "splitkv").lse is None
    # o as the kernel returns it: bf16 for sage2 on float32 input.
    assert s.o.dtype == ml_dtypes.bfloat16 and s.format == "bf16"


def test_metrics_per_head_as_a_sweep(cli, repo, tmp_path):
    q, k, v, causal, _ = read_dump(repo, KBIAS)
    method = "flash:qkv=bf16,p=bf16,out=bf16"
    out = tmp_path / "r.h5"
    cli("sweep", "--methods", method, "--input", repo / KBIAS, "--output", out, "--quiet")
    import attnsim.results as ar
    want = ar.load_per_head(out)
    got = attnsim.metrics(attnsim.attention(q, k, v, method, causal), attnsim.golden(q, k, v, causal),
                          per_head=True)
    assert len(got) == len(want) == q.shape[0] * q.shape[1]
    for col in ("cosine", "rel_l1", "rmse", "rel_fro", "max_abs", "ulp_p50", "ulp_p99", "ulp_max",
                "ulp_row_p50", "ulp_row_p99", "ulp_row_max"):
        np.testing.assert_array_equal(got[col].to_numpy(), want[col].to_numpy(), err_msg=col)
    # Arrays in, the output format from the dtype (bf16): the same numbers.
    r = attnsim.attention(q, k, v, method, causal)
    assert attnsim.metrics(r.o, attnsim.golden(q, k, v, causal).o)["ulp_p99"] == \
        attnsim.metrics(r, attnsim.golden(q, k, v, causal))["ulp_p99"]
    assert len(attnsim.ULP_BUCKETS) == len(attnsim.metrics(r, r)["ulp_hist"])


def test_attribute_as_attnsim_attribute(cli, repo, tmp_path):
    q, k, v, causal, _ = read_dump(repo, KBIAS)
    q, k, v = q[:, :2, :256], k[:, :1, :256], v[:, :1, :256]  # a small dump: 2 heads on 1 KV head
    dump = tmp_path / "small.h5"
    with h5py.File(dump, "w") as f:
        for name, x in zip("qkv", (q, k, v)):
            f.create_dataset(name, data=x)
    method = "flash:qkv=bf16,p=e4m3fn,qk_dot=sm90.hmma.bf16.f32"
    csv = tmp_path / "a.csv"
    cli("attribute", "--method", method, "--input", dump, "--out", csv, "--quiet")
    import pandas as pd
    want = pd.read_csv(csv, comment="#", keep_default_na=False)
    got = attnsim.attribute(q, k, v, method, input=str(dump))
    assert list(got.columns) == list(want.columns)
    for col in ("input", "stage", "method", "exact", "note"):
        assert list(got[col]) == list(want[col]), col
    # The CSV holds 17 significant digits: the same doubles.
    for col in ("rel_fro", "cosine", "max_abs", "exact_only_rel_fro", "exact_only_cosine",
                "this_only_rel_fro", "this_only_cosine"):
        np.testing.assert_array_equal(got[col].to_numpy(), want[col].to_numpy(), err_msg=col)
    with pytest.raises(ValueError, match="is not a pipeline"):
        attnsim.attribute(q, k, v, "golden")


def test_registry_describe_synthetic(cli):
    names = [m["name"] for m in attnsim.methods()]
    assert names[0] == "golden" and "sage2" in names
    assert attnsim.canonical("sage2").startswith("sage2:arch=sm90,")
    d = attnsim.describe("sage2:arch=sm90")
    assert d["method"] == attnsim.canonical("sage2:arch=sm90")
    # The pipeline a preset runs, spelled as a flash: method string (attnsim methods --describe).
    assert d["pipeline"].startswith("flash:") and "exp" in d["stages"]
    assert any(x.startswith("exp=") for x in d["differences"])
    assert attnsim.describe("golden")["pipeline"] is None
    # The described pipeline, run as a method, is the method bit for bit.
    t = attnsim.synthetic("normal:hq=2,nq=64,d=128,seed=5")
    np.testing.assert_array_equal(attnsim.attention(*t[:3], d["pipeline"]).o,
                                  attnsim.attention(*t[:3], "sage2:arch=sm90").o)
    s = attnsim.synthetic("kbias:hq=2,nq=64,d=32,seed=3,causal=1")
    assert s.q.shape == (1, 2, 64, 32) and s.causal is True
    # The same input the command line generates: the same metrics.
    _, out, _ = cli("run", "--method", "flash:qkv=bf16,p=bf16", "--synthetic",
                    "kbias:hq=2,nq=64,d=32,seed=3,causal=1")
    rel = attnsim.metrics(attnsim.attention(*s[:3], "flash:qkv=bf16,p=bf16", s.causal),
                          attnsim.golden(*s[:3], s.causal))["rel_fro"]
    assert f"{rel:.3e}" in out


def test_a_missing_hardware_table_is_one_error(tmp_path):
    # The H100 tables a method reads are built side by side on the threads before its tiles
    # (sim/pipeline/prepare.cpp): a table that cannot be read is still one exception naming the
    # file. A fresh process, so that no table is loaded already.
    import os
    import subprocess
    import sys
    code = (
        "import numpy as np, attnsim\n"
        "attnsim._core.set_special_data_dir(%r)\n"
        "q = np.random.default_rng(0).standard_normal((1, 2, 32, 64), dtype=np.float32)\n"
        "try:\n"
        "    attnsim.attention(q, q, q, 'sage2:arch=sm90')\n"
        "except RuntimeError as e:\n"
        "    print('error:', e)\n" % str(tmp_path / "none"))
    env = dict(os.environ, OMP_NUM_THREADS="2")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1, out.stdout
    assert lines[0].startswith("error: cannot read the special-function table"), out.stdout
    assert str(tmp_path / "none") in lines[0]
