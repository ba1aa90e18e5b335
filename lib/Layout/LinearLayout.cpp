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
                           std::vector<Coord> warp)
    : rank_(rank), reg_(std::move(reg)), lane_(std::move(lane)), warp_(std::move(warp)) {
#ifndef NDEBUG
  for (const auto *bases : {&reg_, &lane_, &warp_})
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

Coord LinearLayout::apply(int64_t reg, int64_t lane, int64_t warp) const {
  Coord out(rank_, 0);
  xorBasesInto(out, reg_, reg);
  xorBasesInto(out, lane_, lane);
  xorBasesInto(out, warp_, warp);
  return out;
}

std::string LinearLayout::checkCovers(const std::vector<int64_t> &shape) const {
  if (shape.size() != rank_)
    return "layout has rank " + std::to_string(rank_) + " but the tile has rank " +
           std::to_string(shape.size());
  int64_t numElements = 1;
  for (int64_t extent : shape)
    numElements *= extent;
  std::vector<bool> hit(numElements, false);
  for (int64_t w = 0; w < numWarps(); ++w)
    for (int64_t l = 0; l < numLanes(); ++l)
      for (int64_t r = 0; r < numRegs(); ++r) {
        Coord c = apply(r, l, w);
        int64_t linear = 0;
        for (unsigned d = 0; d < rank_; ++d) {
          if (c[d] < 0 || c[d] >= shape[d]) {
            std::ostringstream os;
            os << "register " << r << " of lane " << l << " in warp " << w
               << " maps to coordinate " << c[d] << " in dimension " << d
               << ", outside the tile's extent " << shape[d];
            return os.str();
          }
          linear = linear * shape[d] + c[d];
        }
        hit[linear] = true;
      }
  auto missing = std::find(hit.begin(), hit.end(), false);
  if (missing != hit.end())
    return "element " + std::to_string(missing - hit.begin()) +
           " (row-major) is owned by no thread";
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

LinearLayout LinearLayout::sliceDim(unsigned dim) const {
  assert(dim < rank_);
  auto drop = [&](const Coord &c) {
    Coord out = c;
    out.erase(out.begin() + dim);
    return out;
  };
  return LinearLayout(rank_ - 1, mapBases(reg_, drop), mapBases(lane_, drop), mapBases(warp_, drop));
}

LinearLayout LinearLayout::insertDim(unsigned dim) const {
  assert(dim <= rank_);
  auto insert = [&](const Coord &c) {
    Coord out = c;
    out.insert(out.begin() + dim, 0);
    return out;
  };
  return LinearLayout(rank_ + 1, mapBases(reg_, insert), mapBases(lane_, insert),
                      mapBases(warp_, insert));
}

LinearLayout LinearLayout::zeroDim(unsigned dim) const {
  assert(dim < rank_);
  auto zero = [&](const Coord &c) {
    Coord out = c;
    out[dim] = 0;
    return out;
  };
  return LinearLayout(rank_, mapBases(reg_, zero), mapBases(lane_, zero), mapBases(warp_, zero));
}

LinearLayout LinearLayout::transposed() const {
  assert(rank_ == 2);
  auto swap = [](const Coord &c) { return Coord{c[1], c[0]}; };
  return LinearLayout(2, mapBases(reg_, swap), mapBases(lane_, swap), mapBases(warp_, swap));
}

bool LinearLayout::sameThreadMapping(const LinearLayout &other) const {
  if (rank_ != other.rank_ || lane_ != other.lane_ || warp_ != other.warp_ ||
      reg_.size() != other.reg_.size())
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
         warp_ == other.warp_;
}

static std::string coordStr(const Coord &c) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < c.size(); ++i)
    os << (i ? "," : "") << c[i];
  os << ")";
  return os.str();
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
      os << (j ? " " : "") << cell << std::string(width - cell.size(), ' ');
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
  return os.str();
}

//===----------------------------------------------------------------------===//
// Instances
//===----------------------------------------------------------------------===//

// Lanes of an mma.sync fragment: lane = 4*g + t; t = lane & 3 moves along the
// contiguous (k or column) direction in pairs, g = lane >> 2 along rows.
static std::vector<Coord> mmaLaneBases(bool tAlongDim1) {
  auto along = [&](bool dim1, int64_t step) {
    return dim1 ? Coord{0, step} : Coord{step, 0};
  };
  return {along(tAlongDim1, 2), along(tAlongDim1, 4), along(!tAlongDim1, 1),
          along(!tAlongDim1, 2), along(!tAlongDim1, 4)};
}

LinearLayout LinearLayout::mmaAccumulator(int64_t m, int64_t n, int64_t numWarps) {
  int warpBits = log2Exact(numWarps);
  assert(warpBits >= 0 && m % (16 * numWarps) == 0 && n % 8 == 0);
  int64_t rowsPerWarp = m / numWarps;
  std::vector<Coord> reg = {{0, 1}, {8, 0}};
  for (int64_t col = 8; col < n; col *= 2)
    reg.push_back({0, col});
  for (int64_t row = 16; row < rowsPerWarp; row *= 2)
    reg.push_back({row, 0});
  std::vector<Coord> warp;
  for (int i = 0; i < warpBits; ++i)
    warp.push_back({rowsPerWarp << i, 0});
  return LinearLayout(2, reg, mmaLaneBases(/*tAlongDim1=*/true), warp);
}

LinearLayout LinearLayout::mmaOperandA(int64_t m, int64_t k, int64_t numWarps) {
  assert(k % 16 == 0);
  // a0,a1: (g, 2t+{0,1}); a2,a3: row+8; a4..a7: col+8 — the accumulator's
  // bit order exactly, continued over k16 and m16 tiles.
  return mmaAccumulator(m, k, numWarps);
}

LinearLayout LinearLayout::mmaOperandB(int64_t k, int64_t n, int64_t numWarps) {
  int warpBits = log2Exact(numWarps);
  assert(warpBits >= 0 && k % 16 == 0 && n % 8 == 0);
  // b0,b1: (k = 2t+{0,1}, n = g); b2,b3: k+8.
  std::vector<Coord> reg = {{1, 0}, {8, 0}};
  for (int64_t col = 8; col < n; col *= 2)
    reg.push_back({0, col});
  for (int64_t row = 16; row < k; row *= 2)
    reg.push_back({row, 0});
  std::vector<Coord> warp(warpBits, Coord{0, 0});
  return LinearLayout(2, reg, mmaLaneBases(/*tAlongDim1=*/false), warp);
}

LinearLayout LinearLayout::coalesced(const std::vector<int64_t> &shape, int64_t numWarps,
                                     int64_t vecElems) {
  unsigned rank = shape.size();
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
  take(std::min<int>(log2Exact(vecElems), elementBits.size()), reg);
  take(5, lane);
  take(log2Exact(numWarps), warp);
  while (next < elementBits.size())
    reg.push_back(elementBits[next++]);
  return LinearLayout(rank, reg, lane, warp);
}

} // namespace tilec
