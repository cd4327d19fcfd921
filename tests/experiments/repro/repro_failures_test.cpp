// experiments/repro/repro_failures.cpp, quick versions: the #93 overflow starts near the row the
// closed form gives and only on the fp16 accumulator; the tile-width divergence starts at key 96.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "experiments/repro/repro.hpp"

namespace attnsim {
namespace {

const Reproduction& find(const std::string& name) {
  for (const Reproduction& r : repro_registry())
    if (r.name == name) return r;
  throw std::runtime_error("no repro " + name);
}

int col(const ReproTable& t, const std::string& name) {
  for (std::size_t i = 0; i < t.columns.size(); ++i)
    if (t.columns[i].name == name) return int(i);
  return -1;
}

TEST(ReproFailures, Fp16OverflowOnlyOnTheFp16AccumulatorFromTheExpectedRow) {
  ReproOptions o;
  o.quick = true;
  const ReproTable t = find("sage-fp16-overflow").run(o);
  const int m = col(t, "method"), ov = col(t, "pv_overflow"), first = col(t, "first_row"),
            want = col(t, "expected_row"), nf = col(t, "out_nonfinite");
  int overflowing = 0;
  for (const auto& row : t.rows) {
    const bool fp16 = row[std::size_t(m)].s.find("pv_accum=fp16,") != std::string::npos;
    if (!fp16) {
      EXPECT_EQ(row[std::size_t(ov)].v, 0) << row[std::size_t(m)].s;
      EXPECT_EQ(row[std::size_t(nf)].v, 0);
      continue;
    }
    if (row[std::size_t(ov)].v == 0) continue;
    ++overflowing;
    // p ≤ 1 makes the real sum a little smaller than (i + 1)·vbar: the overflow starts at or a few
    // rows after the closed form's row.
    EXPECT_GE(row[std::size_t(first)].v, row[std::size_t(want)].v);
    EXPECT_LE(row[std::size_t(first)].v, row[std::size_t(want)].v * 1.05 + 2);
    EXPECT_EQ(row[std::size_t(nf)].v, row[std::size_t(ov)].v);
  }
  EXPECT_GE(overflowing, 1);
}

TEST(ReproFailures, TileWidthsDivergeFromKey97) {
  // vllm_fa3's prefill (128 x 192 FP8 tiles) and decode (64 x 96) of one token agree while the row
  // sees at most 96 keys (one block each) and not from 97 keys on.
  ReproOptions o;
  o.quick = true;
  const ReproTable t = find("kv-tile-widths").run(o);
  const int len = col(t, "seq_len"), same = col(t, "identical"), n = col(t, "elements");
  const int pre = col(t, "prefill_tile"), dec = col(t, "decode_tile");
  ASSERT_GE(t.rows.size(), 2u);
  EXPECT_EQ(t.rows[0][std::size_t(len)].v, 96);
  EXPECT_EQ(t.rows[0][std::size_t(same)].v, t.rows[0][std::size_t(n)].v);
  EXPECT_EQ(t.rows[1][std::size_t(len)].v, 97);
  EXPECT_LT(t.rows[1][std::size_t(same)].v, t.rows[1][std::size_t(n)].v);
  EXPECT_EQ(t.rows[0][std::size_t(pre)].s, "128x192");
  EXPECT_EQ(t.rows[0][std::size_t(dec)].s, "64x96");
  EXPECT_NE(t.notes.find("differs from the prefill: 97."), std::string::npos) << t.notes;
}

TEST(ReproFailures, Fp8LongContextFlushOrdersTheErrors) {
  // vllm #23813: at every length, the never-flushed chain is far worse than per-block flushing,
  // which sits near the quantization floor; 64-block intervals lie between.
  ReproOptions o;
  o.quick = true;
  const ReproTable t = find("fp8-long-context").run(o);
  const int m = col(t, "method"), e = col(t, "rel_l1");
  auto err = [&](std::size_t first, const std::string& method) {
    for (std::size_t r = first; r < first + 6; ++r)
      if (t.rows[r][std::size_t(m)].s == method) return t.rows[r][std::size_t(e)].v;
    ADD_FAILURE() << method;
    return 0.0;
  };
  ASSERT_EQ(t.rows.size(), 12u);
  for (std::size_t first : {0u, 6u}) {
    const double never = err(first, "fa3:dtype=e4m3"), every = err(first, "vllm_fa3:dtype=e4m3"),
                 i4 = err(first, "vllm_fa3:dtype=e4m3,interval=4"),
                 i64 = err(first, "vllm_fa3:dtype=e4m3,interval=64"),
                 floor = err(first, "vllm_fa3:dtype=e4m3,pv_dot=fp32");
    EXPECT_GT(never, 2 * i64);
    EXPECT_GT(i64, 4 * i4);
    EXPECT_GT(i4, every);
    EXPECT_LT(every, 1.5 * floor);
  }
  // The never-flushed error grows with the context.
  EXPECT_GT(err(6, "fa3:dtype=e4m3"), err(0, "fa3:dtype=e4m3"));
}

}  // namespace
}  // namespace attnsim
