// `attnsim verify` (verify.hpp): a kernel's output against the simulator's bits and FP64 golden.
#include "experiments/analysis/verify.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

#include "experiments/common/error.hpp"
#include "experiments/common/warning.hpp"
#include "formats/encoding.hpp"
#include "sim/golden/golden.hpp"

namespace attnsim {

namespace {

UlpFormat ulp_format_of(const std::string& f) {
  if (f == "fp16") return UlpFormat::kFp16;
  if (f == "bf16") return UlpFormat::kBf16;
  return UlpFormat::kFp32;
}

Encoding encoding_of_format(const std::string& f) {
  if (f == "fp16") return Encoding::kFp16;
  if (f == "bf16") return Encoding::kBf16;
  return Encoding::kFp32;
}

// One unit in the last place of `f` at magnitude |x| (the spacing there; subnormal spacing below
// the normal range).
double ulp_at(const std::string& f, double x) {
  const int p = f == "fp16" ? 11 : f == "bf16" ? 8 : 24;
  const int emin = f == "fp16" ? -14 : -126;
  const double a = std::fabs(x);
  const int e = a > 0 ? std::max(std::ilogb(a), emin) : emin;
  return std::ldexp(1.0, e - (p - 1));
}

bool same_value(double a, double b) {
  if (a != a || b != b) return a != a && b != b;
  return a == b && std::signbit(a) == std::signbit(b);
}

std::string where(int b, int h, int r, int c) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "(batch %d, head %d, row %d, column %d)", b, h, r, c);
  return buf;
}

// FP64 attention of one row with the keys [skip0, skip1) left out (a planted or real bug that
// drops a tile of keys), by the textbook formula.
std::vector<double> row_attention(const AttentionInput& in, int batch, int head, int row,
                                  int skip0, int skip1, bool top_left) {
  const AttentionShape& s = in.shape;
  const int hk = head / s.group();
  const float* q = in.q.data() + ((std::size_t(batch) * s.heads_q + head) * s.len_q + row) * s.head_dim;
  const std::size_t kv0 = (std::size_t(batch) * s.heads_kv + hk) * s.len_kv;
  const int off = top_left ? 0 : s.len_kv - s.len_q;
  std::vector<double> sc(std::size_t(s.len_kv), -std::numeric_limits<double>::infinity());
  double m = -std::numeric_limits<double>::infinity();
  for (int j = 0; j < s.len_kv; ++j) {
    if ((in.causal && j > row + off) || (j >= skip0 && j < skip1)) continue;
    const float* k = in.k.data() + (kv0 + j) * s.head_dim;
    double d = 0;
    for (int x = 0; x < s.head_dim; ++x) d += double(q[x]) * double(k[x]);
    sc[std::size_t(j)] = d * in.scale();
    m = std::max(m, sc[std::size_t(j)]);
  }
  std::vector<double> o(std::size_t(s.head_dim_v), 0.0);
  if (m == -std::numeric_limits<double>::infinity()) return o;
  double l = 0;
  for (int j = 0; j < s.len_kv; ++j) {
    if (sc[std::size_t(j)] == -std::numeric_limits<double>::infinity()) continue;
    const double p = std::exp(sc[std::size_t(j)] - m);
    l += p;
    const float* v = in.v.data() + (kv0 + j) * s.head_dim_v;
    for (int c = 0; c < s.head_dim_v; ++c) o[std::size_t(c)] += p * double(v[c]);
  }
  for (double& x : o) x /= l;
  return o;
}

bool row_inputs_nonfinite(const AttentionInput& in, int batch, int head, int row, int visible) {
  const AttentionShape& s = in.shape;
  const int hk = head / s.group();
  const float* q = in.q.data() + ((std::size_t(batch) * s.heads_q + head) * s.len_q + row) * s.head_dim;
  for (int x = 0; x < s.head_dim; ++x)
    if (!std::isfinite(q[x])) return true;
  const std::size_t kv0 = (std::size_t(batch) * s.heads_kv + hk) * s.len_kv;
  for (int j = 0; j < visible; ++j) {
    for (int x = 0; x < s.head_dim; ++x)
      if (!std::isfinite(in.k[(kv0 + j) * s.head_dim + x])) return true;
    for (int x = 0; x < s.head_dim_v; ++x)
      if (!std::isfinite(in.v[(kv0 + j) * s.head_dim_v + x])) return true;
  }
  return false;
}

struct Candidate {
  MethodConfig m;
  MethodOutput out;
};

}  // namespace

void check_kernel_output(const AttentionInput& in, const KernelOutput& k, bool allow_nonfinite) {
  if (k.format != "fp16" && k.format != "bf16" && k.format != "fp32")
    throw UsageError("kernel output format '" + k.format + "' is not fp16, bf16 or fp32");
  const AttentionShape& s = in.shape;
  if (k.o.size() != s.o_size())
    throw UsageError("kernel output has " + std::to_string(k.o.size()) + " elements; the input's " +
                     "shape [batch " + std::to_string(s.batch) + ", heads_q " +
                     std::to_string(s.heads_q) + ", tokens " + std::to_string(s.len_q) +
                     ", head_dim_v " + std::to_string(s.head_dim_v) + "] needs " +
                     std::to_string(s.o_size()));
  if (!k.lse.empty() && k.lse.size() != std::size_t(s.batch) * s.heads_q * s.len_q)
    throw UsageError("kernel lse has " + std::to_string(k.lse.size()) + " elements; expected " +
                     std::to_string(std::size_t(s.batch) * s.heads_q * s.len_q) +
                     " ([batch, heads_q, tokens])");
  const Encoding e = encoding_of_format(k.format);
  constexpr Policy kExact{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};
  for (std::size_t i = 0; i < k.o.size(); ++i) {
    const double x = k.o[i];
    const int dv = s.head_dim_v;
    const std::size_t row = i / std::size_t(dv);
    const int b = int(row / (std::size_t(s.heads_q) * s.len_q)),
              h = int(row / s.len_q % s.heads_q), r = int(row % s.len_q), c = int(i % dv);
    if (!std::isfinite(x)) {
      if (allow_nonfinite) continue;
      throw UsageError(std::string("kernel output holds ") + (x != x ? "NaN" : "Inf") + " at " +
                       where(b, h, r, c) + " (--allow-nonfinite to judge it anyway)");
    }
    if (double(decode_float_bits(e, encode_float_bits(e, float(x), kExact))) != x)
      throw UsageError("kernel output value " + std::to_string(x) + " at " + where(b, h, r, c) +
                       " is not a " + k.format + " value");
  }
}

std::vector<std::string> verify_candidates(const AttentionInput& in) {
  std::vector<std::string> c;
  for (const MethodSpec& s : method_registry())
    if (s.name != "golden") c.push_back(s.name);
  const std::string dt = in.dtype == "float16" ? ",in=fp16" : ",in=bf16";
  for (const char* p :
       {"sage2:arch=sm80,pv_accum=fp32", "sage2:arch=sm80,pv_accum=fp16+fp32",
        "sage2:arch=sm80,pv_accum=fp16", "sage2:arch=sm89,pv_accum=fp32,target=h100",
        "sage2:arch=sm89,pv_accum=fp32+fp32,target=h100",
        "sage2:arch=sm89,pv_accum=fp32+fp16,target=h100", "sage2:arch=sm90"})
    c.push_back(std::string(p) + dt);
  c.push_back("sage1:smooth_k=1" + dt);
  return c;
}

VerifyReport verify_kernel(const AttentionInput& in, const KernelOutput& k,
                           const VerifyOptions& opt) {
  check_kernel_output(in, k, opt.allow_nonfinite);
  if (!(opt.band >= 1.0) || !std::isfinite(opt.band))
    throw UsageError("--band must be a number >= 1 (FlashAttention's rule: 2)");
  VerifyReport r;
  r.format = k.format;
  // The method: the one given, or the candidates with the kernel's output format (the first
  // bit-identical one, else the one with the most identical elements).
  std::vector<Candidate> cands;
  if (!opt.method.empty()) {
    Candidate c{parse_method(opt.method), {}};
    StageCounters cnt;
    {
      CounterScope scope(opt.counters ? &cnt : nullptr);
      c.out = c.m.run(in);
    }
    if (c.out.format != k.format)
      throw UsageError("method " + c.m.canonical() + " returns " + c.out.format +
                       " but the kernel output is " + k.format);
    r.chosen_by = "given";
    r.counters = cnt;
    r.has_counters = opt.counters && c.m.is_pipeline();
    cands.push_back(std::move(c));
  } else {
    std::int64_t best = -1;
    std::size_t best_i = 0;
    std::set<std::string> tried;  // registry defaults and spelled-out paths can be one method
    const std::vector<std::string> names = verify_candidates(in);
    int done = 0;
    for (const std::string& name : names) {
      Candidate c;
      if (opt.progress) opt.progress(done, int(names.size()), name);
      ++done;
      try {
        c.m = parse_method(name);
        if (!tried.insert(c.m.canonical()).second) continue;
        // A candidate's own warnings (a split merge that never ran, kivi's prefill) are about a
        // run the user did not ask for.
        const MuteMessages mute;
        c.out = c.m.run(in);
      } catch (const UsageError&) {
        continue;  // a method that cannot run on this input is no candidate
      }
      if (c.out.format != k.format || c.out.o.size() != k.o.size()) continue;
      std::int64_t same = 0;
      for (std::size_t i = 0; i < k.o.size(); ++i) same += same_value(k.o[i], c.out.o[i]);
      if (same == std::int64_t(k.o.size())) r.identical_candidates.push_back(c.m.canonical());
      if (same > best) {
        best = same;
        best_i = cands.size();
      }
      cands.push_back(std::move(c));
    }
    if (opt.progress) opt.progress(int(names.size()), int(names.size()), "done");
    if (cands.empty())
      throw UsageError("no registered method returns " + k.format + " on this input; name one with --method");
    std::swap(cands[0], cands[best_i]);
    cands.resize(1);
    r.chosen_by = r.identical_candidates.empty() ? "closest candidate (most identical elements)"
                                                 : "bit-identical candidate";
    if (opt.counters) {
      CounterScope scope(&r.counters);
      cands[0].out = cands[0].m.run(in);
      r.has_counters = cands[0].m.is_pipeline();
    }
  }
  const MethodConfig& m = cands[0].m;
  const MethodOutput& mo = cands[0].out;
  r.method = m.canonical();
  bool top_left = false;
  if (m.is_pipeline()) {
    const Pipeline p = m.pipeline(in);
    r.bq = p.tile.block_q;
    r.bk = p.tile.block_kv;
    top_left = p.tile.causal == CausalAlign::kTopLeft;
  }
  // Golden with the kernel's own causal mask (a top-left kernel's rows see other keys than the
  // bottom-right default when len_q != len_kv).
  const std::vector<double> golden =
      golden_attention_ref(m.problem(in), top_left ? CausalAlign::kTopLeft : CausalAlign::kBottomRight);
  const AttentionShape& s = in.shape;
  const int dv = s.head_dim_v;
  const std::size_t n = k.o.size();
  const UlpFormat uf = ulp_format_of(k.format);
  r.ulp_vs_method = ulp_histogram(k.o.data(), mo.o.data(), n, uf);
  r.ulp_kernel_vs_golden = ulp_histogram(k.o.data(), golden.data(), n, uf);
  r.ulp_method_vs_golden = ulp_histogram(mo.o.data(), golden.data(), n, uf);
  r.elems = std::int64_t(n);
  r.rows = std::int64_t(s.batch) * s.heads_q * s.len_q;
  r.per_row.resize(std::size_t(r.rows));
  double gmax_all = 0;
  const int off = top_left ? 0 : s.len_kv - s.len_q;
  for (std::int64_t row = 0; row < r.rows; ++row) {
    VerifyRow& vr = r.per_row[std::size_t(row)];
    vr.batch = int(row / (std::int64_t(s.heads_q) * s.len_q));
    vr.head = int(row / s.len_q % s.heads_q);
    vr.row = int(row % s.len_q);
    vr.visible = in.causal ? std::clamp(vr.row + off + 1, 0, s.len_kv) : s.len_kv;
    vr.nonfinite_input = row_inputs_nonfinite(in, vr.batch, vr.head, vr.row, vr.visible);
    double gmax = 0;
    for (int c = 0; c < dv; ++c) {
      const std::size_t i = std::size_t(row) * dv + c;
      const bool same = same_value(k.o[i], mo.o[i]);
      if (same) {
        ++r.elems_identical;
      } else {
        vr.identical = false;
        if (!r.diverges) {
          r.diverges = true;
          r.first_batch = vr.batch, r.first_head = vr.head, r.first_row = vr.row, r.first_col = c;
          r.first_kernel = k.o[i], r.first_method = mo.o[i], r.first_golden = golden[i];
        }
        vr.ulp_method = std::max(vr.ulp_method, ulp_distance(k.o[i], mo.o[i], uf));
      }
      const double ek = std::fabs(k.o[i] - golden[i]), em = std::fabs(mo.o[i] - golden[i]);
      vr.err_kernel = std::max(vr.err_kernel, ek != ek ? INFINITY : ek);
      vr.err_method = std::max(vr.err_method, em != em ? INFINITY : em);
      gmax = std::max(gmax, std::fabs(golden[i]));
    }
    gmax_all = std::max(gmax_all, gmax);
    // FlashAttention's rule per row, with one ULP of the output format at the row's largest
    // |golden| as the floor of the method's error (a correctly rounded output is that far off).
    vr.allowance = opt.band * std::max(vr.err_method, ulp_at(k.format, gmax));
    r.rows_identical += vr.identical;
    r.err_kernel = std::max(r.err_kernel, vr.err_kernel);
    r.err_method = std::max(r.err_method, vr.err_method);
    if (!(vr.err_kernel <= vr.allowance)) ++r.rows_outside_band;
  }
  r.allowance = opt.band * std::max(r.err_method, ulp_at(k.format, gmax_all));
  const bool overall_in = r.err_kernel <= r.allowance;
  r.verdict = r.elems_identical == r.elems                 ? Verdict::kIdentical
              : (overall_in && r.rows_outside_band == 0) ? Verdict::kWithinBand
                                                         : Verdict::kOutsideBand;
  // The worst rows: kernel error over allowance, largest first.
  std::vector<std::size_t> idx;
  for (std::size_t i = 0; i < r.per_row.size(); ++i)
    if (!r.per_row[i].identical) idx.push_back(i);
  auto ratio = [&](std::size_t i) {
    const VerifyRow& v = r.per_row[i];
    return v.allowance > 0 ? v.err_kernel / v.allowance : INFINITY;
  };
  std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) { return ratio(a) > ratio(b); });
  if (idx.size() > std::size_t(std::max(opt.worst, 0))) idx.resize(std::size_t(std::max(opt.worst, 0)));
  r.worst = idx;
  // For a worst row outside the band: the KV block whose omission explains the kernel's output.
  const int bk = r.bk > 0 ? r.bk : 64;
  for (std::size_t i : r.worst) {
    VerifyRow& v = r.per_row[i];
    if (v.err_kernel <= v.allowance || v.visible == 0) continue;
    double best = INFINITY;
    for (int j0 = 0; j0 < v.visible; j0 += bk) {
      const std::vector<double> g = row_attention(in, v.batch, v.head, v.row, j0, j0 + bk, top_left);
      double e = 0;
      for (int c = 0; c < dv; ++c)
        e = std::max(e, std::fabs(k.o[std::size_t(&v - r.per_row.data()) * dv + c] - g[std::size_t(c)]));
      if (e < best) {
        best = e;
        v.suspect_block = j0 / bk;
        v.err_without_block = e;
      }
    }
    // Only a block that explains the output (within the band of the row) is named.
    if (!(best <= v.allowance)) v.suspect_block = -1;
  }
  // Where the divergence concentrates: rows by q block (bq) and position in it, the row's KV
  // blocks (bk) and whether its last one is partial, masked rows, non-finite inputs.
  std::map<std::string, Concentration> cls;
  auto tally = [&](const std::string& what, bool diverging) {
    Concentration& c = cls[what];
    c.what = what;
    ++c.rows;
    c.diverging += diverging;
  };
  const int bq = r.bq > 0 ? r.bq : 0;
  for (const VerifyRow& v : r.per_row) {
    const bool d = !v.identical;
    if (bq > 0) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "rows of q block %d (bq=%d)", v.row / bq, bq);
      tally(buf, d);
      if (s.len_q % bq != 0 && v.row / bq == s.len_q / bq) tally("rows of the last, partial q block", d);
      if (v.row % bq == 0 || v.row % bq == bq - 1) tally("first or last row of a q block", d);
    }
    if (r.bk > 0 && v.visible > 0) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "rows seeing %d KV block(s) (bk=%d)", (v.visible + r.bk - 1) / r.bk, r.bk);
      tally(buf, d);
      if (v.visible % r.bk != 0) tally("rows whose last KV block is partial", d);
    }
    if (v.visible == 0) tally("rows with every key masked", d);
    else if (2 * v.visible < s.len_kv) tally("rows with most keys masked", d);
    if (v.nonfinite_input) tally("rows with non-finite inputs", d);
  }
  // A split schedule (lean, splitkv): rows by how many CTAs' partial results they merge, and, for
  // each CTA holding a diverging row, the rows it takes part in (a bug in one CTA's segment or in
  // the merge shows as a class at or near 100%).
  if (m.spec->row_ctas) {
    const std::vector<std::vector<int>> ctas = m.spec->row_ctas(m.values, in);
    std::map<int, std::pair<std::int64_t, std::int64_t>> by_cta;  // cta -> (rows, diverging)
    for (std::size_t i = 0; i < r.per_row.size() && i < ctas.size(); ++i) {
      const bool d = !r.per_row[i].identical;
      char buf[96];
      std::snprintf(buf, sizeof buf, "rows merged from %zu split(s)", ctas[i].size());
      tally(buf, d);
      for (int c : ctas[i]) {
        auto& e = by_cta[c];
        ++e.first;
        e.second += d;
      }
    }
    int named = 0, more = 0;
    Concentration rest;
    for (const auto& [cta, e] : by_cta) {
      if (e.second == 0) continue;
      if (named == 16) {  // the first 16 such CTAs by number, the others together
        ++more;
        rest.rows += e.first;
        rest.diverging += e.second;
        continue;
      }
      ++named;
      char buf[96];
      std::snprintf(buf, sizeof buf, "rows with a segment in CTA %4d", cta);
      Concentration& c = cls[buf];
      c.what = buf;
      c.rows = e.first;
      c.diverging = e.second;
    }
    if (more > 0) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "rows with a segment in %d other such CTAs", more);
      rest.what = buf;
      cls[buf] = rest;
    }
  }
  for (auto& [name, c] : cls) r.concentration.push_back(c);
  // The LSE.
  if (!k.lse.empty()) {
    if (mo.lse.empty()) {
      r.lse_note = "not compared: " + r.method + " returns no LSE";
    } else {
      r.lse_compared = true;
      r.lse_rows = std::int64_t(k.lse.size());
      for (std::size_t i = 0; i < k.lse.size(); ++i) {
        // Kernels store the LSE in FP32: compared at that precision.
        const double a = double(float(k.lse[i])), b = double(float(mo.lse[i]));
        if (same_value(a, b)) ++r.lse_identical;
        else if (std::isfinite(a) && std::isfinite(b)) r.lse_max_abs = std::max(r.lse_max_abs, std::fabs(a - b));
        else r.lse_max_abs = INFINITY;
      }
    }
  }
  return r;
}

std::string format_verify_report(const VerifyReport& r, int worst) {
  std::string o;
  char buf[512];
  auto line = [&](const char* fmt, auto... a) {
    std::snprintf(buf, sizeof buf, fmt, a...);
    o += buf;
    o += "\n";
  };
  line("method: %s (%s)", r.method.c_str(), r.chosen_by.c_str());
  if (r.chosen_by != "given") {
    std::string ids;
    for (const std::string& s : r.identical_candidates) ids += (ids.empty() ? "" : ", ") + s;
    line("bit-identical candidates: %s", ids.empty() ? "none" : ids.c_str());
  }
  line("format: %s; tiles bq=%d bk=%d", r.format.c_str(), r.bq, r.bk);
  line("bit-identical: %lld of %lld elements (%.4f%%), %lld of %lld rows (%.4f%%)",
       (long long)r.elems_identical, (long long)r.elems, 100.0 * double(r.elems_identical) / double(std::max<std::int64_t>(r.elems, 1)),
       (long long)r.rows_identical, (long long)r.rows, 100.0 * double(r.rows_identical) / double(std::max<std::int64_t>(r.rows, 1)));
  auto hist = [&](const char* name, const UlpHistogram& h) {
    std::string s;
    for (int k = 0; k < UlpHistogram::kBuckets; ++k)
      if (k < int(h.counts.size()) && h.counts[std::size_t(k)] > 0)
        s += " " + UlpHistogram::bucket_label(k) + ":" + std::to_string(h.counts[std::size_t(k)]);
    if (h.nan_mismatch) s += " nan:" + std::to_string(h.nan_mismatch);
    line("ULP %s (p50 %llu, p99 %llu, max %llu):%s", name, (unsigned long long)h.p50,
         (unsigned long long)h.p99, (unsigned long long)h.max_ulp, s.c_str());
  };
  hist("kernel vs method", r.ulp_vs_method);
  hist("kernel vs golden", r.ulp_kernel_vs_golden);
  hist("method vs golden", r.ulp_method_vs_golden);
  if (r.diverges)
    line("first diverging element: batch %d, head %d, row %d, column %d (kernel %.9g, method %.9g, golden %.9g)",
         r.first_batch, r.first_head, r.first_row, r.first_col, r.first_kernel, r.first_method,
         r.first_golden);
  else
    line("first diverging element: none");
  line("max |error| vs golden: kernel %.6g, method %.6g; band %.6g overall; %lld row(s) outside their band",
       r.err_kernel, r.err_method, r.allowance, (long long)r.rows_outside_band);
  if (r.diverges) {
    line("divergence by class of rows (diverging / rows; overall %lld / %lld):",
         (long long)(r.rows - r.rows_identical), (long long)r.rows);
    for (const Concentration& c : r.concentration)
      line("  %-44s %lld / %lld (%.1f%%)", c.what.c_str(), (long long)c.diverging, (long long)c.rows,
           100.0 * double(c.diverging) / double(std::max<std::int64_t>(c.rows, 1)));
  }
  if (!r.worst.empty()) {
    line("worst rows (kernel error / band):");
    int shown = 0;
    for (std::size_t i : r.worst) {
      if (shown++ >= worst) break;
      const VerifyRow& v = r.per_row[i];
      std::string sus;
      if (v.suspect_block >= 0) {
        std::snprintf(buf, sizeof buf, "; matches golden without KV block %d (keys %d-%d, err %.3g)",
                      v.suspect_block, v.suspect_block * std::max(r.bk, 1),
                      (v.suspect_block + 1) * std::max(r.bk, 1) - 1, v.err_without_block);
        sus = buf;
      }
      line("  batch %d head %d row %d: kernel %.4g, method %.4g, band %.4g (%.2fx)%s%s", v.batch,
           v.head, v.row, v.err_kernel, v.err_method, v.allowance,
           v.allowance > 0 ? v.err_kernel / v.allowance : INFINITY,
           v.err_kernel <= v.allowance ? "" : " OUTSIDE", sus.c_str());
    }
  }
  if (r.lse_compared)
    line("lse: %lld of %lld rows bit-identical (FP32), max |diff| %.3g", (long long)r.lse_identical,
         (long long)r.lse_rows, r.lse_max_abs);
  else if (!r.lse_note.empty())
    line("lse: %s", r.lse_note.c_str());
  if (r.has_counters) o += "counters of " + r.method + ":\n" + r.counters.describe();
  const char* v = r.verdict == Verdict::kIdentical    ? "bit-identical"
                  : r.verdict == Verdict::kWithinBand ? "differs, within the band"
                                                      : "outside the band (a likely bug)";
  line("verdict: %s (exit %d)", v, int(r.verdict));
  return o;
}

std::string verify_rows_csv(const VerifyReport& r) {
  std::string o =
      "batch,head,row,identical,ulp_vs_method,err_kernel,err_method,allowance,within_band,"
      "visible_keys,nonfinite_input,suspect_kv_block\n";
  char buf[256];
  for (const VerifyRow& v : r.per_row) {
    std::snprintf(buf, sizeof buf, "%d,%d,%d,%d,%llu,%.17g,%.17g,%.17g,%d,%d,%d,%d\n", v.batch,
                  v.head, v.row, int(v.identical), (unsigned long long)v.ulp_method, v.err_kernel,
                  v.err_method, v.allowance, int(v.err_kernel <= v.allowance), v.visible,
                  int(v.nonfinite_input), v.suspect_block);
    o += buf;
  }
  return o;
}

}  // namespace attnsim
