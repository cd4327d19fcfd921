// Quantization granularities as maps from (token, channel) to a scale group, including
// SageAttention2's per-thread groups that follow the mma fragment layouts.
#pragma once

#include <string>

namespace attnsim {

// A tensor of one head is [tokens, channels]. Every granularity assigns each element a group;
// a group shares one scale (and zero point). Tokens past the end (padding to a block) are zeros
// in the kernels and take part in their group's amax, which zeros cannot change.
enum class Granularity {
  kPerTensor,   // one group
  kPerBlock,    // `block` consecutive tokens (SageAttention per_block, TurboAttention BPQ stage 1)
  kPerToken,    // one group per token
  kPerChannel,  // one group per channel (over all tokens)
  kPerWarp,     // `block` consecutive tokens (= the rows of one warp; SageAttention per_warp)
  kPerBlockChannel,  // (block of `block` tokens, channel): TurboAttention BPQ stage 2, KIVI-style
  // SageAttention2 per-thread (seed-code.md 1.4; csrc/qattn/qk_int_sv_f8_cuda_sm89.cuh):
  // Q: lane l of a warp holds rows l/4 and l/4+8 of each m16 tile, so one group is the tokens
  //    {g, g+8, g+16, ...} of one warp's `block` (WARPQ) rows: group = (t / WARPQ) * 8 + t % 8.
  // K: lane l holds columns 2(l%4) and 2(l%4)+1 of each n8 tile of Kᵀ, so one group is the
  //    tokens with (t % 8) / 2 == l % 4 in a `block` (WARPK) of keys:
  //    group = (t / WARPK) * 4 + (t % 8) / 2.
  // The INT4 m16n8k64 accumulator layout is the same, so INT4 uses the same maps.
  kSagePerThreadQ,
  kSagePerThreadK,
};

struct GroupMap {
  Granularity kind = Granularity::kPerTensor;
  int block = 1;  // tokens per block / warp (WARPQ, WARPK) where the kind uses one
  // The kernels pad the sequence with zero tokens to a multiple of the CTA tile (BLKQ, BLKK) and
  // allocate scales for every group of the padded length (sageattention/core.py and
  // quant_per_thread.py: `(L + BLKQ - 1) // BLKQ * (BLKQ // WARPQ) * 8` Q scales,
  // `(L + BLKK - 1) // BLKK * (BLKK // WARPK) * 4` K scales). `pad` is that tile (0: the length is
  // only rounded up to `block`); it changes count(), never group().
  int pad = 0;

  // Group of element (t, c) of a [tokens, channels] tensor (inline: the pipeline asks per element).
  int group(int t, int c, int tokens, int channels) const {
    (void)tokens;
    switch (kind) {
      case Granularity::kPerTensor:
        return 0;
      case Granularity::kPerBlock:
      case Granularity::kPerWarp:
        return t / block;
      case Granularity::kPerToken:
        return t;
      case Granularity::kPerChannel:
        return c;
      case Granularity::kPerBlockChannel:
        return (t / block) * channels + c;
      case Granularity::kSagePerThreadQ:
        return (t / block) * 8 + t % 8;
      case Granularity::kSagePerThreadK:
        return (t / block) * 4 + (t % 8) / 2;
    }
    return unknown_kind();
  }
  // Number of groups, including those that only padding fills (their amax is 0).
  int count(int tokens, int channels) const;
  std::string describe() const;  // e.g. "sage_per_thread_q(32, pad 128)"

  bool operator==(const GroupMap&) const = default;

 private:
  [[noreturn]] static int unknown_kind();
};

// Whether a map's group varies along a token's channels (then group(t, c) = group(t, 0) + c);
// every other map gives all channels of a token one group.
inline bool per_channel_groups(const GroupMap& m) {
  return m.kind == Granularity::kPerChannel || m.kind == Granularity::kPerBlockChannel;
}

// Named maps of the public kernels (seed-code.md 1.4: BLKQ/WARPQ/BLKK/WARPK per path).
// sm80 uses the sm89 values except WARPQ = 16 for head_dim 128 with fp16 accumulation
// (`sage_per_thread_q(16, 128)`). blk: the CTA tile the scales are allocated for (0: none).
GroupMap sage_per_thread_q(int warp_q, int blk_q = 0);
GroupMap sage_per_thread_k(int warp_k, int blk_k = 0);
GroupMap sage_sm89_q_per_thread();   // WARPQ = 32 (also sm80)
GroupMap sage_sm89_k_per_thread();   // WARPK = 64 (also sm80)
GroupMap sage_sm90_q_per_thread();   // WARPQ = 16
GroupMap sage_sm90_k_per_thread();   // WARPK = 128
GroupMap sage_sm89_q_per_warp();     // t / 32 (sm80: t / 16 in the same exception)
GroupMap sage_sm89_k_per_warp();     // t / 64
GroupMap sage_sm90_q_per_warp();     // t / 16
GroupMap sage_sm90_k_per_warp();     // t / 128
GroupMap sage_triton_q_per_block();  // t / 128 (SageAttention1 Triton)
GroupMap sage_triton_k_per_block();  // t / 64

}  // namespace attnsim
