"""llama.cpp's `llama-perplexity --kl-divergence` conventions for attnsim.e2e: its statistics, its
chunking of the text and its base logits file (`--kl-divergence-base`), read and written.

Source of the definitions: ggml-org/llama.cpp tools/perplexity/perplexity.cpp (perplexity() writes
the base file, kl_divergence() reads it and prints the statistics). Implemented here from that
description, not copied. What is llama.cpp's and what is attnsim's own:

* Chunks: the text's tokens (a BOS token first when the GGUF's tokenizer.ggml.add_bos_token says
  so) cut into ``n_chunk`` consecutive chunks of ``n_ctx`` tokens, each evaluated from an empty
  context with its first token replaced by BOS when BOS is added; positions n_ctx/2 .. n_ctx-2 of
  a chunk are scored (each predicting the next token): n_ctx - 1 - n_ctx/2 per chunk.
* Statistics: llama.cpp's formulas (mean ± sqrt(var/(n-1)), uncertainty 0 for n <= 10, the
  covariance of the two NLLs, 0 for n < 10, its percentile positions and median), on FP64
  per-token values summed exactly (math.fsum), so that the numbers are the same on every machine;
  llama.cpp sums float32 values in a thread-dependent order. A log-ratio uncertainty whose
  variance rounds below 0 is 0 here (llama.cpp would print nan).
* Base file: the exact bytes llama.cpp writes (little-endian): "_logits_", int32 n_ctx,
  int32 n_vocab, int32 n_chunk, int32 tokens[n_chunk * n_ctx], then per chunk and scored position
  nv = 2 * ((n_vocab + 1) / 2) + 4 uint16 words: float32 scale, float32 min_log_prob (4 words),
  n_vocab uint16 q_i (log p_i = scale * q_i + min_log_prob), zero padding to nv. Writing, the
  float32 steps are llama.cpp's (min logit clamped to max - 16, scale = (max - min) / 65535,
  q = round-half-even(inv_scale * (z - min)), 0 at or below min), with the log-sum-exp from
  attnsim.modelmath in FP64 (llama.cpp: expf summed in double) rounded to float32. Reading, the
  dequantized log p is computed in float32 as llama.cpp does; the KL sums p_base (log p_base -
  log q) over the entries with log p_base > -16, as llama.cpp does.
"""
from __future__ import annotations

import hashlib
import math
import os
import tempfile

import numpy as np

from . import modelmath as _mm

MAGIC = b"_logits_"
HEADER_BYTES = len(MAGIC) + 3 * 4
#: llama.cpp's default context (-c) of llama-perplexity.
DEFAULT_CTX = 512
#: Percentiles llama.cpp prints, as (column suffix, fraction): the percentage without its point.
KLD_PERCENTILES = (("p999", 0.999), ("p99", 0.990), ("p95", 0.950), ("p90", 0.900),
                   ("p10", 0.100), ("p5", 0.050), ("p1", 0.010), ("p01", 0.001))
DP_PERCENTILES = (("p999", 0.999), ("p99", 0.990), ("p95", 0.950), ("p90", 0.900),
                  ("p75", 0.750), ("p25", 0.250), ("p10", 0.100), ("p5", 0.050),
                  ("p1", 0.010), ("p01", 0.001))
#: Columns of statistics(), in order (the ones in percent are llama.cpp's printed percentages).
COLUMNS = (["kld_n", "ppl_q", "ppl_q_unc", "ppl_base", "ppl_base_unc", "ppl_cor",
            "ln_ppl_ratio", "ln_ppl_ratio_unc", "ppl_ratio_unc", "ppl_diff", "ppl_diff_unc",
            "kld_mean", "kld_mean_unc", "kld_max"]
           + [f"kld_{s}" for s, _ in KLD_PERCENTILES[:4]] + ["kld_median"]
           + [f"kld_{s}" for s, _ in KLD_PERCENTILES[4:]] + ["kld_min", "dp_mean", "dp_mean_unc",
                                                             "dp_max"]
           + [f"dp_{s}" for s, _ in DP_PERCENTILES[:5]] + ["dp_median"]
           + [f"dp_{s}" for s, _ in DP_PERCENTILES[5:]]
           + ["dp_min", "rms_dp", "rms_dp_unc", "same_top_p", "same_top_p_unc"])


# --- chunks -------------------------------------------------------------------------------------

def row_words(n_vocab: int) -> int:
    """uint16 words per scored position in the base file."""
    return 2 * ((n_vocab + 1) // 2) + 4


def first_scored(n_ctx: int) -> int:
    return n_ctx // 2


def scored_per_chunk(n_ctx: int) -> int:
    return n_ctx - 1 - n_ctx // 2


def add_bos(meta) -> bool:
    """llama.cpp's rule: the GGUF's tokenizer.ggml.add_bos_token; absent, true for SentencePiece
    vocabularies (tokenizer.ggml.model "llama") and false otherwise. SmolLM2's GGUF says false."""
    v = meta.get("tokenizer.ggml.add_bos_token")
    if v is None:
        return meta.get("tokenizer.ggml.model") == "llama"
    return bool(v)


def _int(v, what: str, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise ValueError(f"{what} must be an integer >= {lo}, got {v!r}")
    return int(v)


def check_ctx(ctx) -> int:
    return _int(ctx, "ctx", 3)


def check_chunks(chunks) -> int:
    return _int(chunks, "chunks", 1)


def chunk_plan(n_tokens: int, ctx: int, chunks) -> int:
    """The number of chunks of ``ctx`` tokens a run evaluates from ``n_tokens`` text tokens:
    ``chunks`` (None: as many as fit, llama.cpp's default); ValueError when fewer fit."""
    ctx = check_ctx(ctx)
    most = n_tokens // ctx
    if chunks is None:
        if most < 1:
            raise ValueError(f"ctx={ctx}: the text has {n_tokens} tokens, fewer than one chunk")
        return most
    chunks = check_chunks(chunks)
    if chunks > most:
        raise ValueError(f"chunks={chunks} of ctx={ctx}: the text has {n_tokens} tokens "
                         f"({most} chunk{'s' if most != 1 else ''} fit)")
    return chunks


# --- statistics ---------------------------------------------------------------------------------

def _mean_unc(s: float, s2: float, n: int):
    """llama.cpp's mean_and_uncertainty: (sum/n, sqrt((sum2/n - mean^2)/(n-1))), the
    uncertainty 0 when the variance is not positive or n <= 10."""
    if n < 1:
        return 0.0, 0.0
    f = s / n
    df = s2 / n - f * f
    return f, (math.sqrt(df / (n - 1)) if df > 0 and n > 10 else 0.0)


def _cov(sa: float, sb: float, sab: float, n: int) -> float:
    """llama.cpp's covariance of two means: (sumab/n - (suma/n)(sumb/n)) / (n-1), 0 for n < 10."""
    if n < 10:
        return 0.0
    return (sab / n - (sa / n) * (sb / n)) / (n - 1)


def percentile(sorted_values: np.ndarray, fraction: float) -> float:
    """llama.cpp's percentile of sorted values: position fraction·(n-1), both float32 and their
    product rounded to float32 as llama.cpp computes it, linear interpolation (here in FP64)."""
    v = sorted_values
    f = np.float32(fraction)
    if f <= 0:
        return float(v[0])
    if f >= 1:
        return float(v[-1])
    p = np.float32(f * np.float32(len(v) - 1))
    ip = int(p)
    w = float(p - np.float32(ip))
    return (1.0 - w) * float(v[ip]) + w * float(v[min(ip + 1, len(v) - 1)])


def median(sorted_values: np.ndarray) -> float:
    """llama.cpp's median: the middle value, or the mean of the two middle ones."""
    v, n = sorted_values, len(sorted_values)
    return float(v[n // 2]) if n % 2 else 0.5 * (float(v[n // 2]) + float(v[n // 2 - 1]))


def _exp(x: float) -> float:
    """attnsim.modelmath's exp of one number (the same bits on every machine)."""
    return float(_mm.exp(np.asarray([x], np.float64))[0])


def _fsum(x) -> float:
    return math.fsum(np.asarray(x, np.float64).tolist())


def statistics(nll: np.ndarray, nll_base: np.ndarray, kld: np.ndarray, dp: np.ndarray,
               same_top: np.ndarray) -> dict:
    """llama.cpp's --kl-divergence report over the scored tokens, as a dict of COLUMNS.

    nll, nll_base: -log p of the correct next token under the method (Q) and the base; kld: per
    token KL(base ‖ Q); dp: p - p_base of the correct token; same_top: whether the argmaxes agree.
    ppl_q ± ppl_q_unc, ppl_base ± ppl_base_unc: exp(mean NLL), ± exp(mean)·σ(mean); ppl_cor: the
    correlation of the two mean NLLs (percent); ln_ppl_ratio ± unc (the covariance subtracted),
    ppl_ratio_unc = exp(ln_ppl_ratio)·unc; ppl_diff ± unc; kld_*: mean ± σ, max, percentiles,
    median, min; dp_*: Δp mean ± σ, max, percentiles, median, min (percent); rms_dp ± unc
    (percent; unc = σ(mean Δp²)/(2 rms)); same_top_p ± sqrt(p(1-p)/(n-1)) (percent)."""
    nll, nll_base = np.asarray(nll, np.float64), np.asarray(nll_base, np.float64)
    kld, dp = np.asarray(kld, np.float64), np.asarray(dp, np.float64)
    same_top = np.asarray(same_top, bool)
    n = len(nll)
    if n < 1 or not (len(nll_base) == len(kld) == len(dp) == len(same_top) == n):
        raise ValueError("statistics: give the same number (>= 1) of values of each")
    lq = _mean_unc(_fsum(nll), _fsum(nll * nll), n)
    lb = _mean_unc(_fsum(nll_base), _fsum(nll_base * nll_base), n)
    cov = _cov(_fsum(nll), _fsum(nll_base), _fsum(nll * nll_base), n)
    ppl_q, ppl_b = _exp(lq[0]), _exp(lb[0])
    ppl_q_unc, ppl_b_unc = ppl_q * lq[1], ppl_b * lb[1]
    den = lq[1] * lb[1]
    ln_ratio = lq[0] - lb[0]
    ln_ratio_unc = math.sqrt(max(0.0, lq[1] * lq[1] + lb[1] * lb[1] - 2.0 * cov))
    ppl_cov = ppl_q * ppl_b * cov
    out = dict(kld_n=n, ppl_q=ppl_q, ppl_q_unc=ppl_q_unc, ppl_base=ppl_b, ppl_base_unc=ppl_b_unc,
               ppl_cor=100.0 * cov / den if den > 0 else float("nan"),
               ln_ppl_ratio=ln_ratio, ln_ppl_ratio_unc=ln_ratio_unc,
               ppl_ratio_unc=_exp(ln_ratio) * ln_ratio_unc, ppl_diff=ppl_q - ppl_b,
               ppl_diff_unc=math.sqrt(max(0.0, ppl_q_unc * ppl_q_unc + ppl_b_unc * ppl_b_unc
                                          - 2.0 * ppl_cov)))
    km = _mean_unc(_fsum(kld), _fsum(kld * kld), n)
    ks = np.sort(kld, kind="stable")
    out.update(kld_mean=km[0], kld_mean_unc=km[1], kld_max=float(ks[-1]))
    for s, f in KLD_PERCENTILES:
        out[f"kld_{s}"] = percentile(ks, f)
    out.update(kld_median=median(ks), kld_min=float(ks[0]))
    dp2 = dp * dp
    dm = _mean_unc(_fsum(dp), _fsum(dp2), n)
    ds = np.sort(dp, kind="stable")
    out.update(dp_mean=100.0 * dm[0], dp_mean_unc=100.0 * dm[1], dp_max=100.0 * float(ds[-1]))
    for s, f in DP_PERCENTILES:
        out[f"dp_{s}"] = 100.0 * percentile(ds, f)
    out.update(dp_median=100.0 * median(ds), dp_min=100.0 * float(ds[0]))
    mse = _mean_unc(_fsum(dp2), _fsum(dp2 * dp2), n)
    rms = math.sqrt(mse[0])
    out.update(rms_dp=100.0 * rms, rms_dp_unc=100.0 * (0.5 / rms * mse[1]) if rms > 0 else 0.0)
    p = int(np.count_nonzero(same_top)) / n
    out.update(same_top_p=100.0 * p,
               same_top_p_unc=100.0 * math.sqrt(p * (1.0 - p) / (n - 1)) if n > 1 else 0.0)
    return {k: out[k] for k in COLUMNS}


# --- the base file ------------------------------------------------------------------------------

def compress(logits: np.ndarray, logprobs: np.ndarray) -> np.ndarray:
    """Rows of the base file, uint16 [rows, row_words(n_vocab)], from float32 logits [rows,
    n_vocab] and their FP64 log-softmax (attnsim.modelmath.log_softmax of the same logits)."""
    z = np.ascontiguousarray(logits, np.float32)
    rows, n_vocab = z.shape
    lp = np.asarray(logprobs, np.float64)
    if lp.shape != z.shape:
        raise ValueError("compress: logits and log-probabilities differ in shape")
    r = np.arange(rows)
    mx, mn = z.max(axis=1), z.min(axis=1)
    mn = np.maximum(mn, mx - np.float32(16))
    lse = (-lp[r, np.argmax(z, axis=1)]).astype(np.float32)  # log Σ exp(z - max): -log p of the max
    min_log_prob = (mn - mx) - lse
    scale = (mx - mn) / np.float32(65535)
    out = np.zeros((rows, row_words(n_vocab)), np.uint16)
    out[:, :4] = np.stack([scale, min_log_prob], axis=1).astype("<f4").view("<u2")
    nz = scale != 0
    if np.any(nz):
        inv = np.float32(1) / scale[nz]
        zz, m = z[nz], mn[nz][:, None]
        t = inv[:, None] * (zz - m)
        out[nz, 4:4 + n_vocab] = np.where(zz > m, np.rint(t), np.float32(0)).astype(np.uint16)
    return out


def dequantize(rows: np.ndarray, n_vocab: int) -> np.ndarray:
    """log p_base [rows, n_vocab] float32 of base-file rows: scale·q + min_log_prob in float32."""
    rows = np.asarray(rows, np.uint16)
    d = np.ascontiguousarray(rows[:, :4]).view("<f4")
    scale, mn = d[:, 0:1], d[:, 1:2]
    q = rows[:, 4:4 + n_vocab].astype(np.float32)
    return (scale * q) + mn


def kld_rows(lp_base: np.ndarray, lq: np.ndarray) -> np.ndarray:
    """llama.cpp's per-token KL(base ‖ Q): Σ p_base (log p_base - log q) over the entries with
    log p_base > -16, in FP64 (attnsim.modelmath, fixed order)."""
    lb = np.asarray(lp_base, np.float64)
    lb = np.where(lb > -16.0, lb, -np.inf)
    return _mm.kl_rows(np.ascontiguousarray(lb), np.ascontiguousarray(lq, np.float64))


class BaseFile:
    """A base logits file, read: n_ctx, n_vocab, n_chunk, tokens (int32 [n_chunk * n_ctx]) and
    rows(c) (uint16 [scored_per_chunk(n_ctx), row_words(n_vocab)] of chunk c). ValueError (one
    line) for a file that is not one or is cut short or too long."""

    def __init__(self, path):
        self.path = os.fspath(path)
        try:
            size = os.path.getsize(self.path)
            with open(self.path, "rb") as f:
                head = f.read(HEADER_BYTES)
        except OSError as e:
            raise ValueError(f"kl_base: cannot read {self.path}: {e.strerror or e}") from None
        if len(head) < HEADER_BYTES or head[:8] != MAGIC:
            raise ValueError(f"kl_base: {self.path} is not a llama.cpp logits file "
                             f"(no '_logits_' header)")
        self.n_ctx, self.n_vocab, self.n_chunk = (int(x) for x in np.frombuffer(head[8:], "<i4"))
        if self.n_ctx < 3 or self.n_vocab < 1 or self.n_chunk < 1:
            raise ValueError(f"kl_base: {self.path}: bad header (n_ctx={self.n_ctx}, "
                             f"n_vocab={self.n_vocab}, n_chunk={self.n_chunk})")
        self.nv = row_words(self.n_vocab)
        self.scored = scored_per_chunk(self.n_ctx)
        self._tok_off = HEADER_BYTES
        self._rows_off = HEADER_BYTES + 4 * self.n_chunk * self.n_ctx
        self.chunk_bytes = 2 * self.scored * self.nv
        want = self._rows_off + self.n_chunk * self.chunk_bytes
        if size != want:
            raise ValueError(f"kl_base: {self.path} has {size} bytes; its header (n_ctx="
                             f"{self.n_ctx}, n_vocab={self.n_vocab}, n_chunk={self.n_chunk}) "
                             f"makes {want}")
        self.tokens = np.fromfile(self.path, "<i4", self.n_chunk * self.n_ctx,
                                  offset=self._tok_off).astype(np.int64)
        self.size = size

    def rows(self, c: int) -> np.ndarray:
        if not 0 <= c < self.n_chunk:
            raise ValueError(f"kl_base: chunk {c} outside 0-{self.n_chunk - 1}")
        a = np.fromfile(self.path, "<u2", self.scored * self.nv,
                        offset=self._rows_off + c * self.chunk_bytes)
        return a.reshape(self.scored, self.nv)

    def sha256(self) -> str:
        h = hashlib.sha256()
        with open(self.path, "rb") as f:
            for b in iter(lambda: f.read(1 << 22), b""):
                h.update(b)
        return h.hexdigest()

    def check(self, n_vocab: int, n_ctx: int, tokens: np.ndarray, chunks: int) -> None:
        """ValueError (one line) unless the run's vocabulary, context and tokens (of its first
        ``chunks`` chunks) are the file's."""
        if self.n_vocab != n_vocab:
            raise ValueError(f"kl_base: {self.path} has n_vocab={self.n_vocab}, the model "
                             f"{n_vocab}")
        if self.n_ctx != n_ctx:
            raise ValueError(f"kl_base: {self.path} has n_ctx={self.n_ctx}, the run ctx={n_ctx}")
        if chunks > self.n_chunk:
            raise ValueError(f"kl_base: {self.path} has {self.n_chunk} chunks, the run asks "
                             f"for {chunks}")
        mine = np.asarray(tokens, np.int64)[:chunks * n_ctx]
        theirs = self.tokens[:chunks * n_ctx]
        if len(mine) != len(theirs) or not np.array_equal(mine, theirs):
            bad = next((i for i in range(min(len(mine), len(theirs))) if mine[i] != theirs[i]),
                       min(len(mine), len(theirs)))
            raise ValueError(f"kl_base: {self.path}'s tokens differ from the run's at token "
                             f"{bad} (another text or tokenizer)")


class BaseWriter:
    """Writes a base file whole or not at all: a temporary file beside ``path``, renamed over it
    by close() once every chunk is in; abort() (or an exception in a with block) removes it."""

    def __init__(self, path, n_ctx: int, n_vocab: int, tokens):
        self.path = os.fspath(path)
        self.n_ctx, self.n_vocab = int(n_ctx), int(n_vocab)
        tokens = np.asarray(tokens, np.int64)
        if len(tokens) % self.n_ctx or not len(tokens):
            raise ValueError("base_out: the tokens are not whole chunks of n_ctx")
        self.n_chunk, self.done = len(tokens) // self.n_ctx, 0
        d = os.path.dirname(os.path.realpath(self.path)) or "."
        try:
            fd, self.tmp = tempfile.mkstemp(prefix=".kld-", suffix=".bin", dir=d)
        except OSError as e:
            raise ValueError(f"base_out: cannot write in {d}: {e.strerror or e}") from None
        self.f = os.fdopen(fd, "wb")
        self.f.write(MAGIC)
        self.f.write(np.asarray([self.n_ctx, self.n_vocab, self.n_chunk], "<i4").tobytes())
        self.f.write(tokens.astype("<i4").tobytes())

    def add(self, rows: np.ndarray) -> None:
        rows = np.asarray(rows, np.uint16)
        if rows.shape != (scored_per_chunk(self.n_ctx), row_words(self.n_vocab)):
            raise ValueError(f"base_out: a chunk's rows have shape {rows.shape}")
        if self.done >= self.n_chunk:
            raise ValueError("base_out: more chunks than the header says")
        self.f.write(rows.astype("<u2").tobytes())
        self.done += 1

    def close(self) -> None:
        if self.done != self.n_chunk:
            self.abort()
            raise ValueError(f"base_out: {self.done} of {self.n_chunk} chunks written")
        self.f.close()
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(self.tmp, 0o666 & ~umask)
        os.replace(self.tmp, os.path.realpath(self.path))

    def abort(self) -> None:
        if not self.f.closed:
            self.f.close()
        if os.path.exists(self.tmp):
            os.unlink(self.tmp)

    def __enter__(self):
        return self

    def __exit__(self, et, ev, tb):
        if et is None:
            self.close()
        else:
            self.abort()
        return False
