// The block FMA of numerics/block_fma.hpp over a tile on AVX2 + FMA + F16C: the kernel
// dot_mma_tile (mma_tile.cpp) takes for every floating-point instruction model on a CPU without
// AVX-512. The arithmetic is mma_tile_avx512.cpp's, block for block and lane for lane (its header
// comment gives the model and why each step is exact); this file differs only where AVX2 lacks an
// instruction:
//  - 8 output columns per register, 16 per group (one 256-bit register holds the group's 16
//    exponent sums as int16), 2 rows per group (the products' pass keeps 4 sums, 4 scales, two
//    B vectors and the broadcasts in the 16 ymm registers; the 4 incoming accumulators wait in
//    memory, the lanes outside the exact range as movemask bits);
//  - lane masks are compare results (all-ones lanes) and blends instead of mask registers;
//  - the RZ conversion of the exact int32 sum to FP32 (AVX-512's embedded {rz-sae}) is the RNE
//    conversion stepped one ulp toward zero where it rounded away, decided by comparing both
//    magnitudes as unsigned integers (cvt_rz);
//  - columns are read with vmaskmov loads and written with vmaskmov stores.
// The packed operands are the layout of FloatTilePlan, as mma_tile.cpp's portable packing
// (pack_a_plain / pack_b_plain) writes it. Every function carries the target attribute and uses no STL container
// and no inline function of a shared header but avx2_lanes.hpp's (static, always inlined) (numerics/isa.hpp selects this file at run time).
// MXCSR stays at its default (round to nearest even, no FTZ/DAZ).
#include "numerics/isa.hpp"
#if ATTNSIM_X86_KERNELS  // x86-64 only: this file is empty on other architectures
#include "numerics/avx2_lanes.hpp"
#include "numerics/mma_tile_kernels.hpp"

#define ATTNSIM_AVX2 ATTNSIM_TARGET_AVX2
#define ATTNSIM_AVX2_INLINE ATTNSIM_AVX2_LANES

namespace attnsim::mma_tile_detail {

namespace {

constexpr int kV = 2;  // column registers per group: 16 output columns
constexpr int kR = 2;  // rows per group

using avx2_lanes::first8;
using avx2_lanes::select;
using avx2_lanes::transpose8;

// The unit-bit exponent of an accumulator value held as FP32 (mma_tile_avx512.cpp acc_exponent),
// and in *nonzero the lanes whose value is not ±0.
ATTNSIM_AVX2_INLINE __m256i acc_exponent(__m256 p, int emin_acc, __m256i* nonzero) {
  const __m256i u = _mm256_castps_si256(p);
  const __m256i ef = _mm256_and_si256(_mm256_srli_epi32(u, 23), _mm256_set1_epi32(0xFF));
  const __m256i mag = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
  *nonzero = _mm256_xor_si256(_mm256_cmpeq_epi32(mag, _mm256_setzero_si256()),
                              _mm256_set1_epi32(-1));
  return _mm256_max_epi32(_mm256_sub_epi32(ef, _mm256_set1_epi32(127)),
                          _mm256_set1_epi32(emin_acc));
}

// Eight int32 to FP32 rounded toward zero: the RNE conversion (exact below 2^24), one ulp toward
// zero where its magnitude exceeds the integer's. Both magnitudes are compared as unsigned
// integers: |RNE(S)| <= 2^31 converts back exactly by vcvttps2dq (2^31 gives 0x80000000, which
// read unsigned is 2^31), and |S| by vpabsd (|INT32_MIN| = 0x80000000 likewise). A rounded-away
// result is never zero, so the step is a decrement of its magnitude bits (across a binade too).
ATTNSIM_AVX2_INLINE __m256 cvt_rz(__m256i s) {
  const __m256 f = _mm256_cvtepi32_ps(s);  // RNE (MXCSR default)
  const __m256i flip = _mm256_set1_epi32(int(0x80000000u));
  const __m256i fa = _mm256_cvttps_epi32(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), f));
  const __m256i away = _mm256_cmpgt_epi32(_mm256_xor_si256(fa, flip),
                                          _mm256_xor_si256(_mm256_abs_epi32(s), flip));
  return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(f), away));  // -1 where away
}

// The exact block sum S · 2^(mc − kw) rounded as the accumulator rounds it (mma_tile_avx512.cpp
// round_sum), s_bits the block's scale 2^(kw − mc) as FP32 bits.
template <BlockOut kOut>
ATTNSIM_AVX2_INLINE __m256 round_sum(__m256i S, __m256i s_bits) {
  const __m256 q = _mm256_castsi256_ps(_mm256_sub_epi32(_mm256_set1_epi32(254 << 23), s_bits));
  __m256 t = cvt_rz(S);
  if constexpr (kOut == BlockOut::kF32Rz) {
    return _mm256_mul_ps(t, q);
  } else if constexpr (kOut == BlockOut::kFp22) {
    return _mm256_castsi256_ps(
        _mm256_andnot_si256(_mm256_set1_epi32(0x3FF), _mm256_castps_si256(_mm256_mul_ps(t, q))));
  } else {
    // Round to odd into FP32, then one RNE conversion to fp16.
    const __m256i inexact =
        _mm256_xor_si256(_mm256_cmpeq_epi32(_mm256_cvttps_epi32(t), S), _mm256_set1_epi32(-1));
    t = _mm256_castsi256_ps(_mm256_or_si256(_mm256_castps_si256(t),
                                            _mm256_and_si256(inexact, _mm256_set1_epi32(1))));
    __m128i h = _mm256_cvtps_ph(_mm256_mul_ps(t, q), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    // A result that rounds to zero is +0.
    const __m128i z = _mm_cmpeq_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7FFF)), _mm_setzero_si128());
    h = _mm_andnot_si128(z, h);
    return _mm256_cvtph_ps(h);
  }
}

// FADD.RN with the GPU's canonical NaN; HADD2.RN of two fp16 values held as FP32
// (mma_tile_avx512.cpp add_acc).
ATTNSIM_AVX2_INLINE __m256 add_acc(__m256 x, __m256 y, bool fp16) {
  __m256 r = _mm256_add_ps(x, y);
  if (fp16) r = _mm256_cvtph_ps(_mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  const __m256 nan = _mm256_cmp_ps(r, r, _CMP_UNORD_Q);
  return _mm256_blendv_ps(
      r, _mm256_castsi256_ps(_mm256_set1_epi32(fp16 ? 0x7FFFE000 : 0x7FFFFFFF)), nan);
}

// One block of kBlock packed positions from kp0 for R rows × 16 columns (mma_tile_avx512.cpp
// block_step).
template <int R, BlockOut kOut, int kBlock>
ATTNSIM_AVX2_INLINE void block_step(const FloatTilePlan& pl, int i0, int j0, int kp0,
                                    __m256 (&P)[R][kV]) {
  const int n = pl.n, np = pl.np;
  const float* av = pl.av + std::ptrdiff_t(i0) * n + kp0;
  const std::uint32_t* ae = pl.ae + std::ptrdiff_t(i0) * n + kp0;
  const float* bv = pl.bv + std::ptrdiff_t(kp0) * np + j0;
  const std::int16_t* be = pl.be + std::ptrdiff_t(kp0) * np + j0;
  // Pass 1: the largest product exponent, the 16 columns' saturated exponent sums in int16 lanes.
  __m256i mx16[R];
  #pragma GCC unroll 4
  for (int r = 0; r < R; ++r) mx16[r] = _mm256_set1_epi16(std::int16_t(kNoVote));
#pragma GCC unroll 4
  for (int i = 0; i < kBlock; ++i) {
    const __m256i eb =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(be + std::ptrdiff_t(i) * np));
    #pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256i ea = _mm256_set1_epi32(int(ae[std::ptrdiff_t(r) * n + i]));
      mx16[r] = _mm256_max_epi16(mx16[r], _mm256_adds_epi16(ea, eb));
    }
  }
  __m256i mx[R][kV];
  #pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    mx[r][0] = _mm256_cvtepi16_epi32(_mm256_castsi256_si128(mx16[r]));
    mx[r][1] = _mm256_cvtepi16_epi32(_mm256_extracti128_si256(mx16[r], 1));
  }
  const __m256i floor = _mm256_set1_epi32(pl.min_exp), lo = _mm256_set1_epi32(pl.lo),
                hi = _mm256_set1_epi32(pl.hi), none = _mm256_set1_epi32(kNoVote / 2);
  const int emin_acc = pl.acc_fp16 ? -14 : -126;
  // The scales, and the lanes outside the exact range as movemask bits: in general-purpose
  // registers, so that pass 2 keeps its 4 sums, 4 scales, 2 B vectors and a broadcast in the 16
  // ymm registers (the incoming accumulators wait in `held`, not in registers the loop needs).
  __m256i sb[R][kV];
  int fbits[R][kV];
  alignas(32) std::uint32_t held[R][kV][8];
  #pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 4
    for (int v = 0; v < kV; ++v) {
      __m256i nonzero;
      const __m256i ec = acc_exponent(P[r][v], emin_acc, &nonzero);
      const __m256i m = select(nonzero, _mm256_max_epi32(mx[r][v], ec), mx[r][v]);
      const __m256i me = _mm256_max_epi32(m, floor);
      const __m256i voted = _mm256_cmpgt_epi32(m, none);
      const __m256i mc = _mm256_min_epi32(_mm256_max_epi32(me, lo), hi);
      fbits[r][v] = _mm256_movemask_ps(
          _mm256_castsi256_ps(_mm256_andnot_si256(_mm256_cmpeq_epi32(mc, me), voted)));
      sb[r][v] = _mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(pl.kw + 127), mc), 23);
      _mm256_store_si256(reinterpret_cast<__m256i*>(held[r][v]), _mm256_castps_si256(P[r][v]));
    }
  // Pass 2: every product exact in FP32, scaled by 2^(kw − maxE) (exact), truncated toward zero.
  __m256i S[R][kV];
  #pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 4
    for (int v = 0; v < kV; ++v) S[r][v] = _mm256_setzero_si256();
#pragma GCC unroll 4
  for (int i = 0; i < kBlock; ++i) {
    const __m256 b0 = _mm256_loadu_ps(bv + std::ptrdiff_t(i) * np);
    const __m256 b1 = _mm256_loadu_ps(bv + std::ptrdiff_t(i) * np + 8);
    #pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 a = _mm256_broadcast_ss(av + std::ptrdiff_t(r) * n + i);
      S[r][0] = _mm256_add_epi32(
          S[r][0], _mm256_cvttps_epi32(_mm256_mul_ps(_mm256_mul_ps(a, b0),
                                                     _mm256_castsi256_ps(sb[r][0]))));
      S[r][1] = _mm256_add_epi32(
          S[r][1], _mm256_cvttps_epi32(_mm256_mul_ps(_mm256_mul_ps(a, b1),
                                                     _mm256_castsi256_ps(sb[r][1]))));
    }
  }
  // C's term, the rounding, and the blocks the reference computes.
  #pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 4
    for (int v = 0; v < kV; ++v) {
      const __m256 c =
          _mm256_castsi256_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(held[r][v])));
      const __m256i sc = _mm256_cvttps_epi32(_mm256_mul_ps(c, _mm256_castsi256_ps(sb[r][v])));
      const __m256i sum = _mm256_add_epi32(S[r][v], sc);
      int fb = fbits[r][v];
      // Signed overflow of the last addition: operands of one sign, the result of the other.
      if (pl.check_overflow)
        fb |= _mm256_movemask_ps(_mm256_castsi256_ps(
            _mm256_and_si256(_mm256_xor_si256(S[r][v], sum), _mm256_xor_si256(sc, sum))));
      __m256 res = round_sum<kOut>(sum, sb[r][v]);
      if (fb) {
        alignas(32) std::uint32_t new_bits[8];
        _mm256_store_si256(reinterpret_cast<__m256i*>(new_bits), _mm256_castps_si256(res));
        for (int l = 0; l < 8; ++l) {
          const int j = j0 + 8 * v + l;
          if (((fb >> l) & 1) && j < pl.cols)
            new_bits[l] = float_block_fallback(pl, i0 + r, j, kp0, held[r][v][l]);
        }
        res = _mm256_castsi256_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(new_bits)));
      }
      P[r][v] = res;
    }
}

// R rows × 16 columns from (i0, j0): C in, the chunks, instructions and blocks of the model in
// dot_mma's order, D out (mma_tile_avx512.cpp tile_group).
template <int R, BlockOut kOut, int kBlock>
ATTNSIM_AVX2 void tile_group(const FloatTilePlan& pl, int i0, int j0) {
  __m256 D[R][kV];
  const __m256i m[kV] = {first8(pl.cols - j0), first8(pl.cols - j0 - 8)};
  #pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    #pragma GCC unroll 4
    for (int v = 0; v < kV; ++v) {
      if (pl.c) {
        const std::uint32_t* c = pl.c + std::ptrdiff_t(i0 + r) * pl.ldc + j0 + 8 * v;
        D[r][v] = _mm256_castsi256_ps(_mm256_maskload_epi32(reinterpret_cast<const int*>(c), m[v]));
      } else {
        D[r][v] = _mm256_setzero_ps();
      }
      // An fp16 accumulator takes the FP32 C rounded to nearest fp16 (a NaN stays a NaN).
      if (pl.acc_fp16 && pl.promote == 0)
        D[r][v] = _mm256_cvtph_ps(
            _mm256_cvtps_ph(D[r][v], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
  }
  const int chunk = pl.promote > 0 ? pl.promote : pl.n;
  for (int c0 = 0; c0 < pl.n; c0 += chunk) {
    __m256 P[R][kV];
    #pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      #pragma GCC unroll 4
      for (int v = 0; v < kV; ++v) P[r][v] = pl.promote > 0 ? _mm256_setzero_ps() : D[r][v];
    if (pl.via_hmma) {
      for (int g0 = c0; g0 < c0 + chunk; g0 += 32) {
        __m256 H[R][kV];
        #pragma GCC unroll 4
        for (int r = 0; r < R; ++r)
          #pragma GCC unroll 4
          for (int v = 0; v < kV; ++v) H[r][v] = _mm256_setzero_ps();
        block_step<R, kOut, 16>(pl, i0, j0, g0, H);
        block_step<R, kOut, 16>(pl, i0, j0, g0 + 16, H);
        #pragma GCC unroll 4
        for (int r = 0; r < R; ++r)
          #pragma GCC unroll 4
          for (int v = 0; v < kV; ++v) P[r][v] = add_acc(P[r][v], H[r][v], pl.acc_fp16);
      }
    } else {
      for (int k0 = c0; k0 < c0 + chunk; k0 += kBlock)
        block_step<R, kOut, kBlock>(pl, i0, j0, k0, P);
    }
    #pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      #pragma GCC unroll 4
      for (int v = 0; v < kV; ++v)
        D[r][v] = pl.promote > 0 ? add_acc(D[r][v], P[r][v], false) : P[r][v];
  }
  #pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 4
    for (int v = 0; v < kV; ++v) {
      std::uint32_t* d = pl.d + std::ptrdiff_t(i0 + r) * pl.ldd + j0 + 8 * v;
      _mm256_maskstore_epi32(reinterpret_cast<int*>(d), m[v], _mm256_castps_si256(D[r][v]));
    }
}

template <BlockOut kOut, int kBlock>
ATTNSIM_AVX2 void tile_all(const FloatTilePlan& pl) {
  // Column groups outside, rows inside: a group's packed B stays in the L1 cache.
  for (int j0 = 0; j0 < pl.cols; j0 += 8 * kV) {
    int i0 = 0;
    for (; i0 + kR <= pl.rows; i0 += kR) tile_group<kR, kOut, kBlock>(pl, i0, j0);
    for (; i0 < pl.rows; ++i0) tile_group<1, kOut, kBlock>(pl, i0, j0);
  }
}

template <int kBlock>
ATTNSIM_AVX2 void tile_blocks(const FloatTilePlan& pl) {
  switch (pl.out) {
    case BlockOut::kF32Rz:
      return tile_all<BlockOut::kF32Rz, kBlock>(pl);
    case BlockOut::kFp22:
      return tile_all<BlockOut::kFp22, kBlock>(pl);
    case BlockOut::kF16Rne:
      return tile_all<BlockOut::kF16Rne, kBlock>(pl);
  }
}

// Decoding of 8 words (encodings or values) into FP32 values and unit-bit exponents
// (mma_tile_avx512.cpp decode16, lane for lane).
ATTNSIM_AVX2_INLINE void decode8(const PackSpec& s, __m256i x, __m256* v, __m256i* e) {
  const __m256i one = _mm256_set1_epi32(1), zero = _mm256_setzero_si256();
  if (s.kind == DecodeKind::kValue) {
    *v = _mm256_castsi256_ps(x);
    const __m256i ef = _mm256_and_si256(_mm256_srli_epi32(x, 23), _mm256_set1_epi32(0xFF));
    __m256i ex = _mm256_max_epi32(_mm256_sub_epi32(ef, _mm256_set1_epi32(127)),
                                  _mm256_set1_epi32(s.emin));
    const __m256i z = _mm256_cmpeq_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7FFFFFFF)), zero);
    ex = select(z, _mm256_set1_epi32(kNoVote), ex);
    *e = select(_mm256_cmpeq_epi32(ef, _mm256_set1_epi32(0xFF)), _mm256_set1_epi32(kSpecial), ex);
    return;
  }
  if (s.kind == DecodeKind::kTable8) {
    const __m256i idx = _mm256_and_si256(x, _mm256_set1_epi32(0xFF));
    *v = _mm256_i32gather_ps(s.table_value, idx, 4);
    *e = _mm256_i32gather_epi32(reinterpret_cast<const int*>(s.table_exp), idx, 4);
    return;
  }
  __m256i ef, ex, special;
  if (s.kind == DecodeKind::kFp16) {
    // vcvtph2ps is exact on every fp16 input; the 8 low halves narrowed in order.
    const __m256i h = _mm256_and_si256(x, _mm256_set1_epi32(0xFFFF));
    *v = _mm256_cvtph_ps(
        _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(h, h), 0x08)));
    ef = _mm256_and_si256(_mm256_srli_epi32(x, 10), _mm256_set1_epi32(0x1F));
    ex = _mm256_sub_epi32(_mm256_max_epi32(ef, one), _mm256_set1_epi32(15));
    special = _mm256_cmpeq_epi32(ef, _mm256_set1_epi32(0x1F));
  } else {  // bf16: the upper half of an FP32
    *v = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
    ef = _mm256_and_si256(_mm256_srli_epi32(x, 7), _mm256_set1_epi32(0xFF));
    ex = _mm256_sub_epi32(_mm256_max_epi32(ef, one), _mm256_set1_epi32(127));
    special = _mm256_cmpeq_epi32(ef, _mm256_set1_epi32(0xFF));
  }
  const __m256i z = _mm256_cmpeq_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7FFF)), zero);
  ex = select(z, _mm256_set1_epi32(kNoVote), ex);
  *e = select(special, _mm256_set1_epi32(kSpecial), ex);
}

// The raw words of A(i, k) and B(k, j) (mma_tile.cpp a_word / b_word): an encoding or a value's
// bits; 0 beyond n or cols and at a k_index of -1.
ATTNSIM_AVX2_INLINE std::uint32_t word_a(const MmaTile& t, const std::uint32_t* base, int i,
                                          int k) {
  if (k >= t.n) return 0u;
  const int src = t.k_index ? t.k_index[k] : k;
  return src < 0 ? 0u : base[std::ptrdiff_t(i) * t.lda + src];
}
ATTNSIM_AVX2_INLINE std::uint32_t word_b(const MmaTile& t, const std::uint32_t* base, int k,
                                          int j) {
  if (j >= t.cols) return 0u;
  const int src = t.k_index ? t.k_index[k] : k;
  return src < 0 ? 0u : base[std::ptrdiff_t(src) * t.b_k + std::ptrdiff_t(j) * t.b_n];
}
// The instruction position of packed position p (via_hmma's order or the identity).
ATTNSIM_AVX2_INLINE int source_of(const PackSpec& s, int p) {
  return s.permute32 ? via_hmma_source(p) : p;
}

// 8 words of B's packed row p from column j0, decoded, into bv and be.
ATTNSIM_AVX2_INLINE void store_b8(const PackSpec& s, __m256i x, int np, int p, int j0, float* bv,
                                  std::int16_t* be) {
  __m256 v;
  __m256i e;
  decode8(s, x, &v, &e);
  _mm256_storeu_ps(bv + std::ptrdiff_t(p) * np + j0, v);
  // Exponents fit int16 (|e| <= 30000): vpackssdw keeps them, in order after the permute.
  _mm_storeu_si128(
      reinterpret_cast<__m128i*>(be + std::ptrdiff_t(p) * np + j0),
      _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packs_epi32(e, e), 0x08)));
}

}  // namespace

// pack_a_plain's and pack_b_plain's layout (the same values and exponents), 8 elements decoded at
// a time: A's plain rows of words as loads; B's columns contiguous (b_n = 1) as masked loads, its
// rows contiguous (b_k = 1) as 8 × 8 transposes (permuted positions: strided gathers); positions
// through k_index or via_hmma's order and any other addressing as 8 words fetched one by one.
ATTNSIM_AVX2 void pack_a_avx2(const PackSpec& s, const MmaTile& t, float* av, std::uint32_t* ae) {
  const std::uint32_t* base =
      t.a_values ? reinterpret_cast<const std::uint32_t*>(t.a_values) : t.a;
  if (t.k_index || s.permute32) {
    // Positions read through k_index or permuted: 8 words fetched one by one, decoded as a
    // vector (pack_a_plain's values in its layout).
    for (int i = 0; i < t.rows; ++i)
      for (int p0 = 0; p0 < t.n; p0 += 8) {
        alignas(32) std::uint32_t w[8];
        for (int l = 0; l < 8; ++l) w[l] = word_a(t, base, i, source_of(s, p0 + l));
        __m256 v;
        __m256i e;
        decode8(s, _mm256_load_si256(reinterpret_cast<const __m256i*>(w)), &v, &e);
        e = _mm256_or_si256(_mm256_and_si256(e, _mm256_set1_epi32(0xFFFF)),
                            _mm256_slli_epi32(e, 16));
        _mm256_storeu_ps(av + std::ptrdiff_t(i) * t.n + p0, v);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(ae + std::ptrdiff_t(i) * t.n + p0), e);
      }
    return;
  }
  for (int i = 0; i < t.rows; ++i) {
    const std::uint32_t* row = base + std::ptrdiff_t(i) * t.lda;
    float* vo = av + std::ptrdiff_t(i) * t.n;
    std::uint32_t* eo = ae + std::ptrdiff_t(i) * t.n;
    for (int k0 = 0; k0 < t.n; k0 += 8) {  // n: a multiple of 8
      __m256 v;
      __m256i e;
      decode8(s, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + k0)), &v, &e);
      // The exponent in both 16-bit halves (FloatTilePlan::ae).
      e = _mm256_or_si256(_mm256_and_si256(e, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(e, 16));
      _mm256_storeu_ps(vo + k0, v);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(eo + k0), e);
    }
  }
}

ATTNSIM_AVX2 void pack_b_avx2(const PackSpec& s, const MmaTile& t, int np, float* bv,
                              std::int16_t* be) {
  const std::uint32_t* base =
      t.b_values ? reinterpret_cast<const std::uint32_t*>(t.b_values) : t.b;
  if (t.k_index || (t.b_n != 1 && t.b_k != 1)) {
    // Any addressing: 8 words fetched one by one, decoded as a vector.
    for (int p = 0; p < t.n; ++p) {
      const int k = source_of(s, p);
      for (int j0 = 0; j0 < np; j0 += 8) {
        alignas(32) std::uint32_t w[8];
        for (int l = 0; l < 8; ++l) w[l] = word_b(t, base, k, j0 + l);
        store_b8(s, _mm256_load_si256(reinterpret_cast<const __m256i*>(w)), np, p, j0, bv, be);
      }
    }
    return;
  }
  if (t.b_k == 1 && t.b_n != 1 && !s.permute32) {
    // Columns are contiguous rows (K's keys): 8 columns × 8 positions read as rows and
    // transposed in registers (8 loads and 24 shuffles instead of 8 strided gathers).
    for (int j0 = 0; j0 < np; j0 += 8)
      for (int p0 = 0; p0 < t.n; p0 += 8) {  // n: a multiple of 8
        __m256i r[8];
        for (int jj = 0; jj < 8; ++jj)
          r[jj] = j0 + jj < t.cols
                      ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                            base + std::ptrdiff_t(j0 + jj) * t.b_n + p0))
                      : _mm256_setzero_si256();
        transpose8(r);
        for (int g = 0; g < 8; ++g) store_b8(s, r[g], np, p0 + g, j0, bv, be);
      }
    return;
  }
  for (int p = 0; p < t.n; ++p) {
    const std::uint32_t* row = base + std::ptrdiff_t(source_of(s, p)) * t.b_k;
    for (int j0 = 0; j0 < np; j0 += 8) {
      // Padding columns read as 0 (a zero of every format as encoding and as value).
      const __m256i live = first8(t.cols - j0);
      // Columns contiguous in memory (b_n = 1): one masked load; else (b_k = 1, K's keys) a
      // masked gather at stride b_n.
      const __m256i x =
          t.b_n == 1
              ? _mm256_maskload_epi32(reinterpret_cast<const int*>(row + j0), live)
              : _mm256_mask_i32gather_epi32(
                    _mm256_setzero_si256(), reinterpret_cast<const int*>(row),
                    _mm256_mullo_epi32(
                        _mm256_add_epi32(_mm256_set1_epi32(j0),
                                         _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
                        _mm256_set1_epi32(int(t.b_n))),
                    live, 4);
      store_b8(s, x, np, p, j0, bv, be);
    }
  }
}

ATTNSIM_AVX2 void float_tile_avx2(const FloatTilePlan& pl) {
  if (pl.via_hmma || pl.block == 16) return tile_blocks<16>(pl);
  if (pl.block == 8) return tile_blocks<8>(pl);
  return tile_blocks<32>(pl);
}

}  // namespace attnsim::mma_tile_detail

#endif  // ATTNSIM_X86_KERNELS
