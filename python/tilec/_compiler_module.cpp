//===- _compiler_module.cpp - the tilec compiler as a Python module -------===//
//
// A deliberately small surface over the driver (tilec/Driver/Driver.h):
// text in, text or artifacts out. The DSL builds MLIR text itself, with a
// location on every op, so nothing here mirrors the IR's C++ API.
//
// Errors raise _tilec.Error whose message is the MLIR diagnostics text
// ("<file>:<line>:<col>: error: ..."); tilec.errors turns it into a
// CompilationError that quotes the user's source line.
//
//===----------------------------------------------------------------------===//
#include "tilec/Driver/Driver.h"
#ifdef TILEC_HAVE_CPU_RUNNER
#include "tilec/CPU/CpuRunner.h"
#endif

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <stdexcept>
#include <string>

namespace py = pybind11;

namespace {

struct DiagnosticError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Unwraps an Expected, turning its error into a DiagnosticError.
template <typename T> T unwrap(llvm::Expected<T> value) {
  if (!value)
    throw DiagnosticError(llvm::toString(value.takeError()));
  return std::move(*value);
}

py::list compile(const std::string &source, const std::string &bufferName,
                 const std::string &arch, int numWarps, int stages, bool smemEpilogue,
                 const std::string &copyBounds, const std::string &loweringOptions,
                 bool runTilePasses, bool emitCubin,
                 bool printIRAfterAll, const std::string &crashReproducer,
                 const std::vector<std::string> &extraSass) {
  tilec::CompileOptions options;
  options.arch = arch;
  options.strategy.numWarps = numWarps;
  options.strategy.stages = stages;
  options.strategy.smemEpilogue = smemEpilogue;
  options.strategy.copyBounds = copyBounds;
  options.strategy.loweringOptions = loweringOptions;
  options.runTilePasses = runTilePasses;
  options.emitCubin = emitCubin;
  options.printIRAfterAll = printIRAfterAll;
  options.crashReproducerPath = crashReproducer;
  options.extraSass = extraSass;
  std::vector<tilec::CompiledKernel> kernels;
  {
    py::gil_scoped_release release;
    llvm::Expected<std::vector<tilec::CompiledKernel>> result =
        tilec::compileForGPU(source, bufferName, options);
    if (!result) {
      std::string message = llvm::toString(result.takeError());
      py::gil_scoped_acquire acquire;
      throw DiagnosticError(message);
    }
    kernels = std::move(*result);
  }
  py::list out;
  for (const tilec::CompiledKernel &k : kernels) {
    py::dict d;
    d["name"] = k.name;
    d["ptx"] = k.ptx;
    d["cubin"] = py::bytes(k.cubin);
    py::list sass;
    for (const tilec::CompiledKernel::Sass &image : k.sass)
      sass.append(py::make_tuple(image.arch, image.file, py::bytes(image.cubin)));
    d["sass"] = sass;
    d["manifest"] = k.manifestJson;
    d["tile_ir"] = k.tileIR;
    d["llvm_ir"] = k.llvmIR;
    d["ptxas_log"] = k.ptxasLog;
    d["notes"] = k.notes;
    out.append(d);
  }
  return out;
}

std::string runPipeline(const std::string &source, const std::string &bufferName,
                        const std::string &pipeline) {
  py::gil_scoped_release release;
  llvm::Expected<std::string> result = tilec::runPipeline(source, bufferName, pipeline);
  if (!result) {
    std::string message = llvm::toString(result.takeError());
    py::gil_scoped_acquire acquire;
    throw DiagnosticError(message);
  }
  return std::move(*result);
}

#ifdef TILEC_HAVE_CPU_RUNNER
/// args: (kind, value) pairs in parameter order; kind is "ptr" (value: a host
/// address, e.g. numpy's arr.ctypes.data), "i32", "i64" or "f32".
void runCpu(const std::string &source, const std::string &bufferName, const std::string &kernel,
            const std::vector<std::pair<std::string, py::object>> &args,
            const std::array<int64_t, 3> &grid, bool runTilePasses) {
  std::vector<tilec::CpuArg> cpuArgs;
  for (size_t i = 0; i < args.size(); ++i) {
    const auto &[kind, value] = args[i];
    if (kind == "ptr" && py::isinstance<py::tuple>(value)) {
      // (address, bytes reachable from it): accesses past them are refused.
      auto pair = value.cast<std::pair<uint64_t, int64_t>>();
      cpuArgs.push_back(tilec::CpuArg::pointer(
          reinterpret_cast<void *>(static_cast<uintptr_t>(pair.first)), pair.second));
    } else if (kind == "ptr")
      cpuArgs.push_back(tilec::CpuArg::pointer(
          reinterpret_cast<void *>(static_cast<uintptr_t>(value.cast<uint64_t>()))));
    else if (kind == "i32")
      cpuArgs.push_back(tilec::CpuArg::i32(value.cast<int32_t>()));
    else if (kind == "i64")
      cpuArgs.push_back(tilec::CpuArg::i64(value.cast<int64_t>()));
    else if (kind == "f32")
      cpuArgs.push_back(tilec::CpuArg::f32(value.cast<float>()));
    else
      throw py::value_error("run_cpu: argument " + std::to_string(i) + " has unknown kind '" +
                            kind + "' (ptr, i32, i64 or f32)");
  }
  tilec::CpuRunOptions options;
  options.runTilePasses = runTilePasses;
  std::string message;
  {
    py::gil_scoped_release release;
    if (llvm::Error e = tilec::runOnCPU(source, bufferName, kernel, cpuArgs, grid, options))
      message = llvm::toString(std::move(e));
  }
  if (!message.empty())
    throw DiagnosticError(message);
}
#endif

} // namespace

PYBIND11_MODULE(_tilec, m) {
  m.doc() = "tilec compiler: parse/verify, run pass pipelines, compile to PTX/cubin";
  py::register_exception<DiagnosticError>(m, "Error", PyExc_RuntimeError);

  m.def("version", &tilec::getCompilerVersion,
        "The compiler's version string (part of every cache key).");
  m.def(
      "parse_and_verify",
      [](const std::string &source, const std::string &bufferName) {
        // An empty pipeline: parse, verify, print nothing.
        runPipeline(source, bufferName, "");
      },
      py::arg("source"), py::arg("buffer_name") = "<tilec>",
      "Parses and verifies MLIR text; raises _tilec.Error with the diagnostics.");
  m.def(
      "run_pipeline",
      [](const std::string &source, const std::string &pipeline, const std::string &bufferName) {
        return runPipeline(source, bufferName, pipeline);
      },
      py::arg("source"), py::arg("pipeline"),
        py::arg("buffer_name") = "<tilec>",
        "Runs a textual pass pipeline (tile-opt's --pass-pipeline syntax) and "
        "returns the resulting IR.");
  m.def(
      "default_strategy",
      []() {
        tilec::Strategy s;
        py::dict d;
        d["num_warps"] = s.numWarps;
        d["num_stages"] = s.stages;
        d["smem_epilogue"] = s.smemEpilogue;
        d["copy_bounds"] = s.copyBounds;
        d["lowering_options"] = s.loweringOptions;
        return d;
      },
      "The C++ strategy record's defaults (tilec/Strategy.h), by the Python "
      "field names of tilec.strategy.Strategy.");
  m.def("compile", &compile, py::arg("source"), py::arg("buffer_name") = "<tilec>",
        py::arg("arch") = "sm_80", py::arg("num_warps") = tilec::kDefaultNumWarps,
        py::arg("stages") = tilec::kDefaultStages,
        py::arg("smem_epilogue") = tilec::kDefaultSmemEpilogue,
        py::arg("copy_bounds") = std::string(tilec::kDefaultCopyBounds),
        py::arg("lowering_options") = "",
        py::arg("run_tile_passes") = true,
        py::arg("emit_cubin") = true, py::arg("print_ir_after_all") = false,
        py::arg("crash_reproducer") = "", py::arg("extra_sass") = std::vector<std::string>{},
        "Compiles every tile.kernel in `source`; returns a list of dicts with "
        "name, ptx, cubin (bytes), sass (a list of (arch, file name, cubin bytes) for "
        "extra_sass), manifest (JSON text), tile_ir, llvm_ir, ptxas_log and notes.");
#ifdef TILEC_HAVE_CPU_RUNNER
  m.def("run_cpu", &runCpu, py::arg("source"), py::arg("buffer_name"), py::arg("kernel"),
        py::arg("args"), py::arg("grid"), py::arg("run_tile_passes") = true,
        "Runs `kernel` of `source` on the host over the grid; pointer arguments "
        "are host addresses of arrays large enough for every in-bounds access.");
  m.attr("has_cpu_runner") = true;
#else
  m.attr("has_cpu_runner") = false;
#endif
}
