"""attnsim: GPU attention kernels simulated bit for bit on the CPU, measured against FP64 golden.

    import attnsim, numpy as np
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 8, 512, 128), dtype=np.float32) for _ in range(3))
    r = attnsim.attention(q, k, v, method="sage2:arch=sm90")   # r.o: bf16, as the kernel returns it
    print(attnsim.metrics(r, attnsim.golden(q, k, v))["rel_fro"])

Arrays: numpy float32/float16/float64 or ml_dtypes.bfloat16, any strides, or any object with
``__dlpack__`` on the CPU (a torch tensor), read where they lie. Every call releases the GIL and
runs on the OpenMP threads the command line uses (OMP_NUM_THREADS, set_num_threads); results do not
depend on their number. Bad input raises ValueError or TypeError with the command line's one-line
message. The whole API: experiments/README.md, "Python".
"""
from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import NamedTuple

import ml_dtypes
import numpy as np

from . import _core, _progress

__version__ = "0.1.0"
__all__ = [
    "AttnsimWarning", "AttnsimNote", "AttentionResult", "QuantizeResult", "SyntheticInput", "attention", "golden", "metrics",
    "attribute", "methods", "canonical", "describe", "synthetic", "convert", "quantize", "mma",
    "mma_instructions", "special", "set_num_threads", "get_num_threads", "set_memory_limit",
    "memory_limit", "ULP_BUCKETS", "verify", "schedule", "invariance",
]

# The wheel ships the H100 tables of the approximate special functions next to the module; an
# editable or in-tree install reads the checkout's data/ (the path compiled in).
_TABLES = Path(_core.__file__).resolve().parent / "data"
if (_TABLES / "hw/h100/ex2_approx_ftz_pos_steps.bin").is_file():
    _core.set_special_data_dir(str(_TABLES))

_BF16 = np.dtype(ml_dtypes.bfloat16)
_E4M3 = np.dtype(ml_dtypes.float8_e4m3fn)
_E5M2 = np.dtype(ml_dtypes.float8_e5m2)
# Output formats as numpy dtypes (the kernels' bits viewed, never converted).
_FORMAT_DTYPE = {"fp64": np.dtype(np.float64), "fp32": np.dtype(np.float32),
                 "fp16": np.dtype(np.float16), "bf16": _BF16, "e4m3fn": _E4M3, "e5m2": _E5M2}
_DTYPE_FORMAT = {v: k for k, v in _FORMAT_DTYPE.items()}
# DLPack device types (dlpack.h): host memory is 1 (CPU), 3 (CUDA pinned) and 11 (ROCm pinned).
_DEVICES = {2: "cuda", 4: "opencl", 7: "vulkan", 8: "metal", 9: "vpi", 10: "rocm", 12: "ext_dev",
            13: "cuda_managed", 14: "oneapi", 15: "webgpu", 16: "hexagon", 17: "maia"}

class AttnsimWarning(UserWarning):
    """A result was computed, but something about the input or the options is likely not what
    was meant (the command line's ``attnsim: warning:`` lines)."""


class AttnsimNote(UserWarning):
    """What a method computes on this input that no hardware recording verifies (the command
    line's ``attnsim: note:`` lines)."""


def _relay_messages():
    """Hands the compiled core's queued warnings and notes to Python's warnings module."""
    import warnings
    for kind, text in _core.take_messages():
        warnings.warn(text, AttnsimWarning if kind == "warning" else AttnsimNote, stacklevel=3)


def _relaying(f):
    import functools

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        try:
            return f(*args, **kwargs)
        finally:
            _relay_messages()
    return wrapper


#: Labels of the ULP histogram's buckets (``metrics(...)["ulp_hist"]``).
ULP_BUCKETS = tuple(_core.ulp_buckets())


def _arg(x, name: str):
    """(what _core reads, tag): numpy arrays and __dlpack__ objects as they are (no copy),
    ml_dtypes.bfloat16 as a uint16 view of its bits, anything else through np.asarray."""
    if not isinstance(x, np.ndarray) and hasattr(x, "__dlpack__"):
        device = getattr(x, "__dlpack_device__", None)
        if device is not None:
            kind = int(device()[0])
            if kind not in (1, 3, 11):
                raise TypeError(f"{name} lives on a {_DEVICES.get(kind, f'device {kind}')} device; "
                                "attnsim simulates on the CPU: pass a CPU array (torch: .cpu())")
        return x, ""
    if not isinstance(x, np.ndarray):
        try:
            x = np.asarray(x)
        except Exception:  # noqa: BLE001 - any failure is the caller's type
            raise TypeError(f"{name} is not a numeric array ({type(x).__name__})") from None
    if not x.dtype.isnative:
        raise TypeError(f"{name} has dtype {x.dtype.str} (byte-swapped, "
                        f"{'big' if x.dtype.byteorder == '>' else 'little'}-endian); pass it in "
                        f"the machine's byte order: {name}.astype({name}.dtype.newbyteorder('='))")
    if x.dtype.kind == "f" and x.dtype.itemsize > 8:
        raise TypeError(f"{name} has dtype {x.dtype} (long double); attnsim takes float32, float16, "
                        f"bfloat16 or float64: {name}.astype(np.float64)")
    if x.dtype == _BF16:
        return x.view(np.uint16), "bfloat16"
    if x.dtype.kind not in "fiub":
        if x.dtype in (_E4M3, _E5M2):
            raise TypeError(f"{name} has dtype {x.dtype}; pass its values as float32 "
                            f"(x.astype(np.float32))")
        raise TypeError(f"{name} is not a numeric array (dtype {x.dtype})")
    return x, ""


def _scale(sm_scale) -> float:
    """sm_scale for _core: 0.0 means the default 1/sqrt(head_dim) (None); anything else must be a
    real number > 0 that stays finite and non-zero in FP32, where the kernels scale by it."""
    if sm_scale is None:
        return 0.0
    if isinstance(sm_scale, (bool, np.bool_)) or not isinstance(sm_scale, (int, float, np.integer,
                                                                           np.floating)):
        if isinstance(sm_scale, np.ndarray) and sm_scale.ndim == 0 and sm_scale.dtype.kind in "iuf":
            sm_scale = sm_scale.item()
        else:
            raise ValueError(f"sm_scale must be a number > 0 or None (1/sqrt(head_dim)), got "
                             f"{sm_scale!r}"[:200])
    x = float(sm_scale)
    if not (math.isfinite(x) and x > 0):
        raise ValueError(f"sm_scale = {x:g} must be a finite number > 0 (None: 1/sqrt(head_dim))")
    with np.errstate(over="ignore"):
        f32 = np.float32(x)
    if not np.isfinite(f32) or f32 == 0 or abs(x) < float(np.finfo(np.float32).tiny):
        raise ValueError(f"sm_scale = {x:g} is {'infinite' if not np.isfinite(f32) else 'zero or subnormal'}"
                         " in FP32, where the kernels scale the scores by it")
    return x


def _causal(causal, *, aligned: bool = False):
    """The causal flag strictly: True/False (numpy bools, 0 and 1 too). With `aligned` (golden),
    also the mask's alignment: "bottom_right" (the default causal mask) or "top_left"; returns
    (causal, alignment or None)."""
    if aligned and isinstance(causal, str):
        if causal not in ("bottom_right", "top_left"):
            raise ValueError(f"causal must be True, False, 'bottom_right' or 'top_left', got {causal!r}")
        return True, causal
    if isinstance(causal, (bool, np.bool_)) or (
            isinstance(causal, (int, np.integer)) and int(causal) in (0, 1)):
        return bool(causal), None
    extra = ", 'bottom_right' or 'top_left'" if aligned else " (or 0/1)"
    raise ValueError(f"causal must be True or False{extra}, got {causal!r}"[:200])


class AttentionResult:
    """One method's output on one input: ``o`` [batch, heads_q, len_q, head_dim_v] exactly as the
    simulated kernel returns it (fp16 as float16, bf16 as ml_dtypes.bfloat16, fp32, fp64), ``lse``
    the natural-log LSE per row [batch, heads_q, len_q] as the method returns it (float64 holding
    the kernel's values; None for a method that returns none: lean, splitkv), ``method`` the
    canonical method string (every option spelled out), ``format`` the output format's name and
    ``causal_mask`` the mask the method applied: "none", "causal" (len_q == len_kv: both
    alignments hide the same keys), "bottom_right" or "top_left" (a causal input with len_q !=
    len_kv: which keys query i sees, sim/problem.hpp). :func:`metrics` refuses to compare two
    results whose masks differ."""

    __slots__ = ("o", "lse", "method", "format", "counters", "causal_mask")

    def __init__(self, o, lse, method: str, format: str, counters=None, causal_mask: str = "none"):
        self.o, self.lse, self.method, self.format = o, lse, method, format
        # attention(..., counters=True): {stage: {event: count}, "first": {stage: (event, slice,
        # row, column)}} (sim/pipeline/counters.hpp); None otherwise.
        self.counters = counters
        self.causal_mask = causal_mask

    def __repr__(self) -> str:
        lse = "None" if self.lse is None else f"float64{list(self.lse.shape)}"
        return (f"AttentionResult(method={self.method!r}, format={self.format!r}, "
                f"o={self.o.dtype}{list(self.o.shape)}, lse={lse}, causal_mask={self.causal_mask!r})")


def attention(q, k, v, method: str = "sage2:arch=sm90", causal: bool = False, sm_scale=None, *,
              allow_nonfinite: bool = False, counters: bool = False, launch: str | None = None,
              sms: int = 132, cu_seqlens_q=None, cu_seqlens_k=None, window: int = 0,
              softcap: float = 0.0) -> AttentionResult:
    """Runs one method (``attnsim methods`` / :func:`methods` lists them and their options) on
    q [batch, heads_q, len_q, head_dim], k [batch, heads_kv, len_kv, head_dim] and
    v [batch, heads_kv, len_kv, head_dim_v] (GQA/MQA: heads_q a multiple of heads_kv; MLA: a
    head_dim_v of its own), exactly as ``attnsim run`` runs it on a dump holding the same arrays.
    16-bit inputs are used as they are (the dtype of q, k and v together; mixed dtypes count as
    float32), float64 is rounded to float32. causal: True or False; the mask is the kernel's own
    (bottom-right for FlashAttention-2 and golden, top-left for SDPA and SageAttention's kernels:
    ``r.causal_mask`` says which, where it matters); more queries than keys under a causal mask is
    refused, as by the command line. sm_scale: None for 1/sqrt(head_dim). NaN/Inf inputs are
    refused unless allow_nonfinite. counters: the silent failures per stage in ``r.counters``
    (saturations, overflows, underflows, NaNs by cause, vanished P, ...; computed with the stage
    references, so slower). launch: the serving launch the input's sequences are the first of
    (a situation of :func:`invariance`, "1:4096x16"; ``sms`` the GPU's SM count): the kernel's
    schedule is that launch's (methods with a schedule model only). cu_seqlens_q, cu_seqlens_k:
    a varlen batch (FlashAttention's varlen layout): q [1, heads_q, total_q, d] and k, v [1,
    heads_kv, total_kv, d] pack the sequences along the tokens, sequence s owning queries
    cu_seqlens_q[s]:cu_seqlens_q[s+1] (the last of its keys cu_seqlens_k[s]:cu_seqlens_k[s+1]);
    each runs inside the launch of all, O and LSE packed the same way. window, softcap: the
    input's sliding window (each query sees its ``window`` latest keys; causal only) and score
    softcap C·tanh(s/C) (0: none), as golden computes them; a method that sets them from its own
    options (``flex:window=W,softcap=C``, ``vllm_triton:...``) must name the same, and any other
    method is refused (it would ignore them)."""
    given = (cu_seqlens_q is not None, cu_seqlens_k is not None)
    if given[0] != given[1]:
        raise ValueError("give cu_seqlens_q and cu_seqlens_k together")
    if int(sms) != 132 and launch is None and not all(given):
        raise ValueError("sms sets the SM count of a launch's schedule: give launch= or "
                         "cu_seqlens_q/cu_seqlens_k")
    cu = [[], []]
    if all(given):
        for i, c in enumerate((cu_seqlens_q, cu_seqlens_k)):
            a = np.asarray(c)
            if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
                raise ValueError("cu_seqlens_q and cu_seqlens_k are 1-D integer arrays")
            cu[i] = [int(x) for x in a]
    return _attention(q, k, v, method, _causal(causal)[0], sm_scale, allow_nonfinite, counters,
                      launch, sms, cu[0], cu[1], window=window, softcap=softcap)


def _problem(window, softcap) -> dict:
    """window (an integer >= 0) and softcap (a finite number >= 0) of attention()/golden(), as
    _core.attention's keywords (none when both are 0)."""
    if isinstance(window, (bool, np.bool_)) or not isinstance(window, (int, np.integer)) or window < 0:
        raise ValueError(f"window must be an integer >= 0 (0: none), got {window!r}"[:200])
    number = isinstance(softcap, (int, float, np.integer, np.floating))
    if isinstance(softcap, (bool, np.bool_)) or not number or \
            not (math.isfinite(float(softcap)) and float(softcap) >= 0):
        raise ValueError(f"softcap must be a finite number >= 0 (0: none), got {softcap!r}"[:200])
    return dict(window=int(window), softcap=float(softcap)) if window or softcap else {}


def _attention(q, k, v, method, causal: bool, sm_scale, allow_nonfinite, counters, launch=None,
               sms=132, cu_q=(), cu_k=(), *, window=0, softcap=0.0):
    (qa, qt), (ka, kt), (va, vt) = _arg(q, "q"), _arg(k, "k"), _arg(v, "v")
    o, fmt, lse, canonical_method, cnt, mask = _core.attention(
        qa, ka, va, [qt, kt, vt], str(method), bool(causal), _scale(sm_scale),
        bool(allow_nonfinite), bool(counters), "" if launch is None else str(launch), int(sms),
        list(cu_q), list(cu_k), **_problem(window, softcap))
    if fmt in ("bf16", "fp16", "e4m3fn", "e5m2"):
        o = o.view(_FORMAT_DTYPE[fmt])
    return AttentionResult(o, lse, canonical_method, fmt, cnt, mask)


def verify(q, k, v, o, method=None, causal: bool = False, sm_scale=None, *, band: float = 2.0,
           counters: bool = False, allow_nonfinite: bool = False, progress=None) -> dict:
    """``attnsim verify`` on arrays: a real kernel's output ``o`` (float16, bfloat16 or float32,
    [batch, heads_q, len_q, head_dim_v]) judged against the simulator's bits for ``method`` (None:
    every registered candidate with o's format, ``identical_candidates`` says which match) and FP64
    golden. Returns a dict: ``verdict`` (0 bit-identical, 1 within the band, 3 outside it: the
    command's exit codes), ``first_diverging`` (batch, head, row, column) or None, ``worst_rows``,
    ``report`` (the text the command prints), ``counters`` with counters=True. Bad input raises
    the command's one-line error. progress: a callable (done, total, what) called before each
    candidate method runs (without ``method``, about 20 of them), or True for a bar/line."""
    try:
        band = float(band)
    except (TypeError, ValueError):
        raise ValueError(f"band must be a number >= 1, got {band!r}") from None
    if not (math.isfinite(band) and band >= 1):
        raise ValueError(f"band must be a number >= 1 (FlashAttention's rule: 2), got {band:g}")
    (qa, qt), (ka, kt), (va, vt), (oa, ot) = (_arg(q, "q"), _arg(k, "k"), _arg(v, "v"),
                                              _arg(o, "o"))
    report, close = _progress.reporter(progress, unit="run")
    try:
        return _core.verify(qa, ka, va, [qt, kt, vt], oa, ot, "" if method is None else str(method),
                            _causal(causal)[0], _scale(sm_scale), bool(allow_nonfinite),
                            float(band), bool(counters), report)
    finally:
        close()


def _heads(heads) -> tuple[int, int]:
    if isinstance(heads, str):
        parts = heads.split("/")
    elif isinstance(heads, (tuple, list)):
        parts = list(heads)
    else:
        parts = [heads]
    try:
        vals = [int(x) for x in parts]
    except (TypeError, ValueError):
        raise ValueError(f"heads must be HQ, (HQ, HKV) or 'HQ/HKV', got {heads!r}") from None
    if len(vals) == 1:
        vals = vals * 2
    if len(vals) != 2:
        raise ValueError(f"heads must be HQ, (HQ, HKV) or 'HQ/HKV', got {heads!r}")
    return vals[0], vals[1]


def schedule(method: str, situation: str, *, heads=None, head_dim: int | None = None,
             head_dim_v: int | None = None, causal: bool = False, sms: int = 132) -> dict:
    """``attnsim schedule``: the schedule ``method``'s kernel (sdpa, fa3, flex, vllm_triton, lean, splitkv) takes
    for a launch ``situation`` ("Q:K" sequences joined by '+', each optionally "xN", the target
    first: "1:4096x16", "1:500+1:300x3+9:9") of sequences with ``heads`` (HQ, (HQ, HKV) or
    "HQ/HKV") and ``head_dim``. Returns a dict: ``kernel``, ``items`` [(key, value, arithmetic,
    why)], ``arithmetic_key`` (equal keys, equal target bits), ``unverified``, ``text`` (what the
    command prints). Bad input raises the command's one-line error."""
    if heads is None or head_dim is None:
        raise ValueError("schedule needs heads= and head_dim=")
    hq, hkv = _heads(heads)
    return _core.schedule(str(method), str(situation), hq, hkv, int(head_dim),
                          int(head_dim_v or 0), bool(causal), int(sms))


def invariance(method: str, a: str, b: str, *, heads=None, head_dim: int | None = None,
               head_dim_v: int | None = None, causal: bool = False, sms: int = 132, n=None,
               ulp: bool = False, q=None, k=None, v=None, seed: int = 0,
               dist: str = "normal"):
    """``attnsim invariance``: whether a target sequence's rows keep their bits between launches
    ``a`` and ``b`` (situations as :func:`schedule` takes them). Without ``ulp`` the schedules
    alone answer (``predicted_identical``: the same arithmetic); with ``ulp=True`` (or the target's
    tokens ``q``, ``k``, ``v``: [1, heads, tokens, d], its queries the last tokens) both are
    computed: ``identical_rows``, ``max_ulp``, ``max_err_a``/``max_err_b`` against FP64 golden,
    ``first_diverging`` (head, position), ``per_row`` [(head, position, identical, ulp, err_a,
    err_b)]. ``n``: an iterable of integers substituted for "{n}" in a and b; then a dict with
    ``table`` (one dict per n), ``first_break`` (the first n whose rows differ, or None) and
    ``text``. The synthetic target (without q, k, v) is ``dist`` with ``seed``."""
    given = [x is not None for x in (q, k, v)]
    if any(given) and not all(given):
        raise ValueError("give q, k and v together (the target sequence's tokens)")
    if (int(seed) != 0 or dist != "normal") and (not ulp or all(given)):
        raise ValueError("seed and dist shape the synthetic target, which only ulp=True without "
                         "q, k, v computes")
    table = n is not None
    ns = [int(x) for x in n] if table else [0]
    if table and not ns:
        raise ValueError("n is empty")
    if not table and ("{n}" in a or "{n}" in b):
        raise ValueError('"{n}" in a situation needs n=')
    tags = []
    qa = ka = va = None
    if all(given):
        (qa, qt), (ka, kt), (va, vt) = _arg(q, "q"), _arg(k, "k"), _arg(v, "v")
        tags = [qt, kt, vt]
        hq = hkv = d = dv = 0
    else:
        if heads is None or head_dim is None:
            raise ValueError("invariance needs heads= and head_dim= (or q, k, v)")
        hq, hkv = _heads(heads)
        d, dv = int(head_dim), int(head_dim_v or head_dim)
    return _core.invariance(str(method), str(a), str(b), hq, hkv, d, dv if not all(given) else 0,
                            bool(causal), int(sms), ns, table, bool(ulp) or all(given), qa, ka,
                            va, tags, str(dist), int(seed))


def golden(q, k, v, causal=False, sm_scale=None, *, allow_nonfinite: bool = False,
           window: int = 0, softcap: float = 0.0) -> AttentionResult:
    """FP64 golden attention (sim/golden: the reference of every metric): ``o`` in float64 and
    ``lse``; the same as ``attention(q, k, v, "golden", ...)``. causal: False, True (the
    bottom-right aligned mask), "bottom_right" or "top_left" (key j > query i: the mask of SDPA's
    and SageAttention's kernels; ``golden:causal=top_left``). To measure a method, take the golden
    with the method's mask, ``r.causal_mask``: :func:`metrics` refuses a mismatch. window,
    softcap: a sliding window (each query sees its ``window`` latest keys; causal only) and the
    score softcap C·tanh(s/C), computed exactly (0: none), e.g. a Gemma 2 layer's problem."""
    c, align = _causal(causal, aligned=True)
    method = "golden:causal=top_left" if align == "top_left" else "golden"
    return _attention(q, k, v, method, c, sm_scale, allow_nonfinite, False, window=window,
                      softcap=softcap)


def _values(x, name):
    """(array for _core, tag, the ULP format of its values: an AttentionResult's output format,
    else its dtype's)."""
    fmt = None
    if isinstance(x, AttentionResult):
        fmt, x = x.format, x.o
    if isinstance(x, np.ndarray) and x.dtype in (_E4M3, _E5M2):
        return x.astype(np.float32), "", fmt or _DTYPE_FORMAT[x.dtype]  # exact
    a, tag = _arg(x, name)
    if fmt is None:
        dtype = _core.array_info(a)["dtype"]
        fmt = "bf16" if tag == "bfloat16" else {"float64": "fp64", "float16": "fp16",
                                                "bfloat16": "bf16"}.get(dtype, "fp32")
    return a, tag, fmt


def metrics(out, ref, *, format: str | None = None, per_head: bool = False):
    """The command line's metrics of ``out`` against ``ref`` (an AttentionResult or an array; ref
    normally :func:`golden`): cosine, rel_l1, rmse, rel_fro, max_abs, nonfinite, ulp_p50,
    ulp_p99, ulp_max, ulp_hist (counts per ULP_BUCKETS) and ulp_row_p50, ulp_row_p99, ulp_row_max
    (the error in units of the format's spacing at the row's magnitude, max |ref| over the last
    dimension: meaningful near zero, where ulp_* count sign flips), as a dict. ULP distances are counted in
    ``format`` (fp64 fp32 bf16 fp16 e4m3fn e5m2), by default out's: its method's output format or
    its dtype's. per_head: one row per (batch, head) of [batch, heads, tokens, dim] arrays, as a
    pandas DataFrame (the per-head table of a sweep)."""
    if isinstance(out, AttentionResult) and isinstance(ref, AttentionResult) and \
            out.causal_mask != ref.causal_mask:
        hint = (f"; take golden with the same mask: attnsim.golden(q, k, v, causal={out.causal_mask!r})"
                if out.causal_mask in ("top_left", "bottom_right") else "")
        raise ValueError(f"out was computed with causal mask {out.causal_mask!r} and ref with "
                         f"{ref.causal_mask!r}: the metrics would compare different attention"
                         f"{hint}")
    oa, ot, ofmt = _values(out, "out")
    ra, rt, _ = _values(ref, "ref")
    fmt = format or ofmt
    oshape, rshape = tuple(_core.array_info(oa)["shape"]), tuple(_core.array_info(ra)["shape"])
    if oshape != rshape:
        raise ValueError(f"out and ref differ in shape: {oshape} and {rshape}")
    if not per_head:
        m = _core.metrics(oa, ot, ra, rt, fmt, 1)[0]
        m["ulp_hist"] = np.asarray(m["ulp_hist"], dtype=np.int64)
        return m
    if len(oshape) != 4:
        raise ValueError(f"per_head takes [batch, heads, tokens, dim] arrays; got rank {len(oshape)}")
    import pandas as pd
    rows = _core.metrics(oa, ot, ra, rt, fmt, oshape[0] * oshape[1])
    df = pd.DataFrame(rows)
    df.insert(0, "head", [i % oshape[1] for i in range(len(rows))])
    df.insert(0, "batch_index", [i // oshape[1] for i in range(len(rows))])
    return df


_ATTRIBUTION_COLUMNS = [
    "input", "stage", "method", "exact", "differs", "rel_fro", "cosine", "max_abs",
    "exact_only_rel_fro", "exact_only_cosine", "exact_only_max_abs", "this_only_rel_fro",
    "this_only_cosine", "this_only_max_abs", "note"]


def attribute(q, k, v, method: str, causal: bool = False, sm_scale=None, *,
              allow_nonfinite: bool = False, input: str = "", progress=None):
    """Where a pipeline method's error against FP64 golden comes from, stage by stage (``attnsim
    attribute``): a pandas DataFrame with the command's columns, row "all" first, then one per
    stage: (a) the method, (b) ``exact_only_*`` the method with only that stage exact, (c)
    ``this_only_*`` everything exact but that stage. ``input`` names the input in the table.
    progress: a callable (done, total, what) called before each of the pipeline's runs (two per
    stage), or True for a bar/line."""
    import pandas as pd
    (qa, qt), (ka, kt), (va, vt) = _arg(q, "q"), _arg(k, "k"), _arg(v, "v")
    report, close = _progress.reporter(progress, unit="run")
    try:
        rows = _core.attribute(qa, ka, va, [qt, kt, vt], str(method), _causal(causal)[0],
                               _scale(sm_scale), bool(allow_nonfinite), str(input), report)
    finally:
        close()
    df = pd.DataFrame(rows, columns=_ATTRIBUTION_COLUMNS)
    df["differs"] = df["differs"].astype(bool)
    return df


def methods() -> list[dict]:
    """Every registered method: name, help, pipeline (whether :func:`attribute` and
    :func:`describe` see stages) and options (key, choices [empty: an integer >= min], default,
    help), in the registry's order (``attnsim methods``)."""
    return _core.methods()


def canonical(method: str) -> str:
    """The method string with every option spelled out, as results files name it."""
    return _core.canonical(str(method))


def describe(method: str, *, head_dim: int = 128, dtype: str = "float32") -> dict:
    """What a method computes (``attnsim methods --describe``): ``method`` (canonical), ``short``
    (options that differ from the defaults), ``pipeline`` (the method string of the pipeline it
    runs, every stage key spelled out: passed back as a method it gives bit-identical output; None
    for a method that is not a pipeline, golden), ``stages`` (stage -> the method's choice),
    ``differences`` ("key=value (flash: value)" per stage key that differs from FlashAttention-2's)
    and ``outside`` (the technique's steps outside its pipeline). Presets choose tiles and formats
    from the input, here a head_dim and a dtype (float32 float16 bfloat16 float64)."""
    return _core.describe(str(method), int(head_dim), str(dtype))


class SyntheticInput(NamedTuple):
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    causal: bool


def synthetic(spec: str) -> SyntheticInput:
    """The seeded synthetic input ``--synthetic SPEC`` makes (bit-identical on any machine):
    DIST[:key=value,...], DIST normal uniform kbias outlier peaked (experiments/README.md)."""
    return SyntheticInput(*_core.synthetic(str(spec)))


# --- numerics ---------------------------------------------------------------------------------

_ML_DTYPES = {"e4m3fn": _E4M3, "e5m2": _E5M2, "bf16": _BF16, "fp16": np.dtype(np.float16),
              "int8": np.dtype(np.int8), "int4": np.dtype(ml_dtypes.int4)}
if hasattr(ml_dtypes, "int2"):
    _ML_DTYPES["int2"] = np.dtype(ml_dtypes.int2)
# The command line's flags in its messages, spelled as this module's arguments.
_FLAG = [(r"--to (\w+)", r"to='\1'"), (r"--scale", "scale="), (r"--packed", "packed=True"),
         (r"--overflow (saturate-finite|saturate|nan|inf)\b", r"overflow='\1'"),
         (r"--overflow", "overflow="), (r"--count", "count=")]


def _python_spelling(e: ValueError) -> ValueError:
    msg = str(e)
    for pat, rep in _FLAG:
        msg = re.sub(pat, rep, msg)
    return ValueError(msg)


def convert(x, to: str, *, round: str = "rne", overflow: str | None = None, nan: str = "cuda",
            scale: float | None = None, packed: bool = False, decode: bool = False,
            output: str = "bits", count: int | None = None):
    """``attnsim convert`` on arrays. Encoding (the default): float32/float64 values (float16 and
    bfloat16 exactly) into ``to`` (e4m3fn e5m2 bf16 fp16 int8 int4 int2) with ``round`` (rne rna
    rz ru rd), ``overflow`` (saturate saturate-finite nan inf; required, as on the command line)
    and ``nan`` (cuda ml_dtypes ieee); integers round x / scale exactly once (scale required),
    int4/int2 optionally packed (2 or 4 per byte, element 0 in the low bits). ``output``: "bits"
    (uint8 / uint16 encodings, the command's file), "values" (the encodings decoded to float32:
    q * scale for integers) or "ml_dtypes" (the bits viewed as ml_dtypes.float8_e4m3fn,
    float8_e5m2, bfloat16, numpy float16, int8, ml_dtypes.int4/int2; not packed).
    decode=True: x holds encodings (uint8/int8, uint16, or an ml_dtypes array of the format) and
    the result is their float32 values (count: elements of packed input, default all)."""
    to = str(to)
    try:
        if decode:
            if isinstance(x, np.ndarray) and x.dtype == _ML_DTYPES.get(to):
                # The format's bits; ml_dtypes' int4/int2 keep a bare nibble: their values as int8.
                xa = x.astype(np.int8) if to.startswith("int") else x.view(f"u{x.dtype.itemsize}")
            else:
                xa, _ = _arg(x, "x")  # (a bfloat16 array arrives as its uint16 bits)
            return _core.convert_decode(xa, to, 0.0 if scale is None else float(scale),
                                        bool(packed), 0 if count is None else int(count))
        if output not in ("bits", "values", "ml_dtypes"):
            raise ValueError(f"unknown output '{output}' (expected bits, values or ml_dtypes)")
        if count is not None:
            raise ValueError("count= applies to decode=True with packed input only")
        xa, tag = _arg(x, "x")
        bits = _core.convert_encode(xa, tag, to, str(round), "" if overflow is None else str(overflow),
                                    str(nan), 0.0 if scale is None else float(scale), bool(packed))
        if output == "bits":
            return bits
        if output == "values":
            n = int(np.prod(_core.array_info(xa)["shape"], dtype=np.int64)) if packed else 0
            vals = _core.convert_decode(bits, to, 0.0 if scale is None else float(scale), bool(packed), n)
            return vals
        if packed:
            raise ValueError("output='ml_dtypes' has no packed layout: use output='bits'")
        if to not in _ML_DTYPES:
            raise ValueError(f"ml_dtypes has no {to} type: use output='bits' or 'values'")
        return bits.view(_ML_DTYPES[to])
    except ValueError as e:
        raise _python_spelling(e) from None


class QuantizeResult(NamedTuple):
    """One quantizer on x [..., tokens, channels] (leading dimensions: heads, quantized one by one
    as ``attnsim quantize`` does): ``codes`` (int8 for the integer quantizers, ml_dtypes float8 for
    e4m3fn/e5m2; None for turbo_bpq4/2), ``scales`` [..., groups] (float32; None likewise),
    ``group`` each element's group, ``dequantized`` x̂ (float64, the smoothing mean added back),
    ``mean`` [..., channels] (zeros without smoothing), ``error`` (the command's rel_fro, rel_l1,
    max_abs, cosine, sqnr_db and groups: numbers for a 2-D x, arrays over the leading dimensions
    otherwise), ``granularity`` as the group map describes itself."""
    codes: np.ndarray | None
    scales: np.ndarray | None
    group: np.ndarray
    dequantized: np.ndarray
    mean: np.ndarray
    error: dict
    granularity: str


def quantize(x, quantizer: str = "sage_cuda_int8", granularity: str = "per_channel", *,
             smooth: bool = False) -> QuantizeResult:
    """A quantizer of ``attnsim quantize`` (symmetric_int8/4, sage_cuda_int8, sage_triton_int8/4,
    sage_triton_per_block_int8, turbo_int8_*, e4m3fn, e5m2, turbo_bpq4/2) at a granularity
    (per_tensor per_token per_channel per_block:N per_warp:N sage_sm89/sm90_q/k_per_thread
    sage_triton_q/k_per_block) on x [..., tokens, channels], with smoothing (subtract the
    per-channel mean over tokens first, SageAttention's smooth-K) if asked."""
    xa, tag = _arg(x, "x")
    info = _core.array_info(xa)
    shape = tuple(info["shape"])
    if len(shape) < 2:
        raise ValueError(f"x must have rank 2 [tokens, channels] (or more, leading dimensions being "
                         f"heads); got rank {len(shape)}")
    lead = shape[:-2]
    if 0 in shape:
        raise ValueError(f"x is empty (shape {shape})")
    if not lead:
        parts = [_core.quantize(xa, tag, str(quantizer), str(granularity), bool(smooth))]
    else:
        arr = xa if isinstance(xa, np.ndarray) else np.from_dlpack(xa)
        flat = arr.reshape((-1,) + shape[-2:])
        parts = [_core.quantize(flat[i], tag, str(quantizer), str(granularity), bool(smooth))
                 for i in range(flat.shape[0])]

    def stack(key, fix=None):
        if parts[0][key] is None:
            return None
        a = np.stack([p[key] for p in parts]) if lead else parts[0][key]
        a = fix(a) if fix else a
        return a.reshape(lead + a.shape[1:]) if lead else a

    fmt = parts[0]["code_format"]
    if fmt in ("e4m3fn", "e5m2"):
        codes = stack("codes", lambda a: a.astype(np.uint8).view(_ML_DTYPES[fmt]))
    else:
        codes = stack("codes", lambda a: a.astype(np.int8))
    error = {k: (np.array([p["error"][k] for p in parts]).reshape(lead) if lead else parts[0]["error"][k])
             for k in parts[0]["error"]}
    return QuantizeResult(codes, stack("scales"), stack("group"), stack("dequantized"),
                          stack("mean"), error, parts[0]["granularity_map"])


def mma_instructions() -> list[dict]:
    """The tensor-core instruction models (``attnsim mma --list``): name, m n k, the element formats
    of A and B, bits per element, accumulator (fp32 fp16 s32), model, evidence, unverified."""
    return _core.mma_instructions()


_MMA_BITS = {"fp16": (np.uint16, (np.dtype(np.float16),)), "bf16": (np.uint16, (_BF16,)),
             "e4m3fn": (np.uint8, (_E4M3,)), "e5m2": (np.uint8, (_E5M2,)),
             "s8": (np.uint8, (np.dtype(np.int8),)), "u8": (np.uint8, ()),
             "s4": (np.uint8, (np.dtype(np.int8), np.dtype(ml_dtypes.int4)))}


def _matrix(x, name: str) -> np.ndarray:
    if isinstance(x, np.ndarray) and x.dtype in (_E4M3, _E5M2, _ML_DTYPES["int4"]):
        if x.ndim != 2:
            raise ValueError(f"{name} must have rank 2; got rank {x.ndim}")
        return x
    a, tag = _arg(x, name)
    a = a if isinstance(a, np.ndarray) else np.from_dlpack(a)
    if tag == "bfloat16":
        a = a.view(_BF16)
    if a.ndim != 2:
        raise ValueError(f"{name} must have rank 2; got rank {a.ndim}")
    return a


def _mma_bytes(a: np.ndarray, fmt: str, name: str) -> np.ndarray:
    """Rows of encodings as `attnsim mma` reads them: u16 per 16-bit element, u8 per 8-bit one,
    int4 packed two per byte (element 0 in the low nibble)."""
    storage, typed = _MMA_BITS[fmt]
    if not (a.dtype in typed or (a.dtype == np.dtype(storage) and fmt != "s4")):
        want = " or ".join([str(t) for t in typed] + ([np.dtype(storage).name] if fmt != "s4" else []))
        raise TypeError(f"{name} has dtype {a.dtype}; this instruction takes {fmt} encodings ({want}; "
                        f"attnsim.convert(x, '{fmt}', overflow=..., output='ml_dtypes') makes them)")
    if fmt == "s4":
        v = a.astype(np.int8)
        if v.size and (v.min() < -8 or v.max() > 7):
            raise ValueError(f"{name} holds values outside int4's [-8, 7]")
        u = v.astype(np.uint8) & 0x0F
        return np.ascontiguousarray(u[:, 0::2] | (u[:, 1::2] << 4)).reshape(-1)
    return np.ascontiguousarray(a).view(storage).view(np.uint8).reshape(-1)


def mma(instr: str, a, b, c=None, *, promote: int = 0):
    """D = A·B + C through a bit-exact tensor-core instruction model (``attnsim mma``; list:
    :func:`mma_instructions`), instructions chained along k in natural order. a [M, K] and
    b [K, N] hold the instruction's encodings (numpy float16, ml_dtypes bfloat16/float8, int8 for
    s8 and s4 values in [-8, 7], uint8 for u8; or their raw uint8/uint16 bits); c [M, N] float32
    (float16 for fp16 accumulation, int32 for integer instructions; None: zeros). promote=N: the
    two-level accumulation (chains of N elements added to FP32 registers; c and D float32).
    Returns D in the accumulator's dtype."""
    info = next((i for i in _core.mma_instructions() if i["name"] == instr), None)
    if info is None:  # the command's message, listing the instructions
        _core.mma(str(instr), np.zeros(0, np.uint8), np.zeros(0, np.uint8),
                  np.zeros(0, np.uint32), 1, 1, 1, 0)
    A, B = _matrix(a, "a"), _matrix(b, "b")
    (M, K), N = A.shape, B.shape[1]
    if B.shape[0] != K:
        raise ValueError(f"a is [M, K] = {list(A.shape)} and b [K, N] = {list(B.shape)}: K differs")
    acc = "fp32" if promote else info["acc"]
    cdt = np.dtype({"fp32": np.float32, "fp16": np.float16, "s32": np.int32}[acc])
    C = np.zeros((M, N), cdt) if c is None else _matrix(c, "c")
    if C.dtype != cdt:
        raise TypeError(f"c has dtype {C.dtype}; {instr}{' with promote' if promote else ''} "
                        f"accumulates in {cdt.name}")
    if C.shape != (M, N):
        raise ValueError(f"c must be [M, N] = [{M}, {N}]; got {list(C.shape)}")
    if K % info["k"] or (promote and (promote % info["k"] or K % promote)) or promote < 0:
        A_bytes = Bt_bytes = np.zeros(0, np.uint8)  # the command's message on k / promote
    else:
        A_bytes, Bt_bytes = _mma_bytes(A, info["a"], "a"), _mma_bytes(B.T, info["b"], "b")
    words = np.ascontiguousarray(C).view(np.uint16 if acc == "fp16" else np.uint32).astype(np.uint32)
    D = _core.mma(str(instr), A_bytes, Bt_bytes, words.reshape(-1), int(M), int(N), int(K),
                  int(promote))
    if acc == "fp16":
        return D.astype(np.uint16).view(np.float16)
    return D.view(cdt)


def special(fn: str, x, *, ftz: bool = True):
    """The H100's approximate special functions bit for bit (``attnsim special``): fn ex2
    (ex2.approx.ftz.f32), rcp or lg2 on float32 x; ftz=False: the variants without .ftz."""
    xa, _ = _arg(x, "x")
    return _core.special(str(fn), xa, bool(ftz))


def set_num_threads(n: int) -> None:
    """The OpenMP threads attnsim's calls from this thread use (default: OMP_NUM_THREADS, else
    every core, as the command line). Results do not depend on it."""
    _core.set_num_threads(int(n))


def get_num_threads() -> int:
    return _core.get_num_threads()


def set_memory_limit(limit) -> None:
    """The memory a call may need by its estimate before it is refused (ValueError) instead of
    started, as the command line's --max-memory: bytes, or a size such as "8G", "512M", "1.5GiB";
    None for the default, this machine's memory (or its cgroup's). The environment variable
    ATTNSIM_MAX_MEMORY sets it when the package is imported."""
    _core.set_memory_limit("" if limit is None else str(limit))


def memory_limit() -> int:
    """The limit set_memory_limit set, in bytes, else this machine's memory."""
    return _core.memory_limit()


if os.environ.get("ATTNSIM_MAX_MEMORY"):
    set_memory_limit(os.environ["ATTNSIM_MAX_MEMORY"])


def __dir__():
    """The public API (and its submodules), not the module's own imports (np, os, re, ...)."""
    return sorted(set(__all__) | {"__version__", "e2e", "modelmath", "results"})


# Every public function relays the warnings and notes its call produced.
for _name in ("attention", "golden", "verify", "attribute", "metrics", "convert", "quantize", "mma",
              "special", "synthetic", "schedule", "invariance"):
    globals()[_name] = _relaying(globals()[_name])
del _name
