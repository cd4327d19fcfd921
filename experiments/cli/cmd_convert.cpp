// `attnsim convert`: raw float32/float64 <-> raw encodings, the contract scripts check attnsim by.
#include <sys/stat.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include "experiments/cli/commands.hpp"
#include "experiments/common/error.hpp"
#include "experiments/common/memory_limit.hpp"
#include "experiments/common/names.hpp"
#include "experiments/common/option_checks.hpp"
#include "experiments/io/convert.hpp"
#include "experiments/io/file_io.hpp"

namespace attnsim {

namespace {
struct ConvertOptions {
  std::string to, round = "rne", overflow, nan = "cuda", in, out, from = "f32";
  double scale = 0.0;
  bool decode = false, packed = false;
  std::size_t count = 0;
};
}  // namespace

void add_convert_command(CLI::App& app) {
  auto opt = std::make_shared<ConvertOptions>();
  CLI::App* cmd = app.add_subcommand(
      "convert",
      "Encode raw little-endian float32 (or float64) into a number format, or --decode back to "
      "float32. Output: u8 per element for 8-bit formats and integers, u16 for 16-bit formats.");
  cmd->add_option("--to", opt->to, "format: " + join_choices(convert_format_names()))->required();
  cmd->add_option("--round", opt->round,
                  "rounding: rne (nearest even), rna (nearest away), rz, ru, rd")
      ->capture_default_str();
  cmd->add_option("--overflow", opt->overflow,
                  "overflow policy: saturate (CUDA satfinite), saturate-finite (ml_dtypes "
                  "kSaturate: Inf stays Inf/NaN), nan, inf (required when encoding)");
  cmd->add_option("--nan-encoding", opt->nan,
                  "NaN bits for NaN inputs: cuda (0x7F/0x7FFF, sign dropped), ml_dtypes (sign "
                  "kept, quiet NaN), ieee (sign and payload kept)")
      ->capture_default_str();
  cmd->add_option("--from", opt->from, "input element type when encoding: f32 or f64")
      ->capture_default_str();
  cmd->add_option("--scale", opt->scale, "integer formats: q = round(x / scale), exact quotient")
      ->check(finite_at_least(-HUGE_VAL));
  cmd->add_flag("--packed", opt->packed,
                "int4/int2: pack 2 or 4 elements per byte, element 0 in the low bits");
  cmd->add_option("--count", opt->count,
                  "with --decode --packed: number of elements (default: all)")
      ->check(integer_in(1, std::numeric_limits<std::int64_t>::max()));
  cmd->add_flag("--decode", opt->decode, "read encodings of --to's format, write float32");
  cmd->add_option("--in,--input", opt->in, "input file")->required();
  cmd->add_option("--out,--output", opt->out,
                  "output file (written atomically; not the input, a directory or a special "
                  "file)")
      ->required()
      ->check(output_name());
  add_max_memory_option(cmd);
  cmd->callback([opt]() {
    check_output_path(opt->out, {opt->in});
    // The input bytes, a copy of its values, and the output (decoding: up to four float32 values
    // per packed input byte).
    struct stat st;
    if (::stat(opt->in.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      const double bytes = double(st.st_size);
      check_memory(bytes + (opt->decode ? 16 : 2) * bytes + 32.0 * (1 << 20),
                   "convert of '" + opt->in + "'");
    }
    ConvertRequest req;
    req.format = opt->to;
    req.scale = opt->scale;
    req.packed = opt->packed;
    req.policy.round = parse_round(opt->round);
    req.policy.nan = parse_nan_encoding(opt->nan);
    if (opt->decode) {
      const std::vector<std::uint8_t> codes = read_file_bytes(opt->in);
      if (codes.empty()) throw UsageError("'" + opt->in + "' is empty (no encodings to decode)");
      const std::vector<float> out = decode_array(codes, req, opt->count);
      write_file_atomic(opt->out, out.data(), out.size() * sizeof(float));
      return;
    }
    if (opt->overflow.empty()) {
      throw UsageError("--overflow is required when encoding (" + join_choices(overflow_names()) +
                       ")");
    }
    req.policy.overflow = parse_overflow(opt->overflow);
    if (opt->count != 0) throw UsageError("--count applies to --decode --packed only");
    std::vector<std::uint8_t> bytes;
    if (opt->from == "f32") {
      bytes = encode_array(read_f32_file(opt->in), req);
    } else if (opt->from == "f64") {
      bytes = encode_array(read_f64_file(opt->in), req);
    } else {
      throw UsageError("unknown --from '" + opt->from + "' (expected f32 or f64)");
    }
    write_file_atomic(opt->out, bytes.data(), bytes.size());
  });
}

}  // namespace attnsim
