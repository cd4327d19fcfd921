// Internal to the CUDA-core product stages (qk_cuda_core.cpp, pv_cuda_core.cpp): what one
// instruction set's kernels give their portable drivers. The drivers (the blocks' copies, the
// row groups, the causal bounds, kExact's span test, the chunk dequantization) are written once;
// each set (the dispatch table's CudaCoreKernels: AVX2, AVX-512 in *_x86.cpp, NEON in *_neon.cpp)
// provides the register-blocked chains, each lane one output's own chain in the reference's order
// (never split across lanes), and where it has them vector forms of the span tests.
#pragma once

#include "sim/pipeline/stages/cuda_core_span.hpp"
#include "sim/pipeline/stages/kernels.hpp"

namespace attnsim {

inline constexpr int kCudaCoreRows = 4;  // query rows per register block
inline constexpr int kCudaCoreVecs = 4;  // key / channel vectors per register block

// --- QKᵀ: keys across lanes, on the block's transposed copy kt[k][j] (row stride ldk) ---------

// One register block: acc[r][j] for `rows` rows (q + r·d) and the keys from kt, n valid keys
// stored (row stride lda).
template <class Acc, class Kt>
using QkTileFn = void (*)(const float* q, int d, const Kt* kt, int ldk, Acc* acc, int lda, int n);

struct QkChains {
  int fp32_lanes = 0, fp64_lanes = 0;  // keys per register
  // [rows - 1][vecs - 1]: FP32 chains (mul then add) and FP64 chains (an FMA per exact product)
  // on kt's FP64 copy.
  const QkTileFn<float, float>* const* fp32 = nullptr;
  const QkTileFn<double, double>* const* fp64 = nullptr;
  // kt from the block's keys (row j at k0 + j·d), zero for keys in [cols, ldk).
  void (*transpose)(const float* k0, int d, int cols, float* kt, int ldk) = nullptr;
  // kExact (null: the reference's): the keys' spans from kt, a row's span, the FP64 sums rounded
  // once to FP32 (+0 for an exact zero).
  void (*key_spans)(const float* kt, int d, int ldk, int cols, cuda_core_span::Span* ks) = nullptr;
  cuda_core_span::Span (*values_span)(const float* x, int n) = nullptr;
  void (*round_exact)(const double* s, float* out, int n) = nullptr;
};

// --- P·V: channels across lanes, V in its [key][channel] layout --------------------------------

struct PvChains {
  // Every row and channel of a [rows][dv] result: out = c0 (row stride ldc; null: +0) + Σ_j
  // p[i][j]·v[j][c] over n keys. FP32: mul then add. FP64: an FMA per product where
  // exact_products (P's values FP32 values), else mul then add.
  void (*fp32)(const float* p, int ldp, const float* v, int n, int rows, int dv, const float* c0,
               int ldc, float* out, int ldo) = nullptr;
  void (*fp64)(bool exact_products, const double* p, int ldp, const double* v, int n, int rows,
               int dv, const double* c0, int ldc, double* out, int ldo) = nullptr;
  // kExact (null: the reference's): V's channel spans over the block's n keys, and the span of n
  // FP64 values each taken as FP32.
  void (*channel_spans)(const float* v, int n, int dv, cuda_core_span::Span* vs) = nullptr;
  cuda_core_span::Span (*f32_span)(const double* x, int n) = nullptr;
};

// The chains of a set (defined by the architecture's kernel file; a set without CUDA-core kernels
// never reaches the drivers).
const QkChains& qk_chains(CudaCoreKernels set);
const PvChains& pv_chains(CudaCoreKernels set);

// The span helpers as plain loops (qk_cuda_core.cpp, pv_cuda_core.cpp): O(d·cols) per block and
// O(d) per row against the O(rows·cols·d) chains; for sets without vector forms.
void key_spans_plain(const float* kt, int d, int ldk, int cols, cuda_core_span::Span* ks);
cuda_core_span::Span values_span_plain(const float* x, int n);
void round_exact_sums_plain(const double* s, float* out, int n);
void channel_spans_plain(const float* v, int n, int dv, cuda_core_span::Span* vs);
cuda_core_span::Span f32_span_plain(const double* x, int n);

}  // namespace attnsim
