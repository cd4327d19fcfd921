// The PyTorch SDPA and FlashAttention-3 recordings of the H100 (data/hw/h100/sdpa/sdpa_h100.h5,
// data/hw/h100/fa3/fa3_h100.h5; their READMEs say how they were made): the cases of
// cuda_check/sdpa/record_sdpa.py and cuda_check/fa3/record_fa3.py, their inputs made here bit for
// bit as the scripts made them (the lattice values of tests/hw/sage_inputs.hpp; the designed probes
// read from the file), and the comparison of a simulated output with the recorded row digests,
// full outputs and LSE.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "experiments/io/hdf5_io.hpp"
#include "formats/encoding.hpp"
#include "sim/pipeline/pipeline.hpp"
#include "tests/hw/sage_inputs.hpp"

namespace attnsim::hwtest {

struct SdpaCase {
  const char* name;
  int b, hq, hkv, lq, lk, d;
  bool causal;
  const char* kind;  // lattice, sharp (Q and K times 4), or a designed probe
  int seed;
};

// record_sdpa.py CASES (SDPA's causal mask is top-left).
inline const std::vector<SdpaCase>& sdpa_cases() {
  static const std::vector<SdpaCase> c{
      {"r77_d64", 1, 2, 2, 77, 77, 64, false, "lattice", 11},
      {"r200_d128_causal", 1, 2, 2, 200, 200, 128, true, "lattice", 12},
      {"r333_d64_causal", 2, 3, 3, 333, 333, 64, true, "lattice", 13},
      {"r1000_d128", 1, 2, 2, 1000, 1000, 128, false, "lattice", 14},
      {"r1000_d128_causal", 1, 2, 2, 1000, 1000, 128, true, "lattice", 15},
      {"r77x333_d128_causal", 1, 1, 1, 77, 333, 128, true, "lattice", 16},
      {"r333x200_d64_causal", 1, 2, 2, 333, 200, 64, true, "lattice", 17},
      {"r333x200_d64", 1, 2, 2, 333, 200, 64, false, "lattice", 18},
      {"gqa200_d128_causal", 1, 8, 2, 200, 200, 128, true, "lattice", 19},
      {"dec500_gqa_d128", 1, 8, 2, 1, 500, 128, false, "lattice", 20},
      {"dec4097_d128", 2, 4, 4, 1, 4097, 128, false, "lattice", 21},
      {"dec4097_gqa_d64", 1, 16, 2, 1, 4097, 64, false, "lattice", 22},
      {"r512_h1_d128", 1, 1, 1, 512, 512, 128, false, "lattice", 23},
      {"r512_h16_d128", 1, 16, 16, 512, 512, 128, false, "lattice", 24},
      {"r512_b2h16_d128", 2, 16, 16, 512, 512, 128, false, "lattice", 25},
      {"r77_b4h32_d64_causal", 4, 32, 32, 77, 77, 64, true, "lattice", 26},
      {"r200_d96", 1, 2, 2, 200, 200, 96, false, "lattice", 27},
      {"r200_d256_causal", 1, 1, 1, 200, 200, 256, true, "lattice", 28},
      {"sharp200_d128", 1, 2, 2, 200, 200, 128, false, "sharp", 29},
      {"sharp333_d64_causal", 1, 2, 2, 333, 333, 64, true, "sharp", 30},
      {"uniform333_d128", 1, 1, 1, 4, 333, 128, false, "uniform", 31},
      {"uniform4097_d64", 1, 1, 1, 1, 4097, 64, false, "uniform", 32},
      {"cancel300_d128", 1, 4, 4, 2, 300, 128, false, "cancel", 33},
      {"cancel300_d64", 1, 4, 4, 2, 300, 64, false, "cancel", 34},
      {"exp2_d64", 1, 4, 4, 512, 2, 64, false, "exp", 35},
      {"exp2_d128", 1, 4, 4, 512, 2, 128, false, "exp", 36},
      {"onehot200_d128", 1, 2, 2, 64, 200, 128, false, "onehot", 37},
  };
  return c;
}

// record_fa3.py CASES (FA3's causal mask is bottom-right).
inline const std::vector<SdpaCase>& fa3_cases() {
  static const std::vector<SdpaCase> c{
      {"r200_d128", 1, 2, 2, 200, 200, 128, false, "lattice", 41},
      {"r200_d64_causal", 1, 2, 2, 200, 200, 64, true, "lattice", 42},
      {"r333_d128_causal", 2, 3, 3, 333, 333, 128, true, "lattice", 43},
      {"r77x333_d64_causal", 1, 2, 2, 77, 333, 64, true, "lattice", 44},
      {"gqa200_d128_causal", 1, 8, 2, 200, 200, 128, true, "lattice", 45},
      {"dec4097_gqa_d128", 1, 8, 2, 1, 4097, 128, false, "lattice", 46},
      {"dec1000_d64", 2, 4, 4, 1, 1000, 64, false, "lattice", 47},
      {"r1000_d128", 1, 2, 2, 1000, 1000, 128, false, "lattice", 48},
      {"sharp200_d128", 1, 2, 2, 200, 200, 128, false, "sharp", 49},
      {"uniform333_d128", 1, 1, 1, 4, 333, 128, false, "uniform", 50},
      {"uniform333_d64", 1, 1, 1, 4, 333, 64, false, "uniform", 51},
  };
  return c;
}

inline const SdpaCase& find_case(const std::vector<SdpaCase>& cases, const std::string& name) {
  for (const SdpaCase& c : cases)
    if (name == c.name) return c;
  throw std::runtime_error("no recorded case " + name);
}

// The case's inputs as FP32 values: lattice (and sharp: Q, K times 4) values, which the presets
// round to the dtype by RNE as torch's cast did; a designed probe's stored 16-bit patterns decoded
// (uniform without stored inputs: Q = K = 0, V lattice).
inline AttentionInput case_input(const H5Reader& r, const std::string& group, const SdpaCase& c,
                                 Encoding dt) {
  AttentionInput in;
  in.shape = {c.b, c.hq, c.hkv, c.lq, c.lk, c.d, c.d};
  in.causal = c.causal;
  in.q.assign(in.shape.q_size(), 0.0f);
  in.k.assign(in.shape.k_size(), 0.0f);
  in.v.assign(in.shape.v_size(), 0.0f);
  const std::string kind = c.kind;
  if (r.exists(group + "/q")) {
    auto load = [&](const char* n, std::vector<float>& x) {
      const std::vector<std::int64_t> bits = r.read_i64(group + "/" + n);
      if (bits.size() != x.size()) throw std::runtime_error(group + "/" + n + ": size");
      for (std::size_t i = 0; i < x.size(); ++i)
        x[i] = float(decode_float_bits(dt, std::uint32_t(bits[i])));
    };
    load("q", in.q);
    load("k", in.k);
    load("v", in.v);
    return in;
  }
  const std::uint64_t seed = std::uint64_t(c.seed);
  for (std::size_t i = 0; i < in.v.size(); ++i) in.v[i] = lattice_value(seed, 3, i);
  if (kind == "uniform") return in;  // q = k = 0: every p is 1
  if (kind != "lattice" && kind != "sharp") throw std::runtime_error(group + ": no stored inputs");
  const float f = kind == "sharp" ? 4.0f : 1.0f;
  for (std::size_t i = 0; i < in.q.size(); ++i) in.q[i] = lattice_value(seed, 1, i) * f;
  for (std::size_t i = 0; i < in.k.size(); ++i) in.k[i] = lattice_value(seed, 2, i) * f;
  return in;
}

inline std::uint16_t out_bits(Encoding e, double x) {
  constexpr Policy kExact{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};
  return std::uint16_t(encode_float_bits(e, float(x), kExact));
}

// FNV-1a of one row's 16-bit patterns, little-endian (record_sdpa.py fnv_rows).
inline std::uint32_t row_fnv(const std::uint16_t* b, int n) {
  std::uint32_t h = 0x811C9DC5u;
  for (int i = 0; i < n; ++i)
    for (int s = 0; s < 2; ++s) h = (h ^ std::uint32_t((b[i] >> (8 * s)) & 0xFF)) * 0x01000193u;
  return h;
}

// Matches of one simulated output against one recording.
struct Tally {
  std::int64_t rows = 0, rows_same = 0;    // row digests (every row of the case)
  std::int64_t elems = 0, elems_same = 0;  // elements, where the output is stored in full
  std::int64_t lse = 0, lse_same = 0;      // LSE values (the op's own, where recorded)
  std::vector<std::string> first_bad;
  void add(const Tally& t) {
    rows += t.rows, rows_same += t.rows_same, elems += t.elems, elems_same += t.elems_same;
    lse += t.lse, lse_same += t.lse_same;
    for (const std::string& s : t.first_bad)
      if (first_bad.size() < 4) first_bad.push_back(s);
  }
  bool exact() const { return rows_same == rows && elems_same == elems && lse_same == lse; }
  std::string text() const {
    return std::to_string(rows_same) + "/" + std::to_string(rows) + " rows, " +
           std::to_string(elems_same) + "/" + std::to_string(elems) + " elements, " +
           std::to_string(lse_same) + "/" + std::to_string(lse) + " LSE";
  }
};

// Compares `o` (values of `enc`, [B, H, Lq, d]) and `lse` ([B, H, Lq], may be empty) with the
// datasets `rows_ds`, `full_ds` (if present) and `lse_ds` (if non-empty and present; its rows may be
// padded: the first Lq values of each (batch, head) are compared, bit for bit as FP32).
inline Tally compare_output(const H5Reader& r, const std::string& rows_ds,
                            const std::string& full_ds, const std::string& lse_ds,
                            const SdpaCase& c, Encoding enc, const std::vector<double>& o,
                            const std::vector<double>& lse) {
  Tally t;
  const int d = c.d;
  const std::size_t nrows = std::size_t(c.b) * c.hq * c.lq;
  const std::vector<std::int64_t> digests = r.read_i64(rows_ds);
  if (digests.size() != nrows || o.size() != nrows * d)
    throw std::runtime_error(rows_ds + ": shape differs from the case");
  const bool full = !full_ds.empty() && r.exists(full_ds);
  const std::vector<std::int64_t> want = full ? r.read_i64(full_ds) : std::vector<std::int64_t>{};
  std::vector<std::uint16_t> bits(static_cast<std::size_t>(d));
  for (std::size_t row = 0; row < nrows; ++row) {
    for (int e = 0; e < d; ++e) bits[std::size_t(e)] = out_bits(enc, o[row * d + std::size_t(e)]);
    ++t.rows;
    if (std::uint32_t(digests[row]) == row_fnv(bits.data(), d)) {
      ++t.rows_same;
    } else if (t.first_bad.size() < 3) {
      t.first_bad.push_back(std::string(c.name) + " row " + std::to_string(row));
    }
    for (int e = 0; full && e < d; ++e) {
      ++t.elems;
      if (std::uint16_t(want[row * d + std::size_t(e)]) == bits[std::size_t(e)]) ++t.elems_same;
    }
  }
  if (!lse_ds.empty() && !lse.empty() && r.exists(lse_ds)) {
    std::vector<std::uint64_t> dims;
    const std::vector<double> rec = r.read_f64(lse_ds, &dims);
    const std::size_t per = rec.size() / (std::size_t(c.b) * c.hq);  // Lq, or padded
    for (std::size_t bh = 0; bh < std::size_t(c.b) * c.hq; ++bh)
      for (int i = 0; i < c.lq; ++i) {
        const float a = float(rec[bh * per + std::size_t(i)]);
        const float b = float(lse[bh * c.lq + std::size_t(i)]);
        ++t.lse;
        std::uint32_t ua, ub;
        std::memcpy(&ua, &a, 4);
        std::memcpy(&ub, &b, 4);
        if (ua == ub) ++t.lse_same;
      }
  }
  return t;
}

}  // namespace attnsim::hwtest
