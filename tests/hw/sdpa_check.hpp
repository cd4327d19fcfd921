// Running the sdpa and fa3 presets (sim/sdpa, sim/fa3) on the recorded cases of
// tests/hw/sdpa_cases.hpp and tallying the matches, for the unit (sampled) and long (every case)
// tests.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "sim/fa3/fa3.hpp"
#include "sim/sdpa/sdpa.hpp"
#include "tests/hw/sdpa_cases.hpp"

namespace attnsim::hwtest {

inline const std::string kSdpaFile = ATTNSIM_DATA_DIR "/hw/h100/sdpa/sdpa_h100.h5";
inline const std::string kFa3File = ATTNSIM_DATA_DIR "/hw/h100/fa3/fa3_h100.h5";

inline Encoding dtype_enc(const std::string& dt) {
  return dt == "bf16" ? Encoding::kBf16 : dt == "fp16" ? Encoding::kFp16 : Encoding::kE4m3fn;
}

// One backend on one case and dtype of the SDPA recording; `recorded` false when the backend
// refused the case on the H100 (no digests: nothing to compare).
inline Tally check_sdpa(const H5Reader& r, SdpaBackend backend, const SdpaCase& c,
                        const std::string& dt, bool* recorded = nullptr) {
  const std::string g = std::string(c.name) + "/" + dt;
  const std::string b = sdpa_backend_name(backend);
  if (recorded) *recorded = r.exists(g + "/o_" + b + "_rows");
  if (!r.exists(g + "/o_" + b + "_rows")) return Tally{};
  SdpaOptions o;
  o.backend = backend;
  o.dtype = dtype_enc(dt);
  const AttentionInput in = case_input(r, g, c, o.dtype);
  const Pipeline p = sdpa_pipeline(o, in.shape);
  const PipelineResult res = sdpa_attention(in, o, p);
  // The op's own LSE where it ran on the call's K and V (not expanded for GQA); math has none.
  const bool lse_kv = backend != SdpaBackend::kMath && r.has_attr(g, "lse_" + b + "_how") &&
                      r.attr_string(g, "lse_" + b + "_how") == "kv";
  return compare_output(r, g + "/o_" + b + "_rows", g + "/o_" + b, lse_kv ? g + "/lse_" + b : "", c,
                        o.dtype, res.o, res.lse);
}

// FA3 on one case, dtype (fp16, bf16, e4m3) and split setting (nosplit, heuristic, split3).
inline Tally check_fa3(const H5Reader& r, const SdpaCase& c, const std::string& dt,
                       const std::string& split, int* splits_run = nullptr) {
  const std::string g = std::string(c.name) + "/" + dt + "/" + split;
  if (r.has_attr(g, "error")) return Tally{};
  Fa3Options o;
  o.dtype = dtype_enc(dt);
  o.num_splits = int(r.attr_f64(g, "num_splits"));
  const bool fp8 = o.dtype == Encoding::kE4m3fn;
  AttentionInput in = case_input(r, g, c, fp8 ? Encoding::kFp16 : o.dtype);
  const Pipeline p = fa3_pipeline(o, in.shape, in.causal);
  if (splits_run) *splits_run = fa3_num_splits(o, in.shape, in.causal);
  PipelineResult res;
  if (fp8) {
    // torch's float8_e4m3fn cast of the lattice values (RNE), and the recorded descales.
    for (std::vector<float>* x : {&in.q, &in.k, &in.v})
      for (float& v : *x)
        v = float(
            decode_float_bits(Encoding::kE4m3fn, encode_float_bits(Encoding::kE4m3fn, v, kCudaRn)));
    auto descale = [&](const char* n) {
      const std::vector<double> d = r.read_f64(g + "/" + n + "_descale");
      return std::vector<float>(d.begin(), d.end());
    };
    const PreparedInput prep = fa3_prepare_fp8(in, p, descale("q"), descale("k"), descale("v"));
    res = fa3_attention(prep, o, p);
  } else {
    res = fa3_attention(in, o, p);
  }
  return compare_output(r, g + "/o_rows", g + "/o", g + "/lse", c, p.out.enc, res.o, res.lse);
}

}  // namespace attnsim::hwtest
