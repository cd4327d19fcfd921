// The rescale and chunk-add stages on AVX-512 for an FP32 state: rescale_ref's and add_chunk_ref's
// bits, 16 channels of one row's O per register (one FP32 operation per element: the multiply,
// its .ftz form, the division, AMLA's INT32 addition on the bits, the FADD, the fused FFMA, or the
// H100's FTZ float atomicAdd). An fp16 O accumulator (__hmul2 through fp16 rounding) takes the reference.
#include "sim/pipeline/stages/stages.hpp"
#include "numerics/isa.hpp"
#if ATTNSIM_X86_KERNELS  // x86-64 only: this file is empty on other architectures
// Last: the AVX-512 helpers (avx512.hpp).
#include "sim/pipeline/stages/avx512.hpp"

namespace attnsim {

namespace {

enum class RowOp { kMul, kMulFtz, kDiv, kAddBits };

// o[c] = o[c]·a, o[c] / a, or the INT32 bits of o[c] plus `add` (wrapping), for c < dv.
ATTNSIM_AVX512 void rescale_row(RowOp op, float* o, int dv, float a, std::int32_t add) {
  const __m512 va = _mm512_set1_ps(a);
  const __m512i vadd = _mm512_set1_epi32(add);
  for (int c = 0; c < dv; c += 16) {
    const __mmask16 m = avx512::first16(dv - c);
    const __m512 x = _mm512_maskz_loadu_ps(m, o + c);
    __m512 r;
    if (op == RowOp::kMul) {
      r = _mm512_mul_ps(x, va);
    } else if (op == RowOp::kMulFtz) {
      r = avx512::ftz_mul(x, va);  // FMUL.FTZ (Rescale::kMultiplyFtz)
    } else if (op == RowOp::kDiv) {
      r = _mm512_div_ps(x, va);
    } else {
      r = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(x), vadd));
    }
    _mm512_mask_storeu_ps(o + c, m, r);
  }
}

// x with subnormals flushed to a zero of the same sign (red_add_f32_ftz's ftz).
ATTNSIM_AVX512_INLINE __m512 ftz(__m512 x) {
  const __mmask16 sub = _mm512_fpclass_ps_mask(x, 0x20);  // denormal
  return _mm512_mask_and_ps(x, sub, x, _mm512_castsi512_ps(_mm512_set1_epi32(int(0x80000000u))));
}

enum class AddOp { kFadd, kFused, kRedFtz };

ATTNSIM_AVX512 void add_chunk_row(AddOp op, float* o, const float* ch, int dv, float a) {
  const __m512 va = _mm512_set1_ps(a);
  const __m512 red_nan = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  for (int c = 0; c < dv; c += 16) {
    const __mmask16 m = avx512::first16(dv - c);
    const __m512 x = _mm512_maskz_loadu_ps(m, o + c), y = _mm512_maskz_loadu_ps(m, ch + c);
    __m512 r;
    if (op == AddOp::kFadd) {
      r = _mm512_add_ps(x, y);
    } else if (op == AddOp::kFused) {
      r = _mm512_fmadd_ps(va, x, y);  // fma(alpha, O, chunk)
    } else {
      r = ftz(_mm512_add_ps(ftz(x), ftz(y)));
      r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(r, r, _CMP_UNORD_Q), r, red_nan);
    }
    _mm512_mask_storeu_ps(o + c, m, r);
  }
}

}  // namespace

void rescale_avx512(const RescaleStage& st, Encoding o_accum, const BlockView& b,
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

void add_chunk_avx512(const RescaleStage& st, ChunkAdd how, const BlockView& b,
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
