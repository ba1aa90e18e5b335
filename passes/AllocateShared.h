//===- AllocateShared.h - which tile ops take shared memory, and how much -===//
//
// The one place that says which ops of layout-assigned tile IR need a region
// of shared memory and its geometry. tile-allocate-shared (AllocateShared.cpp)
// gives each such op its region (#tile.smem, dialects/Tile/TileAttrNames.h);
// convert-tile-to-nvvm reads the region and asks these same rules for the
// geometry, so the two cannot disagree:
//
//   tile.load into a #tile.shared tile            the tile (sharedTileGeometry)
//   tile.convert_layout register -> #tile.shared  the tile (sharedTileGeometry)
//   scf.for carrying a shared tile that is read   its twin: a second region of
//     after its reload is issued (needsTwin)        the same size (the ring)
//   tile.convert_layout between register layouts  an unswizzled scratch tile,
//     placing elements in different threads         one element per access
//                                                   (conversionScratch)
//   tile.store of a register tile holding under   a staging tile, live only
//     16 bytes of a row per thread, with            during the store: the
//     smem-epilogue (epilogueStaging)               smem-epilogue
//
//===----------------------------------------------------------------------===//
#ifndef TILEC_PASSES_ALLOCATESHARED_H
#define TILEC_PASSES_ALLOCATESHARED_H

#include "dialects/Tile/TileDialect.h"
#include "tilec/Layout/LinearLayout.h"
#include "tilec/Target/TargetDescription.h"

#include "mlir/Dialect/SCF/IR/SCF.h"

#include <optional>

namespace tilec::smem {

/// A shared tile: row-major, `rows` x `cols` elements of `elemBytes`, its
/// 16-byte chunks XOR-swizzled with the row over `swizzleBits` bits.
struct Geometry {
  int64_t rows = 0, cols = 0, elemBytes = 0;
  unsigned swizzleBits = 0;
  int64_t bytes() const { return rows * cols * elemBytes; }
};

/// A #tile.shared tile of `type` (rank 2; null otherwise: the lowering
/// refuses other ranks). The swizzle is the encoding's, capped by the chunks
/// of a row.
std::optional<Geometry> sharedTileGeometry(mlir::RankedTensorType type, const TargetDescription &hw);

/// Whether the loop body reads the carried shared tile `arg` after `reload`
/// (the tile.load yielding its next value) is issued: then the reload goes
/// to a second region (a ring of two) instead of refilling the one read.
bool needsTwin(mlir::BlockArgument arg, mlir::Operation *reload);

/// A shared tile an scf.for carries: its iter_arg index, the tile.load in
/// the loop body that yields its next value (null when the yielded value is
/// anything else: the lowering refuses that), and whether it alternates
/// between two regions (needsTwin of that reload; false without one).
struct CarriedTile {
  unsigned index;
  mlir::tile::LoadOp reload;
  bool ring;
};

/// The #tile.shared tiles `loop` carries, in iter_arg order: the one
/// classification tile-allocate-shared, tile-insert-waits and the lowering
/// (lowerFor) share, so they cannot disagree on which tiles ring.
llvm::SmallVector<CarriedTile> carriedTiles(mlir::scf::ForOp loop);

/// The scratch a register-to-register tile.convert_layout goes through: when
/// the two layouts place elements in different threads (rank <= 2).
std::optional<Geometry> conversionScratch(mlir::tile::ConvertLayoutOp op);

/// The smem-epilogue staging of a tile.store (FlashAttention-2's epilogue,
/// lowered by lowerStoreThroughShared): a register tile whose threads hold
/// under 16 bytes of each row is written to shared memory as held, then read
/// back and stored as 16-byte chunks along rows. Null where that does not
/// apply (the store is then direct).
struct Staging : Geometry {
  /// Registers r, r+1, ... that hold consecutive columns (one shared write).
  int run = 1;
};
std::optional<Staging> epilogueStaging(mlir::tile::StoreOp op, const TargetDescription &hw);

/// The widest vector (elements) one access through a view of these sizes
/// and strides can move at `offsets`: 16 bytes, halved until the last
/// dimension's constant size and offset allow it (1 when either is not a
/// constant, or the last stride is not a constant 1).
int viewWidthLimit(mlir::ValueRange sizes, mlir::ValueRange strides, mlir::ValueRange offsets,
                   mlir::Type elemType, int64_t chunkBytes);
/// Consecutive registers of `layout` one vector access moves (the leading
/// register bases walk the last dimension, the thread part keeps vectors
/// aligned, the view allows the width).
int vectorWidth(const LinearLayout &layout, mlir::ValueRange sizes, mlir::ValueRange strides,
                mlir::ValueRange offsets, mlir::Type elemType, int64_t chunkBytes);

} // namespace tilec::smem

#endif // TILEC_PASSES_ALLOCATESHARED_H
