// Registration of the golden and FlashAttention reference methods.
#include <cmath>
#include <stdexcept>

#include "experiments/methods.hpp"
#include "sim/flash/flash.hpp"
#include "sim/golden/golden.hpp"

namespace attnsim {

void register_golden_methods(std::vector<MethodSpec>& r) {
  r.push_back({"golden",
               "FP64 attention (the reference; its own error is bounded in sim/golden/README.md)",
               {},
               [](const AttentionInput& in, const MethodValues&) {
                 return MethodOutput{golden_attention_ref(in), "fp64"};
               }});
}

namespace {
constexpr Storage kStorages[] = {Storage::kFp32, Storage::kBf16, Storage::kFp16, Storage::kE4m3fn,
                                 Storage::kE5m2};

// The spelling of every storage format is numerics/rounding_storage.hpp's storage_name; values
// reach here already checked against the registry's choices.
Storage parse_storage(const std::string& s) {
  for (Storage k : kStorages) {
    if (storage_name(k) == s) return k;
  }
  throw std::logic_error("parse_storage: unchecked value '" + s + "'");
}
}  // namespace

void register_flash_methods(std::vector<MethodSpec>& r) {
  std::vector<std::string> storages;
  for (Storage k : kStorages) storages.push_back(storage_name(k));
  r.push_back(
      {"flash",
       "FlashAttention-2 forward reference (sim/flash): tiled online softmax in the CUDA kernel's "
       "order",
       {{"qkv", storages, "fp32", "storage format of Q, K and V (RNE; FP8 satfinite)"},
        {"p", storages, "fp32", "format P is rounded to before P·V"},
        {"out", {"fp32", "bf16", "fp16"}, "fp32", "format O is written in"},
        {"acc", {"fp32", "fp64"}, "fp32", "inner-product and softmax-state arithmetic"},
        {"exp", {"exp2", "exp"}, "exp2", "exp2 with folded log2(e) (FA2) or natural exp"},
        {"fma", {"on", "off"}, "on", "fuse s*scale_log2 - max_scaled into one FMA (nvcc default)"},
        {"bq", {}, "64", "query rows per tile"},
        {"bk", {}, "64", "keys per tile"}},
       [](const AttentionInput& in, const MethodValues& v) {
         FlashConfig c;
         c.q = c.k = c.v = parse_storage(v.at("qkv"));
         c.p = parse_storage(v.at("p"));
         c.out = parse_storage(v.at("out"));
         c.acc = v.at("acc") == "fp64" ? Accum::kFp64 : Accum::kFp32;
         c.exp = v.at("exp") == "exp" ? ExpKind::kExp : ExpKind::kExp2;
         c.fma = v.at("fma") == "on";
         c.block_q = std::stoi(v.at("bq"));
         c.block_kv = std::stoi(v.at("bk"));
         const std::vector<float> o = flash_attention_ref(in, c);
         return MethodOutput{std::vector<double>(o.begin(), o.end()), v.at("out")};
       }});
}

}  // namespace attnsim
