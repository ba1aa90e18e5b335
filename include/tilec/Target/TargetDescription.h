//===- TargetDescription.h - the hardware numbers of each supported GPU ---===//
//
// One table of the numbers that describe a GPU architecture, read by the
// lowering (through its TargetInfo) instead of literals spread over it.
// Sources: the CUDA C++ Programming Guide's "Technical Specifications per
// Compute Capability" table (threads, warp size, shared memory per block)
// and the PTX ISA (cp.async/ldmatrix granules, mma.sync shapes).
//
//===----------------------------------------------------------------------===//
#ifndef TILEC_TARGET_TARGETDESCRIPTION_H
#define TILEC_TARGET_TARGETDESCRIPTION_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>

namespace tilec {

/// The instruction families an architecture's lowering can use. The sm_90
/// family still lowers through the sm_80 primitives (mma.sync, cp.async);
/// wgmma and TMA will be its own.
enum class TargetFamily { Sm80, Sm90 };

struct TargetDescription {
  llvm::StringLiteral arch;
  /// Compute capability, major * 10 + minor.
  int computeCapability;
  TargetFamily family;
  /// Dynamic shared memory one block may opt in to (bytes; cudaFuncSetAttribute
  /// MaxDynamicSharedMemorySize): 163 KB on sm_80, 99 KB on sm_86/89, 227 KB on sm_90.
  int64_t maxSharedBytesPerBlock;
  int64_t warpSize = 32;
  int64_t maxThreadsPerBlock = 1024;
  /// The 16-byte granule: one cp.async copy, one ldmatrix row, the widest
  /// vector access of a thread.
  int64_t chunkBytes = 16;
  /// Alignment of the shared window and of every region in it: 128 bytes is
  /// the swizzle period (8 chunks), so a region keeps its rows' phases.
  int64_t sharedAlignment = 128;
  /// Largest XOR swizzle of 16-byte chunks with the row (3: 8 chunks, the
  /// 32 four-byte banks of one 128-byte row).
  unsigned maxSwizzleBits = 3;
  /// mma.sync's shape for f16/bf16 (m16n8k16).
  int64_t mmaM = 16, mmaN = 8, mmaK = 16;
};

/// Every architecture tilec compiles for.
inline constexpr TargetDescription kTargets[] = {
    {"sm_80", 80, TargetFamily::Sm80, 163 * 1024},
    {"sm_86", 86, TargetFamily::Sm80, 99 * 1024},
    {"sm_89", 89, TargetFamily::Sm80, 99 * 1024},
    {"sm_90", 90, TargetFamily::Sm90, 227 * 1024},
    {"sm_90a", 90, TargetFamily::Sm90, 227 * 1024},
};

/// The description of `arch`, or null when tilec does not support it.
inline const TargetDescription *lookupTarget(llvm::StringRef arch) {
  for (const TargetDescription &target : kTargets)
    if (target.arch == arch)
      return &target;
  return nullptr;
}

} // namespace tilec

#endif // TILEC_TARGET_TARGETDESCRIPTION_H
