"""`pip install .` from this checkout into a fresh virtual environment (label long: it compiles the
C++ again, minutes): the wheel builds without HDF5, MPI or CLI11, installs the module with the
H100 tables it needs, and the README's example runs from outside the checkout; then `pip install
-e .` (the editable install, on the same build folder) imports the checkout's Python files."""
import os
import subprocess
import sys
import time

import pytest

README_EXAMPLE = """
import attnsim, numpy as np
q, k, v = (np.random.default_rng(i).standard_normal((1, 8, 1024, 128), dtype=np.float32) for i in range(3))
r = attnsim.attention(q, k, v, method="sage2:arch=sm90")       # o as the H100 kernel returns it: bf16
m = attnsim.metrics(r, attnsim.golden(q, k, v))                 # against FP64 golden attention
print(r.o.dtype, m["cosine"], m["rel_fro"], m["ulp_p99"])
"""

CHECKS = """
import pathlib, attnsim
pkg = pathlib.Path(attnsim.__file__).resolve().parent
print("package", pkg)
assert pathlib.Path(attnsim._core.special_data_dir()).resolve() == pkg / "data", attnsim._core.special_data_dir()
assert attnsim.special("ex2", __import__("numpy").float32([1.0, 0.5])).tolist()[0] == 2.0
"""


def run(cmd, **kw):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    assert p.returncode == 0, f"{cmd}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}"
    return p.stdout


@pytest.mark.long
def test_fresh_venv_pip_install(repo, tmp_path):
    venv, build = tmp_path / "venv", tmp_path / "build"
    run([sys.executable, "-m", "venv", venv])
    py = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    t0 = time.time()
    run([py, "-m", "pip", "install", "-q", "-C", f"build-dir={build}", repo], env=env)
    elapsed = time.time() - t0
    out = run([py, "-c", README_EXAMPLE + CHECKS], cwd=tmp_path, env=env)
    assert "bfloat16" in out and str(venv) in out, out
    print(f"\npip install . into a fresh venv: {elapsed:.0f} s (build isolation, no cache)")
    # The editable install on the same build folder: the simulators' libraries are not compiled
    # again (nanobind's own library and the module are: this venv's nanobind is not the isolated
    # build's).
    t0 = time.time()
    run([py, "-m", "pip", "install", "-q", "scikit-build-core", "nanobind"], env=env)
    run([py, "-m", "pip", "install", "-q", "--no-build-isolation", "-e", repo, "-C", f"build-dir={build}"],
        env=env)
    out = run([py, "-c", "import attnsim, pathlib; print(pathlib.Path(attnsim.__file__).resolve())"],
              cwd=tmp_path, env=env)
    assert out.strip() == str((repo / "experiments/python/attnsim/__init__.py").resolve()), out
    out = run([py, "-c", README_EXAMPLE], cwd=tmp_path, env=env)
    assert "bfloat16" in out
    print(f"pip install -e . on the same build folder: {time.time() - t0:.0f} s")
