// FP64 golden attention (see golden.hpp).
#include "sim/golden/golden.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "sim/progress.hpp"

namespace attnsim {

namespace {
using RowMatD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using RowMatF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
// Query rows per work item: 256 (tall enough for Eigen's GEMM to reach its large-matrix speed),
// fewer when len_kv is so long that the 256 x len_kv score block would pass 32 MiB. A function
// of the shape only, never of the thread count, so results ignore the thread count.
int chunk_rows(int len_kv) { return std::clamp((1 << 22) / std::max(len_kv, 1), 16, 256); }
}  // namespace

GoldenResult golden_attention(const AttentionInput& in, CausalAlign align) {
  const AttentionShape& s = in.shape;
  GoldenResult r;
  r.o.assign(s.o_size(), 0.0);
  r.lse.assign(std::size_t(s.batch) * s.heads_q * s.len_q,
               -std::numeric_limits<double>::infinity());
  const double scale = in.scale();
  const int kChunk = chunk_rows(s.len_kv);
  // Row i sees keys j <= i + offset.
  const int offset = align == CausalAlign::kTopLeft ? 0 : s.len_kv - s.len_q;
  const int chunks = (s.len_q + kChunk - 1) / kChunk;
  const std::int64_t items = std::int64_t(s.batch) * s.heads_q * chunks;
  work_planned(items);  // progress display: one unit per block of query rows of a head
  // Eigen must not spawn its own threads inside ours (and its GEMM stays deterministic per call).
  Eigen::setNbThreads(1);
  // Eigen sizes its GEMM blocks from the cache sizes it detects at run time, and the blocking
  // sets the order of the sums over the keys: two machines gave SmolLM2's 1,024-key rows
  // different last bits (1e-10 relative in the metrics). Fixed sizes make the golden the same on
  // every machine; these are what Eigen 3.4 detects on the AMD EPYC the bundled results and
  // baselines were made on (L1 32 KiB, L2 512 KiB, L3 256 MiB).
  Eigen::setCpuCacheSizes(32768, 524288, 268435456);
#pragma omp parallel
  {
    RowMatD k_d, v_d, q_d, scores, out;
    std::int64_t cached_kv = -1;
    // Dynamic: the items cost about the same, but the threads of a shared machine do not always
    // run at the same speed, and a static split left one thread alone for the last 0.5 s of 2.7 s
    // (b1 h8 n4096 d128 on 2 vCPUs); each item writes its own rows, so the order changes no bit.
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t item = 0; item < items; ++item) {
      const int c = int(item % chunks);
      const int h = int((item / chunks) % s.heads_q);
      const int b = int(item / chunks / s.heads_q);
      const int hk = h / s.group();
      const std::int64_t kv_id = std::int64_t(b) * s.heads_kv + hk;
      if (kv_id != cached_kv) {
        const float* kp = in.k.data() + std::size_t(kv_id) * s.len_kv * s.head_dim;
        const float* vp = in.v.data() + std::size_t(kv_id) * s.len_kv * s.head_dim_v;
        k_d = Eigen::Map<const RowMatF>(kp, s.len_kv, s.head_dim).cast<double>();
        v_d = Eigen::Map<const RowMatF>(vp, s.len_kv, s.head_dim_v).cast<double>();
        cached_kv = kv_id;
      }
      const int i0 = c * kChunk;
      const int rows = std::min(kChunk, s.len_q - i0);
      const std::size_t row0 = (std::size_t(b) * s.heads_q + h) * s.len_q + std::size_t(i0);
      q_d = Eigen::Map<const RowMatF>(in.q.data() + row0 * s.head_dim, rows, s.head_dim)
                .cast<double>();
      scores.noalias() = q_d * k_d.transpose();
      scores *= scale;  // every entry, visible or not: one vectorized pass; masked ones are dropped
      if (in.softcap > 0) scores = in.softcap * (scores.array() / in.softcap).tanh().matrix();
      for (int i = 0; i < rows; ++i) {
        // Visible keys of a row are a range [lo, lim) (causal: j <= i + offset; a window: also
        // j > i + offset - window).
        const int lim = in.causal ? std::clamp(i0 + i + offset + 1, 0, s.len_kv) : s.len_kv;
        const int lo =
            in.causal && in.window > 0 ? std::clamp(i0 + i + offset + 1 - in.window, 0, lim) : 0;
        const int n = lim - lo;
        auto row = scores.row(i);
        if (n <= 0) {
          row.setZero();
          continue;  // no visible key: O = 0, lse stays -inf
        }
        const double m = row.segment(lo, n).maxCoeff();
        // p = exp(s - m) with Eigen's vectorized exp (its error is inside the bound measured
        // against 50-digit attention, sim/golden/README.md); the sum runs sequentially in key
        // order.
        row.segment(lo, n) = (row.segment(lo, n).array() - m).exp();
        row.head(lo).setZero();
        row.tail(s.len_kv - lim).setZero();
        double sum = 0.0;
        for (int j = lo; j < lim; ++j) sum += row(j);
        row.segment(lo, n) /= sum;
        r.lse[row0 + std::size_t(i)] = m + std::log(sum);
      }
      out.noalias() = scores * v_d;
      Eigen::Map<RowMatD>(r.o.data() + row0 * s.head_dim_v, rows, s.head_dim_v) = out;
      work_done();
    }
  }
  return r;
}

std::vector<double> golden_attention_ref(const AttentionInput& in, CausalAlign align) {
  return golden_attention(in, align).o;
}

}  // namespace attnsim
