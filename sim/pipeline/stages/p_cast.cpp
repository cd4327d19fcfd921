// The P cast of one tile and KV block: P to the P encoding (FA2 convert_type<Element>;
// SageAttention2 cvt.rn.satfinite e4m3 after ×448; an integer P by cvt.rni.sat), or quantized
// with one scale per row or per tile (TurboAttention Alg. 1: s_P̃ = max|P̃| / 119). The row sum
// keeps the unrounded p.
#include <algorithm>
#include <cstdint>
#include <vector>
#include <cmath>
#include <type_traits>

#include "formats/intn.hpp"
#include "numerics/convert_array.hpp"
#include "numerics/isa.hpp"
#include "sim/pipeline/stages/kernels.hpp"
#include "sim/pipeline/stages/stages.hpp"
#include "sim/pipeline/stages/util.hpp"

namespace attnsim {

namespace {

// A value of the state rounded to the P encoding (non-integer-scaled P).
template <class T>
double cast_p(T x, const PStage& st) {
  if (st.enc == Encoding::kFp64) return double(x);
  const float f = float(x);
  if (st.enc == Encoding::kFp32) return f;
  // An integer P with a static scale (the SageAttention2 Table 7 INT8 row read as §3.3's δ_P with
  // 127 for 448): cvt.rni.sat, as SageAttention's float_to_int8_rn (csrc/fused/fused.cu).
  if (st.enc == Encoding::kS8) return round_to_int<s8>(f, Round::kNearestEven, IntOverflow::kSaturate);
  if (st.enc == Encoding::kS4) return round_to_int<s4>(f, Round::kNearestEven, IntOverflow::kSaturate);
  if (st.enc == Encoding::kS2) return round_to_int<s2>(f, Round::kNearestEven, IntOverflow::kSaturate);
  return decode_float_bits(st.enc, encode_float_bits(st.enc, f, st.cast));
}

}  // namespace

// P quantized with one scale per row or per tile (TurboAttention Alg. 1); quantize(x, n, scale,
// inv, qz, q) quantizes one row's run of P (quantize_values or its reference).
template <class T, class Quantize>
void cast_p_scaled(const PStage& st, const BlockView& b, TileBuffers<T>& buf, Quantize quantize) {
  const SymmetricQuantizer& qz = st.quantizer;
  const int groups = st.scale == PScale::kRow ? b.rows : 1;
  thread_local std::vector<float> row;
  thread_local std::vector<std::int32_t> q;
  row.resize(std::size_t(b.cols));
  q.resize(std::size_t(b.cols));
  for (int g = 0; g < groups; ++g) {
    const int r0 = st.scale == PScale::kRow ? g : 0;
    const int r1 = st.scale == PScale::kRow ? g + 1 : b.rows;
    float amax = 0.0f;
    for (int i = r0; i < r1; ++i)
      for (int j = 0; j < b.cols; ++j) {
        const float a = std::fabs(float(buf.p[std::size_t(i) * b.bk + j]));
        amax = a > amax ? a : amax;
      }
    float sc_p = amax / qz.qmax;
    if (qz.epsilon == ScaleEpsilon::kAdd) sc_p = sc_p + 1e-7f;
    const float a_eps = qz.epsilon == ScaleEpsilon::kFloor ? std::max(amax, 1e-7f) : amax;
    if (qz.epsilon == ScaleEpsilon::kFloor) sc_p = a_eps / qz.qmax;
    const float inv = qz.qmax / a_eps;
    for (int i = r0; i < r1; ++i) {
      buf.p_scale[std::size_t(i)] = sc_p;
      const T* pi = buf.p.data() + std::size_t(i) * b.bk;
      for (int j = 0; j < b.cols; ++j) row[std::size_t(j)] = float(pi[j]);
      quantize(row.data(), row.size(), sc_p, inv, qz, q.data());
      float* fi = buf.pf.data() + std::size_t(i) * b.bk;
      for (int j = 0; j < b.cols; ++j) fi[j] = float(q[std::size_t(j)]);
    }
  }
}

template <class T>
void cast_p_ref(const PStage& st, const BlockView& b, TileBuffers<T>& buf) {
  if (st.scale != PScale::kNone) return cast_p_scaled(st, b, buf, quantize_values_ref);
  const T s = T(st.static_scale);
  const bool normalize = st.norm == PNorm::kWarpSum;
  for (int i = 0; i < b.rows; ++i) {
    const T mul = buf.p_mul_active ? T(buf.p_mul[std::size_t(i)]) : T(1);
    // PNorm::kWarpSum: the softmax before the GEMM (PyTorch math: softmax_warp_forward's sum,
    // then `dst = elements / sum`, an IEEE division), the block holding the whole row.
    const T row_sum =
        normalize ? stage_util::warp_sum(buf.p.data() + std::size_t(i) * b.bk, b.cols) : T(1);
    for (int j = 0; j < b.cols; ++j) {
      const std::size_t ij = std::size_t(i) * b.bk + j;
      // SageAttention2 Alg. 1: (P̃ · 448).to(FP8), one FP32 (state) multiply; AMLA Alg. 2 line 12:
      // P·S16 (one FP32 multiply), then the cast.
      T pij = buf.p_mul_active ? buf.p[ij] * mul : buf.p[ij];
      if (normalize) pij = pij / row_sum;
      const double c = cast_p(s != T(0) ? pij * s : pij, st);
      buf.pf[ij] = float(c);
      if constexpr (std::is_same_v<T, double>) buf.pc[ij] = c;  // the P an FP64 product multiplies
    }
  }
}

template void cast_p_ref<float>(const PStage&, const BlockView&, TileBuffers<float>&);
template void cast_p_ref<double>(const PStage&, const BlockView&, TileBuffers<double>&);

namespace {

// An FP32 state's P cast without a per-row/per-tile scale, row by row: the FP32 products
// fl(fl(p · mul) · s) of cast_p_ref (the same IEEE multiplies, element by element), then the
// whole row through numerics/convert_array (round_array for the float encodings, cvt.rni.sat
// for the integer ones), bit-identical to cast_p's per-element conversions.
void cast_p_rows(const PStage& st, const BlockView& b, TileBuffers<float>& buf) {
  const float s = float(st.static_scale);
  const bool is_int = st.enc == Encoding::kS8 || st.enc == Encoding::kS4 || st.enc == Encoding::kS2;
  const int bits = st.enc == Encoding::kS8 ? 8 : st.enc == Encoding::kS4 ? 4 : 2;
  thread_local std::vector<float> row;
  thread_local std::vector<std::int32_t> q;
  row.resize(std::size_t(b.cols));
  if (is_int) q.resize(std::size_t(b.cols));
  for (int i = 0; i < b.rows; ++i) {
    const float* pi = buf.p.data() + std::size_t(i) * b.bk;
    float* fi = buf.pf.data() + std::size_t(i) * b.bk;
    const float mul = buf.p_mul_active ? buf.p_mul[std::size_t(i)] : 1.0f;
    for (int j = 0; j < b.cols; ++j) {
      const float pij = buf.p_mul_active ? pi[j] * mul : pi[j];
      row[std::size_t(j)] = s != 0.0f ? pij * s : pij;
    }
    if (is_int) {
      round_to_int_array(row.data(), row.size(), q.data(), Round::kNearestEven, bits);
      for (int j = 0; j < b.cols; ++j) fi[j] = float(q[std::size_t(j)]);
    } else if (st.enc == Encoding::kFp32 || st.enc == Encoding::kFp64) {
      std::copy(row.begin(), row.end(), fi);
    } else {
      round_array(st.enc, row.data(), row.size(), fi, st.cast);
    }
  }
}

}  // namespace

// The dispatcher (stages.hpp): an FP32 state's cast as array kernels when the
// instruction set allows, else the reference.
template <class T>
void cast_p_stage(const PStage& st, const BlockView& b, TileBuffers<T>& buf) {
  if constexpr (std::is_same_v<T, float>) {
    // P normalized before P·V (PNorm::kWarpSum, the math backend) stays with the reference.
    const bool rows = stage_kernels().array_rows;
    if (rows && st.scale == PScale::kNone && st.norm == PNorm::kNone)
      return cast_p_rows(st, b, buf);
    if (rows && st.scale != PScale::kNone)
      return cast_p_scaled(st, b, buf, quantize_values);
  }
  cast_p_ref(st, b, buf);
}
template void cast_p_stage<float>(const PStage&, const BlockView&, TileBuffers<float>&);
template void cast_p_stage<double>(const PStage&, const BlockView&, TileBuffers<double>&);

}  // namespace attnsim
