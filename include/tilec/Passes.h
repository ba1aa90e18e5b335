//===- Passes.h - tilec passes and pipelines -------------------------------===//
#ifndef TILEC_PASSES_H
#define TILEC_PASSES_H

#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassManager.h"

namespace tilec {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

/// On a K/V loop that tile-split-masked-loops made: "full" (no block needs
/// the mask), "partial" (every block may) or "empty". tile-pipeline chains
/// adjacent split loops; tile-count-work reports per kind.
inline constexpr llvm::StringLiteral kBlocksAttr = "tile.blocks";

/// On a kernel function: what tile-split-masked-loops made of its masks,
/// the least of any loop: "split" (blocks classified: skipped, unmasked,
/// masked) or "dense" (the mask is applied in every block that runs; blocks
/// it hides entirely may still be skipped). The launch manifest's "mask".
inline constexpr llvm::StringLiteral kMaskAttr = "tile.mask";
/// With a tile.mask other than "split": the pass's remark (what it could not
/// classify, where). The manifest's "mask_note".
inline constexpr llvm::StringLiteral kMaskNoteAttr = "tile.mask_note";

/// On the loop tile-minimize-nonmatmul keeps for rows whose running max is
/// -inf (the exact softmax, no folded-scale rewrite); later rewrites leave it
/// alone and tile-count-work counts it apart.
inline constexpr llvm::StringLiteral kSoftmaxFallbackAttr = "tile.softmax_fallback";

/// On a multiply by a row broadcast that tile-lazy-rescale made exactly 1 in
/// most rows; convert-tile-to-nvvm skips it in warps where every factor is 1.
inline constexpr llvm::StringLiteral kSkipUnitRescaleAttr = "tile.skip_unit_rescale";

/// Warps per program the lowering supports: a power of two (layouts split
/// rows over warp bits) up to 16 (512 threads; a program's registers and
/// shared memory are sized for at most that).
inline constexpr int64_t kMaxWarps = 16;

/// Fails with "<what>: num-warps must be a power of two in [1, 16], got N" at
/// `anchor` unless numWarps is one; every pass that takes the number checks
/// it where it enters, before any arithmetic with it.
mlir::LogicalResult checkNumWarps(mlir::Operation *anchor, llvm::StringRef what, int64_t numWarps);

/// Registers the named pipelines (tile-opt --pass-pipeline=... and Python
/// run the same list).
void registerTilecPipelines();

} // namespace tilec

#endif
