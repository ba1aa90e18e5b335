//===- InsertWaits.cpp - tile-insert-waits ---------------------------------===//
//
// Where cp.async commits, waits and barriers go: every decision of the
// schedule is made in this file, as tile.async_commit, tile.async_wait and
// tile.barrier ops in the tile IR (dialects/Tile/TileOps.td), which
// convert-tile-to-nvvm translates one to one. test/passes/tile-insert-waits.mlir
// has a case per hazard.
//
// The walk visits the kernel in program order (the order the lowering
// emits code in), keeping per shared tile the commit group that fills it,
// and per region (tile-allocate-shared's offsets) the last group that wrote
// it.
//
// Waits (RAW). Each tile.load into a shared tile is one commit group
// (commitGroup), numbered at compile time. A tile's wait is deferred to its
// first read (waitFor: pending = the groups committed after it, so K's and
// V's copies of one iteration overlap), hoisted in front of a loop for tiles
// filled before it (waitForLoopInvariantTiles).
//
// Drains (WAW/WAR with copies in flight). A region about to be written
// again first waits for the last group that wrote any of its bytes
// (drainRegion, lastWriter): the prefetch of a loop's last iteration may
// still be landing when the next loop, or the epilogue, reuses the space.
//
// Across control flow. The count stays true path by path: each branch of an
// scf.if starts from the state before it; after a loop or branch, tiles
// pending before it are waited for as if committed last (the body may run
// any number of times, or not at all); at the top of a loop body the
// previous iteration's copies are the newest group, written to any region
// from the body's start (beginIterationSchedule). Before the kernel
// returns, every group.
//
// Barriers. A wait is followed by a barrier unless one came after that
// group's completion (visibleThrough); a write to shared memory gets one
// before it only if some thread touched shared memory since the last
// (barrierBeforeFill: WAR between threads). A conversion into a shared tile
// is followed by one (its readers are other threads). Ops that write and
// read shared memory within themselves (a conversion through scratch, the
// smem-epilogue) synchronize inside their lowering; the walk only models
// that barrier.
//
// The schedule is the one the lowering made while it emitted code, moved
// here unchanged (the PTX of every kernel is byte-identical). Known limit,
// left as it is by default so as not to change code: a ring loop waits with
// pending = 0 at the top of the body (the previous iteration's copies are
// counted as one group, and the refills drain every region), so one K/V
// block is in flight through the wait.
//
// Early refill (option early-refill, opt-in per kernel; the decode kernels'
// EARLY_REFILL, off by default: measured no faster). In a ring loop whose only copies are its rings' refills, with
// every ring tile read unconditionally in the body, the refill at the top
// of iteration j goes to the region that held tile j - 1: iteration j - 1
// waited for that tile (at its read) and read it, so the refill needs no
// drain, only a barrier (WAR between threads). The refills of an iteration
// are one group (one commit after the last), and the current tiles are
// waited for at their first read with that group in flight (pending = 1):
// blocks j and j + 1 are in flight through the wait and through the next
// block's address math. In front of the loop, the twin regions are
// drained (their writers before the loop); a loop that continues an early
// loop's ring needs no drain (the region not holding the carried tile has
// no copy in flight when such a loop exits).
//
//===----------------------------------------------------------------------===//
#include "AllocateShared.h"

#include "tilec/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"

#include <limits>
#include <map>

namespace tilec {
#define GEN_PASS_DEF_TILEINSERTWAITS
#include "passes/Passes.h.inc"
} // namespace tilec

using namespace mlir;
using namespace mlir::tile;

namespace {

bool isShared(Value v) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  return type && isa_and_nonnull<SharedLayoutAttr>(type.getEncoding());
}

/// A shared tile as the schedule sees it: its region(s) and the group that
/// fills it.
struct Tile {
  int64_t offset = 0, bytes = 0;
  /// A tile of a two-region ring: in the region at `offset` or its twin.
  bool twinned = false;
  int64_t twinDistance = 0;
  /// A loop's result whose tile was a ring's (a later loop continues it).
  bool ringResult = false;
  /// An early-refill loop's refill (its region needs no drain), or that
  /// loop's result (the ring's other region has no copy in flight).
  bool earlyRefill = false;
  /// Index of the cp.async group that fills it; -1 once waited for.
  int64_t pendingGroup = -1;
};

/// A loop-carried shared tile (AllocateShared.h's classification).
using Carried = tilec::smem::CarriedTile;

class Schedule {
public:
  Schedule(MLIRContext *ctx, bool earlyRefill, bool regionBarriers)
      : b(ctx), earlyRefillOption(earlyRefill), regionBarriersOption(regionBarriers) {}

  void run(func::FuncOp func) {
    SmallVector<Operation *> ops = llvm::map_to_vector(func.getBody().front(), [](Operation &op) { return &op; });
    for (Operation *op : ops)
      visit(op);
  }

private:
  // --- emitting -------------------------------------------------------------
  void wait(int64_t pending) { AsyncWaitOp::create(b, loc, pending); }
  void barrier() {
    BarrierOp::create(b, loc);
    modelBarrier();
  }
  /// bar.sync (emitted here or inside an op's lowering): copies waited for
  /// so far are now visible to every thread.
  void modelBarrier() {
    visibleThrough = completeThrough;
    sharedAccessSinceBarrier = false;
    unknownAccessSinceBarrier = false;
    accessedSinceBarrier.clear();
  }

  /// Some thread read or wrote shared memory, where is not modelled.
  void noteAccess() {
    sharedAccessSinceBarrier = true;
    unknownAccessSinceBarrier = true;
  }
  /// Some thread read or wrote shared tile `value` (either region of a
  /// ring's); unknown if it is not a tile of the walk.
  void noteAccess(Value value) {
    auto it = tiles.find(value);
    if (it == tiles.end())
      return noteAccess();
    noteAccess(it->second);
  }
  void noteAccess(const Tile &tile) {
    sharedAccessSinceBarrier = true;
    accessedSinceBarrier.push_back({tile.offset, tile.bytes});
    if (tile.twinned)
      accessedSinceBarrier.push_back({tile.offset + tile.twinDistance, tile.bytes});
  }
  /// region-barriers: whether an access since the last barrier may touch
  /// a byte of `tile` (either region of a ring's).
  bool touchedSinceBarrier(const Tile &tile) const {
    if (unknownAccessSinceBarrier)
      return true;
    SmallVector<int64_t, 2> regions = {tile.offset};
    if (tile.twinned)
      regions.push_back(tile.offset + tile.twinDistance);
    for (int64_t region : regions)
      for (auto [offset, bytes] : accessedSinceBarrier)
        if (offset < region + tile.bytes && region < offset + bytes)
          return true;
    return false;
  }

  // --- the schedule -----------------------------------------------------------
  int64_t newestGroup() const { return committedGroups - 1; }

  void waitFor(Value value) {
    auto it = tiles.find(value);
    if (it == tiles.end())
      return;
    Tile &tile = it->second;
    if (tile.pendingGroup < 0)
      return;
    if (tile.pendingGroup > completeThrough) {
      // Groups committed after this one may stay in flight.
      wait(std::max<int64_t>(0, committedGroups - tile.pendingGroup - 1));
      completeThrough = tile.pendingGroup;
    }
    // Each thread waited for its own copies; the barrier shows them to all.
    if (tile.pendingGroup > visibleThrough)
      barrier();
    tile.pendingGroup = -1;
  }

  void commitGroup(Tile &tile) {
    tile.pendingGroup = committedGroups++;
    recordWriter(tile.offset, tile.pendingGroup, tile.bytes);
    if (tile.twinned) // a ring tile: it went to one of its two regions
      recordWriter(tile.offset + tile.twinDistance, tile.pendingGroup, tile.bytes);
  }

  /// The barrier before `tile` is written (WAR between threads): needed if
  /// some thread touched shared memory since the last one -- with
  /// region-barriers, only if it may have touched this tile's bytes.
  void barrierBeforeFill(const Tile &tile) {
    if (sharedAccessSinceBarrier && (!regionBarriersOption || touchedSinceBarrier(tile)))
      barrier();
  }

  /// A region about to be written may still have a copy in flight from an
  /// earlier fill nobody waited for: that copy must land first, or it could
  /// overwrite the new data.
  void drainRegion(const Tile &tile) {
    int64_t latest = -1;
    SmallVector<int64_t, 2> regions = {tile.offset};
    if (tile.twinned) // either of its two regions
      regions.push_back(tile.offset + tile.twinDistance);
    for (int64_t region : regions)
      for (const auto &[offset, writer] : lastWriter)
        if (offset < region + tile.bytes && region < offset + writer.second)
          latest = std::max(latest, writer.first);
    if (latest > completeThrough) {
      assert(latest < committedGroups && "a region's writer is a committed group");
      wait(std::max<int64_t>(0, committedGroups - latest - 1));
      completeThrough = latest;
      // Each thread waited for its own copies only; the write (which
      // follows every drain) must wait for everyone's, behind a barrier.
      noteAccess();
    }
  }

  /// The fill of a region: drain it, then the barrier a write needs.
  void beforeWrite(const Tile &tile) {
    drainRegion(tile);
    barrierBeforeFill(tile);
  }

  SmallVector<std::pair<Value, int64_t>> pendingSnapshot() {
    SmallVector<std::pair<Value, int64_t>> pending;
    for (auto &[value, tile] : tiles)
      if (tile.pendingGroup >= 0)
        pending.push_back({value, tile.pendingGroup});
    return pending;
  }

  /// After a loop or branch (which may run any number of times, or not at
  /// all), the tiles that were pending before it are waited for as if
  /// committed last: a later wait covers every group committed so far.
  void assumeCommittedLast(ArrayRef<std::pair<Value, int64_t>> pending) {
    for (auto [value, group] : pending)
      tiles[value].pendingGroup = committedGroups - 1;
  }

  /// lastWriter[offset] = (group, bytes), merged with what is there (the
  /// later group, the larger extent) so no coverage is lost.
  void recordWriter(int64_t offset, int64_t group, int64_t bytes) {
    auto [it, inserted] = lastWriter.try_emplace(offset, group, bytes);
    if (!inserted)
      it->second = {std::max(it->second.first, group), std::max(it->second.second, bytes)};
  }

  /// After a loop or branch whose paths commit different numbers of groups,
  /// a compile-time group index no longer names one group on every path:
  /// regions whose copies are not known complete count as written by the
  /// newest group (a later drain then waits for everything).
  void renumberPendingWriters() {
    for (auto &[offset, writer] : lastWriter)
      if (writer.first > completeThrough)
        writer.first = committedGroups - 1;
  }

  // --- ops --------------------------------------------------------------------
  std::optional<Tile> regionTile(Operation *op) {
    auto region = op->getAttrOfType<SharedRegionAttr>(tilec::kSmemAttrName);
    if (!region)
      return std::nullopt; // the lowering refuses the op
    Tile tile;
    tile.offset = region.getOffset();
    tile.bytes = region.getBytes();
    return tile;
  }

  void visit(Operation *op) {
    b.setInsertionPoint(op);
    loc = op->getLoc();
    if (auto load = dyn_cast<LoadOp>(op)) {
      if (!isShared(load.getResult()))
        return;
      auto reused = reuseRegion.find(load.getResult());
      std::optional<Tile> tile = reused != reuseRegion.end() ? reused->second : regionTile(op);
      if (!tile)
        return;
      if (tile->earlyRefill) {
        // The region held the tile of two iterations back, waited for and
        // read in the previous iteration: everyone must be done reading it.
        barrierBeforeFill(*tile);
        earlyRefills.push_back(load.getResult());
        tiles[load.getResult()] = *tile;
        if (load != lastEarlyRefill)
          return;
        // One group for the iteration's refills.
        b.setInsertionPointAfter(op);
        AsyncCommitOp::create(b, loc);
        int64_t group = committedGroups++;
        for (Value refill : earlyRefills) {
          Tile &filled = tiles[refill];
          filled.pendingGroup = group;
          recordWriter(filled.offset, group, filled.bytes);
          recordWriter(filled.offset + filled.twinDistance, group, filled.bytes);
        }
        earlyRefills.clear();
        return;
      }
      // Earlier copies into the region must have landed and everyone must
      // be done reading its previous contents.
      beforeWrite(*tile);
      b.setInsertionPointAfter(op);
      AsyncCommitOp::create(b, loc);
      commitGroup(*tile);
      tiles[load.getResult()] = *tile;
      return;
    }
    if (auto dot = dyn_cast<DotOp>(op)) {
      if (isShared(dot.getA()))
        waitFor(dot.getA());
      waitFor(dot.getB());
      // ldmatrix
      if (isShared(dot.getA()))
        noteAccess(dot.getA());
      if (isShared(dot.getB()))
        noteAccess(dot.getB());
      else
        noteAccess();
      return;
    }
    if (auto convert = dyn_cast<ConvertLayoutOp>(op)) {
      Value in = convert.getInput(), out = convert.getResult();
      if (isShared(out) && isShared(in)) {
        if (auto it = tiles.find(in); it != tiles.end())
          tiles[out] = it->second;
      } else if (isShared(out)) {
        std::optional<Tile> tile = regionTile(op);
        if (!tile)
          return;
        beforeWrite(*tile);
        noteAccess(*tile); // the writes
        // Other threads read what each wrote.
        b.setInsertionPointAfter(op);
        barrier();
        tiles[out] = *tile;
      } else if (isShared(in)) {
        waitFor(in);
        noteAccess(in);
      } else if (std::optional<Tile> scratch = regionTile(op)) {
        // Through scratch: write, bar.sync (in the op's lowering), read.
        beforeWrite(*scratch);
        modelBarrier();
        noteAccess(*scratch);
      }
      return;
    }
    if (auto trans = dyn_cast<TransOp>(op)) {
      // A transposed view of a shared tile: the same region and group.
      if (isShared(trans.getInput()) && isShared(trans.getResult()))
        if (auto it = tiles.find(trans.getInput()); it != tiles.end())
          tiles[trans.getResult()] = it->second;
      return;
    }
    if (auto store = dyn_cast<StoreOp>(op)) {
      // The smem-epilogue: write, bar.sync (in the op's lowering), read.
      if (std::optional<Tile> staging = regionTile(op)) {
        beforeWrite(*staging);
        modelBarrier();
        noteAccess(*staging);
      }
      return;
    }
    if (auto loop = dyn_cast<scf::ForOp>(op))
      return visitFor(loop);
    if (auto branch = dyn_cast<scf::IfOp>(op))
      return visitIf(branch);
    if (isa<func::ReturnOp>(op)) {
      // The last prefetch of a pipelined loop may still be in flight; PTX
      // does not define exiting with outstanding cp.async copies.
      if (committedGroups > 0)
        wait(0);
      return;
    }
  }

  void visitBody(Block &block) {
    SmallVector<Operation *> ops;
    for (Operation &op : block.without_terminator())
      ops.push_back(&op);
    for (Operation *op : ops)
      visit(op);
  }

  /// Shared tiles filled before the loop and read inside it (Q, say) are
  /// waited for once, in front of it, instead of on every iteration.
  void waitForLoopInvariantTiles(scf::ForOp op) {
    SmallVector<Value> invariantShared;
    op.getBody()->walk([&](Operation *inner) {
      for (Value operand : inner->getOperands())
        if (isShared(operand) && !op->isAncestor(operand.getParentBlock()->getParentOp()) &&
            tiles.count(operand) && tiles[operand].pendingGroup >= 0 &&
            !llvm::is_contained(invariantShared, operand))
          invariantShared.push_back(operand);
    });
    b.setInsertionPoint(op);
    loc = op.getLoc();
    for (Value tile : invariantShared)
      waitFor(tile);
  }

  void visitFor(scf::ForOp op) {
    // Which carried shared tiles are refilled in place and which alternate
    // between two regions (the same rule as tile-allocate-shared's and the
    // lowering's: smem::needsTwin; a loop continuing another's ring keeps
    // its twin).
    auto twins = op->getAttrOfType<ArrayAttr>(tilec::kSmemTwinsAttrName);
    unsigned nextTwin = 0;
    SmallVector<Carried> carried;
    for (const Carried &c : tilec::smem::carriedTiles(op)) {
      Value init = op.getInitArgs()[c.index];
      if (!c.reload || !tiles.count(init))
        continue;
      Tile &first = tiles[init];
      if (c.ring && !first.ringResult) {
        if (first.twinned || !twins || nextTwin >= twins.size())
          continue; // the lowering refuses it
        first.twinDistance = cast<SharedRegionAttr>(twins[nextTwin++]).getOffset() - first.offset;
      }
      carried.push_back(c);
    }
    waitForLoopInvariantTiles(op);
    bool early = earlyRefillOption && earlyRefillApplies(op, carried);
    if (early) {
      // The first iteration's refills go to the twin regions: what was
      // written there before the loop lands first. A loop continuing an
      // early loop's ring finds the other region free.
      for (Carried &c : carried) {
        Tile &first = tiles[op.getInitArgs()[c.index]];
        if (first.ringResult && first.earlyRefill)
          continue;
        Tile twin = first;
        if (first.ringResult) {
          twin.twinned = true; // either region: not known which is free
        } else {
          twin.offset = first.offset + first.twinDistance;
          twin.twinned = false;
        }
        drainRegion(twin);
      }
    }
    LoadOp outerEarlyRefill = lastEarlyRefill;
    lastEarlyRefill = LoadOp();
    if (early)
      for (Carried &c : carried)
        if (!lastEarlyRefill || lastEarlyRefill->isBeforeInBlock(c.reload))
          lastEarlyRefill = c.reload;

    // The loop's schedule: waits inside the body may never run (zero
    // trips), so they prove nothing after the loop, and neither does the
    // body's count of commits.
    int64_t bodyStart = 0; // without tile.smem_body every region is the body's
    if (auto body = op->getAttrOfType<SharedRegionAttr>(tilec::kSmemBodyAttrName))
      bodyStart = body.getOffset();
    int64_t completeBefore = completeThrough, visibleBefore = visibleThrough;
    SmallVector<std::pair<Value, int64_t>> pendingBefore = pendingSnapshot();
    bool bodyFills = false;
    op.getBody()->walk([&](LoadOp load) { bodyFills |= isShared(load.getResult()); });

    // At the top of an iteration after the first, the previous iteration's
    // copies are the newest groups, numbered here as the last one committed
    // (committedGroups - 1): waiting for that group waits for them all.
    // They may have written any region the body fills, and none of them is
    // known complete or visible yet.
    if (bodyFills) {
      int64_t previousIteration = committedGroups - 1;
      for (auto &[offset, writer] : lastWriter)
        writer.first = std::max(writer.first, previousIteration);
      recordWriter(bodyStart, previousIteration, std::numeric_limits<int32_t>::max());
      completeThrough = std::min(completeThrough, previousIteration - 1);
      visibleThrough = std::min(visibleThrough, previousIteration - 1);
    }
    noteAccess(); // the previous iteration's reads
    for (Carried &c : carried) {
      // Its copy was committed before the body starts (before the loop, or
      // in the previous iteration).
      Tile tile = tiles[op.getInitArgs()[c.index]];
      tile.pendingGroup = newestGroup();
      if (c.ring)
        tile.twinned = true;
      tile.earlyRefill = early;
      tiles[op.getRegionIterArgs()[c.index]] = tile;
      reuseRegion[c.reload.getResult()] = tile;
    }
    visitBody(*op.getBody());
    lastEarlyRefill = outerEarlyRefill;

    completeThrough = completeBefore;
    visibleThrough = visibleBefore;
    noteAccess();
    assumeCommittedLast(pendingBefore);
    if (bodyFills) // zero trips commit nothing: indices shift between paths
      renumberPendingWriters();
    for (Carried &c : carried) {
      Tile after = tiles[c.reload.getResult()];
      if (c.ring)
        after.ringResult = after.twinned = true;
      // Uses after the loop wait for everything committed before they run.
      after.pendingGroup = newestGroup();
      tiles[op.getResult(c.index)] = after;
    }
  }

  /// Whether the loop may refill its rings before it waits for its current
  /// tiles (early-refill): every carried tile is a ring's, the rings'
  /// refills are the body's only copies and sit at its top level, and each
  /// ring tile is read (so waited for) by an op at the body's top level, so
  /// every iteration waits for the tiles it was handed.
  bool earlyRefillApplies(scf::ForOp op, ArrayRef<Carried> carried) {
    if (carried.empty() || llvm::any_of(carried, [](const Carried &c) { return !c.ring; }))
      return false;
    Block *body = op.getBody();
    bool onlyRefills = true;
    body->walk([&](LoadOp load) {
      if (isShared(load.getResult()) &&
          llvm::none_of(carried, [&](const Carried &c) { return c.reload == load; }))
        onlyRefills = false;
    });
    if (!onlyRefills)
      return false;
    return llvm::all_of(carried, [&](const Carried &c) {
      return llvm::any_of(op.getRegionIterArgs()[c.index].getUsers(), [&](Operation *user) {
        if (user->getBlock() != body)
          return false;
        if (auto convert = dyn_cast<ConvertLayoutOp>(user))
          return !isShared(convert.getResult());
        return isa<DotOp>(user);
      });
    });
  }

  void visitIf(scf::IfOp op) {
    // Each branch starts from the state before the if; afterwards, commits
    // are counted as on the longer branch, fills of either branch as the
    // newest group, and earlier pending tiles are waited for conservatively.
    bool hasElse = !op.getElseRegion().empty();
    SmallVector<std::pair<Value, int64_t>> pendingBefore = pendingSnapshot();
    int64_t committedBefore = committedGroups, committedAfter = committedGroups;
    std::map<int64_t, std::pair<int64_t, int64_t>> writersBefore = lastWriter, writersAfter = lastWriter;
    int64_t visibleBefore = visibleThrough;
    bool accessBefore = sharedAccessSinceBarrier;
    bool accessAfter = hasElse ? false : accessBefore; // a missing else keeps the state
    bool unknownBefore = unknownAccessSinceBarrier;
    bool unknownAfter = hasElse ? false : unknownBefore;
    SmallVector<std::pair<int64_t, int64_t>> accessedBefore = accessedSinceBarrier, accessedAfter;
    if (!hasElse)
      accessedAfter = accessedBefore;
    for (mlir::Region *region : {&op.getThenRegion(), &op.getElseRegion()}) {
      if (region->empty())
        continue;
      int64_t completeBefore = completeThrough;
      for (auto [value, group] : pendingBefore)
        tiles[value].pendingGroup = group;
      committedGroups = committedBefore;
      lastWriter = writersBefore; // the other branch's fills never happened here
      visibleThrough = visibleBefore;
      sharedAccessSinceBarrier = accessBefore;
      unknownAccessSinceBarrier = unknownBefore;
      accessedSinceBarrier = accessedBefore;

      visitBody(region->front());

      accessAfter |= sharedAccessSinceBarrier;
      unknownAfter |= unknownAccessSinceBarrier;
      llvm::append_range(accessedAfter, accessedSinceBarrier);
      completeThrough = completeBefore;
      visibleThrough = visibleBefore;
      committedAfter = std::max(committedAfter, committedGroups);
      for (auto &[offset, writer] : lastWriter)
        if (writer.first >= committedBefore) {
          auto [it, inserted] = writersAfter.try_emplace(offset, writer);
          if (!inserted) // merged: neither branch's extent is lost
            it->second = {std::max(it->second.first, writer.first),
                          std::max(it->second.second, writer.second)};
        }
    }
    committedGroups = committedAfter;
    sharedAccessSinceBarrier = accessAfter;
    unknownAccessSinceBarrier = unknownAfter;
    accessedSinceBarrier = std::move(accessedAfter);
    assumeCommittedLast(pendingBefore);
    // Fills made in either branch count as the latest commit: the two
    // branches numbered their groups from the same start.
    lastWriter = writersAfter;
    if (committedGroups != committedBefore) // a path with fewer commits shifts
      renumberPendingWriters();
  }

  OpBuilder b;
  Location loc = UnknownLoc::get(b.getContext());
  DenseMap<Value, Tile> tiles;       // shared tiles
  DenseMap<Value, Tile> reuseRegion; // loads refilling a loop-carried tile
  bool earlyRefillOption;
  bool regionBarriersOption;
  /// The early-refill loop being walked: its last refill (the commit goes
  /// after it) and the refills seen so far in this iteration.
  LoadOp lastEarlyRefill;
  SmallVector<Value> earlyRefills;
  int64_t committedGroups = 0;
  /// Highest cp.async group known complete at this point of the walk.
  int64_t completeThrough = -1;
  /// Highest group known complete *and* followed by a barrier: its data is
  /// visible to every thread without another bar.sync.
  int64_t visibleThrough = -1;
  /// Whether some thread may have read or written shared memory since the
  /// last barrier (a write must then wait for everyone first).
  bool sharedAccessSinceBarrier = false; // nothing before the kernel starts
  /// region-barriers: the shared bytes (offset, bytes) touched since the
  /// last barrier, and whether some access's place is not known (then any).
  SmallVector<std::pair<int64_t, int64_t>> accessedSinceBarrier;
  bool unknownAccessSinceBarrier = false;
  /// Per region offset: (last group that filled it, region bytes).
  std::map<int64_t, std::pair<int64_t, int64_t>> lastWriter;
};

struct TileInsertWaitsPass final : tilec::impl::TileInsertWaitsBase<TileInsertWaitsPass> {
  using TileInsertWaitsBase::TileInsertWaitsBase;

  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (!func->hasAttr(tilec::kKernelAttrName) || func.getBody().empty())
        continue;
      // A kernel that states its schedule already (written by hand, say a
      // deeper one, or this pass ran) is left as it is. Its commits and
      // waits say so; a barrier alone does not (tl.barrier orders a
      // program's global stores before its loads, the schedule still to do).
      bool scheduled = func.walk([](Operation *op) {
                             return isa<AsyncCommitOp, AsyncWaitOp>(op) ? WalkResult::interrupt()
                                                                        : WalkResult::advance();
                           }).wasInterrupted();
      if (!scheduled)
        Schedule(&getContext(), earlyRefill, regionBarriers).run(func);
    }
  }
};

} // namespace
