//===- Pipeline.cpp - prefetch K/V tiles one iteration ahead --------------===//
//
// The loads of a K/V loop's dot operands are made to load the *next*
// iteration's tile, which flows around the back edge as a loop-carried value;
// a copy for the first iteration goes before the loop. Two schedules,
// chosen by `stages` (shared buffers per tile):
//
//  * stages=1, FlashAttention-2's: the load of a dot's B operand whose last
//    use comes before another dot moves to just before that dot. While
//    S = Q·Kⱼᵀ and the softmax run, Vⱼ is in flight; while O += P·Vⱼ runs,
//    Kⱼ₊₁ is. The GPU lowering gives the carried tile one region of shared
//    memory, refilled in place after a barrier. Its cost: that barrier sits
//    right after Kⱼ's last read, and ptxas hoists it (with the copies behind
//    it) above the dot, so all of Kⱼ's fragments are loaded at once — 64 to
//    128 registers at 128-row blocks, which spill.
//  * stages=2, a ring: every dot's B load moves to the top of the body. The
//    lowering gives the carried tile two regions used alternately; the copies
//    of Kⱼ₊₁ and Vⱼ₊₁ overlap all of iteration j, and one wait plus one
//    barrier at the top of the iteration cover both.
//
// Nothing else changes, so the IR stays correct on any backend (the CPU
// pipeline runs this pass too). The last iteration prefetches one block past
// the loop; tile.load's bounds make that harmless. A prefetch whose address
// reads scalars (a paged block table) is guarded by `next < end`, end the
// bound of the last of tile-split-masked-loops' adjacent loops (blocksEnd),
// so split loops hand each other their first block (chainedResult).
//
//===----------------------------------------------------------------------===//
#include "dialects/Tile/TileDialect.h"
#include "tilec/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace tilec {
#define GEN_PASS_DEF_TILEPIPELINE
#include "passes/Passes.h.inc"
} // namespace tilec

using namespace mlir;
using namespace mlir::tile;

namespace {

/// Ops of `body` that `roots` depend on, in body order; failure if one of
/// them has side effects (it could not be recomputed for another iteration),
/// with `why` saying which. A tile.load_scalar may be in the slice (a paged
/// K/V block's address read from the block table): the callers rotate such
/// a load only in loops that write no memory (BodyWrites::mayAlias), so it
/// reads the same for another iteration, and cloneLoadFor guards it.
FailureOr<SmallVector<Operation *>> addressSlice(Block *body, ValueRange roots, std::string &why) {
  llvm::SetVector<Operation *> slice;
  SmallVector<Value> worklist(roots.begin(), roots.end());
  while (!worklist.empty()) {
    Value v = worklist.pop_back_val();
    // The next iteration's value of a loop-carried variable other than the
    // induction variable is not known here: do not rotate.
    if (auto arg = dyn_cast<BlockArgument>(v); arg && arg.getOwner() == body && arg.getArgNumber() != 0) {
      why = "its address depends on loop-carried value #" + std::to_string(arg.getArgNumber() - 1);
      return failure();
    }
    Operation *def = v.getDefiningOp();
    if (!def || def->getBlock() != body || slice.contains(def))
      continue;
    if ((!isPure(def) && !isa<LoadScalarOp>(def)) || def->getNumRegions() != 0) {
      why = "its address depends on '" + def->getName().getStringRef().str() +
            "', which cannot be recomputed for the next iteration";
      return failure();
    }
    slice.insert(def);
    llvm::append_range(worklist, def->getOperands());
  }
  SmallVector<Operation *> ordered(slice.begin(), slice.end());
  llvm::sort(ordered, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  return ordered;
}

/// Clones `load` (and the address computation it needs) at the builder's
/// insertion point for induction variable value `iv`. Iteration `iv` may not
/// exist (the prefetch before an empty loop, the last iteration's prefetch
/// past the loop): tile loads are bounded by their views, but a scalar load
/// is not (a block table read one entry past its row). So when the slice
/// reads scalars, each runs only if `iv < ub` (else reads as 0), and the
/// cloned views get size 0 then, so the tile load touches no memory either.
/// Loads prefetched at one point share `reads` (K's and V's page is one
/// block-table entry, read once).
struct ScalarReads {
  Value exists;
  DenseMap<Operation *, Value> loaded;
};
Value cloneLoadFor(OpBuilder &builder, LoadOp load, ArrayRef<Operation *> slice,
                   ArrayRef<Value> inductionVars, Value iv, Value ub, ScalarReads *shared = nullptr) {
  IRMapping mapping;
  for (Value inductionVar : inductionVars)
    mapping.map(inductionVar, iv);
  ScalarReads local;
  ScalarReads &reads = shared ? *shared : local;
  Value &exists = reads.exists;
  if (!exists && llvm::any_of(slice, [](Operation *op) { return isa<LoadScalarOp>(op); }))
    exists = arith::CmpIOp::create(builder, load.getLoc(), arith::CmpIPredicate::slt, iv, ub);
  for (Operation *op : slice) {
    Location loc = op->getLoc();
    if (Value known = reads.loaded.lookup(op)) {
      mapping.map(op->getResult(0), known);
      continue;
    }
    if (auto scalarLoad = dyn_cast<LoadScalarOp>(op)) {
      Type type = scalarLoad.getType();
      auto guarded = scf::IfOp::create(builder, loc, TypeRange{type}, exists, /*addThenBlock=*/true,
                                       /*addElseBlock=*/true);
      OpBuilder::InsertionGuard guard(builder);
      builder.setInsertionPointToStart(guarded.thenBlock());
      scf::YieldOp::create(builder, loc, builder.clone(*op, mapping)->getResults());
      builder.setInsertionPointToStart(guarded.elseBlock());
      scf::YieldOp::create(builder, loc,
                           ValueRange{arith::ConstantOp::create(builder, loc, builder.getZeroAttr(type))});
      mapping.map(scalarLoad.getResult(), guarded.getResult(0));
      reads.loaded[op] = guarded.getResult(0);
      continue;
    }
    Operation *clone = builder.clone(*op, mapping);
    if (auto view = dyn_cast<ViewOp>(clone); view && exists) {
      OpBuilder::InsertionGuard guard(builder);
      builder.setInsertionPoint(view);
      Value zero = arith::ConstantIntOp::create(builder, loc, 0, 32);
      for (OpOperand &size : view.getSizesMutable())
        size.set(arith::SelectOp::create(builder, loc, exists, size.get(), zero));
    }
  }
  return builder.clone(*load, mapping)->getResult(0);
}

/// The tile.load_scalar ops of several loads prefetched at one point (the
/// page of each sub-tile of a paged K/V block), cloned for iteration `iv`
/// under one `iv < ub` guard and recorded in `reads`, so that the cloned
/// loads find them there. Read together, the block-table entries cost one
/// round trip; cloned load by load, each copy would wait for its own entry
/// before the next entry is even requested. Only for two or more distinct
/// scalar loads: with one, cloneLoadFor's own guard is the same thing.
void prereadScalars(OpBuilder &builder, Location loc, ArrayRef<ArrayRef<Operation *>> slices,
                    ArrayRef<Value> inductionVars, Value iv, Value ub, ScalarReads &reads) {
  llvm::SetVector<Operation *> all;
  for (ArrayRef<Operation *> slice : slices)
    all.insert(slice.begin(), slice.end());
  SmallVector<Operation *> scalars;
  for (Operation *op : all)
    if (isa<LoadScalarOp>(op) && !reads.loaded.count(op))
      scalars.push_back(op);
  if (scalars.size() < 2)
    return;
  // What the scalar loads need, in body order.
  llvm::SetVector<Operation *> needed;
  SmallVector<Operation *> worklist(scalars.begin(), scalars.end());
  while (!worklist.empty()) {
    Operation *op = worklist.pop_back_val();
    if (!needed.insert(op))
      continue;
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp(); def && all.contains(def))
        worklist.push_back(def);
  }
  SmallVector<Operation *> ordered(needed.begin(), needed.end());
  llvm::sort(ordered, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  llvm::sort(scalars, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });

  if (!reads.exists)
    reads.exists = arith::CmpIOp::create(builder, loc, arith::CmpIPredicate::slt, iv, ub);
  SmallVector<Type> types;
  for (Operation *op : scalars)
    types.push_back(op->getResult(0).getType());
  auto guarded = scf::IfOp::create(builder, loc, types, reads.exists, /*addThenBlock=*/true,
                                   /*addElseBlock=*/true);
  {
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPointToStart(guarded.thenBlock());
    IRMapping mapping;
    for (Value inductionVar : inductionVars)
      mapping.map(inductionVar, iv);
    for (Operation *op : ordered)
      builder.clone(*op, mapping);
    SmallVector<Value> values;
    for (Operation *op : scalars)
      values.push_back(mapping.lookup(op->getResult(0)));
    scf::YieldOp::create(builder, loc, values);
    builder.setInsertionPointToStart(guarded.elseBlock());
    SmallVector<Value> zeros;
    for (Type type : types)
      zeros.push_back(arith::ConstantOp::create(builder, loc, builder.getZeroAttr(type)));
    scf::YieldOp::create(builder, loc, zeros);
  }
  for (auto [op, value] : llvm::zip_equal(scalars, guarded.getResults()))
    reads.loaded[op] = value;
}

/// After `load` moved to another iteration, the scalar loads of its address
/// slice (and what only they used) are dead: erase them, so no block-table
/// read stays behind for a tile that is no longer loaded there. Slices
/// without scalar loads are left as they were (the later cleanups drop them).
void eraseDeadScalarReads(RewriterBase &rewriter, ArrayRef<Operation *> slice) {
  if (llvm::none_of(slice, [](Operation *op) { return isa<LoadScalarOp>(op); }))
    return;
  for (Operation *op : llvm::reverse(slice))
    if (op->use_empty())
      rewriter.eraseOp(op);
}

/// The kernel argument a pointer or view is computed from (through
/// tile.view and tile.addptr), or null when it is not one.
Value rootPointer(Value v) {
  while (v) {
    if (auto arg = dyn_cast<BlockArgument>(v))
      return isa_and_nonnull<func::FuncOp>(arg.getOwner()->getParentOp()) ? v : Value();
    Operation *def = v.getDefiningOp();
    if (auto view = dyn_cast_or_null<ViewOp>(def))
      v = view.getBase();
    else if (auto add = dyn_cast_or_null<AddPtrOp>(def))
      v = add.getPtr();
    else
      return Value();
  }
  return Value();
}

/// What the loop body writes: rotating a load across a store the load might
/// alias would change what it reads. `any` is a write to memory that is not
/// a tile.atomic_add into a view of a kernel argument or a turn op on a
/// counter (anything may alias it); `atomicRoots` the kernel arguments
/// tile.atomic_adds and turn ops write through.
/// A load through another argument may be rotated across those adds
/// (FlashAttention-2's fused backward: its Q and dO tiles across the dQ
/// adds). The assumption: a kernel does not read, through one argument,
/// memory it atomically adds to through another -- such a read would race
/// with the other programs' adds anyway.
struct BodyWrites {
  bool any = false;
  SmallVector<Value> atomicRoots;
  /// Whether `load` (with the scalar reads of its address `slice`) may read
  /// what the body writes.
  bool mayAlias(LoadOp load, ArrayRef<Operation *> slice) const {
    if (any)
      return true;
    if (atomicRoots.empty())
      return false;
    if (llvm::any_of(slice, [](Operation *op) { return isa<LoadScalarOp>(op); }))
      return true;
    Value root = rootPointer(load.getView());
    return !root || llvm::is_contained(atomicRoots, root);
  }
};

BodyWrites bodyWrites(scf::ForOp loop) {
  BodyWrites writes;
  loop.getBody()->walk([&](Operation *op) {
    auto effects = dyn_cast<MemoryEffectOpInterface>(op);
    if ((effects && effects.hasEffect<MemoryEffects::Write>()) ||
        (!effects && !op->hasTrait<OpTrait::HasRecursiveMemoryEffects>() && !isPure(op) &&
         !isa<scf::YieldOp>(op))) {
      // A turn counter (tile.wait_turn, tile.pass_turn) is memory other
      // programs change, as an atomic add's: only the turn ops and volatile
      // scalar reads touch it.
      Value root;
      if (auto atomic = dyn_cast<AtomicAddOp>(op))
        root = rootPointer(atomic.getView());
      else if (auto wait = dyn_cast<WaitTurnOp>(op))
        root = rootPointer(wait.getCounter());
      else if (auto pass = dyn_cast<PassTurnOp>(op))
        root = rootPointer(pass.getCounter());
      if (root)
        writes.atomicRoots.push_back(root);
      else
        writes.any = true;
    }
  });
  return writes;
}

/// A dot's B operand loaded in the loop body for this iteration, that can be
/// loaded for another iteration instead: used only by the dot, with an
/// address that depends on nothing but the induction variable and values
/// from outside the loop.
struct RotatableLoad {
  LoadOp load;
  SmallVector<Operation *> slice;
};

/// With `anyDots`, the load may also have other uses, as long as each is the
/// B operand of a dot (the ring's schedule: Q and dO in the backward's dK/dV
/// loop feed two dots each, K in its dQ loop two).
std::optional<RotatableLoad> rotatableLoad(Block *body, DotOp dot, bool anyDots = false) {
  auto load = dot.getB().getDefiningOp<LoadOp>();
  if (!load || load->getBlock() != body)
    return std::nullopt;
  auto feedsB = [](OpOperand &use) {
    auto user = dyn_cast<DotOp>(use.getOwner());
    return user && &use == &user.getBMutable();
  };
  if (!load.getResult().hasOneUse() &&
      !(anyDots && llvm::all_of(load.getResult().getUses(), feedsB)))
    return std::nullopt;
  std::string why;
  auto slice = addressSlice(body, load->getOperands(), why);
  if (failed(slice)) {
    // Silently slower is the worst outcome: say why.
    load->emitRemark() << "not prefetched (tile-pipeline): " << why;
    return std::nullopt;
  }
  return RotatableLoad{load, std::move(*slice)};
}

/// stages = 1 (FlashAttention-2's schedule, one shared buffer per tile): the
/// load of a dot's B operand whose only use precedes another dot moves to
/// just before that dot and loads the next iteration's tile, so it can refill
/// the region the dot just finished reading. With `afterLastUse`, a load
/// several dots read as B (the fused backward's Q: Sᵀ = K·Qᵀ and dK += dSᵀ·Q;
/// dO: dV and dPᵀ) moves to just before the dot after the last of them, so
/// the next iteration's copy overlaps the rest of this one without a second
/// buffer (stages=2's ring needs one per tile: 32 KB more at FA2's d128
/// backward blocks). Loops whose only writes are atomic adds rotate loads
/// through other kernel arguments (BodyWrites).
LogicalResult rotateIntoNextDot(scf::ForOp loop, RewriterBase &rewriter, bool afterLastUse) {
  Block *body = loop.getBody();
  BodyWrites writes = bodyWrites(loop);
  if (writes.any)
    return success();
  SmallVector<DotOp> dots;
  for (Operation &op : *body)
    if (auto dot = dyn_cast<DotOp>(op))
      dots.push_back(dot);
  for (size_t i = 0; i + 1 < dots.size(); ++i) {
    std::optional<RotatableLoad> rotatable = rotatableLoad(body, dots[i], afterLastUse);
    if (!rotatable || writes.mayAlias(rotatable->load, rotatable->slice))
      continue;
    LoadOp load = rotatable->load;
    // The dot after the last one reading the tile (dots[i] itself when it
    // is the only reader).
    size_t last = i;
    for (size_t j = i + 1; j < dots.size(); ++j)
      if (dots[j].getB() == load.getResult())
        last = j;
    if (last + 1 >= dots.size())
      continue;
    DotOp nextDot = dots[last + 1];

    // First iteration's tile, before the loop.
    rewriter.setInsertionPoint(loop);
    Value oldIv = loop.getInductionVar();
    Value first = cloneLoadFor(rewriter, load, rotatable->slice, {oldIv}, loop.getLowerBound(),
                               loop.getUpperBound());

    Value step = loop.getStep();
    auto newLoop = cast<scf::ForOp>(*loop.replaceWithAdditionalYields(
        rewriter, first, /*replaceInitOperandUsesInLoop=*/false,
        [&](OpBuilder &builder, Location loc, ArrayRef<BlockArgument> newArgs) -> SmallVector<Value> {
          // The next iteration's tile, issued before the following dot. The
          // body may still refer to the old induction variable here (it is
          // replaced when the body moves into the new loop): map both.
          OpBuilder::InsertionGuard guard(builder);
          builder.setInsertionPoint(nextDot);
          Value iv = newArgs[0].getOwner()->getArgument(0);
          Value next = arith::AddIOp::create(builder, loc, iv, step);
          Value prefetched = cloneLoadFor(builder, load, rotatable->slice, {oldIv, iv}, next,
                                          loop.getUpperBound());
          load.getResult().replaceAllUsesWith(newArgs[0]);
          return {prefetched};
        }));
    rewriter.eraseOp(load);
    eraseDeadScalarReads(rewriter, rotatable->slice);
    return rotateIntoNextDot(newLoop, rewriter, afterLastUse); // further rotations see the new loop
  }
  return success();
}

/// Whether `cond` is a prefetch's guard `rootA < bound` (cloneLoadFor's
/// `exists`, for the iteration rootA stands for).
bool isGuard(Value cond, Value rootA) {
  auto cmp = cond.getDefiningOp<arith::CmpIOp>();
  return cmp && cmp.getPredicate() == arith::CmpIPredicate::slt && cmp.getLhs() == rootA;
}

/// Whether `v` is computed inside `body` (in it or in a region of its ops).
bool computedIn(Value v, Block *body) {
  if (Operation *def = v.getDefiningOp())
    return body->findAncestorOpInBlock(*def) != nullptr;
  Block *owner = cast<BlockArgument>(v).getOwner();
  return owner == body || (owner->getParentOp() && body->findAncestorOpInBlock(*owner->getParentOp()));
}

/// Whether `a` (computed in `bodyA` from `rootA`) and `b` (in `bodyB` from
/// `rootB`) are the same computation: the same ops on the same values from
/// outside the two bodies, with rootA standing for rootB. `a` may be a
/// guarded prefetch's (cloneLoadFor, prereadScalars): a value its guard
/// selects (a view size, `select(exists, size, 0)`) or a scalar read under
/// it (`scf.if exists` yielding the read) stands for the unguarded value;
/// the guard only says whether iteration rootA exists.
bool sameComputation(Value a, Value b, Value rootA, Value rootB, Block *bodyA, Block *bodyB) {
  if (a == rootA || b == rootB)
    return a == rootA && b == rootB;
  Operation *defA = a.getDefiningOp(), *defB = b.getDefiningOp();
  if (auto select = dyn_cast_or_null<arith::SelectOp>(defA);
      select && isGuard(select.getCondition(), rootA) && computedIn(a, bodyA))
    return sameComputation(select.getTrueValue(), b, rootA, rootB, bodyA, bodyB);
  if (auto guarded = dyn_cast_or_null<scf::IfOp>(defA);
      guarded && isGuard(guarded.getCondition(), rootA) && computedIn(a, bodyA)) {
    Value read = guarded.thenYield().getOperand(cast<OpResult>(a).getResultNumber());
    return sameComputation(read, b, rootA, rootB, bodyA, bodyB);
  }
  bool localA = computedIn(a, bodyA), localB = computedIn(b, bodyB);
  if (!localA || !localB)
    return !localA && !localB && a == b;
  if (!defA || !defB || defA->getName() != defB->getName() ||
      defA->getAttrDictionary() != defB->getAttrDictionary() ||
      defA->getResultTypes() != defB->getResultTypes() || defA->getNumRegions() != 0 ||
      defB->getNumRegions() != 0 || defA->getNumOperands() != defB->getNumOperands() ||
      cast<OpResult>(a).getResultNumber() != cast<OpResult>(b).getResultNumber())
    return false;
  for (auto [x, y] : llvm::zip_equal(defA->getOperands(), defB->getOperands()))
    if (!sameComputation(x, y, rootA, rootB, bodyA, bodyB))
      return false;
  return true;
}

/// tile-split-masked-loops splits a K/V loop into consecutive loops over
/// adjacent block ranges (`tile.blocks`, lb <= ub by construction). When
/// `loop` continues `previous` that way, the tile `previous` prefetched in its
/// last iteration (for block previous.ub = loop.lb) is the one `loop` starts
/// with: result number of `previous` carrying the prefetch of the same load
/// as `load`, or nothing.
std::optional<unsigned> chainedResult(scf::ForOp previous, scf::ForOp loop, LoadOp load) {
  if (!previous || !previous->hasAttr(tilec::kBlocksAttr) || !loop->hasAttr(tilec::kBlocksAttr) ||
      previous.getUpperBound() != loop.getLowerBound() || previous.getStep() != loop.getStep())
    return std::nullopt;
  Block *prevBody = previous.getBody();
  // The prefetches load for iv + step; `load` for loop's own iv.
  Value nextIv;
  prevBody->walk([&](arith::AddIOp add) {
    if (add.getLhs() == previous.getInductionVar() && add.getRhs() == previous.getStep())
      nextIv = add.getResult();
  });
  if (!nextIv)
    return std::nullopt;
  auto yield = cast<scf::YieldOp>(prevBody->getTerminator());
  for (auto [i, yielded] : llvm::enumerate(yield.getOperands())) {
    auto prefetch = yielded.getDefiningOp<LoadOp>();
    if (prefetch && prefetch->getBlock() == prevBody &&
        sameComputation(prefetch.getResult(), load.getResult(), nextIv, loop.getInductionVar(),
                        prevBody, loop.getBody()))
      return i;
  }
  return std::nullopt;
}

/// The scf.for right before `loop` (past pure ops), if any.
scf::ForOp previousLoop(scf::ForOp loop) {
  for (Operation *op = loop->getPrevNode(); op; op = op->getPrevNode()) {
    if (auto prev = dyn_cast<scf::ForOp>(op))
      return prev;
    if (!isPure(op) || op->getNumRegions() != 0)
      return nullptr;
  }
  return nullptr;
}

/// The scf.for right after `loop` (past pure ops) that continues its block
/// range (tile-split-masked-loops' adjacent ranges), if any.
scf::ForOp nextSplitLoop(scf::ForOp loop) {
  for (Operation *op = loop->getNextNode(); op; op = op->getNextNode()) {
    if (auto next = dyn_cast<scf::ForOp>(op)) {
      if (loop->hasAttr(tilec::kBlocksAttr) && next->hasAttr(tilec::kBlocksAttr) &&
          loop.getUpperBound() == next.getLowerBound() && loop.getStep() == next.getStep())
        return next;
      return nullptr;
    }
    if (!isPure(op) || op->getNumRegions() != 0)
      return nullptr;
  }
  return nullptr;
}

/// Where the blocks of `loop`'s range end: its upper bound, or, for one of
/// tile-split-masked-loops' adjacent loops, the last one's (the range of
/// the loop they were split from). A guarded prefetch tests its block
/// against it, so the last prefetch of one split loop loads the next
/// loop's first block (which exists), and the next loop continues with it
/// instead of loading it again behind a drain. It must be defined before
/// `loop` (it is used there, for the first block).
Value blocksEnd(scf::ForOp loop) {
  Value end = loop.getUpperBound();
  for (scf::ForOp next = nextSplitLoop(loop); next; next = nextSplitLoop(next)) {
    Value ub = next.getUpperBound();
    Operation *def = ub.getDefiningOp();
    if (def && (def->getBlock() != loop->getBlock() || !def->isBeforeInBlock(loop)))
      break; // computed between the loops: not usable at the first
    if (!def && cast<BlockArgument>(ub).getOwner()->getParentOp() != loop->getParentOp() &&
        !cast<BlockArgument>(ub).getOwner()->getParentOp()->isAncestor(loop))
      break;
    end = ub;
  }
  return end;
}

/// stages = 2 (a ring of two shared buffers per tile): every dot's B operand
/// (also one that several dots read) is loaded one iteration ahead, at the top of the body, so the copies of
/// K(j+1) and V(j+1) run during all of iteration j's math and one wait and
/// one barrier per iteration cover both.
LogicalResult prefetchAtTop(scf::ForOp loop, RewriterBase &rewriter, bool multiUse) {
  Block *body = loop.getBody();
  BodyWrites writes = bodyWrites(loop);
  if (writes.any)
    return success();
  SmallVector<RotatableLoad> rotatable;
  for (Operation &op : *body)
    if (auto dot = dyn_cast<DotOp>(op))
      if (std::optional<RotatableLoad> r = rotatableLoad(body, dot, /*anyDots=*/multiUse))
        if (!writes.mayAlias(r->load, r->slice) &&
            llvm::none_of(rotatable, [&](const RotatableLoad &seen) { return seen.load == r->load; }))
          rotatable.push_back(std::move(*r));
  if (rotatable.empty())
    return success();

  // The first iteration's tiles: loaded before the loop, or, when the loop
  // continues the previous one, that loop's last prefetch (no load, and no
  // wait for one, between the two).
  rewriter.setInsertionPoint(loop);
  Value oldIv = loop.getInductionVar();
  scf::ForOp previous = previousLoop(loop);
  // All or nothing: the lowering continues the previous loop's rings only
  // when every ring of this loop comes from there.
  SmallVector<std::optional<unsigned>> chained;
  for (const RotatableLoad &r : rotatable)
    chained.push_back(chainedResult(previous, loop, r.load));
  bool chain = llvm::all_of(chained, [](const std::optional<unsigned> &c) { return c.has_value(); });
  SmallVector<Value> firsts;
  ScalarReads firstReads;
  SmallVector<ArrayRef<Operation *>> slices;
  for (const RotatableLoad &r : rotatable)
    slices.push_back(r.slice);
  Value end = blocksEnd(loop);
  if (!chain)
    prereadScalars(rewriter, loop.getLoc(), slices, {oldIv}, loop.getLowerBound(), end, firstReads);
  for (auto [r, c] : llvm::zip_equal(rotatable, chained))
    firsts.push_back(chain ? previous.getResult(*c)
                           : cloneLoadFor(rewriter, r.load, r.slice, {oldIv}, loop.getLowerBound(), end,
                                          &firstReads));

  Value step = loop.getStep();
  DictionaryAttr attrs = loop->getDiscardableAttrDictionary();
  FailureOr<LoopLikeOpInterface> newLoop = loop.replaceWithAdditionalYields(
      rewriter, firsts, /*replaceInitOperandUsesInLoop=*/false,
      [&](OpBuilder &builder, Location loc, ArrayRef<BlockArgument> newArgs) -> SmallVector<Value> {
        OpBuilder::InsertionGuard guard(builder);
        Block *newBody = newArgs[0].getOwner();
        builder.setInsertionPointToStart(newBody);
        Value iv = newBody->getArgument(0);
        Value next = arith::AddIOp::create(builder, loc, iv, step);
        SmallVector<Value> prefetched;
        ScalarReads nextReads;
        prereadScalars(builder, loc, slices, {oldIv, iv}, next, end, nextReads);
        for (auto [r, arg] : llvm::zip_equal(rotatable, newArgs)) {
          prefetched.push_back(cloneLoadFor(builder, r.load, r.slice, {oldIv, iv}, next, end, &nextReads));
          r.load.getResult().replaceAllUsesWith(arg);
        }
        return prefetched;
      });
  if (failed(newLoop))
    return failure();
  (*newLoop)->setDiscardableAttrs(attrs);
  for (const RotatableLoad &r : rotatable)
    rewriter.eraseOp(r.load);
  for (const RotatableLoad &r : rotatable)
    eraseDeadScalarReads(rewriter, r.slice);
  return success();
}

struct TilePipelinePass final : tilec::impl::TilePipelineBase<TilePipelinePass> {
  using TilePipelineBase::TilePipelineBase;

  void runOnOperation() override {
    if (stages != 1 && stages != 2) {
      getOperation().emitError() << "tile-pipeline: stages=" << stages.getValue()
                                 << " is not supported (1: FlashAttention-2's single buffer "
                                    "per tile, 2: a ring of two buffers)";
      return signalPassFailure();
    }
    IRRewriter rewriter(&getContext());
    SmallVector<scf::ForOp> loops;
    getOperation().walk([&](scf::ForOp loop) {
      auto func = loop->getParentOfType<func::FuncOp>();
      if (func && func->hasAttr(kKernelAttrName))
        loops.push_back(loop);
    });
    for (scf::ForOp loop : loops)
      if (failed(stages == 1 ? rotateIntoNextDot(loop, rewriter, afterLastUse)
                             : prefetchAtTop(loop, rewriter, multiUse)))
        return signalPassFailure();
  }
};

} // namespace
