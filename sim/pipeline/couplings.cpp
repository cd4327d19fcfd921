// The pipeline's validity rules (see couplings.hpp), validate() and canonical().
#include "sim/pipeline/couplings.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <string>

#include "formats/encoding.hpp"
#include "sim/pipeline/stages/stages.hpp"  // row_sum_lanes

namespace attnsim {

namespace {

using Why = std::optional<std::string>;

bool is_int(Encoding e) { return !is_float_encoding(e); }
bool is_fp8(Encoding e) { return e == Encoding::kE4m3fn || e == Encoding::kE5m2; }

// The encoding an operand reaches its product in.
Encoding product_encoding(const OperandSpec& s) {
  return s.scale != ScaleMode::kNone && s.apply == ScaleAt::kOperand ? s.dequant_to : s.enc;
}

Why operand_rules(const char* name, const OperandSpec& s) {
  const std::string n(name);
  if (s.enc == Encoding::kFp64)
    return n + ": fp64 is not an operand encoding (the input is FP32, fp32 keeps it exact)";
  if (s.enc == Encoding::kU8) return n + ": u8 operands are not supported (use s8)";
  if (s.scale == ScaleMode::kNone && is_int(s.enc))
    return n + ": " + encoding_name(s.enc) + " operands need an integer quantizer with scale groups";
  if (s.scale == ScaleMode::kInteger) {
    if (!is_int(s.enc))
      return n + ": an integer quantizer needs an integer encoding (s8, s4, s2), not " +
             encoding_name(s.enc);
    if (s.quantizer.bits != encoding_traits(s.enc).bits)
      return n + ": quantizer " + s.quantizer.name + " makes " + std::to_string(s.quantizer.bits) +
             "-bit integers, the encoding is " + encoding_name(s.enc);
  }
  if (s.scale == ScaleMode::kFloat) {
    if (!is_float_encoding(s.enc) || s.enc == Encoding::kFp32)
      return n + ": a float scale needs a narrow float encoding (bf16, fp16, e4m3fn, e5m2)";
    if (!(s.float_max > 0.0f) || !std::isfinite(s.float_max))
      return n + ": the float scale target must be positive and finite";
  }
  if (s.scale != ScaleMode::kNone && s.apply == ScaleAt::kOperand) {
    if (!is_float_encoding(s.dequant_to) || s.dequant_to == Encoding::kFp64 || is_fp8(s.dequant_to))
      return n + ": a dequantized operand is fp32, bf16 or fp16";
  }
  if (s.scale != ScaleMode::kNone && s.groups.block <= 0)
    return n + ": the scale groups need a positive block size";
  if (s.mean == MeanMode::kBlock && s.mean_block <= 0) return n + ": the mean block must be positive";
  if (s.mean_rule == MeanRule::kSageChannel) {
    if (s.mean != MeanMode::kTokens)
      return n + ": the SageAttention channel mean is a mean over all tokens (mean=tokens)";
    if (s.mean_enc != Encoding::kFp32 || s.centered_enc != Encoding::kFp32)
      return n + ": the SageAttention channel mean and the centered values are fp32";
    if (s.scale != ScaleMode::kNone &&
        !(s.scale == ScaleMode::kFloat && s.groups.kind == Granularity::kPerChannel))
      return n + ": the SageAttention channel mean goes with per-channel float scales";
  }
  if (!is_float_encoding(s.input) || s.input == Encoding::kFp64 || is_fp8(s.input))
    return n + ": the input format is fp32, bf16 or fp16";
  for (Encoding e : {s.mean_enc, s.centered_enc}) {
    if (!is_float_encoding(e) || e == Encoding::kFp64 || is_fp8(e))
      return n + ": the mean and the centered values are fp32, bf16 or fp16";
  }
  return std::nullopt;
}

// An instruction model's operand formats against what the pipeline gives it.
Why product_rule(const char* name, const DotModel& m, Encoding a, Encoding b) {
  const std::string n(name);
  if (m.kind != DotModel::kMma) {
    if (m.promote != 0) return n + ": promotion applies to instruction models only";
    return std::nullopt;
  }
  const MmaInstrInfo& info = mma_info(m.instr);
  if (a != info.in || b != mma_in_b(info))
    return n + ": " + info.name + " takes " + encoding_name(info.in) + " x " +
           encoding_name(mma_in_b(info)) + " operands, the pipeline gives " + encoding_name(a) +
           " x " + encoding_name(b);
  if (m.promote != 0) {
    if (info.acc == 2) return n + ": promotion applies to floating-point accumulators only";
    if (m.promote < 0 || m.promote % info.k != 0)
      return n + ": the promotion interval must be a positive multiple of " + info.name +
             "'s k = " + std::to_string(info.k);
  }
  return std::nullopt;
}

bool integer_acc(const DotModel& m) {
  return m.kind == DotModel::kMma && dot_requirements(m).integer_acc;
}

const std::vector<Coupling>& couplings() {
  static const std::vector<Coupling> k{
      // --- one stage ---
      {"tiles", {},  // the tiles are no attributed stage: nothing to switch along
       [](const Pipeline& p) -> Why {
         if (p.tile.block_q <= 0 || p.tile.block_kv <= 0) return "block sizes must be positive";
         if (p.tile.kv_order == KvOrder::kSparse &&
             (p.tile.sparse_block % p.tile.block_q != 0 || p.tile.sparse_block % p.tile.block_kv != 0))
           return "kv_order=sparse: sparse_block must be a multiple of bq and bk (FlexAttention's "
                  "static assert)";
         return std::nullopt;
       }},
      {"q", {Stage::kQ},
       [](const Pipeline& p) -> Why {
         if (const Why w = operand_rules("q", p.q)) return w;
         if (p.q.scale != ScaleMode::kNone && p.q.apply == ScaleAt::kReciprocal)
           return "q: q_dequant=rcp is V's (its scale in the epilogue's 1/l)";
         return std::nullopt;
       }},
      {"k", {Stage::kK},
       [](const Pipeline& p) -> Why {
         if (const Why w = operand_rules("k", p.k)) return w;
         if (p.k.prescale != Prescale::kNone && p.k.prescale != Prescale::kSqrtSm)
           return "only q can be prescaled by the softmax scale";
         if (p.k.scale != ScaleMode::kNone && p.k.apply == ScaleAt::kReciprocal)
           return "k: k_dequant=rcp is V's (its scale in the epilogue's 1/l)";
         if (p.k.mean == MeanMode::kBlock)
           return "k: a per-block mean is not a per-row constant (use the mean over all tokens)";
         return std::nullopt;
       }},
      {"v", {Stage::kV},
       [](const Pipeline& p) -> Why {
         if (const Why w = operand_rules("v", p.v)) return w;
         if (p.v.prescale != Prescale::kNone) return "only q can be prescaled by the softmax scale";
         if (p.v.scale != ScaleMode::kNone && p.v.apply == ScaleAt::kReciprocal) {
           const Granularity g = p.v.groups.kind;
           if (g != Granularity::kPerTensor && g != Granularity::kPerChannel)
             return "v: v_dequant=rcp multiplies 1/l by V's scale: per_tensor or per_channel groups";
         }
         if (p.v.mean == MeanMode::kBlock)
           return "v: a per-block mean has no epilogue compensation (use the mean over all tokens)";
         return std::nullopt;
       }},
      {"softmax", {Stage::kSoftmax},
       [](const Pipeline& p) -> Why {
         const SoftmaxStage& s = p.softmax;
         if (s.dequant == Dequant::kFold && s.max_domain != MaxDomain::kScaled)
           return "dequant=fold puts the scales into the exponent: it needs max=scaled";
         if (!std::isfinite(s.max_offset) || s.max_offset < 0)
           return "max_offset must be finite and >= 0";
         if (s.dequant_tail < 0) return "dequant_tail must be >= 0";
         if (!(s.mask_value < 0)) return "the mask value must be negative";
         if (s.row_sum == RowSum::kMma &&
             (s.row_sum_dot.kind != DotModel::kMma || dot_requirements(s.row_sum_dot).integer_acc ||
              dot_requirements(s.row_sum_dot).fp16_acc))
           return "the tensor-core row sum is an instruction with an FP32 accumulator";
         if ((s.lse == LseModel::kLog2Mufu || s.lse == LseModel::kLog2Libdevice ||
              s.lse == LseModel::kLog2LibdeviceLn2) &&
             (s.base != ExpKind::kExp2 || s.state != StateType::kFp32))
           return "the base-2 LSE models are FP32 kernels' (exp2, FP32 state)";
         if ((s.lse == LseModel::kNaturalFma || s.lse == LseModel::kNaturalFmaC ||
              s.lse == LseModel::kNaturalDiv) &&
             (s.base != ExpKind::kExp2 || s.state != StateType::kFp32))
           return "the FP32 kernels' LSE forms (natural.fma, natural.fma_c, natural.div) need exp2 "
                  "and an FP32 state";
         if (s.lse == LseModel::kNaturalFmaC && s.max_domain != MaxDomain::kRaw)
           return "lse=natural.fma_c scales a raw max by fl(c ln 2): it needs max=raw";
         if (s.lse == LseModel::kNaturalDiv && s.max_domain != MaxDomain::kScaled)
           return "lse=natural.div divides a max in exponent units by log2 e: it needs max=scaled";
         if (s.lse == LseModel::kNaturalLg2Fma &&
             (s.base != ExpKind::kExp2 || s.state != StateType::kFp32 ||
              s.max_domain != MaxDomain::kScaled))
           return "lse=natural.lg2fma (cuDNN decode) takes a max in exponent units of exp2: it "
                  "needs max=scaled and an FP32 state";
         if (s.ftz && s.state != StateType::kFp32)
           return "ftz=on flushes FP32 subnormals: an FP32 state's (acc=fp32)";
         if (s.dequant == Dequant::kDescale && (s.max_domain != MaxDomain::kRaw || s.base != ExpKind::kExp2))
           return "dequant=descale folds the descales into the exp2 coefficient of a raw max: it "
                  "needs max=raw and exp2";
         return std::nullopt;
       }},
      {"exp", {Stage::kExp},
       [](const Pipeline& p) -> Why {
         if (p.exp.fn == ExpFn::kHook && !p.exp.hook) return "exp=hook without a hook function";
         return std::nullopt;
       }},
      {"p", {Stage::kP},
       [](const Pipeline& p) -> Why {
         const PStage& s = p.p;
         if (s.enc == Encoding::kU8 ||
             (is_int(s.enc) && s.scale == PScale::kNone && s.static_scale == 0.0))
           return "p: an integer P needs a scale (p_scale=row or tile, or a static scale) and a "
                  "signed encoding";
         if (s.scale != PScale::kNone) {
           if (!is_int(s.enc)) return "p: p_scale applies to integer P";
           if (s.quantizer.bits != encoding_traits(s.enc).bits)
             return std::string("p: quantizer ") + s.quantizer.name + " does not make " +
                    encoding_name(s.enc) + " values";
         }
         if (s.static_scale != 0.0) {
           if (!(s.static_scale > 0.0) || !std::isfinite(s.static_scale))
             return "p: the static P scale must be positive and finite";
           if (s.scale != PScale::kNone)
             return "p: a static P scale applies to a P without a per-block scale";
         }
         return std::nullopt;
       }},
      {"pv", {Stage::kPv},
       [](const Pipeline& p) -> Why {
         if (integer_acc(p.pv.dot) && p.pv.acc != PvAccumulate::kChunk)
           return "pv: an integer accumulator cannot take O as C (use pv_acc=chunk)";
         if (p.pv.o_accum != Encoding::kFp32 && p.pv.o_accum != Encoding::kFp16)
           return "the O accumulator is fp32 or fp16";
         if (ftz_chunk_add(p.pv.chunk_add) && p.pv.acc != PvAccumulate::kChunk)
           return "chunk_add=" + std::string(p.pv.chunk_add == ChunkAdd::kRedFtz ? "red.ftz" : "fadd.ftz") +
                  " adds each block's chunk to O: it needs pv_acc=chunk";
         if (p.pv.flush < 0) return "pv_flush is a block count >= 0";
         if (p.pv.flush > 0 && (p.pv.acc != PvAccumulate::kIntoC || p.pv.o_accum != Encoding::kFp32))
           return "pv_flush=N carries O as the product's C across blocks: it needs pv_acc=c and "
                  "o_acc=fp32";
         if (p.pv.chunk_add == ChunkAdd::kCutlassEpilogue && p.pv.acc != PvAccumulate::kChunk)
           return "chunk_add=cutlass_epilogue lands each block's chunk on O: it needs pv_acc=chunk";
         if (p.pv.warps != 1 && p.pv.warps != 4) return "pv_warps is 1 or 4";
         if (p.pv.warps > 1 &&
             (p.pv.acc != PvAccumulate::kIntoC || p.pv.flush != 0 || p.pv.perm16 ||
              p.pv.kwidth4 || p.pv.o_accum != Encoding::kFp32 ||
              p.tile.block_kv % (16 * p.pv.warps)))
           return "pv_warps=4 keeps one FP32 O per warp as the product's C (pv_acc=c, o_acc=fp32, "
                  "no pv_flush or pv_perm) over a quarter of the block (bk a multiple of 64)";
         return std::nullopt;
       }},
      {"rescale", {Stage::kRescale},
       [](const Pipeline& p) -> Why {
         if (p.rescale.kind == Rescale::kIntAdd && p.rescale.max_round == MaxRound::kNone)
           return "rescale=int_add needs a max snapped to an integer (max_round=ceil or nearest)";
         if (p.rescale.kind == Rescale::kHook && !p.rescale.hook)
           return "rescale=hook needs a step function";
         return std::nullopt;
       }},
      {"out", {Stage::kOut},
       [](const Pipeline& p) -> Why {
         const Encoding e = p.out.enc;
         if (e != Encoding::kFp64 && e != Encoding::kFp32 && e != Encoding::kBf16 &&
             e != Encoding::kFp16)
           return "the output format is fp64, fp32, bf16 or fp16";
         return std::nullopt;
       }},
      // --- couplings (the first stage listed is the one a counterfactual switches along first) ---
      {"qk product formats", {Stage::kQk, Stage::kQ, Stage::kK},
       [](const Pipeline& p) {
         return product_rule("qk", p.qk.dot, product_encoding(p.q), product_encoding(p.k));
       }},
      {"pv product formats", {Stage::kPv, Stage::kP, Stage::kV},
       [](const Pipeline& p) { return product_rule("pv", p.pv.dot, p.p.enc, product_encoding(p.v)); }},
      {"q and k prescaled together", {Stage::kK, Stage::kQ},
       [](const Pipeline& p) -> Why {
         if ((p.q.prescale == Prescale::kSqrtSm) != (p.k.prescale == Prescale::kSqrtSm))
           return "q_prescale=sqrt_sm and k_prescale=sqrt_sm go together (each carries half of the "
                  "softmax scale)";
         return std::nullopt;
       }},
      {"descaled q and k", {Stage::kSoftmax, Stage::kQ, Stage::kK},
       [](const Pipeline& p) -> Why {
         if (p.softmax.dequant != Dequant::kDescale) return std::nullopt;
         for (const OperandSpec* s : {&p.q, &p.k})
           if (s->scale != ScaleMode::kNone &&
               (s->apply != ScaleAt::kProduct || s->groups.kind != Granularity::kPerTensor))
             return "dequant=descale folds one Q and one K scale per (batch, head) into the exponent: "
                    "per_tensor scales applied to the product";
         if (p.q.mean != MeanMode::kNone)
           return "dequant=descale has no place for the ΔS of a smoothed q (use dequant=score)";
         return std::nullopt;
       }},
      {"P normalized before P·V", {Stage::kNormalize, Stage::kP},
       [](const Pipeline& p) -> Why {
         const bool in_chunk = p.pv.chunk_add == ChunkAdd::kCutlassEpilogue;
         if (p.p.norm != PNorm::kNone && in_chunk)
           return "p_norm=warp_sum and chunk_add=cutlass_epilogue both divide by the row sum";
         if ((p.p.norm != PNorm::kNone || in_chunk) != (p.normalize.kind == Normalize::kNone))
           return "norm=none goes with p_norm=warp_sum or chunk_add=cutlass_epilogue (P normalized "
                  "before P·V, or O divided as the last block lands, leaves nothing for the "
                  "epilogue to divide)";
         if (p.p.norm != PNorm::kNone && p.p.scale != PScale::kNone)
           return "p_norm=warp_sum normalizes a P without a per-block scale";
         return std::nullopt;
       }},
      {"per-warp O and the rescale", {Stage::kRescale, Stage::kPv},
       [](const Pipeline& p) -> Why {
         if (p.pv.warps > 1 && ((p.rescale.kind != Rescale::kMultiply &&
                                 p.rescale.kind != Rescale::kMultiplyFtz) ||
                                p.rescale.fused || p.rescale.max_round != MaxRound::kNone))
           return "pv_warps=4 rescales every warp's O by a multiply (rescale=mul or mul.ftz, "
                  "unfused, no max_round)";
         return std::nullopt;
       }},
      {"ftz rescale and the state", {Stage::kRescale, Stage::kSoftmax, Stage::kPv},
       [](const Pipeline& p) -> Why {
         if (p.rescale.kind == Rescale::kMultiplyFtz &&
             (p.softmax.state != StateType::kFp32 || p.pv.o_accum != Encoding::kFp32))
           return "rescale=mul.ftz is an FMUL.FTZ of an FP32 O (acc=fp32, o_acc=fp32)";
         return std::nullopt;
       }},
      {"prescaled q and the exponent", {Stage::kQ, Stage::kSoftmax},
       [](const Pipeline& p) -> Why {
         if (p.q.prescale == Prescale::kSmScaleLog2e && p.softmax.base != ExpKind::kExp2)
           return "q prescaled by sm_scale·log2(e) needs the exp2 exponent";
         if (p.q.prescale == Prescale::kSmScale && p.softmax.base != ExpKind::kExp)
           return "q prescaled by sm_scale needs the natural exponent";
         return std::nullopt;
       }},
      {"smoothed q and the fold", {Stage::kSoftmax, Stage::kQ},
       [](const Pipeline& p) -> Why {
         if (p.softmax.dequant == Dequant::kFold && p.q.mean != MeanMode::kNone)
           return "dequant=fold has no place for the ΔS of a smoothed q (use dequant=score)";
         return std::nullopt;
       }},
      {"row-sum tiles", {Stage::kSoftmax},
       [](const Pipeline& p) -> Why {
         if ((p.softmax.row_sum == RowSum::kSageLanes && p.tile.block_kv % 16) ||
             ((p.softmax.row_sum == RowSum::kTritonTree || p.softmax.row_sum == RowSum::kTritonWarps) &&
              p.tile.block_kv % 8))
           return "the row-sum model works on whole 16-key (SageAttention2) or 8-key (Triton) tiles";
         if (p.softmax.row_sum == RowSum::kTritonWarps &&
             (p.softmax.rowsum_warps < 1 || p.softmax.rowsum_warps > 8 ||
              (p.softmax.rowsum_warps & (p.softmax.rowsum_warps - 1))))
           return "rowsum_warps must be 1, 2, 4 or 8 (Triton's warps along N)";
         if (p.softmax.row_sum == RowSum::kMma && p.pv.kwidth4)
           return "rowsum=mma reads P in the natural or sage16 key order, not kwidth4";
         if (p.softmax.row_sum == RowSum::kCutlassWarps && p.tile.block_kv % 32)
           return "rowsum=cutlass_warps splits a block between column warps of 32 keys (bk a "
                  "multiple of 32)";
         if (p.softmax.row_sum == RowSum::kAtomicWarps && p.tile.block_kv != 128)
           return "rowsum=atomic_warps is 4 warps of 32 keys: it needs bk=128";
         {
           std::array<std::uint8_t, 4> w = p.softmax.rowsum_order;
           std::sort(w.begin(), w.end());
           if (w != std::array<std::uint8_t, 4>{0, 1, 2, 3})
             return "rowsum_order is a permutation of the warps 0123";
         }
         return std::nullopt;
       }},
      {"tensor-core row sum formats", {Stage::kSoftmax, Stage::kP},
       [](const Pipeline& p) -> Why {
         if (p.softmax.row_sum != RowSum::kMma) return std::nullopt;
         return product_rule("row sum", p.softmax.row_sum_dot, p.p.enc,
                             dot_requirements(p.softmax.row_sum_dot).b_enc);
       }},
      {"exp function and base", {Stage::kExp, Stage::kSoftmax},
       [](const Pipeline& p) -> Why {
         if ((p.exp.fn == ExpFn::kEx2ApproxFtz || p.exp.fn == ExpFn::kEx2Approx) &&
             p.softmax.base != ExpKind::kExp2)
           return "ex2.approx evaluates exp2: it needs the exp2 exponent";
         if ((p.exp.fn == ExpFn::kExpfLibdevice || p.exp.fn == ExpFn::kEx2ApproxLog2e) &&
             p.softmax.base != ExpKind::kExp)
           return "expf and ex2.approx.log2e evaluate e^x: they need the natural exponent";
         return std::nullopt;
       }},
      {"snapped max and the exponent", {Stage::kRescale, Stage::kSoftmax},
       [](const Pipeline& p) -> Why {
         if (p.rescale.max_round != MaxRound::kNone && p.softmax.base != ExpKind::kExp2)
           return "a snapped max needs the exp2 exponent";
         if (p.rescale.max_round != MaxRound::kNone &&
             (p.softmax.lse == LseModel::kLog2Mufu || p.softmax.lse == LseModel::kLog2Libdevice ||
              p.softmax.lse == LseModel::kLog2LibdeviceLn2))
           return "the base-2 LSE models are FP32 kernels' (exp2, FP32 state, no snapped max)";
         return std::nullopt;
       }},
      {"rescale hook", {Stage::kRescale, Stage::kSoftmax, Stage::kPv},
       [](const Pipeline& p) -> Why {
         if (p.rescale.kind == Rescale::kHook &&
             (p.softmax.state != StateType::kFp32 || p.rescale.max_round != MaxRound::kNone ||
              p.pv.acc != PvAccumulate::kChunk || p.pv.o_accum != Encoding::kFp32))
           return "rescale=hook needs an FP32 state and O, an unsnapped max and pv_acc=chunk";
         return std::nullopt;
       }},
      {"CUTLASS output-buffer epilogue", {Stage::kPv, Stage::kRescale, Stage::kSoftmax},
       [](const Pipeline& p) -> Why {
         if (p.pv.chunk_add != ChunkAdd::kCutlassEpilogue) return std::nullopt;
         if (!p.rescale.fused || p.softmax.state != StateType::kFp32 ||
             row_sum_lanes(p.softmax.row_sum) != 1 || p.tile.kv_order != KvOrder::kAscending ||
             p.pv.o_accum != Encoding::kFp32)
           return "chunk_add=cutlass_epilogue rescales O as the chunk lands (rescale_fused=on) and "
                  "divides by a one-lane FP32 row sum in the last of ascending blocks";
         return std::nullopt;
       }},
      {"scores scaled first", {Stage::kSoftmax, Stage::kQ},
       [](const Pipeline& p) -> Why {
         if (p.softmax.scale_log2 != ScaleLog2::kScoreFirst) return std::nullopt;
         if (p.q.prescale != Prescale::kNone || p.softmax.dequant != Dequant::kScore ||
             (p.softmax.base == ExpKind::kExp && p.softmax.max_domain != MaxDomain::kRaw))
           return "scale_log2=score multiplies each score by the softmax scale before log2 e (or "
                  "the natural exponent): it needs an unprescaled q, dequant=score, and with exp "
                  "the raw max";
         return std::nullopt;
       }},
      {"fused rescale", {Stage::kRescale, Stage::kPv},
       [](const Pipeline& p) -> Why {
         if (p.rescale.fused && (p.pv.acc != PvAccumulate::kChunk || p.rescale.kind != Rescale::kMultiply))
           return "rescale_fused folds the multiply into the chunk's add: it needs pv_acc=chunk, "
                  "rescale=mul";
         return std::nullopt;
       }},
      {"fp16 O accumulator", {Stage::kPv, Stage::kSoftmax},
       [](const Pipeline& p) -> Why {
         if (p.pv.o_accum == Encoding::kFp16 &&
             (p.pv.dot.kind != DotModel::kMma || !dot_requirements(p.pv.dot).fp16_acc ||
              p.pv.acc != PvAccumulate::kIntoC || p.softmax.state != StateType::kFp32))
           return "an fp16 O accumulator needs an fp16-accumulating P·V instruction taking O as C "
                  "(FP32 state)";
         return std::nullopt;
       }},
      {"integer P and P·V", {Stage::kPv, Stage::kP},
       [](const Pipeline& p) -> Why {
         if (is_int(p.p.enc) && p.p.scale == PScale::kNone && p.pv.acc != PvAccumulate::kChunk)
           return "p: an integer P is multiplied into an int32 chunk: it needs pv_acc=chunk";
         if (p.p.scale != PScale::kNone && p.pv.acc != PvAccumulate::kChunk)
           return "p: a scaled P is dequantized per KV block: it needs pv_acc=chunk";
         return std::nullopt;
       }},
      {"per-key V scales and P·V", {Stage::kPv, Stage::kV},
       [](const Pipeline& p) -> Why {
         const Granularity g = p.v.groups.kind;
         if (p.v.scale != ScaleMode::kNone && p.v.apply == ScaleAt::kProduct &&
             g != Granularity::kPerTensor && g != Granularity::kPerChannel &&
             p.pv.acc != PvAccumulate::kChunk)
           return "v: " + p.v.groups.describe() +
                  " scales vary with the key: the P·V product is dequantized per KV block, which "
                  "needs pv_acc=chunk";
         return std::nullopt;
       }},
  };
  return k;
}

}  // namespace

const std::vector<StageInfo>& pipeline_stages() {
  static const std::vector<StageInfo> k{
      {Stage::kQ, "q", "Q preparation (input rounding, cast, quantization, mean, prescale)"},
      {Stage::kK, "k", "K preparation"},
      {Stage::kV, "v", "V preparation"},
      {Stage::kQk, "qk", "QKᵀ product and its int32 -> FP32 conversion"},
      {Stage::kSoftmax, "softmax",
       "state arithmetic, exponent base and scale, max domain and offset, dequantization order, "
       "FMA, mask value, row sum, LSE"},
      {Stage::kExp, "exp", "exp function"},
      {Stage::kP, "p", "P cast before P·V"},
      {Stage::kPv, "pv", "P·V product, its accumulation and O's accumulator"},
      {Stage::kRescale, "rescale", "rescale of O (and the snapped max it needs)"},
      {Stage::kNormalize, "normalize", "epilogue O / l"},
      {Stage::kOut, "out", "output format"},
  };
  return k;
}

const char* stage_name(Stage s) {
  for (const StageInfo& i : pipeline_stages())
    if (i.stage == s) return i.name;
  return "?";
}

const std::vector<Coupling>& pipeline_couplings() { return couplings(); }

const Coupling* violated_coupling(const Pipeline& p, std::string* why) {
  for (const Coupling& c : couplings()) {
    if (const Why w = c.check(p)) {
      if (why) *why = *w;
      return &c;
    }
  }
  return nullptr;
}

void validate(const Pipeline& p) {
  std::string why;
  if (violated_coupling(p, &why)) throw std::invalid_argument(why);
}

Pipeline canonical(Pipeline p) {
  const Pipeline d;
  auto operand = [&](OperandSpec& s) {
    const OperandSpec e;
    if (!is_float_encoding(s.enc) || s.enc == Encoding::kFp32) s.cast = e.cast;
    if (s.scale == ScaleMode::kNone) {
      s.groups = e.groups;
      s.apply = e.apply;
    }
    const Granularity g = s.groups.kind;
    if (g == Granularity::kPerTensor || g == Granularity::kPerToken || g == Granularity::kPerChannel)
      s.groups.block = 1;  // these maps use no block
    if (s.scale != ScaleMode::kInteger) s.quantizer = e.quantizer;
    if (s.scale != ScaleMode::kFloat) {
      s.float_max = e.float_max;
      s.float_rule = e.float_rule;
    }
    if (s.scale == ScaleMode::kNone || s.apply != ScaleAt::kOperand) s.dequant_to = e.dequant_to;
    if (s.mean != MeanMode::kBlock) s.mean_block = e.mean_block;
    if (s.mean == MeanMode::kNone) {
      s.mean_enc = e.mean_enc;
      s.centered_enc = e.centered_enc;
    }
    if (s.mean != MeanMode::kTokens) s.mean_rule = e.mean_rule;
  };
  operand(p.q);
  operand(p.k);
  operand(p.v);
  auto dot = [](DotModel& m) {
    if (m.kind != DotModel::kMma) {
      m.instr = DotModel{}.instr;
      m.promote = 0;
    }
  };
  dot(p.qk.dot);
  dot(p.pv.dot);
  if (!integer_acc(p.qk.dot)) p.qk.int_cvt = d.qk.int_cvt;
  if (!integer_acc(p.pv.dot)) p.pv.int_cvt = d.pv.int_cvt;
  if (p.softmax.dequant != Dequant::kFold) p.softmax.dequant_tail = 0;
  if (p.tile.kv_order != KvOrder::kSparse) p.tile.sparse_block = d.tile.sparse_block;
  if (!p.softmax.fma) p.softmax.fma_blocks = d.softmax.fma_blocks;
  if (p.softmax.row_sum != RowSum::kMma) p.softmax.row_sum_dot = d.softmax.row_sum_dot;
  if (p.softmax.row_sum != RowSum::kTritonWarps) p.softmax.rowsum_warps = d.softmax.rowsum_warps;
  if (p.softmax.row_sum != RowSum::kAtomicWarps) p.softmax.rowsum_order = d.softmax.rowsum_order;
  // The kWidth-4 order only changes which products an instruction model groups.
  if (p.qk.dot.kind != DotModel::kMma) p.qk.kwidth4 = false;
  if (p.pv.dot.kind != DotModel::kMma || p.pv.perm16) p.pv.kwidth4 = false;
  if (p.exp.fn != ExpFn::kHook) p.exp.hook = {};
  if (!is_float_encoding(p.p.enc) || p.p.enc == Encoding::kFp32 || p.p.enc == Encoding::kFp64)
    p.p.cast = d.p.cast;
  if (p.p.scale == PScale::kNone) p.p.quantizer = d.p.quantizer;
  if (p.pv.acc != PvAccumulate::kChunk) p.pv.chunk_add = d.pv.chunk_add;
  if (p.rescale.kind != Rescale::kHook) p.rescale.hook = {};
  if (p.out.enc != Encoding::kBf16 && p.out.enc != Encoding::kFp16) p.out.cast = d.out.cast;
  return p;
}

}  // namespace attnsim
