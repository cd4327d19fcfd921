// Array conversions (see convert_array.hpp): the references are loops over formats/; the AVX-512
// kernels round in integer arithmetic on the FP32 bits (fp16 under the four IEEE modes by
// vcvtps2ph, IEEE 754's own binary32 -> binary16 conversion), and hand NaN, Inf and overflowing
// lanes to the scalar encoder, whose result depends on the policy.
// tests/numerics/convert_array_long_test.cpp proves every kernel equal to its reference over all
// 2^32 inputs; the references are proven against the H100 (tests/hw/cvt_h100_long_test.cpp) and
// independent oracles (tests/formats).
#include "numerics/convert_array.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "formats/float16.hpp"
#include "formats/float8.hpp"
#include "formats/intn.hpp"
#include "numerics/avx2_lanes.hpp"
#include "numerics/dispatch.hpp"
#include "numerics/kernels_x86.hpp"
#include "numerics/simd.hpp"

// GCC 12's AVX-512 headers also warn `-Wuninitialized` about their own _mm512_undefined_*() once
// the masked shifts and adds of the saturating encoder inline (GCC PR 105593, as simd.hpp says).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace attnsim {

// ---- references --------------------------------------------------------------------------------

namespace {

// The encodings an output width holds (8-bit: e4m3fn, e5m2; 16-bit: bf16, fp16; 32-bit: any float
// encoding up to fp32).
void check_width(Encoding e, int out_bits, const char* fn) {
  const EncodingTraits t = encoding_traits(e);
  const bool ok = t.is_float && e != Encoding::kFp64 && (out_bits == 32 || t.bits == out_bits);
  if (!ok) {
    throw std::invalid_argument(std::string(fn) + ": no " + std::to_string(out_bits) +
                                "-bit encoding '" + t.name + "'");
  }
}

template <class Out>
[[gnu::flatten]] void encode_ref_loop(Encoding e, const float* x, std::size_t n, Out* out, Policy p) {
  check_width(e, int(8 * sizeof(Out)), "encode_array");
  for (std::size_t i = 0; i < n; ++i) out[i] = Out(encode_float_bits(e, x[i], p));
}

template <class In>
void decode_ref_loop(Encoding e, const In* in, std::size_t n, float* out) {
  check_width(e, int(8 * sizeof(In)), "decode_array");
  for (std::size_t i = 0; i < n; ++i) out[i] = decode_float_bits(e, in[i]);
}

std::int32_t round_to_int_one(float x, Round r, int bits) {
  switch (bits) {
    case 8:
      return round_to_int<s8>(x, r, IntOverflow::kSaturate);
    case 4:
      return round_to_int<s4>(x, r, IntOverflow::kSaturate);
    case 2:
      return round_to_int<s2>(x, r, IntOverflow::kSaturate);
  }
  throw std::invalid_argument("round_to_int_array: bits must be 8, 4 or 2");
}

}  // namespace

void encode_array_ref(Encoding e, const float* x, std::size_t n, std::uint32_t* out, Policy p) {
  encode_ref_loop(e, x, n, out, p);
}
void encode_array_ref(Encoding e, const float* x, std::size_t n, std::uint16_t* out, Policy p) {
  encode_ref_loop(e, x, n, out, p);
}
void encode_array_ref(Encoding e, const float* x, std::size_t n, std::uint8_t* out, Policy p) {
  encode_ref_loop(e, x, n, out, p);
}
void decode_array_ref(Encoding e, const std::uint16_t* in, std::size_t n, float* out) {
  decode_ref_loop(e, in, n, out);
}
void decode_array_ref(Encoding e, const std::uint8_t* in, std::size_t n, float* out) {
  decode_ref_loop(e, in, n, out);
}
[[gnu::flatten]] void round_array_ref(Encoding e, const float* x, std::size_t n, float* out, Policy p) {
  for (std::size_t i = 0; i < n; ++i) out[i] = round_to(e, x[i], p);
}
[[gnu::flatten]] void round_to_int_array_ref(const float* x, std::size_t n, std::int32_t* out, Round r, int bits) {
  for (std::size_t i = 0; i < n; ++i) out[i] = round_to_int_one(x[i], r, bits);
}

// ---- AVX-512 kernels ---------------------------------------------------------------------------

#if ATTNSIM_X86_KERNELS
namespace {

// The kernels' floating-point instructions (vcvtps2ph, the magic-number add, the e4m3fn widening
// subtraction) take their rounding from the instruction, never from MXCSR.RC, but an FP32 subnormal
// input reads as zero under MXCSR.DAZ; a process that set it (a -ffast-math library's start-up
// code) gets the references instead.
bool mxcsr_keeps_subnormals() { return (_mm_getcsr() & 0x40u) == 0; }

constexpr int kRoundImm(Round r) {
  return (r == Round::kNearestEven ? _MM_FROUND_TO_NEAREST_INT
          : r == Round::kDown      ? _MM_FROUND_TO_NEG_INF
          : r == Round::kUp        ? _MM_FROUND_TO_POS_INF
                                   : _MM_FROUND_TO_ZERO) |
         _MM_FROUND_NO_EXC;
}

// An FP32 -> Fmt rounding of 16 lanes in integer arithmetic. For the magnitude a = |x|'s bits
// with biased exponent E and significand sig (hidden bit included for E > 0), and the target's
// smallest normal exponent emin and mantissa width m, the result code is
//
//   code = (max(e - emin, 0) << m) + round(sig >> sh),   sh = 23 - m + max(emin - e, 0),
//
// e = max(E, 1) - 127: a normal result keeps m bits below the hidden one, whose carry into the
// exponent field is the right exponent increment; a subnormal result shifts further (the shift
// saturates at 31, past which every rounding sees only a sticky bit). round() adds the mode's
// bias below bit sh before the shift (CUTLASS exmy_base.h round_significand; CPFloat's mask
// rounding):
//   rne: half - 1 + the kept lsb     rna: half     rz: 0     away from zero: 2^sh - 1
// (ru is away for positive lanes, rd for negative ones). Lanes whose code exceeds the largest
// finite magnitude (NaN, Inf, overflow) are flagged for the scalar encoder.
//
// Normal results (E >= emin + 127) have the constant shift 23 - m, so the rebiased bits
// a - ((126 + emin) << 23) round in one add (the bf16 bias trick (u + 0x7FFF + lsb) >> 16
// generalised; bf16 shares FP32's exponent range, so that holds for every finite bf16 input).
// Subnormal results of the 8-bit formats under the four IEEE modes come from one FP32 addition
// instead: |x| < 2^emin plus C = 2^(emin - m + 23) lands in [C, 2C), whose ulp is the target's
// quantum 2^(emin - m), so the sum is C + |x| rounded to the quantum in the instruction's mode
// (ties to even: C's mantissa is zero, so the sum's lsb is the code's), and its bits minus C's are
// the code (2^m when it rounds up to the smallest normal). Ties-away has no FP32 mode: the
// integer formula above serves it.
// The constants live in the object, built once before a pass's loop (GCC otherwise
// rematerialises broadcasts inside it).
template <class Fmt, Round kR>
struct RoundCode {
  static constexpr int kMan = Fmt::kManBits;
  static constexpr int kEmin = Fmt::kMinNormalExp;
  static constexpr int kSh0 = 23 - kMan;
  static constexpr std::uint32_t kNormalFrom =
      kEmin == -126 ? 0u : std::uint32_t(kEmin + 127) << 23;
  static constexpr int kMagicExp = kEmin - kMan + 23;  // C = 2^kMagicExp
  // The magic addend serves the IEEE modes of the narrow formats only (fp16 goes to vcvtps2ph
  // there, and under ties-away to the integer formula).
  static constexpr bool kUseMagic = kNormalFrom != 0 && kR != Round::kNearestAway;
  static_assert(!kUseMagic || (kMagicExp > -127 && kMagicExp < 128));
  __m512i abs_mask, one, normal_from, rebias, half_m1, half, away_bias, max_mag, sign_bit, inf_bits;
  __m512 magic;

  ATTNSIM_TARGET_AVX512 RoundCode()
      : abs_mask(_mm512_set1_epi32(0x7FFFFFFF)),
        one(_mm512_set1_epi32(1)),
        normal_from(_mm512_set1_epi32(int(kNormalFrom))),
        rebias(_mm512_set1_epi32(int(std::uint32_t(126 + kEmin) << 23))),
        half_m1(_mm512_set1_epi32((1 << (kSh0 - 1)) - 1)),
        half(_mm512_set1_epi32(1 << (kSh0 - 1))),
        away_bias(_mm512_set1_epi32((1 << kSh0) - 1)),
        max_mag(_mm512_set1_epi32(int(std::uint32_t(Fmt::kMaxFinite)))),
        sign_bit(_mm512_set1_epi32(int(Fmt::kSignBit))),
        inf_bits(_mm512_set1_epi32(0x7F800000)),
        magic(_mm512_castsi512_ps(_mm512_set1_epi32(kUseMagic ? (kMagicExp + 127) << 23 : 0))) {}

  // The code of every lane; *overflow flags the lanes past the largest finite magnitude (NaN,
  // Inf, finite overflow), whose codes the caller replaces.
  ATTNSIM_TARGET_AVX512 __m512i operator()(__m512i u, __mmask16* overflow) const {
    const __m512i a = _mm512_and_si512(u, abs_mask);
    const __mmask16 neg = _mm512_cmpneq_epi32_mask(a, u);
    const __m512i q = magnitude(a, neg);
    *overflow = _mm512_cmpgt_epu32_mask(q, max_mag);
    return _mm512_mask_or_epi32(q, neg, q, sign_bit);
  }

  // For a policy under which every finite overflow and Inf becomes the largest finite magnitude
  // with the input's sign (CUDA's satfinite: policy_saturates below): the code of every lane that
  // is not NaN, clamped in place of the caller's replacement; *nan flags the NaN lanes.
  ATTNSIM_TARGET_AVX512 __m512i saturated(__m512i u, __mmask16* nan) const {
    const __m512i a = _mm512_and_si512(u, abs_mask);
    const __mmask16 neg = _mm512_cmpneq_epi32_mask(a, u);
    const __m512i q = _mm512_min_epu32(magnitude(a, neg), max_mag);
    *nan = _mm512_cmpgt_epu32_mask(a, inf_bits);
    return _mm512_mask_or_epi32(q, neg, q, sign_bit);
  }

  // The magnitude's code of the lanes a = |u| (neg: the negative lanes), unbounded above.
  ATTNSIM_TARGET_AVX512 __m512i magnitude(__m512i a, __mmask16 neg) const {
    // Lanes rounded away from zero under a directed mode.
    const __mmask16 away = kR == Round::kUp ? __mmask16(~neg) : kR == Round::kDown ? neg : 0;
    const __mmask16 sub = kNormalFrom == 0 ? __mmask16(0) : _mm512_cmplt_epu32_mask(a, normal_from);
    __m512i q;
    if (kR != Round::kNearestAway || sub == 0) {
      const __m512i r = _mm512_sub_epi32(a, rebias);
      __m512i bias;
      if constexpr (kR == Round::kNearestEven) {
        bias = _mm512_add_epi32(_mm512_and_si512(_mm512_srli_epi32(r, kSh0), one), half_m1);
      } else if constexpr (kR == Round::kNearestAway) {
        bias = half;
      } else if constexpr (kR == Round::kTowardZero) {
        bias = _mm512_setzero_si512();
      } else {
        bias = _mm512_maskz_mov_epi32(away, away_bias);
      }
      q = _mm512_srli_epi32(_mm512_add_epi32(r, bias), kSh0);
      if constexpr (kUseMagic) {
        // Branch-free: a vector of small values is common (P after exp) and unpredictable.
        const __m512 mag = _mm512_castsi512_ps(a);
        __m512 s;
        if constexpr (kR == Round::kUp || kR == Round::kDown) {
          s = _mm512_add_round_ps(mag, magic, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
          s = _mm512_mask_add_round_ps(s, away, mag, magic, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC);
        } else {
          s = _mm512_add_round_ps(mag, magic, kRoundImm(kR));
        }
        q = _mm512_mask_sub_epi32(q, sub, _mm512_castps_si512(s), _mm512_castps_si512(magic));
      }
    } else {
      // Ties away with a subnormal result somewhere: the general formula for every lane.
      const __m512i zero = _mm512_setzero_si512();
      const __m512i e_field = _mm512_srli_epi32(a, 23);
      __m512i sig = _mm512_and_si512(a, _mm512_set1_epi32(0x7FFFFF));
      sig = _mm512_mask_or_epi32(sig, _mm512_cmpneq_epi32_mask(e_field, zero), sig,
                                 _mm512_set1_epi32(0x800000));
      // d > 0: the result is subnormal and its shift grows by d; d < 0: -d is the exponent
      // field above the target's smallest normal.
      const __m512i d =
          _mm512_sub_epi32(_mm512_set1_epi32(kEmin + 127), _mm512_max_epu32(e_field, one));
      const __m512i sh = _mm512_min_epi32(
          _mm512_add_epi32(_mm512_set1_epi32(kSh0), _mm512_max_epi32(d, zero)),
          _mm512_set1_epi32(31));
      const __m512i hi =
          _mm512_slli_epi32(_mm512_max_epi32(_mm512_sub_epi32(zero, d), zero), kMan);
      const __m512i bias = _mm512_sllv_epi32(one, _mm512_sub_epi32(sh, one));  // half
      q = _mm512_add_epi32(_mm512_srlv_epi32(_mm512_add_epi32(sig, bias), sh), hi);
    }
    return q;
  }
};

// fp16 under rne/rd/ru/rz: vcvtps2ph with the rounding in the immediate (bit 2 clear: MXCSR.RC
// ignored; Intel SDM VCVTPS2PH), exact to IEEE 754 for every non-NaN input (equal to the
// reference over all 2^32 inputs, convert_array_long_test.cpp). Inf and NaN results (NaN or Inf inputs,
// overflows) are flagged for the scalar encoder.
template <Round kR>
struct Fp16Code {
  __m512i abs16, inf16;
  ATTNSIM_TARGET_AVX512 Fp16Code()
      : abs16(_mm512_set1_epi32(0x7FFF)), inf16(_mm512_set1_epi32(0x7C00)) {}
  ATTNSIM_TARGET_AVX512 __m512i operator()(__m512i u, __mmask16* special) const {
    const __m512i h =
        _mm512_cvtepu16_epi32(_mm512_cvtps_ph(_mm512_castsi512_ps(u), kRoundImm(kR)));
    *special = _mm512_cmpge_epu32_mask(_mm512_and_si512(h, abs16), inf16);
    return h;
  }
};

// The encoder of Fmt under kR: vcvtps2ph for fp16 in the IEEE modes, else RoundCode.
template <class Fmt, Round kR>
using Encoder = std::conditional_t<std::is_same_v<Fmt, fp16> && kR != Round::kNearestAway,
                                   Fp16Code<kR>, RoundCode<Fmt, kR>>;

// Exact widening of codes that are not NaN (the kernels send NaN lanes to the scalar path):
// bf16 is FP32's upper half; fp16 and e5m2 (fp16's upper byte) widen by vcvtph2ps; e4m3fn below.
template <class Fmt>
ATTNSIM_TARGET_AVX512 inline __m512 widen_finite(__m512i c) {
  if constexpr (std::is_same_v<Fmt, bf16>) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(c, 16));
  } else if constexpr (std::is_same_v<Fmt, fp16>) {
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(c));
  } else if constexpr (std::is_same_v<Fmt, e5m2>) {
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_slli_epi32(c, 8)));
  } else {
    static_assert(std::is_same_v<Fmt, e4m3fn>);
    // Normal codes: the fields moved into place and the exponent rebiased (+120). Subnormal codes
    // m·2^-9: the FP32 normal 2^-6·(1 + m/8) minus 2^-6, exact (Sterbenz); no FP32 subnormal
    // enters the arithmetic (a denormal operand costs a microcode assist on Intel cores).
    const __m512i mag = _mm512_and_si512(c, _mm512_set1_epi32(0x7F));
    const __mmask16 sub = _mm512_cmplt_epu32_mask(mag, _mm512_set1_epi32(0x08));
    __m512i w = _mm512_add_epi32(_mm512_slli_epi32(mag, 20), _mm512_set1_epi32(120 << 23));
    w = _mm512_mask_add_epi32(w, sub, w, _mm512_set1_epi32(1 << 23));
    const __m512 v = _mm512_mask_sub_round_ps(_mm512_castsi512_ps(w), sub, _mm512_castsi512_ps(w),
                                              _mm512_set1_ps(0x1p-6f),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm512_castsi512_ps(_mm512_or_si512(
        _mm512_castps_si512(v), _mm512_slli_epi32(_mm512_and_si512(c, _mm512_set1_epi32(0x80)), 24)));
  }
}

template <class Out>
ATTNSIM_TARGET_AVX512 inline void store_codes(Out* out, __m512i c) {
  if constexpr (sizeof(Out) == 1) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(c));
  } else if constexpr (sizeof(Out) == 2) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm512_cvtepi32_epi16(c));
  } else {
    _mm512_storeu_si512(out, c);
  }
}
template <class Out>
ATTNSIM_TARGET_AVX512 inline void store_codes(Out* out, __m512i c, __mmask16 m) {
  if constexpr (sizeof(Out) == 1) {
    _mm512_mask_cvtepi32_storeu_epi8(out, m, c);
  } else if constexpr (sizeof(Out) == 2) {
    _mm512_mask_cvtepi32_storeu_epi16(out, m, c);
  } else {
    _mm512_mask_storeu_epi32(out, m, c);
  }
}

// The lanes a vector pass leaves to the scalar reference: their offsets from the pass's start
// and their input bits (the output may overwrite the input). A pass stops when the list could
// overflow; the caller finishes those lanes and starts the next pass, so the hot loop makes no
// calls (every vector register is caller-saved).
constexpr std::size_t kSlowCap = 1024;
struct SlowLanes {
  std::uint32_t at[kSlowCap];
  std::uint32_t bits[kSlowCap];
  std::size_t n;
};

ATTNSIM_TARGET_AVX512 inline void note_slow(SlowLanes& s, std::size_t& k, __mmask16 m,
                                            std::size_t i0, __m512i u) {
  if (m == 0) return;
  const __m512i at = _mm512_add_epi32(_mm512_set1_epi32(int(i0)),
                                      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  _mm512_mask_compressstoreu_epi32(s.at + k, m, at);
  _mm512_mask_compressstoreu_epi32(s.bits + k, m, u);
  k += std::size_t(__builtin_popcount(m));
}

inline __mmask16 tail_mask(std::size_t left) { return __mmask16((1u << left) - 1); }

// The results of the flagged lanes that are not NaN, constant per call: a finite overflow and an
// Inf input of each sign (what the scalar encoder gives for ±FLT_MAX and ±Inf under the policy:
// every finite lane a kernel flags rounds past the largest finite magnitude, whose result
// depends only on the sign, the rounding mode and the policy, formats/policy.hpp). NaN lanes,
// whose result may keep payload bits, go to the scalar encoder.
struct SpecialLanes {
  __m512i ovf_pos, ovf_neg, inf_pos, inf_neg;
};

// The four results as integers, from the scalar encoder, kept per thread for the last (what,
// encoding, policy): the kernels run once per row of a tile, where four scalar encodes per call
// cost more than the row's vector work.
struct SpecialCodes {
  int ovf_pos, ovf_neg, inf_pos, inf_neg;
};
// what: the output width in bytes (1, 2, 4) for encodes, 0 for round_to.
SpecialCodes special_codes(int what, Encoding e, Policy p) {
  thread_local struct {
    bool valid = false;
    int what;
    Encoding e;
    Policy p;
    SpecialCodes c;
  } last;
  if (last.valid && last.what == what && last.e == e && last.p == p) return last.c;
  auto val = [&](float v) {
    if (what == 0) return int(f32_bits(round_to(e, v, p)));
    const std::uint32_t b = encode_float_bits(e, v, p);
    return int(what == 1 ? std::uint32_t(std::uint8_t(b))
                         : what == 2 ? std::uint32_t(std::uint16_t(b)) : b);
  };
  last.c = {val(0x1.fffffep127f), val(-0x1.fffffep127f), val(HUGE_VALF), val(-HUGE_VALF)};
  last.what = what;
  last.e = e;
  last.p = p;
  last.valid = true;
  return last.c;
}

// Whether Fmt's encoder under kR is RoundCode, which has the clamping form (vcvtps2ph's has not).
template <class Fmt, Round kR>
inline constexpr bool kClamps = std::is_same_v<Encoder<Fmt, kR>, RoundCode<Fmt, kR>>;

// Whether the policy's encodes of ±FLT_MAX and ±Inf (sc: special_codes of an encode) are all the
// largest finite magnitude of Fmt with the input's sign, as under CUDA's satfinite: then every
// lane that RoundCode flags and that is not NaN (a finite overflow or an Inf) takes that code,
// which RoundCode::saturated gives by clamping.
template <class Fmt, Round kR>
bool policy_saturates(const SpecialCodes& sc) {
  if constexpr (kClamps<Fmt, kR>) {
    const std::uint32_t pos = std::uint32_t(Fmt::kMaxFinite), neg = pos | std::uint32_t(Fmt::kSignBit);
    return std::uint32_t(sc.ovf_pos) == pos && std::uint32_t(sc.inf_pos) == pos &&
           std::uint32_t(sc.ovf_neg) == neg && std::uint32_t(sc.inf_neg) == neg;
  } else {
    return false;
  }
}

ATTNSIM_TARGET_AVX512 SpecialLanes special_lanes(SpecialCodes c) {
  return {_mm512_set1_epi32(c.ovf_pos), _mm512_set1_epi32(c.ovf_neg), _mm512_set1_epi32(c.inf_pos),
          _mm512_set1_epi32(c.inf_neg)};
}

// The flagged lanes of v that are not NaN replaced by their specials; returns the NaN lanes.
ATTNSIM_TARGET_AVX512 inline __m512i settle(__m512i v, __m512i u, __mmask16 flagged,
                                            const SpecialLanes& sp, __mmask16* nan) {
  if (flagged == 0) {  // the common vector: nothing to settle (a predictable branch)
    *nan = 0;
    return v;
  }
  const __m512i a = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
  const __m512i inf_bits = _mm512_set1_epi32(0x7F800000);
  *nan = flagged & _mm512_cmpgt_epu32_mask(a, inf_bits);
  const __mmask16 neg = _mm512_cmpneq_epi32_mask(a, u);
  const __mmask16 inf = flagged & _mm512_cmpeq_epi32_mask(a, inf_bits);
  const __mmask16 ovf = flagged & __mmask16(~(*nan | inf));
  v = _mm512_mask_mov_epi32(v, ovf & __mmask16(~neg), sp.ovf_pos);
  v = _mm512_mask_mov_epi32(v, ovf & neg, sp.ovf_neg);
  v = _mm512_mask_mov_epi32(v, inf & __mmask16(~neg), sp.inf_pos);
  return _mm512_mask_mov_epi32(v, inf & neg, sp.inf_neg);
}

// The codes of 16 lanes and the lanes left to the scalar encoder (NaN). kSat: the policy
// saturates (policy_saturates), so RoundCode clamps the magnitude in place of settle's
// replacements: no per-vector branch on overflowing lanes, which inputs spanning many binades
// (scores, unscaled activations) have in most vectors.
template <class Fmt, Round kR, bool kSat>
ATTNSIM_TARGET_AVX512 inline __m512i encode16(const Encoder<Fmt, kR>& enc, __m512i u,
                                              const SpecialLanes& sp, __mmask16* nan) {
  if constexpr (kSat) {
    return enc.saturated(u, nan);
  } else {
    __mmask16 flagged;
    const __m512i raw = enc(u, &flagged);
    return settle(raw, u, flagged, sp, nan);
  }
}

// One pass over x[0, n) (n < 2^31): codes of every lane, the NaN lanes listed; returns how many
// elements it covered.
template <class Fmt, Round kR, bool kSat, class Out>
ATTNSIM_TARGET_AVX512 std::size_t encode_pass(const float* x, std::size_t n, Out* out,
                                              const SpecialLanes& sp, SlowLanes& s) {
  const Encoder<Fmt, kR> enc;
  std::size_t i = 0, k = s.n;
  if constexpr (sizeof(Out) == 1) {
    // Bytes: 64 lanes per step, narrowed by two rounds of unsigned-saturating packs (the codes
    // are 0..255, so nothing saturates) and one dword permutation that undoes their interleave
    // within 128-bit lanes: four shuffles per 64 codes where vpmovdb takes two per 16. One
    // branch per step on the NaN lanes of all four vectors.
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    for (; i + 64 <= n && k + 64 <= kSlowCap; i += 64) {
      __m512i u[4], c[4];
      __mmask16 nan[4];
      for (int j = 0; j < 4; ++j) {
        u[j] = _mm512_loadu_si512(x + i + 16 * j);
        c[j] = encode16<Fmt, kR, kSat>(enc, u[j], sp, &nan[j]);
      }
      const __m512i w01 = _mm512_packus_epi32(c[0], c[1]), w23 = _mm512_packus_epi32(c[2], c[3]);
      _mm512_storeu_si512(out + i, _mm512_permutexvar_epi32(order, _mm512_packus_epi16(w01, w23)));
      if ((nan[0] | nan[1] | nan[2] | nan[3]) != 0) {
        for (int j = 0; j < 4; ++j) note_slow(s, k, nan[j], i + 16 * std::size_t(j), u[j]);
      }
    }
  }
  for (; i + 16 <= n && k + 16 <= kSlowCap; i += 16) {
    const __m512i u = _mm512_loadu_si512(x + i);
    __mmask16 nan;
    const __m512i c = encode16<Fmt, kR, kSat>(enc, u, sp, &nan);
    store_codes(out + i, c);
    note_slow(s, k, nan, i, u);
  }
  if (i < n && i + 16 > n && k + 16 <= kSlowCap) {
    const __mmask16 m = tail_mask(n - i);
    const __m512i u = _mm512_maskz_loadu_epi32(m, x + i);
    __mmask16 nan;
    const __m512i c = encode16<Fmt, kR, kSat>(enc, u, sp, &nan);
    store_codes(out + i, c, m);
    note_slow(s, k, nan & m, i, u);
    i = n;
  }
  s.n = k;
  return i;
}

template <class Fmt, Round kR>
ATTNSIM_TARGET_AVX512 std::size_t round_pass(const float* x, std::size_t n, float* out,
                                             const SpecialLanes& sp, SlowLanes& s) {
  const Encoder<Fmt, kR> enc;
  std::size_t i = 0, k = s.n;
  for (; i + 16 <= n && k + 16 <= kSlowCap; i += 16) {
    const __m512i u = _mm512_loadu_si512(x + i);
    __mmask16 flagged, nan;
    const __m512i c = enc(u, &flagged);
    const __m512i w = settle(_mm512_castps_si512(widen_finite<Fmt>(c)), u, flagged, sp, &nan);
    _mm512_storeu_si512(out + i, w);
    note_slow(s, k, nan, i, u);
  }
  if (i < n && i + 16 > n && k + 16 <= kSlowCap) {
    const __mmask16 m = tail_mask(n - i);
    const __m512i u = _mm512_maskz_loadu_epi32(m, x + i);
    __mmask16 flagged, nan;
    const __m512i c = enc(u, &flagged);
    const __m512i w = settle(_mm512_castps_si512(widen_finite<Fmt>(c)), u, flagged, sp, &nan);
    _mm512_mask_storeu_epi32(out + i, m, w);
    note_slow(s, k, nan & m, i, u);
    i = n;
  }
  s.n = k;
  return i;
}

// ---- the encoders on AVX2 (8 lanes; lane masks are all-ones compare results) ----
//
// RoundCode8 computes RoundCode's codes with the general formula of its ties-away branch for
// every lane and mode (AVX2 has no add with the rounding in the instruction, which the magic
// addend needs): code = round(sig >> sh) + (max(e - emin, 0) << m), the mode's bias below bit sh
// added before the shift, sh per lane (saturated at 31) and the bias's pieces by variable shifts:
//   rne: 2^(sh-1) - 1 + bit sh of sig     rna: 2^(sh-1)     rz: 0     away: 2^sh - 1.
// For a normal result sh = 23 - m and this is the one-add form (RoundCode's comment); the sum
// sig + bias stays below 2^32 (sig < 2^24, bias < 2^31) and the shift is logical. Every code is
// below 2^31, so signed compares serve for the unsigned ones.
template <class Fmt, Round kR>
struct RoundCode8 {
  static constexpr int kMan = Fmt::kManBits;
  static constexpr int kEmin = Fmt::kMinNormalExp;
  static constexpr int kSh0 = 23 - kMan;

  ATTNSIM_TARGET_AVX2 static __m256i magnitude(__m256i a, __m256i neg) {
    const __m256i zero = _mm256_setzero_si256(), one = _mm256_set1_epi32(1);
    const __m256i e_field = _mm256_srli_epi32(a, 23);
    const __m256i hidden = _mm256_andnot_si256(_mm256_cmpeq_epi32(e_field, zero),
                                               _mm256_set1_epi32(0x800000));
    const __m256i sig = _mm256_or_si256(_mm256_and_si256(a, _mm256_set1_epi32(0x7FFFFF)), hidden);
    const __m256i d =
        _mm256_sub_epi32(_mm256_set1_epi32(kEmin + 127), _mm256_max_epi32(e_field, one));
    const __m256i sh = _mm256_min_epi32(
        _mm256_add_epi32(_mm256_set1_epi32(kSh0), _mm256_max_epi32(d, zero)),
        _mm256_set1_epi32(31));
    const __m256i hi = _mm256_slli_epi32(_mm256_max_epi32(_mm256_sub_epi32(zero, d), zero), kMan);
    const __m256i half = _mm256_sllv_epi32(one, _mm256_sub_epi32(sh, one));
    __m256i bias;
    if constexpr (kR == Round::kNearestEven) {
      bias = _mm256_add_epi32(_mm256_sub_epi32(half, one),
                              _mm256_and_si256(_mm256_srlv_epi32(sig, sh), one));
    } else if constexpr (kR == Round::kNearestAway) {
      bias = half;
    } else if constexpr (kR == Round::kTowardZero) {
      bias = zero;
    } else {
      const __m256i away = kR == Round::kUp ? _mm256_xor_si256(neg, _mm256_set1_epi32(-1)) : neg;
      bias = _mm256_and_si256(away, _mm256_sub_epi32(_mm256_sllv_epi32(one, sh), one));
    }
    return _mm256_add_epi32(_mm256_srlv_epi32(_mm256_add_epi32(sig, bias), sh), hi);
  }

  // The code of every lane; *overflow: the lanes past the largest finite magnitude.
  ATTNSIM_TARGET_AVX2 __m256i operator()(__m256i u, __m256i* overflow) const {
    const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    const __m256i neg = _mm256_xor_si256(_mm256_cmpeq_epi32(a, u), _mm256_set1_epi32(-1));
    const __m256i q = magnitude(a, neg);
    *overflow = _mm256_cmpgt_epi32(q, _mm256_set1_epi32(int(std::uint32_t(Fmt::kMaxFinite))));
    return _mm256_or_si256(q, _mm256_and_si256(neg, _mm256_set1_epi32(int(Fmt::kSignBit))));
  }

  // RoundCode::saturated.
  ATTNSIM_TARGET_AVX2 __m256i saturated(__m256i u, __m256i* nan) const {
    const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    const __m256i neg = _mm256_xor_si256(_mm256_cmpeq_epi32(a, u), _mm256_set1_epi32(-1));
    const __m256i q = _mm256_min_epi32(magnitude(a, neg),
                                       _mm256_set1_epi32(int(std::uint32_t(Fmt::kMaxFinite))));
    *nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));
    return _mm256_or_si256(q, _mm256_and_si256(neg, _mm256_set1_epi32(int(Fmt::kSignBit))));
  }
};

// Fp16Code on AVX2: vcvtps2ph (F16C) with the rounding in the immediate.
template <Round kR>
struct Fp16Code8 {
  ATTNSIM_TARGET_AVX2 __m256i operator()(__m256i u, __m256i* special) const {
    const __m256i h = _mm256_cvtepu16_epi32(_mm256_cvtps_ph(_mm256_castsi256_ps(u), kRoundImm(kR)));
    *special = _mm256_cmpgt_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x7FFF)),
                                  _mm256_set1_epi32(0x7BFF));
    return h;
  }
};

template <class Fmt, Round kR>
using Encoder8 = std::conditional_t<std::is_same_v<Fmt, fp16> && kR != Round::kNearestAway,
                                    Fp16Code8<kR>, RoundCode8<Fmt, kR>>;

// 8 codes (each below 2^16) as 8 int16 in k order.
ATTNSIM_TARGET_AVX2 inline __m128i narrow16(__m256i c) {
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(c, c), 0x08));
}

// widen_finite on AVX2.
template <class Fmt>
ATTNSIM_TARGET_AVX2 inline __m256 widen_finite8(__m256i c) {
  if constexpr (std::is_same_v<Fmt, bf16>) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(c, 16));
  } else if constexpr (std::is_same_v<Fmt, fp16>) {
    return _mm256_cvtph_ps(narrow16(c));
  } else if constexpr (std::is_same_v<Fmt, e5m2>) {
    return _mm256_cvtph_ps(narrow16(_mm256_slli_epi32(c, 8)));
  } else {
    static_assert(std::is_same_v<Fmt, e4m3fn>);
    const __m256i mag = _mm256_and_si256(c, _mm256_set1_epi32(0x7F));
    const __m256i sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x08), mag);
    __m256i w = _mm256_add_epi32(_mm256_slli_epi32(mag, 20), _mm256_set1_epi32(120 << 23));
    w = _mm256_add_epi32(w, _mm256_and_si256(sub, _mm256_set1_epi32(1 << 23)));
    const __m256 wf = _mm256_castsi256_ps(w);
    const __m256 v = _mm256_blendv_ps(wf, _mm256_sub_ps(wf, _mm256_set1_ps(0x1p-6f)),
                                      _mm256_castsi256_ps(sub));
    return _mm256_castsi256_ps(_mm256_or_si256(
        _mm256_castps_si256(v),
        _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24)));
  }
}

struct SpecialLanes8 {
  __m256i ovf_pos, ovf_neg, inf_pos, inf_neg;
};
ATTNSIM_TARGET_AVX2 inline SpecialLanes8 special_lanes8(SpecialCodes c) {
  return {_mm256_set1_epi32(c.ovf_pos), _mm256_set1_epi32(c.ovf_neg), _mm256_set1_epi32(c.inf_pos),
          _mm256_set1_epi32(c.inf_neg)};
}

// settle on AVX2: the flagged lanes that are not NaN replaced by their specials; *nan: the NaN
// lanes among the flagged.
ATTNSIM_TARGET_AVX2 inline __m256i settle8(__m256i v, __m256i u, __m256i flagged,
                                           const SpecialLanes8& sp, __m256i* nan) {
  if (_mm256_testz_si256(flagged, flagged)) {
    *nan = _mm256_setzero_si256();
    return v;
  }
  const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i inf_bits = _mm256_set1_epi32(0x7F800000);
  *nan = _mm256_and_si256(flagged, _mm256_cmpgt_epi32(a, inf_bits));
  const __m256i neg = _mm256_cmpgt_epi32(_mm256_setzero_si256(), u);
  const __m256i inf = _mm256_and_si256(flagged, _mm256_cmpeq_epi32(a, inf_bits));
  const __m256i ovf = _mm256_andnot_si256(_mm256_or_si256(*nan, inf), flagged);
  v = _mm256_blendv_epi8(v, sp.ovf_pos, _mm256_andnot_si256(neg, ovf));
  v = _mm256_blendv_epi8(v, sp.ovf_neg, _mm256_and_si256(neg, ovf));
  v = _mm256_blendv_epi8(v, sp.inf_pos, _mm256_andnot_si256(neg, inf));
  return _mm256_blendv_epi8(v, sp.inf_neg, _mm256_and_si256(neg, inf));
}

template <class Fmt, Round kR, bool kSat>
ATTNSIM_TARGET_AVX2 inline __m256i encode8(const Encoder8<Fmt, kR>& enc, __m256i u,
                                           const SpecialLanes8& sp, __m256i* nan) {
  if constexpr (kSat) {
    return enc.saturated(u, nan);
  } else {
    __m256i flagged;
    const __m256i raw = enc(u, &flagged);
    return settle8(raw, u, flagged, sp, nan);
  }
}

// The NaN lanes of one vector onto the pass's list (rare: a loop over the mask's bits).
ATTNSIM_TARGET_AVX2 inline void note_slow8(SlowLanes& s, std::size_t& k, __m256i nan,
                                           std::size_t i0, __m256i u) {
  unsigned m = unsigned(_mm256_movemask_ps(_mm256_castsi256_ps(nan)));
  if (m == 0) return;
  alignas(32) std::uint32_t bits[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(bits), u);
  for (; m != 0; m &= m - 1) {
    const int l = __builtin_ctz(m);
    s.at[k] = std::uint32_t(i0 + std::size_t(l));
    s.bits[k] = bits[l];
    ++k;
  }
}


template <class Out>
ATTNSIM_TARGET_AVX2 inline void store_codes8(Out* out, __m256i c, std::size_t m) {
  alignas(32) std::uint32_t w[8];
  if (m >= 8 && sizeof(Out) == 4) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), c);
    return;
  }
  if (m >= 8 && sizeof(Out) == 2) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), narrow16(c));
    return;
  }
  _mm256_store_si256(reinterpret_cast<__m256i*>(w), c);
  for (std::size_t l = 0; l < m && l < 8; ++l) out[l] = Out(w[l]);
}

// encode_pass and round_pass on AVX2 (same contract).
template <class Fmt, Round kR, bool kSat, class Out>
ATTNSIM_TARGET_AVX2 std::size_t encode_pass_avx2(const float* x, std::size_t n, Out* out,
                                                 const SpecialLanes8& sp, SlowLanes& s) {
  const Encoder8<Fmt, kR> enc;
  std::size_t i = 0, k = s.n;
  for (; i < n && k + 8 <= kSlowCap; i += 8) {
    const std::size_t m = n - i < 8 ? n - i : 8;
    const __m256i live = avx2_lanes::first8(int(m));
    const __m256i u = m == 8 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i))
                             : _mm256_maskload_epi32(reinterpret_cast<const int*>(x + i), live);
    __m256i nan;
    const __m256i c = encode8<Fmt, kR, kSat>(enc, u, sp, &nan);
    store_codes8(out + i, c, m);
    note_slow8(s, k, _mm256_and_si256(nan, live), i, u);
  }
  if (i > n) i = n;
  s.n = k;
  return i;
}

template <class Fmt, Round kR>
ATTNSIM_TARGET_AVX2 std::size_t round_pass_avx2(const float* x, std::size_t n, float* out,
                                                const SpecialLanes8& sp, SlowLanes& s) {
  const Encoder8<Fmt, kR> enc;
  std::size_t i = 0, k = s.n;
  for (; i < n && k + 8 <= kSlowCap; i += 8) {
    const std::size_t m = n - i < 8 ? n - i : 8;
    const __m256i live = avx2_lanes::first8(int(m));
    const __m256i u = m == 8 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i))
                             : _mm256_maskload_epi32(reinterpret_cast<const int*>(x + i), live);
    __m256i flagged, nan;
    const __m256i c = enc(u, &flagged);
    const __m256i w = settle8(_mm256_castps_si256(widen_finite8<Fmt>(c)), u, flagged, sp, &nan);
    if (m == 8) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), w);
    } else {
      _mm256_maskstore_epi32(reinterpret_cast<int*>(out + i), live, w);
    }
    note_slow8(s, k, _mm256_and_si256(nan, live), i, u);
  }
  if (i > n) i = n;
  s.n = k;
  return i;
}

// Decodes. bf16: the upper half, NaNs quieted (bit 22); fp16 and e5m2: vcvtph2ps (quiets NaNs,
// keeps sign and payload: equal to the reference on every code, convert_array_test.cpp); e4m3fn:
// widen_finite, its two NaN codes (S.1111.111) replaced by the reference's values.
template <class Fmt, class In>
ATTNSIM_TARGET_AVX512 inline __m512 decode_vec(__m512i c, std::uint32_t nan_pos,
                                               std::uint32_t nan_neg) {
  if constexpr (std::is_same_v<Fmt, bf16>) {
    __m512i w = _mm512_slli_epi32(c, 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(w, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
    w = _mm512_mask_or_epi32(w, nan, w, _mm512_set1_epi32(0x00400000));
    return _mm512_castsi512_ps(w);
  } else if constexpr (std::is_same_v<Fmt, e4m3fn>) {
    __m512 v = widen_finite<Fmt>(c);
    const __m512i mag = _mm512_and_si512(c, _mm512_set1_epi32(0x7F));
    const __mmask16 nan = _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7F));
    const __mmask16 nneg = _mm512_test_epi32_mask(c, _mm512_set1_epi32(0x80));
    v = _mm512_mask_mov_ps(v, nan & __mmask16(~nneg),
                           _mm512_castsi512_ps(_mm512_set1_epi32(int(nan_pos))));
    return _mm512_mask_mov_ps(v, nan & nneg, _mm512_castsi512_ps(_mm512_set1_epi32(int(nan_neg))));
  } else {
    return widen_finite<Fmt>(c);
  }
}

template <class Fmt, class In>
ATTNSIM_TARGET_AVX512 void decode_kernel(const In* in, std::size_t n, float* out,
                                         std::uint32_t nan_pos, std::uint32_t nan_neg) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i c;
    if constexpr (sizeof(In) == 1) {
      c = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
    } else {
      c = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
    }
    _mm512_storeu_ps(out + i, decode_vec<Fmt, In>(c, nan_pos, nan_neg));
  }
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    __m512i c;
    if constexpr (sizeof(In) == 1) {
      c = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, in + i));
    } else {
      c = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, in + i));
    }
    _mm512_mask_storeu_ps(out + i, m, decode_vec<Fmt, In>(c, nan_pos, nan_neg));
  }
}

// cvt.{rni,rzi,rpi,rmi}.sat: clamped to the range in FP32 first (the bounds are integers, so
// clamping and rounding commute; ±Inf lands on them), then rounded by vcvtps2dq with the mode in
// the instruction (rna: truncate, then one step away where the exact fraction is >= 1/2); NaN -> 0.
template <Round kR>
ATTNSIM_TARGET_AVX512 inline __m512i round_to_int_vec(__m512 v, __m512 lo, __m512 hi) {
  const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  const __m512 c = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
  __m512i q;
  if constexpr (kR != Round::kNearestAway) {
    q = _mm512_cvt_roundps_epi32(c, kRoundImm(kR));
  } else {
    const __m512 t = _mm512_roundscale_ps(c, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m512 frac = _mm512_abs_ps(_mm512_sub_ps(c, t));  // exact: |c| <= 128
    const __mmask16 up = _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    q = _mm512_cvtt_roundps_epi32(t, _MM_FROUND_NO_EXC);
    const __mmask16 cneg = _mm512_cmp_ps_mask(c, _mm512_setzero_ps(), _CMP_LT_OQ);
    q = _mm512_mask_add_epi32(q, up & __mmask16(~cneg), q, _mm512_set1_epi32(1));
    q = _mm512_mask_sub_epi32(q, up & cneg, q, _mm512_set1_epi32(1));
  }
  return _mm512_maskz_mov_epi32(__mmask16(~nan), q);
}

template <Round kR>
ATTNSIM_TARGET_AVX512 void round_to_int_kernel(const float* x, std::size_t n, std::int32_t* out,
                                               int bits) {
  const __m512 lo = _mm512_set1_ps(-float(1 << (bits - 1)));
  const __m512 hi = _mm512_set1_ps(float((1 << (bits - 1)) - 1));
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_si512(out + i, round_to_int_vec<kR>(_mm512_loadu_ps(x + i), lo, hi));
  if (i < n) {
    const __mmask16 m = tail_mask(n - i);
    _mm512_mask_storeu_epi32(out + i, m, round_to_int_vec<kR>(_mm512_maskz_loadu_ps(m, x + i), lo, hi));
  }
}

// The same on AVX2: the clamp, then vroundps with the mode in its immediate (the clamped value is
// within [-128, 127], so the rounded value converts exactly); rna truncates and steps away where
// the exact fraction is >= 1/2; NaN -> 0 (the clamp's vmaxps would give lo: masked after).
template <Round kR>
ATTNSIM_TARGET_AVX2 inline __m256i round_to_int_vec8(__m256 v, __m256 lo, __m256 hi) {
  const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  const __m256 c = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
  __m256i q;
  if constexpr (kR != Round::kNearestAway) {
    q = _mm256_cvttps_epi32(_mm256_round_ps(c, kRoundImm(kR)));
  } else {
    const __m256 t = _mm256_round_ps(c, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 frac = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(c, t));
    const __m256 up = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    // One step away from zero: t ± 1 in FP32 (exact), by c's sign.
    const __m256 step = _mm256_and_ps(up, _mm256_or_ps(_mm256_set1_ps(1.0f),
                                                       _mm256_and_ps(c, _mm256_set1_ps(-0.0f))));
    q = _mm256_cvttps_epi32(_mm256_add_ps(t, step));
  }
  return _mm256_andnot_si256(_mm256_castps_si256(nan), q);
}

template <Round kR>
ATTNSIM_TARGET_AVX2 void round_to_int_kernel_avx2(const float* x, std::size_t n, std::int32_t* out,
                                                  int bits) {
  const __m256 lo = _mm256_set1_ps(-float(1 << (bits - 1)));
  const __m256 hi = _mm256_set1_ps(float((1 << (bits - 1)) - 1));
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        round_to_int_vec8<kR>(_mm256_loadu_ps(x + i), lo, hi));
  if (i < n) {
    const int left = int(n - i);
    const __m256i m = avx2_lanes::first8(left);
    _mm256_maskstore_epi32(reinterpret_cast<int*>(out + i), m,
                           round_to_int_vec8<kR>(_mm256_maskload_ps(x + i, m), lo, hi));
  }
}

// Dispatch on the format and the rounding mode (both run-time values, resolved once per call).
template <class Fmt, class F>
void with_round(Round r, F&& f) {
  switch (r) {
    case Round::kNearestEven:
      return f.template operator()<Fmt, Round::kNearestEven>();
    case Round::kNearestAway:
      return f.template operator()<Fmt, Round::kNearestAway>();
    case Round::kTowardZero:
      return f.template operator()<Fmt, Round::kTowardZero>();
    case Round::kUp:
      return f.template operator()<Fmt, Round::kUp>();
    case Round::kDown:
      return f.template operator()<Fmt, Round::kDown>();
  }
}

// Runs f.operator()<Fmt, kR>() for the encoding e of the width `bits` (0: any width); false for
// the encodings without a kernel.
template <class F>
bool with_format(Encoding e, Round r, int bits, F&& f) {
  if ((bits == 0 || bits == 16) && e == Encoding::kBf16) return with_round<bf16>(r, f), true;
  if ((bits == 0 || bits == 16) && e == Encoding::kFp16) return with_round<fp16>(r, f), true;
  if ((bits == 0 || bits == 8) && e == Encoding::kE4m3fn) return with_round<e4m3fn>(r, f), true;
  if ((bits == 0 || bits == 8) && e == Encoding::kE5m2) return with_round<e5m2>(r, f), true;
  return false;
}


}  // namespace
#endif  // ATTNSIM_X86_KERNELS

// ---- the instruction sets' entry points (numerics/dispatch.cpp's tables) ----------------------

namespace {

constexpr std::size_t kPassMax = std::size_t{1} << 30;

}  // namespace

#if ATTNSIM_X86_KERNELS
namespace kernels_x86 {

namespace {

// Each entry takes its kernel when MXCSR keeps subnormals (else the reference: a -ffast-math
// library's start-up code may set DAZ/FTZ) and the format has one, else the reference.
// The vector passes of each instruction set, for the drivers below.
struct Avx512Passes {
  using Lanes = SpecialLanes;
  static Lanes lanes(SpecialCodes c) { return special_lanes(c); }
  template <class Fmt, Round kR, bool kSat, class Out>
  static std::size_t encode(const float* x, std::size_t n, Out* out, const Lanes& sp,
                            SlowLanes& s) {
    return encode_pass<Fmt, kR, kSat>(x, n, out, sp, s);
  }
  template <class Fmt, Round kR>
  static std::size_t round(const float* x, std::size_t n, float* out, const Lanes& sp,
                           SlowLanes& s) {
    return round_pass<Fmt, kR>(x, n, out, sp, s);
  }
};
struct Avx2Passes {
  using Lanes = SpecialLanes8;
  static Lanes lanes(SpecialCodes c) { return special_lanes8(c); }
  template <class Fmt, Round kR, bool kSat, class Out>
  static std::size_t encode(const float* x, std::size_t n, Out* out, const Lanes& sp,
                            SlowLanes& s) {
    return encode_pass_avx2<Fmt, kR, kSat>(x, n, out, sp, s);
  }
  template <class Fmt, Round kR>
  static std::size_t round(const float* x, std::size_t n, float* out, const Lanes& sp,
                           SlowLanes& s) {
    return round_pass_avx2<Fmt, kR>(x, n, out, sp, s);
  }
};

// encode_array by the passes of Passes where MXCSR keeps subnormals (else the reference: a
// -ffast-math library's start-up code may set DAZ/FTZ) and the format has a kernel: passes of at
// most kPassMax elements, the NaN lanes each leaves finished by the scalar encoder.
template <class Passes, class Out>
void encode_by(Encoding e, const float* x, std::size_t n, Out* out, Policy p) {
  check_width(e, int(8 * sizeof(Out)), "encode_array");
  if (mxcsr_keeps_subnormals() &&
      with_format(e, p.round, sizeof(Out) == 4 ? 0 : int(8 * sizeof(Out)),
                  [&]<class Fmt, Round kR>() {
                    const SpecialCodes sc = special_codes(int(sizeof(Out)), e, p);
                    const bool sat = policy_saturates<Fmt, kR>(sc);
                    SlowLanes s;
                    const typename Passes::Lanes sp = Passes::lanes(sc);
                    for (std::size_t i = 0; i < n;) {
                      s.n = 0;
                      const std::size_t len = std::min(n - i, kPassMax);
                      std::size_t done;
                      if constexpr (kClamps<Fmt, kR>) {
                        done = sat ? Passes::template encode<Fmt, kR, true>(x + i, len, out + i, sp, s)
                                   : Passes::template encode<Fmt, kR, false>(x + i, len, out + i, sp, s);
                      } else {
                        done = Passes::template encode<Fmt, kR, false>(x + i, len, out + i, sp, s);
                      }
                      for (std::size_t k = 0; k < s.n; ++k)
                        out[i + s.at[k]] = Out(encode_float_bits(e, f32_from_bits(s.bits[k]), p));
                      i += done;
                    }
                  })) {
    return;
  }
  encode_ref_loop(e, x, n, out, p);
}

// round_array likewise.
template <class Passes>
void round_by(Encoding e, const float* x, std::size_t n, float* out, Policy p) {
  if (mxcsr_keeps_subnormals() && with_format(e, p.round, 0, [&]<class Fmt, Round kR>() {
        SlowLanes s;
        const typename Passes::Lanes sp = Passes::lanes(special_codes(0, e, p));
        for (std::size_t i = 0; i < n;) {
          s.n = 0;
          const std::size_t done =
              Passes::template round<Fmt, kR>(x + i, std::min(n - i, kPassMax), out + i, sp, s);
          for (std::size_t k = 0; k < s.n; ++k)
            out[i + s.at[k]] = round_to(e, f32_from_bits(s.bits[k]), p);
          i += done;
        }
      })) {
    return;
  }
  round_array_ref(e, x, n, out, p);
}

template <class In>
void decode_avx512(Encoding e, const In* in, std::size_t n, float* out) {
  check_width(e, int(8 * sizeof(In)), "decode_array");
  if (mxcsr_keeps_subnormals()) {
    if constexpr (sizeof(In) == 2) {
      if (e == Encoding::kBf16) return decode_kernel<bf16>(in, n, out, 0, 0);
      if (e == Encoding::kFp16) return decode_kernel<fp16>(in, n, out, 0, 0);
    } else {
      const std::uint32_t nan_pos = f32_bits(decode_float_bits(e, 0x7F));
      const std::uint32_t nan_neg = f32_bits(decode_float_bits(e, 0xFF));
      if (e == Encoding::kE4m3fn) return decode_kernel<e4m3fn>(in, n, out, nan_pos, nan_neg);
      if (e == Encoding::kE5m2) return decode_kernel<e5m2>(in, n, out, 0, 0);
    }
  }
  decode_ref_loop(e, in, n, out);
}

}  // namespace

void encode_u32_avx512(Encoding e, const float* x, std::size_t n, std::uint32_t* out, Policy p) {
  encode_by<Avx512Passes>(e, x, n, out, p);
}
void encode_u16_avx512(Encoding e, const float* x, std::size_t n, std::uint16_t* out, Policy p) {
  encode_by<Avx512Passes>(e, x, n, out, p);
}
void encode_u8_avx512(Encoding e, const float* x, std::size_t n, std::uint8_t* out, Policy p) {
  encode_by<Avx512Passes>(e, x, n, out, p);
}
void encode_u32_avx2(Encoding e, const float* x, std::size_t n, std::uint32_t* out, Policy p) {
  encode_by<Avx2Passes>(e, x, n, out, p);
}
void encode_u16_avx2(Encoding e, const float* x, std::size_t n, std::uint16_t* out, Policy p) {
  encode_by<Avx2Passes>(e, x, n, out, p);
}
void encode_u8_avx2(Encoding e, const float* x, std::size_t n, std::uint8_t* out, Policy p) {
  encode_by<Avx2Passes>(e, x, n, out, p);
}
void decode_u16_avx512(Encoding e, const std::uint16_t* in, std::size_t n, float* out) {
  decode_avx512(e, in, n, out);
}
void decode_u8_avx512(Encoding e, const std::uint8_t* in, std::size_t n, float* out) {
  decode_avx512(e, in, n, out);
}

void round_avx512(Encoding e, const float* x, std::size_t n, float* out, Policy p) {
  round_by<Avx512Passes>(e, x, n, out, p);
}
void round_avx2(Encoding e, const float* x, std::size_t n, float* out, Policy p) {
  round_by<Avx2Passes>(e, x, n, out, p);
}

namespace {

// f.operator()<kR>() for the rounding mode r (a run-time value, resolved once per call).
template <class F>
void with_int_round(Round r, F&& f) {
  switch (r) {
    case Round::kNearestEven:
      return f.template operator()<Round::kNearestEven>();
    case Round::kNearestAway:
      return f.template operator()<Round::kNearestAway>();
    case Round::kTowardZero:
      return f.template operator()<Round::kTowardZero>();
    case Round::kUp:
      return f.template operator()<Round::kUp>();
    case Round::kDown:
      return f.template operator()<Round::kDown>();
  }
}

}  // namespace

void round_to_int_avx512(const float* x, std::size_t n, std::int32_t* out, Round r, int bits) {
  if (!mxcsr_keeps_subnormals() || (bits != 8 && bits != 4 && bits != 2))
    return round_to_int_array_ref(x, n, out, r, bits);
  with_int_round(r, [&]<Round kR>() { round_to_int_kernel<kR>(x, n, out, bits); });
}

void round_to_int_avx2(const float* x, std::size_t n, std::int32_t* out, Round r, int bits) {
  if (!mxcsr_keeps_subnormals() || (bits != 8 && bits != 4 && bits != 2))
    return round_to_int_array_ref(x, n, out, r, bits);
  with_int_round(r, [&]<Round kR>() { round_to_int_kernel_avx2<kR>(x, n, out, bits); });
}

}  // namespace kernels_x86
#endif  // ATTNSIM_X86_KERNELS

// ---- the public functions: the active set's entries (numerics/dispatch.hpp) --------------------

void encode_array(Encoding e, const float* x, std::size_t n, std::uint32_t* out, Policy p) {
  array_kernels().encode_u32(e, x, n, out, p);
}
void encode_array(Encoding e, const float* x, std::size_t n, std::uint16_t* out, Policy p) {
  array_kernels().encode_u16(e, x, n, out, p);
}
void encode_array(Encoding e, const float* x, std::size_t n, std::uint8_t* out, Policy p) {
  array_kernels().encode_u8(e, x, n, out, p);
}
void decode_array(Encoding e, const std::uint16_t* in, std::size_t n, float* out) {
  array_kernels().decode_u16(e, in, n, out);
}
void decode_array(Encoding e, const std::uint8_t* in, std::size_t n, float* out) {
  array_kernels().decode_u8(e, in, n, out);
}
void round_array(Encoding e, const float* x, std::size_t n, float* out, Policy p) {
  if (x == out && (e == Encoding::kFp32 || e == Encoding::kFp64)) return;  // a copy onto itself
  array_kernels().round(e, x, n, out, p);
}
void round_to_int_array(const float* x, std::size_t n, std::int32_t* out, Round r, int bits) {
  if (bits != 8 && bits != 4 && bits != 2)
    throw std::invalid_argument("round_to_int_array: bits must be 8, 4 or 2");
  array_kernels().round_to_int(x, n, out, r, bits);
}

}  // namespace attnsim
