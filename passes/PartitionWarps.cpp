//===- PartitionWarps.cpp - split-Q layout assignment ---------------------===//
//
// FlashAttention-2's warp scheme is a layout decision (DESIGN.md, "Layouts"):
// each warp owns a block of Q rows, K and V tiles sit in shared memory where
// every warp reads them, so S = Q·Kᵀ, its row max/sum and P·V stay inside the
// warp that owns the rows. This pass writes that decision into the IR: every
// tile gets a `#tile.linear` layout or a `#tile.shared` placement as its
// tensor encoding.
//
// How: the dots are anchors (accumulator and A operand take the mma.sync
// fragment layouts, B operands go to shared memory). From there layouts flow
// along the IR — elementwise ops share their layout, loops carry it around,
// reduce/expand_dims/broadcast/trans transform it — by a worklist. The first
// layout a value receives wins; a later, different demand on a use is met by
// recomputing cheap producers (iota, splat, constants and their shape
// plumbing) in the demanded layout, or else by a tile.convert_layout.
//
//===----------------------------------------------------------------------===//
#include "tilec/Layout/Sm80Layouts.h"
#include "dialects/Tile/TileDialect.h"
#include "tilec/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"

#include "llvm/ADT/SmallPtrSet.h"

#include <deque>

namespace tilec {
#define GEN_PASS_DEF_TILEPARTITIONWARPS
#include "passes/Passes.h.inc"
} // namespace tilec

using namespace mlir;
using namespace mlir::tile;

namespace {

RankedTensorType withEncoding(Type type, Attribute encoding) {
  auto tensor = cast<RankedTensorType>(type);
  return RankedTensorType::get(tensor.getShape(), tensor.getElementType(), encoding);
}

bool isTile(Value v) { return isa<RankedTensorType>(v.getType()); }

/// Elementwise ops (arith, math) apply the same layout to all their tiles.
bool isElementwise(Operation *op) {
  return op->hasTrait<OpTrait::Elementwise>() && op->getNumResults() == 1 &&
         isTile(op->getResult(0));
}

/// Producers that are cheaper to recompute in a second layout than to move.
bool isCheapToRecompute(Operation *op, int depth = 0) {
  if (!op || depth > 8)
    return false;
  if (isa<IotaOp, SplatOp>(op))
    return true;
  if (auto constant = dyn_cast<arith::ConstantOp>(op))
    return isa<SplatElementsAttr>(constant.getValue());
  if (isa<BroadcastOp, ExpandDimsOp>(op) || isElementwise(op))
    return llvm::all_of(op->getOperands(), [&](Value operand) {
      return !isTile(operand) || isCheapToRecompute(operand.getDefiningOp(), depth + 1);
    });
  return false;
}

/// The layout the tile operand of shape plumbing (expand_dims, trans,
/// broadcast) or an elementwise op needs so that the op produces `out`.
tilec::LinearLayout operandLayout(Operation *op, const tilec::LinearLayout &out) {
  if (auto expand = dyn_cast<ExpandDimsOp>(op))
    return out.sliceDim(expand.getAxis());
  if (isa<TransOp>(op))
    return out.transposed();
  if (auto broadcast = dyn_cast<BroadcastOp>(op)) {
    tilec::LinearLayout in = out;
    ArrayRef<int64_t> inShape = broadcast.getInput().getType().getShape();
    for (unsigned d = 0; d < inShape.size(); ++d)
      if (inShape[d] == 1)
        in = in.zeroDim(d);
    return in;
  }
  return out;
}

/// A loop-carried tile can live in shared memory when it is tile-pipeline's
/// shape: the initial value is a load (or a previous such loop's result)
/// used only by the loop, and the body
/// reloads it (for the next iteration) with a load used only by the yield.
/// The GPU lowering refills one region in place when the reload comes after
/// every read of the carried value, and alternates between two regions when
/// it comes before (a ring). Anything else stays in registers and is moved to
/// shared memory at its use instead.
bool isPrefetchedCarriedTile(BlockArgument arg) {
  auto loop = dyn_cast<scf::ForOp>(arg.getOwner()->getParentOp());
  if (!loop || arg.getArgNumber() == 0)
    return false;
  unsigned i = arg.getArgNumber() - 1;
  Value init = loop.getInitArgs()[i];
  if (!init.hasOneUse())
    return false;
  // The first tile is a load, or the last prefetch of a loop this one
  // continues (tile-pipeline chains split loops).
  if (auto previous = init.getDefiningOp<scf::ForOp>()) {
    if (!isPrefetchedCarriedTile(previous.getRegionIterArgs()[cast<OpResult>(init).getResultNumber()]))
      return false;
  } else if (!init.getDefiningOp<LoadOp>()) {
    return false;
  }
  Block *body = loop.getBody();
  auto reload = body->getTerminator()->getOperand(i).getDefiningOp<LoadOp>();
  return reload && reload->getBlock() == body && reload.getResult().hasOneUse();
}

/// A tile straight from tile.load, or carried around a loop in one
/// shared-memory region (a prefetched K/V tile, see tile-pipeline).
bool isLoadedTile(Value v) {
  if (v.getDefiningOp<LoadOp>())
    return true;
  auto arg = dyn_cast<BlockArgument>(v);
  return arg && isPrefetchedCarriedTile(arg);
}

/// tile.trans of a loaded tile (Kᵀ in the fused backward's dQᵀ = Kᵀ·dSᵀ):
/// as a dot's A operand it is read from the loaded tile's shared copy with
/// ldmatrix.trans (#tile.shared<..., transposed>), never transposed in
/// registers.
bool isTransposedLoadedTile(Value v) {
  auto trans = v.getDefiningOp<TransOp>();
  return trans && isLoadedTile(trans.getInput());
}

/// 32-bit registers a thread can have (sm_80 and sm_90).
constexpr int64_t kRegistersPerThread = 255;

/// Registers per thread the tiles of a split-Q loop may pin: the loop's
/// accumulators plus loop-invariant A operands (Q). The rest of the 255 a
/// thread can have goes to P, addresses and softmax temporaries.
constexpr int64_t kTileRegisterBudget = 168;

class LayoutAssigner {
public:
  LayoutAssigner(func::FuncOp func, int64_t numWarps)
      : func(func), numWarps(numWarps), ctx(func.getContext()) {}

  LogicalResult run();

private:
  Attribute linear(const tilec::LinearLayout &layout) { return toAttr(ctx, layout); }
  Attribute shared(bool transposed = false) {
    return SharedLayoutAttr::get(ctx, /*swizzle=*/3, transposed);
  }
  /// A dot's A operand read from shared memory: a loaded tile's copy, or its
  /// transposed view.
  Attribute sharedA(DotOp dot) { return shared(isTransposedLoadedTile(dot.getA())); }

  /// Gives `v` layout `layout` if it has none; true if it now has `layout`.
  bool demand(Value v, Attribute layout) {
    auto [it, inserted] = assigned.try_emplace(v, layout);
    if (inserted)
      worklist.push_back(v);
    return it->second == layout;
  }
  /// The use must see `layout`: demand it of the value, or convert at the use.
  void demandAt(OpOperand &use, Attribute layout) {
    if (!demand(use.get(), layout))
      conversions.push_back({&use, layout});
  }

  LogicalResult seedDots();
  /// Shared placement flows around a loop only for tile-pipeline's prefetched
  /// tiles; other carried tiles get a register layout (and conversions).
  bool mayCarry(scf::ForOp loop, unsigned i, Attribute layout) {
    return !isa<SharedLayoutAttr>(layout) ||
           isPrefetchedCarriedTile(loop.getRegionIterArgs()[i]);
  }
  bool keepAInSharedMemory(DotOp dot);
  LogicalResult propagate(Value v);
  void propagateToDefinition(Value v, Attribute layout);
  LogicalResult propagateToUse(OpOperand &use, Attribute layout);
  void seedDefaults();
  Value materialize(Value v, Attribute layout, OpBuilder &builder);
  void applyConversions();
  void rewriteTypes();

  func::FuncOp func;
  int64_t numWarps;
  MLIRContext *ctx;
  DenseMap<Value, Attribute> assigned;
  std::deque<Value> worklist;
  SmallVector<std::pair<OpOperand *, Attribute>> conversions;
  /// Results whose layout was derived from an input after they already had
  /// one (only tile.reduce can cause this): convert after the op.
  SmallVector<std::pair<Value, Attribute>> resultConversions;
  /// The shared copy of a register tile, made once for all the dots that
  /// read it in that placement (the fused backward's dSᵀ: the A operand of
  /// dK's dot and the B operand of dQᵀ's) -- one write and one region
  /// instead of one per use.
  DenseMap<std::pair<Value, Attribute>, Value> sharedCopies;
};

/// FlashAttention-2 keeps Q in registers when it fits and otherwise reads
/// its fragments from shared memory with ldmatrix in every iteration (at
/// head_dim 128 with 32 rows per warp, O alone takes 128 registers). Decide
/// that for a dot whose A operand is a loaded tile invariant in its loop:
/// count the 32-bit registers per thread that the loop's accumulators and
/// invariant A operands would pin.
bool LayoutAssigner::keepAInSharedMemory(DotOp dot) {
  Value a = dot.getA();
  if (auto trans = a.getDefiningOp<TransOp>())
    a = trans.getInput(); // Kᵀ: read transposed from K's tile
  auto loop = dot->getParentOfType<scf::ForOp>();
  if (!loop || !a.getDefiningOp<LoadOp>() || loop->isAncestor(a.getDefiningOp()))
    return false;
  int64_t threads = 32 * numWarps;
  auto registers = [&](Value tile) {
    auto type = cast<RankedTensorType>(tile.getType());
    return type.getNumElements() * type.getElementTypeBitWidth() / 32 / threads;
  };
  int64_t pinned = 0;
  for (Operation &op : *loop.getBody())
    if (auto other = dyn_cast<DotOp>(op)) {
      pinned += registers(other.getResult());
      if (!loop->isAncestor(other.getA().getParentBlock()->getParentOp()))
        pinned += registers(other.getA());
    }
  return pinned > kTileRegisterBudget;
}

LogicalResult LayoutAssigner::seedDots() {
  WalkResult result = func.walk([&](DotOp dot) {
    auto accType = dot.getAcc().getType();
    int64_t m = accType.getDimSize(0), n = accType.getDimSize(1);
    int64_t k = dot.getA().getType().getDimSize(1);
    int64_t warpsN = dot.getWarpsN().value_or(1);
    if (warpsN > numWarps) {
      dot.emitError() << "warps_n = " << warpsN << " exceeds the program's " << numWarps
                      << " warps: the warp grid is (num_warps / warps_n) x warps_n";
      return WalkResult::interrupt();
    }
    int64_t warpsM = numWarps / warpsN;
    if (m % (16 * warpsM) != 0) {
      dot.emitError() << "cannot split the " << m << " rows of this tile.dot over " << warpsM
                      << " warps: split-Q gives each warp a multiple of 16 rows (mma.sync "
                         "m16n8k16), so M must be a multiple of "
                      << 16 * warpsM;
      return WalkResult::interrupt();
    }
    if (n % (8 * warpsN) != 0) {
      dot.emitError() << "cannot split the " << n << " columns of this tile.dot over warps_n = "
                      << warpsN << " warps: each needs a multiple of 8 columns (mma.sync "
                         "m16n8k16), so N must be a multiple of "
                      << 8 * warpsN;
      return WalkResult::interrupt();
    }
    if (n % 8 != 0 || k % 16 != 0 || tilec::log2Exact(n) < 0 || tilec::log2Exact(k) < 0 ||
        tilec::log2Exact(m) < 0) {
      dot.emitError() << "tile.dot of " << m << "x" << k << " by " << k << "x" << n
                      << " needs power-of-two sizes with N a multiple of 8 and K a multiple "
                         "of 16 (mma.sync m16n8k16 tiles)";
      return WalkResult::interrupt();
    }
    Attribute acc = linear(tilec::sm80::mmaAccumulator(m, n, numWarps, warpsN));
    demand(dot.getResult(), acc);
    demandAt(dot.getAccMutable(), acc);
    if (warpsN > 1) {
      // A warp grid reads A from shared memory (FlashAttention-2's backward
      // writes P and dS there): a loaded tile is copied there as it is
      // loaded, a computed one (P, dS of a dot in another grid, whose
      // registers split A's K over warps) is written there at the use and
      // keeps the layout it is computed in.
      if (isLoadedTile(dot.getA()) || isTransposedLoadedTile(dot.getA()))
        demandAt(dot.getAMutable(), sharedA(dot));
      else
        conversions.push_back({&dot.getAMutable(), shared()});
    } else if (keepAInSharedMemory(dot)) {
      demandAt(dot.getAMutable(), sharedA(dot));
    } else {
      demandAt(dot.getAMutable(), linear(tilec::sm80::mmaOperandA(m, k, numWarps)));
    }
    // K and V tiles are copied into shared memory as they are loaded; a B
    // operand computed in registers is moved there at its use.
    if (isLoadedTile(dot.getB()))
      demandAt(dot.getBMutable(), shared());
    else
      conversions.push_back({&dot.getBMutable(), shared()});
    return WalkResult::advance();
  });
  return failure(result.wasInterrupted());
}

void LayoutAssigner::propagateToDefinition(Value v, Attribute layout) {
  auto linearAttr = dyn_cast<LinearLayoutAttr>(layout);
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    auto forOp = dyn_cast<scf::ForOp>(arg.getOwner()->getParentOp());
    if (!forOp || arg.getArgNumber() == 0)
      return;
    unsigned i = arg.getArgNumber() - 1;
    if (!mayCarry(forOp, i, layout))
      return;
    // The loop's result is its iter_arg after the last iteration: same layout.
    if (!demand(forOp.getResult(i), layout))
      resultConversions.push_back({forOp.getResult(i), layout});
    demandAt(forOp.getInitArgsMutable()[i], layout);
    demandAt(forOp.getBody()->getTerminator()->getOpOperand(i), layout);
    return;
  }
  Operation *def = v.getDefiningOp();
  auto result = cast<OpResult>(v);
  if (auto forOp = dyn_cast<scf::ForOp>(def)) {
    unsigned i = result.getResultNumber();
    Value iterArg = forOp.getRegionIterArgs()[i];
    if (!mayCarry(forOp, i, layout))
      return;
    if (!demand(iterArg, layout)) {
      resultConversions.push_back({result, assigned.lookup(iterArg)});
      return;
    }
    demandAt(forOp.getInitArgsMutable()[i], layout);
    demandAt(forOp.getBody()->getTerminator()->getOpOperand(i), layout);
    return;
  }
  if (auto ifOp = dyn_cast<scf::IfOp>(def)) {
    if (isa<SharedLayoutAttr>(layout))
      return; // branches yield registers; shared tiles are not passed around
    unsigned i = result.getResultNumber();
    for (Region *region : {&ifOp.getThenRegion(), &ifOp.getElseRegion()})
      if (!region->empty())
        demandAt(region->front().getTerminator()->getOpOperand(i), layout);
    return;
  }
  if (isElementwise(def)) {
    for (OpOperand &operand : def->getOpOperands())
      if (isTile(operand.get()))
        demandAt(operand, layout);
    return;
  }
  if (auto shared = dyn_cast<SharedLayoutAttr>(layout); shared && isa<TransOp>(def)) {
    // The transposed view of a shared tile: the input is that tile.
    demandAt(def->getOpOperand(0), SharedLayoutAttr::get(ctx, shared.getSwizzle(),
                                                         !shared.getTransposed()));
    return;
  }
  if (linearAttr && isa<ExpandDimsOp, TransOp, BroadcastOp>(def))
    demandAt(def->getOpOperand(0), linear(operandLayout(def, toLinearLayout(linearAttr))));
}

LogicalResult LayoutAssigner::propagateToUse(OpOperand &use, Attribute layout) {
  Operation *user = use.getOwner();
  auto linearAttr = dyn_cast<LinearLayoutAttr>(layout);
  if (isElementwise(user)) {
    Value result = user->getResult(0);
    Attribute target = assigned.lookup(result);
    if (!target) {
      // Elementwise math runs in registers: a tile placed in shared memory
      // (an A operand kept there, a B operand) gives its users no layout;
      // theirs comes from elsewhere (another operand, a use, the default)
      // and this operand is read out of shared memory at the op.
      if (isa<SharedLayoutAttr>(layout))
        return success();
      target = layout;
    }
    demand(result, target);
    for (OpOperand &operand : user->getOpOperands())
      if (isTile(operand.get()))
        demandAt(operand, target);
    return success();
  }
  if (auto forOp = dyn_cast<scf::ForOp>(user)) {
    if (use.getOperandNumber() < forOp.getNumControlOperands())
      return success();
    unsigned i = use.getOperandNumber() - forOp.getNumControlOperands();
    Value iterArg = forOp.getRegionIterArgs()[i];
    if (!mayCarry(forOp, i, layout))
      return success();
    if (!demand(iterArg, layout))
      conversions.push_back({&use, assigned.lookup(iterArg)});
    return success();
  }
  if (auto yield = dyn_cast<scf::YieldOp>(user)) {
    Operation *parent = yield->getParentOp();
    if (isa<scf::ForOp, scf::IfOp>(parent)) {
      if (auto forOp = dyn_cast<scf::ForOp>(parent);
          forOp && !mayCarry(forOp, use.getOperandNumber(), layout))
        return success();
      if (isa<scf::IfOp>(parent) && isa<SharedLayoutAttr>(layout))
        return success();
      Value result = parent->getResult(use.getOperandNumber());
      if (!demand(result, layout))
        conversions.push_back({&use, assigned.lookup(result)});
    }
    return success();
  }
  if (!linearAttr)
    return success();
  tilec::LinearLayout in = toLinearLayout(linearAttr);
  auto deriveResult = [&](Value result, const tilec::LinearLayout &derived) {
    Attribute derivedAttr = linear(derived);
    if (!demand(result, derivedAttr))
      resultConversions.push_back({result, derivedAttr});
  };
  if (auto reduce = dyn_cast<ReduceOp>(user)) {
    unsigned axis = reduce.getAxis();
    for (const auto &[kind, bases] :
         {std::pair<StringRef, const std::vector<tilec::Coord> *>{"warp", &in.warpBases()}})
      for (const tilec::Coord &basis : *bases)
        if (basis[axis] != 0)
          return reduce.emitError()
                 << "tile.reduce along axis " << axis << " would combine elements held by "
                 << "different warps: split-Q gives each warp its own rows, so only "
                    "reductions along a row (the last axis of a dot result) stay inside a warp";
    deriveResult(reduce.getResult(), in.sliceDim(axis));
    return success();
  }
  // Invertible shape plumbing: when the result already has a layout, the
  // input is what must change (often a cheap iota, recomputed).
  if (isa<ExpandDimsOp, TransOp>(user)) {
    if (Attribute result = assigned.lookup(user->getResult(0)))
      demandAt(use, linear(operandLayout(user, toLinearLayout(cast<LinearLayoutAttr>(result)))));
    else if (auto expand = dyn_cast<ExpandDimsOp>(user))
      deriveResult(expand.getResult(), in.insertDim(expand.getAxis()));
    else
      deriveResult(user->getResult(0), in.transposed());
  }
  return success();
}

LogicalResult LayoutAssigner::propagate(Value v) {
  Attribute layout = assigned.lookup(v);
  propagateToDefinition(v, layout);
  for (OpOperand &use : llvm::make_early_inc_range(v.getUses()))
    if (failed(propagateToUse(use, layout)))
      return failure();
  return success();
}

/// The axes (bit d: dimension d) along which `v` is reduced, directly or
/// through elementwise ops of its shape: a tile a kernel without dots
/// reduces along a leading axis (the fused decode merge's (splits,
/// features) tiles summed over the splits) must keep its warps off it.
/// Loop-carried tiles are followed into their loop.
uint64_t reducedAxes(Value v) {
  uint64_t axes = 0;
  SmallVector<Value> work{v};
  llvm::SmallPtrSet<Operation *, 16> seen;
  auto shape = cast<RankedTensorType>(v.getType()).getShape();
  llvm::SmallPtrSet<Value, 16> carried;
  // A loop carries the tile in one layout: follow it into the iter_arg
  // (a prefetched tile: the load before the loop, the reload yielded).
  auto carry = [&](scf::ForOp loop, unsigned i) {
    for (Value next : {Value(loop.getRegionIterArgs()[i]), Value(loop.getResult(i))})
      if (carried.insert(next).second)
        work.push_back(next);
  };
  while (!work.empty()) {
    Value x = work.pop_back_val();
    for (OpOperand &use : x.getUses()) {
      Operation *user = use.getOwner();
      if (auto loop = dyn_cast<scf::ForOp>(user)) {
        if (use.getOperandNumber() >= loop.getNumControlOperands())
          carry(loop, use.getOperandNumber() - loop.getNumControlOperands());
        continue;
      }
      if (auto yield = dyn_cast<scf::YieldOp>(user)) {
        if (auto loop = dyn_cast<scf::ForOp>(yield->getParentOp()))
          carry(loop, use.getOperandNumber());
        continue;
      }
      if (!seen.insert(user).second)
        continue;
      if (auto reduce = dyn_cast<ReduceOp>(user))
        axes |= uint64_t(1) << reduce.getAxis();
      else if (isElementwise(user) &&
               cast<RankedTensorType>(user->getResult(0).getType()).getShape() == shape)
        work.push_back(user->getResult(0));
    }
  }
  return axes;
}

/// Tiles no dot reaches (a copy kernel, a row softmax) get the coalesced
/// layout: 16 bytes per thread per access, warps on rows so that row
/// reductions stay inside a warp as in split-Q. Values that own their data (loads,
/// loop-carried tiles) are seeded before cheap producers (constants, iota,
/// splats), which then follow their users' layouts: a softmax's deferred
/// `1 / l` constant, seeded first, would impose a rank-1 layout of its own
/// on the row sums and force a conversion.
void LayoutAssigner::seedDefaults() {
  bool cheapToo = false;
  auto seed = [&](Value v) {
    if (!isTile(v) || assigned.count(v))
      return;
    if (!cheapToo && isCheapToRecompute(v.getDefiningOp()))
      return;
    auto type = cast<RankedTensorType>(v.getType());
    int64_t elemBytes = std::max<int64_t>(1, type.getElementTypeBitWidth() / 8);
    std::vector<int64_t> shape(type.getShape().begin(), type.getShape().end());
    bool powerOfTwo = llvm::all_of(shape, [](int64_t d) { return tilec::log2Exact(d) >= 0; });
    if (!powerOfTwo)
      return; // reported when types are rewritten
    int64_t vec = std::min<int64_t>(16 / elemBytes, shape.empty() ? 1 : shape.back());
    tilec::LinearLayout layout = tilec::LinearLayout::coalesced(shape, numWarps, vec, /*warpsOnRows=*/true);
    // Warps on an axis the tile is reduced along (the reduction would fail:
    // see propagateToUse): move them to the other axes instead. Layouts
    // whose reductions already stay in a warp are unchanged.
    if (uint64_t axes = reducedAxes(v);
        axes && llvm::any_of(layout.warpBases(), [&](const tilec::Coord &basis) {
          for (unsigned d = 0; d < basis.size(); ++d)
            if (basis[d] && (axes >> d & 1))
              return true;
          return false;
        }))
      layout = tilec::LinearLayout::coalescedKeepingAxes(shape, numWarps, vec, axes);
    demand(v, linear(layout));
  };
  auto seedOp = [&](Operation *op) {
    for (Value result : op->getResults())
      seed(result);
    for (Region &region : op->getRegions())
      for (Block &block : region)
        for (Value arg : block.getArguments())
          seed(arg);
    // Seed one at a time so the first seed's consequences win over later
    // defaults.
    return worklist.empty() ? WalkResult::advance() : WalkResult::interrupt();
  };
  func.walk(seedOp);
  if (worklist.empty()) {
    cheapToo = true;
    func.walk(seedOp);
  }
}

Value LayoutAssigner::materialize(Value v, Attribute layout, OpBuilder &builder) {
  Operation *def = v.getDefiningOp();
  if (!isTile(v) || assigned.lookup(v) == layout)
    return v;
  // Cheap producers are recomputed in the demanded layout, their tile
  // operands recursively. Shared placement is never recomputed: it is filled
  // from registers.
  if (!isa<SharedLayoutAttr>(layout) && isCheapToRecompute(def)) {
    OpBuilder::InsertionGuard guard(builder);
    builder.setInsertionPoint(def);
    Operation *clone = builder.clone(*def);
    tilec::LinearLayout out = toLinearLayout(cast<LinearLayoutAttr>(layout));
    for (OpOperand &operand : clone->getOpOperands())
      if (isTile(operand.get()))
        operand.set(materialize(operand.get(), linear(operandLayout(def, out)), builder));
    assigned[clone->getResult(0)] = layout;
    return clone->getResult(0);
  }
  bool shared = isa<SharedLayoutAttr>(layout);
  if (shared)
    if (Value copy = sharedCopies.lookup({v, layout}))
      return copy; // placed right after v: it dominates every use of v
  OpBuilder::InsertionGuard guard(builder);
  builder.setInsertionPointAfterValue(v);
  auto convert = ConvertLayoutOp::create(builder, v.getLoc(), v.getType(), v);
  assigned[convert.getResult()] = layout;
  if (shared)
    sharedCopies[{v, layout}] = convert.getResult();
  return convert.getResult();
}

void LayoutAssigner::applyConversions() {
  OpBuilder builder(ctx);
  for (auto [use, layout] : conversions) {
    builder.setInsertionPoint(use->getOwner());
    use->set(materialize(use->get(), layout, builder));
  }
  for (auto [result, derived] : resultConversions) {
    // The op computes `derived`; its users were promised the old layout.
    Attribute promised = assigned.lookup(result);
    builder.setInsertionPointAfterValue(result);
    auto convert = ConvertLayoutOp::create(builder, result.getLoc(), result.getType(), result);
    result.replaceAllUsesExcept(convert.getResult(), convert);
    assigned[convert.getResult()] = promised;
    assigned[result] = derived;
  }
}

void LayoutAssigner::rewriteTypes() {
  for (auto [value, layout] : assigned) {
    RankedTensorType type = withEncoding(value.getType(), layout);
    value.setType(type);
    // A constant's value attribute carries its type; keep the two equal.
    if (auto constant = value.getDefiningOp<arith::ConstantOp>())
      if (auto splat = dyn_cast<SplatElementsAttr>(constant.getValue()))
        constant.setValueAttr(SplatElementsAttr::get(type, splat.getSplatValue<Attribute>()));
  }
}

LogicalResult LayoutAssigner::run() {
  for (auto [i, type] : llvm::enumerate(func.getArgumentTypes()))
    if (isa<ShapedType>(type))
      return func.emitError() << "kernel parameter " << i << " is a tile (" << type
                              << "); kernels take pointers and scalars and load tiles "
                                 "with tile.load";
  if (failed(seedDots()))
    return failure();
  while (true) {
    while (!worklist.empty()) {
      Value v = worklist.front();
      worklist.pop_front();
      if (failed(propagate(v)))
        return failure();
    }
    seedDefaults();
    if (worklist.empty())
      break;
  }
  applyConversions();
  rewriteTypes();
  // Every tile must now have a layout; report the ones that could not get one.
  WalkResult walk = func.walk([&](Operation *op) {
    for (Value result : op->getResults())
      if (auto type = dyn_cast<RankedTensorType>(result.getType()); type && !type.getEncoding()) {
        op->emitError() << "cannot give the tile " << type
                        << " a distributed layout: every dimension must be a power of two";
        return WalkResult::interrupt();
      }
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  // A register tile larger than a thread's whole register file cannot be
  // held, and lowering it register by register takes minutes (a 4096-row
  // block: 4096 f32 per thread). Refuse it here, naming the numbers.
  walk = func.walk([&](Operation *op) {
    for (Value result : op->getResults()) {
      auto type = dyn_cast<RankedTensorType>(result.getType());
      auto attr = type ? dyn_cast_or_null<LinearLayoutAttr>(type.getEncoding()) : nullptr;
      if (!attr)
        continue;
      // Narrow elements pack (f16x2); i1 and i64 take a register or two each.
      int64_t bits = type.getElementTypeBitWidth();
      int64_t elements = toLinearLayout(attr).numRegs();
      int64_t registers = bits == 16 ? llvm::divideCeil(elements, 2) : elements * std::max<int64_t>(1, bits / 32);
      if (registers > kRegistersPerThread) {
        op->emitError() << "the tile "
                        << RankedTensorType::get(type.getShape(), type.getElementType())
                        << " takes " << registers
                        << " registers per thread over " << numWarps
                        << " warps; a thread has at most " << kRegistersPerThread
                        << ": use smaller blocks or more warps";
        return WalkResult::interrupt();
      }
    }
    return WalkResult::advance();
  });
  if (walk.wasInterrupted())
    return failure();
  func->setAttr(tilec::kNumWarpsAttrName, IntegerAttr::get(IntegerType::get(ctx, 64), numWarps));
  return success();
}

struct TilePartitionWarpsPass final
    : tilec::impl::TilePartitionWarpsBase<TilePartitionWarpsPass> {
  using Base::Base;
  void runOnOperation() override {
    if (failed(tilec::checkNumWarps(getOperation(), "tile-partition-warps", numWarps)))
      return signalPassFailure();
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (!func->hasAttr(kKernelAttrName))
        continue;
      if (failed(LayoutAssigner(func, numWarps).run()))
        return signalPassFailure();
    }
  }
};

} // namespace

LogicalResult tilec::checkNumWarps(Operation *anchor, StringRef what, int64_t numWarps) {
  if (numWarps >= 1 && numWarps <= kMaxWarps && tilec::log2Exact(numWarps) >= 0)
    return success();
  return anchor->emitError() << what << ": num-warps must be a power of two in [1, " << kMaxWarps
                             << "], got " << numWarps;
}
