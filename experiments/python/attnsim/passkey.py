"""Long-context retrieval (passkey, needle in a haystack) for attnsim.e2e: SmolLM2 greedy-decodes a
5-digit pass key hidden at a chosen depth of filler text, with a method's attention in its layers.

    import attnsim.e2e as e2e
    e2e.passkey("smollm2", ["flash", "sage2"], lengths=(2048,), depths=(0.1, 0.5, 0.9), trials=2)

The prompt (template "plain", the default; "chat" wraps the same text in SmolLM2's chat template):
an instruction line, filler sentences (FILLER repeated), the needle "The pass key is NNNNN.
Remember it." after ``depth`` of the filler, more filler, and the question, ending in "The pass
key is" so that the key is the continuation. Its tokens, with the answer's, fit ``length``. The
model reads it in one causal forward with a KV cache (e2e's forward: realmodels' layer with the
method's attention), then decodes greedily one token at a time (one query row against the cache,
no mask, as e2e's greedy generation does) until a digit run ends or MAX_NEW tokens; the trial is
correct when the first digit run is the key. The golden row is the same forward with FP64 golden
attention. Keys: numpy's default_rng(seed), one per (length, depth, trial), the same for every
method.
"""
from __future__ import annotations

import re
import time

import numpy as np

INTRO = ("There is an important info hidden inside a lot of irrelevant text. Find it and "
         "memorize it. I will quiz you about the important information there.\n\n")
FILLER = ("The grass is green. The sky is blue. The sun is yellow. Here we go. There and back "
          "again. ")
NEEDLE = "The pass key is {key}. Remember it. "
QUESTION = "\n\nWhat is the pass key? The pass key is"
CHAT_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
TEMPLATES = ("plain", "chat")
#: The shortest length: room for either template's prompt with some filler and the answer.
MIN_LENGTH = 160
#: Greedy tokens at most per answer (SmolLM2 splits digits one per token: a space and 5 digits).
MAX_NEW = 8


def _special(net, name: str) -> int:
    toks = (getattr(net, "meta", {}) or {}).get("tokenizer.ggml.tokens")
    if toks is not None and name in toks:
        return int(list(toks).index(name))
    tid = getattr(net.tokenizer(), "token_to_id", lambda _: None)(name)
    if tid is None:
        raise ValueError(f"passkey: the model's vocabulary has no {name} (chat template)")
    return int(tid)


def prompt_ids(net, length: int, depth: float, key: str, template: str = "plain",
               shown_key: str | None = None) -> np.ndarray:
    """The prompt's token ids (at most length - MAX_NEW of them) with ``shown_key`` (default:
    ``key``) in the needle at ``depth`` (0: before the filler, 1: after it)."""
    shown = key if shown_key is None else shown_key
    pre = list(net.encode(""))  # what the tokenizer adds to any text (a BOS): once, first

    def enc(text):
        x = list(net.encode(text))
        return x[len(pre):] if x[:len(pre)] == pre else x
    if template == "chat":
        im_start, im_end = _special(net, "<|im_start|>"), _special(net, "<|im_end|>")
        nl = list(enc("\n"))
        head = (pre + [im_start] + list(enc("system\n" + CHAT_SYSTEM)) + [im_end] + nl + [im_start]
                + list(enc("user\n" + INTRO)))
        tail = (list(enc(QUESTION.rsplit(" The pass key is", 1)[0])) + [im_end] + nl
                + [im_start] + list(enc("assistant\nThe pass key is")))
    elif template == "plain":
        head, tail = pre + list(enc(INTRO)), list(enc(QUESTION))
    else:
        raise ValueError(f"passkey: template {template!r} is neither plain nor chat")
    budget = length - MAX_NEW

    def build(n_units):
        before = int(round(depth * n_units))
        hay = FILLER * before + NEEDLE.format(key=shown) + FILLER * (n_units - before)
        return np.asarray(head + list(enc(hay.rstrip(" "))) + tail, np.int64)

    unit = len(enc(FILLER * 8)) / 8
    n = max(0, int((budget - len(head) - len(tail) - len(enc(NEEDLE.format(key=shown)))) / unit))
    ids = build(n)
    while len(ids) > budget and n > 0:
        n -= 1
        ids = build(n)
    if len(ids) > budget or n < 1:
        raise ValueError(f"passkey: length {length} is too short for the prompt "
                         f"({len(build(1))} tokens with one filler passage, {MAX_NEW} for the "
                         f"answer)")
    return ids


def _attention(m, method: str, causal: bool):
    from . import attention as _attention_call
    from . import canonical, golden
    is_golden = canonical(method) == "golden"

    def f(li, q, k, v):
        q4, k4, v4 = q[None], k[None], v[None]
        if is_golden:
            o = golden(q4, k4, v4, causal, m.sm_scale).o
        else:
            o = _attention_call(q4, k4, v4, method, causal, m.sm_scale).o
        return np.ascontiguousarray(o[0], dtype=np.float32)
    return f


def _per_layer(m, methods, causal):
    fs = {meth: _attention(m, meth, causal) for meth in dict.fromkeys(methods)}
    return lambda li, q, k, v: fs[methods[li]](li, q, k, v)


def answer(m, ids: np.ndarray, methods: list[str], tick=None) -> list[int]:
    """Greedy tokens after ``ids`` (at most MAX_NEW; stops when a digit run ends) with methods[l]
    in layer l: one causal forward over the prompt with a KV cache, then one token at a time."""
    net, mod = m.net, m.mod
    T = len(ids)
    cos, sin = mod.rope_tables(T)
    x = net.embed(ids)
    caches = [{} for _ in range(m.n_layers)]
    prefill = _per_layer(m, methods, True)
    for li in range(m.n_layers):
        x = net.layer(li, x, cos, sin, attention=prefill, cache=caches[li])
        if tick:
            tick()
    logits = net.logits(x[-1:])[0]
    decode = _per_layer(m, methods, False)
    out: list[int] = []
    seen_digit = False
    for i in range(MAX_NEW):
        tok = int(np.argmax(logits))
        text = net.tokenizer().decode([tok])
        if seen_digit and not text.isdigit():
            break
        out.append(tok)
        seen_digit = seen_digit or any(ch.isdigit() for ch in text)
        if i + 1 == MAX_NEW:
            break
        x = net.embed(np.asarray([tok], np.int64))
        cos1, sin1 = mod.rope_tables(1, T + i)
        for li in range(m.n_layers):
            x = net.layer(li, x, cos1, sin1, attention=decode, cache=caches[li])
        logits = net.logits(x)[0]
    return out


def found(net, tokens: list[int], key: str) -> bool:
    """Whether the first digit run of the decoded answer is the key."""
    d = re.search(r"\d+", net.tokenizer().decode([int(t) for t in tokens]))
    return d is not None and d.group(0) == key


def keys(lengths, depths, trials: int, seed: int) -> dict:
    """The pass key of each (length, depth, trial): 5 digits from numpy's default_rng(seed)."""
    rng = np.random.default_rng(seed)
    return {(L, d, t): str(int(rng.integers(10000, 100000)))
            for L in lengths for d in depths for t in range(trials)}


def _probe(m, methods) -> None:
    """Each distinct method once on small inputs of the model's prefill and decode shapes, so that
    one that refuses them fails before the first trial."""
    from . import attention as _attention_call
    from . import canonical
    rng = np.random.default_rng(0)
    for meth in dict.fromkeys(methods):
        if canonical(meth) == "golden":
            continue
        for rows, causal in ((16, True), (1, False)):
            q = rng.standard_normal((1, m.heads_q, rows, m.head_dim), dtype=np.float32)
            k = rng.standard_normal((1, m.heads_kv, 16, m.head_dim), dtype=np.float32)
            v = rng.standard_normal((1, m.heads_kv, 16, m.head_dim), dtype=np.float32)
            _attention_call(q, k, v, meth, causal, m.sm_scale)


def check_args(lengths, depths, trials, seed, template, context: int = 8192):
    """(lengths, depths, trials, seed) checked: ValueError (one line) for a bad value."""
    def ints(v, what, lo, hi=None):
        out = []
        for x in ([v] if isinstance(v, (int, np.integer)) else list(v)):
            if isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < lo or \
                    (hi is not None and x > hi):
                raise ValueError(f"passkey: {what} must be integers in {lo}-{hi}, got {x!r}"
                                 if hi is not None else
                                 f"passkey: {what} must be an integer >= {lo}, got {x!r}")
            out.append(int(x))
        if not out:
            raise ValueError(f"passkey: give at least one of {what}")
        return out
    lengths = ints(lengths, "lengths", MIN_LENGTH, context)
    ds = []
    for d in ([depths] if isinstance(depths, (int, float, np.floating)) else list(depths)):
        if isinstance(d, bool) or not isinstance(d, (int, float, np.integer, np.floating)) or \
                not 0.0 <= float(d) <= 1.0:
            raise ValueError(f"passkey: depths must be numbers in 0-1, got {d!r}")
        ds.append(float(d))
    if not ds:
        raise ValueError("passkey: give at least one of depths")
    trials = ints(trials, "trials", 1)[0]
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"passkey: seed must be an integer >= 0, got {seed!r}")
    if template not in TEMPLATES:
        raise ValueError(f"passkey: template {template!r} is neither plain nor chat")
    return lengths, ds, trials, int(seed)


def table(m, runs, lengths, depths, trials: int, seed: int, template: str = "plain",
          progress=None):
    """One row per (run, length, depth): runs is [(method, label, per-layer methods)]; columns
    method, label, length, depth, trials, correct, accuracy, tokens (the prompt's), time_s (of
    the row's trials)."""
    import pandas as pd

    from . import _progress
    ks = keys(lengths, depths, trials, seed)
    total = len(runs) * len(lengths) * len(depths) * trials * m.n_layers
    report, close = _progress.reporter(progress, total)
    done = [0]
    rows = []
    try:
        for method, label, per_layer in runs:
            for L in lengths:
                for d in depths:
                    ok, t0, ntok = 0, time.perf_counter(), 0
                    for t in range(trials):
                        ids = prompt_ids(m.net, L, d, ks[(L, d, t)], template)
                        ntok = len(ids)
                        what = f"{label} length {L} depth {d:g} trial {t + 1}/{trials}"

                        def tick(what=what):
                            done[0] += 1
                            if report:
                                report(done[0], total, what)
                        ok += found(m.net, answer(m, ids, per_layer, tick), ks[(L, d, t)])
                    rows.append(dict(method=method, label=label, length=L, depth=d,
                                     trials=trials, correct=ok, accuracy=ok / trials,
                                     tokens=ntok, time_s=time.perf_counter() - t0))
    finally:
        close()
    return pd.DataFrame(rows)
