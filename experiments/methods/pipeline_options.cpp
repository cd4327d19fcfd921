// Method-string options of the pipeline stages (see pipeline_options.hpp).
#include "experiments/methods/pipeline_options.hpp"

#include <stdexcept>

#include "experiments/cli/error.hpp"
#include "numerics/dot.hpp"
#include "numerics/quantize.hpp"

namespace attnsim {

namespace {

const std::vector<std::string> kOperandEncodings{"fp32", "bf16", "fp16", "e4m3fn",
                                                 "e5m2", "s8",   "s4",   "s2"};

std::vector<std::string> with_follow(std::vector<std::string> v, const std::string& first) {
  v.insert(v.begin(), first);
  return v;
}

std::vector<std::string> quantizer_names() {
  std::vector<std::string> n{"none"};
  for (const SymmetricQuantizer* q : kSymmetricQuantizers) n.push_back(q->name);
  // Float encodings scaled per group to a target maximum (SageAttention per_channel_fp8: 448;
  // SageAttention2++ V: 2.25).
  n.push_back("amax448");
  n.push_back("amax2.25");
  return n;
}

std::vector<std::string> policy_names() {
  std::vector<std::string> n;
  for (const char* r : kRoundNames)
    for (const char* o : kOverflowNames) n.push_back(std::string(r) + "/" + o);
  for (const char* o : kOverflowNames) n.push_back(std::string("rne/") + o + "/ml_dtypes");
  return n;
}

Policy parse_policy(const std::string& s) {
  Policy p{Round::kNearestEven, Overflow::kInf, NanEncoding::kCuda};
  const auto a = s.find('/'), b = s.find('/', a + 1);
  const std::string r = s.substr(0, a), o = s.substr(a + 1, b == std::string::npos ? b : b - a - 1);
  for (int i = 0; i < 5; ++i)
    if (r == kRoundNames[i]) p.round = Round(i);
  for (int i = 0; i < 4; ++i)
    if (o == kOverflowNames[i]) p.overflow = Overflow(i);
  if (b != std::string::npos) p.nan = NanEncoding::kMlDtypes;
  return p;
}

std::vector<std::string> dot_names(const char* follow) {
  return with_follow(dot_model_names(), follow);
}

const SymmetricQuantizer& quantizer(const std::string& name) {
  for (const SymmetricQuantizer* q : kSymmetricQuantizers)
    if (name == q->name) return *q;
  throw std::logic_error("quantizer: unchecked name '" + name + "'");
}

Encoding encoding(const std::string& s) {
  Encoding e;
  if (!parse_encoding(s.c_str(), &e)) throw std::logic_error("encoding: unchecked '" + s + "'");
  return e;
}

bool is_fp8(Encoding e) { return e == Encoding::kE4m3fn || e == Encoding::kE5m2; }

struct Row {
  const char* key;
  const char* group;
  std::vector<std::string> choices;  // empty: an integer >= min
  const char* def;
  const char* help;
  int min = 1;
};

const std::vector<Row>& rows() {
  static const std::vector<Row> r = [] {
    const std::vector<std::string> grans{"per_tensor",       "per_token", "per_channel",
                                         "per_block",        "per_warp",  "per_thread",
                                         "per_block_channel"};
    const std::vector<std::string> dequant{"product", "fp32", "bf16", "fp16"};
    std::vector<Row> t{
        // The flash method's keys before the pipeline, in their order (labels stay the same).
        {"qkv", "operands", kOperandEncodings, "fp32",
         "encoding of Q, K and V (each can be set on its own: q, k, v)"},
        {"p",
         "p",
         {"fp32", "fp64", "bf16", "fp16", "e4m3fn", "e5m2", "s8", "s4", "s2"},
         "fp32",
         "format P is cast to before P·V (fp64: not rounded; integers need p_scale)"},
        {"out", "out", {"fp32", "bf16", "fp16", "fp64"}, "fp32", "format O is written in"},
        {"acc",
         "softmax",
         {"fp32", "fp64"},
         "fp32",
         "state arithmetic (m, l, O, exp argument, rescale); products follow it unless qk_dot / "
         "pv_dot say otherwise"},
        {"exp",
         "exp",
         {"exp2", "exp", "ex2.approx.ftz", "ex2.approx", "exp2.exact", "exp.exact"},
         "exp2",
         "exponent and its function: libm exp2 with folded log2(e) (FA2), libm exp, the H100's "
         "MUFU ex2 (.ftz or not), or FP64-exact"},
        {"fma",
         "softmax",
         {"on", "off"},
         "on",
         "fuse s*scale - max into one FMA (nvcc --fmad=true)"},
        {"bq", "tiles", {}, "64", "query rows per tile"},
        {"bk", "tiles", {}, "64", "keys per KV block"},
        // Tiles and order.
        {"kv_order",
         "tiles",
         {"desc", "asc"},
         "desc",
         "KV block order: FA2/FA3 descending (masked blocks first) or ascending"},
        // Operands.
        {"q", "operands", with_follow(kOperandEncodings, "qkv"), "qkv", "encoding of Q"},
        {"k", "operands", with_follow(kOperandEncodings, "qkv"), "qkv", "encoding of K"},
        {"v", "operands", with_follow(kOperandEncodings, "qkv"), "qkv", "encoding of V"},
        {"q_quant", "operands", quantizer_names(), "none",
         "Q's scale: an integer quantizer (numerics/quantize.hpp) or a float amax target"},
        {"k_quant", "operands", quantizer_names(), "none", "K's scale"},
        {"v_quant", "operands", quantizer_names(), "none", "V's scale"},
        {"q_gran", "operands", grans, "per_tensor",
         "Q's scale groups (per_thread: SageAttention2's mma-fragment groups)"},
        {"k_gran", "operands", grans, "per_tensor", "K's scale groups"},
        {"v_gran", "operands", grans, "per_tensor", "V's scale groups"},
        {"q_block", "operands", {}, "64", "tokens per Q block / warp for the block granularities"},
        {"k_block", "operands", {}, "64", "tokens per K block / warp"},
        {"v_block", "operands", {}, "64", "tokens per V block / warp"},
        {"q_dequant", "operands", dequant, "product",
         "where Q's scale applies: on the product's result, or Q dequantized to fp32/bf16/fp16 "
         "first"},
        {"k_dequant", "operands", dequant, "product", "where K's scale applies"},
        {"v_dequant", "operands", dequant, "product", "where V's scale applies"},
        {"q_mean",
         "operands",
         {"none", "tokens", "block"},
         "none",
         "subtract Q's mean (block: per q_mean_block queries, with the ΔS correction)"},
        {"q_mean_block", "operands", {}, "128", "queries per Q mean block"},
        {"k_mean",
         "operands",
         {"none", "tokens"},
         "none",
         "subtract K's mean over tokens (smooth K)"},
        {"v_mean",
         "operands",
         {"none", "tokens"},
         "none",
         "subtract V's mean over tokens (added back in the epilogue)"},
        {"mean_fmt",
         "operands",
         {"fp32", "bf16", "fp16"},
         "fp32",
         "format the means and the centered values are rounded to"},
        {"q_prescale",
         "operands",
         {"none", "sm", "sm_log2e"},
         "none",
         "multiply Q by sm_scale (or sm_scale·log2 e) before quantization"},
        {"cvt8", "operands", policy_names(), "rne/saturate",
         "conversion to fp8 (operands, P): round/overflow[/NaN encoding]"},
        {"cvt16", "operands", policy_names(), "rne/inf",
         "conversion to bf16/fp16 (operands, P, output)"},
        // Products.
        {"qk_dot", "qk", dot_names("acc"), "acc",
         "QKᵀ product: CUDA-core fp32, fp64, or an instruction of `attnsim mma --list`"},
        {"qk_promote", "qk", {}, "0", "QKᵀ: add the instruction chain to FP32 every N elements", 0},
        {"int_cvt", "qk", {"rne", "rz"}, "rne", "int32 accumulator -> FP32 (rz: __int2float_rz)"},
        // Softmax.
        {"dequant",
         "softmax",
         {"score", "fold"},
         "score",
         "S = acc·s_q·s_k, or the scales folded into the exponent coefficient (needs max=scaled)"},
        {"max",
         "softmax",
         {"raw", "scaled"},
         "raw",
         "running max in score units (FA2) or in exponent units (SageAttention2, FlashMLA)"},
        {"max_offset",
         "softmax",
         {"0", "8", "8.807"},
         "0",
         "subtracted from the scaled max (FA3 FP8: 8; SageAttention2 FP8: 8.807 = log2 448)"},
        {"max_round",
         "rescale",
         {"none", "ceil", "nearest"},
         "none",
         "snap the max to an integer in exponent units (rescale factors become powers of two)"},
        {"rowsum",
         "softmax",
         {"quad", "single"},
         "quad",
         "row-sum lanes: SM80 FA2 quad partials combined (l0+l2)+(l1+l3), or one sum"},
        // P, P·V, rescale, epilogue.
        {"p_scale",
         "p",
         {"none", "row", "tile"},
         "none",
         "integer P: one scale per row or per tile and KV block (TurboAttention P̃)"},
        {"p_quant", "p", with_follow(quantizer_names(), "same"), "same",
         "integer P's quantizer (same: symmetric_int8 of P's width)"},
        {"pv_dot", "pv", dot_names("acc"), "acc", "P·V product (as qk_dot)"},
        {"pv_promote", "pv", {}, "0", "P·V: add the instruction chain to FP32 every N keys", 0},
        {"pv_acc",
         "pv",
         {"c", "chunk"},
         "c",
         "O as the product's C (FA2), or each block from zero then an FADD (two-level)"},
        {"rescale",
         "rescale",
         {"mul", "int_add", "divide"},
         "mul",
         "O·alpha by a multiply, AMLA's INT32 addition on the FP32 bits (needs max_round), or "
         "O/alpha (TurboAttention Alg. 1 as printed, diag(SAS)^-1)"},
        {"norm",
         "normalize",
         {"rcp", "div", "rcp.approx.ftz"},
         "rcp",
         "epilogue O/l: IEEE reciprocal then multiply (FA2), division, or MUFU rcp"},
    };
    return t;
  }();
  return r;
}

GroupMap group_map(const std::string& gran, int block, char operand) {
  if (gran == "per_tensor") return {Granularity::kPerTensor, 1, 0};
  if (gran == "per_token") return {Granularity::kPerToken, 1, 0};
  if (gran == "per_channel") return {Granularity::kPerChannel, 1, 0};
  if (gran == "per_block") return {Granularity::kPerBlock, block, 0};
  if (gran == "per_warp") return {Granularity::kPerWarp, block, 0};
  if (gran == "per_block_channel") return {Granularity::kPerBlockChannel, block, 0};
  if (operand == 'q') return sage_per_thread_q(block);
  if (operand == 'k') return sage_per_thread_k(block);
  throw UsageError("v_gran=per_thread: the per-thread groups are SageAttention2's Q and K maps");
}

OperandSpec operand(const MethodValues& v, char o) {
  const std::string x(1, o);
  OperandSpec s;
  const std::string e = v.at(x) == "qkv" ? v.at("qkv") : v.at(x);
  s.enc = encoding(e);
  const Policy cvt8 = parse_policy(v.at("cvt8")), cvt16 = parse_policy(v.at("cvt16"));
  s.cast = is_fp8(s.enc) ? cvt8 : cvt16;
  const std::string quant = v.at(x + "_quant");
  if (quant == "amax448" || quant == "amax2.25") {
    s.scale = ScaleMode::kFloat;
    s.float_max = quant == "amax448" ? 448.0f : 2.25f;
  } else if (quant != "none") {
    s.scale = ScaleMode::kInteger;
    s.quantizer = quantizer(quant);
  }
  s.groups = group_map(v.at(x + "_gran"), std::stoi(v.at(x + "_block")), o);
  const std::string dq = v.at(x + "_dequant");
  if (dq != "product") {
    s.apply = ScaleAt::kOperand;
    s.dequant_to = encoding(dq);
  }
  const std::string mean = v.at(x + "_mean");
  s.mean = mean == "tokens"  ? MeanMode::kTokens
           : mean == "block" ? MeanMode::kBlock
                             : MeanMode::kNone;
  if (o == 'q') s.mean_block = std::stoi(v.at("q_mean_block"));
  s.mean_enc = s.centered_enc = encoding(v.at("mean_fmt"));
  if (o == 'q') {
    const std::string ps = v.at("q_prescale");
    s.prescale = ps == "sm"         ? Prescale::kSmScale
                 : ps == "sm_log2e" ? Prescale::kSmScaleLog2e
                                    : Prescale::kNone;
  }
  return s;
}

DotModel dot(const std::string& name, const std::string& acc, const std::string& promote) {
  DotModel m;
  parse_dot_model(name == "acc" ? acc : name, &m);
  m.promote = std::stoi(promote);
  return m;
}

}  // namespace

std::vector<MethodParam> pipeline_params(const MethodValues& defaults) {
  std::vector<MethodParam> out;
  for (const Row& r : rows()) {
    MethodParam p{r.key, r.choices, r.def, r.help};
    p.min_int = r.min;
    const auto it = defaults.find(r.key);
    if (it != defaults.end()) p.default_value = it->second;
    out.push_back(std::move(p));
  }
  return out;
}

std::string pipeline_option_group(const std::string& key) {
  for (const Row& r : rows())
    if (key == r.key) return r.group;
  return "";
}

Pipeline pipeline_from_options(const MethodValues& v) {
  Pipeline p;
  p.block_q = std::stoi(v.at("bq"));
  p.block_kv = std::stoi(v.at("bk"));
  p.kv_order = v.at("kv_order") == "asc" ? KvOrder::kAscending : KvOrder::kDescending;
  p.q = operand(v, 'q');
  p.k = operand(v, 'k');
  p.v = operand(v, 'v');
  const std::string acc = v.at("acc");
  p.qk = dot(v.at("qk_dot"), acc, v.at("qk_promote"));
  p.pv = dot(v.at("pv_dot"), acc, v.at("pv_promote"));
  p.int_cvt = v.at("int_cvt") == "rz" ? Round::kTowardZero : Round::kNearestEven;
  p.dequant = v.at("dequant") == "fold" ? Dequant::kFold : Dequant::kScore;
  p.state = acc == "fp64" ? StateType::kFp64 : StateType::kFp32;
  const std::string e = v.at("exp");
  p.exp_base = e == "exp" || e == "exp.exact" ? ExpKind::kExp : ExpKind::kExp2;
  p.exp_fn = e == "ex2.approx.ftz"                     ? ExpFn::kEx2ApproxFtz
             : e == "ex2.approx"                       ? ExpFn::kEx2Approx
             : (e == "exp2.exact" || e == "exp.exact") ? ExpFn::kExact
                                                       : ExpFn::kLibm;
  p.fma = v.at("fma") == "on";
  p.max_domain = v.at("max") == "scaled" ? MaxDomain::kScaled : MaxDomain::kRaw;
  p.max_offset = std::stod(v.at("max_offset"));
  const std::string mr = v.at("max_round");
  p.max_round = mr == "ceil"      ? MaxRound::kCeil
                : mr == "nearest" ? MaxRound::kNearest
                                  : MaxRound::kNone;
  p.row_sum = v.at("rowsum") == "single" ? RowSum::kSingle : RowSum::kQuad;
  p.p = encoding(v.at("p"));
  p.p_cast = is_fp8(p.p) ? parse_policy(v.at("cvt8")) : parse_policy(v.at("cvt16"));
  const std::string ps = v.at("p_scale");
  p.p_scale = ps == "row" ? PScale::kRow : ps == "tile" ? PScale::kTile : PScale::kNone;
  const std::string pq = v.at("p_quant");
  if (pq == "same" || pq == "none" || pq == "amax448" || pq == "amax2.25") {
    const int bits = is_float_encoding(p.p) ? 8 : encoding_traits(p.p).bits;
    p.p_quantizer = bits == 4 ? kSymmetricInt4 : bits == 2 ? kSymmetricInt2 : kSymmetricInt8;
    if (pq != "same" && p.p_scale != PScale::kNone)
      throw UsageError("p_quant=" + pq + " is not an integer quantizer");
  } else {
    p.p_quantizer = quantizer(pq);
  }
  p.pv_acc = v.at("pv_acc") == "chunk" ? PvAccumulate::kChunk : PvAccumulate::kIntoC;
  const std::string rs = v.at("rescale");
  p.rescale = rs == "int_add" ? Rescale::kIntAdd : rs == "divide" ? Rescale::kDivide : Rescale::kMultiply;
  const std::string n = v.at("norm");
  p.normalize = n == "div"              ? Normalize::kDiv
                : n == "rcp.approx.ftz" ? Normalize::kRcpApproxFtz
                                        : Normalize::kRcp;
  p.out = encoding(v.at("out"));
  p.out_cast = parse_policy(v.at("cvt16"));
  try {
    validate(p);
  } catch (const std::invalid_argument& err) {
    throw UsageError(err.what());
  }
  return p;
}

// Runs a pipeline described by method values; errors that depend on the input (scale groups that
// split KV blocks, ...) become one-line usage errors.
MethodOutput run_pipeline_method(const AttentionInput& in, const MethodValues& v) {
  const Pipeline p = pipeline_from_options(v);
  try {
    PipelineResult r = run_pipeline(in, p);
    return MethodOutput{std::move(r.o), encoding_name(p.out), std::move(r.lse)};
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

}  // namespace attnsim
