// Summation orders of public kernels' reductions, written out so that an FP32 sum has the bits the
// kernel's has (each is a plain loop over the kernel's threads and shuffles).
#pragma once

#include <cstddef>

namespace attnsim {

// SageAttention's per-channel sum of V for smooth V (csrc/fused/fused.cu MeanScaleKernel<64,
// sub_mean = true>, 256 threads per channel; reduction_utils.cuh blockReduceSum): thread t adds, in
// FP32 and in order, the stored tokens i·2048 + 8t + j (i outer, j = 0..7 inner, while below n);
// each warp of 32 threads then reduces by xor-shuffles 16, 8, 4, 2, 1 (v += shfl_xor(v, m)); the
// 8 warp sums (lane 0's) are reduced by the same butterfly over lanes 0..7 of one warp (the other
// lanes hold 0), and lane 0's value is the sum. `stored` holds the n values in the kernel's
// stored order (TransposePadPermute: token (p & ~15) + [0,1,8,9,2,3,10,11,4,5,12,13,6,7,14,15][p &
// 15] at position p, zero past the sequence); n is a multiple of 8. The kernel's FADD.FTZ flushes
// subnormal sums: not modelled (sums of 16-bit inputs do not reach them in practice).
float sage_mean_scale_sum(const float* stored, int n);

// The same order written the other way round (the butterfly as an explicit pairwise tree over
// lanes): a second formulation to test the first against.
float sage_mean_scale_sum_ref(const float* stored, int n);

}  // namespace attnsim
