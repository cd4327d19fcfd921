// The rescale and chunk-add stages on AVX2 for an FP32 state: rescale_ref's and add_chunk_ref's
// bits, 8 channels of one row's O per register (one FP32 operation per element: the multiply,
// the division, AMLA's INT32 addition on the bits, the FADD, the fused FFMA, or the H100's FTZ
// float atomicAdd, the .ftz multiply), as rescale_avx512.cpp. An fp16 O accumulator (__hmul2
// through fp16 rounding) takes the reference.
#include "numerics/isa.hpp"
#if ATTNSIM_X86_KERNELS  // x86-64 only: this file is empty on other architectures
#include "sim/pipeline/stages/stages.hpp"
// Last: the AVX2 helpers (avx2.hpp).
#include "sim/pipeline/stages/avx2.hpp"

namespace attnsim {

namespace {

enum class RowOp { kMul, kMulFtz, kDiv, kAddBits };

// o[c] = o[c]·a, o[c] / a, or the INT32 bits of o[c] plus `add` (wrapping, as the reference's
// uint32 addition), for c < dv.
ATTNSIM_AVX2 void rescale_row(RowOp op, float* o, int dv, float a, std::int32_t add) {
  const __m256 va = _mm256_set1_ps(a);
  const __m256i vadd = _mm256_set1_epi32(add);
  for (int c = 0; c < dv; c += 8) {
    const int k = dv - c;
    const __m256 x = avx2::load_n(o + c, k);
    __m256 r;
    if (op == RowOp::kMul) {
      r = _mm256_mul_ps(x, va);
    } else if (op == RowOp::kMulFtz) {
      r = avx2::ftz_mul(x, va);  // FMUL.FTZ (Rescale::kMultiplyFtz)
    } else if (op == RowOp::kDiv) {
      r = _mm256_div_ps(x, va);
    } else {
      r = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(x), vadd));
    }
    avx2::store_n(o + c, r, k);
  }
}

// x with subnormals flushed to a zero of the same sign (red_add_f32_ftz's ftz): a zero exponent
// field keeps the sign bit alone (a zero stays itself, a subnormal becomes ±0).
ATTNSIM_AVX2_INLINE __m256 ftz(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i zero_exp = _mm256_cmpeq_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7F800000)),
                                              _mm256_setzero_si256());
  const __m256i sign = _mm256_and_si256(u, _mm256_set1_epi32(int(0x80000000u)));
  return _mm256_castsi256_ps(_mm256_blendv_epi8(u, sign, zero_exp));
}

enum class AddOp { kFadd, kFused, kRedFtz };

ATTNSIM_AVX2 void add_chunk_row(AddOp op, float* o, const float* ch, int dv, float a) {
  const __m256 va = _mm256_set1_ps(a);
  const __m256 red_nan = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  for (int c = 0; c < dv; c += 8) {
    const int k = dv - c;
    const __m256 x = avx2::load_n(o + c, k), y = avx2::load_n(ch + c, k);
    __m256 r;
    if (op == AddOp::kFadd) {
      r = _mm256_add_ps(x, y);
    } else if (op == AddOp::kFused) {
      r = _mm256_fmadd_ps(va, x, y);  // fma(alpha, O, chunk)
    } else {
      // ftz(ftz(O) + ftz(chunk)), a NaN result as the canonical 0x7FFFFFFF.
      r = ftz(_mm256_add_ps(ftz(x), ftz(y)));
      r = _mm256_blendv_ps(r, red_nan, _mm256_cmp_ps(r, r, _CMP_UNORD_Q));
    }
    avx2::store_n(o + c, r, k);
  }
}

}  // namespace

void rescale_avx2(const RescaleStage& st, Encoding o_accum, const BlockView& b,
                  TileState<float>& state, TileBuffers<float>& buf) {
  // An fp16 accumulator's __hmul2 stays with the reference.
  if (o_accum == Encoding::kFp16) return rescale_ref(st, o_accum, b, state, buf);
  const int dv = state.dv;
  buf.p_mul_active = st.kind == Rescale::kHook;
  for (int i = 0; i < b.rows; ++i) {
    float* o = state.o_row(i);
    const float a = buf.alpha[std::size_t(i)];
    const bool first = buf.first[std::size_t(i)] != 0;
    switch (st.kind) {
      case Rescale::kHook: {
        buf.p_mul[std::size_t(i)] = 1.0f;
        if (state.empty(i)) break;
        const RescaleStep r =
            st.hook->step(state.m[std::size_t(i)], first, state.hook[std::size_t(i)].data());
        buf.p_mul[std::size_t(i)] = r.p_mul;
        if (r.apply_add) rescale_row(RowOp::kAddBits, o, dv, 0.0f, r.o_add);
        break;
      }
      case Rescale::kIntAdd: {
        if (first) break;
        const std::int32_t n = std::int32_t(buf.alpha_arg[std::size_t(i)]);
        // O·2^n as AMLA's addition of n·2^23 to the bits (numerics/fp32_bits.hpp).
        if (n != 0) rescale_row(RowOp::kAddBits, o, dv, 0.0f, std::int32_t(std::uint32_t(n) << 23));
        break;
      }
      case Rescale::kMultiply:
        if (!st.fused) rescale_row(RowOp::kMul, o, dv, a, 0);
        break;
      case Rescale::kDivide:
        if (!first) rescale_row(RowOp::kDiv, o, dv, a, 0);
        break;
      case Rescale::kMultiplyFtz:
        // cuDNN's and FA3's fast-math rescale: FMUL.FTZ by alpha every block (alpha 0 on a row's
        // first block, where O is 0).
        rescale_row(RowOp::kMulFtz, o, dv, a, 0);
        break;
    }
  }
}

void add_chunk_avx2(const RescaleStage& st, ChunkAdd how, const BlockView& b,
                    TileState<float>& state, TileBuffers<float>& buf) {
  const int dv = state.dv;
  const AddOp op = ftz_chunk_add(how) ? AddOp::kRedFtz
                   : st.fused               ? AddOp::kFused
                                            : AddOp::kFadd;
  for (int i = 0; i < b.rows; ++i)
    add_chunk_row(op, state.o_row(i), buf.chunk.data() + std::size_t(i) * dv, dv,
                  buf.alpha[std::size_t(i)]);
}

}  // namespace attnsim

#endif  // ATTNSIM_X86_KERNELS
