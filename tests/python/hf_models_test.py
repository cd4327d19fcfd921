"""attnsim.realmodels.hf: Hugging Face checkpoint directories and GGUF files of the Llama, Mistral,
Qwen2, Qwen3, Gemma 2 and Gemma 3 families in attnsim.e2e (tiny random checkpoints; the bundled
SmolLM2 converted to a checkpoint, label long)."""
import json
import math
import shutil

import numpy as np
import pytest

import attnsim
import attnsim.e2e as e2e
from attnsim import modelmath as mm
from attnsim.realmodels import hf

TEXT = ("The quick brown fox jumps over the lazy dog, and the cat sat on the mat in the end of "
        "the story; it is one of those things that one sees in the morning.")


def bits(a):
    return np.ascontiguousarray(a).view(np.uint32)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """family -> path of its tiny checkpoint (written once per module)."""
    d = tmp_path_factory.mktemp("tiny")
    return {f: hf.write_tiny_checkpoint(d / f, f) for f in hf.FAMILIES}


def _ids(m, n=32):
    ids = m.encode(TEXT)
    assert len(ids) >= n
    return ids[:n]


def _decode_all(m, ids, split):
    """Logits of ids from a prefill of ids[:split] then one token at a time with the KV cache."""
    cos, sin = m.rope_tables(split)
    x = m.embed(ids[:split])
    caches = [{} for _ in range(m.n_layers)]
    for li in range(m.n_layers):
        x = m.layer(li, x, cos, sin, cache=caches[li])
    out = [m.logits(x)]
    for p in range(split, len(ids)):
        c, s = m.rope_tables(1, p)
        x = m.embed(ids[p:p + 1])
        for li in range(m.n_layers):
            x = m.layer(li, x, c, s, cache=caches[li])
        out.append(m.logits(x))
    return np.concatenate(out)


# --- the tiny checkpoints --------------------------------------------------------------------------

@pytest.mark.parametrize("family", hf.FAMILIES)
def test_tiny_forward_and_decode(tiny, family):
    m = hf.load(tiny[family])
    assert m.spec.family == family
    ids = _ids(m)
    assert ids[0] == 1  # tokenizer.json's post-processor puts <bos> first
    _, z = m.forward(ids, want_logits=True)
    assert z.shape == (32, 512) and z.dtype == np.float32 and np.isfinite(z).all()
    assert np.std(z) > 0.5  # not a degenerate model: the positions' logits differ
    # Decoding with the KV cache (windows over the cache, RoPE rows of later positions) gives the
    # prefill's bits.
    np.testing.assert_array_equal(bits(_decode_all(m, ids, 20)), bits(z))


def test_tiny_is_deterministic(tmp_path):
    a = hf.write_tiny_checkpoint(tmp_path / "a", "qwen3", seed=3)
    b = hf.write_tiny_checkpoint(tmp_path / "b", "qwen3", seed=3)
    c = hf.write_tiny_checkpoint(tmp_path / "c", "qwen3", seed=4)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()
    assert (a / "model.safetensors").read_bytes() != (c / "model.safetensors").read_bytes()
    assert hf.load(a).files.sha256 == hf.load(b).files.sha256 != hf.load(c).files.sha256


def _edit(src, dst, **changes):
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def _logits(path, n=32):
    m = hf.load(path)
    return m.forward(_ids(m, n), want_logits=True)[1]


@pytest.mark.parametrize("family,change", [
    ("gemma2", dict(sliding_window=4096)),            # the window of layer 0 matters at 32 tokens
    ("gemma2", dict(attn_logit_softcapping=None)),    # the attention softcap matters
    ("gemma2", dict(final_logit_softcapping=None)),
    ("gemma2", dict(query_pre_attn_scalar=64)),
    ("gemma3", dict(sliding_window=4096)),
    ("gemma3", dict(rope_local_base_freq=1000000.0)),
    ("gemma3", dict(rope_scaling=None)),
    ("mistral", dict(sliding_window=None)),
    ("llama", dict(rope_scaling=None)),
])
def test_config_fields_matter(tiny, tmp_path, family, change):
    """Each field the forward implements changes the logits (so none is silently ignored)."""
    z0 = _logits(tiny[family])
    z1 = _logits(_edit(tiny[family], tmp_path / "m", **change))
    assert not np.array_equal(z0, z1)


def test_gemma_window_is_golden_window(tiny):
    """Layer 0 of the tiny Gemma 2 attends through attnsim.golden with its window 8 and softcap 50:
    the same as golden on those arguments, different from golden without them."""
    m = hf.load(tiny["gemma2"])
    assert m.spec.problem(0) == dict(window=8, softcap=50.0)
    assert m.spec.problem(1) == dict(window=0, softcap=50.0)
    caps, _ = m.forward(_ids(m), capture_layers=[0])
    q, k, v = (caps[0][x] for x in ("q", "k", "v"))
    o = m.golden_attention(0, q, k, v)
    g = attnsim.golden(q[None], k[None], v[None], causal=True, sm_scale=m.sm_scale, window=8,
                       softcap=50.0).o[0].astype(np.float32)
    np.testing.assert_array_equal(o, g)
    plain = attnsim.golden(q[None], k[None], v[None], causal=True, sm_scale=m.sm_scale).o[0]
    assert np.abs(plain[:, 8:] - g[:, 8:]).max() > 1e-3   # rows past the window differ
    np.testing.assert_allclose(plain[:, :8], g[:, :8], rtol=0.05, atol=0.02)  # softcap only


def test_scaled_rope_tables():
    """The generic path (inv_freq, modelmath.cos/sin) gives modelmath.rope_tables' bits for a
    scaling of factor 1; llama3 keeps the high frequencies and divides the low ones."""
    lin1 = {"rope_type": "linear", "factor": 1.0}
    for d, base in ((64, 100000.0), (16, 500000.0), (128, 10000.0)):
        a = hf.rope_tables_for(40, 7, d, base, lin1)
        b = mm.rope_tables(40, d, base, 7)
        np.testing.assert_array_equal(bits(a[0]), bits(b[0]))
        np.testing.assert_array_equal(bits(a[1]), bits(b[1]))
    f = hf.inv_freq(16, 500000.0, None)
    l3 = hf.inv_freq(16, 500000.0, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                     "high_freq_factor": 4.0, "original_max_position_embeddings": 64})
    wl = 2 * math.pi / f.astype(np.float64)
    assert l3[0] == f[0] and wl[0] < 16                       # high frequency: unchanged
    assert (l3[2:] == (f[2:] / np.float32(8)).astype(np.float32)).all() and (wl[2:] > 64).all()
    assert 16 < wl[1] < 64 and f[1] / 8 < l3[1] < f[1]          # the band between: smoothed


def test_gelu_tanh_and_softcap():
    x = np.linspace(-30, 30, 2001).astype(np.float32)
    x64 = x.astype(np.float64)
    ref = 0.5 * x64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64 ** 3)))
    np.testing.assert_allclose(hf.gelu_tanh_mul(x, np.ones_like(x)), ref, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(hf.softcap(x * 10, 30.0), 30 * np.tanh(x * 10 / 30.0), rtol=1e-6, atol=1e-6)


# --- errors ---------------------------------------------------------------------------------------

def _expect(path, text):
    with pytest.raises(ValueError, match=text) as e:
        hf.load(path)
    assert "\n" not in str(e.value)


def test_errors(tiny, tmp_path):
    src = tiny["llama"]
    _expect(_edit(src, tmp_path / "a", architectures=["Phi3ForCausalLM"]),
            r"config.json: architecture 'Phi3ForCausalLM' is not supported \(llama, mistral, qwen2, "
            r"qwen3, gemma2, gemma3\)")
    _expect(_edit(src, tmp_path / "b", rope_scaling={"rope_type": "yarn", "factor": 4.0}),
            r"rope_type 'yarn' is not supported \(default, linear, llama3\)")
    _expect(_edit(src, tmp_path / "c", partial_rotary_factor=0.5), "partial_rotary_factor")
    _expect(_edit(src, tmp_path / "d", hidden_act="gelu"), "activation 'gelu' is not supported")
    _expect(_edit(src, tmp_path / "e", num_hidden_layers=4), r"missing tensor 'model.layers.3")
    _expect(_edit(src, tmp_path / "f", hidden_size=96), "has shape")
    _expect(_edit(tiny["qwen2"], tmp_path / "g", use_sliding_window=True), "use_sliding_window")
    _expect(_edit(src, tmp_path / "h", attention_bias=True), "missing tensor .*q_proj.bias")
    for name in ("tokenizer.json", "model.safetensors", "config.json"):
        d = shutil.copytree(src, tmp_path / f"no-{name}")
        (d / name).unlink()
        _expect(d, f"no {name}")
    _expect(tmp_path / "nowhere", "no such checkpoint directory or GGUF file")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all")
    _expect(bad, "not a readable GGUF file")


def test_e2e_refuses_method_without_window(tiny, monkeypatch):
    def no_forward(*a, **k):
        raise AssertionError("a forward ran")
    monkeypatch.setattr(hf.Model, "layer", no_forward)
    with pytest.raises(ValueError, match=r"layer 0 of gemma2 has window=8, softcap=50: method "
                                         r"'sage2' cannot apply it \(methods that can: golden, "
                                         r".*flex.*vllm_triton") as e:
        e2e.run(tiny["gemma2"], "sage2:arch=sm90", tokens=32)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="its own window/softcap options differ"):
        e2e.run(tiny["gemma2"], "flex:window=4", tokens=32)


# --- attnsim.e2e on a checkpoint ---------------------------------------------------------------------

def test_e2e_window_longer_than_text(tiny):
    """Mistral's window of 12 hides no key of a 12-token text: any method runs; at 24 tokens only
    the methods that apply it."""
    r = e2e.run(tiny["mistral"], "flash", tokens=12, generate=3)
    assert 0 < r["kl_mean"] < 1e-3
    with pytest.raises(ValueError, match="layer 0 of mistral has window=12: method 'flash'"):
        e2e.run(tiny["mistral"], "flash", tokens=24)
    assert e2e.run(tiny["mistral"], "flex", tokens=24, generate=3)["greedy_tokens"] == 3


def test_e2e_on_checkpoint(tiny):
    path = tiny["gemma2"]
    assert e2e.n_layers(path) == 2
    assert e2e.layer_methods(str(path), "flex", "1") == ["golden", "flex"]
    r = e2e.run(path, "flex", tokens=32, generate=4)
    assert r["model"] == "gemma2" and r["model_package"] == "(directory)"
    assert len(r["weights_sha256"]) == 64 and r["tokens"] == 32
    assert 0 < r["kl_mean"] < 1e-2 and r["greedy_tokens"] == 4
    assert list(r.per_layer["method"]) == ["flex", "flex"]
    assert (r.per_layer["attn_rel_fro"] > 0).all()
    g = e2e.run(path, "golden", tokens=32)
    assert g["kl_mean"] == 0.0 and g["top1"] == 1.0
    t = e2e.sensitivity(path, "flex", tokens=32)
    assert list(t["sensitivity_layer"]) == [0, 1] and (t["kl_mean"] > 0).all()
    # vllm_triton applies the same window and softcap: its error is flex's order, not the
    # error of a kernel that would ignore them.
    v = e2e.run(path, "vllm_triton", tokens=32, layers="0")
    assert 0 < v["attn_rel_fro_max"] < 0.02


def test_e2e_cli_on_checkpoint(tiny, tmp_path):
    import subprocess
    import sys
    out = tmp_path / "e2e.csv"
    p = subprocess.run([sys.executable, "-m", "attnsim", "e2e", "--model", str(tiny["qwen3"]),
                        "--method", "flash", "--tokens", "24", "--output", str(out), "--quiet"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    import pandas as pd
    t = pd.read_csv(out)
    assert t["model"][0] == "qwen3" and t["tokens"][0] == 24


# --- GGUF -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", hf.FAMILIES)
def test_gguf_gives_checkpoint_bits(tiny, tmp_path, family):
    """The tiny checkpoint written as llama.cpp writes GGUF (attn_q/attn_k permuted for the llama
    architecture, Gemma norms as 1 + w, F32 tensors) gives the checkpoint's logits bit for bit.
    (llama: the GGUF's rope_freqs.weight divides float32 inv_freq, transformers' llama3 formula
    smooths it; for this configuration both round to the same float32 inv_freq.)"""
    g = hf.write_tiny_gguf(tmp_path / f"{family}.gguf", family)
    mg, m = hf.load(g), hf.load(tiny[family])
    assert mg.spec.windows == m.spec.windows and mg.spec.tie == m.spec.tie
    assert mg.sm_scale == m.sm_scale and mg.spec.attn_softcap == m.spec.attn_softcap
    ids = _ids(m)
    np.testing.assert_array_equal(mg.encode(TEXT)[:32], ids)
    np.testing.assert_array_equal(bits(mg.forward(ids, want_logits=True)[1]),
                                  bits(m.forward(ids, want_logits=True)[1]))


def test_gguf_permutation_matters(tiny, tmp_path, monkeypatch):
    """Without the un-permutation the llama-architecture GGUF gives other logits."""
    g = hf.write_tiny_gguf(tmp_path / "m.gguf", "mistral")
    z = _logits(g)
    monkeypatch.setattr(hf, "_unpermute", lambda w, n: w)
    assert not np.array_equal(_logits(g), z)


# --- SmolLM2 as a checkpoint (label long: a 540 MB conversion) ----------------------------------------

@pytest.fixture(scope="module")
def smol_dir(tmp_path_factory):
    return hf.convert_smollm2(tmp_path_factory.mktemp("smol") / "SmolLM2-135M-Instruct")


@pytest.mark.long
def test_smollm2_checkpoint_bits(smol_dir):
    from attnsim.realmodels import smollm2, sources
    assert len(list(smol_dir.glob("model-*-of-00002.safetensors"))) == 2
    m, b = hf.load(smol_dir), smollm2.load(sources.smollm2_files())
    ids = b.encode(sources.read_text()[0])[:24]
    np.testing.assert_array_equal(m.encode(sources.read_text()[0])[:24], ids)
    np.testing.assert_array_equal(bits(m.forward(ids, want_logits=True)[1]),
                                  bits(b.forward(ids, want_logits=True)[1]))
    layers = "0-1,17=flash"
    ra = e2e.run("smollm2", "golden", tokens=24, layers=layers, generate=3)
    rb = e2e.run(smol_dir, "golden", tokens=24, layers=layers, generate=3)
    skip = {"model", "model_package", "model_version", "weights_sha256", "time_s", "cpu_s", "ref_time_s"}
    assert set(ra) == set(rb)
    for k in set(ra) - skip:  # the same value, NaN included (greedy_diverge when none differs)
        assert ra[k] == rb[k] or (ra[k] != ra[k] and rb[k] != rb[k]), k
    assert rb["model"] == "SmolLM2-135M-Instruct" and ra["kl_mean"] > 0
    for a, b2 in ((ra.per_token, rb.per_token), (ra.per_layer, rb.per_layer)):
        assert a.equals(b2)


@pytest.mark.long
def test_smollm2_gguf_route():
    """The bundled GGUF file itself through this module's GGUF route (Q4_1/Q8_0 dequantized,
    attn_q/attn_k un-permuted, the smollm pre-tokenizer, no BOS) gives the bundled model's bits."""
    from attnsim.realmodels import smollm2, sources
    m, b = hf.load(sources.smollm2_files().path), smollm2.load(sources.smollm2_files())
    text = "The GNU General Public License is a free, copyleft license for software, 2007."
    ids = b.encode(text)
    np.testing.assert_array_equal(m.encode(text), ids)
    np.testing.assert_array_equal(bits(m.forward(ids, want_logits=True)[1]),
                                  bits(b.forward(ids, want_logits=True)[1]))


@pytest.mark.long
def test_smollm2_bf16_checkpoint(smol_dir, tmp_path):
    from ml_dtypes import bfloat16
    d = hf.convert_smollm2(tmp_path / "bf16", dtype="bfloat16")
    m, f = hf.load(d), hf.load(smol_dir)
    for name in ("model.embed_tokens.weight", "model.layers.3.self_attn.k_proj.weight",
                 "model.layers.29.mlp.down_proj.weight", "model.norm.weight"):
        assert m.t.stored(name).dtype == bfloat16
        np.testing.assert_array_equal(m.t.f32(name), f.t.f32(name).astype(bfloat16).astype(np.float32))
    ids = m.encode("The GNU General Public License is a free, copyleft license.")
    zb, zf = m.forward(ids, want_logits=True)[1], f.forward(ids, want_logits=True)[1]
    assert not np.array_equal(zb, zf)
    assert np.mean(np.argmax(zb, -1) == np.argmax(zf, -1)) >= 0.7
