// numerics/isa: the instruction-set levels. Names round-trip, a CPU runs scalar and its own
// ladder's levels up to the best it has (never the other architecture's: neon on x86-64, avx2 and
// above on AArch64), and set_isa refuses any other level with a message that names it.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "numerics/isa.hpp"

namespace attnsim {
namespace {

const Isa kAll[] = {Isa::kScalar, Isa::kNeon, Isa::kAvx2, Isa::kAvx512, Isa::kAmx};

TEST(Isa, NamesRoundTrip) {
  for (Isa i : kAll) {
    Isa back = Isa::kAmx;
    ASSERT_TRUE(parse_isa(isa_name(i), &back)) << isa_name(i);
    EXPECT_EQ(back, i);
  }
  Isa x = Isa::kScalar;
  EXPECT_FALSE(parse_isa("sse2", &x));
  EXPECT_FALSE(parse_isa("", &x));
}

TEST(Isa, ThisCpuRunsScalarAndItsOwnLadder) {
  const std::vector<Isa> runs = supported_isas();
  ASSERT_FALSE(runs.empty());
  EXPECT_EQ(runs.front(), Isa::kScalar);
  EXPECT_EQ(runs.back(), detected_isa());
  for (Isa i : kAll) {
    bool listed = false;
    for (Isa r : runs) listed = listed || r == i;
    EXPECT_EQ(isa_supported(i), listed) << isa_name(i);
  }
#if defined(__aarch64__)
  EXPECT_EQ(detected_isa(), Isa::kNeon);  // Advanced SIMD is in every AArch64 CPU
  for (Isa i : {Isa::kAvx2, Isa::kAvx512, Isa::kAmx}) EXPECT_FALSE(isa_supported(i)) << isa_name(i);
#else
  EXPECT_FALSE(isa_supported(Isa::kNeon));
  for (Isa i : {Isa::kAvx2, Isa::kAvx512, Isa::kAmx})
    EXPECT_EQ(isa_supported(i), int(i) <= int(detected_isa())) << isa_name(i);
#endif
}

TEST(Isa, OtherLevelsAreRefusedByName) {
  const Isa saved = active_isa();
  for (Isa i : kAll) {
    if (isa_supported(i)) {
      EXPECT_NO_THROW(set_isa(i));
      EXPECT_EQ(active_isa(), i);
      continue;
    }
    const Isa before = active_isa();
    try {
      set_isa(i);
      ADD_FAILURE() << isa_name(i) << " accepted";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(std::string("--isa ") + isa_name(i)), std::string::npos) << what;
      EXPECT_NE(what.find(std::string("at most ") + isa_name(detected_isa())), std::string::npos)
          << what;
#if defined(__aarch64__)
      EXPECT_NE(what.find("x86-64"), std::string::npos) << what;
#else
      if (i == Isa::kNeon) {
        EXPECT_NE(what.find("AArch64"), std::string::npos) << what;
      }
#endif
    }
    EXPECT_EQ(active_isa(), before) << "a refused level changed the active one";
  }
  set_isa(saved);
  EXPECT_EQ(active_isa(), saved);
}

}  // namespace
}  // namespace attnsim
