//===- _runtime_module.cpp - Python bindings of the tilec runtime ---------===//
//
// The low-level module _tilec_runtime. It knows nothing of torch: pointers
// are Python ints. tilec/runtime.py builds the torch-facing API on top.
//
// Errors map to Python exceptions by kind: no driver / a failed CUDA call ->
// RuntimeError; wrong argument count or kind -> TypeError; bad manifests,
// grid expressions and out-of-range arguments -> ValueError.
//
//===----------------------------------------------------------------------===//

#include "tilec/runtime/Runtime.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

namespace py = pybind11;
using namespace tilec::runtime;

namespace {

py::object toPython(const JsonValue &v) {
  switch (v.type()) {
  case JsonValue::Type::Null:
    return py::none();
  case JsonValue::Type::Bool:
    return py::bool_(v.asBool());
  case JsonValue::Type::Integer:
    return py::int_(v.asInteger());
  case JsonValue::Type::Number:
    return py::float_(v.asNumber());
  case JsonValue::Type::String:
    return py::str(v.asString());
  case JsonValue::Type::Array: {
    py::list list;
    for (const JsonValue &item : v.asArray())
      list.append(toPython(item));
    return py::object(std::move(list));
  }
  case JsonValue::Type::Object: {
    py::dict dict;
    for (const auto &[key, value] : v.asObject())
      dict[py::str(key)] = toPython(value);
    return py::object(std::move(dict));
  }
  }
  return py::none();
}

/// Converts one Python argument by its Python type; Kernel::launch then
/// checks it against the parameter's kind and range.
KernelArg toArg(py::handle obj, const Param &param, size_t index) {
  PyObject *o = obj.ptr();
  // bool is an int subclass; True as a size or a pointer is a mistake.
  if (PyBool_Check(o))
    throw Error(Error::Kind::ArgType,
                describeArgument(param, index) + ": got a bool");
  if (PyLong_Check(o)) {
    if (param.kind == ParamKind::Ptr) {
      unsigned long long v = PyLong_AsUnsignedLongLong(o);
      if (PyErr_Occurred()) {
        PyErr_Clear();
        throw Error(Error::Kind::ArgValue,
                    describeArgument(param, index) + ": " +
                        py::str(obj).cast<std::string>() +
                        " is not a 64-bit device address");
      }
      return DevicePtr{v};
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow)
      throw Error(Error::Kind::ArgValue,
                  describeArgument(param, index) + ": " +
                      py::str(obj).cast<std::string>() +
                      " does not fit in 64 bits");
    return static_cast<int64_t>(v);
  }
  if (PyFloat_Check(o))
    return PyFloat_AsDouble(o);
  throw Error(Error::Kind::ArgType,
              describeArgument(param, index) + ": expected an int or a " +
                  "float, got " +
                  py::str(py::type::handle_of(obj).attr("__name__"))
                      .cast<std::string>());
}

/// One argument of the hot path (Kernel.launch_fast): like toArg, and a
/// pointer parameter also takes an object with a data_ptr() method (a torch
/// tensor), whose address is read here rather than in Python.
KernelArg toFastArg(PyObject *o, const Param &param, size_t index) {
  if (param.kind == ParamKind::Ptr && !PyLong_Check(o) && !PyBool_Check(o)) {
    static PyObject *dataPtr = PyUnicode_InternFromString("data_ptr");
    PyObject *address = PyObject_CallMethodNoArgs(o, dataPtr);
    if (!address) {
      PyErr_Clear();
      throw Error(Error::Kind::ArgType,
                  describeArgument(param, index) +
                      ": expected a tensor (an object with data_ptr()) or an "
                      "int address, got " +
                      std::string(Py_TYPE(o)->tp_name));
    }
    py::object owned = py::reinterpret_steal<py::object>(address);
    return toArg(owned, param, index);
  }
  return toArg(py::handle(o), param, index);
}

std::vector<KernelArg> toArgs(const Kernel &kernel, const py::sequence &args) {
  kernel.checkArgCount(args.size());
  const std::vector<Param> &params = kernel.manifest().params;
  std::vector<KernelArg> out;
  out.reserve(params.size());
  for (size_t i = 0; i < params.size(); ++i)
    out.push_back(toArg(args[i], params[i], i));
  return out;
}

} // namespace

PYBIND11_MODULE(_tilec_runtime, m) {
  m.doc() = "tilec runtime: load compiled kernels (manifest + cubin/PTX) and "
            "launch them through the CUDA driver API.";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p)
        std::rethrow_exception(p);
    } catch (const Error &e) {
      PyObject *type = PyExc_ValueError;
      if (e.kind() == Error::Kind::Driver)
        type = PyExc_RuntimeError;
      else if (e.kind() == Error::Kind::ArgType)
        type = PyExc_TypeError;
      PyErr_SetString(type, e.what());
    }
  });

  m.def(
      "driver_available",
      []() {
        std::string reason;
        bool ok = driverAvailable(&reason);
        return py::make_tuple(ok, reason);
      },
      "(True, '') when libcuda.so.1 loads and initializes, else (False, "
      "reason).");

  m.def(
      "parse_manifest",
      [](const std::string &path) { return toPython(loadManifest(path).json); },
      py::arg("path"),
      "Reads and validates a launch manifest; returns it as a dict. Needs no "
      "driver.");

  m.def(
      "grid_expr",
      [](const std::string &source, const std::vector<std::string> &params,
         const py::dict &constants) {
        // Constants (constexprs) are names too, printed as their values.
        std::vector<std::string> names = params;
        std::vector<std::optional<int64_t>> values(params.size());
        for (auto item : constants) {
          names.push_back(item.first.cast<std::string>());
          values.push_back(item.second.cast<int64_t>());
        }
        tilec::grid::ParseError error;
        std::optional<tilec::grid::Program> program = tilec::grid::parse(source, names, error);
        if (!program)
          throw py::value_error(error.message + " at column " +
                                std::to_string(error.column));
        return tilec::grid::print(*program, names, values);
      },
      py::arg("source"), py::arg("params"), py::arg("constants"),
      "The canonical text of a grid expression (tilec/runtime/GridSyntax.h) "
      "over the integer parameters `params`, with {name: int} `constants` "
      "substituted; ValueError naming the problem and its column.");

  m.def(
      "eval_grid",
      [](const std::vector<std::string> &exprs, const py::dict &values) {
        std::vector<std::pair<std::string, int64_t>> named;
        for (auto item : values)
          named.emplace_back(item.first.cast<std::string>(),
                             item.second.cast<int64_t>());
        Dim3 g = evalGrid(exprs, named);
        return py::make_tuple(g[0], g[1], g[2]);
      },
      py::arg("exprs"), py::arg("values"),
      "Evaluates three grid expressions over {name: int}; returns (x, y, z).");

  py::class_<Kernel, std::shared_ptr<Kernel>>(m, "Kernel")
      .def_property_readonly(
          "manifest",
          [](const Kernel &k) { return toPython(k.manifest().json); },
          "The manifest as a dict, including keys the runtime ignores.")
      .def_property_readonly(
          "name", [](const Kernel &k) { return k.manifest().kernel; })
      .def_property_readonly("path",
                             [](const Kernel &k) { return k.manifest().path; })
      .def_property_readonly(
          "loaded_image", [](const Kernel &k) { return k.loadedImage(); },
          "Which image the module came from when it was loaded (the first launch "
          "in a CUDA context; with several contexts, the latest): 'cubin sm_80', "
          "'cubin sm_90' (from the manifest's \"sass\" list), 'ptx (JIT for "
          "sm_90)'; '' before the first launch.")
      .def(
          "grid",
          [](const Kernel &k, const py::sequence &args) {
            Dim3 g = k.grid(toArgs(k, args));
            return py::make_tuple(g[0], g[1], g[2]);
          },
          py::arg("args"), "The grid a launch with `args` would use.")
      .def(
          "launch",
          [](Kernel &k, const py::sequence &args, uintptr_t stream,
             const std::optional<Dim3> &grid) {
            std::vector<KernelArg> converted = toArgs(k, args);
            // cuLaunchKernel may block when the launch queue is full.
            py::gil_scoped_release release;
            k.launch(converted, stream, grid);
          },
          py::arg("args"), py::arg("stream") = 0, py::arg("grid") = py::none(),
          "Launches with `args` (ints for ptr/i32/i64 params, floats for f32) "
          "on `stream` (a CUstream as an int; 0 = legacy default stream). "
          "`grid`, a tuple (x, y, z), overrides the manifest's grid.")
      .def(
          "launch_fast",
          [](Kernel &k, const py::tuple &args, uintptr_t stream,
             const std::optional<Dim3> &grid) {
            // The hot path: each argument is converted and checked once, into
            // its packed slot on the stack; no vectors of variants.
            size_t count = PyTuple_GET_SIZE(args.ptr());
            k.checkArgCount(count);
            const std::vector<Param> &params = k.manifest().params;
            constexpr size_t kInline = 64;
            uint64_t inlineSlots[kInline];
            std::vector<uint64_t> heapSlots;
            uint64_t *slots = inlineSlots;
            if (count > kInline) {
              heapSlots.resize(count);
              slots = heapSlots.data();
            }
            for (size_t i = 0; i < count; ++i)
              slots[i] = k.packArg(
                  i, toFastArg(PyTuple_GET_ITEM(args.ptr(), i), params[i], i));
            // cuLaunchKernel may block when the launch queue is full.
            py::gil_scoped_release release;
            k.launchPacked(slots, count, stream, grid);
          },
          py::arg("args"), py::arg("stream") = 0, py::arg("grid") = py::none(),
          "The hot path of a launch: `args` a tuple in parameter order (tensors "
          "or int addresses for ptr params, ints, floats); checks each value "
          "against its parameter once, in C++, and launches. No dtype or device "
          "checks: the caller's (tilec.jit.Kernel, flash_attn_func) are made "
          "before it, once.")
      .def("__repr__", [](const Kernel &k) {
        return "<tilec Kernel '" + k.manifest().kernel + "' from " +
               k.manifest().path + ">";
      });

  m.attr("MAX_GRID") = py::make_tuple(kMaxGrid[0], kMaxGrid[1], kMaxGrid[2]);

  m.def("load", &Kernel::load, py::arg("manifest_path"),
        "Loads the kernel a manifest describes. Raises RuntimeError when no "
        "CUDA driver is present.");
}
