// The P cast of one tile and KV block: P to the P encoding (FA2 convert_type<Element>;
// SageAttention2 cvt.rn.satfinite e4m3 after ×448; an integer P by cvt.rni.sat), or quantized
// with one scale per row or per tile (TurboAttention Alg. 1: s_P̃ = max|P̃| / 119). The row sum
// keeps the unrounded p.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "formats/intn.hpp"
#include "sim/pipeline/stages/stages.hpp"

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

template <class T>
void cast_p_ref(const PStage& st, const BlockView& b, TileBuffers<T>& buf) {
  if (st.scale != PScale::kNone) {
    const SymmetricQuantizer& qz = st.quantizer;
    const int groups = st.scale == PScale::kRow ? b.rows : 1;
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
        for (int j = 0; j < b.cols; ++j) {
          const std::size_t ij = std::size_t(i) * b.bk + j;
          buf.pf[ij] = float(quantize_value(float(buf.p[ij]), sc_p, inv, qz));
        }
      }
    }
    return;
  }
  const T s = T(st.static_scale);
  for (int i = 0; i < b.rows; ++i) {
    const T mul = buf.p_mul_active ? T(buf.p_mul[std::size_t(i)]) : T(1);
    for (int j = 0; j < b.cols; ++j) {
      const std::size_t ij = std::size_t(i) * b.bk + j;
      // SageAttention2 Alg. 1: (P̃ · 448).to(FP8), one FP32 (state) multiply; AMLA Alg. 2 line 12:
      // P·S16 (one FP32 multiply), then the cast.
      const T pij = buf.p_mul_active ? buf.p[ij] * mul : buf.p[ij];
      const double c = cast_p(s != T(0) ? pij * s : pij, st);
      buf.pf[ij] = float(c);
      if constexpr (std::is_same_v<T, double>) buf.pc[ij] = c;  // the P an FP64 product multiplies
    }
  }
}

template void cast_p_ref<float>(const PStage&, const BlockView&, TileBuffers<float>&);
template void cast_p_ref<double>(const PStage&, const BlockView&, TileBuffers<double>&);

// The dispatcher (stages.hpp): the reference until a fast kernel of this stage exists.
template <class T>
void cast_p_stage(const PStage& st, const BlockView& b, TileBuffers<T>& buf) {
  cast_p_ref(st, b, buf);
}
template void cast_p_stage<float>(const PStage&, const BlockView&, TileBuffers<float>&);
template void cast_p_stage<double>(const PStage&, const BlockView&, TileBuffers<double>&);

}  // namespace attnsim
