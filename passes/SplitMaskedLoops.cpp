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
// That closed form covers one mask that is a conjunction of affine
// comparisons. Everything else goes through splitGeneral (below): for each
// node of the predicate it computes, as run-time intervals of j before the
// loop, where the node is true on the whole block (`full`) and outside of
// which it is false on the whole block (`live`). A comparison gives the
// one-sided intervals above (`==` is two); `x / C` of a loop-invariant index
// is bounded by dividing x's extremes (signed division is monotone) and
// `kv / C` against an integer is rewritten pointwise (kv / C <= t iff
// kv <= C*t + C - 1, for dividends that cannot be negative); a comparison
// without j is a per-program constant (all or nothing); `&` intersects; `|`
// takes the hull of the live intervals and, for full, both when they touch,
// else the longer (a subset of the union). What it cannot analyse has no
// full blocks and is live everywhere. With several -inf masks a block is
// full when it is full for every mask; a mask whose true value is another's
// result (a chain) hides what that one hid.
//
// Skipping an all-false block is only correct because every score of it is
// -inf: an online-softmax update with such a block leaves the running max,
// sum and accumulator unchanged. The pass therefore skips only when the
// masked value is -inf and the loop body writes no memory, except atomic adds
// of values computed from the mask (FA2's dQ accumulation, the same argument
// as for accumulators carried by the loop); otherwise the all-false blocks
// stay in the masked loops.
//
//===----------------------------------------------------------------------===//
#include "dialects/Tile/TileDialect.h"
#include "tilec/Passes.h"
#include "MaskAnalysis.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringSwitch.h"

namespace tilec {
#define GEN_PASS_DEF_TILESPLITMASKEDLOOPS
#include "passes/Passes.h.inc"
} // namespace tilec

using namespace mlir;
using namespace tilec::masks;

namespace {


/// Whether `value` is computed, inside `loop`, from one of `masks`.
bool dependsOnMask(Value value, scf::ForOp loop, ArrayRef<arith::SelectOp> masks) {
  SmallVector<Value> work{value};
  DenseSet<Value> seen;
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (!seen.insert(v).second)
      continue;
    Operation *def = v.getDefiningOp();
    if (!def || !loop->isProperAncestor(def))
      continue;
    if (llvm::any_of(masks, [&](arith::SelectOp m) { return m.getOperation() == def; }))
      return true;
    llvm::append_range(work, def->getOperands());
  }
  return false;
}

/// Whether the loop body writes memory in a way that makes skipping an
/// all-false block wrong. A tile.atomic_add of a value computed from a mask
/// is the block's contribution to an accumulator in memory (FA2's dQ): as
/// for the loop-carried accumulators, an all -inf block contributes nothing
/// (P = 0, so dS = 0 and dSᵀ·K = 0), and skipping it is correct. Any other
/// write (a store, an add of something else) keeps every block.
bool writesMemory(Operation *root, ArrayRef<arith::SelectOp> masks = {}) {
  auto loop = dyn_cast<scf::ForOp>(root);
  bool writes = false;
  root->walk([&](Operation *op) {
    if (auto add = dyn_cast<tile::AtomicAddOp>(op);
        add && loop && !masks.empty() && dependsOnMask(add.getValue(), loop, masks))
      return;
    auto effects = dyn_cast<MemoryEffectOpInterface>(op);
    if (effects ? effects.hasEffect<MemoryEffects::Write>()
                : !op->hasTrait<OpTrait::HasRecursiveMemoryEffects>() &&
                      op->getNumRegions() == 0 && !isMemoryEffectFree(op))
      writes = true;
  });
  return writes;
}

//===----------------------------------------------------------------------===//
// The general case: any number of -inf masks, predicates built with & and |
// from comparisons (affine, divided by a constant, or independent of the
// loop variable), parts that cannot be analysed.
//===----------------------------------------------------------------------===//

/// How a loop's mask ended up, worst last (the kernel's tile.mask attribute):
/// Split when some blocks run unmasked, Dense when every block that runs is
/// masked (blocks the mask hides entirely may still be skipped).
enum class MaskKind { None, Split, Dense };
int rank(MaskKind k) { return static_cast<int>(k); }
StringRef maskKindName(MaskKind k) {
  switch (k) {
  case MaskKind::None: return "none";
  case MaskKind::Split: return "split";
  case MaskKind::Dense: return "dense";
  }
  return "dense";
}
MaskKind parseMaskKind(StringRef s) {
  return llvm::StringSwitch<MaskKind>(s)
      .Case("none", MaskKind::None)
      .Case("split", MaskKind::Split)
      .Default(MaskKind::Dense);
}

/// Iterations [lo, hi) of the loop; lo >= hi is empty. Unbounded sides are
/// the loop's own bounds.
struct Interval {
  Value lo, hi;
};

/// What a predicate says about blocks: it is true on the whole block for
/// every iteration in `full`, and false on the whole block for every
/// iteration outside `live`. Statically, `fullPossible` is false when `full`
/// is known empty and `liveBounded` false when `live` is the whole loop.
struct BlockSets {
  Interval full, live;
  bool fullPossible = false, liveBounded = false;
};

/// One comparison as k*j + E <= 0, with E's maximum (hi) and minimum (lo)
/// over the block's elements, both before the loop.
struct Bound {
  int64_t k = 0;
  Value hi, lo;
};

class PredicateAnalysis {
public:
  PredicateAnalysis(OpBuilder &b, Location loc, scf::ForOp loop, bool canSkip)
      : b(b), loc(loc), bb(b, loc, loop.getInductionVar().getType()), analysis(loop),
        lb(loop.getLowerBound()), ub(loop.getUpperBound()), canSkip(canSkip) {}

  /// What could not be classified: the op (for its location) and why.
  SmallVector<std::pair<Location, std::string>> unknown;

  BlockSets analyse(Value cond) {
    if (auto op = cond.getDefiningOp<arith::AndIOp>())
      return both(analyse(op.getLhs()), analyse(op.getRhs()));
    if (auto op = cond.getDefiningOp<arith::OrIOp>())
      return either(analyse(op.getLhs()), analyse(op.getRhs()));
    if (auto op = cond.getDefiningOp<tile::BroadcastOp>())
      return analyse(op.getInput());
    if (auto op = cond.getDefiningOp<tile::ExpandDimsOp>())
      return analyse(op.getInput());
    if (auto cmp = cond.getDefiningOp<arith::CmpIOp>()) {
      std::string reason;
      auto bounds = analyseCmp(cmp, reason);
      if (failed(bounds))
        return unknownSets(cmp.getLoc(), reason);
      BlockSets sets = fromBound((*bounds)[0]);
      for (const Bound &bound : ArrayRef(*bounds).drop_front())
        sets = both(sets, fromBound(bound));
      return sets;
    }
    DenseIntElementsAttr dense;
    if (matchPattern(cond, m_Constant(&dense)) && dense.isSplat() &&
        dense.getSplatValue<APInt>().getBoolValue())
      return {all(), all(), true, false};
    Operation *def = cond.getDefiningOp();
    return unknownSets(def ? def->getLoc() : b.getUnknownLoc(),
                       def ? "'" + def->getName().getStringRef().str() +
                                 "' is not a comparison, '&' or '|' of index tiles"
                           : "a block argument is not a comparison of index tiles");
  }

  Interval all() { return {lb, ub}; }
  Interval empty() { return {ub, lb}; }
  Value isEmpty(Interval r) { return cmp(arith::CmpIPredicate::sge, r.lo, r.hi); }
  Interval select(Value c, Interval x, Interval y) {
    return {b.createOrFold<arith::SelectOp>(loc, c, x.lo, y.lo),
            b.createOrFold<arith::SelectOp>(loc, c, x.hi, y.hi)};
  }
  Interval intersect(Interval x, Interval y) { return {bb.max(x.lo, y.lo), bb.min(x.hi, y.hi)}; }

  /// The smallest interval holding both (a superset of the union).
  Interval hull(Interval x, Interval y) {
    Interval h{bb.min(x.lo, y.lo), bb.max(x.hi, y.hi)};
    return select(isEmpty(x), y, select(isEmpty(y), x, h));
  }
  /// An interval inside the union: both when they touch, else the longer.
  Interval inUnion(Interval x, Interval y) {
    Value touch = cmp(arith::CmpIPredicate::sle, bb.max(x.lo, y.lo), bb.min(x.hi, y.hi));
    Value xLonger = cmp(arith::CmpIPredicate::sge, bb.sub(x.hi, x.lo), bb.sub(y.hi, y.lo));
    Interval h{bb.min(x.lo, y.lo), bb.max(x.hi, y.hi)};
    Interval apart = select(xLonger, x, y);
    return select(isEmpty(x), y, select(isEmpty(y), x, select(touch, h, apart)));
  }

  BlockSets both(const BlockSets &x, const BlockSets &y) {
    BlockSets out;
    out.fullPossible = x.fullPossible && y.fullPossible;
    out.full = out.fullPossible ? intersect(x.full, y.full) : empty();
    out.liveBounded = x.liveBounded || y.liveBounded;
    out.live = !x.liveBounded ? y.live : !y.liveBounded ? x.live : intersect(x.live, y.live);
    return out;
  }
  BlockSets either(const BlockSets &x, const BlockSets &y) {
    BlockSets out;
    out.fullPossible = x.fullPossible || y.fullPossible;
    out.full = !x.fullPossible ? y.full : !y.fullPossible ? x.full : inUnion(x.full, y.full);
    out.liveBounded = x.liveBounded && y.liveBounded;
    out.live = out.liveBounded ? hull(x.live, y.live) : all();
    return out;
  }

  BoundBuilder &bounds() { return bb; }

private:
  OpBuilder &b;
  Location loc;
  BoundBuilder bb;
  AffineAnalysis analysis;
  Value lb, ub;
  bool canSkip;

  Value cmp(arith::CmpIPredicate pred, Value x, Value y) {
    return b.createOrFold<arith::CmpIOp>(loc, pred, x, y);
  }

  BlockSets unknownSets(Location at, StringRef why) {
    unknown.push_back({at, why.str()});
    return {empty(), all(), false, false};
  }

  BlockSets fromBound(const Bound &c) {
    BlockSets s;
    s.fullPossible = true;
    s.liveBounded = canSkip;
    int64_t k = std::abs(c.k);
    if (c.k > 0) {
      // all true iff k*j + hi <= 0; all false iff k*j + lo >= 1
      s.full = {lb, bb.add(bb.floorDiv(bb.sub(bb.cst(0), c.hi), k), bb.cst(1))};
      s.live = {lb, bb.ceilDiv(bb.sub(bb.cst(1), c.lo), k)};
    } else if (c.k < 0) {
      s.full = {bb.ceilDiv(c.hi, k), ub};
      s.live = {bb.add(bb.floorDiv(bb.sub(c.lo, bb.cst(1)), k), bb.cst(1)), ub};
    } else {
      // The same for every block of this program (a per-program constant).
      s.full = select(cmp(arith::CmpIPredicate::sle, c.hi, bb.cst(0)), all(), empty());
      s.live = select(cmp(arith::CmpIPredicate::sge, c.lo, bb.cst(1)), empty(), all());
    }
    if (!canSkip)
      s.live = all();
    return s;
  }

  /// lhs / C with C a constant > 0 and lhs depending on the loop variable.
  std::optional<std::pair<Affine, int64_t>> ivDivision(Value v) {
    while (auto bc = v.getDefiningOp<tile::BroadcastOp>())
      v = bc.getInput();
    auto div = v.getDefiningOp<arith::DivSIOp>();
    DenseIntElementsAttr dense;
    if (!div || !matchPattern(div.getRhs(), m_Constant(&dense)) || !dense.isSplat() ||
        dense.getSplatValue<APInt>().getSExtValue() <= 0)
      return std::nullopt;
    auto x = analysis.tileValue(div.getLhs());
    analysis.reason.clear();
    if (failed(x) || x->iv == 0 || !x->floors.empty())
      return std::nullopt;
    return std::pair(*x, dense.getSplatValue<APInt>().getSExtValue());
  }

  FailureOr<SmallVector<Bound>> analyseCmp(arith::CmpIOp cmp, std::string &reason) {
    using P = arith::CmpIPredicate;
    P pred = cmp.getPredicate();
    auto swapped = [](P p) {
      switch (p) {
      case P::slt: return P::sgt;
      case P::sle: return P::sge;
      case P::sgt: return P::slt;
      case P::sge: return P::sle;
      default: return p;
      }
    };
    if (!llvm::is_contained({P::slt, P::sle, P::sgt, P::sge, P::eq}, pred)) {
      reason = "only signed <, <=, >, >= and == comparisons are analysed, got '" +
               arith::stringifyCmpIPredicate(pred).str() + "'";
      return failure();
    }
    SmallVector<Affine> forms; // each E <= 0
    Value lhs = cmp.getLhs(), rhs = cmp.getRhs();
    auto division = ivDivision(lhs);
    if (!division) {
      if ((division = ivDivision(rhs))) {
        std::swap(lhs, rhs);
        pred = swapped(pred);
      }
    }
    analysis.reason.clear();
    if (division) {
      // floor(X/C) against an integer B, rewritten pointwise into X's terms:
      // X/C <= B iff X <= C*B + C - 1 and X/C >= B iff X >= C*B. Exact for
      // X >= 0 (division truncates), which the form of X guarantees.
      Affine x = division->first;
      int64_t c = division->second;
      if (x.iv < 0 || x.cst < 0 || !x.terms.empty() ||
          llvm::any_of(x.dim, [](int64_t d) { return d < 0; })) {
        reason = "divides an index that may be negative";
        return failure();
      }
      auto other = analysis.tileValue(rhs);
      if (failed(other)) {
        reason = analysis.reason;
        return failure();
      }
      Affine cb = other->scaled(c);
      auto le = [&](int64_t off) { Affine e = x.plus(cb.scaled(-1)); e.cst -= off; return e; };
      auto ge = [&](int64_t off) { Affine e = cb.plus(x.scaled(-1)); e.cst += off; return e; };
      switch (pred) {
      case P::sle: forms.push_back(le(c - 1)); break;
      case P::slt: forms.push_back(le(-1)); break;
      case P::sge: forms.push_back(ge(0)); break;
      case P::sgt: forms.push_back(ge(c)); break;
      default: forms.push_back(le(c - 1)); forms.push_back(ge(0)); break;
      }
    } else {
      auto l = analysis.tileValue(lhs);
      auto r = succeeded(l) ? analysis.tileValue(rhs) : FailureOr<Affine>(failure());
      if (failed(l) || failed(r)) {
        reason = analysis.reason;
        return failure();
      }
      Affine d = l->plus(r->scaled(-1));
      Affine nd = d.scaled(-1);
      switch (pred) {
      case P::slt: d.cst += 1; forms.push_back(d); break;
      case P::sle: forms.push_back(d); break;
      case P::sgt: nd.cst += 1; forms.push_back(nd); break;
      case P::sge: forms.push_back(nd); break;
      default: forms.push_back(d); forms.push_back(nd); break;
      }
    }
    ArrayRef<int64_t> shape = cast<RankedTensorType>(cmp.getLhs().getType()).getShape();
    SmallVector<Bound> out;
    for (Affine &e : forms)
      out.push_back(extremes(e, shape));
    return out;
  }

  /// E's maximum and minimum over the block's elements, as values before
  /// the loop (without the k*j part).
  Bound extremes(Affine e, ArrayRef<int64_t> shape) {
    auto spread = [&](Affine &a, bool high) {
      a.dim.resize(shape.size(), 0);
      int64_t s = 0;
      for (size_t i = 0; i < shape.size(); ++i)
        s += high ? std::max<int64_t>(0, a.dim[i] * (shape[i] - 1))
                  : std::min<int64_t>(0, a.dim[i] * (shape[i] - 1));
      return s;
    };
    Bound out;
    out.k = e.iv;
    Value base = bb.base(e);
    out.hi = bb.add(base, bb.cst(spread(e, true)));
    out.lo = bb.add(base, bb.cst(spread(e, false)));
    for (FloorTerm &f : e.floors) {
      Value innerBase = bb.base(f.inner);
      Value innerHi = bb.add(innerBase, bb.cst(spread(f.inner, true)));
      Value innerLo = bb.add(innerBase, bb.cst(spread(f.inner, false)));
      Value qHi = b.createOrFold<arith::DivSIOp>(loc, innerHi, bb.cst(f.divisor));
      Value qLo = b.createOrFold<arith::DivSIOp>(loc, innerLo, bb.cst(f.divisor));
      out.hi = bb.add(out.hi, bb.mul(f.coef > 0 ? qHi : qLo, f.coef));
      out.lo = bb.add(out.lo, bb.mul(f.coef > 0 ? qLo : qHi, f.coef));
    }
    return out;
  }
};

/// Erases the side-effect-free ops between `from` (exclusive) and `to`
/// (exclusive) that ended up unused: bounds an analysis built and then did
/// not need.
void eraseUnusedBetween(Operation *from, Operation *to) {
  SmallVector<Operation *> ops;
  for (Operation *op = from ? from->getNextNode() : &to->getBlock()->front(); op && op != to;
       op = op->getNextNode())
    ops.push_back(op);
  for (Operation *op : llvm::reverse(ops))
    if (op->use_empty() && isMemoryEffectFree(op))
      op->erase();
}

struct TileSplitMaskedLoops final
    : tilec::impl::TileSplitMaskedLoopsBase<TileSplitMaskedLoops> {
  void runOnOperation() override {
    SmallVector<scf::ForOp> loops;
    getOperation()->walk([&](scf::ForOp loop) {
      if (!loop->hasAttr(tilec::kBlocksAttr))
        loops.push_back(loop);
    });
    for (scf::ForOp loop : loops) {
      auto func = loop->getParentOfType<FunctionOpInterface>();
      note.clear();
      MaskKind kind = splitLoop(loop);
      // The kernel's attributes say the least any of its loops achieved, and why.
      if (func && kind != MaskKind::None) {
        auto old = func->getAttrOfType<StringAttr>(tilec::kMaskAttr);
        if (!old || rank(kind) > rank(parseMaskKind(old.getValue()))) {
          func->setAttr(tilec::kMaskAttr, StringAttr::get(&getContext(), maskKindName(kind)));
          if (note.empty())
            func->removeAttr(tilec::kMaskNoteAttr);
          else
            func->setAttr(tilec::kMaskNoteAttr, StringAttr::get(&getContext(), note));
        }
      }
    }
  }

  /// The remark of the loop being split, if any (for tile.mask_note).
  std::string note;

  /// Emits "<prefix><why>" as a remark at `at` and keeps it as the note.
  void remark(Operation *at, StringRef prefix, StringRef why) {
    note = (prefix + why).str();
    at->emitRemark() << note;
  }

  MaskKind splitLoop(scf::ForOp loop) {
    SmallVector<arith::SelectOp> masks;
    for (Operation &op : *loop.getBody())
      if (auto sel = dyn_cast<arith::SelectOp>(op))
        if (isa<RankedTensorType>(sel.getCondition().getType()) &&
            isa<FloatType>(getElementTypeOrSelf(sel.getType())))
          masks.push_back(sel);
    if (masks.empty())
      return MaskKind::None;
    std::optional<int64_t> step = getConstantIntValue(loop.getStep());
    if (!step || *step != 1) {
      remark(masks.front(), "mask stays applied in every iteration: ",
             "the loop step is not the constant 1");
      return MaskKind::Dense;
    }
    // One mask that is a conjunction of affine comparisons: the closed form
    // below (what the table kernels get). Everything else: splitGeneral.
    if (masks.size() == 1 && splitConjunction(loop, masks.front()))
      return MaskKind::Split;
    return splitGeneral(loop, masks);
  }

  /// The single-mask, all-conjuncts-affine case; false (IR untouched) when
  /// the predicate has another shape.
  bool splitConjunction(scf::ForOp loop, arith::SelectOp mask) {
    SmallVector<arith::CmpIOp> cmps;
    std::string reason;
    if (failed(collectConjuncts(mask.getCondition(), cmps, reason)))
      return false;
    AffineAnalysis analysis(loop);
    SmallVector<Conjunct> conjuncts;
    for (arith::CmpIOp cmp : cmps) {
      auto c = analyseCmp(cmp, analysis, reason);
      if (failed(c))
        return false;
      conjuncts.push_back(*c);
    }

    // A true-value of the select that is -inf where masked and a body
    // without stores make all-false blocks no-ops (see the file comment).
    DenseFPElementsAttr falseValue;
    bool canSkip = matchPattern(mask.getFalseValue(), m_Constant(&falseValue)) &&
                   falseValue.isSplat() && falseValue.getSplatValue<APFloat>().isInfinity() &&
                   falseValue.getSplatValue<APFloat>().isNegative() && !writesMemory(loop, {mask});

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
    // With conjuncts of both signs (a window), one masked range tests only
    // the conjuncts that can cut there, the side that drops more of them
    // (a fourth loop, to prune both, cost the window kernel spills in its
    // unmasked loop). In [d, e) every conjunct with iv < 0 holds on the
    // whole block (j >= bnd >= fullLo there): the right range tests only the
    // iv > 0 ones. For j < fullHi every conjunct with iv > 0 holds: the left
    // range [a, m), m = clamp(fullHi, a, bnd), tests only the iv < 0 ones;
    // the blocks in [m, bnd) -- cut by both sides, only when no block is
    // unmasked, so d = bnd -- join the right range, which then starts at
    // r = m < bnd ? m : d and tests every conjunct.
    bool bothSigns = fullLo && fullHi;
    int64_t positives = llvm::count_if(conjuncts, [](const Conjunct &c) { return c.e.iv > 0; });
    bool pruneLeft = positives >= static_cast<int64_t>(conjuncts.size()) - positives;

    // The ops of the mask's condition tree (and, broadcast, expand_dims): a
    // conjunct dropped from a range is replaced by `true` in them only.
    SmallVector<Operation *> tree{mask};
    for (size_t i = 0; i < tree.size(); ++i)
      for (Value operand : tree[i]->getOperands())
        if (Operation *def = operand.getDefiningOp();
            def && isa<arith::AndIOp, tile::BroadcastOp, tile::ExpandDimsOp>(def) &&
            (i > 0 || operand == mask.getCondition()))
          tree.push_back(def);
    // Only when the tree feeds nothing but the mask (else leave every test in).
    llvm::SmallPtrSet<Operation *, 8> treeOps(tree.begin(), tree.end());
    bothSigns = bothSigns && llvm::all_of(llvm::drop_begin(tree), [&](Operation *op) {
      return llvm::all_of(op->getUsers(), [&](Operation *user) { return treeOps.contains(user); });
    });
    enum class Test { all, negative, positive };

    ValueRange carried = loop.getInitArgs();
    auto emit = [&](Value from, Value to, bool masked, Test test = Test::all) {
      IRMapping map;
      auto copy = cast<scf::ForOp>(b.clone(*loop, map));
      copy.setLowerBound(from);
      copy.setUpperBound(to);
      copy.getInitArgsMutable().assign(carried);
      copy->setAttr(tilec::kBlocksAttr, tile::BlocksKindAttr::get(b.getContext(), masked ? tile::BlocksKind::partial : tile::BlocksKind::full));
      if (!masked) {
        auto sel = cast<arith::SelectOp>(map.lookup(mask.getResult()).getDefiningOp());
        sel.getResult().replaceAllUsesWith(sel.getTrueValue());
        sel.erase();
      } else if (test != Test::all) {
        llvm::SmallPtrSet<Operation *, 8> copiedTree;
        for (Operation *op : tree)
          copiedTree.insert(map.lookup(op));
        for (auto [cmp, c] : llvm::zip_equal(cmps, conjuncts)) {
          if ((test == Test::negative) == (c.e.iv < 0))
            continue;
          auto copied = cast<arith::CmpIOp>(map.lookup(cmp.getOperation()));
          OpBuilder cb(copied);
          auto type = cast<RankedTensorType>(copied.getType());
          Value yes = arith::ConstantOp::create(cb, copied.getLoc(),
                                                DenseElementsAttr::get(type, true));
          copied.getResult().replaceUsesWithIf(yes, [&](OpOperand &use) {
            return copiedTree.contains(use.getOwner());
          });
        }
      }
      carried = copy.getResults();
    };
    if (bothSigns && pruneLeft) {
      Value m = bb.clamp(fullHi, a, bnd);
      Value r = b.createOrFold<arith::SelectOp>(
          loc, b.createOrFold<arith::CmpIOp>(loc, arith::CmpIPredicate::slt, m, bnd), m, d);
      emit(a, m, /*masked=*/true, Test::negative);
      emit(m, r, /*masked=*/false);
      emit(r, e, /*masked=*/true);
    } else {
      if (fullLo)
        emit(a, bnd, /*masked=*/true);
      emit(bnd, d, /*masked=*/false);
      if (fullHi)
        emit(d, e, /*masked=*/true, bothSigns ? Test::positive : Test::all);
    }
    loop.replaceAllUsesWith(carried);
    loop.erase();
    return true;
  }

  /// Every other shape of mask (see the helpers above): -inf masks only; the
  /// non-masking selects of a score_mod stay in every loop.
  MaskKind splitGeneral(scf::ForOp loop, SmallVectorImpl<arith::SelectOp> &candidates) {
    auto isNegInf = [](Value v) {
      DenseFPElementsAttr attr;
      return matchPattern(v, m_Constant(&attr)) && attr.isSplat() &&
             attr.getSplatValue<APFloat>().isInfinity() &&
             attr.getSplatValue<APFloat>().isNegative();
    };
    SmallVector<arith::SelectOp> masks;
    for (arith::SelectOp sel : candidates)
      if (isNegInf(sel.getFalseValue()))
        masks.push_back(sel);
    if (masks.empty()) {
      std::string reason = "no select of the loop sets -inf where it masks";
      if (candidates.size() == 1) { // say why the closed form refused it
        SmallVector<arith::CmpIOp> cmps;
        AffineAnalysis analysis(loop);
        if (succeeded(collectConjuncts(candidates.front().getCondition(), cmps, reason)))
          for (arith::CmpIOp cmp : cmps)
            if (failed(analyseCmp(cmp, analysis, reason)))
              break;
      }
      remark(candidates.front(), "mask stays applied in every iteration: ", reason);
      return MaskKind::Dense;
    }
    bool canSkip = !writesMemory(loop, masks);
    OpBuilder b(loop);
    Operation *before = loop->getPrevNode();
    PredicateAnalysis pa(b, loop.getLoc(), loop, canSkip);
    BoundBuilder &bb = pa.bounds();

    // A mask whose true value is another mask's result hides what that one
    // hid too (a chain): its live blocks are within both. The blocks to run
    // are those live for some mask at the end of a chain; the unmasked ones
    // those full for every mask.
    DenseMap<Operation *, BlockSets> effective;
    BlockSets full;
    bool first = true;
    for (arith::SelectOp mask : masks) {
      BlockSets sets = pa.analyse(mask.getCondition());
      full = first ? sets : pa.both(full, sets);
      first = false;
      if (auto prev = mask.getTrueValue().getDefiningOp<arith::SelectOp>();
          prev && effective.count(prev))
        sets = pa.both(sets, effective[prev]);
      effective[mask] = sets;
    }
    std::optional<BlockSets> live;
    for (arith::SelectOp mask : masks) {
      bool chained = llvm::any_of(masks, [&](arith::SelectOp other) {
        return other.getTrueValue() == mask.getResult();
      });
      if (!chained)
        live = live ? pa.either(*live, effective[mask]) : effective[mask];
    }
    bool fullPossible = full.fullPossible;
    bool liveBounded = live && live->liveBounded;

    auto reasons = [&]() {
      std::string text;
      llvm::raw_string_ostream os(text);
      llvm::interleave(
          pa.unknown, os,
          [&](const auto &u) {
            os << u.second;
            if (auto file = dyn_cast<FileLineColLoc>(u.first))
              os << " (at " << file.getFilename().getValue() << ":" << file.getLine() << ":"
                 << file.getColumn() << ")";
          },
          "; ");
      return text;
    };
    if (!fullPossible && !liveBounded) {
      eraseUnusedBetween(before, loop);
      remark(masks.front(), "mask stays applied in every iteration: ", reasons());
      return MaskKind::Dense;
    }

    Value lb = loop.getLowerBound(), ub = loop.getUpperBound();
    Interval run = liveBounded ? live->live : pa.all();
    Value a = bb.clamp(run.lo, lb, ub);
    Value e = bb.clamp(run.hi, a, ub);
    Value bnd = fullPossible ? bb.clamp(full.full.lo, a, e) : e;
    Value d = fullPossible ? bb.clamp(full.full.hi, bnd, e) : e;

    ValueRange carried = loop.getInitArgs();
    Operation *firstCopy = nullptr;
    auto emit = [&](Value from, Value to, bool masked) {
      IRMapping map;
      auto copy = cast<scf::ForOp>(b.clone(*loop, map));
      if (!firstCopy)
        firstCopy = copy;
      copy.setLowerBound(from);
      copy.setUpperBound(to);
      copy.getInitArgsMutable().assign(carried);
      copy->setAttr(tilec::kBlocksAttr, tile::BlocksKindAttr::get(b.getContext(), masked ? tile::BlocksKind::partial : tile::BlocksKind::full));
      if (!masked)
        for (arith::SelectOp mask : masks) {
          auto sel = cast<arith::SelectOp>(map.lookup(mask.getResult()).getDefiningOp());
          sel.getResult().replaceAllUsesWith(sel.getTrueValue());
          sel.erase();
        }
      carried = copy.getResults();
    };
    emit(a, bnd, /*masked=*/true);
    if (fullPossible) {
      emit(bnd, d, /*masked=*/false);
      emit(d, e, /*masked=*/true);
    }
    if (!fullPossible)
      remark(masks.front(),
             "mask applied in every block that runs (blocks it hides entirely are skipped): ",
             reasons());
    loop.replaceAllUsesWith(carried);
    loop.erase();
    eraseUnusedBetween(before, firstCopy);
    return fullPossible ? MaskKind::Split : MaskKind::Dense;
  }
};

} // namespace
