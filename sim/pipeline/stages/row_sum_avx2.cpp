// The row sum on AVX2 for an FP32 state: row_sum_ref's bits. Each lane of l is a sequential chain
// in the model's order, so lanes are what is vectorized, never a chain (row_sum_avx512.cpp's
// scheme, 8 lanes a register):
//  quad-lane models (kQuad, kQuadFma, kSageLanes, kTritonTree): the four lanes of two rows in one
//    register (row r in the low 128 bits, row r + 1 in the high ones, as l keeps them: 4 floats a
//    row), each lane taking its own columns (8n + 2t, 8n + 2t + 1, ...) in order; two pairs of rows
//    in flight so the chains' latencies overlap.
//  kSingle: eight rows in one register, the block's p transposed 8 x 8 in registers.
// kMma (the tensor-core row sum) is the instruction model's: the reference.
//
// A lane without a column in a group keeps its value through a blend (never an add of the partial
// load's 0: −0 + 0 is +0); the FMA is used exactly where the reference calls std::fma (the
// rescale fused into a lane's first add), every other step one IEEE add or multiply.
#include "numerics/isa.hpp"
#if ATTNSIM_X86_KERNELS  // x86-64 only: this file is empty on other architectures
#include "sim/pipeline/stages/stages.hpp"
// Last: the AVX2 helpers (avx2.hpp).
#include "sim/pipeline/stages/avx2.hpp"

namespace attnsim {

namespace {

constexpr int kPairsInFlight = 2;  // 4 rows

// Lane t's columns of an 8-column group of two rows: even = (p0[2t] | p1[2t]), odd = (p0[2t+1] |
// p1[2t+1]) for t = 0..3, row 0 in the low half; columns past `n` (relative to p) read as 0.
ATTNSIM_AVX2_INLINE void even_odd(const float* p0, const float* p1, int n, __m256& even,
                                  __m256& odd) {
  const __m256 a = avx2::load_n(p0, n), b = avx2::load_n(p1, n);
  const __m256 lo = _mm256_permute2f128_ps(a, b, 0x20);  // a0 a1 a2 a3 | b0 b1 b2 b3
  const __m256 hi = _mm256_permute2f128_ps(a, b, 0x31);  // a4 a5 a6 a7 | b4 b5 b6 b7
  even = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));  // a0 a2 a4 a6 | b0 b2 b4 b6
  odd = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));   // a1 a3 a5 a7 | b1 b3 b5 b7
}
// All-ones on the lanes t (of both halves) with column g + 2t + c < cols.
ATTNSIM_AVX2_INLINE __m256 has_column(int g, int c, int cols) {
  const __m256i two_t = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
  return _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(cols - g - c), two_t));
}

// P pairs of rows (p rows at ldp, lanes l[4r .. 4r + 3], alpha a[r]) under one quad-lane model;
// `rows` (2P − 1 or 2P) of them real: a lone last row is paired with itself, its partner's lanes
// neither loaded from l nor stored.
template <int P>
ATTNSIM_AVX2 void quad_rows(RowSum model, const float* p, int ldp, int cols, int bk, float* l,
                            const float* alpha, int rows) {
  __m256 acc[P], a[P];
  const float* p0[P];
  const float* p1[P];
  int nl[P];  // lanes of l held by pair q (8, or 4 for a lone row)
  for (int q = 0; q < P; ++q) {
    const bool lone = 2 * q + 1 >= rows;
    nl[q] = lone ? 4 : 8;
    p0[q] = p + std::size_t(2 * q) * ldp;
    p1[q] = lone ? p0[q] : p0[q] + ldp;
    acc[q] = avx2::load_n(l + 8 * q, nl[q]);
    a[q] = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_set1_ps(alpha[2 * q])),
                                _mm_set1_ps(alpha[lone ? 2 * q : 2 * q + 1]), 1);
  }
  switch (model) {
    case RowSum::kQuad:
      // l·alpha, then each column added to its lane in column order (even before odd).
      for (int q = 0; q < P; ++q) acc[q] = _mm256_mul_ps(acc[q], a[q]);
      for (int g = 0; g < cols; g += 8) {
        const bool whole = cols - g >= 8;
        const __m256 me = has_column(g, 0, cols), mo = has_column(g, 1, cols);
        for (int q = 0; q < P; ++q) {
          __m256 e, o;
          even_odd(p0[q] + g, p1[q] + g, cols - g, e, o);
          if (whole) {
            acc[q] = _mm256_add_ps(_mm256_add_ps(acc[q], e), o);
          } else {
            acc[q] = _mm256_blendv_ps(acc[q], _mm256_add_ps(acc[q], e), me);
            acc[q] = _mm256_blendv_ps(acc[q], _mm256_add_ps(acc[q], o), mo);
          }
        }
      }
      break;
    case RowSum::kQuadFma: {
      // A lane's first column of the block is 2t (group 0, even), if 2t < cols: its add carries
      // the rescale, fma(l, alpha, p). A lane without one has no column at all in the block and
      // ends as fl(l·alpha); the others add their columns one by one.
      const __m256 m0 = has_column(0, 0, cols);
      for (int g = 0; g < cols; g += 8) {
        const bool whole = cols - g >= 8;
        const __m256 me = has_column(g, 0, cols), mo = has_column(g, 1, cols);
        for (int q = 0; q < P; ++q) {
          __m256 e, o;
          even_odd(p0[q] + g, p1[q] + g, cols - g, e, o);
          if (g == 0) {
            acc[q] = _mm256_blendv_ps(acc[q], _mm256_fmadd_ps(acc[q], a[q], e), me);
          } else if (whole) {
            acc[q] = _mm256_add_ps(acc[q], e);
          } else {
            acc[q] = _mm256_blendv_ps(acc[q], _mm256_add_ps(acc[q], e), me);
          }
          acc[q] = whole ? _mm256_add_ps(acc[q], o)
                         : _mm256_blendv_ps(acc[q], _mm256_add_ps(acc[q], o), mo);
        }
      }
      for (int q = 0; q < P; ++q)
        acc[q] = _mm256_blendv_ps(_mm256_mul_ps(acc[q], a[q]), acc[q], m0);
      break;
    }
    case RowSum::kSageLanes:
      // Per 16-key tile: T = ((p(2t) + p(2t+1)) + p(8+2t)) + p(9+2t); tile 0 by fma(alpha, l, T).
      for (int tile = 0; tile < bk / 16; ++tile)
        for (int q = 0; q < P; ++q) {
          __m256 e0, o0, e1, o1;
          const int off = 16 * tile;
          even_odd(p0[q] + off, p1[q] + off, 8, e0, o0);
          even_odd(p0[q] + off + 8, p1[q] + off + 8, 8, e1, o1);
          const __m256 part = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(e0, o0), e1), o1);
          acc[q] = tile == 0 ? _mm256_fmadd_ps(a[q], acc[q], part) : _mm256_add_ps(acc[q], part);
        }
      break;
    case RowSum::kTritonTree:
      // Lane t folds 2t, 2t+1, 8+2t, 9+2t, ...; (a0 + a2) + (a1 + a3) by two in-lane shuffles;
      // l[0] = fma(l[0], alpha, sum), lanes 1-3 untouched.
      for (int q = 0; q < P; ++q) {
        __m256 e, o;
        even_odd(p0[q], p1[q], 8, e, o);
        __m256 part = _mm256_add_ps(e, o);
        for (int g = 8; g < bk; g += 8) {
          even_odd(p0[q] + g, p1[q] + g, 8, e, o);
          part = _mm256_add_ps(_mm256_add_ps(part, e), o);
        }
        // lane 0: a0 + a2, lane 1: a1 + a3; then lane 0: (a0 + a2) + (a1 + a3).
        const __m256 h = _mm256_add_ps(part, _mm256_permute_ps(part, _MM_SHUFFLE(1, 0, 3, 2)));
        const __m256 sum = _mm256_add_ps(h, _mm256_permute_ps(h, _MM_SHUFFLE(2, 3, 0, 1)));
        acc[q] = _mm256_blend_ps(acc[q], _mm256_fmadd_ps(acc[q], a[q], sum), 0x11);
      }
      break;
    default:
      break;
  }
  for (int q = 0; q < P; ++q) avx2::store_n(l + 8 * q, acc[q], nl[q]);
}

// The 8 x 8 transpose of rows r[0..7] in place: r[i][j] <- r[j][i].
ATTNSIM_AVX2_INLINE void transpose8(__m256 r[8]) {
  __m256 t[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);      // a0 b0 a1 b1 | a4 b4 a5 b5
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);  // a2 b2 a3 b3 | a6 b6 a7 b7
  }
  __m256 s[8];
  for (int i = 0; i < 8; i += 4) {
    s[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);          // column 0 | 4 of 4 rows
    s[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);      // column 1 | 5
    s[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);  // column 2 | 6
    s[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);  // column 3 | 7
  }
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(s[c], s[4 + c], 0x20);      // column c, rows 0-7
    r[4 + c] = _mm256_permute2f128_ps(s[c], s[4 + c], 0x31);  // column 4 + c
  }
}

// kSingle for up to 8 rows: lane r of a register is row r's one chain, l = l·alpha then + p in
// key order; p transposed 8 x 8 in registers.
ATTNSIM_AVX2 void single_rows(const float* p, int ldp, int rows, int cols, float* l,
                              const float* alpha) {
  alignas(32) float l0[8] = {};
  for (int r = 0; r < rows; ++r) l0[r] = l[r * TileState<float>::kMaxLanes];
  __m256 acc = _mm256_mul_ps(_mm256_load_ps(l0), avx2::load_n(alpha, rows));
  for (int g = 0; g < cols; g += 8) {
    __m256 c[8];
    for (int r = 0; r < 8; ++r)
      c[r] = r < rows ? avx2::load_n(p + std::size_t(r) * ldp + g, cols - g) : _mm256_setzero_ps();
    transpose8(c);
    const int n = cols - g < 8 ? cols - g : 8;
    for (int j = 0; j < n; ++j) acc = _mm256_add_ps(acc, c[j]);
  }
  _mm256_store_ps(l0, acc);
  for (int r = 0; r < rows; ++r) l[r * TileState<float>::kMaxLanes] = l0[r];
}

}  // namespace

void row_sum_avx2(const SoftmaxStage& st, Encoding p_enc, bool perm16, const BlockView& b,
                  TileState<float>& state, TileBuffers<float>& buf) {
  const RowSum model = st.row_sum;
  // The reference's kSageLanes and kTritonTree read whole 16- and 8-key groups of the block.
  const bool whole_groups = (model != RowSum::kSageLanes || b.bk % 16 == 0) &&
                            (model != RowSum::kTritonTree || b.bk % 8 == 0);
  if (model == RowSum::kMma || !whole_groups) return row_sum_ref(st, p_enc, perm16, b, state, buf);
  static_assert(TileState<float>::kMaxLanes == 4, "two rows' lanes in one 8-float register");
  const float* p = buf.p.data();
  const float* alpha = buf.alpha.data();
  if (model == RowSum::kSingle) {
    for (int i0 = 0; i0 < b.rows; i0 += 8)
      single_rows(p + std::size_t(i0) * b.bk, b.bk, b.rows - i0 < 8 ? b.rows - i0 : 8, b.cols,
                  state.lanes(i0), alpha + i0);
    return;
  }
  constexpr int kRows = 2 * kPairsInFlight;
  int i0 = 0;
  for (; i0 + kRows <= b.rows; i0 += kRows)
    quad_rows<kPairsInFlight>(model, p + std::size_t(i0) * b.bk, b.bk, b.cols, b.bk,
                              state.lanes(i0), alpha + i0, kRows);
  for (; i0 < b.rows; i0 += 2)
    quad_rows<1>(model, p + std::size_t(i0) * b.bk, b.bk, b.cols, b.bk, state.lanes(i0),
                 alpha + i0, b.rows - i0 < 2 ? b.rows - i0 : 2);
}

}  // namespace attnsim

#endif  // ATTNSIM_X86_KERNELS
