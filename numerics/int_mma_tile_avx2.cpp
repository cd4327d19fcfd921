// The integer instructions of numerics/mma.hpp (IMMA, IGMMA, the emulated s4 mma.sync) over a
// tile on AVX2: the kernel dot_mma_tile (mma_tile.cpp) takes for them on a CPU without
// AVX512-VNNI.
//
// Why it is exact: the GPU's .s32 accumulation is the exact sum wrapped modulo 2^32, and addition
// modulo 2^32 is associative (int_mma_tile_x86.cpp), so any grouping of the products gives the
// chain's bits. vpmaddwd multiplies two pairs of int16 and adds each pair's products into an
// int32 exactly (every element is an s8, u8 or s4 value, |a·b| <= 2^15, a pair's sum below 2^16),
// and the pairs' sums are added modulo 2^32. No byte offsets are needed (vpmaddubsw, the 8-bit
// form, saturates its 16-bit pair sums and is not used). .satfinite clamps the exact sum of each
// instruction's k products once onto C: the chunk's sum (|sum| <= 2^19) is formed from zero and
// added with an emulated saturating add.
//
// Every function here carries its target attribute and uses no STL container and no inline
// function of a shared header but avx2_lanes.hpp's (numerics/isa.hpp selects the kernel at run time).
#include "numerics/isa.hpp"
#if ATTNSIM_X86_KERNELS  // x86-64 only: this file is empty on other architectures
#include "numerics/avx2_lanes.hpp"
#include "numerics/mma_tile_kernels.hpp"

#define ATTNSIM_AVX2 ATTNSIM_TARGET_AVX2
#define ATTNSIM_AVX2_INLINE ATTNSIM_AVX2_LANES

namespace attnsim::mma_tile_detail {

namespace {

constexpr int kV = 2;  // column registers per group: 16 output columns

using avx2_lanes::first8;
using avx2_lanes::transpose8;

// The signed saturating int32 addition c + p (.satfinite: once per instruction).
ATTNSIM_AVX2_INLINE __m256i add_sat(__m256i c, __m256i p) {
  const __m256i r = _mm256_add_epi32(c, p);
  // Operands of one sign, result of the other: (c ^ r) & (p ^ r) has its sign bit set.
  const __m256i ovf = _mm256_srai_epi32(
      _mm256_and_si256(_mm256_xor_si256(c, r), _mm256_xor_si256(p, r)), 31);
  const __m256i lim = _mm256_xor_si256(_mm256_srai_epi32(c, 31), _mm256_set1_epi32(0x7FFFFFFF));
  return _mm256_blendv_epi8(r, lim, ovf);
}

// R rows × 16 columns from (i0, j0): each chunk's sum from zero, onto C (wrapping or clamped).
template <int R>
ATTNSIM_AVX2 void group(const IntTilePlan& pl, const Int16Packed& pk, int i0, int j0) {
  const MmaTile& t = *pl.tile;
  const int n = t.n;
  const __m256i m[kV] = {first8(t.cols - j0), first8(t.cols - j0 - 8)};
  __m256i D[R][kV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < kV; ++v)
      D[r][v] = t.c ? _mm256_maskload_epi32(
                          reinterpret_cast<const int*>(t.c + std::ptrdiff_t(i0 + r) * t.ldc + j0 +
                                                       8 * v),
                          m[v])
                    : _mm256_setzero_si256();
  for (int c0 = 0; c0 < n; c0 += pk.chunk) {
    __m256i acc[R][kV];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < kV; ++v) acc[r][v] = _mm256_setzero_si256();
    for (int g = c0 / 2; g < (c0 + pk.chunk) / 2; ++g) {
      const std::int32_t* bg = pk.b2 + std::ptrdiff_t(g) * pk.np + j0;
      const __m256i b0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bg));
      const __m256i b1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bg + 8));
      for (int r = 0; r < R; ++r) {
        std::int32_t a2;
        __builtin_memcpy(&a2, pk.a16 + std::ptrdiff_t(i0 + r) * n + 2 * g, 4);
        const __m256i a = _mm256_set1_epi32(a2);
        acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(a, b0));
        acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(a, b1));
      }
    }
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < kV; ++v)
        D[r][v] = pl.satfinite ? add_sat(D[r][v], acc[r][v]) : _mm256_add_epi32(D[r][v], acc[r][v]);
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < kV; ++v)
      _mm256_maskstore_epi32(
          reinterpret_cast<int*>(t.d + std::ptrdiff_t(i0 + r) * t.ldd + j0 + 8 * v), m[v],
          D[r][v]);
}

// 8 words of encodings -> their integer values in int32 lanes (int_mma_tile_x86.cpp int_values).
ATTNSIM_AVX2_INLINE __m256i int_values8(__m256i x, ElemKind k) {
  switch (k) {
    case ElemKind::kS8:
      return _mm256_srai_epi32(_mm256_slli_epi32(x, 24), 24);
    case ElemKind::kU8:
      return _mm256_and_si256(x, _mm256_set1_epi32(0xFF));
    case ElemKind::kS4:
      return _mm256_srai_epi32(_mm256_slli_epi32(x, 28), 28);
    case ElemKind::kValue:
      break;
  }
  return _mm256_cvttps_epi32(_mm256_castsi256_ps(x));
}


}  // namespace

// B's 16-bit pairs (pack_int16_b's layout) where column j is a contiguous row of encodings
// (b_k = 1, no position index: K's keys): 8 columns × 16 positions at a time, each column's 16
// values narrowed to int16 in k order (vpackssdw: exact, every value fits) and the 8 × 8 words
// transposed into the packed rows.
ATTNSIM_AVX2 void pack_int16_b_rows_avx2(const IntTilePlan& pl, int np, std::int32_t* b2) {
  const MmaTile& t = *pl.tile;
  const std::uint32_t* b = t.b_values ? reinterpret_cast<const std::uint32_t*>(t.b_values) : t.b;
  for (int j0 = 0; j0 < np; j0 += 8) {
    for (int k0 = 0; k0 < t.n; k0 += 16) {
      __m256i r[8];
      for (int jj = 0; jj < 8; ++jj) {
        const int j = j0 + jj;
        if (j >= t.cols) {
          r[jj] = _mm256_setzero_si256();
          continue;
        }
        const std::uint32_t* p = b + std::ptrdiff_t(j) * t.b_n + k0;
        const __m256i lo = int_values8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)),
                                       pl.b_kind);
        const __m256i hi = int_values8(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 8)), pl.b_kind);
        // [lo0-3, hi0-3 | lo4-7, hi4-7] as int16 -> k order.
        r[jj] = _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xD8);
      }
      transpose8(r);
      for (int g = 0; g < 8; ++g)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(b2 + std::ptrdiff_t(k0 / 2 + g) * np + j0),
                            r[g]);
    }
  }
}

// The same where rows k of B are contiguous (b_n = 1, no position index: V's keys): positions
// 2g and 2g + 1 of 8 columns become 8 words (low and high 16 bits) in one step.
ATTNSIM_AVX2 void pack_int16_b_cols_avx2(const IntTilePlan& pl, int np, std::int32_t* b2) {
  const MmaTile& t = *pl.tile;
  const std::uint32_t* b = t.b_values ? reinterpret_cast<const std::uint32_t*>(t.b_values) : t.b;
  const __m256i low = _mm256_set1_epi32(0xFFFF);
  for (int g = 0; g < t.n / 2; ++g) {
    const std::uint32_t* r0 = b + std::ptrdiff_t(2 * g) * t.b_k;
    const std::uint32_t* r1 = r0 + t.b_k;
    std::int32_t* out = b2 + std::ptrdiff_t(g) * np;
    for (int j0 = 0; j0 < np; j0 += 8) {
      const __m256i m = first8(t.cols - j0);
      const __m256i v0 = int_values8(
          _mm256_maskload_epi32(reinterpret_cast<const int*>(r0 + j0), m), pl.b_kind);
      const __m256i v1 = int_values8(
          _mm256_maskload_epi32(reinterpret_cast<const int*>(r1 + j0), m), pl.b_kind);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j0),
                          _mm256_or_si256(_mm256_and_si256(v0, low), _mm256_slli_epi32(v1, 16)));
    }
  }
}

ATTNSIM_AVX2 void int_tile_avx2(const IntTilePlan& pl, const Int16Packed& pk) {
  const MmaTile& t = *pl.tile;
  for (int j0 = 0; j0 < t.cols; j0 += 8 * kV) {
    int i0 = 0;
    for (; i0 + 4 <= t.rows; i0 += 4) group<4>(pl, pk, i0, j0);
    for (; i0 < t.rows; ++i0) group<1>(pl, pk, i0, j0);
  }
}

}  // namespace attnsim::mma_tile_detail

#endif  // ATTNSIM_X86_KERNELS
