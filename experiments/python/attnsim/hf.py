"""attnsim.hf: every attention of a Hugging Face transformers model computed by a simulated kernel.

    import attnsim.hf
    attnsim.hf.register("sage2:arch=sm90")                # or layers="0-5=flash", as attnsim.e2e
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="attnsim")
    with torch.no_grad():
        logits = model(ids).logits

:func:`register` adds an attention function (and the mask function it reads its masks from) to
transformers' ``AttentionInterface`` / ``AttentionMaskInterface`` under ``name``. Each attention
call hands the layer's Q, K and V (after RoPE) to :func:`attnsim.attention` through DLPack, as the
model holds them (GQA as it is: heads_q a multiple of heads_kv, K/V never repeated; a CUDA tensor
is copied to the CPU and the output back), with the model's ``scaling`` as sm_scale, and returns
the kernel's output converted to the query's dtype (torch's round-to-nearest; exact from a 16-bit
output to float32). The mask is the model's own: always built in full (transformers' SDPA mask
with no skipping) and read here. attnsim runs it where it is one of: no mask, causal
(bottom-right aligned: the model's cached keys precede the queries), or a causal sliding window of
W keys, the same for every sequence of the batch. A window, and Gemma 2's ``softcap``, go to
the method's options ``window=W``, ``softcap=C`` where it has them (flex, vllm_triton) and to
``attnsim.attention(window=W, softcap=C)`` (golden computes them; it refuses a method that would
ignore them); a layer whose window hides no key at this length runs any method. Anything else is
refused in one line (ValueError), never computed differently: padding in a batch (run one
sequence at a time), packed sequences, dropout, attention sinks, position biases, a window or
softcap the method cannot express, a causal mask the method aligns top-left while the queries
follow cached keys, float64 models, and autograd (the simulator computes the forward only: run
under ``torch.no_grad()``). The method of each layer comes from ``layers`` exactly as in
:func:`attnsim.e2e.layer_methods`, with the layer count of the model's config and each attention
module's ``layer_idx``.

torch and transformers are optional: importing attnsim never imports them; :func:`register` raises
ImportError naming the one that is missing. The interface read here: huggingface/transformers
src/transformers/modeling_utils.py (AttentionInterface), src/transformers/masking_utils.py
(AttentionMaskInterface, sdpa_mask) and src/transformers/integrations/sdpa_attention.py (the
attention function's signature).
"""
from __future__ import annotations

import math

import numpy as np

from . import attention as _attention
from . import canonical as _canonical
from . import e2e as _e2e

__all__ = ["register", "registered", "NAME"]

#: The name :func:`register` registers under unless told otherwise.
NAME = "attnsim"
# A layer count that any real model's layer sets fit in: register() checks `layers` against it at
# once (every method parsed, every set well-formed); each model's own count is checked at its
# first forward.
_CHECK_LAYERS = 4096
# Keyword arguments of transformers' attention calls that change what attention computes and that
# no attnsim method takes: refused when given (not None).
_REFUSED_KWARGS = {"position_bias": "a position bias (T5-style)", "s_aux": "attention sinks",
                   "sinks": "attention sinks", "head_mask": "a head mask"}
_REGISTERED: dict[str, dict] = {}


def _torch():
    try:
        import torch
    except ImportError:
        raise ImportError("attnsim.hf needs torch (pip install torch), which is not installed") from None
    return torch


def _interfaces():
    _torch()
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
    except ImportError as e:
        missing = "transformers" if getattr(e, "name", None) == "transformers" else (
            "a transformers with AttentionInterface and AttentionMaskInterface (pip install -U transformers)")
        raise ImportError(f"attnsim.hf needs {missing}, which is not installed") from None
    return AttentionInterface, AttentionMaskInterface, sdpa_mask


def register(method: str = "flash", layers=None, *, name: str = NAME) -> str:
    """Registers ``name`` (default "attnsim") as a transformers attention implementation that runs
    ``method`` (``attnsim.methods()``) in every layer, or per layer as ``layers`` says (the forms
    of :func:`attnsim.e2e.layer_methods`: "0-5,29", "0-5=sage1;6-29=flash", a list or a dict).
    Load a model with ``attn_implementation=name`` (or set ``model.set_attn_implementation(name)``).
    Registering the same name again replaces its method for every model using it. A name with
    "flash", "paged" or "/" is refused (transformers reads those as its own kernels). Returns name."""
    # transformers reads a name with '/' as a hub kernel, with "flash" as FlashAttention and with
    # "paged" as its paged cache (src/transformers/modeling_utils.py, utils/generic.py).
    if (not isinstance(name, str) or not name or name in ("eager", "sdpa") or "/" in name
            or "flash" in name or "paged" in name):
        raise ValueError(f"name must be a new implementation name without '/', 'flash' or 'paged', "
                         f"got {name!r}")
    if not isinstance(method, str):
        raise ValueError(f"method must be a string, got {type(method).__name__}")
    _e2e.layer_methods(_CHECK_LAYERS, method, layers)  # every method and set parsed now
    attention_interface, mask_interface, sdpa_mask = _interfaces()
    state = {"method": method, "layers": layers, "per_count": {}}
    _REGISTERED[name] = state

    def mask(*args, **kwargs):
        # transformers' boolean mask [batch, 1, len_q, len_kv], never skipped (None), so that the
        # attention function sees every key each query is allowed.
        kwargs["allow_is_causal_skip"] = False
        kwargs["allow_is_bidirectional_skip"] = False
        return sdpa_mask(*args, **kwargs)

    def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                  is_causal=None, **kwargs):
        return _forward(state, module, query, key, value, attention_mask, dropout, scaling,
                        is_causal, kwargs)

    attention.__name__ = attention.__qualname__ = f"attnsim_attention[{name}]"
    attention_interface.register(name, attention)
    mask_interface.register(name, mask)
    return name


def registered() -> dict:
    """{name: (method, layers)} of every :func:`register` call of this process (the latest per name)."""
    return {k: (s["method"], s["layers"]) for k, s in _REGISTERED.items()}


# --- one attention call -------------------------------------------------------------------------

def _layer_method(state, module) -> tuple[str, str]:
    """(method, "layer N" or "a layer") for the attention module."""
    idx = getattr(module, "layer_idx", None)
    config = getattr(module, "config", None)
    n = getattr(config, "num_hidden_layers", None)
    if idx is None or n is None:
        if state["layers"] is not None:
            raise ValueError(f"layers: {type(module).__name__} has no layer_idx or its config no "
                             "num_hidden_layers, so a per-layer method cannot be chosen")
        return state["method"], "a layer"
    n, idx = int(n), int(idx)
    if n not in state["per_count"]:
        state["per_count"][n] = _e2e.layer_methods(n, state["method"], state["layers"])
    if not 0 <= idx < n:
        raise ValueError(f"layer_idx {idx} is outside the model's {n} layers")
    return state["per_count"][n][idx], f"layer {idx}"


def _visible(torch, mask, len_q: int, len_kv: int, where: str):
    """The mask as one boolean [len_q, len_kv] matrix (True: the key is seen), or a refusal."""
    if mask.ndim != 4 or tuple(mask.shape[-2:]) != (len_q, len_kv):
        raise ValueError(f"{where}: an attention mask of shape {list(mask.shape)} for {len_q} queries "
                         f"and {len_kv} keys (expected [batch, 1, {len_q}, {len_kv}])")
    if mask.dtype == torch.bool:
        vis = mask
    elif mask.is_floating_point():
        # An additive mask: 0 where seen, -inf (or the dtype's lowest) where hidden; any other
        # value is a bias no method adds.
        lowest = torch.finfo(mask.dtype).min
        vis = mask == 0
        if not bool(((mask == 0) | (mask <= lowest / 2)).all()):
            raise ValueError(f"{where}: the additive attention mask holds values other than 0 and "
                             "-inf (a bias), which no attnsim method adds")
    else:
        raise ValueError(f"{where}: an attention mask of dtype {mask.dtype} (expected bool or float)")
    vis = vis.detach().to("cpu")
    first = vis[0, 0]
    if not bool((vis == first).all()):
        raise ValueError(f"{where}: the attention mask differs between the batch's sequences or heads "
                         "(padding or packed sequences), which attnsim's one mask per call cannot "
                         "express: run one sequence at a time")
    return first


def _pattern(torch, mask, module, is_causal, sliding_window, len_q: int, len_kv: int, where: str):
    """(causal, window) that attnsim computes exactly what ``mask`` allows (window 0: none)."""
    if mask is None:
        # Only a module called on its own gets no mask (register()'s mask function always builds
        # one); its is_causal, as transformers' SDPA reads it.
        causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
        if not causal or len_q == 1:
            return False, 0  # one query after its keys sees all of them
        if len_q != len_kv:
            raise ValueError(f"{where}: causal attention of {len_q} queries over {len_kv} keys without a "
                             "mask does not say which keys each query sees: pass the mask")
        if sliding_window and len_kv > int(sliding_window):
            raise ValueError(f"{where}: a sliding window of {int(sliding_window)} keys without a mask: "
                             "pass the mask")
        return True, 0
    vis = _visible(torch, mask, len_q, len_kv, where)
    if bool(vis.all()):
        return False, 0
    i = torch.arange(len_q)[:, None]
    j = torch.arange(len_kv)[None, :]
    offset = len_kv - len_q  # bottom-right: the queries are the last len_q positions
    causal = j <= i + offset
    if bool((vis == causal).all()):
        return True, 0
    w = int(vis.sum(dim=-1).max())
    if w >= 1 and bool((vis == (causal & (j > i + offset - w))).all()):
        return True, w
    raise ValueError(f"{where}: an attention mask that is neither none, causal (bottom-right) nor a "
                     "causal sliding window, the same for every sequence (padding? a custom mask?), "
                     "which attnsim cannot express")


def _options(method: str) -> tuple[str, dict]:
    c = _canonical(method)
    head, _, tail = c.partition(":")
    opts = dict(kv.split("=", 1) for kv in tail.split(",")) if tail else {}
    return head, opts


def _input_options() -> bool:
    """Whether attnsim.attention takes the input's own window= and softcap= (golden computes them)."""
    import inspect
    params = inspect.signature(_attention).parameters
    return "window" in params and "softcap" in params


def _with_mask_options(method: str, window: int, softcap, where: str) -> tuple[str, dict]:
    """(method, keyword arguments of attnsim.attention) that compute the layer's window and
    softcap: a method with options window= and softcap= (flex, vllm_triton) gets them set; where
    attnsim.attention takes them as the input's own (window=, softcap=: golden), they are passed
    there too (it refuses a method that would ignore them); otherwise a refusal."""
    head, opts = _options(method)
    want = {"window": int(window), "softcap": 0.0 if softcap is None else float(softcap)}
    what = {"window": f"a sliding window of {window} keys", "softcap": f"softcap {want['softcap']:g}"}
    as_input = any(want.values()) and _input_options()
    changed = False
    for key, value in want.items():
        try:
            given = float(opts[key]) if key in opts else None
        except ValueError:  # e.g. the attention pipeline's softcap=exact: how a tanh is computed
            given = None
        if given is None:
            if value and not as_input:
                raise ValueError(f"{where}: the model's attention has {what[key]}, which method {head!r} "
                                 "does not express (flex and vllm_triton take window= and softcap=)")
            continue
        if given == value:
            continue
        if given != 0:
            raise ValueError(f"{where}: method {method!r} sets {key}={opts[key]}, but the model's "
                             f"attention has {what[key] if value else f'no {key}'}: leave {key} out of "
                             "the method (attnsim.hf takes it from the model)")
        opts[key] = str(value) if key == "window" else repr(value)
        changed = True
    run = head + ":" + ",".join(f"{k}={v}" for k, v in opts.items()) if changed else method
    return run, (want if as_input else {})


def _to_torch(torch, o: np.ndarray):
    """The kernel's output as a torch tensor of its own format (bits unchanged)."""
    name = getattr(o.dtype, "name", str(o.dtype))
    if name == "bfloat16":
        return torch.from_numpy(np.ascontiguousarray(o).view(np.uint16)).view(torch.bfloat16)
    if name in ("float8_e4m3fn", "float8_e5m2"):
        return torch.from_numpy(np.ascontiguousarray(o).view(np.uint8)).view(getattr(torch, name))
    return torch.from_numpy(np.ascontiguousarray(o))


def _forward(state, module, query, key, value, attention_mask, dropout, scaling, is_causal, kwargs):
    torch = _torch()
    method, where = _layer_method(state, module)
    where = f"attnsim.hf ({where}, method {method})"
    if dropout is not None and float(dropout) != 0.0:
        raise ValueError(f"{where}: dropout {float(dropout):g} (training): attnsim simulates inference "
                         "attention; put the model in eval()")
    for k, what in _REFUSED_KWARGS.items():
        if kwargs.get(k) is not None:
            raise ValueError(f"{where}: the model passes {what} ({k}), which no attnsim method computes")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value)):
        raise ValueError(f"{where}: autograd is on, but attnsim computes the forward only: run the "
                         "model under torch.no_grad() or torch.inference_mode()")
    if query.ndim != 4 or key.ndim != 4 or value.ndim != 4:
        raise ValueError(f"{where}: expected query, key and value as [batch, heads, tokens, head_dim]")
    heads_q, len_q = query.shape[1], query.shape[2]
    heads_kv, len_kv = key.shape[1], key.shape[2]
    if heads_q % heads_kv:
        raise ValueError(f"{where}: {heads_q} query heads are not a multiple of {heads_kv} key/value heads")
    dtype, device = query.dtype, query.device
    if dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"{where}: the model runs in {dtype}; attnsim takes float32, float16 or "
                         "bfloat16 Q/K/V")
    causal, window = _pattern(torch, attention_mask, module, is_causal, kwargs.get("sliding_window"),
                              len_q, len_kv, where)
    run, extra = _with_mask_options(method, window, kwargs.get("softcap"), where)
    q, k, v = (t.detach().to("cpu") for t in (query, key, value))
    sm_scale = None if scaling is None else float(scaling)
    if sm_scale is not None and not math.isfinite(sm_scale):
        raise ValueError(f"{where}: scaling {sm_scale} is not finite")
    try:
        r = _attention(q, k, v, method=run, causal=causal, sm_scale=sm_scale, **extra)
    except ValueError as e:  # the method's own refusal, said of this layer
        raise ValueError(f"{where}: {e}") from None
    if causal and len_q != len_kv and r.causal_mask == "top_left":
        raise ValueError(f"{where}: {len_q} queries after {len_kv - len_q} cached keys need the "
                         "bottom-right causal mask, but this method's kernel masks top-left")
    o = _to_torch(torch, r.o).to(dtype=dtype)  # [batch, heads_q, len_q, head_dim_v]
    o = o.transpose(1, 2).contiguous()
    return (o if device.type == "cpu" else o.to(device)), None
