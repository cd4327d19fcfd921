// Probe: every FP32 input (all 2^32) through the H100's conversion and special-function
// instructions; compares the conversions with attnsim's formats/ encoders compiled for the device,
// and records per-chunk digests of every instruction plus the full outputs on an adversarial
// sample.
//
// Usage: cvt_probe OUTDIR
// Writes OUTDIR/cvt_summary.json (per instruction: mismatches against the attnsim model, the first
// mismatching inputs, 256 chunk digests) and OUTDIR/cvt_sample_<op>.bin (outputs on the
// numerics/digest.hpp sample, little-endian, 4 bytes per input) and OUTDIR/cvt_sample_inputs.bin.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cuda_check/probe_util.cuh"
#include "formats/float16.hpp"
#include "formats/float8.hpp"
#include "formats/intn.hpp"
#include "numerics/digest.hpp"

namespace {

// The instructions probed. Names are the PTX spelling; the order is the recording's order.
enum Op : int {
  kE4m3Satfinite,  // cvt.rn.satfinite.e4m3x2.f32
  kE5m2Satfinite,  // cvt.rn.satfinite.e5m2x2.f32
  kBf16Rn,         // cvt.rn.bf16.f32
  kBf16Rz,         // cvt.rz.bf16.f32
  kF16Rn,          // cvt.rn.f16.f32
  kF16Rz,          // cvt.rz.f16.f32
  kF16Rm,          // cvt.rm.f16.f32
  kF16Rp,          // cvt.rp.f16.f32
  kS8RniSat,       // cvt.rni.sat.s8.f32
  kEx2ApproxFtz,   // ex2.approx.ftz.f32
  kRcpApproxFtz,   // rcp.approx.ftz.f32
  kLg2ApproxFtz,   // lg2.approx.ftz.f32
  kEx2Approx,      // ex2.approx.f32
  kRcpApprox,      // rcp.approx.f32
  kLg2Approx,      // lg2.approx.f32
  kOpCount
};

const char* const kOpNames[kOpCount] = {"cvt.rn.satfinite.e4m3x2.f32",
                                        "cvt.rn.satfinite.e5m2x2.f32",
                                        "cvt.rn.bf16.f32",
                                        "cvt.rz.bf16.f32",
                                        "cvt.rn.f16.f32",
                                        "cvt.rz.f16.f32",
                                        "cvt.rm.f16.f32",
                                        "cvt.rp.f16.f32",
                                        "cvt.rni.sat.s8.f32",
                                        "ex2.approx.ftz.f32",
                                        "rcp.approx.ftz.f32",
                                        "lg2.approx.ftz.f32",
                                        "ex2.approx.f32",
                                        "rcp.approx.f32",
                                        "lg2.approx.f32"};
// Short names for files.
const char* const kOpFiles[kOpCount] = {
    "e4m3_satfinite", "e5m2_satfinite", "bf16_rn",    "bf16_rz",    "f16_rn",
    "f16_rz",         "f16_rm",         "f16_rp",     "s8_rni_sat", "ex2_approx_ftz",
    "rcp_approx_ftz", "lg2_approx_ftz", "ex2_approx", "rcp_approx", "lg2_approx"};

// Hardware result, as the low bits of a uint32.
__device__ __forceinline__ std::uint32_t op_hw(int op, std::uint32_t bits) {
  const float x = __uint_as_float(bits);
  unsigned short h = 0;
  std::uint32_t r = 0;
  float f = 0.f;
  switch (op) {
    case kE4m3Satfinite:  // operand order: d = {cvt(a) in the high byte, cvt(b) in the low byte}
      asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(h) : "f"(0.0f), "f"(x));
      return h & 0xFFu;
    case kE5m2Satfinite:
      asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(h) : "f"(0.0f), "f"(x));
      return h & 0xFFu;
    case kBf16Rn:
      asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
      return h;
    case kBf16Rz:
      asm("cvt.rz.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
      return h;
    case kF16Rn:
      asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
      return h;
    case kF16Rz:
      asm("cvt.rz.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
      return h;
    case kF16Rm:
      asm("cvt.rm.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
      return h;
    case kF16Rp:
      asm("cvt.rp.f16.f32 %0, %1;" : "=h"(h) : "f"(x));
      return h;
    case kS8RniSat:
      asm("cvt.rni.sat.s8.f32 %0, %1;" : "=r"(r) : "f"(x));
      return r & 0xFFu;
    case kEx2ApproxFtz:
      asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(f) : "f"(x));
      return __float_as_uint(f);
    case kRcpApproxFtz:
      asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(f) : "f"(x));
      return __float_as_uint(f);
    case kLg2ApproxFtz:
      asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(f) : "f"(x));
      return __float_as_uint(f);
    case kEx2Approx:
      asm("ex2.approx.f32 %0, %1;" : "=f"(f) : "f"(x));
      return __float_as_uint(f);
    case kRcpApprox:
      asm("rcp.approx.f32 %0, %1;" : "=f"(f) : "f"(x));
      return __float_as_uint(f);
    case kLg2Approx:
      asm("lg2.approx.f32 %0, %1;" : "=f"(f) : "f"(x));
      return __float_as_uint(f);
  }
  return 0;
}

// attnsim's model of the same instruction (the formats/ headers, compiled for the device), or
// false where the model belongs to a later issue (special functions).
__device__ __forceinline__ bool op_model(int op, std::uint32_t bits, std::uint32_t* out) {
  using namespace attnsim;
  constexpr Policy kRn{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};
  constexpr Policy kRz{Round::kTowardZero, Overflow::kInf, NanEncoding::kCuda};
  constexpr Policy kRm{Round::kDown, Overflow::kInf, NanEncoding::kCuda};
  constexpr Policy kRp{Round::kUp, Overflow::kInf, NanEncoding::kCuda};
  switch (op) {
    case kE4m3Satfinite:
      *out = convert<e4m3fn, fp32>(bits, kCudaSatfinite);
      return true;
    case kE5m2Satfinite:
      *out = convert<e5m2, fp32>(bits, kCudaSatfinite);
      return true;
    case kBf16Rn:
      *out = convert<bf16, fp32>(bits, kRn);
      return true;
    case kBf16Rz:
      *out = convert<bf16, fp32>(bits, kRz);
      return true;
    case kF16Rn:
      *out = convert<fp16, fp32>(bits, kRn);
      return true;
    case kF16Rz:
      *out = convert<fp16, fp32>(bits, kRz);
      return true;
    case kF16Rm:
      *out = convert<fp16, fp32>(bits, kRm);
      return true;
    case kF16Rp:
      *out = convert<fp16, fp32>(bits, kRp);
      return true;
    case kS8RniSat:
      *out = std::uint32_t(cvt_rni_sat_s8(__uint_as_float(bits))) & 0xFFu;
      return true;
    default:
      return false;
  }
}

constexpr int kMaxRecorded = 64;

struct OpResult {
  unsigned long long mismatches;
  unsigned long long recorded;
  std::uint32_t in[kMaxRecorded], hw[kMaxRecorded], model[kMaxRecorded];
  unsigned long long digest[attnsim::kDigestChunks];
};

__global__ void sweep_chunk(int op, std::uint32_t chunk, OpResult* res) {
  const std::uint32_t base = chunk << attnsim::kDigestChunkBits;
  const std::uint32_t per_chunk = 1u << attnsim::kDigestChunkBits;
  unsigned long long sum = 0;
  for (std::uint32_t k = blockIdx.x * blockDim.x + threadIdx.x; k < per_chunk;
       k += gridDim.x * blockDim.x) {
    const std::uint32_t bits = base + k;
    const std::uint32_t h = op_hw(op, bits);
    sum += attnsim::digest_term(bits, h);
    std::uint32_t m = 0;
    if (op_model(op, bits, &m) && m != h) {
      atomicAdd(&res->mismatches, 1ull);
      const unsigned long long slot = atomicAdd(&res->recorded, 1ull);
      if (slot < kMaxRecorded) {
        res->in[slot] = bits;
        res->hw[slot] = h;
        res->model[slot] = m;
      }
    }
  }
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_down_sync(0xFFFFFFFFu, sum, off);
  if ((threadIdx.x & 31) == 0) atomicAdd(&res->digest[chunk], sum);
}

__global__ void sample_outputs(int op, std::uint32_t* out) {
  const std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < attnsim::kSampleSize) out[i] = op_hw(op, attnsim::sample_input(i));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: cvt_probe OUTDIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  cudaDeviceProp prop{};
  ATTNSIM_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  int driver = 0, runtime = 0;
  ATTNSIM_CUDA_CHECK(cudaDriverGetVersion(&driver));
  ATTNSIM_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));

  OpResult* d_res = nullptr;
  ATTNSIM_CUDA_CHECK(cudaMalloc(&d_res, sizeof(OpResult) * kOpCount));
  ATTNSIM_CUDA_CHECK(cudaMemset(d_res, 0, sizeof(OpResult) * kOpCount));
  cudaEvent_t t0, t1;
  ATTNSIM_CUDA_CHECK(cudaEventCreate(&t0));
  ATTNSIM_CUDA_CHECK(cudaEventCreate(&t1));
  ATTNSIM_CUDA_CHECK(cudaEventRecord(t0));
  for (int op = 0; op < kOpCount; ++op) {
    for (std::uint32_t c = 0; c < std::uint32_t(attnsim::kDigestChunks); ++c) {
      sweep_chunk<<<prop.multiProcessorCount * 8, 256>>>(op, c, d_res + op);
    }
    ATTNSIM_CUDA_CHECK(cudaGetLastError());
  }
  ATTNSIM_CUDA_CHECK(cudaEventRecord(t1));
  ATTNSIM_CUDA_CHECK(cudaEventSynchronize(t1));
  float ms = 0.f;
  ATTNSIM_CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
  std::vector<OpResult> res(kOpCount);
  ATTNSIM_CUDA_CHECK(
      cudaMemcpy(res.data(), d_res, sizeof(OpResult) * kOpCount, cudaMemcpyDeviceToHost));

  // Sample outputs, recorded in full.
  std::uint32_t* d_out = nullptr;
  ATTNSIM_CUDA_CHECK(cudaMalloc(&d_out, sizeof(std::uint32_t) * attnsim::kSampleSize));
  std::vector<std::uint32_t> host(attnsim::kSampleSize);
  for (int op = 0; op < kOpCount; ++op) {
    sample_outputs<<<(attnsim::kSampleSize + 255) / 256, 256>>>(op, d_out);
    ATTNSIM_CUDA_CHECK(cudaGetLastError());
    ATTNSIM_CUDA_CHECK(cudaMemcpy(host.data(), d_out, sizeof(std::uint32_t) * host.size(),
                                  cudaMemcpyDeviceToHost));
    attnsim::probe::write_bin(dir + "/cvt_sample_" + kOpFiles[op] + ".bin", host.data(),
                              host.size() * 4);
  }
  for (std::uint32_t i = 0; i < attnsim::kSampleSize; ++i) host[i] = attnsim::sample_input(i);
  attnsim::probe::write_bin(dir + "/cvt_sample_inputs.bin", host.data(), host.size() * 4);

  const std::string json_path = dir + "/cvt_summary.json";
  FILE* j = std::fopen(json_path.c_str(), "w");
  if (!j) {
    std::fprintf(stderr, "cvt_probe: cannot write %s\n", json_path.c_str());
    return 1;
  }
  std::fprintf(j, "{\n  \"gpu\": \"%s\", \"sm\": \"%d.%d\", \"driver\": %d, \"runtime\": %d,\n",
               prop.name, prop.major, prop.minor, driver, runtime);
  std::fprintf(j, "  \"sweep_ms\": %.1f, \"inputs_per_op\": 4294967296,\n  \"ops\": [\n", ms);
  std::printf("%-30s %12s\n", "instruction", "mismatches");
  for (int op = 0; op < kOpCount; ++op) {
    const bool modelled = op <= kS8RniSat;
    std::fprintf(
        j, "    {\"name\": \"%s\", \"file\": \"%s\", \"modelled\": %s, \"mismatches\": %llu,\n",
        kOpNames[op], kOpFiles[op], modelled ? "true" : "false", res[op].mismatches);
    std::fprintf(j, "     \"first\": [");
    const int n = int(res[op].recorded < kMaxRecorded ? res[op].recorded : kMaxRecorded);
    for (int k = 0; k < n; ++k) {
      std::fprintf(j, "%s[%u, %u, %u]", k ? ", " : "", res[op].in[k], res[op].hw[k],
                   res[op].model[k]);
    }
    std::fprintf(j, "],\n     \"digests\": [");
    for (int c = 0; c < attnsim::kDigestChunks; ++c) {
      std::fprintf(j, "%s\"%016llx\"", c ? ", " : "", res[op].digest[c]);
    }
    std::fprintf(j, "]}%s\n", op + 1 < kOpCount ? "," : "");
    std::printf("%-30s %12s\n", kOpNames[op],
                modelled ? std::to_string(res[op].mismatches).c_str() : "(recorded)");
  }
  std::fprintf(j, "  ]\n}\n");
  std::fclose(j);
  std::printf("swept %d instructions x 2^32 inputs in %.1f ms on %s\n", kOpCount, ms, prop.name);
  return 0;
}
