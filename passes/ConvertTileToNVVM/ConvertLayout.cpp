//===- ConvertLayout.cpp - layout conversions -----------------------------===//
//
// tile.convert_layout (register remaps, or a round trip through a shared
// scratch tile), and registerRemap, which expand_dims, broadcast and trans
// use when no data moves.
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

namespace tilec::nvvm {

/// Register tiles whose elements sit in the same threads (up to `project`)
/// only need their registers renamed.
LogicalResult KernelLowering::registerRemap(Value from, Value to,
                                            function_ref<tilec::Coord(tilec::Coord)> project,
                                            Operation *op) {
  LinearLayout in = layoutOf(from), out = layoutOf(to);
  auto projectBases = [&](const std::vector<tilec::Coord> &bases) {
    std::vector<tilec::Coord> projected;
    for (const auto &basis : bases)
      projected.push_back(project(basis));
    return projected;
  };
  if (projectBases(out.laneBases()) != in.laneBases() ||
      projectBases(out.warpBases()) != in.warpBases())
    return op->emitError() << "layouts of operand and result place elements in different "
                              "threads; tile-partition-warps should have inserted a "
                              "tile.convert_layout here";
  SmallVector<Value> &source = regs[from];
  SmallVector<Value> result;
  for (int64_t r = 0; r < out.numRegs(); ++r) {
    std::optional<int64_t> holder = in.regHolding(project(out.regCoord(r)));
    if (!holder)
      return op->emitError() << "no register of the operand holds element "
                             << "of result register " << r;
    result.push_back(source[*holder]);
  }
  regs[to] = std::move(result);
  return success();
}

LogicalResult KernelLowering::lowerConvert(ConvertLayoutOp op) {
  Value in = op.getInput(), out = op.getResult();
  Type elemType = op.getResult().getType().getElementType();
  if (isShared(out)) {
    if (isShared(in)) {
      if (isTransposedShared(in) != isTransposedShared(out))
        return op.emitError() << "moving a shared tile into its transposed placement is not "
                                 "supported (tile.trans gives the transposed view)";
      sharedTiles[out] = sharedTiles[in];
      return success();
    }
    FailureOr<SharedTile> region = regionOf(op, smem::sharedTileGeometry(op.getResult().getType(), hw));
    if (failed(region))
      return failure();
    SharedTile tile = *region;
    tile.transposed = isTransposedShared(out);
    // (The drain and barrier before, and the barrier after: tile-insert-waits.)
    // The A operand of a warp grid's dot (P, dS): pairs, few addresses.
    bool forGridDot = llvm::any_of(out.getUsers(), [](Operation *user) {
      auto dot = dyn_cast<DotOp>(user);
      return dot && dot.getWarpsN().value_or(1) > 1;
    });
    if (!forGridDot || !writeSharedFragments(tile, layoutOf(in), regs[in]))
      writeShared(tile, layoutOf(in), regs[in]);
    sharedTiles[out] = tile;
    return success();
  }
  if (isShared(in)) {
    regs[out] = readShared(sharedTiles[in], layoutOf(out), elemType);
    return success();
  }
  LinearLayout from = layoutOf(in), to = layoutOf(out);
  // Same threads hold the same elements: only the register order differs.
  if (from.laneBases() == to.laneBases() && from.warpBases() == to.warpBases())
    return registerRemap(in, out, [](tilec::Coord c) { return c; }, op);
  // General case: through an unswizzled scratch tile in shared memory, one
  // element per access, so any row width works (a rank-1 tile is one row):
  // the row vectors of kernels without dots (a softmax's sums meeting a
  // second tile's layout) are the usual client.
  auto type = cast<RankedTensorType>(out.getType());
  if (type.getRank() > 2)
    return op.emitError() << "layout conversion of a rank-" << type.getRank()
                          << " tile through shared memory is not supported";
  // Its region: tile-allocate-shared's, by smem::conversionScratch.
  FailureOr<SharedTile> region = regionOf(op, smem::conversionScratch(op));
  if (failed(region))
    return failure();
  SharedTile scratch = *region;
  // The drain and barrier before are tile-insert-waits'; this one, between
  // the writes and the reads, is the op's own (the pass models it).
  writeShared(scratch, from, regs[in]);
  target.barrier(b);
  regs[out] = readShared(scratch, to, elemType);
  return success();
}

} // namespace tilec::nvvm
