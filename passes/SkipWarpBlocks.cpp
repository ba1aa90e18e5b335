//===- SkipWarpBlocks.cpp - a warp skips masked blocks it sees nothing of ---===//
//
// tile-skip-warp-blocks (Passes.td has the contract). In a masked K/V loop
// (#tile<blocks partial>) the mask is a conjunction of comparisons E <= 0,
// E affine in the element position (r, c), the loop variable j and
// loop-invariant scalars (MaskAnalysis.h). tile-split-masked-loops bounds E
// over the whole tile to classify blocks; here the bounds are taken over the
// elements one warp holds, which the mask's layout gives: in a #tile.linear
// layout whose warp bits do not overlap its register and lane bits in any
// dimension, warp w holds coordinates in off(w) + [0, span] per dimension,
// off(w) the XOR of the warp bases of w's set bits, span the OR of the
// register and lane bases. With 128 query rows over 4 warps and 64-key
// blocks, a sliding window's first and last masked blocks are empty for
// half of the warps, and in the diagonal blocks the window's left edge holds
// for every warp.
//
// The rewrite moves the loop's warp-local compute (the backward slice of its
// register-tile results) under per-warp branches placed before the yield:
//
//   %skip = or_c (min_w E_c(j) >= 1)
//   %r:3 = scf.if %skip {tile.warp_uniform} -> (m, l, acc) {
//     scf.yield %m_in, %l_in, %acc_in          // the block is empty here
//   } else {
//     %r2:3 = scf.if %negFull {tile.warp_uniform} {  // both signs tested
//       <compute, negative comparisons replaced by true>
//     } else {
//       <compute as it was>
//     }
//   }
//
// The copies, waits and barriers stay before the branch, collective.
//
//===----------------------------------------------------------------------===//
#include "MaskAnalysis.h"
#include "dialects/Tile/TileDialect.h"
#include "tilec/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <functional>

namespace tilec {
#define GEN_PASS_DEF_TILESKIPWARPBLOCKS
#include "passes/Passes.h.inc"
} // namespace tilec

using namespace mlir;
using namespace tilec::masks;

namespace {

bool isNegInfSplat(Value v) {
  DenseFPElementsAttr attr;
  return matchPattern(v, m_Constant(&attr)) && attr.isSplat() &&
         attr.getSplatValue<APFloat>().isInfinity() && attr.getSplatValue<APFloat>().isNegative();
}

bool isTrueSplat(Value v) {
  DenseIntElementsAttr attr;
  return matchPattern(v, m_Constant(&attr)) && attr.isSplat() &&
         attr.getSplatValue<APInt>().getBoolValue();
}

/// A register tile (not a shared one) of layout-assigned IR.
bool isRegisterTile(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && isa_and_nonnull<tile::LinearLayoutAttr>(tensor.getEncoding());
}

/// The comparisons of a conjunction (through and, broadcast, expand_dims),
/// constants `true` left out (tile-split-masked-loops' pruned conjuncts), and
/// the ops of the tree between them and the condition.
LogicalResult collect(Value cond, SmallVectorImpl<arith::CmpIOp> &cmps,
                      SmallVectorImpl<Operation *> &tree) {
  if (isTrueSplat(cond))
    return success();
  Operation *def = cond.getDefiningOp();
  if (auto cmp = dyn_cast_or_null<arith::CmpIOp>(def)) {
    cmps.push_back(cmp);
    return success();
  }
  if (isa_and_nonnull<arith::AndIOp>(def)) {
    tree.push_back(def);
    return success(succeeded(collect(def->getOperand(0), cmps, tree)) &&
                   succeeded(collect(def->getOperand(1), cmps, tree)));
  }
  if (isa_and_nonnull<tile::BroadcastOp, tile::ExpandDimsOp>(def)) {
    tree.push_back(def);
    return collect(def->getOperand(0), cmps, tree);
  }
  return failure();
}

/// Which coordinates one warp of a layout holds: per dimension, off(w) +
/// [0, span[d]] with off(w) the XOR of the bases of w's set bits.
struct WarpGeometry {
  unsigned rank = 0;
  SmallVector<int64_t> span;                 // OR of the register and lane bases
  SmallVector<SmallVector<int64_t>> warp;    // warp base i, dimension d
};

FailureOr<WarpGeometry> warpGeometry(Type type, std::string &why) {
  auto tensor = cast<RankedTensorType>(type);
  auto layout = dyn_cast_or_null<tile::LinearLayoutAttr>(tensor.getEncoding());
  if (!layout) {
    why = "the mask has no #tile.linear layout (run tile-partition-warps first)";
    return failure();
  }
  WarpGeometry g;
  g.rank = layout.getRank();
  g.span.assign(g.rank, 0);
  SmallVector<int64_t> warpBits(g.rank, 0);
  auto scan = [&](ArrayRef<int64_t> flat, bool isWarp) -> bool {
    for (size_t i = 0; i + g.rank <= flat.size(); i += g.rank) {
      if (isWarp)
        g.warp.emplace_back(flat.begin() + i, flat.begin() + i + g.rank);
      for (unsigned d = 0; d < g.rank; ++d) {
        if (flat[i + d] < 0)
          return false;
        (isWarp ? warpBits[d] : g.span[d]) |= flat[i + d];
      }
    }
    return true;
  };
  if (!scan(layout.getReg(), false) || !scan(layout.getLane(), false) ||
      !scan(layout.getWarp(), true)) {
    why = "the mask's layout has a negative basis";
    return failure();
  }
  for (unsigned d = 0; d < g.rank; ++d)
    if (g.span[d] & warpBits[d]) {
      why = "the mask's layout mixes warp and lane/register bits in dimension " +
            std::to_string(d) + " (a warp's elements are not one box)";
      return failure();
    }
  return g;
}

struct Tested {
  arith::CmpIOp cmp;
  Conjunct c;
  Value hiBase, loBase; // before the loop: max/min over the warp of E - iv*j
};

struct TileSkipWarpBlocks final : tilec::impl::TileSkipWarpBlocksBase<TileSkipWarpBlocks> {
  using Base::Base;

  void runOnOperation() override {
    SmallVector<scf::ForOp> loops;
    getOperation()->walk([&](scf::ForOp loop) {
      auto kind = loop->getAttrOfType<tile::BlocksKindAttr>(tilec::kBlocksAttr);
      if (kind && kind.getValue() == tile::BlocksKind::partial)
        loops.push_back(loop);
    });
    for (scf::ForOp loop : loops) {
      std::string why;
      if (failed(rewrite(loop, why)))
        loop->emitRemark() << "tile-skip-warp-blocks left this masked loop as it is: " << why;
    }
  }

  LogicalResult rewrite(scf::ForOp loop, std::string &why) {
    Block *body = loop.getBody();
    auto yield = cast<scf::YieldOp>(body->getTerminator());

    // The one -inf mask and its comparisons.
    arith::SelectOp mask;
    for (Operation &op : *body)
      if (auto sel = dyn_cast<arith::SelectOp>(op);
          sel && isa<RankedTensorType>(sel.getCondition().getType()) &&
          isa<FloatType>(getElementTypeOrSelf(sel.getType())) &&
          isNegInfSplat(sel.getFalseValue())) {
        if (mask) {
          why = "it has more than one select with -inf where masked";
          return failure();
        }
        mask = sel;
      }
    if (!mask) {
      why = "no -inf mask in the loop body";
      return failure();
    }
    SmallVector<arith::CmpIOp> cmps;
    SmallVector<Operation *> tree{mask};
    if (failed(collect(mask.getCondition(), cmps, tree)) || cmps.empty()) {
      why = "the mask is not a conjunction of comparisons";
      return failure();
    }
    AffineAnalysis analysis(loop);
    SmallVector<Tested> tested;
    for (arith::CmpIOp cmp : cmps) {
      std::string reason;
      auto c = analyseCmp(cmp, analysis, reason);
      if (failed(c)) {
        why = reason;
        return failure();
      }
      tested.push_back({cmp, *c, {}, {}});
    }
    auto geometry = warpGeometry(mask.getCondition().getType(), why);
    if (failed(geometry))
      return failure();

    // The body's ops: the program's (copies, waits, barriers, what they and
    // the non-register results need) and the warp's (the rest of what the
    // register-tile results need).
    llvm::SmallPtrSet<Operation *, 32> program, warp;
    SmallVector<Value> work;
    Operation *lastEffect = nullptr;
    for (Operation &op : body->without_terminator())
      if (!isMemoryEffectFree(&op) || op.getNumRegions() != 0) {
        program.insert(&op);
        lastEffect = &op;
        llvm::append_range(work, op.getOperands());
      }
    SmallVector<unsigned> results; // register-tile results computed in the body
    for (auto [i, v] : llvm::enumerate(yield.getOperands())) {
      Operation *def = v.getDefiningOp();
      bool local = def && def->getBlock() == body && isRegisterTile(v.getType());
      if (local)
        results.push_back(i);
      else
        work.push_back(v);
    }
    auto close = [&](llvm::SmallPtrSetImpl<Operation *> &set, SmallVector<Value> &pending,
                     const llvm::SmallPtrSetImpl<Operation *> *except) {
      while (!pending.empty()) {
        Operation *def = pending.pop_back_val().getDefiningOp();
        if (!def || def->getBlock() != body || (except && except->contains(def)) ||
            !set.insert(def).second)
          continue;
        llvm::append_range(pending, def->getOperands());
      }
    };
    close(program, work, nullptr);
    for (unsigned i : results) {
      if (program.contains(yield.getOperand(i).getDefiningOp())) {
        why = "result #" + std::to_string(i) + " is also what the program's copies need";
        return failure();
      }
      work.push_back(yield.getOperand(i));
    }
    close(warp, work, &program);
    if (!warp.contains(mask)) {
      why = "the mask does not feed the loop's register-tile results";
      return failure();
    }
    SmallVector<Operation *> compute;
    for (Operation &op : body->without_terminator())
      if (warp.contains(&op)) {
        if (!isMemoryEffectFree(&op) || op.getNumRegions() != 0 ||
            op.hasAttr(tilec::kSmemAttrName) || isa<tile::ConvertLayoutOp>(op)) {
          why = "'" + op.getName().getStringRef().str() +
                "' in the warp's compute is not warp-local (memory, shared scratch or regions)";
          return failure();
        }
        if (lastEffect && op.isBeforeInBlock(lastEffect)) {
          why = "a copy, wait or barrier comes after the warp's compute begins (only the ring "
                "schedule, stages=2, keeps them all at the top)";
          return failure();
        }
        compute.push_back(&op);
      }

    // Before the loop: warp w's offsets and, per comparison, E's extremes over
    // w's elements less the loop variable's part.
    OpBuilder b(loop);
    Location loc = loop.getLoc();
    Type ivType = loop.getInductionVar().getType();
    BoundBuilder bb(b, loc, ivType);
    Value w = tile::WarpIdOp::create(b, loc, b.getI32Type());
    if (ivType != w.getType())
      w = arith::IndexCastOp::create(b, loc, ivType, w);
    SmallVector<Value> off(geometry->rank, bb.cst(0));
    for (auto [i, basis] : llvm::enumerate(geometry->warp)) {
      Value bit = b.createOrFold<arith::AndIOp>(
          loc, b.createOrFold<arith::ShRUIOp>(loc, w, bb.cst(int64_t(i))), bb.cst(1));
      for (unsigned d = 0; d < geometry->rank; ++d)
        if (basis[d] != 0)
          off[d] = b.createOrFold<arith::XOrIOp>(loc, off[d], bb.mul(bit, basis[d]));
    }
    Type maskType = mask.getCondition().getType();
    for (Tested &t : tested) {
      Value base = bb.base(t.c.e);
      if (t.cmp.getType() != maskType) {
        // A comparison broadcast into the mask: its whole tile bounds it.
        t.hiBase = bb.add(base, bb.cst(t.c.spreadMax));
        t.loBase = bb.add(base, bb.cst(t.c.spreadMin));
        continue;
      }
      Value hi = base, lo = base;
      int64_t spreadHi = 0, spreadLo = 0;
      for (unsigned d = 0; d < geometry->rank; ++d) {
        int64_t k = d < t.c.e.dim.size() ? t.c.e.dim[d] : 0;
        if (k == 0)
          continue;
        Value atOff = bb.mul(off[d], k);
        hi = bb.add(hi, atOff);
        lo = bb.add(lo, atOff);
        spreadHi += std::max<int64_t>(0, k * geometry->span[d]);
        spreadLo += std::min<int64_t>(0, k * geometry->span[d]);
      }
      t.hiBase = bb.add(hi, bb.cst(spreadHi));
      t.loBase = bb.add(lo, bb.cst(spreadLo));
    }

    // In the body, before the yield: the warp's classification of block j.
    b.setInsertionPoint(yield);
    Value j = loop.getInductionVar();
    Value skip, allFull, negFull;
    bool positives = false, negatives = false;
    for (Tested &t : tested) {
      Value kj = bb.mul(j, t.c.e.iv);
      Value empty = b.createOrFold<arith::CmpIOp>(loc, arith::CmpIPredicate::sge,
                                                  bb.add(kj, t.loBase), bb.cst(1));
      Value full = b.createOrFold<arith::CmpIOp>(loc, arith::CmpIPredicate::sle,
                                                 bb.add(kj, t.hiBase), bb.cst(0));
      skip = skip ? b.createOrFold<arith::OrIOp>(loc, skip, empty) : empty;
      allFull = allFull ? b.createOrFold<arith::AndIOp>(loc, allFull, full) : full;
      if (t.c.e.iv < 0) {
        negatives = true;
        negFull = negFull ? b.createOrFold<arith::AndIOp>(loc, negFull, full) : full;
      } else {
        positives = true;
      }
    }

    SmallVector<Type> types;
    SmallVector<Value> carried;
    for (unsigned i : results) {
      types.push_back(yield.getOperand(i).getType());
      carried.push_back(loop.getRegionIterArgs()[i]);
    }
    // The bodies, most specific first: (condition, which comparisons it drops).
    enum class Drop { none, negatives, all };
    SmallVector<std::pair<Value, Drop>> variants;
    if (fullWarps)
      variants.push_back({allFull, Drop::all});
    if (pruneTests && positives && negatives)
      variants.push_back({negFull, Drop::negatives});
    variants.push_back({Value(), Drop::none});

    auto emitCompute = [&](Drop drop) {
      IRMapping map;
      for (Operation *op : compute)
        b.clone(*op, map);
      if (drop == Drop::all) {
        auto sel = cast<arith::SelectOp>(map.lookup(mask.getResult()).getDefiningOp());
        sel.getResult().replaceAllUsesWith(sel.getTrueValue());
        sel.erase();
      } else if (drop == Drop::negatives) {
        llvm::SmallPtrSet<Operation *, 8> copiedTree;
        for (Operation *op : tree)
          copiedTree.insert(map.lookup(op));
        for (Tested &t : tested) {
          if (t.c.e.iv > 0)
            continue;
          auto copied = cast<arith::CmpIOp>(map.lookup(t.cmp.getOperation()));
          OpBuilder cb(copied);
          Value yes = arith::ConstantOp::create(
              cb, copied.getLoc(), DenseElementsAttr::get(cast<ShapedType>(copied.getType()), true));
          copied.getResult().replaceUsesWithIf(
              yes, [&](OpOperand &use) { return copiedTree.contains(use.getOwner()); });
        }
        // x & true -> x, so that the lowering emits no per-element and.
        for (Operation *op : tree)
          if (auto andOp = dyn_cast<arith::AndIOp>(map.lookup(op)))
            for (unsigned k = 0; k < 2; ++k)
              if (isTrueSplat(andOp.getOperand(k))) {
                andOp.getResult().replaceAllUsesWith(andOp.getOperand(1 - k));
                break;
              }
      }
      SmallVector<Value> out;
      for (unsigned i : results)
        out.push_back(map.lookupOrDefault(yield.getOperand(i)));
      scf::YieldOp::create(b, loc, out);
      // What a dropped comparison leaves unused.
      Block *block = b.getInsertionBlock();
      SmallVector<Operation *> ops;
      for (Operation &op : block->without_terminator())
        ops.push_back(&op);
      for (Operation *op : llvm::reverse(ops))
        if (op->use_empty() && isMemoryEffectFree(op))
          op->erase();
    };
    // Emits variants k.. at the builder's point, ending the block with their yield.
    std::function<void(size_t)> nest = [&](size_t k) {
      auto [cond, drop] = variants[k];
      if (k + 1 == variants.size()) {
        emitCompute(drop);
        return;
      }
      auto ifOp = scf::IfOp::create(b, loc, types, cond, /*withElseRegion=*/true);
      ifOp->setAttr(tilec::kWarpUniformAttrName, b.getUnitAttr());
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(ifOp.thenBlock());
        emitCompute(drop);
        b.setInsertionPointToStart(ifOp.elseBlock());
        nest(k + 1);
      }
      scf::YieldOp::create(b, loc, ifOp.getResults());
    };
    auto top = scf::IfOp::create(b, loc, types, skip, /*withElseRegion=*/true);
    top->setAttr(tilec::kWarpUniformAttrName, b.getUnitAttr());
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(top.thenBlock());
      scf::YieldOp::create(b, loc, carried);
      b.setInsertionPointToStart(top.elseBlock());
      nest(0);
    }
    for (auto [k, i] : llvm::enumerate(results))
      yield.setOperand(i, top.getResult(k));
    // The classification's tests no variant uses (full without full-warps).
    for (Operation *op = top->getPrevNode(); op;) {
      Operation *prev = op->getPrevNode();
      if (op->use_empty() && isMemoryEffectFree(op) && op->getNumRegions() == 0 &&
          !op->getResultTypes().empty() && !isa<RankedTensorType>(op->getResultTypes()[0]) &&
          !program.contains(op))
        op->erase();
      op = prev;
    }
    for (Operation *op : llvm::reverse(compute)) {
      if (!op->use_empty()) {
        why = "internal: a moved op still has users";
        return failure();
      }
      op->erase();
    }
    return success();
  }
};

} // namespace
