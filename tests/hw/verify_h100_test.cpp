// `attnsim verify` (experiments/analysis/verify.hpp) on what H100 kernels returned: every public
// SageAttention path (data/hw/h100/sage/sage_h100.h5 stores each output row's FNV-1a digest: the
// kernel's output is rebuilt as the bits whose digests equal the recorded ones, checked row by
// row here, so the verified tensor is the H100's) and our LeanAttention kernel (lean_h100.h5, full
// outputs). The matching method gives verdict 0; a wrong one (sm80's output checked as sm90) not
// 0 with the right first diverging element; planted bugs (a row scaled by 1.01, one KV tile's keys
// dropped) outside the band with the row and the tile named; results independent of threads.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "experiments/analysis/verify.hpp"
#include "experiments/io/hdf5_io.hpp"
#include "experiments/methods/methods.hpp"
#include "formats/encoding.hpp"
#include "sim/lean/lean.hpp"
#include "tests/hw/amla_check.hpp"
#include "tests/hw/sage_inputs.hpp"

namespace attnsim {
namespace {

const std::string kSage = ATTNSIM_DATA_DIR "/hw/h100/sage/sage_h100.h5";
const std::string kLean = ATTNSIM_DATA_DIR "/hw/h100/lean/lean_h100.h5";
const std::string kTurbo = ATTNSIM_DATA_DIR "/hw/h100/turbo/turbo_h100.h5";

std::uint32_t fnv1a_row(Encoding e, const std::vector<double>& o, std::size_t row, int dv) {
  constexpr Policy kExact{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};
  std::uint32_t h = 0x811C9DC5u;
  for (int c = 0; c < dv; ++c) {
    const std::uint32_t b = encode_float_bits(e, float(o[row * dv + std::size_t(c)]), kExact);
    h = (h ^ (b & 0xFF)) * 0x01000193u;
    h = (h ^ (b >> 8)) * 0x01000193u;
  }
  return h;
}

struct SagePath {
  const char* rec;
  const char* method;
};
const SagePath kPaths[] = {
    {"sage1", "sage1:smooth_k=1"},
    {"sm80_fp32", "sage2:arch=sm80,pv_accum=fp32"},
    {"sm80_fp16+fp32", "sage2:arch=sm80,pv_accum=fp16+fp32"},
    {"sm80_fp16", "sage2:arch=sm80,pv_accum=fp16"},
    {"sm89_fp32", "sage2:arch=sm89,pv_accum=fp32,target=h100"},
    {"sm89_fp32+fp32", "sage2:arch=sm89,pv_accum=fp32+fp32,target=h100"},
    {"sm89_fp32+fp16", "sage2:arch=sm89,pv_accum=fp32+fp16,target=h100"},
    {"sm90", "sage2:arch=sm90"},
};

hwtest::SageCase kbias_d128() {
  hwtest::SageCase s;
  s.name = "kbias_d128";
  s.kind = "kbias";
  s.seed = 12;
  s.b = 1, s.hq = 2, s.hkv = 2, s.n = 150, s.d = 128, s.causal = false;
  return s;
}
hwtest::SageCase normal_gqa_causal() {
  hwtest::SageCase s;
  s.name = "normal_gqa_causal";
  s.kind = "normal";
  s.seed = 11;
  s.b = 1, s.hq = 2, s.hkv = 1, s.n = 200, s.d = 64, s.causal = true;
  return s;
}

// The H100's output of one recorded path: the method's bits, each row's digest checked against
// the recording (a row that differs fails the test: the tensor would not be the kernel's).
KernelOutput sage_kernel_output(const H5Reader& r, const hwtest::SageCase& c, const char* dt,
                                const AttentionInput& in, const SagePath& path) {
  const std::string g = c.name + "/" + dt + "/";
  const std::string paths = r.attr_string(c.name + "/" + dt, "paths");
  std::size_t pi = 0, pos = 0;
  for (;;) {
    const std::size_t e = paths.find(',', pos);
    if (paths.substr(pos, e - pos) == path.rec) break;
    EXPECT_NE(e, std::string::npos) << path.rec;
    if (e == std::string::npos) return {};
    ++pi;
    pos = e + 1;
  }
  const std::vector<std::int64_t> rows = r.read_i64(g + "o_rows");
  const MethodOutput out = parse_method(std::string(path.method) + ",in=" + dt).run(in);
  const Encoding enc = std::string(dt) == "bf16" ? Encoding::kBf16 : Encoding::kFp16;
  const std::size_t nrows = std::size_t(in.shape.batch) * in.shape.heads_q * in.shape.len_q;
  std::size_t bad = 0;
  for (std::size_t row = 0; row < nrows; ++row)
    bad += std::uint32_t(rows[pi * nrows + row]) != fnv1a_row(enc, out.o, row, in.shape.head_dim_v);
  EXPECT_EQ(bad, 0u) << path.rec << " " << dt;
  return KernelOutput{out.o, out.format, {}};
}

VerifyReport verify(const AttentionInput& in, const KernelOutput& k, const std::string& method) {
  VerifyOptions o;
  o.method = method;
  return verify_kernel(in, k, o);
}

TEST(VerifyH100, EverySagePathIsBitIdenticalToItsMethod) {
  H5Reader r(kSage);
  for (const hwtest::SageCase& c : {kbias_d128(), normal_gqa_causal()})
    for (const char* dt : {"bf16", "fp16"}) {
      AttentionInput in = hwtest::lattice_input(c);
      in.dtype = "float32";
      for (const SagePath& p : kPaths) {
        SCOPED_TRACE(c.name + " " + dt + " " + p.rec);
        const KernelOutput k = sage_kernel_output(r, c, dt, in, p);
        const VerifyReport v = verify(in, k, std::string(p.method) + ",in=" + dt);
        EXPECT_EQ(v.verdict, Verdict::kIdentical);
        EXPECT_EQ(v.elems_identical, v.elems);
        EXPECT_FALSE(v.diverges);
      }
    }
}

TEST(VerifyH100, WrongMethodIsNotIdenticalAndNamesTheFirstDivergingElement) {
  H5Reader r(kSage);
  const hwtest::SageCase c = kbias_d128();
  AttentionInput in = hwtest::lattice_input(c);
  in.dtype = "float32";
  const KernelOutput k = sage_kernel_output(r, c, "bf16", in, kPaths[1]);  // sm80_fp32
  const VerifyReport v = verify(in, k, "sage2:arch=sm90,in=bf16");
  EXPECT_NE(v.verdict, Verdict::kIdentical);
  ASSERT_TRUE(v.diverges);
  // The first element where the H100's sm80 output and the sm90 method's bits differ, found by a
  // plain scan here.
  const MethodOutput sm90 = parse_method("sage2:arch=sm90,in=bf16").run(in);
  std::size_t first = 0;
  while (first < k.o.size() && k.o[first] == sm90.o[first]) ++first;
  ASSERT_LT(first, k.o.size());
  const int dv = in.shape.head_dim_v;
  const std::size_t row = first / dv;
  EXPECT_EQ(v.first_col, int(first % dv));
  EXPECT_EQ(v.first_row, int(row % in.shape.len_q));
  EXPECT_EQ(v.first_head, int(row / in.shape.len_q % in.shape.heads_q));
  EXPECT_EQ(v.first_batch, 0);
  // The recorded digests of the two paths differ on that row too (it is the hardware's divergence).
  const std::vector<std::int64_t> rows = r.read_i64("kbias_d128/bf16/o_rows");
  const std::size_t nrows = std::size_t(in.shape.heads_q) * in.shape.len_q;
  const std::string paths = "," + r.attr_string("kbias_d128/bf16", "paths") + ",";
  auto index_of = [&](const std::string& name) {
    const std::size_t at = paths.find("," + name + ",");
    return std::size_t(std::count(paths.begin(), paths.begin() + std::ptrdiff_t(at), ','));
  };
  const std::size_t i80 = index_of("sm80_fp32"), i90 = index_of("sm90");
  EXPECT_NE(rows[i80 * nrows + row], rows[i90 * nrows + row]);
  // Without --method, verify finds the path the output came from.
  VerifyOptions any;
  const VerifyReport a = verify_kernel(in, k, any);
  bool found = false;
  for (const std::string& m : a.identical_candidates)
    found = found || m.find("arch=sm80") != std::string::npos;
  EXPECT_TRUE(found) << format_verify_report(a, 3);
  EXPECT_EQ(a.verdict, Verdict::kIdentical);
}

TEST(VerifyH100, PlantedBugsAreOutsideTheBandWithRowAndTileNamed) {
  H5Reader r(kSage);
  const hwtest::SageCase c = kbias_d128();
  AttentionInput in = hwtest::lattice_input(c);
  in.dtype = "float32";
  // sm80's fp32 path (fp16 P and V): its error against golden is small enough that a 1 % change
  // of a row leaves FlashAttention's band. (On the FP8 paths the method's own error against
  // golden is larger than 1 % of these outputs: the same bug stays within the band there, and
  // only the kernel-vs-method figures show it.)
  const std::string method = "sage2:arch=sm80,pv_accum=fp32,in=bf16";
  const KernelOutput k = sage_kernel_output(r, c, "bf16", in, kPaths[1]);
  const int dv = in.shape.head_dim_v, L = in.shape.len_q;
  constexpr Policy kRne{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};
  // 1. One row scaled by 1.01 (head 1, row 77), rounded back to bf16.
  {
    KernelOutput bug = k;
    const std::size_t row = std::size_t(1) * L + 77;
    for (int ch = 0; ch < dv; ++ch) {
      double& x = bug.o[row * dv + ch];
      x = decode_float_bits(Encoding::kBf16, encode_float_bits(Encoding::kBf16, float(x * 1.01), kRne));
    }
    const VerifyReport v = verify(in, bug, method);
    EXPECT_EQ(v.verdict, Verdict::kOutsideBand) << format_verify_report(v, 5);
    ASSERT_FALSE(v.worst.empty());
    EXPECT_EQ(v.per_row[v.worst[0]].head, 1);
    EXPECT_EQ(v.per_row[v.worst[0]].row, 77);
    EXPECT_EQ(v.rows_outside_band, 1);
  }
  // 2. One KV tile's keys dropped for head 0: that head's rows as the same method computes them
  // without keys [bk, 2 bk) (K and V with the block cut out).
  {
    const Pipeline p = parse_method(method).pipeline(in);
    const int bk = p.tile.block_kv;
    const int d = in.shape.head_dim, n = in.shape.len_kv;
    ASSERT_GT(n, bk);
    const int drop_end = std::min(2 * bk, n);  // block 1: keys [bk, drop_end)
    AttentionInput cut = in;
    cut.shape.len_kv = n - (drop_end - bk);
    cut.shape.len_q = L;
    cut.k.clear();
    cut.v.clear();
    for (int h = 0; h < in.shape.heads_kv; ++h)
      for (int j = 0; j < n; ++j) {
        if (j >= bk && j < drop_end) continue;
        const std::size_t at = (std::size_t(h) * n + j);
        cut.k.insert(cut.k.end(), in.k.begin() + at * d, in.k.begin() + (at + 1) * d);
        cut.v.insert(cut.v.end(), in.v.begin() + at * dv, in.v.begin() + (at + 1) * dv);
      }
    const MethodOutput dropped = parse_method(method).run(cut);
    KernelOutput bug = k;
    for (std::size_t i = 0; i < std::size_t(L) * dv; ++i) bug.o[i] = dropped.o[i];  // head 0
    const VerifyReport v = verify(in, bug, method);
    EXPECT_EQ(v.verdict, Verdict::kOutsideBand) << format_verify_report(v, 5);
    ASSERT_FALSE(v.worst.empty());
    for (std::size_t w : v.worst) {
      EXPECT_EQ(v.per_row[w].head, 0);
      EXPECT_EQ(v.per_row[w].suspect_block, 1) << format_verify_report(v, 5);
    }
  }
}

TEST(VerifyH100, ReportDoesNotDependOnTheThreadCount) {
  H5Reader r(kSage);
  const hwtest::SageCase c = normal_gqa_causal();
  AttentionInput in = hwtest::lattice_input(c);
  in.dtype = "float32";
  const KernelOutput k = sage_kernel_output(r, c, "fp16", in, kPaths[3]);  // sm80_fp16
  VerifyOptions o;
  o.method = "sage2:arch=sm90,in=fp16";
  o.counters = true;
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const VerifyReport a = verify_kernel(in, k, o);
  omp_set_num_threads(4);
  const VerifyReport b = verify_kernel(in, k, o);
  omp_set_num_threads(saved);
  EXPECT_EQ(format_verify_report(a, 5), format_verify_report(b, 5));
  EXPECT_EQ(verify_rows_csv(a), verify_rows_csv(b));
  EXPECT_EQ(a.counters.column_values(), b.counters.column_values());
}

// Recorded bit patterns of a 16-bit format as values.
std::vector<float> decode_bits(const std::vector<std::int64_t>& bits, Encoding e) {
  std::vector<float> f(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) f[i] = decode_float_bits(e, std::uint32_t(bits[i]));
  return f;
}

// A recorded uniform-length case of our LeanAttention decode kernel: its input, the kernel's output
// and the method of record (`lean:mblocks=all,sms=N`); false for a ragged case (per-batch lengths
// are no method option).
struct LeanCase {
  AttentionInput in;
  KernelOutput k;
  std::string method;
};
bool lean_case(const H5Reader& r, const std::string& c, LeanCase* out) {
  const std::vector<std::int64_t> lk = r.read_i64(c + "/lk");
  const int LK = int(r.attr_f64(c, "lk_max"));
  for (auto l : lk)
    if (l != LK) return false;
  const int B = int(r.attr_f64(c, "batch")), HQ = int(r.attr_f64(c, "hq")),
            HK = int(r.attr_f64(c, "hk")), D = int(r.attr_f64(c, "d"));
  const std::string dt = r.attr_string(c, "dtype");
  const Encoding e = dt == "bf16" ? Encoding::kBf16 : Encoding::kFp16;
  AttentionInput& in = out->in;
  in.shape = AttentionShape{B, HQ, HK, 1, LK, D, D};
  in.dtype = dt == "bf16" ? "bfloat16" : "float16";
  in.q = decode_bits(r.read_i64(c + "/q"), e);
  in.k = decode_bits(r.read_i64(c + "/k"), e);
  in.v = decode_bits(r.read_i64(c + "/v"), e);
  out->k.format = dt;
  const std::vector<float> o = decode_bits(r.read_i64(c + "/lean/o"), e);
  out->k.o.assign(o.begin(), o.end());
  out->method = "lean:dtype=" + dt + ",mblocks=all,sms=" + std::to_string(int(r.attr_f64(c, "num_sms")));
  return true;
}

// Our LeanAttention decode kernel (every m-block, FA2 tiles, stream-K splits) on the uniform-length
// recorded cases: bit-identical to `lean:mblocks=all,sms=N`.
TEST(VerifyH100, LeanKernelOutputsAreBitIdentical) {
  H5Reader r(kLean);
  int checked = 0;
  for (const std::string& c : r.members("/")) {
    LeanCase lc;
    if (!lean_case(r, c, &lc)) continue;
    SCOPED_TRACE(c + " " + lc.method);
    const VerifyReport v = verify(lc.in, lc.k, lc.method);
    EXPECT_EQ(v.verdict, Verdict::kIdentical) << format_verify_report(v, 3);
    ++checked;
  }
  EXPECT_GE(checked, 5);
}

// The split schedule in the concentration table: one output row made of several CTAs' segments
// changed in a recorded Lean output; the table names that row's CTAs (1 diverging row each, out of
// the rows each CTA takes part in, counted here from the plan's segments) and its split count, and
// no other CTA.
TEST(VerifyH100, LeanDivergenceIsTalliedBySplitAndCta) {
  H5Reader r(kLean);
  int checked = 0;
  for (const std::string& c : r.members("/")) {
    LeanCase lc;
    if (!lean_case(r, c, &lc)) continue;
    const AttentionShape& s = lc.in.shape;
    // Which CTAs make each row, from the plan's segments (folded GQA decode: a segment's rows are
    // query heads head·g + r of its KV head).
    const MethodConfig m = parse_method(lc.method);
    LeanOptions o;
    o.style = SplitStyle::kLean;
    o.dtype = lc.k.format == "bf16" ? Encoding::kBf16 : Encoding::kFp16;
    o.m_blocks = LeanMBlocks::kAll;
    o.sms = std::stoi(m.values.at("sms"));
    const LeanPlan plan = lean_run_plan(lc.in, o);
    const int g = s.heads_q / s.heads_kv;
    std::vector<std::vector<int>> ctas(std::size_t(s.batch) * s.heads_q);
    for (const LeanSegment& seg : plan.segments)
      for (int i = seg.m_block * plan.block_m; i < std::min(plan.rows, (seg.m_block + 1) * plan.block_m); ++i) {
        const int h = plan.folded ? seg.head * g + i : seg.head;
        ctas[std::size_t(seg.batch) * s.heads_q + h].push_back(seg.cta);
      }
    std::size_t row = 0;
    while (row < ctas.size() && ctas[row].size() < 2) ++row;
    if (row == ctas.size()) continue;
    const int dv = s.head_dim_v;
    const Encoding e = lc.k.format == "bf16" ? Encoding::kBf16 : Encoding::kFp16;
    constexpr Policy kRne{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};
    KernelOutput bug = lc.k;
    for (int ch = 0; ch < dv; ++ch) {
      double& x = bug.o[row * dv + std::size_t(ch)];
      x = decode_float_bits(e, encode_float_bits(e, float(x * 1.01 + 1e-3), kRne));
    }
    SCOPED_TRACE(c + " row " + std::to_string(row));
    const VerifyReport v = verify(lc.in, bug, lc.method);
    ASSERT_TRUE(v.diverges);
    EXPECT_EQ(v.rows - v.rows_identical, 1);
    int cta_classes = 0;
    bool split_class = false;
    for (const Concentration& k : v.concentration) {
      if (k.what.rfind("rows with a segment in CTA", 0) == 0) {
        const int cta = std::stoi(k.what.substr(26));
        ++cta_classes;
        EXPECT_NE(std::find(ctas[row].begin(), ctas[row].end(), cta), ctas[row].end()) << k.what;
        std::int64_t rows_of_cta = 0;
        for (const std::vector<int>& x : ctas) rows_of_cta += std::count(x.begin(), x.end(), cta) > 0;
        EXPECT_EQ(k.rows, rows_of_cta) << k.what;
        EXPECT_EQ(k.diverging, 1) << k.what;
      }
      if (k.what == "rows merged from " + std::to_string(ctas[row].size()) + " split(s)") {
        split_class = true;
        EXPECT_EQ(k.diverging, 1);
      }
    }
    std::vector<int> distinct = ctas[row];
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    EXPECT_EQ(cta_classes, int(distinct.size())) << format_verify_report(v, 3);
    EXPECT_TRUE(split_class) << format_verify_report(v, 3);
    ++checked;
  }
  EXPECT_GE(checked, 1);
}

// Our MLA-decode kernels (data/hw/h100/amla: AMLA's integer-add rescaling and the FP32 Base) on
// two recorded cases, one of them the adversarial score jump that breaks Lemma 3.1's bound: each
// output bit-identical to its variant's method and not to the other variant's.
TEST(VerifyH100, AmlaKernelOutputsAreBitIdenticalToTheirVariant) {
  H5Reader r(hwtest::amla_h100_file());
  const std::string common = ",in=bf16,block=512,bq=32,qk_sum=block16,pv_sum=block16,target=h100";
  int checked = 0;
  for (const hwtest::AmlaCase& c : hwtest::amla_cases()) {
    if (c.name != "g16_u20_s1000" && c.name != "jump_g32_s2560") continue;
    const AttentionInput in = hwtest::amla_checked_input(r, c);
    for (const char* kernel : {"amla", "base"}) {
      KernelOutput k;
      k.format = "bf16";
      const std::vector<float> o = decode_bits(r.read_i64(c.name + "/" + kernel + "/out"), Encoding::kBf16);
      k.o.assign(o.begin(), o.end());
      const bool cann = std::string(kernel) == "amla";
      const std::string mine = std::string("amla:variant=") + (cann ? "cann" : "base") + common;
      const std::string other = std::string("amla:variant=") + (cann ? "base" : "cann") + common;
      SCOPED_TRACE(c.name + " " + kernel);
      const VerifyReport v = verify(in, k, mine);
      EXPECT_EQ(v.verdict, Verdict::kIdentical) << format_verify_report(v, 3);
      EXPECT_EQ(v.elems_identical, v.elems);
      const VerifyReport w = verify(in, k, other);
      EXPECT_NE(w.verdict, Verdict::kIdentical) << format_verify_report(w, 3);
      EXPECT_TRUE(w.diverges);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 4);
}

// Our TurboAttention kernels (data/hw/h100/turbo): the prefill rows and every teacher-forced decode
// row over the 4/2-bit cache, each case with its recorded per-head bits (`head_bits`), bit-identical
// to `turbo:mode=decode`; the same output checked with every head at 4 bits is not.
TEST(VerifyH100, TurboKernelOutputsAreBitIdentical) {
  H5Reader r(kTurbo);
  int checked = 0;
  for (const std::string& c : r.members("/")) {
    const int B = int(r.attr_f64(c, "batch")), HQ = int(r.attr_f64(c, "hq")),
              HK = int(r.attr_f64(c, "hkv")), N = int(r.attr_f64(c, "n")),
              D = int(r.attr_f64(c, "d")), P = int(r.attr_f64(c, "prefill"));
    AttentionInput in;
    in.shape = AttentionShape{B, HQ, HK, N, N, D, D};
    in.causal = true;
    in.dtype = "float16";
    in.q = decode_bits(r.read_i64(c + "/q"), Encoding::kFp16);
    in.k = decode_bits(r.read_i64(c + "/k"), Encoding::kFp16);
    in.v = decode_bits(r.read_i64(c + "/v"), Encoding::kFp16);
    std::string bits_k, bits_v, all4;
    for (std::int64_t b : r.read_i64(c + "/bits_k")) bits_k += std::to_string(b);
    for (std::int64_t b : r.read_i64(c + "/bits_v")) bits_v += std::to_string(b);
    all4.assign(bits_k.size(), '4');
    KernelOutput k;
    k.format = "fp32";
    k.o = r.read_f64(c + "/o");
    const std::string base = "turbo:mode=decode,prefill=" + std::to_string(P) + ",in=fp16,out=fp32";
    SCOPED_TRACE(c);
    const VerifyReport v = verify(in, k, base + ",head_bits=" + bits_k + "/" + bits_v);
    EXPECT_EQ(v.verdict, Verdict::kIdentical) << format_verify_report(v, 3);
    EXPECT_EQ(v.rows_identical, v.rows);
    if (bits_k + bits_v != all4 + all4) {
      const VerifyReport w = verify(in, k, base + ",head_bits=" + all4 + "/" + all4);
      EXPECT_NE(w.verdict, Verdict::kIdentical) << format_verify_report(w, 3);
      // The prefill rows do not read the cache: the first divergence is a decode row.
      EXPECT_GE(w.first_row, P);
    }
    ++checked;
  }
  EXPECT_EQ(checked, 5);
}

}  // namespace
}  // namespace attnsim
