// Bit-exact models of tensor-core matrix instructions (see mma.hpp and numerics/README.md).
#include "numerics/mma.hpp"

#include <array>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "formats/float16.hpp"
#include "formats/float8.hpp"
#include "formats/intn.hpp"

namespace attnsim {

namespace {

// H100 parameters (tensor-core-numerics.md section 6.1, confirmed by data/hw/h100/mma_h100.h5).
constexpr BlockFmaParams kHopperHmmaF32{16, 2, 23, false, -133, false};
constexpr BlockFmaParams kHopperHmmaF16{16, 2, 10, true, -21, true};
constexpr BlockFmaParams kHopperQgmmaF32{32, -10, 13, false, -133, false};
// FP8 wgmma with an fp16 accumulator (QGMMA.64xNx32.F16, data/hw/h100/mma_h100_f16acc.h5): the
// FP22 block of kHopperQgmmaF32 (32 products + C, 13-bit window, truncated terms) with the sum
// rounded to nearest even into fp16 instead of truncated to 13 bits. 0 of 565,760 recorded outputs
// missed; RZ, blocks of 16 or 8, windows of 11, 12, 14, 15 or 25 bits each miss hundreds to
// thousands (tests/hw/mma_h100_test.cpp). The floor is only bounded: every floor at or below 2^-19
// gives the same bits for every FP8 input (the smallest product, 2^-32, fits 13 bits below it),
// 2^-18 and above miss designed subnormal outputs; -21 is HMMA's fp16-accumulator floor.
constexpr BlockFmaParams kHopperQgmmaF16{32, -10, 10, true, -21, true};
// UNVERIFIED sm_89 (Ada) QMMA m16n8k32, from public information only (tensor-core-numerics.md):
// FP32 output: two chained 16-product blocks in natural k order (k 0-15 with C, then k 16-31),
// 13-bit window, RZ to 13 bits (FP22), floor as Ada HMMA (-132): Khattak & Mikaitis' AdaTC/L40STC
// parameters, which the note re-checked against their published Ada/L40S FP8 outputs (C = 0).
// FP16 output: the note's own fit to those authors' Ada fp8->f16 files (5,000/5,000): the same
// blocks and window, each block RNE to fp16 (the D of block 1 the fp16 C of block 2); the floor is
// an assumption (-20, as Ada's fp16->f16 HMMA; it only matters when every term is below 2^-20).
constexpr BlockFmaParams kAdaQmmaF32{16, -10, 13, false, -132, false};
constexpr BlockFmaParams kAdaQmmaF16{16, -10, 10, true, -20, true};

FloatParts decode_bits(MmaIn in, std::uint32_t bits) {
  switch (in) {
    case MmaIn::kFp16:
      return decompose<fp16>(std::uint16_t(bits));
    case MmaIn::kBf16:
      return decompose<bf16>(std::uint16_t(bits));
    case MmaIn::kE4m3:
      return decompose<e4m3fn>(std::uint8_t(bits));
    case MmaIn::kE5m2:
      return decompose<e5m2>(std::uint8_t(bits));
    default:
      break;
  }
  throw std::logic_error("decode_bits: integer format");
}

// Every encoding of a <= 16-bit input format decoded once (the block FMA decodes each operand of
// every product; a table lookup instead of the bit-level decode is what keeps the model fast).
const std::vector<FloatParts>& decode_table(MmaIn in) {
  auto build = [](MmaIn f, std::uint32_t n) {
    std::vector<FloatParts> t(n);
    for (std::uint32_t b = 0; b < n; ++b) t[b] = decode_bits(f, b);
    return t;
  };
  static const std::vector<FloatParts> fp16_t = build(MmaIn::kFp16, 1u << 16);
  static const std::vector<FloatParts> bf16_t = build(MmaIn::kBf16, 1u << 16);
  static const std::vector<FloatParts> e4m3_t = build(MmaIn::kE4m3, 1u << 8);
  static const std::vector<FloatParts> e5m2_t = build(MmaIn::kE5m2, 1u << 8);
  switch (in) {
    case MmaIn::kFp16:
      return fp16_t;
    case MmaIn::kBf16:
      return bf16_t;
    case MmaIn::kE4m3:
      return e4m3_t;
    case MmaIn::kE5m2:
      return e5m2_t;
    default:
      break;
  }
  throw std::logic_error("decode_table: integer format");
}

int man_bits(MmaIn in) {
  switch (in) {
    case MmaIn::kFp16:
      return 10;
    case MmaIn::kBf16:
      return 7;
    case MmaIn::kE4m3:
      return 3;
    case MmaIn::kE5m2:
      return 2;
    default:
      return 0;
  }
}

struct Term {
  bool neg;
  std::uint64_t sig;  // 23 fraction bits
  int e;              // exponent of the sig's unit bit (not renormalised)
};

constexpr Policy kExact{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};

// Exponent given to zero products: far below any floor, so they never set the alignment.
constexpr int kZeroExp = -20000;

// The accumulator bits of ±q · 2^(e − out_man), where q has at most out_man + 2 bits (a rounding
// carry) and e >= the format's emin; q < 2^out_man only at e = emin (a subnormal result).
std::uint32_t pack_block_result(bool neg, int e, std::uint64_t q, const BlockFmaParams& p) {
  const int fbits = p.acc_fp16 ? 10 : 23, bias = p.acc_fp16 ? 15 : 127;
  const std::uint32_t sign = neg ? (p.acc_fp16 ? 0x8000u : 0x80000000u) : 0u;
  if (q >> (p.out_man + 1)) {  // RNE carried into a new bit: exact halving
    q >>= 1;
    ++e;
  }
  if (e > bias) return sign | (p.acc_fp16 ? 0x7C00u : 0x7F800000u);
  const std::uint64_t unit = std::uint64_t{1} << p.out_man;
  if (q < unit) return sign | std::uint32_t(q << (fbits - p.out_man));  // subnormal
  return sign | (std::uint32_t(e + bias) << fbits) |
         std::uint32_t((q - unit) << (fbits - p.out_man));
}

// Normalises and rounds an exact block sum acc · 2^lsb into the accumulator format (shared by the
// general and the fast path).
std::uint32_t round_block(std::int64_t acc, int lsb, const BlockFmaParams& p) {
  if (acc == 0) return 0;
  const bool neg = acc < 0;
  std::uint64_t mag = neg ? std::uint64_t(-acc) : std::uint64_t(acc);
  const int emin = p.acc_fp16 ? -14 : -126;
  const int bitlen = 64 - countl_zero64(mag);
  int e = lsb + bitlen - 1;
  if (e < emin) e = emin;
  const int drop = (e - p.out_man) - lsb;
  std::uint64_t q;
  if (drop > 0) {
    q = drop >= 64 ? 0 : (mag >> drop);
    const std::uint64_t r = drop >= 64 ? mag : (mag & ((std::uint64_t{1} << drop) - 1));
    const std::uint64_t half = drop - 1 >= 64 ? 0 : (std::uint64_t{1} << (drop - 1));
    if (p.out_rne && drop <= 64 && (r > half || (r == half && (q & 1)))) ++q;
  } else {
    q = mag << (-drop);
  }
  // A non-zero sum that rounds to zero (below the FP32 subnormal grid, or below half the fp16
  // one) is +0 whatever its sign: the H100 never writes -0 (data/hw/h100/mma_h100_special.h5,
  // designed cases -2^-150, -2^-153, -2^-26 and the like: model 0x80000000 / 0x8000 missed 13).
  if (q == 0) return 0;
  // q * 2^(e - out_man) is exactly representable in the accumulator format, or overflows to Inf
  // (the model's overflow rule; IEEE RZ would give max finite). Packed directly (this runs once per
  // block; the recordings cover normal, subnormal, carry and overflow results of every format).
  return pack_block_result(neg, e, q, p);
}

// C as a block term: significand with 23 fraction bits (fp16 C: shifted up by 13), the exponent
// of its unit bit (kZeroExp for a zero), its sign. False for Inf/NaN.
inline __attribute__((always_inline)) bool c_term(std::uint32_t c, bool acc_fp16,
                                                  std::uint64_t* sig, int* e, bool* neg) {
  if (acc_fp16) {
    const std::uint32_t ef = (c >> 10) & 0x1F, m = c & 0x3FF;
    if (ef == 0x1F) return false;
    *neg = (c & 0x8000u) != 0;
    *sig = std::uint64_t(ef ? (m | 0x400u) : m) << 13;
    *e = ef ? int(ef) - 15 : -14;
  } else {
    const std::uint32_t ef = (c >> 23) & 0xFF, m = c & 0x7FFFFF;
    if (ef == 0xFF) return false;
    *neg = (c & 0x80000000u) != 0;
    *sig = ef ? (m | 0x800000u) : m;
    *e = ef ? int(ef) - 127 : -126;
  }
  if (*sig == 0) *e = kZeroExp;
  return true;
}

// block_fma when no operand and no C is Inf or NaN (nearly always): the same arithmetic in two
// branch-free passes over the products (alignment exponent, then truncated aligned sum). Returns
// false, computing nothing, when a special value is present; block_fma then takes the general
// path. Tested against every H100 recording (tests/hw/mma_h100_test.cpp) and against the general
// path (block_fma_ref) on random and adversarial blocks (tests/numerics/mma_test.cpp).
// kN > 0: the block size as a compile-time constant, so the loops unroll; kN = 0: n at run time.
// lp: the left shift that gives a product 23 + neab fraction bits
// (23 - 2·mantissa bits + neab >= 0).
// The per-product pass of a block in plain 32-bit integer arithmetic (no tables, no structs), so
// that the compiler vectorises it: for each k the exact significand product shifted to 23 + neab
// fraction bits (pm), the exponent of its unit bit (pe; kZeroExp for a zero product, which then
// neither votes for the alignment nor adds anything), the sign as a 0 / -1 mask (sg). Returns the
// largest exponent in *mx and whether an operand is Inf or NaN. The same decode as decompose()
// (formats/exmy.hpp): normal = (m | hidden) · 2^(e − bias − man), subnormal = m · 2^(1 − bias −
// man); the specials are e = all ones (fp16, bf16, e5m2) and S.1111.111 (e4m3fn, NaN only).
template <MmaIn kIn, int kN>
inline __attribute__((always_inline)) bool block_products(const std::uint32_t* a,
                                                          const std::uint32_t* b, int n_rt, int lp,
                                                          std::int32_t* pe, std::uint32_t* pm,
                                                          std::int32_t* sg, int* mx_out) {
  const int n = kN > 0 ? kN : n_rt;
  constexpr int kMan = kIn == MmaIn::kFp16   ? 10
                       : kIn == MmaIn::kBf16 ? 7
                       : kIn == MmaIn::kE4m3 ? 3
                                             : 2;
  constexpr int kBits = (kIn == MmaIn::kFp16 || kIn == MmaIn::kBf16) ? 16 : 8;
  constexpr int kExpBits = kBits - 1 - kMan;
  constexpr std::uint32_t kEmax = (1u << kExpBits) - 1, kManMask = (1u << kMan) - 1;
  constexpr int kBias = int(kEmax >> 1);
  std::int32_t mx = kZeroExp;
  std::uint32_t special = 0;
  for (int i = 0; i < n; ++i) {
    const std::uint32_t x = a[i], y = b[i];
    const std::uint32_t ex = (x >> kMan) & kEmax, ey = (y >> kMan) & kEmax;
    const std::uint32_t sx = (x & kManMask) | (std::uint32_t(ex != 0) << kMan);
    const std::uint32_t sy = (y & kManMask) | (std::uint32_t(ey != 0) << kMan);
    if constexpr (kIn == MmaIn::kE4m3) {
      special |= std::uint32_t((x & 0x7Fu) == 0x7Fu) | std::uint32_t((y & 0x7Fu) == 0x7Fu);
    } else {
      special |= std::uint32_t(ex == kEmax) | std::uint32_t(ey == kEmax);
    }
    const std::uint32_t sig = sx * sy;
    const std::int32_t e = std::int32_t(ex + (ex == 0)) + std::int32_t(ey + (ey == 0)) - 2 * kBias;
    const std::int32_t ez = sig == 0 ? std::int32_t(kZeroExp) : e;
    pe[i] = ez;
    pm[i] = sig << lp;
    sg[i] = -std::int32_t(((x ^ y) >> (kBits - 1)) & 1u);
    mx = ez > mx ? ez : mx;
  }
  *mx_out = mx;
  return special != 0;
}

template <int kN, MmaIn kIn>
inline __attribute__((always_inline)) bool block_fma_finite(int lp, const std::uint32_t* a,
                                                            const std::uint32_t* b, int n_rt,
                                                            std::uint32_t c,
                                                            const BlockFmaParams& p,
                                                            std::uint32_t* out) {
  const int n = kN > 0 ? kN : n_rt;
  std::uint64_t csig;
  int ce;
  bool cneg;
  if (!c_term(c, p.acc_fp16, &csig, &ce, &cneg)) return false;
  // Products as 32-bit magnitudes with 23 + neab fraction bits (below 2^28 for every input
  // format: an fp16 significand product is < 2^22, shifted by 23 - 20 + 2), their sign as a
  // 0 / -1 mask, and their exponent; 32-bit lanes let the shift-and-sum pass vectorise 8 wide.
  std::int32_t pe[64];
  std::uint32_t pm[64];
  std::int32_t sg[64];
  int pmax;
  if (block_products<kIn, kN>(a, b, n, lp, pe, pm, sg, &pmax)) return false;
  int max_e = p.min_exp > ce ? p.min_exp : ce;
  max_e = pmax > max_e ? pmax : max_e;
  std::int64_t acc = 0;
  for (int i = 0; i < n; ++i) {
    int sh = max_e - pe[i];
    sh = sh > 31 ? 31 : sh;  // shifts >= 28 leave 0; 31 keeps the shift defined
    const std::int32_t v = std::int32_t(pm[i] >> sh);  // magnitude truncation, no sticky bit
    acc += (v ^ sg[i]) - sg[i];
  }
  {
    // C: the general path shifts by neab first (truncating for neab < 0), then by the alignment;
    // two floors of a magnitude by powers of two are one floor by their product.
    const int sh = max_e - ce - p.neab;
    std::uint64_t v;
    if (sh <= 0) {
      v = csig << -sh;
    } else {
      v = sh >= 63 ? 0 : (csig >> sh);
    }
    acc += cneg ? -std::int64_t(v) : std::int64_t(v);
  }
  *out = round_block(acc, max_e - 23 - p.neab, p);
  return true;
}

std::uint32_t block_fma_general(MmaIn in, const std::uint32_t* a, const std::uint32_t* b, int n,
                                std::uint32_t c, const BlockFmaParams& p);

// One k-step chain of single-block instructions (HMMA, HGMMA, QGMMA: one block of kN products per
// instruction, D of one the C of the next). The chain is serial through C, so the work that does
// not depend on C is done first for a batch of blocks: decode, products, the largest product
// exponent pmax, and each product's magnitude aligned to pmax (truncated). Then per block, in
// order: the alignment exponent max_e = max(floor, C's exponent, pmax), one uniform shift of the
// pre-aligned magnitudes by max_e − pmax (two truncating shifts of a magnitude equal one), C, and
// the rounding. The same arithmetic as block_fma_general (tests/numerics/mma_test.cpp compares
// them; tests/hw/mma_h100_test.cpp compares with the H100). A block with an Inf or NaN operand
// goes through block_fma_general. Two code paths chosen at load time (GCC function
// multi-versioning): with AVX2 the compiler vectorises the product and shift passes; both are the
// same integer arithmetic, so results are identical.
template <int kN, MmaIn kIn>
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(ATTNSIM_NO_TARGET_CLONES)
__attribute__((target_clones("avx2", "default")))
#endif
std::uint32_t
chain_blocks(const std::uint32_t* a, const std::uint32_t* b, int K, std::uint32_t c,
             const BlockFmaParams& p) {
  const int lp = 23 - 2 * man_bits(kIn) + p.neab;
  if (lp < 0) {  // no configuration has this; kept for completeness
    for (int k0 = 0; k0 < K; k0 += kN) c = block_fma_general(kIn, a + k0, b + k0, kN, c, p);
    return c;
  }
  constexpr int kBatch = 8;
  std::uint32_t w[kBatch][kN];  // product magnitudes aligned to their block's pmax
  std::int32_t sg[kBatch][kN];  // 0 or -1
  int pmax[kBatch];
  bool special[kBatch];
  for (int k0 = 0; k0 < K; k0 += kBatch * kN) {
    const int nb = (K - k0) / kN < kBatch ? (K - k0) / kN : kBatch;
    for (int j = 0; j < nb; ++j) {
      const std::uint32_t* aj = a + k0 + j * kN;
      const std::uint32_t* bj = b + k0 + j * kN;
      std::int32_t pe[kN];
      std::uint32_t pm[kN];
      int mx;
      const bool sp = block_products<kIn, kN>(aj, bj, kN, lp, pe, pm, sg[j], &mx);
      for (int i = 0; i < kN; ++i) {
        int sh = mx - pe[i];
        sh = sh > 31 ? 31 : sh;  // shifts >= 28 leave 0; 31 keeps the shift defined
        w[j][i] = pm[i] >> sh;
      }
      pmax[j] = mx;
      special[j] = sp;
    }
    for (int j = 0; j < nb; ++j) {
      std::uint64_t csig;
      int ce;
      bool cneg;
      if (special[j] || !c_term(c, p.acc_fp16, &csig, &ce, &cneg)) {
        c = block_fma_general(kIn, a + k0 + j * kN, b + k0 + j * kN, kN, c, p);
        continue;
      }
      int max_e = p.min_exp > ce ? p.min_exp : ce;
      max_e = pmax[j] > max_e ? pmax[j] : max_e;
      int d = max_e - pmax[j];  // >= 0; a block of zero products has pmax = kZeroExp: d huge
      d = d > 31 ? 31 : d;
      // Each aligned product magnitude is below 2^27 (fp16/bf16: 22/16-bit significand products
      // shifted left by 5/11) or 2^15 (fp8), so a block's sum fits in 32 bits when kN · bound
      // < 2^31 (every configuration here): 32-bit lanes vectorise twice as wide.
      constexpr bool kNarrow =
          (kIn == MmaIn::kE4m3 || kIn == MmaIn::kE5m2) ? kN <= 65536 : kN <= 16;
      using Sum = std::conditional_t<kNarrow, std::int32_t, std::int64_t>;
      Sum part = 0;
      for (int i = 0; i < kN; ++i) {
        const std::int32_t v = std::int32_t(w[j][i] >> d);  // magnitude truncation, no sticky bit
        part += Sum((v ^ sg[j][i]) - sg[j][i]);
      }
      std::int64_t acc = part;
      // C: the general path shifts by neab first (truncating for neab < 0), then by the alignment;
      // two floors of a magnitude by powers of two are one floor by their product.
      const int sh = max_e - ce - p.neab;
      const std::uint64_t v = sh <= 0 ? (csig << -sh) : (sh >= 63 ? 0 : (csig >> sh));
      acc += cneg ? -std::int64_t(v) : std::int64_t(v);
      c = round_block(acc, max_e - 23 - p.neab, p);
    }
  }
  return c;
}

// chain_blocks with the input format chosen at run time.
template <int kN>
std::uint32_t chain_blocks_rt(MmaIn in, const std::uint32_t* a, const std::uint32_t* b, int K,
                              std::uint32_t c, const BlockFmaParams& p) {
  switch (in) {
    case MmaIn::kFp16:
      return chain_blocks<kN, MmaIn::kFp16>(a, b, K, c, p);
    case MmaIn::kBf16:
      return chain_blocks<kN, MmaIn::kBf16>(a, b, K, c, p);
    case MmaIn::kE4m3:
      return chain_blocks<kN, MmaIn::kE4m3>(a, b, K, c, p);
    case MmaIn::kE5m2:
      return chain_blocks<kN, MmaIn::kE5m2>(a, b, K, c, p);
    default:
      break;
  }
  throw std::logic_error("block_fma: integer format");
}

template <MmaIn kIn>
bool block_fma_finite_rt(const std::uint32_t* a, const std::uint32_t* b, int n, std::uint32_t c,
                         const BlockFmaParams& p, std::uint32_t* out) {
  const int lp = 23 - 2 * man_bits(kIn) + p.neab;
  return lp >= 0 && n <= 64 && block_fma_finite<0, kIn>(lp, a, b, n, c, p, out);
}

}  // namespace

std::uint32_t block_fma(MmaIn in, const std::uint32_t* a, const std::uint32_t* b, int n,
                        std::uint32_t c, const BlockFmaParams& p) {
  if (n == 16 || n == 32)
    return n == 16 ? chain_blocks_rt<16>(in, a, b, 16, c, p)
                   : chain_blocks_rt<32>(in, a, b, 32, c, p);
  std::uint32_t r;
  bool done = false;
  switch (in) {
    case MmaIn::kFp16:
      done = block_fma_finite_rt<MmaIn::kFp16>(a, b, n, c, p, &r);
      break;
    case MmaIn::kBf16:
      done = block_fma_finite_rt<MmaIn::kBf16>(a, b, n, c, p, &r);
      break;
    case MmaIn::kE4m3:
      done = block_fma_finite_rt<MmaIn::kE4m3>(a, b, n, c, p, &r);
      break;
    case MmaIn::kE5m2:
      done = block_fma_finite_rt<MmaIn::kE5m2>(a, b, n, c, p, &r);
      break;
    default:
      break;
  }
  return done ? r : block_fma_general(in, a, b, n, c, p);
}

std::uint32_t block_fma_ref(MmaIn in, const std::uint32_t* a, const std::uint32_t* b, int n,
                            std::uint32_t c, const BlockFmaParams& p) {
  return block_fma_general(in, a, b, n, c, p);
}

namespace {

// The block FMA for any operands (specials included): the reference formulation the fast path
// reproduces.
std::uint32_t block_fma_general(MmaIn in, const std::uint32_t* a, const std::uint32_t* b, int n,
                                std::uint32_t c, const BlockFmaParams& p) {
  const std::uint32_t nan_bits = p.acc_fp16 ? 0x7FFFu : 0x7FFFFFFFu;
  Term terms[65];
  int nt = 0;
  bool pos_inf = false, neg_inf = false, nan = false;
  const int M = man_bits(in);
  const std::vector<FloatParts>& dec = decode_table(in);
  const std::uint32_t mask = std::uint32_t(dec.size() - 1);
  for (int i = 0; i < n; ++i) {
    const FloatParts& x = dec[a[i] & mask];
    const FloatParts& y = dec[b[i] & mask];
    if (x.kind == FloatParts::kNaN || y.kind == FloatParts::kNaN) {
      nan = true;
      continue;
    }
    const bool xi = x.kind == FloatParts::kInf, yi = y.kind == FloatParts::kInf;
    if (xi || yi) {
      if (x.kind == FloatParts::kZero || y.kind == FloatParts::kZero) {
        nan = true;  // Inf * 0
      } else if (x.neg != y.neg) {
        neg_inf = true;
      } else {
        pos_inf = true;
      }
      continue;
    }
    // Zero products take no part in the alignment (they do not vote for the max exponent).
    if (x.kind == FloatParts::kZero || y.kind == FloatParts::kZero) continue;
    // value = (sx * sy) * 2^(ex + ey); renamed to 23 fraction bits with unit exponent
    // (ex + M) + (ey + M): the product is exact and is not renormalised.
    terms[nt++] = {x.neg != y.neg, (x.sig * y.sig) << (23 - 2 * M), x.exp + M + y.exp + M};
  }
  // C joins the block as one more term, with its own exponent.
  const FloatParts cp = p.acc_fp16 ? decompose<fp16>(std::uint16_t(c)) : decompose<fp32>(c);
  if (cp.kind == FloatParts::kNaN) nan = true;
  if (cp.kind == FloatParts::kInf) (cp.neg ? neg_inf : pos_inf) = true;
  if (cp.kind == FloatParts::kFinite) {
    const int cm = p.acc_fp16 ? 10 : 23;
    terms[nt++] = {cp.neg, cp.sig << (23 - cm), cp.exp + cm};
  }
  if (nan || (pos_inf && neg_inf)) return nan_bits;
  if (pos_inf || neg_inf) {
    if (p.acc_fp16) return neg_inf ? 0xFC00u : 0x7C00u;
    return neg_inf ? 0xFF800000u : 0x7F800000u;
  }
  // Every zero result is +0: no products and C = -0, all products -0 with C = -0, exact
  // cancellation (recorded: tags signed_zero and special_designed of mma_h100_special.h5).
  if (nt == 0) return 0;
  int max_e = p.min_exp;
  for (int i = 0; i < nt; ++i) max_e = terms[i].e > max_e ? terms[i].e : max_e;
  std::int64_t acc = 0;
  for (int i = 0; i < nt; ++i) {
    std::uint64_t v = p.neab >= 0 ? (terms[i].sig << p.neab) : (terms[i].sig >> -p.neab);
    const int sh = max_e - terms[i].e;
    v = sh >= 63 ? 0 : (v >> sh);  // magnitude truncation, no sticky bit
    acc += terms[i].neg ? -std::int64_t(v) : std::int64_t(v);
  }
  return round_block(acc, max_e - 23 - p.neab, p);  // block value = acc * 2^(max_e - 23 - neab)
}

}  // namespace

const std::vector<MmaInstrInfo>& mma_instructions() {
  static const std::vector<MmaInstrInfo> k{
      {MmaInstr::kHmmaF16F32, "sm90.hmma.f16.f32", 16, 8, 16, MmaIn::kFp16, 16, 0,
       "block FMA: 16 products + C per k16, window 23+2 bits, truncated terms, FP32 RZ",
       "H100 recordings data/hw/h100/mma_h100.h5 (designed + random, K=16 and chained K=128) and "
       "mma_h100_special.h5 (NaN/Inf/overflow/signed-zero/subnormal operands)"},
      {MmaInstr::kHmmaBf16F32, "sm90.hmma.bf16.f32", 16, 8, 16, MmaIn::kBf16, 16, 0,
       "as sm90.hmma.f16.f32 with bf16 inputs", "H100 recordings (K=16, K=128)"},
      {MmaInstr::kHmmaF16F16, "sm90.hmma.f16.f16", 16, 8, 16, MmaIn::kFp16, 16, 1,
       "block FMA: 16 products + fp16 C, window 23+2 bits, FP16 RNE, alignment floor 2^-21",
       "H100 recordings (K=16, K=128)"},
      {MmaInstr::kMmaSyncE4m3F32, "sm90.mma_sync.e4m3.f32", 16, 8, 32, MmaIn::kE4m3, 8, 0,
       "ptxas emulation: P1 = HMMA(k in {4t,4t+1,16+4t,16+4t+1}, C=0); P2 = HMMA(other 16 k, "
       "C=P1); "
       "D = fadd.rn(C, P2)",
       "SASS F2FP.F16.E4M3.UNPACK_B + 2x HMMA.16816.F32 + FADD "
       "(data/hw/h100/mma_probe_sass.txt.gz); "
       "H100 recordings"},
      {MmaInstr::kMmaSyncE5m2F32, "sm90.mma_sync.e5m2.f32", 16, 8, 32, MmaIn::kE5m2, 8, 0,
       "as sm90.mma_sync.e4m3.f32 with e5m2 inputs",
       "SASS F2FP.F16.E5M2.UNPACK_B + 2x HMMA + FADD; H100 recordings"},
      {MmaInstr::kWgmmaE4m3F32, "sm90.wgmma.e4m3.f32", 64, 8, 32, MmaIn::kE4m3, 8, 0,
       "block FMA: 32 products + C, window 13 bits (FP22), truncated terms, result RZ to 13 bits",
       "SASS QGMMA.64x8x32.F32.E4M3.E4M3; H100 recordings"},
      {MmaInstr::kWgmmaE5m2F32, "sm90.wgmma.e5m2.f32", 64, 8, 32, MmaIn::kE5m2, 8, 0,
       "as sm90.wgmma.e4m3.f32 with e5m2 inputs",
       "SASS QGMMA.64x8x32.F32.E5M2.E5M2; H100 recordings"},
      {MmaInstr::kWgmmaE4m3F16, "sm90.wgmma.e4m3.f16", 64, 8, 32, MmaIn::kE4m3, 8, 1,
       "block FMA: 32 products + fp16 C, window 13 bits, truncated terms, FP16 RNE, floor 2^-21 "
       "(any <= 2^-19 "
       "is equivalent for FP8)",
       "SASS QGMMA.64x8x32.F16.E4M3.E4M3; H100 recordings data/hw/h100/mma_h100_f16acc.h5 "
       "(small-integer layout "
       "check, designed window/tie/overflow/subnormal/block-membership probes, random K=32/256, "
       "special operands); "
       "RZ, 16- or 8-product blocks, 11/12/14/15/25-bit windows disagree"},
      {MmaInstr::kWgmmaE5m2F16, "sm90.wgmma.e5m2.f16", 64, 8, 32, MmaIn::kE5m2, 8, 1,
       "as sm90.wgmma.e4m3.f16 with e5m2 inputs (floor 2^-18 and above disagree)",
       "SASS QGMMA.64x8x32.F16.E5M2.E5M2; H100 recordings"},
      {MmaInstr::kWgmmaF16F32, "sm90.wgmma.f16.f32", 64, 8, 16, MmaIn::kFp16, 16, 0,
       "block FMA: 16 products + C per k16, window 23+2 bits, truncated terms, FP32 RZ (as HMMA)",
       "SASS HGMMA.64x8x16.F32; H100 recordings data/hw/h100/mma_h100_special.h5 (small-integer "
       "layout "
       "check, designed F1-F12, block-membership and window probes, random K=16/128, special "
       "operands)"},
      {MmaInstr::kWgmmaBf16F32, "sm90.wgmma.bf16.f32", 64, 8, 16, MmaIn::kBf16, 16, 0,
       "as sm90.wgmma.f16.f32 with bf16 inputs", "SASS HGMMA.64x8x16.F32.BF16; H100 recordings"},
      {MmaInstr::kImmaS8, "sm90.imma.s8.s32", 16, 8, 32, MmaIn::kS8, 8, 2,
       "exact integer dot product plus C, wrapping modulo 2^32",
       "SASS IMMA.16832.S8.S8; H100 recordings"},
      {MmaInstr::kImmaS8Sat, "sm90.imma.s8.s32.satfinite", 16, 8, 32, MmaIn::kS8, 8, 2,
       "exact integer dot product plus C, clamped to [INT32_MIN, INT32_MAX]",
       "SASS IMMA.16832.S8.S8.SAT; H100 recordings"},
      {MmaInstr::kImmaS4, "sm90.imma.s4.s32", 16, 8, 64, MmaIn::kS4, 4, 2,
       "ptxas emulation: s4 widened to s8, two IMMA.16832 from zero, integer adds: exact, wrapping",
       "SASS 2x IMMA.16832.S8.S8 ... RZ in the helper routine; H100 recordings"},
      {MmaInstr::kWgmmaS8, "sm90.wgmma.s8.s32", 64, 8, 32, MmaIn::kS8, 8, 2,
       "exact integer dot product of 32 s8 pairs plus C, wrapping modulo 2^32 (as IMMA)",
       "SASS IGMMA.64x8x32.S8.S8; H100 recordings data/hw/h100/mma_h100_igmma.h5 (small-integer "
       "layout check, "
       "designed int32-limit and partial-sum-order patterns, random, all-extreme operands; K=32 "
       "and chained K=256)"},
      {MmaInstr::kWgmmaS8Sat, "sm90.wgmma.s8.s32.satfinite", 64, 8, 32, MmaIn::kS8, 8, 2,
       "exact integer dot product plus C, clamped once per instruction to [INT32_MIN, INT32_MAX] "
       "(no clamp of "
       "partial sums; a chain clamps after every instruction)",
       "SASS IGMMA.64x8x32.S8.S8.SAT; H100 recordings (wrapping, clamping per product or only at "
       "the chain's end "
       "each miss hundreds)"},
      {MmaInstr::kWgmmaU8, "sm90.wgmma.u8.s32", 64, 8, 32, MmaIn::kU8, 8, 2,
       "exact integer dot product of 32 u8 pairs plus C, wrapping modulo 2^32",
       "SASS IGMMA.64x8x32.U8.U8; H100 recordings"},
      {MmaInstr::kWgmmaS8U8, "sm90.wgmma.s8.u8.s32", 64, 8, 32, MmaIn::kS8, 8, 2,
       "exact integer dot product, A s8 and B u8, plus C, wrapping modulo 2^32",
       "SASS IGMMA.64x8x32.S8.U8; H100 recordings", false, true},
      {MmaInstr::kWgmmaU8S8, "sm90.wgmma.u8.s8.s32", 64, 8, 32, MmaIn::kU8, 8, 2,
       "exact integer dot product, A u8 and B s8, plus C, wrapping modulo 2^32",
       "SASS IGMMA.64x8x32.U8.S8; H100 recordings", false, true},
      {MmaInstr::kSm89MmaSyncE4m3F16, "sm89.mma_sync.e4m3.f16", 16, 8, 32, MmaIn::kE4m3, 8, 1,
       "UNVERIFIED: two 16-product blocks in natural k order (k0-15 + fp16 C, then k16-31), window "
       "13 "
       "bits, truncated terms, each block RNE to fp16, floor 2^-20 (assumed)",
       "UNVERIFIED, public information only (no Ada GPU): fit of the research note "
       "(tensor-core-numerics.md "
       "5.3) to Khattak & Mikaitis' published Ada fp8->f16 outputs; special operands assumed as on "
       "sm_90",
       true},
      {MmaInstr::kSm89MmaSyncE5m2F16, "sm89.mma_sync.e5m2.f16", 16, 8, 32, MmaIn::kE5m2, 8, 1,
       "UNVERIFIED: as sm89.mma_sync.e4m3.f16 with e5m2 inputs",
       "UNVERIFIED, public information only (as sm89.mma_sync.e4m3.f16)", true},
      {MmaInstr::kSm89MmaSyncE4m3F32, "sm89.mma_sync.e4m3.f32", 16, 8, 32, MmaIn::kE4m3, 8, 0,
       "UNVERIFIED: two 16-product blocks in natural k order (C in the first), window 13 bits, "
       "truncated "
       "terms, RZ to 13 bits (FP22), floor 2^-132",
       "UNVERIFIED, public information only (no Ada GPU): Khattak & Mikaitis AdaTC/L40STC "
       "parameters, "
       "re-checked by the research note on their published Ada/L40S outputs (C = 0)",
       true},
      {MmaInstr::kSm89MmaSyncE5m2F32, "sm89.mma_sync.e5m2.f32", 16, 8, 32, MmaIn::kE5m2, 8, 0,
       "UNVERIFIED: as sm89.mma_sync.e4m3.f32 with e5m2 inputs",
       "UNVERIFIED, public information only (as sm89.mma_sync.e4m3.f32)", true},
  };
  return k;
}

std::optional<MmaInstr> parse_mma_instr(const std::string& name) {
  for (const auto& i : mma_instructions()) {
    if (name == i.name) return i.instr;
  }
  return std::nullopt;
}

const MmaInstrInfo& mma_info(MmaInstr instr) {
  for (const auto& i : mma_instructions()) {
    if (i.instr == instr) return i;
  }
  throw std::logic_error("mma_info: unknown instruction");
}

namespace {

std::uint32_t fadd_rn(std::uint32_t x, std::uint32_t y) {
  // FADD on the CUDA cores: IEEE binary32 addition, round to nearest even, subnormals kept.
  // The host's FP32 addition is exactly that (no -ffast-math, SSE arithmetic, no FTZ/DAZ).
  const std::uint32_t r = f32_bits(f32_from_bits(x) + f32_from_bits(y));
  if ((r & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFFFFFFu;  // canonical NaN, as the GPU writes it
  return r;
}

std::int64_t int_value(MmaIn in, std::uint32_t bits) {
  if (in == MmaIn::kS8) return std::int8_t(std::uint8_t(bits));
  if (in == MmaIn::kU8) return std::uint8_t(bits);
  return int_from_bits<s4>(std::uint8_t(bits));
}

}  // namespace

MmaIn mma_in_b(const MmaInstrInfo& info) {
  if (!info.mixed) return info.in;
  return info.in == MmaIn::kS8 ? MmaIn::kU8 : MmaIn::kS8;
}

std::uint32_t mma_dot(MmaInstr instr, const std::uint32_t* a, const std::uint32_t* b, int K,
                      std::uint32_t c) {
  const MmaInstrInfo& info = mma_info(instr);
  if (K % info.k != 0) throw std::invalid_argument("K is not a multiple of the instruction's k");
  switch (instr) {  // one block per instruction: the whole chain in one call
    case MmaInstr::kHmmaF16F32:
    case MmaInstr::kWgmmaF16F32:
      return chain_blocks<16, MmaIn::kFp16>(a, b, K, c, kHopperHmmaF32);
    case MmaInstr::kHmmaBf16F32:
    case MmaInstr::kWgmmaBf16F32:
      return chain_blocks<16, MmaIn::kBf16>(a, b, K, c, kHopperHmmaF32);
    case MmaInstr::kHmmaF16F16:
      return chain_blocks<16, MmaIn::kFp16>(a, b, K, c, kHopperHmmaF16);
    case MmaInstr::kWgmmaE4m3F32:
      return chain_blocks<32, MmaIn::kE4m3>(a, b, K, c, kHopperQgmmaF32);
    case MmaInstr::kWgmmaE5m2F32:
      return chain_blocks<32, MmaIn::kE5m2>(a, b, K, c, kHopperQgmmaF32);
    case MmaInstr::kWgmmaE4m3F16:
      return chain_blocks<32, MmaIn::kE4m3>(a, b, K, c, kHopperQgmmaF16);
    case MmaInstr::kWgmmaE5m2F16:
      return chain_blocks<32, MmaIn::kE5m2>(a, b, K, c, kHopperQgmmaF16);
    default:
      break;
  }
  for (int k0 = 0; k0 < K; k0 += info.k) {
    const std::uint32_t* ak = a + k0;
    const std::uint32_t* bk = b + k0;
    switch (instr) {
      case MmaInstr::kHmmaF16F32:
      case MmaInstr::kWgmmaF16F32:
        c = block_fma(MmaIn::kFp16, ak, bk, 16, c, kHopperHmmaF32);
        break;
      case MmaInstr::kHmmaBf16F32:
      case MmaInstr::kWgmmaBf16F32:
        c = block_fma(MmaIn::kBf16, ak, bk, 16, c, kHopperHmmaF32);
        break;
      case MmaInstr::kHmmaF16F16:
        c = block_fma(MmaIn::kFp16, ak, bk, 16, c, kHopperHmmaF16);
        break;
      case MmaInstr::kMmaSyncE4m3F32:
      case MmaInstr::kMmaSyncE5m2F32: {
        // sm_90 has no FP8 mma.sync: ptxas widens each byte pair of the A/B registers to f16x2
        // (F2FP.F16.E4M3.UNPACK_B; exact) and runs two HMMA.16816.F32. The first takes bytes 0-1
        // of every register, i.e. k = 4t, 4t+1 and 16+4t, 16+4t+1 for t = 0..3, from a zero
        // accumulator; the second takes bytes 2-3 and accumulates onto the first; a separate
        // FADD then adds the instruction's C (recorded SASS, data/hw/h100/mma_probe_sass.txt.gz).
        const MmaIn in = instr == MmaInstr::kMmaSyncE4m3F32 ? MmaIn::kE4m3 : MmaIn::kE5m2;
        std::uint32_t al[16], bl[16], ah[16], bh[16];
        int nl = 0, nh = 0;
        // Widen exactly to fp16 first: an e4m3 subnormal is an fp16 normal, and the block FMA
        // aligns on the (unnormalised) operand exponents, so the fp16 encoding is what counts.
        static const auto widen_table = [](MmaIn f) {
          std::array<std::uint16_t, 256> t{};
          for (std::uint32_t x = 0; x < 256; ++x) {
            t[x] = f == MmaIn::kE4m3 ? convert<fp16, e4m3fn>(std::uint8_t(x), kExact)
                                     : convert<fp16, e5m2>(std::uint8_t(x), kExact);
          }
          return t;
        };
        static const std::array<std::uint16_t, 256> w4 = widen_table(MmaIn::kE4m3),
                                                    w5 = widen_table(MmaIn::kE5m2);
        const std::array<std::uint16_t, 256>& wt = in == MmaIn::kE4m3 ? w4 : w5;
        auto widen = [&wt](std::uint32_t x) -> std::uint32_t { return wt[x & 0xFFu]; };
        for (int k = 0; k < 32; ++k) {
          if ((k & 3) < 2) {
            al[nl] = widen(ak[k]);
            bl[nl++] = widen(bk[k]);
          } else {
            ah[nh] = widen(ak[k]);
            bh[nh++] = widen(bk[k]);
          }
        }
        const std::uint32_t p1 = block_fma(MmaIn::kFp16, al, bl, 16, 0u, kHopperHmmaF32);
        const std::uint32_t p2 = block_fma(MmaIn::kFp16, ah, bh, 16, p1, kHopperHmmaF32);
        c = fadd_rn(c, p2);
        break;
      }
      case MmaInstr::kWgmmaE4m3F32:
        c = block_fma(MmaIn::kE4m3, ak, bk, 32, c, kHopperQgmmaF32);
        break;
      case MmaInstr::kWgmmaE5m2F32:
        c = block_fma(MmaIn::kE5m2, ak, bk, 32, c, kHopperQgmmaF32);
        break;
      case MmaInstr::kWgmmaE4m3F16:
      case MmaInstr::kWgmmaE5m2F16:
        c = block_fma(info.in, ak, bk, 32, c, kHopperQgmmaF16);
        break;
      case MmaInstr::kSm89MmaSyncE4m3F16:
      case MmaInstr::kSm89MmaSyncE5m2F16:
      case MmaInstr::kSm89MmaSyncE4m3F32:
      case MmaInstr::kSm89MmaSyncE5m2F32: {
        // UNVERIFIED (see kAdaQmmaF32/F16): natural k halves, the first with the instruction's C.
        const BlockFmaParams& prm = info.acc == 1 ? kAdaQmmaF16 : kAdaQmmaF32;
        c = block_fma(info.in, ak, bk, 16, c, prm);
        c = block_fma(info.in, ak + 16, bk + 16, 16, c, prm);
        break;
      }
      case MmaInstr::kImmaS8:
      case MmaInstr::kImmaS4:
      case MmaInstr::kImmaS8Sat:
      case MmaInstr::kWgmmaS8:
      case MmaInstr::kWgmmaS8Sat:
      case MmaInstr::kWgmmaU8:
      case MmaInstr::kWgmmaS8U8:
      case MmaInstr::kWgmmaU8S8: {
        // IMMA and IGMMA alike (data/hw/h100/mma_h100.h5, mma_h100_igmma.h5): the exact sum of
        // the instruction's products plus C, then wrapped, or for .satfinite clamped once; the
        // IGMMA recordings rule out clamping partial sums inside an instruction (C at INT32_MAX
        // with +127·b before -127·b in k order keeps INT32_MAX) and clamping only at a chain's end.
        const MmaIn in_b = mma_in_b(info);
        std::int64_t s = 0;
        for (int k = 0; k < info.k; ++k) s += int_value(info.in, ak[k]) * int_value(in_b, bk[k]);
        if (instr == MmaInstr::kImmaS8Sat || instr == MmaInstr::kWgmmaS8Sat) {
          s += std::int64_t(std::int32_t(c));
          s = s > INT32_MAX ? INT32_MAX : (s < INT32_MIN ? INT32_MIN : s);
          c = std::uint32_t(std::int32_t(s));
        } else {
          c = std::uint32_t(std::uint64_t(s) + c);  // wraps modulo 2^32
        }
        break;
      }
    }
  }
  return c;
}

std::uint32_t mma_dot_promoted(MmaInstr instr, const std::uint32_t* a, const std::uint32_t* b,
                               int K, std::uint32_t c_f32, int every) {
  const MmaInstrInfo& info = mma_info(instr);
  if (info.acc == 2)
    throw std::invalid_argument("promotion applies to floating-point accumulators only");
  if (every <= 0 || every % info.k != 0) {
    throw std::invalid_argument(
        "the promotion interval is not a positive multiple of the instruction's k");
  }
  if (K % every != 0) throw std::invalid_argument("K is not a multiple of the promotion interval");
  std::uint32_t acc = c_f32;
  for (int k0 = 0; k0 < K; k0 += every) {
    std::uint32_t part = mma_dot(instr, a + k0, b + k0, every, 0u);  // +0 in fp32 and in fp16
    if (info.acc == 1) part = convert<fp32, fp16>(std::uint16_t(part), kExact);  // exact widening
    acc = fadd_rn(acc, part);
  }
  return acc;
}

std::uint32_t mma_element(const std::uint8_t* row, int bits, int j) {
  if (bits == 16) return std::uint32_t(row[2 * j]) | (std::uint32_t(row[2 * j + 1]) << 8);
  if (bits == 8) return row[j];
  return (row[j / 2] >> (4 * (j & 1))) & 0xFu;
}

void mma_gemm(MmaInstr instr, int M, int N, int K, const std::uint8_t* A, const std::uint8_t* Bt,
              const std::uint32_t* C, std::uint32_t* D, int promote_every) {
  const MmaInstrInfo& info = mma_info(instr);
  const std::size_t row_bytes = std::size_t(K) * info.in_bits / 8;
  std::vector<std::uint32_t> a(static_cast<std::size_t>(K), 0u), b(static_cast<std::size_t>(K), 0u);
  for (int m = 0; m < M; ++m) {
    for (int j = 0; j < K; ++j) a[j] = mma_element(A + m * row_bytes, info.in_bits, j);
    for (int n = 0; n < N; ++n) {
      for (int j = 0; j < K; ++j) b[j] = mma_element(Bt + n * row_bytes, info.in_bits, j);
      const std::uint32_t c = C[std::size_t(m) * N + n];
      D[std::size_t(m) * N + n] =
          promote_every > 0 ? mma_dot_promoted(instr, a.data(), b.data(), K, c, promote_every)
                            : mma_dot(instr, a.data(), b.data(), K, c);
    }
  }
}

}  // namespace attnsim
