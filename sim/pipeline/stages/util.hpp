// Small arithmetic helpers the stage functions share (sim/pipeline/stages/).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "formats/encoding.hpp"
#include "numerics/fp32_bits.hpp"
#include "numerics/special.hpp"
#include "sim/pipeline/pipeline.hpp"
#include "sim/pipeline/stages/stages.hpp"

namespace attnsim::stage_util {

// int32 -> FP32 under a rounding mode (cvt.rn.f32.s32 / __int2float_rz): exact below 2^24.
inline float int_to_f32(std::int32_t v, Round r) {
  if (v > -(1 << 24) && v < (1 << 24)) return float(v);
  return f32_from_bits(encode_float_bits(Encoding::kFp32, double(v), Policy{r, Overflow::kInf,
                                                                            NanEncoding::kCuda}));
}

// The max snapped to an integer in the exponent's units (ceil, or ties away: AMLA CAST_ROUND).
template <class T>
T snap(T x, MaxRound r) {
  if (r == MaxRound::kCeil) return std::ceil(x);
  if (r == MaxRound::kNearest) return std::round(x);
  return x;
}

// O·2^n by an integer addition on the bits (AMLA Eq. 3; FP64: the same trick with 2^52).
inline float int_add_pow2(float o, std::int32_t n) { return mul_pow2_by_int_add(o, n); }
inline double int_add_pow2(double o, std::int32_t n) {
  return f64_from_bits(f64_bits(o) + (std::uint64_t(std::int64_t(n)) << 52));
}

inline int round_up(int n, int k) { return (n + k - 1) / k * k; }

// MmaTile::b_key for one operand's packing of the KV block named by kv_key (TileBuffers): 0 (no
// reuse) without a key; `tag` (1-4) tells K from V and encodings from values apart.
inline std::uint64_t block_key(std::uint64_t kv_key, int tag) {
  return kv_key == 0 ? 0 : (kv_key << 3) | std::uint64_t(tag);
}

// The state's arithmetic, .ftz or not (SoftmaxStage::ftz: an FP32 state's only; an FP64 state
// always takes the IEEE form).
template <class T>
T state_mul(T a, T b, bool ftz) {
  if constexpr (std::is_same_v<T, float>) {
    if (ftz) return fmul_ftz(a, b);
  }
  return a * b;
}
template <class T>
T state_add(T a, T b, bool ftz) {
  if constexpr (std::is_same_v<T, float>) {
    if (ftz) return fadd_ftz(a, b);
  }
  return a + b;
}
template <class T>
T state_fma(T a, T b, T c, bool ftz) {
  if constexpr (std::is_same_v<T, float>) {
    if (ftz) return fma_f32(a, b, c, Round::kNearestEven, true);
  }
  return std::fma(a, b, c);
}

// The encoding bits of a value exactly representable in `e` (a float or integer encoding).
inline std::uint32_t encoding_of(Encoding e, float v) {
  return is_float_encoding(e) ? encode_float_bits(e, v, kCudaRn)
                              : int_to_encoding(e, std::int32_t(v));
}

// PyTorch's softmax_warp_forward sum of a row's n values (cuda/PersistentSoftmax.cuh): W =
// min(next_pow2(n), 32) lanes, element j on lane j % W in iteration order, each lane's sum from 0,
// then the butterfly xor W/2 ... 1 (warp_reduce with SumOp; every lane ends with lane 0's value).
template <class T>
T warp_sum(const T* p, int n) {
  int w = 1;
  while (w < n && w < 32) w *= 2;
  T lane[32] = {};
  for (int j = 0; j < n; ++j) lane[j % w] = lane[j % w] + p[j];
  for (int off = w / 2; off >= 1; off /= 2) {
    T next[32];
    for (int t = 0; t < w; ++t) next[t] = lane[t] + lane[t ^ off];
    for (int t = 0; t < w; ++t) lane[t] = next[t];
  }
  return lane[0];
}

// FA3 FP8's exponent coefficient of a row (Dequant::kDescale): fl(c · fl(q_descale · k_descale)),
// the per-tensor scales of the row's Q and K slices (1 when unscaled).
inline float descale_coefficient(float c, const PreparedInput& in, const TileIndex& ti, int qt,
                                 bool ftz) {
  const float sq = in.q.scaled() ? in.q.scale(ti.sq, qt, 0) : 1.0f;
  const float sk = in.k.scaled() ? in.k.scale(ti.skv, 0, 0) : 1.0f;
  return state_mul(c, state_mul(sq, sk, ftz), ftz);
}

// A FA3 FP8 score row for the score kernels (scores_ref's descale branch without a window): S the raw
// accumulator for the n visible keys and the mask value for keys [n, cols), the row's descaled
// coefficient in every column.
inline void descale_row(const float* acc, int n, int cols, float mask, float c_row, float* s,
                        float* cf) {
  for (int j = 0; j < cols; ++j) {
    s[j] = j < n ? acc[j] : mask;
    cf[j] = c_row;
  }
}

}  // namespace attnsim::stage_util
