// TurboAttention's compressed KV cache and its buffer (§3.1 Eq. 10, Alg. 1 lines 13-14, Alg. 2
// line 6, §3.3): INT8 blocks compressed per channel to 4 or 2 bits in integer arithmetic, new
// tokens kept in INT8 with one universal scale until n_b of them are compressed together.
#include <cmath>
#include <stdexcept>

#include "numerics/quantize.hpp"
#include "sim/turbo/turbo.hpp"

namespace attnsim {

std::vector<std::int32_t> TurboKvCache::block_int8(bool value, int b) const {
  const int d = value ? dim_v : dim_k;
  const int t0 = block_begin[std::size_t(b)], len = block_begin[std::size_t(b) + 1] - t0;
  const std::vector<std::uint8_t>& code = value ? v_code : k_code;
  const std::vector<std::int8_t>& s = value ? v_s : k_s;
  const std::vector<std::int8_t>& z = value ? v_z : k_z;
  const int bits = value ? bits_v : bits_k;
  // Alg. 2: K^q1 = K^q2 · s^int + z (Eq. 7); Alg. 1's scaled zero point reconstructs (q + z)·s.
  const bool scaled = bits != 8 && bpq.zero == ZeroPointForm::kScaled;
  std::vector<std::int32_t> r(std::size_t(len) * d);
  for (int t = 0; t < len; ++t)
    for (int c = 0; c < d; ++c) {
      const std::int32_t q = code[std::size_t(t0 + t) * d + c];
      const std::int32_t si = s[std::size_t(b) * d + c], zi = z[std::size_t(b) * d + c];
      r[std::size_t(t) * d + c] = scaled ? (q + zi) * si : q * si + zi;
    }
  return r;
}

void TurboKvCache::append_block(bool value, const std::int8_t* x, int len, float scale1) {
  const int d = value ? dim_v : dim_k;
  const int bits = value ? bits_v : bits_k;
  std::vector<std::uint8_t>& code = value ? v_code : k_code;
  std::vector<std::int8_t>& s = value ? v_s : k_s;
  std::vector<std::int8_t>& z = value ? v_z : k_z;
  if (bits == 8) {
    // Uncompressed (compress=off): the INT8 values themselves, in the offset form.
    for (int i = 0; i < len * d; ++i) code.push_back(std::uint8_t(int(x[i]) + 128));
    s.insert(s.end(), std::size_t(d), std::int8_t(1));
    z.insert(z.end(), std::size_t(d), std::int8_t(-128));
  } else {
    // BPQ stage 2 on this block: one group per channel over its `len` tokens (the whole block is
    // one kPerBlockChannel block), integer scale and zero point (numerics/quantize.hpp).
    QuantizedTensor q1;
    q1.tokens = len;
    q1.channels = d;
    q1.bits = 8;
    q1.q.assign(x, x + std::size_t(len) * d);
    q1.scale = {scale1};
    const ProgressiveTensor pt =
        quantize_progressive(q1, GroupMap{Granularity::kPerBlockChannel, len}, bits, bpq);
    // Groups of range 0 (the counters' bpq_zero_range): every token of the channel equal.
    const long long t0 = compressed_tokens();
    for (int c = 0; c < d; ++c) {
      bool flat = true;
      for (int t = 1; t < len && flat; ++t) flat = x[std::size_t(t) * d + c] == x[c];
      if (!flat) continue;
      ++(value ? zero_range_v : zero_range_k);
      if (first_zero_range_token < 0) {
        first_zero_range_token = t0;
        first_zero_range_col = (value ? dim_k : 0) + c;
      }
    }
    for (std::int32_t v : pt.q) code.push_back(std::uint8_t(v));
    for (int c = 0; c < d; ++c) {
      s.push_back(std::int8_t(pt.s_int[std::size_t(c)]));
      z.push_back(std::int8_t(pt.z_int[std::size_t(c)]));
    }
  }
  (value ? v_scale : k_scale).push_back(scale1);
}

void TurboKvCache::buffer_push(const float* k, const float* v, int clamp) {
  // §3.3 (M:211): "we employ a universal scale for 8-bit quantization and clamp outliers that
  // exceed this range": q = clamp(R(x / s_u), −clamp, clamp), R nearest even, x the FP16 value.
  const long long token = tokens();
  auto push = [&](const float* x, int d, float su, std::vector<std::int8_t>& buf, long long& n,
                  int col0) {
    for (int c = 0; c < d; ++c) {
      const float r = su != 0.0f ? std::nearbyint(x[c] / su) : 0.0f;  // 0/0: q = 0
      float q = r != r ? 0.0f : r;
      if (q > float(clamp) || q < -float(clamp)) {
        ++n;
        if (first_clamp_token < 0) {
          first_clamp_token = token;
          first_clamp_col = col0 + c;
        }
        q = q > 0 ? float(clamp) : -float(clamp);
      }
      buf.push_back(std::int8_t(q));
    }
  };
  push(k, dim_k, su_k, buf_k, clamped_k, 0);
  push(v, dim_v, su_v, buf_v, clamped_v, dim_k);
  ++buf_tokens;
}

void TurboKvCache::flush(float scale1_k, float scale1_v) {
  if (buf_tokens == 0) return;
  if (block_begin.empty()) block_begin.push_back(0);
  append_block(false, buf_k.data(), buf_tokens, scale1_k);
  append_block(true, buf_v.data(), buf_tokens, scale1_v);
  block_begin.push_back(block_begin.back() + buf_tokens);
  buf_k.clear();
  buf_v.clear();
  buf_tokens = 0;
  ++flushes;
}

}  // namespace attnsim
