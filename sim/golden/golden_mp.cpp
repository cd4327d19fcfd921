// Attention in 50-digit arithmetic (Boost.Multiprecision) to bound the FP64 golden's own error.
#include "sim/golden/golden_mp.hpp"

#include <boost/multiprecision/cpp_bin_float.hpp>
#include <cmath>
#include <limits>

#include "sim/golden/golden.hpp"

namespace attnsim {

namespace {
using Mp = boost::multiprecision::cpp_bin_float_50;

struct MpResult {
  std::vector<Mp> o;
  std::vector<Mp> lse;  // natural log; -inf rows are marked by `seen` = 0
  std::vector<char> seen;
};

// Plain loops in 50 significant digits: S = scale·q·k (the FP32 inputs are exact), row max over
// visible keys, p = exp(s − max), O = Σ p v / Σ p, lse = max + log Σ p.
MpResult attention_mp(const AttentionInput& in) {
  const AttentionShape& s = in.shape;
  MpResult r;
  r.o.assign(s.o_size(), Mp(0));
  r.lse.assign(std::size_t(s.batch) * s.heads_q * s.len_q, Mp(0));
  r.seen.assign(r.lse.size(), 0);
  std::vector<Mp>& o = r.o;
  const Mp scale =
      in.sm_scale != 0.0 ? Mp(in.sm_scale) : Mp(1) / boost::multiprecision::sqrt(Mp(s.head_dim));
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
          if (in.softcap > 0) sc[j] = Mp(in.softcap) * boost::multiprecision::tanh(sc[j] / Mp(in.softcap));
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
        r.lse[row] = m + boost::multiprecision::log(sum);
        r.seen[row] = 1;
      }
    }
  }
  return r;
}
}  // namespace

std::vector<double> golden_attention_mp(const AttentionInput& in) {
  const std::vector<Mp> o = attention_mp(in).o;
  std::vector<double> r(o.size());
  for (std::size_t i = 0; i < o.size(); ++i) r[i] = o[i].convert_to<double>();
  return r;
}

GoldenErrorBound golden_error_vs_mp(const AttentionInput& in) {
  const GoldenResult gr = golden_attention(in);
  const std::vector<double>& g = gr.o;
  const MpResult mr = attention_mp(in);
  const std::vector<Mp>& m = mr.o;
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
  // LSE: absolute error (it is a log); a row that sees no key must be -inf in the golden.
  Mp lse_abs = 0, lse_rel = 0;
  bool lse_ok = true;
  for (std::size_t i = 0; i < gr.lse.size(); ++i) {
    if (!mr.seen[i]) {
      lse_ok = lse_ok && std::isinf(gr.lse[i]) && gr.lse[i] < 0;
      continue;
    }
    if (!std::isfinite(gr.lse[i])) {
      lse_ok = false;
      continue;
    }
    const Mp dl = boost::multiprecision::abs(Mp(gr.lse[i]) - mr.lse[i]);
    if (dl > lse_abs) lse_abs = dl;
    const Mp mag = boost::multiprecision::abs(mr.lse[i]);
    const Mp rl = dl / (mag > Mp(1) ? mag : Mp(1));
    if (rl > lse_rel) lse_rel = rl;
  }
  GoldenErrorBound e;
  e.lse_max_abs = lse_ok ? lse_abs.convert_to<double>() : std::numeric_limits<double>::infinity();
  e.lse_max_rel = lse_ok ? lse_rel.convert_to<double>() : std::numeric_limits<double>::infinity();
  e.max_rel_elementwise = max_rel.convert_to<double>();
  e.rel_norm = den > 0 ? boost::multiprecision::sqrt(num / den).convert_to<double>() : 0.0;
  e.max_abs = max_abs.convert_to<double>();
  return e;
}

}  // namespace attnsim
