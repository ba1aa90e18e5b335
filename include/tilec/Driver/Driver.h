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

#include "tilec/Strategy.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace tilec {

struct CompileOptions {
  /// "sm_80" (mma.sync path) or "sm_90a".
  std::string arch = "sm_80";
  /// How the kernel is lowered: warps, stages, epilogue, copy bounds and
  /// more lowering options, with their defaults (tilec/Strategy.h).
  Strategy strategy;
  /// Run the target-independent tile passes (minimize-nonmatmul, split-masked-loops).
  bool runTilePasses = true;
  /// Produce a cubin with ptxas when the toolkit is present (PTX is always produced).
  bool emitCubin = true;
  /// With emitCubin, also assemble the PTX for these GPUs ("sm_90"): machine
  /// code the runtime loads on such a device instead of having the driver
  /// JIT-compile the PTX (an sm_80 cubin cannot run on sm_90). Listed in the
  /// manifest's "sass" and written as <kernel>.<arch>.cubin.
  std::vector<std::string> extraSass;
  /// Print the IR after every pass to stderr (also: env TILEC_DUMP_IR=1).
  bool printIRAfterAll = false;
  /// Write an MLIR crash reproducer here when a pass fails (empty: off).
  std::string crashReproducerPath;
  /// The input is already in the LLVM dialect (+ nvvm), each kernel with the
  /// ABI attributes the lowering leaves (dialects/Tile/TileAttrNames.h):
  /// skip every tile pipeline and go straight to LLVM IR. For
  /// tests of the back half, and for IR saved from a previous run.
  bool inputIsLLVMDialect = false;
  /// Report per-pass timing and pass statistics on stderr.
  bool printStats = false;
  /// PTX ISA version times ten; 0 means tilec's default (Target/NVPTX.h).
  unsigned ptxVersion = 0;
};

/// One compiled kernel: every artifact the runtime or a test may want.
struct CompiledKernel {
  std::string name;
  std::string tileIR;   ///< the layout-assigned tile IR before NVVM lowering
  std::string llvmIR;   ///< LLVM IR text handed to NVPTX
  std::string ptx;
  std::string cubin;    ///< bytes; empty when ptxas is unavailable or not asked for
  /// The PTX assembled for CompileOptions::extraSass, in that order.
  struct Sass {
    std::string arch;  ///< "sm_90"
    std::string file;  ///< "<name>.sm_90.cubin": where the manifest says it is
    std::string cubin; ///< bytes
  };
  std::vector<Sass> sass;
  /// The launch manifest (the runtime's input). It names "<name>.ptx" and,
  /// when `cubin` is non-empty, "<name>.cubin", relative to its own folder.
  std::string manifestJson;
  std::string ptxasLog; ///< ptxas -v output; empty when ptxas did not run
  /// Things a user should know that are not errors (e.g. no ptxas found).
  std::vector<std::string> notes;
};

/// "tilec 0.1.0 (LLVM 22.x.y)": what the manifest's "compiler" field holds.
std::string getCompilerVersion();

/// Parses `source` (named `bufferName` in diagnostics), runs the GPU pipeline
/// and returns one CompiledKernel per `tile.kernel` function (per `llvm.func`
/// with `nvvm.kernel` after lowering), in the order they appear.
llvm::Expected<std::vector<CompiledKernel>>
compileForGPU(llvm::StringRef source, llvm::StringRef bufferName, const CompileOptions &options);

/// Parses `source`, runs the textual pass pipeline `pipeline` (as tile-opt's
/// --pass-pipeline), and returns the resulting IR as text.
llvm::Expected<std::string> runPipeline(llvm::StringRef source, llvm::StringRef bufferName,
                                        llvm::StringRef pipeline);

} // namespace tilec

#endif
