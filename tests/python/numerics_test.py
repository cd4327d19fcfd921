"""attnsim.convert, quantize, mma and special against the command line (`attnsim convert`,
`quantize`, `mma`, `special`) and ml_dtypes: every 8- and 16-bit code decoded, 655,360 FP32
inputs (every upper half with ten low halves: on, below and above each rounding point, plus one
random) encoded under every rounding, overflow and NaN policy, and ml_dtypes' astype equal where
the conventions agree (tests/formats/mldtypes_compare_test.py: the same policies)."""
import h5py
import ml_dtypes
import numpy as np
import pytest

import attnsim
from conftest import bits

FORMATS = {"e4m3fn": np.uint8, "e5m2": np.uint8, "bf16": np.uint16, "fp16": np.uint16}


@pytest.fixture(scope="module")
def sample():
    hi = np.repeat(np.arange(65536, dtype=np.uint32), 10) << 16
    lows = np.array([0x0000, 0x0001, 0x0FFF, 0x1000, 0x1001, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0],
                    dtype=np.uint32)
    b = hi | np.tile(lows, 65536)
    b[9::10] = hi[9::10] | np.random.default_rng(1).integers(0, 65536, 65536, dtype=np.uint32)
    return b.view(np.float32)


def cli_convert(cli, tmp_path, args, data, out_dtype):
    src, dst = tmp_path / "in.bin", tmp_path / "out.bin"
    data.tofile(src)
    cli("convert", *args, "--in", src, "--out", dst)
    return np.fromfile(dst, dtype=out_dtype)


@pytest.mark.parametrize("fmt", list(FORMATS) + ["int8", "int4"])
def test_decode_every_code_as_attnsim_convert(cli, tmp_path, fmt):
    if fmt == "int4":
        codes = np.arange(256, dtype=np.uint8)  # every pair of packed int4 codes
        want = cli_convert(cli, tmp_path, ["--to", "int4", "--decode", "--packed", "--scale", "0.5"],
                           codes, np.float32)
        got = attnsim.convert(codes, "int4", decode=True, packed=True, scale=0.5)
    else:
        store = FORMATS.get(fmt, np.uint8)
        codes = np.arange(1 << (8 * np.dtype(store).itemsize), dtype=np.uint64).astype(store)
        extra = ["--scale", "0.25"] if fmt == "int8" else []
        want = cli_convert(cli, tmp_path, ["--to", fmt, "--decode", *extra], codes, np.float32)
        got = attnsim.convert(codes, fmt, decode=True, scale=0.25 if fmt == "int8" else None)
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_encode_every_policy_as_attnsim_convert(cli, tmp_path, sample, fmt):
    store = FORMATS[fmt]
    overflows = ["saturate", "saturate-finite", "nan"] + ([] if fmt == "e4m3fn" else ["inf"])
    policies = [(r, "saturate", "cuda") for r in ("rne", "rna", "rz", "ru", "rd")]
    policies += [("rne", o, n) for o in overflows for n in ("cuda", "ml_dtypes", "ieee")]
    for r, o, n in policies:
        want = cli_convert(cli, tmp_path, ["--to", fmt, "--round", r, "--overflow", o,
                                           "--nan-encoding", n], sample, store)
        got = attnsim.convert(sample, fmt, round=r, overflow=o, nan=n)
        assert got.dtype == store and got.shape == sample.shape
        np.testing.assert_array_equal(got, want, err_msg=f"{fmt} {r} {o} {n}")
    # float64 input, rounded once (not through float32), as --from f64.
    with np.errstate(invalid="ignore"):
        x64 = sample[::7].astype(np.float64) * (1 + 2.0 ** -30)
    want = cli_convert(cli, tmp_path, ["--to", fmt, "--from", "f64", "--overflow", "saturate"], x64, store)
    np.testing.assert_array_equal(attnsim.convert(x64, fmt, overflow="saturate"), want)
    # Strided input (every other element) is read where it lies.
    np.testing.assert_array_equal(attnsim.convert(sample[::2], fmt, overflow="saturate"),
                                  attnsim.convert(np.ascontiguousarray(sample[::2]), fmt, overflow="saturate"))


@pytest.mark.parametrize("fmt,scale,packed", [("int8", 0.03125, False), ("int4", 0.75, False),
                                              ("int4", 0.75, True), ("int2", 1.5, True)])
def test_integer_encodings_as_attnsim_convert(cli, tmp_path, sample, fmt, scale, packed):
    x = sample[np.isfinite(sample)][::5]
    x = x[np.abs(x) < 1e6]
    for r in ("rne", "rna", "rz", "ru", "rd"):
        args = ["--to", fmt, "--round", r, "--overflow", "saturate", "--scale", scale] + (["--packed"] if packed else [])
        want = cli_convert(cli, tmp_path, args, x, np.uint8)
        got = attnsim.convert(x, fmt, round=r, overflow="saturate", scale=scale, packed=packed)
        np.testing.assert_array_equal(got.view(np.uint8).reshape(-1), want)
        if not packed:  # ml_dtypes' int8/int4/int2 hold the same integers, and decode back
            ml = attnsim.convert(x, fmt, round=r, overflow="saturate", scale=scale, output="ml_dtypes")
            np.testing.assert_array_equal(ml.astype(np.int32), got.view(np.int8).astype(np.int32))
            np.testing.assert_array_equal(attnsim.convert(ml, fmt, decode=True, scale=scale),
                                          attnsim.convert(got, fmt, decode=True, scale=scale))


def same_values(a, b):
    """Float arrays equal bit for bit, NaNs by NaN-ness and sign (decoders differ in the FP32
    payload they give a NaN: attnsim keeps the code's, ml_dtypes gives the canonical one)."""
    nan = np.isnan(a)
    return bool(np.array_equal(nan, np.isnan(b)) and np.array_equal(bits(a)[~nan], bits(b)[~nan])
                and np.array_equal(np.signbit(a[nan]), np.signbit(b[nan])))


def test_ml_dtypes_where_the_conventions_agree(sample):
    # attnsim policy equal to ml_dtypes' astype (tests/formats/README.md); fp16 against numpy with
    # its signalling NaNs left out (numpy does not quiet them).
    same = {"e4m3fn": (ml_dtypes.float8_e4m3fn, "nan", "ml_dtypes"),
            "e5m2": (ml_dtypes.float8_e5m2, "inf", "ml_dtypes"),
            "bf16": (ml_dtypes.bfloat16, "inf", "ml_dtypes"),
            "fp16": (np.float16, "inf", "ieee")}
    for fmt, (lib, overflow, nan) in same.items():
        got = attnsim.convert(sample, fmt, overflow=overflow, nan=nan, output="ml_dtypes")
        assert got.dtype == np.dtype(lib)
        with np.errstate(all="ignore"):
            want = sample.astype(lib)
        keep = ~(np.isnan(sample) & ((sample.view(np.uint32) & 0x00400000) == 0)) if fmt == "fp16" else slice(None)
        np.testing.assert_array_equal(bits(got)[keep], bits(want)[keep], err_msg=fmt)
        # Values: the encodings decoded to float32; decoding an ml_dtypes array takes its bits.
        values = want.astype(np.float32)
        assert same_values(attnsim.convert(sample, fmt, overflow=overflow, nan=nan, output="values")[keep],
                           values[keep]), fmt
        assert same_values(attnsim.convert(want, fmt, decode=True)[keep], values[keep]), fmt


def test_special_as_attnsim_special(cli, tmp_path, sample):
    x = sample[::3].copy()
    for fn in ("ex2", "rcp", "lg2"):
        for ftz in (True, False):
            src, dst = tmp_path / "in.f32", tmp_path / "out.f32"
            x.tofile(src)
            cli("special", "--fn", fn, *([] if ftz else ["--no-ftz"]), "--in", src, "--out", dst)
            want = np.fromfile(dst, dtype=np.float32)
            np.testing.assert_array_equal(bits(attnsim.special(fn, x, ftz=ftz)), bits(want),
                                          err_msg=f"{fn} ftz={ftz}")


def _operand(rng, fmt, shape):
    """Random encodings of an instruction's element format, as attnsim.mma takes them."""
    if fmt in ("fp16", "bf16", "e4m3fn", "e5m2"):
        x = rng.standard_normal(shape).astype(np.float32) * 4
        return attnsim.convert(x, fmt, overflow="saturate", output="ml_dtypes")
    if fmt == "s8":
        return rng.integers(-128, 128, shape).astype(np.int8)
    if fmt == "u8":
        return rng.integers(0, 256, shape).astype(np.uint8)
    return rng.integers(-8, 8, shape).astype(np.int8)  # s4


def _raw(a, fmt):
    if fmt == "s4":
        u = a.astype(np.uint8) & 0xF
        return (u[:, 0::2] | (u[:, 1::2] << 4)).tobytes()
    return np.ascontiguousarray(a).tobytes()


def test_mma_as_attnsim_mma(cli, tmp_path):
    rng = np.random.default_rng(5)
    for info in attnsim.mma_instructions():
        name, K = info["name"], 2 * info["k"]
        M, N = 16, 8
        a = _operand(rng, info["a"], (M, K))
        b = _operand(rng, info["b"], (K, N))
        for promote in ([0] if info["acc"] == "s32" else [0, info["k"]]):
            acc = "fp32" if promote else info["acc"]
            cdt = {"fp32": np.float32, "fp16": np.float16, "s32": np.int32}[acc]
            c = (rng.standard_normal((M, N)) * 8).astype(cdt)
            paths = {n: tmp_path / n for n in ("a", "b", "c", "d")}
            paths["a"].write_bytes(_raw(a, info["a"]))
            paths["b"].write_bytes(_raw(np.ascontiguousarray(b.T), info["b"]))
            paths["c"].write_bytes(c.tobytes())
            cli("mma", "--instr", name, "--m", M, "--n", N, "--k", K, "--promote", promote,
                "--a", paths["a"], "--b", paths["b"], "--c", paths["c"], "--out", paths["d"])
            want = np.frombuffer(paths["d"].read_bytes(), dtype=cdt).reshape(M, N)
            got = attnsim.mma(name, a, b, c, promote=promote)
            assert got.dtype == np.dtype(cdt)
            np.testing.assert_array_equal(bits(got), bits(want), err_msg=f"{name} promote {promote}")


def test_quantize_as_attnsim_quantize(cli, repo, tmp_path):
    out = tmp_path / "q.h5"
    dump = repo / "data/real/smollm2_gpl3.h5"
    grans = ["per_tensor", "per_channel", "per_block:64", "sage_sm90_k_per_thread"]
    quants = ["sage_cuda_int8", "sage_triton_int4", "e4m3fn", "turbo_bpq4"]
    cli("quantize", "--input", dump, "--group", "layer_15", "--tensor", "k", "--quantizers",
        ",".join(quants), "--granularities", ",".join(grans), "--output", out, "--quiet")
    import attnsim.results as ar
    want = ar.load_quantize(out)
    k = ar.read_dump(dump, "layer_15")["k"][0]  # [heads, tokens, channels]
    for (qz, gran, smooth), rows in want.groupby(["quantizer", "granularity", "smooth"]):
        r = attnsim.quantize(k, qz, gran, smooth=smooth)
        for col in ("rel_fro", "rel_l1", "max_abs", "cosine", "sqnr_db"):
            np.testing.assert_array_equal(r.error[col], rows.sort_values("head")[col].to_numpy(),
                                          err_msg=f"{qz} {gran} {smooth} {col}")
        if qz == "sage_cuda_int8":
            assert r.codes.dtype == np.int8 and r.codes.shape == k.shape
            # x̂ = codes · scale of the element's group (one FP32 multiply), the mean added back.
            h0 = r.codes[0].astype(np.float32) * r.scales[0][r.group[0]]
            np.testing.assert_array_equal(h0.astype(np.float64) + r.mean[0], r.dequantized[0])
        if qz == "e4m3fn":
            assert r.codes.dtype == ml_dtypes.float8_e4m3fn
