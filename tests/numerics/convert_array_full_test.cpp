// numerics/convert_array over ALL 2^32 FP32 inputs, label full (not in CI, which stays within its
// time; `ctest --test-dir build -L full`, tests/README.md): each vector kernel against its `_ref`
// loop for the rounding modes that no preset uses (e4m3fn ru/rd, e5m2 rna/rz/ru/rd: reached only
// through `attnsim convert --round` and the Python convert), and fp16 in the IEEE modes, whose
// kernel (vcvtps2ph) the exhaustive suite already sweeps against the H100 over all 2^32 inputs
// (tests/hw/cvt_h100_long_test.cpp: rn, rz, rm, rp). The unit test sweeps every mode on every
// upper half (numerics/convert_array_test.cpp).
#include <gtest/gtest.h>

#include <cstdint>

#include "tests/numerics/convert_array_sweep.hpp"

namespace attnsim {
namespace {

using convert_sweep::encode_vs_ref;

// fp16 under the IEEE modes: the kernel is vcvtps2ph, which the F16C oracle of tests/formats
// shares, so it is swept against the reference here too (the H100 sweep proves it independently).
TEST(ConvertArrayAllInputs, Fp16IeeeModes) {
  encode_vs_ref<std::uint16_t>(Encoding::kFp16, Round::kNearestEven, "fp16 rne");
  encode_vs_ref<std::uint16_t>(Encoding::kFp16, Round::kTowardZero, "fp16 rz");
  encode_vs_ref<std::uint16_t>(Encoding::kFp16, Round::kUp, "fp16 ru");
  encode_vs_ref<std::uint16_t>(Encoding::kFp16, Round::kDown, "fp16 rd");
}
TEST(ConvertArrayAllInputs, E4m3fnUp) {
  encode_vs_ref<std::uint8_t>(Encoding::kE4m3fn, Round::kUp, "e4m3fn ru");
}
TEST(ConvertArrayAllInputs, E4m3fnDown) {
  encode_vs_ref<std::uint8_t>(Encoding::kE4m3fn, Round::kDown, "e4m3fn rd");
}
TEST(ConvertArrayAllInputs, E5m2TiesAway) {
  encode_vs_ref<std::uint8_t>(Encoding::kE5m2, Round::kNearestAway, "e5m2 rna");
}
TEST(ConvertArrayAllInputs, E5m2TowardZero) {
  encode_vs_ref<std::uint8_t>(Encoding::kE5m2, Round::kTowardZero, "e5m2 rz");
}
TEST(ConvertArrayAllInputs, E5m2Up) {
  encode_vs_ref<std::uint8_t>(Encoding::kE5m2, Round::kUp, "e5m2 ru");
}
TEST(ConvertArrayAllInputs, E5m2Down) {
  encode_vs_ref<std::uint8_t>(Encoding::kE5m2, Round::kDown, "e5m2 rd");
}
// s4 under rzi.sat: the s8 kernel of the same mode with the s4 clamp bounds (both swept in the
// exhaustive suite, convert_array_long_test.cpp).
TEST(ConvertArrayAllInputs, S4TowardZero) {
  convert_sweep::int_vs_ref(Round::kTowardZero, 4, "s4 rzi.sat");
}

}  // namespace
}  // namespace attnsim
