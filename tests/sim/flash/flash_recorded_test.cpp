// sim/flash as a pipeline preset against the stand-alone FlashAttention-2 loop it replaced: digests
// of O and LSE recorded with that loop (commit 441bad6, data/regression/README.md) for 60
// configurations (tiles, storage formats, conversion policies, FP32/FP64 state, product models,
// exp, FMA, KV order, row sums) on 8 synthetic inputs, the bundled dumps and the real-model dumps.
// Every digest must match: the preset is bit-identical to the old kernel on every recorded input,
// with the stage references alone (--isa scalar) and with the fast kernels this CPU runs.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "experiments/io/dump.hpp"
#include "numerics/digest.hpp"
#include "numerics/isa.hpp"
#include "sim/flash/flash.hpp"
#include "tests/sim/pipeline_util.hpp"

namespace attnsim {
namespace {

std::uint64_t digest(const std::vector<float>& x) {
  std::uint64_t h = 0x243F6A8885A308D3ull;
  for (std::size_t i = 0; i < x.size(); ++i)
    h = splitmix64(h ^ (std::uint64_t(i) << 32 | std::bit_cast<std::uint32_t>(x[i])));
  return h;
}

// The recorder's config line ("bq=64 bk=64 q=fp32 ... rowsum=quad", tools/record_flash_digests.cpp) as
// the pipeline's method-string options on FA2's defaults.
Pipeline parse_config(const std::string& line) {
  std::istringstream in(line);
  std::string item, opts;
  auto add = [&](const std::string& k, const std::string& v) {
    opts += (opts.empty() ? "" : ",") + k + "=" + v;
  };
  while (in >> item) {
    const auto eq = item.find('=');
    const std::string k = item.substr(0, eq), v = item.substr(eq + 1);
    if (k == "bq" || k == "bk" || k == "q" || k == "k" || k == "v" || k == "p" || k == "out" ||
        k == "acc" || k == "exp" || k == "rowsum")
      add(k, v);
    else if (k == "fp8" && v == "ocp")
      add("cvt8", "rne/nan/ml_dtypes");
    else if (k == "half" && v == "saturate")
      add("cvt16", "rne/saturate");
    else if (k == "qk")
      add("qk_dot", v);
    else if (k == "pv")
      add("pv_dot", v);
    else if (k == "fma")
      add("fma", v == "1" ? "on" : "off");
    else if (k == "kv")
      add("kv_order", v);
  }
  // qk_dot/pv_dot default to following the state (FlashConfig's kFollowAcc).
  if (opts.find("qk_dot=") == std::string::npos) add("qk_dot", "acc");
  if (opts.find("pv_dot=") == std::string::npos) add("pv_dot", "acc");
  return simtest::with_options(opts);
}

void check_every_recorded_input() {
  const std::string root = ATTNSIM_SOURCE_DIR;
  std::ifstream f(root + "/data/regression/flash_pre_pipeline.txt");
  ASSERT_TRUE(f.good());
  std::map<std::string, AttentionInput> inputs;
  std::string line;
  int checked = 0, mismatched = 0;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto a = line.find(" | "), b = line.find(" | ", a + 3);
    const std::string cfg_text = line.substr(0, a), input = line.substr(a + 3, b - a - 3);
    std::istringstream ds(line.substr(b + 3));
    std::string d_o, d_lse;
    ds >> d_o >> d_lse;
    auto it = inputs.find(input);
    if (it == inputs.end()) {
      AttentionInput in;
      if (input.rfind("synthetic:", 0) == 0) {
        in = make_synthetic(input.substr(10));
      } else {
        const auto colon = input.find(':');
        in = read_attention_dump(root + "/" + input.substr(0, colon), input.substr(colon + 1),
                                 false);
      }
      it = inputs.emplace(input, std::move(in)).first;
    }
    const Pipeline cfg = parse_config(cfg_text);
    const PipelineResult pr = run_pipeline(it->second, cfg);
    struct {
      std::vector<float> o, lse;
    } r{std::vector<float>(pr.o.begin(), pr.o.end()), std::vector<float>(pr.lse.begin(), pr.lse.end())};
    char got_o[17], got_lse[17];
    std::snprintf(got_o, sizeof got_o, "%016llx", (unsigned long long)digest(r.o));
    std::snprintf(got_lse, sizeof got_lse, "%016llx", (unsigned long long)digest(r.lse));
    ++checked;
    if (d_o != got_o || d_lse != got_lse) {
      ++mismatched;
      ADD_FAILURE() << cfg_text << " on " << input << ": O " << (d_o == got_o ? "same" : "DIFFERS")
                    << ", LSE " << (d_lse == got_lse ? "same" : "DIFFERS");
    }
  }
  std::printf("[ flash-recorded ] %d (configuration, input) pairs, %d mismatched\n", checked,
              mismatched);
  EXPECT_EQ(checked, 780);
}

TEST(FlashRecorded, PresetEqualsTheStandAloneKernelOnEveryRecordedInput) {
  check_every_recorded_input();  // the fast kernels of this CPU (numerics/isa.hpp)
}

TEST(FlashRecorded, ReferenceStagesEqualTheStandAloneKernelOnEveryRecordedInput) {
  const simtest::IsaScope scalar(Isa::kScalar);
  check_every_recorded_input();
}

}  // namespace
}  // namespace attnsim
