//===- Matchers.h - what the tile-level rewrites match --------------------===//
//
// Helpers the target-independent passes share (tile-minimize-nonmatmul,
// tile-lazy-rescale).
//
//===----------------------------------------------------------------------===//
#ifndef TILEC_PASSES_MATCHERS_H
#define TILEC_PASSES_MATCHERS_H

#include "dialects/Tile/TileDialect.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/OpDefinition.h"

namespace tilec {

/// The scalar every element of `v` equals: the operand of a `tile.splat`, or
/// the value of a splat float constant. Null otherwise.
inline mlir::OpFoldResult splatScalar(mlir::Value v) {
  if (auto splat = v.getDefiningOp<mlir::tile::SplatOp>())
    return splat.getValue();
  mlir::DenseElementsAttr dense;
  if (mlir::matchPattern(v, mlir::m_Constant(&dense)) && dense.isSplat() &&
      mlir::isa<mlir::FloatType>(dense.getElementType()))
    return dense.getSplatValue<mlir::FloatAttr>();
  return {};
}

} // namespace tilec

#endif
