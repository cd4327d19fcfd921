// Records digests of the FlashAttention-2 reference (sim/flash before it became a preset of
// sim/pipeline) for many configurations and inputs: data/regression/flash_pre_pipeline.txt.
// Built against commit 441bad6 (the last commit with the stand-alone flash loop), not part of the
// build; data/regression/README.md has the command. tests/sim/flash/flash_recorded_test.cpp replays it.
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "experiments/dump.hpp"
#include "numerics/digest.hpp"
#include "sim/flash/flash.hpp"

using namespace attnsim;

namespace {

const char* kStorage[] = {"fp32", "bf16", "fp16", "e4m3fn", "e5m2"};
const Storage kStorageE[] = {Storage::kFp32, Storage::kBf16, Storage::kFp16, Storage::kE4m3fn,
                             Storage::kE5m2};
const char* kDot[] = {"acc", "fp32", "fp64"};

struct Spec {
  int bq = 64, bk = 64, q = 0, k = 0, v = 0, p = 0, out = 0;
  int fp8 = 0, half = 0;  // fp8: 0 sat, 1 ocp (kMlDtypesE4m3); half: 0 inf, 1 saturate
  int acc = 0, qk = 0, pv = 0, exp = 0, fma = 1, kv = 0, rowsum = 0;

  std::string str() const {
    char b[512];
    std::snprintf(b, sizeof b,
                  "bq=%d bk=%d q=%s k=%s v=%s p=%s out=%s fp8=%s half=%s acc=%s qk=%s pv=%s "
                  "exp=%s fma=%d kv=%s rowsum=%s",
                  bq, bk, kStorage[q], kStorage[k], kStorage[v], kStorage[p], kStorage[out],
                  fp8 ? "ocp" : "sat", half ? "saturate" : "inf", acc ? "fp64" : "fp32", kDot[qk],
                  kDot[pv], exp ? "exp" : "exp2", fma, kv ? "asc" : "desc",
                  rowsum ? "single" : "quad");
    return b;
  }
  FlashConfig cfg() const {
    FlashConfig c;
    c.block_q = bq;
    c.block_kv = bk;
    c.q = kStorageE[q];
    c.k = kStorageE[k];
    c.v = kStorageE[v];
    c.p = kStorageE[p];
    c.out = kStorageE[out];
    if (fp8) c.conversion.fp8 = kMlDtypesE4m3;
    if (half) c.conversion.half = Policy{Round::kNearestEven, Overflow::kSaturate, NanEncoding::kCuda};
    c.acc = acc ? Accum::kFp64 : Accum::kFp32;
    c.qk_dot = DotChoice(qk);
    c.pv_dot = DotChoice(pv);
    c.exp = exp ? ExpKind::kExp : ExpKind::kExp2;
    c.fma = fma != 0;
    c.kv_order = kv ? KvOrder::kAscending : KvOrder::kDescending;
    c.row_sum = rowsum ? RowSum::kSingle : RowSum::kQuad;
    return c;
  }
};

std::uint64_t digest(const std::vector<float>& x) {
  std::uint64_t h = 0x243F6A8885A308D3ull;
  for (std::size_t i = 0; i < x.size(); ++i)
    h = splitmix64(h ^ (std::uint64_t(i) << 32 | std::bit_cast<std::uint32_t>(x[i])));
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string data = argc > 1 ? argv[1] : "data";
  std::vector<Spec> specs;
  // One-factor variants around the default FP32 FA2 kernel, then seeded random combinations.
  specs.push_back(Spec{});
  for (int s = 1; s < 5; ++s) {
    Spec a;
    a.q = a.k = a.v = a.p = s;
    specs.push_back(a);
    a.out = s <= 2 ? s : 0;
    specs.push_back(a);
  }
  {
    Spec a;
    a.acc = 1;
    specs.push_back(a);
    a.q = a.k = a.v = a.p = 1;
    specs.push_back(a);
  }
  for (int f = 0; f < 9; ++f) {
    Spec a;
    if (f == 0) a.exp = 1;
    if (f == 1) a.fma = 0;
    if (f == 2) a.kv = 1;
    if (f == 3) a.rowsum = 1;
    if (f == 4) a.qk = 2;
    if (f == 5) a.pv = 2;
    if (f == 6) {
      a.q = a.k = a.v = a.p = 3;
      a.fp8 = 1;
    }
    if (f == 7) {
      a.q = a.k = a.v = a.p = 2;
      a.half = 1;
      a.out = 2;
    }
    if (f == 8) {
      a.acc = 1;
      a.qk = 1;
      a.p = 3;
    }
    specs.push_back(a);
  }
  const int kTiles[][2] = {{64, 64}, {16, 16}, {32, 64}, {128, 32}, {64, 128}, {32, 16},
                           {128, 128}, {1, 1}, {7, 5}};
  std::mt19937 rng(20261123);
  for (int r = 0; r < 40; ++r) {
    Spec a;
    const auto& t = kTiles[rng() % 9];
    a.bq = t[0];
    a.bk = t[1];
    a.q = rng() % 5;
    a.k = rng() % 5;
    a.v = rng() % 5;
    a.p = rng() % 5;
    a.out = rng() % 3;
    a.fp8 = rng() % 2;
    a.half = rng() % 2;
    a.acc = rng() % 2;
    a.qk = rng() % 3;
    a.pv = rng() % 3;
    a.exp = rng() % 2;
    a.fma = rng() % 2;
    a.kv = rng() % 2;
    a.rowsum = rng() % 2;
    specs.push_back(a);
  }
  const char* synth[] = {
      "normal:hq=2,nq=100,nkv=100,d=64,seed=1",
      "kbias:hq=4,hkv=2,nq=77,nkv=131,d=64,causal=1,seed=2",
      "outlier:b=2,hq=2,hkv=1,nq=64,nkv=64,d=128,causal=1,seed=3",
      "normal:nq=200,nkv=50,d=32,dv=48,causal=1,seed=4",
      "peaked:hq=3,hkv=1,nq=65,nkv=300,d=64,seed=5",
      "uniform:hq=4,hkv=1,nq=45,nkv=83,d=128,causal=1,lo=-3,hi=3,seed=6",
      "normal:hq=2,hkv=2,nq=130,nkv=257,d=64,sigma=4,seed=7",
      "normal:nq=10,nkv=6,d=8,causal=1,seed=8",
  };
  std::printf("# config | input | digest(o) digest(lse)\n");
  for (const Spec& sp : specs) {
    for (const char* in_spec : synth) {
      const AttentionInput in = make_synthetic(in_spec);
      const FlashResult r = flash_attention(in, sp.cfg());
      std::printf("%s | synthetic:%s | %016llx %016llx\n", sp.str().c_str(), in_spec,
                  (unsigned long long)digest(r.o), (unsigned long long)digest(r.lse));
    }
  }
  // The bundled and real-model dumps: every configuration on the small dumps, the first 20 on
  // the real ones (each group of them).
  const char* dumps[] = {"bundled/kbias_gqa.h5", "bundled/outlier_causal.h5",
                         "bundled/mla_synthetic.h5", "real/minilm_gpl3.h5", "real/smollm2_gpl3.h5"};
  for (const char* dump : dumps) {
    const std::string path = data + "/" + dump;
    const bool real = std::string(dump).rfind("real/", 0) == 0;
    for (const std::string& prefix : dump_prefixes(path)) {
      const AttentionInput in = read_attention_dump(path, prefix, false);
      for (std::size_t i = 0; i < specs.size(); ++i) {
        if (real && i >= 20) break;
        const FlashResult r = flash_attention(in, specs[i].cfg());
        std::printf("%s | data/%s:%s | %016llx %016llx\n", specs[i].str().c_str(), dump,
                    prefix.c_str(), (unsigned long long)digest(r.o),
                    (unsigned long long)digest(r.lse));
      }
    }
  }
  return 0;
}
