// The sums of numerics/digest.hpp's terms over arrays of outputs: the inner loop of every test that
// recomputes a GPU probe's chunk digests (tests/hw/), as a vector kernel beside its reference.
#pragma once

#include <cstddef>
#include <cstdint>

namespace attnsim {

// The wrapping sum of digest_term(first + i, out[i]) for i in [0, n), the index wrapping mod 2^32
// as the probes' 32-bit input index does. Integer addition mod 2^64 is associative, so the vector
// kernel's lane-wise partial sums give the reference's result exactly.
std::uint64_t digest_sum(std::uint32_t first, const std::uint32_t* out, std::size_t n);
std::uint64_t digest_sum_ref(std::uint32_t first, const std::uint32_t* out, std::size_t n);

}  // namespace attnsim
