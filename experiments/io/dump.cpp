// Attention tensor dumps in HDF5 and seeded synthetic inputs.
#include "experiments/io/dump.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>

#include "experiments/common/error.hpp"
#include "experiments/io/hdf5_io.hpp"

namespace attnsim {

namespace {

void check_finite(const std::vector<float>& x, const std::vector<std::uint64_t>& dims,
                  const std::string& what) {
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::isfinite(x[i])) continue;
    std::string idx;
    std::size_t rem = i;
    std::vector<std::uint64_t> coord(dims.size());
    for (std::size_t d = dims.size(); d-- > 0;) {
      coord[d] = rem % dims[d];
      rem /= dims[d];
    }
    for (std::size_t d = 0; d < coord.size(); ++d) idx += (d ? "," : "") + std::to_string(coord[d]);
    throw UsageError(what + " has a non-finite value (" + format_number(x[i]) + ") at [" + idx +
                     "]; pass --allow-nonfinite to proceed");
  }
}

}  // namespace

std::vector<std::string> dump_prefixes(const std::string& path) {
  H5Reader r(path);
  // Every group that holds a dataset `q`, at any depth ("blocks/3/q" too), the root first, then
  // in path order: nothing in the file is skipped silently.
  std::vector<std::string> out;
  for (const H5DatasetInfo& d : r.datasets()) {
    if (d.name == "q") {
      out.insert(out.begin(), "");
    } else if (d.name.size() > 2 && d.name.compare(d.name.size() - 2, 2, "/q") == 0) {
      out.push_back(d.name.substr(0, d.name.size() - 1));
    }
  }
  if (out.empty()) throw UsageError("'" + path + "' has no dataset 'q' (nor groups with one)");
  return out;
}

AttentionInput read_attention_dump(const std::string& path, const std::string& prefix,
                                   bool allow_nonfinite, DumpInfo* info) {
  H5Reader r(path);
  const std::string where = "'" + path + "'" + (prefix.empty() ? "" : " group " + prefix);
  // The shapes first, from the metadata: a dump that is not an attention problem is refused before
  // its data is read, and no size is cast to int before it is known to fit.
  const char* names[3] = {"q", "k", "v"};
  std::vector<std::uint64_t> dims[3];
  for (int t = 0; t < 3; ++t) {
    dims[t] = r.dataset_info(prefix + names[t]).dims;
    if (dims[t].size() != 4) {
      throw UsageError("q, k and v in " + where +
                       " must have rank 4 [batch, heads, tokens, head_dim]; got rank " +
                       std::to_string(dims[t].size()));
    }
    for (const std::uint64_t d : dims[t]) {
      if (d > std::uint64_t(std::numeric_limits<int>::max())) {
        throw UsageError(std::string(names[t]) + " in " + where + " has a dimension of " +
                         std::to_string(d) + ", beyond the limit of 2147483647");
      }
    }
  }
  const std::vector<std::uint64_t>&qd = dims[0], &kd = dims[1], &vd = dims[2];
  AttentionInput in;
  AttentionShape& s = in.shape;
  s.batch = int(qd[0]);
  s.heads_q = int(qd[1]);
  s.len_q = int(qd[2]);
  s.head_dim = int(qd[3]);
  s.heads_kv = int(kd[1]);
  s.len_kv = int(kd[2]);
  s.head_dim_v = int(vd[3]);
  if (kd[0] != qd[0] || vd[0] != qd[0])
    throw UsageError("batch sizes of q, k, v differ in " + where);
  if (kd[3] != qd[3]) throw UsageError("head_dim of q and k differ in " + where);
  if (vd[1] != kd[1] || vd[2] != kd[2])
    throw UsageError("k and v differ in heads or tokens in " + where);
  // Before the head ratio: zero k/v heads would divide by zero.
  for (const auto& d : dims) {
    if (std::find(d.begin(), d.end(), 0u) != d.end()) throw UsageError("empty tensor in " + where);
  }
  if (s.heads_q % s.heads_kv != 0) {
    throw UsageError("q heads (" + std::to_string(s.heads_q) +
                     ") are not a multiple of k/v heads (" + std::to_string(s.heads_kv) + ") in " +
                     where);
  }
  const H5Array q = r.read_array(prefix + "q");
  const H5Array k = r.read_array(prefix + "k");
  const H5Array v = r.read_array(prefix + "v");
  if (!allow_nonfinite) {
    check_finite(q.data, q.dims, "q in " + where);
    check_finite(k.data, k.dims, "k in " + where);
    check_finite(v.data, v.dims, "v in " + where);
  }
  in.q = q.data;
  in.k = k.data;
  in.v = v.data;
  // One dtype for all three; a mixed dump counts as float32 (its values are used as they are).
  in.dtype = q.dtype == k.dtype && k.dtype == v.dtype ? q.dtype : "float32";
  const std::string group = prefix.empty() ? "/" : prefix.substr(0, prefix.size() - 1);
  // causal is a flag and sm_scale a softmax scale: a NaN or Inf scale would make every output
  // NaN, measured as if it were the method's error.
  for (const std::string& obj : {group, std::string("/")}) {
    if (r.has_attr(obj, "causal")) {
      const double c = r.attr_f64(obj, "causal");
      if (c != 0.0 && c != 1.0) {
        throw UsageError("attribute causal = " + format_number(c) + " in " + where +
                         " must be 0 or 1");
      }
      in.causal = c != 0.0;
      break;
    }
  }
  for (const std::string& obj : {group, std::string("/")}) {
    if (r.has_attr(obj, "sm_scale")) {
      in.sm_scale = r.attr_f64(obj, "sm_scale");
      if (!std::isfinite(in.sm_scale) || in.sm_scale <= 0) {
        throw UsageError("attribute sm_scale = " + format_number(in.sm_scale) + " in " + where +
                         " must be a finite number > 0");
      }
      break;
    }
  }
  // The same attributes on a dataset (f["q"].attrs["causal"] = 1, the likeliest slip when writing
  // a dump by hand) are not where attnsim reads them: one that disagrees with what the run uses
  // would silently run another problem, so it is refused; one that agrees is harmless.
  for (const char* t : names) {
    const std::string ds = prefix + t;
    if (r.has_attr(ds, "causal") && (r.attr_f64(ds, "causal") != 0.0) != in.causal) {
      throw UsageError("attribute causal = " + format_number(r.attr_f64(ds, "causal")) +
                       " on dataset '" + ds + "' of '" + path +
                       "' is not read (attnsim reads causal from the layer group or the file "
                       "root, e.g. f.attrs['causal'] = 1), and this run would be " +
                       (in.causal ? "causal" : "non-causal") +
                       ": move it to the group or the root, or remove it");
    }
    if (r.has_attr(ds, "sm_scale") && r.attr_f64(ds, "sm_scale") != in.scale()) {
      throw UsageError("attribute sm_scale = " + format_number(r.attr_f64(ds, "sm_scale")) +
                       " on dataset '" + ds + "' of '" + path +
                       "' is not read (attnsim reads sm_scale from the layer group or the file "
                       "root, e.g. f.attrs['sm_scale'] = 0.125), and this run would use " +
                       format_number(in.scale()) +
                       ": move it to the group or the root, or "
                       "remove it");
    }
  }
  if (info) {
    info->path = path;
    info->prefix = prefix;
    info->dtype = q.dtype;
    info->source = r.has_attr("/", "source") ? r.attr_string("/", "source") : "";
  }
  return in;
}

void check_attention_dumps(const std::string& path, const std::vector<std::string>& prefixes,
                           bool allow_nonfinite) {
  for (const std::string& prefix : prefixes) read_attention_dump(path, prefix, allow_nonfinite);
}

void write_attention_dump(const std::string& path, const AttentionInput& in,
                          const std::string& source) {
  const AttentionShape& s = in.shape;
  H5Writer w(path);
  auto u = [](int x) { return std::uint64_t(x); };
  w.write_f32("q", {u(s.batch), u(s.heads_q), u(s.len_q), u(s.head_dim)}, in.q.data());
  w.write_f32("k", {u(s.batch), u(s.heads_kv), u(s.len_kv), u(s.head_dim)}, in.k.data());
  w.write_f32("v", {u(s.batch), u(s.heads_kv), u(s.len_kv), u(s.head_dim_v)}, in.v.data());
  w.attr_i64("/", "causal", in.causal ? 1 : 0);
  if (in.sm_scale != 0.0) w.attr_f64("/", "sm_scale", in.sm_scale);
  w.attr_string("/", "source", source);
  w.attr_i64("/", "rope_applied", 0);
  w.commit();
}

namespace {

// splitmix64 finaliser as a counter-based generator (Steele et al. 2014).
std::uint64_t mix(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// Uniform in (0, 1) with 53 random bits, never 0.
double uniform01(std::uint64_t seed, std::uint64_t stream, std::uint64_t i) {
  const std::uint64_t r = mix(mix(seed ^ mix(stream)) + i);
  return (double(r >> 11) + 0.5) * 0x1.0p-53;
}
// Standard normal by Box-Muller on two counter draws.
double normal01(std::uint64_t seed, std::uint64_t stream, std::uint64_t i) {
  const double u1 = uniform01(seed, stream, 2 * i);
  const double u2 = uniform01(seed, stream, 2 * i + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586476925 * u2);
}

struct Spec {
  std::string dist;
  std::map<std::string, double> kv;
  double get(const std::string& k, double def) const {
    auto it = kv.find(k);
    return it == kv.end() ? def : it->second;
  }
};

// Largest |N(0,1)| normal01 can return: Box-Muller's radius sqrt(-2 ln u1) at the smallest u1,
// 2^-54 (uniform01 never returns less), is sqrt(108 ln 2) = 8.6507.
constexpr double kMaxNormal = 8.6507;
constexpr double kMaxFloat = 3.4028234663852886e38;

// Ranges of the distribution parameters, the keys each distribution uses, and a bound on the
// generated values: a spec whose q, k or v could overflow float32 (to Inf, making every metric NaN)
// is refused whatever its seed and size.
void validate_spec(const Spec& s, const std::string& text) {
  auto bad = [&](const std::string& what) {
    throw UsageError("synthetic spec '" + abbreviate(text) + "': " + what);
  };
  static const std::vector<std::pair<std::string, std::vector<std::string>>> kOwnKeys{
      {"uniform", {"lo", "hi"}},
      {"normal", {"sigma"}},
      {"kbias", {"sigma", "bias"}},
      {"outlier", {"sigma", "frac", "mag"}},
      {"peaked", {"sigma", "sharp"}}};
  std::vector<std::string> own;
  for (const auto& [dist, keys] : kOwnKeys)
    if (dist == s.dist) own = keys;
  for (const auto& [key, value] : s.kv) {
    const bool shape = key == "b" || key == "hq" || key == "hkv" || key == "nq" || key == "nkv" ||
                       key == "d" || key == "dv" || key == "causal" || key == "seed";
    if (shape || std::find(own.begin(), own.end(), key) != own.end()) continue;
    std::string list;
    for (const auto& k : own) list += (list.empty() ? "" : " ") + k;
    bad("key '" + key + "' does not apply to " + s.dist + " (its parameters: " + list + ")");
  }
  const double seed = s.get("seed", 0);
  if (seed < 0 || seed != std::floor(seed) || seed > 9.0e15) bad("seed must be an integer >= 0");
  const double causal = s.get("causal", 0);
  if (causal != 0 && causal != 1) bad("causal must be 0 or 1");
  const double sigma = s.get("sigma", 1.0);
  if (sigma < 0) bad("sigma must be >= 0");
  const double lo = s.get("lo", -1.0), hi = s.get("hi", 1.0);
  if (lo > hi) bad("lo must be <= hi");
  const double frac = s.get("frac", 0.05);
  if (frac < 0 || frac > 1) bad("frac must be in [0, 1]");
  const double noise = sigma * kMaxNormal;
  double bound = noise;
  if (s.dist == "uniform") bound = std::max(std::fabs(lo), std::fabs(hi));
  if (s.dist == "kbias") bound = noise + std::fabs(s.get("bias", 4.0)) * kMaxNormal;
  if (s.dist == "outlier" && frac > 0) bound = noise * std::max(1.0, std::fabs(s.get("mag", 20.0)));
  if (s.dist == "peaked") bound = (std::fabs(s.get("sharp", 4.0)) + 0.25) * noise;
  if (!(bound <= kMaxFloat)) {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  "generated values can reach %.3g, beyond float32's largest %.3g (they would "
                  "overflow to Inf)",
                  bound, kMaxFloat);
    bad(buf);
  }
}

Spec parse_spec(const std::string& spec) {
  static const std::vector<std::string> kDists{"normal", "uniform", "kbias", "outlier", "peaked"};
  static const std::vector<std::string> kKeys{"b",    "hq",     "hkv",  "nq",    "nkv", "d",
                                              "dv",   "causal", "seed", "sigma", "lo",  "hi",
                                              "bias", "frac",   "mag",  "sharp"};
  Spec s;
  const auto colon = spec.find(':');
  s.dist = spec.substr(0, colon);
  bool known = false;
  for (const auto& d : kDists) known = known || d == s.dist;
  if (!known) {
    throw UsageError("unknown synthetic distribution '" + abbreviate(s.dist) +
                     "' (expected normal, uniform, kbias, outlier or peaked)");
  }
  if (colon == std::string::npos) return s;
  std::size_t pos = colon + 1;
  while (pos <= spec.size()) {
    const auto comma = spec.find(',', pos);
    const std::string item =
        spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? spec.size() + 1 : comma + 1;
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos)
      throw UsageError("synthetic spec item '" + abbreviate(item) + "' is not key=value");
    const std::string key = item.substr(0, eq);
    bool ok = false;
    for (const auto& k : kKeys) ok = ok || k == key;
    if (!ok) {
      std::string all;
      for (const auto& k : kKeys) all += (all.empty() ? "" : " ") + k;
      throw UsageError("unknown synthetic spec key '" + abbreviate(key) + "' (allowed: " + all +
                       ")");
    }
    // As in the method grammar: a key given twice is a typo, not an override.
    if (s.kv.count(key))
      throw UsageError("synthetic spec key '" + key + "' given twice in '" + abbreviate(spec) +
                       "'");
    double v = 0;
    try {
      std::size_t used = 0;
      v = std::stod(item.substr(eq + 1), &used);
      if (used != item.size() - eq - 1) throw std::invalid_argument("trailing characters");
    } catch (const std::exception&) {
      v = NAN;  // not a number, or out of double's range (std::out_of_range)
    }
    if (!std::isfinite(v))
      throw UsageError("synthetic spec value '" + abbreviate(item) + "' is not a finite number");
    s.kv[key] = v;
  }
  validate_spec(s, spec);
  return s;
}

}  // namespace

AttentionInput make_synthetic(const std::string& spec) {
  return make_synthetic(spec, synthetic_seed(spec));
}

namespace {

AttentionShape shape_of(const Spec& s) {
  AttentionShape sh;
  // A size is a positive integer the simulators' int holds. Whether a legal size fits is the
  // element bound's and the memory estimate's question: their messages name the size and the
  // limit (a huge nkv is not "not a positive integer").
  auto geti = [&](const char* k, double def) {
    const double v = s.get(k, def);
    if (v < 1 || v != std::floor(v)) {
      throw UsageError(std::string("synthetic spec: ") + k + " must be a positive integer");
    }
    if (v > double(std::numeric_limits<int>::max())) {
      char buf[160];
      std::snprintf(buf, sizeof buf, "synthetic spec: %s=%.17g is out of range (at most %d)", k, v,
                    std::numeric_limits<int>::max());
      throw UsageError(buf);
    }
    return int(v);
  };
  sh.batch = geti("b", 1);
  sh.heads_q = geti("hq", 1);
  sh.heads_kv = geti("hkv", sh.heads_q);
  sh.len_q = geti("nq", 256);
  sh.len_kv = geti("nkv", sh.len_q);
  sh.head_dim = geti("d", 64);
  sh.head_dim_v = geti("dv", sh.head_dim);
  if (sh.heads_q % sh.heads_kv != 0)
    throw UsageError("synthetic spec: hq must be a multiple of hkv");
  // In double: the size_t products can wrap for absurd specs (found by the fuzz target).
  const double b = sh.batch, q = double(sh.heads_q) * sh.len_q * sh.head_dim,
               k = double(sh.heads_kv) * sh.len_kv * sh.head_dim,
               v = double(sh.heads_kv) * sh.len_kv * sh.head_dim_v,
               o = double(sh.heads_q) * sh.len_q * sh.head_dim_v;
  if (b * (q + k + v + o) > 4.0e8) {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "synthetic spec: q, k, v and o would hold %.4g elements together, beyond the "
                  "limit of 4e8 (400M) elements",
                  b * (q + k + v + o));
    throw UsageError(buf);
  }
  return sh;
}

}  // namespace

AttentionShape synthetic_shape(const std::string& spec) { return shape_of(parse_spec(spec)); }

bool synthetic_causal(const std::string& spec) { return parse_spec(spec).get("causal", 0) != 0; }

std::uint64_t synthetic_seed(const std::string& spec) {
  const Spec s = parse_spec(spec);
  shape_of(s);  // the whole spec is valid, sizes included, before a sweep starts
  return std::uint64_t(s.get("seed", 0));  // an integer >= 0 (validate_spec)
}

namespace {

AttentionInput generate(const Spec& s, std::uint64_t seed) {
  AttentionInput in;
  in.shape = shape_of(s);
  AttentionShape& sh = in.shape;
  in.causal = s.get("causal", 0) != 0;
  in.q.resize(sh.q_size());
  in.k.resize(sh.k_size());
  in.v.resize(sh.v_size());
  const double sigma = s.get("sigma", 1.0);
  const double lo = s.get("lo", -1.0), hi = s.get("hi", 1.0);
  // Streams 1, 2, 3 = q, k, v; 4+ = per-channel parameters.
  auto fill_normal = [&](std::vector<float>& x, std::uint64_t stream, double scale) {
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(scale * normal01(seed, stream, i));
  };
  if (s.dist == "uniform") {
    auto fill = [&](std::vector<float>& x, std::uint64_t stream) {
      for (std::size_t i = 0; i < x.size(); ++i)
        x[i] = float(lo + (hi - lo) * uniform01(seed, stream, i));
    };
    fill(in.q, 1);
    fill(in.k, 2);
    fill(in.v, 3);
    return in;
  }
  fill_normal(in.q, 1, sigma);
  fill_normal(in.k, 2, sigma);
  fill_normal(in.v, 3, sigma);
  const int d = sh.head_dim, dv = sh.head_dim_v;
  if (s.dist == "kbias") {
    // Real K (and V) carry a large per-channel mean shared by all tokens (SageAttention2 Fig. 2,
    // TurboAttention Fig. 4): channel c of head h gets bias * N(0,1).
    const double bias = s.get("bias", 4.0);
    const std::size_t heads = std::size_t(sh.batch) * sh.heads_kv;
    for (std::size_t h = 0; h < heads; ++h) {
      for (int t = 0; t < sh.len_kv; ++t) {
        for (int c = 0; c < d; ++c) {
          in.k[(h * sh.len_kv + t) * d + c] += float(bias * normal01(seed, 4, h * d + c));
        }
        for (int c = 0; c < dv; ++c) {
          in.v[(h * sh.len_kv + t) * dv + c] += float(0.5 * bias * normal01(seed, 5, h * dv + c));
        }
      }
    }
  } else if (s.dist == "outlier") {
    // A few channels of Q and K scaled by `mag` (channel outliers of real models).
    const double frac = s.get("frac", 0.05), mag = s.get("mag", 20.0);
    auto scale_channels = [&](std::vector<float>& x, int dim, std::uint64_t stream) {
      for (int c = 0; c < dim; ++c) {
        if (uniform01(seed, stream, std::uint64_t(c)) >= frac) continue;
        for (std::size_t i = std::size_t(c); i < x.size(); i += std::size_t(dim))
          x[i] *= float(mag);
      }
    };
    scale_channels(in.q, d, 6);
    scale_channels(in.k, d, 7);
  } else if (s.dist == "peaked") {
    // Each query is `sharp` times a randomly chosen key of its KV head plus noise: softmax rows
    // concentrated on one key, the hard case for P quantization.
    const double sharp = s.get("sharp", 4.0);
    for (int b = 0; b < sh.batch; ++b) {
      for (int h = 0; h < sh.heads_q; ++h) {
        const int hk = h / sh.group();
        for (int i = 0; i < sh.len_q; ++i) {
          const std::size_t qi = ((std::size_t(b) * sh.heads_q + h) * sh.len_q + i);
          const int j = int(uniform01(seed, 8, qi) * sh.len_kv) % sh.len_kv;
          const std::size_t ki = (std::size_t(b) * sh.heads_kv + hk) * sh.len_kv + std::size_t(j);
          for (int c = 0; c < d; ++c) {
            in.q[qi * d + c] = float(sharp * in.k[ki * d + c] + 0.25 * in.q[qi * d + c]);
          }
        }
      }
    }
  }
  return in;
}

}  // namespace

AttentionInput make_synthetic(const std::string& spec_text, std::uint64_t seed) {
  AttentionInput in = generate(parse_spec(spec_text), seed);
  // validate_spec bounds the values; this makes sure no Inf or NaN reaches a kernel regardless.
  const char* names[] = {"q", "k", "v"};
  const std::vector<float>* tensors[] = {&in.q, &in.k, &in.v};
  for (int t = 0; t < 3; ++t) {
    const std::vector<float>& x = *tensors[t];
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (std::isfinite(x[i])) continue;
      throw UsageError("synthetic spec '" + abbreviate(spec_text) + "' (seed " +
                       std::to_string(seed) + ") generates a non-finite " + names[t] +
                       " (element " + std::to_string(i) + "): float32 overflow");
    }
  }
  return in;
}

std::vector<std::string> select_dump_prefixes(const std::string& path, const std::string& group) {
  std::vector<std::string> prefixes = dump_prefixes(path);
  if (group.empty()) return prefixes;
  const std::string want = group + "/";
  for (const auto& p : prefixes)
    if (p == want) return {want};
  throw UsageError("'" + path + "' has no group '" + group + "' with q, k, v");
}

DumpSelection select_dump_input(const std::string& text) {
  std::error_code ec;
  const auto colon = text.rfind(':');
  if (!std::filesystem::exists(text, ec) && colon != std::string::npos && colon > 0 &&
      colon + 1 < text.size() && std::filesystem::exists(text.substr(0, colon), ec)) {
    const std::string file = text.substr(0, colon);
    return {file, select_dump_prefixes(file, text.substr(colon + 1))};
  }
  return {text, dump_prefixes(text)};
}

std::string dump_input_name(const std::string& path, const std::string& prefix) {
  return path + (prefix.empty() ? "" : ":" + prefix.substr(0, prefix.size() - 1));
}

bool dump_causal(const std::string& path, const std::string& prefix) {
  try {
    H5Reader r(path);
    const std::string group = prefix.empty() ? "/" : prefix.substr(0, prefix.size() - 1);
    for (const std::string& obj : {group, std::string("/")})
      if (r.has_attr(obj, "causal")) return r.attr_f64(obj, "causal") != 0.0;
  } catch (const UsageError&) {
  }
  return false;
}

void check_causal_rows(const AttentionShape& s, bool causal, const std::string& input) {
  if (!causal || s.len_q <= s.len_kv) return;
  const long long empty = (long long)s.len_q - s.len_kv;
  throw UsageError("causal input '" + abbreviate(input) + "' has more queries (" +
                   std::to_string(s.len_q) + ") than keys (" + std::to_string(s.len_kv) +
                   "): under the bottom-right causal mask its first " + std::to_string(empty) +
                   " query rows see no key, and their output (0 in golden attention and in every "
                   "method) would count as agreement; use its last " +
                   std::to_string(s.len_kv) + " queries, or causal = 0");
}

}  // namespace attnsim
