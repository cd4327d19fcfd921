// The instruction models of numerics/mma.hpp over a tile of outputs (a block of rows × a block of
// output columns × the reduction): the form the attention stages call, with a fast kernel
// (vectorised across output columns, never across the reduction) behind the signature of the
// per-output reference.
#pragma once

#include <cstddef>
#include <cstdint>

#include "numerics/dot.hpp"

namespace attnsim {

// One tile: D(i, j) = dot_mma(model, A row i, B column j, n, C(i, j)) for i < rows, j < cols.
// Operands are encodings as dot_mma takes them (one uint32 per element; n a multiple of
// dot_requirements(model).k_step, zero-padded by the caller). B is addressed through two
// strides, so the stages pass their buffers as they hold them: K's rows for QKᵀ (b_k = 1,
// b_n = the row length), V in its natural [key][channel] layout for P·V (b_k = the row length,
// b_n = 1). C and D are dot_mma's C and result bits (FP32 bits for a floating-point model, int32
// for an integer one); c == nullptr is a zero C; c may equal d (same ld): each output's C is read
// before its D is written.
struct MmaTile {
  int rows = 0, cols = 0, n = 0;
  const std::uint32_t* a = nullptr;  // A(i, k) = a[i·lda + k]
  std::ptrdiff_t lda = 0;
  const std::uint32_t* b = nullptr;  // B(k, j) = b[k·b_k + j·b_n]
  std::ptrdiff_t b_k = 0, b_n = 0;
  const std::uint32_t* c = nullptr;  // C(i, j) = c[i·ldc + j]
  std::ptrdiff_t ldc = 0;
  std::uint32_t* d = nullptr;  // D(i, j) = d[i·ldd + j]
  std::ptrdiff_t ldd = 0;
  // A and/or B as values instead of encodings, with the same addressing: each value exactly
  // representable in the instruction's operand format (as a P cast or a quantizer produced it;
  // integers for the integer instructions), so no caller encodes what the kernel decodes again.
  const float* a_values = nullptr;
  const float* b_values = nullptr;
  // The element each instruction position k reads: k_index[k] (for k < n) in place of k in A's
  // rows and B's columns, −1 for a zero (padding past a block's keys); null: element k. The
  // stages pass SageAttention's in-16 key order and the zero padding this way, without copies.
  const int* k_index = nullptr;
  // Non-zero: names A's contents (operand, rows, layout) for reuse. A call whose a_key, model and
  // shape equal an earlier call's on the same thread reuses the operand as that call prepared it,
  // so the caller promises equal keys only for equal A (qk_mma: Q's rows of one tile, whose key
  // is fresh for every tile: next_mma_tile_key()).
  std::uint64_t a_key = 0;
  // The same for B (with k_index): a call whose b_key, model and shape equal one of the last two
  // keyed calls' on this thread reuses B as that call packed it (the attention stages: one K or V
  // block read by the tiles of a KV group, sim/pipeline/tile.cpp attend_tiles).
  std::uint64_t b_key = 0;
};

// A key no earlier call of this process used.
std::uint64_t next_mma_tile_key();

// The tile by the per-output reference: dot_mma for every (i, j), in row-major order.
void dot_mma_tile_ref(const DotModel& m, const MmaTile& t);

// The same bits (tests/numerics/mma_tile_test.cpp, mma_tile_long_test.cpp), by a kernel chosen
// once per call from the model and the active instruction set (numerics/isa.hpp): the block-FMA
// kernel across output columns (AVX-512: every floating-point model of mma.hpp, promotion
// included), the integer kernels (AMX-INT8 tiles, or AVX512-VNNI), or dot_mma_tile_ref.
void dot_mma_tile(const DotModel& m, const MmaTile& t);

// Which kernel dot_mma_tile takes for a model under the active instruction set: "block_fma.avx512",
// "int8.amx", "int8.vnni" or "ref" (benchmarks and tests print it).
const char* dot_mma_tile_kernel(const DotModel& m);
// Whether that kernel is one of the fast ones (not "ref"): the stages then call dot_mma_tile
// instead of their per-output reference loops.
bool dot_mma_tile_has_kernel(const DotModel& m);

}  // namespace attnsim
