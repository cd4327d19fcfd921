// Varlen batches (varlen.hpp).
#include "experiments/io/varlen.hpp"

#include <algorithm>
#include <memory>

#include "experiments/common/error.hpp"

namespace attnsim {

std::vector<LaunchSeq> varlen_sequences(const std::vector<std::int64_t>& cu_q,
                                        const std::vector<std::int64_t>& cu_k, int total_q,
                                        int total_kv, const std::string& where) {
  if (cu_q.size() != cu_k.size() || cu_q.size() < 2)
    throw UsageError(where + ": cu_seqlens_q and cu_seqlens_k need the same length >= 2 (one more "
                     "than the sequences), got " + std::to_string(cu_q.size()) + " and " +
                     std::to_string(cu_k.size()));
  if (cu_q.front() != 0 || cu_k.front() != 0)
    throw UsageError(where + ": cu_seqlens_q and cu_seqlens_k must start at 0");
  if (cu_q.back() != total_q || cu_k.back() != total_kv)
    throw UsageError(where + ": cu_seqlens end at " + std::to_string(cu_q.back()) + " and " +
                     std::to_string(cu_k.back()) + "; q and k hold " + std::to_string(total_q) +
                     " and " + std::to_string(total_kv) + " tokens");
  std::vector<LaunchSeq> r;
  for (std::size_t s = 0; s + 1 < cu_q.size(); ++s) {
    const std::int64_t q = cu_q[s + 1] - cu_q[s], k = cu_k[s + 1] - cu_k[s];
    if (q < 1 || k < q)
      throw UsageError(where + ": sequence " + std::to_string(s) + " has " + std::to_string(q) +
                       " queries and " + std::to_string(k) +
                       " keys (needs 1 <= queries <= keys: its queries are its last tokens)");
    r.push_back(LaunchSeq{int(q), int(k)});
  }
  return r;
}

namespace {

std::size_t offset(const std::vector<LaunchSeq>& seqs, int s, bool keys) {
  std::size_t o = 0;
  for (int i = 0; i < s; ++i) o += std::size_t(keys ? seqs[std::size_t(i)].len_kv : seqs[std::size_t(i)].len_q);
  return o;
}

}  // namespace

AttentionInput varlen_sequence(const AttentionInput& packed, const std::vector<LaunchSeq>& seqs,
                               int s, int sms) {
  const AttentionShape& p = packed.shape;
  const LaunchSeq t = seqs[std::size_t(s)];
  AttentionInput in;
  in.shape = AttentionShape{1, p.heads_q, p.heads_kv, t.len_q, t.len_kv, p.head_dim, p.head_dim_v};
  in.causal = packed.causal;
  in.sm_scale = packed.sm_scale;
  in.dtype = packed.dtype;
  in.window = packed.window;
  in.softcap = packed.softcap;
  const std::size_t q0 = offset(seqs, s, false), k0 = offset(seqs, s, true);
  const std::size_t d = std::size_t(p.head_dim), dv = std::size_t(p.head_dim_v);
  for (int h = 0; h < p.heads_q; ++h) {
    const auto src = packed.q.begin() + std::ptrdiff_t((std::size_t(h) * p.len_q + q0) * d);
    in.q.insert(in.q.end(), src, src + std::ptrdiff_t(std::size_t(t.len_q) * d));
  }
  for (int h = 0; h < p.heads_kv; ++h) {
    const auto ks = packed.k.begin() + std::ptrdiff_t((std::size_t(h) * p.len_kv + k0) * d);
    in.k.insert(in.k.end(), ks, ks + std::ptrdiff_t(std::size_t(t.len_kv) * d));
    const auto vs = packed.v.begin() + std::ptrdiff_t((std::size_t(h) * p.len_kv + k0) * dv);
    in.v.insert(in.v.end(), vs, vs + std::ptrdiff_t(std::size_t(t.len_kv) * dv));
  }
  auto l = std::make_shared<Launch>();
  l->sms = sms;
  l->seqs = seqs;  // in launch order: partitions that deal tiles in order see it as it ran
  l->target_index = s;
  in.launch = l;
  return in;
}

void varlen_place(std::vector<double>& packed_o, const AttentionShape& packed,
                  const std::vector<LaunchSeq>& seqs, int s, const std::vector<double>& o) {
  const std::size_t q0 = offset(seqs, s, false), dv = std::size_t(packed.head_dim_v);
  const std::size_t lq = std::size_t(seqs[std::size_t(s)].len_q);
  for (int h = 0; h < packed.heads_q; ++h)
    std::copy_n(o.begin() + std::ptrdiff_t(std::size_t(h) * lq * dv), lq * dv,
                packed_o.begin() + std::ptrdiff_t((std::size_t(h) * packed.len_q + q0) * dv));
}

std::vector<double> varlen_take(const std::vector<double>& packed_o, const AttentionShape& packed,
                                const std::vector<LaunchSeq>& seqs, int s) {
  const std::size_t q0 = offset(seqs, s, false), dv = std::size_t(packed.head_dim_v);
  const std::size_t lq = std::size_t(seqs[std::size_t(s)].len_q);
  std::vector<double> o;
  for (int h = 0; h < packed.heads_q; ++h) {
    const auto at = packed_o.begin() + std::ptrdiff_t((std::size_t(h) * packed.len_q + q0) * dv);
    o.insert(o.end(), at, at + std::ptrdiff_t(lq * dv));
  }
  return o;
}

MethodOutput run_varlen(
    const MethodConfig& m, const AttentionInput& packed, const std::vector<LaunchSeq>& seqs,
    int sms,
    const std::function<void(int s, const AttentionInput&, const MethodOutput&)>& each) {
  const AttentionShape& p = packed.shape;
  MethodOutput out;
  out.o.assign(std::size_t(p.heads_q) * p.len_q * p.head_dim_v, 0.0);
  bool lse = true;
  std::vector<double> packed_lse(std::size_t(p.heads_q) * p.len_q, 0.0);
  for (int s = 0; s < int(seqs.size()); ++s) {
    const AttentionInput one = varlen_sequence(packed, seqs, s, sms);
    const MethodOutput o = m.run(one);
    if (each) each(s, one, o);
    varlen_place(out.o, p, seqs, s, o.o);
    out.format = o.format;
    out.resolved = o.resolved;
    if (o.lse.empty()) {
      lse = false;
    } else if (lse) {
      AttentionShape one = p;
      one.head_dim_v = 1;
      varlen_place(packed_lse, one, seqs, s, o.lse);
    }
  }
  if (lse) out.lse = std::move(packed_lse);
  return out;
}

}  // namespace attnsim
