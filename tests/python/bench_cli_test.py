"""`attnsim bench --native`: flash always timed first (every row has its "x flash" ratio), each
row printed as soon as it is measured, and a user's dump as the input (--input)."""
import subprocess

import pytest


def _bench(exe, *args):
    p = subprocess.run([exe, "bench", "--native", "--quick", *args], capture_output=True,
                       text=True, timeout=600)
    return p.returncode, p.stdout, p.stderr


def _rows(out):
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0] in ("flash", "sage1") and parts[1][0].isdigit():
            rows.setdefault(parts[0], []).append(parts)
    return rows


def test_flash_is_timed_when_not_asked_for(exe):
    code, out, err = _bench(exe, "--method", "sage1", "--synthetic",
                            "normal:hq=2,nq=128,nkv=128,d=64,causal=1")
    assert code == 0, err
    rows = _rows(out)
    # Each printed twice: as measured, and in the summary against the anchors' faster timings.
    assert len(rows["flash"]) == 2 and len(rows["sage1"]) == 2
    assert rows["flash"][0][4] == "1.00"
    assert float(rows["sage1"][0][4]) > 0          # the "x flash" column, not "-"
    assert out.index("flash ") < out.index("sage1 ")


def test_input_is_a_users_dump(exe, repo):
    code, out, err = _bench(exe, "--method", "flash", "--input",
                            str(repo / "data/real/minilm_gpl3.h5"))
    assert code == 0, err
    assert "minilm_gpl3.h5:layer_" in out and "float32 inputs" in out
    code, _, err = _bench(exe, "--input", str(repo / "data/real/minilm_gpl3.h5"),
                          "--synthetic", "normal:nq=8")
    assert code == 2 and "alternatives" in err
    code, _, err = _bench(exe, "--input", str(repo / "data/real/minilm_gpl3.h5"), "--dtype", "fp16")
    assert code == 2 and "dump's own dtype" in err   # never silently ignored
    code, _, err = _bench(exe, "--input", "/nonexistent.h5")
    assert code == 2 and len(err.strip().splitlines()) == 1
