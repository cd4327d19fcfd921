// experiments/io/dump: HDF5 dump round trip, dtype handling, validation errors, synthetic seeds.
#include "experiments/io/dump.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "experiments/cli/error.hpp"
#include "experiments/io/hdf5_io.hpp"

namespace attnsim {
namespace {

std::string tmp(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("attnsim_dump_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

TEST(Dump, RoundTripKeepsEverything) {
  const AttentionInput in =
      make_synthetic("kbias:b=2,hq=4,hkv=2,nq=9,nkv=11,d=8,dv=4,causal=1,seed=3");
  const std::string p = tmp("rt.h5");
  write_attention_dump(p, in, "test");
  DumpInfo info;
  const AttentionInput back = read_attention_dump(p, "", false, &info);
  EXPECT_EQ(back.q, in.q);
  EXPECT_EQ(back.k, in.k);
  EXPECT_EQ(back.v, in.v);
  EXPECT_TRUE(back.causal);
  EXPECT_EQ(back.shape.heads_kv, 2);
  EXPECT_EQ(back.shape.head_dim_v, 4);
  EXPECT_EQ(info.dtype, "float32");
  EXPECT_EQ(info.source, "test");
  std::filesystem::remove(p);
}

TEST(Dump, Bfloat16AndFloat16AndLayersAndErrors) {
  const std::string p = tmp("bf.h5");
  {
    H5Writer w(p);
    const std::vector<std::uint16_t> q_bits{0x3F80, 0xC000, 0x3F00, 0x0000};  // 1, -2, 0.5, 0
    w.write_u16("layer_00/q", {1, 1, 2, 2}, q_bits.data());
    w.attr_string("layer_00/q", "dtype", "bfloat16");
    const std::vector<float> kv{1, 2, 3, 4};
    w.write_f32("layer_00/k", {1, 1, 2, 2}, kv.data());
    w.write_f32("layer_00/v", {1, 1, 2, 2}, kv.data());
    w.write_f32("layer_01/q", {1, 1, 2, 3}, kv.data());  // wrong: 4 values for 6
    w.commit();
  }
  EXPECT_EQ(dump_prefixes(p), (std::vector<std::string>{"layer_00/", "layer_01/"}));
  const AttentionInput in = read_attention_dump(p, "layer_00/", false);
  EXPECT_EQ(in.q, (std::vector<float>{1.0f, -2.0f, 0.5f, 0.0f}));
  EXPECT_THROW(read_attention_dump(p, "layer_01/", false), UsageError);  // no k/v
  EXPECT_THROW(read_attention_dump(p, "layer_02/", false), UsageError);
  std::filesystem::remove(p);
}

TEST(Dump, RejectsNonFiniteUnlessAllowedAndBadShapes) {
  AttentionInput in = make_synthetic("normal:nq=4,d=4");
  in.k[5] = NAN;
  const std::string p = tmp("nf.h5");
  write_attention_dump(p, in, "t");
  try {
    read_attention_dump(p, "", false);
    ADD_FAILURE() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("k in"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("[0,0,1,1]"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(read_attention_dump(p, "", true));
  {
    H5Writer w(p);
    const std::vector<float> x(12, 1.0f);
    w.write_f32("q", {1, 3, 2, 2}, x.data());
    w.write_f32("k", {1, 2, 3, 2}, x.data());
    w.write_f32("v", {1, 2, 3, 2}, x.data());
    w.commit();
  }
  EXPECT_THROW(read_attention_dump(p, "", false), UsageError);  // 3 q heads on 2 kv heads
  std::filesystem::remove(p);
}

TEST(Synthetic, SeedsAreReproducibleAndDistinct) {
  const AttentionInput a = make_synthetic("peaked:nq=16,d=8", 5),
                       b = make_synthetic("peaked:nq=16,d=8", 5),
                       c = make_synthetic("peaked:nq=16,d=8", 6);
  EXPECT_EQ(a.q, b.q);
  EXPECT_NE(a.q, c.q);
  EXPECT_EQ(synthetic_seed("normal:seed=12"), 12u);
  EXPECT_THROW(make_synthetic("gauss:nq=3"), UsageError);
  EXPECT_THROW(make_synthetic("normal:nq=0"), UsageError);
  EXPECT_THROW(make_synthetic("normal:depth=3"), UsageError);
  // A recorded value pins the generator: bundled data and baselines depend on it.
  const AttentionInput n = make_synthetic("normal:nq=1,nkv=1,d=1", 0);
  EXPECT_EQ(n.q[0], -0.7578915f);  // bits 0xbf42052d
  EXPECT_EQ(n.q[0], make_synthetic("normal:nq=1,nkv=1,d=1,seed=0").q[0]);
}

}  // namespace
}  // namespace attnsim
