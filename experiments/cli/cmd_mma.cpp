// `attnsim mma`: run the tensor-core instruction models on raw operand files (a contract other
// tools use: see README.md and numerics/README.md).
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>

#include "experiments/cli/commands.hpp"
#include "experiments/common/error.hpp"
#include "experiments/common/memory_limit.hpp"
#include "experiments/common/option_checks.hpp"
#include "experiments/common/timing.hpp"
#include "experiments/io/file_io.hpp"
#include "formats/float16.hpp"
#include "formats/float8.hpp"
#include "numerics/mma.hpp"
#include "numerics/mma_tile.hpp"

namespace attnsim {

namespace {
struct MmaOptions {
  std::string instr, a, b, c, out;
  int m = 0, n = 0, k = 0, batch = 1, promote = 0;
  bool list = false, bench = false;
};

// The best of `bursts` timings of f (seconds per call): on a shared machine the minimum is the
// figure least disturbed by other work.
template <class F>
double best_time(F&& f, int bursts, double burst_s) {
  double best = 1e30;
  for (int i = 0; i < bursts; ++i) {
    const double t = time_per_call(f, burst_s, 1);
    best = t < best ? t : best;
  }
  return best;
}

// Products (multiply-accumulates) per second of dot_mma_tile on one core in GEMM shape: rows x
// cols outputs over a reduction of n, operands as `enc_a`/`enc_b` encodings of the same normal
// samples, B as K's rows (b_k = 1).
double tile_rate(const MmaInstrInfo& info, int promote, std::mt19937& rng) {
  const int rows = 64, cols = 128, n = 1024;
  std::vector<std::uint32_t> a(std::size_t(rows) * n), b(std::size_t(cols) * n),
      d(std::size_t(rows) * cols);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  constexpr Policy kRn{Round::kNearestEven, Overflow::kSaturate, NanEncoding::kCuda};
  auto draw = [&](Encoding e) -> std::uint32_t {
    if (!encoding_traits(e).is_float) {
      const int bits = encoding_traits(e).bits;
      return std::uint32_t(rng()) & ((1u << bits) - 1);
    }
    return encode_float_bits(e, nd(rng), kRn);
  };
  for (auto& x : a) x = draw(info.in);
  for (auto& x : b) x = draw(mma_in_b(info));
  MmaTile t;
  t.rows = rows;
  t.cols = cols;
  t.n = n;
  t.a = a.data();
  t.lda = n;
  t.b = b.data();
  t.b_k = 1;
  t.b_n = n;
  t.d = d.data();
  t.ldd = cols;
  const DotModel m{DotModel::kMma, info.instr, promote};
  const double s = best_time([&] { dot_mma_tile(m, t); }, 5, 0.1);
  return double(rows) * cols * n / s;
}

// Products per second of one instruction model on one core, next to a native FP32 dot product
// over the same decoded values in the same run (issue 3's speed goal: within 4x), and of the
// tile kernel in GEMM shape (issue 23: >= 3 G/s, QGMMA >= 4 G/s, INT8 >= 100 G/s).
void bench_models() {
  const int K = 4096, reps_min = 3;
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::printf("%-28s %14s %14s %8s %14s %18s\n", "instruction", "model Mprod/s", "fp32 Mprod/s",
              "ratio", "tile Mprod/s", "tile kernel");
  for (const auto& info : mma_instructions()) {
    std::vector<std::uint32_t> a(K), b(K);
    std::vector<float> af(K), bf(K);
    for (int i = 0; i < K; ++i) {
      const float x = nd(rng), y = nd(rng);
      // Operands as the instruction's encodings; the FP32 baseline uses the same values.
      if (info.acc == 2) {
        // s4: -8..7, s8: -128..127, u8 (INT8 wgmma, either operand): 0..255.
        const int lim = info.in_bits == 4 ? 8 : 128;
        const int xo = info.in == Encoding::kU8 ? lim : 0,
                  yo = mma_in_b(info) == Encoding::kU8 ? lim : 0;
        const int xi = int(std::uint32_t(rng()) % (2 * lim)) - lim + xo;
        const int yi = int(std::uint32_t(rng()) % (2 * lim)) - lim + yo;
        a[i] = std::uint32_t(xi) & ((1u << info.in_bits) - 1);
        b[i] = std::uint32_t(yi) & ((1u << info.in_bits) - 1);
        af[i] = float(xi);
        bf[i] = float(yi);
      } else {
        a[i] = f32_bits(x);
        b[i] = f32_bits(y);
      }
    }
    if (info.acc != 2) {
      // Round the normal samples to the input format (RNE, saturating).
      for (int i = 0; i < K; ++i) {
        const float x = f32_from_bits(a[i]), y = f32_from_bits(b[i]);
        constexpr Policy kRn{Round::kNearestEven, Overflow::kSaturate, NanEncoding::kCuda};
        a[i] = encode_float_bits(info.in, x, kRn);
        b[i] = encode_float_bits(info.in, y, kRn);
        af[i] = decode_float_bits(info.in, a[i]);
        bf[i] = decode_float_bits(info.in, b[i]);
      }
    }
    volatile std::uint32_t sink = 0;
    volatile float fsink = 0;
    auto time_it = [&](auto&& f) { return double(K) / time_per_call(f, 0.2, reps_min); };
    const double model =
        time_it([&] { sink = sink + mma_dot(info.instr, a.data(), b.data(), K, 0u); });
    const double native = time_it([&] {
      float acc = 0.0f;
      for (int i = 0; i < K; ++i) acc = acc + af[i] * bf[i];
      fsink = fsink + acc;
    });
    const DotModel dm{DotModel::kMma, info.instr, 0};
    std::printf("%-28s %14.1f %14.1f %7.1fx %14.1f %18s\n", info.name, model / 1e6, native / 1e6,
                native / model, tile_rate(info, 0, rng) / 1e6, dot_mma_tile_kernel(dm));
  }
}

std::size_t acc_bytes(const MmaInstrInfo& info) { return info.acc == 1 ? 2 : 4; }
}  // namespace

void add_mma_command(CLI::App& app) {
  auto o = std::make_shared<MmaOptions>();
  CLI::App* cmd = app.add_subcommand(
      "mma",
      "D = A·B + C through a bit-exact tensor-core instruction model. "
      "A: M x K row-major encodings; Bt: N x K row-major (B transposed); "
      "C, D: M x N row-major float32 (int32 for integer instructions, u16 fp16 bits for fp16 "
      "accumulation). Encodings: u16 for fp16/bf16, u8 for fp8/int8/uint8, "
      "int4 packed two per byte (element 0 in the low nibble). "
      "K may be any multiple of the instruction's k: instructions are chained in natural k order.");
  cmd->add_option("--instr", o->instr, "instruction model (see --list)");
  cmd->add_option("--m", o->m, "rows of A and D")->check(integer_in(1));
  cmd->add_option("--n", o->n, "columns of B and D")->check(integer_in(1));
  cmd->add_option("--k", o->k, "reduction length (a multiple of the instruction's k)")
      ->check(integer_in(1));
  cmd->add_option("--a", o->a, "A file");
  cmd->add_option("--b", o->b, "Bt file (N x K)");
  cmd->add_option("--c", o->c, "C file");
  cmd->add_option("--out,--output", o->out,
                  "D file (written atomically; not an input, a directory or a special file)")
      ->check(output_name());
  cmd->add_option("--batch", o->batch, "independent problems stored back to back")
      ->check(integer_in(1))
      ->capture_default_str();
  add_max_memory_option(cmd);
  cmd->add_option(
         "--promote", o->promote,
         "two-level accumulation (DeepSeek-V3, SageAttention2++): chain the instruction over N "
         "elements from zero, add each chunk to an FP32 register (FADD.RN); "
         "C and D are then float32 (0: off)")
      ->check(integer_in(0))
      ->capture_default_str();
  cmd->add_flag("--list", o->list,
                "list the instruction models with their parameters and evidence");
  cmd->add_flag("--bench", o->bench,
                "products/s of each model vs a native FP32 dot product (one core)");
  cmd->callback([o]() {
    if (o->list) {
      for (const auto& i : mma_instructions()) {
        std::printf("%-28s m%dn%dk%d%s  %s\n  %-26s evidence: %s\n", i.name, i.m, i.n, i.k,
                    i.unverified ? "  [UNVERIFIED: not checked against any recording]" : "",
                    i.model, "", i.evidence);
      }
      return;
    }
    if (o->bench) {
      bench_models();
      return;
    }
    if (o->instr.empty()) throw UsageError("mma needs --instr (or --list)");
    const auto instr = parse_mma_instr(o->instr);
    if (!instr) {
      std::string names;
      for (const auto& i : mma_instructions())
        names += (names.empty() ? "" : " ") + std::string(i.name);
      throw UsageError("unknown instruction '" + o->instr + "' (expected one of: " + names + ")");
    }
    const MmaInstrInfo& info = mma_info(*instr);
    if (o->m <= 0 || o->n <= 0 || o->k <= 0 || o->batch <= 0) {
      throw UsageError("--m, --n, --k and --batch must be positive");
    }
    if (o->k % info.k != 0) {
      throw UsageError("--k " + std::to_string(o->k) + " is not a multiple of " + info.name +
                       "'s k = " + std::to_string(info.k));
    }
    if (o->a.empty() || o->b.empty() || o->c.empty() || o->out.empty()) {
      throw UsageError("mma needs --a, --b, --c and --out");
    }
    if (o->promote < 0)
      throw UsageError("--promote must be 0 (off) or a positive number of elements");
    if (o->promote > 0) {
      if (info.acc == 2) {
        throw UsageError("--promote applies to floating-point accumulators; " +
                         std::string(info.name) + " accumulates exactly in int32");
      }
      if (o->promote % info.k != 0 || o->k % o->promote != 0) {
        throw UsageError("--promote " + std::to_string(o->promote) + " must be a multiple of " +
                         info.name + "'s k = " + std::to_string(info.k) + " and divide --k " +
                         std::to_string(o->k));
      }
    }
    check_output_path(o->out, {o->a, o->b, o->c});
    const std::size_t cw = o->promote > 0 ? 4 : acc_bytes(info);  // promoted: FP32 C and D
    // The operand files, C and D as 32-bit words, and D's bytes: in double first, so that no
    // size_t product below can wrap.
    {
      const double m = o->m, n = o->n, k = o->k, p = o->batch;
      const double ab = (m + n) * k * info.in_bits / 8 * p, c = m * n * p;
      check_memory(ab + c * double(cw) * 2 + c * 8 + 32.0 * (1 << 20),
                   "mma of " + std::to_string(o->batch) + " x " + std::to_string(o->m) + "x" +
                       std::to_string(o->n) + "x" + std::to_string(o->k));
    }
    const std::size_t M = std::size_t(o->m), N = std::size_t(o->n), K = std::size_t(o->k),
                      P = std::size_t(o->batch);
    const std::size_t a_bytes = M * K * info.in_bits / 8, b_bytes = N * K * info.in_bits / 8,
                      c_bytes = M * N * cw;
    // Every operand's size is checked before any is read (a huge file is refused, not loaded).
    auto check_size = [](const std::string& path, std::size_t want, const char* what) {
      const std::uint64_t size = check_input_file(path);
      if (size != want) {
        throw UsageError(std::string(what) + " file '" + path + "' has " + std::to_string(size) +
                         " bytes; expected " + std::to_string(want));
      }
    };
    check_size(o->a, a_bytes * P, "A");
    check_size(o->b, b_bytes * P, "Bt");
    check_size(o->c, c_bytes * P, "C");
    const auto A = read_file_bytes(o->a);
    const auto B = read_file_bytes(o->b);
    const auto Cb = read_file_bytes(o->c);
    std::vector<std::uint32_t> C(M * N * P), D(M * N * P);
    for (std::size_t i = 0; i < C.size(); ++i) {
      if (cw == 2) {
        C[i] = std::uint32_t(Cb[2 * i]) | (std::uint32_t(Cb[2 * i + 1]) << 8);
      } else {
        std::memcpy(&C[i], Cb.data() + 4 * i, 4);
      }
    }
    for (std::size_t p = 0; p < P; ++p) {
      mma_gemm(*instr, o->m, o->n, o->k, A.data() + p * a_bytes, B.data() + p * b_bytes,
               C.data() + p * M * N, D.data() + p * M * N, o->promote);
    }
    std::vector<std::uint8_t> out(c_bytes * P);
    for (std::size_t i = 0; i < D.size(); ++i) {
      if (cw == 2) {
        out[2 * i] = std::uint8_t(D[i]);
        out[2 * i + 1] = std::uint8_t(D[i] >> 8);
      } else {
        std::memcpy(out.data() + 4 * i, &D[i], 4);
      }
    }
    write_file_atomic(o->out, out.data(), out.size());
  });
}

}  // namespace attnsim
