// The pipeline's vocabulary (see options.hpp): one name table per enum, the keys, the option list
// of a pipeline and the application of options.
#include "sim/pipeline/options.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <stdexcept>

#include "formats/encoding.hpp"

namespace attnsim {

namespace {

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument(what); }

// ---------------------------------------------------------------------------------------------
// One name table per enum.

template <class E>
struct Name {
  E value;
  const char* name;
};

template <class E, std::size_t N>
const char* name_of(const Name<E> (&t)[N], E e) {
  for (const Name<E>& n : t)
    if (n.value == e) return n.name;
  throw std::logic_error("name_of: an enum value without a name");
}
template <class E, std::size_t N>
E value_of(const Name<E> (&t)[N], const std::string& s, const char* key) {
  for (const Name<E>& n : t)
    if (s == n.name) return n.value;
  fail(std::string("pipeline option ") + key + "=" + s + " is not one of its choices");
}
template <class E, std::size_t N>
std::vector<std::string> names(const Name<E> (&t)[N]) {
  std::vector<std::string> r;
  for (const Name<E>& n : t) r.push_back(n.name);
  return r;
}

constexpr Name<KvOrder> kKvOrder[] = {
    {KvOrder::kDescending, "desc"}, {KvOrder::kAscending, "asc"}, {KvOrder::kSparse, "sparse"}};
constexpr Name<SoftcapFn> kSoftcapFn[] = {{SoftcapFn::kExact, "exact"},
                                          {SoftcapFn::kLibdevice, "libdevice"},
                                          {SoftcapFn::kExpDiv, "exp_div"}};
constexpr Name<EmptyMax> kEmptyMax[] = {{EmptyMax::kKeep, "keep"}, {EmptyMax::kZero, "zero"}};
constexpr Name<FmaBlocks> kFmaBlocks[] = {{FmaBlocks::kAll, "all"},
                                          {FmaBlocks::kFullDivisible, "full_div"}};
constexpr Name<CausalAlign> kCausal[] = {{CausalAlign::kBottomRight, "bottom_right"},
                                         {CausalAlign::kTopLeft, "top_left"}};
constexpr Name<StateType> kState[] = {{StateType::kFp32, "fp32"}, {StateType::kFp64, "fp64"}};
constexpr Name<ScaleLog2> kScaleLog2[] = {{ScaleLog2::kHostDouble, "host"},
                                          {ScaleLog2::kDeviceFloat, "device"},
                                          {ScaleLog2::kScoreFirst, "score"}};
constexpr Name<SmScale> kSmScale[] = {{SmScale::kInput, "input"}, {SmScale::kOne, "one"}};
constexpr Name<Dequant> kDequant[] = {
    {Dequant::kScore, "score"}, {Dequant::kFold, "fold"}, {Dequant::kDescale, "descale"}};
constexpr Name<MaxDomain> kMax[] = {{MaxDomain::kRaw, "raw"}, {MaxDomain::kScaled, "scaled"}};
constexpr Name<MaxRound> kMaxRound[] = {
    {MaxRound::kNone, "none"}, {MaxRound::kCeil, "ceil"}, {MaxRound::kNearest, "nearest"}};
constexpr Name<RowSum> kRowSum[] = {{RowSum::kQuad, "quad"},
                                    {RowSum::kSingle, "single"},
                                    {RowSum::kSageLanes, "sage_lanes"},
                                    {RowSum::kMma, "mma"},
                                    {RowSum::kTritonTree, "triton_tree"},
                                    {RowSum::kQuadFma, "quad_fma"},
                                    {RowSum::kQuadBlock, "quad_block"},
                                    {RowSum::kCutlassWarps, "cutlass_warps"},
                                    {RowSum::kTritonWarps, "triton_warps"},
                                    {RowSum::kWarpSum, "warp_sum"},
                                    {RowSum::kAtomicWarps, "atomic_warps"}};
constexpr Name<LseModel> kLse[] = {{LseModel::kNatural, "natural"},
                                   {LseModel::kLog2Mufu, "log2.mufu"},
                                   {LseModel::kLog2Libdevice, "log2.libdevice"},
                                   {LseModel::kNaturalFma, "natural.fma"},
                                   {LseModel::kNaturalFmaC, "natural.fma_c"},
                                   {LseModel::kNaturalDiv, "natural.div"},
                                   {LseModel::kLog2LibdeviceLn2, "log2.libdevice.ln2"},
                                   {LseModel::kNaturalLg2Fma, "natural.lg2fma"}};
constexpr Name<PScale> kPScale[] = {
    {PScale::kNone, "none"}, {PScale::kRow, "row"}, {PScale::kTile, "tile"}};
constexpr Name<PvAccumulate> kPvAcc[] = {{PvAccumulate::kIntoC, "c"},
                                         {PvAccumulate::kChunk, "chunk"}};
constexpr Name<ChunkAdd> kChunkAdd[] = {{ChunkAdd::kFadd, "fadd"},
                                         {ChunkAdd::kRedFtz, "red.ftz"},
                                         {ChunkAdd::kFaddFtz, "fadd.ftz"},
                                         {ChunkAdd::kCutlassEpilogue, "cutlass_epilogue"}};
constexpr Name<Rescale> kRescale[] = {{Rescale::kMultiply, "mul"},
                                      {Rescale::kIntAdd, "int_add"},
                                      {Rescale::kDivide, "divide"},
                                      {Rescale::kMultiplyFtz, "mul.ftz"}};
constexpr Name<Normalize> kNorm[] = {{Normalize::kRcp, "rcp"},
                                     {Normalize::kDiv, "div"},
                                     {Normalize::kRcpApproxFtz, "rcp.approx.ftz"},
                                     {Normalize::kDivFull, "div.full"},
                                     {Normalize::kNone, "none"}};
constexpr Name<Prescale> kPrescale[] = {{Prescale::kNone, "none"},
                                        {Prescale::kSmScale, "sm"},
                                        {Prescale::kSmScaleLog2e, "sm_log2e"},
                                        {Prescale::kSqrtSm, "sqrt_sm"}};
constexpr Name<PNorm> kPNorm[] = {{PNorm::kNone, "none"}, {PNorm::kWarpSum, "warp_sum"}};
constexpr Name<FloatScaleRule> kScaleRcp[] = {{FloatScaleRule::kIeee, "ieee"},
                                              {FloatScaleRule::kMufuRcp, "mufu"}};
constexpr Name<Round> kIntCvt[] = {{Round::kNearestEven, "rne"}, {Round::kTowardZero, "rz"}};
constexpr Name<Granularity> kGran[] = {{Granularity::kPerTensor, "per_tensor"},
                                       {Granularity::kPerToken, "per_token"},
                                       {Granularity::kPerChannel, "per_channel"},
                                       {Granularity::kPerBlock, "per_block"},
                                       {Granularity::kPerWarp, "per_warp"},
                                       {Granularity::kSagePerThreadQ, "per_thread"},
                                       {Granularity::kPerBlockChannel, "per_block_channel"}};
// (kSagePerThreadK is spelled per_thread too: the map follows the operand, as SageAttention2's
// fragment layouts do.)

// The exp key: the exponent's base and its function, one spelling per pair (hooks add theirs).
struct ExpName {
  ExpKind base;
  ExpFn fn;
  const char* name;
};
constexpr ExpName kExp[] = {{ExpKind::kExp2, ExpFn::kLibm, "exp2"},
                            {ExpKind::kExp, ExpFn::kLibm, "exp"},
                            {ExpKind::kExp2, ExpFn::kEx2ApproxFtz, "ex2.approx.ftz"},
                            {ExpKind::kExp2, ExpFn::kEx2Approx, "ex2.approx"},
                            {ExpKind::kExp2, ExpFn::kExact, "exp2.exact"},
                            {ExpKind::kExp, ExpFn::kExact, "exp.exact"},
                            {ExpKind::kExp, ExpFn::kExpfLibdevice, "expf"},
                            {ExpKind::kExp, ExpFn::kEx2ApproxLog2e, "ex2.approx.log2e"}};

const std::vector<std::string> kOperandEncodings{"fp32", "bf16", "fp16", "e4m3fn",
                                                 "e5m2", "s8",   "s4",   "s2"};
const std::vector<std::string> kInputFormats{"fp32", "bf16", "fp16"};
const std::vector<std::string> kMeanFormats{"fp32", "bf16", "fp16"};
// Float scale targets (SageAttention per_channel_fp8: 448; SageAttention2++ V: 2.25; the
// SageAttention2 paper's e5m2 V: 57344).
constexpr float kAmaxTargets[] = {448.0f, 2.25f, 57344.0f};

std::vector<std::string> with_first(std::vector<std::string> v, const std::string& first) {
  v.insert(v.begin(), first);
  return v;
}
std::vector<std::string> with_last(std::vector<std::string> v, const std::string& last) {
  v.push_back(last);
  return v;
}

std::string policy_text(const Policy& p) {
  std::string s = std::string(round_spelling(p.round)) + "/" + overflow_spelling(p.overflow);
  if (p.nan == NanEncoding::kMlDtypes) s += "/ml_dtypes";
  return s;
}
std::vector<std::string> policy_names() {
  std::vector<std::string> n;
  for (const char* r : kRoundNames)
    for (const char* o : kOverflowNames) n.push_back(std::string(r) + "/" + o);
  for (const char* o : kOverflowNames) n.push_back(std::string("rne/") + o + "/ml_dtypes");
  return n;
}
Policy parse_policy(const std::string& s, const char* key) {
  for (int r = 0; r < 5; ++r)
    for (int o = 0; o < 4; ++o)
      for (NanEncoding n : {NanEncoding::kCuda, NanEncoding::kMlDtypes}) {
        const Policy p{Round(r), Overflow(o), n};
        if (policy_text(p) == s) return p;
      }
  fail(std::string("pipeline option ") + key + "=" + s + " is not a conversion policy");
}

std::vector<std::string> quantizer_names() {
  std::vector<std::string> n{"none"};
  for (const SymmetricQuantizer* q : kSymmetricQuantizers) n.push_back(q->name);
  for (float a : kAmaxTargets) n.push_back("amax" + number_text(a));
  return n;
}
const SymmetricQuantizer& quantizer(const std::string& name, const char* key) {
  for (const SymmetricQuantizer* q : kSymmetricQuantizers)
    if (name == q->name) return *q;
  fail(std::string("pipeline option ") + key + "=" + name + " is not an integer quantizer");
}

Encoding encoding(const std::string& s, const char* key) {
  Encoding e;
  if (!parse_encoding(s.c_str(), &e))
    fail(std::string("pipeline option ") + key + "=" + s + " is not an encoding");
  return e;
}

bool is_fp8(Encoding e) { return e == Encoding::kE4m3fn || e == Encoding::kE5m2; }
bool is_16(Encoding e) { return e == Encoding::kBf16 || e == Encoding::kFp16; }
bool narrow_float(Encoding e) { return is_fp8(e) || is_16(e); }

std::string dot_text(const DotModel& m) { return dot_model_name(m); }
DotModel parse_dot(const std::string& s, const char* key) {
  DotModel m;
  if (!parse_dot_model(s, &m))
    fail(std::string("pipeline option ") + key + "=" + s + " is not a product model");
  return m;
}

// The 24 orders of 4 warps, spelled by their digits ("0123", "0132", ...).
std::vector<std::string> warp_orders() {
  std::vector<std::string> r;
  std::string w = "0123";
  do {
    r.push_back(w);
  } while (std::next_permutation(w.begin(), w.end()));
  return r;
}
std::string warp_order_text(const std::array<std::uint8_t, 4>& o) {
  std::string r;
  for (std::uint8_t w : o) r += char('0' + w);
  return r;
}

OptionKey choice(const char* key, const char* group, std::vector<std::string> choices,
                 const char* help, bool sparse = false) {
  OptionKey k;
  k.key = key;
  k.group = group;
  k.kind = OptionKey::kChoice;
  k.choices = std::move(choices);
  k.help = help;
  k.sparse = sparse;
  return k;
}
OptionKey integer(const char* key, const char* group, int min, const char* help,
                  bool sparse = false) {
  OptionKey k;
  k.key = key;
  k.group = group;
  k.kind = OptionKey::kInteger;
  k.min_int = min;
  k.help = help;
  k.sparse = sparse;
  return k;
}
OptionKey number(const char* key, const char* group, const char* help, bool sparse = false) {
  OptionKey k;
  k.key = key;
  k.group = group;
  k.kind = OptionKey::kNumber;
  k.help = help;
  k.sparse = sparse;
  return k;
}

// The keys without defaults (filled from Pipeline{} by pipeline_keys) and without hooks.
std::vector<OptionKey> base_keys() {
  const std::vector<std::string> grans = names(kGran);
  const std::vector<std::string> dequant{"product", "fp32", "bf16", "fp16"};
  std::vector<std::string> exp_names;
  for (const ExpName& e : kExp) exp_names.push_back(e.name);
  const std::vector<std::string> dots = dot_model_names();
  std::vector<OptionKey> t{
      // The flash method's keys before the pipeline, in their order (labels stay the same).
      choice("qkv", "operands", kOperandEncodings,
             "encoding of Q, K and V (each can be set on its own: q, k, v)"),
      choice("p", "p", {"fp32", "fp64", "bf16", "fp16", "e4m3fn", "e5m2", "s8", "s4", "s2"},
             "format P is cast to before P·V (fp64: not rounded; integers need p_scale or p_static)"),
      choice("out", "out", {"fp32", "bf16", "fp16", "fp64"}, "format O is written in"),
      choice("acc", "softmax", names(kState),
             "state arithmetic (m, l, O, exp argument, rescale); qk_dot/pv_dot=acc follow it"),
      choice("exp", "exp", exp_names,
             "exponent and its function: libm exp2 with folded log2(e) (FA2), libm exp, the H100's "
             "MUFU ex2 (.ftz or not), FP64-exact, Triton's tl.exp (ex2.approx.log2e: "
             "ex2.approx(fl(x·log2 e))), or a technique's (sas)"),
      choice("fma", "softmax", {"on", "off"}, "fuse s*scale - max into one FMA (nvcc --fmad=true)"),
      integer("bq", "tiles", 1, "query rows per tile"),
      integer("bk", "tiles", 1, "keys per KV block"),
      // Tiles and order.
      choice("kv_order", "tiles", names(kKvOrder),
             "KV block order: FA2/FA3 descending (masked blocks first), ascending, or sparse "
             "(FlexAttention: the blocks a block mask cuts, then the fully visible ones)"),
      // Operands.
      choice("q", "operands", with_first(kOperandEncodings, "qkv"), "encoding of Q"),
      choice("k", "operands", with_first(kOperandEncodings, "qkv"), "encoding of K"),
      choice("v", "operands", with_first(kOperandEncodings, "qkv"), "encoding of V"),
      choice("q_quant", "operands", quantizer_names(),
             "Q's scale: an integer quantizer (numerics/quantize.hpp) or a float amax target"),
      choice("k_quant", "operands", quantizer_names(), "K's scale"),
      choice("v_quant", "operands", quantizer_names(), "V's scale"),
      choice("q_gran", "operands", grans,
             "Q's scale groups (per_thread: SageAttention2's mma-fragment groups)"),
      choice("k_gran", "operands", grans, "K's scale groups"),
      choice("v_gran", "operands", grans, "V's scale groups"),
      integer("q_block", "operands", 1, "tokens per Q block / warp for the block granularities"),
      integer("k_block", "operands", 1, "tokens per K block / warp"),
      integer("v_block", "operands", 1, "tokens per V block / warp"),
      choice("q_dequant", "operands", dequant,
             "where Q's scale applies: on the product's result, or Q dequantized to "
             "fp32/bf16/fp16 first"),
      choice("k_dequant", "operands", dequant, "where K's scale applies"),
      choice("v_dequant", "operands", with_last(dequant, "rcp"),
             "where V's scale applies (rcp: per tensor or channel, multiplied into the epilogue's "
             "1/l, FA3 FP8)"),
      choice("q_mean", "operands", {"none", "tokens", "block"},
             "subtract Q's mean (block: per q_mean_block queries, with the ΔS correction)"),
      integer("q_mean_block", "operands", 1, "queries per Q mean block"),
      choice("k_mean", "operands", {"none", "tokens", "sage_channel"},
             "subtract K's mean over tokens (smooth K)"),
      choice("v_mean", "operands", {"none", "tokens", "sage_channel"},
             "subtract V's mean over tokens (added back in the epilogue; sage_channel: "
             "SageAttention's FP32 channel mean over the zero-padded tokens)"),
      choice("mean_fmt", "operands", kMeanFormats,
             "format the means and the centered values are rounded to (every operand unless "
             "its own *_mean_fmt / *_center_fmt says otherwise)"),
      choice("q_prescale", "operands", names(kPrescale),
             "multiply Q by sm_scale (or sm_scale·log2 e) before quantization"),
      choice("cvt8", "operands", policy_names(),
             "conversion to fp8 (operands, P): round/overflow[/NaN encoding]"),
      choice("cvt16", "operands", policy_names(), "conversion to bf16/fp16 (operands, P, output)"),
      // Products.
      choice("qk_dot", "qk", with_first(dots, "acc"),
             "QKᵀ product: CUDA-core fp32, fp64, exact, or an instruction of `attnsim mma --list`"),
      integer("qk_promote", "qk", 0, "QKᵀ: add the instruction chain to FP32 every N elements"),
      choice("int_cvt", "qk", names(kIntCvt), "int32 accumulator -> FP32 (rz: __int2float_rz)"),
      // Softmax.
      choice("dequant", "softmax", names(kDequant),
             "S = acc·s_q·s_k, or the scales folded into the exponent coefficient (needs "
             "max=scaled)"),
      choice("max", "softmax", names(kMax),
             "running max in score units (FA2) or in exponent units (SageAttention2, FlashMLA)"),
      number("max_offset", "softmax",
             "subtracted from the scaled max (FA3 FP8: 8; SageAttention2 FP8: 8.807 = log2 448)"),
      choice("max_round", "rescale", names(kMaxRound),
             "snap the max to an integer in exponent units (rescale factors become powers of two)"),
      choice("rowsum", "softmax", names(kRowSum),
             "row sum: SM80 FA2 quad lanes (l0+l2)+(l1+l3), one sum, SageAttention2's lanes, the "
             "tensor core (rowsum_dot), Triton's tl.sum tree, quad lanes with the rescale fused, "
             "cuDNN's per-lane block sums l=fma(alpha,l,b) combined (l0+l1)+(l2+l3), the CUTLASS "
             "fmha kernel's two column warps, PyTorch's softmax_warp_forward butterfly, Triton's "
             "tl.sum over 8-key column warps (vLLM: quads, then (W0+W2)+(W1+W3))"),
      // P, P·V, rescale, epilogue.
      choice("p_scale", "p", names(kPScale),
             "integer P: one scale per row or per tile and KV block (TurboAttention P̃)"),
      choice("p_quant", "p", with_first(quantizer_names(), "same"),
             "integer P's quantizer (same: symmetric_int8 of P's width)"),
      choice("pv_dot", "pv", with_first(dots, "acc"), "P·V product (as qk_dot)"),
      integer("pv_promote", "pv", 0, "P·V: add the instruction chain to FP32 every N keys"),
      choice("pv_acc", "pv", names(kPvAcc),
             "O as the product's C (FA2), or each block from zero then added (two-level)"),
      choice("rescale", "rescale", names(kRescale),
             "O·alpha by a multiply, AMLA's INT32 addition on the FP32 bits (needs max_round), "
             "O/alpha (TurboAttention Alg. 1 as printed), or a technique's step"),
      choice("norm", "normalize", names(kNorm),
             "epilogue O/l: IEEE reciprocal then multiply (FA2), division, MUFU rcp, div.full, "
             "none (P normalized before P·V)"),
      // Keys added with the stage-structured pipeline: every choice a preset makes is reachable.
      choice("causal", "tiles", names(kCausal),
             "which keys a causal mask hides: bottom-right aligned (FA2) or top-left "
             "(SageAttention's CUDA kernels)",
             true),
      choice("q_in", "operands", kInputFormats,
             "the format Q arrives in (rounded RNE before anything else)", true),
      choice("k_in", "operands", kInputFormats, "the format K arrives in", true),
      choice("v_in", "operands", kInputFormats, "the format V arrives in", true),
      integer("q_tile", "operands", 0,
              "Q scales allocated for tiles of N tokens (SageAttention's padding groups; 0: "
              "none; changes no value)",
              true),
      integer("k_tile", "operands", 0, "K scales allocated for tiles of N tokens", true),
      integer("v_tile", "operands", 0, "V scales allocated for tiles of N tokens", true),
      choice("q_scale_rcp", "operands", names(kScaleRcp),
             "a float scale's reciprocals: IEEE, or MUFU.RCP + FMUL.FTZ (SageAttention "
             "--use_fast_math)",
             true),
      choice("k_scale_rcp", "operands", names(kScaleRcp), "as q_scale_rcp", true),
      choice("v_scale_rcp", "operands", names(kScaleRcp), "as q_scale_rcp", true),
      choice("q_mean_fmt", "operands", with_first(kMeanFormats, "auto"),
             "format Q's mean is rounded to (auto: mean_fmt)", true),
      choice("k_mean_fmt", "operands", with_first(kMeanFormats, "auto"), "as q_mean_fmt", true),
      choice("v_mean_fmt", "operands", with_first(kMeanFormats, "auto"), "as q_mean_fmt", true),
      choice("q_center_fmt", "operands", with_first(kMeanFormats, "auto"),
             "format Q minus its mean is rounded to (auto: mean_fmt)", true),
      choice("k_center_fmt", "operands", with_first(kMeanFormats, "auto"), "as q_center_fmt",
             true),
      choice("v_center_fmt", "operands", with_first(kMeanFormats, "auto"), "as q_center_fmt",
             true),
      choice("q_cvt", "operands", with_first(policy_names(), "auto"),
             "Q's cast policy (auto: cvt8 or cvt16 by its encoding)", true),
      choice("k_cvt", "operands", with_first(policy_names(), "auto"), "as q_cvt", true),
      choice("v_cvt", "operands", with_first(policy_names(), "auto"), "as q_cvt", true),
      choice("scale_log2", "softmax", names(kScaleLog2),
             "scale_log2 = sm_scale·log2 e: FA2's host double product, an FP32 product on the "
             "device (SageAttention), or score: each score fl(acc·sm_scale), then times fl(log2 e) "
             "(the CUTLASS fmha with bias support)",
             true),
      choice("sm_scale", "softmax", names(kSmScale),
             "the softmax scale: the input's, or one (TurboAttention Alg. 1 as printed)", true),
      integer("sparse_block", "tiles", 1,
              "kv_order=sparse: keys (and queries) per block-mask block (FlexAttention's "
              "SPARSE_BLOCK_SIZE)",
              true),
      choice("softcap", "softmax", names(kSoftcapFn),
             "a softcapped input's C·tanh(s/C): exact (FP64, rounded once) or libdevice "
             "(FlexAttention: tanhf(s·fl(1/C))·C with libdevice's __nv_tanhf) or exp_div "
             "(vLLM: C·(e^u − e^-u)/(e^u + e^-u), u = s/C, tl.exp and div.full)",
             true),
      integer("rowsum_warps", "softmax", 1,
              "rowsum=triton_warps: Triton's warps along N (warpsPerCTA = [1, W]; 1, 2, 4 or 8)",
              true),
      choice("fma_blocks", "softmax", names(kFmaBlocks),
             "fma=on: in every block, or full_div: only in blocks a block mask leaves fully "
             "visible when both lengths are multiples of 128 (FlexAttention's SASS)",
             true),
      integer("dequant_tail", "softmax", 0,
              "with dequant=fold: the last N KV blocks of a tile take the score path "
              "(SageAttention2's masked blocks)",
              true),
      number("mask", "softmax", "the score of a masked key (FA2 -inf; SageAttention -5e6)", true),
      choice("rowsum_dot", "softmax", dots,
             "rowsum=mma: the instruction (P times ones, SageAttention sm80)", true),
      choice("lse", "softmax", names(kLse),
             "the LSE: natural log, or base 2 as lg2.approx.ftz / libdevice log2f (SageAttention's "
             "kernels), or an FP32 kernel's natural form: fma(m, k, __logf(l)) (FA2, cuDNN), with "
             "k = fl(c ln 2) (FA3), m / log2 e + logf(l) (CUTLASS)",
             true),
      choice("p_cvt", "p", with_first(policy_names(), "auto"),
             "P's cast policy (auto: cvt8 or cvt16 by its encoding)", true),
      number("p_static", "p",
             "a static P scale: P·s cast, O/s at the end (SageAttention2 Alg. 1's 448; 0: none)",
             true),
      choice("pv_int_cvt", "pv", names(kIntCvt), "an int32 P·V chunk -> FP32", true),
      choice("chunk_add", "pv", names(kChunkAdd),
             "how a chunk lands on O: FADD, the H100's float atomicAdd (RED.ADD.F32.FTZ), a fast-math "
             "FADD.FTZ in registers (vLLM's FA3 fork), or the CUTLASS fmha's output-buffer epilogue (fma(a, chunk, fl(fl(a·alpha)·O)), a = 1/l in "
             "the last block)",
             true),
      integer("pv_flush", "pv", 0,
              "with pv_acc=c: the tensor-core accumulator lands on a deferred-scale FP32 "
              "accumulator every N KV blocks (vllm-project/flash-attention #122's interval "
              "two-level FP8 accumulation; 0: never)",
              true),
      choice("pv_perm", "pv", {"none", "sage16", "kwidth4"},
             "instruction key order (sage16: SageAttention's V permutation within 16 keys; "
             "kwidth4: Triton's kWidth-4 operands, per 32 keys k mod 4 < 2 first)",
             true),
      choice("o_acc", "pv", {"fp32", "fp16"},
             "O's accumulator (fp16: SageAttention sm80 pv_accum=fp16)", true),
      choice("rescale_fused", "rescale", {"off", "on"},
             "with pv_acc=chunk: O = fma(alpha, O, chunk) in one rounding", true),
      choice("out_cvt", "out", with_first(policy_names(), "auto"),
             "the output's cast policy (auto: cvt16)", true),
      // Keys added for PyTorch SDPA's backends and FlashAttention-3 (sim/sdpa, sim/fa3).
      choice("ftz", "softmax", {"off", "on"},
             "the state's FP32 arithmetic with .ftz (FMUL/FADD/FFMA.FTZ: max, exponent arguments, "
             "row sum, O/l, LSE): --use_fast_math kernels, cuDNN",
             true),
      choice("k_prescale", "operands", {"none", "sqrt_sm"},
             "multiply K by sqrt(sm_scale) (with q_prescale=sqrt_sm: PyTorch's math backend)", true),
      choice("p_norm", "p", names(kPNorm),
             "normalize P before P·V (warp_sum: P / the row's softmax_warp_forward sum, one KV "
             "block per row; needs norm=none): PyTorch's math backend",
             true),
      // Keys added for vLLM's Triton unified_attention (sim/vllm).
      choice("empty_max", "softmax", names(kEmptyMax),
             "the running max of a row that has seen only masked keys: keep (-inf, FA2's "
             "Check_inf uses 0 for that block only) or zero (Triton's where(m > -inf, m, 0) "
             "carried to the next block)",
             true),
      choice("qk_perm", "qk", {"none", "kwidth4"},
             "instruction k order over head_dim (kwidth4: Triton's dot operands upcast from 8 "
             "bits, per 32-wide chunk k mod 4 < 2 first, then the rest)",
             true),
      // Keys added for cuDNN's decode kernel (sim/sdpa).
      choice("rowsum_order", "softmax", warp_orders(),
             "rowsum=atomic_warps: the order in which the 4 warps' partials reach the per-lane "
             "sum (cuDNN decode's shared-memory atomic add)",
             true),
      integer("pv_warps", "pv", 1,
              "1, or 4: each of 4 warps keeps its own O for its quarter of the block's keys, "
              "combined (O0 + O2) + (O1 + O3) at the end (cuDNN's decode kernel; needs pv_acc=c)",
              true),
  };
  return t;
}

const OptionKey* find_key(const std::vector<OptionKey>& keys, const std::string& k) {
  for (const OptionKey& x : keys)
    if (x.key == k) return &x;
  return nullptr;
}

void check_value(const OptionKey& k, const std::string& v) {
  if (k.kind == OptionKey::kChoice) {
    for (const std::string& c : k.choices)
      if (c == v) return;
    fail("pipeline option " + k.key + "=" + v + " is not one of its choices");
  }
  char* end = nullptr;
  if (k.kind == OptionKey::kInteger) {
    const long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || x < k.min_int || x > std::numeric_limits<int>::max())
      fail("pipeline option " + k.key + "=" + v + " is not an integer >= " + std::to_string(k.min_int));
    return;
  }
  std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0') fail("pipeline option " + k.key + "=" + v + " is not a number");
}

const char* operand_key(Operand o) { return o == Operand::kQ ? "q" : o == Operand::kK ? "k" : "v"; }

std::string gran_text(const GroupMap& g) {
  if (g.kind == Granularity::kSagePerThreadK) return "per_thread";
  return name_of(kGran, g.kind);
}

std::string amax_text(float f) {
  for (float a : kAmaxTargets)
    if (a == f) return "amax" + number_text(a);
  throw std::logic_error("pipeline_options: a float scale target without a spelling (" +
                         number_text(f) + ")");
}

}  // namespace

OptionList stage_options(const Pipeline& p0, Stage st) {
  const Pipeline p = canonical(p0);
  const OptionList all = pipeline_options(p);
  std::map<std::string, std::string> v(all.begin(), all.end());
  OptionList hook_exp, hook_rescale;
  if (p.exp.fn == ExpFn::kHook && p.exp.hook) hook_exp = p.exp.hook->options();
  if (p.rescale.kind == Rescale::kHook && p.rescale.hook) hook_rescale = p.rescale.hook->options();
  auto in = [](const OptionList& l, const std::string& k) {
    for (const auto& kv : l)
      if (kv.first == k) return true;
    return false;
  };
  auto member = [&](const std::string& k) -> bool {
    auto operand = [&](char o) { return k == std::string(1, o) || k.rfind(std::string(1, o) + "_", 0) == 0; };
    switch (st) {
      case Stage::kQ: return operand('q');
      case Stage::kK: return operand('k');
      case Stage::kV: return operand('v');
      case Stage::kQk: return k == "qk_dot" || k == "qk_promote" || k == "int_cvt" || k == "qk_perm";
      case Stage::kSoftmax:
        return k == "acc" || k == "fma" || k == "dequant" || k == "dequant_tail" || k == "max" ||
               k == "max_offset" || k == "rowsum" || k == "rowsum_dot" || k == "lse" ||
               k == "scale_log2" || k == "sm_scale" || k == "mask" || k == "ftz" ||
               k == "fma_blocks" || k == "softcap" || k == "rowsum_warps" || k == "empty_max" ||
               k == "rowsum_order";
      case Stage::kExp: return k == "exp" || in(hook_exp, k);
      case Stage::kP: return k == "p" || k.rfind("p_", 0) == 0;
      case Stage::kPv:
        return k == "pv_dot" || k == "pv_promote" || k == "pv_int_cvt" || k == "pv_acc" ||
               k == "chunk_add" || k == "pv_perm" || k == "o_acc" || k == "pv_flush" ||
               k == "pv_warps";
      case Stage::kRescale:
        return k == "rescale" || k == "max_round" || k == "rescale_fused" || in(hook_rescale, k);
      case Stage::kNormalize: return k == "norm";
      case Stage::kOut: return k == "out" || k == "out_cvt";
    }
    return false;
  };
  const Policy cvt8 = parse_policy(v.at("cvt8"), "cvt8"), cvt16 = parse_policy(v.at("cvt16"), "cvt16");
  auto site_policy = [&](Encoding e, const std::string& own) -> std::string {
    if (!narrow_float(e)) return "";
    if (own != "auto") return own;
    return policy_text(is_fp8(e) ? cvt8 : cvt16);
  };
  OptionList r;
  for (const auto& [k, val] : all) {
    if (!member(k)) continue;
    std::string x = val;
    if ((k == "q" || k == "k" || k == "v") && x == "qkv") x = v.at("qkv");
    if (k == "qk_dot" || k == "pv_dot")
      if (x == "acc") x = p.softmax.state == StateType::kFp32 ? "fp32" : "fp64";
    if (k == "q_cvt") x = site_policy(p.q.enc, x);
    if (k == "k_cvt") x = site_policy(p.k.enc, x);
    if (k == "v_cvt") x = site_policy(p.v.enc, x);
    if (k == "p_cvt") x = site_policy(p.p.enc, x);
    if (k == "out_cvt") x = site_policy(p.out.enc, x);
    if (k.size() > 9 && (k.compare(k.size() - 9, 9, "_mean_fmt") == 0 ||
                         k.compare(k.size() - 11 < k.size() ? k.size() - 11 : 0, 11, "_center_fmt") == 0))
      if (x == "auto") x = v.at("mean_fmt");
    if (x.empty()) continue;
    r.emplace_back(k, x);
  }
  return r;
}

std::string describe(const Pipeline& p) {
  std::string r;
  for (const auto& [k, v] : pipeline_options(p)) r += (r.empty() ? "" : ",") + k + "=" + v;
  return r;
}

std::string number_text(double x) {
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  if (std::isnan(x)) return "nan";
  char buf[64];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  return buf;
}

std::vector<OptionKey> pipeline_keys(const HookRegistry& hooks) {
  std::vector<OptionKey> keys = base_keys();
  for (const ExpHookSpec& h : hooks.exp) {
    for (OptionKey& k : keys)
      if (k.key == "exp") k.choices.push_back(h.name);
  }
  for (const RescaleHookSpec& h : hooks.rescale) {
    for (OptionKey& k : keys)
      if (k.key == "rescale") k.choices.push_back(h.name);
  }
  // FA2's defaults: the spelling of Pipeline{} (the one place they live).
  const OptionList d = pipeline_options(Pipeline{});
  for (OptionKey& k : keys)
    for (const auto& [key, value] : d)
      if (key == k.key) k.default_value = value;
  // The hooks' own keys: sparse, their defaults the hook's.
  for (const ExpHookSpec& h : hooks.exp)
    for (OptionKey k : h.keys) {
      k.sparse = k.hook = true;
      if (!find_key(keys, k.key)) keys.push_back(k);
    }
  for (const RescaleHookSpec& h : hooks.rescale)
    for (OptionKey k : h.keys) {
      k.sparse = k.hook = true;
      if (!find_key(keys, k.key)) keys.push_back(k);
    }
  return keys;
}

OptionList pipeline_options(const Pipeline& p0) {
  const Pipeline p = canonical(p0);
  OptionList r;
  auto put = [&](const std::string& k, const std::string& v) { r.emplace_back(k, v); };
  // The class policies: the first narrow site of each class (cvt8: q k v p; cvt16: q k v p out).
  const Policy def8 = kCudaSatfinite, def16 = kCudaRn;
  std::vector<std::pair<Encoding, Policy>> sites{
      {p.q.enc, p.q.cast}, {p.k.enc, p.k.cast}, {p.v.enc, p.v.cast}, {p.p.enc, p.p.cast}};
  Policy cvt8 = def8, cvt16 = def16;
  bool have8 = false, have16 = false;
  for (const auto& [e, pol] : sites) {
    if (is_fp8(e) && !have8) cvt8 = pol, have8 = true;
    if (is_16(e) && !have16) cvt16 = pol, have16 = true;
  }
  if (!have16 && is_16(p.out.enc)) cvt16 = p.out.cast;
  auto site_cvt = [&](Encoding e, const Policy& pol) -> std::string {
    if (!narrow_float(e)) return "auto";
    const Policy cls = is_fp8(e) ? cvt8 : cvt16;
    return pol == cls ? "auto" : policy_text(pol);
  };
  // The mean formats: the first operand with a mean.
  Encoding mean_fmt = Encoding::kFp32;
  for (const OperandSpec* s : {&p.q, &p.k, &p.v})
    if (s->mean != MeanMode::kNone) {
      mean_fmt = s->mean_enc;
      break;
    }
  const std::string qkv = encoding_name(p.q.enc);
  auto enc_or_qkv = [&](const OperandSpec& s) {
    return encoding_name(s.enc) == qkv ? std::string("qkv") : std::string(encoding_name(s.enc));
  };
  auto quant = [](const OperandSpec& s) -> std::string {
    if (s.scale == ScaleMode::kInteger) return s.quantizer.name;
    if (s.scale == ScaleMode::kFloat) return amax_text(s.float_max);
    return "none";
  };
  auto dq = [](const OperandSpec& s) -> std::string {
    if (s.scale != ScaleMode::kNone && s.apply == ScaleAt::kReciprocal) return "rcp";
    return s.scale != ScaleMode::kNone && s.apply == ScaleAt::kOperand ? encoding_name(s.dequant_to)
                                                                       : "product";
  };
  auto mean = [](const OperandSpec& s) -> std::string {
    if (s.mean == MeanMode::kBlock) return "block";
    if (s.mean == MeanMode::kTokens) return s.mean_rule == MeanRule::kSageChannel ? "sage_channel" : "tokens";
    return "none";
  };
  auto follows_state = [&](const DotModel& m) {
    return (p.softmax.state == StateType::kFp32 && m == DotModel{DotModel::kFp32}) ||
           (p.softmax.state == StateType::kFp64 && m == DotModel{DotModel::kFp64});
  };
  auto dot_key = [&](const DotModel& m) {
    if (follows_state(m)) return std::string("acc");
    DotModel n = m;
    n.promote = 0;
    return dot_text(n);
  };
  std::string exp_name;
  if (p.exp.fn == ExpFn::kHook) {
    exp_name = p.exp.hook ? p.exp.hook->name() : "hook";
  } else {
    for (const ExpName& e : kExp)
      if (e.base == p.softmax.base && e.fn == p.exp.fn) exp_name = e.name;
  }
  if (exp_name.empty()) throw std::logic_error("pipeline_options: an exp without a spelling");
  const int p_bits = is_float_encoding(p.p.enc) ? 8 : encoding_traits(p.p.enc).bits;
  const SymmetricQuantizer& same =
      p_bits == 4 ? kSymmetricInt4 : p_bits == 2 ? kSymmetricInt2 : kSymmetricInt8;

  put("qkv", qkv);
  put("p", encoding_name(p.p.enc));
  put("out", encoding_name(p.out.enc));
  put("acc", name_of(kState, p.softmax.state));
  put("exp", exp_name);
  put("fma", p.softmax.fma ? "on" : "off");
  put("bq", std::to_string(p.tile.block_q));
  put("bk", std::to_string(p.tile.block_kv));
  put("kv_order", name_of(kKvOrder, p.tile.kv_order));
  put("q", enc_or_qkv(p.q));
  put("k", enc_or_qkv(p.k));
  put("v", enc_or_qkv(p.v));
  put("q_quant", quant(p.q));
  put("k_quant", quant(p.k));
  put("v_quant", quant(p.v));
  put("q_gran", gran_text(p.q.groups));
  put("k_gran", gran_text(p.k.groups));
  put("v_gran", gran_text(p.v.groups));
  // The block size where the groups use none (unscaled, per tensor / token / channel) is the
  // table's default, 64.
  auto block = [](const OperandSpec& s) {
    const Granularity g = s.groups.kind;
    const bool unused = s.scale == ScaleMode::kNone || g == Granularity::kPerTensor ||
                        g == Granularity::kPerToken || g == Granularity::kPerChannel;
    return std::to_string(unused ? 64 : s.groups.block);
  };
  put("q_block", block(p.q));
  put("k_block", block(p.k));
  put("v_block", block(p.v));
  put("q_dequant", dq(p.q));
  put("k_dequant", dq(p.k));
  put("v_dequant", dq(p.v));
  put("q_mean", mean(p.q));
  put("q_mean_block", std::to_string(p.q.mean_block));
  put("k_mean", mean(p.k));
  put("v_mean", mean(p.v));
  put("mean_fmt", encoding_name(mean_fmt));
  put("q_prescale", name_of(kPrescale, p.q.prescale));
  put("cvt8", policy_text(cvt8));
  put("cvt16", policy_text(cvt16));
  put("qk_dot", dot_key(p.qk.dot));
  put("qk_promote", std::to_string(p.qk.dot.promote));
  put("int_cvt", name_of(kIntCvt, p.qk.int_cvt));
  put("dequant", name_of(kDequant, p.softmax.dequant));
  put("max", name_of(kMax, p.softmax.max_domain));
  put("max_offset", number_text(p.softmax.max_offset));
  put("max_round", name_of(kMaxRound, p.rescale.max_round));
  put("rowsum", name_of(kRowSum, p.softmax.row_sum));
  put("p_scale", name_of(kPScale, p.p.scale));
  put("p_quant", p.p.quantizer == same ? std::string("same") : std::string(p.p.quantizer.name));
  put("pv_dot", dot_key(p.pv.dot));
  put("pv_promote", std::to_string(p.pv.dot.promote));
  put("pv_acc", name_of(kPvAcc, p.pv.acc));
  put("rescale", p.rescale.kind == Rescale::kHook
                     ? (p.rescale.hook ? p.rescale.hook->name() : std::string("hook"))
                     : std::string(name_of(kRescale, p.rescale.kind)));
  put("norm", name_of(kNorm, p.normalize.kind));
  put("causal", name_of(kCausal, p.tile.causal));
  put("q_in", encoding_name(p.q.input));
  put("k_in", encoding_name(p.k.input));
  put("v_in", encoding_name(p.v.input));
  put("q_tile", std::to_string(p.q.groups.pad));
  put("k_tile", std::to_string(p.k.groups.pad));
  put("v_tile", std::to_string(p.v.groups.pad));
  put("q_scale_rcp", name_of(kScaleRcp, p.q.float_rule));
  put("k_scale_rcp", name_of(kScaleRcp, p.k.float_rule));
  put("v_scale_rcp", name_of(kScaleRcp, p.v.float_rule));
  for (const OperandSpec* s : {&p.q, &p.k, &p.v}) {
    const std::string n = s == &p.q ? "q" : s == &p.k ? "k" : "v";
    put(n + "_mean_fmt", s->mean == MeanMode::kNone || s->mean_enc == mean_fmt
                             ? std::string("auto")
                             : std::string(encoding_name(s->mean_enc)));
  }
  for (const OperandSpec* s : {&p.q, &p.k, &p.v}) {
    const std::string n = s == &p.q ? "q" : s == &p.k ? "k" : "v";
    put(n + "_center_fmt", s->mean == MeanMode::kNone || s->centered_enc == mean_fmt
                               ? std::string("auto")
                               : std::string(encoding_name(s->centered_enc)));
  }
  put("q_cvt", site_cvt(p.q.enc, p.q.cast));
  put("k_cvt", site_cvt(p.k.enc, p.k.cast));
  put("v_cvt", site_cvt(p.v.enc, p.v.cast));
  put("scale_log2", name_of(kScaleLog2, p.softmax.scale_log2));
  put("sm_scale", name_of(kSmScale, p.softmax.sm_scale));
  put("sparse_block", std::to_string(p.tile.sparse_block));
  put("fma_blocks", name_of(kFmaBlocks, p.softmax.fma_blocks));
  put("rowsum_warps", std::to_string(p.softmax.rowsum_warps));
  put("softcap", name_of(kSoftcapFn, p.softmax.softcap));
  put("dequant_tail", std::to_string(p.softmax.dequant_tail));
  put("mask", number_text(p.softmax.mask_value));
  put("rowsum_dot", dot_text(p.softmax.row_sum_dot));
  put("lse", name_of(kLse, p.softmax.lse));
  put("p_cvt", site_cvt(p.p.enc, p.p.cast));
  put("p_static", number_text(p.p.static_scale));
  put("pv_int_cvt", name_of(kIntCvt, p.pv.int_cvt));
  put("chunk_add", name_of(kChunkAdd, p.pv.chunk_add));
  put("pv_flush", std::to_string(p.pv.flush));
  put("pv_perm", p.pv.perm16 ? "sage16" : p.pv.kwidth4 ? "kwidth4" : "none");
  put("o_acc", encoding_name(p.pv.o_accum));
  put("rescale_fused", p.rescale.fused ? "on" : "off");
  put("out_cvt", is_16(p.out.enc) && !(p.out.cast == cvt16) ? policy_text(p.out.cast) : "auto");
  put("ftz", p.softmax.ftz ? "on" : "off");
  put("k_prescale", name_of(kPrescale, p.k.prescale));
  put("p_norm", name_of(kPNorm, p.p.norm));
  put("empty_max", name_of(kEmptyMax, p.softmax.empty_max));
  put("qk_perm", p.qk.kwidth4 ? "kwidth4" : "none");
  put("rowsum_order", warp_order_text(p.softmax.rowsum_order));
  put("pv_warps", std::to_string(p.pv.warps));
  if (p.exp.fn == ExpFn::kHook && p.exp.hook)
    for (const auto& kv : p.exp.hook->options()) r.push_back(kv);
  if (p.rescale.kind == Rescale::kHook && p.rescale.hook)
    for (const auto& kv : p.rescale.hook->options()) r.push_back(kv);
  return r;
}

namespace {

// The options given, read by key.
struct Given {
  const OptionMap& map;
  bool has(const std::string& k) const { return map.count(k) != 0; }
  const std::string& get(const std::string& k) const { return map.at(k); }
  double num(const std::string& k) const { return std::strtod(get(k).c_str(), nullptr); }
  int integer(const std::string& k) const { return int(std::strtol(get(k).c_str(), nullptr, 10)); }
  // A key given and not "auto" (the *_cvt, *_mean_fmt and *_center_fmt keys).
  bool set(const std::string& k) const { return has(k) && get(k) != "auto"; }
};

void apply_quant(OperandSpec& s, const std::string& q) {
  if (q == "none") {
    s.scale = ScaleMode::kNone;
  } else if (q.rfind("amax", 0) == 0) {
    s.scale = ScaleMode::kFloat;
    s.float_max = float(std::strtod(q.c_str() + 4, nullptr));
  } else {
    s.scale = ScaleMode::kInteger;
    s.quantizer = quantizer(q, "quant");
  }
}

void apply_groups(OperandSpec& s, Operand o, const Given& g, const std::string& n) {
  if (!g.has(n + "_gran") && !g.has(n + "_block") && !g.has(n + "_tile")) return;
  const int block = g.has(n + "_block") ? g.integer(n + "_block")
                                        : (s.scale == ScaleMode::kNone ? 64 : s.groups.block);
  if (g.has(n + "_gran")) {
    const std::string gn = g.get(n + "_gran");
    if (gn == "per_thread") {
      if (o == Operand::kV)
        fail("v_gran=per_thread: the per-thread groups are SageAttention2's Q and K maps");
      s.groups.kind = o == Operand::kQ ? Granularity::kSagePerThreadQ : Granularity::kSagePerThreadK;
    } else {
      s.groups.kind = value_of(kGran, gn, "gran");
    }
  }
  s.groups.block = block;
  if (g.has(n + "_tile")) s.groups.pad = g.integer(n + "_tile");
}

void apply_mean(OperandSpec& s, Operand o, const Given& g, const std::string& n) {
  if (g.has(n + "_mean")) {
    const std::string m = g.get(n + "_mean");
    s.mean = m == "block" ? MeanMode::kBlock : m == "none" ? MeanMode::kNone : MeanMode::kTokens;
    s.mean_rule = m == "sage_channel" ? MeanRule::kSageChannel : MeanRule::kFp64;
  }
  if (o == Operand::kQ && g.has("q_mean_block")) s.mean_block = g.integer("q_mean_block");
  if (g.set(n + "_mean_fmt")) {
    s.mean_enc = encoding(g.get(n + "_mean_fmt"), "mean_fmt");
  } else if (g.has("mean_fmt")) {
    s.mean_enc = encoding(g.get("mean_fmt"), "mean_fmt");
  }
  if (g.set(n + "_center_fmt")) {
    s.centered_enc = encoding(g.get(n + "_center_fmt"), "center_fmt");
  } else if (g.has("mean_fmt")) {
    s.centered_enc = encoding(g.get("mean_fmt"), "mean_fmt");
  }
}

// One operand's keys (q_*, k_*, v_*, and qkv for its encoding); returns whether its encoding was
// given (its cast then follows cvt8/cvt16).
bool apply_operand(OperandSpec& s, Operand o, const Given& g) {
  const std::string n = operand_key(o);
  bool enc_given = false;
  if (g.has(n + "_in")) s.input = encoding(g.get(n + "_in"), "in");
  if (g.has(n) && g.get(n) != "qkv") {
    s.enc = encoding(g.get(n), n.c_str());
    enc_given = true;
  } else if (g.has("qkv")) {
    s.enc = encoding(g.get("qkv"), "qkv");
    enc_given = true;
  }
  if (g.has(n + "_quant")) apply_quant(s, g.get(n + "_quant"));
  apply_groups(s, o, g, n);
  if (g.has(n + "_scale_rcp"))
    s.float_rule = value_of(kScaleRcp, g.get(n + "_scale_rcp"), "scale_rcp");
  if (g.has(n + "_dequant")) {
    const std::string d = g.get(n + "_dequant");
    if (d == "product") {
      s.apply = ScaleAt::kProduct;
    } else if (d == "rcp") {
      s.apply = ScaleAt::kReciprocal;
    } else {
      s.apply = ScaleAt::kOperand;
      s.dequant_to = encoding(d, "dequant");
    }
  }
  apply_mean(s, o, g, n);
  if (o == Operand::kQ && g.has("q_prescale"))
    s.prescale = value_of(kPrescale, g.get("q_prescale"), "q_prescale");
  if (o == Operand::kK && g.has("k_prescale"))
    s.prescale = value_of(kPrescale, g.get("k_prescale"), "k_prescale");
  return enc_given;
}

// A product's model (dot_key; "acc" follows the softmax state) and promotion interval.
void apply_dot(DotModel& m, StateType state, const Given& g, const char* dot_key,
               const char* promote_key) {
  if (g.has(dot_key)) {
    const std::string d = g.get(dot_key);
    m = d == "acc" ? DotModel{state == StateType::kFp32 ? DotModel::kFp32 : DotModel::kFp64}
                   : parse_dot(d, dot_key);
  }
  if (g.has(promote_key)) m.promote = g.integer(promote_key);
}

// A hook stage's choice (exp=, rescale=): `choose(builtin)` for one of the stage's own names, the
// hook built from its keys (given, else their defaults) for a hook's name. Without the stage key,
// a hook the preset chose is rebuilt when any of its keys is given. Returns the hook to install
// (empty: keep `current`) and whether a built-in name was chosen.
template <class Spec, class Ref>
Ref choose_hook(const std::vector<Spec>& specs, const Given& g, const char* stage_key,
                const Ref& current, bool current_is_hook, const std::function<bool()>& builtin,
                const Spec** chosen) {
  *chosen = nullptr;
  if (g.has(stage_key)) {
    const std::string name = g.get(stage_key);
    if (builtin()) return Ref{};
    for (const Spec& h : specs)
      if (name == h.name) {
        OptionMap hv;
        for (const OptionKey& k : h.keys) hv[k.key] = g.has(k.key) ? g.get(k.key) : k.default_value;
        *chosen = &h;
        return h.make(hv);
      }
    fail(std::string("pipeline option ") + stage_key + "=" + name + " is not one of its choices");
  }
  if (!current_is_hook || !current) return current;
  for (const Spec& h : specs) {
    if (h.name != current->name()) continue;
    bool any = false;
    OptionMap hv;
    for (const auto& [k, v] : current->options()) hv[k] = v;
    for (const OptionKey& k : h.keys)
      if (g.has(k.key)) hv[k.key] = g.get(k.key), any = true;
    if (any) {
      *chosen = &h;
      return h.make(hv);
    }
  }
  return current;
}

void apply_exp(Pipeline& p, const Given& g, const HookRegistry& hooks) {
  auto builtin = [&] {
    for (const ExpName& x : kExp)
      if (g.get("exp") == x.name) {
        p.softmax.base = x.base;
        p.exp.fn = x.fn;
        return true;
      }
    return false;
  };
  const ExpHookSpec* chosen = nullptr;
  HookRef<ExpHook> hook = choose_hook(hooks.exp, g, "exp", p.exp.hook,
                                      p.exp.fn == ExpFn::kHook, builtin, &chosen);
  if (g.has("exp") && !chosen) {
    p.exp.hook = {};
    return;
  }
  if (g.has("exp")) {  // a hook chosen by name (else the preset's hook, perhaps rebuilt)
    p.softmax.base = chosen->base;
    p.exp.fn = ExpFn::kHook;
  }
  p.exp.hook = std::move(hook);
}

void apply_rescale(Pipeline& p, const Given& g, const HookRegistry& hooks) {
  auto builtin = [&] {
    for (const Name<Rescale>& x : kRescale)
      if (g.get("rescale") == x.name) {
        p.rescale.kind = x.value;
        return true;
      }
    return false;
  };
  const RescaleHookSpec* chosen = nullptr;
  HookRef<RescaleHook> hook = choose_hook(hooks.rescale, g, "rescale", p.rescale.hook,
                                          p.rescale.kind == Rescale::kHook, builtin, &chosen);
  if (g.has("rescale") && !chosen) {
    p.rescale.hook = {};
  } else {
    if (g.has("rescale")) p.rescale.kind = Rescale::kHook;
    p.rescale.hook = std::move(hook);
  }
  if (g.has("max_round")) p.rescale.max_round = value_of(kMaxRound, g.get("max_round"), "max_round");
  if (g.has("rescale_fused")) p.rescale.fused = g.get("rescale_fused") == "on";
}

void apply_softmax(Pipeline& p, const Given& g) {
  SoftmaxStage& s = p.softmax;
  if (g.has("fma")) s.fma = g.get("fma") == "on";
  if (g.has("scale_log2")) s.scale_log2 = value_of(kScaleLog2, g.get("scale_log2"), "scale_log2");
  if (g.has("sm_scale")) s.sm_scale = value_of(kSmScale, g.get("sm_scale"), "sm_scale");
  if (g.has("fma_blocks")) s.fma_blocks = value_of(kFmaBlocks, g.get("fma_blocks"), "fma_blocks");
  if (g.has("rowsum_warps")) s.rowsum_warps = g.integer("rowsum_warps");
  if (g.has("rowsum_order")) {
    const std::string w = g.get("rowsum_order");
    for (std::size_t k = 0; k < 4; ++k) s.rowsum_order[k] = std::uint8_t(w[k] - '0');
  }
  if (g.has("softcap")) s.softcap = value_of(kSoftcapFn, g.get("softcap"), "softcap");
  if (g.has("dequant")) s.dequant = value_of(kDequant, g.get("dequant"), "dequant");
  if (g.has("dequant_tail")) s.dequant_tail = g.integer("dequant_tail");
  if (g.has("max")) s.max_domain = value_of(kMax, g.get("max"), "max");
  if (g.has("max_offset")) s.max_offset = g.num("max_offset");
  if (g.has("mask")) s.mask_value = g.num("mask");
  if (g.has("rowsum")) s.row_sum = value_of(kRowSum, g.get("rowsum"), "rowsum");
  if (g.has("rowsum_dot")) s.row_sum_dot = parse_dot(g.get("rowsum_dot"), "rowsum_dot");
  if (g.has("lse")) s.lse = value_of(kLse, g.get("lse"), "lse");
  if (g.has("ftz")) s.ftz = g.get("ftz") == "on";
  if (g.has("empty_max")) s.empty_max = value_of(kEmptyMax, g.get("empty_max"), "empty_max");
}

void apply_p(Pipeline& p, const Given& g) {
  if (g.has("p")) p.p.enc = encoding(g.get("p"), "p");
  if (g.has("p_scale")) p.p.scale = value_of(kPScale, g.get("p_scale"), "p_scale");
  if (g.has("p_quant") || g.has("p")) {
    const std::string pq = g.has("p_quant") ? g.get("p_quant") : std::string("same");
    if (pq == "same" || pq == "none" || pq.rfind("amax", 0) == 0) {
      const int bits = is_float_encoding(p.p.enc) ? 8 : encoding_traits(p.p.enc).bits;
      p.p.quantizer = bits == 4 ? kSymmetricInt4 : bits == 2 ? kSymmetricInt2 : kSymmetricInt8;
      if (pq != "same" && p.p.scale != PScale::kNone)
        fail("p_quant=" + pq + " is not an integer quantizer");
    } else {
      p.p.quantizer = quantizer(pq, "p_quant");
    }
  }
  if (g.has("p_static")) p.p.static_scale = g.num("p_static");
  if (g.has("p_norm")) p.p.norm = value_of(kPNorm, g.get("p_norm"), "p_norm");
}

void apply_pv(Pipeline& p, const Given& g) {
  apply_dot(p.pv.dot, p.softmax.state, g, "pv_dot", "pv_promote");
  if (g.has("pv_int_cvt")) p.pv.int_cvt = value_of(kIntCvt, g.get("pv_int_cvt"), "pv_int_cvt");
  if (g.has("pv_acc")) p.pv.acc = value_of(kPvAcc, g.get("pv_acc"), "pv_acc");
  if (g.has("chunk_add")) p.pv.chunk_add = value_of(kChunkAdd, g.get("chunk_add"), "chunk_add");
  if (g.has("pv_flush")) p.pv.flush = g.integer("pv_flush");
  if (g.has("pv_warps")) p.pv.warps = g.integer("pv_warps");
  if (g.has("pv_perm")) {
    p.pv.perm16 = g.get("pv_perm") == "sage16";
    p.pv.kwidth4 = g.get("pv_perm") == "kwidth4";
  }
  if (g.has("o_acc")) p.pv.o_accum = encoding(g.get("o_acc"), "o_acc");
}

// The cast policies of every narrow site: its own *_cvt, else its class's cvt8/cvt16 when that
// or the site's encoding was given; the output's the same with cvt16.
void apply_casts(Pipeline& p, const Given& g, const bool enc_given[3]) {
  const Policy cvt8 = g.has("cvt8") ? parse_policy(g.get("cvt8"), "cvt8") : kCudaSatfinite;
  const Policy cvt16 = g.has("cvt16") ? parse_policy(g.get("cvt16"), "cvt16") : kCudaRn;
  auto site = [&](Encoding e, Policy& pol, const char* own, bool given_enc) {
    if (g.set(own)) {
      pol = parse_policy(g.get(own), own);
      return;
    }
    if (is_fp8(e) && (g.has("cvt8") || given_enc)) pol = cvt8;
    if (is_16(e) && (g.has("cvt16") || given_enc)) pol = cvt16;
  };
  site(p.q.enc, p.q.cast, "q_cvt", enc_given[0]);
  site(p.k.enc, p.k.cast, "k_cvt", enc_given[1]);
  site(p.v.enc, p.v.cast, "v_cvt", enc_given[2]);
  site(p.p.enc, p.p.cast, "p_cvt", g.has("p"));
  if (g.set("out_cvt")) {
    p.out.cast = parse_policy(g.get("out_cvt"), "out_cvt");
  } else if (is_16(p.out.enc) && (g.has("cvt16") || g.has("out"))) {
    p.out.cast = cvt16;
  }
}

// A hook key given without its hook chosen (hooks may share keys: AMLA's two variants).
void check_hook_keys(const Pipeline& p, const Given& g, const HookRegistry& hooks) {
  std::vector<std::string> chosen;
  if (p.exp.fn == ExpFn::kHook && p.exp.hook)
    for (const auto& kv : p.exp.hook->options()) chosen.push_back(kv.first);
  if (p.rescale.kind == Rescale::kHook && p.rescale.hook)
    for (const auto& kv : p.rescale.hook->options()) chosen.push_back(kv.first);
  auto unchosen = [&](const std::string& k) {
    return g.has(k) && std::find(chosen.begin(), chosen.end(), k) == chosen.end();
  };
  for (const ExpHookSpec& h : hooks.exp)
    for (const OptionKey& k : h.keys)
      if (unchosen(k.key))
        fail("pipeline option " + k.key + " belongs to exp=" + h.name + ", which is not chosen");
  for (const RescaleHookSpec& h : hooks.rescale)
    for (const OptionKey& k : h.keys)
      if (unchosen(k.key))
        fail("pipeline option " + k.key + " belongs to rescale=" + h.name + ", which is not chosen");
}

}  // namespace

void apply_options(Pipeline& p, const OptionMap& given, const HookRegistry& hooks) {
  const std::vector<OptionKey> keys = pipeline_keys(hooks);
  for (const auto& [k, v] : given) {
    const OptionKey* key = find_key(keys, k);
    if (!key) fail("'" + k + "' is not a pipeline option");
    check_value(*key, v);
  }
  const Given g{given};
  if (g.has("bq")) p.tile.block_q = g.integer("bq");
  if (g.has("bk")) p.tile.block_kv = g.integer("bk");
  if (g.has("kv_order")) p.tile.kv_order = value_of(kKvOrder, g.get("kv_order"), "kv_order");
  if (g.has("sparse_block")) p.tile.sparse_block = g.integer("sparse_block");
  if (g.has("causal")) p.tile.causal = value_of(kCausal, g.get("causal"), "causal");
  // The softmax state first: qk_dot=acc and pv_dot=acc follow it.
  if (g.has("acc")) p.softmax.state = value_of(kState, g.get("acc"), "acc");
  const bool enc_given[3] = {apply_operand(p.q, Operand::kQ, g), apply_operand(p.k, Operand::kK, g),
                             apply_operand(p.v, Operand::kV, g)};
  apply_dot(p.qk.dot, p.softmax.state, g, "qk_dot", "qk_promote");
  if (g.has("int_cvt")) p.qk.int_cvt = value_of(kIntCvt, g.get("int_cvt"), "int_cvt");
  if (g.has("qk_perm")) p.qk.kwidth4 = g.get("qk_perm") == "kwidth4";
  apply_exp(p, g, hooks);
  apply_softmax(p, g);
  apply_p(p, g);
  apply_pv(p, g);
  apply_rescale(p, g, hooks);
  if (g.has("norm")) p.normalize.kind = value_of(kNorm, g.get("norm"), "norm");
  if (g.has("out")) p.out.enc = encoding(g.get("out"), "out");
  apply_casts(p, g, enc_given);
  check_hook_keys(p, g, hooks);
  p = canonical(p);
}

OptionKey hook_key(const char* key, const char* group, std::vector<std::string> choices,
                   const char* default_value, const char* help) {
  OptionKey k;
  k.key = key;
  k.group = group;
  k.choices = std::move(choices);
  k.default_value = default_value;
  k.help = help;
  return k;
}

}  // namespace attnsim
