"""attnsim's own forward of the tiny checkpoints against transformers' recorded float32 logits.

The recording, data/hw/h100/models/hf_logits.h5 (experiments/python/record_hf_logits.py; another
file with ATTNSIM_HF_LOGITS=path), holds transformers' logits of each family's tiny checkpoint
(attnsim.realmodels.hf.write_tiny_checkpoint(path, family, seed=0)) over a fixed token sequence,
eager and sdpa attention, on the CPU and the GPU, and the SHA-256 of the checkpoint files the
recorder generated. Here each checkpoint is generated again (a generator whose config or weights
differ from the recorded digests fails: the recording no longer describes it), run through
attnsim.realmodels.hf.load(path).forward with golden attention (FP64, rounded once), and compared
with every recorded transformers run (and the attnsim.hf plug-in's golden run, where recorded):

  max |attnsim - transformers| <= REL_TOL * max |transformers|, and the argmax at every position
  the same, except where transformers' own top two logits lie within that bound of each other
  (a tie within round-off; at most one such position per run).

REL_TOL = 1e-5: both forwards are float32 (the numpy forward's projections FP64 rounded once,
torch's float32 GEMMs in their own summation orders, TF32 off), so they differ by float32
round-off carried through 2-6 layers: up to 3e-6 of the logits' largest magnitude on the CPU
(|z| ~ 10-40 with these random weights), about as far as transformers' eager and sdpa are from
each other. A wrong
RoPE scaling, window, softcap or norm moves logits by far more than 1e-3 of it. Skipped, with
the reason, where the recording, h5py or the checkpoint writer is missing."""
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO

REC = Path(os.environ.get("ATTNSIM_HF_LOGITS") or REPO / "data/hw/h100/models/hf_logits.h5")
REL_TOL = 1e-5
FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3")
# The transformers runs compared with, and the plug-in's golden run (attnsim.hf, where recorded).
RUNS = ("eager", "sdpa", "attnsim_golden")

h5py = pytest.importorskip("h5py", reason="reading the recording needs h5py")
if not REC.is_file():
    pytest.skip(f"no recording {REC} (experiments/python/record_hf_logits.py on a host with torch "
                "and transformers writes it)", allow_module_level=True)


@pytest.fixture(scope="module")
def rec():
    with h5py.File(REC, "r") as f:
        yield f


@pytest.fixture(scope="module")
def rhf():
    return pytest.importorskip("attnsim.realmodels.hf", reason="attnsim.realmodels.hf writes and runs the checkpoints")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _runs(group):
    """[(device/impl, logits)] of every recorded run in a family's group. Never SDPA where the
    model softcaps attention scores: SDPA has no softcap (transformers 5.17 drops Gemma 2's)."""
    softcap = json.loads(group.attrs["config"]).get("attn_logit_softcapping")
    out = []
    for device in sorted(k for k in group if isinstance(group[k], h5py.Group)):
        for impl in RUNS:
            if impl == "sdpa" and softcap:
                continue
            if impl in group[device]:
                out.append((f"{device}/{impl}", group[device][impl][()]))
    return out


def check_logits(got: np.ndarray, ref: np.ndarray, what: str) -> str:
    """The bound of the module docstring; returns a one-line summary, raises AssertionError."""
    assert got.shape == ref.shape, f"{what}: logits of shape {got.shape}, recorded {ref.shape}"
    scale = float(np.abs(ref).max())
    tol = REL_TOL * scale
    err = float(np.abs(got.astype(np.float64) - ref).max())
    assert err <= tol, f"{what}: max |attnsim - recorded| {err:.3g} > {tol:.3g} ({REL_TOL:g} of {scale:.3g})"
    top2 = np.sort(ref, axis=-1)[:, -2:]
    tie = (top2[:, 1] - top2[:, 0]) <= 2 * tol
    differ = got.argmax(-1) != ref.argmax(-1)
    assert not (differ & ~tie).any(), f"{what}: argmax differs at positions {np.flatnonzero(differ & ~tie).tolist()}"
    assert int(tie.sum()) <= 1, f"{what}: {int(tie.sum())} positions whose top two logits tie within {tol:.3g}"
    return f"{what}: max |Δ| {err:.3g} ({err / scale:.2g} of {scale:.3g})"


def test_recording_is_complete(rec):
    assert rec["tokens"].shape == (int(rec.attrs["n_tokens"]),)
    for key in ("torch", "transformers", "numpy", "gpu", "driver", "command", "generator"):
        assert key in rec.attrs, f"{REC}: attribute {key} missing"
    for fam in FAMILIES:
        assert fam in rec, f"{REC}: family {fam} missing"
        assert "load_refused" in rec[fam].attrs or _runs(rec[fam]), f"{REC}: {fam} has no run"


@pytest.mark.parametrize("family", FAMILIES)
def test_own_forward_matches_transformers(rec, rhf, tmp_path, family):
    g = rec[family]
    if "load_refused" in g.attrs:
        pytest.skip(f"{family}: the recording host's transformers could not load it: {g.attrs['load_refused']}")
    path = rhf.write_tiny_checkpoint(tmp_path / family, family, seed=0)
    # Every file but tokenizer.json (the forwards read token ids, and its serialization is the
    # tokenizers package's, which may differ between versions): config and weights as recorded.
    recorded = {k: v for k, v in json.loads(g.attrs["sha256"]).items() if k != "tokenizer.json"}
    digests = {p.name: _sha256(p) for p in sorted(path.iterdir()) if p.is_file() and p.name != "tokenizer.json"}
    assert digests == recorded, (
        f"{family}: write_tiny_checkpoint's files differ from the recorded ones: re-record "
        "(python3 experiments/python/record_hf_logits.py)")
    _, got = rhf.load(path).forward(rec["tokens"][()], want_logits=True)
    runs = _runs(g)
    assert runs, f"{family}: nothing recorded"
    for what, ref in runs:
        print(check_logits(got, ref, f"{family} {what}"))


def test_the_bound_can_fail():
    """check_logits refuses a perturbation of 1e-4 of the scale, and a recording whose top two
    logits tie within the bound at more than one position (its argmax says nothing there)."""
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((8, 32)).astype(np.float32) * 10
    check_logits(ref.copy(), ref, "same")
    bad = ref.copy()
    bad[3, 5] += 1e-4 * np.abs(ref).max()
    with pytest.raises(AssertionError, match="max"):
        check_logits(bad, ref, "perturbed")
    ties = ref.copy()
    for row in (1, 4):
        j = np.argsort(ties[row])[-2:]
        ties[row, j[0]] = ties[row, j[1]]
    with pytest.raises(AssertionError, match="tie"):
        check_logits(ties.copy(), ties, "ties")
