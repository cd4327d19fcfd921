// The integer instructions of numerics/mma.hpp (IMMA, IGMMA, the emulated s4 mma.sync) over a
// tile, on AMX-INT8 tiles or AVX512-VNNI: the kernels dot_mma_tile (mma_tile.cpp) takes for them.
//
// Why these are exact (proven against the per-output model in tests/numerics/mma_tile_long_test.cpp,
// 0 mismatches, overflowing lanes included): the GPU's .s32 accumulation is the
// exact sum wrapped modulo 2^32, and addition modulo 2^32 is associative, so any grouping of the
// products (AMX tdpbssd's 64-product steps, VNNI vpdpbusd's groups of 4) gives the chain's bits.
// vpdpbusd multiplies unsigned by signed bytes, so a signed B is offset by +128 (its byte XOR
// 0x80) and an unsigned A by −128, and the offsets' products are subtracted again from per-row and
// per-column sums (mod 2^32 too). .satfinite clamps the exact sum once per instruction (k = 32
// products, |sum| <= 2^19, onto C), never partial sums, so it is computed instruction by
// instruction with an emulated saturating add (never vpdpbusds, which saturates every 4
// products). s4 elements are sign-extended to bytes (ptxas: two IMMA.16832.S8 from zero plus
// integer adds, exact).
//
// Every function here carries its target attribute and uses no STL container and no inline
// function of a shared header (numerics/isa.hpp selects the kernels at run time; AMX only after
// the kernel granted the tile state, numerics/isa.cpp).
// GCC 12's AVX-512 headers warn about their own _mm512_undefined_*() (GCC PR 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "numerics/isa.hpp"  // ATTNSIM_X86_KERNELS: this file is empty elsewhere
#if ATTNSIM_X86_KERNELS
#include <immintrin.h>

#include "numerics/mma_tile_kernels.hpp"
#include "numerics/mma_tile_load_x86.hpp"

#define ATTNSIM_VNNI __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))
#define ATTNSIM_VNNI_INLINE \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni"), always_inline)) inline
#define ATTNSIM_AMX \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,amx-tile,amx-int8")))

namespace attnsim::mma_tile_detail {

namespace {

// 16 encodings -> their integer values in int32 lanes (s8/u8 bytes, s4 nibbles).
ATTNSIM_VNNI_INLINE __m512i int_values(__m512i x, ElemKind k) {
  switch (k) {
    case ElemKind::kValue:  // exact integers held as FP32 values
      return _mm512_cvttps_epi32(_mm512_castsi512_ps(x));
    case ElemKind::kS8:  // (x & 0xFF) sign-extended
      return _mm512_srai_epi32(_mm512_slli_epi32(x, 24), 24);
    case ElemKind::kU8:
      return _mm512_and_si512(x, _mm512_set1_epi32(0xFF));
    case ElemKind::kS4:
      return _mm512_srai_epi32(_mm512_slli_epi32(x, 28), 28);
  }
  return x;
}

ATTNSIM_VNNI_INLINE __mmask16 first_lanes(int left) {
  return __mmask16(left >= 16 ? 0xFFFF : left <= 0 ? 0u : (1u << left) - 1u);
}

// The signed saturating int32 addition c + p (.satfinite: once per instruction).
ATTNSIM_VNNI_INLINE __m512i add_sat(__m512i c, __m512i p) {
  const __m512i r = _mm512_add_epi32(c, p);
  // Operands of one sign, result of the other: ~(c ^ p) & (c ^ r) has its sign bit set.
  const __mmask16 ovf = _mm512_movepi32_mask(_mm512_ternarylogic_epi32(c, p, r, 0x42));
  const __m512i lim = _mm512_xor_si512(_mm512_srai_epi32(c, 31), _mm512_set1_epi32(0x7FFFFFFF));
  return _mm512_mask_mov_epi32(r, ovf, lim);
}

}  // namespace

// A as bytes [rows][n8] (n8 = n rounded up to 64, zero-padded), with XOR `a_xor` applied to the
// byte, and the per-row sums of the values over every `chunk` elements: rsum[i][c].
ATTNSIM_VNNI void pack_int_a(const IntTilePlan& pl, std::uint8_t* a8, int n8, std::int32_t* rsum,
                             int chunk) {
  const MmaTile& t = *pl.tile;
  const int nchunks = n8 / chunk;
  const __m512i xr = _mm512_set1_epi32(pl.a_xor);
  for (int i = 0; i < pl.rows_pad; ++i) {
    std::uint8_t* dst = a8 + std::ptrdiff_t(i) * n8;
    std::int32_t* rs = rsum + std::ptrdiff_t(i) * nchunks;
    for (int c = 0; c < nchunks; ++c) {
      __m512i sum = _mm512_setzero_si512();
      for (int k0 = c * chunk; k0 < (c + 1) * chunk; k0 += 16) {  // chunk: a multiple of 16
        const __m512i v =
            i < t.rows ? int_values(load_a16(t, i, k0), pl.a_kind) : _mm512_setzero_si512();
        sum = _mm512_add_epi32(sum, v);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + k0),
                         _mm512_cvtepi32_epi8(_mm512_xor_si512(v, xr)));
      }
      rs[c] = _mm512_reduce_add_epi32(sum);
    }
  }
}

namespace {

// The 16 x 16 transpose of int32 rows r[0..15] in place: r[i][j] <- r[j][i] (unpacks of 32- and
// 64-bit elements, then two rounds of 128-bit lane shuffles).
ATTNSIM_VNNI_INLINE void transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xDD);
    t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xDD);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xDD);
    r[i + 4] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0x88);
    r[i + 12] = _mm512_shuffle_i32x4(t[i + 4], t[i + 12], 0xDD);
  }
}

// 64 elements from p (lanes past `left` zero) as bytes after the XOR: 16 int32, each 4 k; their
// values added to *sum when kSum. s8/u8 bytes need no decoding (the low byte is the value's).
template <bool kSum>
ATTNSIM_VNNI_INLINE __m512i bytes64(const std::uint32_t* p, int left, ElemKind kind, __m512i xr,
                                    __m512i* sum) {
  __m128i q[4];
  for (int h = 0; h < 4; ++h) {
    __m512i v = _mm512_maskz_loadu_epi32(first_lanes(left - 16 * h), p + 16 * h);
    if (kSum || kind == ElemKind::kS4 || kind == ElemKind::kValue) v = int_values(v, kind);
    if (kSum) *sum = _mm512_add_epi32(*sum, v);
    q[h] = _mm512_cvtepi32_epi8(_mm512_xor_si512(v, xr));
  }
  const __m512i lo = _mm512_inserti32x4(_mm512_castsi128_si512(q[0]), q[1], 1);
  return _mm512_inserti32x4(_mm512_inserti32x4(lo, q[2], 2), q[3], 3);
}

}  // namespace

// B in the VNNI layout: [n8 / 4][np] int32, each holding the bytes of B(4g .. 4g+3, j) (XOR
// `b_xor`), and the per-column sums csum[c][j] over every `chunk` elements.
ATTNSIM_VNNI void pack_int_b(const IntTilePlan& pl, std::int32_t* b4, int n8, int np,
                             std::int32_t* csum, int chunk) {
  const MmaTile& t = *pl.tile;
  const __m512i xr = _mm512_set1_epi32(pl.b_xor), low = _mm512_set1_epi32(0xFF);
  for (int c = 0; c < n8 / chunk; ++c)
    for (int j = 0; j < np; ++j) csum[std::ptrdiff_t(c) * np + j] = 0;
  if (t.b_k == 1 && chunk % 64 == 0 && !t.k_index) {
    // K's rows (contiguous reduction): 64 elements of 16 columns at a time, transposed. Column
    // sums only where a correction uses them (an unsigned A under VNNI).
    const bool sums_needed = pl.a_off != 0;
    for (int j0 = 0; j0 < np; j0 += 16) {
      for (int k0 = 0; k0 < n8; k0 += 64) {
        __m512i r[16];
        alignas(64) std::int32_t sums[16];
        for (int jj = 0; jj < 16; ++jj) {
          const int j = j0 + jj;
          const std::uint32_t* b =
              t.b_values ? reinterpret_cast<const std::uint32_t*>(t.b_values) : t.b;
          const std::uint32_t* p = b + std::ptrdiff_t(j < t.cols ? j : 0) * t.b_n + k0;
          const int left = j < t.cols ? t.n - k0 : 0;
          __m512i sum = _mm512_setzero_si512();
          if (sums_needed) {
            r[jj] = bytes64<true>(p, left, pl.b_kind, xr, &sum);
            sums[jj] = _mm512_reduce_add_epi32(sum);
          } else {
            r[jj] = bytes64<false>(p, left, pl.b_kind, xr, &sum);
          }
        }
        transpose16(r);
        for (int g = 0; g < 16; ++g)
          _mm512_storeu_si512(b4 + std::ptrdiff_t(k0 / 4 + g) * np + j0, r[g]);
        if (sums_needed) {
          std::int32_t* cs = csum + std::ptrdiff_t(k0 / chunk) * np + j0;
          _mm512_storeu_si512(cs,
                              _mm512_add_epi32(_mm512_loadu_si512(cs), _mm512_load_si512(sums)));
        }
      }
    }
    return;
  }
  for (int g = 0; g < n8 / 4; ++g) {
    for (int j0 = 0; j0 < np; j0 += 16) {
      __m512i word = _mm512_setzero_si512(), sum = _mm512_setzero_si512();
      for (int q = 0; q < 4; ++q) {
        // Past n the element is 0, stored with the same XOR as any other.
        const int k = 4 * g + q;
        const __m512i v = k < t.n ? int_values(load_b16(t, b_row(t, k), j0), pl.b_kind)
                                  : _mm512_setzero_si512();
        sum = _mm512_add_epi32(sum, v);
        word = _mm512_or_si512(
            word, _mm512_slli_epi32(_mm512_and_si512(_mm512_xor_si512(v, xr), low), 8 * q));
      }
      _mm512_storeu_si512(b4 + std::ptrdiff_t(g) * np + j0, word);
      std::int32_t* cs = csum + std::ptrdiff_t(4 * g / chunk) * np + j0;
      _mm512_storeu_si512(cs, _mm512_add_epi32(_mm512_loadu_si512(cs), sum));
    }
  }
}

namespace {

// R rows × 64 columns: every chunk's vpdpbusd sum, its correction, onto C (wrapping or clamped).
template <int R>
ATTNSIM_VNNI void vnni_group(const IntTilePlan& pl, const IntPacked& pk, int i0, int j0) {
  constexpr int V = 4;
  const MmaTile& t = *pl.tile;
  __m512i D[R][V];
  __mmask16 m[V];
  for (int v = 0; v < V; ++v) m[v] = first_lanes(t.cols - j0 - 16 * v);
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v)
      D[r][v] =
          t.c ? _mm512_maskz_loadu_epi32(m[v], t.c + std::ptrdiff_t(i0 + r) * t.ldc + j0 + 16 * v)
              : _mm512_setzero_si512();
  const int nchunks = pk.n8 / pk.chunk;
  for (int c = 0; c < nchunks; ++c) {
    __m512i acc[R][V];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int g = c * pk.chunk / 4; g < (c + 1) * pk.chunk / 4; ++g) {
      const std::int32_t* bg = pk.b4 + std::ptrdiff_t(g) * pk.np + j0;
      __m512i b[V];
      for (int v = 0; v < V; ++v) b[v] = _mm512_loadu_si512(bg + 16 * v);
      for (int r = 0; r < R; ++r) {
        std::int32_t a4;
        __builtin_memcpy(&a4, pk.a8 + std::ptrdiff_t(i0 + r) * pk.n8 + 4 * g, 4);
        const __m512i a = _mm512_set1_epi32(a4);
        for (int v = 0; v < V; ++v) acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], b[v], a);
      }
    }
    // Σab = Σxy + oa·Σb − ob·Σa + oa·ob·len (x = b + ob as u8, y = a − oa as s8), mod 2^32.
    const __m512i len_term = _mm512_set1_epi32(
        std::int32_t(std::uint32_t(pl.a_off) * std::uint32_t(pl.b_off) * std::uint32_t(pk.chunk)));
    for (int v = 0; v < V; ++v) {
      const __m512i cs = _mm512_loadu_si512(pk.csum + std::ptrdiff_t(c) * pk.np + j0 + 16 * v);
      const __m512i col =
          _mm512_add_epi32(_mm512_mullo_epi32(cs, _mm512_set1_epi32(pl.a_off)), len_term);
      for (int r = 0; r < R; ++r) {
        const std::int32_t rs = pk.rsum[std::ptrdiff_t(i0 + r) * nchunks + c];
        const __m512i part = _mm512_add_epi32(
            _mm512_add_epi32(acc[r][v], col),
            _mm512_set1_epi32(std::int32_t(0u - std::uint32_t(pl.b_off) * std::uint32_t(rs))));
        D[r][v] = pl.satfinite ? add_sat(D[r][v], part) : _mm512_add_epi32(D[r][v], part);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v)
      _mm512_mask_storeu_epi32(t.d + std::ptrdiff_t(i0 + r) * t.ldd + j0 + 16 * v, m[v], D[r][v]);
}

}  // namespace

ATTNSIM_VNNI void int_tile_vnni(const IntTilePlan& pl, const IntPacked& pk) {
  for (int j0 = 0; j0 < pl.tile->cols; j0 += 64) {
    int i0 = 0;
    for (; i0 + 4 <= pl.tile->rows; i0 += 4) vnni_group<4>(pl, pk, i0, j0);
    for (; i0 < pl.tile->rows; ++i0) vnni_group<1>(pl, pk, i0, j0);
  }
}

// AMX: C tiles of 16 × 16 int32, A tiles of 16 rows × 64 bytes, B tiles of 16 groups of 4 keys
// × 16 columns (the VNNI layout), two of each: 32 × 32 outputs per step of 64 products.
ATTNSIM_AMX void int_tile_amx(const IntTilePlan& pl, const IntPacked& pk, std::int32_t* cbuf) {
  struct alignas(64) TileConfig {
    std::uint8_t palette = 1, start_row = 0, reserved[14] = {};
    std::uint16_t colsb[16] = {};
    std::uint8_t rows[16] = {};
  } cfg;
  for (int i = 0; i < 8; ++i) {
    cfg.colsb[i] = 64;
    cfg.rows[i] = 16;
  }
  _tile_loadconfig(&cfg);
  const MmaTile& t = *pl.tile;
  const std::ptrdiff_t ldb = std::ptrdiff_t(pk.np) * 4;
  for (int i0 = 0; i0 < pl.rows_pad; i0 += 32) {
    for (int j0 = 0; j0 < pk.np; j0 += 32) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int k0 = 0; k0 < pk.n8; k0 += 64) {
        const std::uint8_t* a = pk.a8 + std::ptrdiff_t(i0) * pk.n8 + k0;
        const std::int32_t* b = pk.b4 + std::ptrdiff_t(k0 / 4) * pk.np + j0;
        _tile_loadd(4, a, pk.n8);
        _tile_loadd(5, a + std::ptrdiff_t(16) * pk.n8, pk.n8);
        _tile_loadd(6, b, ldb);
        _tile_loadd(7, b + 16, ldb);
        if (pl.a_signed && pl.b_signed) {
          _tile_dpbssd(0, 4, 6);
          _tile_dpbssd(1, 4, 7);
          _tile_dpbssd(2, 5, 6);
          _tile_dpbssd(3, 5, 7);
        } else if (pl.a_signed) {
          _tile_dpbsud(0, 4, 6);
          _tile_dpbsud(1, 4, 7);
          _tile_dpbsud(2, 5, 6);
          _tile_dpbsud(3, 5, 7);
        } else if (pl.b_signed) {
          _tile_dpbusd(0, 4, 6);
          _tile_dpbusd(1, 4, 7);
          _tile_dpbusd(2, 5, 6);
          _tile_dpbusd(3, 5, 7);
        } else {
          _tile_dpbuud(0, 4, 6);
          _tile_dpbuud(1, 4, 7);
          _tile_dpbuud(2, 5, 6);
          _tile_dpbuud(3, 5, 7);
        }
      }
      _tile_stored(0, cbuf, 128);
      _tile_stored(1, cbuf + 16, 128);
      _tile_stored(2, cbuf + 16 * 32, 128);
      _tile_stored(3, cbuf + 16 * 32 + 16, 128);
      for (int r = 0; r < 32 && i0 + r < t.rows; ++r)
        for (int v = 0; v < 2; ++v) {
          const __mmask16 m = first_lanes(t.cols - j0 - 16 * v);
          if (!m) continue;
          const __m512i s = _mm512_loadu_si512(cbuf + r * 32 + 16 * v);
          const std::ptrdiff_t jo = j0 + 16 * v;
          const __m512i c =
              t.c ? _mm512_maskz_loadu_epi32(m, t.c + std::ptrdiff_t(i0 + r) * t.ldc + jo)
                  : _mm512_setzero_si512();
          _mm512_mask_storeu_epi32(t.d + std::ptrdiff_t(i0 + r) * t.ldd + jo, m,
                                   _mm512_add_epi32(c, s));
        }
    }
  }
  _tile_release();
}

}  // namespace attnsim::mma_tile_detail

#endif  // ATTNSIM_X86_KERNELS
