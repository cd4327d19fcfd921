// Stages of the attention pipeline as units of error attribution (see stages.hpp).
#include "sim/pipeline/stages.hpp"

#include <stdexcept>

namespace attnsim {

namespace {

Encoding product_encoding(const OperandSpec& s) {
  return s.scale != ScaleMode::kNone && s.apply == ScaleAt::kOperand ? s.dequant_to : s.enc;
}

// Whether an instruction model's operand formats are what the pipeline gives it.
bool product_fits(const DotModel& m, Encoding a, Encoding b) {
  if (m.kind != DotModel::kMma) return true;
  const DotRequirements r = dot_requirements(m);
  return a == r.a_enc && b == r.b_enc;
}

std::string needs(const DotModel& m) {
  const DotRequirements r = dot_requirements(m);
  return dot_model_name(m) + " takes " + encoding_name(r.a_enc) + " x " + encoding_name(r.b_enc) +
         " operands";
}

bool same_policy(const Policy& a, const Policy& b) {
  return a.round == b.round && a.overflow == b.overflow && a.nan == b.nan;
}

}  // namespace

const std::vector<StageInfo>& pipeline_stages() {
  static const std::vector<StageInfo> k{
      {Stage::kQ, "q", "Q preparation (cast, quantization, mean, prescale)"},
      {Stage::kK, "k", "K preparation"},
      {Stage::kV, "v", "V preparation"},
      {Stage::kQk, "qk", "QKᵀ product and its int32 -> FP32 conversion"},
      {Stage::kSoftmax, "softmax",
       "state arithmetic, max domain and offset, dequantization order, FMA, row-sum lanes"},
      {Stage::kExp, "exp", "exp function"},
      {Stage::kP, "p", "P cast before P·V"},
      {Stage::kPv, "pv", "P·V product"},
      {Stage::kRescale, "rescale", "rescale of O and l (and the snapped max it needs)"},
      {Stage::kNormalize, "normalize", "epilogue O / l"},
      {Stage::kOut, "out", "output format"},
  };
  return k;
}

Pipeline exact_pipeline(const Pipeline& method) {
  Pipeline e;
  e.block_q = method.block_q;
  e.block_kv = method.block_kv;
  e.kv_order = method.kv_order;
  e.pv_acc = method.pv_acc;
  e.exp_base = method.exp_base;
  e.q = OperandSpec{};
  e.k = OperandSpec{};
  e.v = OperandSpec{};
  e.qk = DotModel{DotModel::kFp64};
  e.pv = DotModel{DotModel::kFp64};
  e.int_cvt = Round::kNearestEven;
  e.dequant = Dequant::kScore;
  e.state = StateType::kFp64;
  e.exp_fn = ExpFn::kExact;
  e.fma = true;
  e.max_domain = MaxDomain::kRaw;
  e.max_offset = 0.0;
  e.max_round = MaxRound::kNone;
  e.row_sum = RowSum::kSingle;
  e.p = Encoding::kFp64;
  e.p_scale = PScale::kNone;
  e.rescale = Rescale::kMultiply;
  e.normalize = Normalize::kDiv;
  e.out = Encoding::kFp64;
  // (Every other field keeps its default: host-double scale_log2, no dequant tail, natural LSE,
  // an FP32 O accumulator taking P·V in natural key order, unfused rescale.)
  return e;
}

void copy_stage(Pipeline& d, const Pipeline& s, Stage stage) {
  switch (stage) {
    case Stage::kQ:
      d.q = s.q;
      break;
    case Stage::kK:
      d.k = s.k;
      break;
    case Stage::kV:
      d.v = s.v;
      break;
    case Stage::kQk:
      d.qk = s.qk;
      d.int_cvt = s.int_cvt;
      break;
    case Stage::kSoftmax:
      d.state = s.state;
      d.scale_log2 = s.scale_log2;
      d.dequant_tail = s.dequant_tail;
      d.row_sum_mma = s.row_sum_mma;
      d.max_domain = s.max_domain;
      d.max_offset = s.max_offset;
      d.dequant = s.dequant;
      d.fma = s.fma;
      d.row_sum = s.row_sum;
      d.mask_value = s.mask_value;
      break;
    case Stage::kExp:
      d.exp_fn = s.exp_fn;
      d.exp_hook = s.exp_hook;
      d.exp_hook_ctx = s.exp_hook_ctx;
      d.exp_hook_name = s.exp_hook_name;
      break;
    case Stage::kP:
      d.p = s.p;
      d.p_cast = s.p_cast;
      d.p_scale = s.p_scale;
      d.p_quantizer = s.p_quantizer;
      break;
    case Stage::kPv:
      d.pv = s.pv;
      d.pv_perm16 = s.pv_perm16;
      d.o_accum = s.o_accum;
      break;
    case Stage::kRescale:
      d.rescale = s.rescale;
      d.rescale_fused = s.rescale_fused;
      d.max_round = s.max_round;
      break;
    case Stage::kNormalize:
      d.normalize = s.normalize;
      break;
    case Stage::kOut:
      d.out = s.out;
      d.out_cast = s.out_cast;
      d.lse = s.lse;
      break;
  }
}

bool stage_differs(const Pipeline& a, const Pipeline& b, Stage stage) {
  switch (stage) {
    case Stage::kQ:
      return !(a.q == b.q);
    case Stage::kK:
      return !(a.k == b.k);
    case Stage::kV:
      return !(a.v == b.v);
    case Stage::kQk:
      return !(a.qk == b.qk) || a.int_cvt != b.int_cvt;
    case Stage::kSoftmax:
      return a.state != b.state || a.scale_log2 != b.scale_log2 ||
             a.dequant_tail != b.dequant_tail || !(a.row_sum_mma == b.row_sum_mma) ||
             a.max_domain != b.max_domain || a.max_offset != b.max_offset ||
             a.dequant != b.dequant || a.fma != b.fma || a.row_sum != b.row_sum ||
             a.mask_value != b.mask_value;
    case Stage::kExp:
      return a.exp_fn != b.exp_fn || a.exp_hook != b.exp_hook || a.exp_hook_ctx != b.exp_hook_ctx;
    case Stage::kP:
      return a.p != b.p || !same_policy(a.p_cast, b.p_cast) || a.p_scale != b.p_scale ||
             (a.p_scale != PScale::kNone && std::string(a.p_quantizer.name) != b.p_quantizer.name);
    case Stage::kPv:
      return !(a.pv == b.pv) || a.pv_perm16 != b.pv_perm16 || a.o_accum != b.o_accum;
    case Stage::kRescale:
      return a.rescale != b.rescale || a.rescale_fused != b.rescale_fused ||
             a.max_round != b.max_round;
    case Stage::kNormalize:
      return a.normalize != b.normalize;
    case Stage::kOut:
      return a.out != b.out || !same_policy(a.out_cast, b.out_cast) || a.lse != b.lse;
  }
  return false;
}

std::string stage_choice(const Pipeline& p, Stage stage) {
  // The matching fragment of describe(): the words between "key=" markers of that stage.
  const std::string d = describe(p);
  auto field = [&](const std::string& key) {
    const auto at = d.find(" " + key + "=");
    if (at == std::string::npos) return std::string();
    const auto start = at + key.size() + 2;
    return d.substr(start, d.find(' ', start) - start);
  };
  switch (stage) {
    case Stage::kQ:
      return field("q");
    case Stage::kK:
      return field("k");
    case Stage::kV:
      return field("v");
    case Stage::kQk:
      return field("qk") + " int_cvt=" + field("int_cvt");
    case Stage::kSoftmax: {
      std::string r = "state=" + field("state") + " max=" + field("max") +
                      " dequant=" + field("dequant") + " fma=" + field("fma") +
                      " rowsum=" + field("rowsum");
      if (!field("mask").empty()) r += " mask=" + field("mask");
      return r;
    }
    case Stage::kExp:
      return field("exp");
    case Stage::kP:
      return field("p");
    case Stage::kPv:
      return field("pv");
    case Stage::kRescale:
      return field("rescale") + " max_round=" + field("max_round");
    case Stage::kNormalize:
      return field("norm");
    case Stage::kOut:
      return field("out");
  }
  return "";
}

Counterfactual only_stage_exact(const Pipeline& method, Stage stage) {
  const Pipeline e = exact_pipeline(method);
  Counterfactual c{method, ""};
  copy_stage(c.pipeline, e, stage);
  Pipeline& p = c.pipeline;
  if (!product_fits(p.qk, product_encoding(p.q), product_encoding(p.k))) {
    c.note = "qk made exact too (" + needs(p.qk) + ")";
    copy_stage(p, e, Stage::kQk);
  }
  if (!product_fits(p.pv, p.p, product_encoding(p.v))) {
    if (!c.note.empty()) c.note += "; ";
    c.note += "pv made exact too (" + needs(p.pv) + ")";
    copy_stage(p, e, Stage::kPv);
  }
  validate(p);
  return c;
}

Counterfactual only_stage_inexact(const Pipeline& method, Stage stage) {
  Counterfactual c{exact_pipeline(method), ""};
  Pipeline& p = c.pipeline;
  copy_stage(p, method, stage);
  if (!product_fits(p.qk, product_encoding(p.q), product_encoding(p.k))) {
    c.note = "q and k as the method (" + needs(p.qk) + ")";
    copy_stage(p, method, Stage::kQ);
    copy_stage(p, method, Stage::kK);
  }
  if (!product_fits(p.pv, p.p, product_encoding(p.v))) {
    if (!c.note.empty()) c.note += "; ";
    c.note += "p and v as the method (" + needs(p.pv) + ")";
    copy_stage(p, method, Stage::kP);
    copy_stage(p, method, Stage::kV);
  }
  validate(p);
  return c;
}

}  // namespace attnsim
