// PyTorch SDPA's backends on the H100 as presets of the attention pipeline (see sdpa.hpp and
// sim/sdpa/README.md, which names the evidence behind every choice: read, fit or UNVERIFIED).
#include "sim/sdpa/sdpa.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "sim/lean/lean.hpp"
#include "sim/lean/schedule.hpp"

namespace attnsim {

namespace {

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument(what); }

DotModel mma(MmaInstr i) { return DotModel{DotModel::kMma, i, 0}; }

bool bf16(const SdpaOptions& o) { return o.dtype == Encoding::kBf16; }

// Q, K, V arrive in the dtype (an FP32 input rounded to it) and are the products' operands as
// they are; P and O are cast to it by RNE (cvt.rn.{f16,bf16}.f32).
void set_dtype(Pipeline& p, Encoding dt, bool fused) {
  for (OperandSpec* s : {&p.q, &p.k, &p.v}) {
    s->input = dt;
    s->enc = fused ? dt : Encoding::kFp32;  // math upcasts to FP32 (exact)
    s->cast = kCudaRn;
  }
  p.p.enc = fused ? dt : Encoding::kFp32;
  p.p.cast = kCudaRn;
  p.out.enc = dt;
  p.out.cast = kCudaRn;
}

// cuDNN 9.19's runtime-compiled sm90 kernel (..._sm90_flash_fprop_wgmma_f16_knob_7_64x128x{64,
// 128,256}): SASS read with ncu on the H100 (data/hw/h100/sdpa/cudnn_sm90_sass_excerpt.txt).
void cudnn_stages(Pipeline& p, const SdpaOptions& o) {
  p.tile.block_q = 64;  // one warpgroup of 64 query rows
  p.tile.block_kv = 128;
  p.tile.kv_order = KvOrder::kAscending;
  p.qk.dot = p.pv.dot = mma(bf16(o) ? MmaInstr::kWgmmaBf16F32 : MmaInstr::kWgmmaF16F32);
  SoftmaxStage& s = p.softmax;
  s.scale_log2 = ScaleLog2::kDeviceFloat;  // FMUL.FTZ R13, R13, 1.4426950216293334961
  s.max_domain = MaxDomain::kScaled;       // max of fl(c·s), then fl(fl(c·s) − m): no FFMA
  s.fma = false;
  s.row_sum = RowSum::kQuadBlock;  // FADD.FTZ per lane, then FFMA.FTZ l = alpha·l + b
  s.lse = LseModel::kNaturalFma;   // max·ln2 + __logf(sum), one FFMA.FTZ
  s.ftz = true;                    // every FP32 instruction is .FTZ
  p.exp.fn = ExpFn::kEx2ApproxFtz;
  p.rescale.kind = Rescale::kMultiplyFtz;
  p.normalize.kind = Normalize::kRcpApproxFtz;
}

// cuDNN 9.19's decode kernel (len_q = 1): ..._sm80_flash_fprop_wmma_f16_knob_35_16x128x{64,128}_1x4x1
// (mma.sync HMMA.16816.F32, 4 warps of 32 keys of each 128-key tile), SASS read with ncu on the
// H100 (data/hw/h100/sdpa/cudnn_decode_sass.csv.gz; sim/sdpa/README.md, "cuDNN decode"). The
// split kernel and its lean_reduction_kernel are the call's split schedule (sdpa_attention).
void cudnn_decode_stages(Pipeline& p, const SdpaOptions& o, int d) {
  p.tile.block_q = 16;  // 16 query rows (a GQA group's heads; rows never mix)
  p.tile.block_kv = 128;
  p.tile.kv_order = KvOrder::kAscending;
  p.qk.dot = p.pv.dot = mma(bf16(o) ? MmaInstr::kHmmaBf16F32 : MmaInstr::kHmmaF16F32);
  SoftmaxStage& s = p.softmax;
  // FMUL.FTZ(S, c[0x3d8]) then FMUL.FTZ(·, 1.4426950216293334961): the score rounded twice.
  s.scale_log2 = ScaleLog2::kScoreFirst;
  s.max_domain = MaxDomain::kScaled;  // ATOMS.MAX of the scaled tile max, shared by the warps
  s.fma = false;                      // FADD.FTZ(x, −m): no FFMA
  s.row_sum = RowSum::kAtomicWarps;   // per-warp partials, atomically added per lane, then FFMA.FTZ
  // Fit (the race's order as the recordings repeat it): d 128 {0, 2} then 1 then 3; d 64 {3, 2}
  // then 1 then 0. Other head dims: not recorded (sdpa_unverified), d 128's order.
  s.rowsum_order = d == 64 ? std::array<std::uint8_t, 4>{3, 2, 1, 0}
                           : std::array<std::uint8_t, 4>{0, 2, 1, 3};
  s.lse = LseModel::kNaturalLg2Fma;  // FFMA.FTZ(lg2(l), ln2, FMUL.FTZ(m, ln2)) (fit unsplit)
  s.ftz = true;
  p.exp.fn = ExpFn::kEx2ApproxFtz;
  p.rescale.kind = Rescale::kMultiplyFtz;  // every warp's O, every tile
  p.pv.warps = 4;                          // each warp's O over its 32 keys, (O0 + O2) + (O1 + O3)
  p.normalize.kind = Normalize::kRcpApproxFtz;
}

// PyTorch's vendored FA2 (aten/src/ATen/native/transformers/cuda/flash_attn), built without fast
// math and with UNFUSE_FMA (its sm_90 SASS: ex2.approx with range scaling, FMUL then FADD in the
// exponent, the row sum's rescale contracted into the first add).
void flash_stages(Pipeline& p, const SdpaOptions& o, int kd, bool split) {
  if (split) {
    // Flash_fwd_kernel_traits<d, 64, block_n, 4> of run_mha_fwd_splitkv_dispatch.
    p.tile.block_q = 64;
    p.tile.block_kv = kd <= 64 ? 256 : (kd <= 128 ? 128 : 64);
  } else {
    // run_mha_fwd_hdimXX on sm_90 (not sm8x): <d, 128, 128, 4> for d <= 64, <d, 128, 64, ...>.
    p.tile.block_q = 128;
    p.tile.block_kv = kd <= 64 ? 128 : 64;
  }
  p.qk.dot = p.pv.dot = mma(bf16(o) ? MmaInstr::kHmmaBf16F32 : MmaInstr::kHmmaF16F32);
  p.softmax.fma = false;  // UNFUSE_FMA: fl(fl(s·c) − fl(m·c))
  p.softmax.row_sum = RowSum::kQuadFma;
  p.softmax.lse = LseModel::kNaturalFma;  // max·scale + __logf(sum), one FFMA
  p.exp.fn = ExpFn::kEx2Approx;           // exp2f without fast math
}

// The CUTLASS/xformers kernel (mem_eff_attention/kernel_forward.h, fmha_cutlassF_*_sm80 on sm_90:
// HMMA.1688.F32, no fast math; AttentionKernel<..., kSupportsBias = true>).
void efficient_stages(Pipeline& p, const SdpaOptions& o, int kd) {
  // 64 x 64 (kMaxK 64), 64 x 128 (kMaxK 128), 32 x 128 with kMaxK 65536 for larger heads.
  p.tile.block_q = kd <= 128 ? 64 : 32;
  p.tile.block_kv = kd <= 64 ? 64 : 128;
  p.tile.kv_order = KvOrder::kAscending;
  p.qk.dot = p.pv.dot = mma(bf16(o) ? MmaInstr::kHmma1688Bf16F32 : MmaInstr::kHmma1688F16F32);
  SoftmaxStage& s = p.softmax;
  s.scale_log2 = ScaleLog2::kScoreFirst;  // accum = p.scale * accum, then times kLog2e
  s.max_domain = MaxDomain::kScaled;      // every score fl(fl(acc·scale)·log2 e) before the max
  s.fma = false;
  s.row_sum = RowSum::kCutlassWarps;  // MM0's 32-key column warps, in warp order
  s.lse = LseModel::kNaturalDiv;      // mi / kLog2e + log(s_prime)
  p.exp.fn = ExpFn::kEx2Approx;
  if (kd > 128) {
    // The _gmem instantiation (kKeepOutputInRF false): each block's P·V from zero, landed on the
    // FP32 output buffer by MemoryEfficientAttentionNormalize, which also divides in the last.
    p.pv.acc = PvAccumulate::kChunk;
    p.pv.chunk_add = ChunkAdd::kCutlassEpilogue;
    p.rescale.fused = true;
    p.normalize.kind = Normalize::kNone;
  }
}

// The math backend (attention.cpp _scaled_dot_product_attention_math): FP32 upcast, Q and K times
// sqrt(scale), cuBLAS FP32 GEMMs (one FFMA chain per output), softmax_warp_forward, P·V.
void math_stages(Pipeline& p, const AttentionShape& s) {
  p.q.prescale = p.k.prescale = Prescale::kSqrtSm;
  p.qk.dot = p.pv.dot = DotModel{DotModel::kFp32Fma};
  // One KV block holds the row (the softmax kernel sees the whole row; bq is immaterial).
  p.tile.block_q = 64;
  p.tile.block_kv = s.len_kv;
  p.tile.kv_order = KvOrder::kAscending;
  p.softmax.base = ExpKind::kExp;
  p.exp.fn = ExpFn::kExpfLibdevice;  // expf, IEEE
  p.softmax.row_sum = RowSum::kWarpSum;
  p.p.norm = PNorm::kWarpSum;  // P = e / sum, then P·V
  p.normalize.kind = Normalize::kNone;
}

bool recorded_head_dim(SdpaBackend b, int d) {
  switch (b) {
    case SdpaBackend::kCudnn:
      return d == 64 || d == 96 || d == 128 || d == 256;
    case SdpaBackend::kFlash:
      return d == 64 || d == 96 || d == 128;
    case SdpaBackend::kEfficient:
      return d == 64 || d == 96 || d == 128 || d == 256;
    case SdpaBackend::kMath:
      return true;  // no tile: the head dim is the GEMMs' k
  }
  return false;
}

}  // namespace

const char* sdpa_backend_name(SdpaBackend b) {
  switch (b) {
    case SdpaBackend::kCudnn:
      return "cudnn";
    case SdpaBackend::kFlash:
      return "flash";
    case SdpaBackend::kEfficient:
      return "efficient";
    case SdpaBackend::kMath:
      return "math";
  }
  return "?";
}

int sdpa_kernel_head_dim(SdpaBackend b, int d) {
  if (b == SdpaBackend::kFlash) return (d + 31) / 32 * 32;  // flash_api.cpp round_multiple(d, 32)
  if (b == SdpaBackend::kEfficient) return d <= 64 ? 64 : (d <= 128 ? 128 : d);
  return d;
}

namespace {

// Whether cuDNN runs its sm80 decode kernel (with the split kernel and lean_reduction when it
// splits) rather than the sm90 prefill kernel: one query row (the recorded dispatch: every Lq = 1
// call ran it, every Lq > 1 call the sm90 kernel).
bool cudnn_decode(const SdpaOptions& o, const AttentionShape& s) {
  return o.backend == SdpaBackend::kCudnn && s.len_q == 1;
}

// cuDNN's decode split count S (the split kernel's compiled tile stride; 1 = the unsplit kernel)
// for units = batch x KV heads. Fit, not read (cuDNN's engine heuristic runs on the host): the
// largest power of two <= min(32, 256 / units, 128-key tiles), and the unsplit kernel from 128
// units or below 8 tiles; reproduces every recorded launch (CUDNN_DECODE_NOTES.md).
int cudnn_decode_splits(const AttentionShape& s) {
  const int tiles = (s.len_kv + 127) / 128;
  const std::int64_t units = std::int64_t(s.batch) * s.heads_kv;
  if (tiles < 8 || units >= 128) return 1;
  const std::int64_t cap = std::min<std::int64_t>({32, 256 / units, tiles});
  int n = 1;
  while (2 * n <= cap) n *= 2;
  return n;
}

// Whether a decode launch's tile count lies where the recordings pinned the split rule down
// (launches of 4, 16, 32 and 33 tiles; between 4 and 16 tiles, where the unsplit kernel takes
// over, and past 33 tiles, they do not).
bool recorded_decode_split(const AttentionShape& s) {
  const int tiles = (s.len_kv + 127) / 128;
  return tiles <= 4 || (tiles >= 16 && tiles <= 33);
}

// mha_fwd's seqlenq_ngroups_swapped: a one-query GQA call runs the group's query heads as rows.
bool gqa_swapped(const AttentionShape& s) {
  return s.len_q == 1 && s.heads_q > s.heads_kv && s.head_dim % 8 == 0;
}

}  // namespace

int sdpa_num_splits(const SdpaOptions& o, const AttentionShape& s, int sms) {
  if (cudnn_decode(o, s)) return cudnn_decode_splits(s);
  if (o.backend != SdpaBackend::kFlash) return 1;
  // mha_fwd: seqlenq_ngroups_swapped (decode with GQA: the group's query heads become the rows).
  const bool swapped = gqa_swapped(s);
  const int heads = swapped ? s.heads_kv : s.heads_q;
  const int len_q = swapped ? s.heads_q / s.heads_kv : s.len_q;
  const int kd = sdpa_kernel_head_dim(o.backend, s.head_dim);
  const int block_n = kd <= 64 ? 256 : (kd <= 128 ? 128 : 64);
  const int n_blocks = (s.len_kv + block_n - 1) / block_n;
  const int m_blocks = (len_q + 63) / 64;
  // The heuristic is given twice the SM count (flash_api.cpp: 128 threads per block).
  return fa2_num_splits_heuristic(s.batch * heads * m_blocks, 2 * sms, n_blocks, 128);
}

void validate(const SdpaOptions& o, const AttentionInput& in) {
  const AttentionShape& s = in.shape;
  if (!s.valid()) fail("sdpa: invalid attention shape");
  if (o.dtype != Encoding::kFp16 && o.dtype != Encoding::kBf16)
    fail("sdpa: dtype must be fp16 or bf16 (the fused backends' dtypes)");
  if (s.head_dim_v != s.head_dim)
    fail("sdpa: head_dim_v " + std::to_string(s.head_dim_v) + " != head_dim " +
         std::to_string(s.head_dim) + " (the modelled kernels take one head dim)");
  if (o.backend == SdpaBackend::kFlash && in.causal && s.len_q != s.len_kv)
    fail(
        "sdpa:backend=flash refuses is_causal with len_q != len_kv (SDPA's causal mask is "
        "top-left, FlashAttention-2's bottom-right): PyTorch raises");
  if (o.backend == SdpaBackend::kFlash && s.head_dim > 256)
    fail("sdpa:backend=flash takes head dims up to 256");
}

Pipeline sdpa_pipeline(const SdpaOptions& o, const AttentionShape& s, int sms) {
  if (o.dtype != Encoding::kFp16 && o.dtype != Encoding::kBf16)
    fail("sdpa: dtype must be fp16 or bf16");
  Pipeline p;
  // SDPA's is_causal masks key j > query i (top-left); FA2's own mask (bottom-right) is the same
  // for the only causal shapes the flash backend accepts (len_q == len_kv).
  p.tile.causal =
      o.backend == SdpaBackend::kFlash ? CausalAlign::kBottomRight : CausalAlign::kTopLeft;
  set_dtype(p, o.dtype, o.backend != SdpaBackend::kMath);
  const int kd = sdpa_kernel_head_dim(o.backend, s.head_dim);
  switch (o.backend) {
    case SdpaBackend::kCudnn:
      if (cudnn_decode(o, s)) {
        cudnn_decode_stages(p, o, s.head_dim);
      } else {
        cudnn_stages(p, o);
      }
      break;
    case SdpaBackend::kFlash:
      flash_stages(p, o, kd, sdpa_num_splits(o, s, sms) > 1);
      break;
    case SdpaBackend::kEfficient:
      efficient_stages(p, o, kd);
      break;
    case SdpaBackend::kMath:
      math_stages(p, s);
      break;
  }
  validate(p);
  return canonical(p);
}

PipelineResult sdpa_attention(const PreparedInput& in, const SdpaOptions& o, const Pipeline& p) {
  const Launch* l = in.launch.get();
  const int splits = sdpa_num_splits(o, dense_launch_shape(in.shape, l, "sdpa"), launch_sms(l));
  if (splits <= 1) return run_pipeline(in, p);
  if (o.backend == SdpaBackend::kCudnn)  // the decode split kernel: strided tiles, lean_reduction
    return split_kv_attention(in, p, splits, SplitCombine::kCudnnLean, in.shape.head_dim,
                              SplitPartition::kStrided);
  return split_kv_attention(in, p, splits, SplitCombine::kFa2,
                            sdpa_kernel_head_dim(o.backend, in.shape.head_dim));
}

PipelineResult sdpa_attention(const AttentionInput& in, const SdpaOptions& o, const Pipeline& p) {
  validate(o, in);
  return sdpa_attention(prepare(in, p), o, p);
}

std::vector<std::string> sdpa_unverified(const SdpaOptions& o, const AttentionShape& s) {
  std::vector<std::string> r;
  const std::string b = std::string("sdpa:backend=") + sdpa_backend_name(o.backend) + ": ";
  const int d = s.head_dim;
  switch (o.backend) {
    case SdpaBackend::kCudnn:
      if (s.len_q == 1 && d != 64 && d != 128)
        r.push_back(b + "len_q = 1 with head_dim " + std::to_string(d) +
                    ": cuDNN's decode kernel was recorded for d 64 and 128 only (its warps' "
                    "row-sum order is fit per head dim; d 128's is used) (UNVERIFIED)");
      if (s.len_q == 1 && !recorded_decode_split(s))
        r.push_back(b + "len_q = 1: cuDNN's decode split count " +
                    std::to_string(cudnn_decode_splits(s)) + " for batch x KV heads = " +
                    std::to_string(std::int64_t(s.batch) * s.heads_kv) + " and " +
                    std::to_string((s.len_kv + 127) / 128) +
                    " tiles of 128 keys comes from a rule fit on the recorded launches, not from "
                    "cuDNN's heuristic (UNVERIFIED)");
      break;
    case SdpaBackend::kFlash:
      if (d > 128 && sdpa_num_splits(o, s) <= 1)
        r.push_back(b +
                    "head_dim > 128 without splits runs Flash_fwd_kernel_traits<d, 128, 64, 8>: "
                    "not recorded (UNVERIFIED)");
      break;
    case SdpaBackend::kEfficient:
      if (s.heads_q != s.heads_kv)
        r.push_back(b +
                    "PyTorch's efficient backend refuses GQA (enable_gqa): attnsim runs each "
                    "query head on its KV head, as repeat_interleave would");
      break;
    case SdpaBackend::kMath:
      if (s.len_q == 1)
        r.push_back(b +
                    "len_q = 1: cuBLAS runs gemv / dot kernels, not the modelled FFMA-chain "
                    "GEMM (UNVERIFIED; sim/sdpa/README.md gives the measured fraction)");
      if (s.len_kv > 1024)
        r.push_back(b +
                    "len_kv > 1024: the softmax is cunn_SoftMaxForwardReg (block reductions), "
                    "not the modelled softmax_warp_forward (UNVERIFIED)");
      break;
  }
  if (!recorded_head_dim(o.backend, d))
    r.push_back(b + "head_dim " + std::to_string(d) + " was not recorded (UNVERIFIED)");
  return r;
}

}  // namespace attnsim

namespace attnsim {

KernelSchedule sdpa_schedule(const SdpaOptions& o, const AttentionShape& target,
                             const Launch* launch) {
  const AttentionShape s = dense_launch_shape(target, launch, "sdpa");
  const int sms = launch_sms(launch);
  const Pipeline p = sdpa_pipeline(o, s, sms);
  const std::string tile =
      std::to_string(p.tile.block_q) + "x" + std::to_string(p.tile.block_kv);
  KernelSchedule k;
  k.family = std::string("sdpa:") + sdpa_backend_name(o.backend);
  k.items.push_back({"batch", std::to_string(s.batch), false,
                     "the launch's sequences (SDPA takes one dense [B, H, N, D] shape)"});
  const int kd = sdpa_kernel_head_dim(o.backend, s.head_dim);
  switch (o.backend) {
    case SdpaBackend::kFlash: {
      const bool swapped = gqa_swapped(s);
      const int heads = swapped ? s.heads_kv : s.heads_q;
      const int rows = swapped ? s.group() : s.len_q;
      const int splits = sdpa_num_splits(o, s, sms);
      const int m_blocks = (rows + 63) / 64;
      const int block_n = kd <= 64 ? 256 : (kd <= 128 ? 128 : 64);
      const int n_blocks = (s.len_kv + block_n - 1) / block_n;
      k.kernel = splits > 1 ? "pytorch_flash::flash_fwd_splitkv_kernel" : "pytorch_flash::flash_fwd_kernel";
      k.items.push_back({"gqa_swap", swapped ? "yes" : "no", false,
                         "mha_fwd seqlenq_ngroups_swapped: one query, heads_q > heads_kv: the "
                         "group's query heads are the rows"});
      k.items.push_back({"head_dim", std::to_string(kd), true, "round_multiple(d, 32)"});
      k.items.push_back({"blocks", std::to_string(s.batch) + "x" + std::to_string(heads) + "x" +
                                       std::to_string(m_blocks) + " = " +
                                       std::to_string(s.batch * heads * m_blocks),
                         false, "batch x heads x ceil(rows / 64), the heuristic's work count"});
      k.items.push_back({"n_blocks", std::to_string(n_blocks), false,
                         "ceil(len_kv / " + std::to_string(block_n) + ") (set_params_splitkv)"});
      k.items.push_back({"splits", std::to_string(splits), true,
                         "num_splits_heuristic(blocks, 2 x " + std::to_string(sms) +
                             " SMs, n_blocks, 128): 1 when blocks >= 0.8 x " +
                             std::to_string(2 * sms) +
                             ", else the fewest splits within 85% of the best wave efficiency"});
      k.items.push_back({"tile", tile, true,
                         splits > 1 ? "Flash_fwd_kernel_traits<d, 64, block_n, 4> "
                                      "(run_mha_fwd_splitkv_dispatch)"
                                    : "run_mha_fwd_hdim" + std::to_string(kd) + " (sm_90)"});
      if (splits > 1)
        k.items.push_back({"combine", "flash_fwd_splitkv_combine_kernel", true,
                           "the splits' partial outputs merged by their LSEs"});
      break;
    }
    case SdpaBackend::kCudnn:
      if (cudnn_decode(o, s)) {
        const int splits = cudnn_decode_splits(s);
        k.kernel = "cudnn sm80 flash_fprop_wmma_f16_knob_35_16x128 (decode)";
        k.items.push_back({"tile", tile, true,
                           "cuDNN 9.19's runtime-compiled decode kernel: 4 warps of 32 keys"});
        k.items.push_back({"units", std::to_string(std::int64_t(s.batch) * s.heads_kv), false,
                           "batch x KV heads (a GQA group's heads are rows of one 16-row tile)"});
        k.items.push_back({"splits", std::to_string(splits), true,
                           "fit on the recorded launches: the largest power of two <= min(32, "
                           "256 / units, 128-key tiles); 1 (the unsplit kernel) from 128 units or "
                           "below 8 tiles"});
        if (splits > 1)
          k.items.push_back({"combine", "cudnn::fusion::lean_reduction_kernel", true,
                             "split s takes tiles s, s + S, ...; the unnormalized partials merged "
                             "in split order"});
      } else {
        k.kernel = "cudnn sm90 flash_fprop_wgmma";
        k.items.push_back({"tile", tile, true, "cuDNN 9.19's runtime-compiled kernel"});
      }
      break;
    case SdpaBackend::kEfficient:
      k.kernel = "fmha_cutlassF_sm80";
      k.items.push_back({"tile", tile, true, "kernel_forward.h kQueriesPerBlock x kKeysPerBlock"});
      break;
    case SdpaBackend::kMath:
      k.kernel = "cuBLAS GEMMs + softmax_warp_forward";
      k.items.push_back({"tile", "one row", true, "the softmax kernel sees the whole row"});
      break;
  }
  if (o.backend != SdpaBackend::kFlash && !cudnn_decode(o, s))
    k.items.push_back({"launch_dependence", "none modelled", false,
                       "no split or tile choice reads the batch in this backend's model"});
  k.unverified = sdpa_unverified(o, s);
  if (o.backend == SdpaBackend::kMath)
    k.unverified.push_back(
        "sdpa:backend=math: cuBLAS chooses its GEMM algorithm from the batched shape; a "
        "batch-dependent choice is not modelled (UNVERIFIED)");
  return k;
}

}  // namespace attnsim
