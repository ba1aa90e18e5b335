//===- MaskAnalysis.h - affine masks over K/V blocks -----------*- C++ -*-===//
//
// The closed form of tile-split-masked-loops (SplitMaskedLoops.cpp's file
// comment): index tiles affine in the element position, the loop variable
// and loop-invariant scalars, and one comparison of them brought to E <= 0.
// Shared with tile-skip-warp-blocks, which bounds the same E over one
// warp's elements instead of the whole tile.
//
//===----------------------------------------------------------------------===//
#ifndef TILEC_PASSES_MASKANALYSIS_H
#define TILEC_PASSES_MASKANALYSIS_H

#include "dialects/Tile/TileDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Matchers.h"

#include <string>
#include <vector>

namespace tilec::masks {

using namespace mlir;

struct FloorTerm;

/// sum_d dim[d]*idx_d + iv*j + cst + sum_t coef_t*term_t
///   + sum_f coef_f * (inner_f / C_f)   (arith.divsi of a loop-invariant index)
struct Affine {
  SmallVector<int64_t> dim;
  int64_t iv = 0;
  int64_t cst = 0;
  SmallVector<std::pair<Value, int64_t>> terms;
  std::vector<FloorTerm> floors; // std::vector: FloorTerm is incomplete here

  Affine scaled(int64_t k) const;
  Affine plus(const Affine &o) const;
};

/// coef * (inner / divisor), inner affine with no loop variable and no
/// floors of its own: over a block it lies between the divisions of
/// inner's extremes (signed division is monotone).
struct FloorTerm {
  Affine inner;
  int64_t divisor = 1;
  int64_t coef = 1;
};

inline Affine Affine::scaled(int64_t k) const {
    Affine out = *this;
    for (int64_t &d : out.dim)
      d *= k;
    out.iv *= k;
    out.cst *= k;
    for (auto &t : out.terms)
      t.second *= k;
    for (FloorTerm &f : out.floors)
      f.coef *= k;
    return out;
}

inline Affine Affine::plus(const Affine &o) const {
    Affine out = *this;
    out.floors.insert(out.floors.end(), o.floors.begin(), o.floors.end());
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
          if (in[d] == 1) {
            a->dim[d] = 0; // a size-1 dimension is always read at index 0
            for (FloorTerm &f : a->floors)
              if (d < f.inner.dim.size())
                f.inner.dim[d] = 0;
          }
      }
      return a;
    }
    if (auto div = v.getDefiningOp<arith::DivSIOp>()) {
      if (matchPattern(div.getRhs(), m_Constant(&dense)) && dense.isSplat() &&
          dense.getSplatValue<APInt>().getSExtValue() > 0) {
        auto inner = tileValue(div.getLhs());
        if (failed(inner))
          return failure();
        if (inner->iv != 0 || !inner->floors.empty())
          return fail(v, "divides an index that depends on the loop variable (analysed "
                         "only as a whole side of a comparison)");
        Affine a;
        a.dim.assign(type.getRank(), 0);
        a.floors.push_back({*inner, dense.getSplatValue<APInt>().getSExtValue(), 1});
        return a;
      }
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
                   "addi/subi, muli or divsi by a constant)");
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
inline LogicalResult collectConjuncts(Value cond, SmallVectorImpl<arith::CmpIOp> &out,
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

inline FailureOr<Conjunct> analyseCmp(arith::CmpIOp cmp, AffineAnalysis &analysis,
                               std::string &reason) {
  auto lhs = analysis.tileValue(cmp.getLhs());
  auto rhs = analysis.tileValue(cmp.getRhs());
  if (failed(lhs) || failed(rhs)) {
    reason = analysis.reason;
    return failure();
  }
  Affine d = lhs->plus(rhs->scaled(-1));
  if (!d.floors.empty()) {
    reason = "a comparison of divided indices";
    return failure();
  }
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

} // namespace tilec::masks

#endif // TILEC_PASSES_MASKANALYSIS_H
