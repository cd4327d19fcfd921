// The QKᵀ stage's CUDA-core product models (DotModel kFp32, kFp64, kExact): qk_ref's bits from
// the active set's chains (cuda_core_chains.hpp: AVX-512 and AVX2 in qk_cuda_core_x86.cpp, NEON in
// qk_cuda_core_neon.cpp), each lane one output's own k-ordered chain.
//
// The reduction over head_dim is never split: lane j of an accumulator is key j's dot product,
// and its terms enter in k order as in numerics/dot.hpp dot_values. The K block is transposed once
// per tile and block so that a key vector is one load; Q values are broadcast. Register blocking:
// 4 query rows x 4 key vectors.
//  kFp32  acc = fl(acc + fl(q·k)), two roundings per term (mul then add, no FMA), from +0.
//  kFp64  acc = fl(acc + q·k) with the product exact (24 + 24 bits fit in 53), so one FMA per
//         term gives the reference's mul-then-add bits.
//  kExact the FP64 sum is exact whenever the operands' exponent span allows it
//         (cuda_core_span.hpp), then rounded once to FP32; every other output takes the
//         reference's dot_exact_f32.
#include <algorithm>
#include <type_traits>

#include "numerics/exact_sum.hpp"
#include "sim/pipeline/stages/cuda_core_chains.hpp"
#include "sim/pipeline/stages/kernels.hpp"
#include "sim/pipeline/stages/stages.hpp"
#include "sim/pipeline/stages/util.hpp"

namespace attnsim {

void key_spans_plain(const float* kt, int d, int ldk, int cols, cuda_core_span::Span* ks) {
  for (int k = 0; k < d; ++k)
    for (int j = 0; j < cols; ++j) ks[j].add(kt[std::size_t(k) * ldk + j]);
}
cuda_core_span::Span values_span_plain(const float* x, int n) {
  cuda_core_span::Span s;
  for (int j = 0; j < n; ++j) s.add(x[j]);
  return s;
}
void round_exact_sums_plain(const double* s, float* out, int n) {
  for (int j = 0; j < n; ++j) out[j] = float(s[j] + 0.0);
}

#if !ATTNSIM_X86_KERNELS && !ATTNSIM_NEON_KERNELS
// No architecture's kernels: the dispatch table has no CUDA-core set, so this is never called.
const QkChains& qk_chains(CudaCoreKernels) {
  static const QkChains none;
  return none;
}
#endif

template <class T>
void qk_cuda_core(const QkStage& st, const PreparedInput& in, const TileIndex& ti,
                  const BlockView& b, TileBuffers<T>& buf) {
  const int d = in.shape.head_dim;
  const DotModel::Kind kind = st.dot.kind;
  const QkChains& ch = qk_chains(stage_kernels().cuda_core);
  if (kind == DotModel::kExact && !ch.key_spans) return qk_ref(st, in, ti, b, buf);
  const bool fp32 = kind == DotModel::kFp32;
  const int ldk = stage_util::round_up(std::max(b.cols, 1), 16);
  // The block's transposed copy (and its FP64 copy), made once per kv_key (TileBuffers); one
  // layout for every set.
  const std::uint64_t key = buf.kv_key;
  if (key == 0 || buf.kt_for != key) {
    buf.kt.resize(std::size_t(d) * ldk);
    ch.transpose(in.k.row(ti.skv, b.j0), d, b.cols, buf.kt.data(), ldk);
    buf.kt_for = key;
  }
  if (!fp32 && (key == 0 || buf.kt_wide_for != key)) {
    buf.kt_wide.resize(std::size_t(d) * ldk);
    for (std::size_t i = 0; i < buf.kt_wide.size(); ++i) buf.kt_wide[i] = double(buf.kt[i]);
    buf.kt_wide_for = key;
  }
  // The chains' results: FP32 (kFp32) or FP64 (kFp64, kExact) per [rows][ldk].
  const bool direct = fp32 && std::is_same_v<T, float>;
  float* res_f = nullptr;
  double* res_d = nullptr;
  if (fp32) {
    if constexpr (std::is_same_v<T, float>) {
      res_f = buf.acc.data();
    } else {
      buf.tmp_f.resize(std::size_t(b.rows) * ldk);
      res_f = buf.tmp_f.data();
    }
  } else {
    buf.tmp_d.resize(std::size_t(b.rows) * ldk);
    res_d = buf.tmp_d.data();
  }
  const int lda = direct ? b.bk : ldk;
  const int lanes = fp32 ? ch.fp32_lanes : ch.fp64_lanes;
  // Keys [0, visible(i)) of row i are unmasked (the reference writes 0 for the others).
  auto visible = [&](int i) {
    if (!in.causal) return b.cols;
    return std::clamp(ti.q_begin + i + ti.offset_kv - b.j0 + 1, 0, b.cols);
  };
  for (int i0 = 0; i0 < b.rows; i0 += kCudaCoreRows) {
    const int rows = std::min(kCudaCoreRows, b.rows - i0);
    const int n = visible(i0 + rows - 1);  // the group's last row sees the most keys
    const float* q = in.q.row(ti.sq, ti.q_begin + i0);
    for (int j = 0; j < n; j += lanes * kCudaCoreVecs) {
      const int vecs = std::min(kCudaCoreVecs, (n - j + lanes - 1) / lanes);
      if (fp32) {
        ch.fp32[rows - 1][vecs - 1](q, d, buf.kt.data() + j, ldk,
                                     res_f + std::size_t(i0) * lda + j, lda, n - j);
      } else {
        ch.fp64[rows - 1][vecs - 1](q, d, buf.kt_wide.data() + j, ldk,
                                     res_d + std::size_t(i0) * lda + j, lda, n - j);
      }
    }
  }
  if (kind == DotModel::kExact) {
    // Outputs whose FP64 sum may have rounded go to the reference's exact register.
    using cuda_core_span::Span;
    const int log2n = cuda_core_span::log2_terms(d);
    std::vector<Span>& ks = buf.k_spans;
    if (key == 0 || buf.k_spans_for != key) {
      ks.assign(std::size_t(b.cols), Span{});
      ch.key_spans(buf.kt.data(), d, ldk, b.cols, ks.data());
      buf.k_spans_for = key;
    }
    buf.tmp_f.resize(std::size_t(b.rows) * ldk);
    for (int i = 0; i < b.rows; ++i) {
      const float* qi = in.q.row(ti.sq, ti.q_begin + i);
      const Span qs = ch.values_span(qi, d);
      const int n = visible(i);
      float* fi = buf.tmp_f.data() + std::size_t(i) * ldk;
      ch.round_exact(res_d + std::size_t(i) * lda, fi, n);
      for (int j = 0; j < n; ++j)
        if (!cuda_core_span::exact_in_fp64(qs, ks[std::size_t(j)], Span{}, log2n))
          fi[j] = dot_exact_f32(0.0, qi, in.k.row(ti.skv, b.j0 + j), d);
    }
  }
  // Into acc as T: the chains' values, 0 for masked keys.
  for (int i = 0; i < b.rows; ++i) {
    T* acc = buf.acc.data() + std::size_t(i) * b.bk;
    const int n = visible(i);
    if (!direct) {
      if (kind == DotModel::kExact) {
        const float* f = buf.tmp_f.data() + std::size_t(i) * ldk;
        for (int j = 0; j < n; ++j) acc[j] = T(f[j]);
      } else if (fp32) {
        const float* f = res_f + std::size_t(i) * lda;
        for (int j = 0; j < n; ++j) acc[j] = T(f[j]);
      } else {
        const double* x = res_d + std::size_t(i) * lda;
        for (int j = 0; j < n; ++j) acc[j] = T(x[j]);
      }
    }
    for (int j = n; j < b.cols; ++j) acc[j] = T(0);
  }
}

template void qk_cuda_core<float>(const QkStage&, const PreparedInput&, const TileIndex&,
                                  const BlockView&, TileBuffers<float>&);
template void qk_cuda_core<double>(const QkStage&, const PreparedInput&, const TileIndex&,
                                   const BlockView&, TileBuffers<double>&);

}  // namespace attnsim
