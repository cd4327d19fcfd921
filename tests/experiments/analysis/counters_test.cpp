// The silent-failure counters (sim/pipeline/counters.hpp) against counts made here from the
// inputs: small inputs built so that each event kind happens at known (row, key) pairs, the
// expected count taken from an FP64 evaluation of the condition (never from the counter code);
// counting changes no output bit and does not depend on the thread count.
#include "sim/pipeline/counters.hpp"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "experiments/methods/methods.hpp"

namespace attnsim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// rows queries, keys keys, head dim d (= dv), sm_scale 1; q_i = e_0 and k_j = a_j e_0, so the
// score of (i, j) is a_j; V from `v`.
AttentionInput scored(int rows, const std::vector<double>& a, int d, double v) {
  AttentionInput in;
  const int n = int(a.size());
  in.shape = AttentionShape{1, 1, 1, rows, n, d, d};
  in.sm_scale = 1.0;
  in.q.assign(std::size_t(rows) * d, 0.0f);
  in.k.assign(std::size_t(n) * d, 0.0f);
  in.v.assign(std::size_t(n) * d, float(v));
  for (int i = 0; i < rows; ++i) in.q[std::size_t(i) * d] = 1.0f;
  for (int j = 0; j < n; ++j) in.k[std::size_t(j) * d] = float(a[std::size_t(j)]);
  return in;
}

struct Counted {
  MethodOutput out;
  StageCounters c;
};
Counted run_counted(const std::string& method, const AttentionInput& in) {
  Counted r;
  CounterScope scope(&r.c);
  r.out = parse_method(method).run(in);
  return r;
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

TEST(Counters, PValuesVanishingInTheFp8Cast) {
  std::vector<double> a(64, -1.0);
  a[0] = 0.0;
  for (int j = 3; j < 64; j += 4) a[std::size_t(j)] = -20.0;
  const AttentionInput in = scored(8, a, 4, 1.0);
  // Expected: keys whose p = exp(a - max) is below half e4m3fn's least subnormal (2^-10).
  std::int64_t want = 0;
  for (double x : a) want += std::exp(x) < std::ldexp(1.0, -10);
  want *= 8;
  const Counted r = run_counted("flash:p=e4m3fn", in);
  EXPECT_EQ(r.c.get(CounterStage::kPCast, CounterEvent::kPVanished), want);
  EXPECT_EQ(r.c.total(CounterEvent::kPVanished), want);
  EXPECT_EQ(r.c.first[int(CounterStage::kPCast)].row, 0);
  EXPECT_EQ(r.c.first[int(CounterStage::kPCast)].col, 3);
  // Counting changes no bit.
  EXPECT_TRUE(same_bits(r.out.o, parse_method("flash:p=e4m3fn").run(in).o));
}

TEST(Counters, ExpUnderflowAndFtzFlush) {
  std::vector<double> a(64, -1.0);
  a[0] = 0.0;
  for (int j = 10; j < 20; ++j) a[std::size_t(j)] = -200.0;           // e^-200: below 2^-149
  for (int j = 30; j < 36; ++j) a[std::size_t(j)] = -135.0 * std::log(2.0);  // 2^-135: subnormal
  const AttentionInput in = scored(4, a, 4, 1.0);
  std::int64_t under = 0, sub = 0;
  for (double x : a) {
    const double l2 = x / std::log(2.0);
    under += l2 < -150;
    sub += l2 >= -149 && l2 < -126;
  }
  const Counted lib = run_counted("flash", in);
  EXPECT_EQ(lib.c.get(CounterStage::kExp, CounterEvent::kUnderflowZero), 4 * under);
  EXPECT_EQ(lib.c.get(CounterStage::kExp, CounterEvent::kFlushedSubnormal), 0);  // libm keeps them
  const Counted ftz = run_counted("flash:exp=ex2.approx.ftz", in);
  EXPECT_EQ(ftz.c.get(CounterStage::kExp, CounterEvent::kUnderflowZero), 4 * under);
  EXPECT_EQ(ftz.c.get(CounterStage::kExp, CounterEvent::kFlushedSubnormal), 4 * sub);
  EXPECT_EQ(ftz.c.first[int(CounterStage::kExp)].col, 10);
}

TEST(Counters, QkOverflowAndInfMinusInfAndZeroTimesInf) {
  std::vector<double> a(64, -1.0);
  a[0] = 0.0;
  a[5] = -200.0;
  AttentionInput in = scored(6, a, 4, 1.0);
  // QKᵀ overflow: q_i[1] = k_j[1] = 1e20 for keys 40..44 (1e40 > FLT_MAX).
  for (int i = 0; i < 6; ++i) in.q[std::size_t(i) * 4 + 1] = 1e20f;
  for (int j = 40; j < 45; ++j) in.k[std::size_t(j) * 4 + 1] = 1e20f;
  std::int64_t over = 0;
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 64; ++j) {
      double s = 0;
      for (int x = 0; x < 4; ++x) s += double(in.q[std::size_t(i) * 4 + x]) * double(in.k[std::size_t(j) * 4 + x]);
      over += std::fabs(s) > double(std::numeric_limits<float>::max());
    }
  const Counted r = run_counted("flash", in);
  EXPECT_EQ(r.c.get(CounterStage::kQk, CounterEvent::kOverflowInf), over);
  EXPECT_EQ(over, 30);
  // Inf − Inf: those +Inf scores are the rows' max, so x = s − m is NaN for each of them.
  EXPECT_EQ(r.c.get(CounterStage::kSoftmax, CounterEvent::kNanInfMinusInf), over);
  // 0 · Inf: V[5][3] = Inf on a key whose p underflows to 0 (no overflowing keys now).
  AttentionInput z = scored(6, a, 4, 1.0);
  z.v[5 * 4 + 3] = std::numeric_limits<float>::infinity();
  const Counted q = run_counted("flash", z);
  std::int64_t zero_inf = 0;
  for (int i = 0; i < 6; ++i) zero_inf += std::exp(a[5] - 0.0) < std::ldexp(1.0, -150);
  EXPECT_EQ(q.c.get(CounterStage::kPv, CounterEvent::kNanZeroTimesInf), zero_inf);
  EXPECT_EQ(q.c.first[int(CounterStage::kPv)].col, 3);
}

TEST(Counters, PCastSaturation) {
  std::vector<double> a(64, -3.0);
  a[0] = 0.0;
  for (int j = 20; j < 30; ++j) a[std::size_t(j)] = -0.1;
  const AttentionInput in = scored(3, a, 4, 1.0);
  std::int64_t sat = 0;
  for (double x : a) sat += std::exp(x) * 1000.0 > 448.0;
  const Counted r = run_counted("flash:p=e4m3fn,p_static=1000", in);
  EXPECT_EQ(r.c.get(CounterStage::kPCast, CounterEvent::kSaturation), 3 * sat);
  EXPECT_EQ(sat, 11);
}

TEST(Counters, OutputUnderflowInTheCast) {
  std::vector<double> a(64, -1.0);
  const AttentionInput in = scored(5, a, 8, 1e-9);
  // O / l = 1e-9 < 2^-25, half fp16's least subnormal: every element rounds to 0.
  const Counted r = run_counted("flash:out=fp16", in);
  EXPECT_EQ(r.c.get(CounterStage::kEpilogue, CounterEvent::kUnderflowZero), 5 * 8);
  EXPECT_EQ(run_counted("flash:out=bf16", in).c.total(), 0);
}

// SageAttention #93: sm80's fp16 P·V accumulator overflows where the FP32 one does not.
TEST(Counters, Fp16PvAccumulatorOverflow) {
  AttentionInput in;
  const int n = 256, d = 64, rows = 16;
  in.shape = AttentionShape{1, 1, 1, rows, n, d, d};
  in.q.assign(std::size_t(rows) * d, 0.5f);
  in.k.assign(std::size_t(n) * d, 0.5f);
  in.v.assign(std::size_t(n) * d, 512.0f);
  // Every p is 1 (equal scores): the exact P·V sum is n · 512 = 131072 > 65504 in every element.
  const std::int64_t want = double(n) * 512.0 > 65504.0 ? std::int64_t(rows) * d : 0;
  const Counted f16 = run_counted("sage2:arch=sm80,pv_accum=fp16,in=fp16", in);
  EXPECT_EQ(f16.c.get(CounterStage::kPv, CounterEvent::kOverflowInf), want);
  EXPECT_EQ(f16.c.first[int(CounterStage::kPv)].row, 0);
  const Counted f32 = run_counted("sage2:arch=sm80,pv_accum=fp32,in=fp16", in);
  EXPECT_EQ(f32.c.get(CounterStage::kPv, CounterEvent::kOverflowInf), 0);
}

TEST(Counters, IndependentOfTheThreadCount) {
  std::vector<double> a(200, -1.0);
  for (int j = 0; j < 200; j += 3) a[std::size_t(j)] = -20.0 - j * 0.5;
  AttentionInput in = scored(300, a, 16, 1.0);
  for (std::size_t i = 0; i < in.q.size(); ++i) in.q[i] += float(i % 7) * 0.25f;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const Counted one = run_counted("sage2:arch=sm90", in);
  omp_set_num_threads(4);
  const Counted four = run_counted("sage2:arch=sm90", in);
  omp_set_num_threads(saved);
  EXPECT_GT(one.c.total(), 0);
  EXPECT_EQ(one.c.column_values(), four.c.column_values());
  EXPECT_EQ(one.c.describe(), four.c.describe());
  EXPECT_TRUE(same_bits(one.out.o, four.out.o));
  EXPECT_TRUE(same_bits(one.out.o, parse_method("sage2:arch=sm90").run(in).o));
}

// The causal mask is no event: flash writes -inf for masked keys (apply_mask_causal), and the
// observers skip every masked (row, key), in every KV block, not only the first. Brute force: the
// unmasked scores are finite and small (max |q·k| below), so no Inf and no NaN anywhere.
TEST(Counters, CausalMaskIsNoEventInAnyBlock) {
  std::vector<double> a(200, -1.0);
  for (int j = 0; j < 200; j += 3) a[std::size_t(j)] = 0.5 + (j % 7) * 0.25;
  AttentionInput in = scored(200, a, 16, 1.0);
  in.causal = true;
  double smax = 0;
  for (double x : a) smax = std::max(smax, std::fabs(x));
  ASSERT_LT(smax, 10.0);
  for (const char* m : {"flash:bk=32", "flash:bk=64,qkv=bf16,p=bf16,out=bf16", "sage2:arch=sm90"}) {
    const Counted r = run_counted(m, in);
    for (auto e :
         {CounterEvent::kOverflowInf, CounterEvent::kNanZeroTimesInf, CounterEvent::kNanInfMinusInf,
          CounterEvent::kNanZeroOverZero, CounterEvent::kNanPropagated})
      EXPECT_EQ(r.c.total(e), 0) << m << " " << counter_event_name(e) << "\n" << r.c.describe();
  }
}

// TurboAttention's cache (sim/turbo, stage `prepare`): decode tokens past the prompt go through
// the INT8 buffer with the prompt's universal scale (max|X_blk| / 119 of its blocks = 1/119 here)
// and are clamped to ±119; BPQ compresses each complete block per channel, and a channel whose
// block is flat has range 0. The input plants values 3.0 (357 steps: clamped) among values of at
// most 0.4 (48 steps), and channels constant over a block among channels whose values step by
// 0.1 (12 steps); both counts are taken here from the FP values.
TEST(Counters, TurboBufferClampsAndBpqZeroRangeBlocks) {
  const int n = 128, d = 32, bc = 16, prefill = 64;
  AttentionInput in;
  in.shape = AttentionShape{1, 1, 1, n, n, d, d};
  in.causal = true;
  in.q.resize(std::size_t(n) * d);
  for (std::size_t i = 0; i < in.q.size(); ++i) in.q[i] = float(int(i * 5 % 13) - 6) * 0.125f;
  auto flat = [&](int t, int c) { return (t / bc * 3 + c) % 5 == 0; };
  auto fill = [&](std::vector<float>& x, int salt) {
    x.resize(std::size_t(n) * d);
    for (int t = 0; t < n; ++t)
      for (int c = 0; c < d; ++c)
        x[std::size_t(t) * d + c] =
            flat(t, c) ? 0.25f : 0.1f * float((t * 7 + c * 3 + salt) % 9 - 4);
    // max|X_blk| = 1 in every prompt block, in a channel that is not flat.
    for (int b = 0; b < prefill / bc; ++b) {
      int c = 0;
      while (flat(b * bc, c)) ++c;
      x[std::size_t(b * bc + 1) * d + c] = 1.0f;
    }
  };
  fill(in.k, 0);
  fill(in.v, 4);
  // Planted outliers in decode tokens (K: column c, V: column d + c), none in a flat channel.
  const std::vector<std::pair<int, int>> plant{{70, 4},    {70, d + 9}, {75, 1},     {99, d + 3},
                                               {100, 18}, {127, d + 30}, {127, 30}};
  for (auto [t, col] : plant) {
    ASSERT_FALSE(flat(t, col % d)) << t << " " << col;
    (col < d ? in.k : in.v)[std::size_t(t) * d + col % d] = col % 2 ? 3.0f : -3.0f;
  }
  // Brute force: elements of decode tokens whose |x| · 119 (x / s_u) passes 119; (block, channel)
  // groups of the complete blocks whose values are all equal.
  std::int64_t clamps = 0, zero_range = 0;
  std::pair<int, int> first_clamp{n, 0};
  for (int t = prefill; t < n; ++t)
    for (int col = 0; col < 2 * d; ++col) {
      const double x = (col < d ? in.k : in.v)[std::size_t(t) * d + col % d];
      if (std::fabs(x) * 119.0 > 119.5) {
        ++clamps;
        first_clamp = std::min(first_clamp, std::make_pair(t, col));
      }
    }
  for (int b = 0; b < n / bc; ++b)
    for (int col = 0; col < 2 * d; ++col) {
      const std::vector<float>& x = col < d ? in.k : in.v;
      bool same = true;
      for (int t = b * bc + 1; t < (b + 1) * bc; ++t)
        same = same && x[std::size_t(t) * d + col % d] == x[std::size_t(b * bc) * d + col % d];
      zero_range += same;
    }
  ASSERT_EQ(clamps, std::int64_t(plant.size()));
  ASSERT_GT(zero_range, 0);
  const std::string m = "turbo:mode=decode,prefill=64,bc=16,br=16";
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const Counted one = run_counted(m, in);
  omp_set_num_threads(4);
  const Counted r = run_counted(m, in);
  omp_set_num_threads(saved);
  EXPECT_EQ(r.c.get(CounterStage::kPrepare, CounterEvent::kTurboClamp), clamps);
  EXPECT_EQ(r.c.get(CounterStage::kPrepare, CounterEvent::kBpqZeroRange), zero_range);
  const CounterWhere& w = r.c.first[int(CounterStage::kPrepare)];
  EXPECT_EQ(w.slice, 0);
  EXPECT_EQ(w.row, 0);  // the first zero-range group: block 0, K channel 0 (flat(0, 0))
  EXPECT_EQ(w.col, 0);
  EXPECT_EQ(r.c.first_event[int(CounterStage::kPrepare)], CounterEvent::kBpqZeroRange);
  EXPECT_EQ(one.c.column_values(), r.c.column_values());
  EXPECT_EQ(one.c.describe(), r.c.describe());
  EXPECT_TRUE(same_bits(r.out.o, parse_method(m).run(in).o));
  // The oracle scale (each block's own) clamps nothing; the zero-range groups stay.
  const Counted oracle = run_counted(m + ",buffer_scale=oracle", in);
  EXPECT_EQ(oracle.c.get(CounterStage::kPrepare, CounterEvent::kTurboClamp), 0);
  EXPECT_EQ(oracle.c.get(CounterStage::kPrepare, CounterEvent::kBpqZeroRange), zero_range);
  // The first clamp alone: with no flat channel anywhere.
  AttentionInput nf = in;
  for (int t = 0; t < n; ++t)
    for (int c = 0; c < d; ++c)
      for (std::vector<float>* x : {&nf.k, &nf.v})
        if (flat(t, c)) (*x)[std::size_t(t) * d + c] = 0.1f * float((t + c) % 2);
  const Counted nc = run_counted(m, nf);
  EXPECT_EQ(nc.c.get(CounterStage::kPrepare, CounterEvent::kBpqZeroRange), 0);
  EXPECT_EQ(nc.c.get(CounterStage::kPrepare, CounterEvent::kTurboClamp), clamps);
  EXPECT_EQ(nc.c.first[int(CounterStage::kPrepare)].row, first_clamp.first);
  EXPECT_EQ(nc.c.first[int(CounterStage::kPrepare)].col, first_clamp.second);
}

// AMLA's rescale is an INT32 add of N << 23 to O's FP32 bits (O · 2^N only for a normal O whose
// result stays normal). Two KV blocks of 512 keys, scores 0 then 16 (q = e_0, k_j = a_j e_0), so
// the running max rises once, at the second block, by 16 (N = -23 in the AMLA variant): every row's
// O is rescaled once. V is 1 except in the zero channels, whose O is exactly 0 when the rescale
// comes: an integer add on a zero O is a failure; on the other channels O ≈ 512 and O · 2^-23 is
// normal, so none. Brute force: rows × zero channels, first event at row 0, the first zero channel.
TEST(Counters, AmlaIntegerAddOnAZeroOutputIsAFailure) {
  const int rows = 4, d = 16, n = 1024;
  std::vector<double> a(n, 0.0);
  for (int j = 512; j < n; ++j) a[std::size_t(j)] = 16.0;
  AttentionInput in = scored(rows, a, d, 1.0);
  const std::vector<int> zero_channels{3, 4, 11};
  for (int j = 0; j < n; ++j)
    for (int c : zero_channels) in.v[std::size_t(j) * d + c] = 0.0f;
  // The max rises once (block 2) by a nonzero amount: one rescale per row and channel.
  double m1 = -kInf, m2 = -kInf;
  for (int j = 0; j < n; ++j) (j < 512 ? m1 : m2) = std::max(j < 512 ? m1 : m2, a[std::size_t(j)]);
  ASSERT_GT(m2, m1);
  const std::int64_t want = std::int64_t(rows) * std::int64_t(zero_channels.size());
  for (const char* m : {"amla:block=512", "amla:block=512,target=h100"}) {
    const Counted r = run_counted(m, in);
    EXPECT_EQ(r.c.get(CounterStage::kRescale, CounterEvent::kAmlaAddFailure), want)
        << m << "\n" << r.c.describe();
    EXPECT_EQ(r.c.first[int(CounterStage::kRescale)].row, 0) << m;
    EXPECT_EQ(r.c.first[int(CounterStage::kRescale)].col, zero_channels[0]) << m;
    EXPECT_TRUE(same_bits(r.out.o, parse_method(m).run(in).o)) << m;
  }
  // The same scores with no zero channel: no failure.
  const Counted ok = run_counted("amla:block=512", scored(rows, a, d, 1.0));
  EXPECT_EQ(ok.c.total(CounterEvent::kAmlaAddFailure), 0) << ok.c.describe();
}

// 0/0: TurboAttention's rescale as Algorithm 1 prints it, O · diag(α)^-1 (rescale=literal_inverse),
// divides by α = SAS(m_old − m_new), which SAS makes exactly 0 below its threshold n_r = -6. Two
// blocks of 64 keys with scores 1 then 20 (sm_scale 1): α = SAS(-19) = 0 once per row. The zero
// channels of V hold O = 0 there (0/0: NaN), the others O > 0 (O/0: +Inf). Brute force from the
// scores and V.
TEST(Counters, TurboLiteralInverseRescaleZeroOverZero) {
  const int rows = 8, d = 16, n = 128;
  std::vector<double> a(n, 1.0);
  for (int j = 64; j < n; ++j) a[std::size_t(j)] = 20.0;
  AttentionInput in = scored(rows, a, d, 0.5);
  const std::vector<int> zero_channels{0, 7};
  for (int j = 0; j < n; ++j)
    for (int c : zero_channels) in.v[std::size_t(j) * d + c] = 0.0f;
  ASSERT_LT(a[0] - a[64], -6.0);  // below n_r: α = 0
  const std::int64_t nan = std::int64_t(rows) * std::int64_t(zero_channels.size());
  const std::int64_t inf = std::int64_t(rows) * (d - std::int64_t(zero_channels.size()));
  const std::string m = "turbo:mode=prefill,rescale=literal_inverse,out=fp32";
  const Counted r = run_counted(m, in);
  EXPECT_EQ(r.c.get(CounterStage::kRescale, CounterEvent::kNanZeroOverZero), nan) << r.c.describe();
  EXPECT_EQ(r.c.get(CounterStage::kRescale, CounterEvent::kOverflowInf), inf) << r.c.describe();
  EXPECT_EQ(r.c.first[int(CounterStage::kRescale)].row, 0);
  EXPECT_EQ(r.c.first[int(CounterStage::kRescale)].col, 0);
  // Each NaN then flows on once per later stage that writes O: the second block's P·V chunk added
  // to it, and the epilogue's O / l (nan_propagated, not a new cause).
  EXPECT_EQ(r.c.get(CounterStage::kChunkAdd, CounterEvent::kNanPropagated), nan) << r.c.describe();
  EXPECT_EQ(r.c.get(CounterStage::kEpilogue, CounterEvent::kNanPropagated), nan) << r.c.describe();
  // The multiply the kernels use (O · SAS(m_old − m_new) = O · 0) has neither.
  const Counted ok = run_counted("turbo:mode=prefill,out=fp32", in);
  EXPECT_EQ(ok.c.get(CounterStage::kRescale, CounterEvent::kNanZeroOverZero), 0) << ok.c.describe();
  EXPECT_EQ(ok.c.get(CounterStage::kRescale, CounterEvent::kOverflowInf), 0) << ok.c.describe();
}

// Integer wraps of the INT32 QKᵀ accumulator need |Σ q·k| ≥ 2^31: with INT8 operands of ±127 a
// head dim of at least 133,144. d = 133,152 (a multiple of the IMMA's k = 32); query row 0 is all
// 127, row 1 all 64; key 0 all 127, key 1 all 1, key 2 all -127. Brute force: the exact int64 sums
// outside int32, here (row 0, key 0) and (row 0, key 2); the wrapping instruction and the
// .satfinite one (which clamps) both count them.
TEST(Counters, IntegerQkWrapsAtHugeHeadDim) {
  const int rows = 2, n = 3, d = 133152, dv = 8;
  AttentionInput in;
  in.shape = AttentionShape{1, 1, 1, rows, n, d, dv};
  in.q.resize(std::size_t(rows) * d);
  in.k.resize(std::size_t(n) * d);
  in.v.assign(std::size_t(n) * dv, 1.0f);
  const float qv[rows] = {127.0f, 64.0f}, kv[n] = {127.0f, 1.0f, -127.0f};
  for (int i = 0; i < rows; ++i) std::fill_n(in.q.begin() + std::ptrdiff_t(i) * d, d, qv[i]);
  for (int j = 0; j < n; ++j) std::fill_n(in.k.begin() + std::ptrdiff_t(j) * d, d, kv[j]);
  std::int64_t want = 0;
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < n; ++j) {
      std::int64_t sum = 0;
      for (int x = 0; x < d; ++x) sum += std::int64_t(qv[i]) * std::int64_t(kv[j]);
      want += sum > std::numeric_limits<std::int32_t>::max() || sum < std::numeric_limits<std::int32_t>::min();
    }
  ASSERT_EQ(want, 2);
  for (const char* m : {"flash:qkv=s8,q_quant=symmetric_int8,k_quant=symmetric_int8,qk_dot=sm90.imma.s8.s32,v=fp32",
                        "flash:qkv=s8,q_quant=symmetric_int8,k_quant=symmetric_int8,qk_dot=sm90.imma.s8.s32.satfinite,v=fp32"}) {
    const Counted r = run_counted(m, in);
    EXPECT_EQ(r.c.get(CounterStage::kQk, CounterEvent::kIntWrap), want) << m << "\n" << r.c.describe();
    EXPECT_EQ(r.c.first[int(CounterStage::kQk)].row, 0) << m;
    EXPECT_EQ(r.c.first[int(CounterStage::kQk)].col, 0) << m;
  }
}

}  // namespace
}  // namespace attnsim
