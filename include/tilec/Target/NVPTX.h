//===- NVPTX.h - LLVM-dialect module -> LLVM IR -> PTX, in process --------===//
//
// The back half of the GPU pipeline up to PTX. Everything here runs inside
// the compiler process through LLVM's NVPTX backend (no llc), so the Python
// module and the CLI produce byte-identical PTX.
//
//===----------------------------------------------------------------------===//
#ifndef TILEC_TARGET_NVPTX_H
#define TILEC_TARGET_NVPTX_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <memory>
#include <string>

namespace llvm {
class LLVMContext;
class Module;
class TargetMachine;
} // namespace llvm

namespace mlir {
class Operation;
} // namespace mlir

namespace tilec {

/// The triple every kernel is compiled for (64-bit addresses on the device).
inline constexpr const char *kNVPTXTriple = "nvptx64-nvidia-cuda";

/// The PTX ISA version asked of LLVM (8.6, CUDA 12.8). It is the lowest one
/// that covers every instruction the sm_80 and sm_90a lowerings use (wgmma,
/// TMA, setmaxnreg need 8.0) with headroom, and ptxas from CUDA 12.8 onward
/// assembles it. A driver JIT-compiling the PTX must be at least 12.8 too.
inline constexpr unsigned kDefaultPTXVersion = 86;

struct NVPTXOptions {
  /// The SM to compile for: "sm_80", "sm_90", "sm_90a".
  std::string arch = "sm_80";
  /// PTX ISA version times ten (86 = PTX 8.6).
  unsigned ptxVersion = kDefaultPTXVersion;
  /// LLVM optimisation level for the IR pipeline and code generation (0-3).
  unsigned optLevel = 3;
};

/// Registers the NVPTX backend with LLVM's target registry; cheap and
/// thread-safe to call more than once.
void initializeNVPTXBackend();

/// An NVPTX TargetMachine for `options.arch`; an error names the arch when
/// LLVM does not know it.
llvm::Expected<std::unique_ptr<llvm::TargetMachine>>
createNVPTXTargetMachine(const NVPTXOptions &options);

/// Translates `module` (LLVM dialect plus NVVM ops) to LLVM IR and stamps it
/// with the NVPTX triple and the data layout of `tm`. The LLVM/NVVM
/// translation interfaces must be registered in the op's context (see
/// tilec::registerAllDialects). Failures are reported as MLIR diagnostics on
/// `module`'s context; the error then only says that translation failed.
llvm::Expected<std::unique_ptr<llvm::Module>>
translateToNVPTXModule(mlir::Operation *module, llvm::LLVMContext &llvmContext,
                       llvm::TargetMachine &tm);

/// Runs LLVM's default per-module pipeline at `optLevel` (new pass manager),
/// with the NVPTX-specific passes the target machine registers.
llvm::Error optimizeLLVMModule(llvm::Module &module, llvm::TargetMachine &tm,
                               unsigned optLevel);

/// Lowers `module` to PTX assembly text.
/// Fails (naming the function and the intrinsic) when `module` calls a math
/// intrinsic LLVM's NVPTX backend cannot select, which would otherwise be a
/// fatal error ending the process. emitPTX runs it first.
llvm::Error checkNVPTXLegality(const llvm::Module &module);

llvm::Expected<std::string> emitPTX(llvm::Module &module, llvm::TargetMachine &tm);

} // namespace tilec

#endif
