// `attnsim repro turbo` E7: long teacher-forced decode, error per step, by buffer fill, and the
// clamping of new tokens by the universal INT8 scale.
#include <algorithm>

#include "experiments/repro/turbo/turbo_repro.hpp"

namespace attnsim::turbo_repro {

std::string DriftCfg::method() const {
  std::string m = "turbo:mode=decode,prefill=" + std::to_string(prefill);
  if (scale == BufferScale::kLast) m += ",buffer_scale=last";
  if (scale == BufferScale::kOracle) m += ",buffer_scale=oracle";
  if (!compress) m += ",compress=off";
  return m;
}

std::vector<DriftJob> e7_drift(const Inputs& in, bool progress) {
  std::vector<DriftJob> drift;
  const DriftCfg cfgs[] = {{"p64_prefill", 64, BufferScale::kPrefill, true},
                           {"p64_oracle", 64, BufferScale::kOracle, true},
                           {"p64_int8", 64, BufferScale::kPrefill, false},
                           {"p256_prefill", 256, BufferScale::kPrefill, true},
                           {"p256_last", 256, BufferScale::kLast, true},
                           {"p256_oracle", 256, BufferScale::kOracle, true}};
  for (std::size_t i : in.drift)
    for (const DriftCfg& c : cfgs)
      if (c.prefill < in.all[i].in.shape.len_kv - 64) drift.push_back({i, c, {}, 0, 0, 0});
  std::vector<std::size_t> dorder(drift.size());
  for (std::size_t k = 0; k < drift.size(); ++k) dorder[k] = k;
  std::stable_sort(dorder.begin(), dorder.end(), [&](std::size_t a, std::size_t b) {
    const AttentionShape &x = in.all[drift[a].input].in.shape, &y = in.all[drift[b].input].in.shape;
    return double(x.len_kv) * x.len_kv * x.heads_q > double(y.len_kv) * y.len_kv * y.heads_q;
  });
  parallel_jobs(
      drift.size(),
      [&](std::size_t k) {
        DriftJob& j = drift[dorder[k]];
        const Input& x = in.all[j.input];
        TurboOptions o;
        o.mode = TurboMode::kDecode;
        o.prefill = j.cfg.prefill;
        o.buffer_scale = j.cfg.scale;
        o.compress = j.cfg.compress;
        o.decode_prefill_rows = false;  // the prompt's rows are not measured
        const TurboResult r = turbo_attention(x.in, o);
        j.rows = per_row(x.in, r.out.o, x.gold, j.cfg.prefill);
        long long ck = 0, cv = 0;
        for (const TurboKvCache& c : r.caches) {
          ck += c.clamped_k;
          cv += c.clamped_v;
        }
        const AttentionShape& s = x.in.shape;
        j.new_tokens = s.len_kv - j.cfg.prefill / o.bc * o.bc;
        const double slices = double(s.batch) * s.heads_kv;
        j.clamp_k = double(ck) / (double(j.new_tokens) * s.head_dim * slices);
        j.clamp_v = double(cv) / (double(j.new_tokens) * s.head_dim_v * slices);
      },
      progress, "drift");
  return drift;
}

std::string e7_drift_rows(Summary& s, const Inputs& in, const std::vector<DriftJob>& drift) {
  std::string notes;
  notes +=
      "E7 decode drift: rel_l1 mean over the first / last 64 steps, by buffer fill (t mod 64 "
      "in 0-7 / 56-63), clamped new-token elements of K / V:\n";
  for (const DriftJob& j : drift) {
    double first = 0, last = 0, lo = 0, hi = 0;
    int nf = 0, nl = 0, nlo = 0, nhi = 0;
    const int n = int(j.rows.size());
    for (int i = 0; i < n; ++i) {
      const double e = j.rows[std::size_t(i)].rel_l1;
      const int t = j.cfg.prefill + i;
      if (i < 64) first += e, ++nf;
      if (i >= n - 64) last += e, ++nl;
      if (t % 64 < 8) lo += e, ++nlo;
      if (t % 64 >= 56) hi += e, ++nhi;
    }
    first /= std::max(1, nf);
    last /= std::max(1, nl);
    lo /= std::max(1, nlo);
    hi /= std::max(1, nhi);
    const std::string src = in.all[j.input].dataset == "smollm2"
                                ? in.all[j.input].name.substr(8)  // layer_NN
                                : in.all[j.input].dataset;
    const std::string key = "drift_" + src + "_" + j.cfg.label;
    s.add(key + "_rel_l1_first64", first);
    s.add(key + "_rel_l1_last64", last);
    s.add(key + "_rel_l1_fill0to7", lo);
    s.add(key + "_rel_l1_fill56to63", hi);
    s.add(key + "_clamp_rate_k", j.clamp_k);
    s.add(key + "_clamp_rate_v", j.clamp_v);
    notes += fmt("  %-16s %-13s %5d steps  %.4e -> %.4e  fill %.4e / %.4e  clamp %.2e / %.2e\n",
                 src.c_str(), j.cfg.label.c_str(), n, first, last, lo, hi, j.clamp_k, j.clamp_v);
  }
  notes += "  (the paper prints no figure: §3.3 says clamping \"ensure[s] stability\")";

  return notes;
}

ReproTable drift_table(const std::vector<DriftJob>& jobs, const Inputs& in) {
  ReproTable t;
  t.title =
      "turbo E7: error of every decode step against FP64 golden (all query heads of the step "
      "together), teacher-forced from the prompt on";
  t.columns = {{"input", 's', "dump and layer, or the synthetic drifting-scale sequence"},
               {"label", 's', "configuration"},
               {"method", 's', "attnsim method string"},
               {"prefill", 'i', "prompt tokens"},
               {"buffer_scale", 's', "universal INT8 scale of new tokens: prefill, last, oracle"},
               {"compress", 'i', "1: BPQ 4-bit cache; 0: INT8 blocks kept (stage 1 only)"},
               {"step", 'i', "token position t of the query (and of the newest key)"},
               {"t_mod", 'i', "t mod 64: tokens in the buffer block before t (buffer fill)"},
               {"cosine", 'f', "cosine similarity of the step's output (all heads)"},
               {"rel_l1", 'f', "relative L1"},
               {"rmse", 'f', "RMSE"},
               {"max_abs", 'f', "largest absolute error"}};
  for (const DriftJob& j : jobs) {
    const std::string bs = j.cfg.scale == BufferScale::kPrefill ? "prefill"
                           : j.cfg.scale == BufferScale::kLast  ? "last"
                                                                : "oracle";
    for (std::size_t i = 0; i < j.rows.size(); ++i) {
      const int step = j.cfg.prefill + int(i);
      const ErrorMetrics& e = j.rows[i];
      t.add_row({{in.all[j.input].name},
                 {j.cfg.label},
                 {j.cfg.method()},
                 {"", double(j.cfg.prefill)},
                 {bs},
                 {"", j.cfg.compress ? 1.0 : 0.0},
                 {"", double(step)},
                 {"", double(step % 64)},
                 {"", e.cosine},
                 {"", e.rel_l1},
                 {"", e.rmse},
                 {"", e.max_abs}});
    }
  }
  return t;
}

}  // namespace attnsim::turbo_repro
