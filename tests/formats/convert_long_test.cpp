// formats/: ALL 2^32 FP32 inputs through conversions the H100 recordings do not cover (the
// non-saturating and ties-away policies and directed bf16 rounding), against the spec-derived
// oracle of tests/formats/oracle.hpp. Label: exhaustive (both cores, a few minutes).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>

#include "formats/float16.hpp"
#include "formats/float8.hpp"
#include "tests/formats/oracle.hpp"

namespace attnsim {
namespace {

template <class Fmt>
void sweep(const oracle::Spec& spec, Policy p, const char* name) {
  const oracle::Table t(spec);
  std::atomic<std::uint64_t> bad{0};
#pragma omp parallel for schedule(dynamic, 1)
  for (std::int64_t hi = 0; hi < 65536; ++hi) {
    std::uint64_t local = 0;
    for (std::uint32_t lo = 0; lo < 65536; ++lo) {
      const std::uint32_t bits = (std::uint32_t(hi) << 16) | lo;
      float x;
      std::memcpy(&x, &bits, 4);
      const std::uint32_t got = encode<Fmt>(x, p);
      std::uint32_t want;
      if (std::isnan(x)) {
        // NaN inputs: the policy's NaN encoding (oracle by the tables of formats/policy.hpp).
        const bool neg = std::signbit(x);
        want = p.nan == NanEncoding::kCuda ? t.nan_all_ones() : ((neg ? t.sign_bit() : 0) | t.quiet_nan());
      } else if (std::isinf(x)) {
        const std::uint32_t sign = std::signbit(x) ? t.sign_bit() : 0;
        if (p.overflow == Overflow::kSaturate) want = sign | t.max_code();
        else if (spec.ieee && p.overflow != Overflow::kNaN) want = sign | t.inf_code();
        else want = sign | (p.nan == NanEncoding::kCuda ? t.nan_all_ones() : t.quiet_nan());
      } else {
        want = oracle::expected(t, x, p);
      }
      if (got != want && ++local <= 3) {
#pragma omp critical
        ADD_FAILURE() << name << " input 0x" << std::hex << bits << ": oracle 0x" << want << ", attnsim 0x" << got;
      }
    }
    bad += local;
  }
  EXPECT_EQ(bad.load(), 0u) << name << " over all 2^32 inputs";
}

TEST(ConvertAllInputs, E4m3fnNonSaturatingMlDtypes) {
  sweep<e4m3fn>(oracle::kE4m3fn, kMlDtypesE4m3, "e4m3fn {rne, nan, ml_dtypes}");
}
TEST(ConvertAllInputs, E5m2NonSaturatingMlDtypes) {
  sweep<e5m2>(oracle::kE5m2, kMlDtypesIeee, "e5m2 {rne, inf, ml_dtypes}");
}
TEST(ConvertAllInputs, E4m3fnTiesAwaySaturate) {
  sweep<e4m3fn>(oracle::kE4m3fn, Policy{Round::kNearestAway, Overflow::kSaturate, NanEncoding::kCuda},
                "e4m3fn {rna, saturate, cuda}");
}
TEST(ConvertAllInputs, Bf16RoundUpIeee) {
  sweep<bf16>(oracle::kBf16, Policy{Round::kUp, Overflow::kInf, NanEncoding::kMlDtypes}, "bf16 {ru, inf, ml_dtypes}");
}

}  // namespace
}  // namespace attnsim
