// numerics/softmax_state against FP64 golden: split-KV states merged (LeanAttention/flash-decoding
// style) reproduce attention, and their LSE matches golden's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>

#include "numerics/metrics.hpp"
#include "numerics/softmax_state.hpp"
#include "sim/golden/golden.hpp"
#include "tests/sim/random_input.hpp"

namespace attnsim {
namespace {

TEST(SoftmaxStateVsGolden, SplitKvMergeReproducesAttention) {
  AttentionShape s{1, 2, 1, 24, 100, 64, 32};
  const AttentionInput in = simtest::random_input(s, true, 21);
  const GoldenResult g = golden_attention(in);
  const double scale = in.scale();
  // Scores in flashinfer's convention (pre-scaled by sm_scale·log2 e, base 2, ExpModel{} default).
  const double to_log2 = scale * 1.4426950408889634074;
  const int splits[] = {0, 13, 40, 41, 77, 100};  // uneven chunks, one of a single key
  for (const char* mode : {"fp64", "fp32"}) {
    std::vector<double> o(s.o_size());
    std::vector<double> lse(std::size_t(s.heads_q) * s.len_q);
    for (int h = 0; h < s.heads_q; ++h) {
      for (int i = 0; i < s.len_q; ++i) {
        const std::size_t row = std::size_t(h) * s.len_q + i;
        auto run = [&](auto zero) {
          using T = decltype(zero);
          SoftmaxState<T> total(s.head_dim_v);
          // Merge the chunks in reverse order (as a tree reduction might), each built by update.
          for (int c = 4; c >= 0; --c) {
            SoftmaxState<T> part(s.head_dim_v);
            std::vector<T> sc;
            for (int j = splits[c]; j < splits[c + 1]; ++j) {
              double dot = 0;
              for (int d = 0; d < s.head_dim; ++d)
                dot += double(in.q[row * s.head_dim + d]) * in.k[std::size_t(j) * s.head_dim + d];
              sc.push_back(in.visible(i, j) ? T(dot * to_log2) : -T(INFINITY));
            }
            part.update(sc.data(), int(sc.size()),
                        in.v.data() + std::size_t(splits[c]) * s.head_dim_v, s.head_dim_v,
                        ExpModel<T>{});
            total.merge(part);
          }
          const std::vector<T> out = total.normalize();
          for (int c = 0; c < s.head_dim_v; ++c) o[row * s.head_dim_v + c] = double(out[c]);
          lse[row] = double(total.lse(T(std::log(2.0))));
        };
        if (std::string(mode) == "fp64") {
          run(0.0);
        } else {
          run(0.0f);
        }
      }
    }
    const double e = error_metrics(o, g.o).rel_fro;
    double lse_err = 0;
    for (std::size_t r = 0; r < lse.size(); ++r)
      lse_err = std::max(lse_err, std::abs(lse[r] - g.lse[r]));
    std::printf("[ state-vs-golden ] %s rel_fro %.3e  lse max abs %.3e\n", mode, e, lse_err);
    if (std::string(mode) == "fp64") {
      EXPECT_LT(e, 1e-14);
      EXPECT_LT(lse_err, 1e-13);
    } else {
      EXPECT_LT(e, 1e-6);
      EXPECT_LT(lse_err, 5e-6);
    }
  }
}

}  // namespace
}  // namespace attnsim
