// SageAttention presets of the attention pipeline. Every field set below is a numeric choice of
// the public kernel (thu-ml/SageAttention d1a57a5 as built for sm_90a with CUDA 13.0 and run by
// Triton 3.6, read off its source and SASS) or of the SageAttention2 paper; sim/sage/README.md
// gives the source line or paper section of each, and data/hw/h100/sage/ the recordings they are
// checked against.
#include "sim/sage/sage.hpp"

#include <cmath>
#include <stdexcept>

#include "numerics/outlier_transforms.hpp"

namespace attnsim {

namespace {

[[noreturn]] void fail(const std::string& m) { throw std::invalid_argument(m); }


DotModel mma(MmaInstr i) { return DotModel{DotModel::kMma, i, 0}; }

SagePvAccum resolved_pv_accum(const SageOptions& o) {
  if (o.pv_accum != SagePvAccum::kDefault) return o.pv_accum;
  switch (o.arch) {
    case SageArch::kSage1: return SagePvAccum::kFp16;  // Triton dot(out_dtype=fp16) per block
    case SageArch::kSm80: return SagePvAccum::kFp32;   // core.py:459
    case SageArch::kSm89: return SagePvAccum::kFp32PlusFp16;  // core.py:644 (docstring says fp32+fp32)
    case SageArch::kSm90: return SagePvAccum::kFp32PlusFp32;  // core.py:837
    case SageArch::kPaper: return SagePvAccum::kFp32PlusFp32;  // paper §3.4 two-level accumulation
  }
  return SagePvAccum::kFp32;
}

std::string resolved_gran(const SageOptions& o) {
  if (!o.qk_gran.empty()) return o.qk_gran;
  return o.arch == SageArch::kSage1 ? "per_block" : "per_thread";
}

bool resolved_smooth_q(const SageOptions& o) {
  return o.smooth_q < 0 ? o.arch == SageArch::kPaper : o.smooth_q != 0;
}

// The path's own P/V format (SageOptions::pv = kFp32 means "the path's").
Encoding resolved_pv(const SageOptions& o) {
  if (o.pv != Encoding::kFp32) return o.pv;
  return o.arch == SageArch::kSage1 || o.arch == SageArch::kSm80 ? Encoding::kFp16
                                                                 : Encoding::kE4m3fn;
}

Encoding resolved_qk(const SageOptions& o) {
  if (o.qk != Encoding::kFp32) return o.qk;
  return o.arch == SageArch::kPaper ? Encoding::kS4 : Encoding::kS8;
}

// The head dim the kernels run with: zeros appended up to 64 or 128 (core.py:262-271 etc.). It
// changes no value (zero channels add nothing to the integer dots or the amax; padded V columns
// are sliced away), only the tile parameters chosen for it (WARP_Q of sm80 "fp16+fp32").
int padded_head_dim(int d) { return d <= 64 ? 64 : 128; }

// Q and K scale groups and quantizers for a granularity. CTA tiles: Q blk_q, K blk_k; WARPQ warp_q.
void set_qk_quant(Pipeline& p, const std::string& gran, Encoding qk, bool triton_quant, int blk_q,
                  int warp_q, int blk_k, int warp_k) {
  p.q.enc = p.k.enc = qk;
  p.q.scale = p.k.scale = ScaleMode::kInteger;
  const bool int4 = qk == Encoding::kS4;
  // The Triton quantizers (quant_per_thread.py / quant_per_block.py: div.full, round half away,
  // trunc) back per_thread and per_block in the public code; per_warp is the CUDA QuantInt8Kernel
  // (fused.cu: 127/amax, cvt.rni.sat). per_token and per_tensor have no public kernel: they use
  // the per_thread quantizer's arithmetic on other groups.
  if (gran == "per_thread") {
    p.q.groups = sage_per_thread_q(warp_q, blk_q);
    p.k.groups = sage_per_thread_k(warp_k, blk_k);
  } else if (gran == "per_warp") {
    p.q.groups = GroupMap{Granularity::kPerWarp, warp_q, blk_q};
    p.k.groups = GroupMap{Granularity::kPerBlock, blk_k, 0};
  } else if (gran == "per_block") {
    p.q.groups = GroupMap{Granularity::kPerBlock, blk_q, 0};
    p.k.groups = GroupMap{Granularity::kPerBlock, blk_k, 0};
  } else if (gran == "per_token") {
    p.q.groups = p.k.groups = GroupMap{Granularity::kPerToken, 1, 0};
  } else if (gran == "per_tensor") {
    p.q.groups = p.k.groups = GroupMap{Granularity::kPerTensor, 1, 0};
  } else {
    fail("qk_gran=" + gran + " is not one of per_thread, per_warp, per_block, per_token, per_tensor");
  }
  SymmetricQuantizer qz;
  if (!triton_quant) {
    qz = int4 ? kSymmetricInt4 : kSymmetricInt8;  // the paper: round to nearest, amax / 7 or 127
  } else if (gran == "per_warp") {
    if (int4) fail("qk=int4 has no per_warp CUDA quantizer");
    qz = kSageCudaInt8FastMath;
  } else if (gran == "per_block") {
    qz = int4 ? kSageTritonInt4 : kSageTritonPerBlockInt8;
  } else {
    qz = int4 ? kSageTritonInt4 : kSageTritonInt8;
  }
  p.q.quantizer = p.k.quantizer = qz;
}

// V as fp8 with a per-channel float scale (quant.py per_channel_fp8 -> fused.cu MeanScaleKernel).
void set_v_fp8(Pipeline& p, Encoding e, float scale_max, FloatScaleRule rule) {
  p.v.enc = e;
  p.v.cast = kCudaSatfinite;
  p.v.scale = ScaleMode::kFloat;
  p.v.groups = GroupMap{Granularity::kPerChannel, 1, 0};
  p.v.float_max = scale_max;
  p.v.float_rule = rule;
}

// Steps every public CUDA path shares (attn_utils.cuh; qk_int_sv_f*_cuda_sm*.cu*).
void set_cuda_softmax(Pipeline& p, int masked_tail, double offset) {
  p.qk.int_cvt = Round::kTowardZero;         // __int2float_rz (exact: |S| < 2^24)
  p.softmax.dequant = Dequant::kFold;             // main path: fma(S, c0·(qs·ks), −m)
  p.softmax.dequant_tail = masked_tail;           // masked path: S·(qs·ks), then fma(S', c0, −m)
  p.softmax.max_domain = MaxDomain::kScaled;      // update_mdo: mt = fma(max, coef, −offset) or max·coef
  p.softmax.max_offset = offset;                  // S_FP8_OFFSET 8.807 (sm89/sm90), 0 (sm80)
  p.softmax.mask_value = -5000000.0;              // apply_causal_mask / OOB: −5e6
  p.softmax.scale_log2 = ScaleLog2::kDeviceFloat; // sm_scale *= math::log2e (FMUL.FTZ)
  p.softmax.base = ExpKind::kExp2;
  p.exp.fn = ExpFn::kEx2ApproxFtz;        // math.cuh ptx_exp2: ex2.approx.ftz.f32
  p.softmax.fma = true;
  p.normalize.kind = Normalize::kRcpApproxFtz; // normalize_d: rcp.approx.ftz
  p.softmax.lse = LseModel::kLog2Mufu;            // lg2.approx.ftz(d) + m
}

void check_pv_accum(SagePvAccum a, std::initializer_list<SagePvAccum> allowed, const char* path) {
  for (SagePvAccum x : allowed)
    if (x == a) return;
  std::string names;
  for (SagePvAccum x : allowed) names += std::string(names.empty() ? "" : ", ") + sage_pv_accum_name(x);
  fail(std::string("pv_accum=") + sage_pv_accum_name(a) + " is not a choice of " + path +
       " (expected " + names + ")");
}

// The paper's P·V stage for a P/V format (Table 7 compares fp16, e4m3, e5m2 and int8).
void set_paper_pv(Pipeline& p, Encoding pv, bool int_static, bool ada, SagePvAccum acc) {
  const bool chunk = acc == SagePvAccum::kFp32PlusFp32;
  if (pv == Encoding::kFp16) {
    // FP16 P and V (SageAttention 1 / sm80): V a plain cast, HMMA with an FP32 accumulator.
    p.v.enc = Encoding::kFp16;
    p.v.cast = kCudaRn;
    p.p.enc = Encoding::kFp16;
    p.p.cast = kCudaRn;
    p.pv.dot = mma(MmaInstr::kHmmaF16F32);
  } else if (pv == Encoding::kE4m3fn || pv == Encoding::kE5m2) {
    // Alg. 1 line 6: P̃·448 to e4m3 (δ_P = 1/448, §3.3), V per-channel to FP8; e5m2 the same with
    // its own maximum 57344.
    const float fmax = pv == Encoding::kE4m3fn ? 448.0f : 57344.0f;
    set_v_fp8(p, pv, fmax, FloatScaleRule::kIeee);
    p.p.enc = pv;
    p.p.cast = kCudaSatfinite;
    p.p.static_scale = fmax;
    if (pv == Encoding::kE4m3fn)
      p.pv.dot = mma(ada ? MmaInstr::kSm89MmaSyncE4m3F32 : MmaInstr::kMmaSyncE4m3F32);
    else
      p.pv.dot = mma(ada ? MmaInstr::kSm89MmaSyncE5m2F32 : MmaInstr::kMmaSyncE5m2F32);
  } else if (pv == Encoding::kS8) {
    // INT8 P and V: V per channel; P per row and block to int8 (scale max/127), or (int_static)
    // P̃ · 127 with cvt.rni.sat and O / 127 in the epilogue, as Alg. 1 lines 6 and 8 do with 448;
    // IMMA chunks. The paper does not say which scale its Table 7 INT8 row used.
    p.v.enc = Encoding::kS8;
    p.v.scale = ScaleMode::kInteger;
    p.v.groups = GroupMap{Granularity::kPerChannel, 1, 0};
    p.v.quantizer = kSymmetricInt8;
    p.p.enc = Encoding::kS8;
    if (int_static) {
      p.p.static_scale = 127.0;
    } else {
      p.p.scale = PScale::kRow;
      p.p.quantizer = kSymmetricInt8;
    }
    p.pv.dot = mma(MmaInstr::kImmaS8);
    p.pv.acc = PvAccumulate::kChunk;
    return;
  } else {
    fail("pv is fp16, e4m3, e5m2 or int8");
  }
  p.pv.acc = chunk ? PvAccumulate::kChunk : PvAccumulate::kIntoC;
}

}  // namespace

float sage_wrapper_lse(double lse2, float corr, double sm_scale) {
  // torch divides by the Python scalar 1.44269504 by multiplying with its FP32 reciprocal
  // (BinaryDivTrueKernel.cu: inv = 1.0f / float(b)); each op is its own FP32 kernel.
  const float inv_log2e = 1.0f / float(1.44269504);
  const float x = float(lse2) * inv_log2e;
  return corr == 0.0f ? x : x + corr * float(sm_scale);
}

const char* sage_arch_name(SageArch a) {
  switch (a) {
    case SageArch::kSage1: return "sage1";
    case SageArch::kSm80: return "sm80";
    case SageArch::kSm89: return "sm89";
    case SageArch::kSm90: return "sm90";
    case SageArch::kPaper: return "paper";
  }
  return "?";
}

const char* sage_pv_accum_name(SagePvAccum a) {
  switch (a) {
    case SagePvAccum::kDefault: return "default";
    case SagePvAccum::kFp32: return "fp32";
    case SagePvAccum::kFp16PlusFp32: return "fp16+fp32";
    case SagePvAccum::kFp16: return "fp16";
    case SagePvAccum::kFp32PlusFp32: return "fp32+fp32";
    case SagePvAccum::kFp32PlusFp16: return "fp32+fp16";
  }
  return "?";
}

Encoding sage_input_encoding(const AttentionInput& in, const SageOptions& o) {
  if (in.dtype == "float16") return Encoding::kFp16;
  if (in.dtype == "bfloat16") return Encoding::kBf16;
  return o.in;
}

namespace {

// What sage_pipeline resolved from the options before the architecture's stages.
struct SageResolved {
  Encoding qk, pv, in;
  SagePvAccum acc;
  std::string gran;
  int dpad;
};

// sage1's stages (the Triton kernel).
void sage1_stages(Pipeline& p, const SageOptions&, const SageResolved& r) {
  const Encoding qk = r.qk, pv = r.pv;
  const SagePvAccum acc = r.acc;
  const std::string& gran = r.gran;
  // sageattn_qk_int8_pv_fp16_triton: attn_qk_int8_per_block(_causal).py, BLOCK_M 128, BLOCK_N 64.
  check_pv_accum(acc, {SagePvAccum::kFp16}, "sage1 (an fp16 block product added to fp32)");
  if (pv != Encoding::kFp16) fail("sage1 computes P·V in fp16 (pv=fp16)");
  p.tile.block_q = 128;
  p.tile.block_kv = 64;
  set_qk_quant(p, gran, qk, true, 128, 32, 64, 64);
  // quant_per_block.py: q · (sm_scale · 1.44269504) before quantization; exponent scale 1.
  p.q.prescale = Prescale::kSmScaleLog2e;
  p.v.enc = Encoding::kFp16;  // core.py: v.to(float16)
  p.v.cast = kCudaRn;
  p.qk.dot = mma(qk == Encoding::kS4 ? MmaInstr::kImmaS4 : MmaInstr::kWgmmaS8);  // IGMMA
  p.qk.int_cvt = Round::kNearestEven;  // cvt.rn.f32.s32
  p.softmax.dequant = Dequant::kScore;      // fma(f32(S), qs·ks, bias)
  p.softmax.max_domain = MaxDomain::kRaw;
  p.softmax.mask_value = -std::numeric_limits<double>::infinity();  // causal kernel: −inf
  p.softmax.base = ExpKind::kExp2;
  p.exp.fn = ExpFn::kEx2ApproxFtz;  // tl.math.exp2 -> ex2.approx.ftz.f32
  p.softmax.fma = false;                    // p = ex2(f32(x − m)): a separate FADD (SASS)
  p.softmax.row_sum = RowSum::kTritonTree;  // tl.sum, l = fma(l, alpha, l_blk)
  p.p.enc = Encoding::kFp16;
  p.p.cast = kCudaRn;
  p.pv.dot = mma(MmaInstr::kWgmmaF16F16);  // HGMMA.64xDx16.F16 ×4 per block, first zeroed
  p.pv.acc = PvAccumulate::kChunk;
  p.rescale.fused = true;  // acc = fma(acc, alpha, f32(D16))
  p.normalize.kind = Normalize::kDivFull;  // acc / l_i -> div.full.f32
  p.softmax.lse = LseModel::kLog2Libdevice;   // tl.log2 -> libdevice __nv_log2f
}

// arch=sm80's stages.
void sm80_stages(Pipeline& p, const SageOptions& o, const SageResolved& r) {
  const Encoding qk = r.qk, pv = r.pv, in = r.in;
  const SagePvAccum acc = r.acc;
  const std::string& gran = r.gran;
  const int dpad = r.dpad;
  // sageattn_qk_int8_pv_fp16_cuda: qk_int_sv_f16_cuda_sm80.cu, CTA 128×64.
  check_pv_accum(acc, {SagePvAccum::kFp32, SagePvAccum::kFp16PlusFp32, SagePvAccum::kFp16},
                 "sm80");
  if (pv != Encoding::kFp16) fail("arch=sm80 computes P·V in fp16 (pv=fp16)");
  p.tile.block_q = 128;
  p.tile.block_kv = 64;
  // core.py:603: WARPQ 16 for head_dim 128 with "fp16+fp32", else 32.
  const int warp_q = dpad == 128 && acc == SagePvAccum::kFp16PlusFp32 ? 16 : 32;
  set_qk_quant(p, gran, qk, true, 128, warp_q, 64, 64);
  p.qk.dot = mma(qk == Encoding::kS4 ? MmaInstr::kImmaS4 : MmaInstr::kImmaS8);
  set_cuda_softmax(p, 2, 0.0);
  p.softmax.row_sum = RowSum::kMma;  // mma(P16, ones, C = d·o): DenominatorAccumUnit::kTensorCore
  p.softmax.row_sum_dot = mma(MmaInstr::kHmmaF16F32);
  p.p.enc = Encoding::kFp16;
  p.p.cast = kCudaRn;  // __float22half2_rn
  p.v.enc = Encoding::kFp16;
  p.v.cast = kCudaRn;
  if (acc == SagePvAccum::kFp32) {
    p.pv.dot = mma(MmaInstr::kHmmaF16F32);  // RO = mma(P, V, C = RO·o) over all blocks
    p.pv.acc = PvAccumulate::kIntoC;
  } else if (acc == SagePvAccum::kFp16PlusFp32) {
    p.pv.dot = mma(MmaInstr::kHmmaF16F16);  // B = HMMA.F16 chain from 0; RO = fma(o, RO, f32(B))
    p.pv.acc = PvAccumulate::kChunk;
    p.rescale.fused = true;
  } else {
    p.pv.dot = mma(MmaInstr::kHmmaF16F16);  // RO_h = HMMA.F16(P, V, C = HMUL2(RO_h, f16(o)))
    p.pv.acc = PvAccumulate::kIntoC;
    p.pv.o_accum = Encoding::kFp16;
  }
  if (o.smooth_v) {
    // core.py:616: only "fp16" honours smooth_v: quant.py sub_mean, vm = v.mean() in the input
    // dtype, __hsub2 in that dtype then fp16; the epilogue adds vm with __hadd2.
    if (acc != SagePvAccum::kFp16) fail("arch=sm80 smooth_v=1 needs pv_accum=fp16 (core.py:608)");
    p.v.mean = MeanMode::kTokens;
    p.v.mean_enc = in;
    p.v.centered_enc = in;
  }
}

// arch=sm89's stages.
void sm89_stages(Pipeline& p, const SageOptions& o, const SageResolved& r) {
  const Encoding qk = r.qk, pv = r.pv;
  const SagePvAccum acc = r.acc;
  const std::string& gran = r.gran;
  // sageattn_qk_int8_pv_fp8_cuda: qk_int_sv_f8_cuda_sm89.cuh, CTA 128×64, WARPQ 32.
  check_pv_accum(acc,
                 {SagePvAccum::kFp32, SagePvAccum::kFp32PlusFp32, SagePvAccum::kFp32PlusFp16},
                 "sm89");
  if (pv != Encoding::kE4m3fn) fail("arch=sm89 computes P·V in e4m3 (pv=e4m3)");
  p.tile.block_q = 128;
  p.tile.block_kv = 64;
  set_qk_quant(p, gran, qk, true, 128, 32, 64, 64);
  p.qk.dot = mma(qk == Encoding::kS4 ? MmaInstr::kImmaS4 : MmaInstr::kImmaS8);
  set_cuda_softmax(p, 2, 8.807);
  p.softmax.row_sum = RowSum::kSageLanes;  // kCudaCore: fp32 p, d = fma(o, d, T0) + T1 + ...
  // core.py:805: scale_max 2.25 for "fp32+fp16" (SageAttention2++), else 448.
  set_v_fp8(p, Encoding::kE4m3fn, acc == SagePvAccum::kFp32PlusFp16 ? 2.25f : 448.0f,
            FloatScaleRule::kMufuRcp);
  p.p.enc = Encoding::kE4m3fn;
  p.p.cast = kCudaSatfinite;
  p.pv.perm16 = true;  // TransposePadPermute's in-16 order meets the P packing
  const bool ada = o.target == SageTarget::kAda;
  if (acc == SagePvAccum::kFp32PlusFp16) {
    p.pv.dot = mma(ada ? MmaInstr::kSm89MmaSyncE4m3F16 : MmaInstr::kMmaSyncE4m3F16);
  } else {
    p.pv.dot = mma(ada ? MmaInstr::kSm89MmaSyncE4m3F32 : MmaInstr::kMmaSyncE4m3F32);
  }
  if (acc == SagePvAccum::kFp32) {
    p.pv.acc = PvAccumulate::kIntoC;  // RO = mma(P, V, C = RO·o): FMUL then the FADD of C
  } else {
    p.pv.acc = PvAccumulate::kChunk;  // B from 0 over 64 keys; RO = fma(o, RO, f32(B))
    p.rescale.fused = true;
  }
  if (o.smooth_v) {
    // core.py:797-803: smooth_v only with "fp32"; MeanScaleKernel<64, true>, the mean in FP32
    // over the padded tokens; epilogue fma(RO·r, v_scale, vm).
    if (acc != SagePvAccum::kFp32) fail("arch=sm89 smooth_v=1 needs pv_accum=fp32 (core.py:797)");
    p.v.mean = MeanMode::kTokens;
    p.v.mean_rule = MeanRule::kSageChannel;
    p.v.mean_enc = p.v.centered_enc = Encoding::kFp32;
  }
}

// arch=sm90's stages.
void sm90_stages(Pipeline& p, const SageOptions& o, const SageResolved& r) {
  const Encoding qk = r.qk, pv = r.pv;
  const SagePvAccum acc = r.acc;
  const std::string& gran = r.gran;
  // sageattn_qk_int8_pv_fp8_cuda_sm90: qk_int_sv_f8_cuda_sm90.cu, CTA 64×128, one warpgroup.
  // "fp32" raises NotImplementedError in core.py:985; it is kept here (into C, no flush) for
  // the two-level accumulation study (paper Fig. 17).
  check_pv_accum(acc, {SagePvAccum::kFp32PlusFp32, SagePvAccum::kFp32}, "sm90");
  if (pv != Encoding::kE4m3fn) fail("arch=sm90 computes P·V in e4m3 (pv=e4m3)");
  if (o.smooth_v) fail("arch=sm90 has no smooth_v (core.py never passes it)");
  p.tile.block_q = 64;
  p.tile.block_kv = 128;
  set_qk_quant(p, gran, qk, true, 64, 16, 128, 128);
  p.qk.dot = mma(qk == Encoding::kS4 ? MmaInstr::kImmaS4 : MmaInstr::kWgmmaS8);
  set_cuda_softmax(p, 1, 8.807);
  p.softmax.row_sum = RowSum::kSageLanes;
  set_v_fp8(p, Encoding::kE4m3fn, 448.0f, FloatScaleRule::kMufuRcp);
  p.p.enc = Encoding::kE4m3fn;
  p.p.cast = kCudaSatfinite;
  p.pv.perm16 = true;
  p.pv.dot = mma(MmaInstr::kWgmmaE4m3F32);  // QGMMA.64xDx32.F32.E4M3.E4M3 ×4 per block
  if (acc == SagePvAccum::kFp32PlusFp32) {
    p.pv.acc = PvAccumulate::kChunk;  // RT from 0 over 128 keys; RO = fma(o, RO, RT)
    p.rescale.fused = true;
  } else {
    p.pv.acc = PvAccumulate::kIntoC;
  }
}

// the paper's stages (arch=paper).
void paper_stages(Pipeline& p, const SageOptions& o, const SageResolved& r) {
  const Encoding qk = r.qk, pv = r.pv;
  const SagePvAccum acc = r.acc;
  const std::string& gran = r.gran;
  // SageAttention2 (arXiv 2411.10958) Alg. 1 as written: Q/K INT4 per thread (§3.1),
  // smooth Q by block mean with ΔS and smooth K (§3.2), FP8 P and V with P·448 (§3.3),
  // two-level FP32 accumulation every block (§3.4), exact exponent in FP32.
  check_pv_accum(acc, {SagePvAccum::kFp32PlusFp32, SagePvAccum::kFp32}, "paper");
  p.tile.block_q = 128;
  p.tile.block_kv = 64;
  p.tile.causal = CausalAlign::kBottomRight;  // the paper does not say; golden's convention
  set_qk_quant(p, gran, qk, false, 128, 32, 64, 64);
  p.qk.dot = mma(qk == Encoding::kS4 ? MmaInstr::kImmaS4 : MmaInstr::kImmaS8);
  if (o.smooth_k) p.k.mean_enc = p.k.centered_enc = Encoding::kFp32;
  p.qk.int_cvt = Round::kNearestEven;
  p.softmax.dequant = Dequant::kScore;  // S = ψ⁻¹(Q̂ K̂ᵀ) + ΔS (Alg. 1 line 5)
  p.softmax.max_domain = MaxDomain::kRaw;
  p.softmax.base = ExpKind::kExp2;
  p.exp.fn = ExpFn::kEx2ApproxFtz;  // an FP8 kernel's exp2 on the GPU
  p.softmax.row_sum = RowSum::kSingle;
  p.normalize.kind = Normalize::kDiv;
  set_paper_pv(p, pv, o.pv_int_static, o.target == SageTarget::kAda, acc);
  if (o.smooth_v) {
    p.v.mean = MeanMode::kTokens;  // §3.2 smooth V: the mean added back in the epilogue
    p.v.mean_enc = p.v.centered_enc = Encoding::kFp32;
  }
}

}  // namespace

Pipeline sage_pipeline(const SageOptions& o, const AttentionShape& shape) {
  if (o.in != Encoding::kFp16 && o.in != Encoding::kBf16)
    fail("in is fp16 or bf16 (the kernels take 16-bit inputs)");
  if (shape.head_dim > 128)
    fail("head_dim " + std::to_string(shape.head_dim) +
         " > 128: SageAttention supports head dims up to 128 (core.py raises ValueError)");
  if (shape.head_dim_v != shape.head_dim)
    fail("SageAttention takes one head_dim for q, k and v (head_dim_v " +
         std::to_string(shape.head_dim_v) + " != " + std::to_string(shape.head_dim) + ")");
  const Encoding qk = resolved_qk(o);
  if (qk != Encoding::kS8 && qk != Encoding::kS4) fail("qk is int8 or int4");
  const int dpad = padded_head_dim(shape.head_dim);
  const SagePvAccum acc = resolved_pv_accum(o);
  const std::string gran = resolved_gran(o);
  const bool smooth_q = resolved_smooth_q(o);
  const Encoding pv = resolved_pv(o);
  const Encoding in = o.in;

  Pipeline p;
  p.tile.kv_order = KvOrder::kAscending;          // every SageAttention kernel walks KV upwards
  p.tile.causal = CausalAlign::kTopLeft;    // attn_utils.cuh: key > row (Triton: Lq == Lk)
  p.q.input = p.k.input = p.v.input = in;
  p.out.enc = in;  // the output has the input's dtype (core.py: torch.empty_like(q))
  p.out.cast = kCudaRn;  // __float22half2_rn / __float22bfloat162_rn / Triton .to()
  if (o.smooth_k) {
    // core.py: km = k.mean(dim=seq) in the input dtype; quant_per_thread.py / per_block: k − km in
    // torch, rounded to the input dtype. The CUDA per_warp quantizer subtracts in FP32 (fused.cu).
    p.k.mean = MeanMode::kTokens;
    p.k.mean_enc = in;
    p.k.centered_enc = gran == "per_warp" && o.arch != SageArch::kPaper ? Encoding::kFp32 : in;
  }

  const SageResolved r{qk, pv, in, acc, gran, dpad};
  switch (o.arch) {
    case SageArch::kSage1: sage1_stages(p, o, r); break;
    case SageArch::kSm80: sm80_stages(p, o, r); break;
    case SageArch::kSm89: sm89_stages(p, o, r); break;
    case SageArch::kSm90: sm90_stages(p, o, r); break;
    case SageArch::kPaper: paper_stages(p, o, r); break;
  }
  if (smooth_q) {
    // SageAttention2 §3.2: Q minus the mean of its block (block_q rows), S += ΔS = mean_q · K̃ᵀ.
    // ΔS needs the score path, so the fold of the dequantization into the exponent is off.
    p.q.mean = MeanMode::kBlock;
    p.q.mean_block = p.tile.block_q;
    p.q.mean_enc = p.q.centered_enc = o.arch == SageArch::kPaper ? Encoding::kFp32 : in;
    if (p.q.prescale != Prescale::kNone) fail("smooth_q=1 is not available with sage1's prescaled Q");
    p.softmax.dequant = Dequant::kScore;
    p.softmax.dequant_tail = 0;
  }
  validate(p);
  return canonical(p);
}

SageResult sage_attention(const AttentionInput& in0, const SageOptions& o0) {
  SageOptions o = o0;
  o.in = sage_input_encoding(in0, o0);
  return sage_attention(in0, o0, sage_pipeline(o, in0.shape));
}

SageResult sage_attention(const AttentionInput& in0, const SageOptions& o0, const Pipeline& pipeline) {
  SageOptions o = o0;
  o.in = sage_input_encoding(in0, o0);
  const AttentionShape& s = in0.shape;
  validate(pipeline);
  SageResult res{{}, pipeline, {}, {}};
  if (o.arch == SageArch::kSage1 && in0.causal && s.len_q != s.len_kv)
    fail("sage1 causal needs len_q == len_kv (attn_qk_int8_per_block_causal.py asserts it)");
  const AttentionInput* use = &in0;
  AttentionInput moved;
  if (o.smooth != SageSmooth::kNone) {
    // The paper's baselines (Table 4): applied to Q and K before everything else, in FP32 on the
    // input values; the kernel then takes them in its 16-bit format.
    moved = in0;
    moved.sm_scale = in0.scale();
    const int d = s.head_dim;
    for (int b = 0; b < s.batch; ++b) {
      for (int hk = 0; hk < s.heads_kv; ++hk) {
        float* k = moved.k.data() + (std::size_t(b) * s.heads_kv + hk) * s.len_kv * d;
        if (o.smooth == SageSmooth::kHadamard) {
          hadamard_rotate(k, s.len_kv, d, o.hadamard_seed);
          for (int g = 0; g < s.group(); ++g) {
            float* q = moved.q.data() +
                       (std::size_t(b) * s.heads_q + hk * s.group() + g) * s.len_q * d;
            hadamard_rotate(q, s.len_q, d, o.hadamard_seed);
          }
        } else {
          // One migration per KV head: the factors use every query head that reads it.
          std::vector<float> qs;
          for (int g = 0; g < s.group(); ++g) {
            const float* q = moved.q.data() +
                             (std::size_t(b) * s.heads_q + hk * s.group() + g) * s.len_q * d;
            qs.insert(qs.end(), q, q + std::size_t(s.len_q) * d);
          }
          smoothquant_migrate(qs.data(), s.len_q * s.group(), k, s.len_kv, d, 0.5);
          for (int g = 0; g < s.group(); ++g) {
            float* q = moved.q.data() +
                       (std::size_t(b) * s.heads_q + hk * s.group() + g) * s.len_q * d;
            std::copy(qs.begin() + std::ptrdiff_t(g) * s.len_q * d,
                      qs.begin() + std::ptrdiff_t(g + 1) * s.len_q * d, q);
          }
        }
      }
    }
    use = &moved;
  }
  const PreparedInput prep = prepare(*use, res.pipeline);
  res.r = run_pipeline(prep, res.pipeline);
  const Pipeline& p = res.pipeline;
  if (p.softmax.lse == LseModel::kLog2Mufu || p.softmax.lse == LseModel::kLog2Libdevice) {
    // lse_correction = (q @ kmᵀ) by a 16-bit matmul, rounded to the input dtype, then to FP32
    // (core.py:289-293): the product of 16-bit values summed exactly and rounded once (cuBLAS's
    // own order is not modelled: it can differ by one 16-bit ulp, README).
    res.lse2 = res.r.lse;
    res.lse_corr.assign(res.r.lse.size(), 0.0f);
    const int d = s.head_dim;
    for (int b = 0; b < s.batch; ++b)
      for (int h = 0; h < s.heads_q; ++h) {
        const int skv = b * s.heads_kv + h / s.group();
        for (int i = 0; i < s.len_q; ++i) {
          const std::size_t row = (std::size_t(b) * s.heads_q + h) * s.len_q + std::size_t(i);
          if (o.smooth_k && !prep.k.mean.empty()) {
            const float* q = use->q.data() + row * d;
            const float* km = prep.k.mean.data() + std::size_t(skv) * d;
            double dot = 0;
            for (int c = 0; c < d; ++c)
              dot += double(decode_float_bits(o.in, encode_float_bits(o.in, q[c], kCudaRn))) *
                     double(km[c]);
            res.lse_corr[row] = decode_float_bits(o.in, encode_float_bits(o.in, dot, kCudaRn));
          }
          res.r.lse[row] = double(sage_wrapper_lse(res.lse2[row], res.lse_corr[row], use->scale()));
        }
      }
  }
  return res;
}

}  // namespace attnsim
