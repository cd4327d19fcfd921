// Stages of the attention pipeline as units of error attribution (see attribution.hpp).
#include "sim/pipeline/attribution.hpp"

#include <stdexcept>

#include "sim/pipeline/options.hpp"

namespace attnsim {

Pipeline exact_pipeline(const Pipeline& method) {
  Pipeline e;
  e.tile = method.tile;
  e.qk.dot = DotModel{DotModel::kFp64};
  e.softmax.state = StateType::kFp64;
  e.softmax.base = method.softmax.base;
  e.softmax.row_sum = RowSum::kSingle;
  e.exp.fn = ExpFn::kExact;
  e.p.enc = Encoding::kFp64;
  e.pv.dot = DotModel{DotModel::kFp64};
  e.pv.acc = method.pv.acc;
  e.normalize.kind = Normalize::kDiv;
  e.out.enc = Encoding::kFp64;
  // A score scaled before the natural exponent (vLLM) stays so: exact in FP64 (coefficient 1), and
  // the place a softcapped input's tanh acts on.
  if (method.softmax.scale_log2 == ScaleLog2::kScoreFirst && method.softmax.base == ExpKind::kExp)
    e.softmax.scale_log2 = ScaleLog2::kScoreFirst;
  // (Every other field keeps FA2's default, already exact: no input rounding, cast, scale or mean,
  // the score path, the raw max without offset, the -inf mask, the input's softmax scale, the
  // natural LSE, an FP32 O accumulator taking P·V in natural key order, the multiply rescale.)
  return canonical(e);
}

void copy_stage(Pipeline& d, const Pipeline& s, Stage stage) {
  switch (stage) {
    case Stage::kQ: d.q = s.q; break;
    case Stage::kK: d.k = s.k; break;
    case Stage::kV: d.v = s.v; break;
    case Stage::kQk: d.qk = s.qk; break;
    case Stage::kSoftmax: d.softmax = s.softmax; break;
    case Stage::kExp: d.exp = s.exp; break;
    case Stage::kP: d.p = s.p; break;
    case Stage::kPv: d.pv = s.pv; break;
    case Stage::kRescale: d.rescale = s.rescale; break;
    case Stage::kNormalize: d.normalize = s.normalize; break;
    case Stage::kOut: d.out = s.out; break;
  }
}

bool stage_differs(const Pipeline& a0, const Pipeline& b0, Stage stage) {
  const Pipeline a = canonical(a0), b = canonical(b0);
  switch (stage) {
    case Stage::kQ: return a.q != b.q;
    case Stage::kK: return a.k != b.k;
    case Stage::kV: return a.v != b.v;
    case Stage::kQk: return a.qk != b.qk;
    case Stage::kSoftmax: return a.softmax != b.softmax;
    case Stage::kExp: return a.exp != b.exp;
    case Stage::kP: return a.p != b.p;
    case Stage::kPv: return a.pv != b.pv;
    case Stage::kRescale: return a.rescale != b.rescale;
    case Stage::kNormalize: return a.normalize != b.normalize;
    case Stage::kOut: return a.out != b.out;
  }
  return false;
}

std::string stage_choice(const Pipeline& p, Stage stage) {
  const OptionList all = stage_options(p, stage);
  const OptionList fa2 = stage_options(Pipeline{}, stage);
  std::string r;
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (i < fa2.size() && fa2[i] == all[i]) continue;
    r += (r.empty() ? "" : ",") + all[i].first + "=" + all[i].second;
  }
  if (r.empty() && !all.empty()) r = all.front().first + "=" + all.front().second;
  return r;
}

namespace {

// `start` with couplings repaired by switching stages other than `fixed` to `target`'s.
Counterfactual repaired(Pipeline start, const Pipeline& target, Stage fixed, const char* how) {
  Counterfactual c{std::move(start), ""};
  Pipeline& p = c.pipeline;
  for (int round = 0; round < 32; ++round) {
    std::string why;
    const Coupling* k = violated_coupling(p, &why);
    if (!k) break;
    std::string switched;
    for (Stage x : k->stages) {
      if (x == fixed || !stage_differs(p, target, x)) continue;
      copy_stage(p, target, x);
      switched += std::string(switched.empty() ? "" : " and ") + stage_name(x);
      if (!k->check(p)) break;
    }
    if (switched.empty()) throw std::invalid_argument(why);
    c.note += (c.note.empty() ? "" : "; ") + switched + " " + how + " (" + why + ")";
  }
  validate(p);
  return c;
}

}  // namespace

Counterfactual only_stage_exact(const Pipeline& method, Stage stage) {
  const Pipeline e = exact_pipeline(method);
  Pipeline p = method;
  copy_stage(p, e, stage);
  return repaired(p, e, stage, "made exact too");
}

Counterfactual only_stage_inexact(const Pipeline& method, Stage stage) {
  Pipeline p = exact_pipeline(method);
  copy_stage(p, method, stage);
  return repaired(p, method, stage, "as the method");
}

}  // namespace attnsim
