"""The H100 recordings of thu-ml/SageAttention (data/hw/h100/sage/) reproduced through the Python
API, as tests/hw/sage_h100_test.cpp does through the C++ registry: every public kernel path on
every recorded case (integer "lattice" inputs made here bit for bit as record_sage.py made them,
and slices of the real-model dumps), bf16 and fp16, every output row's FNV-1a digest equal to the
kernel's; the non-default option paths likewise; the LSE compared and its agreement printed."""
import json

import h5py
import numpy as np
import pytest

import attnsim
import attnsim.results as ar

SAGE = "data/hw/h100/sage"
PATHS = {
    "sage1": "sage1:smooth_k=1",
    "sm80_fp32": "sage2:arch=sm80,pv_accum=fp32",
    "sm80_fp16+fp32": "sage2:arch=sm80,pv_accum=fp16+fp32",
    "sm80_fp16": "sage2:arch=sm80,pv_accum=fp16",
    "sm89_fp32": "sage2:arch=sm89,pv_accum=fp32,target=h100",
    "sm89_fp32+fp32": "sage2:arch=sm89,pv_accum=fp32+fp32,target=h100",
    "sm89_fp32+fp16": "sage2:arch=sm89,pv_accum=fp32+fp16,target=h100",
    "sm90": "sage2:arch=sm90",
}
OPTION_PATHS = {
    "sm80_fp16_smoothv": "sage2:arch=sm80,pv_accum=fp16,smooth_v=1",
    "sm89_fp32_smoothv": "sage2:arch=sm89,pv_accum=fp32,smooth_v=1,target=h100",
    "sm80_fp32_perwarp": "sage2:arch=sm80,qk_gran=per_warp",
    "sm89_perwarp": "sage2:arch=sm89,qk_gran=per_warp,target=h100",
    "sm90_perwarp": "sage2:arch=sm90,qk_gran=per_warp",
}
M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def splitmix64(z):
    z = (z + np.uint64(0x9E3779B97F4A7C15)) & M64
    z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & M64
    z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & M64
    return z ^ (z >> np.uint64(31))


def base(seed, salt):
    with np.errstate(over="ignore"):
        return (np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)) ^ np.uint64(salt)


def lattice(seed, tensor, n):
    """(sum of four 16-bit uniforms - 2^17) * 2^-15 for elements 0..n-1 (tests/hw/sage_inputs.hpp)."""
    b = base(seed, tensor << 40)
    i = np.arange(n, dtype=np.uint64)
    acc = np.zeros(n, dtype=np.int64)
    with np.errstate(over="ignore"):
        for r in range(4):
            acc += (splitmix64(b ^ np.uint64(r << 32) ^ i) >> np.uint64(48)).astype(np.int64)
    return ((acc - 131072).astype(np.float32) * np.float32(2.0 ** -15))


def lattice_input(c):
    b, hq, hkv, n, d = c["b"], c["hq"], c["hkv"], c["n"], c["d"]
    q = lattice(c["seed"], 1, b * hq * n * d).reshape(b, hq, n, d)
    k = lattice(c["seed"], 2, b * hkv * n * d).reshape(b, hkv, n, d)
    v = lattice(c["seed"], 3, b * hkv * n * d).reshape(b, hkv, n, d)
    ch = np.arange(d, dtype=np.uint64)
    with np.errstate(over="ignore"):
        def channel_hash(salt):
            return splitmix64(base(c["seed"], salt) ^ ch)
        if c["kind"] == "kbias":
            k += ((channel_hash(0xB1A5) >> np.uint64(61)).astype(np.int64) - 4).astype(np.float32)
            v += ((channel_hash(0xB1A6) >> np.uint64(61)).astype(np.int64) - 4).astype(np.float32)
        elif c["kind"] == "outlier":
            big = (channel_hash(0x0717) >> np.uint64(59)) == 0
            q[..., big] *= np.float32(16)
            k[..., big] *= np.float32(16)
        elif c["kind"] == "peaked":
            g = hq // hkv
            j = (np.arange(n) * 7919) % n
            for h in range(hq):
                q[:, h] = np.float32(4) * k[:, h // g, j] + q[:, h] * np.float32(0.25)
    return q, k, v


def case_input(repo, c):
    if c.get("kind"):
        return lattice_input(c)
    d = ar.read_dump(repo / c["file"], c["group"])
    q, k = d["q"], d["k"]
    g = q.shape[1] // k.shape[1]
    hq = c["heads_q"]
    hkv = (hq + g - 1) // g
    n = c["tokens"]
    return q[:, :hq, :n], k[:, :hkv, :n], d["v"][:, :hkv, :n]  # views: strided inputs


def row_digests(o16):
    """FNV-1a of each row's little-endian 16-bit patterns (compact_sage.py's digests)."""
    rows = o16.view(np.uint16).reshape(-1, o16.shape[-1])
    h = np.full(rows.shape[0], 0x811C9DC5, dtype=np.uint64)
    for e in range(rows.shape[1]):
        for byte in (rows[:, e] & 0xFF, rows[:, e] >> 8):
            h = ((h ^ byte.astype(np.uint64)) * np.uint64(0x01000193)) & np.uint64(0xFFFFFFFF)
    return h.astype(np.uint32)


# The default suite reproduces three of the eleven recorded cases (GQA causal, d 40, a real
# SmolLM2 slice) on every path; the exhaustive label (`ctest -L exhaustive`, run by .ci/test)
# all of them, as tests/hw/sage_h100_test.cpp does in C++.
QUICK = {"normal_gqa_causal", "d40", "smollm2_l15"}


@pytest.fixture(scope="module")
def all_cases(repo):
    return json.loads((repo / SAGE / "cases.json").read_text())["cases"]


@pytest.fixture(params=["quick", pytest.param("all", marks=pytest.mark.exhaustive)])
def cases(request, all_cases):
    return [c for c in all_cases if request.param == "all" or c["name"] in QUICK]


def test_every_public_path_bit_for_bit(repo, cases):
    rows, same, lse_n, lse_same = {}, {}, {}, {}
    with h5py.File(repo / SAGE / "sage_h100.h5", "r") as f:
        for c in cases:
            q, k, v = case_input(repo, c)
            for dt in ("bf16", "fp16"):
                g = f[f"{c['name']}/{dt}"]
                paths = g.attrs["paths"].split(",")
                digests, lse = g["o_rows"][()], g["lse"][()]
                for rec, method in PATHS.items():
                    r = attnsim.attention(q, k, v, f"{method},in={dt}", causal=bool(c["causal"]))
                    assert r.format == dt
                    i = paths.index(rec)
                    got = row_digests(r.o)
                    rows[rec] = rows.get(rec, 0) + got.size
                    same[rec] = same.get(rec, 0) + int((got == digests[i]).sum())
                    own = r.lse.astype(np.float32).reshape(-1)
                    lse_n[rec] = lse_n.get(rec, 0) + own.size
                    lse_same[rec] = lse_same.get(rec, 0) + int((own.view(np.uint32) == lse[i].view(np.uint32)).sum())
    print()
    for rec in PATHS:
        print(f"{rec:16s} {rows[rec]:6d} rows {100 * same[rec] / rows[rec]:9.4f}% identical; "
              f"LSE with attnsim's own q·km term {100 * lse_same[rec] / lse_n[rec]:8.4f}% identical")
    assert same == rows
    # The LSE: the recorded one adds the wrapper's q·km correction from a cuBLAS matmul whose
    # summation order is not modelled (the C++ test checks the kernel's own LSE with the recorded
    # term); with attnsim's own term 99.93 % of the rows agree bit for bit (measured).
    for rec in PATHS:
        assert lse_same[rec] >= 0.999 * lse_n[rec], rec


def test_non_default_option_paths_bit_for_bit(repo, cases):
    bad = {}
    with h5py.File(repo / SAGE / "sage_options_h100.h5", "r") as f:
        assert f.attrs["paths"].split(",") == list(OPTION_PATHS)
        for c in cases:
            if f"{c['name']}/bf16/o_rows" not in f:
                continue
            q, k, v = case_input(repo, c)
            for dt in ("bf16", "fp16"):
                digests = f[f"{c['name']}/{dt}/o_rows"][()].reshape(len(OPTION_PATHS), -1)
                for i, (rec, method) in enumerate(OPTION_PATHS.items()):
                    r = attnsim.attention(q, k, v, f"{method},in={dt}", causal=bool(c["causal"]))
                    bad[rec] = bad.get(rec, 0) + int((row_digests(r.o) != digests[i]).sum())
    assert bad == {rec: 0 for rec in OPTION_PATHS}
