// Operand preparation of the attention pipeline (mean subtraction, scaling, quantization, the
// encodings the products see), the pipeline's validity rules and its one-line description.
#include <cmath>
#include <stdexcept>
#include <string>
#include <string_view>

#include "formats/encoding.hpp"
#include "numerics/reduce.hpp"
#include "numerics/special.hpp"
#include "sim/pipeline/pipeline.hpp"

namespace attnsim {

namespace {

constexpr double kLog2e = 1.44269504088896340736;

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument(what); }

bool is_int(Encoding e) { return !is_float_encoding(e); }

// The encoding an operand reaches its product in.
Encoding product_encoding(const OperandSpec& s) {
  return s.scale != ScaleMode::kNone && s.apply == ScaleAt::kOperand ? s.dequant_to : s.enc;
}

// Appends every piece (GCC 12 reports a false -Wrestrict for `"literal" + std::string&&`).
template <class... A>
std::string cat(const A&... pieces) {
  std::string r;
  (r.append(std::string_view(pieces)), ...);
  return r;
}

std::string policy_spelling(const Policy& p) {
  return cat(round_spelling(p.round), "/", overflow_spelling(p.overflow));
}

std::string describe_operand(const char* name, const OperandSpec& s) {
  std::string r = cat(name, "=");
  if (s.input != Encoding::kFp32) r += cat("in:", encoding_name(s.input), ">");
  r += encoding_name(s.enc);
  if (is_float_encoding(s.enc) && s.enc != Encoding::kFp32)
    r += cat("(", policy_spelling(s.cast), ")");
  if (s.scale == ScaleMode::kInteger) r += cat("/", s.quantizer.name);
  if (s.scale == ScaleMode::kFloat)
    r += cat("/amax:", std::to_string(s.float_max),
             s.float_rule == FloatScaleRule::kMufuRcp ? ":mufu" : "");
  if (s.scale != ScaleMode::kNone) {
    r += cat("/", s.groups.describe());
    if (s.apply == ScaleAt::kOperand) r += cat("/dequant:", encoding_name(s.dequant_to));
  }
  if (s.mean != MeanMode::kNone) {
    r += s.mean == MeanMode::kTokens ? std::string("/mean:tokens")
                                     : cat("/mean:block", std::to_string(s.mean_block));
    r += cat(":", encoding_name(s.mean_enc), ",", encoding_name(s.centered_enc));
    if (s.mean_rule == MeanRule::kSageChannel) r += ":sage_channel";
  }
  if (s.prescale != Prescale::kNone)
    r += s.prescale == Prescale::kSmScale ? "/x_sm_scale" : "/x_sm_scale_log2e";
  return r;
}

void validate_operand(const char* name, const OperandSpec& s) {
  const std::string n(name);
  if (s.enc == Encoding::kFp64)
    fail(n + ": fp64 is not an operand encoding (the input is FP32, fp32 keeps it exact)");
  if (s.enc == Encoding::kU8) fail(n + ": u8 operands are not supported (use s8)");
  if (s.scale == ScaleMode::kNone && is_int(s.enc))
    fail(n + ": " + encoding_name(s.enc) + " operands need an integer quantizer with scale groups");
  if (s.scale == ScaleMode::kInteger) {
    if (!is_int(s.enc))
      fail(n + ": an integer quantizer needs an integer encoding (s8, s4, s2), not " +
           encoding_name(s.enc));
    if (s.quantizer.bits != encoding_traits(s.enc).bits)
      fail(n + ": quantizer " + s.quantizer.name + " makes " + std::to_string(s.quantizer.bits) +
           "-bit integers, the encoding is " + encoding_name(s.enc));
  }
  if (s.scale == ScaleMode::kFloat) {
    if (!is_float_encoding(s.enc) || s.enc == Encoding::kFp32)
      fail(n + ": a float scale needs a narrow float encoding (bf16, fp16, e4m3fn, e5m2)");
    if (!(s.float_max > 0.0f) || !std::isfinite(s.float_max))
      fail(n + ": the float scale target must be positive and finite");
  }
  if (s.scale != ScaleMode::kNone && s.apply == ScaleAt::kOperand) {
    if (!is_float_encoding(s.dequant_to) || s.dequant_to == Encoding::kFp64 ||
        s.dequant_to == Encoding::kE4m3fn || s.dequant_to == Encoding::kE5m2)
      fail(n + ": a dequantized operand is fp32, bf16 or fp16");
  }
  if (s.scale != ScaleMode::kNone && s.groups.block <= 0)
    fail(n + ": the scale groups need a positive block size");
  if (s.mean == MeanMode::kBlock && s.mean_block <= 0)
    fail(n + ": the mean block must be positive");
  if (s.mean_rule == MeanRule::kSageChannel) {
    if (s.mean != MeanMode::kTokens)
      fail(n + ": the SageAttention channel mean is a mean over all tokens (mean=tokens)");
    if (s.mean_enc != Encoding::kFp32 || s.centered_enc != Encoding::kFp32)
      fail(n + ": the SageAttention channel mean and the centered values are fp32");
    if (s.scale != ScaleMode::kNone &&
        !(s.scale == ScaleMode::kFloat && s.groups.kind == Granularity::kPerChannel))
      fail(n + ": the SageAttention channel mean goes with per-channel float scales");
  }
  if (!is_float_encoding(s.input) || s.input == Encoding::kFp64 || s.input == Encoding::kE4m3fn ||
      s.input == Encoding::kE5m2)
    fail(n + ": the input format is fp32, bf16 or fp16");
  for (Encoding e : {s.mean_enc, s.centered_enc}) {
    if (!is_float_encoding(e) || e == Encoding::kFp64 || e == Encoding::kE4m3fn ||
        e == Encoding::kE5m2)
      fail(n + ": the mean and the centered values are fp32, bf16 or fp16");
  }
}

void validate_product(const char* name, const DotModel& m, Encoding a, Encoding b) {
  const std::string n(name);
  if (m.kind != DotModel::kMma) {
    if (m.promote != 0) fail(n + ": promotion applies to instruction models only");
    return;
  }
  const MmaInstrInfo& info = mma_info(m.instr);
  if (a != info.in || b != mma_in_b(info)) {
    fail(n + ": " + info.name + " takes " + encoding_name(info.in) + " x " +
         encoding_name(mma_in_b(info)) + " operands, the pipeline gives " + encoding_name(a) +
         " x " + encoding_name(b));
  }
  if (m.promote != 0) {
    if (info.acc == 2) fail(n + ": promotion applies to floating-point accumulators only");
    if (m.promote < 0 || m.promote % info.k != 0)
      fail(n + ": the promotion interval must be a positive multiple of " + info.name +
           "'s k = " + std::to_string(info.k));
  }
}

}  // namespace

bool OperandSpec::operator==(const OperandSpec& o) const {
  auto same_policy = [](const Policy& a, const Policy& b) {
    return a.round == b.round && a.overflow == b.overflow && a.nan == b.nan;
  };
  return input == o.input && enc == o.enc && same_policy(cast, o.cast) && scale == o.scale &&
         (scale == ScaleMode::kNone ||
          (groups.kind == o.groups.kind && groups.block == o.groups.block &&
           groups.pad == o.groups.pad &&
           (scale != ScaleMode::kInteger || std::string(quantizer.name) == o.quantizer.name) &&
           (scale != ScaleMode::kFloat || (float_max == o.float_max && float_rule == o.float_rule)) &&
           apply == o.apply &&
           (apply != ScaleAt::kOperand || dequant_to == o.dequant_to))) &&
         mean == o.mean && (mean != MeanMode::kBlock || mean_block == o.mean_block) &&
         (mean == MeanMode::kNone || (mean_enc == o.mean_enc && centered_enc == o.centered_enc &&
                                      mean_rule == o.mean_rule)) &&
         prescale == o.prescale;
}

std::string describe(const Pipeline& p) {
  auto dot = [](const DotModel& m) {
    return m.promote > 0 ? cat(dot_model_name(m), "/promote", std::to_string(m.promote))
                         : dot_model_name(m);
  };
  static const char* kExpFn[] = {"libm", "exact", "ex2.approx.ftz", "ex2.approx", "hook"};
  static const char* kNorm[] = {"rcp", "div", "rcp.approx.ftz", "div.full"};
  static const char* kRowSum[] = {"quad", "single", "sage_lanes", "mma", "triton_tree", "quad_fma"};
  static const char* kLse[] = {"natural", "log2.mufu", "log2.libdevice"};
  static const char* kRound[] = {"none", "ceil", "nearest"};
  std::string r = cat("pipeline bq=", std::to_string(p.block_q), " bk=", std::to_string(p.block_kv),
                      " kv=", p.kv_order == KvOrder::kDescending ? "desc" : "asc");
  if (p.causal_align == CausalAlign::kTopLeft) r += " causal=topleft";
  r += cat(" ", describe_operand("q", p.q), " ", describe_operand("k", p.k), " ",
           describe_operand("v", p.v));
  r += cat(" qk=", dot(p.qk), " dequant=", p.dequant == Dequant::kScore ? "score" : "fold",
           p.dequant_tail > 0 ? cat("/tail", std::to_string(p.dequant_tail)) : std::string(),
           " int_cvt=", round_spelling(p.int_cvt),
           " state=", p.state == StateType::kFp32 ? "fp32" : "fp64");
  if (p.scale_log2 == ScaleLog2::kDeviceFloat) r += " scale_log2=device";
  r += cat(" exp=", p.exp_base == ExpKind::kExp2 ? "exp2" : "exp", "/",
           p.exp_fn == ExpFn::kHook ? cat("hook:", p.exp_hook_name)
                                    : std::string(kExpFn[int(p.exp_fn)]));
  r += cat(" fma=", p.fma ? "on" : "off",
           " max=", p.max_domain == MaxDomain::kRaw ? "raw" : "scaled");
  if (p.max_offset != 0.0) r += cat("-", std::to_string(p.max_offset));
  r += cat(" max_round=", kRound[int(p.max_round)]);
  if (!std::isinf(p.mask_value)) r += cat(" mask=", std::to_string(p.mask_value));
  r += cat(" rowsum=", kRowSum[int(p.row_sum)],
           p.row_sum == RowSum::kMma ? cat("/", dot_model_name(p.row_sum_mma)) : std::string(),
           " p=", encoding_name(p.p));
  if (is_float_encoding(p.p) && p.p != Encoding::kFp32 && p.p != Encoding::kFp64)
    r += cat("(", policy_spelling(p.p_cast), ")");
  if (p.p_static_scale != 0.0) r += cat("*", std::to_string(p.p_static_scale));
  if (p.p_scale != PScale::kNone)
    r += cat("/", p.p_quantizer.name, p.p_scale == PScale::kRow ? "/row" : "/tile");
  r += cat(" pv=", dot(p.pv), p.pv_perm16 ? "/perm16" : "",
           " pv_acc=", p.pv_acc == PvAccumulate::kIntoC ? "c" : "chunk",
           p.o_accum == Encoding::kFp16 ? "/o:fp16" : "",
           " rescale=",
           p.rescale == Rescale::kMultiply ? "mul"
           : p.rescale == Rescale::kIntAdd ? "int_add"
           : p.rescale == Rescale::kDivide ? "divide"
                                           : ("hook/" + p.rescale_hook.name).c_str(),
           p.rescale_fused ? "+fused" : "",
           " norm=", kNorm[int(p.normalize)], " out=", encoding_name(p.out));
  if (p.out == Encoding::kBf16 || p.out == Encoding::kFp16)
    r += cat("(", policy_spelling(p.out_cast), ")");
  if (p.lse != LseModel::kNatural) r += cat(" lse=", kLse[int(p.lse)]);
  return r;
}

void validate(const Pipeline& p) {
  if (p.block_q <= 0 || p.block_kv <= 0) fail("block sizes must be positive");
  validate_operand("q", p.q);
  validate_operand("k", p.k);
  validate_operand("v", p.v);
  if (p.k.prescale != Prescale::kNone || p.v.prescale != Prescale::kNone)
    fail("only q can be prescaled by the softmax scale");
  if (p.q.prescale == Prescale::kSmScaleLog2e && p.exp_base != ExpKind::kExp2)
    fail("q prescaled by sm_scale·log2(e) needs the exp2 exponent");
  if (p.q.prescale == Prescale::kSmScale && p.exp_base != ExpKind::kExp)
    fail("q prescaled by sm_scale needs the natural exponent");
  if (p.k.mean == MeanMode::kBlock)
    fail("k: a per-block mean is not a per-row constant (use the mean over all tokens)");
  if (p.v.mean == MeanMode::kBlock)
    fail("v: a per-block mean has no epilogue compensation (use the mean over all tokens)");
  validate_product("qk", p.qk, product_encoding(p.q), product_encoding(p.k));
  validate_product("pv", p.pv, p.p, product_encoding(p.v));
  if (p.pv.kind == DotModel::kMma && mma_info(p.pv.instr).acc == 2 &&
      p.pv_acc != PvAccumulate::kChunk)
    fail("pv: an integer accumulator cannot take O as C (use pv_acc=chunk)");
  if (p.dequant == Dequant::kFold && p.max_domain != MaxDomain::kScaled)
    fail("dequant=fold puts the scales into the exponent: it needs max=scaled");
  if (p.dequant == Dequant::kFold && p.q.mean != MeanMode::kNone)
    fail("dequant=fold has no place for the ΔS of a smoothed q (use dequant=score)");
  if (p.max_round != MaxRound::kNone && p.exp_base != ExpKind::kExp2)
    fail("a snapped max needs the exp2 exponent");
  if (p.rescale == Rescale::kIntAdd && p.max_round == MaxRound::kNone)
    fail("rescale=int_add needs a max snapped to an integer (max_round=ceil or nearest)");
  if (p.rescale == Rescale::kHook &&
      (p.rescale_hook.step == nullptr || p.state != StateType::kFp32 ||
       p.max_round != MaxRound::kNone || p.pv_acc != PvAccumulate::kChunk ||
       p.o_accum != Encoding::kFp32))
    fail("rescale=hook needs a step function, an FP32 state and O, an unsnapped max and pv_acc=chunk");
  if ((p.exp_fn == ExpFn::kEx2ApproxFtz || p.exp_fn == ExpFn::kEx2Approx) &&
      p.exp_base != ExpKind::kExp2)
    fail("ex2.approx evaluates exp2: it needs the exp2 exponent");
  if (p.exp_fn == ExpFn::kHook && p.exp_hook == nullptr) fail("exp=hook without a hook function");
  if (!std::isfinite(p.max_offset) || p.max_offset < 0) fail("max_offset must be finite and >= 0");
  if (p.dequant_tail < 0) fail("dequant_tail must be >= 0");
  if ((p.row_sum == RowSum::kSageLanes && p.block_kv % 16) ||
      (p.row_sum == RowSum::kTritonTree && p.block_kv % 8))
    fail("the row-sum model works on whole 16-key (SageAttention2) or 8-key (Triton) tiles");
  if (p.row_sum == RowSum::kMma) {
    validate_product("row sum", p.row_sum_mma, p.p, dot_requirements(p.row_sum_mma).b_enc);
    if (p.row_sum_mma.kind != DotModel::kMma || dot_requirements(p.row_sum_mma).integer_acc ||
        dot_requirements(p.row_sum_mma).fp16_acc)
      fail("the tensor-core row sum is an instruction with an FP32 accumulator");
  }
  if (p.rescale_fused && (p.pv_acc != PvAccumulate::kChunk || p.rescale != Rescale::kMultiply))
    fail("rescale_fused folds the multiply into the chunk's add: it needs pv_acc=chunk, rescale=mul");
  if (p.o_accum != Encoding::kFp32 && p.o_accum != Encoding::kFp16)
    fail("the O accumulator is fp32 or fp16");
  if (p.o_accum == Encoding::kFp16 &&
      (p.pv.kind != DotModel::kMma || !dot_requirements(p.pv).fp16_acc ||
       p.pv_acc != PvAccumulate::kIntoC || p.state != StateType::kFp32))
    fail("an fp16 O accumulator needs an fp16-accumulating P·V instruction taking O as C (FP32 state)");
  if ((p.lse == LseModel::kLog2Mufu || p.lse == LseModel::kLog2Libdevice) &&
      (p.exp_base != ExpKind::kExp2 || p.state != StateType::kFp32 || p.max_round != MaxRound::kNone))
    fail("the base-2 LSE models are FP32 kernels' (exp2, FP32 state, no snapped max)");
  if (!(p.mask_value < 0)) fail("the mask value must be negative");
  if (p.p == Encoding::kU8 || (is_int(p.p) && p.p_scale == PScale::kNone && p.p_static_scale == 0.0))
    fail("p: an integer P needs a scale (p_scale=row or tile, or a static scale) and a signed encoding");
  if (is_int(p.p) && p.p_scale == PScale::kNone && p.pv_acc != PvAccumulate::kChunk)
    fail("p: an integer P is multiplied into an int32 chunk: it needs pv_acc=chunk");
  if (p.p_scale != PScale::kNone) {
    if (!is_int(p.p)) fail("p: p_scale applies to integer P");
    if (p.p_quantizer.bits != encoding_traits(p.p).bits)
      fail(std::string("p: quantizer ") + p.p_quantizer.name + " does not make " +
           encoding_name(p.p) + " values");
    if (p.pv_acc != PvAccumulate::kChunk)
      fail("p: a scaled P is dequantized per KV block: it needs pv_acc=chunk");
  }
  if (p.p_static_scale != 0.0) {
    if (!(p.p_static_scale > 0.0) || !std::isfinite(p.p_static_scale))
      fail("p: the static P scale must be positive and finite");
    if (p.p_scale != PScale::kNone)
      fail("p: a static P scale applies to a P without a per-block scale");
  }
  if (p.out != Encoding::kFp64 && p.out != Encoding::kFp32 && p.out != Encoding::kBf16 &&
      p.out != Encoding::kFp16)
    fail("the output format is fp64, fp32, bf16 or fp16");
}

// ---------------------------------------------------------------------------------------------

namespace {

// SageAttention's smooth-V mean of every channel (fused.cu MeanScaleKernel<64, true>; SASS on the
// H100: `mean = FMUL.FTZ(sum, MUFU.RCP(I2FP.U32(L16)))`): the FP32 sum of the L16 = ceil(L/16)·16
// stored tokens (TransposePadPermute order within each 16, zeros past the sequence) in the
// kernel's thread and shuffle order, times the approximate reciprocal of L16.
void sage_channel_mean(const float* w, int tokens, int dim, float* mu) {
  static constexpr int kPerm[16] = {0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15};
  const int l16 = (tokens + 15) / 16 * 16;
  std::vector<float> stored(std::size_t(l16), 0.0f);
  const float r = RcpApproxFtz::h100()(float(l16));
  for (int c = 0; c < dim; ++c) {
    for (int p = 0; p < l16; ++p) {
      const int t = (p & ~15) + kPerm[p & 15];
      stored[std::size_t(p)] = t < tokens ? w[std::size_t(t) * dim + c] : 0.0f;
    }
    mu[c] = fmul_ftz(sage_mean_scale_sum(stored.data(), l16), r);
  }
}

float prescale_factor(Prescale ps, double sm) {
  // SageAttention 1 (core.py, quant_per_block.py): `q * (sm_scale * 1.44269504)`: a Python
  // double product with SageAttention's literal 1.44269504 (not log2 e to 17 digits), handed to
  // the Triton kernel as an FP32 scalar; one FMUL there.
  return ps == Prescale::kSmScaleLog2e ? float(sm * 1.44269504) : float(sm);
}

float round_to(Encoding e, double x) {
  constexpr Policy kRne{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};
  if (e == Encoding::kFp32) return float(x);
  return decode_float_bits(e, encode_float_bits(e, x, kRne));
}

float round_to(Encoding e, float x) {
  constexpr Policy kRne{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};
  if (e == Encoding::kFp32) return x;
  return decode_float_bits(e, encode_float_bits(e, x, kRne));
}

// One operand: every (batch, head) slice prepared on its own, as the kernels' per-head scales
// are ([b, h, n_groups] in SageAttention). `centered` receives the values after mean subtraction
// (before quantization) when asked for (ΔS needs K's).
PreparedOperand prepare_operand(const char* name, const std::vector<float>& x, int slices,
                                int tokens, int dim, const OperandSpec& s, double sm,
                                int k_step_bits, std::vector<float>* centered) {
  PreparedOperand out;
  out.slices = slices;
  out.tokens = tokens;
  out.dim = dim;
  out.enc = product_encoding(s);
  out.values.resize(x.size());
  out.mean_mode = s.mean;
  out.mean_block = s.mean == MeanMode::kTokens ? tokens : s.mean_block;
  const bool scaled = s.scale != ScaleMode::kNone;
  if (scaled) {
    // Scales multiplying the product's result need groups that do not vary along the reduction
    // (head_dim for Q/K): checked here, where the lengths are known.
    out.groups = s.groups;
    out.groups_per_slice = s.groups.count(tokens, dim);
  }
  if (scaled && s.apply == ScaleAt::kProduct && (name[0] == 'q' || name[0] == 'k')) {
    for (int t = 0; t < tokens; ++t) {
      const int g0 = s.groups.group(t, 0, tokens, dim);
      for (int c = 1; c < dim; ++c) {
        if (s.groups.group(t, c, tokens, dim) != g0) {
          fail(std::string(name) + ": " + s.groups.describe() +
               " scales vary along head_dim, the reduction of QKᵀ: the product cannot be "
               "dequantized (scale the operand instead)");
        }
      }
    }
  }
  if (s.mean != MeanMode::kNone) {
    out.means_per_slice = (tokens + out.mean_block - 1) / out.mean_block;
    out.mean.assign(std::size_t(slices) * out.means_per_slice * dim, 0.0f);
  }
  if (centered) centered->resize(x.size());
  const float pre = s.prescale != Prescale::kNone ? prescale_factor(s.prescale, sm) : 1.0f;
  std::vector<float> w(std::size_t(tokens) * dim);
  for (int sl = 0; sl < slices; ++sl) {
    const float* xs = x.data() + std::size_t(sl) * tokens * dim;
    for (std::size_t i = 0; i < w.size(); ++i) {
      // The format the tensor arrives in (the kernels' fp16/bf16 inputs), then the prescale.
      const float xin = s.input == Encoding::kFp32 ? xs[i] : round_to(s.input, xs[i]);
      w[i] = s.prescale != Prescale::kNone ? xin * pre : xin;
    }
    if (s.mean != MeanMode::kNone) {
      // The mean in FP64 (exact enough that its one rounding to mean_enc is the only one: torch's
      // mean accumulates in FP32 and rounds once to the input dtype), subtracted in FP32, the
      // difference rounded to centered_enc (SageAttention per_thread: `k - km` in the input dtype).
      for (int b = 0; b < out.means_per_slice; ++b) {
        const int t0 = b * out.mean_block, t1 = std::min(tokens, t0 + out.mean_block);
        float* mu = out.mean.data() + (std::size_t(sl) * out.means_per_slice + b) * dim;
        if (s.mean_rule == MeanRule::kSageChannel) {
          sage_channel_mean(w.data(), tokens, dim, mu);
        } else {
          for (int c = 0; c < dim; ++c) {
            double acc = 0;
            for (int t = t0; t < t1; ++t) acc += double(w[std::size_t(t) * dim + c]);
            mu[c] = round_to(s.mean_enc, acc / double(t1 - t0));
          }
        }
        for (int t = t0; t < t1; ++t) {
          for (int c = 0; c < dim; ++c) {
            float& v = w[std::size_t(t) * dim + c];
            v = round_to(s.centered_enc, v - mu[c]);
          }
        }
      }
    }
    if (centered) std::copy(w.begin(), w.end(), centered->begin() + std::size_t(sl) * tokens * dim);
    float* vs = out.values.data() + std::size_t(sl) * tokens * dim;
    if (!scaled) {
      for (std::size_t i = 0; i < w.size(); ++i)
        vs[i] = s.enc == Encoding::kFp32
                    ? w[i]
                    : decode_float_bits(s.enc, encode_float_bits(s.enc, w[i], s.cast));
      continue;
    }
    std::vector<float> sc;
    if (s.scale == ScaleMode::kInteger) {
      const QuantizedTensor qt = quantize_symmetric(w.data(), tokens, dim, s.groups, s.quantizer);
      for (std::size_t i = 0; i < w.size(); ++i) vs[i] = float(qt.q[i]);
      sc = qt.scale;
    } else {
      // SageAttention per_channel_fp8 (fused.cu MeanScaleKernel): v_scale = amax / scale_max,
      // q = cvt(x · (scale_max / amax)); the reciprocal rounded on its own. No epsilon: an
      // all-zero group gives 0 · inf = NaN, as the kernel does. kMufuRcp: both divisions are a
      // bare MUFU.RCP and an FMUL.FTZ, amax by FMNMX.FTZ (subnormals count as 0).
      const bool mufu = s.float_rule == FloatScaleRule::kMufuRcp;
      std::vector<float> amax = group_amax(w.data(), tokens, dim, s.groups);
      if (s.mean_rule == MeanRule::kSageChannel && s.mean != MeanMode::kNone) {
        // MeanScaleKernel's max/min run over the L16 stored tokens: the zero padding past the
        // sequence enters the amax as |0 − mean| (fused.cu: statistics over ceil(L/16)·16).
        const int l16 = (tokens + 15) / 16 * 16;
        const float* mu = out.mean.data() + std::size_t(sl) * out.means_per_slice * dim;
        if (l16 > tokens)
          for (int c = 0; c < dim; ++c) {
            float& a = amax[std::size_t(s.groups.group(0, c, tokens, dim))];
            a = std::max(a, std::fabs(0.0f - mu[c]));
          }
      }
      sc.resize(amax.size());
      std::vector<float> inv(amax.size());
      for (std::size_t g = 0; g < amax.size(); ++g) {
        if (mufu) {
          const float a = amax[g] < 0x1p-126f ? 0.0f : amax[g];
          sc[g] = fmul_ftz(a, RcpApproxFtz::h100()(s.float_max));
          inv[g] = fmul_ftz(RcpApproxFtz::h100()(a), s.float_max);
        } else {
          sc[g] = amax[g] / s.float_max;
          inv[g] = s.float_max / amax[g];
        }
      }
      for (int t = 0; t < tokens; ++t) {
        for (int c = 0; c < dim; ++c) {
          const std::size_t i = std::size_t(t) * dim + c;
          const float r = inv[std::size_t(s.groups.group(t, c, tokens, dim))];
          const float y = mufu ? fmul_ftz(r, w[i]) : w[i] * r;
          vs[i] = decode_float_bits(s.enc, encode_float_bits(s.enc, y, s.cast));
        }
      }
    }
    if (s.apply == ScaleAt::kOperand) {
      // x̂ = fl(q · s) (the FP32 multiply of QuantizedTensor::dequantize), rounded to dequant_to.
      for (int t = 0; t < tokens; ++t) {
        for (int c = 0; c < dim; ++c) {
          const std::size_t i = std::size_t(t) * dim + c;
          vs[i] =
              round_to(s.dequant_to, vs[i] * sc[std::size_t(s.groups.group(t, c, tokens, dim))]);
        }
      }
    } else {
      out.scales.insert(out.scales.end(), sc.begin(), sc.end());
    }
  }
  if (k_step_bits > 0) {
    // Encodings for an instruction model, zero-padded along the reduction to its k.
    out.dim_pad = (dim + k_step_bits - 1) / k_step_bits * k_step_bits;
    out.bits.assign(std::size_t(slices) * tokens * out.dim_pad, 0u);
    constexpr Policy kExact{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};
    for (std::size_t r = 0; r < std::size_t(slices) * tokens; ++r) {
      for (int c = 0; c < dim; ++c) {
        const float v = out.values[r * dim + c];
        out.bits[r * out.dim_pad + c] = is_float_encoding(out.enc)
                                            ? encode_float_bits(out.enc, v, kExact)
                                            : int_to_encoding(out.enc, std::int32_t(v));
      }
    }
  } else {
    out.dim_pad = dim;
  }
  return out;
}

}  // namespace

PreparedInput prepare_queries(const AttentionInput& in, const Pipeline& p) {
  validate(p);
  const AttentionShape& s = in.shape;
  if (!s.valid()) fail("invalid attention shape");
  if (p.q.mean != MeanMode::kNone) fail("q: a smoothed q needs K (use prepare)");
  PreparedInput r;
  r.shape = s;
  r.causal = in.causal;
  r.sm_scale = in.scale();
  const int qk_bits = p.qk.kind == DotModel::kMma ? dot_requirements(p.qk).k_step : 0;
  r.q = prepare_operand("q", in.q, s.batch * s.heads_q, s.len_q, s.head_dim, p.q, r.sm_scale,
                        qk_bits, nullptr);
  return r;
}

PreparedInput prepare(const AttentionInput& in, const Pipeline& p) {
  validate(p);
  const AttentionShape& s = in.shape;
  if (!s.valid()) fail("invalid attention shape");
  PreparedInput r;
  r.shape = s;
  r.causal = in.causal;
  r.sm_scale = in.scale();
  const DotRequirements qk = dot_requirements(p.qk), pv = dot_requirements(p.pv);
  const int qk_bits = p.qk.kind == DotModel::kMma ? qk.k_step : 0;
  std::vector<float> k_centered;
  r.q = prepare_operand("q", in.q, s.batch * s.heads_q, s.len_q, s.head_dim, p.q, r.sm_scale,
                        qk_bits, nullptr);
  r.k = prepare_operand("k", in.k, s.batch * s.heads_kv, s.len_kv, s.head_dim, p.k, r.sm_scale,
                        qk_bits, p.q.mean != MeanMode::kNone ? &k_centered : nullptr);
  // V's encodings are transposed per KV block by the tile loop; no reduction padding here.
  r.v = prepare_operand("v", in.v, s.batch * s.heads_kv, s.len_kv, s.head_dim_v, p.v, r.sm_scale,
                        p.pv.kind == DotModel::kMma ? 1 : 0, nullptr);
  (void)pv;
  if (r.v.scaled()) {
    // V's scales multiply the P·V result: per channel in the epilogue when the granularity does
    // not follow the keys (per tensor, per channel: SageAttention's fuse_v_scale), else per KV
    // block (pv_acc=chunk; TurboAttention's s_V per block), which needs every block inside one
    // group. Decided by the granularity, not by whether this input happens to fit one group.
    const Granularity g = p.v.groups.kind;
    const bool key_dependent = g != Granularity::kPerTensor && g != Granularity::kPerChannel;
    r.v.key_dependent_scale = key_dependent;
    if (key_dependent) {
      if (p.pv_acc != PvAccumulate::kChunk)
        fail("v: " + p.v.groups.describe() +
             " scales vary with the key: the P·V product is dequantized per KV block, which "
             "needs pv_acc=chunk");
      for (int j0 = 0; j0 < s.len_kv; j0 += p.block_kv) {
        for (int c = 0; c < s.head_dim_v; ++c) {
          const int g = p.v.groups.group(j0, c, s.len_kv, s.head_dim_v);
          for (int j = j0 + 1; j < std::min(s.len_kv, j0 + p.block_kv); ++j) {
            if (p.v.groups.group(j, c, s.len_kv, s.head_dim_v) != g)
              fail("v: " + p.v.groups.describe() + " scale groups split KV blocks of " +
                   std::to_string(p.block_kv) + " keys (a block is dequantized as one chunk)");
          }
        }
      }
    }
  }
  if (p.q.mean != MeanMode::kNone) {
    // ΔS = mean_q(block) · K̃ᵀ (SageAttention2 §3.2, Eq. for smooth Q), K̃ the K after its own
    // smoothing and before quantization, in the FP32 CUDA-core loop.
    const int nb = r.q.means_per_slice;
    r.delta_s.assign(std::size_t(s.batch) * s.heads_q * nb * s.len_kv, 0.0f);
    for (int b = 0; b < s.batch; ++b) {
      for (int h = 0; h < s.heads_q; ++h) {
        const int sq = b * s.heads_q + h, sk = b * s.heads_kv + h / s.group();
        for (int blk = 0; blk < nb; ++blk) {
          const float* mu = r.q.mean.data() + (std::size_t(sq) * nb + blk) * s.head_dim;
          float* ds = r.delta_s.data() + (std::size_t(sq) * nb + blk) * s.len_kv;
          for (int j = 0; j < s.len_kv; ++j) {
            const float* kj = k_centered.data() + (std::size_t(sk) * s.len_kv + j) * s.head_dim;
            ds[j] = float(dot_values(DotModel::kFp32, 0.0, mu, kj, s.head_dim));
          }
        }
      }
    }
  }
  if (p.k.mean != MeanMode::kNone) {
    // The LSE of the smoothed scores lacks q·mean_k·sm_scale (SageAttention core.py:
    // `lse + (q @ km^T) * sm_scale`), computed here in FP64 from the input q.
    r.lse_shift.assign(std::size_t(s.batch) * s.heads_q * s.len_q, 0.0);
    for (int b = 0; b < s.batch; ++b) {
      for (int h = 0; h < s.heads_q; ++h) {
        const int sk = b * s.heads_kv + h / s.group();
        const float* mu = r.k.mean.data() + std::size_t(sk) * r.k.means_per_slice * s.head_dim;
        for (int i = 0; i < s.len_q; ++i) {
          const std::size_t row = (std::size_t(b) * s.heads_q + h) * s.len_q + i;
          const float* qi = in.q.data() + row * s.head_dim;
          double acc = 0;
          for (int c = 0; c < s.head_dim; ++c) acc += double(qi[c]) * double(mu[c]);
          r.lse_shift[row] = acc * r.sm_scale;
        }
      }
    }
  }
  return r;
}

}  // namespace attnsim
