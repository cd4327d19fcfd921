// numerics/convert_array over ALL 2^32 FP32 inputs: each vector kernel against its `_ref` loop
// over formats/, for the (format, rounding) pairs that no independent oracle sweep covers (and
// fp16 in the IEEE modes, whose F16C oracle is the kernel's own instruction). The pairs that one
// does are swept through the same array functions against the independent oracles (by default
// the vector kernels, under ATTNSIM_ISA=scalar the references): tests/formats/convert_long_test.cpp
// and convert_bits_long_test.cpp (bf16 rne/rz/ru/rd, fp16 rne/rz, e4m3fn rne/rz/rna, e5m2 rne)
// and tests/hw/cvt_h100_long_test.cpp (the H100 over all 2^32 inputs: e4m3fn/e5m2 satfinite,
// bf16 rn/rz, fp16 rn/rz/rm/rp, s8 rni.sat). The policy only decides the lanes that the kernels
// hand to the scalar encoder, so one policy per pair proves the vector arithmetic; the policies
// themselves are swept in the unit test on every upper half. Label: exhaustive (OpenMP).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "formats/encoding.hpp"
#include "numerics/convert_array.hpp"
#include "numerics/isa.hpp"

namespace attnsim {
namespace {

// Runs check(x, n) on every block of 2^16 consecutive FP32 bit patterns, on every core; check
// returns the block's mismatches.
template <class Check>
void sweep_blocks(const char* name, const Check& check) {
  const auto start = std::chrono::steady_clock::now();
  std::atomic<std::uint64_t> bad{0};
#pragma omp parallel
  {
    std::vector<float> x(1u << 16);
#pragma omp for schedule(dynamic, 64)
    for (std::int64_t hi = 0; hi < 65536; ++hi) {
      for (std::uint32_t lo = 0; lo < 65536; ++lo)
        x[lo] = f32_from_bits((std::uint32_t(hi) << 16) | lo);
      bad += check(x.data(), x.size());
    }
  }
  EXPECT_EQ(bad.load(), 0u) << name << " over all 2^32 inputs";
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%-30s all 2^32 FP32 inputs (%s), %llu mismatches, %.1f s\n", name,
              isa_name(active_isa()), (unsigned long long)bad.load(), s);
}

template <class Out>
void encode_vs_ref(Encoding e, Round r, const char* name) {
  const Policy p{r, Overflow::kSaturate, NanEncoding::kIeee};
  sweep_blocks(name, [&](const float* x, std::size_t n) {
    thread_local std::vector<Out> got, want;
    got.resize(n);
    want.resize(n);
    encode_array(e, x, n, got.data(), p);
    encode_array_ref(e, x, n, want.data(), p);
    std::uint64_t bad = 0;
    for (std::size_t i = 0; i < n; ++i) bad += got[i] != want[i];
    return bad;
  });
}

void int_vs_ref(Round r, int bits, const char* name) {
  sweep_blocks(name, [&](const float* x, std::size_t n) {
    thread_local std::vector<std::int32_t> got, want;
    got.resize(n);
    want.resize(n);
    round_to_int_array(x, n, got.data(), r, bits);
    round_to_int_array_ref(x, n, want.data(), r, bits);
    return std::uint64_t(std::memcmp(got.data(), want.data(), n * 4) != 0 ? 1 : 0);
  });
}

// fp16 under the IEEE modes: the kernel is vcvtps2ph, which the F16C oracle of tests/formats
// shares, so it is swept against the reference here too (the H100 sweep proves it independently).
TEST(ConvertArrayAllInputs, Fp16IeeeModes) {
  encode_vs_ref<std::uint16_t>(Encoding::kFp16, Round::kNearestEven, "fp16 rne");
  encode_vs_ref<std::uint16_t>(Encoding::kFp16, Round::kTowardZero, "fp16 rz");
  encode_vs_ref<std::uint16_t>(Encoding::kFp16, Round::kUp, "fp16 ru");
  encode_vs_ref<std::uint16_t>(Encoding::kFp16, Round::kDown, "fp16 rd");
}
TEST(ConvertArrayAllInputs, Bf16TiesAway) {
  encode_vs_ref<std::uint16_t>(Encoding::kBf16, Round::kNearestAway, "bf16 rna");
}
TEST(ConvertArrayAllInputs, Fp16TiesAway) {
  encode_vs_ref<std::uint16_t>(Encoding::kFp16, Round::kNearestAway, "fp16 rna");
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
// round_array: the kernels' widening of every finite code, over every input of the two roundings
// the pipeline's P cast uses most (fp16 and e4m3fn, nearest even).
TEST(ConvertArrayAllInputs, RoundArrayFp16AndE4m3fn) {
  for (Encoding e : {Encoding::kFp16, Encoding::kE4m3fn}) {
    sweep_blocks(encoding_name(e), [&](const float* x, std::size_t n) {
      thread_local std::vector<float> got, want;
      got.resize(n);
      want.resize(n);
      round_array(e, x, n, got.data(), kCudaSatfinite);
      round_array_ref(e, x, n, want.data(), kCudaSatfinite);
      return std::uint64_t(std::memcmp(got.data(), want.data(), n * 4) != 0 ? 1 : 0);
    });
  }
}
// The integer roundings of the quantizers (s8 rni.sat is also swept against the H100).
TEST(ConvertArrayAllInputs, IntRoundings) {
  int_vs_ref(Round::kNearestEven, 8, "s8 rni.sat");
  int_vs_ref(Round::kTowardZero, 8, "s8 rzi.sat");
  int_vs_ref(Round::kUp, 8, "s8 rpi.sat");
  int_vs_ref(Round::kNearestEven, 4, "s4 rni.sat");
  int_vs_ref(Round::kTowardZero, 4, "s4 rzi.sat");
}

}  // namespace
}  // namespace attnsim
