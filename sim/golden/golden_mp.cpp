// Attention in 50-digit arithmetic (Boost.Multiprecision) to bound the FP64 golden's own error.
#include "sim/golden/golden_mp.hpp"

#include <boost/multiprecision/cpp_bin_float.hpp>
#include <cmath>

#include "sim/golden/golden.hpp"

namespace attnsim {

namespace {
using Mp = boost::multiprecision::cpp_bin_float_50;

std::vector<Mp> attention_mp(const AttentionInput& in) {
  const AttentionShape& s = in.shape;
  std::vector<Mp> o(s.o_size(), Mp(0));
  const Mp scale = in.sm_scale != 0.0 ? Mp(in.sm_scale) : Mp(1) / boost::multiprecision::sqrt(Mp(s.head_dim));
  std::vector<Mp> sc(std::size_t(s.len_kv));
  std::vector<char> vis(std::size_t(s.len_kv));
  for (int b = 0; b < s.batch; ++b) {
    for (int h = 0; h < s.heads_q; ++h) {
      const std::size_t kv = std::size_t(b) * s.heads_kv + std::size_t(h / s.group());
      for (int i = 0; i < s.len_q; ++i) {
        const std::size_t row = (std::size_t(b) * s.heads_q + h) * s.len_q + std::size_t(i);
        bool any = false;
        Mp m = 0;
        for (int j = 0; j < s.len_kv; ++j) {
          vis[j] = in.visible(i, j);
          if (!vis[j]) continue;
          Mp dot = 0;
          for (int c = 0; c < s.head_dim; ++c) {
            dot += Mp(in.q[row * s.head_dim + c]) * Mp(in.k[(kv * s.len_kv + j) * s.head_dim + c]);
          }
          sc[j] = dot * scale;
          if (!any || sc[j] > m) m = sc[j];
          any = true;
        }
        if (!any) continue;
        Mp sum = 0;
        for (int j = 0; j < s.len_kv; ++j) {
          if (!vis[j]) continue;
          sc[j] = boost::multiprecision::exp(sc[j] - m);
          sum += sc[j];
        }
        for (int c = 0; c < s.head_dim_v; ++c) {
          Mp acc = 0;
          for (int j = 0; j < s.len_kv; ++j) {
            if (vis[j]) acc += sc[j] * Mp(in.v[(kv * s.len_kv + j) * s.head_dim_v + c]);
          }
          o[row * s.head_dim_v + c] = acc / sum;
        }
      }
    }
  }
  return o;
}
}  // namespace

std::vector<double> golden_attention_mp(const AttentionInput& in) {
  const std::vector<Mp> o = attention_mp(in);
  std::vector<double> r(o.size());
  for (std::size_t i = 0; i < o.size(); ++i) r[i] = o[i].convert_to<double>();
  return r;
}

GoldenErrorBound golden_error_vs_mp(const AttentionInput& in) {
  const std::vector<double> g = golden_attention_ref(in);
  const std::vector<Mp> m = attention_mp(in);
  Mp num = 0, den = 0, max_rel = 0, max_abs = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const Mp d = boost::multiprecision::abs(Mp(g[i]) - m[i]);
    num += d * d;
    den += m[i] * m[i];
    const Mp mag = boost::multiprecision::abs(m[i]);
    const Mp rel = d / (mag > Mp(1e-300) ? mag : Mp(1e-300));
    if (rel > max_rel) max_rel = rel;
    if (d > max_abs) max_abs = d;
  }
  GoldenErrorBound e;
  e.max_rel_elementwise = max_rel.convert_to<double>();
  e.rel_norm = den > 0 ? boost::multiprecision::sqrt(num / den).convert_to<double>() : 0.0;
  e.max_abs = max_abs.convert_to<double>();
  return e;
}

}  // namespace attnsim
