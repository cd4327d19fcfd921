"""The command line names things as the user wrote them: the short method label in `attribute`'s
report (the canonical string, hundreds of characters, stays in --out's `method`), and an option by
the spelling given (`--output`, not CLI11's first name `--out`)."""
import subprocess

import h5py


def test_attribute_prints_the_short_label(exe, tmp_path):
    out = tmp_path / "a.h5"
    p = subprocess.run([exe, "attribute", "--method", "sage2:arch=sm80", "--synthetic",
                        "normal:nq=64,d=64", "--out", str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    first = p.stdout.splitlines()[0]
    assert first == "method sage2:arch=sm80", first
    with h5py.File(out) as f:
        assert len(str(f.attrs["method"])) > 100 and "pv_accum" in str(f.attrs["method"])


def test_an_option_is_named_as_given(exe):
    for flag in ("--output", "--out"):
        p = subprocess.run([exe, "run", "--method", "flash", "--synthetic", "normal:nq=8,d=4",
                            flag, "--quiet"], capture_output=True, text=True)
        assert p.returncode == 2
        assert p.stderr.startswith(f"attnsim: error: {flag}: '--quiet' is an option"), p.stderr
