// sage2:arch=paper,target=h100 (sim/sage, the SageAttention2 paper's INT4 algorithm on the
// H100's instruction models) against our own CUDA kernel of the same algorithm run on an H100
// (cuda_check/sage/int4_attention.cu; data/hw/h100/sage/int4_h100.h5 and README.md there). The
// kernel read attnsim's prepared operands (operands.bin); the check first regenerates them and
// proves they are the bytes the kernel read, then compares every output row.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "experiments/io/hdf5_io.hpp"
#include "tests/hw/sage_int4_cases.hpp"

namespace attnsim {
namespace {

const std::string kFile = ATTNSIM_DATA_DIR "/hw/h100/sage/int4_h100.h5";

std::uint32_t fnv1a(const std::uint8_t* p, std::size_t n, std::uint32_t h = 0x811C9DC5u) {
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x01000193u;
  return h;
}

TEST(SageInt4H100, OperandsAreTheOnesTheKernelRead) {
  H5Reader r(kFile);
  std::uint32_t h = 0x811C9DC5u;
  std::size_t bytes = 0;
  for (const hwtest::Int4Case& c : hwtest::int4_cases()) {
    const std::vector<std::uint8_t> b =
        hwtest::int4_operand_bytes(hwtest::int4_case_input(c, ATTNSIM_DATA_DIR "/.."), c.dtype);
    h = fnv1a(b.data(), b.size(), h);
    bytes += b.size();
  }
  EXPECT_EQ(double(bytes), r.attr_f64("/", "operands_bytes"));
  EXPECT_EQ(double(h), r.attr_f64("/", "operands_fnv1a"));
}

TEST(SageInt4H100, EveryOutputRowMatchesTheKernel) {
  H5Reader r(kFile);
  std::int64_t rows = 0, same = 0, elems = 0, elems_same = 0;
  for (const hwtest::Int4Case& c : hwtest::int4_cases()) {
    const AttentionInput in = hwtest::int4_case_input(c, ATTNSIM_DATA_DIR "/..");
    const SageResult res = sage_attention(in, hwtest::int4_options(c.dtype));
    const std::string g = c.input.name + "/";
    const std::vector<std::int64_t> want_rows = r.read_i64(g + "o_rows");
    const std::vector<std::int64_t> want = c.full ? r.read_i64(g + "o") : std::vector<std::int64_t>{};
    const int d = in.shape.head_dim_v;
    const std::size_t n = want_rows.size();
    ASSERT_EQ(n * d, res.r.o.size()) << g;
    constexpr Policy kExact{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};
    std::vector<std::uint8_t> bytes(std::size_t(d) * 2);
    int reported = 0;
    for (std::size_t row = 0; row < n; ++row) {
      for (int e = 0; e < d; ++e) {
        const auto b = std::uint16_t(encode_float_bits(c.dtype, float(res.r.o[row * d + e]), kExact));
        bytes[2 * std::size_t(e)] = std::uint8_t(b & 0xFF);
        bytes[2 * std::size_t(e) + 1] = std::uint8_t(b >> 8);
        if (c.full) {
          ++elems;
          elems_same += std::uint16_t(want[row * d + e]) == b;
        }
      }
      ++rows;
      if (std::uint32_t(want_rows[row]) == fnv1a(bytes.data(), bytes.size())) {
        ++same;
      } else if (reported++ < 3) {
        ADD_FAILURE() << g << " row " << row << " differs from the kernel";
      }
    }
  }
  std::printf("sage2:arch=paper,target=h100 vs the INT4 CUDA kernel: %lld/%lld rows identical, "
              "%lld/%lld elements of the fully stored case\n",
              (long long)same, (long long)rows, (long long)elems_same, (long long)elems);
  EXPECT_EQ(same, rows);
  EXPECT_EQ(elems_same, elems);
}

}  // namespace
}  // namespace attnsim
