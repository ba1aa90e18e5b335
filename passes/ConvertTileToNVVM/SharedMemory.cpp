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
    if (tile.transposed)
      std::swap(c[0], c[1]);
    Value row = c.size() == 2 ? c[0] : i32(0); // rank 1: one row
    out.push_back(LLVM::LoadOp::create(b, elemType, sharedElementAddress(tile, row, c.back())));
  }
  return out;
}

/// 16-bit fragments (P and dS as mma accumulators, written for a warp
/// grid's dot to read as its A operand) go out as the smem-epilogue's first
/// half does: a register pair along a row as one 32-bit store, at a few
/// swizzled chunk bases plus immediates, computed in place (no registers
/// kept live through the loop for them). Needs a rank-2 tile whose thread
/// and register coordinate bits are disjoint (sums are ORs) and register
/// rows that keep the swizzle phase; false (nothing written) otherwise.
bool KernelLowering::writeSharedFragments(SharedTile &tile, const LinearLayout &layout,
                                          ArrayRef<Value> values) {
  if (layout.rank() != 2 || tile.elemBytes != 2 || values.empty() || tile.transposed)
    return false;
  int64_t mask = (int64_t(1) << tile.swizzleBits) - 1;
  for (unsigned d = 0; d < 2; ++d) {
    auto [threadBits, regBits] = layout.threadAndRegisterBits(d);
    if (threadBits & regBits)
      return false;
  }
  int run = !layout.regBases().empty() && layout.regBases()[0] == tilec::Coord{0, 1} ? 2 : 1;
  for (int64_t r = 0; r < layout.numRegs(); ++r)
    if (layout.regCoord(r)[0] & mask)
      return false;
  SmallVector<Value> thread = threadCoords(layout);
  std::map<ChunkBaseKey, Value> bases;
  std::map<ChunkBaseKey, Value> *outer = localChunkBases;
  localChunkBases = &bases;
  llvm::scope_exit restore([&] { localChunkBases = outer; });
  storeRegisterRuns(tile, layout, values, thread, run);
  return true;
}

void KernelLowering::storeRegisterRuns(SharedTile &tile, const LinearLayout &layout,
                                       ArrayRef<Value> values, ArrayRef<Value> thread, int run) {
  int64_t elemBytes = tile.elemBytes, chunkElems = hw.chunkBytes / elemBytes;
  Value chunkOfThread = arith::DivUIOp::create(b, thread[1], i32(chunkElems));
  Value byteInChunk = arith::MulIOp::create(b, arith::RemUIOp::create(b, thread[1], i32(chunkElems)),
                                            i32(elemBytes));
  DenseMap<Value, Value> shiftedBases;
  Type wordType = b.getIntegerType(run * elemBytes * 8);
  Type elemType = values.front().getType();
  for (int64_t r = 0; r < layout.numRegs(); r += run) {
    if (layout.regHolding(layout.regCoord(r)) != r)
      continue; // a duplicate of an earlier register
    tilec::Coord at = layout.regCoord(r);
    auto [base, offset] = sharedChunkBase(tile, thread[0], at[0], chunkOfThread, at[1] / chunkElems);
    Value &shifted = shiftedBases[base];
    if (!shifted)
      shifted = LLVM::GEPOp::create(b, ptrType(kSharedAddressSpace), b.getI8Type(), base,
                                    ValueRange{byteInChunk});
    Value word;
    if (run == 1) {
      word = LLVM::BitcastOp::create(b, wordType, values[r]);
    } else {
      Value vec = LLVM::UndefOp::create(b, VectorType::get({run}, elemType));
      for (int i = 0; i < run; ++i)
        vec = LLVM::InsertElementOp::create(b, vec, values[r + i], i32(i));
      word = LLVM::BitcastOp::create(b, wordType, vec);
    }
    Value address = LLVM::GEPOp::create(b, ptrType(kSharedAddressSpace), b.getI8Type(), shifted,
                                        ArrayRef<LLVM::GEPArg>{offset + (at[1] % chunkElems) * elemBytes});
    LLVM::StoreOp::create(b, word, address, run * elemBytes);
  }
}

void KernelLowering::writeShared(SharedTile &tile, const LinearLayout &layout, ArrayRef<Value> values) {
  SmallVector<Value> thread = threadCoords(layout);
  for (int64_t r = 0; r < layout.numRegs(); ++r) {
    SmallVector<Value> c = elementCoords(layout, thread, r);
    if (tile.transposed)
      std::swap(c[0], c[1]);
    Value row = c.size() == 2 ? c[0] : i32(0); // rank 1: one row
    LLVM::StoreOp::create(b, values[r], sharedElementAddress(tile, row, c.back()));
  }
}

} // namespace tilec::nvvm
