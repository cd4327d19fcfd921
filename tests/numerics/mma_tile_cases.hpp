// Random and adversarial tiles for numerics/mma_tile: operands of every instruction model (special
// values, subnormals, ties, cancellation, one dominant product, C at the window's edge, int32
// limits), in the layouts the stages pass (strided B, C aliasing D, no C). Shared by the quick
// sample (mma_tile_test.cpp) and the long run (mma_tile_long_test.cpp).
#pragma once

#include <cstdint>
#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "formats/encoding.hpp"
#include "numerics/dot.hpp"
#include "numerics/mma_tile.hpp"

namespace attnsim::tile_cases {

// Every instruction model, and promoted forms of the floating-point ones.
inline std::vector<DotModel> all_models() {
  std::vector<DotModel> ms;
  for (const MmaInstrInfo& i : mma_instructions()) {
    ms.push_back(DotModel{DotModel::kMma, i.instr, 0});
    if (i.acc != 2) ms.push_back(DotModel{DotModel::kMma, i.instr, 2 * i.k});
  }
  return ms;
}

inline std::string model_name(const DotModel& m) {
  return dot_model_name(m) + (m.promote ? "/promote" + std::to_string(m.promote) : "");
}

// One operand element of `fmt` in the given mode:
//  0 any encoding (specials included);  1 finite, exponents within 4 of the bias (cancellation,
//  ties at the window's edge);  2 zeros and subnormals;  3 wide exponents (bf16: products that
//  under/overflow FP32);  4 small integers and zeros (exact sums, ties);  5 the extremes (largest
//  magnitudes of either sign, integer limits).
inline std::uint32_t draw(std::mt19937& rng, Encoding fmt, int mode) {
  const EncodingTraits& t = encoding_traits(fmt);
  const std::uint32_t mask = t.bits == 32 ? 0xFFFFFFFFu : (1u << t.bits) - 1u;
  std::uint32_t x = rng() & mask;
  if (!t.is_float) {
    if (mode == 5)
      return (rng() & 1) ? (t.is_signed ? (1u << (t.bits - 1)) : mask)
                         : (t.is_signed ? (1u << (t.bits - 1)) - 1u : 0u);
    if (mode == 4) return rng() % 3 == 0 ? 0u : x & 3u;
    return x;
  }
  const std::uint32_t sign = 1u << (t.bits - 1), man_mask = (1u << t.man_bits) - 1;
  const int bias = (1 << (t.exp_bits - 1)) - 1, emax_field = (1 << t.exp_bits) - 1;
  switch (mode) {
    case 1: {
      const std::uint32_t e = std::uint32_t(bias - 1) + rng() % 4;
      return (x & (sign | man_mask)) | (e << t.man_bits);
    }
    case 2:
      return (rng() % 3 == 0) ? (x & sign) : (x & (sign | man_mask));
    case 3: {
      // exponent field anywhere finite, biased towards both ends
      std::uint32_t e = rng() % std::uint32_t(emax_field);
      if (rng() & 1) e = (rng() & 1) ? std::uint32_t(emax_field - 1 - int(rng() % 4)) : rng() % 4;
      return (x & (sign | man_mask)) | (e << t.man_bits);
    }
    case 4: {
      if (rng() % 3 == 0) return (rng() & 1) ? sign : 0u;
      const std::uint32_t e = std::uint32_t(bias) + rng() % 3;
      return (x & sign) | (e << t.man_bits) | ((x >> 3) & man_mask & (man_mask << 1));
    }
    case 5: {
      // the largest finite magnitude (e4m3fn: S.1111.110), either sign
      const std::uint32_t big = fmt == Encoding::kE4m3fn
                                    ? 0x7Eu
                                    : (std::uint32_t(emax_field - 1) << t.man_bits) | man_mask;
      return (x & sign) | big;
    }
    default:
      return x;
  }
}

// An FP32 (or int32) C for an operand mode.
inline std::uint32_t draw_c(std::mt19937& rng, bool integer, int mode) {
  std::uint32_t c = rng();
  if (integer) {
    if (mode == 5) return (rng() & 1) ? 0x7FFFFFFFu - (rng() % 64) : 0x80000000u + (rng() % 64);
    if (mode == 4) return rng() % 5 == 0 ? 0u : c % 2001u - 1000u;
    return c;
  }
  switch (mode) {
    case 1:
      return (c & 0x83FFFFFFu) | 0x3C000000u;  // near 1: the usual chain case
    case 2:
      return c & 0x807FFFFFu;  // zero or subnormal
    case 3:
      return (c & 0x80FFFFFFu) | ((rng() % 255u) << 23);  // any finite exponent
    case 4:
      return rng() % 3 == 0 ? (c & 0x80000000u) : (c & 0x83FFFFFFu) | 0x3F000000u;
    case 5:
      return (c & 0x80000000u) | 0x7F7FFFFFu;  // FLT_MAX
    default:
      return c;  // NaN/Inf included
  }
}

// A tile problem: operands, C and the layouts. `b_row_major` stores B as [k][cols] (V's layout),
// else as [cols][k] (K's rows); `alias` makes C and D one buffer; `no_c` passes no C.
struct Problem {
  int rows = 0, cols = 0, n = 0;
  std::vector<std::uint32_t> a, b, c;
  bool b_row_major = false, alias = false, no_c = false;
  int lda = 0, ldb = 0, ldc = 0;
  // Operands passed as values (MmaTile::a_values / b_values), and a position index (k_index:
  // a permutation of the elements with some positions reading a zero).
  std::vector<float> av, bv;
  std::vector<int> k_index;
};

// An encoding's value as a stage would hold it (decoded floats, integers).
inline float value_of(Encoding e, std::uint32_t bits) {
  return encoding_traits(e).is_float ? decode_float_bits(e, bits) : float(int_from_encoding(e, bits));
}

inline Problem make_problem(std::mt19937& rng, const DotModel& m, int rows, int cols, int n,
                            int mode) {
  const MmaInstrInfo& info = mma_info(m.instr);
  Problem p;
  p.rows = rows;
  p.cols = cols;
  p.n = n;
  p.b_row_major = rng() & 1;
  p.alias = (rng() % 4) == 0;
  p.no_c = (rng() % 4) == 1;
  p.lda = n + int(rng() % 3) * 16;
  p.ldb = (p.b_row_major ? cols : n) + int(rng() % 3);
  p.ldc = cols + int(rng() % 3);
  const Encoding ea = info.in, eb = mma_in_b(info);
  p.a.assign(std::size_t(rows) * p.lda, 0u);
  p.b.assign(std::size_t(p.b_row_major ? n : cols) * p.ldb, 0u);
  p.c.assign(std::size_t(rows) * p.ldc, 0u);
  // Per-problem flavour: one mode for most elements, sprinkled with others; a dominant product
  // in some rows; zero runs (padding).
  for (int i = 0; i < rows; ++i)
    for (int k = 0; k < n; ++k) {
      const int md = rng() % 8 == 0 ? int(rng() % 6) : mode;
      p.a[std::size_t(i) * p.lda + k] = draw(rng, ea, md);
    }
  for (int k = 0; k < n; ++k)
    for (int j = 0; j < cols; ++j) {
      const int md = rng() % 8 == 0 ? int(rng() % 6) : mode;
      const std::size_t at =
          p.b_row_major ? std::size_t(k) * p.ldb + j : std::size_t(j) * p.ldb + k;
      p.b[at] = draw(rng, eb, md);
    }
  if (rng() % 3 == 0) {  // zero padding at the end of the reduction
    const int z = int(rng() % std::uint32_t(n));
    for (int k = n - z; k < n; ++k)
      for (int i = 0; i < rows; ++i) p.a[std::size_t(i) * p.lda + k] = 0u;
  }
  if (rng() % 3 == 0 && encoding_traits(ea).is_float) {  // one dominant element per row
    for (int i = 0; i < rows; ++i)
      p.a[std::size_t(i) * p.lda + rng() % std::uint32_t(n)] = draw(rng, ea, 5);
  }
  const bool integer = info.acc == 2;
  if (rng() % 3 == 0) {
    p.av.resize(p.a.size());
    for (std::size_t e = 0; e < p.a.size(); ++e) p.av[e] = value_of(ea, p.a[e]);
  }
  if (rng() % 3 == 0) {
    p.bv.resize(p.b.size());
    for (std::size_t e = 0; e < p.b.size(); ++e) p.bv[e] = value_of(eb, p.b[e]);
  }
  if (rng() % 3 == 0) {
    p.k_index.resize(std::size_t(n));
    for (int k = 0; k < n; ++k) p.k_index[std::size_t(k)] = k;
    std::shuffle(p.k_index.begin(), p.k_index.end(), rng);
    for (int k = 0; k < n; ++k)
      if (rng() % 5 == 0) p.k_index[std::size_t(k)] = -1;
  }
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) {
      const int md = rng() % 8 == 0 ? int(rng() % 6) : mode;
      p.c[std::size_t(i) * p.ldc + j] = draw_c(rng, integer, md);
    }
  return p;
}

// Runs the problem through f (dot_mma_tile or dot_mma_tile_ref) and returns D [rows][cols].
template <class F>
std::vector<std::uint32_t> run(const Problem& p, const DotModel& m, F f) {
  std::vector<std::uint32_t> cbuf = p.c;
  std::vector<std::uint32_t> dbuf(p.alias ? 0 : cbuf.size(), 0xDEADBEEFu);
  MmaTile t;
  t.rows = p.rows;
  t.cols = p.cols;
  t.n = p.n;
  t.a = p.a.data();
  t.lda = p.lda;
  t.b = p.b.data();
  t.b_k = p.b_row_major ? p.ldb : 1;
  t.b_n = p.b_row_major ? 1 : p.ldb;
  t.c = p.no_c ? nullptr : cbuf.data();
  t.ldc = p.ldc;
  t.d = p.alias ? cbuf.data() : dbuf.data();
  t.ldd = p.ldc;
  if (!p.av.empty()) t.a_values = p.av.data();
  if (!p.bv.empty()) t.b_values = p.bv.data();
  if (!p.k_index.empty()) t.k_index = p.k_index.data();
  f(m, t);
  const std::vector<std::uint32_t>& out = p.alias ? cbuf : dbuf;
  std::vector<std::uint32_t> d(std::size_t(p.rows) * p.cols);
  for (int i = 0; i < p.rows; ++i)
    for (int j = 0; j < p.cols; ++j)
      d[std::size_t(i) * p.cols + j] = out[std::size_t(i) * p.ldc + j];
  return d;
}

}  // namespace attnsim::tile_cases
