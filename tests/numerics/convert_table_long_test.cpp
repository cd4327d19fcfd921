// numerics/convert_table over all 2^32 FP32 inputs: the table (e4m3fn, e5m2) and the bf16 bias
// trick are bit-identical to encode<> under the policies of real stacks and one directed
// rounding. encode<>'s values come through numerics/convert_array's encode_array: its vector
// kernels by default (proven equal to encode<> and to the independent oracles over all 2^32
// inputs in tests/formats, tests/hw and convert_array_long_test.cpp), encode<> itself under
// ATTNSIM_ISA=scalar. OpenMP over the upper 16 bits.
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "formats/encoding.hpp"
#include "numerics/convert_array.hpp"
#include "numerics/convert_table.hpp"

namespace attnsim {
namespace {

constexpr Policy kTowardZeroSat{Round::kTowardZero, Overflow::kSaturate, NanEncoding::kIeee};

template <class Fmt>
std::uint64_t table_mismatches(const Policy& p) {
  const ConversionTable t = ConversionTable::build<Fmt>(p);
  std::atomic<std::uint64_t> bad{0};
#pragma omp parallel
  {
    std::vector<float> x(1u << 16);
    std::vector<std::uint8_t> y(1u << 16), want(1u << 16);
    const Encoding e = std::is_same_v<Fmt, e4m3fn> ? Encoding::kE4m3fn : Encoding::kE5m2;
#pragma omp for schedule(dynamic, 64)
    for (std::int64_t hi = 0; hi < (std::int64_t{1} << 16); ++hi) {
      for (std::uint32_t lo = 0; lo < (1u << 16); ++lo)
        x[lo] = f32_from_bits((std::uint32_t(hi) << 16) | lo);
      t.convert_array(x.data(), x.size(), y.data());
      encode_array(e, x.data(), x.size(), want.data(), p);
      std::uint64_t local = 0;
      for (std::uint32_t lo = 0; lo < (1u << 16); ++lo) local += y[lo] != want[lo];
      bad += local;
    }
  }
  return bad.load();
}

std::uint64_t bf16_mismatches(const Policy& p) {
  std::atomic<std::uint64_t> bad{0};
#pragma omp parallel
  {
    std::vector<float> x(1u << 16);
    std::vector<std::uint16_t> y(1u << 16), want(1u << 16);
#pragma omp for schedule(dynamic, 64)
    for (std::int64_t hi = 0; hi < (std::int64_t{1} << 16); ++hi) {
      for (std::uint32_t lo = 0; lo < (1u << 16); ++lo)
        x[lo] = f32_from_bits((std::uint32_t(hi) << 16) | lo);
      bf16_convert_array(x.data(), x.size(), y.data(), p);
      encode_array(Encoding::kBf16, x.data(), x.size(), want.data(), p);
      std::uint64_t local = 0;
      for (std::uint32_t lo = 0; lo < (1u << 16); ++lo) local += y[lo] != want[lo];
      bad += local;
    }
  }
  return bad.load();
}

TEST(ConvertTableLong, E4m3fnAllInputs) {
  EXPECT_EQ(table_mismatches<e4m3fn>(kCudaSatfinite), 0u);
  EXPECT_EQ(table_mismatches<e4m3fn>(kMlDtypesE4m3), 0u);
  EXPECT_EQ(table_mismatches<e4m3fn>(kTowardZeroSat), 0u);
}

TEST(ConvertTableLong, E5m2AllInputs) {
  EXPECT_EQ(table_mismatches<e5m2>(kCudaSatfinite), 0u);
  EXPECT_EQ(table_mismatches<e5m2>(kMlDtypesIeee), 0u);
  EXPECT_EQ(table_mismatches<e5m2>(kTowardZeroSat), 0u);
}

TEST(ConvertTableLong, Bf16BiasTrickAllInputs) {
  EXPECT_EQ(bf16_mismatches(kIeeeNearestEven), 0u);
  EXPECT_EQ(bf16_mismatches(kCudaSatfinite), 0u);
  EXPECT_EQ(bf16_mismatches(kMlDtypesIeee), 0u);
}

}  // namespace
}  // namespace attnsim
