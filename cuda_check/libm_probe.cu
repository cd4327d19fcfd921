// Probe: CUDA's single-precision expf, logf, __expf and __logf as nvcc compiles them for sm_90a in
// three builds (plain -O3, -ftz=true, --use_fast_math), each compared over all 2^32 inputs with
// attnsim's CPU models (numerics/special.hpp: expf_libdevice, logf_libdevice, fast_expf,
// fast_logf), plus the outputs on a 65,536-input adversarial sample for data/hw/h100/libm/.
//
// The comparison is independent of the GPU: the models run on the host's cores, compiled by g++
// from numerics/special.cpp; the GPU's outputs come back in slabs of 2^26 and are compared element
// by element. Each (build, function) also gets 256 digests of its GPU outputs (one per 2^24
// consecutive inputs: the sum mod 2^64 of splitmix64(x << 32 | out)), so that a later CPU run can
// re-check the models against this recording without a GPU.
//
// One file, three roles:
//  * -DATTNSIM_LIBM_BUILD=plain|ftz|fast: the kernels of one build (compiled three times with the
//    build's flags, each in its own namespace);
//  * -DATTNSIM_LIBM_DRIVER: the host program (links the three kernel objects and special.cpp);
//  * neither (cuda_check/CMakeLists.txt builds every *_probe.cu alone): a main that says to use
//    cuda_check/run_libm.sh, which does the builds and runs.
//
// Usage (from run_libm.sh): libm_probe OUTDIR [CPU_SECONDS]. Writes OUTDIR/libm_sample.bin
// (65,536 inputs, then 12 output arrays: builds plain, ftz, fast x functions expf, logf, __expf,
// __logf, uint32 little-endian), libm_digests.bin (12 x 256 uint64) and libm_mismatches.bin (per
// (build, function) up to 4096 rows of input, GPU, model, uint32), and prints the counts.
#include <cuda_runtime.h>

#include <cstdint>

#if defined(ATTNSIM_LIBM_BUILD)

#include "cuda_check/probe_util.cuh"

namespace ATTNSIM_LIBM_BUILD {

// F: 0 expf, 1 logf, 2 __expf, 3 __logf. x = in[i] when in is given, else base + i. Nothing but the
// call touches the value, so the SASS of each instance is the function alone.
template <int F>
__global__ void eval_kernel(const std::uint32_t* in, std::uint32_t base, std::uint32_t n,
                            std::uint32_t* out) {
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += gridDim.x * blockDim.x) {
    const float x = __uint_as_float(in ? in[i] : base + i);
    float y;
    if constexpr (F == 0) {
      y = expf(x);
    } else if constexpr (F == 1) {
      y = logf(x);
    } else if constexpr (F == 2) {
      y = __expf(x);
    } else {
      y = __logf(x);
    }
    out[i] = __float_as_uint(y);
  }
}

void eval(int fn, const std::uint32_t* d_in, std::uint32_t base, std::uint32_t n,
          std::uint32_t* d_out) {
  const unsigned blocks = 132 * 16;
  switch (fn) {
    case 0:
      eval_kernel<0><<<blocks, 256>>>(d_in, base, n, d_out);
      break;
    case 1:
      eval_kernel<1><<<blocks, 256>>>(d_in, base, n, d_out);
      break;
    case 2:
      eval_kernel<2><<<blocks, 256>>>(d_in, base, n, d_out);
      break;
    default:
      eval_kernel<3><<<blocks, 256>>>(d_in, base, n, d_out);
      break;
  }
  ATTNSIM_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ATTNSIM_LIBM_BUILD

#elif defined(ATTNSIM_LIBM_DRIVER)

#include <algorithm>
#include <array>
#include <atomic>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cuda_check/probe_util.cuh"
#include "numerics/special.hpp"

namespace plain {
void eval(int fn, const std::uint32_t* d_in, std::uint32_t base, std::uint32_t n,
          std::uint32_t* d_out);
}
namespace ftz {
void eval(int fn, const std::uint32_t* d_in, std::uint32_t base, std::uint32_t n,
          std::uint32_t* d_out);
}
namespace fast {
void eval(int fn, const std::uint32_t* d_in, std::uint32_t base, std::uint32_t n,
          std::uint32_t* d_out);
}

namespace {

using EvalFn = void (*)(int, const std::uint32_t*, std::uint32_t, std::uint32_t, std::uint32_t*);
constexpr const char* kBuilds[3] = {"plain", "ftz", "fast"};
constexpr const char* kFns[4] = {"expf", "logf", "__expf", "__logf"};
const EvalFn kEval[3] = {plain::eval, ftz::eval, fast::eval};

std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}
float from_bits(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, 4);
  return x;
}

// The model of (build, function): what the PTX of each build shows (special.hpp). Under
// --use_fast_math, expf and logf become __expf and __logf with .ftz.
std::uint32_t model(int build, int fn, std::uint32_t x) {
  const float xf = from_bits(x);
  const bool ftz = build != 0;
  if (build == 2 && fn < 2) fn += 2;
  switch (fn) {
    case 0:
      return bits(attnsim::expf_libdevice(xf, ftz));
    case 1:
      return bits(attnsim::logf_libdevice(xf, ftz));
    case 2:
      return bits(attnsim::fast_expf(xf, ftz));
    default:
      return bits(attnsim::fast_logf(xf, ftz));
  }
}

std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The adversarial sample: 65,536 FP32 bit patterns (see data/hw/h100/libm/README.md).
std::vector<std::uint32_t> make_sample() {
  std::vector<std::uint32_t> v;
  auto around = [&v](float c, int k) {
    const std::uint32_t b = bits(c);
    for (int d = -k; d <= k; ++d) v.push_back(b + std::uint32_t(d));
  };
  // Specials: zeros, infinities, NaN payloads, subnormal and normal limits, small integers.
  for (std::uint32_t s : {0u, 0x80000000u}) {
    for (std::uint32_t m :
         {0x00000000u, 0x7F800000u, 0x7FC00000u, 0x7F800001u, 0x7FFFFFFFu, 0x7FA00000u, 0x00000001u,
          0x00000002u, 0x007FFFFFu, 0x00400000u, 0x00800000u, 0x00800001u, 0x7F7FFFFFu, 0x3F800000u,
          0x40000000u, 0x3F000000u, 0x40490FDBu, 0x3F317218u, 0x3FB8AA3Bu})
      v.push_back(s | m);
  }
  // Powers of two and their neighbours, both signs.
  for (int e = 1; e < 255; ++e) {
    for (std::uint32_t s : {0u, 0x80000000u}) {
      const std::uint32_t p = s | (std::uint32_t(e) << 23);
      for (std::uint32_t b : {p - 1, p, p + 1}) v.push_back(b);
    }
  }
  // expf: overflow (ln FLT_MAX = 88.72284), the FFMA.SAT limits (+-0.5 / fl(log2 e / 252) =
  // +-87.3365), the smallest normal (-87.33654) and subnormal (-103.27893) results, the rounding
  // boundaries of the subnormal range, small arguments, the end of the attention range.
  for (float c : {88.72283935546875f,
                  88.7f,
                  88.0f,
                  87.3365478515625f,
                  87.33654f,
                  87.3f,
                  -87.3365478515625f,
                  -87.33654f,
                  -87.3f,
                  -88.0f,
                  -88.7f,
                  -88.72284f,
                  -95.0f,
                  -100.0f,
                  -103.0f,
                  -103.27893f,
                  -103.972f,
                  -104.0f,
                  -104.5f,
                  0.5f,
                  -0.5f,
                  1.0f,
                  -1.0f,
                  0.34657359f,
                  -0.34657359f,
                  -30.0f,
                  -20.0f,
                  -10.0f,
                  10.0f,
                  20.0f,
                  30.0f})
    around(c, 300);
  // logf: around 1, the exponent split at 2/3 (0x3F2AAAAB) and 4/3 at several exponents, the
  // scaling threshold 2^-126, the largest finite.
  around(1.0f, 1024);
  for (int e = -130; e <= 126; e += 16) {
    around(std::ldexp(2.0f / 3.0f, e), 32);
    around(std::ldexp(4.0f / 3.0f, e), 32);
  }
  around(0x1p-126f, 256);
  around(FLT_MAX, 64);
  std::uint64_t state = 0x5EEDull;
  auto next = [&state]() { return splitmix64(state++); };
  // The attention range [-30, 0] (uniform in value), [-1, 1], positive and negative subnormals.
  for (int i = 0; i < 16384; ++i) v.push_back(bits(-30.0f * float(next() >> 40) * 0x1p-24f));
  for (int i = 0; i < 4096; ++i) v.push_back(bits(2.0f * float(next() >> 40) * 0x1p-24f - 1.0f));
  for (int i = 0; i < 4096; ++i) v.push_back(std::uint32_t(next()) & 0x807FFFFFu);
  // expf's active range [-104, 89] (uniform in value).
  for (int i = 0; i < 8192; ++i)
    v.push_back(bits(-104.0f + 193.0f * float(next() >> 40) * 0x1p-24f));
  // The rest: random bit patterns.
  while (v.size() < 65536) v.push_back(std::uint32_t(next()));
  v.resize(65536);
  return v;
}

struct PairResult {
  unsigned long long checked = 0, mismatches = 0;
  std::vector<std::array<std::uint32_t, 3>> rows;  // input, gpu, model (first 4096 by input)
  std::uint64_t digest[256] = {};
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: libm_probe OUTDIR [CPU_SECONDS]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const double cpu_budget = argc > 2 ? std::atof(argv[2]) : 150.0;
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&t0]() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  cudaDeviceProp prop{};
  ATTNSIM_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::printf("gpu %s sm_%d%d driver %d runtime %d\n", prop.name, prop.major, prop.minor, driver,
              runtime);
  attnsim::Ex2ApproxFtz::h100();
  attnsim::Lg2ApproxFtz::h100();
  std::printf("tables loaded at %.1f s\n", seconds());

  // The sample.
  const std::vector<std::uint32_t> sample = make_sample();
  const std::uint32_t ns = std::uint32_t(sample.size());
  std::uint32_t* d_in = attnsim::probe::to_device(sample);
  const std::size_t kSlab = std::size_t{1} << 26;
  std::uint32_t* d_out = nullptr;
  ATTNSIM_CUDA_CHECK(cudaMalloc(&d_out, kSlab * 4));
  std::vector<std::uint32_t> file(sample);
  std::vector<std::uint32_t> out(ns);
  for (int b = 0; b < 3; ++b) {
    for (int f = 0; f < 4; ++f) {
      kEval[b](f, d_in, 0, ns, d_out);
      ATTNSIM_CUDA_CHECK(cudaMemcpy(out.data(), d_out, ns * 4, cudaMemcpyDeviceToHost));
      file.insert(file.end(), out.begin(), out.end());
      unsigned bad = 0;
      for (std::uint32_t i = 0; i < ns; ++i) {
        const std::uint32_t m = model(b, f, sample[i]);
        if (m != out[i] && ++bad <= 4)
          std::printf("  sample %s %s x 0x%08x: gpu 0x%08x model 0x%08x\n", kBuilds[b], kFns[f],
                      sample[i], out[i], m);
      }
      std::printf("sample %-5s %-6s: %u of %u differ from the model\n", kBuilds[b], kFns[f], bad,
                  ns);
    }
  }
  attnsim::probe::write_bin(dir + "/libm_sample.bin", file.data(), file.size() * 4);

  // All 2^32 inputs, slab by slab: GPU outputs to the host, digests and model comparison on every
  // core. Past the CPU budget only the digests are taken (the log says which pairs).
  std::uint32_t* h_out = nullptr;
  ATTNSIM_CUDA_CHECK(cudaMallocHost(&h_out, kSlab * 4));
  const unsigned nthreads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<PairResult> res(12);
  const int order[12][2] = {{0, 0}, {1, 0}, {0, 1}, {1, 1}, {0, 2}, {1, 2},
                            {0, 3}, {1, 3}, {2, 0}, {2, 1}, {2, 2}, {2, 3}};
  for (const auto& bf : order) {
    const int b = bf[0], f = bf[1];
    PairResult& r = res[b * 4 + f];
    const double start = seconds();
    std::mutex mu;
    for (std::uint64_t base = 0; base < (std::uint64_t{1} << 32); base += kSlab) {
      kEval[b](f, nullptr, std::uint32_t(base), std::uint32_t(kSlab), d_out);
      ATTNSIM_CUDA_CHECK(cudaMemcpy(h_out, d_out, kSlab * 4, cudaMemcpyDeviceToHost));
      const bool check = seconds() < cpu_budget;
      std::atomic<std::size_t> next_block{0};
      std::vector<std::thread> pool;
      for (unsigned t = 0; t < nthreads; ++t) {
        pool.emplace_back([&]() {
          std::uint64_t dig[4] = {};  // a slab holds 4 digest chunks of 2^24
          unsigned long long checked = 0, bad = 0;
          std::vector<std::array<std::uint32_t, 3>> rows;
          for (std::size_t blk; (blk = next_block.fetch_add(1)) < kSlab / 65536;) {
            for (std::size_t i = blk * 65536; i < (blk + 1) * 65536; ++i) {
              const std::uint32_t x = std::uint32_t(base + i), g = h_out[i];
              dig[i >> 24] += splitmix64((std::uint64_t(x) << 32) | g);
              if (!check) continue;
              ++checked;
              const std::uint32_t m = model(b, f, x);
              if (m != g && ++bad <= 4096) rows.push_back({x, g, m});
            }
          }
          std::lock_guard<std::mutex> lock(mu);
          for (int c = 0; c < 4; ++c) r.digest[(base >> 24) + c] += dig[c];
          r.checked += checked;
          r.mismatches += bad;
          r.rows.insert(r.rows.end(), rows.begin(), rows.end());
        });
      }
      for (auto& th : pool) th.join();
      // Keep the 4096 lowest inputs (each thread kept its own first 4096 of the slab).
      std::sort(r.rows.begin(), r.rows.end());
      if (r.rows.size() > 4096) r.rows.resize(4096);
    }
    std::printf(
        "all inputs %-5s %-6s: %llu mismatches of %llu checked against the model (%.1f s)\n",
        kBuilds[b], kFns[f], r.mismatches, r.checked, seconds() - start);
    std::fflush(stdout);
  }
  // Which GPU functions are the same function (digests equal over all 256 chunks).
  for (int p = 0; p < 12; ++p) {
    for (int q = p + 1; q < 12; ++q) {
      if (std::equal(res[p].digest, res[p].digest + 256, res[q].digest))
        std::printf("same outputs on all 2^32 inputs: %s %s = %s %s\n", kBuilds[p / 4], kFns[p % 4],
                    kBuilds[q / 4], kFns[q % 4]);
    }
  }
  std::vector<std::uint64_t> digests;
  std::vector<std::uint32_t> rows;
  for (int p = 0; p < 12; ++p) {
    digests.insert(digests.end(), res[p].digest, res[p].digest + 256);
    rows.push_back(std::uint32_t(p));
    rows.push_back(std::uint32_t(res[p].rows.size()));
    for (const auto& row : res[p].rows) rows.insert(rows.end(), row.begin(), row.end());
    for (std::size_t k = 0; k < res[p].rows.size() && k < 8; ++k)
      std::printf("  %s %s x 0x%08x: gpu 0x%08x model 0x%08x\n", kBuilds[p / 4], kFns[p % 4],
                  res[p].rows[k][0], res[p].rows[k][1], res[p].rows[k][2]);
  }
  attnsim::probe::write_bin(dir + "/libm_digests.bin", digests.data(), digests.size() * 8);
  attnsim::probe::write_bin(dir + "/libm_mismatches.bin", rows.data(), rows.size() * 4);
  std::printf("total %.1f s on %u threads\n", seconds(), nthreads);
  return 0;
}

#else

#include <cstdio>

// cuda_check/CMakeLists.txt builds every *_probe.cu as one program; this probe needs its kernels
// compiled three times with different flags and the CPU models linked in.
int main() {
  std::fprintf(stderr, "libm_probe: build and run it with bash cuda_check/run_libm.sh OUTDIR\n");
  return 2;
}

#endif
