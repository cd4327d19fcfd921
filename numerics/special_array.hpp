// The MUFU models of numerics/special.hpp over whole arrays: ex2.approx{.ftz}.f32 and
// rcp.approx{.ftz}.f32 element by element, as AVX-512 gathers from the same recorded tables (ex2:
// from a 4 MiB form of them, see ex2_array_compact_tables),
// chosen once per call by numerics/isa.hpp and bit-identical to the `_ref` loops over the scalar
// models beside them (tests/numerics/special_array_test.cpp on adversarial inputs; all 2^32
// inputs against the H100's recorded digests in tests/hw/cvt_h100_long_test.cpp, which runs these
// array functions: the vector kernels by default, the references under ATTNSIM_ISA=scalar).
// out may be x (in place).
#pragma once

#include <cstddef>

#include "numerics/special.hpp"

namespace attnsim {

// out[i] = ex2(x[i]) (Ex2ApproxFtz::operator()).
void ex2_approx_ftz_array(const float* x, std::size_t n, float* out,
                          const Ex2ApproxFtz& ex2 = Ex2ApproxFtz::h100());
void ex2_approx_ftz_array_ref(const float* x, std::size_t n, float* out,
                              const Ex2ApproxFtz& ex2 = Ex2ApproxFtz::h100());
// out[i] = ex2_approx_bits(x[i]) as a float (no .ftz: ptxas's range scaling).
void ex2_approx_array(const float* x, std::size_t n, float* out,
                      const Ex2ApproxFtz& ex2 = Ex2ApproxFtz::h100());
void ex2_approx_array_ref(const float* x, std::size_t n, float* out,
                          const Ex2ApproxFtz& ex2 = Ex2ApproxFtz::h100());
// out[i] = float(std::exp(double(x[i]))) (base2: std::exp2), ExpFn::kExact's FP32 model: the
// FP64 exponential of the FP32 argument rounded once to FP32. The AVX-512 kernel evaluates the
// FP64 exponential itself (a reduction to |r| <= ln2/2 and a degree-13 polynomial, within a few
// FP64 ulps) and rounds it to FP32; lanes whose FP64 value lies within 64 FP64 ulps of an FP32
// rounding boundary (about 2.4e-7 of them), whose FP32 result is subnormal, and NaN and +Inf
// lanes take the libm reference, so the result equals it bit for bit (all 2^32 inputs:
// tests/numerics/special_array_long_test.cpp).
void exp_exact_array(const float* x, std::size_t n, float* out, bool base2);
void exp_exact_array_ref(const float* x, std::size_t n, float* out, bool base2);

// Whether the AVX-512 ex2 kernels read ex2's tables in their compact form (T±[f] = a
// double-precision prediction of 2^(±f·2^-23) plus a 2-bit code: 4 MiB instead of 64, checked
// against every entry when it is built, on first use): true for the H100's tables.
bool ex2_array_compact_tables(const Ex2ApproxFtz& ex2 = Ex2ApproxFtz::h100());

// out[i] = rcp(x[i]) (RcpApproxFtz::operator()).
void rcp_approx_ftz_array(const float* x, std::size_t n, float* out,
                          const RcpApproxFtz& rcp = RcpApproxFtz::h100());
void rcp_approx_ftz_array_ref(const float* x, std::size_t n, float* out,
                              const RcpApproxFtz& rcp = RcpApproxFtz::h100());
// out[i] = rcp_approx_bits(x[i]) as a float (no .ftz).
void rcp_approx_array(const float* x, std::size_t n, float* out,
                      const RcpApproxFtz& rcp = RcpApproxFtz::h100());
void rcp_approx_array_ref(const float* x, std::size_t n, float* out,
                          const RcpApproxFtz& rcp = RcpApproxFtz::h100());

// lg2.approx{.ftz}.f32 (Lg2ApproxFtz, lg2_approx_bits) and the libdevice functions built on the
// MUFU (special.hpp: expf_libdevice, __expf = fast_expf, __logf = fast_logf) over arrays: the
// per-row exponentials and logarithms of split-KV reductions. The values are the scalar models',
// element by element (the _ref loops). lg2's table (2^23 64-bit entries) read at random misses the
// caches and the TLB on every call; the array form requests the entry of the element 16 places
// ahead before it reads this one (a prefetch), so that the misses of an array overlap. The
// exponentials take the ex2 array kernels above for their MUFU.EX2 step.
void lg2_approx_ftz_array(const float* x, std::size_t n, float* out,
                          const Lg2ApproxFtz& lg2 = Lg2ApproxFtz::h100());
void lg2_approx_ftz_array_ref(const float* x, std::size_t n, float* out,
                              const Lg2ApproxFtz& lg2 = Lg2ApproxFtz::h100());
void lg2_approx_array(const float* x, std::size_t n, float* out,
                      const Lg2ApproxFtz& lg2 = Lg2ApproxFtz::h100());
void lg2_approx_array_ref(const float* x, std::size_t n, float* out,
                          const Lg2ApproxFtz& lg2 = Lg2ApproxFtz::h100());
void expf_libdevice_array(const float* x, std::size_t n, float* out, bool ftz);
void expf_libdevice_array_ref(const float* x, std::size_t n, float* out, bool ftz);
void fast_expf_array(const float* x, std::size_t n, float* out, bool ftz);
void fast_expf_array_ref(const float* x, std::size_t n, float* out, bool ftz);
void fast_logf_array(const float* x, std::size_t n, float* out, bool ftz);
void fast_logf_array_ref(const float* x, std::size_t n, float* out, bool ftz);
// tanhf_libdevice (FlexAttention's softcap) over an array: its MUFU.EX2 and MUFU.RCP steps through
// the array kernels.
void tanhf_libdevice_array(const float* x, std::size_t n, float* out);
void tanhf_libdevice_array_ref(const float* x, std::size_t n, float* out);

}  // namespace attnsim
