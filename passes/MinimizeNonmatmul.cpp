//===- MinimizeNonmatmul.cpp - FlashAttention-2's online-softmax form -----===//
//
// tile-minimize-nonmatmul: from the naive online softmax
//
//   s = qk * scale ; s' = select(mask, s, -inf) ; m' = max(m, rowmax(s'))
//   p = exp(s' - m') ; alpha = exp(m - m') ; ... ; out = acc / l ; lse = m + log l
//
// to FlashAttention-2's form (paper §3.1, GPU-FACTS.md):
//
//   s' = select(mask, qk, -inf) ; mr' = max(mr, rowmax(s'))      (unscaled max)
//   p = exp2(fma(s', scale*log2e, -(mr'*scale*log2e)))          (one FMA + exp2)
//   ... ; out = acc * (1/l) ; lse = fma(mr, scale, log l)        (per row, once)
//
// One idea per pattern; the patterns run in phases (one greedy application
// per phase) because an early contraction into an FMA would hide the
// multiply-by-constant chains that the folding patterns look for.
//
// Every rewrite is exact in real arithmetic. The one reassociation,
// (x*scale - m*scale)*log2e -> x*(scale*log2e) - m*(scale*log2e), is the one
// FlashAttention-2 makes (the scale and log2(e) fold into one constant).
//
// Sign of the scale: max(x*k) = k*max(x) and select(c, x*k, -inf) =
// select(c, x, -inf)*k hold only for k > 0. A constant (or a product or
// quotient of positive constants) proves it; so does a kernel parameter
// declared `tile.positive` (tl.assume(k > 0), checked at every launch) or an
// enclosing `scf.if (k > 0)`. When the scale is a runtime value nothing
// proves, the loop is versioned: `scf.if (k > 0) { FA2 form } else {
// original loop }`, the original marked `tile.softmax_fallback` so nothing
// rewrites it.
//
//===----------------------------------------------------------------------===//
#include "dialects/Tile/TileDialect.h"
#include "tilec/Passes.h"

#include "Matchers.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>

namespace tilec {
#define GEN_PASS_DEF_TILEMINIMIZENONMATMUL
#include "passes/Passes.h.inc"
} // namespace tilec

using namespace mlir;
using tilec::splatScalar;

namespace {


//===----------------------------------------------------------------------===//
// Scalars that a whole tile equals
//===----------------------------------------------------------------------===//

bool sameScalar(OpFoldResult a, OpFoldResult b) {
  if (!a || !b)
    return false;
  if (auto va = dyn_cast<Value>(a))
    return va == dyn_cast<Value>(b);
  auto fa = dyn_cast<FloatAttr>(cast<Attribute>(a));
  auto fb = dyn_cast_if_present<FloatAttr>(dyn_cast<Attribute>(b));
  return fa && fb && fa.getValue().bitwiseIsEqual(fb.getValue());
}

bool isNegInfSplat(Value v) {
  auto s = dyn_cast_if_present<Attribute>(splatScalar(v));
  auto f = dyn_cast_if_present<FloatAttr>(s);
  return f && f.getValue().isInfinity() && f.getValue().isNegative();
}

/// True where `k > 0` is known at `at`: a positive constant, a kernel
/// parameter declared `tile.positive` (tl.assume; the runtime checks it), a
/// product or quotient of such, or a value tested `k > 0` by an enclosing
/// scf.if whose then-region holds `at`.
bool isKnownPositive(OpFoldResult k, Operation *at) {
  if (!k)
    return false;
  if (auto attr = dyn_cast<Attribute>(k)) {
    auto f = dyn_cast<FloatAttr>(attr);
    return f && !f.getValue().isNaN() && !f.getValue().isNegative() && !f.getValue().isZero();
  }
  Value v = cast<Value>(k);
  FloatAttr cst;
  if (matchPattern(v, m_Constant(&cst)))
    return isKnownPositive(OpFoldResult(cst), at);
  if (auto mul = v.getDefiningOp<arith::MulFOp>())
    return isKnownPositive(mul.getLhs(), at) && isKnownPositive(mul.getRhs(), at);
  if (auto div = v.getDefiningOp<arith::DivFOp>())
    return isKnownPositive(div.getLhs(), at) && isKnownPositive(div.getRhs(), at);
  if (auto arg = dyn_cast<BlockArgument>(v))
    if (auto fn = dyn_cast_if_present<FunctionOpInterface>(arg.getOwner()->getParentOp()))
      if (arg.getOwner()->isEntryBlock() &&
          fn.getArgAttr(arg.getArgNumber(), tile::kPositiveAttrName))
        return true;
  for (Operation *p = at; p; p = p->getParentOp()) {
    auto ifOp = dyn_cast_if_present<scf::IfOp>(p->getParentOp());
    if (!ifOp || p->getParentRegion() != &ifOp.getThenRegion())
      continue;
    auto cmp = ifOp.getCondition().getDefiningOp<arith::CmpFOp>();
    FloatAttr bound;
    if (cmp && cmp.getLhs() == v &&
        (cmp.getPredicate() == arith::CmpFPredicate::OGT) &&
        matchPattern(cmp.getRhs(), m_Constant(&bound)) && !bound.getValue().isNegative())
      return true;
  }
  return false;
}

/// Moves the insertion point as far out of loops and ifs above `user` as the
/// definitions of `deps` allow, so scalar constants and their splats are
/// built once rather than every iteration.
void setHoistedInsertionPoint(OpBuilder &b, ArrayRef<Value> deps, Operation *user) {
  Operation *op = user;
  while (Operation *parent = op->getParentOp()) {
    if (isa<FunctionOpInterface>(parent) || !isa<scf::ForOp, scf::IfOp>(parent))
      break;
    bool invariant = llvm::all_of(deps, [&](Value v) {
      Operation *owner = v.getDefiningOp() ? v.getDefiningOp()
                                           : v.getParentBlock()->getParentOp();
      return !parent->isAncestor(owner);
    });
    if (!invariant)
      break;
    op = parent;
  }
  b.setInsertionPoint(op);
}

/// A tile of `type` equal to the scalar `k` everywhere, built where `k` is
/// available outside of loops.
Value materializeSplat(OpBuilder &b, Location loc, OpFoldResult k, RankedTensorType type,
                       Operation *user) {
  OpBuilder::InsertionGuard guard(b);
  if (auto attr = dyn_cast<Attribute>(k)) {
    setHoistedInsertionPoint(b, {}, user);
    auto f = cast<FloatAttr>(attr);
    return arith::ConstantOp::create(b, loc, DenseElementsAttr::get(type, f.getValue()));
  }
  Value v = cast<Value>(k);
  setHoistedInsertionPoint(b, {v}, user);
  return tile::SplatOp::create(b, loc, type, v);
}

/// k1 * k2, folded when both are constants, otherwise one scalar multiply
/// built outside the loops.
/// k1 * k2 (or k1 / k2 with `divide`) of two scalars: folded when both are
/// constants, else one op placed where both are available.
OpFoldResult combineScalars(OpBuilder &b, Location loc, OpFoldResult k1, OpFoldResult k2,
                            Type elementType, Operation *user, bool divide) {
  auto a1 = dyn_cast_if_present<FloatAttr>(dyn_cast<Attribute>(k1));
  auto a2 = dyn_cast_if_present<FloatAttr>(dyn_cast<Attribute>(k2));
  if (a1 && a2) {
    APFloat result = a1.getValue();
    if (divide)
      result.divide(a2.getValue(), APFloat::rmNearestTiesToEven);
    else
      result.multiply(a2.getValue(), APFloat::rmNearestTiesToEven);
    return FloatAttr::get(elementType, result);
  }
  auto toValue = [&](OpFoldResult k) -> Value {
    if (auto v = dyn_cast<Value>(k))
      return v;
    OpBuilder::InsertionGuard guard(b);
    setHoistedInsertionPoint(b, {}, user);
    return arith::ConstantOp::create(b, loc, cast<FloatAttr>(cast<Attribute>(k)));
  };
  Value v1 = toValue(k1), v2 = toValue(k2);
  OpBuilder::InsertionGuard guard(b);
  setHoistedInsertionPoint(b, {v1, v2}, user);
  if (divide)
    return arith::DivFOp::create(b, loc, v1, v2).getResult();
  return arith::MulFOp::create(b, loc, v1, v2).getResult();
}

OpFoldResult multiplyScalars(OpBuilder &b, Location loc, OpFoldResult k1, OpFoldResult k2,
                             Type elementType, Operation *user) {
  return combineScalars(b, loc, k1, k2, elementType, user, /*divide=*/false);
}

/// `x * splat(k)` (either operand order): returns x and k.
bool matchScaled(Value v, Value &x, OpFoldResult &k) {
  auto mul = v.getDefiningOp<arith::MulFOp>();
  if (!mul)
    return false;
  for (auto [a, s] : {std::pair(mul.getLhs(), mul.getRhs()), {mul.getRhs(), mul.getLhs()}})
    if (OpFoldResult kk = splatScalar(s)) {
      x = a;
      k = kk;
      return true;
    }
  return false;
}

bool isLoopInvariant(OpFoldResult k, scf::ForOp loop) {
  auto v = dyn_cast<Value>(k);
  return !v || loop.isDefinedOutsideOfLoop(v);
}

//===----------------------------------------------------------------------===//
// Phase 0: make the scale's sign known
//===----------------------------------------------------------------------===//

/// A K/V loop whose scores are scaled by a runtime value of unknown sign
/// before the row max: version it on `scale > 0` so the phase-1 patterns can
/// fire in the then-branch. The else-branch keeps the original loop.
struct VersionLoopOnScaleSign : OpRewritePattern<scf::ForOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(scf::ForOp loop, PatternRewriter &rewriter) const override {
    if (loop->hasAttr(tilec::kSoftmaxFallbackAttr))
      return failure();
    Value scale;
    loop.getBody()->walk([&](tile::ReduceOp reduce) {
      if (scale || reduce.getKind() != tile::ReduceKind::max)
        return;
      Value in = reduce.getInput(), x;
      if (auto sel = in.getDefiningOp<arith::SelectOp>())
        in = sel.getTrueValue();
      OpFoldResult k;
      if (!matchScaled(in, x, k) || !isa<Value>(k) || !isLoopInvariant(k, loop) ||
          isKnownPositive(k, reduce))
        return;
      scale = cast<Value>(k);
    });
    if (!scale)
      return rewriter.notifyMatchFailure(loop, "no row max of scores scaled by an unknown sign");
    Location loc = loop.getLoc();
    auto zero = arith::ConstantOp::create(rewriter, loc, rewriter.getFloatAttr(scale.getType(), 0.0));
    auto positive =
        arith::CmpFOp::create(rewriter, loc, arith::CmpFPredicate::OGT, scale, zero);
    auto ifOp = scf::IfOp::create(rewriter, loc, loop.getResultTypes(), positive,
                                  /*addThenBlock=*/true, /*addElseBlock=*/true);
    rewriter.setInsertionPointToStart(ifOp.thenBlock());
    Operation *fast = rewriter.clone(*loop);
    scf::YieldOp::create(rewriter, loc, fast->getResults());
    rewriter.setInsertionPointToStart(ifOp.elseBlock());
    Operation *slow = rewriter.clone(*loop);
    slow->setAttr(tilec::kSoftmaxFallbackAttr, rewriter.getUnitAttr());
    scf::YieldOp::create(rewriter, loc, slow->getResults());
    rewriter.replaceOp(loop, ifOp.getResults());
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Phase 1: the scale moves past the mask and the row max into the running max
//===----------------------------------------------------------------------===//

/// select(c, x*k, -inf) -> select(c, x, -inf)*k  for k > 0 (-inf*k = -inf).
/// Lets the max see the unscaled scores.
struct ScaleAfterMask : OpRewritePattern<arith::SelectOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(arith::SelectOp sel, PatternRewriter &rewriter) const override {
    Value x;
    OpFoldResult k;
    if (!isa<RankedTensorType>(sel.getType()) || !isNegInfSplat(sel.getFalseValue()) ||
        !matchScaled(sel.getTrueValue(), x, k) || !isKnownPositive(k, sel))
      return failure();
    auto masked = arith::SelectOp::create(rewriter, sel.getLoc(), sel.getCondition(), x,
                                          sel.getFalseValue());
    Value kt = materializeSplat(rewriter, sel.getLoc(), k, cast<RankedTensorType>(sel.getType()), sel);
    rewriter.replaceOpWithNewOp<arith::MulFOp>(sel, masked, kt);
    return success();
  }
};

/// rowmax(x*k) -> rowmax(x)*k  for k > 0: one multiply per row instead of
/// per element (exact in floating point too: rounding is monotone).
struct MaxOfScaled : OpRewritePattern<tile::ReduceOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(tile::ReduceOp reduce, PatternRewriter &rewriter) const override {
    Value x;
    OpFoldResult k;
    if (reduce.getKind() != tile::ReduceKind::max || !matchScaled(reduce.getInput(), x, k) ||
        !isKnownPositive(k, reduce))
      return failure();
    auto raw = tile::ReduceOp::create(rewriter, reduce.getLoc(), reduce.getType(),
                                      reduce.getKindAttr(), x, reduce.getAxisAttr());
    Value kt = materializeSplat(rewriter, reduce.getLoc(), k,
                                cast<RankedTensorType>(reduce.getType()), reduce);
    rewriter.replaceOpWithNewOp<arith::MulFOp>(reduce, raw, kt);
    return success();
  }
};

/// A running max updated as m' = max(m, r*k) (k > 0, loop-invariant, m
/// starting at -inf) is carried unscaled instead: mr' = max(mr, r), with
/// m = mr*k rebuilt where the old value was used. The multiplies are per
/// row; later patterns fold them into the per-element FMA's constant.
/// An update clamped from below by a constant, m' = max(max(m, r*k), c)
/// (how a kernel keeps rows that see no key yet finite), is carried as
/// mr' = max(max(mr, r), c/k): max(a*k, c) = max(a, c/k)*k for k > 0.
struct RunningMaxUnscaled : OpRewritePattern<scf::ForOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(scf::ForOp loop, PatternRewriter &rewriter) const override {
    auto yield = cast<scf::YieldOp>(loop.getBody()->getTerminator());
    for (unsigned i = 0, e = loop.getNumRegionIterArgs(); i < e; ++i) {
      BlockArgument m = loop.getRegionIterArgs()[i];
      auto mx = yield.getOperand(i).getDefiningOp<arith::MaximumFOp>();
      if (!mx || !isNegInfSplat(loop.getInitArgs()[i]))
        continue;
      // The optional clamp: mx = max(inner, c) with inner = max(m, r*k).
      arith::MaximumFOp clamp;
      OpFoldResult clampValue;
      if (mx.getLhs() != m && mx.getRhs() != m) {
        for (auto [inner, bound] : {std::pair(mx.getLhs(), mx.getRhs()), {mx.getRhs(), mx.getLhs()}}) {
          auto in = inner.getDefiningOp<arith::MaximumFOp>();
          OpFoldResult c = splatScalar(bound);
          if (in && in->hasOneUse() && (in.getLhs() == m || in.getRhs() == m) && c &&
              isa<Attribute>(c)) {
            clamp = mx;
            clampValue = c;
            mx = in;
            break;
          }
        }
      }
      Value other = mx.getLhs() == m ? mx.getRhs() : mx.getRhs() == m ? mx.getLhs() : Value();
      Value r;
      OpFoldResult k;
      if (!other || !matchScaled(other, r, k) || !isLoopInvariant(k, loop) ||
          !isKnownPositive(k, loop))
        continue;
      auto type = cast<RankedTensorType>(m.getType());
      Location loc = mx.getLoc();
      Value kt = materializeSplat(rewriter, loc, k, type, loop);
      // Inside: every old use of m sees mr*k.
      rewriter.setInsertionPointToStart(loop.getBody());
      auto mScaled = arith::MulFOp::create(rewriter, loc, m, kt);
      rewriter.replaceAllUsesExcept(m, mScaled.getResult(), mScaled);
      // The update runs on unscaled values; the old m' is its scaled copy.
      rewriter.setInsertionPoint(clamp ? clamp : mx);
      Value mxRaw = arith::MaximumFOp::create(rewriter, loc, m, r);
      Operation *update = mx;
      if (clamp) {
        OpFoldResult ck = combineScalars(rewriter, loc, clampValue, k, type.getElementType(), loop,
                                         /*divide=*/true);
        rewriter.setInsertionPoint(clamp);
        mxRaw = arith::MaximumFOp::create(rewriter, loc, mxRaw,
                                          materializeSplat(rewriter, loc, ck, type, loop));
        update = clamp;
      }
      auto mxScaled = arith::MulFOp::create(rewriter, loc, mxRaw, kt);
      rewriter.replaceAllUsesWith(update->getResult(0), mxScaled.getResult());
      rewriter.modifyOpInPlace(yield, [&] { yield.setOperand(i, mxRaw); });
      if (clamp)
        rewriter.eraseOp(clamp);
      if (mx->use_empty())
        rewriter.eraseOp(mx);
      // Outside: the loop's result is scaled once.
      rewriter.setInsertionPointAfter(loop);
      auto outScaled = arith::MulFOp::create(rewriter, loc, loop.getResult(i), kt);
      rewriter.replaceAllUsesExcept(loop.getResult(i), outScaled.getResult(), outScaled);
      return success();
    }
    return failure();
  }
};

//===----------------------------------------------------------------------===//
// Phase 2: exp -> exp2
//===----------------------------------------------------------------------===//

/// exp(x) -> exp2(x * log2(e)). Alone this adds a multiply; phase 3 folds it
/// into the scale constant, so that the hardware's ex2 is the only
/// transcendental per element.
struct ExpToExp2 : OpRewritePattern<math::ExpOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(math::ExpOp op, PatternRewriter &rewriter) const override {
    auto type = dyn_cast<RankedTensorType>(op.getType());
    // In the scale <= 0 copy nothing would fold the extra multiply away.
    auto loop = op->getParentOfType<scf::ForOp>();
    if (!type || !type.getElementType().isF32() || (loop && loop->hasAttr(tilec::kSoftmaxFallbackAttr)))
      return failure();
    auto log2e = FloatAttr::get(type.getElementType(), M_LOG2E);
    Value c = materializeSplat(rewriter, op.getLoc(), log2e, type, op);
    auto scaled = arith::MulFOp::create(rewriter, op.getLoc(), op.getOperand(), c);
    rewriter.replaceOpWithNewOp<math::Exp2Op>(op, scaled);
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Phase 3: fold the constants
//===----------------------------------------------------------------------===//

/// Peels `broadcast(expand_dims(v))` (the row-vector-to-tile idiom); the
/// returned callback rebuilds the same plumbing on another row vector.
Value peelRowBroadcast(Value v, std::function<Value(OpBuilder &, Value)> &rebuild) {
  auto bc = v.getDefiningOp<tile::BroadcastOp>();
  auto ex = bc ? bc.getInput().getDefiningOp<tile::ExpandDimsOp>() : tile::ExpandDimsOp();
  if (!ex) {
    rebuild = [](OpBuilder &, Value x) { return x; };
    return v;
  }
  rebuild = [bc, ex](OpBuilder &b, Value x) mutable -> Value {
    auto e = tile::ExpandDimsOp::create(b, ex.getLoc(), ex.getType(), x, ex.getAxisAttr());
    return tile::BroadcastOp::create(b, bc.getLoc(), bc.getType(), e);
  };
  return ex.getInput();
}

/// (x*k1 - y*k1) * k2 -> x*(k1*k2) - y*(k1*k2), y possibly a broadcast row.
/// This is FlashAttention-2's reassociation (paper §3.1): the softmax scale
/// and log2(e) become one constant, so exp2's argument is one multiply-add.
/// Exact in real arithmetic; in floating point it rounds k1*k2 once instead
/// of rounding x*k1 and the difference.
struct FoldScaleIntoDifference : OpRewritePattern<arith::MulFOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(arith::MulFOp mul, PatternRewriter &rewriter) const override {
    Value diff;
    OpFoldResult k2;
    if (!matchScaled(mul.getResult(), diff, k2))
      return failure();
    auto sub = diff.getDefiningOp<arith::SubFOp>();
    if (!sub || !sub->hasOneUse())
      return failure();
    std::function<Value(OpBuilder &, Value)> rebuild;
    Value x, y, rowY = peelRowBroadcast(sub.getRhs(), rebuild);
    OpFoldResult kx, ky;
    if (!matchScaled(sub.getLhs(), x, kx) || !matchScaled(rowY, y, ky) || !sameScalar(kx, ky))
      return failure();
    auto type = cast<RankedTensorType>(mul.getType());
    auto rowType = cast<RankedTensorType>(rowY.getType());
    OpFoldResult k12 = multiplyScalars(rewriter, mul.getLoc(), kx, k2, type.getElementType(), mul);
    Location loc = mul.getLoc();
    rewriter.setInsertionPoint(mul);
    auto xs = arith::MulFOp::create(rewriter, loc, x,
                                    materializeSplat(rewriter, loc, k12, type, mul));
    rewriter.setInsertionPoint(mul);
    Value ys = arith::MulFOp::create(rewriter, loc, y,
                                     materializeSplat(rewriter, loc, k12, rowType, mul));
    rewriter.setInsertionPoint(mul);
    rewriter.replaceOpWithNewOp<arith::SubFOp>(mul, xs, rebuild(rewriter, ys));
    return success();
  }
};

//===----------------------------------------------------------------------===//
// Phase 4: contraction and per-row normalization
//===----------------------------------------------------------------------===//

/// x*k - b -> fma(x, k, -b) and x*k + b -> fma(x, k, b) on tiles, with the
/// negation done on the row vector when b is a broadcast row. One multiply-add
/// per element (exact in real arithmetic; fma rounds once).
template <typename AddOrSub>
struct ContractToFma : OpRewritePattern<AddOrSub> {
  using OpRewritePattern<AddOrSub>::OpRewritePattern;
  LogicalResult matchAndRewrite(AddOrSub op, PatternRewriter &rewriter) const override {
    if (!isa<RankedTensorType>(op.getType()))
      return failure();
    constexpr bool isSub = std::is_same_v<AddOrSub, arith::SubFOp>;
    auto lhsMul = op.getLhs().template getDefiningOp<arith::MulFOp>();
    auto rhsMul = isSub ? arith::MulFOp() : op.getRhs().template getDefiningOp<arith::MulFOp>();
    arith::MulFOp mul = lhsMul ? lhsMul : rhsMul;
    if (!mul || !mul->hasOneUse())
      return failure();
    Value addend = mul == lhsMul ? op.getRhs() : op.getLhs();
    Location loc = op.getLoc();
    if (isSub) {
      std::function<Value(OpBuilder &, Value)> rebuild;
      Value row = peelRowBroadcast(addend, rebuild);
      rewriter.setInsertionPoint(op);
      addend = rebuild(rewriter, arith::NegFOp::create(rewriter, loc, row));
    }
    rewriter.replaceOpWithNewOp<math::FmaOp>(op, mul.getLhs(), mul.getRhs(), addend);
    return success();
  }
};

/// acc / broadcast(l) -> acc * broadcast(1/l): one division per row, one
/// multiply per element (exact in real arithmetic).
struct RowReciprocal : OpRewritePattern<arith::DivFOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(arith::DivFOp div, PatternRewriter &rewriter) const override {
    std::function<Value(OpBuilder &, Value)> rebuild;
    Value row = peelRowBroadcast(div.getRhs(), rebuild);
    if (row == div.getRhs() || !isa<RankedTensorType>(div.getType()))
      return failure();
    auto rowType = cast<RankedTensorType>(row.getType());
    auto one = arith::ConstantOp::create(
        rewriter, div.getLoc(),
        DenseElementsAttr::get(rowType, rewriter.getFloatAttr(rowType.getElementType(), 1.0)));
    auto inv = arith::DivFOp::create(rewriter, div.getLoc(), one, row);
    rewriter.replaceOpWithNewOp<arith::MulFOp>(div, div.getLhs(), rebuild(rewriter, inv));
    return success();
  }
};

struct TileMinimizeNonmatmul final
    : tilec::impl::TileMinimizeNonmatmulBase<TileMinimizeNonmatmul> {
  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    auto runPhase = [&](auto addPatterns) {
      RewritePatternSet patterns(ctx);
      addPatterns(patterns);
      return applyPatternsGreedily(getOperation(), std::move(patterns));
    };
    if (failed(runPhase([&](RewritePatternSet &p) { p.add<VersionLoopOnScaleSign>(ctx); })) ||
        failed(runPhase([&](RewritePatternSet &p) {
          p.add<ScaleAfterMask, MaxOfScaled, RunningMaxUnscaled>(ctx);
        })) ||
        failed(runPhase([&](RewritePatternSet &p) { p.add<ExpToExp2>(ctx); })) ||
        failed(runPhase([&](RewritePatternSet &p) { p.add<FoldScaleIntoDifference>(ctx); })) ||
        failed(runPhase([&](RewritePatternSet &p) {
          p.add<ContractToFma<arith::SubFOp>, ContractToFma<arith::AddFOp>, RowReciprocal>(ctx);
        })))
      signalPassFailure();
  }
};

} // namespace
