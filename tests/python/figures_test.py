"""experiments/python/make_figures.py (issue 38): the three PNGs from the bundled results, the main
table from a sweep with a skipped point, and bad input: one line, exit 2, no PNG written."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "experiments/python/make_figures.py"
FIGURES = ("main_table.png", "attribution.png", "e2e_smollm2.png")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def make_figures(*args, cwd):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, MPLBACKEND="Agg"))


def check_pngs(out: Path):
    import matplotlib.image as mpimg
    for name in FIGURES:
        p = out / name
        assert p.is_file(), name
        assert p.read_bytes()[:8] == PNG_MAGIC, name
        assert 5_000 < p.stat().st_size < 300_000, (name, p.stat().st_size)
        img = mpimg.imread(p)
        assert img.ndim == 3 and img.shape[2] in (3, 4), (name, img.shape)
        assert img.shape[0] > 150 and img.shape[1] > 400, (name, img.shape)
    assert sorted(x.name for x in out.iterdir()) == sorted(FIGURES)  # no temporary file left


def test_bundled_results(tmp_path):
    # No results/main.h5 in the working directory: the main table falls back to the bundled
    # real_methods.h5 (as --no-main makes it).
    out = tmp_path / "figs"
    p = make_figures("--results", REPO / "data/results", "--out", out, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("wrote ") == 3, p.stdout
    check_pngs(out)


def test_main_results_with_a_skipped_point(tmp_path, exe):
    main = tmp_path / "results" / "main.h5"
    main.parent.mkdir()
    subprocess.run([exe, "sweep", "--methods", "flash,kivi:mode=decode", "--input",
                    "data/bundled/kbias_gqa.h5", "--skip-unsupported", "--output", main,
                    "--quiet"], cwd=REPO, check=True, capture_output=True, timeout=120)
    out = tmp_path / "figs"
    # results/main.h5 below the working directory is read by default.
    p = make_figures("--results", REPO / "data/results", "--out", out, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "main_table.png" in p.stdout
    check_pngs(out)


def one_error_line(p):
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert len(lines) == 1 and lines[0].startswith("make_figures: error: "), p.stderr
    return lines[0]


@pytest.mark.parametrize("case", ["no_e2e", "no_attribution", "no_main", "not_hdf5", "no_results",
                                  "bad_option", "main_and_no_main"])
def test_bad_input_exit_2_and_nothing_written(tmp_path, case):
    res = tmp_path / "res"
    res.mkdir()
    src = REPO / "data/results"
    shutil.copy(src / "real_methods.h5", res)
    if case != "no_e2e":
        shutil.copy(src / "e2e_smollm2.csv", res)
    if case != "no_attribution":
        (res / "attribution").mkdir()
        shutil.copy(src / "attribution/sage1_smollm2.csv", res / "attribution")
    (tmp_path / "not.h5").write_text("not an HDF5 file\n")
    args = {"no_e2e": [], "no_attribution": [], "no_main": ["--main", tmp_path / "missing.h5"],
            "not_hdf5": ["--main", tmp_path / "not.h5"], "no_results": [],
            "bad_option": ["--colour", "red"], "main_and_no_main": ["--main", "x", "--no-main"]}
    results = tmp_path / "nothing" if case == "no_results" else res
    out = tmp_path / "figs"
    p = make_figures("--results", results, *args[case], "--out", out, cwd=tmp_path)
    line = one_error_line(p)
    want = {"no_e2e": "e2e_smollm2.csv", "no_attribution": "attribution", "no_main": "missing.h5",
            "not_hdf5": "not.h5", "no_results": "nothing", "bad_option": "--colour",
            "main_and_no_main": "--no-main"}[case]
    assert want in line, line
    assert not out.exists() or not any(out.iterdir()), list(out.iterdir())
    assert not list(tmp_path.rglob("*.png"))
