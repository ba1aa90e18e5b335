//===- LinearLayout.cpp - distributed layouts as linear maps --------------===//
#include "tilec/Layout/LinearLayout.h"

#include <algorithm>
#include <cassert>
#include <map>
#include <sstream>

namespace tilec {

int log2Exact(int64_t value) {
  if (value <= 0 || (value & (value - 1)) != 0)
    return -1;
  int bits = 0;
  while ((int64_t(1) << bits) < value)
    ++bits;
  return bits;
}

LinearLayout::LinearLayout(unsigned rank, std::vector<Coord> reg, std::vector<Coord> lane,
                           std::vector<Coord> warp, std::vector<Coord> block)
    : rank_(rank), reg_(std::move(reg)), lane_(std::move(lane)), warp_(std::move(warp)),
      block_(std::move(block)) {
#ifndef NDEBUG
  for (const auto *bases : {&reg_, &lane_, &warp_, &block_})
    for (const Coord &basis : *bases)
      assert(basis.size() == rank_ && "basis rank must match the layout rank");
#endif
}

static void xorBasesInto(Coord &out, const std::vector<Coord> &bases, int64_t bits) {
  for (size_t i = 0; i < bases.size(); ++i)
    if (bits & (int64_t(1) << i))
      for (size_t d = 0; d < out.size(); ++d)
        out[d] ^= bases[i][d];
}

Coord LinearLayout::apply(int64_t reg, int64_t lane, int64_t warp, int64_t block) const {
  Coord out(rank_, 0);
  xorBasesInto(out, reg_, reg);
  xorBasesInto(out, lane_, lane);
  xorBasesInto(out, warp_, warp);
  xorBasesInto(out, block_, block);
  return out;
}

LinearMap LinearLayout::toMap(const std::vector<int64_t> &shape) const {
  assert(shape.size() == rank_ && "one extent per dimension");
  std::vector<LinearMap::OutDim> outs;
  for (unsigned d = 0; d < rank_; ++d)
    outs.push_back({"dim" + std::to_string(d), shape[d]});
  return LinearMap({{"register", reg_}, {"lane", lane_}, {"warp", warp_}, {"block", block_}},
                   std::move(outs));
}

static std::string coordStr(const Coord &c) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < c.size(); ++i)
    os << (i ? "," : "") << c[i];
  os << ")";
  return os.str();
}

std::string LinearLayout::checkCovers(const std::vector<int64_t> &shape) const {
  if (shape.size() != rank_)
    return "layout has rank " + std::to_string(rank_) + " but the tile has rank " +
           std::to_string(shape.size());
  // The set of coordinates a linear layout reaches is a GF(2) subspace: it
  // has 2^k elements and is closed under XOR. The box [0, shape) is such a
  // set only when every extent is a power of two; then the layout stays
  // inside it iff every basis does (XOR cannot leave [0, 2^b)), and fills it
  // iff the bases span all sum(log2 extent) coordinate bits. Checking that
  // costs O(bases * bits) rather than a walk over every (warp, lane,
  // register) and a bitmap of the tile, so the verifier stays cheap on any
  // tensor type a user writes.
  std::vector<int> bits(rank_);
  for (unsigned d = 0; d < rank_; ++d) {
    bits[d] = log2Exact(shape[d]);
    if (bits[d] < 0)
      return "the tile's extent " + std::to_string(shape[d]) + " in dimension " +
             std::to_string(d) + " is not a power of two; a linear layout covers only "
             "power-of-two extents";
  }
  // A single basis out of range is reached by the index with only its bit
  // set; the lowest such index (register bits before lane bits before warp
  // bits) is the first one a walk in (warp, lane, register) order would hit.
  struct Named {
    const std::vector<Coord> *bases;
    int which; // 0 register, 1 lane, 2 warp, 3 block
  };
  for (Named named : {Named{&reg_, 0}, Named{&lane_, 1}, Named{&warp_, 2}, Named{&block_, 3}})
    for (size_t i = 0; i < named.bases->size(); ++i)
      for (unsigned d = 0; d < rank_; ++d) {
        int64_t c = (*named.bases)[i][d];
        if (c >= 0 && c < shape[d])
          continue;
        int64_t index = int64_t(1) << i;
        std::ostringstream os;
        os << "register " << (named.which == 0 ? index : 0) << " of lane "
           << (named.which == 1 ? index : 0) << " in warp " << (named.which == 2 ? index : 0)
           << (named.which == 3 ? " of block " + std::to_string(index) : std::string())
           << " maps to coordinate " << c << " in dimension " << d
           << ", outside the tile's extent " << shape[d];
        return os.str();
      }

  // Gaussian elimination over GF(2). Coordinate bits are ordered by their
  // weight in the row-major element index (dimension 0 most significant);
  // pivots[d][b] holds a spanned vector whose most significant set bit is
  // (d, b), so reducing a vector only ever clears bits below its leading one.
  std::vector<std::vector<Coord>> pivots(rank_);
  for (unsigned d = 0; d < rank_; ++d)
    pivots[d].assign(bits[d], Coord());
  // Reduces `v` against the pivots; inserts it as a new pivot when it is not
  // yet spanned and `insert` is set. Returns whether `v` was spanned.
  auto reduce = [&](Coord v, bool insert) {
    for (unsigned d = 0; d < rank_; ++d)
      for (int b = bits[d] - 1; b >= 0; --b) {
        if (!(v[d] & (int64_t(1) << b)))
          continue;
        Coord &pivot = pivots[d][b];
        if (pivot.empty()) {
          if (insert)
            pivot = v;
          return false;
        }
        for (unsigned e = 0; e < rank_; ++e)
          v[e] ^= pivot[e];
      }
    return true;
  };
  for (const auto *bases : {&reg_, &lane_, &warp_, &block_})
    for (const Coord &basis : *bases)
      reduce(basis, /*insert=*/true);
  // Every element below the smallest unowned one is owned, so if any element
  // is unowned the smallest is a single bit: scan the unit vectors from the
  // least significant.
  int shift = 0;
  for (int d = int(rank_) - 1; d >= 0; --d)
    for (int b = 0; b < bits[d]; ++b, ++shift) {
      Coord unit(rank_, 0);
      unit[d] = int64_t(1) << b;
      if (reduce(unit, /*insert=*/false))
        continue;
      std::string index =
          shift < 63 ? std::to_string(int64_t(1) << shift) : "2^" + std::to_string(shift);
      return "element " + coordStr(unit) + " (row-major index " + index +
             ") is owned by no thread";
    }
  return "";
}

std::optional<int64_t> LinearLayout::regHolding(const Coord &regPart) const {
  for (int64_t r = 0; r < numRegs(); ++r)
    if (regCoord(r) == regPart)
      return r;
  return std::nullopt;
}

template <typename Fn> static std::vector<Coord> mapBases(const std::vector<Coord> &bases, Fn fn) {
  std::vector<Coord> out;
  out.reserve(bases.size());
  for (const Coord &basis : bases)
    out.push_back(fn(basis));
  return out;
}

/// A zero register basis only duplicates registers; dropping it keeps one
/// canonical form per distribution, so the row layouts of S (64x64) and of
/// O (64x128) compare equal.
static std::vector<Coord> withoutZeroBases(std::vector<Coord> bases) {
  bases.erase(std::remove_if(bases.begin(), bases.end(),
                             [](const Coord &c) {
                               return std::all_of(c.begin(), c.end(),
                                                  [](int64_t v) { return v == 0; });
                             }),
              bases.end());
  return bases;
}

LinearLayout LinearLayout::sliceDim(unsigned dim) const {
  assert(dim < rank_);
  auto drop = [&](const Coord &c) {
    Coord out = c;
    out.erase(out.begin() + dim);
    return out;
  };
  return LinearLayout(rank_ - 1, withoutZeroBases(mapBases(reg_, drop)), mapBases(lane_, drop),
                      mapBases(warp_, drop), mapBases(block_, drop));
}

LinearLayout LinearLayout::insertDim(unsigned dim) const {
  assert(dim <= rank_);
  auto insert = [&](const Coord &c) {
    Coord out = c;
    out.insert(out.begin() + dim, 0);
    return out;
  };
  return LinearLayout(rank_ + 1, mapBases(reg_, insert), mapBases(lane_, insert),
                      mapBases(warp_, insert), mapBases(block_, insert));
}

LinearLayout LinearLayout::zeroDim(unsigned dim) const {
  assert(dim < rank_);
  auto zero = [&](const Coord &c) {
    Coord out = c;
    out[dim] = 0;
    return out;
  };
  return LinearLayout(rank_, withoutZeroBases(mapBases(reg_, zero)), mapBases(lane_, zero),
                      mapBases(warp_, zero), mapBases(block_, zero));
}

LinearLayout LinearLayout::transposed() const {
  assert(rank_ == 2);
  auto swap = [](const Coord &c) { return Coord{c[1], c[0]}; };
  return LinearLayout(2, mapBases(reg_, swap), mapBases(lane_, swap), mapBases(warp_, swap),
                      mapBases(block_, swap));
}

std::pair<int64_t, int64_t> LinearLayout::threadAndRegisterBits(unsigned d) const {
  int64_t threadBits = 0, regBits = 0;
  for (const auto *bases : {&lane_, &warp_, &block_})
    for (const Coord &basis : *bases)
      threadBits |= basis[d];
  for (const Coord &basis : reg_)
    regBits |= basis[d];
  return {threadBits, regBits};
}

bool LinearLayout::sameThreadMapping(const LinearLayout &other) const {
  if (rank_ != other.rank_ || lane_ != other.lane_ || warp_ != other.warp_ ||
      block_ != other.block_ || reg_.size() != other.reg_.size())
    return false;
  std::vector<Coord> mine, theirs;
  for (int64_t r = 0; r < numRegs(); ++r) {
    mine.push_back(regCoord(r));
    theirs.push_back(other.regCoord(r));
  }
  std::sort(mine.begin(), mine.end());
  std::sort(theirs.begin(), theirs.end());
  return mine == theirs;
}

bool LinearLayout::operator==(const LinearLayout &other) const {
  return rank_ == other.rank_ && reg_ == other.reg_ && lane_ == other.lane_ &&
         warp_ == other.warp_ && block_ == other.block_;
}

std::string LinearLayout::drawThreadMap() const {
  std::ostringstream os;
  for (int64_t w = 0; w < numWarps(); ++w)
    for (int64_t l = 0; l < numLanes(); ++l) {
      os << "w" << w << " l" << l << ":";
      for (int64_t r = 0; r < numRegs(); ++r)
        os << " r" << r << "=" << coordStr(apply(r, l, w));
      os << "\n";
    }
  return os.str();
}

std::string LinearLayout::drawElementMap(const std::vector<int64_t> &shape) const {
  if (rank_ != 2 || shape.size() != 2)
    return "(element maps are drawn for rank-2 tiles only)\n";
  std::map<std::pair<int64_t, int64_t>, std::string> owner;
  for (int64_t w = numWarps() - 1; w >= 0; --w)
    for (int64_t l = numLanes() - 1; l >= 0; --l)
      for (int64_t r = numRegs() - 1; r >= 0; --r) {
        Coord c = apply(r, l, w);
        std::string name = "T" + std::to_string(l) + ":" + std::to_string(r);
        if (numWarps() > 1)
          name = "W" + std::to_string(w) + name;
        owner[{c[0], c[1]}] = name; // lowest (warp, lane, reg) wins
      }
  size_t width = 1;
  for (auto &entry : owner)
    width = std::max(width, entry.second.size());
  std::ostringstream os;
  for (int64_t i = 0; i < shape[0]; ++i) {
    for (int64_t j = 0; j < shape[1]; ++j) {
      auto it = owner.find({i, j});
      std::string cell = it == owner.end() ? "." : it->second;
      os << (j ? " " : "") << cell;
      if (j + 1 < shape[1])
        os << std::string(width - cell.size(), ' ');
    }
    os << "\n";
  }
  return os.str();
}

std::string LinearLayout::str() const {
  std::ostringstream os;
  auto list = [&](const char *name, const std::vector<Coord> &bases) {
    os << name << " = [";
    for (size_t i = 0; i < bases.size(); ++i) {
      os << (i ? ", " : "") << "[";
      for (size_t d = 0; d < bases[i].size(); ++d)
        os << (d ? ", " : "") << bases[i][d];
      os << "]";
    }
    os << "]";
  };
  list("reg", reg_);
  os << ", ";
  list("lane", lane_);
  os << ", ";
  list("warp", warp_);
  if (!block_.empty()) {
    os << ", ";
    list("block", block_);
  }
  return os.str();
}

//===----------------------------------------------------------------------===//
// Target-independent instances (mma fragments: Sm80Layouts.cpp)
//===----------------------------------------------------------------------===//

LinearLayout LinearLayout::coalesced(const std::vector<int64_t> &shape, int64_t numWarps,
                                     int64_t vecElems, bool warpsOnRows) {
  unsigned rank = shape.size();
  assert(rank >= 1 && log2Exact(numWarps) >= 0 && log2Exact(vecElems) >= 0);
  // Bits of the row-major element index, least significant first.
  std::vector<Coord> elementBits;
  for (int d = int(rank) - 1; d >= 0; --d) {
    int bits = log2Exact(shape[d]);
    assert(bits >= 0 && "coalesced layouts need power-of-two extents");
    for (int b = 0; b < bits; ++b) {
      Coord c(rank, 0);
      c[d] = int64_t(1) << b;
      elementBits.push_back(c);
    }
  }
  size_t next = 0;
  auto take = [&](int count, std::vector<Coord> &into) {
    for (int i = 0; i < count; ++i)
      into.push_back(next < elementBits.size() ? elementBits[next++] : Coord(rank, 0));
  };
  std::vector<Coord> reg, lane, warp;
  // A thread's vector must stay inside one row: rows of a view are strided,
  // so elements past the end of a row are not the next ones in memory.
  take(std::min(log2Exact(vecElems), log2Exact(shape.back())), reg);
  take(5, lane);
  if (warpsOnRows && rank > 1) {
    // The next bits of the leading dimensions move up to the warps' place;
    // the others keep their order (for the registers).
    auto first = elementBits.begin() + next;
    int moved = 0;
    for (auto it = first; it != elementBits.end() && moved < log2Exact(numWarps); ++it)
      if ((*it)[rank - 1] == 0)
        std::rotate(first + moved++, it, it + 1);
  }
  take(log2Exact(numWarps), warp);
  while (next < elementBits.size())
    reg.push_back(elementBits[next++]);
  return LinearLayout(rank, reg, lane, warp);
}

LinearLayout LinearLayout::coalescedKeepingAxes(const std::vector<int64_t> &shape, int64_t numWarps,
                                                int64_t vecElems, uint64_t keepAxes) {
  unsigned rank = shape.size();
  assert(rank >= 1 && log2Exact(numWarps) >= 0 && log2Exact(vecElems) >= 0);
  std::vector<Coord> elementBits;
  std::vector<unsigned> dimOf;
  for (int d = int(rank) - 1; d >= 0; --d) {
    int bits = log2Exact(shape[d]);
    assert(bits >= 0 && "coalesced layouts need power-of-two extents");
    for (int b = 0; b < bits; ++b) {
      Coord c(rank, 0);
      c[d] = int64_t(1) << b;
      elementBits.push_back(c);
      dimOf.push_back(d);
    }
  }
  std::vector<Coord> reg, lane, warp;
  size_t vecBits = std::min(log2Exact(vecElems), log2Exact(shape.back()));
  std::vector<bool> used(elementBits.size(), false);
  for (size_t i = 0; i < vecBits; ++i) {
    reg.push_back(elementBits[i]);
    used[i] = true;
  }
  // Warps: the most significant free bits of dimensions outside keepAxes,
  // taken in increasing order.
  int warpBits = log2Exact(numWarps);
  std::vector<size_t> warpIdx;
  for (size_t i = elementBits.size(); i-- > vecBits && int(warpIdx.size()) < warpBits;)
    if (!(keepAxes >> dimOf[i] & 1))
      warpIdx.push_back(i);
  std::reverse(warpIdx.begin(), warpIdx.end());
  for (size_t i : warpIdx)
    used[i] = true;
  size_t next = 0;
  auto nextFree = [&]() -> Coord {
    while (next < elementBits.size() && used[next])
      ++next;
    if (next == elementBits.size())
      return Coord(rank, 0);
    used[next] = true;
    return elementBits[next];
  };
  for (int i = 0; i < 5; ++i)
    lane.push_back(nextFree());
  for (size_t i : warpIdx)
    warp.push_back(elementBits[i]);
  while (int(warp.size()) < warpBits)
    warp.push_back(Coord(rank, 0));
  for (size_t i = 0; i < elementBits.size(); ++i)
    if (!used[i]) {
      reg.push_back(elementBits[i]);
      used[i] = true;
    }
  return LinearLayout(rank, reg, lane, warp);
}

} // namespace tilec
