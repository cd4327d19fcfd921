// Operand preparation of the attention pipeline: input rounding, prescale, mean subtraction,
// scaling and quantization, the encodings the products see (once per input, before any tile),
// and the same finishing code for operands a technique's cache provides (prepared_operand).
#include <algorithm>
#include <cmath>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>

#include "formats/encoding.hpp"
#include "numerics/convert_array.hpp"
#include "numerics/reduce.hpp"
#include "numerics/special.hpp"
#include "numerics/special_array.hpp"
#include "sim/pipeline/pipeline.hpp"
#include "sim/pipeline/stages/stages.hpp"

namespace attnsim {

namespace {

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument(what); }

// The encoding an operand reaches its product in.
Encoding product_encoding(const OperandSpec& s) {
  return s.scale != ScaleMode::kNone && s.apply == ScaleAt::kOperand ? s.dequant_to : s.enc;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

namespace {

// SageAttention's smooth-V mean of every channel (fused.cu MeanScaleKernel<64, true>; SASS on the
// H100: `mean = FMUL.FTZ(sum, MUFU.RCP(I2FP.U32(L16)))`): the FP32 sum of the L16 = ceil(L/16)·16
// stored tokens (TransposePadPermute order within each 16, zeros past the sequence) in the
// kernel's thread and shuffle order, times the approximate reciprocal of L16.
void sage_channel_mean(const float* w, int tokens, int dim, float* mu) {
  const int l16 = (tokens + 15) / 16 * 16;
  std::vector<float> stored(std::size_t(l16), 0.0f);
  const float r = RcpApproxFtz::h100()(float(l16));
  for (int c = 0; c < dim; ++c) {
    for (int p = 0; p < l16; ++p) {
      const int t = (p & ~15) + kSagePerm16[p & 15];
      stored[std::size_t(p)] = t < tokens ? w[std::size_t(t) * dim + c] : 0.0f;
    }
    mu[c] = fmul_ftz(sage_mean_scale_sum(stored.data(), l16), r);
  }
}

float prescale_factor(Prescale ps, double sm) {
  // SageAttention 1 (core.py, quant_per_block.py): `q * (sm_scale * 1.44269504)`: a Python
  // double product with SageAttention's literal 1.44269504 (not log2 e to 17 digits), handed to
  // the Triton kernel as an FP32 scalar; one FMUL there.
  // PyTorch's math backend: `calculate_scale(q, scale).sqrt()` in double, the scalar multiplying
  // the FP32 tensor as a float (attention.cpp _scaled_dot_product_attention_math).
  if (ps == Prescale::kSqrtSm) return float(std::sqrt(sm));
  return ps == Prescale::kSmScaleLog2e ? float(sm * 1.44269504) : float(sm);
}

// The encodings of an operand for an instruction model (k_step_bits > 0: zero-padded along the
// reduction to that k); otherwise none (the CUDA-core models multiply the decoded values).
void finish_encodings(PreparedOperand& out, int k_step_bits) {
  if (k_step_bits <= 0) {
    out.dim_pad = out.dim;
    out.bits.clear();
    return;
  }
  out.dim_pad = (out.dim + k_step_bits - 1) / k_step_bits * k_step_bits;
  out.bits.assign(std::size_t(out.slices) * out.tokens * out.dim_pad, 0u);
  const bool fp = is_float_encoding(out.enc) && out.enc != Encoding::kFp64;  // encode_array's
  const std::int64_t rows = std::int64_t(out.slices) * out.tokens;
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* v = out.values.data() + std::size_t(r) * out.dim;
    std::uint32_t* b = out.bits.data() + std::size_t(r) * out.dim_pad;
    if (fp) {
      encode_array(out.enc, v, std::size_t(out.dim), b, kCudaRn);  // encode_float_bits per value
      continue;
    }
    for (int c = 0; c < out.dim; ++c) b[c] = int_to_encoding(out.enc, std::int32_t(v[c]));
  }
}

// The k an operand's encodings are padded to: Q and K that of the QKᵀ instruction (0 for the
// CUDA-core models), V 1 when P·V is an instruction (the tile loop gathers V per KV block).
int k_step_bits(const Pipeline& p, Operand which) {
  if (which == Operand::kV) return p.pv.dot.kind == DotModel::kMma ? 1 : 0;
  return p.qk.dot.kind == DotModel::kMma ? dot_requirements(p.qk.dot).k_step : 0;
}

// One (batch, head) slice of prepare_operand: rounding, prescale, mean subtraction, scaling and
// quantization into out's part of that slice.
void prepare_slice(const std::vector<float>& x, int sl, int tokens, int dim, const OperandSpec& s,
                   float pre, bool scaled, PreparedOperand& out, std::vector<float>* centered) {
  std::vector<float> w(std::size_t(tokens) * dim);
  const float* xs = x.data() + std::size_t(sl) * tokens * dim;
  // The format the tensor arrives in (the kernels' fp16/bf16 inputs: round_to by the array
  // kernel), then the prescale.
  if (is_float_encoding(s.input)) {
    round_array(s.input, xs, w.size(), w.data(), kCudaRn);
  } else {
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = round_to(s.input, xs[i], kCudaRn);
  }
  if (s.prescale != Prescale::kNone)
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = w[i] * pre;
  if (s.mean != MeanMode::kNone) {
    // The mean in FP64 (exact enough that its one rounding to mean_enc is the only one: torch's
    // mean accumulates in FP32 and rounds once to the input dtype), subtracted in FP32, the
    // difference rounded to centered_enc (SageAttention per_thread: `k - km` in the input dtype).
    for (int b = 0; b < out.means_per_slice; ++b) {
      const int t0 = b * out.mean_block, t1 = std::min(tokens, t0 + out.mean_block);
      float* mu = out.mean.data() + (std::size_t(sl) * out.means_per_slice + b) * dim;
      if (s.mean_rule == MeanRule::kSageChannel) {
        sage_channel_mean(w.data(), tokens, dim, mu);
      } else {
        for (int c = 0; c < dim; ++c) {
          double acc = 0;
          for (int t = t0; t < t1; ++t) acc += double(w[std::size_t(t) * dim + c]);
          mu[c] = round_to(s.mean_enc, acc / double(t1 - t0), kCudaRn);
        }
      }
      for (int t = t0; t < t1; ++t) {
        float* row = w.data() + std::size_t(t) * dim;
        for (int c = 0; c < dim; ++c) row[c] = row[c] - mu[c];
        if (is_float_encoding(s.centered_enc)) {  // round_to by the array kernel
          round_array(s.centered_enc, row, std::size_t(dim), row, kCudaRn);
        } else {
          for (int c = 0; c < dim; ++c) row[c] = round_to(s.centered_enc, row[c], kCudaRn);
        }
      }
    }
  }
  if (centered) std::copy(w.begin(), w.end(), centered->begin() + std::size_t(sl) * tokens * dim);
  float* vs = out.values.data() + std::size_t(sl) * tokens * dim;
  if (!scaled) {
    if (is_float_encoding(s.enc)) {  // decode(encode(w, cast)) by the array kernel
      round_array(s.enc, w.data(), w.size(), vs, s.cast);
    } else {
      for (std::size_t i = 0; i < w.size(); ++i)
        vs[i] = decode_float_bits(s.enc, encode_float_bits(s.enc, w[i], s.cast));
    }
    return;
  }
  std::vector<float> sc;
  if (s.scale == ScaleMode::kInteger) {
    const QuantizedTensor qt = quantize_symmetric(w.data(), tokens, dim, s.groups, s.quantizer);
    for (std::size_t i = 0; i < w.size(); ++i) vs[i] = float(qt.q[i]);
    sc = qt.scale;
  } else {
    // SageAttention per_channel_fp8 (fused.cu MeanScaleKernel): v_scale = amax / scale_max,
    // q = cvt(x · (scale_max / amax)); the reciprocal rounded on its own. No epsilon: an
    // all-zero group gives 0 · inf = NaN, as the kernel does. kMufuRcp: both divisions are a
    // bare MUFU.RCP and an FMUL.FTZ, amax by FMNMX.FTZ (subnormals count as 0).
    const bool mufu = s.float_rule == FloatScaleRule::kMufuRcp;
    std::vector<float> amax = group_amax(w.data(), tokens, dim, s.groups);
    if (s.mean_rule == MeanRule::kSageChannel && s.mean != MeanMode::kNone) {
      // MeanScaleKernel's max/min run over the L16 stored tokens: the zero padding past the
      // sequence enters the amax as |0 − mean| (fused.cu: statistics over ceil(L/16)·16).
      const int l16 = (tokens + 15) / 16 * 16;
      const float* mu = out.mean.data() + std::size_t(sl) * out.means_per_slice * dim;
      if (l16 > tokens)
        for (int c = 0; c < dim; ++c) {
          float& a = amax[std::size_t(s.groups.group(0, c, tokens, dim))];
          a = std::max(a, std::fabs(0.0f - mu[c]));
        }
    }
    sc.resize(amax.size());
    std::vector<float> inv(amax.size());
    for (std::size_t g = 0; g < amax.size(); ++g) {
      if (mufu) {
        const float a = amax[g] < 0x1p-126f ? 0.0f : amax[g];
        sc[g] = fmul_ftz(a, RcpApproxFtz::h100()(s.float_max));
        inv[g] = fmul_ftz(RcpApproxFtz::h100()(a), s.float_max);
      } else {
        sc[g] = amax[g] / s.float_max;
        inv[g] = s.float_max / amax[g];
      }
    }
    for (int t = 0; t < tokens; ++t) {
      // A token's scale group: one for the row, or group(t, 0) + c (per_channel_groups).
      const float* r = inv.data() + s.groups.group(t, 0, tokens, dim);
      const std::size_t step = per_channel_groups(s.groups) ? 1 : 0;
      for (int c = 0; c < dim; ++c) {
        const std::size_t i = std::size_t(t) * dim + c;
        vs[i] = mufu ? fmul_ftz(r[step * c], w[i]) : w[i] * r[step * c];
      }
    }
    if (is_float_encoding(s.enc)) {  // decode(encode(y, cast)) by the array kernel
      round_array(s.enc, vs, w.size(), vs, s.cast);
    } else {
      for (std::size_t i = 0; i < w.size(); ++i)
        vs[i] = decode_float_bits(s.enc, encode_float_bits(s.enc, vs[i], s.cast));
    }
  }
  if (s.apply == ScaleAt::kOperand) {
    // x̂ = fl(q · s) (the FP32 multiply of QuantizedTensor::dequantize), rounded to dequant_to.
    for (int t = 0; t < tokens; ++t) {
      const float* g = sc.data() + s.groups.group(t, 0, tokens, dim);
      const std::size_t step = per_channel_groups(s.groups) ? 1 : 0;
      for (int c = 0; c < dim; ++c) {
        const std::size_t i = std::size_t(t) * dim + c;
        vs[i] = round_to(s.dequant_to, vs[i] * g[step * c], kCudaRn);
      }
    }
  } else {
    if (sc.size() != std::size_t(out.groups_per_slice))
      fail("internal: a slice's scales do not match its groups");
    std::copy(sc.begin(), sc.end(),
              out.scales.begin() + std::ptrdiff_t(sl) * out.groups_per_slice);
  }
}

// QkStage::kwidth4: Q's and K's encodings along head_dim in the order the instruction model
// consumes them (kwidth4_index over the padded width), so every QKᵀ product model and kernel that
// reads the encodings sees Triton's kWidth-4 k grouping. The values (CUDA-core models) stay.
void kwidth4_reorder(const Pipeline& p, Operand which, PreparedOperand& o) {
  if (!p.qk.kwidth4 || which == Operand::kV || o.bits.empty()) return;
  const int n = o.dim_pad;
  std::vector<std::uint32_t> row(static_cast<std::size_t>(n));
  const std::size_t rows = std::size_t(o.slices) * o.tokens;
  for (std::size_t r = 0; r < rows; ++r) {
    std::uint32_t* b = o.bits.data() + r * std::size_t(n);
    for (int k = 0; k < n; ++k) row[std::size_t(k)] = b[kwidth4_index(k, n)];
    std::copy(row.begin(), row.end(), b);
  }
}

// One operand: every (batch, head) slice prepared on its own, as the kernels' per-head scales
// are ([b, h, n_groups] in SageAttention). `centered` receives the values after mean subtraction
// (before quantization) when asked for (ΔS needs K's).
PreparedOperand prepare_operand(const char* name, const std::vector<float>& x, int slices,
                                int tokens, int dim, const OperandSpec& s, double sm,
                                int k_step_bits, std::vector<float>* centered) {
  PreparedOperand out;
  out.slices = slices;
  out.tokens = tokens;
  out.dim = dim;
  out.enc = product_encoding(s);
  out.values.resize(x.size());
  out.mean_mode = s.mean;
  out.mean_block = s.mean == MeanMode::kTokens ? tokens : s.mean_block;
  const bool scaled = s.scale != ScaleMode::kNone;
  if (scaled) {
    // Scales multiplying the product's result need groups that do not vary along the reduction
    // (head_dim for Q/K): checked here, where the lengths are known.
    out.groups = s.groups;
    out.groups_per_slice = s.groups.count(tokens, dim);
  }
  if (scaled && s.apply == ScaleAt::kProduct && (name[0] == 'q' || name[0] == 'k')) {
    for (int t = 0; t < tokens; ++t) {
      const int g0 = s.groups.group(t, 0, tokens, dim);
      for (int c = 1; c < dim; ++c) {
        if (s.groups.group(t, c, tokens, dim) != g0) {
          fail(std::string(name) + ": " + s.groups.describe() +
               " scales vary along head_dim, the reduction of QKᵀ: the product cannot be "
               "dequantized (scale the operand instead)");
        }
      }
    }
  }
  if (s.mean != MeanMode::kNone) {
    out.means_per_slice = (tokens + out.mean_block - 1) / out.mean_block;
    out.mean.assign(std::size_t(slices) * out.means_per_slice * dim, 0.0f);
  }
  if (centered) centered->resize(x.size());
  // The scales the products or the reciprocal apply (not kOperand's, folded into the values).
  if (scaled && s.apply != ScaleAt::kOperand)
    out.scales.assign(std::size_t(slices) * std::size_t(out.groups_per_slice), 0.0f);
  const float pre = s.prescale != Prescale::kNone ? prescale_factor(s.prescale, sm) : 1.0f;
  // The slices (heads) are independent: one per OpenMP iteration, each writing only its own part
  // of the outputs, so the result does not depend on the thread count. The first error by slice
  // order is rethrown after the loop.
  std::vector<std::exception_ptr> errors(std::size_t(std::max(slices, 0)));
#pragma omp parallel for schedule(dynamic, 1)
  for (int sl = 0; sl < slices; ++sl) {
    try {
      prepare_slice(x, sl, tokens, dim, s, pre, scaled, out, centered);
    } catch (...) {
      errors[std::size_t(sl)] = std::current_exception();
    }
  }
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  finish_encodings(out, k_step_bits);
  return out;
}

}  // namespace

namespace {

// A sliding window is a causal mask's (AttentionInput::window); a softcap acts on the scaled score,
// which only a pipeline that multiplies S by the scale has (scale_log2=score).
void check_mask_and_softcap(const AttentionInput& in, const Pipeline& p) {
  if (in.window < 0) fail("the sliding window must be >= 0 (0: none)");
  if (in.window > 0 && !in.causal)
    fail("a sliding window (" + std::to_string(in.window) + ") needs the causal mask");
  if (!(in.softcap >= 0) || std::isinf(in.softcap))
    fail("the softcap must be a finite number >= 0 (0: none)");
  if (in.softcap > 0 && p.softmax.scale_log2 != ScaleLog2::kScoreFirst)
    fail("a softcap acts on the scaled score: the pipeline needs scale_log2=score");
}

// The softmax scale the pipeline uses for an input (SoftmaxStage::sm_scale).
double pipeline_sm_scale(const AttentionInput& in, const Pipeline& p) {
  return p.softmax.sm_scale == SmScale::kOne ? 1.0 : in.scale();
}

// V's scales multiply the P·V result: per channel in the epilogue when the granularity does not
// follow the keys (per tensor, per channel: SageAttention's fuse_v_scale), else per KV block
// (pv_acc=chunk; TurboAttention's s_V per block), which needs every block inside one group.
// Decided by the granularity, not by whether this input happens to fit one group.
void check_v_groups(const Pipeline& p, PreparedOperand& v) {
  if (!v.scaled()) return;
  const Granularity g = v.groups.kind;
  v.key_dependent_scale = g != Granularity::kPerTensor && g != Granularity::kPerChannel;
  if (!v.key_dependent_scale) return;
  if (p.pv.acc != PvAccumulate::kChunk)
    fail("v: " + v.groups.describe() +
         " scales vary with the key: the P·V product is dequantized per KV block, which needs "
         "pv_acc=chunk");
  const int bk = p.tile.block_kv;
  for (int j0 = 0; j0 < v.tokens; j0 += bk) {
    for (int c = 0; c < v.dim; ++c) {
      const int grp = v.groups.group(j0, c, v.tokens, v.dim);
      for (int j = j0 + 1; j < std::min(v.tokens, j0 + bk); ++j) {
        if (v.groups.group(j, c, v.tokens, v.dim) != grp)
          fail("v: " + v.groups.describe() + " scale groups split KV blocks of " +
               std::to_string(bk) + " keys (a block is dequantized as one chunk)");
      }
    }
  }
}

}  // namespace

PreparedOperand prepared_operand(const Pipeline& p, Operand which, int slices, int tokens, int dim,
                                 std::vector<float> values, std::vector<float> scales,
                                 GroupMap groups, int groups_per_slice) {
  const OperandSpec& spec = which == Operand::kQ ? p.q : which == Operand::kK ? p.k : p.v;
  if (values.size() != std::size_t(slices) * tokens * dim)
    fail("prepared_operand: values do not match [slices, tokens, dim]");
  PreparedOperand out;
  out.enc = product_encoding(spec);
  out.slices = slices;
  out.tokens = tokens;
  out.dim = dim;
  out.values = std::move(values);
  if (!scales.empty()) {
    if (scales.size() != std::size_t(slices) * groups_per_slice)
      fail("prepared_operand: scales do not match [slices, groups_per_slice]");
    out.scales = std::move(scales);
    out.groups = groups;
    out.groups_per_slice = groups_per_slice;
  }
  finish_encodings(out, k_step_bits(p, which));
  kwidth4_reorder(p, which, out);
  if (which == Operand::kV) check_v_groups(p, out);
  return out;
}

PreparedInput prepare_queries(const AttentionInput& in, const Pipeline& p) {
  validate(p);
  const AttentionShape& s = in.shape;
  if (!s.valid()) fail("invalid attention shape");
  if (p.q.mean != MeanMode::kNone) fail("q: a smoothed q needs K (use prepare)");
  check_mask_and_softcap(in, p);
  PreparedInput r;
  r.shape = s;
  r.causal = in.causal;
  r.window = in.window;
  r.softcap = in.softcap;
  r.launch = in.launch;
  r.sm_scale = pipeline_sm_scale(in, p);
  r.q = prepare_operand("q", in.q, s.batch * s.heads_q, s.len_q, s.head_dim, p.q, r.sm_scale,
                        k_step_bits(p, Operand::kQ), nullptr);
  kwidth4_reorder(p, Operand::kQ, r.q);
  return r;
}

namespace {

// The H100 tables (numerics/special.hpp) that the pipeline's stages read, each built on its first
// use (0.05-0.2 s apiece: a 2^23-entry table decoded from data/hw/), built here side by side on
// the OpenMP threads before the slices and tiles start; otherwise the first tile to need one
// builds it while the other threads wait. A table a stage choice reads without being listed here
// is still built on first use, only not in parallel.
void build_special_tables(const Pipeline& p) {
  const bool ex2 = p.exp.fn == ExpFn::kEx2ApproxFtz || p.exp.fn == ExpFn::kEx2Approx ||
                   p.exp.fn == ExpFn::kEx2ApproxLog2e;
  const bool lg2 = p.softmax.lse == LseModel::kLog2Mufu;
  bool rcp = p.normalize.kind == Normalize::kRcpApproxFtz ||
             p.p.quantizer.apply == ScaleApply::kMultiplyRcpApprox;
  for (const OperandSpec* o : {&p.q, &p.k, &p.v}) {
    rcp = rcp || o->float_rule == FloatScaleRule::kMufuRcp ||
          o->mean_rule == MeanRule::kSageChannel ||
          o->quantizer.apply == ScaleApply::kMultiplyRcpApprox;
  }
  if (int(ex2) + int(lg2) + int(rcp) < 2) return;  // one table: its first use builds it
  std::exception_ptr error[3];
#pragma omp parallel sections
  {
#pragma omp section
    try {
      if (ex2) {
        Ex2ApproxFtz::h100();
        ex2_array_compact_tables();  // the kernels' 4 MiB form, where they read it
      }
    } catch (...) {
      error[0] = std::current_exception();
    }
#pragma omp section
    try {
      if (lg2) Lg2ApproxFtz::h100();
    } catch (...) {
      error[1] = std::current_exception();
    }
#pragma omp section
    try {
      if (rcp) RcpApproxFtz::h100();
    } catch (...) {
      error[2] = std::current_exception();
    }
  }
  for (const std::exception_ptr& e : error)
    if (e) std::rethrow_exception(e);
}

}  // namespace

PreparedInput prepare(const AttentionInput& in, const Pipeline& p) {
  validate(p);
  build_special_tables(p);
  const AttentionShape& s = in.shape;
  if (!s.valid()) fail("invalid attention shape");
  check_mask_and_softcap(in, p);
  if (p.p.norm != PNorm::kNone && p.tile.block_kv < s.len_kv)
    fail("p_norm=warp_sum normalizes P by its block's sum: one KV block must hold every key (bk " +
         std::to_string(p.tile.block_kv) + " < len_kv " + std::to_string(s.len_kv) + ")");
  PreparedInput r;
  r.shape = s;
  r.causal = in.causal;
  r.window = in.window;
  r.softcap = in.softcap;
  r.launch = in.launch;
  r.sm_scale = pipeline_sm_scale(in, p);
  std::vector<float> k_centered;
  r.q = prepare_operand("q", in.q, s.batch * s.heads_q, s.len_q, s.head_dim, p.q, r.sm_scale,
                        k_step_bits(p, Operand::kQ), nullptr);
  r.k = prepare_operand("k", in.k, s.batch * s.heads_kv, s.len_kv, s.head_dim, p.k, r.sm_scale,
                        k_step_bits(p, Operand::kK),
                        p.q.mean != MeanMode::kNone ? &k_centered : nullptr);
  r.v = prepare_operand("v", in.v, s.batch * s.heads_kv, s.len_kv, s.head_dim_v, p.v, r.sm_scale,
                        k_step_bits(p, Operand::kV), nullptr);
  check_v_groups(p, r.v);
  kwidth4_reorder(p, Operand::kQ, r.q);
  kwidth4_reorder(p, Operand::kK, r.k);
  if (p.q.mean != MeanMode::kNone) {
    // ΔS = mean_q(block) · K̃ᵀ (SageAttention2 §3.2, Eq. for smooth Q), K̃ the K after its own
    // smoothing and before quantization, in the FP32 CUDA-core loop.
    const int nb = r.q.means_per_slice;
    r.delta_s.assign(std::size_t(s.batch) * s.heads_q * nb * s.len_kv, 0.0f);
    // One (batch, query head) per iteration, each writing its own rows.
#pragma omp parallel for schedule(static)
    for (int sq = 0; sq < s.batch * s.heads_q; ++sq) {
      const int b = sq / s.heads_q, h = sq % s.heads_q;
      const int sk = b * s.heads_kv + h / s.group();
      for (int blk = 0; blk < nb; ++blk) {
        const float* mu = r.q.mean.data() + (std::size_t(sq) * nb + blk) * s.head_dim;
        float* ds = r.delta_s.data() + (std::size_t(sq) * nb + blk) * s.len_kv;
        for (int j = 0; j < s.len_kv; ++j) {
          const float* kj = k_centered.data() + (std::size_t(sk) * s.len_kv + j) * s.head_dim;
          ds[j] = float(dot_values(DotModel::kFp32, 0.0, mu, kj, s.head_dim));
        }
      }
    }
  }
  if (p.k.mean != MeanMode::kNone) {
    // The LSE of the smoothed scores lacks q·mean_k·sm_scale (SageAttention core.py:
    // `lse + (q @ km^T) * sm_scale`), computed here in FP64 from the input q.
    r.lse_shift.assign(std::size_t(s.batch) * s.heads_q * s.len_q, 0.0);
#pragma omp parallel for schedule(static)
    for (int sq = 0; sq < s.batch * s.heads_q; ++sq) {
      const int b = sq / s.heads_q, h = sq % s.heads_q;
      const int sk = b * s.heads_kv + h / s.group();
      const float* mu = r.k.mean.data() + std::size_t(sk) * r.k.means_per_slice * s.head_dim;
      for (int i = 0; i < s.len_q; ++i) {
        const std::size_t row = std::size_t(sq) * s.len_q + std::size_t(i);
        const float* qi = in.q.data() + row * s.head_dim;
        double acc = 0;
        for (int c = 0; c < s.head_dim; ++c) acc += double(qi[c]) * double(mu[c]);
        r.lse_shift[row] = acc * r.sm_scale;
      }
    }
  }
  return r;
}

}  // namespace attnsim
