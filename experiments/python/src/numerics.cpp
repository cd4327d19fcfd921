// attnsim._core's numerics side: conversions (`attnsim convert`), the quantizers of `attnsim
// quantize`, the tensor-core instruction models (`attnsim mma`) and the H100's approximate special
// functions (`attnsim special`), with the command line's checks and messages. Contiguous inputs
// are read in place; every call computes with the GIL released.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "arrays.hpp"
#include "bindings.hpp"
#include "experiments/analysis/quantize_study.hpp"
#include "experiments/common/names.hpp"
#include "experiments/io/convert.hpp"
#include "experiments/io/input_checks.hpp"
#include "formats/encoding.hpp"
#include "formats/float32.hpp"
#include "numerics/mma.hpp"
#include "numerics/special.hpp"

namespace attnsim::py {

namespace {

bool is_16bit_format(const std::string& f) { return f == "bf16" || f == "fp16"; }

// Encodes float values; 8-bit formats and integers as uint8 (int4/int2 packed: 2 or 4 per byte,
// element 0 in the low bits, flat), 16-bit formats as uint16, in x's shape.
nb::object convert_encode(const AnyArray& x, const std::string& tag, const std::string& format,
                          const std::string& round, const std::string& overflow,
                          const std::string& nan, double scale, bool packed) {
  require_cpu(x, "x");
  const Elem e = elem_of(x, tag);
  if (e != Elem::kF32 && e != Elem::kF64 && e != Elem::kF16 && e != Elem::kBf16) {
    throw nb::type_error(("x has dtype " + dtype_name(x) +
                          "; convert encodes float32 or float64 values (float16 and bfloat16 "
                          "exactly as float32)")
                             .c_str());
  }
  ConvertRequest req;
  req.format = format;
  req.scale = scale;
  req.packed = packed;
  req.policy.round = parse_round(round);
  req.policy.nan = parse_nan_encoding(nan);
  if (overflow.empty()) {
    throw UsageError("overflow= is required when encoding (" + join_choices(overflow_names()) +
                     ")");
  }
  req.policy.overflow = parse_overflow(overflow);
  std::vector<std::uint8_t> bytes;
  {
    nb::gil_scoped_release release;
    const std::size_t n = count_of(x);
    if (e == Elem::kF64) {
      if (c_contiguous(x)) {
        bytes = encode_array(static_cast<const double*>(x.data()), n, req);
      } else {
        const std::vector<double> v = read_raw<double>(x);
        bytes = encode_array(v.data(), n, req);
      }
    } else if (e == Elem::kF32 && c_contiguous(x)) {
      bytes = encode_array(static_cast<const float*>(x.data()), n, req);  // in place
    } else {
      const std::vector<float> v = read_f32(x, e);
      bytes = encode_array(v.data(), n, req);
    }
  }
  std::vector<std::size_t> shape(x.ndim());
  for (std::size_t i = 0; i < shape.size(); ++i) shape[i] = x.shape(i);
  if (is_16bit_format(format)) {
    std::vector<std::uint16_t> w(bytes.size() / 2);
    if (!w.empty()) std::memcpy(w.data(), bytes.data(), bytes.size());
    return nb::cast(to_numpy(std::move(w), shape));
  }
  if (packed) shape = {bytes.size()};
  return nb::cast(to_numpy(std::move(bytes), shape));
}

// Decodes encodings (uint8 or int8 bytes for 8-bit formats and integers, uint16 for 16-bit ones)
// to float32, in the input's shape (packed input: `count` elements, flat).
nb::object convert_decode(const AnyArray& bits, const std::string& format, double scale,
                          bool packed, std::size_t count) {
  require_cpu(bits, "x");
  const Elem e = elem_of(bits);
  const bool wide = is_16bit_format(format);
  if (wide ? e != Elem::kU16 : (e != Elem::kU8 && e != Elem::kI8)) {
    throw nb::type_error(("x has dtype " + dtype_name(bits) + "; decoding " + format +
                          " takes its encodings as " + (wide ? "uint16" : "uint8 (or int8)"))
                             .c_str());
  }
  ConvertRequest req;
  req.format = format;
  req.scale = scale;
  req.packed = packed;
  std::vector<float> out;
  {
    nb::gil_scoped_release release;
    const std::size_t n = count_of(bits) * (wide ? 2 : 1);
    if (c_contiguous(bits)) {
      out = decode_array(static_cast<const std::uint8_t*>(bits.data()), n, req, count);
    } else {
      std::vector<std::uint8_t> b(n);
      if (wide) {
        const std::vector<std::uint16_t> w = read_raw<std::uint16_t>(bits);
        if (n) std::memcpy(b.data(), w.data(), n);
      } else {
        b = read_raw<std::uint8_t>(bits);
      }
      out = decode_array(b.data(), n, req, count);
    }
  }
  std::vector<std::size_t> shape(bits.ndim());
  for (std::size_t i = 0; i < shape.size(); ++i) shape[i] = bits.shape(i);
  if (packed) shape = {out.size()};
  return nb::cast(to_numpy(std::move(out), shape));
}

nb::dict quantize(const AnyArray& x, const std::string& tag, const std::string& quantizer,
                  const std::string& granularity, bool smooth) {
  require_cpu(x, "x");
  const Elem e = elem_of(x, tag);
  if (e != Elem::kF32 && e != Elem::kF64 && e != Elem::kF16 && e != Elem::kBf16) {
    throw nb::type_error(("x has dtype " + dtype_name(x) +
                          "; quantize takes float32 values (float16, bfloat16 exactly; float64 "
                          "rounded to float32)")
                             .c_str());
  }
  if (x.ndim() != 2) {
    throw UsageError(
        "x must have rank 2 [tokens, channels] (or more, leading dimensions being "
        "heads); got rank " +
        std::to_string(x.ndim()));
  }
  if (x.shape(0) == 0 || x.shape(1) == 0) throw UsageError("x is empty");
  if (x.shape(0) > std::size_t(INT_MAX) || x.shape(1) > std::size_t(INT_MAX))
    throw UsageError("x has a dimension beyond the limit of 2147483647");
  const int tokens = int(x.shape(0)), channels = int(x.shape(1));
  const GroupMap map = parse_granularity(granularity);
  const std::vector<std::string> known = quantizer_names();
  if (std::find(known.begin(), known.end(), quantizer) == known.end()) {
    throw UsageError("unknown quantizer '" + quantizer + "' (expected " + join_choices(known) +
                     ")");
  }
  QuantizeResult r;
  {
    nb::gil_scoped_release release;
    const std::vector<float> v = read_f32(x, e);
    check_finite(v.data(), v.size(), dims_of(x), "x", "quantizers take finite values");
    r = quantize_tensor(v.data(), tokens, channels, quantizer, map, smooth);
  }
  const std::size_t t = std::size_t(tokens), c = std::size_t(channels);
  nb::dict d;
  d["code_format"] = r.code_format;
  d["codes"] = r.codes.empty() ? nb::none() : nb::cast(to_numpy(std::move(r.codes), {t, c}));
  d["scales"] =
      r.scales.empty() ? nb::none() : nb::cast(to_numpy(std::move(r.scales), {r.scales.size()}));
  d["group"] = to_numpy(std::move(r.group), {t, c});
  d["dequantized"] = to_numpy(std::move(r.dequantized), {t, c});
  d["mean"] = to_numpy(std::move(r.mean), {c});
  d["granularity_map"] = map.describe();
  nb::dict err;
  err["rel_fro"] = r.error.rel_fro;
  err["rel_l1"] = r.error.rel_l1;
  err["max_abs"] = r.error.max_abs;
  err["cosine"] = r.error.cosine;
  err["sqnr_db"] = r.error.sqnr_db;
  err["groups"] = r.error.groups;
  d["error"] = err;
  return d;
}

nb::list mma_instructions_list() {
  nb::list out;
  for (const MmaInstrInfo& i : mma_instructions()) {
    nb::dict d;
    d["name"] = i.name;
    d["m"] = i.m;
    d["n"] = i.n;
    d["k"] = i.k;
    d["a"] = encoding_name(i.in);
    d["b"] = encoding_name(mma_in_b(i));
    d["bits"] = i.in_bits;
    d["acc"] = i.acc == 0 ? "fp32" : i.acc == 1 ? "fp16" : "s32";
    d["unverified"] = i.unverified;
    d["model"] = i.model;
    d["evidence"] = i.evidence;
    out.append(d);
  }
  return out;
}

// D = A·B + C on raw operands as `attnsim mma` reads them: A [M, K] and Bt [N, K] encodings
// (bytes; 4-bit packed two per byte), C [M, N] accumulator bits in uint32 (fp16 bits in the low
// half). The Python side lays them out; the checks and messages are the command's.
nb::object mma(const std::string& instr_name, const AnyArray& a, const AnyArray& bt,
               const AnyArray& c, int M, int N, int K, int promote) {
  const auto instr = parse_mma_instr(instr_name);
  if (!instr) {
    std::string names;
    for (const auto& i : mma_instructions()) {
      if (!names.empty()) names += ' ';
      names += i.name;
    }
    throw UsageError("unknown instruction '" + instr_name + "' (expected one of: " + names + ")");
  }
  const MmaInstrInfo& info = mma_info(*instr);
  if (M <= 0 || N <= 0 || K <= 0) throw UsageError("m, n and k must be positive");
  if (K % info.k != 0) {
    throw UsageError("k = " + std::to_string(K) + " is not a multiple of " + info.name +
                     "'s k = " + std::to_string(info.k));
  }
  if (promote < 0) throw UsageError("promote must be 0 (off) or a positive number of elements");
  if (promote > 0) {
    if (info.acc == 2) {
      throw UsageError("promote applies to floating-point accumulators; " + std::string(info.name) +
                       " accumulates exactly in int32");
    }
    if (promote % info.k != 0 || K % promote != 0) {
      throw UsageError("promote = " + std::to_string(promote) + " must be a multiple of " +
                       info.name + "'s k = " + std::to_string(info.k) +
                       " and divide k = " + std::to_string(K));
    }
  }
  for (const AnyArray* x : {&a, &bt, &c}) require_cpu(*x, "an operand");
  const std::size_t a_bytes = std::size_t(M) * K * info.in_bits / 8,
                    b_bytes = std::size_t(N) * K * info.in_bits / 8, mn = std::size_t(M) * N;
  if (elem_of(a) != Elem::kU8 || count_of(a) != a_bytes || !c_contiguous(a) ||
      elem_of(bt) != Elem::kU8 || count_of(bt) != b_bytes || !c_contiguous(bt)) {
    throw UsageError("internal error: mma operands laid out wrong");
  }
  if (dtype_name(c) != "uint32" || count_of(c) != mn || !c_contiguous(c))
    throw UsageError("internal error: mma C laid out wrong");
  std::vector<std::uint32_t> d(mn);
  {
    nb::gil_scoped_release release;
    mma_gemm(*instr, M, N, K, static_cast<const std::uint8_t*>(a.data()),
             static_cast<const std::uint8_t*>(bt.data()),
             static_cast<const std::uint32_t*>(c.data()), d.data(), promote);
  }
  return nb::cast(to_numpy(std::move(d), {std::size_t(M), std::size_t(N)}));
}

nb::object special(const std::string& fn, const AnyArray& x, bool ftz) {
  if (fn != "ex2" && fn != "rcp" && fn != "lg2")
    throw UsageError("unknown function '" + fn + "' (expected ex2, rcp or lg2)");
  require_cpu(x, "x");
  if (elem_of(x) != Elem::kF32) {
    throw nb::type_error(
        ("x has dtype " + dtype_name(x) + "; special takes float32 (the instruction's operand)")
            .c_str());
  }
  std::vector<float> v;
  {
    nb::gil_scoped_release release;
    v = read_raw<float>(x);
    try {
      if (!ftz) {
        std::uint32_t (*model)(std::uint32_t) =
            fn == "ex2"   ? [](std::uint32_t b) { return ex2_approx_bits(b); }
            : fn == "rcp" ? [](std::uint32_t b) { return rcp_approx_bits(b); }
                          : [](std::uint32_t b) { return lg2_approx_bits(b); };
        for (float& y : v) y = f32_from_bits(model(f32_bits(y)));
      } else if (fn == "ex2") {
        const Ex2ApproxFtz& f = Ex2ApproxFtz::h100();
        for (float& y : v) y = f(y);
      } else if (fn == "rcp") {
        const RcpApproxFtz& f = RcpApproxFtz::h100();
        for (float& y : v) y = f(y);
      } else {
        const Lg2ApproxFtz& f = Lg2ApproxFtz::h100();
        for (float& y : v) y = f(y);
      }
    } catch (const std::runtime_error& e) {
      throw UsageError(e.what());  // a missing table: its path
    }
  }
  std::vector<std::size_t> shape(x.ndim());
  for (std::size_t i = 0; i < shape.size(); ++i) shape[i] = x.shape(i);
  return nb::cast(to_numpy(std::move(v), shape));
}

}  // namespace

void bind_numerics(nb::module_& m) {
  m.def("convert_encode", &convert_encode, nb::arg("x"), nb::arg("tag"), nb::arg("format"),
        nb::arg("round"), nb::arg("overflow"), nb::arg("nan"), nb::arg("scale"), nb::arg("packed"));
  m.def("convert_decode", &convert_decode, nb::arg("bits"), nb::arg("format"), nb::arg("scale"),
        nb::arg("packed"), nb::arg("count"));
  m.def("convert_formats", [] { return convert_format_names(); });
  m.def("rounding_modes", [] { return round_names(); });
  m.def("overflow_policies", [] { return overflow_names(); });
  m.def("nan_encodings", [] { return nan_encoding_names(); });
  m.def("quantize", &quantize, nb::arg("x"), nb::arg("tag"), nb::arg("quantizer"),
        nb::arg("granularity"), nb::arg("smooth"));
  m.def("quantizers", [] { return quantizer_names(); });
  m.def("granularities", [] { return granularity_names(); });
  m.def("mma_instructions", &mma_instructions_list);
  m.def("mma", &mma, nb::arg("instr"), nb::arg("a"), nb::arg("bt"), nb::arg("c"), nb::arg("m"),
        nb::arg("n"), nb::arg("k"), nb::arg("promote"));
  m.def("special", &special, nb::arg("fn"), nb::arg("x"), nb::arg("ftz"));
  m.def("set_special_data_dir", [](const std::string& d) { set_special_data_dir(d); });
  m.def("special_data_dir", [] { return special_data_dir(); });
}

}  // namespace attnsim::py
