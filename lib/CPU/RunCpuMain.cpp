//===- RunCpuMain.cpp - `tilec run-cpu`: a kernel on host files -----------===//
//
//   run-cpu FILE.mlir --kernel NAME --grid X,Y,Z [--no-tile-passes]
//           [--source-name NAME] --arg ptr:DATA.bin --arg i32:128 --arg f32:0.088 ...
//
// Arguments go in parameter order. A ptr argument's file is read into a host
// array before the run and written back after it (outputs: pass a file of
// the right size, e.g. filled with NaN, and read it afterwards).
//
//===----------------------------------------------------------------------===//
#include "tilec/CPU/CpuRunner.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <vector>

namespace {
constexpr const char *kUsage =
    "usage: tilec run-cpu FILE.mlir --kernel NAME --grid X,Y,Z [--no-tile-passes]\n"
    "                     [--source-name NAME] --arg ptr:FILE|i32:N|i64:N|f32:X ...\n"
    "Runs a tile.kernel on the CPU (tile-to-cpu + MLIR's ExecutionEngine), one\n"
    "--arg per kernel parameter in order. A ptr:FILE argument is the file's raw\n"
    "bytes: read before the run and written back after it (inputs included). The\n"
    "kernel's own bounds (view sizes) decide what it touches; an access past the\n"
    "end of a file is not made and is reported as an error after the run.\n"
    "--source-name names the input in diagnostics (default: FILE).\n";

int usage(const char *why) {
  llvm::errs() << "run-cpu: " << why << "\n" << kUsage;
  return 2;
}
} // namespace

int tilec::runCpuMain(int argc, char **argv) {
  std::string file, kernel, gridText, sourceName;
  std::vector<std::string> argTexts;
  CpuRunOptions options;
  for (int i = 1; i < argc; ++i) {
    llvm::StringRef a = argv[i];
    auto value = [&](std::string &into) {
      if (a.contains('=')) {
        into = a.split('=').second.str();
        return true;
      }
      if (i + 1 >= argc)
        return false;
      into = argv[++i];
      return true;
    };
    std::string v;
    if (a == "run-cpu" && i == 1)
      continue;
    if (a.starts_with("--kernel")) {
      if (!value(kernel))
        return usage("--kernel needs a name");
    } else if (a.starts_with("--grid")) {
      if (!value(gridText))
        return usage("--grid needs X,Y,Z");
    } else if (a.starts_with("--arg")) {
      if (!value(v))
        return usage("--arg needs KIND:VALUE");
      argTexts.push_back(v);
    } else if (a.starts_with("--source-name")) {
      if (!value(sourceName))
        return usage("--source-name needs a name");
    } else if (a == "--no-tile-passes") {
      options.runTilePasses = false;
    } else if (a == "--help" || a == "-h") {
      llvm::outs() << kUsage;
      return 0;
    } else if (a.starts_with("-")) {
      return usage(("unknown option " + a).str().c_str());
    } else if (file.empty()) {
      file = a.str();
    } else {
      return usage("more than one input file");
    }
  }
  if (file.empty() || kernel.empty() || gridText.empty())
    return usage("FILE, --kernel and --grid are required");

  std::array<int64_t, 3> grid{1, 1, 1};
  llvm::SmallVector<llvm::StringRef> parts;
  llvm::StringRef(gridText).split(parts, ',');
  if (parts.empty() || parts.size() > 3)
    return usage("--grid takes one to three comma-separated sizes");
  for (size_t d = 0; d < parts.size(); ++d)
    if (parts[d].trim().getAsInteger(10, grid[d]))
      return usage("--grid sizes must be integers");

  auto source = llvm::MemoryBuffer::getFileOrSTDIN(file);
  if (!source) {
    llvm::errs() << "run-cpu: cannot read " << file << ": " << source.getError().message() << "\n";
    return 1;
  }

  std::vector<std::vector<char>> buffers(argTexts.size());
  std::vector<CpuArg> args;
  for (size_t i = 0; i < argTexts.size(); ++i) {
    auto [kind, text] = llvm::StringRef(argTexts[i]).split(':');
    if (kind == "ptr") {
      auto data = llvm::MemoryBuffer::getFile(text, /*IsText=*/false);
      if (!data) {
        llvm::errs() << "run-cpu: cannot read " << text << ": " << data.getError().message()
                     << "\n";
        return 1;
      }
      buffers[i].assign((*data)->getBufferStart(), (*data)->getBufferEnd());
      int64_t bytes = int64_t(buffers[i].size());
      buffers[i].resize(std::max<size_t>(buffers[i].size(), 1));
      // The file's size bounds what the kernel may touch: accesses past it
      // are refused and reported.
      args.push_back(CpuArg::pointer(buffers[i].data(), bytes));
    } else if (kind == "i32" || kind == "i64") {
      int64_t n;
      if (text.getAsInteger(10, n))
        return usage(("--arg " + argTexts[i] + ": not an integer").c_str());
      args.push_back(kind == "i32" ? CpuArg::i32(int32_t(n)) : CpuArg::i64(n));
    } else if (kind == "f32") {
      double x;
      if (text.getAsDouble(x))
        return usage(("--arg " + argTexts[i] + ": not a number").c_str());
      args.push_back(CpuArg::f32(float(x)));
    } else {
      return usage(("--arg " + argTexts[i] + ": kind must be ptr, i32, i64 or f32").c_str());
    }
  }

  if (llvm::Error err = runOnCPU((*source)->getBuffer(),
                                     sourceName.empty() ? file : sourceName, kernel, args, grid, options)) {
    llvm::errs() << "run-cpu: " << llvm::toString(std::move(err)) << "\n";
    return 1;
  }
  for (size_t i = 0; i < argTexts.size(); ++i) {
    auto [kind, text] = llvm::StringRef(argTexts[i]).split(':');
    if (kind != "ptr")
      continue;
    std::error_code ec;
    llvm::raw_fd_ostream out(text, ec, llvm::sys::fs::OF_None);
    if (ec) {
      llvm::errs() << "run-cpu: cannot write " << text << ": " << ec.message() << "\n";
      return 1;
    }
    out.write(buffers[i].data(), buffers[i].size());
  }
  return 0;
}
