//===- LinearLayout.h - distributed layouts as linear maps ----------------===//
//
// One representation for every way a tile is spread over a thread block:
// a linear map over GF(2) from the bits of (register, lane, warp, block) to
// tile coordinates ("block": the CTAs of a cluster, empty until sm90a
// clusters use it). Each input bit owns a basis vector of coordinates; an
// element's coordinates are the XOR of the bases of the set bits. A zero
// basis replicates (every value of that bit sees the same element).
//
// The mma.sync m16n8k16 fragments (per target: Sm80Layouts.h), the
// coalesced global-access layout and their row slices are all instances, so the lowering needs no pairwise
// conversion code between special layout kinds: two layouts with the same
// lane and warp bases differ only in register order (a renaming), anything
// else moves through shared memory.
//
// toMap() gives the general form (LinearMap.h: named dimensions,
// composition, inversion). Plain C++ on purpose: layout math is
// unit-tested without MLIR.
//
//===----------------------------------------------------------------------===//
#ifndef TILEC_LAYOUT_LINEARLAYOUT_H
#define TILEC_LAYOUT_LINEARLAYOUT_H

#include "tilec/Layout/LinearMap.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tilec {

/// Tile coordinates, one entry per tile dimension.
using Coord = std::vector<int64_t>;

class LinearLayout {
public:
  LinearLayout() = default;
  LinearLayout(unsigned rank, std::vector<Coord> reg, std::vector<Coord> lane,
               std::vector<Coord> warp, std::vector<Coord> block = {});

  unsigned rank() const { return rank_; }
  const std::vector<Coord> &regBases() const { return reg_; }
  const std::vector<Coord> &laneBases() const { return lane_; }
  const std::vector<Coord> &warpBases() const { return warp_; }
  const std::vector<Coord> &blockBases() const { return block_; }
  int64_t numRegs() const { return int64_t(1) << reg_.size(); }
  int64_t numLanes() const { return int64_t(1) << lane_.size(); }
  int64_t numWarps() const { return int64_t(1) << warp_.size(); }
  int64_t numBlocks() const { return int64_t(1) << block_.size(); }

  /// The coordinates of register `reg` of lane `lane` in warp `warp` (of
  /// CTA `block` of the cluster).
  Coord apply(int64_t reg, int64_t lane, int64_t warp, int64_t block = 0) const;
  /// The part contributed by the register bits alone (lane 0, warp 0).
  Coord regCoord(int64_t reg) const { return apply(reg, 0, 0); }
  /// The part contributed by the thread (register 0).
  Coord threadCoord(int64_t lane, int64_t warp) const { return apply(0, lane, warp); }

  /// Empty when the layout covers exactly the tile `shape` (every element
  /// owned by some thread, no coordinate outside); otherwise says why.
  std::string checkCovers(const std::vector<int64_t> &shape) const;

  /// Register of this thread that holds `coord` (first one if replicated),
  /// given that all threads share the register bases.
  std::optional<int64_t> regHolding(const Coord &regPart) const;

  /// Remove dimension `dim` (as `tile.reduce` does): bases lose that
  /// component; lane/warp bits that only moved along `dim` become
  /// replicating, register bits that did are dropped (canonical form: no
  /// zero register bases).
  LinearLayout sliceDim(unsigned dim) const;
  /// Insert a unit dimension at `dim` (as `tile.expand_dims` does).
  LinearLayout insertDim(unsigned dim) const;
  /// Zero the component `dim` of every basis: the layout of a tile that is
  /// broadcast along `dim` into this one (source has size 1 there). Register
  /// bases that become zero are dropped.
  LinearLayout zeroDim(unsigned dim) const;
  /// Swap the two dimensions of a rank-2 layout.
  LinearLayout transposed() const;

  /// The bits of dimension `d` that lane/warp/block bases set, and those
  /// that register bases set: where the two are disjoint, a coordinate is
  /// the sum of a thread part and a register part.
  std::pair<int64_t, int64_t> threadAndRegisterBits(unsigned d) const;

  /// True when both distribute elements over threads identically, so they
  /// can only differ in register numbering.
  bool sameThreadMapping(const LinearLayout &other) const;

  bool operator==(const LinearLayout &other) const;
  bool operator!=(const LinearLayout &other) const { return !(*this == other); }

  /// The same map as a LinearMap with inputs "register", "lane", "warp",
  /// "block" and outputs "dim0".. of the extents `shape` (powers of two at
  /// least every coordinate the layout reaches).
  LinearMap toMap(const std::vector<int64_t> &shape) const;

  /// One line per thread: "w0 l5: r0=(1,2) r1=(1,3) ...".
  std::string drawThreadMap() const;
  /// A grid with one cell per element naming its owner "Tlane:r" (warps as
  /// W), the picture the PTX ISA draws for fragments. Rank 2 only.
  std::string drawElementMap(const std::vector<int64_t> &shape) const;
  std::string str() const;

  //===--------------------------------------------------------------------===//
  // Target-independent instances (the mma fragments are in Sm80Layouts.h)
  //===--------------------------------------------------------------------===//

  /// Coalesced global access: each thread moves `vecElems` consecutive
  /// elements of the last dimension (fewer when a row is shorter: a vector
  /// never spans two rows), lanes then warps walk the tile row-major,
  /// registers repeat the pattern. With `warpsOnRows`, warps take the bits
  /// of the leading dimensions before further bits of the last one, so a
  /// row's elements stay inside one warp (row reductions without shared
  /// memory) while each warp's access stays as contiguous.
  static LinearLayout coalesced(const std::vector<int64_t> &shape, int64_t numWarps,
                                int64_t vecElems, bool warpsOnRows = false);
  /// coalesced, but no warp basis moves along the dimensions in `keepAxes`
  /// (bit d: dimension d), so reductions along them stay inside a warp: the
  /// warps take the most significant bits of the other dimensions (those
  /// left after the thread's vector), the lanes then the least significant
  /// bits left in row-major order (so a warp's access stays as contiguous
  /// as it can), registers the rest. Warps without such bits to take hold
  /// copies (zero bases).
  static LinearLayout coalescedKeepingAxes(const std::vector<int64_t> &shape, int64_t numWarps,
                                           int64_t vecElems, uint64_t keepAxes);

private:
  unsigned rank_ = 0;
  std::vector<Coord> reg_, lane_, warp_, block_;
};

/// log2 of a power of two; -1 otherwise.
int log2Exact(int64_t value);

} // namespace tilec

#endif
