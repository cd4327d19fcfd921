"""Shared fixtures of the Python package's tests: the repository root, the `attnsim` executable the
package is compared with (ATTNSIM_EXE, as CTest sets it, else build/experiments/attnsim), and a
runner that returns its exit code and one-line error."""
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


@pytest.fixture(scope="session")
def exe() -> str:
    path = os.environ.get("ATTNSIM_EXE") or str(REPO / "build/experiments/attnsim")
    if not Path(path).is_file():
        if os.environ.get("ATTNSIM_EXE"):
            pytest.fail(f"ATTNSIM_EXE={path} does not exist")
        pytest.skip("no attnsim executable to compare with (build it, or set ATTNSIM_EXE)")
    return path


class Cli:
    def __init__(self, exe):
        self.exe = exe

    def __call__(self, *args, check=True):
        """Runs `attnsim ARGS`; returns (exit code, stdout, the error line without its prefix)."""
        p = subprocess.run([self.exe, *map(str, args)], capture_output=True, text=True)
        err = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ""
        err = err.removeprefix("attnsim: error: ")
        if check and p.returncode != 0:
            raise AssertionError(f"attnsim {' '.join(map(str, args))}: exit {p.returncode}: {err}")
        return p.returncode, p.stdout, err


@pytest.fixture(scope="session")
def cli(exe) -> Cli:
    return Cli(exe)


def bits(a: np.ndarray) -> np.ndarray:
    """The bit patterns of a float array (for bit-for-bit comparisons, NaNs included)."""
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def e2e_cli(*args, tmp=None):
    """`python3 -m attnsim e2e ARGS` on the package the tests imported, whatever the working
    directory (PYTHONPATH may be relative): the CompletedProcess."""
    import attnsim
    pkg = os.path.dirname(os.path.dirname(os.path.abspath(attnsim.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([pkg, os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "attnsim", "e2e", *map(str, args)],
                          capture_output=True, text=True, cwd=tmp, env=env)
