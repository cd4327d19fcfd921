// Bit-exact models of tensor-core matrix instructions (see mma.hpp and numerics/README.md).
#include "numerics/mma.hpp"

#include <cstring>
#include <stdexcept>

#include "formats/float16.hpp"
#include "formats/float8.hpp"
#include "formats/intn.hpp"

namespace attnsim {

namespace {

// H100 parameters (tensor-core-numerics.md section 6.1, confirmed by data/hw/h100/mma_h100.h5).
constexpr BlockFmaParams kHopperHmmaF32{16, 2, 23, false, -133, false};
constexpr BlockFmaParams kHopperHmmaF16{16, 2, 10, true, -21, true};
constexpr BlockFmaParams kHopperQgmmaF32{32, -10, 13, false, -133, false};

FloatParts decode_bits(MmaIn in, std::uint32_t bits) {
  switch (in) {
    case MmaIn::kFp16: return decompose<fp16>(std::uint16_t(bits));
    case MmaIn::kBf16: return decompose<bf16>(std::uint16_t(bits));
    case MmaIn::kE4m3: return decompose<e4m3fn>(std::uint8_t(bits));
    case MmaIn::kE5m2: return decompose<e5m2>(std::uint8_t(bits));
    default: break;
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
    case MmaIn::kFp16: return fp16_t;
    case MmaIn::kBf16: return bf16_t;
    case MmaIn::kE4m3: return e4m3_t;
    case MmaIn::kE5m2: return e5m2_t;
    default: break;
  }
  throw std::logic_error("decode_table: integer format");
}

int man_bits(MmaIn in) {
  switch (in) {
    case MmaIn::kFp16: return 10;
    case MmaIn::kBf16: return 7;
    case MmaIn::kE4m3: return 3;
    case MmaIn::kE5m2: return 2;
    default: return 0;
  }
}

struct Term {
  bool neg;
  std::uint64_t sig;  // 23 fraction bits
  int e;              // exponent of the sig's unit bit (not renormalised)
};

constexpr Policy kExact{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};

}  // namespace

std::uint32_t block_fma(MmaIn in, const std::uint32_t* a, const std::uint32_t* b, int n, std::uint32_t c,
                        const BlockFmaParams& p) {
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
  if (nt == 0) return 0;  // +0 (the sign of an exact zero sum is +0; see numerics/README.md)
  int max_e = p.min_exp;
  for (int i = 0; i < nt; ++i) max_e = terms[i].e > max_e ? terms[i].e : max_e;
  std::int64_t acc = 0;
  for (int i = 0; i < nt; ++i) {
    std::uint64_t v = p.neab >= 0 ? (terms[i].sig << p.neab) : (terms[i].sig >> -p.neab);
    const int sh = max_e - terms[i].e;
    v = sh >= 63 ? 0 : (v >> sh);  // magnitude truncation, no sticky bit
    acc += terms[i].neg ? -std::int64_t(v) : std::int64_t(v);
  }
  if (acc == 0) return 0;
  const bool neg = acc < 0;
  std::uint64_t mag = neg ? std::uint64_t(-acc) : std::uint64_t(acc);
  const int lsb = max_e - 23 - p.neab;  // block value = mag * 2^lsb
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
  if (q == 0) return neg && !p.acc_fp16 ? 0x80000000u : (neg ? 0x8000u : 0u);
  // q * 2^(e - out_man) is exactly representable in the accumulator format, or overflows to Inf
  // (the model's overflow rule; IEEE RZ would give max finite).
  const FloatParts result{FloatParts::kFinite, neg, e - p.out_man, q, 0};
  return p.acc_fp16 ? std::uint32_t(round_pack<fp16>(result, kExact)) : round_pack<fp32>(result, kExact);
}

const std::vector<MmaInstrInfo>& mma_instructions() {
  static const std::vector<MmaInstrInfo> k{
      {MmaInstr::kHmmaF16F32, "sm90.hmma.f16.f32", 16, 8, 16, MmaIn::kFp16, 16, 0,
       "block FMA: 16 products + C per k16, window 23+2 bits, truncated terms, FP32 RZ",
       "H100 recordings data/hw/h100/mma_h100.h5 (designed + random, K=16 and chained K=128)"},
      {MmaInstr::kHmmaBf16F32, "sm90.hmma.bf16.f32", 16, 8, 16, MmaIn::kBf16, 16, 0,
       "as sm90.hmma.f16.f32 with bf16 inputs", "H100 recordings (K=16, K=128)"},
      {MmaInstr::kHmmaF16F16, "sm90.hmma.f16.f16", 16, 8, 16, MmaIn::kFp16, 16, 1,
       "block FMA: 16 products + fp16 C, window 23+2 bits, FP16 RNE, alignment floor 2^-21",
       "H100 recordings (K=16, K=128)"},
      {MmaInstr::kMmaSyncE4m3F32, "sm90.mma_sync.e4m3.f32", 16, 8, 32, MmaIn::kE4m3, 8, 0,
       "ptxas emulation: P1 = HMMA(k in {4t,4t+1,16+4t,16+4t+1}, C=0); P2 = HMMA(other 16 k, C=P1); "
       "D = fadd.rn(C, P2)",
       "SASS F2FP.F16.E4M3.UNPACK_B + 2x HMMA.16816.F32 + FADD (data/hw/h100/mma_probe_sass.txt.gz); "
       "H100 recordings"},
      {MmaInstr::kMmaSyncE5m2F32, "sm90.mma_sync.e5m2.f32", 16, 8, 32, MmaIn::kE5m2, 8, 0,
       "as sm90.mma_sync.e4m3.f32 with e5m2 inputs", "SASS F2FP.F16.E5M2.UNPACK_B + 2x HMMA + FADD; H100 recordings"},
      {MmaInstr::kWgmmaE4m3F32, "sm90.wgmma.e4m3.f32", 64, 8, 32, MmaIn::kE4m3, 8, 0,
       "block FMA: 32 products + C, window 13 bits (FP22), truncated terms, result RZ to 13 bits",
       "SASS QGMMA.64x8x32.F32.E4M3.E4M3; H100 recordings"},
      {MmaInstr::kWgmmaE5m2F32, "sm90.wgmma.e5m2.f32", 64, 8, 32, MmaIn::kE5m2, 8, 0,
       "as sm90.wgmma.e4m3.f32 with e5m2 inputs", "SASS QGMMA.64x8x32.F32.E5M2.E5M2; H100 recordings"},
      {MmaInstr::kImmaS8, "sm90.imma.s8.s32", 16, 8, 32, MmaIn::kS8, 8, 2,
       "exact integer dot product plus C, wrapping modulo 2^32", "SASS IMMA.16832.S8.S8; H100 recordings"},
      {MmaInstr::kImmaS8Sat, "sm90.imma.s8.s32.satfinite", 16, 8, 32, MmaIn::kS8, 8, 2,
       "exact integer dot product plus C, clamped to [INT32_MIN, INT32_MAX]",
       "SASS IMMA.16832.S8.S8.SAT; H100 recordings"},
      {MmaInstr::kImmaS4, "sm90.imma.s4.s32", 16, 8, 64, MmaIn::kS4, 4, 2,
       "ptxas emulation: s4 widened to s8, two IMMA.16832 from zero, integer adds: exact, wrapping",
       "SASS 2x IMMA.16832.S8.S8 ... RZ in the helper routine; H100 recordings"},
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
  return int_from_bits<s4>(std::uint8_t(bits));
}

}  // namespace

std::uint32_t mma_dot(MmaInstr instr, const std::uint32_t* a, const std::uint32_t* b, int K, std::uint32_t c) {
  const MmaInstrInfo& info = mma_info(instr);
  if (K % info.k != 0) throw std::invalid_argument("K is not a multiple of the instruction's k");
  for (int k0 = 0; k0 < K; k0 += info.k) {
    const std::uint32_t* ak = a + k0;
    const std::uint32_t* bk = b + k0;
    switch (instr) {
      case MmaInstr::kHmmaF16F32:
        c = block_fma(MmaIn::kFp16, ak, bk, 16, c, kHopperHmmaF32);
        break;
      case MmaInstr::kHmmaBf16F32:
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
        auto widen = [in](std::uint32_t x) -> std::uint32_t {
          return in == MmaIn::kE4m3 ? convert<fp16, e4m3fn>(std::uint8_t(x), kExact)
                                    : convert<fp16, e5m2>(std::uint8_t(x), kExact);
        };
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
      case MmaInstr::kImmaS8:
      case MmaInstr::kImmaS4:
      case MmaInstr::kImmaS8Sat: {
        std::int64_t s = 0;
        for (int k = 0; k < info.k; ++k) s += int_value(info.in, ak[k]) * int_value(info.in, bk[k]);
        if (instr == MmaInstr::kImmaS8Sat) {
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

std::uint32_t mma_element(const std::uint8_t* row, int bits, int j) {
  if (bits == 16) return std::uint32_t(row[2 * j]) | (std::uint32_t(row[2 * j + 1]) << 8);
  if (bits == 8) return row[j];
  return (row[j / 2] >> (4 * (j & 1))) & 0xFu;
}

void mma_gemm(MmaInstr instr, int M, int N, int K, const std::uint8_t* A, const std::uint8_t* Bt,
              const std::uint32_t* C, std::uint32_t* D) {
  const MmaInstrInfo& info = mma_info(instr);
  const std::size_t row_bytes = std::size_t(K) * info.in_bits / 8;
  std::vector<std::uint32_t> a(static_cast<std::size_t>(K), 0u), b(static_cast<std::size_t>(K), 0u);
  for (int m = 0; m < M; ++m) {
    for (int j = 0; j < K; ++j) a[j] = mma_element(A + m * row_bytes, info.in_bits, j);
    for (int n = 0; n < N; ++n) {
      for (int j = 0; j < K; ++j) b[j] = mma_element(Bt + n * row_bytes, info.in_bits, j);
      D[std::size_t(m) * N + n] = mma_dot(instr, a.data(), b.data(), K, C[std::size_t(m) * N + n]);
    }
  }
}

}  // namespace attnsim
