// The inputs on which cuda_check/amla/amla_decode.cu (our CUDA MLA-decode kernels, AMLA and Base)
// was run on the H100: every case is a seed and a recipe, expanded into bf16 Q, K, V by integer
// and exactly rounded IEEE arithmetic only (no libm), so the recorder (nvcc host code) and the CPU
// check (tests/hw/amla_h100_test.cpp) build the same bits on any machine; the recording stores
// the FNV-1a digest of what the kernels read and the check compares it.
//
// Shapes are MLA decode: G query heads share one latent KV head, Q [B][G][576], K [B][S][576],
// V [B][S][512] (independent, or the latent's first 512 channels, V = K[:, :512]).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace attnsim::hwtest {

constexpr int kAmlaDk = 576, kAmlaDv = 512;

// splitmix64 (Steele, Lea, Flood 2014): one 64-bit state, one output per step.
struct SplitMix64 {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

// bf16 bits of a finite float, round to nearest even (the integer form of cvt.rn.bf16.f32).
inline std::uint16_t amla_bf16_rne(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return std::uint16_t(u >> 16);
}
inline float amla_bf16_value(std::uint16_t b) {
  const std::uint32_t u = std::uint32_t(b) << 16;
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// kNormal: Irwin-Hall, the sum of twelve 16-bit uniforms centred (mean 0, variance 1, range ±6),
//          times `scale`: every value is exact in float before the bf16 rounding.
// kUniform: U(-scale, scale) on a 2^24 grid.
enum class AmlaDist : std::uint8_t { kNormal, kUniform };

struct AmlaDistSpec {
  AmlaDist dist = AmlaDist::kNormal;
  double scale = 1.0;
};

// What is done to the random tensors afterwards (the adversarial cases).
//  kPlain     nothing.
//  kJump      K's blocks of 512 keys scaled by 1, 17, 9, 33, 25, ... (so a row's max jumps by
//             tens of powers of two at some blocks and stays at others: N = max(dn, −30) hits the
//             clamp, and dn = 0 blocks leave only the compensation), Q's rows by 1/4, 1/2, 1, 2.
//  kZeroVcol  kJump, and V's columns 0, 1, 255, 511 zero: O's first chunk is +0 there, the integer
//             add turns it into garbage (a huge negative, Inf or NaN pattern) and the |O| <= 1e10
//             guard zeroes it.
//  kTinyVcol  kJump, and V's columns 2..7 scaled by 2^-100, 2^-100, 2^-118, 2^-118, 2^-124, 2^-124:
//             O's exponent field is small, so −30·2^23 wraps it (Lemma 3.1's E + n > 0 broken) or
//             leaves a subnormal pattern that the FP32 add then meets.
enum class AmlaKind : std::uint8_t { kPlain, kJump, kZeroVcol, kTinyVcol };

struct AmlaCase {
  std::string name;
  int batch = 1, g = 128, s = 512;
  std::uint64_t seed = 0;
  AmlaDistSpec q, k, v;
  bool v_from_k = false;  // V = K[:, :512] (MLA's latent), else an independent tensor
  AmlaKind kind = AmlaKind::kPlain;
  bool raw_full = false;  // the recording keeps the raw FP32 O in full (else per-row digests)
};

inline std::vector<AmlaCase> amla_cases() {
  const AmlaDistSpec n1{AmlaDist::kNormal, 1.0}, n5{AmlaDist::kNormal, 5.0};
  const AmlaDistSpec u20{AmlaDist::kUniform, 20.0}, flat{AmlaDist::kNormal, 0.25};
  auto c = [](const char* name, int b, int g, int s, std::uint64_t seed, AmlaDistSpec q,
              AmlaDistSpec k, AmlaDistSpec v, bool v_from_k, AmlaKind kind, bool raw_full) {
    AmlaCase x;
    x.name = name;
    x.batch = b, x.g = g, x.s = s, x.seed = seed;
    x.q = q, x.k = k, x.v = v;
    x.v_from_k = v_from_k;
    x.kind = kind;
    x.raw_full = raw_full;
    return x;
  };
  const AmlaKind P = AmlaKind::kPlain;
  return {
      c("n1_s512", 1, 128, 512, 101, n1, n1, n1, false, P, false),      // one block: no integer add
      c("n1_s1000_vk", 1, 128, 1000, 102, n1, n1, n1, true, P, false),  // ragged last block
      c("n1_s4096", 1, 128, 4096, 103, n1, n1, n1, false, P, false),
      c("n1_s8192_vk", 1, 128, 8192, 104, n1, n1, n1, true, P, false),
      // Scores of a few units: p spread over (0, 1], many p·S16 products near bf16 ties.
      c("flat_s8192", 1, 128, 8192, 105, flat, flat, n1, false, P, false),
      c("n5_s4096", 1, 128, 4096, 106, n5, n5, n5, false, P, false),  // N(0, 25)
      c("u20_s4096", 1, 128, 4096, 107, u20, u20, u20, false, P, false),
      c("g16_u20_s1000", 1, 16, 1000, 108, u20, u20, u20, false, P, true),
      c("g64_n5_s2048_b2", 2, 64, 2048, 109, n5, n5, n5, false, P, false),
      c("jump_g32_s2560", 1, 32, 2560, 110, n1, n1, n1, false, AmlaKind::kJump, true),
      c("zero_vcol_g32_s2048", 1, 32, 2048, 111, n1, n1, n1, false, AmlaKind::kZeroVcol, true),
      c("tiny_vcol_g32_s2048", 1, 32, 2048, 112, n1, n1, n1, false, AmlaKind::kTinyVcol, true),
  };
}

// One value of a distribution, exact in float (then rounded once to bf16).
inline float amla_draw(SplitMix64& r, const AmlaDistSpec& d) {
  if (d.dist == AmlaDist::kNormal) {
    std::int64_t sum = 0;
    for (int i = 0; i < 3; ++i) {
      const std::uint64_t w = r.next();
      for (int k = 0; k < 4; ++k) sum += std::int64_t((w >> (16 * k)) & 0xFFFF);
    }
    // (sum - 12·32767.5) / 65536: at most 21 significant bits, times a scale of at most 3 bits.
    const double z = (double(2 * sum) - 786420.0) / 131072.0;
    return float(z * d.scale);
  }
  const double u = (double(r.next() >> 40) + 0.5) / 16777216.0;  // (0, 1), 25 bits
  return float(u * (2.0 * d.scale) - d.scale);
}

// The bf16 tensors of a case: q [B][G][576], k [B][S][576], v [B][S][512] (filled from k when
// v_from_k).
struct AmlaTensors {
  std::vector<std::uint16_t> q, k, v;
};

inline AmlaTensors amla_case_tensors(const AmlaCase& c) {
  AmlaTensors t;
  const int dk = kAmlaDk, dv = kAmlaDv;
  const bool adversarial = c.kind != AmlaKind::kPlain;
  static const double kBlockScale[8] = {1, 17, 9, 33, 25, 5, 41, 3};
  static const double kRowScale[4] = {0.25, 0.5, 1, 2};
  SplitMix64 rq{c.seed * 3 + 0}, rk{c.seed * 3 + 1}, rv{c.seed * 3 + 2};
  t.q.resize(std::size_t(c.batch) * c.g * dk);
  for (int b = 0; b < c.batch; ++b)
    for (int h = 0; h < c.g; ++h)
      for (int d = 0; d < dk; ++d) {
        float x = amla_draw(rq, c.q);
        if (adversarial) x = float(double(x) * kRowScale[h % 4]);
        t.q[(std::size_t(b) * c.g + h) * dk + d] = amla_bf16_rne(x);
      }
  t.k.resize(std::size_t(c.batch) * c.s * dk);
  for (int b = 0; b < c.batch; ++b)
    for (int j = 0; j < c.s; ++j)
      for (int d = 0; d < dk; ++d) {
        float x = amla_draw(rk, c.k);
        if (adversarial) x = float(double(x) * kBlockScale[(j / 512) % 8]);
        t.k[(std::size_t(b) * c.s + j) * dk + d] = amla_bf16_rne(x);
      }
  t.v.resize(std::size_t(c.batch) * c.s * dv);
  static const double kTiny[6] = {0x1p-100, 0x1p-100, 0x1p-118, 0x1p-118, 0x1p-124, 0x1p-124};
  for (int b = 0; b < c.batch; ++b)
    for (int j = 0; j < c.s; ++j)
      for (int d = 0; d < dv; ++d) {
        const std::size_t i = (std::size_t(b) * c.s + j) * dv + d;
        if (c.v_from_k) {
          t.v[i] = t.k[(std::size_t(b) * c.s + j) * dk + d];
          continue;
        }
        float x = amla_draw(rv, c.v);
        if (c.kind == AmlaKind::kZeroVcol && (d == 0 || d == 1 || d == 255 || d == 511)) x = 0.0f;
        if (c.kind == AmlaKind::kTinyVcol && d >= 2 && d < 8) x = float(double(x) * kTiny[d - 2]);
        t.v[i] = amla_bf16_rne(x);
      }
  return t;
}

// FNV-1a (32-bit) over the little-endian bytes of 16- or 32-bit words.
inline std::uint32_t amla_fnv1a(const std::uint16_t* p, std::size_t n,
                                std::uint32_t h = 0x811C9DC5u) {
  for (std::size_t i = 0; i < n; ++i) {
    h = (h ^ (p[i] & 0xFFu)) * 0x01000193u;
    h = (h ^ (p[i] >> 8)) * 0x01000193u;
  }
  return h;
}
inline std::uint32_t amla_fnv1a(const std::uint32_t* p, std::size_t n,
                                std::uint32_t h = 0x811C9DC5u) {
  for (std::size_t i = 0; i < n; ++i)
    for (int k = 0; k < 4; ++k) h = (h ^ ((p[i] >> (8 * k)) & 0xFFu)) * 0x01000193u;
  return h;
}

// The digest of a case's inputs as the kernels read them (Q, K, then V).
inline std::uint32_t amla_input_digest(const AmlaTensors& t) {
  std::uint32_t h = amla_fnv1a(t.q.data(), t.q.size());
  h = amla_fnv1a(t.k.data(), t.k.size(), h);
  return amla_fnv1a(t.v.data(), t.v.size(), h);
}

// A raw FP32 O value for digests: every NaN as 0x7FFFFFFF (the GPU's canonical NaN; x86 keeps a
// NaN operand's payload), so a digest compares values, not NaN payloads.
inline std::uint32_t amla_canonical_f32(std::uint32_t b) {
  return ((b & 0x7F800000u) == 0x7F800000u && (b & 0x007FFFFFu) != 0) ? 0x7FFFFFFFu : b;
}

}  // namespace attnsim::hwtest
