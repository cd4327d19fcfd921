"""attnsim.verify and attention(..., counters=True): the command's verdicts and counters from
arrays (experiments/README.md, "attnsim verify" and "Silent-failure counters")."""
import numpy as np
import pytest

attnsim = pytest.importorskip("attnsim")

METHOD = "flash:qkv=fp16,p=fp16,out=fp16"


def inputs():
    rng = np.random.default_rng(5)
    q, k = (rng.standard_normal((1, 2, 96, 64), dtype=np.float32) for _ in range(2))
    v = rng.standard_normal((1, 2, 96, 64), dtype=np.float32) + 4.0
    return q, k, v


def test_verdicts_and_first_divergence():
    q, k, v = inputs()
    o = attnsim.attention(q, k, v, METHOD).o
    r = attnsim.verify(q, k, v, o, METHOD)
    assert r["verdict"] == 0 and r["first_diverging"] is None
    bug = o.astype(np.float32)
    bug[0, 1, 40] *= 1.01
    r = attnsim.verify(q, k, v, bug.astype(np.float16), METHOD)
    assert r["verdict"] == 3
    assert r["first_diverging"][:3] == (0, 1, 40)
    assert r["worst_rows"][0][:3] == (0, 1, 40)
    g = attnsim.golden(q, k, v).o.astype(np.float16)
    assert attnsim.verify(q, k, v, g, METHOD)["verdict"] == 1


def test_bad_input_raises_the_commands_line():
    q, k, v = inputs()
    o = attnsim.attention(q, k, v, METHOD).o
    with pytest.raises(Exception, match="shape"):
        attnsim.verify(q, k, v, o[:, :, :95], METHOD)
    bad = o.copy()
    bad[0, 0, 5, 3] = np.nan
    with pytest.raises(Exception, match=r"NaN at \(batch 0, head 0, row 5, column 3\)"):
        attnsim.verify(q, k, v, bad, METHOD)


def test_attention_counters():
    rows, n, d = 16, 256, 64
    q = np.full((1, 1, rows, d), 0.5, np.float32)
    k = np.full((1, 1, n, d), 0.5, np.float32)
    v = np.full((1, 1, n, d), 512.0, np.float32)
    r = attnsim.attention(q, k, v, "sage2:arch=sm80,pv_accum=fp16,in=fp16", counters=True)
    # Every p is 1: each element's P·V sum n·512 = 131072 passes fp16's 65504 once.
    assert r.counters["pv"]["overflow_inf"] == rows * d
    assert r.counters["first"]["pv"][2] == 0
    plain = attnsim.attention(q, k, v, "sage2:arch=sm80,pv_accum=fp16,in=fp16")
    assert plain.counters is None
    assert np.array_equal(plain.o.view(np.uint16), r.o.view(np.uint16))
    r32 = attnsim.attention(q, k, v, "sage2:arch=sm80,pv_accum=fp32,in=fp16", counters=True)
    assert "pv" not in r32.counters
