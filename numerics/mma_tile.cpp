// The tile form of the instruction models (see mma_tile.hpp): the per-output reference, the choice
// of kernel, the packing tables and workspaces, and the reference blocks the kernels fall back to.
#include "numerics/mma_tile.hpp"

#include <array>
#include <atomic>
#include <climits>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "formats/float16.hpp"
#include "formats/float32.hpp"
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
enum class IntKernel { kNone, kAmx, kVnni };
IntKernel int_kernel(const DotModel& m) {
  if (!integer_model(m)) return IntKernel::kNone;
  const bool sat = mma_info(m.instr).composition == MmaComposition::kIntegerSat;
#if ATTNSIM_X86_KERNELS
  if (active_isa() >= Isa::kAmx && !sat) return IntKernel::kAmx;
  if (has_isa_feature("avx512vnni")) return IntKernel::kVnni;
#else
  (void)sat;
#endif
  return IntKernel::kNone;
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
  if (ATTNSIM_X86_KERNELS && active_isa() >= Isa::kAvx512 && float_model(m).ok)
    return "block_fma.avx512";
  switch (int_kernel(m)) {
    case IntKernel::kAmx:
      return "int8.amx";
    case IntKernel::kVnni:
      return "int8.vnni";
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
#if ATTNSIM_X86_KERNELS
  const Isa isa = active_isa();
  if (isa >= Isa::kAvx512) {
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
        pack_a_avx512(t.a_values ? value_spec(pl, pl.a_enc) : f.pack, t, av.data(), ae.data());
        if (t.a_key) w.kept.remember(t, m, 1, 0, 0);
      }
      bool hit = false;
      KeptB* kb = w.slot_for(t, m, 1, pl.np, 0, &hit);
      std::vector<float>& bv = kb ? kb->bv : w.bv;
      std::vector<std::int16_t>& be = kb ? kb->be : w.be;
      if (!hit) {
        bv.resize(std::size_t(t.n) * pl.np);
        be.resize(std::size_t(t.n) * pl.np);
        pack_b_avx512(t.b_values ? value_spec(pl, pl.b_enc) : f.pack, t, pl.np, bv.data(),
                      be.data());
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
      float_tile_avx512(pl);
      return;
    }
  }
  const IntKernel ik = int_kernel(m);
  if (ik != IntKernel::kNone && t.n % mma_info(m.instr).k == 0) {
    int_tile(m, t, ik);
    return;
  }
#endif
  dot_mma_tile_ref(m, t);
}

}  // namespace attnsim
