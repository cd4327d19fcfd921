// Inner-product models of the attention GEMM stages (see dot.hpp).
#include "numerics/dot.hpp"

#include <stdexcept>
#include <vector>

namespace attnsim {

std::string dot_model_name(const DotModel& m) {
  if (m.kind == DotModel::kFp32) return "fp32";
  if (m.kind == DotModel::kFp64) return "fp64";
  if (m.kind == DotModel::kExact) return "exact";
  return mma_info(m.instr).name;
}

const std::vector<std::string>& dot_model_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n{"fp32", "fp64", "exact"};
    for (const MmaInstrInfo& i : mma_instructions()) n.push_back(i.name);
    return n;
  }();
  return names;
}

bool parse_dot_model(const std::string& name, DotModel* out) {
  if (name == "fp32" || name == "fp64" || name == "exact") {
    *out = DotModel{name == "fp32"   ? DotModel::kFp32
                    : name == "fp64" ? DotModel::kFp64
                                     : DotModel::kExact};
    return true;
  }
  const std::optional<MmaInstr> i = parse_mma_instr(name);
  if (!i) return false;
  *out = DotModel{DotModel::kMma, *i, 0};
  return true;
}

DotRequirements dot_requirements(const DotModel& m) {
  DotRequirements r;
  if (m.kind != DotModel::kMma) return r;
  const MmaInstrInfo& info = mma_info(m.instr);
  r.any_encoding = false;
  r.a_enc = info.in;
  r.b_enc = mma_in_b(info);
  r.k_step = m.promote > 0 ? m.promote : info.k;
  r.integer_acc = info.acc == 2;
  r.fp16_acc = info.acc == 1;
  return r;
}

std::uint32_t dot_mma(const DotModel& m, const std::uint32_t* a, const std::uint32_t* b, int n,
                      std::uint32_t c) {
  if (m.kind != DotModel::kMma) throw std::logic_error("dot_mma: not an instruction model");
  const MmaInstrInfo& info = mma_info(m.instr);
  if (m.promote > 0) return mma_dot_promoted(m.instr, a, b, n, c, m.promote);
  if (info.acc != 1) return mma_dot(m.instr, a, b, n, c);
  // An fp16 accumulator: C enters as fp16 (RNE from the FP32 register), D leaves widened.
  const std::uint32_t c16 = encode<fp16>(f32_from_bits(c), kCudaRn);
  const std::uint32_t d16 = mma_dot(m.instr, a, b, n, c16);
  return f32_bits(decode_f32<fp16>(std::uint16_t(d16)));
}

}  // namespace attnsim
