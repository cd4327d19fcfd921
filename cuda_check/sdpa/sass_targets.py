#!/usr/bin/env python3
"""Launches each SDPA backend once per configuration below, so that a profiler run (ncu) on the
GPU machine can capture the SASS of kernels that exist only at run time: cuDNN compiles its SDPA
kernels with NVRTC when a graph is built, so its library holds no SASS to disassemble
(sim/sdpa/README.md). Usage: ncu ... python3 cuda_check/sdpa/sass_targets.py [--decode] [BACKEND ...]
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
# (dtype, head dim, causal, Lq, Lk): prefill fp16 d128 with and without the mask, bf16 d128,
# fp16 d64; decode (Lq = 1: cuDNN's sm80 wmma kernel, with its lean_reduction_kernel split-KV
# merge for long KV) fp16 d128 and d64, bf16 d128.
# (dtype, head dim, causal, batch, query heads, KV heads, Lq, Lk)
CONFIGS = [(torch.float16, 128, False, 1, 2, 2, 200, 200), (torch.float16, 128, True, 1, 2, 2, 200, 200),
           (torch.bfloat16, 128, False, 1, 2, 2, 200, 200), (torch.float16, 64, False, 1, 2, 2, 200, 200)]
# the decode shapes of record_sdpa.py's dec500_gqa_d128, dec4097_d128, dec4097_gqa_d64 (fp16), and
# dec4097_d128 in bf16
DECODE = [(torch.float16, 128, False, 1, 8, 2, 1, 500), (torch.float16, 128, False, 2, 4, 4, 1, 4097),
          (torch.float16, 64, False, 1, 16, 2, 1, 4097), (torch.bfloat16, 128, False, 2, 4, 4, 1, 4097)]


def main():
    names = [a for a in sys.argv[1:] if a != "--decode"] or ["cudnn"]
    configs = DECODE if "--decode" in sys.argv else CONFIGS
    g = torch.Generator(device="cuda").manual_seed(0)
    for dtype, d, causal, b, hq, hkv, lq, lk in configs:
        q = torch.randn(b, hq, lq, d, device="cuda", dtype=dtype, generator=g)
        k, v = (torch.randn(b, hkv, lk, d, device="cuda", dtype=dtype, generator=g) for _ in range(2))
        for name in names:
            with sdpa_kernel(BACKENDS[name]):
                F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=hq != hkv)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
