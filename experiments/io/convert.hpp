// Array conversions behind `attnsim convert`: float -> encodings and back, for every format.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "formats/policy.hpp"

namespace attnsim {

// round(x / scale) as an integer, rounding the *exact* quotient once under `r` (no FP division):
// the reference meaning of "quantize with this scale" that the command line offers. Kernels that
// multiply by a rounded reciprocal (SageAttention's x * (127/amax)) are modelled in numerics/.
// Preconditions: x finite, scale finite and > 0. |result| is capped at 2^40 (callers saturate).
std::int64_t round_exact_quotient(double x, double scale, Round r);

struct ConvertRequest {
  std::string format;  // e4m3fn e5m2 bf16 fp16 int8 int4 int2
  Policy policy{Round::kNearestEven, Overflow::kSaturate, NanEncoding::kCuda};
  double scale = 0.0;   // integer formats only
  bool packed = false;  // int4/int2: two or four elements per byte, element 0 in the low bits
};

// Encode; the result is the raw little-endian bytes (u8 per 8-bit element, u16 per 16-bit,
// one byte per int element unless packed). Inputs as float (from f32) or double (from f64).
std::vector<std::uint8_t> encode_array(const std::vector<float>& x, const ConvertRequest& req);
std::vector<std::uint8_t> encode_array(const std::vector<double>& x, const ConvertRequest& req);
// The same on n values in place (the Python module's arrays, read without a copy).
std::vector<std::uint8_t> encode_array(const float* x, std::size_t n, const ConvertRequest& req);
std::vector<std::uint8_t> encode_array(const double* x, std::size_t n, const ConvertRequest& req);
// Decode raw encodings back to float32 (integers: float(q) * float(scale), one FP32 rounding, as a
// kernel's dequantization does). `count` limits the elements read from packed input (0 = all).
std::vector<float> decode_array(const std::vector<std::uint8_t>& bytes, const ConvertRequest& req,
                                std::size_t count);
std::vector<float> decode_array(const std::uint8_t* bytes, std::size_t size,
                                const ConvertRequest& req, std::size_t count);

}  // namespace attnsim
