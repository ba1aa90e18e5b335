//===- SharedMemory.cpp - shared tiles: regions and element access -------===//
//
// Where shared tiles live is tile-allocate-shared's (../AllocateShared.cpp):
// regionOf reads the region it gave an op (tile.smem) as a tile of the
// geometry ../AllocateShared.h's rules give. When copies into them land and
// where barriers go is tile-insert-waits' (../InsertWaits.cpp): its
// tile.async_commit, tile.async_wait and tile.barrier are lowered one
// instruction each (ConvertTileToNVVM.cpp, lowerOp). The only barriers the
// lowering emits itself are inside ops that write and then read shared
// memory (a conversion through scratch, the smem-epilogue), which the pass
// models.
//
// test/passes/tile-insert-waits.mlir has a case per hazard;
// test/passes/lowering-hazards.mlir pins the same through the NVVM output.
//===----------------------------------------------------------------------===//
#include "Lowering.h"

namespace tilec::nvvm {

FailureOr<SharedTile> KernelLowering::regionOf(Operation *op, std::optional<smem::Geometry> g) {
  auto region = op->getAttrOfType<SharedRegionAttr>(tilec::kSmemAttrName);
  if (!region || !g)
    return op->emitError() << "this op needs a region of shared memory but has no valid "
                           << tilec::kSmemAttrName << ": run tile-allocate-shared first";
  if (region.getBytes() < g->bytes())
    return op->emitError() << tilec::kSmemAttrName << " " << region << " is smaller than the "
                           << g->bytes() << " bytes the tile takes";
  SharedTile tile;
  tile.offset = region.getOffset();
  tile.rows = g->rows;
  tile.cols = g->cols;
  tile.elemBytes = g->elemBytes;
  tile.swizzleBits = g->swizzleBits;
  return tile;
}

SmallVector<Value> KernelLowering::readShared(SharedTile &tile, const LinearLayout &layout,
                                              Type elemType) {
  SmallVector<Value> thread = threadCoords(layout);
  SmallVector<Value> out;
  for (int64_t r = 0; r < layout.numRegs(); ++r) {
    SmallVector<Value> c = elementCoords(layout, thread, r);
    Value row = c.size() == 2 ? c[0] : i32(0); // rank 1: one row
    out.push_back(LLVM::LoadOp::create(b, elemType, sharedElementAddress(tile, row, c.back())));
  }
  return out;
}

void KernelLowering::writeShared(SharedTile &tile, const LinearLayout &layout, ArrayRef<Value> values) {
  SmallVector<Value> thread = threadCoords(layout);
  for (int64_t r = 0; r < layout.numRegs(); ++r) {
    SmallVector<Value> c = elementCoords(layout, thread, r);
    Value row = c.size() == 2 ? c[0] : i32(0); // rank 1: one row
    LLVM::StoreOp::create(b, values[r], sharedElementAddress(tile, row, c.back()));
  }
}

} // namespace tilec::nvvm
