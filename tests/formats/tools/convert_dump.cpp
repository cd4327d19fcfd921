// attnsim_convert_dump: formats/ encode and decode over raw files, for the ml_dtypes cross-check
// (tests/formats/mldtypes_compare_test.py), so that test depends on formats/ alone and not on the
// experiments/ command line being buildable.
//
// It accepts the float-format subset of `attnsim convert`'s grammar (experiments/README.md), so
// the script runs unchanged against either executable:
//   attnsim_convert_dump convert --to FMT --round MODE --overflow POLICY [--nan-encoding ENC]
//                                [--from f32|f64] --in FILE --out FILE
//   attnsim_convert_dump convert --to FMT --decode --in FILE --out FILE
// FMT: e4m3fn e5m2 bf16 fp16; MODE: rne rna rz ru rd; POLICY: saturate saturate-finite nan inf
// (inf is refused for e4m3fn, as the CLI does); ENC: cuda (default) ml_dtypes ieee. Input raw
// little-endian float32 (or float64); output one u8 or u16 per element; --decode writes float32.
// Exit 2 with one line on any usage or I/O error.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "formats/float16.hpp"
#include "formats/float8.hpp"

namespace {

[[noreturn]] void fail(const std::string& msg) {
  std::fprintf(stderr, "attnsim_convert_dump: error: %s\n", msg.c_str());
  std::exit(2);
}

std::vector<char> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("cannot read " + path);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

void write_all(const std::string& path, const void* data, std::size_t n) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(static_cast<const char*>(data), std::streamsize(n));
  if (!f) fail("cannot write " + path);
}

template <class T>
std::vector<T> as_array(const std::vector<char>& bytes, const std::string& what) {
  if (bytes.size() % sizeof(T) != 0) fail(what + " is not a whole number of elements");
  std::vector<T> out(bytes.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

// Encode every element of the input file into Fmt under p; write Fmt::Storage per element.
template <class Fmt, class Src>
void encode_file(const std::string& in, const std::string& out, attnsim::Policy p) {
  const std::vector<Src> xs = as_array<Src>(read_all(in), in);
  std::vector<typename Fmt::Storage> codes(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) codes[i] = attnsim::encode<Fmt>(xs[i], p);
  write_all(out, codes.data(), codes.size() * sizeof(typename Fmt::Storage));
}

// Decode every code of the input file to float32 (exact; NaNs keep sign and payload).
template <class Fmt>
void decode_file(const std::string& in, const std::string& out) {
  using S = typename Fmt::Storage;
  const std::vector<S> codes = as_array<S>(read_all(in), in);
  std::vector<float> xs(codes.size());
  for (std::size_t i = 0; i < codes.size(); ++i) xs[i] = attnsim::decode_f32<Fmt>(codes[i]);
  write_all(out, xs.data(), xs.size() * sizeof(float));
}

template <class Fmt>
void run(bool decode, const std::string& from, const std::string& in, const std::string& out,
         attnsim::Policy p) {
  if (decode) {
    decode_file<Fmt>(in, out);
  } else if (from == "f32") {
    encode_file<Fmt, float>(in, out, p);
  } else if (from == "f64") {
    encode_file<Fmt, double>(in, out, p);
  } else {
    fail("unknown --from '" + from + "' (expected f32 or f64)");
  }
}

}  // namespace

int main(int argc, char** argv) {
  using attnsim::NanEncoding;
  using attnsim::Overflow;
  using attnsim::Round;
  if (argc < 2 || std::string(argv[1]) != "convert")
    fail("usage: attnsim_convert_dump convert --to FMT ...");
  std::string to, round = "rne", overflow, nan = "cuda", in, out, from = "f32";
  bool decode = false;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--decode") {
      decode = true;
      continue;
    }
    if (i + 1 >= argc) fail("option " + a + " needs a value");
    const std::string v = argv[++i];
    if (a == "--to")
      to = v;
    else if (a == "--round")
      round = v;
    else if (a == "--overflow")
      overflow = v;
    else if (a == "--nan-encoding")
      nan = v;
    else if (a == "--from")
      from = v;
    else if (a == "--in")
      in = v;
    else if (a == "--out")
      out = v;
    else
      fail("unknown option " + a);
  }
  if (to.empty() || in.empty() || out.empty()) fail("--to, --in and --out are required");
  attnsim::Policy p{Round::kNearestEven, Overflow::kSaturate, NanEncoding::kCuda};
  if (round == "rne")
    p.round = Round::kNearestEven;
  else if (round == "rna")
    p.round = Round::kNearestAway;
  else if (round == "rz")
    p.round = Round::kTowardZero;
  else if (round == "ru")
    p.round = Round::kUp;
  else if (round == "rd")
    p.round = Round::kDown;
  else
    fail("unknown --round '" + round + "'");
  if (nan == "cuda")
    p.nan = NanEncoding::kCuda;
  else if (nan == "ml_dtypes")
    p.nan = NanEncoding::kMlDtypes;
  else if (nan == "ieee")
    p.nan = NanEncoding::kIeee;
  else
    fail("unknown --nan-encoding '" + nan + "'");
  if (!decode) {
    if (overflow == "saturate")
      p.overflow = Overflow::kSaturate;
    else if (overflow == "saturate-finite")
      p.overflow = Overflow::kSaturateFinite;
    else if (overflow == "nan")
      p.overflow = Overflow::kNaN;
    else if (overflow == "inf")
      p.overflow = Overflow::kInf;
    else
      fail("--overflow must be saturate, saturate-finite, nan or inf");
    if (to == "e4m3fn" && p.overflow == Overflow::kInf)
      fail("e4m3fn has no Inf: use --overflow nan");
  }
  if (to == "e4m3fn")
    run<attnsim::e4m3fn>(decode, from, in, out, p);
  else if (to == "e5m2")
    run<attnsim::e5m2>(decode, from, in, out, p);
  else if (to == "bf16")
    run<attnsim::bf16>(decode, from, in, out, p);
  else if (to == "fp16")
    run<attnsim::fp16>(decode, from, in, out, p);
  else
    fail("unknown --to '" + to + "' (e4m3fn e5m2 bf16 fp16)");
  return 0;
}
