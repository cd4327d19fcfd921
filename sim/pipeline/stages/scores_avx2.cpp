// The scores stage on AVX2 for an FP32 state: scores_ref's bits, 8 keys of one row per register
// (dequantization by the Q and K scales or the fold coefficient, ΔS, the mask value), the same
// chains as scores_avx512.cpp. Every score is its own chain of at most three FP32 operations in the
// reference's order: fl(s_q · s_k), then fl(acc · that) or fl(c · that), then fl(· + ΔS). The
// lanes past a row's visible keys are never stored (vmaskmov), so the partial loads' zeros never
// reach a result.
#include "numerics/isa.hpp"
#if ATTNSIM_X86_KERNELS  // x86-64 only: this file is empty on other architectures
#include <algorithm>

#include "sim/pipeline/stages/stages.hpp"
#include "sim/pipeline/stages/util.hpp"
// Last: the AVX2 helpers (avx2.hpp).
#include "sim/pipeline/stages/avx2.hpp"

namespace attnsim {

namespace {

// What a row's keys go through (resolved once per call, as in scores_ref).
struct ScoreOps {
  bool scaled = false;        // q_scaled || k_scaled: the product of scales s_q · s_k
  bool fold_b = false;        // ... goes into the coefficient (fold) rather than the score
  bool fold = false;          // coefficients are written
  const float* ks = nullptr;  // K's scale per key of the block (null: 1)
  float sq = 1.0f;            // the row's Q scale
  float c = 0.0f;             // the plain exponent coefficient
  float mask = 0.0f;
  float score_scale = 0.0f;  // scale_log2=score: S = fl(acc · score_scale) (0: none)
};

// Row i: keys [0, n) visible, [n, cols) masked. ds: ΔS of the row's keys (null: none).
ATTNSIM_AVX2 void score_row(const ScoreOps& op, const float* acc, const float* ds, int n, int cols,
                            float* s, float* cf) {
  const __m256 sq = _mm256_set1_ps(op.sq), c = _mm256_set1_ps(op.c), one = _mm256_set1_ps(1.0f);
  for (int j = 0; j < n; j += 8) {
    const int k = n - j;  // lanes >= k: masked keys, loaded as 0 and never stored
    __m256 a = avx2::load_n(acc + j, k);
    if (op.scaled) {
      // A missing K scale is 1: fl(s_q · 1) = s_q, as the reference's 1.0f factor gives.
      const __m256 sk = op.ks ? avx2::load_n(op.ks + j, k) : one;
      const __m256 prod = _mm256_mul_ps(sq, sk);  // fl(s_q · s_k)
      if (op.fold_b) {
        avx2::store_n(cf + j, _mm256_mul_ps(c, prod), k);  // c · fl(s_q · s_k)
      } else {
        a = _mm256_mul_ps(a, prod);
      }
    }
    if (op.fold && !(op.fold_b && op.scaled)) avx2::store_n(cf + j, c, k);
    if (op.score_scale != 0.0f) a = _mm256_mul_ps(a, _mm256_set1_ps(op.score_scale));
    if (ds) a = _mm256_add_ps(a, avx2::load_n(ds + j, k));
    avx2::store_n(s + j, a, k);
  }
  const __m256 mask = _mm256_set1_ps(op.mask);
  for (int j = n; j < cols; j += 8) {
    avx2::store_n(s + j, mask, cols - j);
    if (op.fold) avx2::store_n(cf + j, c, cols - j);
  }
}

}  // namespace

void scores_avx2(const SoftmaxStage& st, const PreparedInput& in, const TileIndex& ti,
                 const BlockView& b, const ExpConstants<float>& kc, TileBuffers<float>& buf) {
  // The FTZ score scale (FMUL.FTZ: cuDNN's decode kernel) is the reference's.
  if (st.ftz && kc.score_scale != 0.0f) return scores_ref(st, in, ti, b, kc, buf);
  ScoreOps op;
  op.fold = st.dequant == Dequant::kFold;
  op.fold_b = op.fold && b.nb < b.n_blocks - st.dequant_tail;
  const bool q_scaled = in.q.scaled(), k_scaled = in.k.scaled();
  op.scaled = q_scaled || k_scaled;
  op.c = kc.c;
  op.score_scale = kc.score_scale;
  op.mask = float(st.mask_value);
  const bool descale = st.dequant == Dequant::kDescale;
  if (k_scaled) {
    buf.tmp_f.resize(std::size_t(b.cols));
    for (int j = 0; j < b.cols; ++j) buf.tmp_f[std::size_t(j)] = in.k.scale(ti.skv, b.j0 + j, 0);
    op.ks = buf.tmp_f.data();
  }
  for (int i = 0; i < b.rows; ++i) {
    const int qt = ti.q_begin + i;
    op.sq = q_scaled ? in.q.scale(ti.sq, qt, 0) : 1.0f;
    const float* ds =
        in.delta_s.empty()
            ? nullptr
            : in.delta_s.data() +
                  (std::size_t(ti.sq) * in.q.means_per_slice + std::size_t(qt / in.q.mean_block)) *
                      in.shape.len_kv +
                  b.j0;
    // The causal mask hides key j0 + j when j0 + j > qt + offset_kv: keys [0, n) stay visible.
    const int n = in.causal ? std::clamp(qt + ti.offset_kv - b.j0 + 1, 0, b.cols) : b.cols;
    const std::size_t row = std::size_t(i) * b.bk;
    if (descale) {
      // FA3 FP8: S stays the raw accumulator, every column's coefficient the row's descaled one
      // (scores_ref's descale branch).
      stage_util::descale_row(buf.acc.data() + row, n, b.cols, op.mask,
                              stage_util::descale_coefficient(op.c, in, ti, qt, st.ftz),
                              buf.s.data() + row, buf.coef.data() + row);
      continue;
    }
    score_row(op, buf.acc.data() + row, ds, n, b.cols, buf.s.data() + row,
              op.fold ? buf.coef.data() + row : nullptr);
  }
}

}  // namespace attnsim

#endif  // ATTNSIM_X86_KERNELS
