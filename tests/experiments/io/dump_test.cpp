// experiments/io/dump and hdf5_io: HDF5 dump round trip, dtype handling, validation errors, the
// Fletcher-32 checksum, one-line HDF5 failures, synthetic seeds and spec validation.
#include "experiments/io/dump.hpp"

#include <fcntl.h>
#include <omp.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <thread>

#include "experiments/common/error.hpp"
#include "experiments/io/hdf5_io.hpp"
#include "tests/experiments/io/hdf5_chunks.hpp"

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

// Issue 28: attributes on a dataset, groups at any depth, causal rows that see no key.
TEST(Dump, DatasetAttributesNestedGroupsAndEmptyCausalRows) {
  const std::string p = tmp("attrs.h5");
  const std::vector<float> x(1 * 1 * 8 * 4, 0.5f);
  {
    H5Writer w(p);
    for (const char* t : {"q", "k", "v"})
      w.write_f32(std::string("a/b/") + t, {1, 1, 8, 4}, x.data());
    for (const char* t : {"q", "k", "v"})
      w.write_f32(std::string("c/") + t, {1, 1, 8, 4}, x.data());
    w.attr_i64("a/b", "causal", 1);
    w.attr_i64("a/b/q", "causal", 1);      // agrees with the group: harmless
    w.attr_f64("c/k", "sm_scale", 0.125);  // disagrees with the default 1/sqrt(4)
    w.commit();
  }
  EXPECT_EQ(dump_prefixes(p), (std::vector<std::string>{"a/b/", "c/"}));
  EXPECT_EQ(select_dump_input(p + ":a/b").prefixes, std::vector<std::string>{"a/b/"});
  EXPECT_EQ(select_dump_input(p).file, p);
  EXPECT_THROW(select_dump_input(p + ":nope"), UsageError);
  EXPECT_TRUE(read_attention_dump(p, "a/b/", false).causal);
  EXPECT_TRUE(dump_causal(p, "a/b/"));
  EXPECT_FALSE(dump_causal(p, "c/"));
  try {
    read_attention_dump(p, "c/", false);
    ADD_FAILURE() << "a disagreeing sm_scale on a dataset must be refused";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("sm_scale = 0.125 on dataset 'c/k'"), std::string::npos)
        << e.what();
  }
  // More queries than keys under the causal mask: refused with the count; equal is fine.
  AttentionShape s;
  s.len_q = 256;
  s.len_kv = 64;
  try {
    check_causal_rows(s, true, "x.h5");
    ADD_FAILURE();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("first 192 query rows see no key"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(check_causal_rows(s, false, "x.h5"));
  s.len_q = 64;
  EXPECT_NO_THROW(check_causal_rows(s, true, "x.h5"));
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

// The message of the UsageError `f` throws ("" and a test failure when it throws none).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no UsageError";
  return "";
}

using testio::first_chunk;

bool has_fletcher32(const std::string& file, const std::string& name) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t ds = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  const hid_t dcpl = H5Dget_create_plist(ds);
  unsigned flags = 0, conf = 0;
  std::size_t n = 0;
  const bool yes = H5Pget_filter_by_id2(dcpl, H5Z_FILTER_FLETCHER32, &flags, &n, nullptr, 0,
                                        nullptr, &conf) >= 0;
  H5Pclose(dcpl);
  H5Dclose(ds);
  H5Fclose(f);
  return yes;
}

void flip_byte(const std::string& file, std::uint64_t at) {
  std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(std::streamoff(at));
  char c = 0;
  io.read(&c, 1);
  c = char(c ^ 0x10);
  io.seekp(std::streamoff(at));
  io.write(&c, 1);
}

TEST(Integrity, EveryWrittenDatasetCarriesFletcher32) {
  const std::string p = tmp("f32.h5");
  {
    H5Writer w(p);
    const std::vector<float> f{1, 2, 3, 4};
    const std::vector<double> d{1, 2};
    const std::vector<std::int64_t> i{1, 2};
    const std::vector<std::uint16_t> u16{1, 2};
    const std::vector<std::uint8_t> u8{1, 2};
    w.write_f32("g/f32", {2, 2}, f.data());
    w.write_f64("f64", {2}, d.data());
    w.write_i64("i64", {2}, i.data());
    w.write_u16("u16", {2}, u16.data());
    w.write_u8("u8", {2}, u8.data());
    w.write_f16("f16", {2}, u16.data());
    w.write_strings("s", {"golden", "flash:qkv=bf16,p=bf16", ""});
    w.write_f32("empty", {0, 4}, nullptr);  // no data: contiguous, no checksum
    w.commit();
  }
  for (const char* name : {"g/f32", "f64", "i64", "u16", "u8", "f16", "s"})
    EXPECT_TRUE(has_fletcher32(p, name)) << name;
  H5Reader r(p);
  EXPECT_EQ(r.read_strings("s"), (std::vector<std::string>{"golden", "flash:qkv=bf16,p=bf16", ""}));
  EXPECT_EQ(r.read_f64("empty").size(), 0u);
  std::filesystem::remove(p);
}

TEST(Integrity, ABitFlipIsAChecksumMismatch) {
  const AttentionInput in = make_synthetic("normal:hq=2,nq=64,d=16", 4);
  const std::string p = tmp("flip.h5");
  write_attention_dump(p, in, "test");
  ASSERT_NO_THROW(read_attention_dump(p, "", false));
  // One bit in the middle of k's (compressed) data: gzip may well still decompress it, the
  // checksum over the stored bytes cannot match.
  const auto [addr, size] = first_chunk(p, "k");
  ASSERT_GT(size, 8u);
  flip_byte(p, addr + size / 2);
  EXPECT_EQ(error_of([&] { read_attention_dump(p, "", false); }),
            "checksum mismatch in dataset 'k' of '" + p + "' (the file is corrupt)");
  EXPECT_NE(error_of([&] { H5Reader(p).read_numeric("k"); }).find("checksum mismatch"),
            std::string::npos);
  // String columns too.
  {
    H5Writer w(p);
    w.write_strings("method", {"golden", "flash", "flash:qkv=bf16,p=bf16,out=bf16"});
    w.commit();
  }
  const auto [saddr, ssize] = first_chunk(p, "method");
  ASSERT_GT(ssize, 8u);
  flip_byte(p, saddr + ssize / 2);
  EXPECT_NE(error_of([&] { H5Reader(p).read_strings("method"); }).find("checksum mismatch"),
            std::string::npos);
  std::filesystem::remove(p);
}

TEST(Integrity, HdfFailuresAreOneLineNamingTheFile) {
  // A bundled dump written before the checksum: still read; a damaged chunk is one line.
  const std::string src = std::string(ATTNSIM_SOURCE_DIR) + "/data/bundled/outlier_causal.h5";
  const std::string p = tmp("old.h5");
  std::filesystem::copy_file(src, p, std::filesystem::copy_options::overwrite_existing);
  ASSERT_NO_THROW(read_attention_dump(p, "", false));
  ASSERT_FALSE(has_fletcher32(p, "k"));
  const auto [addr, size] = first_chunk(p, "k");
  ASSERT_GT(size, 128u);
  {
    std::fstream io(p, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(std::streamoff(addr + size / 4));
    const std::string junk(64, '\xff');
    io.write(junk.data(), std::streamsize(junk.size()));
  }
  std::string e = error_of([&] { read_attention_dump(p, "", false); });
  EXPECT_NE(e.find("dataset 'k' in '" + p + "'"), std::string::npos) << e;
  // Truncated: the superblock's end-of-file address is past the end.
  write_attention_dump(p, make_synthetic("normal:nq=64,d=16"), "t");
  std::filesystem::resize_file(p, std::filesystem::file_size(p) * 2 / 3);
  e = error_of([&] { read_attention_dump(p, "", false); });
  EXPECT_NE(e.find("'" + p + "'"), std::string::npos) << e;
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  // Not HDF5, missing.
  std::ofstream(p) << "not hdf5";
  EXPECT_NE(error_of([&] { read_attention_dump(p, "", false); }).find("not a readable HDF5 file"),
            std::string::npos);
  EXPECT_NE(error_of([&] { read_attention_dump(p + ".none", "", false); }).find("cannot read"),
            std::string::npos);
  std::filesystem::remove(p);
}

// HDF5's automatic error printing is a per-thread setting in the thread-safe library: a failure
// on a worker thread (where sweeps read their dumps) must not print the HDF5-DIAG stack either.
TEST(Integrity, NoHdf5StackOnAnyThread) {
  const std::string p = tmp("diag.h5");
  write_attention_dump(p, make_synthetic("normal:nq=64,d=16"), "t");
  const auto [addr, size] = first_chunk(p, "q");
  ASSERT_GT(size, 8u);
  flip_byte(p, addr + size / 2);
  const std::string log = tmp("stderr.txt");
  std::fflush(stderr);
  const int saved = ::dup(2);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ::dup2(fd, 2);
  std::string e1, e2;
  std::thread worker([&] { e1 = error_of([&] { read_attention_dump(p, "", false); }); });
  worker.join();
  std::thread opener([&] { e2 = error_of([&] { H5Reader(p + ".none"); }); });
  opener.join();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(fd);
  ::close(saved);
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "");
  EXPECT_NE(e1.find("checksum mismatch in dataset 'q'"), std::string::npos) << e1;
  EXPECT_NE(e2.find("cannot read"), std::string::npos) << e2;
  std::filesystem::remove(p);
  std::filesystem::remove(log);
}

TEST(Dump, Bfloat16AttributeOnlyOnUint16) {
  const std::string p = tmp("bfattr.h5");
  const std::vector<float> x(8, 1.0f);
  const std::vector<std::int64_t> xi(8, 1);
  {
    H5Writer w(p);
    w.write_f32("q", {1, 1, 2, 4}, x.data());
    w.attr_string("q", "dtype", "bfloat16");
    w.write_f32("k", {1, 1, 2, 4}, x.data());
    w.write_f32("v", {1, 1, 2, 4}, x.data());
    w.write_i64("i", {8}, xi.data());
    w.attr_string("i", "dtype", "bfloat16");
    w.commit();
  }
  EXPECT_EQ(error_of([&] { read_attention_dump(p, "", false); }),
            "dataset 'q' in '" + p +
                "' has the attribute dtype = \"bfloat16\" but holds float32 (bfloat16 is stored "
                "as uint16 bits)");
  H5Reader r(p);
  EXPECT_NE(error_of([&] { r.read_numeric("q"); }).find("holds float32"), std::string::npos);
  EXPECT_NE(error_of([&] { r.read_numeric("i"); }).find("holds int64"), std::string::npos);
  std::filesystem::remove(p);
}

TEST(Synthetic, RefusesBadSpecsWithOneLine) {
  struct Bad {
    const char* spec;
    const char* needle;
  } cases[] = {
      {"normal:nq=8,nq=16", "key 'nq' given twice"},
      {"normal:sigma=1,sigma=2", "key 'sigma' given twice"},
      {"normal:sigma=-1", "sigma must be >= 0"},
      {"normal:sigma=nan", "not a finite number"},
      {"normal:sigma=inf", "not a finite number"},
      {"normal:sigma=1e999", "not a finite number"},
      {"uniform:lo=2,hi=1", "lo must be <= hi"},
      {"outlier:frac=1.5", "frac must be in [0, 1]"},
      {"outlier:frac=-0.1", "frac must be in [0, 1]"},
      {"outlier:mag=inf", "not a finite number"},
      {"kbias:bias=nan", "not a finite number"},
      {"normal:causal=5", "causal must be 0 or 1"},
      {"normal:causal=0.5", "causal must be 0 or 1"},
      {"normal:seed=-1", "seed must be an integer >= 0"},
      {"normal:seed=1.5", "seed must be an integer >= 0"},
      {"normal:nq=0", "nq must be a positive integer"},
      {"normal:d=-4", "d must be a positive integer"},
      {"normal:hq=2.5", "hq must be a positive integer"},
      {"normal:bias=3", "key 'bias' does not apply to normal"},
      {"uniform:sigma=2", "key 'sigma' does not apply to uniform"},
      // Sizes, causal and seed are decimal integers; numbers are decimal; no stray comma.
      {"normal:nq=0x10", "is not a decimal number"},
      {"normal:nq=1e3", "nq must be written as a decimal integer"},
      {"normal:hq=2.0", "hq must be written as a decimal integer"},
      {"normal:seed=010", "seed must be written as a decimal integer"},
      {"normal:sigma=0x1p-2", "is not a decimal number"},
      {"normal:nq=16,", "an empty item (a stray comma)"},
      {"normal:nq=16,,d=8", "an empty item (a stray comma)"},
      // Values that would overflow float32 (3.4e38) to Inf, refused before generating.
      {"normal:sigma=1e39", "overflow"},
      {"normal:sigma=1e38", "overflow"},  // 8.65 standard deviations reach 8.7e38
      {"kbias:bias=1e38", "overflow"},
      {"outlier:mag=1e38,sigma=1", "overflow"},
      {"peaked:sharp=1e38", "overflow"},
      {"uniform:lo=-1e39", "overflow"},
  };
  for (const auto& c : cases) {
    const std::string e = error_of([&] { make_synthetic(c.spec); });
    EXPECT_NE(e.find(c.needle), std::string::npos) << c.spec << " -> " << e;
    // The validation runs wherever a spec is taken.
    EXPECT_THROW(synthetic_seed(c.spec), UsageError) << c.spec;
    EXPECT_THROW(make_synthetic(c.spec, 3), UsageError) << c.spec;
  }
  // Edges that are legal: zero spread, a constant uniform, frac 0 with a huge mag (no channel is
  // scaled), values just inside float32.
  for (const char* ok :
       {"normal:nq=4,d=4,sigma=0", "uniform:nq=4,d=4,lo=2,hi=2", "outlier:nq=4,d=4,frac=0,mag=1e38",
        "outlier:nq=4,d=4,frac=1", "uniform:nq=4,d=4,lo=-3.4e38,hi=3.4e38",
        "normal:nq=4,d=4,sigma=3e37", "kbias:nq=4,d=4,causal=1,bias=-2"}) {
    const AttentionInput in = make_synthetic(ok);
    for (float x : in.q) EXPECT_TRUE(std::isfinite(x)) << ok;
  }
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

// The draws are counter-based, so the threads that generate a tensor split its elements: the
// values must not depend on how many there are. Recorded hashes (FNV-1a over the float32 bits of
// q, k, v in order, written by the one-thread generator before it ran in parallel) pin every
// element, not only the first.
TEST(Synthetic, ValuesDoNotDependOnTheThreadCount) {
  const auto hash = [](const AttentionInput& in) {
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (const std::vector<float>* x : {&in.q, &in.k, &in.v})
      for (float v : *x) h = (h ^ std::bit_cast<std::uint32_t>(v)) * 0x100000001b3ull;
    return h;
  };
  const std::pair<const char*, std::uint64_t> specs[] = {
      {"normal:hq=2,hkv=1,nq=37,nkv=53,d=24,seed=7", 0xb09d1c504c693a13ull},
      {"uniform:hq=2,nq=37,d=24,lo=-3,hi=5,seed=2", 0x311764341d3ca446ull}};
  const int saved = omp_get_max_threads();
  for (const auto& [spec, recorded] : specs) {
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      EXPECT_EQ(hash(make_synthetic(spec)), recorded) << spec << ", " << threads << " threads";
    }
  }
  omp_set_num_threads(saved);
}

}  // namespace
}  // namespace attnsim
