"""attnsim.hf: attnsim as a transformers attention implementation, on the tiny checkpoints of
attnsim.realmodels.hf (Llama, Mistral, Qwen2, Qwen3, Gemma 2, Gemma 3; float32 on the CPU).

The oracles: FP64 golden through the plug-in against transformers' own eager attention on the
logits, within float32 round-off (and a bf16 method outside it, so the bound can fail); the output
of every attention call bit-identical to attnsim.attention on the Q/K/V that call received, with
the method `layers` names for that layer and the window/softcap of that layer; a chunk of queries
after cached keys (the bottom-right mask) and one decoding step against eager; each refusal
(padding, autograd, dropout, a method the mask or softcap cannot be expressed in). Where torch or
transformers are missing (CI) only the import checks run; the rest is skipped with the reason."""
import inspect
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import attnsim
from conftest import bits

SEQ = 48
# Logits of the tiny checkpoints reach |z| ~ 10-40 (random bf16 weights). eager and golden differ
# by float32 round-off carried through 2-6 layers: about 2e-6 of the logits' largest magnitude
# (as far as transformers' own sdpa is from eager); 1e-5 leaves a factor 5. A wrong mask, scale or
# softcap moves them by more than 1e-2 of it, a bf16 method (flex) by about 1e-2.
REL_TOL = 1e-5


def test_importing_attnsim_hf_imports_no_torch():
    code = ("import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
            "import attnsim, attnsim.hf\n"
            "try:\n    attnsim.hf.register('flash')\nexcept ImportError as e:\n    print(e)\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "attnsim.hf needs torch (pip install torch), which is not installed"
    code = "import sys, attnsim, attnsim.hf; print('torch' in sys.modules, 'transformers' in sys.modules)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "False False"


def test_layer_methods_of_a_layer_count():
    """attnsim.hf chooses each layer's method with e2e.layer_methods and the config's layer count."""
    import attnsim.e2e as e2e
    assert e2e.layer_methods(3, "flash", "1=golden") == ["flash", "golden", "flash"]
    assert e2e.layer_methods(3, "flash", [2]) == ["golden", "golden", "flash"]
    with pytest.raises(ValueError, match="outside layers 0-2"):
        e2e.layer_methods(3, "flash", "3=golden")
    with pytest.raises(ValueError, match="at least one layer"):
        e2e.layer_methods(0, "flash")


@pytest.fixture(scope="module")
def tt():
    torch = pytest.importorskip("torch", reason="attnsim.hf's model tests need torch (pip install torch)")
    transformers = pytest.importorskip(
        "transformers", reason="attnsim.hf's model tests need transformers (pip install transformers)")
    import attnsim.hf
    attnsim.hf.register("golden")
    return torch, transformers


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    rhf = pytest.importorskip("attnsim.realmodels.hf", reason="attnsim.realmodels.hf writes the tiny checkpoints")
    root = tmp_path_factory.mktemp("hf_tiny")
    return {f: rhf.write_tiny_checkpoint(root / f, f) for f in rhf.FAMILIES}


def _ids(torch, n=SEQ):
    return torch.from_numpy(np.random.default_rng(0).integers(3, 512, n)).view(1, -1)


def _load(tt, path, dtype=None):
    torch, transformers = tt
    return transformers.AutoModelForCausalLM.from_pretrained(
        path, dtype=dtype or torch.float32, attn_implementation="eager").eval()


def _logits(tt, model, impl, ids, **kw):
    torch, _ = tt
    model.set_attn_implementation(impl)
    with torch.no_grad():
        return model(ids, **kw).logits


def _input_options() -> bool:
    return "window" in inspect.signature(attnsim.attention).parameters


def _has_window_or_softcap(model, n) -> bool:
    c = model.config
    windowed = getattr(c, "sliding_window", None) and n > c.sliding_window and (
        getattr(c, "layer_types", None) is None or "sliding_attention" in c.layer_types)
    return bool(windowed or getattr(c, "attn_logit_softcapping", None))


class Spy:
    """Registers `name`'s attention under name + "_spy", recording every call's Q/K/V and output."""

    def __init__(self, name):
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface
        fn = AttentionInterface._global_mapping[name]
        self.calls, self.name = [], name + "_spy"

        def spy(module, query, key, value, attention_mask, **kw):
            out, w = fn(module, query, key, value, attention_mask, **kw)
            self.calls.append(dict(layer=module.layer_idx, scaling=kw.get("scaling"), q=query.clone(),
                                   k=key.clone(), v=value.clone(), out=out.clone()))
            return out, w

        AttentionInterface.register(self.name, spy)
        AttentionMaskInterface.register(self.name, AttentionMaskInterface._global_mapping[name])


# --- logits against transformers' eager attention ----------------------------------------------

@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3"])
def test_golden_plugin_matches_eager(tt, checkpoints, family):
    torch, _ = tt
    model = _load(tt, checkpoints[family])
    ids = _ids(torch)
    ref = _logits(tt, model, "eager", ids)
    if _has_window_or_softcap(model, SEQ) and not _input_options():
        with pytest.raises(ValueError, match="does not express"):
            _logits(tt, model, "attnsim", ids)
        pytest.skip(f"{family}: golden with a window/softcap needs attnsim.attention(window=, softcap=) "
                    "(this build's module has none); the refusal was checked")
    got = _logits(tt, model, "attnsim", ids)
    scale = float(ref.abs().max())
    err = float((got - ref).abs().max())
    assert err <= REL_TOL * scale, f"{family}: max |golden - eager| {err:.3g}, logits' scale {scale:.3g}"
    assert torch.equal(got.argmax(-1), ref.argmax(-1)) or err <= 1e-6 * scale


def test_bf16_method_is_outside_the_bound(tt, checkpoints):
    """The bound of the test above can fail: flex (bf16 Q/K/V/P) lands outside it."""
    import attnsim.hf
    torch, _ = tt
    attnsim.hf.register("flex", name="attnsim_flex")
    model = _load(tt, checkpoints["llama"])
    ids = _ids(torch)
    ref = _logits(tt, model, "eager", ids)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", attnsim.AttnsimNote)
        got = _logits(tt, model, "attnsim_flex", ids)
    assert float((got - ref).abs().max()) > 100 * REL_TOL * float(ref.abs().max())


# --- every call bit-identical to attnsim.attention -----------------------------------------------

def test_outputs_are_attnsim_attention_bits_per_layer(tt, checkpoints):
    import attnsim.hf
    torch, _ = tt
    attnsim.hf.register("flash", layers="1=golden;0,2=flash:p=bf16", name="attnsim_layers")
    spy = Spy("attnsim_layers")
    model = _load(tt, checkpoints["llama"])  # 3 layers, GQA 4:2
    _logits(tt, model, spy.name, _ids(torch))
    assert [c["layer"] for c in spy.calls] == [0, 1, 2]
    for c in spy.calls:
        method = "golden" if c["layer"] == 1 else "flash:p=bf16"
        assert c["q"].shape[1] == 4 and c["k"].shape[1] == 2  # K/V not repeated
        r = attnsim.attention(c["q"], c["k"], c["v"], method, causal=True, sm_scale=c["scaling"])
        want = np.ascontiguousarray(r.o.astype(np.float32).transpose(0, 2, 1, 3))  # golden: rounded once
        assert c["out"].dtype == torch.float32
        assert np.array_equal(bits(c["out"].numpy()), bits(want)), f"layer {c['layer']}"


def test_bf16_model_gets_the_kernels_bf16_bits(tt, checkpoints):
    import attnsim.hf
    torch, _ = tt
    attnsim.hf.register("sage2:arch=sm90", name="attnsim_sage")
    spy = Spy("attnsim_sage")
    model = _load(tt, checkpoints["qwen3"], dtype=torch.bfloat16)
    _logits(tt, model, spy.name, _ids(torch))
    assert len(spy.calls) == 2
    for c in spy.calls:
        assert c["out"].dtype == torch.bfloat16
        r = attnsim.attention(c["q"], c["k"], c["v"], "sage2:arch=sm90", causal=True, sm_scale=c["scaling"])
        want = np.ascontiguousarray(r.o.transpose(0, 2, 1, 3)).view(np.uint16)
        assert np.array_equal(c["out"].view(torch.int16).numpy().view(np.uint16), want)


def test_gemma2_window_and_softcap_go_to_flex(tt, checkpoints):
    """Gemma 2's layer 0 (window 8, softcap 50) and layer 1 (global, softcap 50) through flex."""
    import attnsim.hf
    torch, _ = tt
    attnsim.hf.register("flex", name="attnsim_flex2")
    spy = Spy("attnsim_flex2")
    model = _load(tt, checkpoints["gemma2"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", attnsim.AttnsimNote)
        _logits(tt, model, spy.name, _ids(torch))
        assert [c["layer"] for c in spy.calls] == [0, 1]
        for c, method in zip(spy.calls, ["flex:window=8,softcap=50", "flex:softcap=50"]):
            r = attnsim.attention(c["q"], c["k"], c["v"], method, causal=True, sm_scale=c["scaling"])
            want = np.ascontiguousarray(r.o.astype(np.float32).transpose(0, 2, 1, 3))
            assert np.array_equal(bits(c["out"].numpy()), bits(want)), method


def test_flash_cannot_take_a_window(tt, checkpoints):
    import attnsim.hf
    torch, _ = tt
    attnsim.hf.register("flash", name="attnsim_fa2")
    model = _load(tt, checkpoints["mistral"])  # window 12 < 48 tokens
    with pytest.raises(ValueError, match="window(=| of )12"):
        _logits(tt, model, "attnsim_fa2", _ids(torch))
    # Within the window's length it hides nothing, so any method runs.
    _logits(tt, model, "attnsim_fa2", _ids(torch, 12))


# --- cached keys ---------------------------------------------------------------------------------

def test_chunk_after_cached_keys_and_one_decoding_step(tt, checkpoints):
    import attnsim.hf
    torch, _ = tt
    model = _load(tt, checkpoints["qwen2"])
    ids = _ids(torch)
    # transformers 5 renamed the forward's past_key_values to cache.
    arg = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    out = {}
    for impl in ("eager", "attnsim"):
        model.set_attn_implementation(impl)
        with torch.no_grad():
            first = model(ids[:, :40], use_cache=True)
            chunk = model(ids[:, 40:47], use_cache=True, **{arg: first.past_key_values})
            step = model(ids[:, 47:], **{arg: chunk.past_key_values})
        out[impl] = (chunk.logits, step.logits)
    for a, b in zip(out["attnsim"], out["eager"]):
        assert float((a - b).abs().max()) <= REL_TOL * float(b.abs().max())
    # flex's causal mask is top-left: 7 queries after 40 cached keys would see the wrong keys.
    attnsim.hf.register("flex", name="attnsim_flex3")
    model.set_attn_implementation("attnsim_flex3")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", attnsim.AttnsimNote)
        first = model(ids[:, :40], use_cache=True)
        with pytest.raises(ValueError, match="top-left"):
            model(ids[:, 40:47], **{arg: first.past_key_values})


# --- refusals ------------------------------------------------------------------------------------

def test_refusals(tt, checkpoints):
    import attnsim.hf
    torch, _ = tt
    model = _load(tt, checkpoints["llama"])
    model.set_attn_implementation("attnsim")
    ids = torch.cat([_ids(torch, 12)] * 2)
    pad = torch.ones_like(ids)
    pad[1, :3] = 0
    with torch.no_grad(), pytest.raises(ValueError, match="one sequence at a time"):
        model(ids, attention_mask=pad)
    with torch.no_grad():  # a batch without padding runs
        model(ids, attention_mask=torch.ones_like(ids))
    with pytest.raises(ValueError, match="torch.no_grad"):
        model(ids)
    from transformers import AttentionInterface
    fn = AttentionInterface._global_mapping["attnsim"]
    attn = model.model.layers[0].self_attn
    q = torch.zeros(1, 4, 8, 16)
    kv = torch.zeros(1, 2, 8, 16)
    with torch.no_grad():
        with pytest.raises(ValueError, match="dropout"):
            fn(attn, q, kv, kv, None, dropout=0.1)
        with pytest.raises(ValueError, match="attention sinks"):
            fn(attn, q, kv, kv, None, s_aux=torch.zeros(4))
        with pytest.raises(ValueError, match="float64"):
            fn(attn, q.double(), kv.double(), kv.double(), None)
        with pytest.raises(ValueError, match="a bias"):
            fn(attn, q, kv, kv, torch.full((1, 1, 8, 8), 0.5))
        o, w = fn(attn, q, kv, kv, None)  # no mask: the module's is_causal
        assert tuple(o.shape) == (1, 8, 4, 16) and w is None
    for bad in ("my_flash", "x/y", ""):
        with pytest.raises(ValueError, match="name"):
            attnsim.hf.register("flash", name=bad)
    with pytest.raises(ValueError, match="layers"):
        attnsim.hf.register("flash", layers="0-x")
    with pytest.raises(ValueError):
        attnsim.hf.register("no_such_method")
    attnsim.hf.register("flash", layers="5=golden", name="attnsim_l5")
    model.set_attn_implementation("attnsim_l5")
    with torch.no_grad(), pytest.raises(ValueError, match="outside layers 0-2"):
        model(ids[:1])
