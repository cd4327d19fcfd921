#!/usr/bin/env python3
"""Compares e2e CSV tables (`python3 -m attnsim e2e --output/--per-layer`) cell by cell as text, the
way a reproduction of the bundled data/results/e2e_*.csv is checked: every column but the run's
timings and version (time_s, cpu_s, ref_time_s, attnsim_version) and any named with --skip must be
equal as written (17 significant digits: equal text is equal bits). Several NEW files are read as
one table in the order given (a table regenerated one method per process). Columns that only the
NEW table has (a newer attnsim's) are named and not compared; a column of the reference missing
from NEW is an error.

Usage: python3 experiments/python/compare_e2e_tables.py REFERENCE.csv NEW.csv [NEW2.csv ...]
           [--skip COLUMN ...]
Exit 0 when every compared cell is equal, 1 otherwise (the differing rows are printed); a file
that cannot be read or a table of other columns is one line on stderr and exit 1.
"""
import argparse
import csv
import sys

TIMINGS = {"time_s", "cpu_s", "ref_time_s", "attnsim_version"}


def rows(path):
    try:
        with open(path, newline="") as f:
            return list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        sys.exit(f"compare_e2e_tables: cannot read {path}: {e.strerror or e}"
                 if isinstance(e, OSError) else f"compare_e2e_tables: cannot read {path}: {e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("reference")
    ap.add_argument("new", nargs="+")
    ap.add_argument("--skip", nargs="*", default=[],
                    help="more columns not to compare (e.g. run: the run index of a table "
                         "regenerated one method per process)")
    a = ap.parse_args()
    ref = rows(a.reference)
    new = [r for p in a.new for r in rows(p)]
    if not ref or not new:
        sys.exit(f"compare_e2e_tables: an empty table ({a.reference} or {a.new})")
    missing = [c for c in ref[0] if c not in new[0]]
    if missing:
        sys.exit(f"compare_e2e_tables: the columns differ: {a.new[0]} lacks {missing}")
    extra = [c for c in new[0] if c not in ref[0]]
    if extra:
        print(f"{len(extra)} column(s) only in the new table, not compared: {', '.join(extra)}")
    cols = [c for c in ref[0] if c not in TIMINGS and c not in set(a.skip)]
    bad = 0
    if len(ref) != len(new):
        print(f"row counts differ: {len(ref)} against {len(new)}")
        bad += 1
    for i, (x, y) in enumerate(zip(ref, new)):
        d = [c for c in cols if x[c] != y[c]]
        if d:
            bad += 1
            print(f"row {i} ({x.get('label', '')}): " +
                  ", ".join(f"{c} {x[c]} -> {y[c]}" for c in d[:6]))
    print(f"{a.reference}: {len(ref)} rows x {len(cols)} columns compared, "
          f"{bad} row(s) differ")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
