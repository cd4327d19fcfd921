#include "experiments/analysis/quantize_study.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <map>

#include "experiments/common/error.hpp"
#include "formats/float8.hpp"
#include "numerics/quantize.hpp"

namespace attnsim {

namespace {

const std::map<std::string, SymmetricQuantizer>& symmetric() {
  static const std::map<std::string, SymmetricQuantizer> m = [] {
    std::map<std::string, SymmetricQuantizer> r;
    for (const SymmetricQuantizer& q :
         {kSymmetricInt8, kSymmetricInt4, kSageCudaInt8, kSageTritonInt8, kSageTritonInt4,
          kSageTritonPerBlockInt8, kTurboInt8Alg, kTurboInt8Eq4, kTurboInt8AlgCeil}) {
      r.emplace(q.name, q);
    }
    return r;
  }();
  return m;
}

const std::map<std::string, std::function<GroupMap()>>& named_maps() {
  static const std::map<std::string, std::function<GroupMap()>> m = {
      {"per_tensor",
       [] {
         return GroupMap{Granularity::kPerTensor, 1};
       }},
      {"per_token",
       [] {
         return GroupMap{Granularity::kPerToken, 1};
       }},
      {"per_channel",
       [] {
         return GroupMap{Granularity::kPerChannel, 1};
       }},
      {"sage_sm89_q_per_thread", sage_sm89_q_per_thread},
      {"sage_sm89_k_per_thread", sage_sm89_k_per_thread},
      {"sage_sm90_q_per_thread", sage_sm90_q_per_thread},
      {"sage_sm90_k_per_thread", sage_sm90_k_per_thread},
      {"sage_triton_q_per_block", sage_triton_q_per_block},
      {"sage_triton_k_per_block", sage_triton_k_per_block},
  };
  return m;
}

// The codes, scales and x̂ of one quantizer on one head.
struct Roundtrip {
  std::string code_format;
  std::vector<std::int32_t> codes;
  std::vector<float> scales, xh;
};

// FP8 with one FP32 scale per group: scale = amax / max finite (an all-zero group keeps scale 1),
// v = x / scale (one FP32 division), code = cvt.rn.satfinite(v), x̂ = float(code) * scale.
template <class Fmt>
Roundtrip fp8_roundtrip(const float* x, int tokens, int channels, const GroupMap& map) {
  const std::vector<float> amax = group_amax(x, tokens, channels, map);
  const float fmax = decode_f32<Fmt>(typename Fmt::Storage(Fmt::kMaxFinite));
  Roundtrip r;
  r.scales.resize(amax.size());
  for (std::size_t g = 0; g < amax.size(); ++g) r.scales[g] = amax[g] > 0 ? amax[g] / fmax : 1.0f;
  r.xh.resize(std::size_t(tokens) * channels);
  r.codes.resize(r.xh.size());
  for (int t = 0; t < tokens; ++t) {
    for (int c = 0; c < channels; ++c) {
      const float s = r.scales[map.group(t, c, tokens, channels)];
      const std::size_t i = std::size_t(t) * channels + c;
      const auto code = encode<Fmt>(x[i] / s, kCudaSatfinite);
      r.codes[i] = std::int32_t(code);
      r.xh[i] = decode_f32<Fmt>(code) * s;
    }
  }
  return r;
}

Roundtrip roundtrip(const float* x, int tokens, int channels, const std::string& name,
                    const GroupMap& map) {
  if (auto it = symmetric().find(name); it != symmetric().end()) {
    QuantizedTensor q = quantize_symmetric(x, tokens, channels, map, it->second);
    Roundtrip r;
    r.code_format = "int" + std::to_string(q.bits);
    r.xh = q.dequantize();
    r.codes = std::move(q.q);
    r.scales = std::move(q.scale);
    return r;
  }
  if (name == "e4m3fn") {
    Roundtrip r = fp8_roundtrip<e4m3fn>(x, tokens, channels, map);
    r.code_format = "e4m3fn";
    return r;
  }
  if (name == "e5m2") {
    Roundtrip r = fp8_roundtrip<e5m2>(x, tokens, channels, map);
    r.code_format = "e5m2";
    return r;
  }
  if (name == "turbo_bpq4" || name == "turbo_bpq2") {
    const QuantizedTensor s1 = quantize_symmetric(x, tokens, channels, map, kTurboInt8Alg);
    const GroupMap stage2{Granularity::kPerBlockChannel, 64};
    Roundtrip r;
    r.xh = quantize_progressive(s1, stage2, name == "turbo_bpq4" ? 4 : 2, kBpqOffset).dequantize();
    return r;
  }
  throw UsageError("unknown quantizer '" + name + "' (attnsim quantize --help lists them)");
}

}  // namespace

std::vector<std::string> quantizer_names() {
  std::vector<std::string> r;
  for (const auto& [k, v] : symmetric()) r.push_back(k);
  for (const char* n : {"e4m3fn", "e5m2", "turbo_bpq4", "turbo_bpq2"}) r.emplace_back(n);
  return r;
}

std::vector<std::string> granularity_names() {
  std::vector<std::string> r;
  for (const auto& [k, v] : named_maps()) r.push_back(k);
  r.emplace_back("per_block:N");
  r.emplace_back("per_warp:N");
  return r;
}

GroupMap parse_granularity(const std::string& name) {
  if (auto it = named_maps().find(name); it != named_maps().end()) return it->second();
  for (const auto& [prefix, kind] : {std::pair{std::string("per_block:"), Granularity::kPerBlock},
                                     std::pair{std::string("per_warp:"), Granularity::kPerWarp}}) {
    if (name.rfind(prefix, 0) == 0) {
      const std::string n = name.substr(prefix.size());
      char* end = nullptr;
      const long b = std::strtol(n.c_str(), &end, 10);
      if (n.empty() || *end != '\0' || b < 1 || b > (1 << 20)) {
        throw UsageError("granularity '" + name + "': the block must be an integer in 1..1048576");
      }
      return GroupMap{kind, int(b)};
    }
  }
  throw UsageError("unknown granularity '" + name + "' (attnsim quantize --help lists them)");
}

QuantizeResult quantize_tensor(const float* x, int tokens, int channels,
                               const std::string& quantizer, const GroupMap& map, bool smooth) {
  const std::size_t n = std::size_t(tokens) * channels;
  QuantizeResult res;
  std::vector<double>& mean = res.mean;
  mean.assign(std::size_t(channels), 0.0);
  std::vector<float> src(x, x + n);
  if (smooth) {
    for (int t = 0; t < tokens; ++t)
      for (int c = 0; c < channels; ++c) mean[c] += x[std::size_t(t) * channels + c];
    for (int c = 0; c < channels; ++c) mean[c] = double(float(mean[c] / tokens));
    for (std::size_t i = 0; i < n; ++i) src[i] = float(double(x[i]) - mean[i % channels]);
  }
  Roundtrip rt = roundtrip(src.data(), tokens, channels, quantizer, map);
  const std::vector<float>& xh = rt.xh;
  QuantError& e = res.error;
  e.groups = map.count(tokens, channels);
  res.dequantized.resize(n);
  double d2 = 0, x2 = 0, d1 = 0, x1 = 0, dot = 0, h2 = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double ref = x[i];
    const double got = double(xh[i]) + mean[i % channels];
    res.dequantized[i] = got;
    const double d = got - ref;
    d2 += d * d;
    x2 += ref * ref;
    d1 += std::fabs(d);
    x1 += std::fabs(ref);
    dot += got * ref;
    h2 += got * got;
    e.max_abs = std::max(e.max_abs, std::fabs(d));
  }
  e.rel_fro = x2 > 0 ? std::sqrt(d2 / x2) : std::sqrt(d2);
  e.rel_l1 = x1 > 0 ? d1 / x1 : d1;
  e.cosine = (x2 > 0 && h2 > 0) ? dot / std::sqrt(x2 * h2) : (d2 == 0 ? 1.0 : 0.0);
  e.sqnr_db = d2 > 0 ? 10.0 * std::log10(x2 / d2) : INFINITY;
  res.code_format = std::move(rt.code_format);
  res.codes = std::move(rt.codes);
  res.scales = std::move(rt.scales);
  res.group.resize(n);
  for (int t = 0; t < tokens; ++t)
    for (int c = 0; c < channels; ++c)
      res.group[std::size_t(t) * channels + c] = map.group(t, c, tokens, channels);
  return res;
}

QuantError quantization_error(const float* x, int tokens, int channels,
                              const std::string& quantizer, const GroupMap& map, bool smooth) {
  return quantize_tensor(x, tokens, channels, quantizer, map, smooth).error;
}

}  // namespace attnsim
