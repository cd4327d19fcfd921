// The dispatch table of the stage kernels, the second half of numerics/dispatch.hpp's (the same
// instruction sets, the same active level): one StageKernels per instruction set, each entry that
// set's kernel or the set's below (null: the reference). The dispatchers of stages.hpp call the
// active set's entries; adding an instruction set is one table (kernels.cpp) and its kernels.
#pragma once

#include <vector>

#include "numerics/isa.hpp"
#include "sim/pipeline/stages/stages.hpp"

namespace attnsim {

// Which CUDA-core product kernels (qk_cuda_core.cpp, pv_cuda_core.cpp) a set takes.
enum class CudaCoreKernels { kNone, kNeon, kAvx2, kAvx512 };

struct StageKernels {
  Isa isa = Isa::kScalar;
  // The softmax arithmetic of an FP32 state (each sends the cases it does not vectorize to its
  // reference).
  decltype(&scores_avx512) scores = nullptr;
  decltype(&softmax_step_avx512) softmax_step = nullptr;
  decltype(&row_sum_avx512) row_sum = nullptr;
  decltype(&rescale_avx512) rescale = nullptr;
  decltype(&add_chunk_avx512) add_chunk = nullptr;
  decltype(&epilogue_avx512) epilogue = nullptr;
  // The CUDA-core products of QKᵀ and P·V.
  CudaCoreKernels cuda_core = CudaCoreKernels::kNone;
  // The exp stage and P's cast by rows through numerics/' array kernels (the active set's): off
  // in the scalar set, whose stages are the references alone.
  bool array_rows = false;
  // Which entries are this set's own, by name, for `attnsim info`.
  std::vector<const char*> own;
};

// The set of an instruction set, or null when this build has none for it.
const StageKernels* stage_kernels_for(Isa isa);
// The active set (stage_kernels_for(active_isa())).
const StageKernels& stage_kernels();

}  // namespace attnsim
