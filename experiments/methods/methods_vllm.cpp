// Registration of `vllm_triton`: vLLM 0.26.0's Triton unified_attention (the 2D and 3D kernels,
// reduce_segments) as the H100 runs it (sim/vllm).
#include <cmath>
#include <stdexcept>
#include <string>

#include "experiments/common/error.hpp"
#include "experiments/methods/methods.hpp"
#include "sim/vllm/vllm.hpp"

namespace attnsim {

namespace {

// The shape a preset is asked about before any input (parse-time checks).
const AttentionShape kNoInputShape{1, 8, 2, 1, 128, 128, 128};

double number_option(const MethodValues& v, const std::string& key) {
  const std::string& t = v.at(key);
  std::size_t used = 0;
  double x = 0;
  try {
    x = std::stod(t, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != t.size() || t.empty())
    throw UsageError("vllm_triton: " + key + " must be a number, got '" + t + "'");
  return x;
}

VllmOptions vllm_options(const MethodValues& v, const std::string& dump_dtype) {
  VllmOptions o;
  o.dtype = dtype_option(v.at("dtype"), dump_dtype);
  o.kv_fp8 = v.at("kv") == "e4m3";
  const double ks = number_option(v, "k_scale"), vs = number_option(v, "v_scale");
  for (const auto& [key, x] : {std::pair{"k_scale", ks}, std::pair{"v_scale", vs}})
    if (!(x > 0) || std::isinf(x) || !std::isfinite(float(x)))
      throw UsageError(std::string("vllm_triton: ") + key +
                       " must be a finite FP32 number > 0, got " + v.at(key));
  if (!o.kv_fp8 && (ks != 1.0 || vs != 1.0))
    throw UsageError("vllm_triton: k_scale/v_scale apply to an e4m3 KV cache only (kv=e4m3)");
  o.k_scale = float(ks);
  o.v_scale = float(vs);
  o.batch_invariant = v.at("batch_invariant") == "1";
  return o;
}

// The launcher's choice for the input's launch (AttentionInput::launch), or for the input as one
// batch: `batch` sequences of len_q queries each.
VllmLaunch launch_of(const VllmOptions& o, const AttentionInput& in) {
  const AttentionShape s = shape_or(in, kNoInputShape);
  return usage_errors([&] { return vllm_launch(o, s, in.window, in.launch.get()); });
}

MethodSpec vllm_spec() {
  MethodSpec m;
  m.name = "vllm_triton";
  m.help =
      "vLLM 0.26.0's Triton unified_attention as the H100 runs it (Triton 3.6): the launcher's "
      "2D kernel (prefill, mixed and large decode batches: TILE 32) or 3D kernel (16 KV segments, "
      "TILE 16, reduce_segments), fp16/bf16, GQA, causal only, FP8 e4m3 KV with per-tensor scales, "
      "sliding window, softcap; recorded bit for bit (sim/vllm)";
  m.params = {
      {"dtype",
       {"auto", "fp16", "bf16"},
       "auto",
       "the queries' (and output's) dtype (auto: a 16-bit dump's own, else bf16; FP32 inputs "
       "rounded RNE)"},
      {"kv",
       {"auto", "e4m3"},
       "auto",
       "the KV cache: the dtype's own, or e4m3 with per-tensor k_scale/v_scale (the cache made "
       "by (x / scale).to(float8_e4m3fn), dequantized in the kernel)"},
      {"k_scale", {}, "1", "kv=e4m3: K's per-tensor scale (layer._k_scale)", 1, true},
      {"v_scale", {}, "1", "kv=e4m3: V's per-tensor scale (layer._v_scale)", 1, true},
      {"batch_invariant",
       {"0", "1"},
       "0",
       "VLLM_BATCH_INVARIANT=1: the launcher takes the 2D kernel for every batch (no 3D split)",
       1,
       false,
       true},
      {"window",
       {},
       "0",
       "sliding_window W (window_size (W-1, 0)): every query sees its W latest keys (0: none)",
       0},
      {"softcap",
       {},
       "0",
       "logits_soft_cap C: C·tanh(s / C) on the scaled score as the kernel computes it from two "
       "exps and div.full (0: none)",
       0,
       true},
  };
  m.check = [](const MethodValues& v) {
    (void)vllm_options(v, "float32");
    const double c = number_option(v, "softcap");
    if (!(c >= 0) || std::isinf(c))
      throw UsageError("vllm_triton: softcap must be a finite number >= 0 (0: none), got " +
                       v.at("softcap"));
  };
  m.problem = [](const MethodValues& v, AttentionInput& in) {
    in.window = std::stoi(v.at("window"));
    in.softcap = std::stod(v.at("softcap"));
  };
  m.preset = [](const MethodValues& v, const AttentionInput& in) {
    const VllmOptions o = vllm_options(v, in.dtype);
    const VllmLaunch l = launch_of(o, in);
    return usage_errors([&] { return vllm_pipeline(o, l, shape_or(in, kNoInputShape)); });
  };
  m.run_with = [](const AttentionInput& in, const MethodValues& v, const Pipeline& p) {
    const VllmOptions o = vllm_options(v, in.dtype);
    const VllmLaunch l = launch_of(o, in);
    return usage_errors([&] {
      PipelineResult r =
          o.kv_fp8 ? vllm_attention(vllm_fp8_cache(in, o), p, o, l) : vllm_attention(in, p, o, l);
      MethodOutput out = pipeline_output(std::move(r), p);
      out.resolved["path"] = l.use_3d ? "3d" : "2d";
      out.resolved["tile"] = std::to_string(l.tile);
      return out;
    });
  };
  m.outside = [](const MethodValues& v, const AttentionInput& in) {
    const VllmOptions o = vllm_options(v, in.dtype);
    const VllmLaunch l = launch_of(o, in);
    std::vector<std::string> r;
    r.push_back(std::string("the launcher's ") + (l.use_3d ? "3D" : "2D") +
                " schedule: programs of " + std::to_string(l.block_q) +
                " tokens over compute_tile_loop_bounds' KV tiles (a window's first tile), M and L "
                "initialised as the kernel does (L = 1)");
    if (l.use_3d)
      r.push_back(
          "3D: 16 KV segments of cdiv(len_kv, 16·TILE) tiles each, merged by "
          "reduce_segments (lane-dependent expsum, contracted products, div.full)");
    if (o.kv_fp8)
      r.push_back(
          "the e4m3 KV cache: (x / scale).to(float8_e4m3fn), dequantized by "
          "_cast_kv_tile to bf16(fl(f32(e4m3) · scale)) before the MMAs");
    return r;
  };
  m.schedule = [](const MethodValues& v, const AttentionInput& in) {
    const VllmOptions o = vllm_options(v, in.dtype);
    return usage_errors(
        [&] {
          return vllm_schedule(o, shape_or(in, kNoInputShape), in.window, in.softcap,
                               in.launch.get());
        });
  };
  m.notes = [](const MethodValues& v, const AttentionInput& in) {
    const VllmOptions o = vllm_options(v, in.dtype);
    const VllmLaunch l = launch_of(o, in);
    std::vector<std::string> r = vllm_unverified(
        o, l, shape_or(in, kNoInputShape), std::stoi(v.at("window")), std::stod(v.at("softcap")));
    for (std::string& s : r) s += " UNVERIFIED";
    return r;
  };
  return m;
}

}  // namespace

void register_vllm_methods(std::vector<MethodSpec>& r) { r.push_back(vllm_spec()); }

}  // namespace attnsim
