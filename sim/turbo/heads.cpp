// Head-wise mixed precision (heads.hpp): the selectors' statistics in FP64 and the ranking of
// Eq. 12; turbo_head_bits of turbo.hpp.
#include "sim/turbo/heads.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <string>

namespace attnsim {

namespace {

void check_input(const AttentionInput& in, int prefill) {
  const AttentionShape& s = in.shape;
  if (!s.valid()) throw std::invalid_argument("head selection: invalid shape");
  if (in.k.size() != s.k_size() || in.v.size() != s.v_size() || in.q.size() != s.q_size())
    throw std::invalid_argument("head selection: q, k, v sizes do not match the shape");
  if (prefill < 1 || prefill > s.len_kv)
    throw std::invalid_argument("head selection: prefill must be in 1.." +
                                std::to_string(s.len_kv) + " (got " + std::to_string(prefill) +
                                ")");
}

// The range statistics of one KV head's K or V over tokens [0, prefill) of every batch entry.
struct RangeStats {
  double gap = 0;  // max_{t,c} − min_{t,c}
  double std = 0;  // population std over channels of the per-channel gaps
};

RangeStats range_stats(const std::vector<float>& x, const AttentionShape& s, int dim, int head,
                       int prefill) {
  std::vector<double> mx(std::size_t(dim), -std::numeric_limits<double>::infinity());
  std::vector<double> mn(std::size_t(dim), std::numeric_limits<double>::infinity());
  for (int b = 0; b < s.batch; ++b) {
    const float* base = x.data() + (std::size_t(b) * s.heads_kv + head) * s.len_kv * dim;
    for (int t = 0; t < prefill; ++t) {
      const float* row = base + std::size_t(t) * dim;
      for (int c = 0; c < dim; ++c) {
        mx[std::size_t(c)] = std::max(mx[std::size_t(c)], double(row[c]));
        mn[std::size_t(c)] = std::min(mn[std::size_t(c)], double(row[c]));
      }
    }
  }
  RangeStats r;
  const double all_max = *std::max_element(mx.begin(), mx.end());
  const double all_min = *std::min_element(mn.begin(), mn.end());
  r.gap = all_max - all_min;
  // Two passes (mean, then squared deviations): the population std of Eq. 11's std^(h).
  double mean = 0;
  for (int c = 0; c < dim; ++c) mean += mx[std::size_t(c)] - mn[std::size_t(c)];
  mean /= dim;
  double var = 0;
  for (int c = 0; c < dim; ++c) {
    const double e = (mx[std::size_t(c)] - mn[std::size_t(c)]) - mean;
    var += e * e;
  }
  r.std = std::sqrt(var / dim);
  return r;
}

double range_score(const RangeStats& r, HeadSelector sel) {
  switch (sel) {
    case HeadSelector::kPriority:
      return r.gap * r.std;  // Eq. 11
    case HeadSelector::kMinMax:
      return r.gap;
    case HeadSelector::kVariation:
      return r.std;
    case HeadSelector::kEntropy:
      break;
  }
  return 0;
}

// Mean FP64 softmax entropy of each KV head's query group over the prompt (heads.hpp kEntropy).
std::vector<double> head_entropy(const AttentionInput& in, int prefill) {
  const AttentionShape& s = in.shape;
  const int off = s.len_kv - s.len_q;  // position of query row 0 (bottom-right alignment)
  // Prompt queries: rows at positions < prefill. None (a decode-only input): every row.
  const int prompt_rows = std::clamp(prefill - off, 0, s.len_q);
  const int rows = prompt_rows > 0 ? prompt_rows : s.len_q;
  const int d = s.head_dim;
  const double scale = in.scale();
  const int slices = s.batch * s.heads_q;
  // Per query slice: the sum of its rows' entropies and their count, reduced in slice order so
  // the result does not depend on the thread count.
  std::vector<double> sum(std::size_t(slices), 0.0);
  std::vector<long long> count(std::size_t(slices), 0);
#pragma omp parallel
  {
    std::vector<double> sc(static_cast<std::size_t>(prefill));
#pragma omp for schedule(dynamic)
    for (int sq = 0; sq < slices; ++sq) {
      const int b = sq / s.heads_q, h = sq % s.heads_q;
      const int hk = h / s.group();
      const float* qs = in.q.data() + std::size_t(sq) * s.len_q * d;
      const float* ks = in.k.data() + (std::size_t(b) * s.heads_kv + hk) * s.len_kv * d;
      for (int i = 0; i < rows; ++i) {
        const float* qi = qs + std::size_t(i) * d;
        int n = 0;
        double m = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < prefill; ++j) {
          if (!in.visible(i, j)) break;  // causal: the visible keys are a prefix
          const float* kj = ks + std::size_t(j) * d;
          double acc = 0;
          for (int c = 0; c < d; ++c) acc += double(qi[c]) * double(kj[c]);
          sc[std::size_t(j)] = acc * scale;
          m = std::max(m, sc[std::size_t(j)]);
          ++n;
        }
        if (n == 0) continue;  // a row that sees no key has no distribution
        // p_j = e^{s_j − m} / z, so −Σ p ln p = ln z − Σ p_j (s_j − m).
        double z = 0, ps = 0;
        for (int j = 0; j < n; ++j) {
          const double x = sc[std::size_t(j)] - m;
          const double e = std::exp(x);
          z += e;
          ps += e * x;
        }
        sum[std::size_t(sq)] += std::log(z) - ps / z;
        ++count[std::size_t(sq)];
      }
    }
  }
  std::vector<double> ent(std::size_t(s.heads_kv), 0.0);
  std::vector<long long> n(std::size_t(s.heads_kv), 0);
  for (int sq = 0; sq < slices; ++sq) {
    const int hk = (sq % s.heads_q) / s.group();
    ent[std::size_t(hk)] += sum[std::size_t(sq)];
    n[std::size_t(hk)] += count[std::size_t(sq)];
  }
  for (int h = 0; h < s.heads_kv; ++h)
    if (n[std::size_t(h)] > 0) ent[std::size_t(h)] /= double(n[std::size_t(h)]);
  return ent;
}

}  // namespace

HeadScores head_scores(const AttentionInput& in, int prefill, HeadSelector selector) {
  check_input(in, prefill);
  const AttentionShape& s = in.shape;
  HeadScores r;
  if (selector == HeadSelector::kEntropy) {
    r.k = head_entropy(in, prefill);
    r.v = r.k;
    return r;
  }
  r.k.resize(std::size_t(s.heads_kv));
  r.v.resize(std::size_t(s.heads_kv));
  for (int h = 0; h < s.heads_kv; ++h) {
    r.k[std::size_t(h)] = range_score(range_stats(in.k, s, s.head_dim, h, prefill), selector);
    r.v[std::size_t(h)] = range_score(range_stats(in.v, s, s.head_dim_v, h, prefill), selector);
  }
  return r;
}

HeadBits head_bits_from_scores(const HeadScores& scores, HeadSelector selector, HeadScope scope,
                               int n_h) {
  const int heads = int(scores.k.size());
  if (int(scores.v.size()) != heads)
    throw std::invalid_argument("head selection: K and V scores differ in length");
  const bool separate = scope == HeadScope::kKvSeparate;
  const int candidates = separate ? 2 * heads : heads;
  if (n_h < 0 || n_h > candidates)
    throw std::invalid_argument("head selection: n_h must be in 0.." + std::to_string(candidates) +
                                (separate ? " (K and V ranked separately)" : "") + " (got " +
                                std::to_string(n_h) + ")");
  // Importance of each candidate (heads.hpp): the score, or the negated entropy.
  const double sign = selector == HeadSelector::kEntropy ? -1.0 : 1.0;
  std::vector<double> imp(static_cast<std::size_t>(candidates));
  for (int h = 0; h < heads; ++h) {
    const double k = scores.k[std::size_t(h)], v = scores.v[std::size_t(h)];
    if (separate) {
      imp[std::size_t(2 * h)] = sign * k;
      imp[std::size_t(2 * h + 1)] = sign * v;
    } else {
      imp[std::size_t(h)] = sign * (selector == HeadSelector::kEntropy ? k : k + v);
    }
  }
  std::vector<int> order(static_cast<std::size_t>(candidates));
  std::iota(order.begin(), order.end(), 0);
  // Eq. 12: rank ascending; equal importance keeps index order (stable).
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return imp[std::size_t(a)] < imp[std::size_t(b)]; });
  HeadBits bits;
  bits.k.assign(std::size_t(heads), 4);
  bits.v.assign(std::size_t(heads), 4);
  for (int r = 0; r < n_h; ++r) {
    const int c = order[std::size_t(r)];
    if (separate) {
      (c % 2 == 0 ? bits.k : bits.v)[std::size_t(c / 2)] = 2;
    } else {
      bits.k[std::size_t(c)] = 2;
      bits.v[std::size_t(c)] = 2;
    }
  }
  return bits;
}

HeadBits select_head_bits(const AttentionInput& in, int prefill, HeadSelector selector,
                          HeadScope scope, int n_h) {
  check_input(in, prefill);
  // n_h before the statistics: a bad configuration fails fast.
  const int candidates =
      scope == HeadScope::kKvSeparate ? 2 * in.shape.heads_kv : in.shape.heads_kv;
  if (n_h < 0 || n_h > candidates) {
    HeadScores none;
    none.k.assign(std::size_t(in.shape.heads_kv), 0.0);
    none.v = none.k;
    return head_bits_from_scores(none, selector, scope, n_h);  // throws the one-line message
  }
  return head_bits_from_scores(head_scores(in, prefill, selector), selector, scope, n_h);
}

HeadBits turbo_head_bits(const AttentionInput& in, const TurboOptions& o, int prefill) {
  const int h = in.shape.heads_kv;
  if (o.kv_bits == 4 || o.kv_bits == 2) {
    if (h < 1) throw std::invalid_argument("turbo: invalid shape (heads_kv < 1)");
    return HeadBits{std::vector<int>(std::size_t(h), o.kv_bits),
                    std::vector<int>(std::size_t(h), o.kv_bits)};
  }
  if (o.kv_bits != 0)
    throw std::invalid_argument("turbo: kv_bits must be 4, 2 or 0 (mixed), got " +
                                std::to_string(o.kv_bits));
  return select_head_bits(in, prefill, o.selector, o.nh_scope, o.n_h);
}

}  // namespace attnsim
