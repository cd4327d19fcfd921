// Seeded synthetic attention inputs (see synthetic.hpp).
#include "experiments/io/synthetic.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <regex>
#include <stdexcept>
#include <vector>

#include "experiments/common/error.hpp"

namespace attnsim {

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
    if (item.empty())
      throw UsageError("synthetic spec '" + abbreviate(spec) + "' has an empty item (a stray comma)");
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
    // Sizes, causal and seed are decimal integers; the distribution's parameters decimal
    // numbers. std::stod alone would also take 0x10, 1e3 for a size, inf and nan.
    const std::string text = item.substr(eq + 1);
    const bool integer_key = key == "b" || key == "hq" || key == "hkv" || key == "nq" ||
                             key == "nkv" || key == "d" || key == "dv" || key == "causal" ||
                             key == "seed";
    static const std::regex kInteger("[0-9]+");
    static const std::regex kDecimal("[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?");
    static const std::regex kNonFinite("[+-]?(inf|infinity|nan)", std::regex::icase);
    if (!std::regex_match(text, kDecimal)) {
      throw UsageError("synthetic spec value '" + abbreviate(item) + "' is not " +
                       (std::regex_match(text, kNonFinite) ? "a finite number"
                                                           : "a decimal number"));
    }
    double v = 0;
    try {
      std::size_t used = 0;
      v = std::stod(text, &used);
      if (used != text.size()) throw std::invalid_argument("trailing characters");
    } catch (const std::exception&) {
      v = NAN;  // out of double's range (std::out_of_range)
    }
    if (!std::isfinite(v))
      throw UsageError("synthetic spec value '" + abbreviate(item) + "' is not a finite number");
    // A whole number for a size, causal or seed is written as one (1e3, 2.0 and 010 are slips;
    // fractions and negatives get the range checks' messages below).
    if (integer_key && v >= 0 && v == std::floor(v) &&
        (!std::regex_match(text, kInteger) || (text.size() > 1 && text[0] == '0')))
      throw UsageError("synthetic spec value '" + abbreviate(item) + "': " + key +
                       " must be written as a decimal integer");
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
  // Streams 1, 2, 3 = q, k, v; 4+ = per-channel parameters. Element i of a stream is a function
  // of (seed, stream, i) alone (counter-based draws), so the threads split the elements and the
  // values cannot depend on their number.
  const bool uniform = s.dist == "uniform";
  auto fill = [&](std::vector<float>& x, std::uint64_t stream) {
    const std::ptrdiff_t n = std::ptrdiff_t(x.size());
#pragma omp parallel for schedule(static)
    for (std::ptrdiff_t i = 0; i < n; ++i) {
      const std::uint64_t k = std::uint64_t(i);
      x[std::size_t(i)] = uniform ? float(lo + (hi - lo) * uniform01(seed, stream, k))
                                  : float(sigma * normal01(seed, stream, k));
    }
  };
  fill(in.q, 1);
  fill(in.k, 2);
  fill(in.v, 3);
  if (uniform) return in;
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

}  // namespace attnsim
