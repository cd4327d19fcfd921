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
