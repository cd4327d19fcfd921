// The exponential of the online softmax: its base, the function that evaluates it (libm, FP64
// exact, the H100's MUFU ex2.approx models, or a technique's hook) and the rescale factor.
#pragma once

#include <cmath>

#include "formats/float32.hpp"
#include "numerics/special.hpp"

namespace attnsim {

// How p = e^(scale·(s − m)) is evaluated: the base of the exponent ...
//  kExp2  FA2/FA3/flashinfer/SageAttention: p = exp2(s·scale_log2 − m·scale_log2) with
//         scale_log2 = sm_scale·log2 e folded into one constant (FA2 softmax.h scale_apply_exp2;
//         nvcc contracts the multiply-subtract into one FFMA, see `fma`).
//  kExp   the textbook p = exp((s − m)·sm_scale) (TurboAttention's SAS, AMLA/Ascend's Exp).
enum class ExpKind { kExp2, kExp };

// ... and the function that evaluates it (the exp stage of sim/pipeline).
//  kLibm         the host's exp2/exp in the state's arithmetic (glibc exp2f for FP32): FA2 as the
//                reference kernels of this project compute it.
//  kExact        exp2/exp evaluated in FP64 and rounded once to the state's type: the exact choice
//                of error attribution.
//  kEx2ApproxFtz ex2.approx.ftz.f32 as the H100 computes it (numerics/special.hpp, equal to the
//                hardware on all 2^32 inputs): what exp2f compiles to under --use_fast_math and
//                what SageAttention/flashinfer call directly. Base 2 only.
//  kEx2Approx    ex2.approx.f32 (no .ftz: ptxas's range scaling around the same MUFU). Base 2.
//  kHook         a caller-supplied FP32 function of the argument (TurboAttention's SAS: LUT for
//                the integer part, polynomial for the fraction).
//  kExpfLibdevice CUDA's expf without fast math (libdevice __nv_expf, the IEEE branch:
//                numerics/special.hpp expf_libdevice, equal to the H100 on all 2^32 inputs): the
//                softmax kernels of PyTorch (softmax_warp_forward, the math SDPA backend). Base e.
//  kEx2ApproxLog2e Triton's tl.exp on fp32 (Triton 3.6, sm_90): `mul.f32 x, 0f3FB8AA3B` then
//                ex2.approx.f32 without .ftz, p = ex2(fl(x · fl32(log2 e))) (vLLM's
//                unified_attention, cuda_check/serving/models/VLLM_NOTES.md). Base e.
// The FP32 models take the argument rounded to FP32 (in an FP64 state that is one rounding) and
// return an FP32 value, which the state widens exactly.
enum class ExpFn { kLibm, kExact, kEx2ApproxFtz, kEx2Approx, kHook, kExpfLibdevice, kEx2ApproxLog2e };

template <class T>
struct ExpModel {
  ExpKind kind = ExpKind::kExp2;
  // kExp2: scale_log2, rounded once to T (FA2's Flash_fwd_params::scale_softmax_log2);
  // kExp: sm_scale. scale = 1 with kExp2 is the flashinfer convention (scores already scaled).
  T scale = T(1);
  ExpFn fn = ExpFn::kLibm;
  float (*hook)(float x, const void* ctx) = nullptr;  // kHook: p = hook(x, hook_ctx)
  const void* hook_ctx = nullptr;

  // The exponential (base `kind`) of an argument x already in the exponent's units.
  T eval(T x) const {
    switch (fn) {
      case ExpFn::kLibm:
        return kind == ExpKind::kExp2 ? std::exp2(x) : std::exp(x);
      case ExpFn::kExact:
        return T(kind == ExpKind::kExp2 ? std::exp2(double(x)) : std::exp(double(x)));
      case ExpFn::kEx2ApproxFtz:
        return T(Ex2ApproxFtz::h100()(float(x)));
      case ExpFn::kEx2Approx:
        return T(f32_from_bits(ex2_approx_bits(f32_bits(float(x)))));
      case ExpFn::kHook:
        return T(hook(float(x), hook_ctx));
      case ExpFn::kExpfLibdevice:
        return T(expf_libdevice(float(x), false));
      case ExpFn::kEx2ApproxLog2e:
        return T(f32_from_bits(ex2_approx_bits(f32_bits(float(x) * 0x1.715476p+0f))));
    }
    return x;
  }

  // Rescale factor of the running sum and output when the max moves from m_old to m_use
  // (FA2 softmax_rescale_o: scores_scale = exp2f((scores_max_prev - scores_max_cur) * scale_log2)).
  T alpha(T m_old, T m_use) const { return eval((m_old - m_use) * scale); }
};

}  // namespace attnsim
