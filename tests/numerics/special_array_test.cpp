// numerics/special_array: the gathered MUFU models (ex2.approx{.ftz}, rcp.approx{.ftz}) and the
// array forms of lg2.approx{.ftz}, expf, __expf, __logf and tanhf bit for bit against their `_ref` loops
// over the scalar models (themselves equal to the H100 on all 2^32 inputs, tests/hw), on every
// FP32 upper half with low halves 0, 1, 0x7FFF, 0x8000, 0xFFFF and a random one (NaN payloads,
// ±Inf, ±0, subnormals, the range-scaling edges ±2^-126, ±2^126, -126, ±128 and their
// neighbours), plus 2^20 random patterns, with tails and in place. All 2^32 inputs against the
// H100: tests/hw/cvt_h100_long_test.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "formats/float32.hpp"
#include "numerics/isa.hpp"
#include "numerics/special_array.hpp"

namespace attnsim {
namespace {

std::vector<float> inputs() {
  std::vector<float> x;
  std::mt19937 rng(7);
  for (std::uint32_t hi = 0; hi < 65536; ++hi) {
    const std::uint32_t r = std::uint32_t(rng() & 0xFFFFu);
    for (std::uint32_t lo : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0xFFFFu, r})
      x.push_back(f32_from_bits((hi << 16) | lo));
  }
  for (float v : {-126.0f, 128.0f, -128.0f, 127.99999f, -125.99999f, 0x1p-126f, 0x1p126f,
                  -0x1p-126f, -0x1p126f, 0x1p-149f, 0.5f, -0.5f, 1e-30f, -1e-30f}) {
    for (int d = -2; d <= 2; ++d) x.push_back(f32_from_bits(f32_bits(v) + std::uint32_t(d)));
  }
  for (int i = 0; i < (1 << 20); ++i) x.push_back(f32_from_bits(rng()));
  return x;
}

using ArrayFn = void (*)(const float*, std::size_t, float*);

void expect_same(const char* name, ArrayFn fast, ArrayFn ref) {
  static const std::vector<float> x = inputs();
  std::vector<float> got(x.size()), want(x.size());
  fast(x.data(), x.size(), got.data());
  ref(x.data(), x.size(), want.data());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (f32_bits(got[i]) != f32_bits(want[i]) && ++bad <= 3) {
      ADD_FAILURE() << name << " input 0x" << std::hex << f32_bits(x[i]) << ": ref 0x"
                    << f32_bits(want[i]) << ", fast 0x" << f32_bits(got[i]);
    }
  }
  EXPECT_EQ(bad, 0u) << name;
  // Tails at every length below two vectors and around the exponentials' 256-element chunks, in
  // place.
  std::vector<std::size_t> lengths;
  for (std::size_t n = 0; n < 33; ++n) lengths.push_back(n);
  for (std::size_t n : {255u, 256u, 257u, 511u, 513u}) lengths.push_back(n);
  for (std::size_t n : lengths) {
    std::vector<float> a(x.begin() + 1000, x.begin() + 1000 + std::ptrdiff_t(n)), b(n);
    ref(a.data(), n, b.data());
    fast(a.data(), n, a.data());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), n * 4), 0) << name << " n " << n;
  }
}

TEST(SpecialArray, Ex2ApproxFtz) {
  expect_same(
      "ex2.approx.ftz", [](const float* x, std::size_t n, float* o) { ex2_approx_ftz_array(x, n, o); },
      [](const float* x, std::size_t n, float* o) { ex2_approx_ftz_array_ref(x, n, o); });
}
TEST(SpecialArray, Ex2Approx) {
  expect_same(
      "ex2.approx", [](const float* x, std::size_t n, float* o) { ex2_approx_array(x, n, o); },
      [](const float* x, std::size_t n, float* o) { ex2_approx_array_ref(x, n, o); });
}
// Every entry of T+ and T- (x in [1, 2) and (-2, -1]: f = the mantissa) through the kernels, whose
// compact form of the tables (a prediction plus 2-bit codes) must hold for the H100's.
TEST(SpecialArray, Ex2EveryTableEntry) {
  if (detected_isa() >= Isa::kAvx2) {
    EXPECT_TRUE(ex2_array_compact_tables());
  }
  std::vector<float> x(std::size_t{1} << 24), got(x.size()), want(x.size());
  for (std::uint32_t m = 0; m < (1u << 23); ++m) {
    x[m] = f32_from_bits(0x3F800000u | m);
    x[(1u << 23) + m] = f32_from_bits(0xBF800000u | m);
  }
  for (int ftz = 0; ftz < 2; ++ftz) {
    if (ftz) {
      ex2_approx_ftz_array(x.data(), x.size(), got.data());
      ex2_approx_ftz_array_ref(x.data(), x.size(), want.data());
    } else {
      ex2_approx_array(x.data(), x.size(), got.data());
      ex2_approx_array_ref(x.data(), x.size(), want.data());
    }
    std::size_t bad = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (f32_bits(got[i]) != f32_bits(want[i]) && ++bad <= 3) {
        ADD_FAILURE() << "input 0x" << std::hex << f32_bits(x[i]) << ": ref 0x"
                      << f32_bits(want[i]) << ", fast 0x" << f32_bits(got[i]);
      }
    }
    EXPECT_EQ(bad, 0u) << (ftz ? "ex2.approx.ftz" : "ex2.approx");
  }
}

TEST(SpecialArray, ExpExact) {
  expect_same(
      "exp exact", [](const float* x, std::size_t n, float* o) { exp_exact_array(x, n, o, false); },
      [](const float* x, std::size_t n, float* o) { exp_exact_array_ref(x, n, o, false); });
}
TEST(SpecialArray, Exp2Exact) {
  expect_same(
      "exp2 exact", [](const float* x, std::size_t n, float* o) { exp_exact_array(x, n, o, true); },
      [](const float* x, std::size_t n, float* o) { exp_exact_array_ref(x, n, o, true); });
}

TEST(SpecialArray, RcpApproxFtz) {
  expect_same(
      "rcp.approx.ftz", [](const float* x, std::size_t n, float* o) { rcp_approx_ftz_array(x, n, o); },
      [](const float* x, std::size_t n, float* o) { rcp_approx_ftz_array_ref(x, n, o); });
}
TEST(SpecialArray, RcpApprox) {
  expect_same(
      "rcp.approx", [](const float* x, std::size_t n, float* o) { rcp_approx_array(x, n, o); },
      [](const float* x, std::size_t n, float* o) { rcp_approx_array_ref(x, n, o); });
}

// The split-KV reductions' per-row functions (the lg2 tables read with prefetches ahead; the
// exponentials' MUFU step through the ex2 array kernels).
TEST(SpecialArray, Lg2ApproxFtz) {
  expect_same(
      "lg2.approx.ftz", [](const float* x, std::size_t n, float* o) { lg2_approx_ftz_array(x, n, o); },
      [](const float* x, std::size_t n, float* o) { lg2_approx_ftz_array_ref(x, n, o); });
}
TEST(SpecialArray, Lg2Approx) {
  expect_same(
      "lg2.approx", [](const float* x, std::size_t n, float* o) { lg2_approx_array(x, n, o); },
      [](const float* x, std::size_t n, float* o) { lg2_approx_array_ref(x, n, o); });
}
TEST(SpecialArray, LibdeviceExpLog) {
  for (bool ftz : {false, true}) {
    SCOPED_TRACE(ftz ? "ftz" : "ieee");
    if (ftz) {
      expect_same(
          "expf", [](const float* x, std::size_t n, float* o) { expf_libdevice_array(x, n, o, true); },
          [](const float* x, std::size_t n, float* o) { expf_libdevice_array_ref(x, n, o, true); });
      expect_same(
          "__expf", [](const float* x, std::size_t n, float* o) { fast_expf_array(x, n, o, true); },
          [](const float* x, std::size_t n, float* o) { fast_expf_array_ref(x, n, o, true); });
      expect_same(
          "__logf", [](const float* x, std::size_t n, float* o) { fast_logf_array(x, n, o, true); },
          [](const float* x, std::size_t n, float* o) { fast_logf_array_ref(x, n, o, true); });
    } else {
      expect_same(
          "expf", [](const float* x, std::size_t n, float* o) { expf_libdevice_array(x, n, o, false); },
          [](const float* x, std::size_t n, float* o) { expf_libdevice_array_ref(x, n, o, false); });
      expect_same(
          "__expf", [](const float* x, std::size_t n, float* o) { fast_expf_array(x, n, o, false); },
          [](const float* x, std::size_t n, float* o) { fast_expf_array_ref(x, n, o, false); });
      expect_same(
          "__logf", [](const float* x, std::size_t n, float* o) { fast_logf_array(x, n, o, false); },
          [](const float* x, std::size_t n, float* o) { fast_logf_array_ref(x, n, o, false); });
    }
  }
}

TEST(SpecialArray, TanhfLibdevice) {
  expect_same(
      "tanhf", [](const float* x, std::size_t n, float* o) { tanhf_libdevice_array(x, n, o); },
      [](const float* x, std::size_t n, float* o) { tanhf_libdevice_array_ref(x, n, o); });
}

}  // namespace
}  // namespace attnsim
