// The attention problem every simulator takes: shapes, Q/K/V in FP32, mask and softmax scale.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace attnsim {

// Tensors are row-major [batch, heads, tokens, head_dim] (the HDF5 dump layout of
// experiments/README.md). heads_q must be a multiple of heads_kv (GQA/MQA: query head h reads KV
// head h / (heads_q / heads_kv)). head_dim_v may differ from head_dim (MLA-shaped V).
struct AttentionShape {
  int batch = 1;
  int heads_q = 1;
  int heads_kv = 1;
  int len_q = 0;
  int len_kv = 0;
  int head_dim = 0;
  int head_dim_v = 0;

  std::size_t q_size() const { return std::size_t(batch) * heads_q * len_q * head_dim; }
  std::size_t k_size() const { return std::size_t(batch) * heads_kv * len_kv * head_dim; }
  std::size_t v_size() const { return std::size_t(batch) * heads_kv * len_kv * head_dim_v; }
  std::size_t o_size() const { return std::size_t(batch) * heads_q * len_q * head_dim_v; }
  int group() const { return heads_q / heads_kv; }
  bool valid() const {
    return batch > 0 && heads_q > 0 && heads_kv > 0 && heads_q % heads_kv == 0 && len_q > 0 &&
           len_kv > 0 && head_dim > 0 && head_dim_v > 0;
  }
};

// Which keys a causal mask hides from query i (of len_q) among len_kv keys.
//  kBottomRight  key j > i + len_kv − len_q (FlashAttention >= 2.1, decode kernels, golden
//                attention by default: the last query sees every key).
//  kTopLeft      key j > i (PyTorch SDPA's is_causal, SageAttention's CUDA kernels).
// The two are the same mask when len_q == len_kv. A kernel's metrics are taken against golden
// attention with the kernel's own alignment (experiments/sweep/measure.hpp, Goldens).
enum class CausalAlign : std::uint8_t { kBottomRight, kTopLeft };

// Whether the alignment changes which keys a causal input's rows see.
inline bool causal_alignment_matters(bool causal, const AttentionShape& s) {
  return causal && s.len_q != s.len_kv;
}

// Causal masking is bottom-right aligned when len_q != len_kv (query i sees keys
// j <= i + len_kv - len_q), the FlashAttention >= 2.1 convention that decode kernels use; a
// method whose kernel is top-left says so in its pipeline (TileStage::causal).
// A query row that sees no key (possible only when len_q > len_kv) produces zeros.
struct AttentionInput {
  AttentionShape shape;
  std::vector<float> q, k, v;
  bool causal = false;
  double sm_scale = 0.0;  // 0 means 1/sqrt(head_dim)
  // The dtype q, k, v were stored in ("float32", "float16", "bfloat16", "float64": a dump's; the
  // values above are exact in it). Kernels that take 16-bit inputs use a 16-bit dump as it is.
  std::string dtype = "float32";
  // A sliding window on the causal mask (FlexAttention's `(q >= kv) & (q - kv < W)`, vLLM's
  // window_size = (W - 1, 0), Mistral/Gemma's local layers): with the causal alignment's offset o,
  // query i sees key j only when i + o - W < j <= i + o. 0: none. Needs causal.
  int window = 0;
  // Score soft-capping (Gemma 2, Grok): s -> softcap · tanh(s / softcap) on the scaled score, before
  // the mask; 0: none. How a kernel computes the tanh is its pipeline's (SoftmaxStage::softcap).
  double softcap = 0.0;

  double scale() const {
    return sm_scale != 0.0 ? sm_scale : 1.0 / std::sqrt(double(shape.head_dim));
  }
  bool visible(int i, int j) const {
    const int top = i + shape.len_kv - shape.len_q;
    return !causal || (j <= top && (window <= 0 || j > top - window));
  }
};

}  // namespace attnsim
