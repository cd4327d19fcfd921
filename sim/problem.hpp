// The attention problem every simulator takes: shapes, Q/K/V in FP32, mask and softmax scale.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/launch.hpp"

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
  // The launch this input's sequences run in (sim/launch.hpp), when they are part of a larger
  // launch: its first `batch` sequences, the first the target (check_launch_target). The
  // kernels' launch heuristics read it, the arithmetic reads only this input. Null: the input's
  // own batch is the launch.
  LaunchRef launch;

  double scale() const {
    return sm_scale != 0.0 ? sm_scale : 1.0 / std::sqrt(double(shape.head_dim));
  }
  bool visible(int i, int j) const {
    const int top = i + shape.len_kv - shape.len_q;
    return !causal || (j <= top && (window <= 0 || j > top - window));
  }
};

// An input with a launch holds `batch` sequences of the launch from its target on, all of the
// input's lengths (the target, and for batch > 1 the neighbours like it that the input also
// holds). Throws std::invalid_argument (one line) otherwise.
inline void check_launch_target(const AttentionShape& s, const Launch& l) {
  if (l.seqs.empty()) throw std::invalid_argument("a launch needs at least one sequence");
  for (const LaunchSeq& q : l.seqs)
    if (q.len_q <= 0 || q.len_kv <= 0 || q.len_q > q.len_kv)
      throw std::invalid_argument("a launch's sequence " + std::to_string(q.len_q) + ":" +
                                  std::to_string(q.len_kv) +
                                  " needs 1 <= queries <= keys (its queries are its last tokens)");
  if (l.sms <= 0) throw std::invalid_argument("a launch needs sms >= 1");
  if (l.target_index < 0 || l.target_index >= l.num_seqs())
    throw std::invalid_argument("a launch's target index is outside its sequences");
  bool ok = s.batch >= 1 && l.target_index + s.batch <= l.num_seqs();
  for (int b = 0; ok && b < s.batch; ++b)
    ok = l.seqs[std::size_t(l.target_index + b)] == LaunchSeq{s.len_q, s.len_kv};
  if (!ok)
    throw std::invalid_argument(
        "an input run inside the launch " + l.describe() + " holds its sequences from the target "
        "on, of the input's lengths: the input has batch " + std::to_string(s.batch) + " of " +
        std::to_string(s.len_q) + ":" + std::to_string(s.len_kv) +
        " (queries:keys), so the launch's target must be " + std::to_string(s.len_q) + ":" +
        std::to_string(s.len_kv) + "x" + std::to_string(s.batch));
}

// The batch a dense-batch kernel's launch heuristics see (PyTorch SDPA, FlashAttention-3,
// FlexAttention: one [B, H, N, D] shape per call): the input's own shape without a launch, else
// the target's shape with batch = the launch's sequence count. Throws std::invalid_argument (one
// line, naming `kernel`) for a launch whose sequences differ in length.
inline AttentionShape dense_launch_shape(const AttentionShape& s, const Launch* l,
                                         const std::string& kernel) {
  if (!l) return s;
  check_launch_target(s, *l);
  if (!l->dense())
    throw std::invalid_argument(kernel + " takes a dense batch (one [B, H, N, D] shape per call): " +
                                "the launch " + l->describe() +
                                " has sequences of different lengths");
  AttentionShape r = s;
  r.batch = l->num_seqs();
  return r;
}

// The SM count a launch heuristic reads (the H100 SXM's 132 without a launch).
inline int launch_sms(const Launch* l) { return l ? l->sms : 132; }

}  // namespace attnsim
