// sim/turbo against our CUDA kernels of TurboAttention on an H100 (data/hw/h100/turbo/turbo_h100.h5,
// cuda_check/turbo/turbo_attention.cu, the contract cuda_check/turbo/README.md): the prefill
// rows (INT8 mma.sync Q·Kᵀ and P̃·V, fp16 SAS, one P scale per 64x64 tile), every teacher-forced
// decode row over the BPQ-compressed cache and the buffer, and the final cache of every
// (batch, KV head), bit for bit.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "experiments/io/hdf5_io.hpp"
#include "formats/encoding.hpp"
#include "sim/turbo/turbo.hpp"

namespace attnsim {
namespace {

const std::string kFile = ATTNSIM_DATA_DIR "/hw/h100/turbo/turbo_h100.h5";

template <class T>
long long count_diff(const std::string& what, const std::vector<T>& sim, const std::vector<std::int64_t>& gpu) {
  if (sim.size() != gpu.size()) {
    ADD_FAILURE() << what << ": sim has " << sim.size() << " values, the GPU " << gpu.size();
    return (long long)std::max(sim.size(), gpu.size());
  }
  long long bad = 0;
  for (std::size_t i = 0; i < sim.size(); ++i)
    if (std::int64_t(sim[i]) != gpu[i] && ++bad == 1)
      ADD_FAILURE() << what << "[" << i << "]: sim " << std::int64_t(sim[i]) << " GPU " << gpu[i];
  return bad;
}

long long count_diff_f32(const std::string& what, const std::vector<float>& sim, const std::vector<double>& gpu) {
  if (sim.size() != gpu.size()) {
    ADD_FAILURE() << what << ": sim has " << sim.size() << " values, the GPU " << gpu.size();
    return (long long)std::max(sim.size(), gpu.size());
  }
  long long bad = 0;
  for (std::size_t i = 0; i < sim.size(); ++i) {
    const float g = float(gpu[i]);
    if (std::memcmp(&sim[i], &g, 4) != 0 && ++bad == 1)
      ADD_FAILURE() << what << "[" << i << "]: sim " << sim[i] << " GPU " << g;
  }
  return bad;
}

TEST(TurboH100, PrefillDecodeAndCacheBitForBit) {
  H5Reader r(kFile);
  const std::vector<std::string> cases = r.members("/");
  ASSERT_EQ(cases.size(), 5u);
  for (const std::string& c : cases) {
    SCOPED_TRACE(c);
    const int B = int(r.attr_f64(c, "batch")), HQ = int(r.attr_f64(c, "hq")), HK = int(r.attr_f64(c, "hkv")),
              N = int(r.attr_f64(c, "n")), D = int(r.attr_f64(c, "d")), P = int(r.attr_f64(c, "prefill"));
    AttentionInput in;
    in.shape = AttentionShape{B, HQ, HK, N, N, D, D};
    in.causal = true;
    in.dtype = "float16";
    auto widen = [&](const std::string& name) {
      const std::vector<std::int64_t> bits = r.read_i64(c + "/" + name);
      std::vector<float> f(bits.size());
      for (std::size_t i = 0; i < bits.size(); ++i) f[i] = decode_float_bits(Encoding::kFp16, std::uint32_t(bits[i]));
      return f;
    };
    in.q = widen("q");
    in.k = widen("k");
    in.v = widen("v");
    TurboOptions o;
    o.mode = TurboMode::kDecode;
    o.prefill = P;
    o.out = Encoding::kFp32;
    for (std::int64_t b : r.read_i64(c + "/bits_k")) o.head_bits_k.push_back(int(b));
    for (std::int64_t b : r.read_i64(c + "/bits_v")) o.head_bits_v.push_back(int(b));
    const TurboResult res = turbo_attention(in, o);

    // Outputs: prefill rows and decode rows separately.
    const std::vector<double> gpu_o = r.read_f64(c + "/o");
    ASSERT_EQ(res.out.o.size(), gpu_o.size());
    long long bad_pre = 0, bad_dec = 0;
    for (std::size_t i = 0; i < gpu_o.size(); ++i) {
      const float s = float(res.out.o[i]), g = float(gpu_o[i]);
      if (std::memcmp(&s, &g, 4) == 0) continue;
      const int row = int((i / std::size_t(D)) % std::size_t(N));
      if ((row < P ? ++bad_pre : ++bad_dec) == 1)
        ADD_FAILURE() << "o[" << i << "] (bh " << i / (std::size_t(D) * N) << " row " << row << " c "
                      << i % std::size_t(D) << "): sim " << s << " GPU " << g;
    }
    EXPECT_EQ(bad_pre, 0) << "prefill rows";
    EXPECT_EQ(bad_dec, 0) << "decode rows";

    ASSERT_EQ(res.caches.size(), std::size_t(B * HK));
    long long bad_cache = 0;
    for (int bh = 0; bh < B * HK; ++bh) {
      const TurboKvCache& k = res.caches[std::size_t(bh)];
      const std::string g = c + "/cache/" + std::to_string(bh) + "/";
      bad_cache += count_diff(g + "k_code", k.k_code, r.read_i64(g + "k_code"));
      bad_cache += count_diff(g + "v_code", k.v_code, r.read_i64(g + "v_code"));
      bad_cache += count_diff(g + "k_s", k.k_s, r.read_i64(g + "k_s"));
      bad_cache += count_diff(g + "k_z", k.k_z, r.read_i64(g + "k_z"));
      bad_cache += count_diff(g + "v_s", k.v_s, r.read_i64(g + "v_s"));
      bad_cache += count_diff(g + "v_z", k.v_z, r.read_i64(g + "v_z"));
      bad_cache += count_diff(g + "buf_k", k.buf_k, r.read_i64(g + "buf_k"));
      bad_cache += count_diff(g + "buf_v", k.buf_v, r.read_i64(g + "buf_v"));
      bad_cache += count_diff_f32(g + "k_scale", k.k_scale, r.read_f64(g + "k_scale"));
      bad_cache += count_diff_f32(g + "v_scale", k.v_scale, r.read_f64(g + "v_scale"));
      bad_cache += count_diff_f32(g + "su_k", {k.su_k}, r.read_f64(g + "su_k"));
      bad_cache += count_diff_f32(g + "su_v", {k.su_v}, r.read_f64(g + "su_v"));
    }
    EXPECT_EQ(bad_cache, 0);
    std::printf("%s: prefill-row mismatches %lld, decode-row mismatches %lld, cache mismatches %lld\n", c.c_str(),
                bad_pre, bad_dec, bad_cache);
  }
}

}  // namespace
}  // namespace attnsim
