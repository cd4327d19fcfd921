// Arrays in and out of attnsim._core: any DLPack or buffer-protocol array on the CPU (numpy, a CPU
// torch tensor), read where it lies whatever its strides, and numpy arrays that own a C++ vector.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "experiments/common/error.hpp"
#include "formats/float16.hpp"

namespace attnsim::py {

namespace nb = nanobind;

// Any array, any dtype, any strides, any device: each function checks what it takes, so that a
// wrong one is a one-line TypeError naming the argument instead of nanobind's overload listing.
using AnyArray = nb::ndarray<nb::ro>;

// The element types the functions read.
enum class Elem { kF32, kF64, kF16, kBf16, kU8, kU16, kI8, kI32, kOther };

// `tag` names what a uint16 array holds when the caller viewed a 16-bit float array as its bits
// (numpy cannot hand ml_dtypes.bfloat16 to C++): "bfloat16" or "float16"; "" otherwise.
inline Elem elem_of(const AnyArray& a, const std::string& tag = "") {
  const nb::dlpack::dtype t = a.dtype();
  if (t.lanes != 1) return Elem::kOther;
  using C = nb::dlpack::dtype_code;
  if (t.code == std::uint8_t(C::Float)) {
    return t.bits == 32   ? Elem::kF32
           : t.bits == 64 ? Elem::kF64
           : t.bits == 16 ? Elem::kF16
                          : Elem::kOther;
  }
  if (t.code == std::uint8_t(C::Bfloat) && t.bits == 16) return Elem::kBf16;
  if (t.code == std::uint8_t(C::UInt)) {
    if (t.bits == 16)
      return tag == "bfloat16" ? Elem::kBf16 : tag == "float16" ? Elem::kF16 : Elem::kU16;
    if (t.bits == 8) return Elem::kU8;
  }
  if (t.code == std::uint8_t(C::Int)) {
    if (t.bits == 8) return Elem::kI8;
    if (t.bits == 32) return Elem::kI32;
  }
  return Elem::kOther;
}

inline std::string dtype_name(const AnyArray& a) {
  const nb::dlpack::dtype t = a.dtype();
  static const char* kCodes[] = {"int", "uint", "float", "?", "bfloat", "complex", "bool"};
  const std::string code = t.code < 7 ? kCodes[t.code] : "dlpack code " + std::to_string(t.code);
  return code + std::to_string(t.bits);
}

// DLPack's device types (dlpack.h DLDeviceType) by name, for messages.
inline std::string device_name(int d) {
  switch (d) {
    case 1:
      return "cpu";
    case 2:
      return "cuda";
    case 3:
      return "cuda_host";
    case 4:
      return "opencl";
    case 7:
      return "vulkan";
    case 8:
      return "metal";
    case 9:
      return "vpi";
    case 10:
      return "rocm";
    case 11:
      return "rocm_host";
    case 12:
      return "ext_dev";
    case 13:
      return "cuda_managed";
    case 14:
      return "oneapi";
    case 15:
      return "webgpu";
    case 16:
      return "hexagon";
    case 17:
      return "maia";
    default:
      return "device " + std::to_string(d);
  }
}

// The CPU check every input passes: host memory (kDLCPU, and the pinned host memory of CUDA and
// ROCm) is read in place; anything else is refused before its data pointer is touched.
inline void require_cpu(const AnyArray& a, const std::string& name) {
  const int d = a.device_type();
  if (d == 1 || d == 3 || d == 11) return;
  throw nb::type_error((name + " lives on a " + device_name(d) +
                        " device; attnsim simulates on the CPU: pass a CPU array (torch: .cpu())")
                           .c_str());
}

inline std::vector<std::uint64_t> dims_of(const AnyArray& a) {
  std::vector<std::uint64_t> d(a.ndim());
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = a.shape(i);
  return d;
}

inline std::size_t count_of(const AnyArray& a) {
  std::size_t n = 1;
  for (std::size_t i = 0; i < a.ndim(); ++i) n *= a.shape(i);
  return n;
}

inline bool c_contiguous(const AnyArray& a) {
  std::int64_t expect = 1;
  for (std::size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expect) return false;
    expect *= std::int64_t(a.shape(i));
  }
  return true;
}

// Calls f(element pointer) for every element in row-major order, following the strides (in
// elements, as DLPack gives them; negative ones too).
template <class T, class F>
void for_each_element(const AnyArray& a, F&& f) {
  const T* base = static_cast<const T*>(a.data());
  const std::size_t nd = a.ndim();
  const std::size_t n = count_of(a);
  if (n == 0) return;
  if (nd == 0 || c_contiguous(a)) {
    for (std::size_t i = 0; i < n; ++i) f(base + i);
    return;
  }
  std::vector<std::size_t> idx(nd, 0);
  const std::size_t inner = a.shape(nd - 1);
  const std::int64_t inner_stride = a.stride(nd - 1);
  for (std::size_t done = 0; done < n; done += inner) {
    std::int64_t off = 0;
    for (std::size_t d = 0; d + 1 < nd; ++d) off += std::int64_t(idx[d]) * a.stride(d);
    const T* row = base + off;
    for (std::size_t j = 0; j < inner; ++j) f(row + std::int64_t(j) * inner_stride);
    for (std::size_t d = nd - 1; d-- > 0;) {
      if (++idx[d] < a.shape(d)) break;
      idx[d] = 0;
    }
  }
}

// The values of a float array as float32: float32 as they are, float16 and bfloat16 exactly,
// float64 rounded to nearest even (what the dump reader does with a float64 dataset).
inline std::vector<float> read_f32(const AnyArray& a, Elem e) {
  std::vector<float> out(count_of(a));
  float* o = out.data();
  switch (e) {
    case Elem::kF32:
      if (c_contiguous(a)) {
        if (!out.empty()) std::memcpy(o, a.data(), out.size() * sizeof(float));
      } else {
        for_each_element<float>(a, [&](const float* p) { *o++ = *p; });
      }
      break;
    case Elem::kF64:
      for_each_element<double>(a, [&](const double* p) { *o++ = float(*p); });
      break;
    case Elem::kF16:
      for_each_element<std::uint16_t>(a,
                                      [&](const std::uint16_t* p) { *o++ = decode_f32<fp16>(*p); });
      break;
    case Elem::kBf16:
      for_each_element<std::uint16_t>(a,
                                      [&](const std::uint16_t* p) { *o++ = decode_f32<bf16>(*p); });
      break;
    default:
      throw UsageError("internal error: read_f32 of a non-float array");
  }
  return out;
}

// Values as float64 (exact for every float input).
inline std::vector<double> read_f64(const AnyArray& a, Elem e) {
  std::vector<double> out(count_of(a));
  double* o = out.data();
  switch (e) {
    case Elem::kF64:
      for_each_element<double>(a, [&](const double* p) { *o++ = *p; });
      break;
    case Elem::kF32:
      for_each_element<float>(a, [&](const float* p) { *o++ = double(*p); });
      break;
    case Elem::kF16:
      for_each_element<std::uint16_t>(
          a, [&](const std::uint16_t* p) { *o++ = double(decode_f32<fp16>(*p)); });
      break;
    case Elem::kBf16:
      for_each_element<std::uint16_t>(
          a, [&](const std::uint16_t* p) { *o++ = double(decode_f32<bf16>(*p)); });
      break;
    default:
      throw UsageError("internal error: read_f64 of a non-float array");
  }
  return out;
}

// Raw elements of an integer array, contiguous (a copy only when the strides ask for one).
template <class T>
std::vector<T> read_raw(const AnyArray& a) {
  std::vector<T> out(count_of(a));
  T* o = out.data();
  for_each_element<T>(a, [&](const T* p) { *o++ = *p; });
  return out;
}

// A numpy array that owns `v` (moved to the heap; freed when the array is), in `shape`.
template <class T>
nb::ndarray<nb::numpy, T> to_numpy(std::vector<T>&& v, const std::vector<std::size_t>& shape) {
  auto* heap = new std::vector<T>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::ndarray<nb::numpy, T>(heap->data(), shape.size(), shape.data(), owner);
}

}  // namespace attnsim::py
