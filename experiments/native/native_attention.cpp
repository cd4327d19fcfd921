// The native FP32 attention of `attnsim bench` (native_attention.hpp), built alone as a shared
// library with -march=native and hidden symbols (experiments/CMakeLists.txt): Eigen's and the
// standard library's inline functions instantiated here for the host CPU stay inside it, so no
// other translation unit can be linked against an AVX-512 copy of them. Built a second time for
// AVX2 + FMA + F16C as native_attention_avx2 (ATTNSIM_NATIVE_NAME) on x86-64: the anchor of a
// `--isa avx2` run, what an AVX2-only CPU's build of this file computes.
#include "experiments/native/native_attention.hpp"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>

namespace attnsim {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMatrix>;
using Map = Eigen::Map<RowMatrix>;

constexpr int kRows = 128;  // query rows per step

}  // namespace

#ifndef ATTNSIM_NATIVE_NAME
#define ATTNSIM_NATIVE_NAME native_attention
#endif

__attribute__((visibility("default"))) void ATTNSIM_NATIVE_NAME(
    const float* q, const float* k, const float* v, float* o, int batch, int heads_q, int heads_kv,
    int len_q, int len_kv, int d, int dv, bool causal, double sm_scale) {
  Eigen::setNbThreads(1);
  const float scale = float(sm_scale);
  RowMatrix s(kRows, len_kv);
  const int group = heads_q / heads_kv;
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads_q; ++h) {
      const std::size_t sq = std::size_t(b) * heads_q + h, skv = std::size_t(b) * heads_kv + h / group;
      const ConstMap qm(q + sq * len_q * d, len_q, d);
      const ConstMap km(k + skv * len_kv * d, len_kv, d);
      const ConstMap vm(v + skv * len_kv * dv, len_kv, dv);
      Map om(o + sq * len_q * dv, len_q, dv);
      for (int i0 = 0; i0 < len_q; i0 += kRows) {
        const int rows = std::min(kRows, len_q - i0);
        // Keys any row of the step can see (bottom-right causal alignment).
        const int keys = causal ? std::clamp(i0 + rows + len_kv - len_q, 0, len_kv) : len_kv;
        if (keys == 0) {
          om.middleRows(i0, rows).setZero();
          continue;
        }
        auto sb = s.topLeftCorner(rows, keys);
        sb.noalias() = qm.middleRows(i0, rows) * km.topRows(keys).transpose();
        for (int r = 0; r < rows; ++r) {
          const int seen = causal ? std::clamp(i0 + r + 1 + len_kv - len_q, 0, keys) : keys;
          auto row = sb.row(r);
          if (seen == 0) {
            row.setZero();
            continue;
          }
          auto vis = row.head(seen).array();
          vis *= scale;
          const float m = vis.maxCoeff();
          vis = (vis - m).exp();
          vis /= vis.sum();
          row.tail(keys - seen).setZero();
        }
        om.middleRows(i0, rows).noalias() = sb * vm.topRows(keys);
      }
    }
}

}  // namespace attnsim
