// Whole-array conversions between FP32 and the storage encodings (encode, decode, round to an
// encoding and back, float -> small integer): each is a vector kernel chosen once per call by the
// instruction set (numerics/isa.hpp), bit-identical to the `_ref` loop over formats/ beside it,
// which stays the code of record (tests/numerics/convert_array_test.cpp, and over every input in
// convert_array_long_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "formats/encoding.hpp"
#include "formats/policy.hpp"

namespace attnsim {

// FP32 -> the bits of a float encoding under `p`: out[i] = encode_float_bits(e, x[i], p) for
// e in {fp32, bf16, fp16, e4m3fn, e5m2} (fp32 copies the bits; the 8- and 16-bit outputs take
// the encodings of their width only). Every Policy is supported: the kernel rounds finite values
// in the vector registers under each of the five modes and hands NaN, Inf and overflowing lanes
// to the scalar encoder (their result is the policy's choice), so the policy's overflow and NaN
// rules are formats/' own.
void encode_array(Encoding e, const float* x, std::size_t n, std::uint32_t* out, Policy p);
void encode_array(Encoding e, const float* x, std::size_t n, std::uint16_t* out, Policy p);
void encode_array(Encoding e, const float* x, std::size_t n, std::uint8_t* out, Policy p);
void encode_array_ref(Encoding e, const float* x, std::size_t n, std::uint32_t* out, Policy p);
void encode_array_ref(Encoding e, const float* x, std::size_t n, std::uint16_t* out, Policy p);
void encode_array_ref(Encoding e, const float* x, std::size_t n, std::uint8_t* out, Policy p);

// Bits of a float encoding -> FP32, exact: out[i] = decode_float_bits(e, in[i]) (NaNs keep sign
// and payload with the quiet bit set, formats/README.md).
void decode_array(Encoding e, const std::uint16_t* in, std::size_t n, float* out);
void decode_array(Encoding e, const std::uint8_t* in, std::size_t n, float* out);
void decode_array_ref(Encoding e, const std::uint16_t* in, std::size_t n, float* out);
void decode_array_ref(Encoding e, const std::uint8_t* in, std::size_t n, float* out);

// x rounded to a float encoding and decoded back (what a kernel holds after the cast):
// out[i] = round_to(e, x[i], p); fp32 and fp64 copy. out may be x (in place).
void round_array(Encoding e, const float* x, std::size_t n, float* out, Policy p);
void round_array_ref(Encoding e, const float* x, std::size_t n, float* out, Policy p);

// FP32 -> a signed integer of `bits` (8, 4 or 2) by PTX cvt.{rni,rzi,rpi,rmi}.sat: rounded under
// r (every Round), saturated to the format's range, NaN -> 0: out[i] = round_to_int<sN>(x[i], r,
// IntOverflow::kSaturate).
void round_to_int_array(const float* x, std::size_t n, std::int32_t* out, Round r, int bits);
void round_to_int_array_ref(const float* x, std::size_t n, std::int32_t* out, Round r, int bits);

}  // namespace attnsim
