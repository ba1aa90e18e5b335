//===- CpuRunner.h - run tile kernels on the host -------------------------===//
//
// Runs a `tile.kernel` function of MLIR text in-process through MLIR's
// ExecutionEngine (pipeline `tile-to-cpu`), on host arrays, so the numerics
// of every kernel and every tile-level pass can be checked without a GPU.
// Loads and stores have the GPU path's bounds semantics: elements outside a
// view read the padding value and are never written. tile.dot extends
// f16/bf16 operands to f32 and multiply-adds in f32. The grid runs
// sequentially, program id x innermost.
//
// Compiled kernels are cached by (source hash, kernel, options), so repeated
// calls with new data do not recompile. Thread-safe.
//
//===----------------------------------------------------------------------===//
#ifndef TILEC_CPU_CPURUNNER_H
#define TILEC_CPU_CPURUNNER_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <array>
#include <cstdint>

namespace tilec {

/// One kernel argument. Ptr: a host array of the pointee type (f16/bf16 as
/// raw 16-bit values); with `bytes` given, accesses outside [ptr, ptr +
/// bytes) are refused and reported, without it the kernel's view bounds are
/// trusted. I32/I64: `i`. F32: `f`.
struct CpuArg {
  enum class Kind { Ptr, I32, I64, F32 } kind;
  void *ptr = nullptr;
  int64_t i = 0;
  double f = 0;
  /// For pointers: bytes the kernel may touch from `ptr` on (-1: unknown,
  /// unchecked). Accesses beyond it are refused and reported as an error.
  int64_t bytes = -1;

  static CpuArg pointer(void *p, int64_t bytes = -1) { return {Kind::Ptr, p, 0, 0, bytes}; }
  static CpuArg i32(int32_t v) { return {Kind::I32, nullptr, v, 0}; }
  static CpuArg i64(int64_t v) { return {Kind::I64, nullptr, v, 0}; }
  static CpuArg f32(float v) { return {Kind::F32, nullptr, 0, v}; }
};

struct CpuRunOptions {
  /// Run the tile-optimize pipeline (tile-minimize-nonmatmul,
  /// tile-split-masked-loops, ...) before lowering, as the GPU path does.
  bool runTilePasses = true;
};

/// Compiles (or finds in the cache) `kernel` of `source` and runs it over the
/// grid. Errors carry the MLIR diagnostics with their locations in
/// `bufferName`, or say which argument does not match which parameter.
llvm::Error runOnCPU(llvm::StringRef source, llvm::StringRef bufferName, llvm::StringRef kernel,
                     llvm::ArrayRef<CpuArg> args, std::array<int64_t, 3> grid,
                     const CpuRunOptions &options = {});

/// `tilec run-cpu`: FILE.mlir --kernel NAME --grid X,Y,Z [--no-tile-passes]
/// --arg KIND:VALUE ... where KIND:VALUE is ptr:FILE (a raw host array read
/// before the run and written back after it), i32:N, i64:N or f32:X, in
/// parameter order. Returns the process exit code.
int runCpuMain(int argc, char **argv);

} // namespace tilec

#endif
