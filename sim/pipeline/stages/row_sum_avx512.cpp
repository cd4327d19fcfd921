// The row sum on AVX-512 for an FP32 state: row_sum_ref's bits. Each lane of l is a sequential
// chain in the model's order, so lanes are what is vectorized, never a chain:
//  quad-lane models (kQuad, kQuadFma, kSageLanes, kTritonTree): the four lanes of one row in one
//    128-bit register, each taking its own columns (8n + 2t, 8n + 2t + 1, ...) in order; four rows
//    in flight so the chains' latencies overlap.
//  kSingle: sixteen rows in one register, the block's p transposed 16 x 16 in registers.
// kMma (the tensor-core row sum) is the instruction model's: the reference.
#include <algorithm>

#include "sim/pipeline/stages/stages.hpp"
#include "numerics/isa.hpp"
#if ATTNSIM_X86_KERNELS  // x86-64 only: this file is empty on other architectures
// Last: the AVX-512 helpers (avx512.hpp).
#include "sim/pipeline/stages/avx512.hpp"

namespace attnsim {

namespace {

constexpr int kRowsInFlight = 4;

// Lane t's columns of an 8-column group starting at p: (p[2t], p[2t+1]) for t = 0..3, the
// columns past `n` (relative to p) read as 0.
ATTNSIM_AVX512_INLINE void even_odd(const float* p, int n, __m128& even, __m128& odd) {
  const __m128 lo = _mm_maskz_loadu_ps(__mmask8(avx512::first8(n) & 0xF), p);
  const __m128 hi = _mm_maskz_loadu_ps(__mmask8((avx512::first8(n) >> 4) & 0xF), p + 4);
  even = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
  odd = _mm_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
}
// Lanes t with column g + 2t + c < cols.
ATTNSIM_AVX512_INLINE __mmask8 has_column(int g, int c, int cols) {
  __mmask8 m = 0;
  for (int t = 0; t < 4; ++t)
    if (g + 2 * t + c < cols) m = __mmask8(m | (1u << t));
  return m;
}

// R rows (p rows at ldp, lanes l[r][0..3], alpha a[r]) under one quad-lane model.
template <int R>
ATTNSIM_AVX512 void quad_rows(RowSum model, const float* p, int ldp, int cols, int bk, float* l,
                              const float* alpha) {
  __m128 acc[R], a[R];
  for (int r = 0; r < R; ++r) {
    acc[r] = _mm_loadu_ps(l + 4 * r);
    a[r] = _mm_set1_ps(alpha[r]);
  }
  switch (model) {
    case RowSum::kQuad:
      for (int r = 0; r < R; ++r) acc[r] = _mm_mul_ps(acc[r], a[r]);
      for (int g = 0; g < cols; g += 8) {
        const __mmask8 me = has_column(g, 0, cols), mo = has_column(g, 1, cols);
        for (int r = 0; r < R; ++r) {
          __m128 e, o;
          even_odd(p + std::size_t(r) * ldp + g, cols - g, e, o);
          acc[r] = _mm_mask_add_ps(acc[r], me, acc[r], e);
          acc[r] = _mm_mask_add_ps(acc[r], mo, acc[r], o);
        }
      }
      break;
    case RowSum::kQuadFma: {
      // A lane's first column of the block carries the rescale: fma(l, alpha, p).
      __mmask8 first = 0xF;
      for (int g = 0; g < cols; g += 8) {
        for (int c = 0; c < 2; ++c) {
          const __mmask8 m = has_column(g, c, cols);
          for (int r = 0; r < R; ++r) {
            __m128 e, o;
            even_odd(p + std::size_t(r) * ldp + g, cols - g, e, o);
            const __m128 x = c == 0 ? e : o;
            acc[r] = _mm_mask_blend_ps(__mmask8(m & first), _mm_mask_add_ps(acc[r], m, acc[r], x),
                                       _mm_fmadd_ps(acc[r], a[r], x));
          }
          first = __mmask8(first & ~m);
        }
      }
      for (int r = 0; r < R; ++r) acc[r] = _mm_mask_mul_ps(acc[r], first, acc[r], a[r]);
      break;
    }
    case RowSum::kSageLanes:
      // Per 16-key tile: T = ((p(2t) + p(2t+1)) + p(8+2t)) + p(9+2t); tile 0 by fma(alpha, l, T).
      for (int tile = 0; tile < bk / 16; ++tile)
        for (int r = 0; r < R; ++r) {
          __m128 e0, o0, e1, o1;
          const float* q = p + std::size_t(r) * ldp + 16 * tile;
          even_odd(q, 8, e0, o0);
          even_odd(q + 8, 8, e1, o1);
          const __m128 part = _mm_add_ps(_mm_add_ps(_mm_add_ps(e0, o0), e1), o1);
          acc[r] = tile == 0 ? _mm_fmadd_ps(a[r], acc[r], part) : _mm_add_ps(acc[r], part);
        }
      break;
    case RowSum::kTritonTree:
      // Lane t folds 2t, 2t+1, 8+2t, 9+2t, ...; (a0 + a2) + (a1 + a3); l = fma(l, alpha, sum).
      for (int r = 0; r < R; ++r) {
        const float* q = p + std::size_t(r) * ldp;
        __m128 e, o;
        even_odd(q, 8, e, o);
        __m128 part = _mm_add_ps(e, o);
        for (int g = 8; g < bk; g += 8) {
          even_odd(q + g, 8, e, o);
          part = _mm_add_ps(_mm_add_ps(part, e), o);
        }
        alignas(16) float pt[4], lt[4];
        _mm_store_ps(pt, part);
        _mm_store_ps(lt, acc[r]);
        lt[0] = __builtin_fmaf(lt[0], alpha[r], (pt[0] + pt[2]) + (pt[1] + pt[3]));
        acc[r] = _mm_load_ps(lt);
      }
      break;
    default:
      break;
  }
  for (int r = 0; r < R; ++r) _mm_storeu_ps(l + 4 * r, acc[r]);
}

// kSingle for up to 16 rows: lane r of a register is row r's one chain, l = l·alpha then + p in
// key order; p transposed 16 x 16 in registers.
ATTNSIM_AVX512 void single_rows(const float* p, int ldp, int rows, int cols, float* l,
                                const float* alpha) {
  const __m512i lane0 =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(TileState<float>::kMaxLanes));
  const __mmask16 mr = avx512::first16(rows);
  __m512 acc = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mr, lane0, l, 4);
  acc = _mm512_mul_ps(acc, _mm512_maskz_loadu_ps(mr, alpha));
  for (int g = 0; g < cols; g += 16) {
    __m512 c[16];
    for (int r = 0; r < 16; ++r)
      c[r] =
          r < rows ? avx512::load_n(p + std::size_t(r) * ldp + g, cols - g) : _mm512_setzero_ps();
    avx512::transpose16(c);
    const int n = std::min(16, cols - g);
    for (int j = 0; j < n; ++j) acc = _mm512_add_ps(acc, c[j]);
  }
  _mm512_mask_i32scatter_ps(l, mr, lane0, acc, 4);
}

}  // namespace

void row_sum_avx512(const SoftmaxStage& st, Encoding p_enc, bool perm16, const BlockView& b,
                    TileState<float>& state, TileBuffers<float>& buf) {
  const RowSum model = st.row_sum;
  // The reference's kSageLanes and kTritonTree read whole 16- and 8-key groups of the block.
  const bool whole_groups = (model != RowSum::kSageLanes || b.bk % 16 == 0) &&
                            (model != RowSum::kTritonTree || b.bk % 8 == 0);
  if (model == RowSum::kMma || !whole_groups) return row_sum_ref(st, p_enc, perm16, b, state, buf);
  const float* p = buf.p.data();
  const float* alpha = buf.alpha.data();
  if (model == RowSum::kSingle) {
    for (int i0 = 0; i0 < b.rows; i0 += 16)
      single_rows(p + std::size_t(i0) * b.bk, b.bk, std::min(16, b.rows - i0), b.cols,
                  state.lanes(i0), alpha + i0);
    return;
  }
  int i0 = 0;
  for (; i0 + kRowsInFlight <= b.rows; i0 += kRowsInFlight)
    quad_rows<kRowsInFlight>(model, p + std::size_t(i0) * b.bk, b.bk, b.cols, b.bk, state.lanes(i0),
                             alpha + i0);
  for (; i0 < b.rows; ++i0)
    quad_rows<1>(model, p + std::size_t(i0) * b.bk, b.bk, b.cols, b.bk, state.lanes(i0),
                 alpha + i0);
}

}  // namespace attnsim

#endif  // ATTNSIM_X86_KERNELS
