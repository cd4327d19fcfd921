"""The lattice inputs of the GPU recordings (cuda_check/sage/record_sage.py, the SDPA and FA3
recordings through cuda_check/sdpa/sdpa_cases.py), numpy only: every value is (sum of four 16-bit
uniforms - 2^17) * 2^-15 from splitmix64 of (seed, tensor, flat index), an Irwin-Hall approximation
of a normal with standard deviation 1.155 computed in integers, which tests/hw/sage_inputs.hpp
(lattice_value) reproduces bit for bit in C++."""
import numpy as np

M64 = (1 << 64) - 1


def splitmix64(z):
    z = (z + np.uint64(0x9E3779B97F4A7C15))
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def lattice_tensor(seed, tensor, shape):
    """tests/hw/sage_inputs.hpp lattice_value(seed, tensor, i) for every flat index i."""
    n = int(np.prod(shape))
    return lattice_at(seed, tensor, np.arange(n, dtype=np.uint64)).reshape(shape)


def lattice_at(seed, tensor, idx):
    """lattice_value(seed, tensor, i) for the flat indices idx (any shape): a slice of a large
    lattice tensor without computing the rest."""
    idx = np.asarray(idx, dtype=np.uint64)
    shape, n = idx.shape, idx.size
    idx = idx.reshape(-1)
    base = np.uint64((seed * 0x9E3779B97F4A7C15 ^ (tensor << 40)) & M64)
    acc = np.zeros(n, dtype=np.int64)
    with np.errstate(over="ignore"):
        for r in range(4):
            u = splitmix64(base ^ (np.uint64(r) << np.uint64(32)) ^ idx)
            acc += (u >> np.uint64(48)).astype(np.int64)
    return ((acc - 131072).astype(np.float32) * np.float32(2.0 ** -15)).reshape(shape)
