// `attnsim schedule` / `attnsim invariance` (invariance.hpp).
#include "experiments/analysis/invariance.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>

#include "experiments/common/error.hpp"
#include "experiments/io/synthetic.hpp"
#include "numerics/metrics.hpp"
#include "sim/golden/golden.hpp"

namespace attnsim {

namespace {

constexpr long long kMaxSeqs = 1 << 20;

// A decimal integer in [lo, hi], or a UsageError naming `what`.
long long parse_int(const std::string& t, long long lo, long long hi, const std::string& what) {
  if (t.empty() || t.size() > 12 || t.find_first_not_of("0123456789") != std::string::npos)
    throw UsageError(what + ": '" + t + "' is not a non-negative integer");
  const long long v = std::stoll(t);
  if (v < lo || v > hi)
    throw UsageError(what + ": " + t + " is outside " + std::to_string(lo) + ".." +
                     std::to_string(hi));
  return v;
}

std::string trim(const std::string& s) {
  const std::size_t a = s.find_first_not_of(" \t");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t") - a + 1);
}

bool same_bits(double a, double b) {
  if (a != a || b != b) return a != a && b != b;
  return a == b && std::signbit(a) == std::signbit(b);
}

// The input of the target in a launch: shape, mask and launch (no data unless `data` is given:
// then its rows [K - Q, K) and first K tokens).
AttentionInput target_input(const MethodConfig& m, const InvarianceProblem& p,
                            const Launch& launch, const TargetData* data) {
  const LaunchSeq t = launch.target();
  AttentionInput in;
  in.shape = AttentionShape{1, p.heads_q, p.heads_kv, t.len_q, t.len_kv, p.head_dim, p.head_dim_v};
  in.causal = p.causal;
  in.dtype = p.dtype;
  auto l = std::make_shared<Launch>(launch);
  l->sms = p.sms;
  in.launch = l;
  if (data) {
    const AttentionInput& d = data->data;
    const AttentionShape& ds = d.shape;
    const int q_first = ds.len_kv - ds.len_q;  // the first position with a query
    if (t.len_kv > ds.len_kv)
      throw UsageError("the target's situation " + std::to_string(t.len_q) + ":" +
                       std::to_string(t.len_kv) + " needs " + std::to_string(t.len_kv) +
                       " tokens; the input has " + std::to_string(ds.len_kv));
    if (t.len_kv - t.len_q < q_first)
      throw UsageError("the target's situation " + std::to_string(t.len_q) + ":" +
                       std::to_string(t.len_kv) + " needs queries from position " +
                       std::to_string(t.len_kv - t.len_q) + "; the input has queries for positions " +
                       std::to_string(q_first) + ".." + std::to_string(ds.len_kv - 1));
    const int d_ = p.head_dim, dv = p.head_dim_v;
    in.q.resize(std::size_t(p.heads_q) * t.len_q * d_);
    in.k.resize(std::size_t(p.heads_kv) * t.len_kv * d_);
    in.v.resize(std::size_t(p.heads_kv) * t.len_kv * dv);
    for (int h = 0; h < p.heads_q; ++h)
      for (int i = 0; i < t.len_q; ++i) {
        const int row = t.len_kv - t.len_q + i - q_first;  // row of the input's Q
        std::copy_n(d.q.begin() + (std::size_t(h) * ds.len_q + row) * d_, d_,
                    in.q.begin() + (std::size_t(h) * t.len_q + i) * d_);
      }
    for (int h = 0; h < p.heads_kv; ++h) {
      std::copy_n(d.k.begin() + std::size_t(h) * ds.len_kv * d_, std::size_t(t.len_kv) * d_,
                  in.k.begin() + std::size_t(h) * t.len_kv * d_);
      std::copy_n(d.v.begin() + std::size_t(h) * ds.len_kv * dv, std::size_t(t.len_kv) * dv,
                  in.v.begin() + std::size_t(h) * t.len_kv * dv);
    }
    in.sm_scale = d.sm_scale;
  }
  // The method's own problem options (a window, a softcap).
  in = m.problem(in);
  // A top-left causal kernel (SDPA, FlexAttention) sees a one-query decode step without the mask
  // (as serving engines call it: the step sees its whole cache); longer non-square targets would
  // see other keys than their positions imply.
  if (in.causal && t.len_q != t.len_kv) {
    const CausalAlign a = usage_errors([&] { return m.causal_align(in); });
    if (a == CausalAlign::kTopLeft) {
      if (t.len_q > 1)
        throw UsageError(m.canonical() + "'s causal mask is top-left: a causal situation's target " +
                         "must be square (Q = K) or one decode query, got " +
                         std::to_string(t.len_q) + ":" + std::to_string(t.len_kv));
      in.causal = false;
    }
  }
  return in;
}

// The keys position `pos` of a target sees: [lo, hi].
void visible(const AttentionInput& in, int pos, int* lo, int* hi) {
  if (!in.causal) {
    *lo = 0;
    *hi = in.shape.len_kv - 1;
    return;
  }
  *hi = pos;
  *lo = in.window > 0 ? std::max(0, pos - in.window + 1) : 0;
}

struct Computed {
  MethodOutput out;
  std::vector<double> golden;
};

Computed compute(const MethodConfig& m, const AttentionInput& in) {
  Computed c;
  c.out = usage_errors([&] { return m.run(in); });
  const CausalAlign a = usage_errors([&] { return m.causal_align(in); });
  c.golden = golden_attention_ref(m.problem(in), a);
  return c;
}

InvarianceReport compare(const MethodConfig& m, const InvarianceProblem& p, const std::string& a,
                         const std::string& b, const TargetData* data,
                         std::map<std::string, Computed>* memo) {
  InvarianceReport r;
  r.method = m.canonical();
  r.a = a;
  r.b = b;
  const Launch la = parse_launch(a), lb = parse_launch(b);
  r.sched_a = method_schedule(m, p, la);
  r.sched_b = method_schedule(m, p, lb);
  const LaunchSeq ta = la.target(), tb = lb.target();
  // The arithmetic items, key by key.
  if (r.sched_a.kernel != r.sched_b.kernel)
    r.differs_in.push_back("kernel " + r.sched_a.kernel + " -> " + r.sched_b.kernel);
  for (const KernelSchedule* x : {&r.sched_a, &r.sched_b})
    for (const ScheduleItem& i : x->items) {
      if (!i.arithmetic) continue;
      const ScheduleItem* ia = r.sched_a.find(i.key);
      const ScheduleItem* ib = r.sched_b.find(i.key);
      const std::string va = ia && ia->arithmetic ? ia->value : "-";
      const std::string vb = ib && ib->arithmetic ? ib->value : "-";
      const std::string line = i.key + " " + va + " -> " + vb;
      if (va != vb && std::find(r.differs_in.begin(), r.differs_in.end(), line) == r.differs_in.end())
        r.differs_in.push_back(line);
    }
  r.predicted_identical = r.differs_in.empty();
  // The rows both situations compute with the same visible keys.
  const AttentionInput ia = target_input(m, p, la, nullptr), ib = target_input(m, p, lb, nullptr);
  for (const auto& [in, side] : {std::pair{&ia, "A"}, std::pair{&ib, "B"}})
    if (p.causal && !in->causal)
      r.notes.push_back(std::string(side) + ": the one-query target of this top-left causal "
                        "kernel runs without the mask (it sees its whole cache)");
  const int a0 = ta.len_kv - ta.len_q, b0 = tb.len_kv - tb.len_q;
  const int lo = std::max(a0, b0), hi = std::min(ta.len_kv, tb.len_kv);
  std::vector<int> pos;
  for (int x = lo; x < hi; ++x) {
    int l1, h1, l2, h2;
    visible(ia, x, &l1, &h1);
    visible(ib, x, &l2, &h2);
    if (l1 == l2 && h1 == h2) pos.push_back(x);
  }
  if (pos.empty())
    throw UsageError("situations '" + a + "' and '" + b +
                     "' share no target row that sees the same keys (rows are the last Q of K "
                     "tokens; a decode row sees its whole cache)");
  for (std::size_t i = 1; i < pos.size(); ++i)
    if (pos[i] != pos[i - 1] + 1)
      throw UsageError("situations '" + a + "' and '" + b +
                       "': the rows that see the same keys are not contiguous");
  r.first_position = pos.front();
  r.positions = int(pos.size());
  r.rows = r.positions * p.heads_q;
  if (!data) return r;
  // The outputs (memoized per situation: a table's fixed side is computed once).
  auto get = [&](const std::string& s, const Launch& l) -> const Computed& {
    auto it = memo->find(s);
    if (it == memo->end())
      it = memo->emplace(s, compute(m, target_input(m, p, l, data))).first;
    return it->second;
  };
  const Computed& ca = get(a, la);
  const Computed& cb = get(b, lb);
  r.computed = true;
  const UlpFormat uf = parse_ulp_format(ca.out.format);
  const int dv = p.head_dim_v;
  for (int h = 0; h < p.heads_q; ++h)
    for (int x : pos) {
      InvarianceRow row;
      row.head = h;
      row.position = x;
      const std::size_t ra = (std::size_t(h) * ta.len_q + (x - a0)) * dv;
      const std::size_t rb = (std::size_t(h) * tb.len_q + (x - b0)) * dv;
      for (int j = 0; j < dv; ++j) {
        const double va = ca.out.o[ra + j], vb = cb.out.o[rb + j];
        if (!same_bits(va, vb)) row.identical = false;
        row.ulp = std::max(row.ulp, ulp_distance(va, vb, uf));
        row.err_a = std::max(row.err_a, std::fabs(va - ca.golden[ra + j]));
        row.err_b = std::max(row.err_b, std::fabs(vb - cb.golden[rb + j]));
      }
      r.identical_rows += row.identical;
      r.max_ulp = std::max(r.max_ulp, row.ulp);
      r.max_err_a = std::max(r.max_err_a, row.err_a);
      r.max_err_b = std::max(r.max_err_b, row.err_b);
      if (!row.identical &&
          (r.first_diverging_position < 0 || x < r.first_diverging_position ||
           (x == r.first_diverging_position && h < r.first_diverging_head))) {
        r.first_diverging_position = x;
        r.first_diverging_head = h;
      }
      r.per_row.push_back(row);
    }
  return r;
}

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string r = "\"";
  for (char c : s) r += c == '"' ? std::string("\"\"") : std::string(1, c);
  return r + "\"";
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string r;
  for (const std::string& s : v) r += (r.empty() ? "" : sep) + s;
  return r;
}

// "splits=14 tile=64x128": the arithmetic items' values.
std::string short_schedule(const KernelSchedule& k) {
  std::string r;
  for (const ScheduleItem& i : k.items)
    if (i.arithmetic) r += (r.empty() ? "" : " ") + i.key + "=" + i.value;
  return r;
}

}  // namespace

Launch parse_launch(const std::string& text) {
  const std::string t = trim(text);
  if (t.empty()) throw UsageError("an empty situation (expected sequences Q:K joined by '+')");
  Launch l;
  std::vector<LaunchSeq>& r = l.seqs;
  bool marked = false;
  std::size_t at = 0;
  while (at <= t.size()) {
    std::size_t plus = t.find('+', at);
    if (plus == std::string::npos) plus = t.size();
    std::string part = trim(t.substr(at, plus - at));
    const std::string where = "situation '" + text + "'";
    const bool star = !part.empty() && part[0] == '*';
    if (star) {
      if (marked) throw UsageError(where + ": more than one part marked '*' (the target)");
      marked = true;
      part = trim(part.substr(1));
    }
    const std::size_t colon = part.find(':');
    if (part.empty() || colon == std::string::npos)
      throw UsageError(where + ": '" + part + "' is not a sequence Q:K or Q:KxN");
    const std::size_t x = part.find('x', colon);
    const long long q = parse_int(part.substr(0, colon), 1, INT32_MAX, where + " (queries)");
    const long long k = parse_int(part.substr(colon + 1, x == std::string::npos ? std::string::npos
                                                                            : x - colon - 1),
                                  1, INT32_MAX, where + " (keys)");
    // xN: N >= 1 for the target's part, N >= 0 for neighbours (x0: none, for --range tables).
    const bool target_part = star || (r.empty() && at == 0);
    const long long n = x == std::string::npos
                            ? 1
                            : parse_int(part.substr(x + 1), target_part ? 1 : 0, kMaxSeqs,
                                        where + " (count)");
    if (q > k)
      throw UsageError(where + ": " + std::to_string(q) + ":" + std::to_string(k) +
                       " has more queries than keys (the queries are the sequence's last tokens)");
    if (r.size() + n > std::size_t(kMaxSeqs))
      throw UsageError(where + ": more than " + std::to_string(kMaxSeqs) + " sequences");
    if (star) l.target_index = int(r.size());
    r.insert(r.end(), std::size_t(n), LaunchSeq{int(q), int(k)});
    at = plus + 1;
  }
  return l;
}

std::vector<LaunchSeq> parse_situation(const std::string& text) { return parse_launch(text).seqs; }

void attach_launch(const MethodConfig& m, AttentionInput& in, const std::string& situation,
                   int sms) {
  if (situation.empty()) return;
  if (!m.spec->schedule) {
    std::string with;
    for (const MethodSpec& s : method_registry())
      if (s.schedule) with += (with.empty() ? "" : ", ") + s.name;
    throw UsageError("--launch: method '" + m.spec->name +
                     "' has no launch-time schedule, so a launch would change nothing (the "
                     "kernels with one: " + with + ")");
  }
  if (sms < 1) throw UsageError("--sms must be >= 1");
  auto l = std::make_shared<Launch>(parse_launch(situation));
  l->sms = sms;
  usage_errors([&] { check_launch_target(in.shape, *l); });
  in.launch = l;
  // The method's own checks on this launch (a dense-batch kernel and a launch of mixed lengths).
  (void)m.spec->schedule(m.values, m.problem(in));
}

std::string substitute_n(const std::string& text, int n) {
  std::string r = text;
  for (std::size_t at = r.find("{n}"); at != std::string::npos; at = r.find("{n}", at))
    r.replace(at, 3, std::to_string(n));
  return r;
}

std::vector<int> parse_range(const std::string& text) {
  std::vector<int> r;
  const std::string t = trim(text);
  const std::size_t dots = t.find("..");
  if (dots != std::string::npos) {
    const long long a = parse_int(trim(t.substr(0, dots)), 0, 1 << 20, "--range");
    const long long b = parse_int(trim(t.substr(dots + 2)), 0, 1 << 20, "--range");
    if (b < a) throw UsageError("--range " + text + ": the end is below the start");
    if (b - a >= 100000) throw UsageError("--range " + text + ": more than 100000 values");
    for (long long v = a; v <= b; ++v) r.push_back(int(v));
    return r;
  }
  std::size_t at = 0;
  while (at <= t.size()) {
    std::size_t c = t.find(',', at);
    if (c == std::string::npos) c = t.size();
    r.push_back(int(parse_int(trim(t.substr(at, c - at)), 0, 1 << 20, "--range")));
    at = c + 1;
  }
  return r;
}

InvarianceProblem invariance_problem(int heads_q, int heads_kv, int head_dim, bool causal,
                                     int head_dim_v, int sms) {
  InvarianceProblem p;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.head_dim = head_dim;
  p.head_dim_v = head_dim_v > 0 ? head_dim_v : head_dim;
  p.causal = causal;
  p.sms = sms;
  return p;
}

KernelSchedule method_schedule(const MethodConfig& m, const InvarianceProblem& p,
                               const Launch& launch) {
  if (!m.spec->schedule) {
    std::string with;
    for (const MethodSpec& s : method_registry())
      if (s.schedule) with += (with.empty() ? "" : ", ") + s.name;
    throw UsageError("method '" + m.spec->name +
                     "' has no launch-time schedule model (the kernels with one: " + with + ")");
  }
  if (p.heads_q <= 0 || p.heads_kv <= 0 || p.head_dim <= 0 || p.head_dim_v <= 0 ||
      p.heads_q % p.heads_kv != 0)
    throw UsageError("heads and head dims must be positive, heads_q a multiple of heads_kv");
  if (p.sms <= 0) throw UsageError("--sms must be >= 1");
  const AttentionInput in = target_input(m, p, launch, nullptr);
  return m.spec->schedule(m.values, in);
}

InvarianceReport invariance(const MethodConfig& m, const InvarianceProblem& p, const std::string& a,
                            const std::string& b, const TargetData* data) {
  std::map<std::string, Computed> memo;
  return compare(m, p, a, b, data, &memo);
}

std::vector<InvarianceReport> invariance_table(const MethodConfig& m, const InvarianceProblem& p,
                                               const std::string& a, const std::string& b,
                                               const std::vector<int>& ns, const TargetData* data) {
  std::map<std::string, Computed> memo;
  std::vector<InvarianceReport> r;
  for (int n : ns) r.push_back(compare(m, p, substitute_n(a, n), substitute_n(b, n), data, &memo));
  return r;
}

TargetData synthetic_target(const InvarianceProblem& p, const std::vector<std::string>& situations,
                            const std::string& dist, std::uint64_t seed) {
  int len = 0;
  for (const std::string& s : situations) len = std::max(len, parse_launch(s).target().len_kv);
  return TargetData{make_synthetic(dist + ":hq=" + std::to_string(p.heads_q) + ",hkv=" +
                                   std::to_string(p.heads_kv) + ",nq=" + std::to_string(len) +
                                   ",nkv=" + std::to_string(len) + ",d=" +
                                   std::to_string(p.head_dim) + ",dv=" +
                                   std::to_string(p.head_dim_v) + ",seed=" + std::to_string(seed))};
}

MethodOutput run_in_situation(const MethodConfig& m, const InvarianceProblem& p,
                              const std::string& situation, const TargetData& data) {
  const AttentionInput in = target_input(m, p, parse_launch(situation), &data);
  return usage_errors([&] { return m.run(in); });
}

std::string format_schedule(const std::string& method, const std::string& situation,
                            const KernelSchedule& k) {
  std::string r = "schedule: " + method + " in " + situation + "\n";
  r += "  kernel: " + k.kernel + "\n";
  std::size_t w = 0;
  for (const ScheduleItem& i : k.items) w = std::max(w, i.key.size());
  for (const ScheduleItem& i : k.items) {
    std::string key = i.key;
    key.resize(w, ' ');
    r += "  " + key + "  " + i.value + (i.arithmetic ? "" : "  (no effect on the bits)") + "\n";
    if (!i.why.empty()) r += "  " + std::string(w, ' ') + "    " + i.why + "\n";
  }
  for (const std::string& u : k.unverified) r += "  unverified: " + u + "\n";
  return r;
}

std::string format_invariance(const InvarianceReport& r, int rows) {
  std::string s = "invariance: " + r.method + "\n";
  s += "  A: " + r.a + "  ->  " + r.sched_a.kernel + "  " + short_schedule(r.sched_a) + "\n";
  s += "  B: " + r.b + "  ->  " + r.sched_b.kernel + "  " + short_schedule(r.sched_b) + "\n";
  s += "  rows compared: " + std::to_string(r.rows) + " (positions " +
       std::to_string(r.first_position) + ".." +
       std::to_string(r.first_position + r.positions - 1) + " x " +
       std::to_string(r.rows / std::max(r.positions, 1)) + " query heads)\n";
  s += std::string("  predicted: ") +
       (r.predicted_identical ? "bit-identical (the same arithmetic schedule)"
                              : "may differ: the arithmetic differs (" + join(r.differs_in, "; ") +
                                    "); --ulp computes which rows do") +
       "\n";
  for (const std::string& n : r.notes) s += "  mask (" + n + ")\n";
  for (const std::string& u : r.sched_a.unverified) s += "  unverified (A): " + u + "\n";
  for (const std::string& u : r.sched_b.unverified) s += "  unverified (B): " + u + "\n";
  if (!r.computed) return s;
  s += "  computed: " + std::to_string(r.identical_rows) + " of " + std::to_string(r.rows) +
       " rows bit-identical; max ULP " + std::to_string(r.max_ulp) + "; max |error| vs golden " +
       fmt("%.4g", r.max_err_a) + " (A), " + fmt("%.4g", r.max_err_b) + " (B)\n";
  if (r.first_diverging_position >= 0)
    s += "  first diverging row: position " + std::to_string(r.first_diverging_position) +
         ", head " + std::to_string(r.first_diverging_head) + "\n";
  if (r.identical_rows == r.rows && !r.predicted_identical)
    s += "  the arithmetic differs, but every compared row rounds to the same bits\n";
  if (r.identical_rows != r.rows && r.predicted_identical)
    s += "  note: the same arithmetic schedule gave different bits (a model inconsistency: "
         "please report it)\n";
  int shown = 0;
  for (const InvarianceRow& w : r.per_row) {
    if (w.identical || shown >= rows) continue;
    if (shown == 0) s += "  head  position  ulp  err_A  err_B\n";
    char buf[160];
    std::snprintf(buf, sizeof buf, "  %4d  %8d  %llu  %.4g  %.4g\n", w.head, w.position,
                  (unsigned long long)w.ulp, w.err_a, w.err_b);
    s += buf;
    ++shown;
  }
  return s;
}

std::string format_invariance_table(const std::vector<int>& ns,
                                    const std::vector<InvarianceReport>& rs) {
  std::string s;
  if (rs.empty()) return s;
  s += "invariance: " + rs[0].method + "\n  A: " + rs[0].a + "  ->  " + rs[0].sched_a.kernel +
       "  " + short_schedule(rs[0].sched_a) + "\n";
  const bool computed = rs[0].computed;
  s += computed ? "       n  identical rows  max ULP  B's schedule\n"
                : "       n  predicted   B's schedule\n";
  int first_break = -1;
  for (std::size_t i = 0; i < rs.size(); ++i) {
    const InvarianceReport& r = rs[i];
    char buf[96];
    if (computed)
      std::snprintf(buf, sizeof buf, "  %6d  %6d/%-7d  %7llu  ", ns[i], r.identical_rows, r.rows,
                    (unsigned long long)r.max_ulp);
    else
      std::snprintf(buf, sizeof buf, "  %6d  %-10s  ", ns[i],
                    r.predicted_identical ? "identical" : "may differ");
    s += buf + r.b + " -> " + short_schedule(r.sched_b) + "\n";
    if (!r.identical() && first_break < 0) first_break = ns[i];
  }
  if (first_break < 0)
    s += computed ? "  bit-identical for every n\n"
                  : "  the same arithmetic for every n: bit-identical\n";
  else
    s += computed ? "  invariance breaks first at n = " + std::to_string(first_break) + "\n"
                  : "  the arithmetic first changes at n = " + std::to_string(first_break) +
                        " (rows may differ from there; --ulp computes which)\n";
  return s;
}

std::string invariance_rows_csv(const InvarianceReport& r) {
  std::string s = "head,position,identical,ulp,err_a,err_b\n";
  for (const InvarianceRow& w : r.per_row)
    s += std::to_string(w.head) + "," + std::to_string(w.position) + "," +
         std::to_string(int(w.identical)) + "," + std::to_string(w.ulp) + "," +
         fmt("%.17g", w.err_a) + "," + fmt("%.17g", w.err_b) + "\n";
  return s;
}

std::string invariance_table_csv(const std::vector<int>& ns,
                                 const std::vector<InvarianceReport>& rs) {
  std::string s =
      "n,situation_a,situation_b,schedule_a,schedule_b,differs_in,predicted_identical,rows,"
      "identical_rows,max_ulp,first_diverging_head,first_diverging_position,max_err_a,max_err_b\n";
  for (std::size_t i = 0; i < rs.size(); ++i) {
    const InvarianceReport& r = rs[i];
    s += std::to_string(ns[i]) + "," + csv_field(r.a) + "," + csv_field(r.b) + "," +
         csv_field(short_schedule(r.sched_a)) + "," + csv_field(short_schedule(r.sched_b)) + "," +
         csv_field(join(r.differs_in, "; ")) + "," + std::to_string(int(r.predicted_identical)) +
         "," + std::to_string(r.rows) + ",";
    if (r.computed)
      s += std::to_string(r.identical_rows) + "," + std::to_string(r.max_ulp) + "," +
           std::to_string(r.first_diverging_head) + "," +
           std::to_string(r.first_diverging_position) + "," + fmt("%.17g", r.max_err_a) + "," +
           fmt("%.17g", r.max_err_b);
    else
      s += ",,,,,";
    s += "\n";
  }
  return s;
}

}  // namespace attnsim
