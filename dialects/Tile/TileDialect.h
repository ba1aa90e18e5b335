//===- TileDialect.h - the tile dialect ------------------------------------===//
#ifndef TILEC_DIALECTS_TILE_TILEDIALECT_H
#define TILEC_DIALECTS_TILE_TILEDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "tilec/Layout/LinearLayout.h"

#include "dialects/Tile/TileAttrNames.h"

#include "dialects/Tile/TileDialect.h.inc"
#include "dialects/Tile/TileEnums.h.inc"

#define GET_TYPEDEF_CLASSES
#include "dialects/Tile/TileTypes.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/Tile/TileAttrs.h.inc"

#define GET_OP_CLASSES
#include "dialects/Tile/TileOps.h.inc"

namespace mlir::tile {
/// Converts between the attribute and the plain-C++ layout it stores.
tilec::LinearLayout toLinearLayout(LinearLayoutAttr attr);
LinearLayoutAttr toAttr(MLIRContext *ctx, const tilec::LinearLayout &layout);

// Named in TileAttrNames.h with the other contract attributes.
using tilec::kKernelAttrName;
using tilec::kPositiveAttrName;
} // namespace mlir::tile

#endif
