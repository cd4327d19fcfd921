// What the stage functions share: the tile buffers, the exponent's constants and exp model.
#include <type_traits>

#include "numerics/mma_tile.hpp"
#include "sim/pipeline/stages/stages.hpp"

namespace attnsim {

template <class T>
void TileBuffers<T>::size(int rows, int bk, int dv) {
  const std::size_t n = std::size_t(rows) * bk;
  acc.resize(n);
  s.resize(n);
  coef.resize(n);
  x.resize(n);
  p.resize(n);
  pc.resize(n);
  pf.resize(n);
  alpha_arg.resize(std::size_t(rows));
  alpha.resize(std::size_t(rows));
  first.resize(std::size_t(rows));
  p_mul.resize(std::size_t(rows));
  p_scale.resize(std::size_t(rows));
  chunk.resize(std::size_t(rows) * dv);
  q_key = next_mma_tile_key();  // a new tile (attend_tile sizes the buffers once per tile)
}

template <class T>
ExpConstants<T> exp_constants(const Pipeline& p, double sm_scale) {
  constexpr double kLog2e = 1.44269504088896340736;
  constexpr double kLn2 = 0.69314718055994530942;
  const double sm = std::is_same_v<T, float> ? double(float(sm_scale)) : sm_scale;
  const SoftmaxStage& s = p.softmax;
  ExpConstants<T> k;
  if (p.q.prescale == Prescale::kSmScaleLog2e) {
    k.c = T(1);
    k.c_nat = T(kLn2);
  } else if (p.q.prescale == Prescale::kSmScale) {
    k.c = T(1);
    k.c_nat = T(1);
  } else if (p.q.prescale == Prescale::kSqrtSm) {
    // Q and K each carry sqrt(sm_scale): the score is scaled (PyTorch's math backend).
    k.c = s.base == ExpKind::kExp2 ? T(kLog2e) : T(1);
    k.c_nat = T(1);
  } else if (s.scale_log2 == ScaleLog2::kScoreFirst && s.base == ExpKind::kExp2) {
    // The CUTLASS fmha with bias support: `accum = p.scale * accum` (the score rounded), then
    // iterative_softmax's `scaling * kLog2e` with scaling = 1.0f: the coefficient is fl32(log2 e).
    k.c = T(1.44269504088896340736f);
    k.c_nat = T(1);
    k.score_scale = T(sm);
  } else if (s.scale_log2 == ScaleLog2::kScoreFirst) {
    // The natural exponent of a scaled score (vLLM's unified_attention: S = fma(scale, D, 0),
    // p = tl.exp(S − m)): the argument is fl(S − m) itself; the exp function carries log2 e.
    k.c = T(1);
    k.c_nat = T(1);
    k.score_scale = T(sm);
  } else if (s.scale_log2 == ScaleLog2::kDeviceFloat && s.base == ExpKind::kExp2) {
    // SageAttention2: `sm_scale *= math::log2e` on the device, FMUL.FTZ of two FP32 values.
    k.c = T(float(sm_scale) * 1.44269504088896340736f);
    k.c_nat = T(sm);
  } else {
    k.c = s.base == ExpKind::kExp2 ? T(sm * kLog2e) : T(sm);
    k.c_nat = T(sm);
  }
  return k;
}

namespace {
float exp_hook_thunk(float x, const void* ctx) { return static_cast<const ExpHook*>(ctx)->eval(x); }
}  // namespace

template <class T>
ExpModel<T> exp_model(const ExpStage& e, ExpKind base, T c) {
  ExpModel<T> m;
  m.kind = base;
  m.scale = c;
  m.fn = e.fn;
  if (e.fn == ExpFn::kHook && e.hook) {
    m.hook = exp_hook_thunk;
    m.hook_ctx = e.hook.get();
  }
  return m;
}

int row_sum_lanes(RowSum r) {
  return r == RowSum::kQuad || r == RowSum::kSageLanes || r == RowSum::kQuadFma ||
                 r == RowSum::kQuadBlock || r == RowSum::kAtomicWarps
             ? 4
             : 1;
}

template struct TileBuffers<float>;
template struct TileBuffers<double>;
template ExpConstants<float> exp_constants<float>(const Pipeline&, double);
template ExpConstants<double> exp_constants<double>(const Pipeline&, double);
template ExpModel<float> exp_model<float>(const ExpStage&, ExpKind, float);
template ExpModel<double> exp_model<double>(const ExpStage&, ExpKind, double);

}  // namespace attnsim
