//===- SharedMemory.cpp - shared regions and the cp.async schedule --------===//
//
// Where cp.async waits and barriers are placed: every decision of the
// schedule is made in this file; the op families call it (AsyncCopy:
// commitGroup; Dot and the epilogue: waitFor, drainRegion,
// barrierBeforeFill; ControlFlow: the Loop/Branch schedule around bodies).
//
// Allocation is not decided here: tile-allocate-shared (../AllocateShared.cpp)
// gave every op that needs shared memory its region (tile.smem), a loop its
// ring twins and where its body's regions start (tile.smem_body); regionOf
// reads them. Regions of a loop body or branch are reused after it, so a
// refill may meet copies still in flight into the same bytes (drainRegion).
//
// Waits. Each tile filled by cp.async is one commit group (commitGroup),
// numbered at compile time. A tile's wait is deferred to its first read
// (waitFor: cp.async.wait_group N, N = the groups committed after it, so
// K's and V's copies of one iteration overlap), hoisted in front of a loop
// for tiles filled before it (waitForLoopInvariantTiles). A region about to
// be refilled first waits for the last group that wrote it (drainRegion,
// lastWriter). The count stays true path by path: each branch of an scf.if
// starts from the state before it; after a loop or branch, tiles pending
// before it are waited for as if committed last (the body may run any
// number of times, or not at all); at the top of a loop body the previous
// iteration's copies are the newest group, written to any region the body
// fills (beginIterationSchedule). Before the kernel returns, every group.
//
// Barriers. A wait is followed by bar.sync unless one came after that
// group's completion (visibleThrough); a refill gets one only if some
// thread touched shared memory since the last (barrierBeforeFill).
//
// test/passes/lowering-hazards.mlir has a case per hazard this prevents.
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

void KernelLowering::commitGroup(SharedTile &tile) {
  target.asyncCommitGroup(b);
  tile.pendingGroup = committedGroups++;
  recordWriter(tile.offset, tile.pendingGroup, tile.bytes());
  if (tile.delta) // a ring tile: it went to one of its two regions
    recordWriter(tile.offset + tile.twinDistance, tile.pendingGroup, tile.bytes());
}

void KernelLowering::waitForAllBeforeExit() {
  // The last prefetch of a pipelined loop may still be in flight; PTX does
  // not define exiting with outstanding cp.async copies.
  if (committedGroups > 0)
    target.asyncWait(b, 0);
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

//===----------------------------------------------------------------------===//
// The schedule across loops and branches (called by lowerFor and lowerIf)
//===----------------------------------------------------------------------===//

void KernelLowering::waitForLoopInvariantTiles(scf::ForOp op) {
  // Shared tiles filled before the loop and read inside it (Q, say) are
  // waited for once, here, instead of on every iteration.
  SmallVector<Value> invariantShared;
  op.getBody()->walk([&](Operation *inner) {
    for (Value operand : inner->getOperands())
      if (isShared(operand) && !op->isAncestor(operand.getParentBlock()->getParentOp()) &&
          sharedTiles.count(operand) && sharedTiles[operand].pendingGroup >= 0 &&
          !llvm::is_contained(invariantShared, operand))
        invariantShared.push_back(operand);
  });
  for (Value tile : invariantShared)
    waitFor(tile);
}

KernelLowering::LoopSchedule KernelLowering::beginLoopSchedule(scf::ForOp op) {
  LoopSchedule schedule;
  // Without tile.smem_body every region counts as the body's (safe).
  if (auto body = op->getAttrOfType<SharedRegionAttr>(tilec::kSmemBodyAttrName))
    schedule.sharedMark = body.getOffset();
  // Waits inside the body may never run (zero trips): they prove nothing
  // after the loop, and neither does the body's count of commits.
  schedule.completeBefore = completeThrough;
  schedule.visibleBefore = visibleThrough;
  schedule.pendingBefore = pendingSnapshot();
  op.getBody()->walk([&](LoadOp load) { schedule.bodyFills |= isShared(load.getResult()); });
  return schedule;
}

void KernelLowering::beginIterationSchedule(const LoopSchedule &schedule) {
  // At the top of an iteration after the first, the previous iteration's
  // copies are the newest groups, numbered here as the last one committed
  // (committedGroups - 1): waiting for that group waits for them all. They
  // may have written any region the body fills, and none of them is known
  // complete or visible yet.
  if (schedule.bodyFills) {
    int64_t previousIteration = committedGroups - 1;
    for (auto &[offset, writer] : lastWriter)
      writer.first = std::max(writer.first, previousIteration);
    recordWriter(schedule.sharedMark, previousIteration, std::numeric_limits<int32_t>::max());
    completeThrough = std::min(completeThrough, previousIteration - 1);
    visibleThrough = std::min(visibleThrough, previousIteration - 1);
  }
  sharedAccessSinceBarrier = true; // the previous iteration's reads
}

void KernelLowering::endLoopSchedule(const LoopSchedule &schedule) {
  completeThrough = schedule.completeBefore;
  visibleThrough = schedule.visibleBefore;
  sharedAccessSinceBarrier = true;
  assumeCommittedLast(schedule.pendingBefore);
  if (schedule.bodyFills) // zero trips commit nothing: indices shift between paths
    renumberPendingWriters();
}

KernelLowering::BranchSchedule KernelLowering::beginBranchSchedule(bool hasElse) {
  // Each branch starts from the state before the if; afterwards, commits
  // are counted as on the longer branch and earlier pending tiles are waited
  // for conservatively.
  BranchSchedule schedule;
  schedule.pendingBefore = pendingSnapshot();
  schedule.committedBefore = schedule.committedAfter = committedGroups;
  schedule.writersBefore = schedule.writersAfter = lastWriter;
  schedule.visibleBefore = visibleThrough;
  schedule.accessBefore = sharedAccessSinceBarrier;
  schedule.accessAfter = hasElse ? false : schedule.accessBefore; // a missing else keeps the state
  return schedule;
}

void KernelLowering::beginPathSchedule(BranchSchedule &schedule) {
  schedule.completeBefore = completeThrough;
  for (auto [value, group] : schedule.pendingBefore)
    sharedTiles[value].pendingGroup = group;
  committedGroups = schedule.committedBefore;
  lastWriter = schedule.writersBefore; // the other branch's fills never happened here
  visibleThrough = schedule.visibleBefore;
  sharedAccessSinceBarrier = schedule.accessBefore;
}

void KernelLowering::endPathSchedule(BranchSchedule &schedule) {
  schedule.accessAfter |= sharedAccessSinceBarrier;
  completeThrough = schedule.completeBefore;
  visibleThrough = schedule.visibleBefore;
  schedule.committedAfter = std::max(schedule.committedAfter, committedGroups);
  for (auto &[offset, writer] : lastWriter)
    if (writer.first >= schedule.committedBefore) {
      auto [it, inserted] = schedule.writersAfter.try_emplace(offset, writer);
      if (!inserted) // merged: neither branch's extent is lost
        it->second = {std::max(it->second.first, writer.first),
                      std::max(it->second.second, writer.second)};
    }
}

void KernelLowering::endBranchSchedule(const BranchSchedule &schedule) {
  committedGroups = schedule.committedAfter;
  sharedAccessSinceBarrier = schedule.accessAfter;
  assumeCommittedLast(schedule.pendingBefore);
  // Fills made in either branch count as the latest commit: the two
  // branches numbered their groups from the same start.
  lastWriter = schedule.writersAfter;
  if (committedGroups != schedule.committedBefore) // a path with fewer commits shifts
    renumberPendingWriters();
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
