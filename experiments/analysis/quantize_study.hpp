// Quantization error of real tensors by quantizer and granularity (`attnsim quantize`): the
// numbers behind the distribution and granularity plots of SageAttention2 Fig. 2/4 and
// TurboAttention Fig. 4/20, computed with numerics/quantize and formats/.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "numerics/groups.hpp"

namespace attnsim {

// A quantizer by name: the SymmetricQuantizer configurations of numerics/quantize.hpp
// (symmetric_int8, symmetric_int4, sage_cuda_int8, sage_triton_int8, sage_triton_int4,
// sage_triton_per_block_int8, turbo_int8_119, turbo_int8_126, turbo_int8_119_ceil), FP8 with a
// scale per group (e4m3fn, e5m2: scale = amax / max finite in FP32, x / scale converted with
// cvt.rn.satfinite, x̂ = decode · scale; SageAttention2's FP8 V path), and TurboAttention's
// progressive quantization (turbo_bpq4, turbo_bpq2: turbo_int8_119 on the given granularity, then
// unsigned 4/2 bits per (64-token block, channel) with numerics' kBpqOffset reading).
std::vector<std::string> quantizer_names();
// A granularity by name: per_tensor, per_token, per_channel, per_block:N, per_warp:N,
// sage_sm89_q_per_thread, sage_sm89_k_per_thread, sage_sm90_q_per_thread,
// sage_sm90_k_per_thread, sage_triton_q_per_block, sage_triton_k_per_block. Throws UsageError.
GroupMap parse_granularity(const std::string& name);
std::vector<std::string> granularity_names();

struct QuantError {
  double rel_fro = 0, rel_l1 = 0, max_abs = 0, cosine = 0, sqnr_db = 0;
  long long groups = 0;
};

// What quantize_tensor made of one head: the codes (integers, or the FP8 encodings 0..255; empty
// for the progressive quantizers turbo_bpq4/2, whose two stages have their own), one scale per
// group (empty likewise), each element's group, x̂ with the smoothing mean added back (FP64), the
// mean per channel (zeros without smoothing) and the error quantization_error reports.
struct QuantizeResult {
  std::string code_format;          // int8 int4 int2 e4m3fn e5m2, or "" (progressive)
  std::vector<std::int32_t> codes;  // [tokens, channels]
  std::vector<float> scales;        // [groups]
  std::vector<std::int32_t> group;  // [tokens, channels]
  std::vector<double> dequantized;  // [tokens, channels]
  std::vector<double> mean;         // [channels]
  QuantError error;
};

QuantizeResult quantize_tensor(const float* x, int tokens, int channels,
                               const std::string& quantizer, const GroupMap& map, bool smooth);

// Quantizes one head's [tokens, channels] tensor x (after subtracting the per-channel mean over
// tokens when `smooth`, SageAttention's smooth-K, whose mean is added back exactly in FP64 before
// the error is measured: attention is invariant to it for K) and measures x̂ against x in FP64.
QuantError quantization_error(const float* x, int tokens, int channels,
                              const std::string& quantizer, const GroupMap& map, bool smooth);

}  // namespace attnsim
