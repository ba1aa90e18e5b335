//===- AllocateShared.cpp - tile-allocate-shared ---------------------------===//
//
// Where every shared-memory tile lives. Which ops need a region, and how big
// it is, is AllocateShared.h (shared with the lowering); this file decides
// the offsets and the kernel's peak, and refuses kernels over the target's
// limit.
//
// Regions are allocated like a stack in program order: a region lives from
// the op that needs it to the end of the block that holds that op (the
// kernel, a loop body, a branch), except
//   - the staging of an smem-epilogue store, which lives during the store;
//   - a loop's carried shared tiles and the twin regions of its prefetch
//     rings (allocated at the loop, before its body), which live until the
//     loop ends and are popped then if nothing after the loop reads the
//     carried tile (and they are on top of the stack);
//   - a reload inside the body, which refills the carried tile's region(s);
//   - a loop continuing another loop's ring (tile-pipeline chains the loops
//     tile-split-masked-loops makes) reuses that ring's two regions.
// So the masked and unmasked loops of a split kernel reuse the same space.
// This is the discipline the lowering used when it allocated as it walked
// (what the PTX of every kernel was recorded with); a liveness allocator in
// Triton's style (Allocation.cpp: intervals, first fit) could pack tighter,
// but would move offsets and so the PTX. The barrier-and-wait placement
// relies on every region above a loop body's start (tile.smem_body) being
// the body's own.
//
//===----------------------------------------------------------------------===//
#include "AllocateShared.h"

#include "tilec/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"

#include "llvm/Support/MathExtras.h"

namespace tilec {
#define GEN_PASS_DEF_TILEALLOCATESHARED
#include "passes/Passes.h.inc"
} // namespace tilec

using namespace mlir;
using namespace mlir::tile;

namespace tilec::smem {

static std::optional<int64_t> constantInt(Value v) {
  if (auto constant = v.getDefiningOp<arith::ConstantOp>())
    if (auto attr = dyn_cast<IntegerAttr>(constant.getValue()))
      return attr.getInt();
  return std::nullopt;
}

static bool isShared(Value v) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  return type && isa_and_nonnull<SharedLayoutAttr>(type.getEncoding());
}

static std::optional<LinearLayout> registerLayout(Value v) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  auto attr = type ? dyn_cast_or_null<LinearLayoutAttr>(type.getEncoding()) : nullptr;
  if (!attr)
    return std::nullopt;
  return toLinearLayout(attr);
}

std::optional<Geometry> sharedTileGeometry(RankedTensorType type, const TargetDescription &hw) {
  auto encoding = dyn_cast_or_null<SharedLayoutAttr>(type.getEncoding());
  if (!encoding || type.getRank() != 2 || type.getElementTypeBitWidth() % 8 != 0)
    return std::nullopt;
  Geometry g;
  // A transposed view is stored as the tile it is the transpose of.
  g.rows = type.getDimSize(encoding.getTransposed() ? 1 : 0);
  g.cols = type.getDimSize(encoding.getTransposed() ? 0 : 1);
  g.elemBytes = type.getElementTypeBitWidth() / 8;
  int64_t chunksPerRow = g.cols * g.elemBytes / hw.chunkBytes;
  g.swizzleBits = std::min<unsigned>(encoding.getSwizzle(), std::max(0, log2Exact(chunksPerRow)));
  return g;
}

bool needsTwin(BlockArgument arg, Operation *reload) {
  Block *body = reload->getBlock();
  return llvm::any_of(arg.getUsers(), [&](Operation *user) {
    Operation *inBody = body->findAncestorOpInBlock(*user);
    return !inBody || reload->isBeforeInBlock(inBody);
  });
}

SmallVector<CarriedTile> carriedTiles(scf::ForOp loop) {
  auto yield = cast<scf::YieldOp>(loop.getBody()->getTerminator());
  SmallVector<CarriedTile> carried;
  for (auto [i, init] : llvm::enumerate(loop.getInitArgs())) {
    if (!isShared(init))
      continue;
    auto reload = yield.getOperand(i).getDefiningOp<LoadOp>();
    if (reload && reload->getBlock() != loop.getBody())
      reload = LoadOp();
    bool ring = reload && needsTwin(loop.getRegionIterArgs()[i], reload);
    carried.push_back({unsigned(i), reload, ring});
  }
  return carried;
}

std::optional<Geometry> conversionScratch(ConvertLayoutOp op) {
  std::optional<LinearLayout> from = registerLayout(op.getInput()), to = registerLayout(op.getResult());
  if (!from || !to)
    return std::nullopt;
  // Same threads hold the same elements: only the register order differs.
  if (from->laneBases() == to->laneBases() && from->warpBases() == to->warpBases())
    return std::nullopt;
  auto type = op.getResult().getType();
  if (type.getRank() > 2)
    return std::nullopt; // the lowering refuses it
  Geometry g;
  g.rows = type.getRank() == 2 ? type.getDimSize(0) : 1;
  g.cols = type.getShape().back();
  g.elemBytes = std::max<int64_t>(1, type.getElementTypeBitWidth() / 8);
  return g;
}

int viewWidthLimit(ValueRange sizes, ValueRange strides, ValueRange offsets, Type elemType,
                   int64_t chunkBytes) {
  if (elemType.getIntOrFloatBitWidth() < 8)
    return 1;
  unsigned last = sizes.size() - 1;
  if (constantInt(strides[last]) != 1)
    return 1;
  int width = chunkBytes / (elemType.getIntOrFloatBitWidth() / 8);
  auto size = constantInt(sizes[last]);
  auto offset = constantInt(offsets[last]);
  while (width > 1 && (!size || !offset || *size % width || *offset % width))
    width /= 2;
  return width;
}

int vectorWidth(const LinearLayout &layout, ValueRange sizes, ValueRange strides, ValueRange offsets,
                Type elemType, int64_t chunkBytes) {
  int limit = viewWidthLimit(sizes, strides, offsets, elemType, chunkBytes);
  if (limit == 1)
    return 1;
  int64_t elemBytes = elemType.getIntOrFloatBitWidth() / 8;
  unsigned last = layout.rank() - 1;
  int width = 1;
  for (const auto &basis : layout.regBases()) {
    Coord unit(layout.rank(), 0);
    unit[last] = width;
    if (basis != unit || (width * 2) * elemBytes > chunkBytes)
      break;
    width *= 2;
  }
  width = std::min(width, limit);
  for (const auto *bases : {&layout.laneBases(), &layout.warpBases()})
    for (const auto &basis : *bases)
      while (width > 1 && basis[last] % width)
        width /= 2;
  return width;
}

std::optional<Staging> epilogueStaging(StoreOp op, const TargetDescription &hw) {
  TypedValue<RankedTensorType> value = op.getValue();
  auto view = op.getView().getDefiningOp<ViewOp>();
  std::optional<LinearLayout> maybeLayout = registerLayout(value);
  if (!view || !maybeLayout || view.getBlock()) // blocked views: register stores only
    return std::nullopt;
  const LinearLayout &layout = *maybeLayout;
  auto type = value.getType();
  Type elemType = type.getElementType();
  // Only a store moving under 16 bytes per access is worth staging.
  int width = vectorWidth(layout, view.getSizes(), view.getStrides(), op.getOffsets(), elemType,
                          hw.chunkBytes);
  if (width * std::max<int64_t>(1, elemType.getIntOrFloatBitWidth() / 8) >= hw.chunkBytes)
    return std::nullopt;
  int64_t elemBytes = type.getElementTypeBitWidth() / 8;
  if (type.getRank() != 2 || type.getElementTypeBitWidth() % 8 != 0 || elemBytes > 4)
    return std::nullopt;
  int64_t rows = type.getDimSize(0), cols = type.getDimSize(1);
  int64_t chunkElems = hw.chunkBytes / elemBytes;
  int64_t chunksPerRow = cols / chunkElems;
  std::optional<int64_t> size1 = constantInt(view.getSizes()[1]);
  std::optional<int64_t> offset1 = constantInt(op.getOffsets()[1]);
  // A chunk is wholly inside the view's columns or wholly outside.
  if (cols % chunkElems != 0 || log2Exact(chunksPerRow) < 0 || constantInt(view.getStrides()[1]) != 1 ||
      !size1 || *size1 % chunkElems != 0 || !offset1 || *offset1 % chunkElems != 0)
    return std::nullopt;
  // Register and thread bits must not overlap (coordinates add), and a
  // thread's registers must come in runs along the row the write can use.
  auto bits = [&](unsigned d) { return layout.threadAndRegisterBits(d); };
  auto [rowThreadBits, rowRegBits] = bits(0);
  auto [colThreadBits, colRegBits] = bits(1);
  if ((rowThreadBits & rowRegBits) || (colThreadBits & colRegBits))
    return std::nullopt;
  int run = 1; // registers r, r+1, ... hold consecutive columns
  while (run < layout.numRegs() && static_cast<size_t>(log2Exact(run)) < layout.regBases().size() &&
         layout.regBases()[log2Exact(run)] == Coord{0, run} && (run * 2) * elemBytes <= 4)
    run *= 2;
  if (colThreadBits % run != 0)
    return std::nullopt;
  unsigned swizzleBits = std::min<int>(hw.maxSwizzleBits, log2Exact(chunksPerRow));
  int64_t mask = (int64_t(1) << swizzleBits) - 1;
  for (int64_t r = 0; r < layout.numRegs(); r += run)
    if (layout.regCoord(r)[0] & mask)
      return std::nullopt; // a register row would change the swizzle phase
  Staging staging;
  staging.rows = rows;
  staging.cols = cols;
  staging.elemBytes = elemBytes;
  staging.swizzleBits = swizzleBits;
  staging.run = run;
  return staging;
}

} // namespace tilec::smem

namespace {

using namespace tilec::smem;

/// A shared tile's region, and the twin of its ring (-1: none).
struct TileRegion {
  int64_t offset = 0, bytes = 0, twin = -1;
  /// The value is a loop's result whose tile was a ring's: a later loop
  /// carrying it continues that ring in the same two regions.
  bool ringResult = false;
};

class Allocator {
public:
  Allocator(const tilec::TargetDescription &hw, bool smemEpilogue, MLIRContext *ctx)
      : hw(hw), smemEpilogue(smemEpilogue), ctx(ctx) {}

  LogicalResult run(func::FuncOp func) {
    if (failed(walk(func.getBody().front(), /*withTerminator=*/true)))
      return failure();
    func->setAttr(tilec::kSharedBytesAttrName, IntegerAttr::get(IntegerType::get(ctx, 64), peak));
    return success();
  }

private:
  SharedRegionAttr attr(int64_t offset, int64_t bytes) { return SharedRegionAttr::get(ctx, offset, bytes); }

  /// The next region at the top of the stack, aligned to the swizzle period.
  SharedRegionAttr allocate(const Geometry &g) {
    int64_t offset = llvm::alignTo(top, hw.sharedAlignment);
    top = offset + g.bytes();
    peak = std::max(peak, top);
    high = std::max(high, top);
    return attr(offset, g.bytes());
  }

  void place(Operation *op, Value tile, const Geometry &g) {
    SharedRegionAttr region = allocate(g);
    op->setAttr(tilec::kSmemAttrName, region);
    if (tile)
      regions[tile] = {region.getOffset(), region.getBytes()};
  }

  LogicalResult walk(Block &block, bool withTerminator = false) {
    for (Operation &op : block) {
      if (!withTerminator && op.hasTrait<OpTrait::IsTerminator>())
        continue;
      if (failed(visit(&op)))
        return failure();
    }
    return success();
  }

  LogicalResult visit(Operation *op) {
    if (auto load = dyn_cast<LoadOp>(op)) {
      Value tile = load.getResult();
      if (auto reload = reloads.find(tile); reload != reloads.end()) {
        regions[tile] = reload->second;
        op->setAttr(tilec::kSmemAttrName, attr(reload->second.offset, reload->second.bytes));
      } else if (auto g = sharedTileGeometry(load.getType(), hw)) {
        place(op, tile, *g);
      }
    } else if (auto convert = dyn_cast<ConvertLayoutOp>(op)) {
      Value in = convert.getInput(), out = convert.getResult();
      if (isShared(out) && isShared(in)) {
        if (auto it = regions.find(in); it != regions.end())
          regions[out] = it->second; // the same tile
      } else if (isShared(out)) {
        if (auto g = sharedTileGeometry(convert.getType(), hw))
          place(op, out, *g);
      } else if (auto g = conversionScratch(convert)) {
        place(op, Value(), *g);
      }
    } else if (auto trans = dyn_cast<TransOp>(op)) {
      if (isShared(trans.getInput()) && isShared(trans.getResult()))
        if (auto it = regions.find(trans.getInput()); it != regions.end())
          regions[trans.getResult()] = it->second; // a transposed view of the same tile
    } else if (auto store = dyn_cast<StoreOp>(op)) {
      if (smemEpilogue && !isShared(store.getValue()))
        if (auto staging = epilogueStaging(store, hw)) {
          int64_t mark = top;
          place(op, Value(), *staging);
          top = mark; // only during the store
        }
    } else if (auto loop = dyn_cast<scf::ForOp>(op)) {
      if (failed(visitFor(loop)))
        return failure();
    } else if (auto branch = dyn_cast<scf::IfOp>(op)) {
      for (mlir::Region *region : {&branch.getThenRegion(), &branch.getElseRegion()}) {
        if (region->empty())
          continue;
        int64_t mark = top;
        if (failed(walk(region->front())))
          return failure();
        top = mark;
      }
    }
    // The peak only grows: the first op after which it is over the limit
    // (nested ops first) is where the tiles live at once.
    if (peak <= hw.maxSharedBytesPerBlock)
      return success();
    return op->emitError() << "the shared tiles live here take " << peak << " bytes, but " << hw.arch
                           << " allows at most " << hw.maxSharedBytesPerBlock
                           << " bytes of shared memory per block (fewer pipeline stages, smaller "
                              "blocks or no shared-memory epilogue need less)";
  }

  LogicalResult visitFor(scf::ForOp op) {
    SmallVector<CarriedTile> carried;
    SmallVector<Attribute> twins;
    for (const CarriedTile &c : carriedTiles(op)) {
      Value init = op.getInitArgs()[c.index];
      auto first = regions.find(init);
      // (Anything else carried in shared memory the lowering refuses.)
      if (!c.reload || first == regions.end())
        continue;
      if (c.ring && !first->second.ringResult) {
        // A fresh ring: its twin lives as long as the loop.
        auto g = sharedTileGeometry(cast<RankedTensorType>(init.getType()), hw);
        if (!g)
          continue;
        SharedRegionAttr twin = allocate(*g);
        first->second.twin = twin.getOffset();
        twins.push_back(twin);
      }
      carried.push_back(c);
    }
    if (!twins.empty())
      op->setAttr(tilec::kSmemTwinsAttrName, ArrayAttr::get(ctx, twins));

    int64_t mark = top, highBefore = high;
    high = top;
    for (CarriedTile &c : carried) {
      TileRegion region = regions[op.getInitArgs()[c.index]];
      regions[op.getRegionIterArgs()[c.index]] = region;
      reloads[c.reload.getResult()] = region;
    }
    if (failed(walk(*op.getBody())))
      return failure();
    op->setAttr(tilec::kSmemBodyAttrName, attr(mark, high - mark));
    high = std::max(high, highBefore);
    top = mark;

    // The regions of carried tiles nothing reads after the loop (the first
    // iteration's tile, the ring's twin) die with it: pop them off the stack.
    SmallVector<std::pair<int64_t, int64_t>> dead; // (offset, bytes)
    for (const CarriedTile &c : carried) {
      Value init = op.getInitArgs()[c.index];
      TileRegion first = regions[init];
      TileRegion after = first;
      after.ringResult = c.ring;
      regions[op.getResult(c.index)] = after;
      if (init.hasOneUse() && op.getResult(c.index).use_empty()) {
        dead.push_back({first.offset, first.bytes});
        if (c.ring)
          dead.push_back({first.twin, first.bytes});
      }
    }
    for (bool popped = true; popped;) {
      popped = false;
      for (auto [offset, bytes] : dead)
        if (offset + bytes == top ||
            (offset < top && int64_t(llvm::alignTo(offset + bytes, hw.sharedAlignment)) == top)) {
          top = offset;
          popped = true;
        }
    }
    return success();
  }

  const tilec::TargetDescription &hw;
  bool smemEpilogue;
  MLIRContext *ctx;
  /// The stack's top, its peak over the kernel, and the highest point since
  /// the innermost loop body began.
  int64_t top = 0, peak = 0, high = 0;
  DenseMap<Value, TileRegion> regions; // shared tiles
  DenseMap<Value, TileRegion> reloads; // tile.loads refilling a loop-carried tile
};

struct TileAllocateSharedPass final : tilec::impl::TileAllocateSharedBase<TileAllocateSharedPass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    const tilec::TargetDescription *hw = tilec::lookupTarget(arch);
    if (!hw) {
      module.emitError() << "tile-allocate-shared: unsupported arch '" << arch
                         << "' (sm_80, sm_86, sm_89, sm_90 or sm_90a)";
      return signalPassFailure();
    }
    for (auto func : module.getOps<func::FuncOp>())
      if (func->hasAttr(tilec::kKernelAttrName) && !func.getBody().empty())
        if (failed(Allocator(*hw, smemEpilogue, &getContext()).run(func)))
          return signalPassFailure();
  }
};

} // namespace
