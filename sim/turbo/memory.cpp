// KV-cache memory accounting (memory.hpp): bits per token and whole caches for TurboAttention,
// KIVI and FP16 (spec §5).
#include "sim/turbo/memory.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace attnsim {

namespace {

void check_turbo(const TurboMemoryFormat& f) {
  if (f.block < 1 || f.sz_bits < 0 || f.scale_bits < 0 || f.buffer_bits < 0)
    throw std::invalid_argument("turbo memory: block must be >= 1 and every width >= 0");
}

void check_dims(int dim_k, int dim_v) {
  if (dim_k < 1 || dim_v < 1) throw std::invalid_argument("memory: head dims must be >= 1");
}

void check_kivi(const KiviMemoryFormat& f, int dim_v) {
  if (f.bits < 1 || f.bits > 8) throw std::invalid_argument("kivi memory: bits must be in 1..8");
  if (f.group < 1 || f.residual < 1 || f.residual % f.group != 0)
    throw std::invalid_argument(
        "kivi memory: group and residual must be >= 1 with residual a multiple of group");
  // V's groups run along its channels (new_pack.py asserts the length is a multiple of g).
  if (dim_v % f.group != 0)
    throw std::invalid_argument("kivi memory: head_dim_v (" + std::to_string(dim_v) +
                                ") must be a multiple of the group (" + std::to_string(f.group) +
                                ")");
}

void check_bits(int b) {
  if (b != 4 && b != 2) throw std::invalid_argument("turbo memory: head bits must be 4 or 2");
}

}  // namespace

double turbo_bits_per_token(int dim, int bits, const TurboMemoryFormat& f) {
  check_turbo(f);
  // Codes (Eq. 10: b bits per element), s^int and z^int per (block, channel) (Alg. 1 lines
  // 13-14, M:133), and the block's stage-1 scale (Alg. 2 reads s_{K_j}, s_{V_j}), each shared by
  // the block's tokens.
  return double(dim) * bits + double(dim) * 2.0 * f.sz_bits / f.block +
         double(f.scale_bits) / f.block;
}

double turbo_bits_per_token(int dim_k, int dim_v, int bits_k, int bits_v,
                            const TurboMemoryFormat& f) {
  return turbo_bits_per_token(dim_k, bits_k, f) + turbo_bits_per_token(dim_v, bits_v, f);
}

double turbo_bits_per_token(int dim_k, int dim_v, const HeadBits& bits,
                            const TurboMemoryFormat& f) {
  if (bits.k.empty() || bits.k.size() != bits.v.size())
    throw std::invalid_argument("turbo memory: HeadBits needs one K and one V width per head");
  double sum = 0;
  for (std::size_t h = 0; h < bits.k.size(); ++h) {
    check_bits(bits.k[h]);
    check_bits(bits.v[h]);
    sum += turbo_bits_per_token(dim_k, dim_v, bits.k[h], bits.v[h], f);
  }
  return sum / double(bits.k.size());
}

double turbo_mixed_bits_per_token(int dim_k, int dim_v, double frac_2bit,
                                  const TurboMemoryFormat& f) {
  if (!(frac_2bit >= 0.0 && frac_2bit <= 1.0))
    throw std::invalid_argument("turbo memory: the 2-bit fraction must be in [0, 1]");
  // Both widths share the metadata, so the mixture only moves the codes.
  return frac_2bit * turbo_bits_per_token(dim_k, dim_v, 2, 2, f) +
         (1.0 - frac_2bit) * turbo_bits_per_token(dim_k, dim_v, 4, 4, f);
}

double kivi_bits_per_token(int dim_k, int dim_v, const KiviMemoryFormat& f) {
  check_dims(dim_k, dim_v);
  check_kivi(f, dim_v);
  // K: a scale and a minimum per (channel, g tokens); V: per (token, g channels) (new_pack.py
  // triton_quantize_and_pack_along_last_dim on Kᵀ and on V; both returned in the cache's FP16).
  const double k = double(dim_k) * f.bits + double(dim_k) * 2.0 * f.scale_bits / f.group;
  const double v = double(dim_v) * f.bits + double(dim_v / f.group) * 2.0 * f.scale_bits;
  return k + v;
}

double fp16_bits_per_token(int dim_k, int dim_v) {
  check_dims(dim_k, dim_v);
  return 16.0 * (dim_k + dim_v);
}

CacheMemory turbo_cache_memory(int tokens, int dim_k, int dim_v, const HeadBits& bits,
                               const TurboMemoryFormat& f) {
  check_turbo(f);
  check_dims(dim_k, dim_v);
  if (tokens < 0) throw std::invalid_argument("turbo memory: tokens must be >= 0");
  if (bits.k.empty() || bits.k.size() != bits.v.size())
    throw std::invalid_argument("turbo memory: HeadBits needs one K and one V width per head");
  const double blocks = double(tokens / f.block);
  const double compressed = blocks * f.block;
  const double buffered = double(tokens) - compressed;
  CacheMemory m;
  for (std::size_t h = 0; h < bits.k.size(); ++h) {
    check_bits(bits.k[h]);
    check_bits(bits.v[h]);
    m.codes += compressed * (double(dim_k) * bits.k[h] + double(dim_v) * bits.v[h]);
    m.metadata += blocks * (double(dim_k + dim_v) * 2.0 * f.sz_bits + 2.0 * f.scale_bits);
    // The buffer (§3.3): the INT8 tokens of the open block and one universal scale each for K
    // and V, which the buffer keeps whether or not it holds tokens.
    m.residual += buffered * double(dim_k + dim_v) * f.buffer_bits + 2.0 * f.scale_bits;
  }
  m.fp16 = double(bits.k.size()) * double(tokens) * fp16_bits_per_token(dim_k, dim_v);
  return m;
}

CacheMemory turbo_cache_memory(int tokens, int heads_kv, int dim_k, int dim_v, int bits,
                               const TurboMemoryFormat& f) {
  if (heads_kv < 1) throw std::invalid_argument("turbo memory: heads_kv must be >= 1");
  check_bits(bits);
  const HeadBits hb{std::vector<int>(std::size_t(heads_kv), bits),
                    std::vector<int>(std::size_t(heads_kv), bits)};
  return turbo_cache_memory(tokens, dim_k, dim_v, hb, f);
}

CacheMemory kivi_cache_memory(int tokens, int heads_kv, int dim_k, int dim_v,
                              const KiviMemoryFormat& f) {
  check_dims(dim_k, dim_v);
  check_kivi(f, dim_v);
  if (tokens < 0 || heads_kv < 1)
    throw std::invalid_argument("kivi memory: tokens must be >= 0 and heads_kv >= 1");
  const int R = f.residual;
  int k_full, v_full;
  if (f.residual_count == KiviResidualCount::kAfterStep) {
    // llama_kivi.py: prefill keeps K's last T mod R tokens and V's last R; each decode step
    // appends, then quantizes K's tail once it holds R tokens and V's oldest once it holds R + 1.
    k_full = tokens % R;
    v_full = std::min(tokens, R);
  } else {
    k_full = v_full = std::min(tokens, R);
  }
  const double k_q = double(tokens - k_full), v_q = double(tokens - v_full);
  CacheMemory m;
  m.codes = heads_kv * (k_q * dim_k + v_q * dim_v) * f.bits;
  // K's quantized tokens form whole g-token groups with kAfterStep (a multiple of R); kWindow may
  // cut one, priced per token.
  m.metadata = heads_kv * (k_q * dim_k * 2.0 * f.scale_bits / f.group +
                           v_q * double(dim_v / f.group) * 2.0 * f.scale_bits);
  m.residual = heads_kv * 16.0 * (double(k_full) * dim_k + double(v_full) * dim_v);
  m.fp16 = double(heads_kv) * double(tokens) * fp16_bits_per_token(dim_k, dim_v);
  return m;
}

}  // namespace attnsim
