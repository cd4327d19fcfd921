// `attnsim special`: the GPU's approximate special functions on raw float32 arrays (contract).
#include <sys/stat.h>

#include <cstring>
#include <memory>
#include <string>

#include "experiments/cli/commands.hpp"
#include "experiments/common/error.hpp"
#include "experiments/common/memory_limit.hpp"
#include "experiments/common/option_checks.hpp"
#include "experiments/io/file_io.hpp"
#include "formats/float32.hpp"
#include "numerics/special.hpp"

namespace attnsim {

void add_special_command(CLI::App& app) {
  auto fn = std::make_shared<std::string>();
  auto in = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "special",
      "Evaluate the H100's approximate special functions bit-exactly on raw little-endian float32: "
      "ex2 = ex2.approx.ftz.f32, rcp = rcp.approx.ftz.f32, lg2 = lg2.approx.ftz.f32, "
      "or with --no-ftz the variants without .ftz; CUDA's expf, logf, __expf and __logf as nvcc "
      "compiles them with -ftz=true, or with --no-ftz without it (models proven over all 2^32 "
      "inputs)");
  auto no_ftz = std::make_shared<bool>(false);
  cmd->add_option("--fn", *fn, "ex2, rcp, lg2, expf, logf, __expf or __logf")->required();
  cmd->add_flag(
      "--no-ftz", *no_ftz,
      "the variants without .ftz (ex2.approx.f32 etc.: range scaling around the same MUFU, "
      "subnormal inputs and results kept)");
  cmd->add_option("--in,--input", *in, "input float32 file")->required();
  cmd->add_option("--out,--output", *out,
                  "output float32 file (written atomically; not the input, a directory or a "
                  "special file)")
      ->required()
      ->check(output_name());
  add_max_memory_option(cmd);
  cmd->callback([fn, in, out, no_ftz]() {
    const bool libm = *fn == "expf" || *fn == "logf" || *fn == "__expf" || *fn == "__logf";
    if (*fn != "ex2" && *fn != "rcp" && *fn != "lg2" && !libm)
      throw UsageError("unknown --fn '" + *fn +
                       "' (expected ex2, rcp, lg2, expf, logf, __expf or __logf)");
    check_output_path(*out, {*in});
    // The file's bytes, its values, and the function's table (at most 96 MiB, measured).
    struct stat st;
    if (::stat(in->c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      check_memory(2.0 * double(st.st_size) + 128.0 * (1 << 20), "special on '" + *in + "'");
    }
    std::vector<float> x = read_f32_file(*in);
    try {
      if (libm) {
        // numerics/special: libdevice's accurate expf/logf, __expf/__logf (fast_expf/fast_logf).
        const bool ftz = !*no_ftz;
        float (*model)(float, bool) = *fn == "expf"   ? expf_libdevice
                                      : *fn == "logf" ? logf_libdevice
                                      : *fn == "__expf" ? fast_expf
                                                        : fast_logf;
        for (float& v : x) v = model(v, ftz);
      } else if (*no_ftz) {
        std::uint32_t (*model)(std::uint32_t) =
            *fn == "ex2"   ? [](std::uint32_t b) { return ex2_approx_bits(b); }
            : *fn == "rcp" ? [](std::uint32_t b) { return rcp_approx_bits(b); }
                           : [](std::uint32_t b) { return lg2_approx_bits(b); };
        for (float& v : x) v = f32_from_bits(model(f32_bits(v)));
      } else if (*fn == "ex2") {
        const Ex2ApproxFtz& f = Ex2ApproxFtz::h100();
        for (float& v : x) v = f(v);
      } else if (*fn == "rcp") {
        const RcpApproxFtz& f = RcpApproxFtz::h100();
        for (float& v : x) v = f(v);
      } else {
        const Lg2ApproxFtz& f = Lg2ApproxFtz::h100();
        for (float& v : x) v = f(v);
      }
    } catch (const std::runtime_error& e) {
      throw UsageError(e.what());
    }
    write_file_atomic(*out, x.data(), x.size() * sizeof(float));
  });
}

}  // namespace attnsim
