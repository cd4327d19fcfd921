// Internal to numerics/: the x86 instruction sets' entry points of the array kernels, which
// numerics/dispatch.cpp puts into the tables. Each has its public function's signature (and its
// contract: the reference's bits) and falls back to the reference itself where its kernel does not
// apply (a format without a kernel, MXCSR's DAZ/FTZ set by a -ffast-math library).
#pragma once

#include <cstddef>
#include <cstdint>

#include "formats/encoding.hpp"
#include "formats/policy.hpp"
#include "numerics/model_math.hpp"
#include "numerics/simd.hpp"
#include "numerics/special.hpp"

#if ATTNSIM_X86_KERNELS
namespace attnsim::kernels_x86 {

// convert_array.cpp
void encode_u32_avx512(Encoding e, const float* x, std::size_t n, std::uint32_t* out, Policy p);
void encode_u16_avx512(Encoding e, const float* x, std::size_t n, std::uint16_t* out, Policy p);
void encode_u8_avx512(Encoding e, const float* x, std::size_t n, std::uint8_t* out, Policy p);
void encode_u32_avx2(Encoding e, const float* x, std::size_t n, std::uint32_t* out, Policy p);
void encode_u16_avx2(Encoding e, const float* x, std::size_t n, std::uint16_t* out, Policy p);
void encode_u8_avx2(Encoding e, const float* x, std::size_t n, std::uint8_t* out, Policy p);
void decode_u16_avx512(Encoding e, const std::uint16_t* in, std::size_t n, float* out);
void decode_u8_avx512(Encoding e, const std::uint8_t* in, std::size_t n, float* out);
void round_avx512(Encoding e, const float* x, std::size_t n, float* out, Policy p);
void round_avx2(Encoding e, const float* x, std::size_t n, float* out, Policy p);
void round_to_int_avx512(const float* x, std::size_t n, std::int32_t* out, Round r, int bits);
void round_to_int_avx2(const float* x, std::size_t n, std::int32_t* out, Round r, int bits);

// special_array.cpp
void ex2_approx_ftz_avx512(const float* x, std::size_t n, float* out, const Ex2ApproxFtz& ex2);
void ex2_approx_ftz_avx2(const float* x, std::size_t n, float* out, const Ex2ApproxFtz& ex2);
void ex2_approx_avx512(const float* x, std::size_t n, float* out, const Ex2ApproxFtz& ex2);
void ex2_approx_avx2(const float* x, std::size_t n, float* out, const Ex2ApproxFtz& ex2);
void rcp_approx_ftz_avx512(const float* x, std::size_t n, float* out, const RcpApproxFtz& rcp);
void rcp_approx_ftz_avx2(const float* x, std::size_t n, float* out, const RcpApproxFtz& rcp);
void rcp_approx_avx512(const float* x, std::size_t n, float* out, const RcpApproxFtz& rcp);
void rcp_approx_avx2(const float* x, std::size_t n, float* out, const RcpApproxFtz& rcp);
void exp_exact_avx512(const float* x, std::size_t n, float* out, bool base2);
void exp_exact_avx2(const float* x, std::size_t n, float* out, bool base2);

// digest_array.cpp
std::uint64_t digest_sum_avx512(std::uint32_t first, const std::uint32_t* out, std::size_t n);

// model_math_x86.cpp
void linear_f32_avx512(const double* x, std::size_t rows, std::size_t ldx, const PackedLinear& w,
                       std::size_t p0, std::size_t p1, float* y, std::size_t ldy);
void linear_f32_avx2(const double* x, std::size_t rows, std::size_t ldx, const PackedLinear& w,
                     std::size_t p0, std::size_t p1, float* y, std::size_t ldy);

}  // namespace attnsim::kernels_x86
#endif
