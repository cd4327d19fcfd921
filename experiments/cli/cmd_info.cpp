// `attnsim info`: formats, rounding modes, policies, version and build options.
#include <omp.h>

#include <cstdio>
#include <string>

#include "experiments/cli/commands.hpp"
#include "numerics/dispatch.hpp"
#include "numerics/isa.hpp"
#include "sim/pipeline/stages/kernels.hpp"
#include "experiments/common/build_info.hpp"
#include "experiments/common/git_commit.hpp"
#include "experiments/common/names.hpp"
#include "experiments/sweep/mpi_env.hpp"
#include "formats/float16.hpp"
#include "formats/float8.hpp"
#include "formats/intn.hpp"

namespace attnsim {

namespace {

template <class Fmt>
void print_float_format(const char* name, const char* note) {
  std::printf(
      "  %-7s 1-%d-%-2d bias %-4d max %-13.8g min normal %-13.6g min subnormal %-13.6g %s\n", name,
      Fmt::kExpBits, Fmt::kManBits, Fmt::kBias,
      double(decode_f64<Fmt>(typename Fmt::Storage(Fmt::kMaxFinite))),
      double(decode_f64<Fmt>(typename Fmt::Storage(Fmt::kMinNormal))),
      double(decode_f64<Fmt>(typename Fmt::Storage(Fmt::kMinSubnormal))), note);
}

template <class IntFmt>
void print_int_format(const char* name) {
  std::printf(
      "  %-7s %d-bit two's complement, [%d, %d], %d per byte when packed (element 0 in the low "
      "bits)\n",
      name, IntFmt::kBits, IntFmt::kMin, IntFmt::kMax, IntFmt::kPerByte);
}

}  // namespace

void add_info_command(CLI::App& app) {
  CLI::App* cmd =
      app.add_subcommand("info", "Formats, rounding modes and policies; version and build options");
  cmd->callback([]() {
    std::printf("attnsim %s (commit %s)\n", build::kVersion, build::git_commit());
    std::printf(
        "build: %s, %s, OpenMP %d (max threads %d), MPI %s, cuda_check %s\n", build::kCompiler,
        build::kBuildType, _OPENMP, omp_get_max_threads(), mpi_built() ? "yes" : "no",
        std::string(build::kCudaCompiler).empty() ? "not built (no nvcc)" : build::kCudaCompiler);
    std::printf("fast kernels: instruction set %s (this CPU: %s; --isa or ATTNSIM_ISA caps it; "
                "results do not depend on it)\n",
                isa_name(active_isa()), isa_name(detected_isa()));
    // The dispatch table's sets (numerics/dispatch.hpp, sim/pipeline/stages/kernels.hpp): each
    // built into this binary, whether this CPU runs it, and the kernels it adds to the set below
    // (two ladders share scalar: neon on AArch64; avx2 < avx512 < amx on x86-64).
    std::printf("kernel sets (--isa NAME; each adds these kernels to the set below it, scalar is "
                "the references):\n");
    for (Isa i : {Isa::kScalar, Isa::kNeon, Isa::kAvx2, Isa::kAvx512, Isa::kAmx}) {
      const ArrayKernels* a = array_kernels_for(i);
      const StageKernels* st = stage_kernels_for(i);
      if (!a || !st) continue;
      std::string own;
      for (const char* n : a->own) own += std::string(own.empty() ? "" : ", ") + n;
      if (i != Isa::kScalar)
        for (const char* n : st->own) own += std::string(own.empty() ? "" : ", ") + n;
      std::printf("  %-7s %-19s %s\n", isa_name(i),
                  i == active_isa()   ? "(active)"
                  : isa_supported(i) ? "(this CPU runs it)"
                                     : "(not on this CPU)",
                  own.empty() ? "-" : own.c_str());
    }
    std::printf("\nfloating-point formats:\n");
    print_float_format<e4m3fn>("e4m3fn", "OCP E4M3: no Inf, NaN = S.1111.111");
    print_float_format<e5m2>("e5m2", "OCP E5M2: IEEE Inf/NaN");
    print_float_format<fp16>("fp16", "IEEE binary16");
    print_float_format<bf16>("bf16", "bfloat16");
    print_float_format<fp22>("fp22",
                             "FP8 tensor-core accumulator view (FP32 with 13 mantissa bits)");
    print_float_format<fp32>("fp32", "IEEE binary32");
    std::printf("\ninteger formats (convert --to int8|int4|int2 --scale S):\n");
    print_int_format<s8>("int8");
    print_int_format<s4>("int4");
    print_int_format<s2>("int2");
    std::printf("\nrounding modes (--round): %s\n", join_choices(round_names()).c_str());
    std::printf(
        "  rne nearest, ties to even; rna nearest, ties away from zero; rz toward zero; ru up; "
        "rd down\n");
    std::printf("overflow policies (--overflow): %s\n", join_choices(overflow_names()).c_str());
    std::printf(
        "  saturate: +-max, Inf inputs too (CUDA cvt.rn.satfinite);\n"
        "  saturate-finite: +-max, Inf stays Inf (NaN for e4m3fn; ml_dtypes kSaturate);\n"
        "  nan: NaN (OCP non-saturating, ml_dtypes astype); inf: +-Inf (IEEE).\n"
        "  Directed roundings toward zero give +-max (IEEE 754 7.4).\n");
    std::printf("NaN encodings (--nan-encoding): %s\n", join_choices(nan_encoding_names()).c_str());
    std::printf(
        "  cuda: 0x7F / 0x7FFF, sign dropped;\n"
        "  ml_dtypes: sign kept, quiet NaN (e5m2 0x7E, bf16 0x7FC0);\n"
        "  ieee: sign and payload kept, quiet bit set\n");
  });
}

}  // namespace attnsim
