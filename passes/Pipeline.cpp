//===- Pipeline.cpp - prefetch K/V tiles one iteration ahead --------------===//
//
// FlashAttention-2's schedule inside the K/V loop: while S = Q·Kⱼᵀ and the
// softmax run, Vⱼ is in flight; while O += P·Vⱼ runs, Kⱼ₊₁ is in flight. In
// the tile IR that is a loop rotation: the load of a dot's B operand whose
// last use comes before another dot is moved to just before that dot and
// made to load the *next* iteration's tile, which flows around the back edge
// as a loop-carried value; a copy for the first iteration goes before the
// loop. Nothing else changes, so the IR stays correct on any backend; the
// GPU lowering gives a loop-carried shared tile one region of shared memory,
// so Kⱼ₊₁ is copied into the region Kⱼ was read from (after a barrier).
//
// The last iteration prefetches one block past the loop; tile.load's bounds
// make that harmless.
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
/// them has side effects (it could not be recomputed for another iteration).
FailureOr<SmallVector<Operation *>> addressSlice(Block *body, ValueRange roots) {
  llvm::SetVector<Operation *> slice;
  SmallVector<Value> worklist(roots.begin(), roots.end());
  while (!worklist.empty()) {
    Value v = worklist.pop_back_val();
    // The next iteration's value of a loop-carried variable other than the
    // induction variable is not known here: do not rotate.
    if (auto arg = dyn_cast<BlockArgument>(v); arg && arg.getOwner() == body && arg.getArgNumber() != 0)
      return failure();
    Operation *def = v.getDefiningOp();
    if (!def || def->getBlock() != body || slice.contains(def))
      continue;
    if (!isPure(def) || def->getNumRegions() != 0)
      return failure();
    slice.insert(def);
    llvm::append_range(worklist, def->getOperands());
  }
  SmallVector<Operation *> ordered(slice.begin(), slice.end());
  llvm::sort(ordered, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  return ordered;
}

/// Clones `load` (and the address computation it needs) at the builder's
/// insertion point for induction variable value `iv`.
Value cloneLoadFor(OpBuilder &builder, LoadOp load, ArrayRef<Operation *> slice,
                   ArrayRef<Value> inductionVars, Value iv) {
  IRMapping mapping;
  for (Value inductionVar : inductionVars)
    mapping.map(inductionVar, iv);
  for (Operation *op : slice)
    builder.clone(*op, mapping);
  return builder.clone(*load, mapping)->getResult(0);
}

LogicalResult pipelineLoop(scf::ForOp loop, RewriterBase &rewriter) {
  Block *body = loop.getBody();
  SmallVector<DotOp> dots;
  for (Operation &op : *body)
    if (auto dot = dyn_cast<DotOp>(op))
      dots.push_back(dot);
  for (size_t i = 0; i + 1 < dots.size(); ++i) {
    auto load = dots[i].getB().getDefiningOp<LoadOp>();
    if (!load || load->getBlock() != body || !load.getResult().hasOneUse())
      continue;
    DotOp nextDot = dots[i + 1];
    auto slice = addressSlice(body, load->getOperands());
    if (failed(slice))
      continue;

    // First iteration's tile, before the loop.
    rewriter.setInsertionPoint(loop);
    Value oldIv = loop.getInductionVar();
    Value first = cloneLoadFor(rewriter, load, *slice, {oldIv}, loop.getLowerBound());

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
          Value prefetched = cloneLoadFor(builder, load, *slice, {oldIv, iv}, next);
          load.getResult().replaceAllUsesWith(newArgs[0]);
          return {prefetched};
        }));
    rewriter.eraseOp(load);
    return pipelineLoop(newLoop, rewriter); // further rotations see the new loop
  }
  return success();
}

struct TilePipelinePass final : tilec::impl::TilePipelineBase<TilePipelinePass> {
  void runOnOperation() override {
    IRRewriter rewriter(&getContext());
    SmallVector<scf::ForOp> loops;
    getOperation().walk([&](scf::ForOp loop) {
      auto func = loop->getParentOfType<func::FuncOp>();
      if (func && func->hasAttr(kKernelAttrName))
        loops.push_back(loop);
    });
    for (scf::ForOp loop : loops)
      if (failed(pipelineLoop(loop, rewriter)))
        return signalPassFailure();
  }
};

} // namespace
