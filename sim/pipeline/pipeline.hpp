// The one tiled attention skeleton every technique runs on: a Pipeline is a value made of one
// struct per stage (tiles, Q/K/V preparation, QKᵀ, softmax state, exp, P cast, P·V, rescale,
// epilogue, output), so a technique is a preset (a filled-in Pipeline plus its own steps), never
// a copy of the loop. sim/pipeline/README.md lists every stage, its choices and the kernels
// behind them; sim/pipeline/stages/ holds one reference function per stage.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "formats/encoding.hpp"
#include "formats/policy.hpp"
#include "numerics/dot.hpp"
#include "numerics/exp_model.hpp"
#include "numerics/groups.hpp"
#include "numerics/quantize.hpp"
#include "sim/problem.hpp"

namespace attnsim {

// A method-string fragment: (key, value) pairs in the vocabulary's order
// (sim/pipeline/options.hpp).
using OptionList = std::vector<std::pair<std::string, std::string>>;

// ---------------------------------------------------------------------------------------------
// Hooks: a technique's own arithmetic plugged into one stage as an owned value that carries its
// parameters (TurboAttention's SAS as the exp; AMLA's integer-add step as the rescale). Two hooks
// are the same choice when their names and options are.

// p = f(x) for an argument x already in the exponent's units (FP32 in, FP32 out).
class ExpHook {
 public:
  virtual ~ExpHook() = default;
  virtual float eval(float x) const = 0;
  // out[i] = eval(x[i]) for n arguments (the exp stage's rows): a hook may override it with a
  // faster form of the same function (tested against eval bit for bit).
  virtual void eval_array(const float* x, std::size_t n, float* out) const {
    for (std::size_t i = 0; i < n; ++i) out[i] = eval(x[i]);
  }
  // The choice's spelling: `exp=<name>` plus its own keys (e.g. sas_fmt=fp16).
  virtual std::string name() const = 0;
  virtual OptionList options() const = 0;
};

// What RescaleHook::step returns for one row and KV block.
struct RescaleStep {
  float p_mul = 1.0f;      // P is multiplied by this (one FP32 multiply) before the P cast
  std::int32_t o_add = 0;  // added to every O element's FP32 bits as an INT32 (wrapping) ...
  bool apply_add = false;  // ... when set (AMLA: every block but the row's first)
};

// A technique's rescale (Rescale::kHook: AMLA Algorithm 2 lines 8-17, sim/amla). `state` is the
// row's own storage (TileState::hook, zeroed when the row is reset).
class RescaleHook {
 public:
  virtual ~RescaleHook() = default;
  // `m`: the row's running max in the exponent's units after this block (finite); `first`:
  // whether this is the first block the row sees a key in.
  virtual RescaleStep step(float m, bool first, double* state) const = 0;
  // The epilogue of one row: O (FP32, dv elements) to the normalized output, given the row sum l
  // (AMLA: |O| > 1e10 -> 0, O / (l·S16)). Rows with l = 0 are not passed.
  virtual void finish(float* o, int dv, float l, const double* state) const = 0;
  virtual std::string name() const = 0;
  virtual OptionList options() const = 0;
};

// An owned, shared, immutable hook; compared by value (name and options).
template <class H>
struct HookRef {
  std::shared_ptr<const H> ptr;
  const H* get() const { return ptr.get(); }
  explicit operator bool() const { return bool(ptr); }
  const H& operator*() const { return *ptr; }
  const H* operator->() const { return ptr.get(); }
  bool operator==(const HookRef& o) const {
    if (ptr == o.ptr) return true;
    if (!ptr || !o.ptr) return false;
    return ptr->name() == o.ptr->name() && ptr->options() == o.ptr->options();
  }
};

// ---------------------------------------------------------------------------------------------
// The tiles and their order.

// Order of the KV blocks. FA2 (flash_fwd_kernel.h compute_attn_1rowblock) and FA3 start at
// n_block_max − 1 and walk down to 0 (the masked blocks first); kAscending is the textbook order
// (SageAttention, Triton kernels). kSparse: FlexAttention's block-mask order (torch 2.11
// torch/_inductor/kernel/flex/templates/flex_attention.py.jinja: forward_inner over KV_IDX, then
// over FULL_KV_IDX; create_block_mask's lists are ascending): per tile, the `sparse_block`-key
// blocks that the mask cuts (partial: some but not all of the padded block's pairs visible) in
// ascending order, then the fully visible ones in ascending order, each walked in block_kv steps.
// Without a mask FlexAttention's block mask is one block over every key: ascending.
enum class KvOrder : std::uint8_t { kDescending, kAscending, kSparse };

// CausalAlign (which keys a causal mask hides): sim/problem.hpp. SageAttention's CUDA kernels are
// top-left (attn_utils.cuh apply_causal_mask; its KV-block count min(len_kv, (tile + 1)·block_q)).

struct TileStage {
  int block_q = 64;   // kBlockM: query rows per tile (one CUDA thread block)
  int block_kv = 64;  // kBlockN: keys per KV block
  KvOrder kv_order = KvOrder::kDescending;
  CausalAlign causal = CausalAlign::kBottomRight;
  int sparse_block = 128;  // kSparse: the block mask's block (SPARSE_Q/KV_BLOCK_SIZE)
  bool operator==(const TileStage&) const = default;
};

// ---------------------------------------------------------------------------------------------
// Operand preparation (Q, K, V): done once per input, before any tile runs.

// Where a mean is subtracted before quantization (smoothing), and what compensates it:
//  kNone
//  kTokens  per channel over all tokens of the head (SageAttention smooth K: `km = k.mean(dim=seq)`;
//           smooth V): for K nothing (a per-row constant cancels in softmax; the LSE is corrected
//           by q·mean·sm_scale as SageAttention's core.py does), for V the mean is added back in
//           the epilogue (SageAttention fused.cu MeanScaleKernel + fuse_v_scale "+ v_mean").
//  kBlock   per channel over each block of `mean_block` tokens (SageAttention2 §3.2 smooth Q by
//           block mean): the scores get ΔS = mean_q(block) · Kᵀ added after dequantization.
enum class MeanMode : std::uint8_t { kNone, kTokens, kBlock };

// How a scaled operand's groups get their scale.
//  kNone     no scale: a plain cast of the FP32 input to `enc` under `cast`.
//  kInteger  symmetric integer quantization (numerics/quantize.hpp `quantizer`, whose bits must
//            match `enc`).
//  kFloat    a float encoding scaled per group to `float_max` (SageAttention per_channel_fp8:
//            scale = amax / 448, q = cvt.rn.satfinite(x · (448 / amax)); 2.25 for SageAttention2++).
enum class ScaleMode : std::uint8_t { kNone, kInteger, kFloat };

// Where a scaled operand's scale is applied.
//  kProduct  the product runs on the unscaled encodings and the kernel dequantizes its result:
//            S = acc · s_q · s_k (Q, K), per chunk or in the epilogue (V) - every quantized kernel.
//  kOperand  the operand is dequantized first, x̂ = fl(q · s) rounded to `dequant_to`, and the
//            product runs on x̂ (KIVI's dequantize-then-FP16-GEMM).
//  kReciprocal  V only, a per-tensor or per-channel scale: multiplied into the epilogue's 1/l
//            before it multiplies O, out = O · fl(inv · s_v) (FA3 FP8: `scale = inv_sum *
//            v_descale`, hopper/softmax.h finalize), instead of O·inv then ·s_v.
enum class ScaleAt : std::uint8_t { kProduct, kOperand, kReciprocal };

// A factor applied to the FP32 input before anything else (SageAttention 1 Triton per_block:
// `q = q * (sm_scale * 1.44269504)` before quantization; the exp stage then uses scale 1).
// kSqrtSm: Q and K each times fl32(sqrt(sm_scale)) (sqrt in double), after the input rounding:
// PyTorch's math SDPA backend (attention.cpp _scaled_dot_product_attention_math: `scaling_factor =
// calculate_scale(q, scale).sqrt()`, q·f and k·f on the upcast FP32 tensors); the score is then
// already scaled (coefficient 1, or log2 e for exp2).
enum class Prescale : std::uint8_t { kNone, kSmScale, kSmScaleLog2e, kSqrtSm };

// How a float-scaled operand's scale and reciprocal are computed (ScaleMode::kFloat).
//  kIeee      scale = amax / max, inv = max / amax, y = x · inv (IEEE)
//  kMufuRcp   scale = amax × rcp(max), inv = rcp(amax) × max, y = x × inv: SageAttention's
//             MeanScaleKernel under --use_fast_math (bare MUFU.RCP + FMUL.FTZ, no range scaling;
//             SASS read on the H100, data/hw/h100/sage/README.md)
enum class FloatScaleRule : std::uint8_t { kIeee, kMufuRcp };

// How a kTokens mean is computed.
//  kFp64         in FP64 over the tokens, rounded once to mean_enc (torch's mean accumulates in FP32
//                and rounds once to the input dtype: the same value but at ties).
//  kSageChannel  SageAttention's smooth V (fused.cu MeanScaleKernel<64, true>): the FP32 sum of the
//                tokens zero-padded to a multiple of 16, in the kernel's order (numerics/reduce.hpp
//                sage_mean_scale_sum), times MUFU.RCP(L16); the zero padding also enters the group
//                amax (as 0 − mean). UNVERIFIED: no recording takes this path.
enum class MeanRule : std::uint8_t { kFp64, kSageChannel };

struct OperandSpec {
  // The format the tensor arrives in: the FP32 input is rounded to it first (RNE), before any
  // mean, scale or cast (the kernels' fp16/bf16 inputs). fp32: as given.
  Encoding input = Encoding::kFp32;
  Encoding enc = Encoding::kFp32;
  // Float encodings: how the FP32 value (or the scaled value) is rounded (CUDA cvt.rn; fp8
  // operands use cvt.rn.satfinite, set by the presets).
  Policy cast = kCudaRn;
  ScaleMode scale = ScaleMode::kNone;
  GroupMap groups;                                    // kInteger / kFloat
  SymmetricQuantizer quantizer = kSymmetricInt8;      // kInteger
  float float_max = 448.0f;                           // kFloat
  FloatScaleRule float_rule = FloatScaleRule::kIeee;  // kFloat
  ScaleAt apply = ScaleAt::kProduct;
  Encoding dequant_to = Encoding::kFp32;  // kOperand: x̂ = fl(q · s) in this float encoding
  MeanMode mean = MeanMode::kNone;
  int mean_block = 128;                     // kBlock
  Encoding mean_enc = Encoding::kFp32;      // the mean is computed in FP64, rounded once to this
  Encoding centered_enc = Encoding::kFp32;  // x − mean (an FP32 subtraction) rounded to this
  MeanRule mean_rule = MeanRule::kFp64;     // kTokens
  Prescale prescale = Prescale::kNone;

  bool operator==(const OperandSpec&) const = default;
};

// ---------------------------------------------------------------------------------------------
// The stages after preparation.

// The QKᵀ product: the inner-product model and how an int32 accumulator becomes FP32: rne
// (cvt.rn.f32.s32, Triton .to(f32)) or rz (SageAttention2 __int2float_rz).
struct QkStage {
  DotModel dot{DotModel::kFp32};
  Round int_cvt = Round::kNearestEven;
  // An instruction model sees head_dim in Triton's kWidth-4 operand order (dot operands upcast
  // from 8-bit data, ttgir `dot_op<{kWidth = 4}>`): in every whole 32-wide chunk the first k16
  // instruction takes the k with k mod 4 in {0, 1}, the second the rest (kwidth4_index).
  bool kwidth4 = false;
  bool operator==(const QkStage&) const = default;
};

// Triton's kWidth-4 dot-operand order (Triton 3.6, mma.sync m16n8k16 with 16-bit operands that
// were upcast from 8 bits: a thread loads 4 consecutive k with one ld.shared.v2.b32 and gives the
// first pair to one k16 instruction and the second pair to the next; VLLM_NOTES.md "FP8 KV"):
// position k of the reduction (n long) reads element kwidth4_index(k, n). In every whole 32-wide
// chunk the first 16 positions are the elements with index mod 4 in {0, 1}, the next 16 the rest;
// a tail shorter than 32 is natural.
inline int kwidth4_index(int k, int n) {
  const int c0 = k & ~31;
  if (n - c0 < 32) return k;
  const int r = k & 31;
  return c0 + (r < 16 ? (r / 2) * 4 + (r & 1) : ((r - 16) / 2) * 4 + 2 + (r & 1));
}

// How the QKᵀ accumulator becomes a score.
//  kScore  S = fl(fl(acc) · fl(s_q · s_k)): SageAttention's masked path (`S * dequant_scale`),
//          SageAttention 1 Triton (`qk.to(f32) * (q_scale * k_scale)`), TurboAttention Alg. 1.
//  kFold   the dequantization folds into the exponent: c = fl(scale_log2 · fl(s_q · s_k)) and
//          x = fma(fl(acc), c, −m) (SageAttention2 main loop, `sm_scale_eff`); needs the scaled
//          max domain.
//  kDescale  FA3 FP8: the per-tensor descales fold into the exponent's coefficient on the device,
//          c = fl(fl(scale_log2 · s_q) · s_k) (mainloop_fwd_sm90_tma_gmma_ws.hpp), S stays the
//          raw accumulator and the raw max is taken over it (one c per row: per-tensor scales).
enum class Dequant : std::uint8_t { kScore, kFold, kDescale };

// The max the exponent subtracts.
//  kRaw     m in score units, max_scaled = m·scale computed per block (FA2 softmax_rescale_o).
//  kScaled  m in exponent units: the block max of fma(s, c, −offset) (SageAttention2
//           attn_utils.cuh update_mdo, FlashMLA `cur_max *= scale_softmax_log2`).
enum class MaxDomain : std::uint8_t { kRaw, kScaled };

// How the exponent's coefficient scale_log2 = sm_scale · log2 e is formed.
//  kHostDouble   fl32(double(fl32(sm_scale)) · log2 e): FA2's host (set_params_fprop).
//  kDeviceFloat  fl32(fl32(sm_scale) × fl32(log2 e)) (FMUL.FTZ on the device): SageAttention's
//                CUDA kernels (`sm_scale *= math::log2e`).
//  kScoreFirst   no product: every score is first rounded as fl(acc · fl32(sm_scale)), then the
//                exponent's coefficient is fl32(log2 e), so x = fl(fl(acc · sm_scale) · log2 e):
//                the CUTLASS fmha of PyTorch's efficient backend built with kSupportsBias
//                (kernel_forward.h: `accum = p.scale * accum` before iterative_softmax multiplies
//                by `1.0f * kLog2e`). The score stage carries the scale; the LSE's raw-score
//                coefficient is 1.
enum class ScaleLog2 : std::uint8_t { kHostDouble, kDeviceFloat, kScoreFirst };

// Which softmax scale the exponent (and a prescaled Q, and the LSE) uses.
//  kInput  the input's (1/√d unless the dump says otherwise)
//  kOne    1: the scale left out (TurboAttention Algorithm 1 as printed, sim/turbo README item e)
enum class SmScale : std::uint8_t { kInput, kOne };

// Which KV blocks the exponent's FMA contraction (SoftmaxStage::fma) happens in.
//  kAll            every block.
//  kFullDivisible  only blocks a block mask marks fully visible (or every block without a mask),
//                  and only when the query and key lengths are multiples of 128: FlexAttention
//                  as Triton 3.6 and ptxas compile it for sm_90 (the SASS: a mask or
//                  CHECK_BLOCK_BOUNDARY select between `* RCP_LN2` and `- m_ij` keeps FMUL then
//                  FADD; torch sets IS_DIVISIBLE from the lengths modulo 128).
enum class FmaBlocks : std::uint8_t { kAll, kFullDivisible };

// How a softcapped input's s -> C·tanh(s / C) is computed (AttentionInput::softcap; applied to the
// scaled score, before the mask).
//  kExact      C·tanh(s / C) in FP64, rounded once to the state.
//  kLibdevice  FlexAttention's score_mod as Inductor writes it and Triton 3.6 compiles it:
//              fl(tanhf(fl(s · fl32(1/C))) · fl32(C)), tanhf = libdevice's __nv_tanhf
//              (numerics/special tanhf_libdevice). Needs scale_log2=score (the scaled score).
//  kExpDiv     vLLM's apply_softcap (triton_attention_helpers.py) as Triton 3.6 compiles it:
//              u = div.full(s, C), p1 = tl.exp(u), p2 = tl.exp(fl(0 − u)) (ExpFn::kEx2ApproxLog2e),
//              fl(C · fl(p1 − p2)) div.full fl(p1 + p2). Needs scale_log2=score.
enum class SoftcapFn : std::uint8_t { kExact, kLibdevice, kExpDiv };

// The running max of a row whose keys so far were all masked (the block max is -inf).
//  kKeep  the state stays empty (m = -inf); the block's exponent uses 0 in its place (FA2
//         Check_inf), so the next visible block starts afresh.
//  kZero  m becomes 0 and is carried as the running max (Triton kernels' `m_j = tl.where(m_j >
//         float("-inf"), m_j, 0.0)` stored back as M: vLLM's unified_attention), so a later
//         block's max is max(0, its scores).
enum class EmptyMax : std::uint8_t { kKeep, kZero };

// How the row sum l is accumulated (sim/pipeline/stages/row_sum.cpp holds every variant).
//  kQuad        SM80 FA2: 4 partial sums per row (quad lane t owns columns 8n+2t, 8n+2t+1), each p
//               added to its lane in column order, combined (l0 + l2) + (l1 + l3) in the epilogue.
//  kSingle      one sum in key order.
//  kSageLanes   SageAttention2's CUDA-core denominator (attn_utils.cuh, SASS on the H100): per
//               lane and 16-key tile T = ((p(2t) + p(2t+1)) + p(8+2t)) + p(9+2t); per block
//               l = fma(alpha, l, T_0) (the rescale fused into the first add), then l += T_1, ...
//               in tile order; lanes combined (l0 + l1) + (l2 + l3) (shuffle xor 1, then 2).
//  kMma         SageAttention sm80's tensor-core row sum: l = mma(P as cast, ones, C = l·alpha)
//               with the `row_sum_dot` instruction, chained over the block's 16-key steps.
//  kTritonTree  Triton's tl.sum per block (SageAttention 1, Triton 3.6 SASS): lane t folds its
//               columns 2t, 2t+1, 8+2t, 9+2t, ... in order, then (a0 + a2) + (a1 + a3); the
//               running sum is l = fma(l, alpha, block sum).
//  kQuadFma     kQuad with the rescale of each lane's sum fused into its first add of the block,
//               l = fma(l, alpha, p_first) + p_next + ...: how nvcc (-fmad=true) compiles FA2's
//               `row_sum *= scores_scale` followed by reduce_sum (SASS of FA2's softmax code built
//               with ONNX Runtime's flags, sim/lean/README.md).
//  kQuadBlock   cuDNN's sm90 SDPA kernel (SASS read on the H100, sim/sdpa/README.md): per quad lane t
//               (columns 8n+2t, 8n+2t+1) the block's partial b_t = ((0 + p_c0) + p_c1) + ... in
//               column order, then l_t = fma(alpha, l_t, b_t); lanes combined (l0 + l1) + (l2 + l3)
//               (butterfly xor 1, then 2).
//  kCutlassWarps  the CUTLASS fmha kernel of PyTorch's efficient backend (kernel_forward.h
//               iterative_softmax, its sm_90 SASS): the block's columns split between the MM0
//               column warps of 32 keys each (WarpShape 32x32: bk/32 warps); in each, quad lane t
//               sums its columns from 0 in order, the lanes (b0 + b1) + (b2 + b3);
//               l = ((fl(l·alpha) + w0) + w1) + ... in warp order (addition_storage). One lane.
//  kWarpSum     PyTorch's softmax_warp_forward over one block: element j on lane j % W,
//               W = min(next_pow2(block keys), 32), each lane from 0 in j order, then a butterfly
//               xor W/2 ... 1; l = fl(l·alpha) + that. One lane.
//  kTritonWarps  Triton's tl.sum over an MMA-v2 layout with `rowsum_warps` (W) warps along N
//               (TTGIR `warpsPerCTA = [1, W]`, instrShape [16, 8]: FlexAttention's decode template,
//               vLLM's unified_attention): 8-key tile g of the block belongs to warp g mod W (the
//               CTA tile of 8W columns repeats along the block); in each warp, lane t folds its
//               columns in order and the quad gives (a0 + a2) + (a1 + a3) (xor 2, then 1); the
//               warps' sums meet through shared memory in a butterfly from the highest bit
//               ((W0 + W2) + (W1 + W3), W0 + W1; warps that only replicate others when the block
//               has fewer than W tiles do not count); l = fma(l, alpha, block sum). One lane.
//               W = 1 is kTritonTree.
//  kAtomicWarps cuDNN's sm80 decode kernel (flash_fprop_wmma 16x128, 4 warps of 32 keys; SASS read
//               on the H100, sim/sdpa/README.md): per quad lane t, each warp w sums its 8 columns
//               32w + 8g + 2t, 32w + 8g + 2t + 1 (g = 0..3) from 0 in order; the 4 warps' partials
//               are added into one per-lane float zeroed every block, by a shared-memory atomic
//               (a plain FADD, no .ftz) in the order `rowsum_order` (which warp gets there first:
//               fit per kernel); then l_t = fma(alpha, l_t, that sum); lanes (l0 + l1) + (l2 + l3).
//               Needs bk = 128.
enum class RowSum : std::uint8_t {
  kQuad, kSingle, kSageLanes, kMma, kTritonTree, kQuadFma, kQuadBlock, kCutlassWarps, kWarpSum,
  kTritonWarps, kAtomicWarps
};

// What the LSE output is (computed from the state, so it belongs to the softmax stage).
//  kNatural   natural-log LSE (FA2's m·sm_scale + log(l), or the scaled reference's form).
//  kLog2Mufu  lg2.approx.ftz(l) + m in FP32, base 2 in the exponent's units (SageAttention's CUDA
//             kernels return this; the Python wrapper converts it).
//  kLog2Libdevice  libdevice log2f(l) + m (SageAttention 1's Triton kernel).
//  kLog2LibdeviceLn2  fl(fl(log2f(l) + m) · fl32(ln 2)): FlexAttention's natural-log LSE (the
//             template stores m + log2(l); an Inductor pointwise kernel multiplies it by ln 2).
// The FP32 kernels' natural-log forms (sim/sdpa/README.md, sim/fa3/README.md), with .ftz when the
// state is (SoftmaxStage::ftz); l' = l·2^-max_offset (FA3 FP8), LSE = +inf for l = 0 or NaN:
//  kNaturalFma   fma(m, k, __logf(l')), __logf = lg2.approx · ln 2 (numerics/special fast_logf):
//                k = the softmax scale with a raw max (FA2 normalize_softmax_lse: `max *
//                softmax_scale + __logf(sum)` contracted), ln 2 with a scaled one (cuDNN: `max *
//                ln2 + __logf(sum)`).
//  kNaturalFmaC  fma(m, fl(c·ln 2), __logf(l')), m raw, c the exponent's coefficient (FA3
//                finalize: `softmax_scale_log2 * float(M_LN2)`).
//  kNaturalDiv   fl(fl(m / fl(log2 e)) + logf(l')), m scaled, IEEE division, libdevice logf (the
//                CUTLASS fmha kernel: `mi / kLog2e + log(s_prime)`).
//  kNaturalLg2Fma  fma(lg2.approx(l), ln 2, fl(m · ln 2)), m scaled: cuDNN's decode kernel, whose
//                split epilogue writes m·ln 2 and whose lean_reduction_kernel ends with
//                FFMA(lg2(l), ln2, m) (sim/sdpa/README.md).
enum class LseModel : std::uint8_t {
  kNatural, kLog2Mufu, kLog2Libdevice, kNaturalFma, kNaturalFmaC, kNaturalDiv, kLog2LibdeviceLn2,
  kNaturalLg2Fma
};

// State arithmetic: m, l, O, the exp argument and the rescale in FP32 (the kernels) or FP64.
enum class StateType : std::uint8_t { kFp32, kFp64 };

// The online softmax: the state, the max, the exponent's argument and the row sum.
struct SoftmaxStage {
  StateType state = StateType::kFp32;
  // The exponent's base: exp2 with the folded scale_log2 (FA2/FA3/flashinfer/SageAttention), or
  // the textbook e^((s − m)·sm_scale) (TurboAttention's SAS, AMLA/Ascend's Exp).
  ExpKind base = ExpKind::kExp2;
  ScaleLog2 scale_log2 = ScaleLog2::kHostDouble;
  SmScale sm_scale = SmScale::kInput;
  Dequant dequant = Dequant::kScore;
  // With dequant=fold: the last `dequant_tail` KV blocks of a tile (those that carry a mask in
  // SageAttention2: the last two on sm80/sm89, the last one on sm90) take the score path instead,
  // S = fl(acc · dq) then the plain coefficient (attn_utils.cuh masked path).
  int dequant_tail = 0;
  MaxDomain max_domain = MaxDomain::kRaw;
  double max_offset = 0.0;  // subtracted from the scaled max (SageAttention FP8 8.807, FA3 FP8 8)
  bool fma = true;          // fuse s·c − max_scaled into one FMA (nvcc --fmad=true)
  FmaBlocks fma_blocks = FmaBlocks::kAll;  // which blocks the fusion happens in
  SoftcapFn softcap = SoftcapFn::kExact;   // a softcapped input's tanh
  EmptyMax empty_max = EmptyMax::kKeep;    // the max of a row that has seen only masked keys
  // The score of a masked key (FA2 -inf; SageAttention -5e6).
  double mask_value = -std::numeric_limits<double>::infinity();
  RowSum row_sum = RowSum::kQuad;
  int rowsum_warps = 2;  // RowSum::kTritonWarps: the warps along N (1, 2, 4 or 8)
  // RowSum::kAtomicWarps: the order in which the 4 warps' partials reach the per-lane sum (a
  // permutation of 0..3; the first two commute).
  std::array<std::uint8_t, 4> rowsum_order{0, 1, 2, 3};
  DotModel row_sum_dot{DotModel::kMma, MmaInstr::kHmmaF16F32, 0};  // RowSum::kMma
  LseModel lse = LseModel::kNatural;
  // The state's FP32 arithmetic with .ftz (--use_fast_math; cuDNN's NVRTC kernels: every FMUL,
  // FADD, FFMA of its SASS is .FTZ): the max, the exponent's arguments, alpha's argument, the row
  // sum and its lanes, the epilogue's O·(1/l) and the LSE flush subnormal inputs and results
  // (numerics/special fmul_ftz, fadd_ftz, fma_f32 ftz). An FP32 state's only.
  bool ftz = false;
  bool operator==(const SoftmaxStage&) const = default;
};

// The exp function: a model from numerics/exp_model.hpp (libm, FP64-exact, the H100's MUFU
// ex2.approx{.ftz}) or a technique's hook (ExpFn::kHook).
struct ExpStage {
  ExpFn fn = ExpFn::kLibm;
  HookRef<ExpHook> hook;
  bool operator==(const ExpStage&) const = default;
};

// Where P's scale comes from when P is cast to a scaled encoding (TurboAttention Alg. 1: P̃
// quantized per block with s = max|P̃| / 119): kNone (P cast as is), kRow (one scale per row and
// KV block), kTile (one per tile and KV block). The P·V chunk is multiplied by it (needs kChunk).
enum class PScale : std::uint8_t { kNone, kRow, kTile };

// P normalized before P·V (the softmax, then the GEMM): kNone, or kWarpSum: P = p / s in FP32
// (IEEE division), s the row's sum in softmax_warp_forward's order (RowSum::kWarpSum), computed
// over the block: one KV block must hold every key of a row (PyTorch's math SDPA backend). O is then
// final: the epilogue leaves it (Normalize::kNone).
enum class PNorm : std::uint8_t { kNone, kWarpSum };

struct PStage {
  Encoding enc = Encoding::kFp32;  // P is rounded to this before P·V (FA2 convert_type<Element>)
  Policy cast = kCudaRn;
  PScale scale = PScale::kNone;
  SymmetricQuantizer quantizer = kSymmetricInt8;  // integer P with a scale
  // A static scale of P (SageAttention2 Alg. 1 line 6: `(P̃ · 448).to(FP8.e4m3)`, §3.3 δ_P =
  // 1/448): P is cast as fl32(p · s), and the normalized O divided by s (line 8: `/448 · δ_V`).
  // An integer P (s8/s4/s2) is rounded by cvt.rni.sat and multiplied into int32 chunks
  // (pv_acc=chunk). 0: none. The row sum takes the unscaled p.
  double static_scale = 0.0;
  PNorm norm = PNorm::kNone;
  bool operator==(const PStage&) const = default;
};

// How P·V reaches O.
//  kIntoC  O is the product's C operand: O = dot(P, V, C = O) (FA2 gemm_rs(acc_o, tOrP, tOrVt),
//          SageAttention2 pv_accum "fp32").
//  kChunk  each KV block's product starts from zero and is added to O (SageAttention2
//          "fp32+fp32": buf = mma(P, V, 0); RO += buf; TurboAttention O += s_P · s_V · (P̃ V)).
enum class PvAccumulate : std::uint8_t { kIntoC, kChunk };

// How a chunk lands on O (PvAccumulate::kChunk).
//  kFadd   an IEEE FADD (or the fused rescale's FFMA) in registers
//  kRedFtz the H100's float `atomicAdd` on O in global memory (RED.E.ADD.F32.FTZ.RN, probed in
//          data/hw/h100/amla): subnormal inputs and results flushed to zero (sign kept), a NaN
//          result is 0x7FFFFFFF (cuda_check/amla's kernel)
//  kFaddFtz the FADD.FTZ of a kernel built with --use_fast_math, in registers: the same rounding
//          as kRedFtz (flush-to-zero operands and result, round to nearest even, the canonical
//          NaN); vLLM's FlashAttention-3 fork's two-level FP8 accumulation (hopper/utils.h gemm:
//          tCrC = tCrC_original + tCrC)
//  kCutlassEpilogue  the CUTLASS fmha's epilogue MemoryEfficientAttentionNormalize when O lives in
//          an FP32 buffer between KV blocks (kMaxK > kKeysPerBlock: PyTorch's
//          fmha_cutlassF_*_32x128_gmem_sm80): the tile's first block O = fl(a·chunk), later
//          blocks O = fma(a, chunk, fl(fl(a·alpha)·O)), with a = fl(1/l) (1 for l = 0) in the
//          tile's last block and 1 before it: the rescale and the epilogue's division happen
//          here (rescale_fused, norm=none; a one-lane row sum, ascending blocks).
enum class ChunkAdd : std::uint8_t { kFadd, kRedFtz, kFaddFtz, kCutlassEpilogue };

// The chunk adds that flush subnormals to zero (FADD.FTZ and RED.ADD.F32.FTZ round alike).
constexpr bool ftz_chunk_add(ChunkAdd a) { return a == ChunkAdd::kRedFtz || a == ChunkAdd::kFaddFtz; }

struct PvStage {
  DotModel dot{DotModel::kFp32};
  Round int_cvt = Round::kNearestEven;  // an int32 chunk -> FP32 (cvt.rn.f32.s32)
  PvAccumulate acc = PvAccumulate::kIntoC;
  ChunkAdd chunk_add = ChunkAdd::kFadd;
  // pv_flush: 0 off; N >= 1 (with pv_acc=c): the interval two-level FP8 accumulation of
  // vllm-project/flash-attention #122 (merged, then reverted by #136): O, the tensor-core
  // accumulator, runs as C across KV blocks and is rescaled with every block; a deferred-scale FP32
  // accumulator A (scale s, s = s·alpha each block after the first) takes it every N blocks,
  // A = fma(s, A, O), s = 1, O = 0 (after the block's rescale, before its P·V; before the last
  // block's P·V also when the tile's block count is a multiple of N), and at the end O = fma(s, A,
  // O) before the epilogue. The state's FTZ applies (SoftmaxStage::ftz).
  int flush = 0;
  // The instruction models see the keys of each 16-key group in SageAttention's V order
  // [0,1,8,9,2,3,10,11,4,5,12,13,6,7,14,15] (fused.cu TransposePadPermute; P packed to match):
  // which keys share an emulated FP8 mma.sync's first HMMA depends on it.
  bool perm16 = false;
  // The instruction models see each whole 32-key chunk of a block in Triton's kWidth-4 operand
  // order (QkStage::kwidth4, kwidth4_index): vLLM's P·V with K/V upcast from FP8.
  bool kwidth4 = false;
  // O's accumulator: fp32, or fp16 (SageAttention sm80 pv_accum "fp16": O kept in halves,
  // rescaled by __hmul2 with fl16(alpha), P·V on HMMA with an fp16 accumulator).
  Encoding o_accum = Encoding::kFp32;
  // pv_warps: 1, or 4: the block's keys split into `warps` equal spans, each warp keeping its own
  // O over all of head_dim for its keys (product into its C, rescaled with every block), combined
  // (O0 + O2) + (O1 + O3) in the epilogue (FADD, .ftz with SoftmaxStage::ftz): cuDNN's sm80 decode
  // kernel, 4 warps of 32 keys of a 128-key tile (sim/sdpa/README.md). Needs pv_acc=c.
  int warps = 1;
  bool operator==(const PvStage&) const = default;
};

// The max snapped to an integer in the exponent's units (base 2 only), so every rescale factor is
// an exact power of two: kNone, kCeil (p <= 1), kNearest (ties away, AMLA's CAST_ROUND of
// −m/ln 2: p <= 2^0.5).
enum class MaxRound : std::uint8_t { kNone, kCeil, kNearest };

// How O (and l) follow a new max.
//  kMultiply  O·alpha in the state's arithmetic (every FlashAttention).
//  kIntAdd    AMLA Eq. 3/7: O's FP32 bits as INT32 plus N·2^23 with N = snap(m_old) − snap(m_new)
//             (numerics/fp32_bits.hpp mul_pow2_by_int_add; FP64 state: the same on the FP64 bits
//             with N·2^52), the failure modes of Lemma 3.1 included; l is multiplied by 2^N.
//             Needs a snapped max.
//  kHook      a technique's own rescale (AMLA Algorithm 2 lines 8-17, sim/amla): per row and KV
//             block, `RescaleHook::step` sees the row's new max and returns the INT32 added to O's
//             FP32 bits and the factor P is multiplied by before its cast; l follows
//             alpha = exp(m_old − m) as with kMultiply; `RescaleHook::finish` is the epilogue.
//             Needs an FP32 state, an unsnapped max and pv_acc=chunk (the product lands on O by
//             an add after the integer add, AMLA's two atomic adds).
//  kDivide    O / alpha (l still multiplied): TurboAttention Algorithm 1 line 12 as printed,
//             `diag(SAS(m_old − m_new))^{-1} O` (sim/turbo/README.md item d, the literal reading).
//             A row's first block leaves its O (zero) as it is instead of computing 0/0; a later
//             alpha of 0 (a max jump past SAS's threshold) gives Inf/NaN, as the text implies.
//  kMultiplyFtz  O = fmul.ftz(O, alpha) (FMUL.FTZ: cuDNN's and FA3's fast-math rescale). FP32 state.
enum class Rescale : std::uint8_t { kMultiply, kIntAdd, kHook, kDivide, kMultiplyFtz };

struct RescaleStage {
  Rescale kind = Rescale::kMultiply;
  MaxRound max_round = MaxRound::kNone;
  // With pv_acc=chunk: O = fma(alpha, O, chunk) in one rounding (the multiply of the rescale fused
  // into the chunk's add, as nvcc contracts SageAttention2's RO flush), instead of O·alpha then +.
  bool fused = false;
  HookRef<RescaleHook> hook;  // kHook
  bool operator==(const RescaleStage&) const = default;
};

// The epilogue's O / l.
//  kRcp           inv = 1/l (IEEE; 1 when l is 0 or NaN), O·inv: FA2 normalize_softmax_lse.
//  kDiv           O / l (IEEE; O unchanged when l is 0 or NaN): Triton `acc / l_i`, AMLA RowDivs.
//  kRcpApproxFtz  inv = rcp.approx.ftz(l) (numerics/special.hpp, the H100's MUFU.RCP), O·inv:
//                 SageAttention2 normalize_d, FA2 built with --use_fast_math.
//  kDivFull       O / l by div.full.f32 (numerics/special.hpp div_full): Triton's `acc / l_i`.
//  kNone          O as accumulated: P was normalized before P·V (PStage::norm).
enum class Normalize : std::uint8_t { kRcp, kDiv, kRcpApproxFtz, kDivFull, kNone };

struct NormalizeStage {
  Normalize kind = Normalize::kRcp;
  bool operator==(const NormalizeStage&) const = default;
};

struct OutStage {
  Encoding enc = Encoding::kFp32;  // fp64, fp32, bf16 or fp16
  Policy cast = kCudaRn;
  bool operator==(const OutStage&) const = default;
};

// A whole attention kernel's arithmetic. The member initializers are FlashAttention-2's choices
// (sim/flash/README.md): the one place FA2's defaults live.
struct Pipeline {
  TileStage tile;
  OperandSpec q, k, v;
  QkStage qk;
  SoftmaxStage softmax;
  ExpStage exp;
  PStage p;
  PvStage pv;
  RescaleStage rescale;
  NormalizeStage normalize;
  OutStage out;
  bool operator==(const Pipeline&) const = default;
};

// The pipeline with every field that its choices make irrelevant reset to its default (a cast
// policy of an FP32 operand, the groups of an unscaled one, a row-sum instruction without
// rowsum=mma, ...): two pipelines that compute the same thing compare equal after this. Presets
// and the option parser return canonical pipelines.
Pipeline canonical(Pipeline p);

// One line naming every stage's choice: the method-string options of the pipeline
// (sim/pipeline/options.hpp), "key=value" separated by commas, e.g. "bq=64,bk=64,...": pasted
// after `flash:` it runs this pipeline.
std::string describe(const Pipeline& p);
// Throws std::invalid_argument with one line when the stages cannot be combined (the coupling
// rules of sim/pipeline/couplings.hpp: an instruction whose operand formats are not what the
// preparation produces, a fold without the scaled max, ...).
void validate(const Pipeline& p);

// ---------------------------------------------------------------------------------------------
// Prepared operands and inputs.

// One prepared operand, every (batch, head) slice [tokens, dim] row-major.
struct PreparedOperand {
  Encoding enc = Encoding::kFp32;  // the encoding the products see
  int slices = 0, tokens = 0, dim = 0;
  // Decoded values the CUDA-core/FP64 products multiply: the input as cast, or the unscaled
  // integers / scaled floats of a kProduct-quantized operand, or x̂ of a kOperand one.
  std::vector<float> values;
  // The same elements as encodings, [slices][tokens][dim_pad] with zero padding to dim_pad (a
  // multiple of the instruction's k): filled only when a product model is an instruction.
  std::vector<std::uint32_t> bits;
  int dim_pad = 0;
  // kProduct scales: per slice, `groups_per_slice` of them; empty when unscaled.
  GroupMap groups;
  std::vector<float> scales;
  int groups_per_slice = 0;
  // V: whether a channel's scale changes from key to key (per-block groups): the P·V product is
  // then dequantized per KV block instead of in the epilogue.
  bool key_dependent_scale = false;
  // The subtracted mean (FP32 values of mean_enc): [slices][means_per_slice][dim]; empty if none.
  std::vector<float> mean;
  int means_per_slice = 0;
  MeanMode mean_mode = MeanMode::kNone;
  int mean_block = 0;

  const float* row(int slice, int t) const {
    return values.data() + (std::size_t(slice) * tokens + std::size_t(t)) * dim;
  }
  const std::uint32_t* row_bits(int slice, int t) const {
    return bits.data() + (std::size_t(slice) * tokens + std::size_t(t)) * dim_pad;
  }
  bool scaled() const { return !scales.empty(); }
  float scale(int slice, int t, int c) const {
    return scales[std::size_t(slice) * groups_per_slice +
                  std::size_t(groups.group(t, c, tokens, dim))];
  }
};

struct PreparedInput {
  AttentionShape shape;
  bool causal = false;
  int window = 0;        // AttentionInput::window
  double softcap = 0.0;  // AttentionInput::softcap
  LaunchRef launch;      // AttentionInput::launch
  double sm_scale = 0;  // the softmax scale the pipeline uses (SoftmaxStage::sm_scale)
  PreparedOperand q, k, v;
  // ΔS of a block-mean-smoothed Q: [batch·heads_q][q_mean_blocks][len_kv], FP32; empty if none.
  std::vector<float> delta_s;
  // The LSE correction of a mean-smoothed K: [batch·heads_q·len_q] q·mean_k·sm_scale (FP64).
  std::vector<double> lse_shift;
};

PreparedInput prepare(const AttentionInput& in, const Pipeline& p);
// prepare() with Q alone: K and V are left empty for a caller that holds them in its own form
// (TurboAttention's decode reads them from its compressed cache, KIVI's from its quantized one).
// The caller fills k and v with prepared_operand() before running tiles.
PreparedInput prepare_queries(const AttentionInput& in, const Pipeline& p);

// Which operand of the pipeline (Q, K or V).
enum class Operand : std::uint8_t { kQ, kK, kV };
// An operand whose values (and, when the spec is scaled, per-slice scales of `groups`) a
// technique computed itself (a KV cache's dequantized integers), completed by the same code as
// prepare(): the encodings and padding the pipeline's product model needs. `values` are
// [slices][tokens][dim] in the operand spec's product encoding.
PreparedOperand prepared_operand(const Pipeline& p, Operand which, int slices, int tokens, int dim,
                                 std::vector<float> values, std::vector<float> scales = {},
                                 GroupMap groups = {}, int groups_per_slice = 0);

// ---------------------------------------------------------------------------------------------
// Running tiles.

// The result of a run: O in the output encoding's values, the LSE per row (natural log, or the
// base-2 form of SoftmaxStage::lse; rounded to FP32 in an FP32 state). A row that sees no key has
// O = 0 and LSE -inf: one convention everywhere (sim/pipeline/README.md, "Empty rows").
struct PipelineResult {
  std::vector<double> o;    // [batch, heads_q, len_q, head_dim_v]
  std::vector<double> lse;  // [batch, heads_q, len_q]
};

// One query tile: batch b, query head h, rows [q_begin, q_begin + rows).
struct Tile {
  int batch = 0, head = 0, q_begin = 0, rows = 0;
};
// Work item `item` of the (batch, query head, Q block) enumeration, the Q block fastest: the tile
// of rows [qb·bq, min(qb·bq + bq, len_q)), qb = item mod cdiv(len_q, bq).
Tile tile_of_item(const AttentionShape& s, int bq, std::int64_t item);

// The online-softmax state of a tile's rows, contiguous: m [rows], l [rows][kMaxLanes] (the row
// sum's lanes, sim/pipeline/stages/row_sum.cpp), O [rows][dv], and a rescale hook's per-row state.
// Empty row (no key seen yet, or every key so far masked): m = -inf, every l = 0, O = 0.
template <class T>
struct TileState {
  static constexpr int kMaxLanes = 4;
  int rows = 0, dv = 0;
  std::vector<T> m, l, o;
  std::vector<std::array<double, 4>> hook;
  // PvStage::flush: the deferred-scale accumulator [rows][dv] and its scale [rows] (empty until
  // the flush stage first runs on this state).
  std::vector<T> acc_o, acc_scale;
  // PvStage::warps > 1: the O of warps 1.. [rows][warps − 1][dv] (warp 0's is `o`; empty until the
  // P·V stage first runs on this state).
  std::vector<T> warp_o;

  void reset(int rows_, int dv_) {
    rows = rows_;
    dv = dv_;
    m.assign(std::size_t(rows), -std::numeric_limits<T>::infinity());
    l.assign(std::size_t(rows) * kMaxLanes, T(0));
    o.assign(std::size_t(rows) * dv, T(0));
    hook.assign(std::size_t(rows), std::array<double, 4>{});
    acc_o.clear();
    acc_scale.clear();
    warp_o.clear();
  }
  bool empty(int i) const { return m[std::size_t(i)] == -std::numeric_limits<T>::infinity(); }
  T* lanes(int i) { return l.data() + std::size_t(i) * kMaxLanes; }
  const T* lanes(int i) const { return l.data() + std::size_t(i) * kMaxLanes; }
  T* o_row(int i) { return o.data() + std::size_t(i) * dv; }
  const T* o_row(int i) const { return o.data() + std::size_t(i) * dv; }
};

// Scratch buffers of one worker, reused across tiles (sim/pipeline/stages/buffers.hpp).
struct TileWorkspace;
struct TileWorkspaceDeleter {
  void operator()(TileWorkspace*) const;
};
using TileWorkspacePtr = std::unique_ptr<TileWorkspace, TileWorkspaceDeleter>;
TileWorkspacePtr make_workspace();

// The KV blocks a tile visits: blocks [0, n) with n = cdiv(len_kv, block_kv), and with a causal
// mask cdiv((q_begin + block_q) + len_kv − len_q, block_kv) (FA2 n_block_max: blocks wholly right
// of the tile's last diagonal are skipped; 0 when the tile sees no key).
int kv_blocks_of_tile(const PreparedInput& in, const Pipeline& p, const Tile& t);

// Runs KV blocks [kv_block_begin, kv_block_end) ∩ [0, kv_blocks_of_tile) of one tile into the
// rows' state (row i is query q_begin + i; `state` reset to t.rows rows of head_dim_v by the
// caller), in the pipeline's block order. Split schedules (LeanAttention, split-KV) call it once
// per segment and merge the states (merge_row).
template <class T>
void attend_tile(const PreparedInput& in, const Pipeline& p, const Tile& t, int kv_block_begin,
                 int kv_block_end, TileState<T>& state, TileWorkspace& ws);

// run_pipeline takes the query heads of a KV group together, block by block, when the tiles are
// short (decode, MLA), which changes no bits; tests turn it off to compare (default on).
void set_tile_grouping(bool on);
// How many grouped work items (KV group, Q block, part of the group) this process ran (tests).
std::int64_t grouped_tile_items();

// The epilogue of one tile: O / l (the normalize model), the static P scale, V's scale and mean,
// the output cast; writes rows of `o` ([rows][head_dim_v], values of the output encoding) and
// `lse` ([rows]).
template <class T>
void finish_tile(const PreparedInput& in, const Pipeline& p, const Tile& t,
                 const TileState<T>& state, double* o, double* lse);

// Row i of `a` absorbs row j of `b`, a state over a disjoint key set (flashinfer state_t::merge,
// FA2 split-KV combine, LeanAttention Algorithm 2's reduction): m = max(m_a, m_b), each side
// rescaled by e.alpha(m_side, m) lane by lane, l = l_a·s_a + l_b·s_b, o = o_a·s_a + o_b·s_b. An
// empty side is the identity, bit for bit.
template <class T>
void merge_row(TileState<T>& a, int i, const TileState<T>& b, int j, RowSum model,
               const ExpModel<T>& e);

// The row sum of row i: its lanes combined in the row-sum model's order (FA2 quad_allreduce_:
// (l0 + l2) + (l1 + l3); SageAttention2's normalize_d and cuDNN: (l0 + l1) + (l2 + l3)).
template <class T>
T row_sum_total(const TileState<T>& s, int i, RowSum model);
// The same in the softmax stage's arithmetic (FADD.FTZ with SoftmaxStage::ftz).
template <class T>
T row_sum_total(const TileState<T>& s, int i, const SoftmaxStage& st);

// O of row i as the epilogue sees it: the state's O, or with per-warp accumulators
// (PvStage::warps = 4) (O0 + O2) + (O1 + O3) (FADD, .ftz when `ftz`), into `out` (dv values).
template <class T>
void o_row_total(const TileState<T>& s, int i, bool ftz, T* out);

// The whole attention: every (batch, head, query block) tile over its whole KV range, tiles in
// parallel (OpenMP; results do not depend on the thread count: a tile is computed by one worker
// in a fixed order).
PipelineResult run_pipeline(const PreparedInput& in, const Pipeline& p);
PipelineResult run_pipeline(const AttentionInput& in, const Pipeline& p);

}  // namespace attnsim
