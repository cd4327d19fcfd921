"""The arithmetic the real models' forwards run on: attnsim.modelmath (numerics/model_math.hpp),
every projection, norm, activation and RoPE table one FP64 computation in a fixed order rounded
once to float32, so that a forward gives the same bits on every CPU, instruction set and thread
count (numpy's BLAS does not: its bits change with the BLAS build, the CPU and the row count).
Element-wise float32 additions and products (residuals, RoPE's rotation) stay numpy's: IEEE
basic operations round the same everywhere."""
from __future__ import annotations

from .sources import SourceError

try:
    from attnsim import modelmath as mm  # noqa: F401 - re-exported for smollm2 and minilm
except ImportError as e:  # the source tree's attnsim without its compiled core, or none
    raise SourceError("the real models run on attnsim's compiled kernels (attnsim.modelmath): "
                      "build or install attnsim first (bash .ci/setup.sh; or PYTHONPATH=build/python) "
                      f"[{e}]") from None


def capture_and_cache(q, k, v, qr, kr, capture, cache, pre_rope):
    """A decoder layer's bookkeeping between RoPE and attention (smollm2, hf): capture (a dict or
    None) gets q, k, v after RoPE (and q_pre, k_pre before it with pre_rope); cache (a dict or
    None: a layer's K/V of earlier positions, empty for none) is extended in place with these
    rows'. Returns (k, v) for the attention: the cached keys and values first."""
    import numpy as np
    if capture is not None:
        capture.update(q=np.ascontiguousarray(qr), k=np.ascontiguousarray(kr),
                       v=np.ascontiguousarray(v))
        if pre_rope:
            capture.update(q_pre=np.ascontiguousarray(q), k_pre=np.ascontiguousarray(k))
    if cache is not None:
        if cache:
            kr = np.concatenate([cache["k"], kr], axis=1)
            v = np.concatenate([cache["v"], v], axis=1)
        cache["k"], cache["v"] = np.ascontiguousarray(kr), np.ascontiguousarray(v)
    return kr, v
