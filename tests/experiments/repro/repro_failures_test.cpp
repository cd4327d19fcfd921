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

TEST(ReproFailures, TileWidthsDivergeFromKey96) {
  ReproOptions o;
  o.quick = true;
  const ReproTable t = find("kv-tile-widths").run(o);
  const int rows = col(t, "rows"), same = col(t, "rows_identical");
  ASSERT_EQ(t.rows.size(), 3u);
  EXPECT_EQ(t.rows[0][std::size_t(same)].v, t.rows[0][std::size_t(rows)].v);  // rows 0-95
  EXPECT_LT(t.rows[1][std::size_t(same)].v, t.rows[1][std::size_t(rows)].v);
  EXPECT_NE(t.notes.find("row 96,"), std::string::npos) << t.notes;
}

}  // namespace
}  // namespace attnsim
