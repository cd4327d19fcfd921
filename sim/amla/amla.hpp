// AMLA (Liao et al., "AMLA: MUL by ADD in FlashAttention Rescaling"): the Base FlashAttention of
// its Algorithm 1, Algorithm 2 as the paper writes it, and the public CANN kernel's arithmetic,
// each a preset of the attention pipeline (sim/pipeline) plus AMLA's own step: the INT32 addition
// on O's FP32 bits with its BF16 error compensation (a Rescale::kHook). sim/amla/README.md names
// the paper line or CANN code path behind every numeric choice.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "formats/encoding.hpp"
#include "sim/pipeline/options.hpp"
#include "sim/pipeline/pipeline.hpp"
#include "sim/problem.hpp"

namespace attnsim {

// kBase   Algorithm 1: O·exp(m_old − m) + P·V in FP32 (rescale by multiplication).
// kPaper  Algorithm 2 as written (round half even, the BF16 casts RNE, the order of its FP32 ops),
//         with Appendix A's compensation direction by default (line 11's printed ratio: comp=alg2).
// kCann   hicann/ops-transformer fia_block_vec_nonquant_mla.h (AmlaVecCompute, ProcessAmlaNupdate,
//         DealBmm2ResBaseBlock): ties-away casts, -30 clamp, +1e-6, cof(i-1)/cof(i), |O| > 1e10 -> 0.
enum class AmlaVariant : std::uint8_t { kBase, kPaper, kCann };

// How the Cube unit (or the GPU's tensor core) accumulates a product (not public for Ascend):
//  kExact    every product exact, the sum exact, rounded once to FP32 (DotModel::kExact)
//  kFp32Seq  FP32 additions in natural k order (products of 16-bit inputs are exact in FP32)
//  kBlock16  the H100's HMMA.16816.F32(.BF16) chained over k (numerics/mma.hpp, recorded on the
//            H100): 16 products aligned and truncated per block; the NVIDIA-like block model.
enum class AmlaAcc : std::uint8_t { kDefault, kExact, kFp32Seq, kBlock16 };

// The compensation of the BF16 rounding of S16 (Appendix A):
//  kDefault   the variant's own: kPaper -> kAppendix (the paper's intent), kCann -> kCann (kBase
//             has none)
//  kNone      ε = 0 (the plain integer add N·2^23 (+ the variant's bias))
//  kAlg2      Algorithm 2 line 11 as printed: c_i = S32/S16, ε = 1.5·(c_i/c_{i−1} − 1)
//  kAppendix  Appendix A's c_i = r_i/r'_i = S16/S32, ε = 1.5·(c_i/c_{i−1} − 1) (the direction that
//             compensates; Alg. 2's line 11 is its reciprocal)
//  kCann      CANN: cof_i = S32/S16, ε = 1.5·(cof_{i−1}/cof_i − 1) (Appendix A's direction)
enum class AmlaComp : std::uint8_t { kDefault, kNone, kAlg2, kAppendix, kCann };

// Where the kernel runs: kAscend (natural-log domain: Muls by RECIP_OF_LN2 / LN2 and Exp, assumed
// correctly rounded: the Ascend Exp is not public) or kH100 (the GPU analogue of cuda_check/amla:
// scores in log2 units, exp2 by ex2.approx.ftz, products on HMMA bf16).
enum class AmlaTarget : std::uint8_t { kAscend, kH100 };

struct AmlaOptions {
  AmlaVariant variant = AmlaVariant::kCann;
  Encoding in = Encoding::kBf16;  // Q, K, V and the P cast: bf16 or fp16
  int block = 512;                // KV block (the paper's fixed 512)
  int block_q = 128;              // query rows per tile (G = 128 heads in one tile)
  AmlaAcc qk_sum = AmlaAcc::kDefault;  // default: exact (ascend), block16 (h100)
  AmlaAcc pv_sum = AmlaAcc::kDefault;
  AmlaComp comp = AmlaComp::kDefault;
  AmlaTarget target = AmlaTarget::kAscend;
  // The output format; unset: the input format (the paper's "final outputs in FP16 or BF16").
  std::optional<Encoding> out;
};

// The resolved per-row arithmetic of AMLA's step (what the Rescale::kHook context holds).
struct AmlaStepRule {
  AmlaVariant variant = AmlaVariant::kCann;
  AmlaComp comp = AmlaComp::kCann;
  AmlaTarget target = AmlaTarget::kAscend;
  Encoding s16 = Encoding::kBf16;  // S16's format (the KV type)
};

// The pipeline of a configuration (Base: no hook; Paper/CANN: Rescale::kHook with AMLA's step).
Pipeline amla_pipeline(const AmlaOptions& o);

// AMLA's step as the pipeline's rescale (Rescale::kHook): `rescale=amla_paper|amla_cann` with
// the keys amla_comp, amla_target, amla_s16 (sim/pipeline/options.hpp).
HookRef<RescaleHook> amla_hook(const AmlaStepRule& r);
std::vector<RescaleHookSpec> amla_hook_specs();

// One row's step, exposed for tests (what the hook does): given the new max m (exponent units)
// and whether this is the row's first block, updates aux = {n_{i-1}, c_{i-1}, S16, -} and
// returns P's factor S16 and the INT32 added to O.
RescaleStep amla_step(const AmlaStepRule& r, float m, bool first, double* aux);
// One row's epilogue (CANN: |O| <= 1e10 kept, else 0; both: O / fl(l·S16)).
void amla_finish(const AmlaStepRule& r, float* o, int dv, float l, const double* aux);

// The INT32 AMLA adds for an exponent step dn and compensation eps, the CANN way: the FP32 value
// (max(dn, −30) + (eps + 1e-6))·2^23 cast with ties away from zero. Exposed for the failure-mode
// tests.
std::int32_t amla_cann_n_int(float dn, float eps);

// Names of the choices ("base", "paper", "cann"; "exact", "fp32_seq", "block16"; ...).
std::string amla_variant_name(AmlaVariant v);

}  // namespace attnsim
