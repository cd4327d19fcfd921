// The schedule sweeps of data/hw/h100/schedule/invariance_h100.h5
// (cuda_check/schedule/record_invariance.py, README there), shared by invariance_h100_test.cpp
// (the decode sweeps) and invariance_h100_long_test.cpp (every sweep).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "experiments/analysis/invariance.hpp"
#include "experiments/io/hdf5_io.hpp"
#include "experiments/methods/methods.hpp"
#include "formats/encoding.hpp"
#include "tests/hw/sage_inputs.hpp"

namespace attnsim::hwtest {

// The target's query count in a situation (`attnsim invariance`'s own parser).
inline int target_len_q(const std::string& situation) {
  return parse_launch(situation).target().len_q;
}

inline const std::string kSweeps = ATTNSIM_DATA_DIR "/hw/h100/schedule/invariance_h100.h5";

// JSON as the recorder's attributes hold it (json.dumps): a string, a number, true/false, or a
// flat list of strings or integers.
inline std::string json_string(const std::string& j) {
  return j.size() >= 2 && j.front() == '"' ? j.substr(1, j.size() - 2) : j;
}
inline std::vector<std::string> json_list(const std::string& j) {
  std::vector<std::string> r;
  std::string cur;
  bool in_str = false;
  for (std::size_t i = 1; i + 1 < j.size(); ++i) {
    const char ch = j[i];
    if (ch == '"') {
      in_str = !in_str;
    } else if (!in_str && ch == ',') {
      r.push_back(cur);
      cur.clear();
    } else if (in_str || ch != ' ') {
      cur += ch;
    }
  }
  if (!cur.empty()) r.push_back(cur);
  return r;
}

struct Sweep {
  std::string name, method, dtype, backend;
  int hq = 0, hkv = 0, d = 0, length = 0, seed = 0;
  bool causal = false;
  std::vector<std::string> situations;
  std::vector<int> which;  // per situation, its distinct output o_<j> (-1: not recorded)
};

inline Sweep read_sweep(const H5Reader& r, const std::string& name) {
  Sweep c;
  c.name = name;
  c.method = json_string(r.attr_string(name, "method"));
  c.dtype = json_string(r.attr_string(name, "dtype"));
  c.backend = json_string(r.attr_string(name, "backend"));
  c.hq = std::stoi(r.attr_string(name, "hq"));
  c.hkv = std::stoi(r.attr_string(name, "hkv"));
  c.d = std::stoi(r.attr_string(name, "d"));
  c.length = std::stoi(r.attr_string(name, "length"));
  c.seed = std::stoi(r.attr_string(name, "seed"));
  c.causal = r.attr_string(name, "causal") == "true";
  c.situations = json_list(r.attr_string(name, "situations"));
  for (const std::string& w : json_list(r.attr_string(name, "which"))) c.which.push_back(std::stoi(w));
  return c;
}

// The cases cuda_check/schedule/invariance_cases.py records.
inline const std::vector<std::string> kSweepNames = {
    "sdpa_flash_dec4096_gqa_bf16_d128",       "sdpa_flash_dec4096_fp16_d64",
    "sdpa_flash_pre1024_causal_bf16_d128",    "sdpa_flash_pd2048_causal_bf16_d128",
    "sdpa_efficient_dec4096_bf16_d128",       "sdpa_efficient_dec4096_fp16_d64",
    "sdpa_efficient_pre1024_causal_bf16_d128", "sdpa_efficient_pd2048_causal_bf16_d128",
    "sdpa_cudnn_dec4096_gqa_bf16_d128",       "sdpa_cudnn_dec4096_fp16_d64",
    "sdpa_cudnn_pre1024_causal_bf16_d128",    "sdpa_cudnn_pd2048_causal_bf16_d128",
    "flex_dec1000_bf16_d128",                 "flex_pd1000_causal_bf16_d128",
    "vllm_dec500_batch_bf16_d128",            "vllm_dec500_neighbour_bf16_d128",
    "vllm_pd500_bf16_d128",                   "vllm_dec500_batch_invariant_bf16_d128",
    "fa3_dec4096_gqa_bf16_d128",              "fa3_dec4096_bf16_d128",
    "fa3_pre1024_causal_bf16_d128",           "fa3_pd2048_causal_bf16_d128"};

// The target of a sweep: lattice tensors 0, 1, 2 of [heads, length, d], head-major.
inline TargetData sweep_target(const Sweep& c) {
  TargetData t;
  AttentionInput& in = t.data;
  in.shape = AttentionShape{1, c.hq, c.hkv, c.length, c.length, c.d, c.d};
  fill_lattice(in, std::uint64_t(c.seed), 0);
  return t;
}

// Every situation of every sweep (cuDNN's decode kernel, its split count and lean_reduction
// included): the target's stored rows (the last ones of each head;
// decode outputs whole) bit for bit. Then the identity table, each situation against the first:
// where both have as many queries, the recorded answer (the same distinct output, which the
// recorder decided on whole outputs) must be the one `attnsim invariance` computes on whole
// outputs; and a schedule-only "identical" must never meet different recorded bits. (Prefill
// against decode is covered row by row above: each side's rows equal their recordings.)
// `decode_only`: the situations whose target is one query row alone.
inline void check_sweeps(const std::vector<std::string>& names, bool decode_only = false) {
  const H5Reader r(kSweeps);
  int cases = 0, situations = 0, compared = 0;
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(r.exists(name + "/o_0"));
    const Sweep c = read_sweep(r, name);
    ASSERT_EQ(c.which.size(), c.situations.size());
    const MethodConfig m = parse_method(c.method);
    const TargetData t = sweep_target(c);
    // SDPA's and FlexAttention's causal cases mask prefill rows only (the recorder: a decode row
    // sees its whole cache, as serving engines call them; SDPA's top-left mask would hide it).
    // vLLM and FA3 take their own bottom-right mask in every situation.
    const bool dense = c.name.rfind("sdpa_", 0) == 0 || c.name.rfind("flex_", 0) == 0;
    auto problem = [&](const std::string& sit) {
      return invariance_problem(c.hq, c.hkv, c.d, c.causal && !(dense && target_len_q(sit) == 1));
    };
    const Encoding enc = c.dtype == "bf16" ? Encoding::kBf16 : Encoding::kFp16;
    for (std::size_t i = 0; i < c.situations.size(); ++i) {
      const std::string& sit = c.situations[i];
      ASSERT_GE(c.which[i], 0) << sit << ": not recorded";
      if (decode_only && target_len_q(sit) != 1) continue;
      const int lq = target_len_q(sit);
      const MethodOutput o = run_in_situation(m, problem(sit), sit, t);
      ASSERT_EQ(o.o.size(), std::size_t(c.hq) * lq * c.d) << sit;
      const std::vector<double> hw = r.read_f64(c.name + "/o_" + std::to_string(c.which[i]));
      const int kept = int(hw.size() / (std::size_t(c.hq) * c.d));
      ASSERT_EQ(hw.size(), std::size_t(c.hq) * kept * c.d) << sit;
      ASSERT_LE(kept, lq) << sit;
      std::size_t same = 0;
      for (int h = 0; h < c.hq; ++h)
        for (int x = 0; x < kept; ++x)
          for (int e = 0; e < c.d; ++e) {
            const double v = o.o[(std::size_t(h) * lq + (lq - kept + x)) * c.d + e];
            same += encode_float_bits(enc, float(v), kCudaRn) ==
                    std::uint32_t(hw[(std::size_t(h) * kept + x) * c.d + e]);
          }
      EXPECT_EQ(same, hw.size()) << sit << ": " << same << " of " << hw.size()
                                 << " stored elements bit-identical";
      ++situations;
    }
    for (std::size_t i = 1; i < c.situations.size(); ++i) {
      const std::string &a = c.situations[0], &b = c.situations[i];
      // Whole outputs are compared where both situations have as many queries (the recorder's
      // `which` is about whole outputs).
      if (target_len_q(a) != target_len_q(b)) continue;
      if (decode_only && target_len_q(a) != 1) continue;
      const bool recorded_same = c.which[i] == c.which[0];
      const InvarianceReport rep = invariance(m, problem(a), a, b, &t);
      EXPECT_EQ(rep.identical_rows == rep.rows, recorded_same)
          << a << " vs " << b << ": " << rep.identical_rows << " of " << rep.rows
          << " rows computed identical";
      if (rep.predicted_identical) {
        EXPECT_TRUE(recorded_same) << a << " vs " << b
                                   << ": the same arithmetic schedule, different recorded bits";
      }
      ++compared;
    }
    ++cases;
  }
  EXPECT_EQ(cases, int(names.size()));
  std::printf("%d sweeps: %d situations reproduced, %d pairs' identity equal to the recording\n",
              cases, situations, compared);
}

}  // namespace attnsim::hwtest
