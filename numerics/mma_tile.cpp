// The tile form of the instruction models (see mma_tile.hpp): the per-output reference, the choice
// of kernel, the packing tables and workspaces, and the reference blocks the kernels fall back to.
#include "numerics/mma_tile.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "formats/float16.hpp"
#include "formats/float32.hpp"
#include "numerics/dispatch.hpp"
#include "numerics/isa.hpp"
#include "numerics/mma_tile_kernels.hpp"

namespace attnsim {

using namespace mma_tile_detail;

namespace {

// What the float kernel needs to know about a model, or nullopt-like `ok = false` when the model
// is outside what it computes (then the reference runs).
struct FloatModel {
  bool ok = false;
  FloatTilePlan plan;  // model fields only
  PackSpec pack;       // for encodings (the operand's own kind); kValue specs are made per tile
};

// Value and unit-bit exponent tables of the 8-bit float formats, from decompose_bits (the
// reference's decoding): as themselves, or widened exactly to fp16 first (the emulated FP8
// mma.sync aligns on the fp16 encoding's exponent: an e4m3 subnormal is an fp16 normal).
struct Table8 {
  std::array<float, 256> value{};
  std::array<std::int32_t, 256> exp{};
};

Table8 make_table8(Encoding in, bool widened) {
  Table8 t;
  for (std::uint32_t x = 0; x < 256; ++x) {
    const FloatParts p0 = decompose_bits(in, x);
    const FloatParts p = widened ? decompose<fp16>(round_pack<fp16>(p0, kCudaRn)) : p0;
    const int man = widened ? 10 : encoding_traits(in).man_bits;
    t.value[x] = decode_float_bits(in, x);
    t.exp[x] = p.kind == FloatParts::kZero     ? kNoVote
               : p.kind == FloatParts::kFinite ? p.exp + man
                                               : kSpecial;
  }
  return t;
}

const Table8& table8(Encoding in, bool widened) {
  static const std::array<Table8, 4> tables = {
      make_table8(Encoding::kE4m3fn, false), make_table8(Encoding::kE5m2, false),
      make_table8(Encoding::kE4m3fn, true), make_table8(Encoding::kE5m2, true)};
  return tables[(in == Encoding::kE5m2 ? 1 : 0) + (widened ? 2 : 0)];
}

const std::uint16_t* widen_table(Encoding in) {
  static const auto tables = [] {
    std::array<std::array<std::uint16_t, 256>, 2> t{};
    for (std::uint32_t x = 0; x < 256; ++x) {
      t[0][x] = round_pack<fp16>(decompose_bits(Encoding::kE4m3fn, x), kCudaRn);
      t[1][x] = round_pack<fp16>(decompose_bits(Encoding::kE5m2, x), kCudaRn);
    }
    return t;
  }();
  return tables[in == Encoding::kE5m2 ? 1 : 0].data();
}

FloatModel float_model(const DotModel& m) {
  FloatModel f;
  if (m.kind != DotModel::kMma) return f;
  const MmaInstrInfo& info = mma_info(m.instr);
  if (info.composition != MmaComposition::kBlockChain &&
      info.composition != MmaComposition::kFp8ViaHmma)
    return f;
  const BlockFmaParams& p = info.params;
  FloatTilePlan& pl = f.plan;
  pl.via_hmma = info.composition == MmaComposition::kFp8ViaHmma;
  pl.block = pl.via_hmma ? 16 : p.block;
  if (pl.block != 8 && pl.block != 16 && pl.block != 32) return f;
  pl.kw = 23 + p.neab;
  pl.min_exp = p.min_exp;
  pl.acc_fp16 = p.acc_fp16;
  if (!p.acc_fp16 && !p.out_rne && p.out_man == 23) {
    pl.out = BlockOut::kF32Rz;
  } else if (!p.acc_fp16 && !p.out_rne && p.out_man == 13) {
    pl.out = BlockOut::kFp22;
  } else if (p.acc_fp16 && p.out_rne && p.out_man == 10) {
    pl.out = BlockOut::kF16Rne;
  } else {
    return f;
  }
  // Every term is below 2^(kw + 2) in units of the quantum (a product of two significands
  // below 2, C below 2^(e+1)): the products' int32 sum needs block · 2^(kw + 2) <= 2^31; C's term
  // may carry it further (checked per block where it can).
  if (pl.kw < 0 || (std::int64_t{pl.block} << (pl.kw + 2)) > (std::int64_t{1} << 31)) return f;
  pl.check_overflow =
      (std::int64_t{pl.block} << (pl.kw + 2)) + (std::int64_t{1} << (pl.kw + 1)) > INT32_MAX;
  // The kernel's exact range of the alignment exponent maxE: the scale 2^(kw − maxE) and the
  // quantum 2^(maxE − kw) normal FP32 numbers, a bf16 product that underflows FP32 scaled below
  // 1/2 (so it truncates to 0 as its exact value does), no bf16 product at 2^128, results
  // S · 2^(maxE − kw) with |S| < 2^32 below 2^128 and never subnormal.
  pl.lo = pl.kw - 125;
  pl.hi = pl.kw + 96 < 125 ? pl.kw + 96 : 125;
  pl.promote = m.promote;
  pl.block_in = pl.via_hmma ? Encoding::kFp16 : info.in;
  pl.a_enc = info.in;
  pl.b_enc = mma_in_b(info);
  pl.params = p;
  switch (info.in) {
    case Encoding::kFp16:
      f.pack.kind = DecodeKind::kFp16;
      break;
    case Encoding::kBf16:
      f.pack.kind = DecodeKind::kBf16;
      break;
    case Encoding::kE4m3fn:
    case Encoding::kE5m2: {
      const Table8& t = table8(info.in, pl.via_hmma);
      f.pack.kind = DecodeKind::kTable8;
      f.pack.table_value = t.value.data();
      f.pack.table_exp = t.exp.data();
      break;
    }
    default:
      return f;
  }
  if (pl.via_hmma) pl.widen = widen_table(info.in);
  f.pack.permute32 = pl.via_hmma;
  f.ok = true;
  return f;
}

bool integer_model(const DotModel& m) {
  if (m.kind != DotModel::kMma) return false;
  const MmaComposition c = mma_info(m.instr).composition;
  return c == MmaComposition::kIntegerWrap || c == MmaComposition::kIntegerSat;
}

// [[maybe_unused]] (here, workspace() and value_spec()): only the x86 kernels' paths call them,
// which a build without ATTNSIM_X86_KERNELS does not have.
[[maybe_unused]] ElemKind elem_kind(Encoding e) {
  return e == Encoding::kU8 ? ElemKind::kU8 : e == Encoding::kS4 ? ElemKind::kS4 : ElemKind::kS8;
}

// The integer kernel for a model under the active instruction set: AMX for the wrapping models
// (the tile instructions have every sign variant; .satfinite needs each instruction's own sum),
// VNNI for all, else none.
// The integer kernel of a model in the active set of the dispatch table (numerics/dispatch.hpp).
enum class IntKernel { kNone, kAmx, kVnni, kAvx2 };
IntKernel int_kernel(const DotModel& m) {
  if (!integer_model(m)) return IntKernel::kNone;
  const bool sat = mma_info(m.instr).composition == MmaComposition::kIntegerSat;
  const char* name = sat ? array_kernels().int_sat : array_kernels().int_wrap;
  if (!name) return IntKernel::kNone;
  if (std::strcmp(name, "int8.amx") == 0) return IntKernel::kAmx;
  if (std::strcmp(name, "int8.vnni") == 0) return IntKernel::kVnni;
  return IntKernel::kAvx2;
}

// A packed A kept for the next calls with its key (MmaTile::a_key): the buffers, and what the
// packing depended on (model, shape, kernel).
struct KeptA {
  std::uint64_t key = 0;
  DotModel model{};
  int rows = 0, n = 0, kind = 0;  // kind: 1 float kernel, 2 integer kernel (with rows_pad, chunk)
  int rows_pad = 0, chunk = 0;
  std::vector<float> av;
  std::vector<std::uint32_t> ae;
  std::vector<std::uint8_t> a8;
  std::vector<std::int16_t> a16;
  std::vector<std::int32_t> rsum;
  bool matches(const MmaTile& t, const DotModel& m, int k, int rp, int ch) const {
    return t.a_key != 0 && key == t.a_key && model == m && rows == t.rows && n == t.n &&
           kind == k && rows_pad == rp && chunk == ch;
  }
  void remember(const MmaTile& t, const DotModel& m, int k, int rp, int ch) {
    key = t.a_key;
    model = m;
    rows = t.rows;
    n = t.n;
    kind = k;
    rows_pad = rp;
    chunk = ch;
  }
};

// A packed B kept with its key (MmaTile::b_key), and what the packing depended on: the float
// kernel's values and exponents (kind 1) or the integer kernels' bytes and column sums (2, 3).
struct KeptB {
  std::uint64_t key = 0;
  DotModel model{};
  int cols = 0, n = 0, kind = 0, np = 0, chunk = 0;
  std::uint64_t used = 0;  // when it was last used (the older of two slots is replaced)
  std::vector<float> bv;
  std::vector<std::int16_t> be;
  std::vector<std::int32_t> b4, csum;
  bool matches(const MmaTile& t, const DotModel& m, int k, int p, int ch) const {
    return t.b_key != 0 && key == t.b_key && model == m && cols == t.cols && n == t.n &&
           kind == k && np == p && chunk == ch;
  }
};

// Per-thread packing buffers, grown as needed (the kernels get raw pointers).
struct Workspace {
  std::vector<float> av, bv;
  std::vector<std::uint32_t> ae;
  std::vector<std::int16_t> be;
  std::vector<std::uint8_t> a8;
  std::vector<std::int16_t> a16;
  std::vector<std::int32_t> b4, rsum, csum, cbuf;
  KeptA kept;
  KeptB kept_b[2];
  std::uint64_t clock = 0;
  // The slot holding B for this call: a matching kept one (*hit), else the older slot, taken
  // for this key; null for an unkeyed call (the scratch buffers then).
  KeptB* slot_for(const MmaTile& t, const DotModel& m, int kind, int np, int chunk, bool* hit) {
    *hit = false;
    if (t.b_key == 0) return nullptr;
    ++clock;
    for (KeptB& k : kept_b)
      if (k.matches(t, m, kind, np, chunk)) {
        k.used = clock;
        *hit = true;
        return &k;
      }
    KeptB& k = kept_b[0].used <= kept_b[1].used ? kept_b[0] : kept_b[1];
    k.key = t.b_key;
    k.model = m;
    k.cols = t.cols;
    k.n = t.n;
    k.kind = kind;
    k.np = np;
    k.chunk = chunk;
    k.used = clock;
    return &k;
  }
};
[[maybe_unused]] Workspace& workspace() {
  thread_local Workspace w;
  return w;
}

}  // namespace

long g_fallbacks = 0;
namespace {

// An element value as its encoding (exact: the value is representable).
std::uint32_t encode_value(Encoding e, float v) {
  return is_float_encoding(e) ? encode_float_bits(e, v, kCudaRn)
                              : int_to_encoding(e, std::int32_t(v));
}

// The value-operand spec: the format's unit-bit exponent floor (1 − bias; the emulated FP8
// mma.sync aligns on the fp16 encoding's, whose floor is fp16's).
[[maybe_unused]] PackSpec value_spec(const FloatTilePlan& pl, Encoding e) {
  PackSpec s;
  s.kind = DecodeKind::kValue;
  const EncodingTraits& t = encoding_traits(pl.via_hmma ? Encoding::kFp16 : e);
  s.emin = 2 - (1 << (t.exp_bits - 1));
  s.permute32 = pl.via_hmma;
  return s;
}

}  // namespace

std::uint32_t mma_tile_detail::tile_a_bits(const MmaTile& t, Encoding e, int i, int k) {
  const int src = t.k_index ? t.k_index[k] : k;
  if (src < 0) return 0u;
  const std::ptrdiff_t at = std::ptrdiff_t(i) * t.lda + src;
  return t.a_values ? encode_value(e, t.a_values[at]) : t.a[at];
}

std::uint32_t mma_tile_detail::tile_b_bits(const MmaTile& t, Encoding e, int k, int j) {
  const int src = t.k_index ? t.k_index[k] : k;
  if (src < 0) return 0u;
  const std::ptrdiff_t at = std::ptrdiff_t(src) * t.b_k + std::ptrdiff_t(j) * t.b_n;
  return t.b_values ? encode_value(e, t.b_values[at]) : t.b[at];
}

// --- Portable packing (the AVX2 kernel's; the AVX-512 one packs 16 lanes at a time) -------------

namespace {

// The raw 32-bit word of A(i, k) / B(k, j) as the AVX-512 loads read it (mma_tile_load_x86.hpp):
// an encoding or a value's bits; 0 beyond n or cols and at a k_index of -1.
std::uint32_t a_word(const MmaTile& t, int i, int k) {
  if (k >= t.n) return 0u;
  const int src = t.k_index ? t.k_index[k] : k;
  if (src < 0) return 0u;
  const std::uint32_t* base =
      t.a_values ? reinterpret_cast<const std::uint32_t*>(t.a_values) : t.a;
  return base[std::ptrdiff_t(i) * t.lda + src];
}
std::uint32_t b_word(const MmaTile& t, int k, int j) {
  if (j >= t.cols) return 0u;
  const int src = t.k_index ? t.k_index[k] : k;
  if (src < 0) return 0u;
  const std::uint32_t* base =
      t.b_values ? reinterpret_cast<const std::uint32_t*>(t.b_values) : t.b;
  return base[std::ptrdiff_t(src) * t.b_k + std::ptrdiff_t(j) * t.b_n];
}

// One word decoded as decode16 (mma_tile_avx512.cpp) decodes a lane: the value exact in FP32 and
// the unit-bit exponent, kNoVote for a zero, kSpecial for Inf/NaN.
void decode_word(const PackSpec& s, std::uint32_t x, float* v, std::int32_t* e) {
  if (s.kind == DecodeKind::kValue) {
    *v = f32_from_bits(x);
    const int ef = int((x >> 23) & 0xFFu);
    *e = (x & 0x7FFFFFFFu) == 0 ? kNoVote : ef == 0xFF ? kSpecial : std::max(ef - 127, s.emin);
    return;
  }
  if (s.kind == DecodeKind::kTable8) {
    *v = s.table_value[x & 0xFFu];
    *e = s.table_exp[x & 0xFFu];
    return;
  }
  int ef, bias, top;
  if (s.kind == DecodeKind::kFp16) {
    *v = decode_f32<fp16>(std::uint16_t(x));
    ef = int((x >> 10) & 0x1Fu);
    bias = 15;
    top = 0x1F;
  } else {  // bf16: the upper half of an FP32
    *v = f32_from_bits(x << 16);
    ef = int((x >> 7) & 0xFFu);
    bias = 127;
    top = 0xFF;
  }
  *e = (x & 0x7FFFu) == 0 ? kNoVote : ef == top ? kSpecial : std::max(ef, 1) - bias;
}

// Packed position of instruction position k under via_hmma's order (the inverse of
// via_hmma_source): bit 1 of k picks the HMMA, k / 4 and bit 0 the place in it.
int via_hmma_position(int k) {
  const int g = k & 31;
  return (k & ~31) + ((g & 2) ? 16 : 0) + (g >> 2) * 2 + (g & 1);
}

}  // namespace

void mma_tile_detail::pack_a_plain(const PackSpec& s, const MmaTile& t, float* av,
                                   std::uint32_t* ae) {
  for (int i = 0; i < t.rows; ++i)
    for (int k = 0; k < t.n; ++k) {
      float v;
      std::int32_t e;
      decode_word(s, a_word(t, i, k), &v, &e);
      const int p = s.permute32 ? via_hmma_position(k) : k;
      av[std::ptrdiff_t(i) * t.n + p] = v;
      // The exponent in both 16-bit halves (FloatTilePlan::ae).
      ae[std::ptrdiff_t(i) * t.n + p] = (std::uint32_t(e) & 0xFFFFu) | (std::uint32_t(e) << 16);
    }
}

void mma_tile_detail::pack_b_plain(const PackSpec& s, const MmaTile& t, int np, float* bv,
                                   std::int16_t* be) {
  for (int p = 0; p < t.n; ++p) {
    const int k = s.permute32 ? via_hmma_source(p) : p;
    for (int j = 0; j < np; ++j) {
      float v;
      std::int32_t e;
      decode_word(s, b_word(t, k, j), &v, &e);
      bv[std::ptrdiff_t(p) * np + j] = v;
      be[std::ptrdiff_t(p) * np + j] = std::int16_t(e);
    }
  }
}

namespace {

// An integer element as its value (int_mma_tile_x86.cpp int_values): s8/u8 bytes, s4 nibbles,
// or an exact integer held as FP32.
std::int32_t int_value(std::uint32_t x, ElemKind k) {
  switch (k) {
    case ElemKind::kValue:
      return std::int32_t(f32_from_bits(x));
    case ElemKind::kS8:
      return std::int32_t(std::int8_t(std::uint8_t(x & 0xFFu)));
    case ElemKind::kU8:
      return std::int32_t(x & 0xFFu);
    case ElemKind::kS4:
      return std::int32_t((x & 0x8u) ? (x & 0xFu) | ~0xFu : x & 0xFu);
  }
  return 0;
}

}  // namespace

void mma_tile_detail::pack_int16_a(const IntTilePlan& pl, std::int16_t* a16) {
  const MmaTile& t = *pl.tile;
  for (int i = 0; i < t.rows; ++i)
    for (int k = 0; k < t.n; ++k)
      a16[std::ptrdiff_t(i) * t.n + k] = std::int16_t(int_value(a_word(t, i, k), pl.a_kind));
}

namespace {

// B's 16-bit pairs where element (k, j) is word k·b_k + j·b_n of the encodings (no position index,
// no values): the kind's decoding inlined, the row pointers hoisted (the decode tile's B is the
// whole cache: this packing is as much work as its products).
template <ElemKind kKind>
void pack_int16_b_direct(const MmaTile& t, int np, std::int32_t* b2) {
  // 16 columns at a time over the whole reduction: where columns are rows of memory (K's keys,
  // b_k = 1) each column is read along its row, and each packed row gets 16 consecutive words.
  for (int j0 = 0; j0 < np; j0 += 16) {
    const int j1 = j0 + 16 < t.cols ? j0 + 16 : t.cols;
    for (int g = 0; g < t.n / 2; ++g) {
      const std::uint32_t* r0 = t.b + std::ptrdiff_t(2 * g) * t.b_k;
      const std::uint32_t* r1 = r0 + t.b_k;
      std::int32_t* out = b2 + std::ptrdiff_t(g) * np;
      for (int j = j0; j < j1; ++j) {
        const std::uint32_t lo = std::uint16_t(int_value(r0[std::ptrdiff_t(j) * t.b_n], kKind));
        const std::uint32_t hi = std::uint16_t(int_value(r1[std::ptrdiff_t(j) * t.b_n], kKind));
        out[j] = std::int32_t(lo | (hi << 16));
      }
      for (int j = j1 > j0 ? j1 : j0; j < j0 + 16; ++j) out[j] = 0;
    }
  }
}

}  // namespace

void mma_tile_detail::pack_int16_b(const IntTilePlan& pl, int np, std::int32_t* b2) {
  const MmaTile& t = *pl.tile;
  if (!t.k_index && !t.b_values) {
    switch (pl.b_kind) {
      case ElemKind::kS8:
        return pack_int16_b_direct<ElemKind::kS8>(t, np, b2);
      case ElemKind::kU8:
        return pack_int16_b_direct<ElemKind::kU8>(t, np, b2);
      case ElemKind::kS4:
        return pack_int16_b_direct<ElemKind::kS4>(t, np, b2);
      case ElemKind::kValue:
        break;
    }
  }
  for (int g = 0; g < t.n / 2; ++g)
    for (int j = 0; j < np; ++j) {
      const std::uint32_t lo = std::uint16_t(int_value(b_word(t, 2 * g, j), pl.b_kind));
      const std::uint32_t hi = std::uint16_t(int_value(b_word(t, 2 * g + 1, j), pl.b_kind));
      b2[std::ptrdiff_t(g) * np + j] = std::int32_t(lo | (hi << 16));
    }
}

std::uint32_t mma_tile_detail::float_block_fallback(const FloatTilePlan& pl, int i, int j, int kp0,
                                                    std::uint32_t p_bits) {
  ++g_fallbacks;
  const MmaTile& t = *pl.tile;
  std::uint32_t a[32], b[32];
  for (int q = 0; q < pl.block; ++q) {
    const int p = kp0 + q;
    const int k = pl.via_hmma ? via_hmma_source(p) : p;
    std::uint32_t x = tile_a_bits(t, pl.a_enc, i, k);
    std::uint32_t y = tile_b_bits(t, pl.b_enc, k, j);
    if (pl.widen) {
      x = pl.widen[x & 0xFFu];
      y = pl.widen[y & 0xFFu];
    }
    a[q] = x;
    b[q] = y;
  }
  // The accumulator's own bits: an fp16 value held exactly as FP32 (NaN stays NaN).
  const std::uint32_t c = pl.acc_fp16 ? encode<fp16>(f32_from_bits(p_bits), kCudaRn) : p_bits;
  const std::uint32_t r = block_fma_ref(pl.block_in, a, b, pl.block, c, pl.params);
  return pl.acc_fp16 ? f32_bits(decode_f32<fp16>(std::uint16_t(r))) : r;
}

void dot_mma_tile_ref(const DotModel& m, const MmaTile& t) {
  const MmaInstrInfo& info = mma_info(m.instr);
  const Encoding ea = info.in, eb = mma_in_b(info);
  const std::size_t n = static_cast<std::size_t>(t.n);
  std::vector<std::uint32_t> a(std::size_t(t.rows) * n), bcol(n);
  for (int i = 0; i < t.rows; ++i)
    for (int k = 0; k < t.n; ++k) a[std::size_t(i) * n + k] = tile_a_bits(t, ea, i, k);
  // Every C is read before any D is written (c may be d).
  std::vector<std::uint32_t> d(std::size_t(t.rows) * t.cols);
  for (int j = 0; j < t.cols; ++j) {
    for (int k = 0; k < t.n; ++k) bcol[std::size_t(k)] = tile_b_bits(t, eb, k, j);
    for (int i = 0; i < t.rows; ++i) {
      const std::uint32_t c = t.c ? t.c[std::ptrdiff_t(i) * t.ldc + j] : 0u;
      d[std::size_t(i) * t.cols + j] = dot_mma(m, a.data() + std::size_t(i) * n, bcol.data(), t.n, c);
    }
  }
  for (int i = 0; i < t.rows; ++i)
    for (int j = 0; j < t.cols; ++j) t.d[std::ptrdiff_t(i) * t.ldd + j] = d[std::size_t(i) * t.cols + j];
}

const char* dot_mma_tile_kernel(const DotModel& m) {
  if (float_model(m).ok && array_kernels().float_tile) return array_kernels().float_tile;
  switch (int_kernel(m)) {
    case IntKernel::kAmx:
      return "int8.amx";
    case IntKernel::kVnni:
      return "int8.vnni";
    case IntKernel::kAvx2:
      return "int16.avx2";
    case IntKernel::kNone:
      break;
  }
  return "ref";
}

std::uint64_t next_mma_tile_key() {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

bool dot_mma_tile_has_kernel(const DotModel& m) {
  return m.kind == DotModel::kMma && std::strcmp(dot_mma_tile_kernel(m), "ref") != 0;
}

namespace {

#if ATTNSIM_X86_KERNELS
// The AVX2 kernel's 16-bit packing (kind 4 of the kept operands), keyed as the others.
void int_tile_16(const IntTilePlan& pl, const DotModel& m, const MmaTile& t, int chunk) {
  Workspace& w = workspace();
  const int np = (t.cols + 15) / 16 * 16;
  std::vector<std::int16_t>& a16 = t.a_key ? w.kept.a16 : w.a16;
  if (!w.kept.matches(t, m, 4, 0, 0)) {
    a16.resize(std::size_t(t.rows) * t.n);
    pack_int16_a(pl, a16.data());
    if (t.a_key) w.kept.remember(t, m, 4, 0, 0);
  }
  bool hit = false;
  KeptB* kb = w.slot_for(t, m, 4, np, 0, &hit);
  std::vector<std::int32_t>& b2 = kb ? kb->b4 : w.b4;
  if (!hit) {
    b2.resize(std::size_t(t.n / 2) * np);
    if (t.b_k == 1 && !t.k_index && t.n % 16 == 0) {
      pack_int16_b_rows_avx2(pl, np, b2.data());
    } else if (t.b_n == 1 && !t.k_index) {
      pack_int16_b_cols_avx2(pl, np, b2.data());
    } else {
      pack_int16_b(pl, np, b2.data());
    }
  }
  Int16Packed pk;
  pk.a16 = a16.data();
  pk.b2 = b2.data();
  pk.np = np;
  pk.chunk = chunk;
  int_tile_avx2(pl, pk);
}

void int_tile(const DotModel& m, const MmaTile& t, IntKernel kernel) {
  const MmaInstrInfo& info = mma_info(m.instr);
  IntTilePlan pl;
  pl.tile = &t;
  const Encoding ea = info.in, eb = mma_in_b(info);
  pl.a_kind = t.a_values ? ElemKind::kValue : elem_kind(ea);
  pl.b_kind = t.b_values ? ElemKind::kValue : elem_kind(eb);
  pl.a_signed = ea != Encoding::kU8;
  pl.b_signed = eb != Encoding::kU8;
  pl.satfinite = info.composition == MmaComposition::kIntegerSat;
  if (kernel == IntKernel::kAvx2) return int_tile_16(pl, m, t, pl.satfinite ? info.k : t.n);
  const bool amx = kernel == IntKernel::kAmx;
  if (!amx) {
    pl.a_off = pl.a_signed ? 0 : 128;
    pl.b_off = pl.b_signed ? 128 : 0;
    pl.a_xor = pl.a_off ? 0x80 : 0;
    pl.b_xor = pl.b_off ? 0x80 : 0;
  }
  pl.rows_pad = amx ? (t.rows + 31) / 32 * 32 : t.rows;
  IntPacked pk;
  pk.n8 = (t.n + 63) / 64 * 64;
  pk.np = (t.cols + 63) / 64 * 64;
  pk.chunk = pl.satfinite ? info.k : pk.n8;
  const int nchunks = pk.n8 / pk.chunk;
  Workspace& w = workspace();
  // A keyed operand is packed into the kept buffers once and reused by the calls after it.
  const int kind = amx ? 3 : 2;
  std::vector<std::uint8_t>& a8 = t.a_key ? w.kept.a8 : w.a8;
  std::vector<std::int32_t>& rsum = t.a_key ? w.kept.rsum : w.rsum;
  if (!w.kept.matches(t, m, kind, pl.rows_pad, pk.chunk)) {
    a8.resize(std::size_t(pl.rows_pad) * pk.n8);
    rsum.resize(std::size_t(pl.rows_pad) * nchunks);
    pack_int_a(pl, a8.data(), pk.n8, rsum.data(), pk.chunk);
    if (t.a_key) w.kept.remember(t, m, kind, pl.rows_pad, pk.chunk);
  }
  // A keyed B is packed into a kept slot once and reused while its key comes back.
  bool hit = false;
  KeptB* kb = w.slot_for(t, m, kind, pk.np, pk.chunk, &hit);
  std::vector<std::int32_t>& b4 = kb ? kb->b4 : w.b4;
  std::vector<std::int32_t>& csum = kb ? kb->csum : w.csum;
  if (!hit) {
    b4.resize(std::size_t(pk.n8 / 4) * pk.np);
    csum.resize(std::size_t(nchunks) * pk.np);
    pack_int_b(pl, b4.data(), pk.n8, pk.np, csum.data(), pk.chunk);
  }
  pk.a8 = a8.data();
  pk.b4 = b4.data();
  pk.rsum = rsum.data();
  pk.csum = csum.data();
  if (amx) {
    w.cbuf.resize(32 * 32);
    int_tile_amx(pl, pk, w.cbuf.data());
  } else {
    int_tile_vnni(pl, pk);
  }
}
#endif  // ATTNSIM_X86_KERNELS

}  // namespace

void dot_mma_tile(const DotModel& m, const MmaTile& t) {
  if (t.rows <= 0 || t.cols <= 0) return;
  if (m.kind != DotModel::kMma) throw std::logic_error("dot_mma_tile: not an instruction model");
  const ArrayKernels& ks = array_kernels();
  if (ks.float_tile) {
    FloatModel f = float_model(m);
    if (f.ok && t.n % dot_requirements(m).k_step == 0) {
      FloatTilePlan& pl = f.plan;
      pl.rows = t.rows;
      pl.cols = t.cols;
      pl.n = t.n;
      pl.np = (t.cols + 31) / 32 * 32;
      Workspace& w = workspace();
      // A keyed operand is packed into the kept buffers once and reused by the calls after it.
      std::vector<float>& av = t.a_key ? w.kept.av : w.av;
      std::vector<std::uint32_t>& ae = t.a_key ? w.kept.ae : w.ae;
      if (!w.kept.matches(t, m, 1, 0, 0)) {
        av.resize(std::size_t(t.rows) * t.n);
        ae.resize(std::size_t(t.rows) * t.n);
        const PackSpec& spec = t.a_values ? value_spec(pl, pl.a_enc) : f.pack;
        ks.pack_a(spec, t, av.data(), ae.data());
        if (t.a_key) w.kept.remember(t, m, 1, 0, 0);
      }
      bool hit = false;
      KeptB* kb = w.slot_for(t, m, 1, pl.np, 0, &hit);
      std::vector<float>& bv = kb ? kb->bv : w.bv;
      std::vector<std::int16_t>& be = kb ? kb->be : w.be;
      if (!hit) {
        bv.resize(std::size_t(t.n) * pl.np);
        be.resize(std::size_t(t.n) * pl.np);
        const PackSpec& spec = t.b_values ? value_spec(pl, pl.b_enc) : f.pack;
        ks.pack_b(spec, t, pl.np, bv.data(), be.data());
      }
      pl.av = av.data();
      pl.ae = ae.data();
      pl.bv = bv.data();
      pl.be = be.data();
      pl.c = t.c;
      pl.ldc = t.ldc;
      pl.d = t.d;
      pl.ldd = t.ldd;
      pl.tile = &t;
      ks.tile(pl);
      return;
    }
  }
#if ATTNSIM_X86_KERNELS
  IntKernel ik = int_kernel(m);
  // AMX pads the rows to 32: a tile of a few rows (a decode step's queries) takes VNNI, which
  // every AMX CPU has and which gives the same bits (BENCHMARKS.md: the timings behind it).
  if (ik == IntKernel::kAmx && t.rows <= 4 && cpu_has_feature("avx512vnni")) ik = IntKernel::kVnni;
  if (ik != IntKernel::kNone && t.n % mma_info(m.instr).k == 0) {
    int_tile(m, t, ik);
    return;
  }
#endif
  dot_mma_tile_ref(m, t);
}

}  // namespace attnsim
