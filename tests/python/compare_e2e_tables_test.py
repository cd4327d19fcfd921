"""experiments/python/compare_e2e_tables.py: a bundled e2e table against itself split in two files
(equal: exit 0), against a copy with one metric's last digit changed (exit 1, the row named) and
with a timing changed (not compared: exit 0); a newer table's extra columns named and not compared;
a table without the reference's columns and an unreadable file are refused in one line."""
import csv
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "experiments/python/compare_e2e_tables.py"
TABLE = REPO / "data/results/e2e_smollm2.csv"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, timeout=60)


def write(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=header)
        w.writeheader()
        w.writerows(rows)


def test_equal_split_changed_and_timing(tmp_path):
    with open(TABLE, newline="") as f:
        r = csv.DictReader(f)
        header, rows = r.fieldnames, list(r)
    write(tmp_path / "a.csv", header, rows[:5])
    write(tmp_path / "b.csv", header, rows[5:])
    p = run(TABLE, tmp_path / "a.csv", tmp_path / "b.csv")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "0 row(s) differ" in p.stdout

    changed = [dict(x) for x in rows]
    v = changed[3]["kl_mean"]
    changed[3]["kl_mean"] = v[:-1] + ("1" if v[-1] != "1" else "2")
    write(tmp_path / "c.csv", header, changed)
    p = run(TABLE, tmp_path / "c.csv")
    assert p.returncode == 1
    assert "row 3" in p.stdout and "kl_mean" in p.stdout

    timed = [dict(x) for x in rows]
    timed[0]["time_s"] = "123.0"
    write(tmp_path / "d.csv", header, timed)
    assert run(TABLE, tmp_path / "d.csv").returncode == 0


def test_other_columns_refused(tmp_path):
    write(tmp_path / "x.csv", ["model", "method"], [{"model": "smollm2", "method": "flash"}])
    p = run(TABLE, tmp_path / "x.csv")
    assert p.returncode != 0
    assert "columns differ" in p.stderr


def test_new_columns_are_named_not_compared(tmp_path):
    # A newer attnsim's table: the reference's columns equal, one more column.
    with open(TABLE, newline="") as f:
        ref = list(csv.DictReader(f))
    wider = [dict(x, kld_p999="0.5") for x in ref]
    write(tmp_path / "w.csv", list(ref[0]) + ["kld_p999"], wider)
    p = run(TABLE, tmp_path / "w.csv")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "only in the new table, not compared: kld_p999" in p.stdout
    wider[2]["kl_mean"] = "1.0"
    write(tmp_path / "w2.csv", list(ref[0]) + ["kld_p999"], wider)
    assert run(TABLE, tmp_path / "w2.csv").returncode == 1


def test_unreadable_files_are_one_line(tmp_path):
    for bad in (tmp_path / "missing.csv", tmp_path):
        p = run(TABLE, bad)
        assert p.returncode != 0
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("compare_e2e_tables: cannot read"), p.stderr
        assert "Traceback" not in p.stderr
