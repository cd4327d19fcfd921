// The exhaustive-suite part of tests/hw/amla_h100_test.cpp: sim/amla against the recording of our
// CUDA MLA-decode kernels on the cases larger than 128 rows × 1000 keys (G = 128 with S up to
// 8192, batch 2), and the negative controls on every case (about two minutes on 2 cores).
#include <gtest/gtest.h>

#include "tests/hw/amla_check.hpp"

namespace attnsim {
namespace {

bool large(const hwtest::AmlaCase& c) { return !hwtest::amla_small(c); }
bool every(const hwtest::AmlaCase&) { return true; }

TEST(AmlaH100Long, CannMatchesTheAmlaKernelBitForBit) {
  hwtest::amla_check_variant(AmlaVariant::kCann, "amla", large);
}

TEST(AmlaH100Long, BaseMatchesTheBaseKernelBitForBit) {
  hwtest::amla_check_variant(AmlaVariant::kBase, "base", large);
}

TEST(AmlaH100Long, NegativeControlsDiffer) { hwtest::amla_check_controls(every); }

}  // namespace
}  // namespace attnsim
