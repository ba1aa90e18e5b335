//===- LazyRescale.cpp - tile-lazy-rescale: keep a row's max while it may -===//
//
// FlashAttention-4's lazy rescale at the tile level (Passes.td has the
// whole story): a row of an FA2-form loop keeps its old running max while
// the new one would rescale by no less than 2^-threshold, so the factor is
// exactly 1 there; O's multiply by it is marked tile.skip_unit_rescale for
// convert-tile-to-nvvm's warp vote. Run by the tile-to-nvvm pipeline
// (lazy-rescale) where O takes >= min-registers f32 registers per thread.
//
//===----------------------------------------------------------------------===//
#include "dialects/Tile/TileDialect.h"
#include "tilec/Passes.h"

#include "Matchers.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/FunctionInterfaces.h"

#include <cmath>

namespace tilec {
#define GEN_PASS_DEF_TILELAZYRESCALE
#include "passes/Passes.h.inc"
} // namespace tilec

using namespace mlir;
using tilec::splatScalar;

namespace {

/// The running max of one FA2-form loop, found from its yield:
/// `mNew = maximumf(mArg, rowMax)`, `scaled = mNew * c`, `negScaled =
/// -scaled` feeding the scores and `alphaIn = fma(mArg, c, negScaled)`,
/// `alpha = exp2(alphaIn)`.
struct RunningMax {
  BlockArgument mArg;
  arith::MaximumFOp mNew;
  arith::MulFOp scaled;
  Value c; // the scale (scale * log2 e) of `scaled`
  arith::NegFOp negScaled;
  math::FmaOp alphaIn;
  math::Exp2Op alpha;
};

std::optional<RunningMax> matchRunningMax(scf::ForOp loop, unsigned i) {
  RunningMax r;
  r.mArg = loop.getRegionIterArgs()[i];
  Value yielded = loop.getBody()->getTerminator()->getOperand(i);
  r.mNew = yielded.getDefiningOp<arith::MaximumFOp>();
  if (!r.mNew || r.mNew->getBlock() != loop.getBody() || !r.mNew.getResult().hasNUses(2))
    return std::nullopt;
  // The op reading the old max: mNew, or under a clamp from below by a
  // loop-invariant splat, mNew = max(max(mArg, rowMax), c) (how a kernel
  // keeps rows that saw no key yet finite), the inner max. Keeping the old
  // max is as exact with the clamp: the kept value is mArg or mNew.
  Operation *reader = r.mNew;
  if (!llvm::is_contained(r.mNew->getOperands(), Value(r.mArg))) {
    reader = nullptr;
    for (auto [x, bound] : {std::pair(r.mNew.getLhs(), r.mNew.getRhs()), {r.mNew.getRhs(), r.mNew.getLhs()}}) {
      auto inner = x.getDefiningOp<arith::MaximumFOp>();
      if (inner && inner->hasOneUse() && llvm::is_contained(inner->getOperands(), Value(r.mArg)) &&
          splatScalar(bound) && loop.isDefinedOutsideOfLoop(bound))
        reader = inner;
    }
    if (!reader)
      return std::nullopt;
  }
  for (Operation *user : r.mNew->getUsers())
    if (auto mul = dyn_cast<arith::MulFOp>(user))
      r.scaled = mul;
  if (!r.scaled || !r.scaled->hasOneUse())
    return std::nullopt;
  r.c = r.scaled.getLhs() == r.mNew.getResult() ? r.scaled.getRhs() : r.scaled.getLhs();
  r.negScaled = dyn_cast<arith::NegFOp>(*r.scaled->getUsers().begin());
  if (!r.negScaled)
    return std::nullopt;
  for (Operation *user : r.negScaled->getUsers())
    if (auto fma = dyn_cast<math::FmaOp>(user);
        fma && fma.getA() == r.mArg && fma.getB() == r.c && fma.getC() == r.negScaled.getResult() &&
        fma->hasOneUse())
      r.alphaIn = fma;
  if (!r.alphaIn)
    return std::nullopt;
  r.alpha = dyn_cast<math::Exp2Op>(*r.alphaIn->getUsers().begin());
  if (!r.alpha)
    return std::nullopt;
  // Nothing else may read the old max (a second, un-CSE'd max or score
  // computation would keep using it), and the scores must subtract exactly
  // negScaled: every other user broadcasts it along the rows.
  for (Operation *user : r.mArg.getUsers())
    if (user != reader && user != r.alphaIn.getOperation())
      return std::nullopt;
  bool feedsScores = false;
  for (Operation *user : r.negScaled->getUsers()) {
    if (user == r.alphaIn.getOperation())
      continue;
    if (!isa<tile::ExpandDimsOp>(user))
      return std::nullopt;
    feedsScores = true;
  }
  if (!feedsScores)
    return std::nullopt;
  return r;
}

/// The full-tile multiplies by a row broadcast of `alpha` (O's rescale).
SmallVector<arith::MulFOp> rescalesBy(Value alpha) {
  SmallVector<arith::MulFOp> muls;
  for (Operation *expand : alpha.getUsers())
    if (isa<tile::ExpandDimsOp>(expand))
      for (Operation *broadcast : expand->getUsers())
        if (isa<tile::BroadcastOp>(broadcast))
          for (Operation *user : broadcast->getUsers())
            if (auto mul = dyn_cast<arith::MulFOp>(user))
              muls.push_back(mul);
  return muls;
}

/// m' = grow ? max : m with grow = alpha < 2^-threshold; alpha' = grow ?
/// alpha : 1; the scores subtract the kept max. See Passes.td.
void makeRescaleLazy(RunningMax r, double threshold) {
  // alpha depends on mArg, c and negScaled only: compute it right after
  // negScaled so the kept max exists before the scores' uses of it.
  r.alphaIn->moveAfter(r.negScaled);
  r.alpha->moveAfter(r.alphaIn);
  OpBuilder b(r.alpha->getContext());
  b.setInsertionPointAfter(r.alpha);
  Location loc = r.alpha.getLoc();
  auto rowType = cast<RankedTensorType>(r.mArg.getType());
  auto splat = [&](double value) {
    return arith::ConstantOp::create(
        b, loc, DenseElementsAttr::get(rowType, b.getFloatAttr(rowType.getElementType(), value)));
  };
  Value alpha = r.alpha.getResult();
  Value grow = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OLT, alpha,
                                     splat(std::exp2(-threshold)));
  Value kept = arith::SelectOp::create(b, loc, grow, r.mNew, r.mArg);
  Value negKept = arith::NegFOp::create(b, loc, arith::MulFOp::create(b, loc, kept, r.c));
  Value lazyAlpha = arith::SelectOp::create(b, loc, grow, alpha, splat(1.0));
  r.negScaled.getResult().replaceUsesWithIf(
      negKept, [&](OpOperand &use) { return use.getOwner() != r.alphaIn.getOperation(); });
  alpha.replaceUsesWithIf(lazyAlpha, [&](OpOperand &use) {
    return use.getOwner() != grow.getDefiningOp() && use.getOwner() != lazyAlpha.getDefiningOp();
  });
  r.mNew.getResult().replaceUsesWithIf(kept, [&](OpOperand &use) {
    return isa<scf::YieldOp>(use.getOwner());
  });
  for (arith::MulFOp mul : rescalesBy(lazyAlpha))
    mul->setAttr(tilec::kSkipUnitRescaleAttr, b.getUnitAttr());
}

struct TileLazyRescale final : tilec::impl::TileLazyRescaleBase<TileLazyRescale> {
  using TileLazyRescaleBase::TileLazyRescaleBase;
  void runOnOperation() override {
    // Kept rows' scores reach 2^threshold and are rounded to f16/bf16 for the
    // second dot: f16 stops at 65504.
    if (!(threshold > 0 && threshold <= 15)) {
      getOperation().emitError() << "tile-lazy-rescale: threshold must be in (0, 15], got "
                                 << threshold;
      return signalPassFailure();
    }
    if (failed(tilec::checkNumWarps(getOperation(), "tile-lazy-rescale", numWarps)))
      return signalPassFailure();
    if (minRegisters < 0) {
      getOperation().emitError() << "tile-lazy-rescale: min-registers must be >= 0, got "
                                 << static_cast<int64_t>(minRegisters);
      return signalPassFailure();
    }
    int64_t threads = 32 * numWarps;
    getOperation().walk([&](scf::ForOp loop) {
      if (loop->hasAttr(tilec::kSoftmaxFallbackAttr))
        return;
      for (unsigned i = 0; i < loop.getNumRegionIterArgs(); ++i) {
        auto running = matchRunningMax(loop, i);
        if (!running)
          continue;
        // Worth it only where the skipped multiplies outweigh the vote.
        int64_t registers = 0;
        for (arith::MulFOp mul : rescalesBy(running->alpha))
          registers += cast<RankedTensorType>(mul.getType()).getNumElements() / threads;
        if (registers > 0 && registers >= minRegisters)
          makeRescaleLazy(*running, threshold);
      }
    });
  }
};

} // namespace
