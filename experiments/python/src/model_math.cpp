// attnsim._core's reproducible model arithmetic (numerics/model_math.hpp): the projections, norms,
// activations, RoPE tables and FP64 log-softmax/KL that attnsim.modelmath exposes and the real
// models' forwards (attnsim.realmodels) run on. Inputs are float32 (float64 for the log-probability
// rows), any strides; a wrong dtype or shape is a one-line TypeError/ValueError. Rows and panels
// are split over the OpenMP threads; no value depends on the split.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "arrays.hpp"
#include "bindings.hpp"
#include "numerics/model_math.hpp"

namespace attnsim::py {

namespace {

// The float32 values of `a` (contiguous copy only when its strides ask for one).
std::vector<float> f32_values(const AnyArray& a, const std::string& name) {
  require_cpu(a, name);
  if (elem_of(a) != Elem::kF32) {
    throw nb::type_error((name + " has dtype " + dtype_name(a) +
                          "; the model arithmetic takes float32 (cast it first: the choice of "
                          "rounding is the caller's)")
                             .c_str());
  }
  return read_f32(a, Elem::kF32);
}

std::vector<double> f64_values(const AnyArray& a, const std::string& name) {
  require_cpu(a, name);
  if (elem_of(a) != Elem::kF64) {
    throw nb::type_error((name + " has dtype " + dtype_name(a) + "; expected float64").c_str());
  }
  return read_f64(a, Elem::kF64);
}

// (rows, n) of an array whose last axis has n values; a 1-D array is one row.
std::pair<std::size_t, std::size_t> rows_cols(const AnyArray& a, const std::string& name) {
  if (a.ndim() < 1) throw UsageError(name + " must have at least one axis");
  const std::size_t n = a.shape(a.ndim() - 1);
  if (n == 0) throw UsageError(name + ": the last axis is empty");
  return {count_of(a) / n, n};
}

std::vector<std::size_t> shape_of(const AnyArray& a) {
  std::vector<std::size_t> s(a.ndim());
  for (std::size_t i = 0; i < s.size(); ++i) s[i] = a.shape(i);
  return s;
}

void require_vector(const AnyArray& a, std::size_t n, const std::string& name,
                    const std::string& what) {
  if (a.ndim() != 1 || a.shape(0) != n) {
    throw UsageError(name + " must be a vector of " + std::to_string(n) + " values (" + what + ")");
  }
}

// A packed weight matrix with its call: y = x·Wᵀ + b in FP64, rounded once.
class Linear {
 public:
  Linear(const AnyArray& w, std::optional<AnyArray> bias) {
    if (w.ndim() != 2 || w.shape(0) == 0 || w.shape(1) == 0) {
      throw UsageError("weight must be a non-empty 2-D array [out_features, in_features]");
    }
    const std::vector<float> wv = f32_values(w, "weight");
    std::vector<float> bv;
    if (bias) {
      require_vector(*bias, w.shape(0), "bias", "one per output");
      bv = f32_values(*bias, "bias");
    }
    nb::gil_scoped_release release;
    p_ = pack_linear(wv.data(), w.shape(0), w.shape(1), bias ? bv.data() : nullptr);
  }

  nb::ndarray<nb::numpy, float> call(const AnyArray& x) const {
    const auto [rows, k] = rows_cols(x, "x");
    if (k != p_.k) {
      throw UsageError("x has " + std::to_string(k) + " features in its last axis; this Linear takes " +
                       std::to_string(p_.k));
    }
    const std::vector<float> xv = f32_values(x, "x");
    std::vector<float> y(rows * p_.n);
    {
      nb::gil_scoped_release release;
      std::vector<double> xd(xv.begin(), xv.end());
      // Tiles of (48 rows × 8 panels): enough tiles for the threads at one decoding row too.
      constexpr std::size_t kRows = 48, kPanels = 8;
      const std::size_t rb = (rows + kRows - 1) / kRows, pb = (p_.panels() + kPanels - 1) / kPanels;
      const long long tiles = static_cast<long long>(rb * pb);
#pragma omp parallel for schedule(dynamic, 1)
      for (long long i = 0; i < tiles; ++i) {
        const std::size_t r0 = std::size_t(i) / pb * kRows, q0 = std::size_t(i) % pb * kPanels;
        const std::size_t r1 = std::min(rows, r0 + kRows), q1 = std::min(p_.panels(), q0 + kPanels);
        linear_f32(xd.data() + r0 * k, r1 - r0, k, p_, q0, q1, y.data() + r0 * p_.n, p_.n);
      }
    }
    std::vector<std::size_t> shape = shape_of(x);
    shape.back() = p_.n;
    return to_numpy(std::move(y), shape);
  }

  std::size_t in_features() const { return p_.k; }
  std::size_t out_features() const { return p_.n; }
  bool has_bias() const { return !p_.bias.empty(); }

 private:
  PackedLinear p_;
};

// Applies f(row pointer in, row pointer out) to every row on the threads.
template <class T, class U, class F>
void rows_parallel(const std::vector<T>& in, std::vector<U>& out, std::size_t rows,
                   std::size_t n_in, std::size_t n_out, F&& f) {
  nb::gil_scoped_release release;
#pragma omp parallel for schedule(static)
  for (long long t = 0; t < static_cast<long long>(rows); ++t) {
    f(in.data() + std::size_t(t) * n_in, out.data() + std::size_t(t) * n_out);
  }
}

double check_eps(double eps) {
  if (!(eps >= 0) || !std::isfinite(eps)) {
    throw UsageError("eps must be a finite number >= 0, got " + std::to_string(eps));
  }
  return eps;
}

}  // namespace

void bind_model_math(nb::module_& m) {
  nb::class_<Linear>(m, "Linear")
      .def(nb::init<const AnyArray&, std::optional<AnyArray>>(), nb::arg("weight"),
           nb::arg("bias") = nb::none())
      .def("__call__", &Linear::call, nb::arg("x"))
      .def_prop_ro("in_features", &Linear::in_features)
      .def_prop_ro("out_features", &Linear::out_features)
      .def_prop_ro("has_bias", &Linear::has_bias);

  m.def("mm_rms_norm", [](const AnyArray& x, const AnyArray& w, double eps) {
    const auto [rows, n] = rows_cols(x, "x");
    require_vector(w, n, "weight", "one per feature of x's last axis");
    const std::vector<float> xv = f32_values(x, "x"), wv = f32_values(w, "weight");
    check_eps(eps);
    std::vector<float> y(xv.size());
    rows_parallel(xv, y, rows, n, n,
                  [&, n = n](const float* a, float* b) { rms_norm_row(a, wv.data(), n, eps, b); });
    return to_numpy(std::move(y), shape_of(x));
  });
  m.def("mm_layer_norm", [](const AnyArray& x, const AnyArray& g, const AnyArray& b, double eps) {
    const auto [rows, n] = rows_cols(x, "x");
    require_vector(g, n, "weight", "one per feature of x's last axis");
    require_vector(b, n, "bias", "one per feature of x's last axis");
    const std::vector<float> xv = f32_values(x, "x"), gv = f32_values(g, "weight"),
                             bv = f32_values(b, "bias");
    check_eps(eps);
    std::vector<float> y(xv.size());
    rows_parallel(xv, y, rows, n, n, [&, n = n](const float* a, float* o) {
      layer_norm_row(a, gv.data(), bv.data(), n, eps, o);
    });
    return to_numpy(std::move(y), shape_of(x));
  });
  m.def("mm_silu_mul", [](const AnyArray& g, const AnyArray& u) {
    if (shape_of(g) != shape_of(u)) throw UsageError("gate and up must have the same shape");
    const std::vector<float> gv = f32_values(g, "gate"), uv = f32_values(u, "up");
    std::vector<float> y(gv.size());
    if (!y.empty()) {
      const auto [rows, n] = rows_cols(g, "gate");
      rows_parallel(gv, y, rows, n, n, [&, n = n](const float* a, float* o) {
        silu_mul(a, uv.data() + (a - gv.data()), n, o);
      });
    }
    return to_numpy(std::move(y), shape_of(g));
  });
  m.def("mm_gelu_erf", [](const AnyArray& x) {
    const std::vector<float> xv = f32_values(x, "x");
    std::vector<float> y(xv.size());
    if (!y.empty()) {
      const auto [rows, n] = rows_cols(x, "x");
      rows_parallel(xv, y, rows, n, n,
                    [n = n](const float* a, float* o) { gelu_erf(a, n, o); });
    }
    return to_numpy(std::move(y), shape_of(x));
  });
  m.def("mm_rope_tables", [](std::size_t rows, std::size_t start, std::size_t d, double base) {
    std::vector<float> c(rows * d), s(rows * d);
    try {
      rope_tables(rows, start, d, base, c.data(), s.data());
    } catch (const std::exception& e) {
      throw UsageError(e.what());
    }
    return std::make_pair(to_numpy(std::move(c), {rows, d}), to_numpy(std::move(s), {rows, d}));
  });
  m.def("mm_log_softmax", [](const AnyArray& z) {
    const auto [rows, n] = rows_cols(z, "logits");
    const std::vector<float> zv = f32_values(z, "logits");
    std::vector<double> y(zv.size());
    rows_parallel(zv, y, rows, n, n,
                  [n = n](const float* a, double* o) { log_softmax_row(a, n, o); });
    return to_numpy(std::move(y), shape_of(z));
  });
  m.def("mm_kl_rows", [](const AnyArray& lp, const AnyArray& lq) {
    if (shape_of(lp) != shape_of(lq)) throw UsageError("lp and lq must have the same shape");
    const auto [rows, n] = rows_cols(lp, "lp");
    const std::vector<double> a = f64_values(lp, "lp"), b = f64_values(lq, "lq");
    std::vector<double> kl(rows);
    rows_parallel(a, kl, rows, n, 1, [&, n = n](const double* p, double* o) {
      *o = kl_row(p, b.data() + (p - a.data()), n);
    });
    std::vector<std::size_t> shape = shape_of(lp);
    shape.pop_back();
    return to_numpy(std::move(kl), shape);
  });
  m.def("mm_exp", [](const AnyArray& x) {
    std::vector<double> v = f64_values(x, "x");
    for (double& e : v) e = det_exp(e);
    return to_numpy(std::move(v), shape_of(x));
  });
  m.def("mm_log", [](const AnyArray& x) {
    std::vector<double> v = f64_values(x, "x");
    for (double& e : v) e = det_log(e);
    return to_numpy(std::move(v), shape_of(x));
  });
  // sin and cos of |x| <= kDetTrigMax (a std::domain_error, ValueError, beyond): RoPE tables of
  // scaled inv_freq (attnsim.realmodels.hf) from the functions rope_tables uses.
  m.def("mm_sin", [](const AnyArray& x) {
    std::vector<double> v = f64_values(x, "x");
    for (double& e : v) e = det_sin(e);
    return to_numpy(std::move(v), shape_of(x));
  });
  m.def("mm_cos", [](const AnyArray& x) {
    std::vector<double> v = f64_values(x, "x");
    for (double& e : v) e = det_cos(e);
    return to_numpy(std::move(v), shape_of(x));
  });
  m.def("mm_linear_ref", [](const AnyArray& w, std::optional<AnyArray> bias, const AnyArray& x) {
    // The reference kernel on one thread, for the tests' bit-for-bit comparison with Linear.
    if (w.ndim() != 2) throw UsageError("weight must be 2-D");
    const std::vector<float> wv = f32_values(w, "weight"), xv = f32_values(x, "x");
    std::vector<float> bv;
    if (bias) bv = f32_values(*bias, "bias");
    const PackedLinear p = pack_linear(wv.data(), w.shape(0), w.shape(1), bias ? bv.data() : nullptr);
    const auto [rows, k] = rows_cols(x, "x");
    if (k != p.k) throw UsageError("x's last axis must match the weight's in_features");
    std::vector<double> xd(xv.begin(), xv.end());
    std::vector<float> y(rows * p.n);
    linear_f32_ref(xd.data(), rows, k, p, 0, p.panels(), y.data(), p.n);
    std::vector<std::size_t> shape = shape_of(x);
    shape.back() = p.n;
    return to_numpy(std::move(y), shape);
  });
}

}  // namespace attnsim::py
