// Registration of the TurboAttention methods (sim/turbo): `turbo` (Algorithms 1-2 with FlashQ,
// head-wise mixed precision, the KV buffer and SAS, every stage switchable) and `kivi` (the
// paper's KV-cache baseline). The option strings are a contract (issue 12); sim/turbo/README.md
// explains each choice and the paper line behind it.
#include <stdexcept>

#include "experiments/common/error.hpp"
#include "experiments/common/warning.hpp"
#include "experiments/methods/methods.hpp"
#include "sim/turbo/kivi.hpp"
#include "sim/turbo/turbo.hpp"

namespace attnsim {

namespace {

Encoding format_of(const std::string& s, const std::string& dtype) {
  if (s == "fp16") return Encoding::kFp16;
  if (s == "bf16") return Encoding::kBf16;
  if (s == "fp32") return Encoding::kFp32;
  return dtype == "bfloat16" ? Encoding::kBf16 : Encoding::kFp16;  // auto
}

TurboMode mode_of(const std::string& s) {
  return s == "prefill" ? TurboMode::kPrefill : s == "decode" ? TurboMode::kDecode : TurboMode::kAuto;
}

TurboOptions turbo_options(const MethodValues& v, const std::string& dtype) {
  TurboOptions o;
  o.br = std::stoi(v.at("br"));
  o.bc = std::stoi(v.at("bc"));
  o.mode = mode_of(v.at("mode"));
  o.prefill = std::stoi(v.at("prefill"));
  if (o.prefill == 0) o.prefill = -1;
  o.flashq = v.at("flashq") == "on";
  const std::string kb = v.at("kv_bits");
  o.kv_bits = kb == "mixed" ? 0 : std::stoi(kb);
  o.n_h = std::stoi(v.at("n_h"));
  if (o.n_h > 0 && kb != "mixed") o.kv_bits = 0;  // n_h > 0 asks for head-wise mixed precision
  const std::string sel = v.at("selector");
  o.selector = sel == "entropy"     ? HeadSelector::kEntropy
               : sel == "minmax"    ? HeadSelector::kMinMax
               : sel == "variation" ? HeadSelector::kVariation
                                    : HeadSelector::kPriority;
  o.nh_scope = v.at("nh_scope") == "kv_separate" ? HeadScope::kKvSeparate : HeadScope::kHead;
  const std::string hb = v.at("head_bits");
  if (hb != "auto") {
    // One digit (4 or 2) per KV head, K's then V's: "42/24" is K {4, 2}, V {2, 4}.
    const std::size_t slash = hb.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == hb.size() ||
        hb.find_first_not_of("24/") != std::string::npos || hb.find('/', slash + 1) != std::string::npos ||
        slash != hb.size() - slash - 1)
      throw std::invalid_argument("turbo: head_bits=" + hb +
                                  " is not allowed (expected auto or one digit 4 or 2 per KV head "
                                  "for K, '/', the same for V, e.g. 42/24)");
    if (o.n_h > 0 || kb != "4")
      throw std::invalid_argument(
          "turbo: head_bits gives every KV head's bits; kv_bits and n_h do not apply with it");
    for (std::size_t i = 0; i < slash; ++i) {
      o.head_bits_k.push_back(hb[i] - '0');
      o.head_bits_v.push_back(hb[slash + 1 + i] - '0');
    }
  }
  const std::string bpq = v.at("bpq");
  o.bpq = bpq == "alg1_appendix" ? kBpqAlg1Appendix
          : bpq == "alg1_main"   ? kBpqAlg1MainText
          : bpq == "alg1_ceil"   ? kBpqAlg1Ceil
          : bpq == "eq3_ceil"    ? kBpqEq3Ceil
                                 : kBpqOffset;
  o.compress = v.at("compress") == "on";
  const bool ceil = v.at("round") == "ceil";
  o.q8 = v.at("q8") == "126" ? kTurboInt8Eq4 : (ceil ? kTurboInt8AlgCeil : kTurboInt8Alg);
  o.p8 = ceil ? kTurboInt8AlgCeil : kTurboInt8Alg;
  o.p_scale = v.at("p_scale") == "row" ? PScale::kRow : PScale::kTile;
  const std::string bs = v.at("buffer_scale");
  o.buffer_scale = bs == "last" ? BufferScale::kLast : bs == "oracle" ? BufferScale::kOracle
                                                                      : BufferScale::kPrefill;
  o.buffer_clamp = std::stoi(v.at("buffer_clamp"));
  o.sas = v.at("exp") == "sas";
  o.sas_rule.fmt = v.at("sas_fmt") == "fp32" ? SasFormat::kFp32 : SasFormat::kFp16;
  o.sas_rule.fma = v.at("sas_fma") == "on";
  o.sas_rule.n_r = -std::stoi(v.at("n_r"));
  o.sas_rule.threshold =
      v.at("sas_threshold") == "literal" ? SasThreshold::kLiteral : SasThreshold::kIntended;
  o.rescale = v.at("rescale") == "literal_inverse" ? TurboRescale::kLiteralInverse
                                                   : TurboRescale::kMultiply;
  const std::string ss = v.at("softmax_scale");
  o.softmax_scale = ss == "prescale_q" ? TurboSoftmaxScale::kPrescaleQ
                    : ss == "none"     ? TurboSoftmaxScale::kNone
                                       : TurboSoftmaxScale::kExpArg;
  o.input = format_of(v.at("in"), dtype);
  o.out = format_of(v.at("out"), dtype);
  if (v.at("out") == "auto") o.out = o.input == Encoding::kBf16 ? Encoding::kBf16 : Encoding::kFp16;
  return o;
}

KiviOptions kivi_options(const MethodValues& v, const std::string& dtype) {
  KiviOptions o;
  o.bits = std::stoi(v.at("bits"));
  o.group = std::stoi(v.at("group"));
  o.residual = std::stoi(v.at("residual"));
  o.mode = mode_of(v.at("mode"));
  o.prefill = std::stoi(v.at("prefill"));
  if (o.prefill == 0) o.prefill = -1;
  o.out = format_of(v.at("out"), dtype);
  return o;
}

template <class F>
auto usage(F&& f) {
  try {
    return f();
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

// The same for kivi, whose decode schedule is turbo's (turbo_prefill_tokens): its messages say
// "turbo decode", which names the wrong method here.
template <class F>
auto kivi_usage(F&& f) {
  try {
    return f();
  } catch (const std::invalid_argument& e) {
    std::string m = e.what();
    if (m.rfind("turbo ", 0) == 0) m = "kivi " + m.substr(6);
    throw UsageError(m);
  }
}

// kivi_attention's mode rule (sim/turbo/kivi.cpp): auto is decode for causal inputs and single
// queries.
bool kivi_decodes(const KiviOptions& o, const AttentionInput& in) {
  return o.mode == TurboMode::kDecode ||
         (o.mode == TurboMode::kAuto && (in.causal || in.shape.len_q == 1));
}

}  // namespace

void register_turbo_methods(std::vector<MethodSpec>& r) {
  std::vector<std::string> nr;
  for (int k = 1; k <= 16; ++k) nr.push_back("-" + std::to_string(k));
  const std::vector<std::string> onoff{"on", "off"};
  std::vector<MethodParam> p{
      {"mode", {"auto", "prefill", "decode"}, "auto",
       "prefill: Algorithm 1 on every row; decode: Algorithm 1 on the first `prefill` tokens, then "
       "each later query as a teacher-forced Algorithm 2 step over the compressed cache and the "
       "buffer; auto: decode for causal inputs and single queries"},
      {"prefill", {}, "0",
       "decode: prompt tokens (0 = auto: len_kv - len_q for fewer queries than keys, else half the "
       "tokens rounded down to a multiple of bc)",
       0},
      {"br", {}, "64", "Algorithm 1's B_r: query rows per tile and per Q scale block", 1},
      {"bc", {}, "64",
       "Algorithm 1's B_c: keys per block, per K/V scale block, per cache block and buffer size n_b",
       1},
      {"flashq", onoff, "on",
       "FlashQ: INT8 per-block Q/K/V and P with exact INT32 products (off: FP16 FlashAttention)"},
      {"kv_bits", {"4", "2", "mixed"}, "4",
       "cache compression of the INT8 K/V blocks (BPQ stage 2, channelwise asymmetric integer); "
       "mixed: n_h heads at 2 bits by `selector`, the rest 4"},
      {"n_h", {}, "0", "heads (or K/V candidates with nh_scope=kv_separate) at 2 bits; > 0 implies "
       "kv_bits=mixed", 0},
      {"selector", {"priority", "entropy", "minmax", "variation"}, "priority",
       "which heads get 2 bits: the n_h lowest by priority = gap x std (Eq. 11-12), entropy of the "
       "attention rows, min-max gap alone, or the std of the channel gaps alone"},
      {"nh_scope", {"head", "kv_separate"}, "head",
       "one bit-width per KV head for K and V, or K and V ranked separately"},
      {"head_bits", {}, "auto",
       "every KV head's bits instead of kv_bits/n_h: one digit (4 or 2) per KV head for K, '/', "
       "the same for V (42/24: K {4, 2}, V {2, 4}); auto: kv_bits and n_h decide"},
      {"bpq", {"offset", "alg1_appendix", "alg1_main", "alg1_ceil", "eq3_ceil"}, "offset",
       "BPQ stage-2 reading: offset (z = min, 2^b - 1 levels; the intent), or Algorithm 1 / Eq. 3 "
       "as printed"},
      {"compress", onoff, "on", "off: decode reads the INT8 blocks uncompressed (stage 1 only)"},
      {"round", {"nearest", "ceil"}, "nearest",
       "INT8 rounding of Q, K, V and P (ceil: the printed ⌈·⌉)"},
      {"q8", {"119", "126"}, "119", "stage-1 divisor: 119 (Algorithms 1-2) or 126 (Eq. 4's sym row)"},
      {"p_scale", {"tile", "row"}, "tile", "P quantization scale per tile (Alg. 1) or per row"},
      {"buffer_scale", {"prefill", "last", "oracle"}, "prefill",
       "universal INT8 scale of new tokens: max over the prompt's blocks, the last prompt block's, "
       "or each block's own (oracle: no clamping)"},
      {"buffer_clamp", {}, "119", "new tokens' INT8 values are clamped to +-this (1..127)", 1},
      {"exp", {"sas", "exact"}, "sas", "SAS (LUT x cubic, sparsity threshold) or exact exp"},
      {"sas_fmt", {"fp16", "fp32"}, "fp16", "format SAS evaluates in"},
      {"sas_fma", onoff, "off", "each Horner step fused (HFMA2/FFMA) instead of multiply then add"},
      {"n_r", nr, "-6", "SAS sparsity threshold (exp of arguments below it is 0)"},
      {"sas_threshold", {"intended", "literal"}, "intended",
       "Algorithm 3's sparsity step as intended or as printed (X[X<n_r] = n_r+1, T[n_r+1] = 0)"},
      {"rescale", {"multiply", "literal_inverse"}, "multiply",
       "O's rescale: multiply by SAS(m_old - m_new), or divide as Alg. 1 prints diag(.)^-1"},
      {"softmax_scale", {"exp_arg", "prescale_q", "none"}, "exp_arg",
       "the 1/sqrt(d) Algorithm 1 omits: in the exponent's argument, folded into Q, or none"},
      {"in", {"auto", "fp16", "bf16"}, "auto", "input format (auto: a bf16 dump's, else fp16)"},
      {"out", {"auto", "fp16", "bf16", "fp32"}, "auto", "output format (auto: the input's)"},
  };
  for (MethodParam& q : p)
    if (q.key == "head_bits") q.text = q.sparse = true;  // the recorded method strings stay
  MethodSpec t;
  t.name = "turbo";
  t.help =
      "TurboAttention (Kang et al.): FlashQ INT8 + BPQ 4/2-bit KV cache, head-wise mixed "
      "precision, the KV buffer and SAS exp, prefill (Alg. 1) and decode (Alg. 2) as presets of "
      "the attention pipeline (sim/turbo)";
  t.params = p;
  t.check = [](const MethodValues& v) {
    const TurboOptions o = usage([&] { return turbo_options(v, "float32"); });
    (void)usage([&] { return turbo_pipeline(o); });
  };
  t.preset = [](const MethodValues& v, const AttentionInput& in) {
    const TurboOptions o = usage([&] { return turbo_options(v, in.dtype); });
    return usage([&] { return turbo_pipeline(o); });
  };
  t.run_with = [](const AttentionInput& in, const MethodValues& v, const Pipeline& pl) {
    const TurboOptions o = usage([&] { return turbo_options(v, in.dtype); });
    TurboResult res = usage([&] { return turbo_attention(in, o, pl); });
    MethodOutput out{std::move(res.out.o), encoding_name(pl.out.enc), std::move(res.out.lse), {}};
    out.resolved["mode"] = res.decode ? "decode" : "prefill";
    if (res.decode) out.resolved["prefill"] = std::to_string(res.prefill);
    out.resolved["in"] = encoding_name(o.input);
    return out;
  };
  t.outside = [](const MethodValues& v, const AttentionInput& in) {
    const TurboOptions o = usage([&] { return turbo_options(v, in.dtype); });
    const bool decode = o.mode == TurboMode::kDecode ||
                        (o.mode == TurboMode::kAuto &&
                         ((in.causal && in.shape.len_q <= in.shape.len_kv) || in.shape.len_q == 1));
    if (!decode) return std::vector<std::string>{};
    return std::vector<std::string>{
        "the decode schedule over the KV cache: BPQ stage-2 compression of K and V to " +
        std::string(o.kv_bits == 0 ? "mixed 4/2" : std::to_string(o.kv_bits)) +
        " bits per channel and the INT8 buffer with its universal scale (read by decode steps "
        "while k and v are FlashQ's; made exact along with k and v)"};
  };
  r.push_back(std::move(t));
  std::vector<MethodParam> k{
      {"bits", {"4", "2"}, "4", "code bits (KIVI-4, KIVI-2)"},
      {"group", {}, "64", "group size: tokens per K channel group, channels per V token group", 1},
      {"residual", {}, "64", "full-precision (FP16) residual tokens R", 1},
      {"mode", {"auto", "prefill", "decode"}, "auto", "as turbo's mode"},
      {"prefill", {}, "0", "decode: prompt tokens (0 = auto, as turbo)", 0},
      {"out",
       {"auto", "fp16", "bf16", "fp32"},
       "auto",
       "output format (auto: the input's: bf16 for a bf16 dump, else fp16)"},
  };
  MethodSpec kv;
  kv.name = "kivi";
  kv.help =
      "KIVI (Liu et al.), TurboAttention's KV-cache baseline: per-channel K and per-token V "
      "asymmetric quantization in groups, FP16 residual, dequantize then FP16 attention";
  kv.params = k;
  kv.preset = [](const MethodValues& v, const AttentionInput& in) {
    return kivi_pipeline(kivi_usage([&] { return kivi_options(v, in.dtype); }));
  };
  kv.run_with = [](const AttentionInput& in, const MethodValues& v, const Pipeline& pl) {
    const KiviOptions o = kivi_usage([&] { return kivi_options(v, in.dtype); });
    PipelineResult res = kivi_usage([&] { return kivi_attention(in, o, pl); });
    MethodOutput out = pipeline_output(std::move(res), pl);
    const bool decode = kivi_decodes(o, in);
    out.resolved["mode"] = decode ? "decode" : "prefill";
    if (decode) {
      out.resolved["prefill"] = std::to_string(turbo_prefill_tokens(in, o.prefill, o.group));
    } else {
      warn("kivi ran in prefill mode (a non-causal input, or mode=prefill): every row attends the "
           "FP16 K and V, so every bits/group/residual gives FP16 FlashAttention bit for bit; "
           "KIVI's quantized cache is read only by decode steps, which need a causal input or a "
           "single query");
    }
    return out;
  };
  kv.outside = [](const MethodValues& v, const AttentionInput& in) {
    const KiviOptions o = kivi_usage([&] { return kivi_options(v, in.dtype); });
    if (!kivi_decodes(o, in)) return std::vector<std::string>{};
    return std::vector<std::string>{
        "the KV cache: KIVI's " + std::to_string(o.bits) +
        "-bit asymmetric group quantization of K (per channel) and V (per token) with the FP16 "
        "residual, dequantized to FP16 before the pipeline (not attributed to a stage)"};
  };
  r.push_back(std::move(kv));
}

}  // namespace attnsim
