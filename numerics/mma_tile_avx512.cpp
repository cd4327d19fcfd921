// The block FMA of numerics/block_fma.hpp over a tile on AVX-512, vectorised across 16 output
// columns per register (never across the reduction): the kernel dot_mma_tile (mma_tile.cpp)
// takes for every floating-point instruction model when the CPU has AVX-512.
//
// Per block of products and output (the block FMA of numerics/block_fma.hpp, whose model the H100
// recordings in data/hw/ prove): the alignment exponent is the largest unit-bit exponent
// ea + eb of the block's non-zero products and of C, floored at min_exp, taken from integer
// exponent arrays (never from the product values); every term is truncated toward zero to the
// quantum 2^(maxE − kw) (kw = 23 + neab) by one exact power-of-two scale and a truncating
// conversion to int32 (vcvttps2dq: the magnitude truncation without sticky bit, sign kept); the
// int32 sum is exact; the sum is rounded once (RZ to 24 or 14 significant bits, or round-to-odd
// then the RNE fp16 conversion). Products are exact in FP32 (fp16: 22-bit significands; FP8:
// 8 bits; bf16: 16 bits within the exponent range the kernel accepts). A block whose alignment
// exponent leaves [lo, hi] (an Inf/NaN operand or C, an FP32 under/overflow of a bf16 product or
// of the result, an int32 overflow of an HMMA sum) is recomputed by block_fma_ref
// (float_block_fallback), so the kernel's arithmetic needs no special case.
//
// Every function here carries the target attribute and uses no STL container and no inline
// function of a shared header: nothing compiled for AVX-512 can be picked by the linker for a
// scalar caller (numerics/isa.hpp selects this file's kernels at run time). MXCSR stays at its
// default (round to nearest even, no FTZ/DAZ); the explicit roundings are embedded ({rz-sae}) or
// the conversion's immediate.
// GCC 12's AVX-512 headers warn about their own _mm512_undefined_*() (GCC PR 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "numerics/isa.hpp"  // ATTNSIM_X86_KERNELS: this file is empty elsewhere
#if ATTNSIM_X86_KERNELS
#include <immintrin.h>

#include "numerics/mma_tile_kernels.hpp"
#include "numerics/mma_tile_load_x86.hpp"

#define ATTNSIM_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))
#define ATTNSIM_AVX512_INLINE \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl"), always_inline)) inline

namespace attnsim::mma_tile_detail {

namespace {

// Decoding of 16 encodings into FP32 values and unit-bit exponents.
ATTNSIM_AVX512_INLINE void decode16(const PackSpec& s, __m512i x, __m512* v, __m512i* e) {
  const __m512i one = _mm512_set1_epi32(1);
  if (s.kind == DecodeKind::kValue) {
    *v = _mm512_castsi512_ps(x);
    const __m512i ef = _mm512_and_si512(_mm512_srli_epi32(x, 23), _mm512_set1_epi32(0xFF));
    __m512i ex = _mm512_max_epi32(_mm512_sub_epi32(ef, _mm512_set1_epi32(127)),
                                  _mm512_set1_epi32(s.emin));
    const __mmask16 zero = _mm512_testn_epi32_mask(x, _mm512_set1_epi32(0x7FFFFFFF));
    ex = _mm512_mask_mov_epi32(ex, zero, _mm512_set1_epi32(kNoVote));
    *e = _mm512_mask_mov_epi32(ex, _mm512_cmpeq_epi32_mask(ef, _mm512_set1_epi32(0xFF)),
                               _mm512_set1_epi32(kSpecial));
    return;
  }
  if (s.kind == DecodeKind::kTable8) {
    const __m512i idx = _mm512_and_si512(x, _mm512_set1_epi32(0xFF));
    *v = _mm512_i32gather_ps(idx, s.table_value, 4);
    *e = _mm512_i32gather_epi32(idx, s.table_exp, 4);
    return;
  }
  __m512i ef, ex;
  __mmask16 special;
  if (s.kind == DecodeKind::kFp16) {
    // vcvtph2ps is exact on every fp16 input (perf-anchors.md section 1).
    *v = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(x));
    ef = _mm512_and_si512(_mm512_srli_epi32(x, 10), _mm512_set1_epi32(0x1F));
    ex = _mm512_sub_epi32(_mm512_max_epi32(ef, one), _mm512_set1_epi32(15));
    special = _mm512_cmpeq_epi32_mask(ef, _mm512_set1_epi32(0x1F));
  } else {  // bf16: the upper half of an FP32
    *v = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
    ef = _mm512_and_si512(_mm512_srli_epi32(x, 7), _mm512_set1_epi32(0xFF));
    ex = _mm512_sub_epi32(_mm512_max_epi32(ef, one), _mm512_set1_epi32(127));
    special = _mm512_cmpeq_epi32_mask(ef, _mm512_set1_epi32(0xFF));
  }
  const __mmask16 zero = _mm512_testn_epi32_mask(x, _mm512_set1_epi32(0x7FFF));
  ex = _mm512_mask_mov_epi32(ex, zero, _mm512_set1_epi32(kNoVote));
  *e = _mm512_mask_mov_epi32(ex, special, _mm512_set1_epi32(kSpecial));
}

// The unit-bit exponent of an accumulator value held as FP32, for the lanes in *nonzero (a zero C
// takes no part in the alignment). An fp16 accumulator's value is exact in FP32; its subnormals
// have unit exponent −14, hence the floor emin_acc (>= −126, so that an FP32 subnormal C has
// −126). An Inf or NaN C (biased exponent 255) gives 128, beyond every plan's hi: its block goes
// to the reference.
ATTNSIM_AVX512_INLINE __m512i acc_exponent(__m512 p, int emin_acc, __mmask16* nonzero) {
  const __m512i u = _mm512_castps_si512(p);
  const __m512i ef = _mm512_and_si512(_mm512_srli_epi32(u, 23), _mm512_set1_epi32(0xFF));
  *nonzero = _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x7FFFFFFF));
  return _mm512_max_epi32(_mm512_sub_epi32(ef, _mm512_set1_epi32(127)),
                          _mm512_set1_epi32(emin_acc));
}

// The exact block sum S · 2^(mc − kw) rounded as the accumulator rounds it (block_fma.cpp
// round_block), from the block's scale s = 2^(kw − mc) as FP32 bits: every result here is a
// normal FP32 number or zero (the range [lo, hi] ensures it), so the FP32 multiply by the power of
// two is exact and the roundings are those of the conversions. A zero sum is +0.
template <BlockOut kOut>
ATTNSIM_AVX512_INLINE __m512 round_sum(__m512i S, __m512i s_bits) {
  // 2^(mc − kw): biased exponent 127 + mc − kw = 254 − (127 + kw − mc).
  const __m512 q = _mm512_castsi512_ps(_mm512_sub_epi32(_mm512_set1_epi32(254 << 23), s_bits));
  // RZ to 24 significant bits (exact for |S| < 2^24).
  __m512 t = _mm512_cvt_roundepi32_ps(S, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  if constexpr (kOut == BlockOut::kF32Rz) {
    return _mm512_mul_ps(t, q);
  } else if constexpr (kOut == BlockOut::kFp22) {
    // Truncation to 13 fraction bits of a normal FP32 value: clear the low 10 mantissa bits
    // (two truncations toward zero, to 24 then 14 bits, are one).
    return _mm512_castsi512_ps(
        _mm512_andnot_si512(_mm512_set1_epi32(0x3FF), _mm512_castps_si512(_mm512_mul_ps(t, q))));
  } else {
    // Round to odd into FP32 (24 bits ≥ fp16's 11 + 2), then one RNE conversion to fp16 gives
    // the RNE of the exact sum (normal, subnormal, overflow to Inf as the model's rule).
    const __mmask16 inexact = _mm512_cmpneq_epi32_mask(_mm512_cvttps_epi32(t), S);
    t = _mm512_castsi512_ps(_mm512_mask_or_epi32(_mm512_castps_si512(t), inexact,
                                                 _mm512_castps_si512(t), _mm512_set1_epi32(1)));
    __m256i h = _mm512_cvtps_ph(_mm512_mul_ps(t, q), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // A result that rounds to zero is +0 (never −0: data/hw/h100/mma_h100_special.h5).
    const __mmask16 z = _mm256_testn_epi16_mask(h, _mm256_set1_epi16(0x7FFF));
    h = _mm256_maskz_mov_epi16(__mmask16(~z), h);
    return _mm512_cvtph_ps(h);
  }
}

// FADD.RN of two FP32 registers with the GPU's canonical NaN 0x7FFFFFFF (numerics/mma.cpp
// fadd_rn); HADD2.RN of two fp16 values held as FP32 (the FP32 sum rounded once more to fp16 is
// the RNE of the exact sum: 24 >= 2·11 + 2, perf-anchors.md section 1), canonical NaN 0x7FFF.
ATTNSIM_AVX512_INLINE __m512 add_acc(__m512 x, __m512 y, bool fp16) {
  __m512 r = _mm512_add_ps(x, y);
  if (fp16) r = _mm512_cvtph_ps(_mm512_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  const __mmask16 nan = _mm512_cmp_ps_mask(r, r, _CMP_UNORD_Q);
  return _mm512_mask_mov_ps(r, nan,
                            _mm512_castsi512_ps(_mm512_set1_epi32(fp16 ? 0x7FFFE000 : 0x7FFFFFFF)));
}

constexpr int kV = 2;  // column registers per group: 32 output columns

// One block of kBlock packed positions from kp0 for R rows × 32 columns, P the running
// accumulators (the incoming C as FP32 values; replaced by the block's results).
template <int R, BlockOut kOut, int kBlock>
ATTNSIM_AVX512_INLINE void block_step(const FloatTilePlan& pl, int i0, int j0, int kp0,
                                      __m512 (&P)[R][kV]) {
  const int n = pl.n, np = pl.np;
  const float* av = pl.av + std::ptrdiff_t(i0) * n + kp0;
  const std::uint32_t* ae = pl.ae + std::ptrdiff_t(i0) * n + kp0;
  const float* bv = pl.bv + std::ptrdiff_t(kp0) * np + j0;
  const std::int16_t* be = pl.be + std::ptrdiff_t(kp0) * np + j0;
  // Pass 1: the largest product exponent (independent of C), the 32 columns' exponent sums in the
  // 16-bit lanes of one register. The adds saturate: a sum leaves [-32768, 32767] only when both
  // exponents are kNoVote (-40000 reads as -32768: still no vote) or both kSpecial (60000 as
  // 32767: still out of the exact range), and the maximum of saturated sums is the saturated
  // maximum, so every decision below is the one the exact sums give.
  __m512i mx16[R];
  for (int r = 0; r < R; ++r) mx16[r] = _mm512_set1_epi16(std::int16_t(kNoVote));
  for (int i = 0; i < kBlock; ++i) {
    const __m512i eb = _mm512_loadu_si512(be + std::ptrdiff_t(i) * np);
    for (int r = 0; r < R; ++r) {
      // One 32-bit broadcast load: A's exponent is stored in both 16-bit halves.
      const __m512i ea = _mm512_set1_epi32(int(ae[std::ptrdiff_t(r) * n + i]));
      mx16[r] = _mm512_max_epi16(mx16[r], _mm512_adds_epi16(ea, eb));
    }
  }
  __m512i mx[R][kV];
  for (int r = 0; r < R; ++r) {
    mx[r][0] = _mm512_cvtepi16_epi32(_mm512_castsi512_si256(mx16[r]));
    mx[r][1] = _mm512_cvtepi16_epi32(_mm512_extracti64x4_epi64(mx16[r], 1));
  }
  // The alignment exponent with C's, the floor, the lanes outside the exact range, the scale.
  const __m512i floor = _mm512_set1_epi32(pl.min_exp), lo = _mm512_set1_epi32(pl.lo),
                hi = _mm512_set1_epi32(pl.hi), none = _mm512_set1_epi32(kNoVote / 2);
  const int emin_acc = pl.acc_fp16 ? -14 : -126;
  __m512i sb[R][kV];
  __m512 s[R][kV];
  __mmask16 bad[R][kV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < kV; ++v) {
      __mmask16 nonzero;
      const __m512i ec = acc_exponent(P[r][v], emin_acc, &nonzero);
      const __m512i m = _mm512_mask_max_epi32(mx[r][v], nonzero, mx[r][v], ec);
      const __m512i me = _mm512_max_epi32(m, floor);
      // Nothing votes: every term is zero whatever the scale, the sum +0 (block_fma: nt == 0).
      const __mmask16 voted = _mm512_cmpgt_epi32_mask(m, none);
      const __m512i mc = _mm512_min_epi32(_mm512_max_epi32(me, lo), hi);
      bad[r][v] = _mm512_mask_cmpneq_epi32_mask(voted, mc, me);
      sb[r][v] = _mm512_slli_epi32(_mm512_sub_epi32(_mm512_set1_epi32(pl.kw + 127), mc), 23);
      s[r][v] = _mm512_castsi512_ps(sb[r][v]);
    }
  // Pass 2: every product exact in FP32, scaled by 2^(kw − maxE) (exact), truncated toward zero.
  __m512i S[R][kV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < kV; ++v) S[r][v] = _mm512_setzero_si512();
  for (int i = 0; i < kBlock; ++i) {
    const __m512 b0 = _mm512_loadu_ps(bv + std::ptrdiff_t(i) * np);
    const __m512 b1 = _mm512_loadu_ps(bv + std::ptrdiff_t(i) * np + 16);
    for (int r = 0; r < R; ++r) {
      const __m512 a = _mm512_set1_ps(av[std::ptrdiff_t(r) * n + i]);
      S[r][0] = _mm512_add_epi32(S[r][0],
                                 _mm512_cvttps_epi32(_mm512_mul_ps(_mm512_mul_ps(a, b0), s[r][0])));
      S[r][1] = _mm512_add_epi32(S[r][1],
                                 _mm512_cvttps_epi32(_mm512_mul_ps(_mm512_mul_ps(a, b1), s[r][1])));
    }
  }
  // C's term, the rounding, and the blocks the reference computes.
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < kV; ++v) {
      const __m512i sc = _mm512_cvttps_epi32(_mm512_mul_ps(P[r][v], s[r][v]));
      const __m512i sum = _mm512_add_epi32(S[r][v], sc);
      __mmask16 fb = bad[r][v];
      // Signed overflow of the last addition (the products' sum alone fits: block · 2^(kw+2)
      // <= 2^31): operands of one sign, result of the other.
      if (pl.check_overflow)
        fb |= _mm512_movepi32_mask(_mm512_ternarylogic_epi32(S[r][v], sc, sum, 0x42));
      __m512 res = round_sum<kOut>(sum, sb[r][v]);
      if (fb) {
        alignas(64) std::uint32_t old_bits[16], new_bits[16];
        _mm512_store_si512(old_bits, _mm512_castps_si512(P[r][v]));
        _mm512_store_si512(new_bits, _mm512_castps_si512(res));
        for (int l = 0; l < 16; ++l) {
          const int j = j0 + 16 * v + l;
          if (((fb >> l) & 1) && j < pl.cols)
            new_bits[l] = float_block_fallback(pl, i0 + r, j, kp0, old_bits[l]);
        }
        res = _mm512_castsi512_ps(_mm512_load_si512(new_bits));
      }
      P[r][v] = res;
    }
}

// R rows × 32 columns from (i0, j0): C in, the chunks, instructions and blocks of the model in
// dot_mma's order, D out.
template <int R, BlockOut kOut, int kBlock>
ATTNSIM_AVX512 void tile_group(const FloatTilePlan& pl, int i0, int j0) {
  __m512 D[R][kV];
  const __mmask16 m0 = __mmask16(pl.cols - j0 >= 16 ? 0xFFFF : (1u << (pl.cols - j0)) - 1u);
  const __mmask16 m1 = __mmask16(
      pl.cols - j0 - 16 >= 16 ? 0xFFFF
                              : (pl.cols - j0 - 16 <= 0 ? 0u : (1u << (pl.cols - j0 - 16)) - 1u));
  for (int r = 0; r < R; ++r) {
    if (pl.c) {
      const std::uint32_t* c = pl.c + std::ptrdiff_t(i0 + r) * pl.ldc + j0;
      D[r][0] = _mm512_castsi512_ps(_mm512_maskz_loadu_epi32(m0, c));
      D[r][1] = _mm512_castsi512_ps(_mm512_maskz_loadu_epi32(m1, c + 16));
    } else {
      D[r][0] = D[r][1] = _mm512_setzero_ps();
    }
    // An fp16 accumulator takes the FP32 C rounded to nearest fp16 (dot_mma; vcvtps2ph equals
    // cvt.rn.f16.f32 on every non-NaN input, perf-anchors.md section 1; a NaN stays a NaN).
    if (pl.acc_fp16 && pl.promote == 0)
      for (int v = 0; v < kV; ++v)
        D[r][v] = _mm512_cvtph_ps(
            _mm512_cvtps_ph(D[r][v], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  const int chunk = pl.promote > 0 ? pl.promote : pl.n;
  for (int c0 = 0; c0 < pl.n; c0 += chunk) {
    __m512 P[R][kV];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < kV; ++v) P[r][v] = pl.promote > 0 ? _mm512_setzero_ps() : D[r][v];
    if (pl.via_hmma) {
      for (int g0 = c0; g0 < c0 + chunk; g0 += 32) {
        __m512 H[R][kV];
        for (int r = 0; r < R; ++r)
          for (int v = 0; v < kV; ++v) H[r][v] = _mm512_setzero_ps();
        block_step<R, kOut, 16>(pl, i0, j0, g0, H);
        block_step<R, kOut, 16>(pl, i0, j0, g0 + 16, H);
        for (int r = 0; r < R; ++r)
          for (int v = 0; v < kV; ++v) P[r][v] = add_acc(P[r][v], H[r][v], pl.acc_fp16);
      }
    } else {
      for (int k0 = c0; k0 < c0 + chunk; k0 += kBlock)
        block_step<R, kOut, kBlock>(pl, i0, j0, k0, P);
    }
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < kV; ++v)
        D[r][v] = pl.promote > 0 ? add_acc(D[r][v], P[r][v], false) : P[r][v];
  }
  for (int r = 0; r < R; ++r) {
    std::uint32_t* d = pl.d + std::ptrdiff_t(i0 + r) * pl.ldd + j0;
    _mm512_mask_storeu_epi32(d, m0, _mm512_castps_si512(D[r][0]));
    _mm512_mask_storeu_epi32(d + 16, m1, _mm512_castps_si512(D[r][1]));
  }
}

template <BlockOut kOut, int kBlock>
ATTNSIM_AVX512 void tile_all(const FloatTilePlan& pl) {
  // Column groups outside, rows inside: a group's packed B (n × 32 values and exponents) stays in
  // the L1 cache while the rows pass over it.
  for (int j0 = 0; j0 < pl.cols; j0 += 16 * kV) {
    int i0 = 0;
    for (; i0 + 4 <= pl.rows; i0 += 4) tile_group<4, kOut, kBlock>(pl, i0, j0);
    for (; i0 < pl.rows; ++i0) tile_group<1, kOut, kBlock>(pl, i0, j0);
  }
}

}  // namespace

ATTNSIM_AVX512 void pack_a_avx512(const PackSpec& s, const MmaTile& t, float* av,
                                  std::uint32_t* ae) {
  // n is a multiple of 8 (every float instruction's k is; of 32 where positions are permuted).
  for (int i = 0; i < t.rows; ++i) {
    float* vo = av + std::ptrdiff_t(i) * t.n;
    std::uint32_t* eo = ae + std::ptrdiff_t(i) * t.n;
    for (int k0 = 0; k0 < t.n; k0 += 16) {
      __m512 v;
      __m512i e;
      decode16(s, load_a16(t, i, k0), &v, &e);
      // The exponent in both 16-bit halves (FloatTilePlan::ae).
      e = _mm512_or_si512(_mm512_and_si512(e, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(e, 16));
      if (!s.permute32) {
        // The last 8 of a row whose n is an odd multiple of 8 (HMMA.1688's k) stay in the row.
        const __mmask16 in_row = lanes_below(t.n - k0);
        _mm512_mask_storeu_ps(vo + k0, in_row, v);
        _mm512_mask_storeu_epi32(eo + k0, in_row, e);
        continue;
      }
      alignas(64) float vt[16];
      alignas(64) std::int32_t et[16];
      _mm512_store_ps(vt, v);
      _mm512_store_si512(et, e);
      for (int l = 0; l < 16; ++l) {
        // Packed position of instruction position k: bit 1 of k picks the HMMA, k / 4 and bit 0
        // the place in it (numerics/mma.cpp fp8_via_hmma).
        const int k = k0 + l, g = k & 31;
        const int p = (k & ~31) + ((g & 2) ? 16 : 0) + (g >> 2) * 2 + (g & 1);
        vo[p] = vt[l];
        eo[p] = std::uint32_t(et[l]);
      }
    }
  }
}

ATTNSIM_AVX512 void pack_b_avx512(const PackSpec& s, const MmaTile& t, int np, float* bv,
                                  std::int16_t* be) {
  for (int p = 0; p < t.n; ++p) {
    int k = p;
    if (s.permute32) {
      const int g = p & 31;
      k = g < 16 ? (p & ~31) + (g >> 1) * 4 + (g & 1)
                 : (p & ~31) + ((g - 16) >> 1) * 4 + 2 + (g & 1);
    }
    const std::uint32_t* row = b_row(t, k);
    for (int j0 = 0; j0 < np; j0 += 16) {
      __m512 v;
      __m512i e;
      // Padding (columns, positions): 0, a zero of every format as encoding and as value.
      decode16(s, load_b16(t, row, j0), &v, &e);
      _mm512_storeu_ps(bv + std::ptrdiff_t(p) * np + j0, v);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(be + std::ptrdiff_t(p) * np + j0),
                          _mm512_cvtepi32_epi16(e));
    }
  }
}

namespace {

template <int kBlock>
ATTNSIM_AVX512 void tile_blocks(const FloatTilePlan& pl) {
  switch (pl.out) {
    case BlockOut::kF32Rz:
      return tile_all<BlockOut::kF32Rz, kBlock>(pl);
    case BlockOut::kFp22:
      return tile_all<BlockOut::kFp22, kBlock>(pl);
    case BlockOut::kF16Rne:
      return tile_all<BlockOut::kF16Rne, kBlock>(pl);
  }
}

}  // namespace

ATTNSIM_AVX512 void float_tile_avx512(const FloatTilePlan& pl) {
  // The emulated FP8 mma.sync runs two 16-product HMMAs per 32 positions.
  if (pl.via_hmma || pl.block == 16) return tile_blocks<16>(pl);
  if (pl.block == 8) return tile_blocks<8>(pl);
  return tile_blocks<32>(pl);
}

}  // namespace attnsim::mma_tile_detail

#endif  // ATTNSIM_X86_KERNELS
