// The inner-product stage of the reference GEMMs (S = Q Kᵀ, O += P V): one accumulation model,
// chosen by configuration, instead of one loop per precision (STYLE 7; CUTLASS
// reference/host/gemm.h InnerProductOp).
#pragma once

#include <string>

namespace attnsim {

// D = C + Σ_k a[k]·b[k] over already-decoded operands (every a[k], b[k] is exactly a value of
// the operand's storage format, so a model may re-encode them losslessly), k in natural order.
//  kFp32  each product rounded to FP32, then added to an FP32 accumulator (no FMA): a CUDA-core
//         loop compiled with -fmad=false, and the order FA2's row-wise reasoning assumes.
//  kFp64  products exact (24 × 24 bits fit in 53), sums rounded to FP64; C read and D returned
//         as double: the "better accumulation" bound.
// Adding a model: a new enumerator and a case in dot_ref. Tensor-core models (numerics/mma.hpp:
// HMMA.16816.F32 k16 blocks, the FP22 QGMMA window, "flush to FP32 every N keys") take the same
// arguments: encode a and b to the instruction's input format (exact), pass C as FP32 bits, chain
// the instruction over k in natural order and return D.
enum class InnerProduct { kFp32, kFp64 };

inline std::string inner_product_name(InnerProduct m) {
  return m == InnerProduct::kFp32 ? "fp32" : "fp64";
}

// One output element. c is the incoming accumulator (0 for a fresh S tile; the rescaled O for
// P·V, which FA2 feeds to its second MMA as C: gemm_rs(acc_o, tOrP, tOrVt)); n may be 0.
inline double dot_ref(InnerProduct model, double c, const float* a, const float* b, int n) {
  switch (model) {
    case InnerProduct::kFp32: {
      float acc = float(c);  // exact when c came from an FP32 accumulator
      for (int k = 0; k < n; ++k) {
        const float prod = a[k] * b[k];
        acc = acc + prod;
      }
      return acc;
    }
    case InnerProduct::kFp64: {
      double acc = c;
      for (int k = 0; k < n; ++k) acc = acc + double(a[k]) * double(b[k]);
      return acc;
    }
  }
  return c;
}

}  // namespace attnsim
