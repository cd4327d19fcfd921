// KIVI on the attention pipeline (kivi.hpp): the prompt by FlashAttention-2 FP16 on the FP16 K and
// V, every later query as one teacher-forced decode step whose K and V are the cache's
// dequantized tokens plus its FP16 residual, run by the same pipeline.
#include "sim/turbo/kivi.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "numerics/kivi_quant.hpp"
#include "sim/flash/flash.hpp"

namespace attnsim {

namespace {

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument("kivi: " + what); }

void check(const AttentionInput& in, const KiviOptions& o) {
  const AttentionShape& s = in.shape;
  if (!s.valid()) fail("invalid shape");
  if (in.q.size() != s.q_size() || in.k.size() != s.k_size() || in.v.size() != s.v_size())
    fail("q, k, v sizes do not match the shape");
  if (o.bits < 1 || o.bits > 8) fail("bits must be in 1..8 (got " + std::to_string(o.bits) + ")");
  if (o.group < 1) fail("group must be >= 1");
  // llama_kivi.py: `assert self.residual_length % self.group_size == 0` (K's R-token chunk is
  // cut into g-token groups).
  if (o.residual < o.group || o.residual % o.group != 0)
    fail("residual (" + std::to_string(o.residual) + ") must be a positive multiple of group (" +
         std::to_string(o.group) + ")");
  // new_pack.py asserts the quantized length is a multiple of g: V's groups are its channels.
  if (s.head_dim_v % o.group != 0)
    fail("head_dim_v (" + std::to_string(s.head_dim_v) + ") must be a multiple of group (" +
         std::to_string(o.group) + ")");
  if (o.out != Encoding::kFp16 && o.out != Encoding::kBf16 && o.out != Encoding::kFp32)
    fail("out must be fp16, bf16 or fp32");
}

// The FP16 tensors as the pipeline rounds them, and their dequantized copies (kivi_tensors).
KiviTensors make_tensors(const AttentionShape& s, std::vector<float> k16, std::vector<float> v16,
                         const KiviOptions& o) {
  KiviTensors t;
  t.k16 = std::move(k16);
  t.v16 = std::move(v16);
  t.k_deq = t.k16;
  t.v_deq = t.v16;
  t.k_quantized = kivi_quantized_keys(s.len_kv - 1, o.residual);
  t.v_quantized = kivi_quantized_values(s.len_kv - 1, o.residual);
  const int dk = s.head_dim, dv = s.head_dim_v, g = o.group;
#pragma omp parallel for schedule(static)
  for (int sl = 0; sl < s.batch * s.heads_kv; ++sl) {
    std::vector<std::uint8_t> q(std::size_t(std::max(g, 1)));
    // K: per channel, groups of g tokens (new_pack.py on Kᵀ [.., D, T]: groups along T).
    const float* K = t.k16.data() + std::size_t(sl) * s.len_kv * dk;
    float* Kd = t.k_deq.data() + std::size_t(sl) * s.len_kv * dk;
    for (int t0 = 0; t0 < t.k_quantized; t0 += g) {
      for (int c = 0; c < dk; ++c) {
        const float* x = K + std::size_t(t0) * dk + c;
        const KiviGroup grp = kivi_quantize_group(x, g, dk, o.bits, q.data(), 1);
        for (int i = 0; i < g; ++i)
          Kd[std::size_t(t0 + i) * dk + c] = kivi_dequantize(q[std::size_t(i)], grp);
      }
    }
    // V: per token, groups of g channels (new_pack.py on V [.., T, D]: groups along D).
    const float* V = t.v16.data() + std::size_t(sl) * s.len_kv * dv;
    float* Vd = t.v_deq.data() + std::size_t(sl) * s.len_kv * dv;
    for (int j = 0; j < t.v_quantized; ++j) {
      for (int c0 = 0; c0 < dv; c0 += g) {
        const float* x = V + std::size_t(j) * dv + c0;
        const KiviGroup grp = kivi_quantize_group(x, g, 1, o.bits, q.data(), 1);
        for (int i = 0; i < g; ++i)
          Vd[std::size_t(j) * dv + c0 + i] = kivi_dequantize(q[std::size_t(i)], grp);
      }
    }
  }
  return t;
}

}  // namespace

Pipeline kivi_pipeline(const KiviOptions& o) { return flash_pipeline(Encoding::kFp16, o.out); }

int kivi_quantized_keys(int t, int residual) { return t / residual * residual; }

int kivi_quantized_values(int t, int residual) { return std::max(0, t - residual); }

KiviTensors kivi_tensors(const AttentionInput& in, const KiviOptions& o) {
  check(in, o);
  const Pipeline p = kivi_pipeline(o);
  PreparedInput full = prepare(in, p);
  return make_tensors(in.shape, std::move(full.k.values), std::move(full.v.values), o);
}

PipelineResult kivi_attention(const AttentionInput& in, const KiviOptions& o) {
  return kivi_attention(in, o, kivi_pipeline(o));
}

PipelineResult kivi_attention(const AttentionInput& in, const KiviOptions& o, const Pipeline& pipe) {
  check(in, o);
  validate(pipe);
  if (pipe.k.scale != ScaleMode::kNone || pipe.v.scale != ScaleMode::kNone)
    throw std::invalid_argument(
        "kivi: the cache provides K and V as FP16 values; a scaled K or V preparation does not "
        "apply");
  const AttentionShape& s = in.shape;
  const bool decode =
      o.mode == TurboMode::kDecode || (o.mode == TurboMode::kAuto && (in.causal || s.len_q == 1));
  if (!decode) return run_pipeline(in, pipe);

  const int P = turbo_prefill_tokens(in, o.prefill, o.group);
  const int off = s.len_kv - s.len_q;  // position of query row 0
  const int dk = s.head_dim, dv = s.head_dim_v, grp = s.group();
  PipelineResult res;
  res.o.assign(s.o_size(), 0.0);
  res.lse.assign(std::size_t(s.batch) * s.heads_q * s.len_q, 0.0);

  // 1. The prompt's rows: FlashAttention FP16 over the prompt's unquantized K and V
  //    (llama_kivi.py prefill attends key_states/value_states before quantizing them).
  if (P > off) {
    const AttentionInput pin = prefix_input(in, P);
    const PipelineResult r = run_pipeline(pin, pipe);
    const int nq = pin.shape.len_q;
    for (int bh = 0; bh < s.batch * s.heads_q; ++bh) {
      std::copy_n(r.o.begin() + std::ptrdiff_t(bh) * nq * dv, std::size_t(nq) * dv,
                  res.o.begin() + std::ptrdiff_t(bh) * s.len_q * dv);
      std::copy_n(r.lse.begin() + std::ptrdiff_t(bh) * nq, std::size_t(nq),
                  res.lse.begin() + std::ptrdiff_t(bh) * s.len_q);
    }
  }
  const int first = std::max(P, off);  // the first decode position
  if (first >= s.len_kv) return res;

  // 2. The cache's tokens in both versions, and the FP16 queries, as the pipeline prepares them.
  PreparedInput full = prepare(in, pipe);
  const KiviTensors kt = make_tensors(s, std::move(full.k.values), std::move(full.v.values), o);

  // 3. Decode steps, per (batch, KV head): step t appends token t, its query attends K tokens
  //    [0, kq) dequantized and [kq, t] FP16, V tokens [0, vq) dequantized and [vq, t] FP16
  //    (kivi_quantized_keys / _values). The operands grow by one row per step and change rows
  //    in place when tokens are quantized; one pipeline run per step computes the query heads
  //    that read this KV head.
  for (int sl = 0; sl < s.batch * s.heads_kv; ++sl) {
    const int b = sl / s.heads_kv, hk = sl % s.heads_kv;
    const float* K16 = kt.k16.data() + std::size_t(sl) * s.len_kv * dk;
    const float* V16 = kt.v16.data() + std::size_t(sl) * s.len_kv * dv;
    const float* Kq = kt.k_deq.data() + std::size_t(sl) * s.len_kv * dk;
    const float* Vq = kt.v_deq.data() + std::size_t(sl) * s.len_kv * dv;
    // One step's operands as the pipeline prepares them: the query heads of this KV head, and the
    // cache's K and V (dequantized rows and FP16 rows) completed by prepared_operand.
    PreparedInput step;
    step.shape = s;
    step.shape.batch = 1;
    step.shape.heads_q = grp;
    step.shape.heads_kv = 1;
    step.shape.len_q = 1;
    step.causal = false;  // the step's one query sees every cached key
    step.sm_scale = full.sm_scale;
    std::vector<float> kvals, vvals, qvals(std::size_t(grp) * dk);
    int kq_done = 0, vq_done = 0;  // rows already holding dequantized values
    for (int t = first; t < s.len_kv; ++t) {
      // Append token t in FP16, then replace the rows the cache has quantized by now.
      const int have = int(kvals.size() / std::size_t(dk));
      kvals.insert(kvals.end(), K16 + std::size_t(have) * dk, K16 + std::size_t(t + 1) * dk);
      vvals.insert(vvals.end(), V16 + std::size_t(have) * dv, V16 + std::size_t(t + 1) * dv);
      const int kq = kivi_quantized_keys(t, o.residual), vq = kivi_quantized_values(t, o.residual);
      std::copy(Kq + std::size_t(kq_done) * dk, Kq + std::size_t(kq) * dk,
                kvals.begin() + std::ptrdiff_t(kq_done) * dk);
      std::copy(Vq + std::size_t(vq_done) * dv, Vq + std::size_t(vq) * dv,
                vvals.begin() + std::ptrdiff_t(vq_done) * dv);
      kq_done = std::max(kq_done, kq);
      vq_done = std::max(vq_done, vq);
      step.shape.len_kv = t + 1;
      const int row = t - off;
      for (int h = 0; h < grp; ++h) {
        const int sq = b * s.heads_q + hk * grp + h;
        std::copy_n(full.q.row(sq, row), dk, qvals.begin() + std::ptrdiff_t(h) * dk);
      }
      step.q = prepared_operand(pipe, Operand::kQ, grp, 1, dk, qvals);
      step.k = prepared_operand(pipe, Operand::kK, 1, t + 1, dk, std::move(kvals));
      step.v = prepared_operand(pipe, Operand::kV, 1, t + 1, dv, std::move(vvals));
      const PipelineResult r = run_pipeline(step, pipe);
      kvals = std::move(step.k.values);
      vvals = std::move(step.v.values);
      for (int h = 0; h < grp; ++h) {
        const std::size_t dst = (std::size_t(b) * s.heads_q + hk * grp + h) * s.len_q + row;
        std::copy_n(r.o.begin() + std::ptrdiff_t(h) * dv, dv,
                    res.o.begin() + std::ptrdiff_t(dst) * dv);
        res.lse[dst] = r.lse[std::size_t(h)];
      }
    }
  }
  return res;
}

}  // namespace attnsim
