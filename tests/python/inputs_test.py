"""What the package accepts and refuses: DLPack producers (numpy's own __dlpack__, a CPU torch
tensor when torch is installed) read without a copy, and every class of bad input (rank, shapes
that disagree, NaN where the command line refuses it, unknown method or option, a GPU tensor, a
wrong dtype, not an array) raising ValueError/TypeError with the command line's one line; a
battery of random bad calls in a child interpreter that must survive them all."""
import ctypes
import re
import subprocess
import sys
import textwrap

import h5py
import ml_dtypes
import numpy as np
import pytest

import attnsim
from conftest import bits


class Producer:
    """Only the DLPack protocol, delegating to numpy's own __dlpack__."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kwargs):
        return self.a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def qkv(b=1, hq=2, hkv=1, n=64, d=32, seed=0):
    s = attnsim.synthetic(f"normal:b={b},hq={hq},hkv={hkv},nq={n},d={d},seed={seed}")
    return s.q, s.k, s.v


def test_dlpack_producer_is_read_without_a_copy():
    q, k, v = qkv()
    for a in (q, q[:, :, ::2], q.transpose(0, 2, 1, 3)):
        info = attnsim._core.array_info(Producer(a))
        assert info["data"] == a.__array_interface__["data"][0], "copied"
        assert info["shape"] == a.shape
        assert info["strides"] == tuple(s // a.itemsize for s in a.strides)
    ref = attnsim.attention(q, k, v, "sage2:arch=sm90")
    r = attnsim.attention(Producer(q), Producer(k), Producer(v), "sage2:arch=sm90")
    np.testing.assert_array_equal(bits(r.o), bits(ref.o))
    x = q.reshape(-1)
    np.testing.assert_array_equal(attnsim.convert(Producer(x), "e4m3fn", overflow="saturate"),
                                  attnsim.convert(x, "e4m3fn", overflow="saturate"))
    # numpy arrays themselves go through the same import: no copy for any layout.
    assert attnsim._core.array_info(q[:, :, ::3])["data"] == q.__array_interface__["data"][0]


def test_torch_cpu_tensors():
    torch = pytest.importorskip("torch")
    q, k, v = qkv()
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    assert attnsim._core.array_info(tq)["data"] == tq.data_ptr()
    np.testing.assert_array_equal(bits(attnsim.attention(tq, tk, tv, "flash").o),
                                  bits(attnsim.attention(q, k, v, "flash").o))
    # bf16 tensors arrive as DLPack bfloat16: the same as ml_dtypes.bfloat16 arrays.
    b16 = [x.to(torch.bfloat16) for x in (tq, tk, tv)]
    m16 = [x.astype(ml_dtypes.bfloat16) for x in (q, k, v)]
    np.testing.assert_array_equal(bits(attnsim.attention(*b16, "sage2:arch=sm90").o),
                                  bits(attnsim.attention(*m16, "sage2:arch=sm90").o))


def dump_error(cli, tmp_path, arrays, extra=()):
    """The command line's error line for a dump of these arrays, with the file named as the
    package names its arrays ("the input")."""
    path = tmp_path / "bad.h5"
    with h5py.File(path, "w") as f:
        for name, x in zip("qkv", arrays):
            f.create_dataset(name, data=x)
    rc, _, err = cli("run", "--method", "flash", "--input", path, *extra, check=False)
    assert rc == 2, err
    return err.replace(f"'{path}'", "the input")


def shapes_cases():
    q, k, v = qkv(b=2, hq=4, hkv=2)
    return {
        "rank": (q[0], k, v),
        "batch": (q, k[:1], v[:1]),
        "head_dim": (q, k[..., :16], v),
        "kv": (q, k, v[:, :, :32]),
        "heads": (q[:, :3], k, v),
        "empty": (q[:, :, :0], k, v),
    }


@pytest.mark.parametrize("case", list(shapes_cases()))
def test_bad_shapes_raise_the_command_lines_line(cli, tmp_path, case):
    arrays = shapes_cases()[case]
    want = dump_error(cli, tmp_path, arrays)
    with pytest.raises(ValueError) as e:
        attnsim.attention(*arrays, method="flash")
    assert str(e.value) == want


def test_nonfinite_inputs(cli, tmp_path):
    q, k, v = qkv()
    q = q.copy()
    q[0, 1, 2, 3] = np.nan
    want = dump_error(cli, tmp_path, (q, k, v))
    with pytest.raises(ValueError) as e:
        attnsim.attention(q, k, v, "flash")
    assert str(e.value) == want.replace("--allow-nonfinite", "allow_nonfinite=True")
    v = v.copy()
    v[0, 0, 5, 0] = np.inf
    with pytest.raises(ValueError, match=r"v in the input has a non-finite value \(inf\) at \[0,0,5,0\]"):
        attnsim.attention(np.nan_to_num(q), k, v, "flash")
    r = attnsim.attention(q, k, v, "flash", allow_nonfinite=True)
    assert np.isnan(r.o).any()
    assert attnsim.metrics(r, attnsim.golden(q, k, v, allow_nonfinite=True))["nonfinite"] > 0


@pytest.mark.parametrize("method", ["bogus", "flash:qkv=int3", "flash:nope=1", "sage2:arch=sm90,arch=sm80",
                                    "flash:bq=0", "flash:bq=99999999999", "lean:mblocks", "sage2:arch=paper,pv_accum=fp16"])
def test_bad_methods_raise_the_command_lines_line(cli, repo, method):
    rc, _, err = cli("run", "--method", method, "--input", repo / "data/bundled/kbias_gqa.h5",
                     check=False)
    assert rc == 2
    q, k, v = qkv()
    with pytest.raises(ValueError) as e:
        attnsim.attention(q, k, v, method)
    assert str(e.value) == err
    with pytest.raises(ValueError):
        attnsim.canonical(method)


def test_memory_estimates_refuse_before_allocating(cli):
    """A run whose estimate exceeds the limit is refused as the command refuses it (an allocation
    failing inside the simulators' threads would abort the interpreter)."""
    q, k, v = qkv()
    method = "flash:bq=2000000000,bk=2000000000"
    rc, _, err = cli("run", "--method", method, "--synthetic", "normal:hq=2,hkv=1,nq=64,d=32", check=False)
    assert rc == 2
    with pytest.raises(ValueError) as e:
        attnsim.attention(q, k, v, method)
    want = err.replace("synthetic:normal:hq=2,hkv=1,nq=64,d=32", "the input").replace("run of", "attention of")
    assert str(e.value) == want.replace("--max-memory sets it", "attnsim.set_memory_limit sets it")
    try:
        attnsim.set_memory_limit("1M")
        with pytest.raises(ValueError, match=r"more than the limit of 1.00 MiB \(attnsim.set_memory_limit\)"):
            attnsim.attention(q, k, v, "flash")
        with pytest.raises(ValueError, match="is not a size"):
            attnsim.set_memory_limit("lots")
    finally:
        attnsim.set_memory_limit(None)
    assert attnsim.memory_limit() > 1 << 20


class FakeGpuTensor:
    """A DLPack producer of a tensor on a CUDA device (a capsule built by hand: no GPU needed)."""

    class DLTensor(ctypes.Structure):
        _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                    ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                    ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                    ("shape", ctypes.POINTER(ctypes.c_int64)),
                    ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]

    class Managed(ctypes.Structure):
        pass

    Managed._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                        ("deleter", ctypes.c_void_p)]

    def __init__(self, shape, claim_cpu=False):
        self.shape_arr = (ctypes.c_int64 * len(shape))(*shape)
        self.m = self.Managed()
        self.m.dl_tensor = self.DLTensor(0xDEAD0000, 2, 0, len(shape), 2, 32, 1, self.shape_arr, None, 0)
        self.claim_cpu = claim_cpu

    def __dlpack__(self, **kwargs):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(self.m), b"dltensor", None)

    def __dlpack_device__(self):
        return (1, 0) if self.claim_cpu else (2, 0)


def test_gpu_tensors_are_refused():
    q, k, v = qkv()
    with pytest.raises(TypeError, match=r"q lives on a cuda device; attnsim simulates on the CPU"):
        attnsim.attention(FakeGpuTensor(q.shape), k, v)
    # A producer whose __dlpack_device__ says CPU but whose tensor is on the GPU: the compiled
    # side checks the tensor itself, before touching its memory.
    with pytest.raises(TypeError, match=r"k lives on a cuda device"):
        attnsim.attention(q, FakeGpuTensor(k.shape, claim_cpu=True), v)
    with pytest.raises(TypeError, match=r"x lives on a cuda device"):
        attnsim.convert(FakeGpuTensor((8,), claim_cpu=True), "bf16", overflow="inf")


def test_wrong_types():
    q, k, v = qkv()
    with pytest.raises(TypeError, match=r"q has dtype int32; attnsim takes float32, float16, bfloat16 or float64"):
        attnsim.attention(q.astype(np.int32), k, v)
    with pytest.raises(TypeError, match=r"v is not a numeric array"):
        attnsim.attention(q, k, "abc")
    with pytest.raises(TypeError, match=r"k is not a numeric array"):
        attnsim.attention(q, [object()], v)
    with pytest.raises(ValueError, match=r"sm_scale = -1 must be a finite number > 0"):
        attnsim.attention(q, k, v, sm_scale=-1)
    with pytest.raises(TypeError, match="special takes float32"):
        attnsim.special("ex2", np.zeros(4))
    with pytest.raises(ValueError, match=r"unknown function 'exp' \(expected ex2, rcp or lg2\)"):
        attnsim.special("exp", np.zeros(4, np.float32))
    with pytest.raises(ValueError, match=r"unknown instruction 'sm90.nope'"):
        attnsim.mma("sm90.nope", np.zeros((1, 1)), np.zeros((1, 1)))
    with pytest.raises(TypeError, match=r"a has dtype float32; this instruction takes e4m3fn encodings"):
        attnsim.mma("sm90.wgmma.e4m3.f32", np.zeros((64, 32), np.float32), np.zeros((32, 8), np.float32))


def test_convert_refusals_as_attnsim_convert(cli, tmp_path):
    src = tmp_path / "x.f32"
    np.array([1.0, np.nan], np.float32).tofile(src)
    cases = [  # (command-line args, package call)
        (["--to", "e9m9", "--overflow", "saturate"], dict(to="e9m9", overflow="saturate")),
        (["--to", "e4m3fn"], dict(to="e4m3fn")),
        (["--to", "e4m3fn", "--overflow", "inf"], dict(to="e4m3fn", overflow="inf")),
        (["--to", "bf16", "--round", "up", "--overflow", "inf"], dict(to="bf16", round="up", overflow="inf")),
        (["--to", "int8", "--overflow", "saturate"], dict(to="int8", overflow="saturate")),
        (["--to", "int8", "--overflow", "saturate", "--scale", "1"], dict(to="int8", overflow="saturate", scale=1)),
        (["--to", "bf16", "--overflow", "inf", "--packed"], dict(to="bf16", overflow="inf", packed=True)),
    ]
    for args, kw in cases:
        rc, _, err = cli("convert", *args, "--in", src, "--out", tmp_path / "o", check=False)
        assert rc == 2, args
        with pytest.raises(ValueError) as e:
            attnsim.convert(np.array([1.0, np.nan], np.float32), **kw)
        flags = {"--to": "to=", "--scale": "scale=", "--packed": "packed=True", "--overflow": "overflow="}
        spelled = re.sub(r"--to (\w+)", r"to='\1'", err)
        spelled = re.sub(r"--overflow (saturate-finite|saturate|nan|inf)\b", r"overflow='\1'", spelled)
        for a, b in flags.items():
            spelled = spelled.replace(a, b)
        assert str(e.value) == spelled, (args, err)


def test_random_bad_calls_never_crash_the_interpreter():
    """A child interpreter makes a few hundred random calls (shapes, dtypes, strides, methods,
    formats); each must return or raise ValueError/TypeError, and the child must exit normally."""
    code = textwrap.dedent("""
        import numpy as np, ml_dtypes, attnsim
        rng = np.random.default_rng(11)
        dtypes = [np.float32, np.float16, np.float64, ml_dtypes.bfloat16, np.int8, np.uint16, bool]
        methods = [m["name"] for m in attnsim.methods()] + ["flash:bq=1", "flash:bk=3", "sage2:arch=sm80,in=fp16",
                   "lean:sms=1", "turbo:mode=decode,prefill=1", "amla:variant=paper", "kivi:group=7", "", ":", "flash:",
                   "flash:bq=2000000000,bk=2000000000", "sage2:arch=paper,bq=99999"]
        ok = bad = 0
        for i in range(300):
            shapes = [tuple(int(s) for s in rng.integers(0, 5, rng.integers(0, 6))) for _ in range(3)]
            if i % 3 == 0:
                b, hq, hkv, n, d = (int(x) for x in rng.integers(1, 4, 5))
                shapes = [(b, hkv * hq, n, d), (b, hkv, n + int(rng.integers(0, 2)), d), (b, hkv, n, d)]
            arrays = []
            for s in shapes:
                x = (rng.standard_normal(s) * 10.0 ** rng.integers(-3, 6)).astype(dtypes[rng.integers(len(dtypes))])
                if x.ndim > 1 and rng.integers(2):
                    x = x.swapaxes(0, -1)
                arrays.append(x)
            try:
                attnsim.attention(*arrays, method=methods[rng.integers(len(methods))],
                                  causal=bool(rng.integers(2)), allow_nonfinite=bool(rng.integers(2)))
                ok += 1
            except (ValueError, TypeError):
                bad += 1
            fmt = ["e4m3fn", "e5m2", "bf16", "fp16", "int8", "int4", "int2", "fp8"][rng.integers(8)]
            try:
                attnsim.convert(arrays[0], fmt, overflow=["saturate", "inf", "nan", "x"][rng.integers(4)],
                                scale=[None, 0.5, -1.0, float("nan")][rng.integers(4)],
                                packed=bool(rng.integers(2)), decode=bool(rng.integers(2)))
                ok += 1
            except (ValueError, TypeError):
                bad += 1
            try:
                attnsim.quantize(arrays[1], ["sage_cuda_int8", "e4m3fn", "turbo_bpq2", "x"][rng.integers(4)],
                                 ["per_tensor", "per_block:3", "per_warp:0", "sage_sm90_k_per_thread"][rng.integers(4)],
                                 smooth=bool(rng.integers(2)))
                ok += 1
            except (ValueError, TypeError):
                bad += 1
        print("ok", ok, "refused", bad)
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "refused" in p.stdout


def _spin_rate(work, min_s=0.3):
    """Spins per second of this thread's Python loop while `work` runs (repeated for at least
    min_s) in another thread."""
    import threading
    import time
    def repeat():
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < min_s:
            work()
    t = threading.Thread(target=repeat)
    spins = 0
    t0 = time.perf_counter()
    t.start()
    while t.is_alive():
        spins += 1
    t.join()
    return spins / (time.perf_counter() - t0)


@pytest.mark.parametrize("call", ["attention", "convert", "special", "quantize"])
def test_calls_release_the_gil(call):
    """While a call computes in another thread, this one keeps running Python code: its loop spins
    at least four times faster than beside a C call that holds the GIL (sorted() of 2M floats,
    measured in the same run: the holder yields only at the switch interval), whatever the
    machine's speed (the call's own threads may take every core: four, not more)."""
    q, k, v = qkv(hq=4, hkv=2, n=1024, d=64)
    x = np.random.default_rng(2).standard_normal(1 << 23).astype(np.float32)
    work = {
        "attention": lambda: attnsim.attention(q, k, v, "flash:qkv=bf16,p=bf16"),
        "convert": lambda: attnsim.convert(x, "e4m3fn", overflow="saturate"),
        "special": lambda: attnsim.special("rcp", x),
        "quantize": lambda: attnsim.quantize(x.reshape(-1, 128), "sage_cuda_int8", "per_token"),
    }[call]
    work()  # tables and first-use costs out of the way
    floats = np.random.default_rng(3).standard_normal(1 << 21).tolist()
    holding = _spin_rate(lambda: sorted(floats))
    releasing = _spin_rate(work)
    assert releasing > 4 * holding, (releasing, holding)
