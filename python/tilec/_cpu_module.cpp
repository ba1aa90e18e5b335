//===- _cpu_module.cpp - tilec::runOnCPU over numpy arrays ----------------===//
//
// _tilec_cpu.run_cpu(source, kernel, args, grid, run_tile_passes=True,
//                    buffer_name="<python>")
//   args: one entry per kernel parameter, in order:
//     numpy array            -> !tile.ptr<T> (its data pointer; written in place;
//                               f16 as float16, bf16 as uint16 raw bits)
//     ("i32"|"i64"|"f32", v) -> scalar of that kind
//     numpy int32/int64/float32 scalar -> that kind
//   grid: (x, y, z), or fewer entries (missing ones are 1)
// raises RuntimeError with the MLIR diagnostics on failure.
//
// _tilec_cpu.run_cpu_main(argv) -> int: `tilec run-cpu` (argv[0] is ignored).
//
// A stopgap until the _tilec module binds tilec::runOnCPU itself.
//
//===----------------------------------------------------------------------===//
#include "tilec/CPU/CpuRunner.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

tilec::CpuArg toArg(const py::handle &h, size_t i) {
  if (py::isinstance<py::array>(h)) {
    auto arr = py::reinterpret_borrow<py::array>(h);
    if (!arr.writeable())
      throw std::invalid_argument("argument " + std::to_string(i) + ": array is read-only");
    return tilec::CpuArg::pointer(arr.mutable_data());
  }
  if (py::isinstance<py::tuple>(h)) {
    auto t = py::reinterpret_borrow<py::tuple>(h);
    if (t.size() != 2)
      throw std::invalid_argument("argument " + std::to_string(i) + ": expected (kind, value)");
    std::string kind = py::str(t[0]);
    if (kind == "i32")
      return tilec::CpuArg::i32(t[1].cast<int32_t>());
    if (kind == "i64")
      return tilec::CpuArg::i64(t[1].cast<int64_t>());
    if (kind == "f32")
      return tilec::CpuArg::f32(t[1].cast<float>());
    throw std::invalid_argument("argument " + std::to_string(i) + ": kind '" + kind +
                                "' is not i32, i64 or f32");
  }
  py::module_ np = py::module_::import("numpy");
  if (py::isinstance(h, np.attr("int32")))
    return tilec::CpuArg::i32(h.cast<int32_t>());
  if (py::isinstance(h, np.attr("int64")))
    return tilec::CpuArg::i64(h.cast<int64_t>());
  if (py::isinstance(h, np.attr("float32")))
    return tilec::CpuArg::f32(h.cast<float>());
  throw std::invalid_argument("argument " + std::to_string(i) +
                              ": pass a numpy array, a numpy int32/int64/float32 scalar or a "
                              "(\"i32\"|\"i64\"|\"f32\", value) tuple");
}

void runCpu(const std::string &source, const std::string &kernel, const py::list &args,
            const std::vector<int64_t> &grid, bool runTilePasses, const std::string &bufferName) {
  if (grid.empty() || grid.size() > 3)
    throw std::invalid_argument("grid takes one to three sizes");
  std::array<int64_t, 3> g{1, 1, 1};
  for (size_t d = 0; d < grid.size(); ++d)
    g[d] = grid[d];
  std::vector<tilec::CpuArg> cpuArgs;
  for (size_t i = 0; i < args.size(); ++i)
    cpuArgs.push_back(toArg(args[i], i));
  tilec::CpuRunOptions options;
  options.runTilePasses = runTilePasses;
  std::string message;
  {
    py::gil_scoped_release release;
    if (llvm::Error err = tilec::runOnCPU(source, bufferName, kernel, cpuArgs, g, options))
      message = llvm::toString(std::move(err));
  }
  if (!message.empty())
    throw std::runtime_error(message);
}

int runCpuMain(const std::vector<std::string> &argv) {
  std::vector<std::string> storage = argv;
  std::vector<char *> ptrs;
  for (std::string &s : storage)
    ptrs.push_back(s.data());
  ptrs.push_back(nullptr);
  py::gil_scoped_release release;
  return tilec::runCpuMain(int(storage.size()), ptrs.data());
}

} // namespace

PYBIND11_MODULE(_tilec_cpu, m) {
  m.doc() = "tilec CPU runner: tile kernels on numpy arrays (tilec::runOnCPU)";
  m.def("run_cpu", &runCpu, py::arg("source"), py::arg("kernel"), py::arg("args"),
        py::arg("grid"), py::arg("run_tile_passes") = true,
        py::arg("buffer_name") = "<python>",
        "Runs `kernel` of MLIR text `source` over `grid` on the CPU; arrays are written in "
        "place.");
  m.def("run_cpu_main", &runCpuMain, py::arg("argv"),
        "`tilec run-cpu` with this argv (argv[0] is the program name); returns the exit code.");
}
