//===- Passes.h - tilec passes and pipelines -------------------------------===//
#ifndef TILEC_PASSES_H
#define TILEC_PASSES_H

#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

#include "dialects/Tile/TileAttrNames.h"
#include "tilec/Strategy.h"

namespace tilec {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

// The attributes passes agree on are named in dialects/Tile/TileAttrNames.h.

/// Warps per program the lowering supports: a power of two (layouts split
/// rows over warp bits) up to 16 (512 threads; a program's registers and
/// shared memory are sized for at most that).
inline constexpr int64_t kMaxWarps = 16;

/// Fails with "<what>: num-warps must be a power of two in [1, 16], got N" at
/// `anchor` unless numWarps is one; every pass that takes the number checks
/// it where it enters, before any arithmetic with it.
mlir::LogicalResult checkNumWarps(mlir::Operation *anchor, llvm::StringRef what, int64_t numWarps);

/// convert-tile-to-cpu's fault record, @__tilec_fault, which the CPU runner
/// reads after a run: [0] is 0, or a pointer argument + 1 (an access outside
/// its buffer; [1] the element), or kCpuTurnFault + a counter argument + 1
/// (a tile.wait_turn whose turn no earlier program passed; [1] the turn).
inline constexpr int64_t kCpuTurnFault = int64_t(1) << 40;

/// Registers the named pipelines (tile-opt --pass-pipeline=... and Python
/// run the same list).
void registerTilecPipelines();

} // namespace tilec

#endif
