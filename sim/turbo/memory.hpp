// KV-cache memory of TurboAttention (compressed blocks, head-wise mixed precision, the INT8
// buffer), KIVI (codes, FP16 scale and minimum per group, the FP16 residual) and FP16, in bits:
// the accounting behind the paper's ">4.4×" (abstract) and Table 2's "Bit" column.
#pragma once

#include <cstdint>

#include "sim/turbo/turbo.hpp"

namespace attnsim {

// How a Turbo cache stores what is not a code.
struct TurboMemoryFormat {
  // B_c = n_b: tokens per compressed block and the buffer's capacity (§5.2: "we fix block size
  // B_c, B_r, and n_b to 64").
  int block = 64;
  // s^int and z^int of stage 2, one each per channel per block (§2.3: "s^int and z^int are
  // stored in INT8"; 16 prices them as FP16).
  int sz_bits = 8;
  // The stage-1 scale of each block (K and V one each) and the buffer's universal scales (§2.3:
  // "s_a and s_b are the (FP16) scales"; 32 prices them as FP32).
  int scale_bits = 16;
  // A buffered token's elements (§3.3: "quantized using 8-bit symmetric quantization").
  int buffer_bits = 8;
};

// Bits one token adds to one KV head's K (or V) once its block is compressed at `bits`:
// dim·bits codes + dim·2·sz_bits / block (s^int, z^int) + scale_bits / block (stage-1 scale).
// d=128, b=4, INT8 s/z, FP16 scales: 512 + 32 + 0.25 = 544.25.
double turbo_bits_per_token(int dim, int bits, const TurboMemoryFormat& f = {});
// K and V of one KV head (d=128, 4/4: 1088.5; 2/2: 576.5).
double turbo_bits_per_token(int dim_k, int dim_v, int bits_k, int bits_v,
                            const TurboMemoryFormat& f = {});
// The mean over a layer's KV heads of explicit bit-widths (HeadBits: K and V may differ).
double turbo_bits_per_token(int dim_k, int dim_v, const HeadBits& bits,
                            const TurboMemoryFormat& f = {});
// A fraction `frac_2bit` of the layer's K and V caches at 2 bits, the rest at 4 (d=128, 0.5:
// 832.5 bits, 4.920× FP16: the paper's default n_h = half the heads, §5.2).
double turbo_mixed_bits_per_token(int dim_k, int dim_v, double frac_2bit,
                                  const TurboMemoryFormat& f = {});

// KIVI (jy-yuan/KIVI quant/new_pack.py): b-bit codes; K per channel in groups of `group` tokens,
// V per token in groups of `group` channels, each group with an FP16 scale and minimum
// (`scale_bits` each); the last tokens in FP16 (models/llama_kivi.py's residual).
// Which residual tokens are FP16 after N tokens:
//  kAfterStep  what llama_kivi.py holds between steps: K's tail of N mod R tokens (complete
//              R-token chunks are quantized), V's last min(N, R) tokens.
//  kWindow     min(N, R) FP16 tokens of both K and V (the spec's §5 figures: 3.07× at 1k tokens).
enum class KiviResidualCount : std::uint8_t { kAfterStep, kWindow };
struct KiviMemoryFormat {
  int bits = 4;
  int group = 64;     // g (Table 2: "KIVI_{g = 64, n_b = 64}")
  int residual = 64;  // R, a multiple of g
  int scale_bits = 16;
  KiviResidualCount residual_count = KiviResidualCount::kAfterStep;
};
// Bits one quantized token adds to one KV head, K and V together, excluding the residual
// (d=128, 4 bits, g=64: 1024 + 64 + 64 = 1152, 3.556× FP16).
double kivi_bits_per_token(int dim_k, int dim_v, const KiviMemoryFormat& f = {});

// 16·(dim_k + dim_v).
double fp16_bits_per_token(int dim_k, int dim_v);

// A whole layer's cache of N tokens, all KV heads, in bits.
struct CacheMemory {
  double codes = 0;     // the packed b-bit codes
  double metadata = 0;  // per-group scales, zero points, minima, stage-1 block scales
  // Turbo: the INT8 buffer (N mod block tokens) and the universal scales of K and V per head.
  // KIVI: the FP16 residual tokens.
  double residual = 0;
  double fp16 = 0;  // the same tokens in FP16
  double total() const { return codes + metadata + residual; }
  double ratio() const { return fp16 / total(); }  // compression against FP16
};

// Turbo with per-head bit-widths (bits.k, bits.v: one per KV head). Cache blocks lie on the grid
// of `block` tokens from token 0; the last N mod block tokens are in the buffer (README §buffer).
// Throws std::invalid_argument (one line) on bad sizes or bit-widths.
CacheMemory turbo_cache_memory(int tokens, int dim_k, int dim_v, const HeadBits& bits,
                               const TurboMemoryFormat& f = {});
// Turbo with every head at `bits` (4 or 2).
CacheMemory turbo_cache_memory(int tokens, int heads_kv, int dim_k, int dim_v, int bits,
                               const TurboMemoryFormat& f = {});
// KIVI with its residual (f.residual_count).
CacheMemory kivi_cache_memory(int tokens, int heads_kv, int dim_k, int dim_v,
                              const KiviMemoryFormat& f = {});

}  // namespace attnsim
