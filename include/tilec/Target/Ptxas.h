//===- Ptxas.h - PTX -> cubin through the CUDA toolkit's ptxas ------------===//
//
// ptxas is the only closed-source step: it is found at run time and its
// absence is not an error (the runtime can JIT the PTX through the driver).
//
//===----------------------------------------------------------------------===//
#ifndef TILEC_TARGET_PTXAS_H
#define TILEC_TARGET_PTXAS_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>

namespace tilec {

/// ptxas's resource report for one entry function (`ptxas -v`). Fields stay
/// -1 when the report lacks them.
struct PtxasInfo {
  int64_t registers = -1;
  int64_t spillStores = -1; ///< bytes
  int64_t spillLoads = -1;  ///< bytes
  int64_t stackFrame = -1;  ///< bytes
  int64_t sharedBytesStatic = -1; ///< statically declared smem; dynamic smem is not in it
};

struct PtxasResult {
  std::string cubin; ///< the ELF image
  std::string log;   ///< everything ptxas printed (its -v report and warnings)
};

/// The ptxas to use: $TILEC_PTXAS, then $CUDA_HOME/bin, /usr/local/cuda/bin,
/// then PATH. std::nullopt when none is executable.
std::optional<std::string> findPtxas();

/// Assembles `ptx` for `arch` with `ptxas -arch=<arch> -O3 -v`. A non-zero
/// exit is an error carrying ptxas's own messages.
llvm::Expected<PtxasResult> runPtxas(llvm::StringRef ptxasPath, llvm::StringRef ptx,
                                     llvm::StringRef arch);

/// Extracts the resource report of entry `kernel` from a `ptxas -v` log.
PtxasInfo parsePtxasInfo(llvm::StringRef log, llvm::StringRef kernel);

} // namespace tilec

#endif
