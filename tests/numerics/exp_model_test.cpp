// numerics/exp_model: the exponential of the online softmax (every function, the rescale factor).
#include "numerics/exp_model.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace attnsim {
namespace {

TEST(ExpModel, EveryFunctionEvaluatesItsBase) {
  ExpModel<float> e;
  for (ExpFn fn : {ExpFn::kLibm, ExpFn::kExact, ExpFn::kEx2ApproxFtz, ExpFn::kEx2Approx}) {
    e.fn = fn;
    e.kind = ExpKind::kExp2;
    // exp2 of small integers is exact on every model (MUFU.EX2 included: a power of two).
    EXPECT_EQ(e.eval(-3.0f), 0.125f) << int(fn);
    EXPECT_EQ(e.eval(0.0f), 1.0f) << int(fn);
    EXPECT_EQ(e.eval(-std::numeric_limits<float>::infinity()), 0.0f) << int(fn);
  }
  e.kind = ExpKind::kExp;
  e.fn = ExpFn::kExact;
  EXPECT_EQ(e.eval(1.0f), float(std::exp(1.0)));  // FP64 exp rounded once
  ExpModel<double> d;
  d.kind = ExpKind::kExp;
  d.fn = ExpFn::kExact;
  EXPECT_EQ(d.eval(1.0), std::exp(1.0));
}

TEST(ExpModel, HookAndRescaleFactor) {
  ExpModel<float> e;
  e.fn = ExpFn::kHook;
  e.hook = [](float x, const void* ctx) { return x * *static_cast<const float*>(ctx); };
  const float three = 3.0f;
  e.hook_ctx = &three;
  EXPECT_EQ(e.eval(2.0f), 6.0f);
  // alpha(m_old, m) = eval((m_old − m)·scale): FA2's exp2f((max_prev − max_cur)·scale_log2).
  ExpModel<float> a;
  a.scale = 0.5f;
  EXPECT_EQ(a.alpha(2.0f, 6.0f), 0.25f);
  EXPECT_EQ(a.alpha(-std::numeric_limits<float>::infinity(), 6.0f), 0.0f);  // a row's first block
}

}  // namespace
}  // namespace attnsim
