//===- SplitMaskedLoops.cpp - mask only the K/V blocks where it bites -----===//
//
// tile-split-masked-loops. In a loop over K/V blocks the mask
//
//   s' = select(p1 && p2 && ..., s, -inf)   p_i = cmpi(pred, A_i, B_i)
//
// compares index tiles that are affine in the element position (r, c), the
// loop variable j and loop-invariant scalars (program ids, sequence lengths).
// Each conjunct, brought to the form E(r, c, j) <= 0 with
//   E = er*r + ec*c + ej*j + base,
// is true on a whole block iff max_{r,c} E <= 0 and false on a whole block
// iff min_{r,c} E >= 1. Both bounds are linear in j, so the blocks where a
// conjunct is all-true, mixed and all-false are three intervals of j, ordered
// by the sign of ej. Intersecting the conjuncts gives, for the loop [lb, ub):
//
//   [lb, a) skipped | [a, b) masked | [b, d) no mask | [d, e) masked | [e, ub) skipped
//
// with the bounds computed at run time before the loop (ceil/floor divisions
// by the constant |ej|). Causal (cols <= rows) has ej > 0 only, so there is
// one masked range per row block (the diagonal) and everything above it is
// skipped. Index arithmetic is assumed not to overflow the loop variable's
// type (i32 sequence lengths).
//
// The loops it emits carry `tile.blocks` ("full"/"partial") and cover
// adjacent ranges whose bounds are clamped into a chain (each lower bound <=
// its upper bound, each upper bound the next loop's lower bound, as SSA
// values). tile-pipeline relies on that contract to hand one loop's last
// prefetch to the next.
//
// Skipping an all-false block is only correct because every score of it is
// -inf: an online-softmax update with such a block leaves the running max,
// sum and accumulator unchanged. The pass therefore skips only when the
// masked value is -inf and the loop body writes no memory; otherwise the
// all-false blocks stay in the masked loops.
//
//===----------------------------------------------------------------------===//
#include "dialects/Tile/TileDialect.h"
#include "tilec/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace tilec {
#define GEN_PASS_DEF_TILESPLITMASKEDLOOPS
#include "passes/Passes.h.inc"
} // namespace tilec

using namespace mlir;

namespace {

/// sum_d dim[d]*idx_d + iv*j + cst + sum_t coef_t*term_t.
struct Affine {
  SmallVector<int64_t> dim;
  int64_t iv = 0;
  int64_t cst = 0;
  SmallVector<std::pair<Value, int64_t>> terms;

  Affine scaled(int64_t k) const {
    Affine out = *this;
    for (int64_t &d : out.dim)
      d *= k;
    out.iv *= k;
    out.cst *= k;
    for (auto &t : out.terms)
      t.second *= k;
    return out;
  }
  Affine plus(const Affine &o) const {
    Affine out = *this;
    out.dim.resize(std::max(dim.size(), o.dim.size()), 0);
    for (size_t d = 0; d < o.dim.size(); ++d)
      out.dim[d] += o.dim[d];
    out.iv += o.iv;
    out.cst += o.cst;
    for (auto &t : o.terms) {
      auto it = llvm::find_if(out.terms, [&](auto &u) { return u.first == t.first; });
      if (it != out.terms.end())
        it->second += t.second;
      else
        out.terms.push_back(t);
    }
    return out;
  }
};

/// Affine form of index values in one loop; failures say why.
class AffineAnalysis {
public:
  AffineAnalysis(scf::ForOp loop) : loop(loop) {}
  std::string reason;

  FailureOr<Affine> scalar(Value v) {
    Affine a;
    IntegerAttr cst;
    if (v == loop.getInductionVar()) {
      a.iv = 1;
      return a;
    }
    if (matchPattern(v, m_Constant(&cst))) {
      a.cst = cst.getValue().getSExtValue();
      return a;
    }
    if (auto add = v.getDefiningOp<arith::AddIOp>())
      return combine(scalar(add.getLhs()), scalar(add.getRhs()), 1);
    if (auto sub = v.getDefiningOp<arith::SubIOp>())
      return combine(scalar(sub.getLhs()), scalar(sub.getRhs()), -1);
    if (auto mul = v.getDefiningOp<arith::MulIOp>()) {
      for (auto [x, k] : {std::pair(mul.getLhs(), mul.getRhs()), {mul.getRhs(), mul.getLhs()}})
        if (matchPattern(k, m_Constant(&cst))) {
          auto ax = scalar(x);
          if (failed(ax))
            return failure();
          return ax->scaled(cst.getValue().getSExtValue());
        }
    }
    if (v.getType() == loop.getInductionVar().getType() && loop.isDefinedOutsideOfLoop(v)) {
      a.terms.push_back({v, 1});
      return a;
    }
    return fail(v, "is not affine in the loop variable and loop-invariant scalars");
  }

  FailureOr<Affine> tileValue(Value v) {
    auto type = dyn_cast<RankedTensorType>(v.getType());
    if (!type)
      return scalar(v);
    DenseIntElementsAttr dense;
    if (matchPattern(v, m_Constant(&dense)) && dense.isSplat()) {
      Affine a;
      a.dim.assign(type.getRank(), 0);
      a.cst = dense.getSplatValue<APInt>().getSExtValue();
      return a;
    }
    if (v.getDefiningOp<tile::IotaOp>()) {
      Affine a;
      a.dim = {1};
      return a;
    }
    if (auto splat = v.getDefiningOp<tile::SplatOp>()) {
      auto a = scalar(splat.getValue());
      if (succeeded(a))
        a->dim.assign(type.getRank(), 0);
      return a;
    }
    if (auto ex = v.getDefiningOp<tile::ExpandDimsOp>()) {
      auto a = tileValue(ex.getInput());
      if (succeeded(a))
        a->dim.insert(a->dim.begin() + ex.getAxis(), 0);
      return a;
    }
    if (auto bc = v.getDefiningOp<tile::BroadcastOp>()) {
      auto a = tileValue(bc.getInput());
      if (succeeded(a)) {
        ArrayRef<int64_t> in = cast<RankedTensorType>(bc.getInput().getType()).getShape();
        for (size_t d = 0; d < in.size(); ++d)
          if (in[d] == 1)
            a->dim[d] = 0; // a size-1 dimension is always read at index 0
      }
      return a;
    }
    if (auto add = v.getDefiningOp<arith::AddIOp>())
      return combine(tileValue(add.getLhs()), tileValue(add.getRhs()), 1);
    if (auto sub = v.getDefiningOp<arith::SubIOp>())
      return combine(tileValue(sub.getLhs()), tileValue(sub.getRhs()), -1);
    if (auto mul = v.getDefiningOp<arith::MulIOp>()) {
      for (auto [x, k] : {std::pair(mul.getLhs(), mul.getRhs()), {mul.getRhs(), mul.getLhs()}})
        if (matchPattern(k, m_Constant(&dense)) && dense.isSplat()) {
          auto ax = tileValue(x);
          if (failed(ax))
            return failure();
          return ax->scaled(dense.getSplatValue<APInt>().getSExtValue());
        }
    }
    return fail(v, "is not an affine index tile (iota, splat, expand_dims, broadcast, "
                   "addi/subi, muli by a constant)");
  }

private:
  scf::ForOp loop;
  FailureOr<Affine> combine(FailureOr<Affine> a, FailureOr<Affine> b, int64_t sign) {
    if (failed(a) || failed(b))
      return failure();
    return a->plus(b->scaled(sign));
  }
  FailureOr<Affine> fail(Value v, StringRef why) {
    if (reason.empty()) {
      llvm::raw_string_ostream os(reason);
      if (Operation *def = v.getDefiningOp())
        os << "'" << def->getName() << "' result " << why;
      else
        os << "block argument #" << cast<BlockArgument>(v).getArgNumber() << " of '"
           << v.getParentBlock()->getParentOp()->getName() << "' " << why;
    }
    return failure();
  }
};

/// One conjunct, in the form E <= 0 over a block, E's extremes over the
/// tile's elements split into the runtime part (iv, terms, cst) and the
/// constant spread from the position coefficients.
struct Conjunct {
  Affine e;
  int64_t spreadMax = 0, spreadMin = 0;
};

/// Emits the integer bounds, folding constants as it goes. x / k for a
/// constant k > 0, rounded down or up.
class BoundBuilder {
public:
  BoundBuilder(OpBuilder &b, Location loc, Type type) : b(b), loc(loc), type(type) {}
  Value cst(int64_t v) { return arith::ConstantOp::create(b, loc, b.getIntegerAttr(type, v)); }
  Value add(Value x, Value y) { return b.createOrFold<arith::AddIOp>(loc, x, y); }
  Value sub(Value x, Value y) { return b.createOrFold<arith::SubIOp>(loc, x, y); }
  Value mul(Value x, int64_t k) { return k == 1 ? x : b.createOrFold<arith::MulIOp>(loc, x, cst(k)); }
  Value max(Value x, Value y) { return b.createOrFold<arith::MaxSIOp>(loc, x, y); }
  Value min(Value x, Value y) { return b.createOrFold<arith::MinSIOp>(loc, x, y); }
  Value clamp(Value x, Value lo, Value hi) { return min(max(x, lo), hi); }
  Value floorDiv(Value x, int64_t k) {
    if (k == 1)
      return x;
    Value q = b.createOrFold<arith::DivSIOp>(loc, x, cst(k));
    Value r = b.createOrFold<arith::RemSIOp>(loc, x, cst(k));
    Value neg = b.createOrFold<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, r, cst(0));
    return add(q, b.createOrFold<arith::SelectOp>(loc, neg, cst(-1), cst(0)));
  }
  Value ceilDiv(Value x, int64_t k) {
    if (k == 1)
      return x;
    Value q = b.createOrFold<arith::DivSIOp>(loc, x, cst(k));
    Value r = b.createOrFold<arith::RemSIOp>(loc, x, cst(k));
    Value pos = b.createOrFold<arith::CmpIOp>(loc, arith::CmpIPredicate::sgt, r, cst(0));
    return add(q, b.createOrFold<arith::SelectOp>(loc, pos, cst(1), cst(0)));
  }
  /// cst + sum of terms: the part of E that is neither position nor iv.
  Value base(const Affine &a) {
    Value v = cst(a.cst);
    for (auto [t, k] : a.terms)
      v = add(v, mul(t, k));
    return v;
  }

private:
  OpBuilder &b;
  Location loc;
  Type type;
};

/// Splits the conjunction `cond` into cmpi's; fails on anything else.
LogicalResult collectConjuncts(Value cond, SmallVectorImpl<arith::CmpIOp> &out,
                               std::string &reason) {
  if (auto andOp = cond.getDefiningOp<arith::AndIOp>())
    return success(succeeded(collectConjuncts(andOp.getLhs(), out, reason)) &&
                   succeeded(collectConjuncts(andOp.getRhs(), out, reason)));
  if (auto cmp = cond.getDefiningOp<arith::CmpIOp>()) {
    out.push_back(cmp);
    return success();
  }
  // A comparison made on a row or column vector and broadcast (what the DSL
  // writes for `cols < seqlen_k`) holds or fails along the broadcast
  // dimension uniformly: analyse the comparison itself.
  if (auto broadcast = cond.getDefiningOp<tile::BroadcastOp>())
    return collectConjuncts(broadcast.getInput(), out, reason);
  if (auto expand = cond.getDefiningOp<tile::ExpandDimsOp>())
    return collectConjuncts(expand.getInput(), out, reason);
  reason = "the predicate is not a conjunction of arith.cmpi";
  return failure();
}

FailureOr<Conjunct> analyseCmp(arith::CmpIOp cmp, AffineAnalysis &analysis,
                               std::string &reason) {
  auto lhs = analysis.tileValue(cmp.getLhs());
  auto rhs = analysis.tileValue(cmp.getRhs());
  if (failed(lhs) || failed(rhs)) {
    reason = analysis.reason;
    return failure();
  }
  Affine d = lhs->plus(rhs->scaled(-1));
  Conjunct c;
  switch (cmp.getPredicate()) {
  case arith::CmpIPredicate::slt: c.e = d; c.e.cst += 1; break; // d < 0  <=> d + 1 <= 0
  case arith::CmpIPredicate::sle: c.e = d; break;
  case arith::CmpIPredicate::sgt: c.e = d.scaled(-1); c.e.cst += 1; break;
  case arith::CmpIPredicate::sge: c.e = d.scaled(-1); break;
  default:
    reason = "only signed <, <=, >, >= comparisons are analysed, got '" +
             arith::stringifyCmpIPredicate(cmp.getPredicate()).str() + "'";
    return failure();
  }
  if (c.e.iv == 0) {
    reason = "a comparison does not depend on the loop variable";
    return failure();
  }
  auto shape = cast<RankedTensorType>(cmp.getLhs().getType()).getShape();
  c.e.dim.resize(shape.size(), 0);
  for (size_t i = 0; i < shape.size(); ++i) {
    c.spreadMax += std::max<int64_t>(0, c.e.dim[i] * (shape[i] - 1));
    c.spreadMin += std::min<int64_t>(0, c.e.dim[i] * (shape[i] - 1));
  }
  return c;
}

bool writesMemory(Operation *root) {
  bool writes = false;
  root->walk([&](Operation *op) {
    auto effects = dyn_cast<MemoryEffectOpInterface>(op);
    if (effects ? effects.hasEffect<MemoryEffects::Write>()
                : !op->hasTrait<OpTrait::HasRecursiveMemoryEffects>() &&
                      op->getNumRegions() == 0 && !isMemoryEffectFree(op))
      writes = true;
  });
  return writes;
}

struct TileSplitMaskedLoops final
    : tilec::impl::TileSplitMaskedLoopsBase<TileSplitMaskedLoops> {
  void runOnOperation() override {
    SmallVector<scf::ForOp> loops;
    getOperation()->walk([&](scf::ForOp loop) {
      if (!loop->hasAttr(tilec::kBlocksAttr))
        loops.push_back(loop);
    });
    for (scf::ForOp loop : loops)
      splitLoop(loop);
  }

  void splitLoop(scf::ForOp loop) {
    SmallVector<arith::SelectOp> masks;
    for (Operation &op : *loop.getBody())
      if (auto sel = dyn_cast<arith::SelectOp>(op))
        if (isa<RankedTensorType>(sel.getCondition().getType()) &&
            isa<FloatType>(getElementTypeOrSelf(sel.getType())))
          masks.push_back(sel);
    if (masks.empty())
      return;
    auto remark = [&](Operation *at, const Twine &why) {
      at->emitRemark() << "mask stays applied in every iteration: " << why;
    };
    if (masks.size() > 1)
      return remark(masks[1], "the loop has more than one masking select");
    arith::SelectOp mask = masks.front();

    std::optional<int64_t> step = getConstantIntValue(loop.getStep());
    if (!step || *step != 1)
      return remark(mask, "the loop step is not the constant 1");

    SmallVector<arith::CmpIOp> cmps;
    std::string reason;
    if (failed(collectConjuncts(mask.getCondition(), cmps, reason)))
      return remark(mask, reason);
    AffineAnalysis analysis(loop);
    SmallVector<Conjunct> conjuncts;
    for (arith::CmpIOp cmp : cmps) {
      auto c = analyseCmp(cmp, analysis, reason);
      if (failed(c))
        return remark(mask, reason);
      conjuncts.push_back(*c);
    }

    // A true-value of the select that is -inf where masked and a body
    // without stores make all-false blocks no-ops (see the file comment).
    DenseFPElementsAttr falseValue;
    bool canSkip = matchPattern(mask.getFalseValue(), m_Constant(&falseValue)) &&
                   falseValue.isSplat() && falseValue.getSplatValue<APFloat>().isInfinity() &&
                   falseValue.getSplatValue<APFloat>().isNegative() && !writesMemory(loop);

    OpBuilder b(loop);
    Location loc = loop.getLoc();
    BoundBuilder bb(b, loc, loop.getInductionVar().getType());
    Value fullLo, fullHi, skipLo, skipHi;
    auto tighten = [&](Value &bound, Value v, bool isLower) {
      bound = !bound ? v : isLower ? bb.max(bound, v) : bb.min(bound, v);
    };
    for (const Conjunct &c : conjuncts) {
      Value base = bb.base(c.e);
      int64_t k = std::abs(c.e.iv);
      if (c.e.iv > 0) {
        // all true iff k*j + base + spreadMax <= 0; all false iff k*j + base + spreadMin >= 1
        Value negMax = bb.sub(bb.cst(-c.spreadMax), base);
        tighten(fullHi, bb.add(bb.floorDiv(negMax, k), bb.cst(1)), false);
        if (canSkip)
          tighten(skipHi, bb.ceilDiv(bb.sub(bb.cst(1 - c.spreadMin), base), k), false);
      } else {
        // all true iff -k*j + base + spreadMax <= 0; all false iff -k*j + base + spreadMin >= 1
        tighten(fullLo, bb.ceilDiv(bb.add(base, bb.cst(c.spreadMax)), k), true);
        if (canSkip)
          tighten(skipLo,
                  bb.add(bb.floorDiv(bb.add(base, bb.cst(c.spreadMin - 1)), k), bb.cst(1)),
                  true);
      }
    }
    Value lb = loop.getLowerBound(), ub = loop.getUpperBound();
    Value a = skipLo ? bb.clamp(skipLo, lb, ub) : lb;
    Value e = skipHi ? bb.clamp(skipHi, a, ub) : ub;
    Value bnd = fullLo ? bb.clamp(fullLo, a, e) : a;
    Value d = fullHi ? bb.clamp(fullHi, bnd, e) : e;

    ValueRange carried = loop.getInitArgs();
    auto emit = [&](Value from, Value to, bool masked) {
      IRMapping map;
      auto copy = cast<scf::ForOp>(b.clone(*loop, map));
      copy.setLowerBound(from);
      copy.setUpperBound(to);
      copy.getInitArgsMutable().assign(carried);
      copy->setAttr(tilec::kBlocksAttr, b.getStringAttr(masked ? "partial" : "full"));
      if (!masked) {
        auto sel = cast<arith::SelectOp>(map.lookup(mask.getResult()).getDefiningOp());
        sel.getResult().replaceAllUsesWith(sel.getTrueValue());
        sel.erase();
      }
      carried = copy.getResults();
    };
    if (fullLo)
      emit(a, bnd, /*masked=*/true);
    emit(bnd, d, /*masked=*/false);
    if (fullHi)
      emit(d, e, /*masked=*/true);
    loop.replaceAllUsesWith(carried);
    loop.erase();
  }
};

} // namespace
