// The dispatch table of numerics/' array kernels (simdjson's `implementation`, NumPy's dispatch):
// one ArrayKernels per instruction set, each entry that set's kernel or, where it has none, the
// entry of the set below it; the scalar set holds the `_ref` references, which every other set is
// tested against bit for bit. The public functions (convert_array.hpp, special_array.hpp,
// digest_array.hpp, model_math.hpp) call the active set's entry: the set numerics/isa.hpp's level
// names (the CPU's best, capped by ATTNSIM_ISA or --isa), read at each call so that a cap set at
// run time (tests, `attnsim --isa`) takes effect at once. Adding an instruction set is one table
// (dispatch.cpp) and its kernels. sim/pipeline/stages/kernels.hpp is the same for the stage
// kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "formats/encoding.hpp"
#include "formats/policy.hpp"
#include "numerics/isa.hpp"
#include "numerics/mma_tile_kernels.hpp"
#include "numerics/model_math.hpp"
#include "numerics/quantize.hpp"
#include "numerics/special.hpp"

namespace attnsim {

struct ArrayKernels {
  Isa isa = Isa::kScalar;
  // convert_array.hpp
  void (*encode_u32)(Encoding, const float*, std::size_t, std::uint32_t*, Policy) = nullptr;
  void (*encode_u16)(Encoding, const float*, std::size_t, std::uint16_t*, Policy) = nullptr;
  void (*encode_u8)(Encoding, const float*, std::size_t, std::uint8_t*, Policy) = nullptr;
  void (*decode_u16)(Encoding, const std::uint16_t*, std::size_t, float*) = nullptr;
  void (*decode_u8)(Encoding, const std::uint8_t*, std::size_t, float*) = nullptr;
  void (*round)(Encoding, const float*, std::size_t, float*, Policy) = nullptr;
  void (*round_to_int)(const float*, std::size_t, std::int32_t*, Round, int) = nullptr;
  // special_array.hpp
  void (*ex2_approx_ftz)(const float*, std::size_t, float*, const Ex2ApproxFtz&) = nullptr;
  void (*ex2_approx)(const float*, std::size_t, float*, const Ex2ApproxFtz&) = nullptr;
  void (*rcp_approx_ftz)(const float*, std::size_t, float*, const RcpApproxFtz&) = nullptr;
  void (*rcp_approx)(const float*, std::size_t, float*, const RcpApproxFtz&) = nullptr;
  void (*exp_exact)(const float*, std::size_t, float*, bool) = nullptr;
  // digest_array.hpp
  std::uint64_t (*digest_sum)(std::uint32_t, const std::uint32_t*, std::size_t) = nullptr;
  // model_math.hpp
  void (*linear_f32)(const double*, std::size_t, std::size_t, const PackedLinear&, std::size_t,
                     std::size_t, float*, std::size_t) = nullptr;
  // quantize.hpp
  void (*quantize_values)(const float*, std::size_t, float, float, const SymmetricQuantizer&,
                          std::int32_t*) = nullptr;
  // mma_tile.cpp: the block-FMA tile kernel (its name, its packings and the tile; a null name:
  // the reference) and the integer tile kernels of the wrapping and the .satfinite models
  // ("int8.amx", "int8.vnni", "int16.avx2"; null: the reference).
  const char* float_tile = nullptr;
  void (*pack_a)(const mma_tile_detail::PackSpec&, const MmaTile&, float*, std::uint32_t*) = nullptr;
  void (*pack_b)(const mma_tile_detail::PackSpec&, const MmaTile&, int, float*,
                 std::int16_t*) = nullptr;
  void (*tile)(const mma_tile_detail::FloatTilePlan&) = nullptr;
  const char* int_wrap = nullptr;
  const char* int_sat = nullptr;
  // Which entries are this set's own (not inherited), by name, for `attnsim info`.
  std::vector<const char*> own;
};

// The blocked quantizer the vector sets take (quantize.cpp).
void quantize_values_blocked(const float* x, std::size_t n, float scale, float inv,
                             const SymmetricQuantizer& qz, std::int32_t* q);

// The set of an instruction set (its entries filled from the sets below it), or null when this
// build has none for it (another architecture's).
const ArrayKernels* array_kernels_for(Isa isa);
// The active set (array_kernels_for(active_isa())).
const ArrayKernels& array_kernels();

}  // namespace attnsim
