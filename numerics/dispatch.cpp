// The array kernels' tables (dispatch.hpp): one per instruction set this build has, each built
// from the one below it with its own kernels put in.
#include "numerics/dispatch.hpp"

#include <array>
#include <cstring>
#include <utility>

#include "numerics/convert_array.hpp"
#include "numerics/digest_array.hpp"
#include "numerics/kernels_x86.hpp"
#include "numerics/model_math_kernels.hpp"
#include "numerics/special_array.hpp"

namespace attnsim {

namespace {

// The references (the overloads' addresses need their types).
ArrayKernels scalar_set() {
  ArrayKernels k;
  k.isa = Isa::kScalar;
  k.encode_u32 = static_cast<decltype(k.encode_u32)>(&encode_array_ref);
  k.encode_u16 = static_cast<decltype(k.encode_u16)>(&encode_array_ref);
  k.encode_u8 = static_cast<decltype(k.encode_u8)>(&encode_array_ref);
  k.decode_u16 = static_cast<decltype(k.decode_u16)>(&decode_array_ref);
  k.decode_u8 = static_cast<decltype(k.decode_u8)>(&decode_array_ref);
  k.round = &round_array_ref;
  k.round_to_int = &round_to_int_array_ref;
  k.ex2_approx_ftz = &ex2_approx_ftz_array_ref;
  k.ex2_approx = &ex2_approx_array_ref;
  k.rcp_approx_ftz = &rcp_approx_ftz_array_ref;
  k.rcp_approx = &rcp_approx_array_ref;
  k.exp_exact = &exp_exact_array_ref;
  k.digest_sum = &digest_sum_ref;
  k.linear_f32 = &linear_f32_ref;
  k.quantize_values = &quantize_values_ref;
  k.own = {"the references"};
  return k;
}

#if ATTNSIM_X86_KERNELS
ArrayKernels avx2_set(const ArrayKernels& below) {
  using namespace kernels_x86;
  ArrayKernels k = below;
  k.isa = Isa::kAvx2;
  k.encode_u32 = &encode_u32_avx2;
  k.encode_u16 = &encode_u16_avx2;
  k.encode_u8 = &encode_u8_avx2;
  k.round = &round_avx2;
  k.round_to_int = &round_to_int_avx2;
  k.ex2_approx_ftz = &ex2_approx_ftz_avx2;
  k.ex2_approx = &ex2_approx_avx2;
  k.rcp_approx_ftz = &rcp_approx_ftz_avx2;
  k.rcp_approx = &rcp_approx_avx2;
  k.exp_exact = &exp_exact_avx2;
  k.linear_f32 = &linear_f32_avx2;
  k.quantize_values = &quantize_values_blocked;
  k.float_tile = "block_fma.avx2";
  k.pack_a = &mma_tile_detail::pack_a_avx2;
  k.pack_b = &mma_tile_detail::pack_b_avx2;
  k.tile = &mma_tile_detail::float_tile_avx2;
  k.int_wrap = k.int_sat = "int16.avx2";
  return k;
}

ArrayKernels avx512_set(const ArrayKernels& below) {
  using namespace kernels_x86;
  ArrayKernels k = below;
  k.isa = Isa::kAvx512;
  k.encode_u32 = &encode_u32_avx512;
  k.encode_u16 = &encode_u16_avx512;
  k.encode_u8 = &encode_u8_avx512;
  k.decode_u16 = &decode_u16_avx512;
  k.decode_u8 = &decode_u8_avx512;
  k.round = &round_avx512;
  k.round_to_int = &round_to_int_avx512;
  k.ex2_approx_ftz = &ex2_approx_ftz_avx512;
  k.ex2_approx = &ex2_approx_avx512;
  k.rcp_approx_ftz = &rcp_approx_ftz_avx512;
  k.rcp_approx = &rcp_approx_avx512;
  k.exp_exact = &exp_exact_avx512;
  k.digest_sum = &digest_sum_avx512;
  k.linear_f32 = &linear_f32_avx512;
  k.float_tile = "block_fma.avx512";
  k.pack_a = &mma_tile_detail::pack_a_avx512;
  k.pack_b = &mma_tile_detail::pack_b_avx512;
  k.tile = &mma_tile_detail::float_tile_avx512;
  // VNNI where the CPU has it (an AVX-512 CPU without it keeps AVX2's 16-bit products).
  if (cpu_has_feature("avx512vnni")) k.int_wrap = k.int_sat = "int8.vnni";
  return k;
}

// AMX adds tile products only (numerics/mma_tile.cpp): the other kernels are AVX-512's.
ArrayKernels amx_set(const ArrayKernels& below) {
  ArrayKernels k = below;
  k.isa = Isa::kAmx;
  // The tile instructions have every sign variant of the wrapping products; .satfinite needs each
  // instruction's own sum (VNNI's kernel, which every AMX CPU has).
  k.int_wrap = "int8.amx";
  return k;
}
#endif

#if ATTNSIM_NEON_KERNELS
// linear_f32's NEON kernel (model_math_neon.cpp, which runs under the neon level).
void linear_f32_neon_entry(const double* x, std::size_t rows, std::size_t ldx,
                           const PackedLinear& w, std::size_t p0, std::size_t p1, float* y,
                           std::size_t ldy) {
  if (!model_math_detail::linear_f32_neon(x, rows, ldx, w, p0, p1, y, ldy))
    linear_f32_ref(x, rows, ldx, w, p0, p1, y, ldy);
}

ArrayKernels neon_set(const ArrayKernels& below) {
  ArrayKernels k = below;
  k.isa = Isa::kNeon;
  k.linear_f32 = &linear_f32_neon_entry;
  return k;
}
#endif

// The kernels a set has of its own: the entries that differ from the set's below it.
std::vector<const char*> own_entries(const ArrayKernels& k, const ArrayKernels& b) {
  auto differs = [](const char* x, const char* y) {
    return (x == nullptr) != (y == nullptr) || (x && std::strcmp(x, y) != 0);
  };
  return own_kernel_names({
      {"encode", k.encode_u32 != b.encode_u32 || k.encode_u16 != b.encode_u16 ||
                     k.encode_u8 != b.encode_u8},
      {"decode", k.decode_u16 != b.decode_u16 || k.decode_u8 != b.decode_u8},
      {"round", k.round != b.round},
      {"round_to_int", k.round_to_int != b.round_to_int},
      {"ex2.approx", k.ex2_approx_ftz != b.ex2_approx_ftz || k.ex2_approx != b.ex2_approx},
      {"rcp.approx", k.rcp_approx_ftz != b.rcp_approx_ftz || k.rcp_approx != b.rcp_approx},
      {"exp.exact", k.exp_exact != b.exp_exact},
      {"digest", k.digest_sum != b.digest_sum},
      {"linear_f32", k.linear_f32 != b.linear_f32},
      {"quantize", k.quantize_values != b.quantize_values},
      {"block_fma", differs(k.float_tile, b.float_tile)},
      {"int_mma", differs(k.int_wrap, b.int_wrap) || differs(k.int_sat, b.int_sat)}});
}

const LevelTables<ArrayKernels>& tables() {
  static const LevelTables<ArrayKernels> t = [] {
    LevelTables<ArrayKernels> r;
    // Each set from the one below it, its own kernels listed from the difference.
    auto from = [&](Isa i, Isa below, ArrayKernels (*make)(const ArrayKernels&)) {
      const ArrayKernels& b = r.set[std::size_t(below)];
      ArrayKernels& k = r.at(i);
      k = make(b);
      k.own = own_entries(k, b);
    };
    r.at(Isa::kScalar) = scalar_set();
#if ATTNSIM_NEON_KERNELS
    from(Isa::kNeon, Isa::kScalar, neon_set);
#endif
#if ATTNSIM_X86_KERNELS
    from(Isa::kAvx2, Isa::kScalar, avx2_set);
    from(Isa::kAvx512, Isa::kAvx2, avx512_set);
    from(Isa::kAmx, Isa::kAvx512, amx_set);
#endif
    return r;
  }();
  return t;
}

}  // namespace

const ArrayKernels* array_kernels_for(Isa isa) { return tables().find(isa); }

const ArrayKernels& array_kernels() { return tables().active(); }

}  // namespace attnsim
