//===- ConvertTileToNVVM.cpp - layout-assigned tile IR -> LLVM + NVVM -----===//
//
// After tile-partition-warps every tile carries a layout. This pass lowers a
// kernel by walking its body once, in order, and emitting for each op what
// one thread does:
//
//   register tile (#tile.linear)  ->  the list of scalars this thread holds,
//                                      register r at coordinates
//                                      regCoord(r) ^ threadCoord(lane, warp)
//   shared tile (#tile.shared)    ->  a region of dynamic shared memory,
//                                      row-major, 16-byte chunks XOR-swizzled
//                                      with the row so ldmatrix rows hit
//                                      distinct bank groups
//
// Elementwise ops become one scalar op per register; tile.reduce an in-thread
// combine plus butterfly shuffles over the lanes that span the reduced axis;
// tile.dot mma.sync m16n8k16 with B fragments read by ldmatrix(.trans);
// shared tiles are filled by cp.async (16-byte copies, zero-filled beyond
// the view) whose wait is deferred to the first read, so K and V copies of
// one iteration overlap. Scalar arith/scf stay for the upstream conversions
// of the tile-to-nvvm pipeline.
//
//===----------------------------------------------------------------------===//
#include "dialects/Tile/TileDialect.h"
#include "tilec/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/IRMapping.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringSwitch.h"

#include <map>
#include <tuple>

#include "llvm/ADT/bit.h"

namespace tilec {
#define GEN_PASS_DEF_CONVERTTILETONVVM
#include "passes/Passes.h.inc"
} // namespace tilec

using namespace mlir;
using namespace mlir::tile;
using tilec::LinearLayout;

namespace {

constexpr int64_t kWarpSize = 32;
constexpr int64_t kChunkBytes = 16; // cp.async and ldmatrix move 16-byte rows
constexpr unsigned kGlobalAddressSpace = 1;
constexpr unsigned kSharedAddressSpace = 3;
constexpr llvm::StringLiteral kSharedSymbol = "tile_dynamic_smem";
/// Alignment of the shared window's start and of every tile region in it.
constexpr int64_t kSharedAlignment = 128;

/// A view: base pointer plus runtime sizes (i32) and strides (i64).
struct ViewInfo {
  Value base;
  /// The kernel parameter the base pointer derives from (-1: unknown), and
  /// the constant byte offset from it (-1: not a constant).
  int arg = -1;
  int64_t argOffset = -1;
  Type elementType;
  SmallVector<Value> sizes, strides;
};

/// A tile in shared memory: byte offset of its region and its geometry.
struct SharedTile {
  int64_t offset = 0;
  /// Runtime bytes added to `offset` (i32), or null. A tile of a two-buffer
  /// ring (tile-pipeline stages=2) is in the region at `offset` or in its
  /// twin `delta` bytes further, depending on the iteration's parity.
  Value delta;
  /// Bytes from the ring's first region to its twin (0: not a ring tile).
  int64_t twinDistance = 0;
  /// For a ring tile after its loop: the loop's final parity (i32 0/1), so a
  /// following loop can continue the same ring (delta = parity * twin).
  Value parity;
  int64_t rows = 0, cols = 0, elemBytes = 0;
  unsigned swizzleBits = 0;
  int64_t bytes() const { return rows * cols * elemBytes; }
  /// Index of the cp.async group that fills it; -1 once waited for.
  int64_t pendingGroup = -1;
};

std::optional<int64_t> constantInt(Value v) {
  if (auto constant = v.getDefiningOp<arith::ConstantOp>())
    if (auto attr = dyn_cast<IntegerAttr>(constant.getValue()))
      return attr.getInt();
  return std::nullopt;
}

/// How loads respect their view's bounds (the copy-bounds option).
enum class CopyBounds {
  Chunk, ///< every chunk or element tested; copy addresses clamped
  Tile,  ///< one uniform test per tile: unchecked or checked version
  Row,   ///< cp.async sized 16 or 0 by row, no branch; else as Tile
};

/// Which carried ring tiles get their other swizzle phases by XOR from one
/// carried address (the rest carry one address per phase).
enum class XorRingPhases {
  None,     ///< every phase carried
  Trans,    ///< tiles read by ldmatrix.trans (B as K x N, V in attention)
  NonTrans, ///< tiles read by plain ldmatrix (B as N x K, K in attention)
  All,
};

class KernelLowering {
public:
  KernelLowering(func::FuncOp func, LLVM::GlobalOp smem, StringRef arch, bool smemEpilogue,
                 bool skipUnitRescale, CopyBounds copyBounds, bool storeTranspose,
                 bool carryRingAddresses, XorRingPhases xorRingPhases)
      : func(func), smemGlobal(smem), arch(arch), smemEpilogue(smemEpilogue),
        skipUnitRescale(skipUnitRescale), copyBounds(copyBounds), storeTranspose(storeTranspose),
        carryRingAddresses(carryRingAddresses), xorRingPhases(xorRingPhases),
        ctx(func.getContext()),
        b(func.getLoc(), func.getContext()) {}

  LogicalResult run();

private:
  // --- helpers ----------------------------------------------------------
  Value i32(int64_t v) { return arith::ConstantIntOp::create(b, v, 32); }
  Value i64(int64_t v) { return arith::ConstantIntOp::create(b, v, 64); }
  Type ptrType(unsigned space) { return LLVM::LLVMPointerType::get(ctx, space); }
  LinearLayout layoutOf(Value tile) {
    return toLinearLayout(cast<LinearLayoutAttr>(cast<RankedTensorType>(tile.getType()).getEncoding()));
  }
  bool isShared(Value v) {
    auto type = dyn_cast<RankedTensorType>(v.getType());
    return type && isa_and_nonnull<SharedLayoutAttr>(type.getEncoding());
  }
  Value scalar(Value old) { return mapping.lookup(old); }
  SmallVector<Value> threadCoords(const LinearLayout &layout);
  /// i1: this thread owns the elements it holds, i.e. its lane and warp bits
  /// that only replicate elements (zero bases) are zero; null when the layout
  /// replicates nothing. Writers of replicated tiles (stores, atomic adds)
  /// write each element once, from its owner.
  Value replicaOwner(const LinearLayout &layout);
  /// Exchanges registers between lanes (shuffles) so that each thread holds
  /// longer runs of a row, up to 16 bytes; updates layout and values.
  void widenRowRuns(LinearLayout &layout, SmallVector<Value> &values, Type elemType,
                    int64_t maxRun);
  SmallVector<Value> elementCoords(const LinearLayout &layout, ArrayRef<Value> thread, int64_t reg);
  Value inBounds(const ViewInfo &view, ArrayRef<Value> index);
  /// Dimensions firstDim, firstDim + 1, ... of the view against offsets and extents.
  Value tileInsideView(const ViewInfo &view, ArrayRef<Value> offsets, ArrayRef<int64_t> extents,
                       unsigned firstDim = 0);
  Value elementAddress(const ViewInfo &view, ArrayRef<Value> index);
  Value sharedElementAddress(const SharedTile &tile, Value row, Value col);
  Value sharedChunkAddress(const SharedTile &tile, Value rowRuntime, int64_t rowConst,
                           Value chunkRuntime, int64_t chunkConst);
  std::pair<Value, int64_t> sharedChunkBase(const SharedTile &tile, Value rowRuntime,
                                            int64_t rowConst, Value chunkRuntime,
                                            int64_t chunkConst, bool chunkRuntimeIsBit = false);
  Value ldmatrix(Value base, int64_t offset, int num, bool transpose);
  Value exp2(Value x);
  Value log2(Value x);
  Value combine(ReduceKind kind, Value a, Value b);
  int vectorWidth(const LinearLayout &layout, const ViewInfo &view, ValueRange offsets,
                  Type elemType);
  int viewWidthLimit(const ViewInfo &view, ValueRange offsets, Type elemType);
  LogicalResult registerRemap(Value from, Value to, function_ref<tilec::Coord(tilec::Coord)> project,
                              Operation *op);
  void waitFor(Value tile);
  /// Shared tiles with a copy not yet waited for, and their group indices.
  SmallVector<std::pair<Value, int64_t>> pendingSnapshot();
  /// After a loop or branch (which may run any number of times, or not at
  /// all), the tiles that were pending before it are waited for as if
  /// committed last: a later wait covers every group committed so far.
  void assumeCommittedLast(ArrayRef<std::pair<Value, int64_t>> pending);
  void drainRegion(const SharedTile &tile);
  /// lastWriter[offset] = (group, bytes), merged with what is there (the
  /// later group, the larger extent) so no coverage is lost.
  void recordWriter(int64_t offset, int64_t group, int64_t bytes);
  /// After a loop or branch whose paths commit different numbers of groups,
  /// a compile-time group index no longer names one group on every path:
  /// regions whose copies are not known complete count as written by the
  /// newest group (a later drain then waits for everything).
  void renumberPendingWriters();
  /// bar.sync; copies waited for so far are now visible to every thread.
  void barrier();
  /// The barrier a refill of shared memory needs (everyone done with what
  /// was there), unless no thread touched shared memory since the last one.
  void barrierBeforeFill();
  SmallVector<Value> readShared(SharedTile &tile, const LinearLayout &layout, Type elemType);
  void writeShared(SharedTile &tile, const LinearLayout &layout, ArrayRef<Value> regs);
  SharedTile allocateShared(RankedTensorType type);
  /// The next region of the shared-memory stack, 128-byte aligned.
  SharedTile allocateRegion(int64_t rows, int64_t cols, int64_t elemBytes, unsigned swizzleBits);
  /// Inline PTX with side effects (kept in order with barriers and waits).
  Operation *inlinePtx(TypeRange results, ValueRange operands, StringRef text,
                       StringRef constraints);

  // --- ops ----------------------------------------------------------------
  LogicalResult lowerBlock(Block &block);
  LogicalResult lowerOp(Operation *op);
  LogicalResult lowerLoad(LoadOp op);
  LogicalResult lowerLoadToShared(LoadOp op);
  LogicalResult lowerStore(StoreOp op);
  LogicalResult lowerAtomicAdd(AtomicAddOp op);
  LogicalResult lowerStoreThroughShared(StoreOp op);
  void storeGlobalIf(Value ok, Value address, Value value, int64_t bytes);
  LogicalResult lowerDot(DotOp op);
  LogicalResult lowerReduce(ReduceOp op);
  LogicalResult lowerFor(scf::ForOp op);
  LogicalResult lowerIf(scf::IfOp op);
  LogicalResult lowerConvert(ConvertLayoutOp op);
  LogicalResult lowerElementwise(Operation *op);
  bool lowerRescale(arith::MulFOp op);
  LogicalResult lowerMath(Operation *op, ValueRange operands, SmallVectorImpl<Value> &results);

  SmallVector<Value> flatten(ValueRange oldValues);
  void unflatten(ValueRange oldValues, ValueRange newValues);

  func::FuncOp func;
  LLVM::GlobalOp smemGlobal;
  std::string arch;
  /// Store narrow register tiles through shared memory (16-byte chunks).
  bool smemEpilogue;
  /// Multiply by a broadcast only where a factor differs from 1 (see
  /// lowerRescale).
  bool skipUnitRescale;
  CopyBounds copyBounds;
  /// Widen direct stores to 16 bytes by exchanging registers between lanes.
  bool storeTranspose;
  bool carryRingAddresses;
  XorRingPhases xorRingPhases;
  MLIRContext *ctx;
  ImplicitLocOpBuilder b;
  int64_t numWarps = 4;

  IRMapping mapping;                          // scalars
  DenseMap<Value, SmallVector<Value>> regs;   // register tiles
  DenseMap<Value, SharedTile> sharedTiles;    // shared tiles
  DenseMap<Value, SharedTile> reuseRegion;    // loads refilling a loop-carried tile
  DenseMap<std::pair<Value, Value>, Value> packedPairs; // (lo, hi) -> their vector<2x..>
  DenseMap<Value, ViewInfo> views;
  /// Pointer values (old IR) -> the kernel parameter they derive from and
  /// their constant byte offset from it (-1: a runtime offset). Pointers
  /// carried through loops or branches are not followed (no check for them).
  DenseMap<Value, std::pair<unsigned, int64_t>> pointerParam;
  /// Pointer parameters some tile.store writes through (all of them when a
  /// store's base is not traced to one): tile.load_scalar reads the others
  /// with ld.global.nc.
  llvm::SmallDenseSet<unsigned> storedParams;
  bool storesUntraced = false;
  LogicalResult lowerLoadScalar(LoadScalarOp op);
  /// Widest single global access (bytes) made through each pointer
  /// parameter: the launch manifest asks the runtime to check alignment.
  std::map<unsigned, int64_t> accessBytes;
  /// An access `bytes` wide through `view` makes the parameter need that
  /// alignment — unless a constant offset from it is not a multiple of the
  /// width (then the parameter itself must not be aligned; no requirement is
  /// stated). A runtime offset is assumed to keep the alignment (documented).
  void noteAccess(const ViewInfo &view, int64_t bytes) {
    if (view.arg < 0 || (view.argOffset >= 0 && view.argOffset % bytes != 0))
      return;
    accessBytes[view.arg] = std::max(accessBytes[view.arg], bytes);
  }
  DenseMap<Attribute, SmallVector<Value>> threadCoordCache;
  Value laneId, warpId, threadId, smemBase;
  Operation *prologueEnd = nullptr;
  /// Swizzled row/chunk base addresses per (tile, row, chunk, low chunk bits).
  using ChunkBaseKey = std::tuple<int64_t, void *, void *, int64_t, void *>;
  std::map<ChunkBaseKey, Value> chunkBaseCache;
  /// Ring-shifted bases (base + this iteration's delta) created in loop
  /// bodies; lowerFor turns those of its own body into loop-carried values.
  struct RingShift {
    Value shifted, base, delta;
    ChunkBaseKey key;
  };
  SmallVector<RingShift> ringShifts;
  /// Set while lowering a dot (only ldmatrix bases are carried) in a loop
  /// whose accumulators leave registers short (see lowerFor).
  bool carryShifts = false;
  /// With carryShifts: derive the B tile's other swizzle phases by XOR
  /// (xor-ring-phases) instead of carrying each.
  bool xorShifts = false;
  bool loopShortOfRegisters = false;
  void carryRingShifts(scf::ForOp &loop, Value parityInit);
  /// When set, new chunk bases are computed at the insertion point and kept
  /// here instead (see sharedChunkBase).
  std::map<ChunkBaseKey, Value> *localChunkBases = nullptr;
  /// Shared memory is allocated like a stack: tiles made inside a loop body
  /// or branch die with it, so the next loop (the masked/unmasked copies
  /// tile-split-masked-loops makes) reuses the space. The barrier before
  /// every fill makes reuse safe.
  int64_t sharedBytes = 0;
  int64_t sharedPeak = 0;
  int64_t committedGroups = 0;
  /// Highest cp.async group known complete at this point of the walk.
  int64_t completeThrough = -1;
  /// Highest group known complete *and* followed by a barrier: its data is
  /// visible to every thread without another bar.sync.
  int64_t visibleThrough = -1;
  /// Whether some thread may have read or written shared memory since the
  /// last barrier (a refill must then wait for everyone first).
  bool sharedAccessSinceBarrier = false; // nothing before the kernel starts
  /// Per region offset: (last group that filled it, region bytes).
  std::map<int64_t, std::pair<int64_t, int64_t>> lastWriter;
};

//===----------------------------------------------------------------------===//
// Addressing helpers
//===----------------------------------------------------------------------===//

/// Runtime coordinates of this thread's register 0: XOR of the lane and warp
/// bases of the set bits, computed once in the entry block.
Value KernelLowering::replicaOwner(const LinearLayout &layout) {
  int64_t laneMask = 0, warpMask = 0;
  tilec::Coord zero(layout.rank(), 0);
  for (size_t i = 0; i < layout.laneBases().size(); ++i)
    if (layout.laneBases()[i] == zero)
      laneMask |= int64_t(1) << i;
  for (size_t i = 0; i < layout.warpBases().size(); ++i)
    if (layout.warpBases()[i] == zero)
      warpMask |= int64_t(1) << i;
  if (!laneMask && !warpMask)
    return Value();
  Value bits = arith::OrIOp::create(b, arith::AndIOp::create(b, laneId, i32(laneMask)),
                                    arith::AndIOp::create(b, warpId, i32(warpMask)));
  return arith::CmpIOp::create(b, arith::CmpIPredicate::eq, bits, i32(0));
}

SmallVector<Value> KernelLowering::threadCoords(const LinearLayout &layout) {
  Attribute key = toAttr(ctx, layout);
  if (auto it = threadCoordCache.find(key); it != threadCoordCache.end())
    return it->second;
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(prologueEnd);
  SmallVector<Value> coords;
  for (unsigned d = 0; d < layout.rank(); ++d) {
    Value acc = i32(0);
    auto addBits = [&](Value index, const std::vector<tilec::Coord> &bases) {
      for (size_t i = 0; i < bases.size(); ++i) {
        if (bases[i][d] == 0)
          continue;
        Value bit = arith::AndIOp::create(b, arith::ShRUIOp::create(b, index, i32(i)), i32(1));
        Value contribution = arith::MulIOp::create(b, bit, i32(bases[i][d]));
        acc = arith::XOrIOp::create(b, acc, contribution);
      }
    };
    addBits(laneId, layout.laneBases());
    addBits(warpId, layout.warpBases());
    coords.push_back(acc);
  }
  threadCoordCache[key] = coords;
  return coords;
}

/// The bits of dimension `d` that lane/warp bases set, and that register
/// bases set: where the two are disjoint, a coordinate is the sum of a
/// thread part and a register part.
static std::pair<int64_t, int64_t> threadAndRegisterBits(const LinearLayout &layout, unsigned d) {
  int64_t threadBits = 0, regBits = 0;
  for (const auto *bases : {&layout.laneBases(), &layout.warpBases()})
    for (const auto &basis : *bases)
      threadBits |= basis[d];
  for (const auto &basis : layout.regBases())
    regBits |= basis[d];
  return {threadBits, regBits};
}

/// Coordinates of register `reg`: its constant part combined with the
/// thread's. When the bits of the two parts are disjoint (every layout tilec
/// builds), XOR is an add, which lets address arithmetic fold constants.
SmallVector<Value> KernelLowering::elementCoords(const LinearLayout &layout, ArrayRef<Value> thread,
                                                 int64_t reg) {
  tilec::Coord regPart = layout.regCoord(reg);
  SmallVector<Value> coords;
  for (unsigned d = 0; d < layout.rank(); ++d) {
    auto [threadBits, regBits] = threadAndRegisterBits(layout, d);
    if (regPart[d] == 0)
      coords.push_back(thread[d]);
    else if ((threadBits & regBits) == 0)
      coords.push_back(arith::AddIOp::create(b, thread[d], i32(regPart[d])));
    else
      coords.push_back(arith::XOrIOp::create(b, thread[d], i32(regPart[d])));
  }
  return coords;
}

Value KernelLowering::inBounds(const ViewInfo &view, ArrayRef<Value> index) {
  Value ok;
  for (size_t d = 0; d < index.size(); ++d) {
    // Unsigned compare also rejects negative indices.
    Value inside = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, index[d], view.sizes[d]);
    ok = ok ? arith::AndIOp::create(b, ok, inside).getResult() : inside;
  }
  return ok;
}

/// Whether the tile [offsets, offsets + extents) lies inside the view in
/// every dimension: one uniform test per tile instead of one per element. It
/// folds to a constant where offsets and sizes are constants.
Value KernelLowering::tileInsideView(const ViewInfo &view, ArrayRef<Value> offsets,
                                     ArrayRef<int64_t> extents, unsigned firstDim) {
  Value all;
  for (size_t d = firstDim; d < firstDim + offsets.size(); ++d) {
    // 0 <= offset <= size - extent (signed: size - extent < 0 when the tile
    // is larger than the view, and then nothing fits).
    Value offset = offsets[d - firstDim];
    Value lastStart = b.createOrFold<arith::SubIOp>(view.sizes[d], i32(extents[d - firstDim]));
    Value notBefore = b.createOrFold<arith::CmpIOp>(arith::CmpIPredicate::sge, offset, i32(0));
    Value notPast = b.createOrFold<arith::CmpIOp>(arith::CmpIPredicate::sle, offset, lastStart);
    Value fits = b.createOrFold<arith::AndIOp>(notBefore, notPast);
    all = all ? b.createOrFold<arith::AndIOp>(all, fits) : fits;
  }
  return all;
}

Value KernelLowering::elementAddress(const ViewInfo &view, ArrayRef<Value> index) {
  Value offset;
  for (size_t d = 0; d < index.size(); ++d) {
    Value term = arith::MulIOp::create(b, arith::ExtSIOp::create(b, b.getI64Type(), index[d]),
                                       view.strides[d]);
    offset = offset ? arith::AddIOp::create(b, offset, term).getResult() : term;
  }
  return LLVM::GEPOp::create(b, ptrType(kGlobalAddressSpace), view.elementType, view.base,
                             ValueRange{offset});
}

/// Address of the 16-byte chunk (rowRuntime + rowConst, chunkRuntime +
/// chunkConst) of a swizzled shared tile, where the runtime parts are
/// thread-invariant values of the prologue and rowConst is a multiple of the
/// swizzle period. Swizzling only touches the low chunk bits, so
///   ((cr + cc) ^ s) = ((cr + (cc & m)) ^ s) + (cc & ~m),   s = row & m,
/// and every access becomes one of at most 2^swizzleBits base addresses per
/// tile plus a constant: ldmatrix/cp.async get [reg + imm] addressing and the
/// loop keeps a handful of address registers instead of one per access.
Value KernelLowering::sharedChunkAddress(const SharedTile &tile, Value rowRuntime, int64_t rowConst,
                                         Value chunkRuntime, int64_t chunkConst) {
  auto [base, offset] = sharedChunkBase(tile, rowRuntime, rowConst, chunkRuntime, chunkConst);
  if (offset == 0)
    return base;
  return LLVM::GEPOp::create(b, ptrType(kSharedAddressSpace), b.getI8Type(), base,
                             ArrayRef<LLVM::GEPArg>{offset});
}

std::pair<Value, int64_t> KernelLowering::sharedChunkBase(const SharedTile &tile, Value rowRuntime,
                                                          int64_t rowConst, Value chunkRuntime,
                                                          int64_t chunkConst, bool chunkRuntimeIsBit) {
  int64_t mask = (int64_t(1) << tile.swizzleBits) - 1;
  assert((rowConst & mask) == 0 && "row offset must keep the swizzle phase");
  int64_t chunkLow = chunkConst & mask, chunkHigh = chunkConst & ~mask;
  int64_t rowBytes = tile.cols * tile.elemBytes;
  // Cache key: the tile, this thread's row and chunk, the low chunk bits
  // and, for addresses inside a ring loop, the iteration's delta.
  auto keyFor = [&](int64_t low, Value delta) -> ChunkBaseKey {
    return {tile.offset * 4096 + rowBytes, rowRuntime.getAsOpaquePointer(),
            chunkRuntime.getAsOpaquePointer(), low,
            delta ? delta.getAsOpaquePointer() : static_cast<void *>(nullptr)};
  };
  // Carried ring addresses (carry-ring-addresses, xor-ring-phases): carry
  // only the low-chunk-0 address and derive the others by XOR each
  // iteration: one carried register per (tile, dot) instead of one per even
  // low chunk (4 at swizzleBits 3). Valid when the runtime
  // chunk is a 0/1 lane bit and chunkLow is even (cr + cl = cr ^ cl, so the
  // swizzled chunk is chunk_0 ^ cl) and nothing else in the address has a
  // bit where the chunk sits: rows, the region, the twin distance and the
  // shared window's alignment (128) are multiples of the swizzle period.
  int64_t period = kChunkBytes << tile.swizzleBits;
  if (xorShifts && tile.delta && chunkRuntimeIsBit && chunkLow != 0 && chunkLow % 2 == 0 &&
      rowBytes % period == 0 && tile.offset % period == 0 && tile.twinDistance % period == 0 &&
      kSharedAlignment % period == 0) {
    auto [first, constant] =
        sharedChunkBase(tile, rowRuntime, rowConst, chunkRuntime, chunkConst & ~mask, true);
    // -chunkLow: apart from the ring-shifted bases' keys (below).
    Value &derived = chunkBaseCache[keyFor(-chunkLow, tile.delta)];
    if (!derived) {
      // At the first use, unless that is inside a branch later uses would
      // not see (then right after the carried address).
      OpBuilder::InsertionGuard guard(b);
      if (b.getInsertionBlock() != first.getParentBlock())
        b.setInsertionPointAfterValue(first);
      Value address = LLVM::PtrToIntOp::create(b, b.getI32Type(), first);
      address = arith::XOrIOp::create(b, address, i32(chunkLow * kChunkBytes));
      derived = LLVM::IntToPtrOp::create(b, ptrType(kSharedAddressSpace), address);
    }
    return {derived, constant};
  }
  ChunkBaseKey key = keyFor(chunkLow, Value());
  // Bases are hoisted to the entry block, where loops read them every
  // iteration; code after the loops (an epilogue) computes its own in place
  // rather than keeping more registers live through the loops.
  auto hoisted = chunkBaseCache.find(key);
  Value &base = hoisted != chunkBaseCache.end() || !localChunkBases ? chunkBaseCache[key]
                                                                     : (*localChunkBases)[key];
  if (!base) {
    OpBuilder::InsertionGuard guard(b);
    if (!localChunkBases)
      b.setInsertionPoint(prologueEnd);
    Value chunk = arith::AddIOp::create(b, chunkRuntime, i32(chunkLow));
    if (mask)
      chunk = arith::XOrIOp::create(b, chunk, arith::AndIOp::create(b, rowRuntime, i32(mask)));
    Value bytes = arith::AddIOp::create(b, arith::MulIOp::create(b, rowRuntime, i32(rowBytes)),
                                        arith::MulIOp::create(b, chunk, i32(kChunkBytes)));
    bytes = arith::AddIOp::create(b, bytes, i32(tile.offset));
    base = LLVM::GEPOp::create(b, ptrType(kSharedAddressSpace), b.getI8Type(), smemBase,
                               ValueRange{bytes});
  }
  int64_t constant = rowConst * rowBytes + chunkHigh * kChunkBytes;
  if (!tile.delta)
    return {base, constant};
  // A ring tile: the loop-invariant base plus this iteration's delta, once
  // per iteration (right after the delta is computed, at the top of the body).
  key = keyFor(chunkLow, tile.delta);
  Value &shifted = chunkBaseCache[key];
  if (!shifted) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointAfterValue(tile.delta);
    shifted = LLVM::GEPOp::create(b, ptrType(kSharedAddressSpace), b.getI8Type(), base,
                                  ValueRange{tile.delta});
    if (carryShifts)
      ringShifts.push_back({shifted, base, tile.delta, key});
  }
  return {shifted, constant};
}

/// ldmatrix.x{num}[.trans] at [base + offset], as inline PTX with the offset
/// in the instruction text. Why not nvvm.ldmatrix: every one of a dot's
/// ldmatrix addresses is loop-invariant, so LLVM's LICM hoists each
/// base+offset out of the K/V loop, pinning one 64-bit register per ldmatrix
/// (over 100 registers and spills at head_dim 128). With the offset in the
/// immediate field only the few bases stay live. Side effects keep it from
/// being hoisted itself (it reads shared memory that changes every
/// iteration) and ordered with the barriers and cp.async waits around it.
Value KernelLowering::ldmatrix(Value base, int64_t offset, int num, bool transpose) {
  sharedAccessSinceBarrier = true;
  std::string regs;
  for (int i = 0; i < num; ++i)
    regs += (i ? ", $" : "$") + std::to_string(i);
  std::string text = "ldmatrix.sync.aligned.m8n8.x" + std::to_string(num) +
                     (transpose ? ".trans" : "") + ".shared.b16 {" + regs + "}, [$" +
                     std::to_string(num) + "+" + std::to_string(offset) + "];";
  std::string constraints;
  for (int i = 0; i < num; ++i)
    constraints += "=r,";
  // Shared addresses are 32-bit: lib/Target builds the NVPTX target with
  // short pointers (nvptx-short-ptr).
  constraints += "r";
  auto type = LLVM::LLVMStructType::getLiteral(ctx, SmallVector<Type>(num, b.getI32Type()));
  return inlinePtx(type, base, text, constraints)->getResult(0);
}

/// Byte address of element (row, col) of a swizzled row-major shared tile:
/// the 16-byte chunk index is XORed with the row's low bits.
Value KernelLowering::sharedElementAddress(const SharedTile &tile, Value row, Value col) {
  int64_t elemsPerChunk = kChunkBytes / tile.elemBytes;
  Value chunk = arith::DivUIOp::create(b, col, i32(elemsPerChunk));
  Value within = arith::RemUIOp::create(b, col, i32(elemsPerChunk));
  if (tile.swizzleBits > 0) {
    Value rowBits = arith::AndIOp::create(b, row, i32((1 << tile.swizzleBits) - 1));
    chunk = arith::XOrIOp::create(b, chunk, rowBits);
  }
  int64_t rowBytes = tile.cols * tile.elemBytes;
  Value bytes = arith::AddIOp::create(
      b, arith::AddIOp::create(b, arith::MulIOp::create(b, row, i32(rowBytes)),
                               arith::MulIOp::create(b, chunk, i32(kChunkBytes))),
      arith::MulIOp::create(b, within, i32(tile.elemBytes)));
  bytes = arith::AddIOp::create(b, bytes, i32(tile.offset));
  if (tile.delta)
    bytes = arith::AddIOp::create(b, bytes, tile.delta);
  return LLVM::GEPOp::create(b, ptrType(kSharedAddressSpace), b.getI8Type(), smemBase,
                             ValueRange{bytes});
}

Value KernelLowering::exp2(Value x) {
  // ex2.approx.ftz: ~2 ulp, exp2(-inf) = +0; what FlashAttention uses.
  return LLVM::CallIntrinsicOp::create(b, b.getF32Type(),
                                       b.getStringAttr("llvm.nvvm.ex2.approx.ftz.f32"),
                                       ValueRange{x})
      .getResult(0);
}

Value KernelLowering::log2(Value x) {
  return LLVM::CallIntrinsicOp::create(b, b.getF32Type(),
                                       b.getStringAttr("llvm.nvvm.lg2.approx.ftz.f"), ValueRange{x})
      .getResult(0);
}

Value KernelLowering::combine(ReduceKind kind, Value x, Value y) {
  if (kind == ReduceKind::max)
    return arith::MaximumFOp::create(b, x, y);
  return arith::AddFOp::create(b, x, y);
}

SharedTile KernelLowering::allocateShared(RankedTensorType type) {
  int64_t rows = type.getDimSize(0), cols = type.getDimSize(1);
  int64_t elemBytes = type.getElementTypeBitWidth() / 8;
  int64_t chunksPerRow = cols * elemBytes / kChunkBytes;
  auto encoding = cast<SharedLayoutAttr>(type.getEncoding());
  return allocateRegion(rows, cols, elemBytes,
                        std::min<unsigned>(encoding.getSwizzle(), std::max(0, tilec::log2Exact(chunksPerRow))));
}

SharedTile KernelLowering::allocateRegion(int64_t rows, int64_t cols, int64_t elemBytes,
                                          unsigned swizzleBits) {
  SharedTile tile;
  tile.rows = rows;
  tile.cols = cols;
  tile.elemBytes = elemBytes;
  tile.swizzleBits = swizzleBits;
  tile.offset = llvm::alignTo(sharedBytes, kSharedAlignment);
  sharedBytes = tile.offset + tile.bytes();
  sharedPeak = std::max(sharedPeak, sharedBytes);
  return tile;
}

Operation *KernelLowering::inlinePtx(TypeRange results, ValueRange operands, StringRef text,
                                     StringRef constraints) {
  return LLVM::InlineAsmOp::create(b, results, operands, text, constraints,
                                   /*has_side_effects=*/true, /*is_align_stack=*/false,
                                   LLVM::tailcallkind::TailCallKind::None,
                                   LLVM::AsmDialectAttr::get(ctx, LLVM::AsmDialect::AD_ATT),
                                   ArrayAttr());
}

void KernelLowering::waitFor(Value tileValue) {
  SharedTile &tile = sharedTiles[tileValue];
  if (tile.pendingGroup < 0)
    return;
  if (tile.pendingGroup > completeThrough) {
    // Groups committed after this one may stay in flight.
    int64_t newer = std::max<int64_t>(0, committedGroups - tile.pendingGroup - 1);
    NVVM::CpAsyncWaitGroupOp::create(b, b.getI32IntegerAttr(newer));
    completeThrough = tile.pendingGroup;
  }
  // Each thread waited for its own copies; the barrier shows them to all.
  if (tile.pendingGroup > visibleThrough)
    barrier();
  tile.pendingGroup = -1;
}

void KernelLowering::barrier() {
  NVVM::Barrier0Op::create(b);
  visibleThrough = completeThrough;
  sharedAccessSinceBarrier = false;
}

void KernelLowering::barrierBeforeFill() {
  if (sharedAccessSinceBarrier)
    barrier();
}

SmallVector<std::pair<Value, int64_t>> KernelLowering::pendingSnapshot() {
  SmallVector<std::pair<Value, int64_t>> pending;
  for (auto &[value, tile] : sharedTiles)
    if (tile.pendingGroup >= 0)
      pending.push_back({value, tile.pendingGroup});
  return pending;
}

void KernelLowering::assumeCommittedLast(ArrayRef<std::pair<Value, int64_t>> pending) {
  for (auto [value, group] : pending)
    sharedTiles[value].pendingGroup = committedGroups - 1;
}

/// A region about to be refilled may still have a copy in flight from an
/// earlier fill nobody waited for (the prefetch of a loop's last iteration,
/// before the next loop reuses the space): that copy must land first, or it
/// could overwrite the new data.
void KernelLowering::drainRegion(const SharedTile &tile) {
  int64_t size = tile.bytes();
  int64_t latest = -1;
  SmallVector<int64_t, 2> regions = {tile.offset};
  if (tile.delta) // a ring tile: either of its two regions
    regions.push_back(tile.offset + tile.twinDistance);
  for (int64_t region : regions)
    for (const auto &[offset, writer] : lastWriter)
      if (offset < region + size && region < offset + writer.second)
        latest = std::max(latest, writer.first);
  if (latest > completeThrough) {
    assert(latest < committedGroups && "a region's writer is a committed group");
    NVVM::CpAsyncWaitGroupOp::create(
        b, b.getI32IntegerAttr(std::max<int64_t>(0, committedGroups - latest - 1)));
    completeThrough = latest;
    // Each thread waited for its own copies only; the refill (which follows
    // every drain) must wait for everyone's, behind a barrier.
    sharedAccessSinceBarrier = true;
  }
}

void KernelLowering::recordWriter(int64_t offset, int64_t group, int64_t bytes) {
  auto [it, inserted] = lastWriter.try_emplace(offset, group, bytes);
  if (!inserted)
    it->second = {std::max(it->second.first, group), std::max(it->second.second, bytes)};
}

void KernelLowering::renumberPendingWriters() {
  for (auto &[offset, writer] : lastWriter)
    if (writer.first > completeThrough)
      writer.first = committedGroups - 1;
}

SmallVector<Value> KernelLowering::readShared(SharedTile &tile, const LinearLayout &layout,
                                              Type elemType) {
  sharedAccessSinceBarrier = true;
  SmallVector<Value> thread = threadCoords(layout);
  SmallVector<Value> out;
  for (int64_t r = 0; r < layout.numRegs(); ++r) {
    SmallVector<Value> c = elementCoords(layout, thread, r);
    Value row = c.size() == 2 ? c[0] : i32(0); // rank 1: one row
    out.push_back(LLVM::LoadOp::create(b, elemType, sharedElementAddress(tile, row, c.back())));
  }
  return out;
}

void KernelLowering::writeShared(SharedTile &tile, const LinearLayout &layout, ArrayRef<Value> values) {
  sharedAccessSinceBarrier = true;
  SmallVector<Value> thread = threadCoords(layout);
  for (int64_t r = 0; r < layout.numRegs(); ++r) {
    SmallVector<Value> c = elementCoords(layout, thread, r);
    Value row = c.size() == 2 ? c[0] : i32(0); // rank 1: one row
    LLVM::StoreOp::create(b, values[r], sharedElementAddress(tile, row, c.back()));
  }
}

/// The most elements along the view's last dimension one access may move
/// (up to 16 bytes): the dimension is contiguous (stride constant 1) and
/// the view's size and the offset are constant multiples of it, so that a
/// vector is wholly inside or outside the view. Sub-byte elements (i1) move
/// one at a time: a vector of them is bit-packed.
int KernelLowering::viewWidthLimit(const ViewInfo &view, ValueRange offsets, Type elemType) {
  if (elemType.getIntOrFloatBitWidth() < 8)
    return 1;
  unsigned last = view.sizes.size() - 1;
  if (constantInt(view.strides[last]) != 1)
    return 1;
  int width = kChunkBytes / (elemType.getIntOrFloatBitWidth() / 8);
  auto size = constantInt(view.sizes[last]);
  auto offset = constantInt(offsets[last]);
  while (width > 1 && (!size || !offset || *size % width || *offset % width))
    width /= 2;
  return width;
}

/// Number of consecutive registers that one vector access can move: the
/// leading register bases walk the last dimension one element at a time,
/// the thread's part keeps vectors aligned, and the view allows the width
/// (viewWidthLimit).
int KernelLowering::vectorWidth(const LinearLayout &layout, const ViewInfo &view,
                                ValueRange offsets, Type elemType) {
  int limit = viewWidthLimit(view, offsets, elemType);
  if (limit == 1)
    return 1;
  int64_t elemBytes = elemType.getIntOrFloatBitWidth() / 8;
  unsigned last = layout.rank() - 1;
  int width = 1;
  for (const auto &basis : layout.regBases()) {
    tilec::Coord unit(layout.rank(), 0);
    unit[last] = width;
    if (basis != unit || (width * 2) * elemBytes > kChunkBytes)
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

/// Register tiles whose elements sit in the same threads (up to `project`)
/// only need their registers renamed.
LogicalResult KernelLowering::registerRemap(Value from, Value to,
                                            function_ref<tilec::Coord(tilec::Coord)> project,
                                            Operation *op) {
  LinearLayout in = layoutOf(from), out = layoutOf(to);
  auto projectBases = [&](const std::vector<tilec::Coord> &bases) {
    std::vector<tilec::Coord> projected;
    for (const auto &basis : bases)
      projected.push_back(project(basis));
    return projected;
  };
  if (projectBases(out.laneBases()) != in.laneBases() ||
      projectBases(out.warpBases()) != in.warpBases())
    return op->emitError() << "layouts of operand and result place elements in different "
                              "threads; tile-partition-warps should have inserted a "
                              "tile.convert_layout here";
  SmallVector<Value> &source = regs[from];
  SmallVector<Value> result;
  for (int64_t r = 0; r < out.numRegs(); ++r) {
    std::optional<int64_t> holder = in.regHolding(project(out.regCoord(r)));
    if (!holder)
      return op->emitError() << "no register of the operand holds element "
                             << "of result register " << r;
    result.push_back(source[*holder]);
  }
  regs[to] = std::move(result);
  return success();
}

//===----------------------------------------------------------------------===//
// Ops
//===----------------------------------------------------------------------===//

LogicalResult KernelLowering::lowerLoad(LoadOp op) {
  if (isShared(op.getResult()))
    return lowerLoadToShared(op);
  const ViewInfo &view = views[op.getView()];
  LinearLayout layout = layoutOf(op.getResult());
  Type elemType = op.getResult().getType().getElementType();
  int64_t elemBytes = std::max<int64_t>(1, elemType.getIntOrFloatBitWidth() / 8);
  SmallVector<Value> offsets = llvm::map_to_vector(op.getOffsets(), [&](Value v) { return scalar(v); });
  int width = vectorWidth(layout, view, op.getOffsets(), elemType);
  noteAccess(view, width * elemBytes);

  Value padding;
  switch (op.getPadding()) {
  case PaddingKind::zero:
    padding = LLVM::ZeroOp::create(b, elemType);
    break;
  case PaddingKind::neg_inf:
    padding = arith::ConstantOp::create(
        b, b.getFloatAttr(elemType, APFloat::getInf(cast<FloatType>(elemType).getFloatSemantics(), true)));
    break;
  case PaddingKind::nan:
    padding = arith::ConstantOp::create(
        b, b.getFloatAttr(elemType, APFloat::getNaN(cast<FloatType>(elemType).getFloatSemantics())));
    break;
  }
  if (op.getPadding() != PaddingKind::zero && !isa<FloatType>(elemType))
    return op.emitError() << "padding " << stringifyPaddingKind(op.getPadding())
                          << " needs a float tile";

  SmallVector<Value> thread = threadCoords(layout);
  Type vecType = width > 1 ? VectorType::get({width}, elemType) : elemType;
  auto elementIndex = [&](int64_t r) {
    SmallVector<Value> c = elementCoords(layout, thread, r), index;
    for (size_t d = 0; d < c.size(); ++d)
      index.push_back(arith::AddIOp::create(b, c[d], offsets[d]));
    return index;
  };
  // One load (a `width` vector, or a scalar) per group of registers.
  auto uncheckedLoads = [&] {
    SmallVector<Value> loaded;
    for (int64_t r = 0; r < layout.numRegs(); r += width)
      loaded.push_back(LLVM::LoadOp::create(b, vecType, elementAddress(view, elementIndex(r)),
                                            width * elemBytes));
    return loaded;
  };
  auto checkedLoads = [&] {
    SmallVector<Value> loaded;
    for (int64_t r = 0; r < layout.numRegs(); r += width) {
      SmallVector<Value> index = elementIndex(r);
      auto ifOp = scf::IfOp::create(b, TypeRange{vecType}, inBounds(view, index), /*withElse=*/true);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&ifOp.getThenRegion().front());
      Value value = LLVM::LoadOp::create(b, vecType, elementAddress(view, index), width * elemBytes);
      scf::YieldOp::create(b, value);
      b.setInsertionPointToStart(&ifOp.getElseRegion().front());
      Value pad = padding;
      if (width > 1)
        pad = LLVM::ZeroOp::create(b, vecType).getResult();
      if (width > 1 && op.getPadding() != PaddingKind::zero) {
        Value vec = LLVM::UndefOp::create(b, vecType);
        for (int i = 0; i < width; ++i)
          vec = LLVM::InsertElementOp::create(b, vec, padding, i32(i));
        pad = vec;
      }
      scf::YieldOp::create(b, pad);
      loaded.push_back(ifOp.getResult(0));
    }
    return loaded;
  };
  // A tile wholly inside the view loads without per-element guards (see
  // lowerLoadToShared); the uniform test picks the version at run time.
  ArrayRef<int64_t> shape = op.getResult().getType().getShape();
  Value inside = copyBounds != CopyBounds::Chunk ? tileInsideView(view, offsets, shape) : Value();
  std::optional<int64_t> insideConst = inside ? getConstantIntValue(inside) : std::optional<int64_t>(0);
  SmallVector<Value> loaded;
  if (insideConst) {
    loaded = *insideConst ? uncheckedLoads() : checkedLoads();
  } else {
    int64_t loads = (layout.numRegs() + width - 1) / width;
    auto ifOp = scf::IfOp::create(b, SmallVector<Type>(loads, vecType), inside, /*withElse=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&ifOp.getThenRegion().front());
      scf::YieldOp::create(b, uncheckedLoads());
      b.setInsertionPointToStart(&ifOp.getElseRegion().front());
      scf::YieldOp::create(b, checkedLoads());
    }
    loaded.assign(ifOp.getResults().begin(), ifOp.getResults().end());
  }
  SmallVector<Value> values(layout.numRegs());
  for (int64_t r = 0, i = 0; r < layout.numRegs(); r += width, ++i) {
    for (int w = 0; w < width; ++w)
      values[r + w] = width > 1 ? LLVM::ExtractElementOp::create(b, loaded[i], i32(w)).getResult()
                                : loaded[i];
    // mma operands want element pairs packed in one register: remember the
    // loaded vector so packing them again costs nothing.
    if (width == 2)
      packedPairs[{values[r], values[r + 1]}] = loaded[i];
  }
  regs[op.getResult()] = values;
  return success();
}

/// Cooperative copy global -> shared with 16-byte cp.async: chunk i of the
/// tile goes to thread i % threads. Beyond the view, cp.async's src-size
/// operand zero-fills (padding must be zero).
LogicalResult KernelLowering::lowerLoadToShared(LoadOp op) {
  auto type = op.getResult().getType();
  if (type.getRank() != 2)
    return op.emitError() << "only rank-2 tiles can be placed in shared memory";
  if (op.getPadding() != PaddingKind::zero)
    return op.emitError() << "a tile loaded into shared memory pads with zero (cp.async "
                             "zero-fill); got padding "
                          << stringifyPaddingKind(op.getPadding());
  const ViewInfo &view = views[op.getView()];
  if (constantInt(view.strides[1]) != 1)
    return op.emitError() << "a tile loaded into shared memory needs the view's last "
                             "dimension contiguous (stride a constant 1)";
  auto reused = reuseRegion.find(op.getResult());
  SharedTile tile = reused != reuseRegion.end() ? reused->second : allocateShared(type);
  int64_t rowBytes = tile.cols * tile.elemBytes;
  if (rowBytes % kChunkBytes != 0)
    return op.emitError() << "rows of a shared tile must be whole 16-byte chunks, got "
                          << rowBytes << " bytes";
  int64_t elemsPerChunk = kChunkBytes / tile.elemBytes;
  int64_t chunksPerRow = rowBytes / kChunkBytes;
  int64_t totalChunks = tile.rows * chunksPerRow;
  int64_t threads = numWarps * kWarpSize;

  // Earlier copies into the region must have landed and everyone must be
  // done reading its previous contents.
  drainRegion(tile);
  barrierBeforeFill();
  Value rowOffset = scalar(op.getOffsets()[0]), colOffset = scalar(op.getOffsets()[1]);
  // Pass p copies chunks [p * threads, (p + 1) * threads): when a pass covers
  // whole rows, a thread keeps its chunk column and moves down by a constant
  // number of rows, so its shared address is a base plus a constant.
  int64_t rowsPerPass = threads / chunksPerRow;
  bool constantStride = threads % chunksPerRow == 0 &&
                        rowsPerPass % (int64_t(1) << tile.swizzleBits) == 0;
  Value rowInPass, chunkInRow;
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(prologueEnd);
    rowInPass = arith::DivUIOp::create(b, threadId, i32(chunksPerRow));
    chunkInRow = arith::RemUIOp::create(b, threadId, i32(chunksPerRow));
  }
  // A tile wholly inside the view (every block of a loop but the last, in
  // practice) needs no per-chunk bounds: its copies take the fast path,
  // whose source addresses are one thread pointer plus a constant step per
  // pass. Only a tile that may cross the view's edge pays for the checked
  // copies (zero-filled chunks, addresses clamped into the view).
  Value inside = copyBounds != CopyBounds::Chunk
                     ? tileInsideView(view, {rowOffset, colOffset}, {tile.rows, tile.cols})
                     : Value();
  std::optional<int64_t> insideConst = inside ? getConstantIntValue(inside) : std::optional<int64_t>(0);
  auto copyChunk = [&](int64_t first, Value dst, Value src, Value srcBytes) {
    auto emit = [&] {
      NVVM::CpAsyncOp::create(b, dst, src, b.getI32IntegerAttr(kChunkBytes),
                              NVVM::LoadCacheModifierKindAttr::get(ctx, NVVM::LoadCacheModifierKind::CG),
                              srcBytes);
    };
    if (totalChunks % threads == 0 || first + threads <= totalChunks)
      return emit();
    Value chunkId = arith::AddIOp::create(b, threadId, i32(first));
    Value active = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, chunkId, i32(totalChunks));
    auto ifOp = scf::IfOp::create(b, TypeRange{}, active, /*withElse=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    emit();
  };
  auto chunkRowCol = [&](int64_t first) -> std::pair<Value, Value> {
    if (constantStride)
      return {arith::AddIOp::create(b, rowInPass, i32(first / chunksPerRow)), chunkInRow};
    Value chunkId = arith::AddIOp::create(b, threadId, i32(first));
    return {arith::DivUIOp::create(b, chunkId, i32(chunksPerRow)),
            arith::RemUIOp::create(b, chunkId, i32(chunksPerRow))};
  };
  auto chunkDst = [&](int64_t first, Value row, Value col) {
    return constantStride ? sharedChunkAddress(tile, rowInPass, first / chunksPerRow, chunkInRow, 0)
                          : sharedElementAddress(tile, row, col);
  };
  // The next pass's source pointer: the previous one plus `step` elements
  // (two adds), hidden from LLVM: seen through, loop strength reduction
  // makes every pass's pointer its own induction variable (two registers
  // each, 16 per 64x128 tile, live across the whole loop).
  auto nextPassPointer = [&](Value previous, Value step) -> Value {
    Value next = LLVM::GEPOp::create(b, ptrType(kGlobalAddressSpace), view.elementType, previous,
                                     ValueRange{step});
    return inlinePtx(next.getType(), next, "mov.b64 $0, $1;", "=l,l")->getResult(0);
  };
  auto uncheckedCopies = [&] {
    Value srcBytes = i32(kChunkBytes), src;
    Value passStep; // elements between a thread's chunks in consecutive passes
    if (constantStride)
      passStep = arith::MulIOp::create(b, view.strides[0], i64(rowsPerPass));
    for (int64_t first = 0; first < totalChunks; first += threads) {
      auto [row, chunk] = chunkRowCol(first);
      Value col = arith::MulIOp::create(b, chunk, i32(elemsPerChunk));
      src = !constantStride || first == 0
                ? elementAddress(view, {arith::AddIOp::create(b, row, rowOffset),
                                        arith::AddIOp::create(b, col, colOffset)})
                : nextPassPointer(src, passStep);
      copyChunk(first, chunkDst(first, row, col), src, srcBytes);
    }
  };
  auto checkedCopies = [&] {
    for (int64_t first = 0; first < totalChunks; first += threads) {
      auto [row, chunk] = chunkRowCol(first);
      Value col = arith::MulIOp::create(b, chunk, i32(elemsPerChunk));
      Value globalRow = arith::AddIOp::create(b, row, rowOffset);
      Value globalCol = arith::AddIOp::create(b, col, colOffset);
      // Bytes of this chunk inside the view: 0 when the row is outside,
      // clamp((size - col) * elemBytes, 0, 16) otherwise.
      // Unsigned compares also reject negative rows and columns.
      Value rowOk = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, globalRow, view.sizes[0]);
      Value colOk = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, globalCol, view.sizes[1]);
      Value colsLeft = arith::SubIOp::create(b, view.sizes[1], globalCol);
      Value bytesLeft = arith::MulIOp::create(b, colsLeft, i32(tile.elemBytes));
      bytesLeft = arith::MaxSIOp::create(b, arith::MinSIOp::create(b, bytesLeft, i32(kChunkBytes)), i32(0));
      Value srcBytes = arith::SelectOp::create(b, arith::AndIOp::create(b, rowOk, colOk), bytesLeft, i32(0));
      Value valid = arith::CmpIOp::create(b, arith::CmpIPredicate::sgt, srcBytes, i32(0));
      // Never form an address outside the view, even for a zero-byte copy.
      Value safeRow = arith::SelectOp::create(b, valid, globalRow, i32(0));
      Value safeCol = arith::SelectOp::create(b, valid, globalCol, i32(0));
      copyChunk(first, chunkDst(first, row, col), elementAddress(view, {safeRow, safeCol}), srcBytes);
    }
  };
  // 'row': no branch. Each chunk copies 16 bytes or none by whether its row
  // is inside the view, from a pointer chained like the unchecked copies'.
  // A zero-byte cp.async reads nothing, so the address of a row past the
  // view is formed but never used. Needs whole rows per pass and the
  // columns inside at compile time (else a chunk could be partly inside).
  auto rowPredicatedCopies = [&] {
    Value passStep = arith::MulIOp::create(b, view.strides[0], i64(rowsPerPass)), src;
    Value col = arith::MulIOp::create(b, chunkInRow, i32(elemsPerChunk));
    Value firstRow = arith::AddIOp::create(b, rowInPass, rowOffset);
    for (int64_t first = 0; first < totalChunks; first += threads) {
      Value globalRow = arith::AddIOp::create(b, firstRow, i32(first / chunksPerRow));
      // Unsigned: negative rows are outside too.
      Value rowOk = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, globalRow, view.sizes[0]);
      Value srcBytes = arith::SelectOp::create(b, rowOk, i32(kChunkBytes), i32(0));
      src = first == 0 ? elementAddress(view, {firstRow, arith::AddIOp::create(b, col, colOffset)})
                       : nextPassPointer(src, passStep);
      copyChunk(first, chunkDst(first, nullptr, nullptr), src, srcBytes);
    }
  };
  // (i1 constants read as 0 and -1.)
  bool staticallyInside = insideConst && *insideConst;
  auto colsInside = [&] {
    Value test = tileInsideView(view, {colOffset}, {tile.cols}, /*firstDim=*/1);
    return getConstantIntValue(test).value_or(0) != 0;
  };
  if (copyBounds == CopyBounds::Row && constantStride && !staticallyInside && colsInside())
    rowPredicatedCopies();
  else if (insideConst)
    *insideConst ? uncheckedCopies() : checkedCopies();
  else {
    auto ifOp = scf::IfOp::create(b, TypeRange{}, inside, /*withElse=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    uncheckedCopies();
    b.setInsertionPointToStart(&ifOp.getElseRegion().front());
    checkedCopies();
  }
  noteAccess(view, kChunkBytes);
  NVVM::CpAsyncCommitGroupOp::create(b);
  tile.pendingGroup = committedGroups++;
  recordWriter(tile.offset, tile.pendingGroup, tile.bytes());
  if (tile.delta) // a ring tile: it went to one of its two regions
    recordWriter(tile.offset + tile.twinDistance, tile.pendingGroup, tile.bytes());
  sharedTiles[op.getResult()] = tile;
  return success();
}

/// Register/lane bit swaps that lengthen each thread's runs along a row
/// (the last dimension) to 16 bytes, for 16-byte stores without shared
/// memory. The mma accumulator holds 2 consecutive columns per thread, the
/// next columns in lane bits and columns 8, 16, ... in register bits.
/// Swapping the lane bit of the next column with such a register bit is a
/// 2x2 transpose between lane pairs: one shuffle per pair of 32-bit words.
/// With lane bit x and words w0 (register bit 0) and w1 (bit 1):
///   send = x ? w0 : w1;  got = shfl.bfly(send);
///   w0' = x ? got : w0;  w1' = x ? w1 : got
/// and the swapped register bit moves down to extend the run.
void KernelLowering::widenRowRuns(LinearLayout &layout, SmallVector<Value> &values, Type elemType,
                                  int64_t maxRun) {
  if (layout.rank() != 2 || elemType.getIntOrFloatBitWidth() % 8 != 0)
    return;
  int64_t elemBytes = elemType.getIntOrFloatBitWidth() / 8;
  auto pureColumn = [](const tilec::Coord &c) { return c[0] == 0 && c[1] > 0; };
  auto runOf = [&](const LinearLayout &l) {
    int64_t run = 1;
    for (const auto &basis : l.regBases()) {
      if (basis != tilec::Coord{0, run})
        break;
      run *= 2;
    }
    return run;
  };
  int64_t run = runOf(layout);
  if (run * elemBytes != 4 || run * 2 > maxRun)
    return; // shuffles move 32-bit words of whole runs; the view caps the width
  int64_t wordRegs = run;
  unsigned wordBits = tilec::log2Exact(wordRegs);
  Type i32Type = b.getI32Type(), wordVec = VectorType::get({wordRegs}, elemType);
  // Pack the runs into words once.
  int64_t numWords = layout.numRegs() / wordRegs;
  SmallVector<Value> words(numWords);
  for (int64_t w = 0; w < numWords; ++w) {
    Value packed = values[w * wordRegs];
    if (wordRegs > 1) {
      packed = LLVM::UndefOp::create(b, wordVec);
      for (int64_t i = 0; i < wordRegs; ++i)
        packed = LLVM::InsertElementOp::create(b, packed, values[w * wordRegs + i], i32(i));
    }
    words[w] = packed.getType() == i32Type ? packed : LLVM::BitcastOp::create(b, i32Type, packed);
  }
  Value fullMask = i32(-1), clamp = i32(0x1f);
  bool changed = false;
  while (run * elemBytes < kChunkBytes && run * 2 <= maxRun) {
    const auto &lanes = layout.laneBases();
    auto laneIt = llvm::find(lanes, tilec::Coord{0, run});
    if (laneIt == lanes.end())
      break;
    unsigned laneBit = laneIt - lanes.begin();
    unsigned runBits = tilec::log2Exact(run);
    std::optional<unsigned> regBit;
    for (unsigned j = runBits; j < layout.regBases().size(); ++j)
      if (pureColumn(layout.regBases()[j]) && layout.regBases()[j][1] > run) {
        regBit = j;
        break;
      }
    if (!regBit)
      break;
    unsigned wordBit = *regBit - wordBits;
    Value x = arith::CmpIOp::create(
        b, arith::CmpIPredicate::ne,
        arith::AndIOp::create(b, laneId, i32(int64_t(1) << laneBit)), i32(0));
    for (int64_t w = 0; w < numWords; ++w) {
      if (w & (int64_t(1) << wordBit))
        continue;
      int64_t w1 = w | (int64_t(1) << wordBit);
      Value send = arith::SelectOp::create(b, x, words[w], words[w1]);
      Value got = NVVM::ShflOp::create(b, i32Type, fullMask, send, i32(int64_t(1) << laneBit),
                                       clamp, NVVM::ShflKindAttr::get(ctx, NVVM::ShflKind::bfly),
                                       UnitAttr());
      Value w0New = arith::SelectOp::create(b, x, got, words[w]);
      Value w1New = arith::SelectOp::create(b, x, words[w1], got);
      words[w] = w0New;
      words[w1] = w1New;
    }
    // The new layout: lane bit laneBit takes the register bit's column;
    // the register bit (now column `run`) moves down to position runBits.
    std::vector<tilec::Coord> regs = layout.regBases(), lanesNew = layout.laneBases();
    lanesNew[laneBit] = regs[*regBit];
    regs.erase(regs.begin() + *regBit);
    regs.insert(regs.begin() + runBits, tilec::Coord{0, run});
    // Word indices follow their register bits: bit wordBit moves to runBits - wordBits.
    unsigned to = runBits - wordBits;
    SmallVector<Value> moved(numWords);
    for (int64_t w = 0; w < numWords; ++w) {
      int64_t bit = (w >> wordBit) & 1;
      int64_t low = w & ((int64_t(1) << wordBit) - 1), high = w >> (wordBit + 1);
      int64_t rest = low | (high << wordBit); // w without bit wordBit
      int64_t restLow = rest & ((int64_t(1) << to) - 1), restHigh = rest >> to;
      moved[restLow | (bit << to) | (restHigh << (to + 1))] = words[w];
    }
    words = std::move(moved);
    layout = tilec::LinearLayout(layout.rank(), regs, lanesNew, layout.warpBases());
    run *= 2;
    changed = true;
  }
  if (!changed)
    return;
  // Unpack the words into per-element registers of the new layout.
  for (int64_t w = 0; w < numWords; ++w) {
    Value word = words[w];
    if (wordRegs == 1) {
      values[w] = word.getType() == elemType ? word : LLVM::BitcastOp::create(b, elemType, word);
      continue;
    }
    Value vec = LLVM::BitcastOp::create(b, wordVec, word);
    for (int64_t i = 0; i < wordRegs; ++i)
      values[w * wordRegs + i] = LLVM::ExtractElementOp::create(b, vec, i32(i));
  }
}

LogicalResult KernelLowering::lowerStore(StoreOp op) {
  TypedValue<RankedTensorType> value = op.getValue();
  if (isShared(value))
    return op.emitError() << "storing a shared-memory tile directly is not supported; the "
                             "layout pass keeps stored tiles in registers";
  const ViewInfo &view = views[op.getView()];
  LinearLayout layout = layoutOf(value);
  Type elemType = value.getType().getElementType();
  int64_t elemBytes = std::max<int64_t>(1, elemType.getIntOrFloatBitWidth() / 8);
  SmallVector<Value> offsets = llvm::map_to_vector(op.getOffsets(), [&](Value v) { return scalar(v); });
  int width = vectorWidth(layout, view, op.getOffsets(), elemType);
  SmallVector<Value> values = regs[value];
  if (smemEpilogue && width * elemBytes < kChunkBytes && succeeded(lowerStoreThroughShared(op)))
    return success();
  if (storeTranspose && width * elemBytes < kChunkBytes) {
    widenRowRuns(layout, values, elemType, viewWidthLimit(view, op.getOffsets(), elemType));
    width = vectorWidth(layout, view, op.getOffsets(), elemType);
  }

  // Replicated elements are written once: by the threads whose replicating
  // lane/warp bits are zero, from the first register holding them.
  Value owner = replicaOwner(layout);

  noteAccess(view, width * elemBytes);
  SmallVector<Value> thread = threadCoords(layout);
  Type vecType = width > 1 ? VectorType::get({width}, elemType) : elemType;
  for (int64_t r = 0; r < layout.numRegs(); r += width) {
    if (layout.regHolding(layout.regCoord(r)) != r)
      continue; // a duplicate of an earlier register
    SmallVector<Value> c = elementCoords(layout, thread, r);
    SmallVector<Value> index;
    for (size_t d = 0; d < c.size(); ++d)
      index.push_back(arith::AddIOp::create(b, c[d], offsets[d]));
    Value ok = inBounds(view, index);
    if (owner)
      ok = arith::AndIOp::create(b, ok, owner);
    Value toStore = values[r];
    if (width > 1) {
      toStore = LLVM::UndefOp::create(b, vecType);
      for (int i = 0; i < width; ++i)
        toStore = LLVM::InsertElementOp::create(b, toStore, values[r + i], i32(i));
    }
    storeGlobalIf(ok, elementAddress(view, index), toStore, width * elemBytes);
  }
  return success();
}

/// One `red.global.add.f32` per element, predicated on the view's bounds;
/// replicated elements (lanes or warps holding copies) are added once, by
/// the copy whose replicating lane/warp bits are zero.
LogicalResult KernelLowering::lowerAtomicAdd(AtomicAddOp op) {
  Value value = op.getValue();
  if (isShared(value))
    return op.emitError() << "atomic_add of a shared-memory tile is not supported; the "
                             "layout pass keeps added tiles in registers";
  const ViewInfo &view = views[op.getView()];
  LinearLayout layout = layoutOf(value);
  SmallVector<Value> offsets = llvm::map_to_vector(op.getOffsets(), [&](Value v) { return scalar(v); });
  SmallVector<Value> values = regs[value];
  Value owner = replicaOwner(layout);
  noteAccess(view, 4);
  SmallVector<Value> thread = threadCoords(layout);
  for (int64_t r = 0; r < layout.numRegs(); ++r) {
    if (layout.regHolding(layout.regCoord(r)) != r)
      continue; // a duplicate of an earlier register
    SmallVector<Value> c = elementCoords(layout, thread, r);
    SmallVector<Value> index;
    for (size_t d = 0; d < c.size(); ++d)
      index.push_back(arith::AddIOp::create(b, c[d], offsets[d]));
    Value ok = inBounds(view, index);
    if (owner)
      ok = arith::AndIOp::create(b, ok, owner);
    inlinePtx(TypeRange{},
              ValueRange{elementAddress(view, index), values[r],
                         arith::ExtUIOp::create(b, b.getI32Type(), ok)},
              "{ .reg .pred p; setp.ne.b32 p, $2, 0; @p red.global.add.f32 [$0], $1; }", "l,f,r");
  }
  return success();
}

/// `st.global` of `value` (`bytes` wide) at `address` where `ok` holds, as a
/// predicated instruction: an scf.if per store became a branch around each
/// one, which ptxas did not if-convert.
void KernelLowering::storeGlobalIf(Value ok, Value address, Value value, int64_t bytes) {
  int64_t words = bytes / 4;
  SmallVector<Value> operands = {address};
  std::string type, regs, constraints = "l";
  if (words >= 2) {
    Value asWords = LLVM::BitcastOp::create(b, VectorType::get({words}, b.getI32Type()), value);
    for (int64_t i = 0; i < words; ++i) {
      operands.push_back(LLVM::ExtractElementOp::create(b, asWords, i32(i)));
      regs += (i ? ", $" : "{$") + std::to_string(i + 1);
      constraints += ",r";
    }
    regs += "}";
    type = ".v" + std::to_string(words) + ".b32";
  } else {
    Type intType = b.getIntegerType(bytes * 8);
    // An i1 element is stored as a byte (0 or 1).
    operands.push_back(value.getType().isInteger(1)
                           ? arith::ExtUIOp::create(b, intType, value).getResult()
                           : LLVM::BitcastOp::create(b, intType, value).getResult());
    regs = "$1";
    type = bytes == 4 ? ".b32" : bytes == 2 ? ".b16" : ".b8";
    constraints += bytes == 4 ? ",r" : bytes == 2 ? ",h" : ",r";
    if (bytes == 1) // PTX has no 8-bit registers: widen
      operands.back() = arith::ExtUIOp::create(b, b.getI32Type(), operands.back());
  }
  operands.push_back(arith::ExtUIOp::create(b, b.getI32Type(), ok));
  constraints += ",r";
  std::string pred = "$" + std::to_string(operands.size() - 1);
  std::string text = "{ .reg .pred p; setp.ne.b32 p, " + pred + ", 0; @p st.global" + type + " [$0], " +
                     regs + "; }";
  inlinePtx(TypeRange{}, operands, text, constraints);
}

/// FlashAttention-2's epilogue: a register tile whose threads hold only a few
/// bytes of each row (the mma accumulator: 4 of f16 O) is written to shared
/// memory as it is held, then read back and stored as whole 16-byte chunks
/// of rows, consecutive threads along a row (coalesced, a quarter of the
/// instructions). Fails (nothing emitted) where that does not apply; the
/// caller then stores directly.
LogicalResult KernelLowering::lowerStoreThroughShared(StoreOp op) {
  TypedValue<RankedTensorType> value = op.getValue();
  auto type = value.getType();
  const ViewInfo &view = views[op.getView()];
  LinearLayout layout = layoutOf(value);
  int64_t elemBytes = type.getElementTypeBitWidth() / 8;
  if (type.getRank() != 2 || type.getElementTypeBitWidth() % 8 != 0 || elemBytes > 4)
    return failure();
  int64_t rows = type.getDimSize(0), cols = type.getDimSize(1);
  int64_t chunkElems = kChunkBytes / elemBytes;
  int64_t chunksPerRow = cols / chunkElems;
  std::optional<int64_t> size1 = constantInt(view.sizes[1]);
  std::optional<int64_t> offset1 = constantInt(op.getOffsets()[1]);
  // A chunk is wholly inside the view's columns or wholly outside.
  if (cols % chunkElems != 0 || tilec::log2Exact(chunksPerRow) < 0 ||
      constantInt(view.strides[1]) != 1 || !size1 || *size1 % chunkElems != 0 || !offset1 ||
      *offset1 % chunkElems != 0)
    return failure();
  // Register and thread bits must not overlap (coordinates add), and a
  // thread's registers must come in runs along the row the write can use.
  auto [rowThreadBits, rowRegBits] = threadAndRegisterBits(layout, 0);
  auto [colThreadBits, colRegBits] = threadAndRegisterBits(layout, 1);
  if ((rowThreadBits & rowRegBits) || (colThreadBits & colRegBits))
    return failure();
  int run = 1; // registers r, r+1, ... hold consecutive columns
  while (run < layout.numRegs() && static_cast<size_t>(tilec::log2Exact(run)) < layout.regBases().size() &&
         layout.regBases()[tilec::log2Exact(run)] == tilec::Coord{0, run} && (run * 2) * elemBytes <= 4)
    run *= 2;
  if (colThreadBits % run != 0)
    return failure();

  unsigned swizzleBits = std::min(3, tilec::log2Exact(chunksPerRow));
  int64_t mask = (int64_t(1) << swizzleBits) - 1;
  for (int64_t r = 0; r < layout.numRegs(); r += run)
    if (layout.regCoord(r)[0] & mask)
      return failure(); // a register row would change the swizzle phase
  int64_t sharedMark = sharedBytes;
  SharedTile tile = allocateRegion(rows, cols, elemBytes, swizzleBits);

  drainRegion(tile);
  barrierBeforeFill();
  SmallVector<Value> thread = threadCoords(layout);
  SmallVector<Value> &values = regs[value];
  // Addresses are computed here, not hoisted: they would be live (and
  // spilled) through the loops before the epilogue.
  std::map<ChunkBaseKey, Value> epilogueBases;
  localChunkBases = &epilogueBases;
  llvm::scope_exit restore([&] { localChunkBases = nullptr; });
  Value chunkOfThread = arith::DivUIOp::create(b, thread[1], i32(chunkElems));
  Value byteInChunk = arith::MulIOp::create(b, arith::RemUIOp::create(b, thread[1], i32(chunkElems)),
                                            i32(elemBytes));
  DenseMap<Value, Value> shiftedBases;
  Type wordType = b.getIntegerType(run * elemBytes * 8);
  for (int64_t r = 0; r < layout.numRegs(); r += run) {
    if (layout.regHolding(layout.regCoord(r)) != r)
      continue; // a duplicate of an earlier register
    tilec::Coord at = layout.regCoord(r);
    auto [base, offset] = sharedChunkBase(tile, thread[0], at[0], chunkOfThread, at[1] / chunkElems);
    Value &shifted = shiftedBases[base];
    if (!shifted)
      shifted = LLVM::GEPOp::create(b, ptrType(kSharedAddressSpace), b.getI8Type(), base,
                                    ValueRange{byteInChunk});
    Value word;
    if (run == 1) {
      word = LLVM::BitcastOp::create(b, wordType, values[r]);
    } else {
      Value vec = LLVM::UndefOp::create(b, VectorType::get({run}, type.getElementType()));
      for (int i = 0; i < run; ++i)
        vec = LLVM::InsertElementOp::create(b, vec, values[r + i], i32(i));
      word = LLVM::BitcastOp::create(b, wordType, vec);
    }
    Value address = LLVM::GEPOp::create(b, ptrType(kSharedAddressSpace), b.getI8Type(), shifted,
                                        ArrayRef<LLVM::GEPArg>{offset + (at[1] % chunkElems) * elemBytes});
    LLVM::StoreOp::create(b, word, address, run * elemBytes);
  }
  barrier();

  // Whole chunks, consecutive threads along a row.
  int64_t threads = numWarps * kWarpSize, totalChunks = rows * chunksPerRow;
  Value rowInPass = arith::DivUIOp::create(b, threadId, i32(chunksPerRow));
  Value chunkInRow = arith::RemUIOp::create(b, threadId, i32(chunksPerRow));
  bool wholeRows = threads % chunksPerRow == 0 && (threads / chunksPerRow) % (mask + 1) == 0;
  Type chunkType = VectorType::get({4}, b.getI32Type());
  Value rowOffset = scalar(op.getOffsets()[0]), colOffset = scalar(op.getOffsets()[1]);
  // With whole rows per pass, a thread's global address moves by a fixed
  // number of rows from one pass to the next: one add, not a multiply.
  Value passAddress, passStep;
  for (int64_t first = 0; first < totalChunks; first += threads) {
    Value chunkId = arith::AddIOp::create(b, threadId, i32(first));
    Value row = wholeRows ? arith::AddIOp::create(b, rowInPass, i32(first / chunksPerRow)).getResult()
                          : arith::DivUIOp::create(b, chunkId, i32(chunksPerRow)).getResult();
    Value chunk = wholeRows ? chunkInRow : arith::RemUIOp::create(b, chunkId, i32(chunksPerRow)).getResult();
    Value src = wholeRows ? sharedChunkAddress(tile, rowInPass, first / chunksPerRow, chunkInRow, 0)
                          : sharedElementAddress(tile, row, arith::MulIOp::create(b, chunk, i32(chunkElems)));
    Value ok = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, chunkId, i32(totalChunks));
    if (first + threads > totalChunks) {
      // A partial last pass: threads without a chunk read the tile's first
      // one (any address inside the scratch) and store nothing.
      Value firstChunk = sharedChunkAddress(tile, i32(0), 0, i32(0), 0);
      src = LLVM::SelectOp::create(b, ok, src, firstChunk);
    }
    Value globalRow = arith::AddIOp::create(b, row, rowOffset);
    Value globalCol = arith::AddIOp::create(b, arith::MulIOp::create(b, chunk, i32(chunkElems)), colOffset);
    ok = arith::AndIOp::create(b, ok, inBounds(view, {globalRow, globalCol}));
    Value data = LLVM::LoadOp::create(b, chunkType, src, kChunkBytes);
    Value address;
    if (wholeRows && passAddress) {
      address = passAddress = LLVM::GEPOp::create(b, ptrType(kGlobalAddressSpace), view.elementType,
                                                  passAddress, ValueRange{passStep});
    } else {
      // The address is formed even where no store is made (the predicate
      // guards the access, not the arithmetic): no access happens there.
      address = elementAddress(view, {globalRow, globalCol});
      if (wholeRows) {
        passAddress = address;
        passStep = arith::MulIOp::create(b, view.strides[0], i64(threads / chunksPerRow));
      }
    }
    storeGlobalIf(ok, address, data, kChunkBytes);
  }
  noteAccess(view, kChunkBytes);
  // The chunk reads above: the next fill of this space needs a barrier.
  sharedAccessSinceBarrier = true;
  sharedBytes = sharedMark;
  return success();
}

/// mma.sync m16n8k16: A from registers (split-Q fragment layout), B from a
/// shared tile through ldmatrix (.trans when B is stored K-major, i.e. V),
/// accumulator in registers.
LogicalResult KernelLowering::lowerDot(DotOp op) {
  auto aType = op.getA().getType();
  auto accType = op.getAcc().getType();
  int64_t m = accType.getDimSize(0), n = accType.getDimSize(1), k = aType.getDimSize(1);
  bool aShared = isShared(op.getA());
  if ((!aShared && layoutOf(op.getA()) != LinearLayout::mmaOperandA(m, k, numWarps)) ||
      layoutOf(op.getAcc()) != LinearLayout::mmaAccumulator(m, n, numWarps) ||
      !isShared(op.getB()))
    return op.emitError() << "tile.dot operands are not in the mma.sync layouts (A and the "
                             "accumulator split-Q fragments, B in shared memory); run "
                             "tile-partition-warps first";
  Type elemType = aType.getElementType();
  bool bf16 = elemType.isBF16();
  SharedTile &bTile = sharedTiles[op.getB()];
  if (aShared)
    waitFor(op.getA());
  waitFor(op.getB());

  int64_t rowsPerWarp = m / numWarps;
  int64_t mTiles = rowsPerWarp / 16, nTiles = n / 8, kTiles = k / 16;
  int kBits = tilec::log2Exact(kTiles), nBits = tilec::log2Exact(nTiles);
  SmallVector<Value> aRegs = aShared ? SmallVector<Value>() : regs[op.getA()];
  SmallVector<Value> acc = regs[op.getAcc()];

  Type pairType = bf16 ? Type(b.getI32Type()) : Type(VectorType::get({2}, elemType));
  auto pack = [&](Value lo, Value hi) -> Value {
    Type vec = VectorType::get({2}, elemType);
    if (Value loaded = packedPairs.lookup({lo, hi}))
      return bf16 ? LLVM::BitcastOp::create(b, b.getI32Type(), loaded).getResult() : loaded;
    Value v = LLVM::UndefOp::create(b, vec);
    v = LLVM::InsertElementOp::create(b, v, lo, i32(0));
    v = LLVM::InsertElementOp::create(b, v, hi, i32(1));
    return bf16 ? LLVM::BitcastOp::create(b, b.getI32Type(), v).getResult() : v;
  };
  auto fromLdmatrix = [&](Value word) -> Value {
    return bf16 ? word : LLVM::BitcastOp::create(b, pairType, word).getResult();
  };

  // ldmatrix: lane l gives the row address of matrix l / 8, row l % 8.
  bool transposeB = op.getTransposeB();
  Value rowInMatrix, matrixLow, matrixHigh, kRow, vRow;
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(prologueEnd);
    Value matrix = arith::DivUIOp::create(b, laneId, i32(8));
    rowInMatrix = arith::RemUIOp::create(b, laneId, i32(8));
    matrixLow = arith::AndIOp::create(b, matrix, i32(1));
    matrixHigh = arith::ShRUIOp::create(b, matrix, i32(1));
    // Row of this lane's address: K tiles walk n-blocks with the high matrix
    // bit, V tiles walk k-halves with the low one.
    kRow = arith::AddIOp::create(b, arith::MulIOp::create(b, matrixHigh, i32(8)), rowInMatrix);
    vRow = arith::AddIOp::create(b, arith::MulIOp::create(b, matrixLow, i32(8)), rowInMatrix);
  }
  // A from shared memory (Q kept there when registers are short): the four
  // 8x8 matrices of a 16x16 fragment are (rows 0-7 | 8-15) x (k 0-7 | 8-15)
  // in a0a1, a2a3, a4a5, a6a7 order, each warp reading its own rows.
  Value aRow;
  if (aShared) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(prologueEnd);
    aRow = arith::AddIOp::create(b, arith::MulIOp::create(b, warpId, i32(rowsPerWarp)), vRow);
  }
  int numMatrices = nTiles >= 2 ? 4 : 2;
  carryShifts = loopShortOfRegisters;
  xorShifts = carryShifts && (xorRingPhases == XorRingPhases::All ||
                              xorRingPhases == (transposeB ? XorRingPhases::NonTrans
                                                           : XorRingPhases::Trans));
  llvm::scope_exit stopCarrying([&] { carryShifts = xorShifts = false; });

  for (int64_t ki = 0; ki < kTiles; ++ki) {
    SmallVector<SmallVector<Value>> aFrags(mTiles);
    for (int64_t mi = 0; mi < mTiles; ++mi) {
      if (aShared) {
        auto [base, offset] =
            sharedChunkBase(sharedTiles[op.getA()], aRow, 16 * mi, matrixHigh, 2 * ki, true);
        Value ld = ldmatrix(base, offset, 4, /*transpose=*/false);
        for (int i = 0; i < 4; ++i)
          aFrags[mi].push_back(fromLdmatrix(LLVM::ExtractValueOp::create(b, ld, i)));
        continue;
      }
      int64_t aBase = (ki << 3) | (mi << (3 + kBits));
      aFrags[mi] = {pack(aRegs[aBase + 0], aRegs[aBase + 1]), pack(aRegs[aBase + 2], aRegs[aBase + 3]),
                    pack(aRegs[aBase + 4], aRegs[aBase + 5]), pack(aRegs[aBase + 6], aRegs[aBase + 7])};
    }
    for (int64_t ni = 0; ni < nTiles; ni += numMatrices / 2) {
      // Fragments b0b1, b2b3 for n-tile ni (and ni + 1 with x4).
      // A chunk is 8 b16 elements: one ldmatrix row.
      auto [base, offset] =
          transposeB
              // B = tileᵀ, the tile is N x K row-major (K): matrices (n-block, k-half).
              ? sharedChunkBase(bTile, kRow, 8 * ni, matrixLow, 2 * ki, true)
              // The tile is K x N row-major (V): ldmatrix.trans of (k-half, n-block).
              : sharedChunkBase(bTile, vRow, 16 * ki, matrixHigh, ni, true);
      Value ld = ldmatrix(base, offset, numMatrices, /*transpose=*/!transposeB);
      SmallVector<Value> words;
      for (int i = 0; i < numMatrices; ++i)
        words.push_back(fromLdmatrix(LLVM::ExtractValueOp::create(b, ld, i)));

      for (int64_t sub = 0; sub < numMatrices / 2; ++sub) {
        int64_t nTile = ni + sub;
        Value bFrag[2] = {words[2 * sub], words[2 * sub + 1]};
        for (int64_t mi = 0; mi < mTiles; ++mi) {
          ArrayRef<Value> aFrag = aFrags[mi];
          int64_t cBase = (nTile << 2) | (mi << (2 + nBits));
          SmallVector<Value> cFrag = {acc[cBase], acc[cBase + 1], acc[cBase + 2], acc[cBase + 3]};
          auto resultType = LLVM::LLVMStructType::getLiteral(ctx, SmallVector<Type>(4, b.getF32Type()));
          std::array<NVVM::MMATypes, 2> ptxTypes = {bf16 ? NVVM::MMATypes::bf16 : NVVM::MMATypes::f16,
                                                    bf16 ? NVVM::MMATypes::bf16 : NVVM::MMATypes::f16};
          auto mma = NVVM::MmaOp::create(
              b, resultType, aFrag, ValueRange{bFrag[0], bFrag[1]}, cFrag, {16, 8, 16},
              std::nullopt, std::nullopt, ptxTypes,
              std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row, NVVM::MMALayout::col});
          for (int i = 0; i < 4; ++i)
            acc[cBase + i] = LLVM::ExtractValueOp::create(b, mma, i);
        }
      }
    }
  }
  regs[op.getResult()] = acc;
  return success();
}

/// In-thread combine of the registers that share a projected coordinate,
/// then butterfly shuffles over the lane bits that move along the axis.
LogicalResult KernelLowering::lowerReduce(ReduceOp op) {
  unsigned axis = op.getAxis();
  LinearLayout in = layoutOf(op.getInput());
  for (const auto &basis : in.warpBases())
    if (basis[axis] != 0)
      return op.emitError() << "reduction along axis " << axis << " crosses warps";
  SmallVector<Value> &values = regs[op.getInput()];
  auto project = [&](tilec::Coord c) {
    c.erase(c.begin() + axis);
    return c;
  };
  // In-thread: a balanced tree per output element (depth log2 n, not a
  // chain of n - 1 dependent ops: with two warps per scheduler the chain's
  // latency is not hidden).
  std::map<tilec::Coord, SmallVector<Value>> operands;
  for (int64_t r = 0; r < in.numRegs(); ++r)
    if (in.regHolding(in.regCoord(r)) == r)
      operands[project(in.regCoord(r))].push_back(values[r]);
  std::map<tilec::Coord, Value> partial;
  for (auto &[key, list] : operands) {
    while (list.size() > 1) {
      SmallVector<Value> next;
      for (size_t i = 0; i + 1 < list.size(); i += 2)
        next.push_back(combine(op.getKind(), list[i], list[i + 1]));
      if (list.size() % 2)
        next.push_back(list.back());
      list = std::move(next);
    }
    partial[key] = list.front();
  }
  Value fullMask = i32(-1), clamp = i32(0x1f);
  for (size_t i = 0; i < in.laneBases().size(); ++i) {
    const tilec::Coord &basis = in.laneBases()[i];
    if (basis[axis] == 0)
      continue;
    if (project(basis) != tilec::Coord(in.rank() - 1, 0))
      return op.emitError() << "lane bit " << i << " moves along the reduced axis and another "
                               "axis at once; cannot reduce with shuffles";
    for (auto &[key, value] : partial) {
      Value other = NVVM::ShflOp::create(b, value.getType(), fullMask, value, i32(1 << i), clamp,
                                         NVVM::ShflKindAttr::get(ctx, NVVM::ShflKind::bfly),
                                         UnitAttr());
      value = combine(op.getKind(), value, other);
    }
  }
  LinearLayout out = layoutOf(op.getResult());
  SmallVector<Value> result;
  for (int64_t r = 0; r < out.numRegs(); ++r) {
    auto it = partial.find(out.regCoord(r));
    if (it == partial.end())
      return op.emitError() << "result layout does not match the slice of the input layout";
    result.push_back(it->second);
  }
  regs[op.getResult()] = result;
  return success();
}

SmallVector<Value> KernelLowering::flatten(ValueRange oldValues) {
  SmallVector<Value> out;
  for (Value v : oldValues) {
    if (isShared(v))
      continue; // lives in its shared-memory region, not in SSA values
    if (isa<RankedTensorType>(v.getType()))
      llvm::append_range(out, regs[v]);
    else
      out.push_back(scalar(v));
  }
  return out;
}

void KernelLowering::unflatten(ValueRange oldValues, ValueRange newValues) {
  size_t next = 0;
  for (Value v : oldValues) {
    if (isShared(v))
      continue;
    if (auto type = dyn_cast<RankedTensorType>(v.getType())) {
      int64_t count = layoutOf(v).numRegs();
      regs[v] = SmallVector<Value>(newValues.begin() + next, newValues.begin() + next + count);
      next += count;
    } else {
      mapping.map(v, newValues[next++]);
    }
  }
}

/// Whether the loop body reads the carried value `arg` after `reload` (the
/// load yielding its next value) is issued: then the reload must go to
/// another region (a ring of two) instead of refilling the one being read.
static bool readAfterReload(BlockArgument arg, Operation *reload) {
  Block *body = reload->getBlock();
  return llvm::any_of(arg.getUsers(), [&](Operation *user) {
    Operation *inBody = body->findAncestorOpInBlock(*user);
    return !inBody || reload->isBeforeInBlock(inBody);
  });
}

LogicalResult KernelLowering::lowerFor(scf::ForOp op) {
  // A loop-carried shared tile (a prefetched K/V block) never flows through
  // the loop's SSA values: the load producing the next iteration's value
  // writes into the region the loop assigned it. Refilled in place when the
  // reload comes after the last read (tile-pipeline stages=1); otherwise the
  // tile gets a twin region and iterations alternate between the two
  // (stages=2), the parity carried in one i32.
  auto yield = cast<scf::YieldOp>(op.getBody()->getTerminator());
  struct Carried {
    unsigned index;
    LoadOp reload;
    bool ring;
  };
  SmallVector<Carried> carried;
  for (auto [i, init] : llvm::enumerate(op.getInitArgs())) {
    if (isa<ViewType>(init.getType()))
      return op.emitError() << "loop-carried views are not supported";
    if (!isShared(init))
      continue;
    auto reload = yield.getOperand(i).getDefiningOp<LoadOp>();
    if (!reload || reload->getBlock() != op.getBody())
      return op.emitError() << "a loop-carried shared tile must be reloaded by a tile.load in "
                               "the loop body";
    bool ring = readAfterReload(op.getRegionIterArgs()[i], reload);
    if (ring && !sharedTiles[init].parity) {
      // The twin region lives as long as the loop.
      SharedTile &first = sharedTiles[init];
      if (first.delta)
        return op.emitError() << "a ring tile from a branch cannot start a ring";
      SharedTile twin = allocateShared(cast<RankedTensorType>(init.getType()));
      first.twinDistance = twin.offset - first.offset;
    }
    carried.push_back({unsigned(i), reload, ring});
  }
  bool hasRing = llvm::any_of(carried, [](const Carried &c) { return c.ring; });
  // A loop that continues another's rings (tile-pipeline chains the loops
  // tile-split-masked-loops makes) starts from that loop's final parity, in
  // the same regions; its rings must all come from there.
  Value parityInit;
  bool firstRing = true;
  for (const Carried &c : carried) {
    if (!c.ring)
      continue;
    Value from = sharedTiles[op.getInitArgs()[c.index]].parity;
    if (!firstRing && from != parityInit)
      return op.emitError() << "the rings of a loop must all start fresh or all continue the "
                               "same earlier loop";
    parityInit = from;
    firstRing = false;
  }
  // Shared tiles filled before the loop and read inside it (Q, say) are
  // waited for once, here, instead of on every iteration.
  SmallVector<Value> invariantShared;
  op.getBody()->walk([&](Operation *inner) {
    for (Value operand : inner->getOperands())
      if (isShared(operand) && !op->isAncestor(operand.getParentBlock()->getParentOp()) &&
          sharedTiles.count(operand) && sharedTiles[operand].pendingGroup >= 0 &&
          !llvm::is_contained(invariantShared, operand))
        invariantShared.push_back(operand);
  });
  for (Value tile : invariantShared)
    waitFor(tile);
  SmallVector<Value> inits = flatten(op.getInitArgs());
  if (hasRing) // parity: which region of each ring holds the carried tile
    inits.push_back(parityInit ? parityInit : i32(0));
  auto newFor = scf::ForOp::create(b, scalar(op.getLowerBound()), scalar(op.getUpperBound()),
                                   scalar(op.getStep()), inits);
  mapping.map(op.getInductionVar(), newFor.getInductionVar());
  unflatten(op.getRegionIterArgs(), newFor.getRegionIterArgs());
  int64_t sharedMark = sharedBytes;
  // Waits inside the body may never run (zero trips): they prove nothing
  // after the loop, and neither does the body's count of commits.
  int64_t completeBefore = completeThrough, visibleBefore = visibleThrough;
  auto pendingBefore = pendingSnapshot();
  bool bodyFills = false;
  op.getBody()->walk([&](LoadOp load) { bodyFills |= isShared(load.getResult()); });
  // carry-ring-addresses (on): carry the ring's ldmatrix addresses
  // (carryRingShifts; one per tile, the other swizzle phases XOR-derived in
  // sharedChunkBase) where an accumulator takes 128 or more registers per
  // thread (O at head_dim 128 over 4 warps). It removes the last
  // local-memory loads from the d128 hot loops; at head_dim 64 it only added
  // spills outside the loop.
  bool shortBefore = loopShortOfRegisters;
  llvm::scope_exit restoreShort([&] { loopShortOfRegisters = shortBefore; });
  if (carryRingAddresses)
    op.getBody()->walk([&](DotOp dot) {
      loopShortOfRegisters |= dot.getAcc().getType().getNumElements() / (32 * numWarps) >= 128;
    });
  {
    OpBuilder::InsertionGuard guard(b);
    Block *body = newFor.getBody();
    if (!body->empty())
      body->getTerminator()->erase();
    b.setInsertionPointToEnd(body);

    // At the top of an iteration after the first, the previous iteration's
    // copies are the newest groups, numbered here as the last one committed
    // (committedGroups - 1): waiting for that group waits for them all. They
    // may have written any region the body fills, and none of them is known
    // complete or visible yet.
    if (bodyFills) {
      int64_t previousIteration = committedGroups - 1;
      for (auto &[offset, writer] : lastWriter)
        writer.first = std::max(writer.first, previousIteration);
      recordWriter(sharedMark, previousIteration, std::numeric_limits<int32_t>::max());
      completeThrough = std::min(completeThrough, previousIteration - 1);
      visibleThrough = std::min(visibleThrough, previousIteration - 1);
    }
    sharedAccessSinceBarrier = true; // the previous iteration's reads

    Value parity = hasRing ? body->getArguments().back() : Value();
    for (Carried &c : carried) {
      Value init = op.getInitArgs()[c.index];
      SharedTile tile = sharedTiles[init];
      // Its copy was committed before the body starts (before the loop, or
      // in the previous iteration): see above.
      tile.pendingGroup = committedGroups - 1;
      SharedTile fill = tile;
      if (c.ring) {
        Value twin = i32(tile.twinDistance);
        tile.delta = arith::MulIOp::create(b, parity, twin);
        fill.delta = arith::SubIOp::create(b, twin, tile.delta);
      }
      sharedTiles[op.getRegionIterArgs()[c.index]] = tile;
      reuseRegion[c.reload.getResult()] = fill;
    }
    for (Operation &inner : op.getBody()->without_terminator())
      if (failed(lowerOp(&inner)))
        return failure();
    SmallVector<Value> yielded = flatten(op.getBody()->getTerminator()->getOperands());
    if (hasRing)
      yielded.push_back(arith::XOrIOp::create(b, parity, i32(1)));
    scf::YieldOp::create(b, yielded);
  }
  int64_t loopResults = newFor.getNumResults(); // before carried bases are added
  if (hasRing)
    carryRingShifts(newFor, inits.back());
  sharedBytes = sharedMark;
  completeThrough = completeBefore;
  visibleThrough = visibleBefore;
  sharedAccessSinceBarrier = true;
  assumeCommittedLast(pendingBefore);
  if (bodyFills) // zero trips commit nothing: indices shift between paths
    renumberPendingWriters();
  unflatten(op.getResults(), newFor.getResults().take_front(loopResults - (hasRing ? 1 : 0)));

  // The regions of carried tiles nothing reads after the loop (the first
  // iteration's tile, the ring's twin) die with it: pop them off the stack.
  SmallVector<std::pair<int64_t, int64_t>> dead; // (offset, bytes)
  for (Carried &c : carried) {
    Value init = op.getInitArgs()[c.index];
    SharedTile after = sharedTiles[c.reload.getResult()];
    if (c.ring) { // the last region written: parity after the loop
      after.parity = newFor.getResult(loopResults - 1);
      after.delta = arith::MulIOp::create(b, after.parity, i32(after.twinDistance));
    }
    // Uses after the loop wait for everything committed before they run.
    after.pendingGroup = committedGroups - 1;
    sharedTiles[op.getResult(c.index)] = after;
    const SharedTile &first = sharedTiles[init];
    int64_t bytes = first.bytes();
    if (init.hasOneUse() && op.getResult(c.index).use_empty()) {
      dead.push_back({first.offset, bytes});
      if (c.ring)
        dead.push_back({first.offset + first.twinDistance, bytes});
    }
  }
  for (bool popped = true; popped;) {
    popped = false;
    for (auto [offset, bytes] : dead)
      if (offset + bytes == sharedBytes || (offset < sharedBytes && int64_t(llvm::alignTo(offset + bytes, kSharedAlignment)) == sharedBytes)) {
        sharedBytes = offset;
        popped = true;
      }
  }
  return success();
}

/// A ring tile's ldmatrix and copy addresses are base + delta, delta =
/// parity * twin (or twin - that, for the region being refilled), the bases
/// loop-invariant. Kept as they are, each base is live through the loop and
/// its shifted copy through the iteration: two registers per address. Here
/// each shifted address becomes a loop-carried value instead, started at
/// base + delta(parity on entry) and advanced by delta(next parity) -
/// delta(parity) at the back edge, so the base dies before the loop (at
/// head_dim 128: 8 registers fewer for K and V, which ptxas had spilled).
/// With sharedChunkBase's XOR derivation only one address per tile is left
/// to carry (carrying all eight measured 2-5% slower: run 7).
void KernelLowering::carryRingShifts(scf::ForOp &loop, Value parityInit) {
  Block *body = loop.getBody();
  Value parity = body->getArguments().back();
  // delta as a function of the parity: p * twin, or twin - p * twin.
  auto rebuild = [&](OpBuilder &at, Value delta, Value p) -> Value {
    auto constant = [&](Value v) -> std::optional<int64_t> {
      APInt value;
      if (matchPattern(v, m_ConstantInt(&value)))
        return value.getSExtValue();
      return std::nullopt;
    };
    auto times = [&](Value v) -> std::optional<int64_t> { // v = parity * twin
      auto mul = v.getDefiningOp<arith::MulIOp>();
      if (!mul || mul.getLhs() != parity)
        return std::nullopt;
      return constant(mul.getRhs());
    };
    Location loc = delta.getLoc();
    auto c = [&](int64_t v) { return arith::ConstantIntOp::create(at, loc, v, 32).getResult(); };
    if (auto twin = times(delta))
      return arith::MulIOp::create(at, loc, p, c(*twin));
    if (auto sub = delta.getDefiningOp<arith::SubIOp>()) {
      auto twin = constant(sub.getLhs());
      if (twin && times(sub.getRhs()) == twin)
        return arith::SubIOp::create(at, loc, c(*twin), arith::MulIOp::create(at, loc, p, c(*twin)));
    }
    return Value();
  };
  SmallVector<RingShift> moved;
  SmallVector<Value> initial;
  OpBuilder before(loop);
  for (RingShift &shift : ringShifts) {
    if (shift.shifted.getParentBlock() != body ||
        loop.getRegion().isAncestor(shift.base.getParentRegion()))
      continue;
    Value delta = rebuild(before, shift.delta, parityInit);
    if (!delta)
      continue;
    initial.push_back(LLVM::GEPOp::create(before, shift.delta.getLoc(), ptrType(kSharedAddressSpace),
                                          b.getI8Type(), shift.base, ValueRange{delta}));
    moved.push_back(shift);
  }
  llvm::erase_if(ringShifts, [&](RingShift &shift) { return shift.shifted.getParentBlock() == body; });
  if (moved.empty())
    return;
  IRRewriter rewriter(b);
  auto advanced = [&](OpBuilder &at, Location loc, ArrayRef<BlockArgument> carried) {
    Value next = arith::XOrIOp::create(at, loc, parity, arith::ConstantIntOp::create(at, loc, 1, 32));
    SmallVector<Value> values;
    for (auto [shift, address] : llvm::zip_equal(moved, carried)) {
      Value step = arith::SubIOp::create(at, loc, rebuild(at, shift.delta, next), shift.delta);
      values.push_back(LLVM::GEPOp::create(at, loc, ptrType(kSharedAddressSpace), at.getI8Type(),
                                           address, ValueRange{step}));
    }
    return values;
  };
  FailureOr<LoopLikeOpInterface> widened =
      loop.replaceWithAdditionalYields(rewriter, initial, /*replaceInitOperandUsesInLoop=*/false, advanced);
  assert(succeeded(widened) && "scf.for takes more loop-carried values");
  loop = cast<scf::ForOp>(widened->getOperation());
  auto carried = loop.getRegionIterArgs().take_back(moved.size());
  for (auto [shift, address] : llvm::zip_equal(moved, carried)) {
    chunkBaseCache.erase(shift.key);
    shift.shifted.replaceAllUsesWith(address);
    shift.shifted.getDefiningOp()->erase();
  }
}

LogicalResult KernelLowering::lowerIf(scf::IfOp op) {
  SmallVector<Type> types;
  for (Value result : op.getResults()) {
    if (isShared(result))
      return op.emitError() << "an scf.if cannot yield a shared-memory tile";
    if (auto type = dyn_cast<RankedTensorType>(result.getType()))
      types.append(layoutOf(result).numRegs(), type.getElementType());
    else
      types.push_back(result.getType());
  }
  bool hasElse = !op.getElseRegion().empty();
  auto newIf = scf::IfOp::create(b, types, scalar(op.getCondition()), hasElse);
  // Each branch starts from the state before the if; afterwards, commits
  // are counted as on the longer branch and earlier pending tiles are waited
  // for conservatively.
  auto pendingBefore = pendingSnapshot();
  int64_t committedBefore = committedGroups, committedAfter = committedGroups;
  auto writersBefore = lastWriter;
  auto writersAfter = lastWriter;
  int64_t visibleBefore = visibleThrough;
  bool accessBefore = sharedAccessSinceBarrier;
  bool accessAfter = hasElse ? false : accessBefore; // a missing else keeps the state
  for (auto [oldRegion, newRegion] :
       {std::pair{&op.getThenRegion(), &newIf.getThenRegion()}, {&op.getElseRegion(), &newIf.getElseRegion()}}) {
    if (oldRegion->empty())
      continue;
    int64_t sharedMark = sharedBytes, completeBefore = completeThrough;
    for (auto [value, group] : pendingBefore)
      sharedTiles[value].pendingGroup = group;
    committedGroups = committedBefore;
    lastWriter = writersBefore; // the other branch's fills never happened here
    visibleThrough = visibleBefore;
    sharedAccessSinceBarrier = accessBefore;
    llvm::scope_exit release([&] {
      accessAfter |= sharedAccessSinceBarrier;
      sharedBytes = sharedMark;
      completeThrough = completeBefore;
      visibleThrough = visibleBefore;
      committedAfter = std::max(committedAfter, committedGroups);
      for (auto &[offset, writer] : lastWriter)
        if (writer.first >= committedBefore) {
          auto [it, inserted] = writersAfter.try_emplace(offset, writer);
          if (!inserted) // merged: neither branch's extent is lost
            it->second = {std::max(it->second.first, writer.first),
                          std::max(it->second.second, writer.second)};
        }
    });
    OpBuilder::InsertionGuard guard(b);
    Block *body = &newRegion->front();
    if (!body->empty() && body->back().hasTrait<OpTrait::IsTerminator>())
      body->back().erase();
    b.setInsertionPointToEnd(body);
    for (Operation &inner : oldRegion->front().without_terminator())
      if (failed(lowerOp(&inner)))
        return failure();
    scf::YieldOp::create(b, flatten(oldRegion->front().getTerminator()->getOperands()));
  }
  committedGroups = committedAfter;
  sharedAccessSinceBarrier = accessAfter;
  assumeCommittedLast(pendingBefore);
  // Fills made in either branch count as the latest commit: the two
  // branches numbered their groups from the same start.
  lastWriter = writersAfter;
  if (committedGroups != committedBefore) // a path with fewer commits shifts
    renumberPendingWriters();
  unflatten(op.getResults(), newIf.getResults());
  return success();
}

LogicalResult KernelLowering::lowerConvert(ConvertLayoutOp op) {
  Value in = op.getInput(), out = op.getResult();
  Type elemType = op.getResult().getType().getElementType();
  if (isShared(out)) {
    if (isShared(in)) {
      sharedTiles[out] = sharedTiles[in];
      return success();
    }
    SharedTile tile = allocateShared(cast<RankedTensorType>(out.getType()));
    drainRegion(tile);
    barrierBeforeFill();
    writeShared(tile, layoutOf(in), regs[in]);
    barrier();
    sharedTiles[out] = tile;
    return success();
  }
  if (isShared(in)) {
    waitFor(in);
    regs[out] = readShared(sharedTiles[in], layoutOf(out), elemType);
    return success();
  }
  LinearLayout from = layoutOf(in), to = layoutOf(out);
  // Same threads hold the same elements: only the register order differs.
  if (from.laneBases() == to.laneBases() && from.warpBases() == to.warpBases())
    return registerRemap(in, out, [](tilec::Coord c) { return c; }, op);
  // General case: through an unswizzled scratch tile in shared memory, one
  // element per access, so any row width works (a rank-1 tile is one row):
  // the row vectors of kernels without dots (a softmax's sums meeting a
  // second tile's layout) are the usual client.
  auto type = cast<RankedTensorType>(out.getType());
  if (type.getRank() > 2)
    return op.emitError() << "layout conversion of a rank-" << type.getRank()
                          << " tile through shared memory is not supported";
  int64_t elemBytes = std::max<int64_t>(1, type.getElementTypeBitWidth() / 8);
  SharedTile scratch = allocateRegion(type.getRank() == 2 ? type.getDimSize(0) : 1,
                                      type.getShape().back(), elemBytes, /*swizzleBits=*/0);
  drainRegion(scratch);
  barrierBeforeFill();
  writeShared(scratch, from, regs[in]);
  barrier();
  regs[out] = readShared(scratch, to, elemType);
  return success();
}

/// Math ops the NVPTX backend selects as they are (for every float type the
/// tile IR has): cloned per register, converted by MathToLLVM later.
static bool isNativeGpuMath(Operation *op) {
  return isa<math::AbsFOp, math::AbsIOp, math::SqrtOp, math::RsqrtOp, math::FmaOp, math::FloorOp,
             math::CeilOp, math::TruncOp, math::RoundEvenOp, math::RoundOp, math::CopySignOp,
             math::CountLeadingZerosOp, math::CountTrailingZerosOp, math::CtPopOp>(op);
}

/// Math ops lowerMath expands into approximate hardware instructions.
static bool isExpandedGpuMath(Operation *op) {
  return isa<math::ExpOp, math::Exp2Op, math::LogOp, math::Log2Op, math::TanhOp, math::SinOp,
             math::CosOp>(op);
}

/// The legality check for math on the GPU, before any code is generated:
/// a math op the backend cannot select (LLVM's "Cannot select: ftanh" is a
/// fatal error that ends the process, Python's included) is refused here,
/// at the op's location, with the list of what does lower.
static LogicalResult checkGpuMath(Operation *op) {
  if (!op->getDialect() || !isa<math::MathDialect>(op->getDialect()))
    return success();
  Type elem = getElementTypeOrSelf(op->getOperand(0).getType());
  if (isNativeGpuMath(op) || (isExpandedGpuMath(op) && (elem.isF32() || elem.isF16() || elem.isBF16())))
    return success();
  auto diag = op->emitError() << "'" << op->getName() << "' on " << elem
                              << " has no GPU (NVPTX) lowering; the GPU lowers math.exp, exp2, "
                                 "log, log2, tanh, sin, cos on f16/bf16/f32 and absf, absi, sqrt, "
                                 "rsqrt, fma, floor, ceil, trunc, round, roundeven, copysign";
  return diag;
}

LogicalResult KernelLowering::lowerMath(Operation *op, ValueRange operands,
                                        SmallVectorImpl<Value> &results) {
  if (failed(checkGpuMath(op)))
    return failure();
  if (!isExpandedGpuMath(op))
    return success(); // cloned as is
  Type type = operands[0].getType();
  // f16/bf16: the approximate instructions are f32 ones.
  if (!type.isF32()) {
    Value wide = arith::ExtFOp::create(b, b.getF32Type(), operands[0]);
    SmallVector<Value> wideResults;
    if (failed(lowerMath(op, ValueRange{wide}, wideResults)))
      return failure();
    results.push_back(arith::TruncFOp::create(b, type, wideResults[0]));
    return success();
  }
  auto f32 = [&](double v) { return arith::ConstantOp::create(b, b.getF32FloatAttr(v)); };
  auto intrinsic = [&](StringRef name, Value x) {
    return LLVM::CallIntrinsicOp::create(b, b.getF32Type(), b.getStringAttr(name), ValueRange{x})
        .getResult(0);
  };
  Value x = operands[0];
  if (isa<math::Exp2Op>(op)) {
    results.push_back(exp2(x));
  } else if (isa<math::ExpOp>(op)) {
    results.push_back(exp2(arith::MulFOp::create(b, x, f32(llvm::numbers::log2e))));
  } else if (isa<math::Log2Op>(op)) {
    results.push_back(log2(x));
  } else if (isa<math::LogOp>(op)) {
    results.push_back(arith::MulFOp::create(b, log2(x), f32(llvm::numbers::ln2)));
  } else if (isa<math::TanhOp>(op)) {
    // llvm.tanh with `afn` selects tanh.approx.f32 (sm_75+; one MUFU op,
    // relative error about 2^-11); without it NVPTX has no pattern at all.
    results.push_back(LLVM::TanhOp::create(b, b.getF32Type(), x, LLVM::FastmathFlags::afn));
  } else {
    // sin/cos.approx are accurate on [-pi, pi] only: reduce x - 2*pi*k,
    // k = rint(x / 2pi), with 2*pi in two parts (Cody-Waite) so the reduced
    // argument stays exact to ~1 ulp for |x| up to ~1e5 (rotary angles).
    constexpr double twoPi = 2 * llvm::numbers::pi;
    const float hi = static_cast<float>(twoPi);
    const float lo = static_cast<float>(twoPi - static_cast<double>(hi));
    Value k = math::RoundEvenOp::create(b, arith::MulFOp::create(b, x, f32(1 / twoPi)));
    Value negK = arith::NegFOp::create(b, k);
    Value r = math::FmaOp::create(b, negK, f32(hi), x);
    r = math::FmaOp::create(b, negK, f32(lo), r);
    results.push_back(intrinsic(isa<math::SinOp>(op) ? "llvm.nvvm.sin.approx.ftz.f"
                                                     : "llvm.nvvm.cos.approx.ftz.f",
                                r));
  }
  return success();
}

/// x * b where b is a broadcast (few distinct registers per thread, e.g. the
/// online softmax's O * alpha): the warp skips the multiplies when every
/// factor any of its threads holds is exactly 1 — then the product is x,
/// bit for bit (up to the flush of denormal x a multiply under
/// flush-to-zero would make), so the rewrite is exact. After the first blocks of a long
/// row the running max rarely moves and alpha is 1. Returns false (nothing
/// emitted) where it does not apply.
bool KernelLowering::lowerRescale(arith::MulFOp op) {
  auto type = dyn_cast<RankedTensorType>(op.getType());
  if (!(skipUnitRescale || op->hasAttr(tilec::kSkipUnitRescaleAttr)) || !type ||
      !type.getElementType().isF32())
    return false;
  for (unsigned k = 0; k < 2; ++k) {
    Value factors = op->getOperand(k), other = op->getOperand(1 - k);
    if (!isa<RankedTensorType>(factors.getType()) || !isa<RankedTensorType>(other.getType()))
      return false;
    auto found = regs.find(factors);
    if (found == regs.end())
      continue;
    SmallVector<Value> f = found->second;
    llvm::SetVector<Value> distinct(f.begin(), f.end());
    // A broadcast along rows or columns: a few factors per thread, each
    // repeated. A splat (one factor, e.g. the softmax scale) is left alone.
    if (f.size() < 32 || distinct.size() < 2 || distinct.size() * 8 > f.size())
      continue;
    Value one = arith::ConstantOp::create(b, b.getF32FloatAttr(1.0f));
    Value notOne;
    for (Value v : distinct) {
      Value ne = arith::CmpFOp::create(b, arith::CmpFPredicate::UNE, v, one);
      notOne = notOne ? arith::OrIOp::create(b, notOne, ne).getResult() : ne;
    }
    Value warpNeeds = NVVM::VoteSyncOp::create(
        b, b.getI1Type(), i32(-1), notOne, NVVM::VoteSyncKindAttr::get(ctx, NVVM::VoteSyncKind::any));
    SmallVector<Value> x = regs[other];
    auto ifOp = scf::IfOp::create(b, SmallVector<Type>(x.size(), b.getF32Type()), warpNeeds,
                                  /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&ifOp.getThenRegion().front());
      SmallVector<Value> products;
      for (auto [xi, fi] : llvm::zip_equal(x, f))
        products.push_back(arith::MulFOp::create(b, xi, fi, op.getFastmathAttr()));
      scf::YieldOp::create(b, products);
      b.setInsertionPointToStart(&ifOp.getElseRegion().front());
      scf::YieldOp::create(b, x);
    }
    regs[op.getResult()] = SmallVector<Value>(ifOp.getResults());
    return true;
  }
  return false;
}

LogicalResult KernelLowering::lowerElementwise(Operation *op) {
  if (auto mul = dyn_cast<arith::MulFOp>(op); mul && lowerRescale(mul))
    return success();
  LinearLayout layout = layoutOf(op->getResult(0));
  SmallVector<Value> result;
  for (int64_t r = 0; r < layout.numRegs(); ++r) {
    SmallVector<Value> operands;
    for (Value operand : op->getOperands())
      operands.push_back(isa<RankedTensorType>(operand.getType()) ? regs[operand][r] : scalar(operand));
    SmallVector<Value> mathResults;
    if (failed(lowerMath(op, operands, mathResults)))
      return failure();
    if (!mathResults.empty()) {
      result.push_back(mathResults[0]);
      continue;
    }
    OperationState state(op->getLoc(), op->getName());
    state.addOperands(operands);
    state.addTypes(getElementTypeOrSelf(op->getResult(0).getType()));
    state.addAttributes(op->getAttrs());
    result.push_back(b.create(state)->getResult(0));
  }
  regs[op->getResult(0)] = result;
  return success();
}

/// The kernel parameter a pointer is (through tile.addptr), or null.
static BlockArgument pointerRoot(Value ptr) {
  while (auto add = ptr.getDefiningOp<AddPtrOp>())
    ptr = add.getPtr();
  return dyn_cast<BlockArgument>(ptr);
}

/// One element read by every thread of the program (a uniform load: the
/// threads of a warp hit one address, one transaction). A buffer the kernel
/// never writes is read through the non-coherent path (ld.global.nc, via
/// LLVM's !invariant.load), which cu_seqlens and block tables are.
LogicalResult KernelLowering::lowerLoadScalar(LoadScalarOp op) {
  Type type = op.getType();
  BlockArgument root = pointerRoot(op.getPtr());
  bool readOnly = root && isa<func::FuncOp>(root.getOwner()->getParentOp()) && !storesUntraced &&
                  !storedParams.contains(root.getArgNumber());
  unsigned bytes = std::max<unsigned>(1, type.getIntOrFloatBitWidth() / 8);
  mapping.map(op.getResult(), LLVM::LoadOp::create(b, type, scalar(op.getPtr()), bytes,
                                                   /*isVolatile=*/false, /*isNonTemporal=*/false,
                                                   /*isInvariant=*/readOnly));
  return success();
}

LogicalResult KernelLowering::lowerOp(Operation *op) {
  b.setLoc(op->getLoc());
  if (auto pid = dyn_cast<ProgramIdOp>(op)) {
    Value v;
    switch (pid.getAxis()) {
    case 0: {
      // The GPU starts blocks roughly in blockIdx order. Handing out axis 0
      // from the top makes the last row blocks — the longest under a causal
      // mask — start first, so the tail of the grid is short blocks
      // (FlashAttention-2's ordering). Programs are independent, so any
      // bijection is correct.
      Value block = NVVM::BlockIdXOp::create(b, b.getI32Type());
      Value count = NVVM::GridDimXOp::create(b, b.getI32Type());
      v = arith::SubIOp::create(b, arith::SubIOp::create(b, count, i32(1)), block);
      break;
    }
    case 1: v = NVVM::BlockIdYOp::create(b, b.getI32Type()); break;
    default: v = NVVM::BlockIdZOp::create(b, b.getI32Type()); break;
    }
    mapping.map(pid.getResult(), v);
    return success();
  }
  if (auto num = dyn_cast<NumProgramsOp>(op)) {
    Value v;
    switch (num.getAxis()) {
    case 0: v = NVVM::GridDimXOp::create(b, b.getI32Type()); break;
    case 1: v = NVVM::GridDimYOp::create(b, b.getI32Type()); break;
    default: v = NVVM::GridDimZOp::create(b, b.getI32Type()); break;
    }
    mapping.map(num.getResult(), v);
    return success();
  }
  if (auto addptr = dyn_cast<AddPtrOp>(op)) {
    if (auto it = pointerParam.find(addptr.getPtr()); it != pointerParam.end()) {
      auto [arg, offset] = it->second;
      std::optional<int64_t> delta = constantInt(addptr.getOffset());
      int64_t elemBytes = std::max<int64_t>(
          1, addptr.getPtr().getType().getPointeeType().getIntOrFloatBitWidth() / 8);
      pointerParam[addptr.getResult()] = {
          arg, offset >= 0 && delta ? offset + *delta * elemBytes : int64_t(-1)};
    }
    Value offset = scalar(addptr.getOffset());
    mapping.map(addptr.getResult(),
                LLVM::GEPOp::create(b, ptrType(kGlobalAddressSpace),
                                    addptr.getPtr().getType().getPointeeType(),
                                    scalar(addptr.getPtr()), ValueRange{offset}));
    return success();
  }
  if (auto view = dyn_cast<ViewOp>(op)) {
    ViewInfo info;
    info.base = scalar(view.getBase());
    if (auto it = pointerParam.find(view.getBase()); it != pointerParam.end()) {
      info.arg = int(it->second.first);
      info.argOffset = it->second.second;
    }
    info.elementType = view.getResult().getType().getElementType();
    for (Value size : view.getSizes())
      info.sizes.push_back(scalar(size));
    for (Value stride : view.getStrides())
      info.strides.push_back(scalar(stride));
    views[view.getResult()] = info;
    return success();
  }
  if (auto load = dyn_cast<LoadScalarOp>(op))
    return lowerLoadScalar(load);
  if (auto load = dyn_cast<LoadOp>(op))
    return lowerLoad(load);
  if (auto add = dyn_cast<AtomicAddOp>(op))
    return lowerAtomicAdd(add);
  if (auto store = dyn_cast<StoreOp>(op))
    return lowerStore(store);
  if (auto dot = dyn_cast<DotOp>(op))
    return lowerDot(dot);
  if (auto reduce = dyn_cast<ReduceOp>(op))
    return lowerReduce(reduce);
  if (auto forOp = dyn_cast<scf::ForOp>(op))
    return lowerFor(forOp);
  if (auto ifOp = dyn_cast<scf::IfOp>(op))
    return lowerIf(ifOp);
  if (auto convert = dyn_cast<ConvertLayoutOp>(op))
    return lowerConvert(convert);
  if (auto iota = dyn_cast<IotaOp>(op)) {
    LinearLayout layout = layoutOf(iota.getResult());
    SmallVector<Value> thread = threadCoords(layout);
    SmallVector<Value> values;
    for (int64_t r = 0; r < layout.numRegs(); ++r)
      values.push_back(elementCoords(layout, thread, r)[0]);
    regs[iota.getResult()] = values;
    return success();
  }
  if (auto splat = dyn_cast<SplatOp>(op)) {
    regs[splat.getResult()] =
        SmallVector<Value>(layoutOf(splat.getResult()).numRegs(), scalar(splat.getValue()));
    return success();
  }
  if (auto expand = dyn_cast<ExpandDimsOp>(op)) {
    unsigned axis = expand.getAxis();
    return registerRemap(expand.getInput(), expand.getResult(),
                         [axis](tilec::Coord c) {
                           c.erase(c.begin() + axis);
                           return c;
                         },
                         op);
  }
  if (auto broadcast = dyn_cast<BroadcastOp>(op)) {
    ArrayRef<int64_t> inShape = broadcast.getInput().getType().getShape();
    std::vector<int64_t> shape(inShape.begin(), inShape.end());
    return registerRemap(broadcast.getInput(), broadcast.getResult(),
                         [shape](tilec::Coord c) {
                           for (size_t d = 0; d < c.size(); ++d)
                             if (shape[d] == 1)
                               c[d] = 0;
                           return c;
                         },
                         op);
  }
  if (auto trans = dyn_cast<TransOp>(op))
    return registerRemap(trans.getInput(), trans.getResult(),
                         [](tilec::Coord c) { return tilec::Coord{c[1], c[0]}; }, op);
  if (auto constant = dyn_cast<arith::ConstantOp>(op)) {
    if (auto type = dyn_cast<RankedTensorType>(constant.getType())) {
      auto splat = dyn_cast<SplatElementsAttr>(constant.getValue());
      if (!splat)
        return op->emitError() << "only splat tile constants are supported on the GPU";
      Value value = arith::ConstantOp::create(b, cast<TypedAttr>(splat.getSplatValue<Attribute>()));
      regs[constant.getResult()] = SmallVector<Value>(layoutOf(constant.getResult()).numRegs(), value);
      return success();
    }
  }
  if (isa<func::ReturnOp>(op)) {
    // The last prefetch of a pipelined loop may still be in flight; PTX does
    // not define exiting with outstanding cp.async copies.
    if (committedGroups > 0)
      NVVM::CpAsyncWaitGroupOp::create(b, b.getI32IntegerAttr(0));
    LLVM::ReturnOp::create(b, ValueRange{});
    return success();
  }
  bool touchesTiles = llvm::any_of(op->getOperandTypes(), [](Type t) { return isa<RankedTensorType>(t); }) ||
                      llvm::any_of(op->getResultTypes(), [](Type t) { return isa<RankedTensorType>(t); });
  if (touchesTiles) {
    if (op->hasTrait<OpTrait::Elementwise>() && op->getNumResults() == 1)
      return lowerElementwise(op);
    return op->emitError() << "'" << op->getName() << "' on tiles has no GPU lowering";
  }
  if (op->getNumRegions() != 0)
    return op->emitError() << "'" << op->getName() << "' has no GPU lowering";
  // Scalar math the NVPTX backend cannot expand (exp, log, tanh, sin, cos)
  // goes to the approximate hardware instructions, math it cannot select at
  // all is refused (lowerMath); everything else is cloned as is.
  SmallVector<Value> operands = llvm::map_to_vector(op->getOperands(), [&](Value v) { return scalar(v); });
  SmallVector<Value> mathResults;
  if (failed(lowerMath(op, operands, mathResults)))
    return failure();
  if (!mathResults.empty()) {
    mapping.map(op->getResult(0), mathResults[0]);
    return success();
  }
  b.clone(*op, mapping);
  return success();
}

LogicalResult KernelLowering::run() {
  if (auto attr = func->getAttrOfType<IntegerAttr>(tilec::kNumWarpsAttrName))
    numWarps = attr.getInt();
  else
    return func.emitError() << "kernel has no tile.num_warps: run tile-partition-warps first";
  if (failed(tilec::checkNumWarps(func, tilec::kNumWarpsAttrName, numWarps)))
    return failure();
  // Layouts written by hand (or by a run of tile-partition-warps with
  // another num-warps) must spread over exactly this many warps: the
  // lowering indexes registers by the layout and threads by numWarps.
  int64_t warpBits = llvm::Log2_64(numWarps);
  WalkResult layouts = func.walk([&](Operation *op) {
    for (Value result : op->getResults()) {
      auto type = dyn_cast<RankedTensorType>(result.getType());
      auto attr = type ? dyn_cast_or_null<LinearLayoutAttr>(type.getEncoding()) : nullptr;
      if (attr && int64_t(toLinearLayout(attr).warpBases().size()) != warpBits) {
        op->emitError() << "the layout of this result has "
                        << toLinearLayout(attr).warpBases().size() << " warp bases ("
                        << (int64_t(1) << toLinearLayout(attr).warpBases().size())
                        << " warps), but the kernel has tile.num_warps = " << numWarps;
        return WalkResult::interrupt();
      }
    }
    return WalkResult::advance();
  });
  if (layouts.wasInterrupted())
    return failure();
  // The signature. The kernel's ABI (names, element types, grid, ...) is the
  // driver's: it writes the launch manifest from the attributes this leaves
  // on the llvm.func (below; names in dialects/Tile/TileAttrNames.h).
  SmallVector<Type> argTypes;
  for (auto [i, type] : llvm::enumerate(func.getArgumentTypes())) {
    if (isa<PtrType>(type))
      argTypes.push_back(ptrType(kGlobalAddressSpace));
    else if (type.isInteger(32) || type.isInteger(64) || type.isF32())
      argTypes.push_back(type);
    else
      return func.emitError() << "kernel parameter " << i << " has type " << type
                              << "; kernels take !tile.ptr, i32, i64 or f32";
  }
  if (func.getNumResults() != 0)
    return func.emitError() << "kernels return nothing; write results with tile.store";

  func.walk([&](StoreOp store) {
    auto view = store.getView().getDefiningOp<ViewOp>();
    BlockArgument root = view ? pointerRoot(view.getBase()) : BlockArgument();
    if (root && root.getOwner() == &func.getBody().front())
      storedParams.insert(root.getArgNumber());
    else
      storesUntraced = true;
  });

  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(func);
  auto kernel = LLVM::LLVMFuncOp::create(
      b, func.getName(), LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(ctx), argTypes));
  b.setInsertionPointToStart(kernel.addEntryBlock(b));
  for (auto [oldArg, newArg] : llvm::zip(func.getArguments(), kernel.getArguments())) {
    mapping.map(oldArg, newArg);
    if (isa<PtrType>(oldArg.getType()))
      pointerParam[oldArg] = {oldArg.getArgNumber(), 0};
  }
  threadId = NVVM::ThreadIdXOp::create(b, b.getI32Type());
  laneId = arith::RemUIOp::create(b, threadId, i32(kWarpSize));
  warpId = arith::DivUIOp::create(b, threadId, i32(kWarpSize));
  smemBase = LLVM::AddressOfOp::create(b, smemGlobal);
  // Thread-invariant address math is emitted before this marker, in the
  // entry block, so every loop sees it computed once.
  prologueEnd = LLVM::UndefOp::create(b, b.getI32Type());

  for (Operation &op : func.getBody().front())
    if (failed(lowerOp(&op)))
      return failure();

  // What the driver's manifest needs (TileAttrNames.h): the kernel's own
  // tile.* attributes (arg_names, grid, variant, mask, num_warps, ...) carried
  // over, and per parameter its positivity, its pointee and -- for pointers
  // accessed more than an element at a time (16-byte cp.async and stores,
  // vector loads) -- that width, which the runtime checks the pointer's
  // alignment against instead of the GPU faulting on a misaligned address.
  for (NamedAttribute attr : func->getDiscardableAttrs())
    if (attr.getName() != kKernelAttrName && attr.getName().strref().starts_with("tile."))
      kernel->setAttr(attr.getName(), attr.getValue());
  for (auto [i, type] : llvm::enumerate(func.getArgumentTypes())) {
    if (func.getArgAttr(i, kPositiveAttrName))
      kernel.setArgAttr(i, kPositiveAttrName, UnitAttr::get(ctx));
    auto ptr = dyn_cast<PtrType>(type);
    if (!ptr)
      continue;
    kernel.setArgAttr(i, tilec::kElemAttrName, TypeAttr::get(ptr.getPointeeType()));
    // Accessed means through a view, whose elements are ints or floats.
    if (auto it = accessBytes.find(i); it != accessBytes.end()) {
      int64_t elem = std::max<int64_t>(1, ptr.getPointeeType().getIntOrFloatBitWidth() / 8);
      if (it->second > elem)
        kernel.setArgAttr(i, tilec::kAlignAttrName, b.getI64IntegerAttr(it->second));
    }
  }
  int64_t threads = numWarps * kWarpSize;
  kernel->setAttr(NVVM::NVVMDialect::getKernelFuncAttrName(), UnitAttr::get(ctx));
  kernel->setAttr(NVVM::NVVMDialect::getMaxntidAttrName(),
                  b.getDenseI32ArrayAttr({int32_t(threads), 1, 1}));
  kernel->setAttr(tilec::kSharedBytesAttrName, b.getI64IntegerAttr(sharedPeak));
  func.erase();
  return success();
}

struct ConvertTileToNVVMPass final : tilec::impl::ConvertTileToNVVMBase<ConvertTileToNVVMPass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (arch != "sm_80" && arch != "sm_90a" && arch != "sm_90" && arch != "sm_86" && arch != "sm_89") {
      module.emitError() << "unsupported arch '" << arch << "': expected sm_80, sm_86, sm_89, sm_90 or sm_90a";
      return signalPassFailure();
    }
    SmallVector<func::FuncOp> kernels;
    for (auto func : module.getOps<func::FuncOp>())
      if (func->hasAttr(kKernelAttrName))
        kernels.push_back(func);
    if (kernels.empty())
      return;
    OpBuilder builder(module.getBodyRegion());
    builder.setInsertionPointToStart(module.getBody());
    auto smem = module.lookupSymbol<LLVM::GlobalOp>(kSharedSymbol);
    if (!smem)
      smem = LLVM::GlobalOp::create(builder, module.getLoc(),
                                    LLVM::LLVMArrayType::get(builder.getI8Type(), 0),
                                    /*isConstant=*/false, LLVM::Linkage::External, kSharedSymbol,
                                    Attribute(), kSharedAlignment, kSharedAddressSpace);
    std::optional<CopyBounds> bounds = llvm::StringSwitch<std::optional<CopyBounds>>(copyBounds)
                                           .Case("chunk", CopyBounds::Chunk)
                                           .Case("tile", CopyBounds::Tile)
                                           .Case("row", CopyBounds::Row)
                                           .Default(std::nullopt);
    if (!bounds) {
      module.emitError() << "copy-bounds must be chunk, tile or row, got '" << copyBounds << "'";
      return signalPassFailure();
    }
    std::optional<XorRingPhases> xorPhases = llvm::StringSwitch<std::optional<XorRingPhases>>(xorRingPhases)
                                                 .Case("none", XorRingPhases::None)
                                                 .Case("trans", XorRingPhases::Trans)
                                                 .Case("non-trans", XorRingPhases::NonTrans)
                                                 .Case("all", XorRingPhases::All)
                                                 .Default(std::nullopt);
    if (!xorPhases) {
      module.emitError() << "xor-ring-phases must be none, trans, non-trans or all, got '"
                         << xorRingPhases << "'";
      return signalPassFailure();
    }
    for (func::FuncOp func : kernels)
      if (failed(KernelLowering(func, smem, arch, smemEpilogue, skipUnitRescale, *bounds,
                                storeTranspose, carryRingAddresses, *xorPhases)
                     .run()))
        return signalPassFailure();
    module->setAttr(tilec::kTargetAttrName, builder.getStringAttr(arch));
  }
};

} // namespace
