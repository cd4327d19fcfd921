"""The Python API's rough edges: every bad input one line naming the Python argument, warnings
through Python's `warnings`, a clean namespace.

- Byte-swapped and long-double arrays: a one-line TypeError naming the dtype (was nanobind's
  multi-line "incompatible function arguments" listing internal signatures).
- Messages name Python arguments, not command-line flags (band=, allow_nonfinite=,
  set_memory_limit).
- verify(method=None) lists each bit-identical candidate once.
- Warnings and notes from the compiled core are warnings.warn (AttnsimWarning, AttnsimNote):
  filterable, testable; nothing printed on stderr.
- dir(attnsim) is the API, not the module's imports; synthetic specs and method strings refuse
  what the documentation does not allow (hex and exponent sizes, stray commas).
"""
import subprocess
import sys
import warnings

import numpy as np
import pytest

import attnsim


def _qkv(n=16, d=16, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((1, 2, n, d), dtype=np.float32) for _ in range(3))


@pytest.mark.parametrize("dtype", [">f4", ">f2", ">f8"])
def test_byte_swapped_arrays_are_one_line_type_errors(dtype):
    q, k, v = _qkv()
    with pytest.raises(TypeError, match=r"^q has dtype >f\d \(byte-swapped, big-endian\)") as e:
        attnsim.attention(q.astype(dtype), k, v, "flash")
    assert "\n" not in str(e.value)
    with pytest.raises(TypeError, match="byte-swapped"):
        attnsim.convert(q.astype(dtype), "bf16", overflow="inf")


def test_long_double_is_a_one_line_type_error():
    if np.dtype(np.longdouble).itemsize <= 8:
        pytest.skip("long double is double here")
    q, k, v = _qkv()
    with pytest.raises(TypeError, match=r"^k has dtype float\d+ \(long double\)") as e:
        attnsim.attention(q, k.astype(np.longdouble), v, "flash")
    assert "\n" not in str(e.value)


def test_messages_name_python_arguments():
    q, k, v = _qkv()
    o = attnsim.attention(q, k, v, "flash").o
    for band in (0.5, float("nan"), "x"):
        with pytest.raises(ValueError, match="^band must be a number >= 1") as e:
            attnsim.verify(q, k, v, o, band=band)
        assert "--" not in str(e.value)
    q2 = q.copy()
    q2[0, 0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="allow_nonfinite=True") as e:
        attnsim.attention(q2, k, v, "flash")
    assert "--" not in str(e.value)
    try:
        attnsim.set_memory_limit("1K")
        with pytest.raises(ValueError, match=r"attnsim.set_memory_limit") as e:
            attnsim.attention(q, k, v, "flash")
        assert "--max-memory" not in str(e.value)
    finally:
        attnsim.set_memory_limit("")


def test_verify_lists_each_identical_candidate_once():
    q, k, v = _qkv(64, 64)
    o = attnsim.attention(q.astype(np.float16), k.astype(np.float16), v.astype(np.float16),
                          "sage2:arch=sm80").o
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r = attnsim.verify(q.astype(np.float16), k.astype(np.float16), v.astype(np.float16), o)
    # The candidates' own warnings (kivi's prefill, splitkv's single split) are not the user's.
    assert not [x for x in w if issubclass(x.category, attnsim.AttnsimWarning)], \
        [str(x.message) for x in w]
    ids = r["identical_candidates"]
    assert ids and len(ids) == len(set(ids)), ids


def test_warnings_are_python_warnings_not_stderr():
    # kivi on a non-causal input runs its prefill path (FP16 attention): a warning, computed anyway.
    code = ("import warnings, numpy as np, attnsim\n"
            "q = np.ones((1, 1, 64, 64), np.float32)\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    warnings.simplefilter('always')\n"
            "    attnsim.attention(q, q, q, 'kivi')\n"
            "print(sorted({x.category.__name__ for x in w}))\n"
            "print([str(x.message) for x in w][0][:40])\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "AttnsimWarning" in p.stdout and "kivi ran in prefill mode" in p.stdout
    assert "attnsim: warning" not in p.stderr
    # Filterable: an "error" filter turns it into an exception.
    p = subprocess.run([sys.executable, "-c", code.replace(
        "warnings.simplefilter('always')", "warnings.simplefilter('error', attnsim.AttnsimWarning)")],
        capture_output=True, text=True)
    assert p.returncode != 0 and "AttnsimWarning" in p.stderr
    assert issubclass(attnsim.AttnsimNote, UserWarning)


def test_dir_is_the_api():
    names = dir(attnsim)
    for private in ("np", "os", "re", "Path", "NamedTuple", "annotations", "math", "ml_dtypes"):
        assert private not in names
    for public in ("attention", "golden", "metrics", "verify", "modelmath", "e2e", "__version__"):
        assert public in names


@pytest.mark.parametrize("spec,msg", [("normal:nq=0x10", "not a decimal number"),
                                      ("normal:nq=1e3", "decimal integer"),
                                      ("normal:hq=2.0", "decimal integer"),
                                      ("normal:nq=16,", "stray comma")])
def test_synthetic_specs_are_decimal(spec, msg):
    with pytest.raises(ValueError, match=msg):
        attnsim.synthetic(spec)


def test_method_strings_refuse_a_stray_comma():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="stray comma"):
        attnsim.attention(q, k, v, "flash:qkv=bf16,")


def test_progress_of_verify_and_attribute():
    q, k, v = _qkv(64, 64)
    calls = []
    o = attnsim.attention(q, k, v, "flash").o
    attnsim.verify(q, k, v, o, progress=lambda d, t, w: calls.append((d, t, w)))
    assert len(calls) > 10 and calls[0][0] == 0 and calls[-1][0] == calls[-1][1]
    assert all(t == calls[0][1] for _, t, _ in calls)
    calls.clear()
    attnsim.attribute(q, k, v, "sage2:arch=sm90", progress=lambda *a: calls.append(a))
    assert calls[0] == (0, calls[0][1], "the method") and calls[-1][:2] == (calls[0][1],) * 2
    assert [d for d, _, _ in calls] == list(range(calls[0][1] + 1))

    def stop(*_):
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        attnsim.attribute(q, k, v, "flash", progress=stop)
    with pytest.raises(ValueError, match="progress must be"):
        attnsim.verify(q, k, v, o, progress="yes")
