// numerics/quantize quantize_values (the scale applied element by element, the rounding through
// convert_array's vector round_to_int_array) bit for bit against quantize_values_ref (the
// quantize_value loop) for every named symmetric quantizer, on every FP32 upper half with low
// halves 0, 0x8000, 0xFFFF and a random one (NaN, ±Inf, ±0, subnormals, saturation) and on
// values near the rounding ties of each quantizer's grid, under scales from amax values that are
// ordinary, tiny (subnormal scale), zero (0/0 NaN scale) and huge; odd lengths for the tails.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "formats/float32.hpp"
#include "numerics/quantize.hpp"
#include "numerics/special.hpp"

namespace attnsim {
namespace {

std::vector<float> inputs(float scale) {
  std::vector<float> x;
  std::mt19937 rng(11);
  for (std::uint32_t hi = 0; hi < 65536; ++hi)
    for (std::uint32_t lo : {0x0000u, 0x8000u, 0xFFFFu, std::uint32_t(rng() & 0xFFFFu)})
      x.push_back(f32_from_bits((hi << 16) | lo));
  // Around the grid's ties k + 1/2 (and the saturation points) in units of the scale.
  for (int k = -140; k <= 140; ++k) {
    const float t = (float(k) + 0.5f) * scale;
    for (int d = -2; d <= 2; ++d) x.push_back(f32_from_bits(f32_bits(t) + std::uint32_t(d)));
  }
  x.push_back(0.0f);  // odd length
  return x;
}

TEST(QuantizeValues, EveryNamedQuantizerEqualsTheReference) {
  for (const SymmetricQuantizer* qz : kSymmetricQuantizers) {
    for (float amax : {1.0f, 3.7f, 448.0f, 1e-30f, 0.0f, 3e38f}) {
      const float scale = amax / qz->qmax;
      const float inv = qz->apply == ScaleApply::kMultiplyRcpApprox
                            ? fmul_ftz(RcpApproxFtz::h100()(amax), qz->qmax)
                            : qz->qmax / amax;
      const std::vector<float> x = inputs(scale == 0.0f ? 1.0f : scale);
      std::vector<std::int32_t> got(x.size()), want(x.size());
      quantize_values(x.data(), x.size(), scale, inv, *qz, got.data());
      quantize_values_ref(x.data(), x.size(), scale, inv, *qz, want.data());
      std::size_t bad = 0;
      for (std::size_t i = 0; i < x.size(); ++i) {
        if (got[i] != want[i] && ++bad <= 3) {
          ADD_FAILURE() << qz->name << " amax " << amax << " input 0x" << std::hex
                        << f32_bits(x[i]) << std::dec << ": ref " << want[i] << ", fast "
                        << got[i];
        }
      }
      EXPECT_EQ(bad, 0u) << qz->name << " amax " << amax;
    }
  }
}

}  // namespace
}  // namespace attnsim
