// The stage kernels' tables (kernels.hpp): one per instruction set this build has, each built from
// the one below it with its own kernels put in.
#include "sim/pipeline/stages/kernels.hpp"

#include <array>

#include "numerics/simd.hpp"

namespace attnsim {

namespace {

struct Tables {
  std::array<StageKernels, 4> set;
  std::array<bool, 4> built{};
};

const Tables& tables() {
  static const Tables t = [] {
    Tables r;
    StageKernels& scalar = r.set[0];
    scalar.isa = Isa::kScalar;
    scalar.own = {"references"};
    r.built[0] = true;
#if ATTNSIM_X86_KERNELS
    StageKernels& avx2 = r.set[1];
    avx2 = scalar;
    avx2.isa = Isa::kAvx2;
    avx2.scores = &scores_avx2;
    avx2.softmax_step = &softmax_step_avx2;
    avx2.row_sum = &row_sum_avx2;
    avx2.rescale = &rescale_avx2;
    avx2.add_chunk = &add_chunk_avx2;
    avx2.epilogue = &epilogue_avx2;
    avx2.cuda_core = CudaCoreKernels::kAvx2;
    avx2.array_rows = true;
    avx2.own = {"scores", "softmax_step", "row_sum", "rescale", "add_chunk", "epilogue",
                "cuda_core", "exp_rows", "p_cast_rows"};
    StageKernels& avx512 = r.set[2];
    avx512 = avx2;
    avx512.isa = Isa::kAvx512;
    avx512.scores = &scores_avx512;
    avx512.softmax_step = &softmax_step_avx512;
    avx512.row_sum = &row_sum_avx512;
    avx512.rescale = &rescale_avx512;
    avx512.add_chunk = &add_chunk_avx512;
    avx512.epilogue = &epilogue_avx512;
    avx512.cuda_core = CudaCoreKernels::kAvx512;
    avx512.own = {"scores", "softmax_step", "row_sum", "rescale", "add_chunk", "epilogue",
                  "cuda_core"};
    // AMX adds tile products only (numerics/dispatch.hpp): the stage kernels are AVX-512's.
    StageKernels& amx = r.set[3];
    amx = avx512;
    amx.isa = Isa::kAmx;
    amx.own.clear();
    r.built[1] = r.built[2] = r.built[3] = true;
#endif
    return r;
  }();
  return t;
}

}  // namespace

const StageKernels* stage_kernels_for(Isa isa) {
  const int i = int(isa);
  if (i < 0 || i >= int(tables().set.size()) || !tables().built[std::size_t(i)]) return nullptr;
  return &tables().set[std::size_t(i)];
}

const StageKernels& stage_kernels() {
  const StageKernels* k = stage_kernels_for(active_isa());
  return k ? *k : tables().set[0];
}

}  // namespace attnsim
