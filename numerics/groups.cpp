// Quantization granularities (see groups.hpp).
#include "numerics/groups.hpp"

#include <stdexcept>

namespace attnsim {

namespace {
int ceil_div(int a, int b) { return (a + b - 1) / b; }
}  // namespace

int GroupMap::unknown_kind() { throw std::logic_error("GroupMap::group: unknown granularity"); }

int GroupMap::count(int tokens_in, int channels) const {
  const int tokens = pad > 0 ? ceil_div(tokens_in, pad) * pad : tokens_in;
  switch (kind) {
    case Granularity::kPerTensor:
      return 1;
    case Granularity::kPerBlock:
    case Granularity::kPerWarp:
      return ceil_div(tokens, block);
    case Granularity::kPerToken:
      return tokens;
    case Granularity::kPerChannel:
      return channels;
    case Granularity::kPerBlockChannel:
      return ceil_div(tokens, block) * channels;
    case Granularity::kSagePerThreadQ:
      return ceil_div(tokens, block) * 8;
    case Granularity::kSagePerThreadK:
      return ceil_div(tokens, block) * 4;
  }
  throw std::logic_error("GroupMap::count");
}

namespace {
std::string describe_kind(Granularity kind, int block) {
  switch (kind) {
    case Granularity::kPerTensor:
      return "per_tensor";
    case Granularity::kPerBlock:
      return "per_block(" + std::to_string(block) + ")";
    case Granularity::kPerToken:
      return "per_token";
    case Granularity::kPerChannel:
      return "per_channel";
    case Granularity::kPerWarp:
      return "per_warp(" + std::to_string(block) + ")";
    case Granularity::kPerBlockChannel:
      return "per_block_channel(" + std::to_string(block) + ")";
    case Granularity::kSagePerThreadQ:
      return "sage_per_thread_q(" + std::to_string(block) + ")";
    case Granularity::kSagePerThreadK:
      return "sage_per_thread_k(" + std::to_string(block) + ")";
  }
  return "?";
}
}  // namespace

std::string GroupMap::describe() const {
  const std::string base = describe_kind(kind, block);
  if (pad <= 0) return base;
  const std::string p = "pad " + std::to_string(pad) + ")";
  return base.back() == ')' ? base.substr(0, base.size() - 1) + ", " + p : base + "(" + p;
}

GroupMap sage_per_thread_q(int warp_q, int blk_q) {
  return {Granularity::kSagePerThreadQ, warp_q, blk_q};
}
GroupMap sage_per_thread_k(int warp_k, int blk_k) {
  return {Granularity::kSagePerThreadK, warp_k, blk_k};
}
// {kind, WARP, BLK} per seed-code.md 1.4: sm80/sm89 BLKQ 128, BLKK 64; sm90 BLKQ 64, BLKK 128.
GroupMap sage_sm89_q_per_warp() { return {Granularity::kPerWarp, 32, 128}; }
GroupMap sage_sm89_k_per_warp() { return {Granularity::kPerWarp, 64, 64}; }
GroupMap sage_sm90_q_per_warp() { return {Granularity::kPerWarp, 16, 64}; }
GroupMap sage_sm90_k_per_warp() { return {Granularity::kPerWarp, 128, 128}; }
GroupMap sage_triton_q_per_block() { return {Granularity::kPerBlock, 128, 128}; }
GroupMap sage_triton_k_per_block() { return {Granularity::kPerBlock, 64, 64}; }
GroupMap sage_sm89_q_per_thread() { return {Granularity::kSagePerThreadQ, 32, 128}; }
GroupMap sage_sm89_k_per_thread() { return {Granularity::kSagePerThreadK, 64, 64}; }
GroupMap sage_sm90_q_per_thread() { return {Granularity::kSagePerThreadQ, 16, 64}; }
GroupMap sage_sm90_k_per_thread() { return {Granularity::kSagePerThreadK, 128, 128}; }

}  // namespace attnsim
