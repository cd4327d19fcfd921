// The inner-product models of the attention GEMM stages (S = Q Kᵀ, O += P V): the FP32 CUDA-core
// loop, FP64, or a tensor-core instruction chain of numerics/mma.hpp with optional two-level
// accumulation, chosen at run time (STYLE 7; CUTLASS reference/host/gemm.h InnerProductOp).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "formats/encoding.hpp"
#include "numerics/exact_sum.hpp"
#include "numerics/mma.hpp"

namespace attnsim {

// One product model.
//  kFp32  each product rounded to FP32, then added to an FP32 accumulator in natural k order (no
//         FMA): a CUDA-core loop compiled with -fmad=false, the order FA2's row-wise reasoning
//         assumes. C is read as FP32.
//  kFp64  products exact (24 x 24 bits fit in 53), sums rounded to FP64; C read and D returned as
//         double: the "better accumulation" bound, and the exact choice of error attribution.
//  kExact every product exact and the sum exact, rounded once to FP32 (RNE) at the end
//         (numerics/exact_sum.hpp): the "exact, then rounded" model of a matrix unit whose
//         accumulation is not public (AMLA's Cube unit, sim/amla/README.md). C is taken exactly.
//  kFp32Fma  one FMA per term into an FP32 accumulator, from C in natural k order (an FFMA chain:
//         fma.rn(a[k], b[k], acc)): each output of cuBLAS's SIMT FP32 GEMM kernels
//         (sm80_xmma_gemm_f32f32_..._ffma, the math SDPA backend's QKᵀ and P·V; fit to the
//         recorded S and O, sim/sdpa/README.md). C is read as FP32.
//  kMma   the instruction `instr` chained over k in natural order (numerics/mma.hpp mma_dot), the
//         D of one instruction the C of the next; promote > 0: two-level accumulation, the chain
//         runs over `promote` elements from zero and each chunk is added to an FP32 register with
//         FADD.RN (mma_dot_promoted; DeepSeek-V3 §3.3.2, SageAttention2 §4.3).
struct DotModel {
  enum Kind : std::uint8_t { kFp32, kFp64, kMma, kExact, kFp32Fma };
  Kind kind = kFp32;
  MmaInstr instr = MmaInstr::kHmmaF16F32;  // kMma only
  int promote = 0;                         // kMma with a floating-point accumulator only

  bool operator==(const DotModel&) const = default;
};

// "fp32", "fp64", "exact", "fp32.fma" or the instruction's `attnsim mma --list` name.
std::string dot_model_name(const DotModel& m);
// Parses a name of dot_model_name (promote is left at 0); false when it is none.
bool parse_dot_model(const std::string& name, DotModel* out);
// Every name parse_dot_model accepts, in table order (fp32, fp64, exact, fp32.fma, then the
// instructions).
const std::vector<std::string>& dot_model_names();

// What a model's instruction needs from its operands; for kFp32/kFp64 any encoding goes (the
// decoded values are multiplied), so a_enc/b_enc are the instruction's A and B formats.
struct DotRequirements {
  bool any_encoding = true;  // kFp32 / kFp64
  Encoding a_enc = Encoding::kFp32, b_enc = Encoding::kFp32;
  int k_step = 1;            // the reduction length must be a multiple of this (zero-padded)
  bool integer_acc = false;  // C and D are int32 (IMMA/IGMMA): a fresh chain only, no FP C
  bool fp16_acc = false;     // the chain's own accumulator is fp16 (HMMA.F16, QGMMA.F16)
};
DotRequirements dot_requirements(const DotModel& m);

// The CUDA-core models on decoded operands: D = C + Σ a[k]·b[k], k in natural order over n terms
// (n may be 0). kMma is not accepted here (its operands are encodings: dot_mma). A may be FP64
// (an FP64 pipeline's P): kFp32, kFp32Fma and kExact round each a[k] to FP32 first, as an FP32 operand
// register would.
template <class TA>
inline double dot_values(DotModel::Kind kind, double c, const TA* a, const float* b, int n) {
  if (kind == DotModel::kFp32) {
    float acc = float(c);  // exact when c came from an FP32 accumulator
    for (int k = 0; k < n; ++k) {
      const float prod = float(a[k]) * b[k];
      acc = acc + prod;
    }
    return acc;
  }
  if (kind == DotModel::kExact) return dot_exact_f32(c, a, b, n);
  if (kind == DotModel::kFp32Fma) {
    float acc = float(c);
    for (int k = 0; k < n; ++k) acc = std::fma(float(a[k]), b[k], acc);
    return acc;
  }
  double acc = c;
  for (int k = 0; k < n; ++k) acc = acc + double(a[k]) * double(b[k]);
  return acc;
}

// The instruction model on encodings: n a multiple of dot_requirements(m).k_step (zero-padded by
// the caller: zero products take no part in a block's alignment, so padding is exact), c as the
// instruction's C. Floating-point accumulators: c and the result are FP32 bits (an fp16
// accumulator's C is rounded from FP32 by RNE and its D widened exactly, which is how a kernel
// keeping fp16 accumulators in registers sees them; with promote > 0 the chunks start from zero
// and C stays FP32). Integer accumulators: c and the result are int32 bits.
std::uint32_t dot_mma(const DotModel& m, const std::uint32_t* a, const std::uint32_t* b, int n,
                      std::uint32_t c);

}  // namespace attnsim
