//===- SharedMemory.cpp - convert-tile-to-nvvm: shared-memory regions, cp.async waits and barriers ---===//
//
// Shared tiles are regions of one dynamic buffer, allocated like a stack
// (allocateRegion; lowerFor pops what its body allocated). The cp.async
// schedule: waitFor defers a tile's wait to its first read, drainRegion
// waits for a region's in-flight copies before it is refilled,
// pendingSnapshot/assumeCommittedLast/renumberPendingWriters keep the
// compile-time group count true across loops and branches (lowerFor,
// lowerIf), and barrier/barrierBeforeFill emit bar.sync only where a thread
// may see another's shared-memory access.
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

namespace tilec::nvvm {

SharedTile KernelLowering::allocateShared(RankedTensorType type) {
  int64_t rows = type.getDimSize(0), cols = type.getDimSize(1);
  int64_t elemBytes = type.getElementTypeBitWidth() / 8;
  int64_t chunksPerRow = cols * elemBytes / hw.chunkBytes;
  auto encoding = cast<SharedLayoutAttr>(type.getEncoding());
  return allocateRegion(rows, cols, elemBytes,
                        std::min<unsigned>(encoding.getSwizzle(), std::max(0, tilec::log2Exact(chunksPerRow))));
}

SharedTile KernelLowering::allocateRegion(int64_t rows, int64_t cols, int64_t elemBytes,
                                          unsigned swizzleBits) {
  SharedTile tile;
  tile.rows = rows;
  tile.cols = cols;
  tile.elemBytes = elemBytes;
  tile.swizzleBits = swizzleBits;
  tile.offset = llvm::alignTo(sharedBytes, hw.sharedAlignment);
  sharedBytes = tile.offset + tile.bytes();
  sharedPeak = std::max(sharedPeak, sharedBytes);
  return tile;
}

LogicalResult KernelLowering::checkSharedBudget(Operation *op) {
  // Nested ops are checked first, so the error lands on the innermost op
  // whose tiles pushed the stack past the limit.
  if (sharedPeak <= hw.maxSharedBytesPerBlock)
    return success();
  return op->emitError() << "the shared tiles live here take " << sharedPeak << " bytes, but "
                         << hw.arch << " allows at most " << hw.maxSharedBytesPerBlock
                         << " bytes of shared memory per block (fewer pipeline stages, smaller "
                            "blocks or no shared-memory epilogue need less)";
}

void KernelLowering::waitFor(Value tileValue) {
  SharedTile &tile = sharedTiles[tileValue];
  if (tile.pendingGroup < 0)
    return;
  if (tile.pendingGroup > completeThrough) {
    // Groups committed after this one may stay in flight.
    int64_t newer = std::max<int64_t>(0, committedGroups - tile.pendingGroup - 1);
    target.asyncWait(b, newer);
    completeThrough = tile.pendingGroup;
  }
  // Each thread waited for its own copies; the barrier shows them to all.
  if (tile.pendingGroup > visibleThrough)
    barrier();
  tile.pendingGroup = -1;
}

void KernelLowering::barrier() {
  target.barrier(b);
  visibleThrough = completeThrough;
  sharedAccessSinceBarrier = false;
}

void KernelLowering::barrierBeforeFill() {
  if (sharedAccessSinceBarrier)
    barrier();
}

SmallVector<std::pair<Value, int64_t>> KernelLowering::pendingSnapshot() {
  SmallVector<std::pair<Value, int64_t>> pending;
  for (auto &[value, tile] : sharedTiles)
    if (tile.pendingGroup >= 0)
      pending.push_back({value, tile.pendingGroup});
  return pending;
}

void KernelLowering::assumeCommittedLast(ArrayRef<std::pair<Value, int64_t>> pending) {
  for (auto [value, group] : pending)
    sharedTiles[value].pendingGroup = committedGroups - 1;
}

/// A region about to be refilled may still have a copy in flight from an
/// earlier fill nobody waited for (the prefetch of a loop's last iteration,
/// before the next loop reuses the space): that copy must land first, or it
/// could overwrite the new data.
void KernelLowering::drainRegion(const SharedTile &tile) {
  int64_t size = tile.bytes();
  int64_t latest = -1;
  SmallVector<int64_t, 2> regions = {tile.offset};
  if (tile.delta) // a ring tile: either of its two regions
    regions.push_back(tile.offset + tile.twinDistance);
  for (int64_t region : regions)
    for (const auto &[offset, writer] : lastWriter)
      if (offset < region + size && region < offset + writer.second)
        latest = std::max(latest, writer.first);
  if (latest > completeThrough) {
    assert(latest < committedGroups && "a region's writer is a committed group");
    target.asyncWait(b, std::max<int64_t>(0, committedGroups - latest - 1));
    completeThrough = latest;
    // Each thread waited for its own copies only; the refill (which follows
    // every drain) must wait for everyone's, behind a barrier.
    sharedAccessSinceBarrier = true;
  }
}

void KernelLowering::recordWriter(int64_t offset, int64_t group, int64_t bytes) {
  auto [it, inserted] = lastWriter.try_emplace(offset, group, bytes);
  if (!inserted)
    it->second = {std::max(it->second.first, group), std::max(it->second.second, bytes)};
}

void KernelLowering::renumberPendingWriters() {
  for (auto &[offset, writer] : lastWriter)
    if (writer.first > completeThrough)
      writer.first = committedGroups - 1;
}

SmallVector<Value> KernelLowering::readShared(SharedTile &tile, const LinearLayout &layout,
                                              Type elemType) {
  sharedAccessSinceBarrier = true;
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
  sharedAccessSinceBarrier = true;
  SmallVector<Value> thread = threadCoords(layout);
  for (int64_t r = 0; r < layout.numRegs(); ++r) {
    SmallVector<Value> c = elementCoords(layout, thread, r);
    Value row = c.size() == 2 ? c[0] : i32(0); // rank 1: one row
    LLVM::StoreOp::create(b, values[r], sharedElementAddress(tile, row, c.back()));
  }
}

} // namespace tilec::nvvm
