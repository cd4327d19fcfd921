// The cases on which cuda_check/sage/int4_attention.cu (our CUDA kernel of SageAttention2's INT4
// algorithm) was run on the H100, and the operand file it reads: attnsim's own preparation of
// `sage2:arch=paper,target=h100` (INT4 per-thread Q/K after smooth Q and K, ΔS, FP8 V and its
// per-channel scales). Shared by the generator (tools/sage_int4_operands.cpp) and the check
// (sage_int4_test.cpp), so the check can prove the recorded kernel saw exactly these operands.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "sim/sage/sage.hpp"
#include "tests/hw/sage_inputs.hpp"

namespace attnsim::hwtest {

struct Int4Case {
  SageCase input;
  Encoding dtype = Encoding::kBf16;
  bool full = false;  // whole output committed (else per-row digests only)
};

inline std::vector<Int4Case> int4_cases() {
  auto lat = [](const char* name, const char* kind, int seed, int hq, int hkv, int n, int d,
                bool causal, Encoding e, bool full) {
    Int4Case c;
    c.input.name = name;
    c.input.kind = kind;
    c.input.seed = std::uint64_t(seed);
    c.input.b = 1, c.input.hq = hq, c.input.hkv = hkv, c.input.n = n, c.input.d = d;
    c.input.causal = causal;
    c.dtype = e;
    c.full = full;
    return c;
  };
  auto real = [](const char* name, const char* file, const char* group, int tokens, int hq,
                 bool causal, Encoding e, bool full) {
    Int4Case c;
    c.input.name = name;
    c.input.file = file;
    c.input.group = group;
    c.input.tokens = tokens;
    c.input.heads_q = hq;
    c.input.causal = causal;
    c.dtype = e;
    c.full = full;
    return c;
  };
  return {
      lat("normal_gqa_causal", "normal", 21, 2, 1, 200, 64, true, Encoding::kBf16, false),
      lat("kbias_d128", "kbias", 22, 1, 1, 150, 128, false, Encoding::kFp16, false),
      real("smollm2_l15", "data/real/smollm2_gpl3.h5", "layer_15", 128, 2, true, Encoding::kBf16,
           false),
      real("minilm_l3", "data/real/minilm_gpl3.h5", "layer_03", 100, 2, false, Encoding::kFp16,
           true),
  };
}

inline AttentionInput int4_case_input(const Int4Case& c, const std::string& root) {
  return c.input.kind.empty() ? real_slice(root, c.input) : lattice_input(c.input);
}

inline SageOptions int4_options(Encoding dtype) {
  SageOptions o;
  o.arch = SageArch::kPaper;
  o.target = SageTarget::kH100;
  o.in = dtype;
  return o;
}

// The bytes of one case in operands.bin (layout: cuda_check/sage/int4_attention.cu).
inline std::vector<std::uint8_t> int4_operand_bytes(const AttentionInput& in, Encoding dtype) {
  const Pipeline p = sage_pipeline(int4_options(dtype), in.shape);
  const PreparedInput r = prepare(in, p);
  const AttentionShape& s = in.shape;
  std::vector<std::uint8_t> out;
  auto put = [&](const void* x, std::size_t n) {
    // resize + memcpy, not a range insert: GCC 12 reports a false -Wstringop-overflow for the
    // first insert into the empty vector.
    const std::size_t at = out.size();
    out.resize(at + n);
    std::memcpy(out.data() + at, x, n);
  };
  const std::int32_t hdr[10] = {s.batch, s.heads_q, s.heads_kv, s.len_q, s.len_kv, s.head_dim,
                                in.causal ? 1 : 0, dtype == Encoding::kBf16 ? 1 : 0, 0, 0};
  put(hdr, sizeof hdr);
  // The exponent's coefficient (ScaleLog2::kHostDouble): fl32(double(fl32(sm_scale)) · log2 e).
  const float c = float(double(float(in.scale())) * 1.44269504088896340736);
  put(&c, 4);
  auto ints = [&](const PreparedOperand& x) {
    for (float v : x.values) {
      const std::int8_t q = std::int8_t(v);
      put(&q, 1);
    }
  };
  auto row_scales = [&](const PreparedOperand& x) {
    for (int sl = 0; sl < x.slices; ++sl)
      for (int t = 0; t < x.tokens; ++t) {
        const float f = x.scale(sl, t, 0);
        put(&f, 4);
      }
  };
  ints(r.q);
  row_scales(r.q);
  ints(r.k);
  row_scales(r.k);
  put(r.delta_s.data(), r.delta_s.size() * 4);
  constexpr Policy kSat{Round::kNearestEven, Overflow::kSaturate, NanEncoding::kCuda};
  for (float v : r.v.values) {
    const std::uint8_t b = std::uint8_t(encode_float_bits(Encoding::kE4m3fn, v, kSat));
    put(&b, 1);
  }
  for (int sl = 0; sl < r.v.slices; ++sl)
    for (int ch = 0; ch < r.v.dim; ++ch) {
      const float f = r.v.scale(sl, 0, ch);
      put(&f, 4);
    }
  return out;
}

}  // namespace attnsim::hwtest
