#!/usr/bin/env python3
"""Packs what `run_lean.sh OUT` wrote into data/hw/h100/lean/: lean_h100.h5 (the recorded cases,
read by the CPU check of sim/lean) and lean_timings.csv (the timings, copied after a column check),
plus the log, environment and SASS files.

OUT/lean_manifest.json lists, per case, its attributes and the arrays of OUT/lean_record.bin
(path, little-endian dtype, shape, byte offset). Every array becomes the dataset of that path
(gzip 9 with shuffle); the manifest's per-group attributes become HDF5 attributes:
  CASE            batch hq hk d g dtype lk_max block_m block_n m_blocks num_sms seed
                  softmax_scale_bits scale_log2_bits max_abs_v tolerance repeat_identical
                  checks_passed kind note
  CASE/lean       grid total_tiles max_tiles_per_tb high_load_tbs num_n_blocks num_splits
                  num_splits_ort host_max_splits host_values_per_lane max_abs_err
  CASE/fd_sN      num_splits nbps heuristic combine_rows combine_max_splits combine_lanes
                  combine_values_per_lane combine_grid max_abs_err
data/hw/h100/lean/README.md documents every dataset.

Options: --drop NAME,NAME leaves those cases out; --fd-partials heuristic keeps the FlashDecoding
o_partial only for the heuristic's split count (lse_partial and o stay for every count). The SASS
listing is trimmed to the fp16 kernels (lean, fd and combine for D = 64 and 128) and gzipped.

Usage: python3 pack_lean.py OUT DEST_DIR [--drop ...] [--fd-partials heuristic] [attr=value ...]
(attr=value pairs become root attributes, e.g. gpu=..., driver=...)"""
import gzip
import re
import csv
import json
import os
import shutil
import sys

import h5py
import numpy as np

SEG_COLUMNS = "cta,batch,kv_head,m_block,n_tile_begin,n_tile_end,host,finisher,split,total_splits"
CSV_COLUMNS = ("config,kind,kernel,batch,hq,hk,d,lk_max,lk_sum,lk,ragged_spec,kv_bytes,grid,"
               "combine_grid,tiles,num_splits,max_tiles_per_tb,high_load_tbs,time_us,p10_us,"
               "p90_us,launches,rotation,max_abs_diff_vs_fd1").split(",")


def trim_sass(src_gz, dst_gz):
    """Keeps the fp16 instantiations (template argument `Lb0E`) of the three kernels."""
    text = gzip.open(src_gz, "rt").read()
    parts = re.split(r"(?=\t\tFunction : )", text)
    keep = [parts[0]] + [p for p in parts[1:]
                         if "ELb0E" in p.split("\n", 1)[0] and "fill_kernel" not in p.split("\n", 1)[0]]
    with gzip.open(dst_gz, "wt", compresslevel=9) as f:
        f.write("".join(keep))


def main(src, dest, *rest):
    drop, fd_partials, attrs = set(), "all", []
    i = 0
    while i < len(rest):
        if rest[i] == "--drop":
            drop = set(rest[i + 1].split(","))
            i += 2
        elif rest[i] == "--fd-partials":
            fd_partials = rest[i + 1]
            i += 2
        else:
            attrs.append(rest[i])
            i += 1
    os.makedirs(dest, exist_ok=True)
    man = json.load(open(os.path.join(src, "lean_manifest.json")))
    blob = open(os.path.join(src, "lean_record.bin"), "rb").read()
    kw = dict(compression="gzip", compression_opts=9, shuffle=True)
    out = os.path.join(dest, "lean_h100.h5")
    end = 0
    with h5py.File(out + ".tmp", "w") as w:
        w.attrs["device"] = man["device"]
        w.attrs["device_sms"] = man["sms"]
        w.attrs["segment_columns"] = SEG_COLUMNS
        for a in attrs:
            k, v = a.split("=", 1)
            w.attrs[k] = v
        w.attrs["dropped_cases"] = ",".join(sorted(drop))
        w.attrs["fd_partials"] = fd_partials
        for case in man["cases"]:
            for arr in case["arrays"]:
                dt = np.dtype(arr["dtype"])
                n = int(np.prod(arr["shape"])) if arr["shape"] else 1
                end = max(end, arr["offset"] + n * dt.itemsize)
            if case["name"] in drop:
                continue
            g = w.create_group(case["name"])
            g.attrs["kind"] = case["kind"]
            g.attrs["note"] = case["note"]
            for k, v in case["attrs"].items():
                g.attrs[k] = v
            for key, val in case.items():
                if key == "lean" or key.startswith("fd_s"):
                    sub = g.require_group(key)
                    for k, v in val.items():
                        sub.attrs[k] = v
            heuristic = [k for k, v in case.items() if k.startswith("fd_s") and v["heuristic"]]
            for arr in case["arrays"]:
                grp = arr["path"].split("/")[1]
                if (fd_partials == "heuristic" and grp.startswith("fd_s") and grp not in heuristic
                        and arr["path"].endswith("/o_partial")):
                    continue
                dt = np.dtype(arr["dtype"])
                n = int(np.prod(arr["shape"])) if arr["shape"] else 1
                data = np.frombuffer(blob, dtype=dt, count=n, offset=arr["offset"])
                w.create_dataset(arr["path"], data=data.reshape(arr["shape"]), **kw)
            g["lean/segments"].attrs["columns"] = SEG_COLUMNS
            g["lean/cta_tiles"].attrs["columns"] = "tile_start,tile_count"
    assert end == len(blob), (end, len(blob))
    os.replace(out + ".tmp", out)

    raw = os.path.join(src, "lean_time_raw.csv")
    if os.path.exists(raw):
        rows = list(csv.DictReader(open(raw)))
        assert rows and list(rows[0].keys()) == CSV_COLUMNS, "unexpected timing columns"
        shutil.copyfile(raw, os.path.join(dest, "lean_timings.csv"))
    for name in ("lean_log.txt", "lean_env.txt", "lean_sass_summary.txt"):
        if os.path.exists(os.path.join(src, name)):
            shutil.copyfile(os.path.join(src, name), os.path.join(dest, name))
    if os.path.exists(os.path.join(src, "lean_sass.txt.gz")):
        trim_sass(os.path.join(src, "lean_sass.txt.gz"), os.path.join(dest, "lean_sass.txt.gz"))
    kept = len([c for c in man["cases"] if c["name"] not in drop])
    print(f"{out}: {os.path.getsize(out) / 1e6:.2f} MB, {kept} cases")


if __name__ == "__main__":
    main(*sys.argv[1:])
