// Registration of the baselines users compare quantized kernels with (issue 26): `sdpa`, PyTorch's
// scaled_dot_product_attention with backend=cudnn|flash|efficient|math as the H100 runs it (sim/sdpa),
// and `fa3`, FlashAttention-3's Hopper forward in fp16, bf16 and FP8 e4m3 with num_splits (sim/fa3).
#include <stdexcept>

#include "experiments/common/error.hpp"
#include "experiments/methods/methods.hpp"
#include "sim/fa3/fa3.hpp"
#include "sim/sdpa/sdpa.hpp"

namespace attnsim {

namespace {

// The shape a preset is asked about before any input (parse-time checks).
const AttentionShape kNoInputShape{1, 1, 1, 128, 128, 128, 128};

SdpaOptions sdpa_options(const MethodValues& v, const std::string& dump_dtype) {
  SdpaOptions o;
  const std::string b = v.at("backend");
  o.backend = b == "flash"       ? SdpaBackend::kFlash
              : b == "efficient" ? SdpaBackend::kEfficient
              : b == "math"      ? SdpaBackend::kMath
                                 : SdpaBackend::kCudnn;
  o.dtype = dtype_option(v.at("dtype"), dump_dtype);
  return o;
}

Fa3Options fa3_options(const MethodValues& v, const std::string& dump_dtype) {
  Fa3Options o;
  const std::string d = v.at("dtype");
  o.input = dtype_option(d == "e4m3" ? "auto" : d, dump_dtype);
  o.dtype = d == "e4m3" ? Encoding::kE4m3fn : o.input;
  if (v.count("block_size")) {
    o.build = Fa3Build::kVllm;
    o.page_size = std::stoi(v.at("block_size"));
    o.fp8_interval = std::stoi(v.at("interval"));
  }
  o.num_splits = std::stoi(v.at("splits"));
  return o;
}

// The kernel shape of an input's launch (before any input: the placeholder shape).
AttentionShape fa3_shape(const Fa3Options& o, const AttentionInput& in, bool with_input) {
  const AttentionShape s = with_input ? in.shape : shape_or(in, kNoInputShape);
  return usage_errors([&] { return fa3_kernel_shape(o, s, in.launch.get()); });
}

MethodOutput output(PipelineResult r, const Pipeline& p, int splits) {
  MethodOutput m = pipeline_output(std::move(r), p);
  m.resolved["splits"] = std::to_string(splits);
  return m;
}

std::vector<std::string> split_outside(int splits, const char* combine) {
  if (splits <= 1) return {};
  return {"the split-KV schedule: " + std::to_string(splits) +
          " splits of ceil(n_blocks / splits) KV blocks, each normalized by its own row sum with "
          "its LSE, merged by " +
          combine + " (sim/lean split_kv_attention)"};
}

MethodSpec sdpa_spec() {
  MethodSpec m;
  m.name = "sdpa";
  m.help =
      "PyTorch's scaled_dot_product_attention as the H100 runs it (torch 2.11, cuDNN 9.19): "
      "backend=cudnn (the default SDPA picks), flash (FA2, split-KV and combine), efficient "
      "(CUTLASS), math (FP32 GEMMs + softmax); recorded bit for bit (sim/sdpa)";
  m.params = {
      {"backend",
       {"cudnn", "flash", "efficient", "math"},
       "cudnn",
       "SDPBackend: cudnn (SDPA's choice on the H100 for fp16/bf16), flash, efficient, math"},
      {"dtype",
       {"auto", "fp16", "bf16"},
       "auto",
       "the tensors' dtype (auto: a 16-bit dump's own, else bf16; FP32 inputs rounded RNE)"},
  };
  m.check = [](const MethodValues& v) { (void)sdpa_options(v, "float32"); };
  m.preset = [](const MethodValues& v, const AttentionInput& in) {
    return usage_errors([&] {
      return sdpa_pipeline(sdpa_options(v, in.dtype), launch_shape_or(in, kNoInputShape, "sdpa"),
                           launch_sms(in.launch.get()));
    });
  };
  m.run_with = [](const AttentionInput& in, const MethodValues& v, const Pipeline& p) {
    const SdpaOptions o = sdpa_options(v, in.dtype);
    return usage_errors([&] {
      return output(sdpa_attention(in, o, p), p,
                    sdpa_num_splits(o, launch_shape_or(in, in.shape, "sdpa"),
                                    launch_sms(in.launch.get())));
    });
  };
  m.outside = [](const MethodValues& v, const AttentionInput& in) {
    const SdpaOptions o = sdpa_options(v, in.dtype);
    const int splits = sdpa_num_splits(o, launch_shape_or(in, kNoInputShape, "sdpa"),
                                       launch_sms(in.launch.get()));
    if (o.backend == SdpaBackend::kCudnn) {
      if (splits <= 1) return std::vector<std::string>{};
      return std::vector<std::string>{
          "cuDNN's decode split schedule: " + std::to_string(splits) +
          " splits, split s taking the 128-key tiles s, s + splits, ..., each writing its max, "
          "row sum and O unnormalized, merged in split order by lean_reduction_kernel (sim/lean "
          "split_kv_attention, SplitCombine::kCudnnLean)"};
    }
    return split_outside(splits, "flash_fwd_splitkv_combine_kernel (libdevice expf/logf)");
  };
  m.notes = [](const MethodValues& v, const AttentionInput& in) {
    return sdpa_unverified(sdpa_options(v, in.dtype), launch_shape_or(in, kNoInputShape, "sdpa"));
  };
  m.schedule = [](const MethodValues& v, const AttentionInput& in) {
    return usage_errors([&] {
      return sdpa_schedule(sdpa_options(v, in.dtype), shape_or(in, kNoInputShape),
                           in.launch.get());
    });
  };
  return m;
}

MethodSpec fa3_spec(Fa3Build build) {
  const bool vllm = build == Fa3Build::kVllm;
  MethodSpec m;
  m.name = vllm ? "vllm_fa3" : "fa3";
  m.help = vllm ? "vLLM's FlashAttention-3 fork (vllm-project/flash-attention hopper/, as vLLM "
                  "0.26.0's wheel ships it) as vLLM's FlashAttention backend calls it on the "
                  "H100: varlen, paged KV cache, fp16/bf16, FP8 e4m3 with its two-level "
                  "accumulation, the decode tiles, its per-sequence splits; recorded bit for "
                  "bit (sim/fa3)"
                : "FlashAttention-3 (hopper/, --use_fast_math) as the H100 runs it: fp16, bf16, "
                  "FP8 e4m3 quantized per (batch, head) with its descales, num_splits and its "
                  "combine; recorded bit for bit (sim/fa3)";
  m.params = {
      {"dtype",
       {"auto", "fp16", "bf16", "e4m3"},
       "auto",
       vllm ? "Q/K/V dtype (auto: a 16-bit dump's own, else bf16; e4m3: vLLM's FP8 KV cache with "
              "the query quantized too, amax/448 scales per (batch, head) as descales, output "
              "bf16)"
            : "Q/K/V dtype (auto: a 16-bit dump's own, else bf16; e4m3: amax/448 scales per "
              "(batch, head) as descales, output bf16)"},
  };
  if (vllm) {
    m.params.push_back({"block_size",
                        {},
                        "16",
                        "the paged KV cache's block size (vLLM's --block-size; a multiple of 16)",
                        16});
    m.params.push_back({"interval",
                        {},
                        "0",
                        "FP8 accumulation: 0 the fork's shipped two-level (every KV block's P·V "
                        "added to O in FP32); N the interval design it merged and reverted "
                        "(vllm-project/flash-attention #122/#136: flushed every N blocks)",
                        0,
                        false,
                        true});
    m.params.push_back({"splits",
                        {},
                        "1",
                        "num_splits: 1 one pass (VLLM_BATCH_INVARIANT=1); 0 the fork's own "
                        "choice per sequence (vLLM without CUDA graphs); N that choice capped at "
                        "N (vLLM's max_num_splits under CUDA graphs, UNVERIFIED)",
                        0,
                        false,
                        true});
  } else {
    m.params.push_back({"splits",
                        {},
                        "1",
                        "flash_attn_func's num_splits: 1 (its default, no split), 0 (FA3's "
                        "heuristic), or N",
                        0});
  }
  m.check = [](const MethodValues& v) {
    (void)usage_errors([&] {
      (void)fa3_pipeline(fa3_options(v, "float32"), kNoInputShape, false);
      return 0;
    });
  };
  m.preset = [](const MethodValues& v, const AttentionInput& in) {
    const Fa3Options o = fa3_options(v, in.dtype);
    return usage_errors([&] { return fa3_pipeline(o, fa3_shape(o, in, false), in.causal); });
  };
  m.run_with = [](const AttentionInput& in, const MethodValues& v, const Pipeline& p) {
    const Fa3Options o = fa3_options(v, in.dtype);
    return usage_errors([&] {
      return output(fa3_attention(in, o, p), p,
                    fa3_splits(o, in.shape, in.causal, in.launch.get()));
    });
  };
  m.outside = [](const MethodValues& v, const AttentionInput& in) {
    const Fa3Options o = fa3_options(v, in.dtype);
    return split_outside(
        usage_errors([&] {
          return fa3_splits(o, shape_or(in, kNoInputShape), in.causal, in.launch.get());
        }),
        "FlashAttnFwdCombine (fast math)");
  };
  m.notes = [](const MethodValues& v, const AttentionInput& in) {
    const Fa3Options o = fa3_options(v, in.dtype);
    return fa3_unverified(o, fa3_shape(o, in, false), in.causal);
  };
  m.schedule = [](const MethodValues& v, const AttentionInput& in) {
    return usage_errors([&] {
      return fa3_schedule(fa3_options(v, in.dtype), shape_or(in, kNoInputShape), in.causal,
                          in.launch.get());
    });
  };
  return m;
}

}  // namespace

void register_sdpa_methods(std::vector<MethodSpec>& r) {
  r.push_back(sdpa_spec());
  r.push_back(fa3_spec(Fa3Build::kUpstream));
  r.push_back(fa3_spec(Fa3Build::kVllm));
}

}  // namespace attnsim
