// `amla:variant=cann,target=h100` and `amla:variant=base,target=h100` (sim/amla) against our CUDA
// MLA-decode kernels run on an H100 (cuda_check/amla/amla_decode.cu; data/hw/h100/amla/
// amla_h100.h5 and the README there). The inputs are regenerated from the cases' seeds
// (tests/hw/amla_cases.hpp) and checked against the digest of what the kernels read; then every
// output element, every row's m, l, n and S16, and the raw FP32 O before the epilogue (in full for
// the adversarial cases, per-row digests otherwise) are compared bit for bit (tests/hw/
// amla_check.hpp). This default-suite part takes the cases of at most 128 rows × 1000 keys;
// amla_h100_long_test.cpp the larger ones.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/hw/amla_check.hpp"

namespace attnsim {
namespace {

using hwtest::AmlaCase;

TEST(AmlaH100, InputsAreTheOnesTheKernelsRead) {
  H5Reader r(hwtest::amla_h100_file());
  for (const AmlaCase& c : hwtest::amla_cases()) {
    ASSERT_TRUE(r.exists(c.name)) << c.name;
    EXPECT_EQ(c.batch, int(r.attr_f64(c.name, "batch"))) << c.name;
    EXPECT_EQ(c.g, int(r.attr_f64(c.name, "g"))) << c.name;
    EXPECT_EQ(c.s, int(r.attr_f64(c.name, "s"))) << c.name;
    const hwtest::AmlaTensors t = hwtest::amla_case_tensors(c);
    EXPECT_EQ(double(hwtest::amla_input_digest(t)), r.attr_f64(c.name, "input_fnv1a")) << c.name;
  }
}

TEST(AmlaH100, CannMatchesTheAmlaKernelBitForBit) {
  hwtest::amla_check_variant(AmlaVariant::kCann, "amla", hwtest::amla_small);
}

TEST(AmlaH100, BaseMatchesTheBaseKernelBitForBit) {
  hwtest::amla_check_variant(AmlaVariant::kBase, "base", hwtest::amla_small);
}

TEST(AmlaH100, NegativeControlsDiffer) { hwtest::amla_check_controls(hwtest::amla_small); }

// run_pipeline (the method of record) gives the outputs of the attend_tile/finish_tile path that
// the checks take to see the row state.
TEST(AmlaH100, MethodOfRecordIsTheTilePath) {
  H5Reader r(hwtest::amla_h100_file());
  for (const char* name : {"g16_u20_s1000", "zero_vcol_g32_s2048"}) {
    AmlaCase c;
    for (const AmlaCase& x : hwtest::amla_cases())
      if (x.name == name) c = x;
    ASSERT_EQ(c.name, name);
    const AttentionInput in = hwtest::amla_checked_input(r, c);
    for (AmlaVariant v : {AmlaVariant::kCann, AmlaVariant::kBase}) {
      const Pipeline p = amla_pipeline(hwtest::amla_h100_options(v));
      const hwtest::AmlaModelRows m = hwtest::amla_run_model(in, p);
      const PipelineResult res = run_pipeline(in, p);
      ASSERT_EQ(res.o.size(), m.out.size());
      constexpr Policy kExact{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};
      std::size_t same = 0;
      for (std::size_t i = 0; i < m.out.size(); ++i)
        same +=
            std::uint16_t(encode_float_bits(Encoding::kBf16, float(res.o[i]), kExact)) == m.out[i];
      EXPECT_EQ(same, m.out.size()) << name << " " << amla_variant_name(v);
    }
  }
}

}  // namespace
}  // namespace attnsim
