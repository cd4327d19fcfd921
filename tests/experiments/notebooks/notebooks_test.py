"""The researcher notebooks (experiments/notebooks/*.ipynb) run headless without errors.

Usage: notebooks_test.py ATTNSIM_EXE [NOTEBOOK ...]

Each notebook is executed top to bottom by nbclient in a fresh kernel of this Python (a temporary
kernelspec pointing at sys.executable, so a system-wide Jupyter kernel with other packages cannot
be picked up), with the working directory at the repository root, the bundled results
(data/results/), ATTNSIM_EXE set and figures written to a temporary directory. A cell error (the
notebooks also assert the facts their figures show) fails the test; so does a notebook that writes
no PNG or a committed notebook that still holds outputs (they are stripped before commit).
"""
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def main():
    if len(sys.argv) < 2 or not os.path.exists(sys.argv[1]):
        print("usage: notebooks_test.py ATTNSIM_EXE [NOTEBOOK ...]")
        return 2
    try:
        import nbformat
        from nbclient import NotebookClient
        from nbclient.exceptions import CellExecutionError
    except ImportError as e:
        print(f"FAIL missing python package: {e} (run .ci/setup.sh)")
        return 1
    books = [Path(p) for p in sys.argv[2:]] or sorted((REPO / "experiments/notebooks").glob("*.ipynb"))
    if len(books) < 3:
        print(f"FAIL expected at least three notebooks, found {len(books)}")
        return 1
    failures = 0
    with tempfile.TemporaryDirectory() as td:
        kdir = Path(td) / "jupyter/kernels/attnsim-python"
        kdir.mkdir(parents=True)
        (kdir / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "attnsim python", "language": "python"}))
        os.environ["JUPYTER_PATH"] = str(Path(td) / "jupyter")
        os.environ["ATTNSIM_EXE"] = os.path.abspath(sys.argv[1])
        os.environ["MPLBACKEND"] = "Agg"
        for book in books:
            nb = nbformat.read(book, as_version=4)
            stale = [i for i, c in enumerate(nb.cells)
                     if c.cell_type == "code" and (c.get("outputs") or c.get("execution_count"))]
            figs = Path(td) / ("figures_" + book.stem)
            os.environ["ATTNSIM_FIGURES"] = str(figs)
            try:
                NotebookClient(nb, timeout=600, kernel_name="attnsim-python",
                               resources={"metadata": {"path": str(REPO)}}).execute()
                pngs = sorted(figs.glob("*.png"))
                ok = bool(pngs) and all(p.stat().st_size > 1000 for p in pngs) and not stale
                why = (f"{len(pngs)} figures" if not stale else f"outputs not stripped in cells {stale}")
            except CellExecutionError as e:
                ok, why = False, "cell error: " + str(e).strip().splitlines()[-1][:300]
            print(("ok   " if ok else "FAIL ") + f"{book.name}: {why}")
            failures += not ok
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
