//===- Driver.h - the whole pipeline: tile IR text -> PTX/cubin + manifest ===//
//
// The one entry point that tilec (CLI), the Python module and tests use to
// compile kernels for the GPU. Errors come back as llvm::Error whose message
// holds the MLIR diagnostics with their source locations (Debian's LLVM is
// built without exceptions).
//
//===----------------------------------------------------------------------===//
#ifndef TILEC_DRIVER_DRIVER_H
#define TILEC_DRIVER_DRIVER_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace tilec {

struct CompileOptions {
  /// "sm_80" (mma.sync path) or "sm_90a".
  std::string arch = "sm_80";
  /// Warps per program (thread block); FlashAttention-2 uses 4 for 64-row blocks.
  int numWarps = 4;
  /// Run the target-independent tile passes (minimize-nonmatmul, split-masked-loops).
  bool runTilePasses = true;
  /// Produce a cubin with ptxas when the toolkit is present (PTX is always produced).
  bool emitCubin = true;
  /// Print the IR after every pass to stderr (also: env TILEC_DUMP_IR=1).
  bool printIRAfterAll = false;
  /// Write an MLIR crash reproducer here when a pass fails (empty: off).
  std::string crashReproducerPath;
};

/// One compiled kernel: every artifact the runtime or a test may want.
struct CompiledKernel {
  std::string name;
  std::string tileIR;   ///< the layout-assigned tile IR before NVVM lowering
  std::string llvmIR;   ///< LLVM IR text handed to NVPTX
  std::string ptx;
  std::string cubin;    ///< bytes; empty when ptxas is unavailable or not asked for
  std::string manifestJson;
};

/// Parses `source` (named `bufferName` in diagnostics), runs the GPU pipeline
/// and returns one CompiledKernel per `tile.kernel` function.
llvm::Expected<std::vector<CompiledKernel>>
compileForGPU(llvm::StringRef source, llvm::StringRef bufferName, const CompileOptions &options);

/// Parses `source`, runs the textual pass pipeline `pipeline` (as tile-opt's
/// --pass-pipeline), and returns the resulting IR as text.
llvm::Expected<std::string> runPipeline(llvm::StringRef source, llvm::StringRef bufferName,
                                        llvm::StringRef pipeline);

} // namespace tilec

#endif
