// AMLA presets of the attention pipeline and AMLA's own step (see amla.hpp, sim/amla/README.md).
#include "sim/amla/amla.hpp"

#include <cmath>
#include <stdexcept>
#include <memory>
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


// Exp as the target computes it: Ascend's Exp assumed correctly rounded (FP64 exp rounded once:
// its implementation is not public); the H100 analogue's ex2.approx.ftz (equal to the hardware on
// all 2^32 inputs, numerics/special.hpp).
float target_exp(AmlaTarget t, float x) {
  if (t == AmlaTarget::kH100) return Ex2ApproxFtz::h100()(x);
  return float(std::exp(double(x)));
}

const char* comp_name(AmlaComp c) {
  static const char* kComp[] = {"default", "none", "alg2", "appendix", "cann"};
  return kComp[int(c)];
}

class AmlaRescaleHook final : public RescaleHook {
 public:
  explicit AmlaRescaleHook(const AmlaStepRule& r) : rule_(r) {}
  RescaleStep step(float m, bool first, double* state) const override {
    return amla_step(rule_, m, first, state);
  }
  void finish(float* o, int dv, float l, const double* state) const override {
    amla_finish(rule_, o, dv, l, state);
  }
  std::string name() const override { return "amla_" + amla_variant_name(rule_.variant); }
  OptionList options() const override {
    return {{"amla_comp", comp_name(rule_.comp)},
            {"amla_target", rule_.target == AmlaTarget::kH100 ? "h100" : "ascend"},
            {"amla_s16", encoding_name(rule_.s16)}};
  }

 private:
  AmlaStepRule rule_;
};

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
  const float s16 =
      round_to(r.s16, s32, Policy{cann ? Round::kNearestAway : Round::kNearestEven, Overflow::kInf,
                                  NanEncoding::kCuda});
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
  p.tile.block_q = o.block_q;
  p.tile.block_kv = o.block;
  p.tile.kv_order = KvOrder::kAscending;  // Alg. 1/2: i = 1 .. N
  for (OperandSpec* s : {&p.q, &p.k, &p.v}) {
    s->input = o.in;  // BF16 (FP16) Q, K, V (§5.1)
    s->enc = o.in;
  }
  const AmlaAcc def = h100 ? AmlaAcc::kBlock16 : AmlaAcc::kExact;
  p.qk.dot = dot_of(o.qk_sum == AmlaAcc::kDefault ? def : o.qk_sum, o.in);
  p.pv.dot = dot_of(o.pv_sum == AmlaAcc::kDefault ? def : o.pv_sum, o.in);
  p.softmax.state = StateType::kFp32;
  // S = S·scale (CANN ElewiseCompute Muls; Alg. 1 line 7 S/√D_k), m = rowmax(S), P = exp(S − m):
  // the max lives in the exponent's units and nothing is fused.
  p.softmax.max_domain = MaxDomain::kScaled;
  p.softmax.fma = false;
  p.softmax.base = h100 ? ExpKind::kExp2 : ExpKind::kExp;
  p.exp.fn = h100 ? ExpFn::kEx2ApproxFtz : ExpFn::kExact;
  p.softmax.row_sum = RowSum::kSingle;  // SoftmaxFlashV2's order is not public: one sum in key order
  p.p.enc = o.in;  // Alg. 1: P cast to the input type for P·V; Alg. 2 line 12: (P·S16) cast to BF16
  p.p.cast = Policy{cann ? Round::kNearestAway : Round::kNearestEven, Overflow::kInf,
                    NanEncoding::kCuda};
  p.pv.acc = PvAccumulate::kChunk;  // T_i = P_i V_i from zero, then O + T_i (an FP32 add)
  p.normalize.kind = Normalize::kDiv;    // Alg. 1 line 11 O / ℓ
  p.out.enc = o.out ? *o.out : o.in;
  // CANN Bmm2CastAndCopyOut: bf16 by CAST_RINT, fp16 by CAST_ROUND.
  p.out.cast = Policy{cann && p.out.enc == Encoding::kFp16 ? Round::kNearestAway : Round::kNearestEven,
                      Overflow::kInf, NanEncoding::kCuda};
  if (o.variant != AmlaVariant::kBase) {
    // The paper variant's default is Appendix A's direction (the paper's intent: Alg. 2 line 11
    // prints the reciprocal ratio, which doubles the error instead of compensating it; comp=alg2
    // is that literal reading, sim/amla/README.md).
    const AmlaComp comp = o.comp != AmlaComp::kDefault ? o.comp
                          : cann                       ? AmlaComp::kCann
                                                       : AmlaComp::kAppendix;
    p.rescale.kind = Rescale::kHook;
    p.rescale.hook = amla_hook(AmlaStepRule{o.variant, comp, o.target, o.in});
    // The GPU analogue adds each chunk onto O in global memory by a float atomicAdd.
    if (h100) p.pv.chunk_add = ChunkAdd::kRedFtz;
  } else if (o.comp != AmlaComp::kDefault) {
    throw std::invalid_argument("amla: variant=base has no compensation (comp applies to paper, cann)");
  }
  validate(p);
  return canonical(p);
}

HookRef<RescaleHook> amla_hook(const AmlaStepRule& r) {
  return {std::make_shared<AmlaRescaleHook>(r)};
}

std::vector<RescaleHookSpec> amla_hook_specs() {
  auto key = [](const char* k, std::vector<std::string> choices, const char* def, const char* help) {
    return hook_key(k, "rescale", std::move(choices), def, help);
  };
  std::vector<RescaleHookSpec> r;
  for (AmlaVariant v : {AmlaVariant::kPaper, AmlaVariant::kCann}) {
    RescaleHookSpec h;
    h.name = "amla_" + amla_variant_name(v);
    h.help = v == AmlaVariant::kPaper
                 ? "AMLA Algorithm 2's integer-add rescale with the BF16 compensation (sim/amla)"
                 : "the CANN kernel's integer-add rescale (ties away, -30 clamp, +1e-6; sim/amla)";
    h.keys = {key("amla_comp", {"none", "alg2", "appendix", "cann"},
                  v == AmlaVariant::kPaper ? "appendix" : "cann",
                  "rescale=amla_*: the BF16 compensation (appendix: Appendix A; alg2: Alg. 2 line 11 "
                  "as printed; cann: the kernel's)"),
              key("amla_target", {"ascend", "h100"}, "ascend",
                  "rescale=amla_*: natural-log step (Ascend) or log2 with ex2.approx.ftz (H100)"),
              key("amla_s16", {"bf16", "fp16"}, "bf16", "rescale=amla_*: the format of S16")};
    h.make = [v](const OptionMap& m) {
      AmlaStepRule rule;
      rule.variant = v;
      const std::string c = m.at("amla_comp");
      rule.comp = c == "none"       ? AmlaComp::kNone
                  : c == "alg2"     ? AmlaComp::kAlg2
                  : c == "appendix" ? AmlaComp::kAppendix
                                    : AmlaComp::kCann;
      rule.target = m.at("amla_target") == "h100" ? AmlaTarget::kH100 : AmlaTarget::kAscend;
      rule.s16 = m.at("amla_s16") == "fp16" ? Encoding::kFp16 : Encoding::kBf16;
      return amla_hook(rule);
    };
    r.push_back(std::move(h));
  }
  return r;
}

}  // namespace attnsim
