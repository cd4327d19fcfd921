"""Reading attnsim's HDF5 files (results tables, dumps) into pandas and numpy: the only part of
the package that imports h5py and pandas.

    import attnsim.results as ar
    points = ar.load_sweep("results/main.h5")            # one row per point (method × input × seed)
    heads = ar.load_per_head("results/main.h5")          # one row per (point, batch, head), joined
    quant = ar.load_quantize("data/results/quant_k.h5")  # `attnsim quantize` tables
    dump = ar.read_dump("data/real/smollm2_gpl3.h5", "layer_15")   # q, k, v + attributes

Layouts: experiments/README.md ("Results layout", "Attention dumps", `attnsim quantize`).
Strings come back as str; the `input` column is split into `input_file` and `input_group`.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import h5py
import numpy as np
import pandas as pd


def find_repo(start=None) -> Path:
    """The attnsim checkout that holds `start` (default: the working directory), found by looking
    upwards for its data/ and experiments/ folders: where the notebooks read bundled data from."""
    here = Path(start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "data" / "real").is_dir() and (d / "experiments" / "notebooks").is_dir():
            return d
    raise FileNotFoundError(f"no attnsim checkout (data/, experiments/) holds {here}")


def _column(ds) -> np.ndarray:
    a = ds[()]
    if a.dtype.kind in "OS":
        a = np.array([x.decode() if isinstance(x, bytes) else str(x) for x in a], dtype=object)
    return a


def _table(group, skip=()) -> pd.DataFrame:
    cols = {}
    for name, ds in group.items():
        if not isinstance(ds, h5py.Dataset) or name in skip or ds.ndim != 1:
            continue
        cols[name] = _column(ds)
    return pd.DataFrame(cols)


def _split_input(df: pd.DataFrame) -> pd.DataFrame:
    if "input" in df:
        parts = df["input"].str.rsplit(":", n=1)
        is_group = df["input"].str.contains(r"\.h5:layer_", regex=True)
        df["input_file"] = np.where(is_group, parts.str[0], df["input"])
        df["input_group"] = np.where(is_group, parts.str[-1], "")
    return df


def load_sweep(path) -> pd.DataFrame:
    """The point table of a `sweep`/`run`/`repro` results file (root or `metrics/`)."""
    with h5py.File(path, "r") as f:
        g = f["metrics"] if "metrics" in f and "point" in f["metrics"] else f
        df = _table(g)
    return _split_input(df)


def load_ulp_hist(path, per_head: bool = False) -> pd.DataFrame:
    """The ULP-distance histograms (rows as in load_sweep / load_per_head, one column per bucket,
    named by the dataset's `buckets` attribute)."""
    with h5py.File(path, "r") as f:
        g = f["metrics"] if "metrics" in f and "point" in f["metrics"] else f
        ds = g["per_head/ulp_hist"] if per_head else g["ulp_hist"]
        b = ds.attrs.get("buckets", "")
        b = b.decode() if isinstance(b, bytes) else b
        names = b.split(",") if isinstance(b, str) else [str(x) for x in b]
        h = ds[()]
    return pd.DataFrame(h, columns=names if len(names) == h.shape[1] else None)


def file_attrs(path) -> dict:
    """Root attributes of an attnsim output (attnsim_version, git_commit, command_line, date, config)."""
    with h5py.File(path, "r") as f:
        return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}


def load_per_head(path) -> pd.DataFrame:
    """The per-head table joined with its point's method, label, input and shape."""
    with h5py.File(path, "r") as f:
        g = f["metrics"] if "metrics" in f and "point" in f["metrics"] else f
        heads = _table(g["per_head"])
    points = load_sweep(path)
    keep = [c for c in ("point", "method", "label", "input", "input_file", "input_group", "seed",
                        "len_q", "len_kv", "head_dim", "causal", "out_format") if c in points]
    return heads.merge(points[keep], on="point", how="left")


def load_quantize(path) -> pd.DataFrame:
    """The table `attnsim quantize --output` writes (one row per group × head × quantizer ×
    granularity × smoothing)."""
    with h5py.File(path, "r") as f:
        df = _table(f)
        tensor = f.attrs.get("tensor", "")
    df["tensor"] = tensor.decode() if isinstance(tensor, bytes) else str(tensor)
    df["smooth"] = df["smooth"].astype(bool)
    return df


def read_dump(path, group: str = "") -> dict:
    """q, k, v ([batch, heads, tokens, head_dim] float32) of a dump group plus root and group
    attributes (group attributes win), token ids and text when present."""
    with h5py.File(path, "r") as f:
        g = f[group] if group else f
        out = {n: g[n][()].astype(np.float32) for n in ("q", "k", "v")}
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
        attrs.update({k: (v.decode() if isinstance(v, bytes) else v) for k, v in g.attrs.items()})
        out["attrs"] = attrs
        if "token_ids" in f:
            out["token_ids"] = f["token_ids"][()]
        if "text" in f:
            t = f["text"][()]
            out["text"] = t.decode() if isinstance(t, bytes) else str(t)
        out["groups"] = [k for k in f.keys() if isinstance(f[k], h5py.Group) and "q" in f[k]]
    return out


def derive_dump(src, group: str, dst, tokens: int | None = None, scale_qk: float = 1.0,
                scale_v: float = 1.0) -> None:
    """A dump holding one group of `src` cut to its first `tokens` queries and keys (for a causal
    decoder these are exactly the activations of the shorter text), Q and K multiplied by
    `scale_qk` (the logits by its square: a sharper or flatter softmax, a different problem) and V
    by `scale_v` (the output scales with it: only the formats' range and precision change).
    Written atomically; attributes `derived_from`, `tokens`, `scale_qk`, `scale_v`."""
    d = read_dump(src, group)
    dst = Path(dst)
    tmp = dst.with_name(dst.name + ".tmp")
    with h5py.File(tmp, "w") as f:
        for k in ("causal", "sm_scale", "rope_applied", "model", "source"):
            if k in d["attrs"]:
                f.attrs[k] = d["attrs"][k]
        n = tokens or d["q"].shape[2]
        if n > d["q"].shape[2] or n > d["k"].shape[2]:
            raise ValueError(f"{src}:{group} has {d['q'].shape[2]} tokens, asked for {n}")
        f.attrs["derived_from"] = f"{src}:{group}"
        f.attrs["tokens"] = n
        f.attrs["scale_qk"] = scale_qk
        f.attrs["scale_v"] = scale_v
        for name in ("q", "k", "v"):
            s = scale_v if name == "v" else scale_qk
            x = (d[name][:, :, :n, :] * np.float32(s)).astype(np.float32)
            f.create_dataset(name, data=x, compression="gzip", shuffle=True)
    os.replace(tmp, dst)


def attnsim_exe() -> str:
    """The attnsim executable (the C++ command line; the pip package does not ship it):
    $ATTNSIM_EXE when set, else build/experiments/attnsim of the checkout that holds the working
    directory or this package (build/python links its files there), else `attnsim` on PATH
    (.ci/setup.sh links it there). FileNotFoundError with one line saying how to get it."""
    env = os.environ.get("ATTNSIM_EXE")
    if env:  # asked for by name: a wrong path is an error, not a reason to run another build
        if Path(env).is_file() and os.access(env, os.X_OK):
            return env
        raise FileNotFoundError(f"ATTNSIM_EXE={env} is not an executable file")
    for start in (None, Path(__file__).resolve().parent):
        try:
            built = find_repo(start) / "build/experiments/attnsim"
        except FileNotFoundError:
            continue
        if built.is_file() and os.access(built, os.X_OK):
            return str(built)
    on_path = shutil.which("attnsim")
    if on_path:
        return on_path
    raise FileNotFoundError("attnsim executable not found (ATTNSIM_EXE, a checkout's "
                            "build/experiments/attnsim, PATH): in a checkout, `bash .ci/main` "
                            "builds it and links it onto PATH, or set ATTNSIM_EXE=/path/to/attnsim")


def decode_all(fmt: str) -> np.ndarray:
    """Every encoding of an 8- or 16-bit format decoded (attnsim.convert(..., decode=True), the
    code of `attnsim convert --decode`; float32, index = code): e4m3fn, e5m2, bf16, fp16, int8,
    int4 (int4: the 16 codes)."""
    import attnsim
    if fmt == "int4":
        return attnsim.convert(np.arange(16, dtype=np.uint8).astype(np.int8) << 4 >> 4, "int4",
                               decode=True, scale=1.0)
    width = {"e4m3fn": 8, "e5m2": 8, "int8": 8, "bf16": 16, "fp16": 16}[fmt]
    codes = np.arange(1 << width, dtype=np.uint8 if width == 8 else np.uint16)
    return attnsim.convert(codes, fmt, decode=True, scale=1.0 if fmt == "int8" else None)
