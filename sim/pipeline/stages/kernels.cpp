// The stage kernels' tables (kernels.hpp): one per instruction set this build has, each built from
// the one below it with its own kernels put in.
#include "sim/pipeline/stages/kernels.hpp"

#include <array>
#include <utility>
#include <vector>

#include "numerics/simd.hpp"

namespace attnsim {

namespace {

std::vector<const char*> own_entries(const StageKernels& k, const StageKernels& b) {
  return own_kernel_names({
      {"scores", k.scores != b.scores},
      {"softmax_step", k.softmax_step != b.softmax_step},
      {"row_sum", k.row_sum != b.row_sum},
      {"rescale", k.rescale != b.rescale},
      {"add_chunk", k.add_chunk != b.add_chunk},
      {"epilogue", k.epilogue != b.epilogue},
      {"cuda_core", k.cuda_core != b.cuda_core},
      {"exp_rows, p_cast_rows", k.array_rows != b.array_rows}});
}

const LevelTables<StageKernels>& tables() {
  static const LevelTables<StageKernels> t = [] {
    LevelTables<StageKernels> r;
    auto at = [&](Isa i) -> StageKernels& { return r.at(i); };
    StageKernels& scalar = at(Isa::kScalar);
    scalar.isa = Isa::kScalar;
    scalar.own = {"references"};
#if ATTNSIM_NEON_KERNELS
    // NEON: the CUDA-core products (qk_cuda_core_neon.cpp, pv_cuda_core_neon.cpp); the other
    // stages are the references.
    StageKernels& neon = at(Isa::kNeon);
    neon = scalar;
    neon.isa = Isa::kNeon;
    neon.cuda_core = CudaCoreKernels::kNeon;
#endif
#if ATTNSIM_X86_KERNELS
    StageKernels& avx2 = at(Isa::kAvx2);
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
    StageKernels& avx512 = at(Isa::kAvx512);
    avx512 = avx2;
    avx512.isa = Isa::kAvx512;
    avx512.scores = &scores_avx512;
    avx512.softmax_step = &softmax_step_avx512;
    avx512.row_sum = &row_sum_avx512;
    avx512.rescale = &rescale_avx512;
    avx512.add_chunk = &add_chunk_avx512;
    avx512.epilogue = &epilogue_avx512;
    avx512.cuda_core = CudaCoreKernels::kAvx512;
    // AMX adds tile products only (numerics/dispatch.hpp): the stage kernels are AVX-512's.
    StageKernels& amx = at(Isa::kAmx);
    amx = avx512;
    amx.isa = Isa::kAmx;
#endif
    // Each set's own kernels: the entries that differ from the set's below it.
    const std::pair<Isa, Isa> below[] = {
        {Isa::kNeon, Isa::kScalar}, {Isa::kAvx2, Isa::kScalar}, {Isa::kAvx512, Isa::kAvx2},
        {Isa::kAmx, Isa::kAvx512}};
    for (const auto& [i, b] : below)
      if (r.built[std::size_t(i)])
        r.set[std::size_t(i)].own = own_entries(r.set[std::size_t(i)], r.set[std::size_t(b)]);
    return r;
  }();
  return t;
}

}  // namespace

const StageKernels* stage_kernels_for(Isa isa) { return tables().find(isa); }

const StageKernels& stage_kernels() { return tables().active(); }

}  // namespace attnsim
