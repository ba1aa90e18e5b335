//===- Lowering.h - convert-tile-to-nvvm: the per-kernel lowering state -===//
//
// KernelLowering walks one kernel once and emits what one thread does. Its
// methods are defined by op family, one file each in this folder (see the
// map at the top of ../ConvertTileToNVVM.cpp); this header is the state they
// share: the value maps (scalars, register tiles, shared tiles, views), the
// strategy options. Where shared tiles live is tile-allocate-shared's
// (../AllocateShared.cpp): the lowering reads their regions (regionOf); the
// cp.async commits, waits and barriers are tile-insert-waits' ops
// (../InsertWaits.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef TILEC_PASSES_CONVERTTILETONVVM_LOWERING_H
#define TILEC_PASSES_CONVERTTILETONVVM_LOWERING_H

#include "dialects/Tile/TileDialect.h"
#include "tilec/Passes.h"

#include "TargetInfo.h"
#include "../AllocateShared.h"

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
#include "llvm/ADT/bit.h"

#include <map>
#include <tuple>

namespace tilec::nvvm {

using namespace mlir;
using namespace mlir::tile;
using tilec::LinearLayout;

/// Lanes per warp: the same on every target (TargetDescription::warpSize,
/// static_assert in TargetInfoSm80.cpp). The other hardware numbers are the
/// target's: `hw` below.
constexpr int64_t kWarpSize = kTargets[0].warpSize;
/// The dynamic shared-memory window every kernel's shared tiles live in.
constexpr llvm::StringLiteral kSharedSymbol = "tile_dynamic_smem";

/// A view: base pointer plus runtime sizes (i32) and strides (i64).
struct ViewInfo {
  Value base;
  /// The kernel parameter the base pointer derives from (-1: unknown), and
  /// the constant byte offset from it (-1: not a constant).
  int arg = -1;
  int64_t argOffset = -1;
  Type elementType;
  SmallVector<Value> sizes, strides;
  /// tile.view's `block` (empty: a plain strided view): the memory is a
  /// grid of row-major blocks of this shape and `strides` step between them.
  SmallVector<int64_t> block;
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
  /// The tile read through it is the stored one transposed (a
  /// #tile.shared<..., transposed> value): rows x cols is the storage.
  bool transposed = false;
  int64_t bytes() const { return rows * cols * elemBytes; }
};

inline std::optional<int64_t> constantInt(Value v) {
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
  /// Per loop: Trans where one accumulator alone takes 128 or more
  /// registers per thread (the forward's O at head_dim 128: measured fastest
  /// there, session 5); All where only the loop's carried register tiles
  /// together do (the backward's dK + dV at d128: Trans spilled more inside
  /// the loop than carrying nothing, All least; session 14).
  Auto,
};

class KernelLowering {
public:
  KernelLowering(func::FuncOp func, LLVM::GlobalOp smem, const TargetInfo &target,
                 bool skipUnitRescale, CopyBounds copyBounds, bool storeTranspose,
                 bool carryRingAddresses, XorRingPhases xorRingPhases)
      : func(func), smemGlobal(smem), target(target), hw(target.description()),
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
  /// A shared tile that is the transpose of the one stored (tile.trans of a
  /// shared tile): element (i, j) is at (j, i) of the stored tile.
  bool isTransposedShared(Value v) {
    auto type = dyn_cast<RankedTensorType>(v.getType());
    auto shared = type ? dyn_cast_or_null<SharedLayoutAttr>(type.getEncoding()) : nullptr;
    return shared && shared.getTransposed();
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
  /// The view index of register `reg`'s element: its tile coordinates plus
  /// the access's offsets (loads, stores, atomic adds).
  SmallVector<Value> viewIndex(const LinearLayout &layout, ArrayRef<Value> thread, int64_t reg,
                               ArrayRef<Value> offsets);
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
  Value combine(ReduceKind kind, Value a, Value b);
  int vectorWidth(const LinearLayout &layout, const ViewInfo &view, ValueRange offsets,
                  Type elemType);
  int viewWidthLimit(const ViewInfo &view, ValueRange offsets, Type elemType);
  SmallVector<Value> widthStrides(const ViewInfo &view);
  LogicalResult registerRemap(Value from, Value to, function_ref<tilec::Coord(tilec::Coord)> project,
                              Operation *op);
  SmallVector<Value> readShared(SharedTile &tile, const LinearLayout &layout, Type elemType);
  void writeShared(SharedTile &tile, const LinearLayout &layout, ArrayRef<Value> regs);
  bool writeSharedFragments(SharedTile &tile, const LinearLayout &layout, ArrayRef<Value> regs);
  /// Stores `values` (registers of `layout`) into `tile` as words of `run`
  /// elements along a row, at swizzled chunk bases plus immediates computed
  /// here (the caller scopes localChunkBases); a register holding a duplicate
  /// of an earlier one's element is skipped. The smem-epilogue and a warp
  /// grid's operand writes share it.
  void storeRegisterRuns(SharedTile &tile, const LinearLayout &layout, ArrayRef<Value> values,
                         ArrayRef<Value> thread, int run);
  /// The region tile-allocate-shared gave `op` (its tile.smem) as a tile of
  /// geometry `g` (AllocateShared.h's rule for the op); an error at `op`
  /// when either is missing.
  FailureOr<SharedTile> regionOf(Operation *op, std::optional<smem::Geometry> g);
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
  LogicalResult lowerArrive(ArriveOp op);
  LogicalResult lowerWaitTurn(WaitTurnOp op);
  LogicalResult lowerPassTurn(PassTurnOp op);
  LogicalResult lowerWaitPriorKernels(WaitPriorKernelsOp op);
  LogicalResult lowerLaunchDependents(LaunchDependentsOp op);
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
  /// The architecture's primitives and hardware numbers (TargetInfo.h).
  const TargetInfo &target;
  const TargetDescription &hw;
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
  /// The kernel has a tile.wait_prior_kernels the target emits: it may be
  /// launched early (tile.programmatic_launch on the lowered kernel), and its
  /// scalar loads are not !invariant.load (LLVM may move those above the
  /// wait, reading what the kernel before it still writes).
  bool waitsPriorKernels = false;
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
  /// xor-ring-phases for the loop being lowered (Auto resolved by lowerFor).
  XorRingPhases loopXorPhases = XorRingPhases::Trans;
  void carryRingShifts(scf::ForOp &loop, Value parityInit);
  /// When set, new chunk bases are computed at the insertion point and kept
  /// here instead (see sharedChunkBase).
  std::map<ChunkBaseKey, Value> *localChunkBases = nullptr;
};

/// The kernel parameter a pointer is (through tile.addptr), or null.
inline BlockArgument pointerRoot(Value ptr) {
  while (auto add = ptr.getDefiningOp<AddPtrOp>())
    ptr = add.getPtr();
  return dyn_cast<BlockArgument>(ptr);
}

} // namespace tilec::nvvm

#endif // TILEC_PASSES_CONVERTTILETONVVM_LOWERING_H
