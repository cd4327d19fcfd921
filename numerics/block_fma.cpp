// The tensor-core block FMA: the reference formulation and the integer fast path (see
// block_fma.hpp and numerics/README.md).
#include "numerics/block_fma.hpp"

#include <array>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "formats/float16.hpp"
#include "formats/float32.hpp"
#include "formats/float8.hpp"

namespace attnsim {

namespace {

// Every encoding of the float input formats of at most 16 bits decomposed once (the reference
// path decodes each operand of every product; a table lookup keeps it reasonably fast).
const std::vector<FloatParts>& decode_table(Encoding in) {
  static const auto tables = [] {
    std::array<std::vector<FloatParts>, kEncodingCount> t;
    for (int e = 0; e < kEncodingCount; ++e) {
      const EncodingTraits f = encoding_traits(Encoding(e));
      if (!f.is_float || f.bits > 16) continue;
      std::vector<FloatParts>& v = t[int(f.enc)];
      v.resize(std::size_t{1} << f.bits);
      for (std::uint32_t b = 0; b < v.size(); ++b) v[b] = decompose_bits(f.enc, b);
    }
    return t;
  }();
  const std::vector<FloatParts>& t = tables[int(in)];
  if (t.empty())
    throw std::invalid_argument("block_fma: input format is not a float of <= 16 bits");
  return t;
}

// The one run-time -> compile-time dispatch of the input format: f(std::type_identity<Fmt>{}).
template <class F>
decltype(auto) with_input_format(Encoding in, F&& f) {
  switch (in) {
    case Encoding::kFp16:
      return f(std::type_identity<fp16>{});
    case Encoding::kBf16:
      return f(std::type_identity<bf16>{});
    case Encoding::kE4m3fn:
      return f(std::type_identity<e4m3fn>{});
    case Encoding::kE5m2:
      return f(std::type_identity<e5m2>{});
    default:
      break;
  }
  throw std::invalid_argument("block_fma: input format is not a float of <= 16 bits");
}

// Exponent given to zero products: far below any floor, so they never set the alignment.
constexpr int kZeroExp = -20000;

// A term's contribution to a block sum whose least significant bit is 2^(max_e − 23 − neab): its
// magnitude sig · 2^(e − 23) (23 fraction bits below the unit bit at 2^e) shifted by neab into the
// window (truncating for neab < 0) and right by the alignment max_e − e (truncating: no sticky
// bit), with its sign. Two floors of a magnitude by powers of two are one floor by their product,
// so this is one shift by max_e − e − neab. The reference path aligns every term with it, the fast
// path C (its products are pre-shifted by lp, block_fma.hpp).
inline __attribute__((always_inline)) std::int64_t aligned_term(std::uint64_t sig, int e, bool neg,
                                                                int max_e, int neab) {
  const int sh = max_e - e - neab;
  const std::uint64_t v = sh <= 0 ? (sig << -sh) : (sh >= 63 ? 0 : (sig >> sh));
  return neg ? -std::int64_t(v) : std::int64_t(v);
}

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
// reference and the fast path).
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

// The block FMA for any operands (specials included) and any parameters: the reference
// formulation the fast path reproduces.
std::uint32_t block_fma_general(Encoding in, const std::uint32_t* a, const std::uint32_t* b, int n,
                                std::uint32_t c, const BlockFmaParams& p) {
  struct Term {
    bool neg;
    std::uint64_t sig;  // 23 fraction bits
    int e;              // exponent of the sig's unit bit (not renormalised)
  };
  const std::uint32_t nan_bits = p.acc_fp16 ? 0x7FFFu : 0x7FFFFFFFu;
  Term terms[65];
  int nt = 0;
  bool pos_inf = false, neg_inf = false, nan = false;
  const int M = encoding_traits(in).man_bits;
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
  for (int i = 0; i < nt; ++i)
    acc += aligned_term(terms[i].sig, terms[i].e, terms[i].neg, max_e, p.neab);
  return round_block(acc, max_e - 23 - p.neab, p);  // block value = acc * 2^(max_e - 23 - neab)
}

// The fast path, for parameters where block_fma_fast_path_fits (block_fma.hpp).
//
// The per-product pass of a block in plain 32-bit integer arithmetic (no tables, no structs), so
// that the compiler vectorises it: for each k the exact significand product shifted left by
// lp = 23 + neab − 2·man to 23 + neab fraction bits (pm), the exponent of its unit bit (pe;
// kZeroExp for a zero product, which then neither votes for the alignment nor adds anything), the
// sign as a 0 / -1 mask (sg). Returns the largest exponent in *mx and whether an operand is Inf or
// NaN. The same decode as decompose() (formats/exmy.hpp): normal = (m | hidden) · 2^(e − bias −
// man), subnormal = m · 2^(1 − bias − man); the specials are e = all ones (fp16, bf16, e5m2) and
// S.1111.111 (e4m3fn, NaN only). kN > 0: the block size as a compile-time constant, so the loops
// unroll; kN = 0: n at run time.
template <class Fmt, int kN>
inline __attribute__((always_inline)) bool block_products(const std::uint32_t* a,
                                                          const std::uint32_t* b, int n_rt, int lp,
                                                          std::int32_t* pe, std::uint32_t* pm,
                                                          std::int32_t* sg, int* mx_out) {
  const int n = kN > 0 ? kN : n_rt;
  constexpr int kMan = Fmt::kManBits, kBits = Fmt::kBits, kBias = Fmt::kBias;
  constexpr std::uint32_t kEmax = std::uint32_t(Fmt::kExpFieldMax);
  constexpr std::uint32_t kManMask = std::uint32_t(Fmt::kManMask);
  constexpr std::uint32_t kAbsMask = std::uint32_t(Fmt::kAbsMask);
  static_assert(kBits <= 16, "32-bit significand products: formats of at most 16 bits");
  std::int32_t mx = kZeroExp;
  std::uint32_t special = 0;
  for (int i = 0; i < n; ++i) {
    const std::uint32_t x = a[i], y = b[i];
    const std::uint32_t ex = (x >> kMan) & kEmax, ey = (y >> kMan) & kEmax;
    const std::uint32_t sx = (x & kManMask) | (std::uint32_t(ex != 0) << kMan);
    const std::uint32_t sy = (y & kManMask) | (std::uint32_t(ey != 0) << kMan);
    if constexpr (!Fmt::kHasInf) {  // e4m3fn: only S.1111.111 is special (NaN)
      special |=
          std::uint32_t((x & kAbsMask) == kAbsMask) | std::uint32_t((y & kAbsMask) == kAbsMask);
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

// block_fma when no operand and no C is Inf or NaN (nearly always), for a block size known at
// run time: the same arithmetic in two branch-free passes over the products (alignment exponent,
// then truncated aligned sum). Returns false, computing nothing, when a special value is present;
// block_fma then takes the reference path. Tested against every H100 recording
// (tests/hw/mma_h100_test.cpp) and against block_fma_ref on random and adversarial blocks
// (tests/numerics/mma_test.cpp).
template <class Fmt>
bool block_fma_finite(const std::uint32_t* a, const std::uint32_t* b, int n, std::uint32_t c,
                      const BlockFmaParams& p, std::uint32_t* out) {
  const int lp = 23 + p.neab - 2 * Fmt::kManBits;
  std::uint64_t csig;
  int ce;
  bool cneg;
  if (!c_term(c, p.acc_fp16, &csig, &ce, &cneg)) return false;
  // Products as 32-bit magnitudes with 23 + neab fraction bits (below 2^(25 + neab) <= 2^31), their
  // sign as a 0 / -1 mask, and their exponent; 32-bit lanes let the shift-and-sum pass vectorise.
  std::int32_t pe[64];
  std::uint32_t pm[64];
  std::int32_t sg[64];
  int pmax;
  if (block_products<Fmt, 0>(a, b, n, lp, pe, pm, sg, &pmax)) return false;
  int max_e = p.min_exp > ce ? p.min_exp : ce;
  max_e = pmax > max_e ? pmax : max_e;
  std::int64_t acc = 0;
  for (int i = 0; i < n; ++i) {
    int sh = max_e - pe[i];
    sh = sh > 31 ? 31 : sh;  // pm < 2^31: shifts >= 31 leave 0; the clamp keeps the shift defined
    const std::int32_t v = std::int32_t(pm[i] >> sh);  // magnitude truncation, no sticky bit
    acc += (v ^ sg[i]) - sg[i];
  }
  acc += aligned_term(csig, ce, cneg, max_e, p.neab);
  *out = round_block(acc, max_e - 23 - p.neab, p);
  return true;
}

// One k-step chain of blocks of kN products (D of one the C of the next). The chain is serial
// through C, so the work that does not depend on C is done first for a batch of blocks: decode,
// products, the largest product exponent pmax, and each product's magnitude aligned to pmax
// (truncated). Then per block, in order: the alignment exponent max_e = max(floor, C's exponent,
// pmax), one uniform shift of the pre-aligned magnitudes by max_e − pmax (two truncating shifts of
// a magnitude equal one), C, and the rounding. The same arithmetic as block_fma_general
// (tests/numerics/mma_test.cpp compares them; tests/hw/mma_h100_test.cpp compares with the H100).
// A block with an Inf or NaN operand or C goes through block_fma_general. Requires
// block_fma_fast_path_fits(Fmt, p.neab, kN) (checked by the callers). Two code paths chosen at load
// time (GCC function multi-versioning): with AVX2 the compiler vectorises the product and shift
// passes; both are the same integer arithmetic, so results are identical.
template <class Fmt, int kN>
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(ATTNSIM_NO_TARGET_CLONES)
__attribute__((target_clones("avx2", "default")))
#endif
std::uint32_t
chain_blocks(Encoding in, const std::uint32_t* a, const std::uint32_t* b, int K, std::uint32_t c,
             const BlockFmaParams& p) {
  const int lp = 23 + p.neab - 2 * Fmt::kManBits;  // >= 0 (block_fma_fast_path_fits)
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
      const bool sp = block_products<Fmt, kN>(aj, bj, kN, lp, pe, pm, sg[j], &mx);
      for (int i = 0; i < kN; ++i) {
        int sh = mx - pe[i];
        sh = sh > 31 ? 31 : sh;  // pm < 2^31: shifts >= 31 leave 0; the clamp keeps it defined
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
        c = block_fma_general(in, a + k0 + j * kN, b + k0 + j * kN, kN, c, p);
        continue;
      }
      int max_e = p.min_exp > ce ? p.min_exp : ce;
      max_e = pmax[j] > max_e ? pmax[j] : max_e;
      int d = max_e - pmax[j];  // >= 0; a block of zero products has pmax = kZeroExp: d huge
      d = d > 31 ? 31 : d;
      // Each aligned product magnitude is below 2^(25 + neab) and kN · 2^(25 + neab) <= 2^31
      // (block_fma_fast_path_fits), so a block's sum fits in 32 bits: 32-bit lanes vectorise
      // twice as wide as 64-bit ones.
      std::int32_t part = 0;
      for (int i = 0; i < kN; ++i) {
        const std::int32_t v = std::int32_t(w[j][i] >> d);  // magnitude truncation, no sticky bit
        part += (v ^ sg[j][i]) - sg[j][i];
      }
      const std::int64_t acc = std::int64_t(part) + aligned_term(csig, ce, cneg, max_e, p.neab);
      c = round_block(acc, max_e - 23 - p.neab, p);
    }
  }
  return c;
}

}  // namespace

std::uint32_t block_fma(Encoding in, const std::uint32_t* a, const std::uint32_t* b, int n,
                        std::uint32_t c, const BlockFmaParams& p) {
  if (!block_fma_fast_path_fits(in, p.neab, n)) return block_fma_general(in, a, b, n, c, p);
  return with_input_format(in, [&](auto fmt) -> std::uint32_t {
    using Fmt = typename decltype(fmt)::type;
    if (n == 16) return chain_blocks<Fmt, 16>(in, a, b, 16, c, p);
    if (n == 32) return chain_blocks<Fmt, 32>(in, a, b, 32, c, p);
    std::uint32_t r;
    return block_fma_finite<Fmt>(a, b, n, c, p, &r) ? r : block_fma_general(in, a, b, n, c, p);
  });
}

std::uint32_t block_fma_ref(Encoding in, const std::uint32_t* a, const std::uint32_t* b, int n,
                            std::uint32_t c, const BlockFmaParams& p) {
  return block_fma_general(in, a, b, n, c, p);
}

std::uint32_t block_fma_chain(Encoding in, const std::uint32_t* a, const std::uint32_t* b, int K,
                              std::uint32_t c, const BlockFmaParams& p) {
  if ((p.block != 8 && p.block != 16 && p.block != 32) || !block_fma_fast_path_fits(in, p))
    throw std::invalid_argument("block_fma_chain: blocks of 8, 16 or 32 within the fast path's range");
  if (K % p.block != 0)
    throw std::invalid_argument("block_fma_chain: K is not a multiple of the block");
  return with_input_format(in, [&](auto fmt) -> std::uint32_t {
    using Fmt = typename decltype(fmt)::type;
    if (p.block == 8) return chain_blocks<Fmt, 8>(in, a, b, K, c, p);  // HMMA.1688
    return p.block == 16 ? chain_blocks<Fmt, 16>(in, a, b, K, c, p)
                         : chain_blocks<Fmt, 32>(in, a, b, K, c, p);
  });
}

}  // namespace attnsim
