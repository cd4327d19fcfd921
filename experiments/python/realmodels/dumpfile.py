"""Writes attention dumps in attnsim's layout (experiments/README.md, "Attention dumps").

One group per layer, `layer_NN/{q,k,v}` shaped [batch=1, heads, tokens, head_dim] float32 with
shuffle + gzip, attributes on the group (`causal`, `sm_scale`, `rope_applied`, `source`, `layer`)
and provenance on the root; `token_ids` (int32) and the decoded `text` on the root. The file is
written to a temporary name in the same directory and renamed, so a failed run leaves no file.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np


def git_commit() -> str:
    try:
        r = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True,
                           text=True, cwd=Path(__file__).resolve().parent, timeout=10)
        return r.stdout.strip() if r.returncode == 0 else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def write_dump(path: str | os.PathLike, layers: dict, root_attrs: dict, layer_attrs: dict,
               token_ids: np.ndarray, text: str) -> None:
    """layers: {layer_index: dict(q, k, v [heads, tokens, head_dim])}; layer_attrs: attributes
    shared by every layer group (each also gets `layer` and a `source` naming the layer)."""
    import h5py
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        with h5py.File(tmp, "w", track_order=True) as f:
            for k, v in root_attrs.items():
                f.attrs[k] = v
            f.create_dataset("token_ids", data=np.asarray(token_ids, np.int32))
            f.create_dataset("text", data=text, dtype=h5py.string_dtype("utf-8"))
            for li in sorted(layers):
                g = f.create_group(f"layer_{li:02d}")
                for k, v in layer_attrs.items():
                    g.attrs[k] = v
                g.attrs["layer"] = li
                g.attrs["source"] = f"{root_attrs['model']} layer {li}; {root_attrs['text_source']}"
                for name in ("q", "k", "v"):
                    x = np.asarray(layers[li][name], np.float32)[None]
                    chunk = (1, 1, min(x.shape[2], max(1, (1 << 20) // (4 * x.shape[3]))), x.shape[3])
                    g.create_dataset(name, data=x, chunks=chunk, shuffle=True,
                                     compression="gzip", compression_opts=4)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
