// Writes operands.bin (the input of cuda_check/sage/int4_attention.cu) and cases.txt (one line
// per case: name, b, hq, lq, d, full) into DIR. Run before the GPU recording:
//   build/tools/sage_int4_operands DIR
#include <cstdio>
#include <fstream>
#include <string>

#include "tests/hw/sage_int4_cases.hpp"

int main(int argc, char** argv) {
  using namespace attnsim;
  using namespace attnsim::hwtest;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  std::ofstream bin(dir + "/operands.bin", std::ios::binary);
  std::ofstream txt(dir + "/cases.txt");
  for (const Int4Case& c : int4_cases()) {
    const AttentionInput in = int4_case_input(c, ATTNSIM_SOURCE_DIR);
    const std::vector<std::uint8_t> b = int4_operand_bytes(in, c.dtype);
    bin.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
    txt << c.input.name << ' ' << in.shape.batch << ' ' << in.shape.heads_q << ' '
        << in.shape.len_q << ' ' << in.shape.head_dim << ' ' << (c.full ? 1 : 0) << '\n';
  }
  std::printf("wrote %s/operands.bin and cases.txt\n", dir.c_str());
  return bin.good() && txt.good() ? 0 : 1;
}
