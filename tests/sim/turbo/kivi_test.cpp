// KIVI baseline (sim/turbo/kivi.hpp): the residual rule against a literal replay of
// llama_kivi.py's cache (quantized chunks and FP16 tails as lists, quantized after each step's
// attention, with the reference quantizer), every decode row bit for bit against FlashAttention
// FP16 on the replayed operands, the prompt rows and prefill mode against the flash preset, bad
// options, and the error ordering against FP64 golden attention.
#include "sim/turbo/kivi.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "formats/encoding.hpp"
#include "numerics/kivi_quant.hpp"
#include "sim/flash/flash.hpp"
#include "sim/golden/golden.hpp"
#include "tests/sim/random_input.hpp"

namespace attnsim {
namespace {

using simtest::random_input;

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

Pipeline fp16_flash(Encoding out = Encoding::kFp16) {
  return flash_pipeline(Encoding::kFp16, out);
}

float to16(float x) {
  constexpr Policy kRne{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};
  return decode_float_bits(Encoding::kFp16, encode_float_bits(Encoding::kFp16, x, kRne));
}

// llama_kivi.py's cache of one (batch, KV head) as the model code keeps it: a list of quantized
// K tokens plus an FP16 tail, quantized V tokens plus an FP16 window. Values are stored already
// dequantized (what the attention reads).
struct ReplayCache {
  int d, dv, bits, g, R;
  std::vector<std::vector<float>> k_quant, k_full, v_quant, v_full;

  void quantize_k_tail() {  // triton_quantize_and_pack_along_last_dim on the tail's Kᵀ
    const int n = int(k_full.size());
    for (int t0 = 0; t0 < n; t0 += g)
      for (int c = 0; c < d; ++c) {
        std::vector<float> x;
        for (int i = 0; i < g; ++i) x.push_back(k_full[std::size_t(t0 + i)][std::size_t(c)]);
        const KiviGroup grp = kivi_group_ref(x.data(), g, 1, bits);
        for (int i = 0; i < g; ++i)
          k_full[std::size_t(t0 + i)][std::size_t(c)] =
              kivi_dequantize_ref(kivi_code_ref(x[std::size_t(i)], grp, bits), grp);
      }
    for (auto& row : k_full) k_quant.push_back(row);
    k_full.clear();
  }
  static std::vector<float> quantize_v_token(std::vector<float> row, int bits, int g) {
    for (std::size_t c0 = 0; c0 < row.size(); c0 += std::size_t(g)) {
      const KiviGroup grp = kivi_group_ref(row.data() + c0, g, 1, bits);
      for (int i = 0; i < g; ++i)
        row[c0 + std::size_t(i)] =
            kivi_dequantize_ref(kivi_code_ref(row[c0 + std::size_t(i)], grp, bits), grp);
    }
    return row;
  }
  // Prefill with T tokens (the `else` branch of forward()).
  void prefill(const std::vector<std::vector<float>>& K, const std::vector<std::vector<float>>& V,
               int T) {
    const int keep = T % R;
    for (int t = 0; t < T; ++t) k_full.push_back(K[std::size_t(t)]);
    if (T >= R) {
      std::vector<std::vector<float>> tail(k_full.end() - keep, k_full.end());
      k_full.resize(std::size_t(T - keep));
      quantize_k_tail();
      k_full = tail;
    }
    for (int t = 0; t < T; ++t)
      if (T > R && t < T - R)
        v_quant.push_back(quantize_v_token(V[std::size_t(t)], bits, g));
      else
        v_full.push_back(V[std::size_t(t)]);
  }
  // One decode step: append, let `attend` read the cache, then quantize as forward() does.
  template <class F>
  void step(const std::vector<float>& k, const std::vector<float>& v, F attend) {
    k_full.push_back(k);
    v_full.push_back(v);
    attend(*this);
    if (int(k_full.size()) == R) quantize_k_tail();
    if (int(v_full.size()) > R) {
      v_quant.push_back(quantize_v_token(v_full.front(), bits, g));
      v_full.erase(v_full.begin());
    }
  }
};

TEST(KiviTest, QuantizedCountsFollowTheCache) {
  for (int R : {64, 128})
    for (int T : {1, 63, 64, 65, 127, 128, 200}) {
      ReplayCache c{64, 64, 4, 64, R, {}, {}, {}, {}};
      const std::vector<float> zero(64, 0.0f);
      std::vector<std::vector<float>> K(std::size_t(T), zero), V = K;
      c.prefill(K, V, T);
      for (int t = T; t < T + 300; ++t)
        c.step(zero, zero, [&](const ReplayCache& cc) {
          ASSERT_EQ(int(cc.k_quant.size()), kivi_quantized_keys(t, R)) << T << " " << t;
          ASSERT_EQ(int(cc.v_quant.size()), kivi_quantized_values(t, R)) << T << " " << t;
          ASSERT_EQ(int(cc.k_quant.size() + cc.k_full.size()), t + 1);
        });
    }
}

// kivi_attention against the replay: per (batch, KV head) the cache is rebuilt from the FP16
// input, and each decode row is FlashAttention FP16 of its query over the replayed K and V.
void check_against_replay(const AttentionInput& in, const KiviOptions& o, int P) {
  const AttentionShape& s = in.shape;
  const PipelineResult got = kivi_attention(in, o);
  const int off = s.len_kv - s.len_q, dk = s.head_dim, dv = s.head_dim_v;
  // Prompt rows: flash FP16 over the prompt.
  const int prompt_rows = std::max(0, std::min(s.len_q, P - off));
  if (prompt_rows > 0) {
    AttentionInput pin = in;
    pin.shape.len_kv = P;
    pin.shape.len_q = prompt_rows;
    pin.q.clear();
    pin.k.clear();
    pin.v.clear();
    for (int bh = 0; bh < s.batch * s.heads_q; ++bh)
      pin.q.insert(pin.q.end(), in.q.begin() + std::ptrdiff_t(bh) * s.len_q * dk,
                   in.q.begin() + (std::ptrdiff_t(bh) * s.len_q + prompt_rows) * dk);
    for (int bh = 0; bh < s.batch * s.heads_kv; ++bh) {
      pin.k.insert(pin.k.end(), in.k.begin() + std::ptrdiff_t(bh) * s.len_kv * dk,
                   in.k.begin() + (std::ptrdiff_t(bh) * s.len_kv + P) * dk);
      pin.v.insert(pin.v.end(), in.v.begin() + std::ptrdiff_t(bh) * s.len_kv * dv,
                   in.v.begin() + (std::ptrdiff_t(bh) * s.len_kv + P) * dv);
    }
    const PipelineResult want = run_pipeline(pin, fp16_flash(o.out));
    for (int bh = 0; bh < s.batch * s.heads_q; ++bh)
      for (int i = 0; i < prompt_rows; ++i)
        for (int c = 0; c < dv; ++c)
          ASSERT_EQ(got.o[(std::size_t(bh) * s.len_q + i) * dv + c],
                    double(want.o[(std::size_t(bh) * prompt_rows + i) * dv + c]))
              << "prompt row " << i;
  }
  long long rows = 0;
  for (int b = 0; b < s.batch; ++b)
    for (int hk = 0; hk < s.heads_kv; ++hk) {
      auto rows_of = [&](const std::vector<float>& x, int d) {
        std::vector<std::vector<float>> r;
        for (int t = 0; t < s.len_kv; ++t) {
          std::vector<float> row(static_cast<std::size_t>(d));
          for (int c = 0; c < d; ++c)
            row[std::size_t(c)] =
                to16(x[((std::size_t(b) * s.heads_kv + hk) * s.len_kv + t) * d + c]);
          r.push_back(row);
        }
        return r;
      };
      const auto K = rows_of(in.k, dk), V = rows_of(in.v, dv);
      ReplayCache c{dk, dv, o.bits, o.group, o.residual, {}, {}, {}, {}};
      const int first = std::max(P, off);
      c.prefill(K, V, first);
      for (int t = first; t < s.len_kv; ++t) {
        c.step(K[std::size_t(t)], V[std::size_t(t)], [&](const ReplayCache& cc) {
          AttentionInput one;
          one.shape = {1, s.group(), 1, 1, t + 1, dk, dv};
          one.sm_scale = in.sm_scale;
          for (int h = 0; h < s.group(); ++h) {
            const int sq = b * s.heads_q + hk * s.group() + h;
            const float* q = in.q.data() + (std::size_t(sq) * s.len_q + (t - off)) * dk;
            one.q.insert(one.q.end(), q, q + dk);
          }
          for (const auto* part : {&cc.k_quant, &cc.k_full})
            for (const auto& row : *part) one.k.insert(one.k.end(), row.begin(), row.end());
          for (const auto* part : {&cc.v_quant, &cc.v_full})
            for (const auto& row : *part) one.v.insert(one.v.end(), row.begin(), row.end());
          const PipelineResult want = run_pipeline(one, fp16_flash(o.out));
          for (int h = 0; h < s.group(); ++h) {
            const std::size_t row =
                (std::size_t(b) * s.heads_q + hk * s.group() + h) * s.len_q + (t - off);
            for (int ch = 0; ch < dv; ++ch)
              ASSERT_EQ(got.o[row * dv + ch], double(want.o[std::size_t(h) * dv + ch]))
                  << "b " << b << " kv head " << hk << " step " << t << " ch " << ch;
            ASSERT_EQ(got.lse[row], double(want.lse[std::size_t(h)]));
          }
          ++rows;
        });
      }
    }
  EXPECT_GT(rows, 0);
}

TEST(KiviTest, DecodeRowsMatchReplayedCache) {
  // GQA 4:2, batch 2, causal, g = 32 < R = 64, 2 bits; the prompt ends mid-chunk, the input
  // mid-group.
  AttentionInput in = random_input({2, 4, 2, 230, 230, 32, 64}, true, 17);
  KiviOptions o;
  o.bits = 2;
  o.group = 32;
  o.residual = 64;
  o.prefill = 70;
  check_against_replay(in, o, 70);
  // 4 bits, g = R = 64, the default prompt (half the tokens, rounded down to 64: 128).
  in = random_input({1, 3, 1, 300, 300, 64, 64}, true, 18, 2.0);
  o = KiviOptions{};
  check_against_replay(in, o, 128);
  // A decode-shaped input (len_q < len_kv: the prompt is every key before the first query),
  // FP32 output.
  in = random_input({1, 2, 2, 40, 190, 16, 64}, true, 19);
  o = KiviOptions{};
  o.out = Encoding::kFp32;
  check_against_replay(in, o, 150);
  // One query, not causal.
  in = random_input({1, 2, 1, 1, 260, 64, 64}, false, 20);
  o = KiviOptions{};
  o.bits = 8;
  check_against_replay(in, o, 259);
}

TEST(KiviTest, PrefillModeIsFlashFp16) {
  AttentionInput in = random_input({1, 4, 2, 100, 100, 64, 64}, false, 21);
  const PipelineResult r = kivi_attention(in, KiviOptions{});  // auto: not causal -> prefill
  const PipelineResult f = run_pipeline(in, fp16_flash());
  EXPECT_TRUE(same_bits(r.o, std::vector<double>(f.o.begin(), f.o.end())));
  in.causal = true;
  KiviOptions o;
  o.mode = TurboMode::kPrefill;
  const PipelineResult c = kivi_attention(in, o);
  const PipelineResult fc = run_pipeline(in, fp16_flash());
  EXPECT_TRUE(same_bits(c.o, std::vector<double>(fc.o.begin(), fc.o.end())));
}

TEST(KiviTest, NothingQuantizedIsFlashFp16) {
  // R beyond the input: every token stays FP16 and each decode step is the causal FlashAttention
  // row (masked keys add exact zeros), so the whole output equals one FP16 flash run.
  AttentionInput in = random_input({1, 2, 1, 200, 200, 64, 64}, true, 22);
  KiviOptions o;
  o.residual = 256;
  const PipelineResult r = kivi_attention(in, o);
  const PipelineResult f = run_pipeline(in, fp16_flash());
  EXPECT_TRUE(same_bits(r.o, std::vector<double>(f.o.begin(), f.o.end())));
}

double rel_l2(const std::vector<double>& a, const std::vector<double>& ref, std::size_t from,
              std::size_t stride, std::size_t rows_from) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if ((i / stride) % from < rows_from) continue;  // skip the prompt rows of every head
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

TEST(KiviTest, ErrorGrowsAsBitsShrink) {
  // Keys with channel outliers (the per-channel K groups are KIVI's answer to them).
  AttentionInput in = random_input({1, 4, 2, 256, 256, 64, 64}, true, 23);
  for (std::size_t i = 0; i < in.k.size(); ++i)
    if (i % 64 == 5) in.k[i] = in.k[i] * 8 + 4;
  const std::vector<double> g = golden_attention(in).o;
  const std::size_t dv = 64, len = 256, prompt = 128;
  const PipelineResult f = run_pipeline(in, fp16_flash(Encoding::kFp32));
  const double e16 = rel_l2(std::vector<double>(f.o.begin(), f.o.end()), g, len, dv, prompt);
  double prev = e16;
  for (int bits : {8, 4, 2}) {
    KiviOptions o;
    o.bits = bits;
    o.out = Encoding::kFp32;
    const double e = rel_l2(kivi_attention(in, o).o, g, len, dv, prompt);
    std::printf("decode rows rel. L2 vs golden: fp16 %.3g, kivi-%d %.3g\n", e16, bits, e);
    EXPECT_GT(e, prev) << bits;
    prev = e;
  }
}

TEST(KiviTest, BadInputs) {
  AttentionInput in = random_input({1, 2, 1, 128, 128, 64, 64}, true, 24);
  auto bad = [&](KiviOptions o, const AttentionInput& x) {
    try {
      kivi_attention(x, o);
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
      return true;
    }
    return false;
  };
  KiviOptions o;
  o.bits = 0;
  EXPECT_TRUE(bad(o, in));
  o.bits = 9;
  EXPECT_TRUE(bad(o, in));
  o = KiviOptions{};
  o.group = 0;
  EXPECT_TRUE(bad(o, in));
  o = KiviOptions{};
  o.residual = 96;  // not a multiple of 64
  EXPECT_TRUE(bad(o, in));
  o.residual = 32;  // below the group
  EXPECT_TRUE(bad(o, in));
  o = KiviOptions{};
  o.out = Encoding::kE4m3fn;
  EXPECT_TRUE(bad(o, in));
  o = KiviOptions{};
  o.prefill = 128;  // the prompt must leave a decode step
  EXPECT_TRUE(bad(o, in));
  o.prefill = 0;
  EXPECT_TRUE(bad(o, in));
  AttentionInput odd = random_input({1, 2, 1, 128, 128, 64, 40}, true, 25);
  EXPECT_TRUE(bad(KiviOptions{}, odd));  // V's channel groups of 64
  AttentionInput nc = in;
  nc.causal = false;
  o = KiviOptions{};
  o.mode = TurboMode::kDecode;
  EXPECT_TRUE(bad(o, nc));  // teacher-forced decode needs a causal input
  AttentionInput shortk = in;
  shortk.k.pop_back();
  EXPECT_TRUE(bad(KiviOptions{}, shortk));
}

}  // namespace
}  // namespace attnsim
