// attnsim._core: the compiled core of the Python package attnsim (python/attnsim/__init__.py is
// the API; this module is its private half). Errors: the command line's UsageError lines become
// ValueError, wrong array types TypeError; nothing reaches std::terminate through here.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cstdint>

#include "arrays.hpp"
#include "bindings.hpp"
#include "experiments/common/error.hpp"
#include "experiments/common/warning.hpp"
#include "numerics/isa.hpp"

namespace nb = nanobind;

NB_MODULE(_core, m) {
  m.doc() = "attnsim's compiled core (use the package attnsim, not this module)";
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const attnsim::UsageError& e) {
      PyErr_SetString(PyExc_ValueError, attnsim::one_line(e.what()).c_str());
    }
  });
  // An ATTNSIM_ISA the process could not apply (numerics/isa.hpp): said, never ignored silently.
  if (const std::string rejected = attnsim::isa_env_rejected(); !rejected.empty())
    PyErr_WarnEx(PyExc_RuntimeWarning, rejected.c_str(), 1);
  attnsim::py::bind_attention(m);
  attnsim::py::bind_numerics(m);
  attnsim::py::bind_model_math(m);
  // Warnings and notes go to Python's `warnings` (attnsim/__init__.py relays them after each call).
  attnsim::queue_messages(true);
  m.def("take_messages", [] {
    nb::list out;
    for (const attnsim::QueuedMessage& q : attnsim::take_messages())
      out.append(nb::make_tuple(q.kind, q.text));
    return out;
  });
  // What nanobind sees of an array-like: the data address (the producer's own memory when no copy
  // was made), dtype, shape, strides in elements and the DLPack device; for the tests.
  m.def("array_info", [](const attnsim::py::AnyArray& a) {
    nb::list shape, strides;
    for (std::size_t i = 0; i < a.ndim(); ++i) {
      shape.append(a.shape(i));
      strides.append(a.stride(i));
    }
    nb::dict d;
    d["data"] = std::uintptr_t(a.data());
    d["dtype"] = attnsim::py::dtype_name(a);
    d["shape"] = nb::tuple(shape);
    d["strides"] = nb::tuple(strides);
    d["device"] = a.device_type();
    return d;
  });
}
