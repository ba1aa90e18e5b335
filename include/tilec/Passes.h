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

/// On a multiply by a row broadcast that tile-lazy-rescale made exactly 1 in
/// most rows; convert-tile-to-nvvm skips it in warps where every factor is 1.
inline constexpr llvm::StringLiteral kSkipUnitRescaleAttr = "tile.skip_unit_rescale";

/// Registers the named pipelines (tile-opt --pass-pipeline=... and Python
/// run the same list).
void registerTilecPipelines();

} // namespace tilec

#endif
