#!/usr/bin/env python3
"""The results as pictures (issue 38): three PNGs drawn from attnsim's results files.

    python3 experiments/python/make_figures.py [--results DIR] [--main FILE | --no-main] [--out DIR]

Run from the repository root (the defaults are relative to the current directory, as attnsim's
own paths are):

- `main_table.png`: the main job's table, relative L1 error against FP64 golden attention per
  method (rows) and input (columns), log colour scale, the value in each cell, `n/a` where the
  kernel does not take the input. From `--main FILE`, by default `results/main.h5` when present
  (`bash .ci/main` writes it: `attnsim sweep --config experiments/configs/main.toml`); otherwise,
  or with `--no-main`, from the bundled `DIR/real_methods.h5` (same layout: FlashAttention's
  storage formats on the real-model layers), and the title says which.
- `attribution.png`: `DIR/attribution/N_D.csv` (`attnsim attribute`): for each method N and
  stage, the error of that stage alone (everything else exact, column `this_only_rel_fro`) as a
  share of the method's error (`rel_fro` of row `all`), medians over the layers, one panel per
  model D; the row `outside` (steps no stage holds) as a last stage column.
- `e2e_smollm2.png`: `DIR/e2e_smollm2.csv` (`python3 -m attnsim e2e`): SmolLM2's KL(reference ‖
  method) mean (log scale) and top-1 agreement with the FP64-golden forward, one bar per method.

Missing or NaN values are drawn as `n/a`, never as zero. A missing or unreadable input file, a
file of the wrong layout or a bad argument: one line `make_figures: error: ...` on stderr, exit 2,
nothing written. Every PNG is drawn to a temporary file in `--out` and renamed into place only
after all three were drawn, so a failed run leaves no partial PNG.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path

PROG = "make_figures"
DPI = 110
FIGURES = ("main_table.png", "attribution.png", "e2e_smollm2.png")
STAGES = ["q", "k", "v", "qk", "softmax", "exp", "p", "pv", "rescale", "normalize", "out"]
# data/results/README.md, "attribution/": file stem N -> the method string it attributes.
ATTRIBUTION_METHODS = {
    "F": "F: flash bf16 on HMMA", "sage1": "sage1", "sage2_sm80": "sage2:arch=sm80",
    "sage2_sm89": "sage2:arch=sm89", "sage2_sm90": "sage2:arch=sm90",
    "sage2_paper": "sage2:arch=paper", "turbo_prefill": "turbo:mode=prefill",
    "turbo": "turbo", "kivi": "kivi", "amla": "amla (CANN)",
    "amla_paper": "amla:variant=paper", "amla_h100": "amla:target=h100",
    "lean_all": "lean:mblocks=all", "splitkv": "splitkv", "A": "A: composition A",
    "B": "B: composition B",
}
E2E_MODELS = {"smollm2": "SmolLM2-135M", "minilm": "all-MiniLM-L6-v2"}
MODELS = {"smollm2": "SmolLM2-135M (causal, GQA)", "minilm": "all-MiniLM-L6-v2 (bidirectional)"}
UMASK = os.umask(0)
os.umask(UMASK)
NA_STYLE = dict(facecolor="#eeeeee", edgecolor="#bbbbbb", hatch="///", linewidth=0)


class FigError(Exception):
    """An input or argument problem: one line, exit 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 2, as attnsim's commands do
        raise FigError(message)


def one_line(text) -> str:
    return " ".join(str(text).split())


def shown(path: Path) -> str:
    """A path as the figures name it: as given when relative, else relative to the current
    directory when it lies below it."""
    p = Path(path)
    if not p.is_absolute():
        return p.as_posix()
    try:
        return p.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return p.as_posix()


def need_file(path: Path, what: str) -> Path:
    if not path.exists():
        raise FigError(f"{what} {path}: no such file")
    if not path.is_file():
        raise FigError(f"{what} {path}: not a regular file")
    return path


# ---------------------------------------------------------------- reading the inputs


def read_sweep(path: Path):
    """The point table of an `attnsim sweep` results file: label, input, rel_l1, skipped."""
    import h5py
    import numpy as np
    import pandas as pd
    try:
        with h5py.File(path, "r") as f:
            g = f["metrics"] if "metrics" in f and "point" in f["metrics"] else f
            missing = [c for c in ("input", "rel_l1") if c not in g]
            if missing or ("label" not in g and "method" not in g):
                raise FigError(f"{path}: not an attnsim sweep results file (no "
                               f"{'/'.join(missing) or 'label'} column)")

            def col(name):
                a = g[name][()]
                if a.dtype.kind in "OS":
                    a = np.array([x.decode() if isinstance(x, bytes) else str(x) for x in a],
                                 dtype=object)
                return a

            df = pd.DataFrame({"label": col("label" if "label" in g else "method"),
                               "input": col("input"), "rel_l1": col("rel_l1").astype(float)})
            df["skipped"] = col("skipped") if "skipped" in g else ""
            attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
    except FigError:
        raise
    except (OSError, KeyError, ValueError) as e:
        raise FigError(f"{path}: cannot read it as an attnsim results file ({one_line(e)})")
    if df.empty:
        raise FigError(f"{path}: holds no points")
    return df, attrs


def read_attribution(folder: Path):
    import pandas as pd
    if not folder.is_dir():
        raise FigError(f"attribution folder {folder}: no such directory")
    files = sorted(folder.glob("*_*.csv"))
    if not files:
        raise FigError(f"attribution folder {folder}: no N_D.csv tables (attnsim attribute --out)")
    frames = []
    for p in files:
        name, model = p.stem.rsplit("_", 1)
        try:
            d = pd.read_csv(p)
        except (OSError, ValueError) as e:
            raise FigError(f"{p}: cannot read it as CSV ({one_line(e)})")
        missing = [c for c in ("input", "stage", "rel_fro", "this_only_rel_fro") if c not in d]
        if missing:
            raise FigError(f"{p}: not an attnsim attribute table (no {', '.join(missing)} column)")
        d = d[["input", "stage", "rel_fro", "this_only_rel_fro"]].copy()
        for c in ("rel_fro", "this_only_rel_fro"):
            d[c] = pd.to_numeric(d[c], errors="coerce")
        d["name"], d["model"] = name, model
        frames.append(d)
    return pd.concat(frames, ignore_index=True)


def read_e2e(path: Path):
    import pandas as pd
    try:
        d = pd.read_csv(path)
    except (OSError, ValueError) as e:
        raise FigError(f"{path}: cannot read it as CSV ({one_line(e)})")
    missing = [c for c in ("label", "kl_mean", "top1") if c not in d]
    if missing:
        raise FigError(f"{path}: not an attnsim e2e table (no {', '.join(missing)} column)")
    if d.empty:
        raise FigError(f"{path}: holds no rows")
    for c in ("kl_mean", "top1", "tokens", "n_pred"):
        if c in d:
            d[c] = pd.to_numeric(d[c], errors="coerce")
    return d


# ---------------------------------------------------------------- drawing


def text_colour(rgba) -> str:
    r, g, b = rgba[:3]
    return "white" if 0.299 * r + 0.587 * g + 0.114 * b < 0.5 else "black"


def cell_grid(ax, ncols: int, nrows: int) -> None:
    """White lines between a heatmap's cells, no ticks, no frame."""
    import numpy as np
    ax.tick_params(which="both", length=0)
    ax.set_xticks(np.arange(ncols + 1) - 0.5, minor=True)
    ax.set_yticks(np.arange(nrows + 1) - 0.5, minor=True)
    ax.grid(which="minor", color="white", linewidth=1)
    for s in ax.spines.values():
        s.set_visible(False)


def na_cell(ax, x, y, fontsize):
    from matplotlib.patches import Rectangle
    ax.add_patch(Rectangle((x - 0.5, y - 0.5), 1, 1, **NA_STYLE))
    ax.text(x, y, "n/a", ha="center", va="center", fontsize=fontsize, color="#666666")


def short_input(name: str) -> str:
    """data/real/smollm2_gpl3.h5:layer_15 -> smollm2_gpl3\\nlayer_15; synthetic specs as given."""
    if name.startswith("synthetic:"):
        return "\n".join(re.findall(r".{1,18}(?:,|$)", name[len("synthetic:"):])) or name
    path, _, group = name.partition(".h5:")
    base = Path(path if group else name).name
    base = base[:-3] if base.endswith(".h5") else base
    return f"{base}\n{group}" if group else base


def source_line(path: Path, attrs: dict, fallback: bool) -> str:
    cmd = str(attrs.get("command_line", ""))
    m = re.search(r"--config\s+(\S+)", cmd)
    what = f"attnsim sweep --config {m.group(1)}" if m else "attnsim sweep"
    prov = ", ".join(x for x in (
        f"attnsim {attrs['attnsim_version']}" if attrs.get("attnsim_version") else "",
        f"commit {attrs['git_commit']}" if attrs.get("git_commit") else "",
        str(attrs.get("date", ""))[:10]) if x)
    line = f"from {shown(path)} ({what}; {prov})" if prov else f"from {shown(path)} ({what})"
    if fallback:
        line = (f"from the bundled {shown(path)} ({what}; {prov}),\nnot the main job's "
                "results/main.h5 (bash .ci/main writes it)")
    return line


def draw_main_table(df, attrs, path: Path, fallback: bool):
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import LogNorm

    rows = list(dict.fromkeys(df["label"]))
    cols = list(dict.fromkeys(df["input"]))
    ok = df[np.isfinite(df["rel_l1"]) & (df["skipped"] == "")]
    table = ok.groupby(["label", "input"])["rel_l1"].mean().unstack("input")
    table = table.reindex(index=rows, columns=cols)
    vals = table.to_numpy(dtype=float)
    pos = vals[np.isfinite(vals) & (vals > 0)]
    lo, hi = (pos.min(), pos.max()) if pos.size else (1e-8, 1.0)
    if hi <= lo:
        lo, hi = lo / 10, hi * 10
    norm = LogNorm(10 ** np.floor(np.log10(lo)), 10 ** np.ceil(np.log10(hi)))
    cmap = plt.get_cmap("YlOrRd")

    longest = max(len(r) for r in rows)
    w = 1.6 + 0.075 * longest + 1.15 * len(cols) + 1.2
    h = 1.9 + 0.32 * len(rows)
    fig, ax = plt.subplots(figsize=(max(w, 7.5), h), layout="constrained")
    shown_vals = np.where(np.isfinite(vals), np.clip(vals, norm.vmin, norm.vmax), np.nan)
    im = ax.imshow(np.ma.masked_invalid(shown_vals), cmap=cmap, norm=norm, aspect="auto")
    for i in range(len(rows)):
        for j in range(len(cols)):
            v = vals[i, j]
            if not np.isfinite(v):
                na_cell(ax, j, i, 8)
            else:
                ax.text(j, i, f"{v:.2e}", ha="center", va="center", fontsize=8,
                        color=text_colour(cmap(norm(max(v, norm.vmin)))))
    ax.set_xticks(range(len(cols)), [short_input(c) for c in cols], fontsize=8.5)
    ax.xaxis.tick_top()
    ax.set_yticks(range(len(rows)), rows, fontsize=8.5)
    cell_grid(ax, len(cols), len(rows))
    cb = fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02)
    cb.set_label("relative L1 error vs FP64 golden (log scale)", fontsize=8.5)
    cb.ax.tick_params(labelsize=8)
    seeds = df.groupby(["label", "input"]).size().max()
    mean = f", mean over {seeds} seeds" if seeds > 1 else ""
    fig.suptitle("Relative L1 error against FP64 golden attention, per method and input" + mean
                 + "\n" + source_line(path, attrs, fallback), fontsize=10, x=0.01, ha="left")
    if not np.isfinite(vals).all():
        ax.set_xlabel("n/a: the kernel does not take this input (the results' `skipped` column "
                      "says why) or gave no finite value", fontsize=7.5, color="#444444",
                      loc="left")
    return fig


def draw_attribution(att, folder: Path):
    import matplotlib.pyplot as plt
    import numpy as np

    models = [m for m in MODELS if m in set(att["model"])] + \
        sorted(set(att["model"]) - set(MODELS))
    names_present = set(att["name"])
    order = [n for n in ATTRIBUTION_METHODS if n in names_present] + \
        sorted(names_present - set(ATTRIBUTION_METHODS))
    labels = [ATTRIBUTION_METHODS.get(n, n) for n in order]
    stages = STAGES + (["outside"] if (att["stage"] == "outside").any() else [])
    has_outside = set(att.loc[att["stage"] == "outside", "name"] + "/" +
                      att.loc[att["stage"] == "outside", "model"])

    cmap = plt.get_cmap("Blues")
    failed = []  # (name, model), error: a method whose error is 100 % or more (or NaN)
    ncol = len(stages) + 1
    fig, axes = plt.subplots(1, len(models), sharey=True, squeeze=False, layout="constrained",
                             figsize=(2.2 + 5.4 * len(models), 2.4 + 0.3 * len(order)))
    for ax, model in zip(axes[0], models):
        a = att[att["model"] == model]
        method_err = a[a["stage"] == "all"].groupby("name")["rel_fro"].median()
        failed += [((n, model), e) for n, e in method_err.items() if not e < 1]
        this_only = a[a["stage"].isin(stages)].groupby(["name", "stage"])["this_only_rel_fro"] \
            .median().unstack("stage").reindex(index=order, columns=stages)
        share = this_only.div(method_err.reindex(order), axis=0).to_numpy(dtype=float)
        ax.imshow(np.ma.masked_invalid(np.clip(share, 0, 1) * 100), cmap=cmap, vmin=0, vmax=100,
                  aspect="auto", extent=(-0.5, len(stages) - 0.5, len(order) - 0.5, -0.5))
        for i, n in enumerate(order):
            err = method_err.get(n, np.nan)
            run = n in set(a["name"])
            for j, st in enumerate(stages):
                v = share[i, j]
                if st == "outside" and run and f"{n}/{model}" not in has_outside:
                    continue  # no step outside the stages: an empty cell, not a missing one
                if not np.isfinite(v):
                    na_cell(ax, j, i, 6.5)
                elif v < 0.01:
                    ax.text(j, i, "<1", ha="center", va="center", fontsize=6.5, color="#888888")
                else:
                    ax.text(j, i, f"{100 * v:.0f}", ha="center", va="center", fontsize=7,
                            color=text_colour(cmap(min(v, 1.0))))
            j = len(stages)
            if np.isfinite(err):
                ax.text(j + 0.1, i, f"{err:.1e}", ha="center", va="center", fontsize=7)
            else:
                na_cell(ax, j + 0.1, i, 6.5)
        ax.set_xlim(-0.5, ncol - 0.3)
        ax.set_ylim(len(order) - 0.5, -0.5)
        ax.set_xticks(list(range(len(stages))) + [len(stages) + 0.1],
                      stages + ["method\nrel_fro"], fontsize=8, rotation=50)
        plt.setp(ax.get_xticklabels()[:-1], ha="right", rotation_mode="anchor")
        ax.get_xticklabels()[-1].set(rotation=0, ha="center")
        ax.set_yticks(range(len(order)), labels, fontsize=8.5)
        cell_grid(ax, len(stages), len(order))
        ax.set_title(MODELS.get(model, model) + f": {a['input'].nunique()} layers",
                     fontsize=9.5)
    fig.suptitle("Where each method's error comes from: the error of one stage alone (every other "
                 "stage exact) as % of the method's error, median over the layers\nfrom "
                 f"{shown(folder)}/N_D.csv (attnsim attribute: this_only_rel_fro / rel_fro of "
                 "row all)", fontsize=10, x=0.01, ha="left")
    notes = ["Shares need not add up to 100 (stage errors add as vectors); over 100: the stage "
             "alone costs more than the method. outside: steps no stage holds (KIVI's cache, the "
             "split reduction);"]
    line = []
    if "kivi" in names_present:
        line.append("KIVI's cache stays in every column, so kivi reads 100 throughout.")
    if "turbo" in names_present:
        line.append("turbo: decode over its 4-bit cache on SmolLM2, prefill on MiniLM.")
    line += [f"{ATTRIBUTION_METHODS.get(n, n).split(':')[0]} fails on "
             f"{MODELS.get(m, m).split(' ')[0]} (rel_fro {e:.0e}): its shares mean nothing."
             for (n, m), e in failed]
    notes += [" ".join(line)] if line else []
    notes.append("n/a: not run on this model (data/results/README.md says why); <1: under 1 %.")
    fig.supxlabel("\n".join(notes), fontsize=7.5, color="#444444", x=0.01, ha="left",
                  multialignment="left")
    return fig


def draw_e2e(d, path: Path):
    import matplotlib.pyplot as plt
    import numpy as np

    d = d.copy()
    d["label"] = d["label"].astype(str)
    d = d.sort_values("kl_mean", na_position="last", kind="stable").reset_index(drop=True)
    n = len(d)
    y = np.arange(n)
    longest = max(len(s) for s in d["label"])
    fig, (ax_kl, ax_t1) = plt.subplots(1, 2, figsize=(1.0 + 0.065 * longest + 7.6, 1.5 + 0.26 * n),
                                       sharey=True, gridspec_kw=dict(width_ratios=[1.5, 1]),
                                       layout="constrained")
    kl = d["kl_mean"].to_numpy(dtype=float)
    t1 = d["top1"].to_numpy(dtype=float)
    pos = kl[np.isfinite(kl) & (kl > 0)]
    lo = 10 ** np.floor(np.log10(pos.min())) if pos.size else 1e-12
    hi = 10 ** np.ceil(np.log10(pos.max())) if pos.size else 1.0
    left = lo / 10
    ok = np.isfinite(kl) & (kl > 0)
    ax_kl.barh(y[ok], kl[ok] - left, left=left, color="#c0504d", height=0.7)
    ax_kl.set_xscale("log")
    ax_kl.set_xlim(left, hi * 20)
    for i in range(n):
        if ok[i]:
            ax_kl.text(kl[i] * 1.25, i, f"{kl[i]:.1e}", va="center", fontsize=7.5)
        else:
            ax_kl.text(left * 1.3, i, "n/a" if not np.isfinite(kl[i]) else "0", va="center",
                       fontsize=7.5, color="#666666")
    ax_kl.set_xlabel("KL(FP64-golden forward ‖ method), mean over predicted tokens (log scale)",
                     fontsize=8.5)
    ok1 = np.isfinite(t1)
    ax_t1.barh(y[ok1], t1[ok1], color="#4f81bd", height=0.7)
    ax_t1.set_xlim(0, 1.13)
    for i in range(n):
        ax_t1.text(t1[i] + 0.01 if ok1[i] else 0.01, i, f"{t1[i]:.3f}" if ok1[i] else "n/a",
                   va="center", fontsize=7.5, color="black" if ok1[i] else "#666666")
    ax_t1.set_xlabel("top-1 agreement with the FP64-golden forward", fontsize=8.5)
    ax_kl.set_yticks(y, d["label"], fontsize=8.5)
    ax_kl.set_ylim(n - 0.5, -0.5)
    for ax in (ax_kl, ax_t1):
        ax.grid(axis="x", alpha=0.3)
        ax.tick_params(axis="x", labelsize=8)
        ax.tick_params(axis="y", length=0)
        for s in ("top", "right"):
            ax.spines[s].set_visible(False)
    tokens = d["tokens"].dropna().unique() if "tokens" in d else []
    npred = d["n_pred"].dropna().unique() if "n_pred" in d else []
    model = ", ".join(sorted({E2E_MODELS.get(m, m) for m in d["model"].dropna().astype(str)})) \
        if "model" in d else "?"
    over = f"{int(tokens[0])} tokens" if len(tokens) == 1 else "tokens: see the file"
    if len(npred) == 1:
        over += f", {int(npred[0])} predictions"
    layers = set(d["layers"].dropna().astype(str)) if "layers" in d else set()
    where = "the method in every layer" if layers and all(
        re.fullmatch(r"0-\d+=.*", s) for s in layers) else "layers: see the file"
    src = set(d["text_source"].dropna().astype(str)) if "text_source" in d else set()
    text = "Debian's GPL-3" if src and all("GPL-3" in t for t in src) else "the text_source text"
    fig.suptitle(f"End to end: {model} with {where}, against the same forward with FP64 golden "
                 f"attention\n({over} of {text}), from {shown(path)} (python3 -m attnsim e2e), "
                 "sorted by KL", fontsize=10, x=0.01, ha="left")
    return fig


def png_bytes(fig) -> bytes:
    """The figure as a PNG with a 256-colour palette (a third of the RGBA file's size; the
    heatmaps' colours and the antialiased text survive it) and no Software/date metadata, so the
    same results give the same bytes."""
    import io
    from PIL import Image
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight", pad_inches=0.12,
                metadata={"Software": None})
    img = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    img = img.quantize(colors=256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
    out = io.BytesIO()
    img.save(out, format="PNG", optimize=True)
    return out.getvalue()


# ---------------------------------------------------------------- main


def parse(argv):
    ap = Parser(prog="make_figures.py", description="Draw attnsim's results as PNGs (the main "
                "table, the per-stage attribution, the end-to-end KL/top-1 bars).")
    ap.add_argument("--results", default="data/results", metavar="DIR",
                    help="the bundled results folder (attribution/, e2e_smollm2.csv, "
                         "real_methods.h5); default data/results")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--main", metavar="FILE", default=None,
                   help="the main job's results (attnsim sweep --config "
                        "experiments/configs/main.toml); default results/main.h5 when present, "
                        "else DIR/real_methods.h5")
    g.add_argument("--no-main", action="store_true",
                   help="draw the main table from DIR/real_methods.h5 even if results/main.h5 "
                        "exists")
    ap.add_argument("--out", default="data/results/figures", metavar="DIR",
                    help="where the PNGs go (created if missing); default data/results/figures")
    a = ap.parse_args(argv)
    for opt in ("results", "out", "main"):
        v = getattr(a, opt)
        if v is not None and (v == "" or v.startswith("-")):
            raise FigError(f"--{opt}: expected a path, got {v!r}")
    return a


def run(argv) -> int:
    a = parse(argv)
    results = Path(a.results)
    if not results.is_dir():
        raise FigError(f"--results {results}: no such directory")
    if a.main is not None:
        main_path, fallback = need_file(Path(a.main), "--main"), False
    elif not a.no_main and Path("results/main.h5").is_file():
        main_path, fallback = Path("results/main.h5"), False
    else:
        main_path, fallback = need_file(results / "real_methods.h5", "bundled results"), True
    e2e_path = need_file(results / "e2e_smollm2.csv", "e2e results")
    att_dir = results / "attribution"
    out = Path(a.out)
    if out.exists() and not out.is_dir():
        raise FigError(f"--out {out}: not a directory")

    # Every input is read before anything is drawn or written.
    sweep, attrs = read_sweep(main_path)
    att = read_attribution(att_dir)
    e2e = read_e2e(e2e_path)

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise FigError(f"--out {out}: cannot create it ({one_line(e)})")
    temps = {}
    try:
        for name, draw in zip(FIGURES, (lambda: draw_main_table(sweep, attrs, main_path, fallback),
                                        lambda: draw_attribution(att, att_dir),
                                        lambda: draw_e2e(e2e, e2e_path))):
            fig = draw()
            fd, tmp = tempfile.mkstemp(dir=out, prefix=f".{name}.", suffix=".tmp")
            temps[name] = tmp
            with os.fdopen(fd, "wb") as fh:
                fh.write(png_bytes(fig))
            os.chmod(tmp, 0o666 & ~UMASK)
            plt.close(fig)
        for name, tmp in temps.items():
            os.replace(tmp, out / name)
            print(f"wrote {shown(out / name)} ({(out / name).stat().st_size // 1024} KiB)")
        temps.clear()
    except OSError as e:
        raise FigError(f"--out {out}: cannot write ({one_line(e)})")
    finally:
        for tmp in temps.values():
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return 0


def main(argv=None) -> int:
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except FigError as e:
        print(f"{PROG}: error: {one_line(e)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
