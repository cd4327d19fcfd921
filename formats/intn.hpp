// Integer storage formats s8/s4/s2 and u8/u4/u2 (int8/int4/int2, signed and unsigned), sub-byte
// packing as kernels store them, and FP32/FP64 -> integer rounding with explicit rounding and
// overflow policy.
#pragma once

#include <cstddef>
#include <cstdint>

#include "formats/config.hpp"
#include "formats/exmy.hpp"
#include "formats/float32.hpp"
#include "formats/policy.hpp"

namespace attnsim {

template <int kBitsT, bool kSignedT>
struct IntFormat {
  static_assert(kBitsT == 2 || kBitsT == 4 || kBitsT == 8, "int2, int4 and int8 only");
  static constexpr int kBits = kBitsT;
  static constexpr bool kSigned = kSignedT;
  static constexpr std::int32_t kMin = kSigned ? -(1 << (kBits - 1)) : 0;
  static constexpr std::int32_t kMax = kSigned ? (1 << (kBits - 1)) - 1 : (1 << kBits) - 1;
  static constexpr int kPerByte = 8 / kBits;
  static constexpr std::uint8_t kMask = std::uint8_t((1u << kBits) - 1);
  using Storage = std::uint8_t;  // one element, two's complement in the low kBits bits
};

// PTX type names (.s8 .s4 .s2 .u8 .u4 .u2): CUDA already defines int2/int4/uint2/uint4 as vector
// types, and these headers are included by device code in cuda_check/.
using s8 = IntFormat<8, true>;
using s4 = IntFormat<4, true>;
using s2 = IntFormat<2, true>;
using u8 = IntFormat<8, false>;
using u4 = IntFormat<4, false>;
using u2 = IntFormat<2, false>;

static_assert(s4::kMin == -8 && s4::kMax == 7 && u2::kMax == 3 && s2::kMin == -2);

// What an out-of-range integer becomes. kSaturate is PTX cvt.rni.sat / cvt.pack.sat (and the
// default for float->int cvt: "the .sat modifier is redundant"); kWrap keeps the low kBits bits
// (ml_dtypes intn.h Mask(), C++ narrowing of an in-range int32).
enum class IntOverflow : std::uint8_t { kSaturate, kWrap };

template <class IntFmt>
ATTNSIM_HD constexpr std::uint8_t int_to_bits(std::int32_t v) {
  return std::uint8_t(std::uint32_t(v) & IntFmt::kMask);
}

template <class IntFmt>
ATTNSIM_HD constexpr std::int32_t int_from_bits(std::uint8_t b) {
  const std::int32_t u = b & IntFmt::kMask;
  if (IntFmt::kSigned && (u >> (IntFmt::kBits - 1)) != 0) return u - (1 << IntFmt::kBits);
  return u;
}

template <class IntFmt>
ATTNSIM_HD constexpr std::int32_t int_clamp_or_wrap(std::int64_t v, IntOverflow o) {
  if (o == IntOverflow::kSaturate) {
    return std::int32_t(v < IntFmt::kMin ? IntFmt::kMin : (v > IntFmt::kMax ? IntFmt::kMax : v));
  }
  return int_from_bits<IntFmt>(std::uint8_t(std::uint64_t(v) & IntFmt::kMask));
}

// Round a decoded value to an integer of IntFmt. NaN gives 0 and +-Inf saturates, as PTX
// cvt.rni{.sat}.s8.f32 does (PTX ISA, cvt "Integer Notes"). Under kWrap an infinite or huge value
// wraps from the saturated int64, which is what a C++ cast chain would give when defined.
template <class IntFmt>
ATTNSIM_HD constexpr std::int32_t round_to_int(FloatParts x, Round r, IntOverflow o) {
  if (x.kind == FloatParts::kNaN || x.kind == FloatParts::kZero) return 0;
  // Far outside every IntFmt, and a multiple of 2^8, so it wraps to 0 like every FP32/FP64
  // integer in [2^62, 2^63) does. Anything below 2^62 is shifted exactly: FP64 integers in
  // [2^52, 2^62) still have non-zero low bits that kWrap must keep (a 2^40 cut-off here made
  // round_to_int<s8>(0x1p52 + 3, rne, kWrap) return 0 instead of 3).
  constexpr std::int64_t kHuge = std::int64_t{1} << 62;
  if (x.kind == FloatParts::kInf) return int_clamp_or_wrap<IntFmt>(x.neg ? -kHuge : kHuge, o);
  const int msb = 63 - countl_zero64(x.sig);
  std::uint64_t mag = 0;
  if (x.exp >= 0) {
    mag = (x.exp + msb >= 62) ? std::uint64_t(kHuge) : (x.sig << x.exp);
  } else {
    mag = detail::shift_round(x.sig, -x.exp, x.neg, r);
  }
  const std::int64_t v = x.neg ? -std::int64_t(mag) : std::int64_t(mag);
  return int_clamp_or_wrap<IntFmt>(v, o);
}

template <class IntFmt>
ATTNSIM_HD constexpr std::int32_t round_to_int(float x, Round r, IntOverflow o) {
  return round_to_int<IntFmt>(decompose<fp32>(f32_bits(x)), r, o);
}
template <class IntFmt>
ATTNSIM_HD constexpr std::int32_t round_to_int(double x, Round r, IntOverflow o) {
  return round_to_int<IntFmt>(decompose<fp64>(f64_bits(x)), r, o);
}

// CUDA cvt.rni.sat.s8.f32 (CUTLASS NumericConverter<int8_t, float, round_to_nearest> on device,
// SageAttention's float_to_int8_rn in csrc/fused/fused.cu).
ATTNSIM_HD constexpr std::int32_t cvt_rni_sat_s8(float x) {
  return round_to_int<s8>(x, Round::kNearestEven, IntOverflow::kSaturate);
}

// Sub-byte packing. Element i of a row lives in byte i / kPerByte at bit offset
// (i % kPerByte) * kBits: element 0 in the least significant bits. This is the order of CUTLASS's
// int4b_t/uint2b_t arrays (integer_subbyte.h, subbyte_reference) and of the k index within a
// 32-bit register of the m16n8k64 INT4 mma fragments (PTX ISA, "Matrix Fragments for
// mma.m16n8k64").
template <class IntFmt>
ATTNSIM_HD constexpr std::size_t packed_bytes(std::size_t n) {
  return (n + IntFmt::kPerByte - 1) / IntFmt::kPerByte;
}

template <class IntFmt>
ATTNSIM_HD void pack(const std::int32_t* values, std::size_t n, std::uint8_t* out) {
  for (std::size_t b = 0; b < packed_bytes<IntFmt>(n); ++b) out[b] = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const int shift = int(i % IntFmt::kPerByte) * IntFmt::kBits;
    out[i / IntFmt::kPerByte] |= std::uint8_t(int_to_bits<IntFmt>(values[i]) << shift);
  }
}

template <class IntFmt>
ATTNSIM_HD void unpack(const std::uint8_t* in, std::size_t n, std::int32_t* values) {
  for (std::size_t i = 0; i < n; ++i) {
    const int shift = int(i % IntFmt::kPerByte) * IntFmt::kBits;
    values[i] = int_from_bits<IntFmt>(std::uint8_t(in[i / IntFmt::kPerByte] >> shift));
  }
}

}  // namespace attnsim
