// FlashAttention-2 forward as a pipeline preset (see flash.hpp and sim/flash/README.md).
#include "sim/flash/flash.hpp"

#include <stdexcept>

namespace attnsim {

namespace {

// The conversion of a storage format under the config's policies: fp8 formats take the fp8
// policy (cvt.rn.satfinite), 16-bit formats the half policy (cvt.rn).
Policy policy_for(Encoding e, const StoragePolicy& c) {
  return e == Encoding::kE4m3fn || e == Encoding::kE5m2 ? c.fp8 : c.half;
}

std::string policy_text(const Policy& p) {
  return std::string(round_spelling(p.round)) + "/" + overflow_spelling(p.overflow);
}

DotModel::Kind resolve(DotChoice d, Accum acc) {
  if (d == DotChoice::kFp32) return DotModel::kFp32;
  if (d == DotChoice::kFp64) return DotModel::kFp64;
  return acc == Accum::kFp32 ? DotModel::kFp32 : DotModel::kFp64;
}

}  // namespace

Pipeline flash_pipeline(const FlashConfig& c) {
  Pipeline p;
  p.block_q = c.block_q;
  p.block_kv = c.block_kv;
  p.kv_order = c.kv_order;
  // 0. Q, K, V rounded to their storage formats once, up front (FA2's inputs are fp16/bf16
  //    tensors; fp8 here is the same cast with cvt.rn.satfinite).
  p.q.enc = c.q;
  p.q.cast = policy_for(c.q, c.conversion);
  p.k.enc = c.k;
  p.k.cast = policy_for(c.k, c.conversion);
  p.v.enc = c.v;
  p.v.cast = policy_for(c.v, c.conversion);
  // 1-4. The CUDA-core products of this reference (the kernel's HMMA is a pipeline choice), FA2's
  //    softmax_rescale_o in the raw max domain, exp2 with the folded scale_log2 (FFMA), quad row
  //    sums, P cast by convert_type, O the C of the second GEMM, multiply rescale.
  p.qk.kind = resolve(c.qk_dot, c.acc);
  p.pv.kind = resolve(c.pv_dot, c.acc);
  p.state = c.acc == Accum::kFp32 ? StateType::kFp32 : StateType::kFp64;
  p.exp_base = c.exp;
  p.exp_fn = ExpFn::kLibm;
  p.fma = c.fma;
  p.max_domain = MaxDomain::kRaw;
  p.row_sum = c.row_sum;
  p.p = c.p;
  p.p_cast = policy_for(c.p, c.conversion);
  p.pv_acc = PvAccumulate::kIntoC;
  p.rescale = Rescale::kMultiply;
  // 5. normalize_softmax_lse: O · (1/l), O converted to the output type.
  p.normalize = Normalize::kRcp;
  p.out = c.out;
  p.out_cast = c.conversion.half;
  return p;
}

std::string describe(const FlashConfig& c) {
  auto dot = [&](DotChoice d) { return resolve(d, c.acc) == DotModel::kFp32 ? "fp32" : "fp64"; };
  return std::string("flash2 bq=") + std::to_string(c.block_q) +
         " bk=" + std::to_string(c.block_kv) + " q=" + encoding_name(c.q) +
         " k=" + encoding_name(c.k) + " v=" + encoding_name(c.v) + " p=" + encoding_name(c.p) +
         " out=" + encoding_name(c.out) + " fp8=" + policy_text(c.conversion.fp8) +
         " half=" + policy_text(c.conversion.half) +
         " acc=" + (c.acc == Accum::kFp32 ? "fp32" : "fp64") + " qk=" + dot(c.qk_dot) +
         " pv=" + dot(c.pv_dot) + " exp=" + (c.exp == ExpKind::kExp2 ? "exp2" : "exp") +
         " fma=" + (c.fma ? "on" : "off") +
         " kv=" + (c.kv_order == KvOrder::kDescending ? "desc" : "asc") +
         " rowsum=" + (c.row_sum == RowSum::kQuad ? "quad" : "single");
}

FlashResult flash_attention(const AttentionInput& in, const FlashConfig& cfg) {
  if (!in.shape.valid()) throw std::invalid_argument("flash_attention: invalid shape");
  if (cfg.out != Encoding::kFp32 && cfg.out != Encoding::kBf16 && cfg.out != Encoding::kFp16)
    throw std::invalid_argument("flash_attention: output format must be fp32, bf16 or fp16");
  for (Encoding e : {cfg.q, cfg.k, cfg.v, cfg.p}) {
    if (!is_float_encoding(e) || e == Encoding::kFp64)
      throw std::invalid_argument(std::string("flash_attention: storage format ") +
                                  encoding_name(e) + " is not fp32, bf16, fp16, e4m3fn or e5m2");
  }
  const PipelineResult r = run_pipeline(in, flash_pipeline(cfg));
  FlashResult out;
  out.o.assign(r.o.begin(), r.o.end());
  out.lse.assign(r.lse.begin(), r.lse.end());
  return out;
}

std::vector<float> flash_attention_ref(const AttentionInput& in, const FlashConfig& cfg) {
  return flash_attention(in, cfg).o;
}

}  // namespace attnsim
