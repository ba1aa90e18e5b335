//===- ControlFlow.cpp - scf.for and scf.if -------------------------------===//
//
// Loops and branches carry register tiles as flattened value lists. lowerFor
// also decides how a loop-carried shared tile is refilled (in place, or a
// two-region ring with a loop-carried parity: the twin is tile-allocate-
// shared's), chains split loops' rings, carries ring addresses
// (carryRingShifts). The waits across loops and branches are
// tile-insert-waits' (../InsertWaits.cpp).
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

namespace tilec::nvvm {

SmallVector<Value> KernelLowering::flatten(ValueRange oldValues) {
  SmallVector<Value> out;
  for (Value v : oldValues) {
    if (isShared(v))
      continue; // lives in its shared-memory region, not in SSA values
    if (isa<RankedTensorType>(v.getType()))
      llvm::append_range(out, regs[v]);
    else
      out.push_back(scalar(v));
  }
  return out;
}

void KernelLowering::unflatten(ValueRange oldValues, ValueRange newValues) {
  size_t next = 0;
  for (Value v : oldValues) {
    if (isShared(v))
      continue;
    if (auto type = dyn_cast<RankedTensorType>(v.getType())) {
      int64_t count = layoutOf(v).numRegs();
      regs[v] = SmallVector<Value>(newValues.begin() + next, newValues.begin() + next + count);
      next += count;
    } else {
      mapping.map(v, newValues[next++]);
    }
  }
}

LogicalResult KernelLowering::lowerFor(scf::ForOp op) {
  // A loop-carried shared tile (a prefetched K/V block) never flows through
  // the loop's SSA values: the load producing the next iteration's value
  // writes into the region the loop assigned it. Refilled in place when the
  // reload comes after the last read (tile-pipeline stages=1); otherwise the
  // tile gets a twin region and iterations alternate between the two
  // (stages=2), the parity carried in one i32.
  if (llvm::any_of(op.getInitArgs(), [](Value init) { return isa<ViewType>(init.getType()); }))
    return op.emitError() << "loop-carried views are not supported";
  using Carried = smem::CarriedTile;
  SmallVector<Carried> carried = smem::carriedTiles(op);
  auto twins = op->getAttrOfType<ArrayAttr>(tilec::kSmemTwinsAttrName);
  unsigned nextTwin = 0;
  for (const Carried &c : carried) {
    Value init = op.getInitArgs()[c.index];
    if (!c.reload)
      return op.emitError() << "a loop-carried shared tile must be reloaded by a tile.load in "
                               "the loop body";
    if (c.ring && !sharedTiles[init].parity) {
      // The twin region lives as long as the loop.
      SharedTile &first = sharedTiles[init];
      if (first.delta)
        return op.emitError() << "a ring tile from a branch cannot start a ring";
      if (!twins || nextTwin >= twins.size())
        return op.emitError() << "this loop starts a prefetch ring but has no "
                              << tilec::kSmemTwinsAttrName << " for it: run tile-allocate-shared first";
      auto twin = cast<SharedRegionAttr>(twins[nextTwin++]);
      first.twinDistance = twin.getOffset() - first.offset;
    }
  }
  bool hasRing = llvm::any_of(carried, [](const Carried &c) { return c.ring; });
  // A loop that continues another's rings (tile-pipeline chains the loops
  // tile-split-masked-loops makes) starts from that loop's final parity, in
  // the same regions; its rings must all come from there.
  Value parityInit;
  bool firstRing = true;
  for (const Carried &c : carried) {
    if (!c.ring)
      continue;
    Value from = sharedTiles[op.getInitArgs()[c.index]].parity;
    if (!firstRing && from != parityInit)
      return op.emitError() << "the rings of a loop must all start fresh or all continue the "
                               "same earlier loop";
    parityInit = from;
    firstRing = false;
  }
  SmallVector<Value> inits = flatten(op.getInitArgs());
  if (hasRing) // parity: which region of each ring holds the carried tile
    inits.push_back(parityInit ? parityInit : i32(0));
  auto newFor = scf::ForOp::create(b, scalar(op.getLowerBound()), scalar(op.getUpperBound()),
                                   scalar(op.getStep()), inits);
  mapping.map(op.getInductionVar(), newFor.getInductionVar());
  unflatten(op.getRegionIterArgs(), newFor.getRegionIterArgs());
  // carry-ring-addresses (on): carry the ring's ldmatrix addresses
  // (carryRingShifts; one per tile, the other swizzle phases XOR-derived in
  // sharedChunkBase) where an accumulator takes 128 or more registers per
  // thread (O at head_dim 128 over 4 warps), or the loop carries that many in
  // register tiles together (the backward's dK and dV, 64 + 64 at d128 over
  // 8 warps, whose Q/dO ring bases ptxas had spilled). It removes the last
  // local-memory loads from the d128 hot loops; at head_dim 64 it only added
  // spills outside the loop.
  // xor-ring-phases=auto (the default) picks the phases by which of the
  // two made the loop short (XorRingPhases::Auto).
  bool shortBefore = loopShortOfRegisters;
  XorRingPhases phasesBefore = loopXorPhases;
  llvm::scope_exit restoreShort([&] {
    loopShortOfRegisters = shortBefore;
    loopXorPhases = phasesBefore;
  });
  if (carryRingAddresses) {
    bool accumulatorShort = false;
    op.getBody()->walk([&](DotOp dot) {
      accumulatorShort |= dot.getAcc().getType().getNumElements() / (32 * numWarps) >= 128;
    });
    int64_t carriedRegs = 0; // 32-bit registers per thread: f16/bf16 elements pack two
    for (Value init : op.getInitArgs())
      if (auto type = dyn_cast<RankedTensorType>(init.getType()); type && !isShared(init)) {
        int64_t elements = layoutOf(init).numRegs(); // per thread
        unsigned bits = type.getElementTypeBitWidth();
        carriedRegs += bits == 16 ? (elements + 1) / 2 : elements * std::max(1u, bits / 32);
      }
    if (accumulatorShort || carriedRegs >= 128) {
      loopShortOfRegisters = true;
      loopXorPhases = xorRingPhases != XorRingPhases::Auto ? xorRingPhases
                      : accumulatorShort                   ? XorRingPhases::Trans
                                                           : XorRingPhases::All;
    }
  }
  {
    OpBuilder::InsertionGuard guard(b);
    Block *body = newFor.getBody();
    if (!body->empty())
      body->getTerminator()->erase();
    b.setInsertionPointToEnd(body);

    Value parity = hasRing ? body->getArguments().back() : Value();
    for (Carried &c : carried) {
      Value init = op.getInitArgs()[c.index];
      SharedTile tile = sharedTiles[init];
      SharedTile fill = tile;
      if (c.ring) {
        Value twin = i32(tile.twinDistance);
        tile.delta = arith::MulIOp::create(b, parity, twin);
        fill.delta = arith::SubIOp::create(b, twin, tile.delta);
      }
      sharedTiles[op.getRegionIterArgs()[c.index]] = tile;
      reuseRegion[c.reload.getResult()] = fill;
    }
    for (Operation &inner : op.getBody()->without_terminator())
      if (failed(lowerOp(&inner)))
        return failure();
    SmallVector<Value> yielded = flatten(op.getBody()->getTerminator()->getOperands());
    if (hasRing)
      yielded.push_back(arith::XOrIOp::create(b, parity, i32(1)));
    scf::YieldOp::create(b, yielded);
  }
  int64_t loopResults = newFor.getNumResults(); // before carried bases are added
  if (hasRing)
    carryRingShifts(newFor, inits.back());
  unflatten(op.getResults(), newFor.getResults().take_front(loopResults - (hasRing ? 1 : 0)));

  for (Carried &c : carried) {
    SharedTile after = sharedTiles[c.reload.getResult()];
    if (c.ring) { // the last region written: parity after the loop
      after.parity = newFor.getResult(loopResults - 1);
      after.delta = arith::MulIOp::create(b, after.parity, i32(after.twinDistance));
    }
    sharedTiles[op.getResult(c.index)] = after;
  }
  return success();
}

/// A ring tile's ldmatrix and copy addresses are base + delta, delta =
/// parity * twin (or twin - that, for the region being refilled), the bases
/// loop-invariant. Kept as they are, each base is live through the loop and
/// its shifted copy through the iteration: two registers per address. Here
/// each shifted address becomes a loop-carried value instead, started at
/// base + delta(parity on entry) and advanced by delta(next parity) -
/// delta(parity) at the back edge, so the base dies before the loop (at
/// head_dim 128: 8 registers fewer for K and V, which ptxas had spilled).
/// With sharedChunkBase's XOR derivation only one address per tile is left
/// to carry (carrying all eight measured 2-5% slower: run 7).
void KernelLowering::carryRingShifts(scf::ForOp &loop, Value parityInit) {
  Block *body = loop.getBody();
  Value parity = body->getArguments().back();
  // delta as a function of the parity: p * twin, or twin - p * twin.
  auto rebuild = [&](OpBuilder &at, Value delta, Value p) -> Value {
    auto constant = [&](Value v) -> std::optional<int64_t> {
      APInt value;
      if (matchPattern(v, m_ConstantInt(&value)))
        return value.getSExtValue();
      return std::nullopt;
    };
    auto times = [&](Value v) -> std::optional<int64_t> { // v = parity * twin
      auto mul = v.getDefiningOp<arith::MulIOp>();
      if (!mul || mul.getLhs() != parity)
        return std::nullopt;
      return constant(mul.getRhs());
    };
    Location loc = delta.getLoc();
    auto c = [&](int64_t v) { return arith::ConstantIntOp::create(at, loc, v, 32).getResult(); };
    if (auto twin = times(delta))
      return arith::MulIOp::create(at, loc, p, c(*twin));
    if (auto sub = delta.getDefiningOp<arith::SubIOp>()) {
      auto twin = constant(sub.getLhs());
      if (twin && times(sub.getRhs()) == twin)
        return arith::SubIOp::create(at, loc, c(*twin), arith::MulIOp::create(at, loc, p, c(*twin)));
    }
    return Value();
  };
  SmallVector<RingShift> moved;
  SmallVector<Value> initial;
  OpBuilder before(loop);
  for (RingShift &shift : ringShifts) {
    if (shift.shifted.getParentBlock() != body ||
        loop.getRegion().isAncestor(shift.base.getParentRegion()))
      continue;
    Value delta = rebuild(before, shift.delta, parityInit);
    if (!delta)
      continue;
    initial.push_back(LLVM::GEPOp::create(before, shift.delta.getLoc(), ptrType(kSharedAddressSpace),
                                          b.getI8Type(), shift.base, ValueRange{delta}));
    moved.push_back(shift);
  }
  llvm::erase_if(ringShifts, [&](RingShift &shift) { return shift.shifted.getParentBlock() == body; });
  if (moved.empty())
    return;
  IRRewriter rewriter(b);
  auto advanced = [&](OpBuilder &at, Location loc, ArrayRef<BlockArgument> carried) {
    Value next = arith::XOrIOp::create(at, loc, parity, arith::ConstantIntOp::create(at, loc, 1, 32));
    SmallVector<Value> values;
    for (auto [shift, address] : llvm::zip_equal(moved, carried)) {
      Value step = arith::SubIOp::create(at, loc, rebuild(at, shift.delta, next), shift.delta);
      values.push_back(LLVM::GEPOp::create(at, loc, ptrType(kSharedAddressSpace), at.getI8Type(),
                                           address, ValueRange{step}));
    }
    return values;
  };
  FailureOr<LoopLikeOpInterface> widened =
      loop.replaceWithAdditionalYields(rewriter, initial, /*replaceInitOperandUsesInLoop=*/false, advanced);
  assert(succeeded(widened) && "scf.for takes more loop-carried values");
  loop = cast<scf::ForOp>(widened->getOperation());
  auto carried = loop.getRegionIterArgs().take_back(moved.size());
  for (auto [shift, address] : llvm::zip_equal(moved, carried)) {
    chunkBaseCache.erase(shift.key);
    shift.shifted.replaceAllUsesWith(address);
    shift.shifted.getDefiningOp()->erase();
  }
}

LogicalResult KernelLowering::lowerIf(scf::IfOp op) {
  SmallVector<Type> types;
  for (Value result : op.getResults()) {
    if (isShared(result))
      return op.emitError() << "an scf.if cannot yield a shared-memory tile";
    if (auto type = dyn_cast<RankedTensorType>(result.getType()))
      types.append(layoutOf(result).numRegs(), type.getElementType());
    else
      types.push_back(result.getType());
  }
  bool hasElse = !op.getElseRegion().empty();
  Value cond = scalar(op.getCondition());
  if (op->hasAttr(tilec::kWarpUniformAttrName))
    cond = target.voteAny(b, cond); // the same in every lane: say so to ptxas
  auto newIf = scf::IfOp::create(b, types, cond, hasElse);
  for (auto [oldRegion, newRegion] :
       {std::pair{&op.getThenRegion(), &newIf.getThenRegion()}, {&op.getElseRegion(), &newIf.getElseRegion()}}) {
    if (oldRegion->empty())
      continue;
    OpBuilder::InsertionGuard guard(b);
    Block *body = &newRegion->front();
    if (!body->empty() && body->back().hasTrait<OpTrait::IsTerminator>())
      body->back().erase();
    b.setInsertionPointToEnd(body);
    for (Operation &inner : oldRegion->front().without_terminator())
      if (failed(lowerOp(&inner)))
        return failure();
    scf::YieldOp::create(b, flatten(oldRegion->front().getTerminator()->getOperands()));
  }
  unflatten(op.getResults(), newIf.getResults());
  return success();
}

} // namespace tilec::nvvm
