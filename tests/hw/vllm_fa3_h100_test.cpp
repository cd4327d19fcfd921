// The vllm_fa3 preset (sim/fa3 with Fa3Build::kVllm: vLLM's FlashAttention-3 fork as vLLM 0.26.0's
// wheel ships it) against the H100 recordings (data/hw/h100/serving/vllm_fa3_h100.h5,
// cuda_check/serving/record_vllm_fa3.py): every recorded one-split case bit for bit on every output
// element and LSE value (prefill and decode tiles, GQA and MHA, fp16/bf16, the FP8 KV cache with
// its quantized query from the recorded bytes, the prefill/decode pairs of vllm #54035); the
// fork's choices against upstream FA3's (negative controls); the refusals.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

#include "experiments/io/hdf5_io.hpp"
#include "formats/encoding.hpp"
#include "sim/fa3/fa3.hpp"
#include "tests/hw/sage_inputs.hpp"

namespace attnsim {
namespace {

const std::string kFile = ATTNSIM_DATA_DIR "/hw/h100/serving/vllm_fa3_h100.h5";

// cuda_check/serving/serving_cases.py VLLM_FA3_CASES: sequences
// (query_len, seq_len), the query the last query_len tokens; lattice tensors 0, 1, 2 = Q [T, hq, d],
// K, V [sum seq_len, hkv, d] (token-major); q_of: Q is the last row of a lattice of that many
// tokens; FP8: Q, K, V from the recorded e4m3 bytes, scales 0.05 / 0.05 / 0.02.
struct Fa3Case {
  const char* name;
  const char* dtype;
  int hq, hkv, d;
  std::vector<std::pair<int, int>> seqs;
  int seed;
  bool fp8 = false;
  int q_of = 0;
  int splits = 1;  // num_splits (0: the fork's per-sequence choice, as vLLM without CUDA graphs)
};

std::vector<Fa3Case> cases() {
  std::vector<Fa3Case> c{
      {"prefill_mixed_fp8_d128", "bf16", 8, 2, 128, {{37, 87}, {64, 200}, {100, 100}}, 301, true},
      {"decode_fp8_d128", "bf16", 8, 2, 128, {{1, 97}, {1, 200}, {1, 777}, {1, 2000}}, 302, true},
      {"prefill_chunk256x4096_fp8_d128", "bf16", 8, 2, 128, {{256, 4096}}, 303, true},
      {"prefill_mha_fp8_d128", "bf16", 4, 4, 128, {{150, 150}, {20, 333}}, 304, true},
      {"prefill_fp8_d64", "bf16", 8, 2, 64, {{70, 200}, {33, 33}}, 305, true},
      {"decode_fp8_d64", "bf16", 8, 2, 64, {{1, 97}, {1, 1000}}, 306, true},
      {"prefill_mixed_bf16_d128", "bf16", 8, 2, 128, {{37, 87}, {1, 300}, {100, 100}}, 307},
      {"decode_bf16_d128", "bf16", 8, 2, 128, {{1, 97}, {1, 500}, {1, 1000}, {1, 33}}, 308},
      {"prefill_fp16_d64", "fp16", 4, 4, 64, {{33, 33}, {70, 200}}, 309},
      {"decode_fp16_d64", "fp16", 8, 2, 64, {{1, 97}, {1, 1000}}, 310},
      {"decode_fp8_d128_splits0", "bf16", 8, 2, 128, {{1, 97}, {1, 200}, {1, 777}, {1, 2000}},
       302, true, 0, 0},
      {"decode_bf16_d128_splits0", "bf16", 8, 2, 128, {{1, 97}, {1, 500}, {1, 1000}, {1, 33}},
       308, false, 0, 0},
  };
  const int pd[][2] = {{96, 320}, {97, 321}, {192, 322}, {193, 323}, {200, 324}};
  for (const auto& [L, seed] : pd) {
    c.push_back({nullptr, "bf16", 8, 2, 128, {{L, L}}, seed, true});
    c.push_back({nullptr, "bf16", 8, 2, 128, {{1, L}}, seed, true, L});
  }
  c.push_back({nullptr, "bf16", 8, 2, 128, {{200, 200}}, 325});
  c.push_back({nullptr, "bf16", 8, 2, 128, {{1, 200}}, 325, false, 200});
  return c;
}

std::string name_of(const Fa3Case& c) {
  if (c.name) return c.name;
  const int L = c.seqs[0].second;
  return std::string(c.q_of ? "pd_decode" : "pd_prefill") + std::to_string(L) +
         (c.fp8 ? "_fp8_d128" : "_bf16_d128");
}

Encoding enc_of(const std::string& dt) { return dt == "bf16" ? Encoding::kBf16 : Encoding::kFp16; }

Fa3Options options_of(const Fa3Case& c) {
  Fa3Options o;
  o.build = Fa3Build::kVllm;
  o.page_size = 16;
  o.input = enc_of(c.dtype);
  o.dtype = c.fp8 ? Encoding::kE4m3fn : o.input;
  o.num_splits = c.splits;
  return o;
}

struct Recorded {
  std::vector<double> o, lse, q8, k8, v8;
};

Recorded recorded(const H5Reader& r, const std::string& n, bool fp8) {
  Recorded x;
  x.o = r.read_f64(n + "/o");
  x.lse = r.read_f64(n + "/lse");
  if (fp8) {
    x.q8 = r.read_f64(n + "/q_e4m3");
    x.k8 = r.read_f64(n + "/k_e4m3");
    x.v8 = r.read_f64(n + "/v_e4m3");
  }
  return x;
}

struct Match {
  std::int64_t elems = 0, same = 0, lse = 0, lse_same = 0;
  bool exact() const { return elems > 0 && same == elems && lse_same == lse; }
  std::string text() const {
    return std::to_string(same) + "/" + std::to_string(elems) + " elements, " +
           std::to_string(lse_same) + "/" + std::to_string(lse) + " LSE";
  }
};

// A change to the pipeline of one sequence: the options, the kernel shape of its launch.
using Tweak = std::function<void(const Fa3Options&, const AttentionShape&, Pipeline&)>;

// Every sequence of a case through the preset in its launch (changed by `tweak`), against the
// recording.
Match check(const Fa3Case& c, const Recorded& rec, const Tweak& tweak = nullptr) {
  const Fa3Options o = options_of(c);
  const int hq = c.hq, hkv = c.hkv, d = c.d;
  auto launch = std::make_shared<Launch>();
  int tokens = 0;
  for (const auto& [q, k] : c.seqs) {
    launch->seqs.push_back({q, k});
    tokens += q;
  }
  if (rec.o.size() != std::size_t(tokens) * hq * d || rec.lse.size() != std::size_t(tokens) * hq)
    throw std::runtime_error(name_of(c) + ": the recording's shape differs from the case");
  const std::size_t q_skip = c.q_of ? std::size_t(c.q_of - tokens) * hq * d : 0;
  auto e4m3 = [](double byte) {
    return float(decode_float_bits(Encoding::kE4m3fn, std::uint32_t(byte)));
  };
  Match m;
  int tok0 = 0, key0 = 0;
  for (std::size_t si = 0; si < c.seqs.size(); ++si) {
    const auto [qlen, slen] = c.seqs[si];
    auto l = std::make_shared<Launch>(*launch);
    l->target_index = int(si);
    AttentionInput in;
    in.shape = {1, hq, hkv, qlen, slen, d, d};
    in.causal = true;
    in.launch = l;
    in.q.resize(in.shape.q_size());
    in.k.resize(in.shape.k_size());
    in.v.resize(in.shape.v_size());
    for (int h = 0; h < hq; ++h)
      for (int i = 0; i < qlen; ++i)
        for (int x = 0; x < d; ++x) {
          const std::size_t src = (std::size_t(tok0 + i) * hq + h) * d + x;
          in.q[(std::size_t(h) * qlen + i) * d + x] =
              c.fp8 ? e4m3(rec.q8[src])
                    : hwtest::lattice_value(std::uint64_t(c.seed), 0, q_skip + src);
        }
    for (int h = 0; h < hkv; ++h)
      for (int j = 0; j < slen; ++j)
        for (int x = 0; x < d; ++x) {
          const std::size_t src = (std::size_t(key0 + j) * hkv + h) * d + x;
          const std::size_t dst = (std::size_t(h) * slen + j) * d + x;
          in.k[dst] = c.fp8 ? e4m3(rec.k8[src]) : hwtest::lattice_value(std::uint64_t(c.seed), 1, src);
          in.v[dst] = c.fp8 ? e4m3(rec.v8[src]) : hwtest::lattice_value(std::uint64_t(c.seed), 2, src);
        }
    const AttentionShape ks = fa3_kernel_shape(o, in.shape, l.get());
    Pipeline p = fa3_pipeline(o, ks, true);
    if (tweak) tweak(o, ks, p);
    PipelineResult res;
    if (c.fp8) {
      const PreparedInput prep =
          fa3_prepare_fp8(in, p, std::vector<float>(std::size_t(hkv), 0.05f),
                          std::vector<float>(std::size_t(hkv), 0.05f),
                          std::vector<float>(std::size_t(hkv), 0.02f));
      res = fa3_attention(prep, o, p);
    } else {
      res = fa3_attention(in, o, p);
    }
    const Encoding out = p.out.enc;
    for (int h = 0; h < hq; ++h)
      for (int i = 0; i < qlen; ++i) {
        for (int x = 0; x < d; ++x) {
          const double sim = res.o[(std::size_t(h) * qlen + i) * d + x];
          const double hw = rec.o[(std::size_t(tok0 + i) * hq + h) * d + x];
          ++m.elems;
          m.same += encode_float_bits(out, float(sim), kCudaRn) == std::uint32_t(hw);
        }
        // The fork's varlen LSE: [hq, total_q] (FP32 bits).
        const double lse = res.lse[std::size_t(h) * qlen + i];
        const double hw = rec.lse[std::size_t(h) * tokens + tok0 + i];
        ++m.lse;
        m.lse_same += encode_float_bits(Encoding::kFp32, float(lse), kCudaRn) == std::uint32_t(hw);
      }
    tok0 += qlen;
    key0 += slen;
  }
  return m;
}

struct Loaded {
  Fa3Case c;
  Recorded rec;
};

std::vector<Loaded> load_all(const H5Reader& r) {
  std::vector<Loaded> all;
  for (const Fa3Case& c : cases()) {
    const std::string n = name_of(c);
    if (!r.exists(n + "/o")) throw std::runtime_error(n + ": not in the recording");
    all.push_back({c, recorded(r, n, c.fp8)});
  }
  return all;
}

TEST(VllmFa3H100, EveryRecordedCaseBitForBit) {
  const H5Reader r(kFile);
  std::int64_t elems = 0, same = 0, lse = 0, lse_same = 0;
  for (const Loaded& x : load_all(r)) {
    const Match m = check(x.c, x.rec);
    EXPECT_TRUE(m.exact()) << name_of(x.c) << ": " << m.text();
    elems += m.elems;
    same += m.same;
    lse += m.lse;
    lse_same += m.lse_same;
  }
  std::printf("  vllm_fa3: %lld/%lld elements, %lld/%lld LSE values\n", (long long)same,
              (long long)elems, (long long)lse_same, (long long)lse);
  EXPECT_EQ(same, elems);
  EXPECT_EQ(lse_same, lse);
}

// The kernels the profiler saw name the tile the host code chose (FlashAttnFwdSm90's mainloop is a
// template of cute::tuple<kBlockM, kBlockN, kHeadDim>): every case's tile as fa3_tile computes it
// for the case's launch, the decode cases on the one-warpgroup 64-row kernel.
TEST(VllmFa3H100, EveryCaseRanTheModelledTile) {
  const H5Reader r(kFile);
  const std::regex tile(R"(CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, )"
                        R"(cute::C<1> >, cute::tuple<cute::C<(\d+)>, cute::C<(\d+)>, cute::C<(\d+)> >)");
  int decode = 0;
  for (const Fa3Case& c : cases()) {
    const Fa3Options o = options_of(c);
    Launch l;
    for (const auto& [q, k] : c.seqs) l.seqs.push_back({q, k});
    const AttentionShape s = fa3_kernel_shape(o, {1, c.hq, c.hkv, 1, 1, c.d, c.d}, &l);
    int bm = 0, bn = 0;
    fa3_tile(o, s, fa3_kernel_causal(o, s, true), &bm, &bn);
    const std::string kernels = r.attr_string(name_of(c), "kernels");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(kernels, m, tile)) << name_of(c) << ": " << kernels.substr(0, 300);
    EXPECT_EQ(std::stoi(m[1]), bm) << name_of(c);
    EXPECT_EQ(std::stoi(m[2]), bn) << name_of(c);
    EXPECT_EQ(std::stoi(m[3]), c.d) << name_of(c);
    EXPECT_EQ(bm == 64, fa3_one_mma_wg(o, s)) << name_of(c);
    decode += fa3_one_mma_wg(o, s);
  }
  EXPECT_GE(decode, 8);
}

// vllm #54035 on the H100 itself: an FP8 sequence's prefill (128 x 192 tiles) and the decode step
// of its last token (64 x 96) agree while the row sees one block of each and not from 97 keys; in
// bf16 both kernels take 128-key blocks (the causal tile) and agree at 200 keys.
TEST(VllmFa3H100, PrefillAndDecodeOfOneTokenAsRecorded) {
  const H5Reader r(kFile);
  auto equal = [&](int L, const char* t) {
    const std::string n = std::to_string(L) + "_" + t + "_d128/o";
    const std::vector<double> pre = r.read_f64("pd_prefill" + n), dec = r.read_f64("pd_decode" + n);
    const std::size_t row = dec.size();
    int same = 0;
    for (std::size_t i = 0; i < row; ++i) same += pre[pre.size() - row + i] == dec[i];
    return same;
  };
  EXPECT_EQ(equal(96, "fp8"), 1024);
  for (int L : {97, 192, 193, 200}) EXPECT_LT(equal(L, "fp8"), 800) << L;
  EXPECT_EQ(equal(200, "bf16"), 1024);
}

// The split decodes: the per-sequence split counts fa3_splits gives for the launch, some above 1,
// exactly where the recording ran FlashAttnFwdCombine; forcing one split breaks them.
TEST(VllmFa3H100, SplitDecodesFollowTheForksScheduler) {
  const H5Reader r(kFile);
  const std::vector<Loaded> all = load_all(r);
  for (const Loaded& x : all) {
    if (x.c.splits == 1) continue;
    const Fa3Options o = options_of(x.c);
    Launch l;
    for (const auto& [q, k] : x.c.seqs) l.seqs.push_back({q, k});
    int most = 1;
    std::string counts;
    for (std::size_t i = 0; i < x.c.seqs.size(); ++i) {
      l.target_index = int(i);
      const auto [q, k] = x.c.seqs[i];
      const int s = fa3_splits(o, {1, x.c.hq, x.c.hkv, q, k, x.c.d, x.c.d}, true, &l);
      most = std::max(most, s);
      counts += std::to_string(s) + " ";
    }
    std::printf("  %s: splits per sequence %s\n", name_of(x.c).c_str(), counts.c_str());
    const bool combined =
        r.attr_string(name_of(x.c), "kernels").find("FlashAttnFwdCombine") != std::string::npos;
    EXPECT_EQ(most > 1, combined) << name_of(x.c);
    if (most > 1) {
      Fa3Case one = x.c;
      one.splits = 1;
      EXPECT_FALSE(check(one, x.rec).exact()) << name_of(x.c);
    }
  }
}

bool some_case_differs(const std::vector<Loaded>& all, const Tweak& tweak, const char* what) {
  std::int64_t differ = 0;
  int hit = 0;
  for (const Loaded& x : all) {
    const Match m = check(x.c, x.rec, tweak);
    differ += (m.elems - m.same) + (m.lse - m.lse_same);
    hit += m.exact() ? 0 : 1;
  }
  std::printf("  %-48s %7lld values differ, %2d of %zu cases\n", what, (long long)differ, hit,
              all.size());
  return hit > 0;
}

// Each of the fork's own choices matters on the recordings: with upstream FA3's choice instead,
// some recorded case loses exactness.
TEST(VllmFa3H100, EachForkChoiceIsNeededNegativeControls) {
  const H5Reader r(kFile);
  const std::vector<Loaded> all = load_all(r);
  const std::vector<std::pair<const char*, Tweak>> controls{
      // Upstream's single FP8 accumulator across the KV blocks (no two-level accumulation).
      {"pv_acc=c (upstream FP8: one chain over all blocks)",
       [](const Fa3Options&, const AttentionShape&, Pipeline& p) {
         p.pv.acc = PvAccumulate::kIntoC;
         p.pv.chunk_add = ChunkAdd::kFadd;
       }},
      // The add fused with O's rescale (one FFMA, as SageAttention2's flush).
      {"rescale_fused=on (O = fma(alpha, O, chunk))",
       [](const Fa3Options&, const AttentionShape&, Pipeline& p) {
         if (p.pv.acc != PvAccumulate::kChunk) return;
         p.rescale.fused = true;
         p.rescale.kind = Rescale::kMultiply;
         p.pv.chunk_add = ChunkAdd::kFadd;
       }},
      // The interval design the fork merged and reverted (#122), flushing every block.
      {"pv_flush=1 (the reverted deferred-scale design)",
       [](const Fa3Options&, const AttentionShape&, Pipeline& p) {
         if (p.pv.acc != PvAccumulate::kChunk) return;
         p.pv.acc = PvAccumulate::kIntoC;
         p.pv.chunk_add = ChunkAdd::kFadd;
         p.pv.flush = 1;
       }},
      // Upstream FA3's tile table (no decode path, no paged-KV rule).
      {"upstream tiles",
       [](const Fa3Options& o, const AttentionShape& ks, Pipeline& p) {
         Fa3Options u = o;
         u.build = Fa3Build::kUpstream;
         fa3_tile(u, ks, fa3_kernel_causal(u, ks, true), &p.tile.block_q, &p.tile.block_kv);
       }},
  };
  for (const auto& [what, tweak] : controls) EXPECT_TRUE(some_case_differs(all, tweak, what)) << what;
}

TEST(VllmFa3H100, UnsupportedInputsAreRefusedInOneLine) {
  auto refused = [](const Fa3Options& o, const AttentionShape& s) {
    try {
      (void)fa3_pipeline(o, s, true);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what()).find('\n') == std::string::npos &&
             std::string(e.what()).rfind("vllm_fa3: ", 0) == 0;
    }
    return false;
  };
  Fa3Options o;
  o.build = Fa3Build::kVllm;
  EXPECT_TRUE(refused(o, AttentionShape{1, 8, 2, 1, 100, 256, 256}));  // head dim > 128
  EXPECT_TRUE(refused(o, AttentionShape{1, 8, 2, 1, 100, 128, 64}));   // dv != d
  Fa3Options split = o;
  split.num_splits = -1;
  EXPECT_FALSE(refused(split, AttentionShape{1, 8, 2, 1, 100, 128, 128}));  // "fa3: ..." prefix
  Fa3Options f16 = o;
  f16.fp8_interval = 4;  // interval is the FP8 accumulation's
  EXPECT_TRUE(refused(f16, AttentionShape{1, 8, 2, 1, 100, 128, 128}));
  Fa3Options page = o;
  page.page_size = 24;
  EXPECT_TRUE(refused(page, AttentionShape{1, 8, 2, 1, 100, 128, 128}));
}

}  // namespace
}  // namespace attnsim
