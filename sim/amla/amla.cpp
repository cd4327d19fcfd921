// AMLA presets of the attention pipeline and AMLA's own step (see amla.hpp, sim/amla/README.md).
#include "sim/amla/amla.hpp"

#include <cmath>
#include <stdexcept>
#include <vector>

#include "formats/encoding.hpp"
#include "numerics/special.hpp"

namespace attnsim {

namespace {

// CANN's constants (fia_block_vec_nonquant_mla.h, T = float): `static constexpr T LN2 =
// 0.6931471805599453094172; static constexpr T RECIP_OF_LN2 = 1 / LN2;` (a float division of the
// rounded LN2), `FLOAT_E_SCALAR = 8388608`.
constexpr float kLn2f = float(0.6931471805599453094172);
constexpr float kRecipLn2f = 1.0f / kLn2f;
constexpr float kTwo23 = 8388608.0f;

float cast_16(float x, Encoding e, Round r) {
  const Policy pol{r, Overflow::kInf, NanEncoding::kCuda};
  return decode_float_bits(e, encode_float_bits(e, x, pol));
}

// Exp as the target computes it: Ascend's Exp assumed correctly rounded (FP64 exp rounded once:
// its implementation is not public); the H100 analogue's ex2.approx.ftz (equal to the hardware on
// all 2^32 inputs, numerics/special.hpp).
float target_exp(AmlaTarget t, float x) {
  if (t == AmlaTarget::kH100) return Ex2ApproxFtz::h100()(x);
  return float(std::exp(double(x)));
}

RescaleStep step_hook(float m, bool first, double* aux, const void* ctx) {
  return amla_step(*static_cast<const AmlaStepRule*>(ctx), m, first, aux);
}
void finish_hook(float* o, int dv, float l, const double* aux, const void* ctx) {
  amla_finish(*static_cast<const AmlaStepRule*>(ctx), o, dv, l, aux);
}

DotModel dot_of(AmlaAcc a, Encoding in) {
  switch (a) {
    case AmlaAcc::kFp32Seq:
      return DotModel{DotModel::kFp32};
    case AmlaAcc::kBlock16:
      return DotModel{DotModel::kMma,
                      in == Encoding::kFp16 ? MmaInstr::kHmmaF16F32 : MmaInstr::kHmmaBf16F32, 0};
    default:
      return DotModel{DotModel::kExact};
  }
}

}  // namespace

std::string amla_variant_name(AmlaVariant v) {
  return v == AmlaVariant::kBase ? "base" : v == AmlaVariant::kPaper ? "paper" : "cann";
}

std::int32_t amla_cann_n_int(float dn, float eps) {
  // Maxs(N, -30); Adds(eps, 1e-6); Add(N, eps); Muls(N, 2^23); Cast(int32, CAST_ROUND).
  const float n = dn > -30.0f ? dn : -30.0f;
  const float e = eps + 0.000001f;
  const float nf = (n + e) * kTwo23;
  return std::int32_t(std::round(nf));  // CAST_ROUND: ties away from zero
}

RescaleStep amla_step(const AmlaStepRule& r, float m, bool first, double* aux) {
  const bool cann = r.variant == AmlaVariant::kCann;
  const bool base2 = r.target == AmlaTarget::kH100;
  // n_i and S32 = e^{m_i}·2^{n_i} (Alg. 2 lines 8-9; CANN AmlaVecCompute).
  float n, s32;
  if (cann) {
    // Muls(n, max, -RECIP_OF_LN2); Cast(n, CAST_ROUND); Muls(t, max, RECIP_OF_LN2); Add(t, t, n);
    // Muls(t, t, LN2); Exp(t). In log2 units (H100) the two Muls by 1/ln 2 and the one by ln 2 drop
    // out: n = round(-m), S32 = ex2(m + n).
    const float t = base2 ? m : m * kRecipLn2f;
    n = std::round(base2 ? -m : m * -kRecipLn2f);
    s32 = base2 ? target_exp(r.target, t + n) : target_exp(r.target, (t + n) * kLn2f);
  } else {
    // Alg. 2: n_i = round(−m_i / ln 2) (round half even), S32 = exp(ln 2 · (n_i + m_i / ln 2)).
    const float t = base2 ? m : m / kLn2f;
    n = std::nearbyint(-t);
    s32 = base2 ? target_exp(r.target, n + t) : target_exp(r.target, kLn2f * (n + t));
  }
  // S16 = Cast_to_BF16(S32) then back to FP32 (CANN: Cast(KV_T, CAST_ROUND), ties away).
  const float s16 = cast_16(s32, r.s16, cann ? Round::kNearestAway : Round::kNearestEven);
  // The compensation ε of Alg. 2 line 11 / CANN's cof.
  const float c_prev = first ? 1.0f : float(aux[1]);
  float c = 1.0f, eps = 0.0f;
  switch (r.comp) {
    case AmlaComp::kAlg2:
      c = s32 / s16;
      eps = 1.5f * (c / c_prev - 1.0f);
      break;
    case AmlaComp::kAppendix:
      c = s16 / s32;
      eps = 1.5f * (c / c_prev - 1.0f);
      break;
    case AmlaComp::kCann:
      // Div(cof, S32, S16); Div(eps, cof_prev, cof); Adds(eps, -1); Muls(eps, 1.5).
      c = s32 / s16;
      eps = ((c_prev / c) + -1.0f) * 1.5f;
      break;
    default:
      break;
  }
  RescaleStep st;
  st.p_mul = s16;
  st.apply_add = !first;
  // N = n_i − n_{i−1} (CANN: 0 on the first block, "n1=n0").
  const float dn = first ? 0.0f : n - float(aux[0]);
  if (cann) {
    st.o_add = amla_cann_n_int(dn, eps);
  } else {
    // Alg. 2 lines 13-14: N = max(n_i − n_{i−1}, −30) + ε + 10^-6; Cast_to_int32(N·2^23) (RNE).
    const float nf = ((dn > -30.0f ? dn : -30.0f) + eps) + 0.000001f;
    st.o_add = std::int32_t(std::nearbyint(nf * kTwo23));
  }
  aux[0] = n;
  aux[1] = c;
  aux[2] = s16;
  return st;
}

void amla_finish(const AmlaStepRule& r, float* o, int dv, float l, const double* aux) {
  // Alg. 2 line 22: O / (ℓ_N · S16); CANN: aMlaSum = Mul(softmaxSum, S16) on the last block, then
  // DealBmm2ResBaseBlock: CompareScalar(|O|, 1e10, LE) + Select(O, 0) (so NaN and Inf become 0
  // too), RowDivs(O, aMlaSum).
  const float sum = l * float(aux[2]);
  for (int c = 0; c < dv; ++c) {
    float x = o[c];
    if (r.variant == AmlaVariant::kCann && !(std::fabs(x) <= 1e10f)) x = 0.0f;
    o[c] = x / sum;
  }
}

Pipeline amla_pipeline(const AmlaOptions& o) {
  if (o.in != Encoding::kBf16 && o.in != Encoding::kFp16)
    throw std::invalid_argument("amla: the inputs are bf16 or fp16");
  if (o.block < 1 || o.block_q < 1) throw std::invalid_argument("amla: block sizes must be positive");
  const bool cann = o.variant == AmlaVariant::kCann;
  const bool h100 = o.target == AmlaTarget::kH100;
  Pipeline p;
  p.block_q = o.block_q;
  p.block_kv = o.block;
  p.kv_order = KvOrder::kAscending;  // Alg. 1/2: i = 1 .. N
  for (OperandSpec* s : {&p.q, &p.k, &p.v}) {
    s->input = o.in;  // BF16 (FP16) Q, K, V (§5.1)
    s->enc = o.in;
  }
  const AmlaAcc def = h100 ? AmlaAcc::kBlock16 : AmlaAcc::kExact;
  p.qk = dot_of(o.qk_acc == AmlaAcc::kDefault ? def : o.qk_acc, o.in);
  p.pv = dot_of(o.pv_acc == AmlaAcc::kDefault ? def : o.pv_acc, o.in);
  p.state = StateType::kFp32;
  // S = S·scale (CANN ElewiseCompute Muls; Alg. 1 line 7 S/√D_k), m = rowmax(S), P = exp(S − m):
  // the max lives in the exponent's units and nothing is fused.
  p.max_domain = MaxDomain::kScaled;
  p.fma = false;
  p.exp_base = h100 ? ExpKind::kExp2 : ExpKind::kExp;
  p.exp_fn = h100 ? ExpFn::kEx2ApproxFtz : ExpFn::kExact;
  p.row_sum = RowSum::kSingle;  // SoftmaxFlashV2's order is not public: one sum in key order
  p.p = o.in;  // Alg. 1: P cast to the input type for P·V; Alg. 2 line 12: (P·S16) cast to BF16
  p.p_cast = Policy{cann ? Round::kNearestAway : Round::kNearestEven, Overflow::kInf,
                    NanEncoding::kCuda};
  p.pv_acc = PvAccumulate::kChunk;  // T_i = P_i V_i from zero, then O + T_i (an FP32 add)
  p.normalize = Normalize::kDiv;    // Alg. 1 line 11 O / ℓ
  p.out = o.out ? *o.out : o.in;
  // CANN Bmm2CastAndCopyOut: bf16 by CAST_RINT, fp16 by CAST_ROUND.
  p.out_cast = Policy{cann && p.out == Encoding::kFp16 ? Round::kNearestAway : Round::kNearestEven,
                      Overflow::kInf, NanEncoding::kCuda};
  if (o.variant != AmlaVariant::kBase) {
    // One immutable rule per combination, so the pipeline's context outlives the call.
    static const std::vector<AmlaStepRule> rules = [] {
      std::vector<AmlaStepRule> t;
      for (AmlaVariant v : {AmlaVariant::kPaper, AmlaVariant::kCann})
        for (int c = 0; c < 5; ++c)
          for (AmlaTarget g : {AmlaTarget::kAscend, AmlaTarget::kH100})
            for (Encoding e : {Encoding::kBf16, Encoding::kFp16})
              t.push_back(AmlaStepRule{v, AmlaComp(c), g, e});
      return t;
    }();
    // The paper variant's default is Appendix A's direction (the paper's intent: Alg. 2 line 11
    // prints the reciprocal ratio, which doubles the error instead of compensating it; comp=alg2
    // is that literal reading, sim/amla/README.md).
    const AmlaComp comp = o.comp != AmlaComp::kDefault ? o.comp
                          : cann                       ? AmlaComp::kCann
                                                       : AmlaComp::kAppendix;
    const std::size_t idx = ((std::size_t(cann ? 1 : 0) * 5 + std::size_t(comp)) * 2 +
                             std::size_t(h100 ? 1 : 0)) * 2 +
                            std::size_t(o.in == Encoding::kFp16 ? 1 : 0);
    p.rescale = Rescale::kHook;
    p.rescale_hook.step = step_hook;
    p.rescale_hook.finish = finish_hook;
    p.rescale_hook.ctx = &rules[idx];
    // The GPU analogue adds each chunk onto O in global memory by a float atomicAdd.
    p.rescale_hook.add_ftz = h100;
    static const char* kComp[] = {"default", "none", "alg2", "appendix", "cann"};
    p.rescale_hook.name = "amla_" + amla_variant_name(o.variant) + "/" + kComp[int(comp)] +
                          (h100 ? "/h100" : "/ascend");
  } else if (o.comp != AmlaComp::kDefault) {
    throw std::invalid_argument("amla: variant=base has no compensation (comp applies to paper, cann)");
  }
  validate(p);
  return p;
}

}  // namespace attnsim
