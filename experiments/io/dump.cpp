// Attention tensor dumps in HDF5 and seeded synthetic inputs.
#include "experiments/io/dump.hpp"

#include <cmath>
#include <map>

#include "experiments/cli/error.hpp"
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
    throw UsageError(what + " has a non-finite value (" + std::to_string(x[i]) + ") at [" + idx +
                     "]; pass --allow-nonfinite to proceed");
  }
}

}  // namespace

std::vector<std::string> dump_prefixes(const std::string& path) {
  H5Reader r(path);
  if (r.exists("q")) return {""};
  std::vector<std::string> out;
  for (const auto& m : r.members("/")) {
    if (r.exists(m + "/q")) out.push_back(m + "/");
  }
  if (out.empty())
    throw UsageError("'" + path + "' has no dataset 'q' (nor per-layer groups with one)");
  return out;
}

AttentionInput read_attention_dump(const std::string& path, const std::string& prefix,
                                   bool allow_nonfinite, DumpInfo* info) {
  H5Reader r(path);
  const H5Array q = r.read_array(prefix + "q");
  const H5Array k = r.read_array(prefix + "k");
  const H5Array v = r.read_array(prefix + "v");
  const std::string where = "'" + path + "'" + (prefix.empty() ? "" : " group " + prefix);
  for (const auto* a : {&q, &k, &v}) {
    if (a->dims.size() != 4) {
      throw UsageError("q, k and v in " + where +
                       " must have rank 4 [batch, heads, tokens, head_dim]; got rank " +
                       std::to_string(a->dims.size()));
    }
  }
  AttentionInput in;
  AttentionShape& s = in.shape;
  s.batch = int(q.dims[0]);
  s.heads_q = int(q.dims[1]);
  s.len_q = int(q.dims[2]);
  s.head_dim = int(q.dims[3]);
  s.heads_kv = int(k.dims[1]);
  s.len_kv = int(k.dims[2]);
  s.head_dim_v = int(v.dims[3]);
  if (k.dims[0] != q.dims[0] || v.dims[0] != q.dims[0])
    throw UsageError("batch sizes of q, k, v differ in " + where);
  if (k.dims[3] != q.dims[3]) throw UsageError("head_dim of q and k differ in " + where);
  if (v.dims[1] != k.dims[1] || v.dims[2] != k.dims[2])
    throw UsageError("k and v differ in heads or tokens in " + where);
  if (s.heads_q % s.heads_kv != 0) {
    throw UsageError("q heads (" + std::to_string(s.heads_q) +
                     ") are not a multiple of k/v heads (" + std::to_string(s.heads_kv) + ") in " +
                     where);
  }
  if (!s.valid()) throw UsageError("empty tensor in " + where);
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
  for (const std::string& obj : {group, std::string("/")}) {
    if (r.has_attr(obj, "causal")) {
      in.causal = r.attr_f64(obj, "causal") != 0.0;
      break;
    }
  }
  for (const std::string& obj : {group, std::string("/")}) {
    if (r.has_attr(obj, "sm_scale")) {
      in.sm_scale = r.attr_f64(obj, "sm_scale");
      break;
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
    throw UsageError("unknown synthetic distribution '" + s.dist +
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
      throw UsageError("synthetic spec item '" + item + "' is not key=value");
    const std::string key = item.substr(0, eq);
    bool ok = false;
    for (const auto& k : kKeys) ok = ok || k == key;
    if (!ok) {
      std::string all;
      for (const auto& k : kKeys) all += (all.empty() ? "" : " ") + k;
      throw UsageError("unknown synthetic spec key '" + key + "' (allowed: " + all + ")");
    }
    try {
      std::size_t used = 0;
      const double v = std::stod(item.substr(eq + 1), &used);
      if (used != item.size() - eq - 1 || !std::isfinite(v)) throw std::invalid_argument("x");
      s.kv[key] = v;
    } catch (const std::exception&) {
      throw UsageError("synthetic spec value '" + item + "' is not a finite number");
    }
  }
  return s;
}

}  // namespace

std::uint64_t synthetic_seed(const std::string& spec) {
  const double seed = parse_spec(spec).get("seed", 0);
  if (seed < 0 || seed != std::floor(seed) || seed > 9.0e15) {
    throw UsageError("synthetic spec: seed must be a non-negative integer");
  }
  return std::uint64_t(seed);
}

AttentionInput make_synthetic(const std::string& spec) {
  return make_synthetic(spec, synthetic_seed(spec));
}

namespace {

AttentionShape shape_of(const Spec& s) {
  AttentionShape sh;
  auto geti = [&](const char* k, double def) {
    const double v = s.get(k, def);
    if (v < 1 || v != std::floor(v) || v > (1 << 24)) {
      throw UsageError(std::string("synthetic spec: ") + k + " must be a positive integer");
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
  if (b * (q + k + v + o) > 4.0e8)
    throw UsageError("synthetic spec: tensors larger than 400M elements");
  return sh;
}

}  // namespace

AttentionShape synthetic_shape(const std::string& spec) { return shape_of(parse_spec(spec)); }

AttentionInput make_synthetic(const std::string& spec_text, std::uint64_t seed) {
  const Spec s = parse_spec(spec_text);
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

std::vector<std::string> select_dump_prefixes(const std::string& path, const std::string& group) {
  std::vector<std::string> prefixes = dump_prefixes(path);
  if (group.empty()) return prefixes;
  const std::string want = group + "/";
  for (const auto& p : prefixes)
    if (p == want) return {want};
  throw UsageError("'" + path + "' has no group '" + group + "' with q, k, v");
}

std::string dump_input_name(const std::string& path, const std::string& prefix) {
  return path + (prefix.empty() ? "" : ":" + prefix.substr(0, prefix.size() - 1));
}

}  // namespace attnsim
