// attnsim._core's attention side: one method on arrays (the registry's parse_method -> run, as
// `attnsim run` calls it), golden, metrics, per-stage attribution, the method registry and the
// synthetic inputs. Every call reads its arrays where they lie and computes with the GIL released.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>
#include <omp.h>

#include <cmath>
#include <functional>
#include <memory>
#include <cstdio>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "bindings.hpp"
#include "experiments/analysis/attribute.hpp"
#include "experiments/analysis/invariance.hpp"
#include "experiments/analysis/verify.hpp"
#include "experiments/common/memory_limit.hpp"
#include "experiments/io/input_checks.hpp"
#include "experiments/io/synthetic.hpp"
#include "experiments/io/varlen.hpp"
#include "experiments/methods/memory_estimate.hpp"
#include "experiments/methods/methods.hpp"
#include "experiments/sweep/measure.hpp"
#include "formats/float8.hpp"
#include "sim/golden/golden.hpp"
#include "sim/pipeline/attribution.hpp"
#include "sim/pipeline/couplings.hpp"
#include "sim/pipeline/counters.hpp"

namespace attnsim::py {

namespace {

// Where the input's messages say the problem is ("batch sizes of q, k, v differ in the input").
constexpr const char* kWhere = "the input";

std::string dtype_label(Elem e) {
  switch (e) {
    case Elem::kF32:
      return "float32";
    case Elem::kF64:
      return "float64";
    case Elem::kF16:
      return "float16";
    case Elem::kBf16:
      return "bfloat16";
    default:
      return "";
  }
}

// q, k, v as the simulators take them, with the checks and messages of the dump reader
// (experiments/io/input_checks.hpp). Called with the GIL held for the type checks; the reading
// happens in `fill`, with the GIL released.
struct PendingInput {
  const AnyArray *q, *k, *v;
  Elem e[3];
  AttentionInput in;
  bool allow_nonfinite = false;

  void fill() {
    const AnyArray* a[3] = {q, k, v};
    std::vector<float>* dst[3] = {&in.q, &in.k, &in.v};
    const char* names[3] = {"q", "k", "v"};
    for (int t = 0; t < 3; ++t) {
      *dst[t] = read_f32(*a[t], e[t]);
      if (!allow_nonfinite)
        check_finite(dst[t]->data(), dst[t]->size(), dims_of(*a[t]),
                     std::string(names[t]) + " in " + kWhere,
                     "pass allow_nonfinite=True to proceed");
    }
  }
};

PendingInput pending_input(const AnyArray& q, const AnyArray& k, const AnyArray& v,
                           const std::vector<std::string>& tags, bool causal, double sm_scale,
                           bool allow_nonfinite) {
  PendingInput p{&q, &k, &v, {}, {}, allow_nonfinite};
  const AnyArray* a[3] = {&q, &k, &v};
  const char* names[3] = {"q", "k", "v"};
  std::vector<std::uint64_t> dims[3];
  for (int t = 0; t < 3; ++t) {
    require_cpu(*a[t], names[t]);
    p.e[t] = elem_of(*a[t], tags.size() == 3 ? tags[std::size_t(t)] : "");
    if (dtype_label(p.e[t]).empty()) {
      throw nb::type_error((std::string(names[t]) + " has dtype " + dtype_name(*a[t]) +
                            "; attnsim takes float32, float16, bfloat16 or float64")
                               .c_str());
    }
    dims[t] = dims_of(*a[t]);
  }
  p.in.shape = attention_shape_of(dims, kWhere);
  if (sm_scale != 0.0 && !(std::isfinite(sm_scale) && sm_scale > 0)) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "sm_scale = %g must be a finite number > 0", sm_scale);
    throw UsageError(buf);
  }
  // As the command line: causal rows that see no key would count as agreement.
  check_causal_rows(p.in.shape, causal, "q, k, v", "causal=False");
  p.in.causal = causal;
  p.in.sm_scale = sm_scale;
  // One dtype for all three; mixed inputs count as float32 (their values are used as they are),
  // as for a dump.
  p.in.dtype = p.e[0] == p.e[1] && p.e[1] == p.e[2] ? dtype_label(p.e[0]) : "float32";
  return p;
}

// The command line's memory check (experiments/common/memory_limit.hpp) before anything large is
// allocated: an allocation that fails inside the simulators' OpenMP regions would abort the
// interpreter. The limit: attnsim.set_memory_limit (or ATTNSIM_MAX_MEMORY), else the machine's.
void check_memory_here(double bytes, const std::string& what) {
  try {
    check_memory(bytes, what);
  } catch (const UsageError& e) {
    std::string m = e.what();
    for (const auto& [from, to] : {std::pair<std::string, std::string>{
                                       "--max-memory sets it", "attnsim.set_memory_limit sets it"},
                                   {"(--max-memory)", "(attnsim.set_memory_limit)"}}) {
      const auto at = m.find(from);
      if (at != std::string::npos) m.replace(at, from.size(), to);
    }
    throw UsageError(m);
  }
}

std::vector<std::size_t> o_shape(const AttentionShape& s) {
  return {std::size_t(s.batch), std::size_t(s.heads_q), std::size_t(s.len_q),
          std::size_t(s.head_dim_v)};
}

// The output as the kernel returns it: fp64/fp32 values, 16- and 8-bit formats as their bits (the
// Python side views them as float16, ml_dtypes.bfloat16, float8_e4m3fn, float8_e5m2). The values
// are already in the format, so encoding them is exact (the bits `attnsim run --output` writes).
nb::object output_array(const MethodOutput& out, const std::vector<std::size_t>& shape) {
  const std::size_t n = out.o.size();
  constexpr Policy kExact{Round::kNearestEven, Overflow::kInf, NanEncoding::kIeee};
  constexpr Policy kExact8{Round::kNearestEven, Overflow::kNaN, NanEncoding::kIeee};
  if (out.format == "fp64") return nb::cast(to_numpy(std::vector<double>(out.o), shape));
  if (out.format == "fp32") {
    return nb::cast(to_numpy(std::vector<float>(out.o.begin(), out.o.end()), shape));
  }
  if (out.format == "bf16" || out.format == "fp16") {
    std::vector<std::uint16_t> bits(n);
    for (std::size_t i = 0; i < n; ++i)
      bits[i] = out.format == "bf16" ? encode<bf16>(float(out.o[i]), kExact)
                                     : encode<fp16>(float(out.o[i]), kExact);
    return nb::cast(to_numpy(std::move(bits), shape));
  }
  if (out.format == "e4m3fn" || out.format == "e5m2") {
    std::vector<std::uint8_t> bits(n);
    for (std::size_t i = 0; i < n; ++i)
      bits[i] = out.format == "e4m3fn" ? encode<e4m3fn>(float(out.o[i]), kExact8)
                                       : encode<e5m2>(float(out.o[i]), kExact8);
    return nb::cast(to_numpy(std::move(bits), shape));
  }
  throw UsageError("attnsim cannot return output format '" + out.format + "' yet");
}

nb::dict metric_dict(const MetricValues& m) {
  nb::dict d;
  d["cosine"] = m.cosine;
  d["rel_l1"] = m.rel_l1;
  d["rmse"] = m.rmse;
  d["rel_fro"] = m.rel_fro;
  d["max_abs"] = m.max_abs;
  d["nonfinite"] = m.nonfinite;
  d["ulp_p50"] = m.ulp_p50;
  d["ulp_p99"] = m.ulp_p99;
  d["ulp_max"] = m.ulp_max;
  d["ulp_hist"] = m.ulp_hist;
  d["ulp_row_p50"] = m.ulp_row_p50;
  d["ulp_row_p99"] = m.ulp_row_p99;
  d["ulp_row_max"] = m.ulp_row_max;
  return d;
}

// The counters as {stage: {event: count}} for the stages with events, and "first":
// {stage: (event, slice, row, column)}.
nb::dict counter_dict(const StageCounters& c) {
  nb::dict d, first;
  for (int st = 0; st < kCounterStages; ++st) {
    nb::dict ev;
    for (int e = 0; e < kCounterEvents; ++e)
      if (c.n[std::size_t(st)][std::size_t(e)] != 0)
        ev[counter_event_name(CounterEvent(e))] = c.n[std::size_t(st)][std::size_t(e)];
    if (ev.size() == 0) continue;
    d[counter_stage_name(CounterStage(st))] = ev;
    const CounterWhere& w = c.first[std::size_t(st)];
    first[counter_stage_name(CounterStage(st))] =
        nb::make_tuple(counter_event_name(c.first_event[std::size_t(st)]), w.slice, w.row, w.col);
  }
  d["first"] = first;
  return d;
}

// attention(window=, softcap=): the input's own sliding window and score softcap
// (AttentionInput::window, ::softcap), which golden computes (attnsim.golden(window=, softcap=):
// the reference of a Gemma-style layer). A method that sets its problem from its own options
// (flex, vllm_triton: MethodSpec::problem) must name the same ones; any other method would ignore
// them, so it is refused.
void set_input_problem(const MethodConfig& m, AttentionInput& in, int window, double softcap) {
  if (window < 0) throw UsageError("window must be an integer >= 0 (0: none)");
  if (!(softcap >= 0) || std::isinf(softcap))
    throw UsageError("softcap must be a finite number >= 0 (0: none)");
  if (window > 0 && !in.causal) throw UsageError("window: a sliding window needs causal=True");
  in.window = window;
  in.softcap = softcap;
  if (m.spec->name == "golden") return;
  char buf[160];
  std::snprintf(buf, sizeof buf, "window=%d, softcap=%g", window, softcap);
  if (!m.changes_problem()) {
    throw UsageError(m.short_name() + " cannot apply " + buf +
                     " (methods that can: golden, flex:window=W,softcap=C, "
                     "vllm_triton:window=W,softcap=C)");
  }
  const AttentionInput r = m.problem(in);
  if (r.window != window || r.softcap != softcap) {
    throw UsageError(m.short_name() + ": its own window/softcap options differ from " + buf +
                     " (give the same in the method string)");
  }
}

nb::tuple attention(const AnyArray& q, const AnyArray& k, const AnyArray& v,
                    const std::vector<std::string>& tags, const std::string& method, bool causal,
                    double sm_scale, bool allow_nonfinite, bool counters,
                    const std::string& launch, int sms, const std::vector<std::int64_t>& cu_q,
                    const std::vector<std::int64_t>& cu_k, int window, double softcap) {
  PendingInput p = pending_input(q, k, v, tags, causal, sm_scale, allow_nonfinite);
  MethodOutput out;
  std::string canonical, mask;
  StageCounters cnt;
  {
    nb::gil_scoped_release release;
    // The method string first: a typo fails before any array is read.
    const MethodConfig m = parse_method(method);
    canonical = m.canonical();
    if (window != 0 || softcap != 0.0) set_input_problem(m, p.in, window, softcap);
    // The input's FP32 copy, the method's working set and output, the special-function tables.
    const AttentionShape& s = p.in.shape;
    check_memory_here(input_bytes(s) + method_memory_bytes(m, s, omp_get_max_threads()) +
                          fixed_memory_bytes(m),
                      "attention of " + m.short_name() + " on the input");
    std::vector<LaunchSeq> seqs;
    if (!cu_q.empty() || !cu_k.empty()) {
      if (!launch.empty())
        throw UsageError("launch= and cu_seqlens: a varlen batch is its own launch");
      if (counters) throw UsageError("counters=True takes dense inputs (not a varlen batch)");
      if (p.in.shape.batch != 1)
        throw UsageError("a varlen batch packs its sequences along the tokens of batch 1");
      seqs = varlen_sequences(cu_q, cu_k, p.in.shape.len_q, p.in.shape.len_kv,
                              "cu_seqlens_q, cu_seqlens_k");
    }
    attach_launch(m, p.in, launch, sms);
    p.fill();
    CounterScope scope(counters ? &cnt : nullptr);
    out = seqs.empty() ? m.run(p.in) : run_varlen(m, p.in, seqs, sms);
    mask = causal_mask_name(m, p.in);
  }
  const AttentionShape& s = p.in.shape;
  if (out.o.size() != s.o_size()) {
    throw UsageError("method " + canonical + " returned " + std::to_string(out.o.size()) +
                     " values, expected " + std::to_string(s.o_size()));
  }
  nb::object o = output_array(out, o_shape(s));
  nb::object lse = nb::none();
  const std::size_t rows = std::size_t(s.batch) * std::size_t(s.heads_q) * std::size_t(s.len_q);
  if (!out.lse.empty()) {
    std::vector<std::size_t> shape{std::size_t(s.batch), std::size_t(s.heads_q),
                                   std::size_t(s.len_q)};
    if (out.lse.size() != rows) shape = {out.lse.size()};
    lse = nb::cast(to_numpy(std::move(out.lse), shape));
  }
  return nb::make_tuple(o, out.format, lse, canonical,
                        counters ? nb::object(counter_dict(cnt)) : nb::none(), mask);
}

nb::list metrics(const AnyArray& out, const std::string& out_tag, const AnyArray& ref,
                 const std::string& ref_tag, const std::string& format, std::size_t blocks) {
  require_cpu(out, "out");
  require_cpu(ref, "ref");
  const Elem eo = elem_of(out, out_tag), er = elem_of(ref, ref_tag);
  for (const auto& [e, a, name] : {std::tuple{eo, &out, "out"}, std::tuple{er, &ref, "ref"}}) {
    if (dtype_label(e).empty()) {
      throw nb::type_error((std::string(name) + " has dtype " + dtype_name(*a) +
                            "; metrics take float32, float16, bfloat16 or float64 values")
                               .c_str());
    }
  }
  if (dims_of(out) != dims_of(ref)) throw UsageError("out and ref differ in shape");
  std::vector<MetricValues> ms;
  {
    nb::gil_scoped_release release;
    (void)parse_ulp_format(format);  // the format's message before any work
    // out and ref in FP64 and the ULP distances of every element.
    check_memory_here(24.0 * double(count_of(out)) + 32.0 * (1 << 20), "metrics of the arrays");
    const std::vector<double> o = read_f64(out, eo), r = read_f64(ref, er);
    const std::size_t n = o.size();
    if (blocks == 0 || n % blocks != 0) throw UsageError("internal error: metrics blocks");
    const std::size_t per = n / blocks;
    // Rows (for the row-scaled ULP figures) run along the last dimension, head_dim_v.
    const std::vector<std::uint64_t> dims = dims_of(out);
    const std::size_t row = dims.empty() ? n : std::size_t(dims.back());
    if (blocks == 1) {
      ms.push_back(measure(o.data(), r.data(), n, format, row));
    } else {
      for (std::size_t b = 0; b < blocks; ++b)
        ms.push_back(measure(o.data() + b * per, r.data() + b * per, per, format, row));
    }
  }
  nb::list l;
  for (const MetricValues& m : ms) l.append(metric_dict(m));
  return l;
}

// A Python callable (done, total, what) as the progress function of verify and attribute: called
// on the thread that released the GIL (never an OpenMP worker), so it takes the GIL back for the
// call; an exception it raises ends the computation and reaches the caller.
std::function<void(int, int, const std::string&)> python_progress(const nb::object& progress) {
  if (progress.is_none()) return {};
  return [progress](int done, int total, const std::string& what) {
    nb::gil_scoped_acquire acquire;
    progress(done, total, what);
  };
}

nb::list attribute(const AnyArray& q, const AnyArray& k, const AnyArray& v,
                   const std::vector<std::string>& tags, const std::string& method, bool causal,
                   double sm_scale, bool allow_nonfinite, const std::string& input,
                   const nb::object& progress) {
  PendingInput p = pending_input(q, k, v, tags, causal, sm_scale, allow_nonfinite);
  std::vector<AttributionRow> rows;
  {
    nb::gil_scoped_release release;
    const MethodConfig m = parse_method(method);
    if (!m.is_pipeline()) {
      throw UsageError("method '" + m.spec->name +
                       "' is not a pipeline: it has no stages to attribute");
    }
    // One measured point's memory (golden and the method, one after the other), as the command.
    check_memory_here(point_memory_bytes(m, p.in.shape, omp_get_max_threads()),
                      "attribute of " + m.short_name() + " on the input");
    p.fill();
    try {
      rows = attribute_stages(p.in, input, m, golden_attention_ref(m.problem(p.in), m.causal_align(p.in)),
                              python_progress(progress));
    } catch (const std::invalid_argument& e) {
      throw UsageError(e.what());
    }
  }
  nb::list out;
  for (const AttributionRow& r : rows) {
    out.append(nb::make_tuple(r.input, r.stage, r.method_choice, r.exact_choice, int(r.differs),
                              r.full.rel_fro, r.full.cosine, r.full.max_abs, r.only_exact.rel_fro,
                              r.only_exact.cosine, r.only_exact.max_abs, r.only_this.rel_fro,
                              r.only_this.cosine, r.only_this.max_abs, r.note));
  }
  return out;
}

nb::list methods() {
  nb::list out;
  for (const MethodSpec& s : method_registry()) {
    nb::list opts;
    for (const MethodParam& p : s.params) {
      nb::dict o;
      o["key"] = p.key;
      o["choices"] = p.choices;
      o["default"] = p.default_value;
      o["help"] = p.help;
      o["min"] = p.choices.empty() && !p.text && !p.number ? nb::object(nb::int_(p.min_int))
                                                           : nb::none();
      opts.append(o);
    }
    nb::dict d;
    d["name"] = s.name;
    d["help"] = s.help;
    d["options"] = opts;
    d["pipeline"] = bool(s.preset);
    out.append(d);
  }
  return out;
}

nb::dict describe_text(const std::string& method, int head_dim, const std::string& dtype) {
  const MethodConfig m = parse_method(method);
  if (head_dim < 1) throw UsageError("head_dim must be a positive integer");
  if (dtype != "float32" && dtype != "float16" && dtype != "bfloat16" && dtype != "float64") {
    throw UsageError("unknown dtype '" + dtype +
                     "' (expected float32, float16, bfloat16 or float64)");
  }
  nb::dict d;
  d["method"] = m.canonical();
  d["short"] = m.short_name();
  nb::dict stages;
  if (!m.is_pipeline()) {
    d["pipeline"] = nb::none();
    d["stages"] = stages;
    return d;
  }
  // The presets choose tiles and formats from the input's head dimension and dtype only.
  AttentionInput in;
  in.shape = {1, 1, 1, 128, 128, head_dim, head_dim};
  in.dtype = dtype;
  Pipeline p;
  MethodDescription desc;
  try {
    p = m.pipeline(in);
    desc = describe_method(m, in);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  d["pipeline"] = desc.method;
  d["differences"] = desc.differences;
  d["outside"] = desc.outside;
  for (const StageInfo& s : pipeline_stages()) stages[s.name] = stage_choice(p, s.stage);
  d["stages"] = stages;
  return d;
}

nb::tuple synthetic(const std::string& spec) {
  AttentionInput in;
  {
    nb::gil_scoped_release release;
    in = make_synthetic(spec);
  }
  const AttentionShape& s = in.shape;
  auto sz = [](int x) { return std::size_t(x); };
  return nb::make_tuple(
      to_numpy(std::move(in.q), {sz(s.batch), sz(s.heads_q), sz(s.len_q), sz(s.head_dim)}),
      to_numpy(std::move(in.k), {sz(s.batch), sz(s.heads_kv), sz(s.len_kv), sz(s.head_dim)}),
      to_numpy(std::move(in.v), {sz(s.batch), sz(s.heads_kv), sz(s.len_kv), sz(s.head_dim_v)}),
      in.causal);
}

// attnsim.verify: a kernel's output (values of fp16/bf16/fp32) against a method and golden.
nb::dict verify(const AnyArray& q, const AnyArray& k, const AnyArray& v,
                const std::vector<std::string>& tags, const AnyArray& o, const std::string& o_tag,
                const std::string& method, bool causal, double sm_scale, bool allow_nonfinite,
                double band, bool counters, const nb::object& progress) {
  require_cpu(o, "o");
  const Elem eo = elem_of(o, o_tag);
  const std::string fmt = eo == Elem::kF16 ? "fp16" : eo == Elem::kBf16 ? "bf16" : eo == Elem::kF32 ? "fp32" : "";
  if (fmt.empty())
    throw nb::type_error(("o has dtype " + dtype_name(o) +
                          "; verify takes a kernel's float16, bfloat16 or float32 output").c_str());
  PendingInput p = pending_input(q, k, v, tags, causal, sm_scale, allow_nonfinite);
  const std::vector<std::uint64_t> d = dims_of(o);
  VerifyReport r;
  {
    nb::gil_scoped_release release;
    p.fill();
    const AttentionShape& s = p.in.shape;
    const std::vector<std::uint64_t> want{std::uint64_t(s.batch), std::uint64_t(s.heads_q),
                                          std::uint64_t(s.len_q), std::uint64_t(s.head_dim_v)};
    if (d != want) throw UsageError("o's shape is not [batch, heads_q, len_q, head_dim_v] of q and v");
    KernelOutput ko{read_f64(o, eo), fmt, {}};
    VerifyOptions vo;
    vo.method = method;
    vo.band = band;
    vo.counters = counters;
    vo.allow_nonfinite = allow_nonfinite;
    vo.progress = python_progress(progress);
    r = verify_kernel(p.in, ko, vo);
  }
  nb::dict out;
  out["verdict"] = int(r.verdict);
  out["method"] = r.method;
  out["identical_candidates"] = r.identical_candidates;
  out["elems"] = r.elems;
  out["elems_identical"] = r.elems_identical;
  out["rows"] = r.rows;
  out["rows_identical"] = r.rows_identical;
  out["rows_outside_band"] = r.rows_outside_band;
  out["err_kernel"] = r.err_kernel;
  out["err_method"] = r.err_method;
  out["band"] = r.allowance;
  out["first_diverging"] = r.diverges ? nb::object(nb::make_tuple(r.first_batch, r.first_head,
                                                                  r.first_row, r.first_col))
                                      : nb::none();
  nb::list worst;
  for (std::size_t i : r.worst) {
    const VerifyRow& w = r.per_row[i];
    worst.append(nb::make_tuple(w.batch, w.head, w.row, w.err_kernel, w.allowance, w.suspect_block));
  }
  out["worst_rows"] = worst;
  out["report"] = format_verify_report(r, 5);
  out["counters"] = r.has_counters ? nb::object(counter_dict(r.counters)) : nb::none();
  return out;
}

nb::dict schedule_dict(const KernelSchedule& k) {
  nb::dict d;
  d["family"] = k.family;
  d["kernel"] = k.kernel;
  nb::list items;
  for (const ScheduleItem& i : k.items) items.append(nb::make_tuple(i.key, i.value, i.arithmetic, i.why));
  d["items"] = items;
  d["unverified"] = k.unverified;
  d["arithmetic_key"] = k.arithmetic_key();
  return d;
}

// attnsim.schedule: the schedule a kernel takes for a launch.
nb::dict schedule_py(const std::string& method, const std::string& situation, int heads_q,
                     int heads_kv, int head_dim, int head_dim_v, bool causal, int sms) {
  KernelSchedule k;
  std::string text, canonical;
  {
    nb::gil_scoped_release release;
    const MethodConfig m = parse_method(method);
    k = method_schedule(m, invariance_problem(heads_q, heads_kv, head_dim, causal, head_dim_v, sms),
                        parse_launch(situation));
    canonical = m.canonical();
    text = format_schedule(canonical, situation, k);
  }
  nb::dict d = schedule_dict(k);
  d["method"] = canonical;
  d["situation"] = situation;
  d["text"] = text;
  return d;
}

nb::dict report_dict(const InvarianceReport& r, bool with_rows) {
  nb::dict d;
  d["method"] = r.method;
  d["a"] = r.a;
  d["b"] = r.b;
  d["schedule_a"] = schedule_dict(r.sched_a);
  d["schedule_b"] = schedule_dict(r.sched_b);
  d["differs_in"] = r.differs_in;
  d["predicted_identical"] = r.predicted_identical;
  d["positions"] = nb::make_tuple(r.first_position, r.first_position + r.positions);
  d["rows"] = r.rows;
  d["computed"] = r.computed;
  d["identical"] = r.identical();
  if (r.computed) {
    d["identical_rows"] = r.identical_rows;
    d["max_ulp"] = r.max_ulp;
    d["max_err_a"] = r.max_err_a;
    d["max_err_b"] = r.max_err_b;
    d["first_diverging"] = r.first_diverging_position >= 0
                               ? nb::object(nb::make_tuple(r.first_diverging_head,
                                                           r.first_diverging_position))
                               : nb::none();
    if (with_rows) {
      nb::list rows;
      for (const InvarianceRow& w : r.per_row)
        rows.append(nb::make_tuple(w.head, w.position, w.identical, w.ulp, w.err_a, w.err_b));
      d["per_row"] = rows;
    }
  }
  return d;
}

// attnsim.invariance: situations A and B (or a table over ns), schedules only or computed.
nb::object invariance_py(const std::string& method, const std::string& a, const std::string& b,
                         int heads_q, int heads_kv, int head_dim, int head_dim_v, bool causal,
                         int sms, const std::vector<int>& ns, bool table, bool compute,
                         const nb::object& q, const nb::object& k, const nb::object& v,
                         const std::vector<std::string>& tags, const std::string& dist,
                         std::uint64_t seed) {
  InvarianceProblem p = invariance_problem(heads_q, heads_kv, head_dim, causal, head_dim_v, sms);
  std::unique_ptr<PendingInput> pend;
  AnyArray qa, ka, va;
  if (!q.is_none()) {
    qa = nb::cast<AnyArray>(q);
    ka = nb::cast<AnyArray>(k);
    va = nb::cast<AnyArray>(v);
    pend = std::make_unique<PendingInput>(pending_input(qa, ka, va, tags, false, 0.0, false));
    const AttentionShape& s = pend->in.shape;
    if (s.batch != 1) throw UsageError("q, k, v hold the target sequence: batch 1");
    p.heads_q = s.heads_q, p.heads_kv = s.heads_kv, p.head_dim = s.head_dim,
    p.head_dim_v = s.head_dim_v, p.dtype = pend->in.dtype;
  }
  std::vector<InvarianceReport> rs;
  std::string text;
  {
    nb::gil_scoped_release release;
    const MethodConfig m = parse_method(method);
    TargetData data;
    if (pend) {
      pend->fill();
      data.data = std::move(pend->in);
    } else if (compute) {
      std::vector<std::string> sits;
      for (int n : ns)
        for (const std::string& s : {a, b}) sits.push_back(table ? substitute_n(s, n) : s);
      data = synthetic_target(p, sits, dist, seed);
    }
    const TargetData* dp = pend || compute ? &data : nullptr;
    if (table) {
      rs = invariance_table(m, p, a, b, ns, dp);
      text = format_invariance_table(ns, rs);
    } else {
      rs.push_back(invariance(m, p, a, b, dp));
      text = format_invariance(rs[0], 10);
    }
  }
  if (!table) {
    nb::dict d = report_dict(rs[0], true);
    d["text"] = text;
    return d;
  }
  nb::list out;
  for (std::size_t i = 0; i < rs.size(); ++i) {
    nb::dict d = report_dict(rs[i], false);
    d["n"] = ns[i];
    out.append(d);
  }
  nb::dict t;
  t["table"] = out;
  t["text"] = text;
  int first = -1;
  for (std::size_t i = 0; i < rs.size() && first < 0; ++i)
    if (!rs[i].identical()) first = ns[i];
  t["first_break"] = first >= 0 ? nb::object(nb::int_(first)) : nb::none();
  return t;
}

}  // namespace

void bind_attention(nb::module_& m) {
  m.def("verify", &verify, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("tags"), nb::arg("o"),
        nb::arg("o_tag"), nb::arg("method"), nb::arg("causal"), nb::arg("sm_scale"),
        nb::arg("allow_nonfinite"), nb::arg("band"), nb::arg("counters"),
        nb::arg("progress") = nb::none());
  m.def("attention", &attention, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("tags"),
        nb::arg("method"), nb::arg("causal"), nb::arg("sm_scale"), nb::arg("allow_nonfinite"),
        nb::arg("counters") = false, nb::arg("launch") = "", nb::arg("sms") = 132,
        nb::arg("cu_q") = std::vector<std::int64_t>{}, nb::arg("cu_k") = std::vector<std::int64_t>{},
        nb::arg("window") = 0, nb::arg("softcap") = 0.0);
  m.def("metrics", &metrics, nb::arg("out"), nb::arg("out_tag"), nb::arg("ref"), nb::arg("ref_tag"),
        nb::arg("format"), nb::arg("blocks"));
  m.def("attribute", &attribute, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("tags"),
        nb::arg("method"), nb::arg("causal"), nb::arg("sm_scale"), nb::arg("allow_nonfinite"),
        nb::arg("input"), nb::arg("progress") = nb::none());
  m.def("schedule", &schedule_py, nb::arg("method"), nb::arg("situation"), nb::arg("heads_q"),
        nb::arg("heads_kv"), nb::arg("head_dim"), nb::arg("head_dim_v"), nb::arg("causal"),
        nb::arg("sms"));
  m.def("invariance", &invariance_py, nb::arg("method"), nb::arg("a"), nb::arg("b"),
        nb::arg("heads_q"), nb::arg("heads_kv"), nb::arg("head_dim"), nb::arg("head_dim_v"),
        nb::arg("causal"), nb::arg("sms"), nb::arg("ns"), nb::arg("table"), nb::arg("compute"),
        nb::arg("q").none(), nb::arg("k").none(), nb::arg("v").none(), nb::arg("tags"),
        nb::arg("dist"), nb::arg("seed"));
  m.def("methods", &methods);
  m.def("canonical", [](const std::string& text) { return parse_method(text).canonical(); });
  m.def("describe", &describe_text, nb::arg("method"), nb::arg("head_dim"), nb::arg("dtype"));
  m.def("synthetic", &synthetic, nb::arg("spec"));
  m.def("ulp_buckets", [] {
    std::vector<std::string> labels;
    for (int k = 0; k < UlpHistogram::kBuckets; ++k)
      labels.push_back(UlpHistogram::bucket_label(k));
    return labels;
  });
  m.def("set_num_threads", [](int n) {
    if (n < 1) throw UsageError("the number of threads must be a positive integer");
    omp_set_num_threads(n);
  });
  m.def("get_num_threads", [] { return omp_get_max_threads(); });
  m.def("set_memory_limit", [](const std::string& size) {
    set_memory_limit(size.empty() ? 0 : parse_memory_size(size));
  });
  m.def("memory_limit", [] { return memory_limit(); });
}

}  // namespace attnsim::py
