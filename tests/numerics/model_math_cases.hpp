// Adversarial projection cases for numerics/model_math's linear kernels (model_math_test.cpp, a
// quick sample; model_math_long_test.cpp, >= 10^8 products): shapes that leave partial panels and
// partial row tiles, values spanning FP32's exponent range (subnormals, huge, cancelling sums),
// signed zeros, Inf and NaN.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "numerics/isa.hpp"
#include "numerics/model_math.hpp"

namespace attnsim::model_math_cases {

inline float adversarial_value(std::mt19937_64& rng, int mode) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  switch (mode % 10) {
    case 0: return 0.0f;
    case 1: return -0.0f;
    case 2: return std::ldexp(u(rng), int(rng() % 200) - 140);  // subnormal .. 2^60
    case 3: {  // any finite bit pattern
      std::uint32_t b;
      do b = std::uint32_t(rng()); while (((b >> 23) & 0xFF) == 0xFF);
      float f;
      std::memcpy(&f, &b, 4);
      return f;
    }
    case 4: return float(int(rng() % 7) - 3);  // exact small integers: cancellations to 0
    default: return u(rng);
  }
}

// One shape's inputs: x [rows, k] (FP32 values held as FP64), W [n, k], bias [n] or none.
struct Case {
  std::size_t rows, n, k;
  bool bias, specials;
  std::vector<double> x;
  std::vector<float> w, b;
};

inline Case make_case(std::mt19937_64& rng, std::size_t rows, std::size_t n, std::size_t k,
                      bool bias, bool specials) {
  Case c{rows, n, k, bias, specials, {}, {}, {}};
  const int mode = int(rng() % 6);  // per case: mostly one regime, sometimes mixed
  auto value = [&] { return adversarial_value(rng, mode == 5 ? int(rng()) : (rng() % 4 ? 5 : mode)); };
  c.x.resize(rows * k);
  for (auto& v : c.x) v = double(value());
  c.w.resize(n * k);
  for (auto& v : c.w) v = value();
  if (bias) {
    c.b.resize(n);
    for (auto& v : c.b) v = value();
  }
  if (specials) {
    const float sp[] = {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::max()};
    for (int i = 0; i < 3; ++i) c.w[rng() % c.w.size()] = sp[rng() % 4];
    c.x[rng() % c.x.size()] = double(sp[rng() % 4]);
  }
  return c;
}

// Compares linear_f32 at the active ISA with linear_f32_ref over the whole case (and over a panel
// sub-range), bit for bit; returns the number of outputs compared.
inline std::size_t check_case(const Case& c) {
  const PackedLinear p = pack_linear(c.w.data(), c.n, c.k, c.bias ? c.b.data() : nullptr);
  std::vector<float> fast(c.rows * c.n, 1.0f), ref(c.rows * c.n, 2.0f);
  linear_f32(c.x.data(), c.rows, c.k, p, 0, p.panels(), fast.data(), c.n);
  linear_f32_ref(c.x.data(), c.rows, c.k, p, 0, p.panels(), ref.data(), c.n);
  for (std::size_t i = 0; i < fast.size(); ++i) {
    std::uint32_t a, b;
    std::memcpy(&a, &fast[i], 4);
    std::memcpy(&b, &ref[i], 4);
    if (a != b) {
      ADD_FAILURE() << "linear_f32 (" << isa_name(active_isa()) << ") differs from the reference at row "
                    << i / c.n << " output " << i % c.n << " of rows " << c.rows << " n " << c.n
                    << " k " << c.k << ": " << fast[i] << " vs " << ref[i];
      return 0;
    }
  }
  return fast.size();
}

// The ISAs this CPU runs, scalar first (amx adds no projection kernel).
inline std::vector<Isa> available_isas() {
  std::vector<Isa> out;
  for (Isa i : supported_isas())
    if (i != Isa::kAmx) out.push_back(i);
  return out;
}

}  // namespace attnsim::model_math_cases
