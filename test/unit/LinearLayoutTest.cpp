//===- LinearLayoutTest.cpp - unit tests of the layout math ---------------===//
//
// The mma.sync fragments are checked against the PTX ISA tables ("Matrix
// fragments for mma.m16n8k16 with floating point type"), coded here from the
// table and not from the layout code, so a wrong basis in LinearLayout.cpp
// cannot also be wrong here in the same way.
//
//===----------------------------------------------------------------------===//
#include "tilec/Layout/LinearLayout.h"
#include "tilec/Layout/Sm80Layouts.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <sstream>

using tilec::Coord;
using tilec::LinearLayout;
namespace sm80 = tilec::sm80;

namespace {

//===----------------------------------------------------------------------===//
// The PTX ISA fragment tables for one warp. lane = 4g + t.
//===----------------------------------------------------------------------===//

int groupOf(int64_t lane) { return int(lane >> 2); }
int threadInGroupOf(int64_t lane) { return int(lane & 3); }

/// A (16x16, row): a0,a1: (g, 2t+{0,1}); a2,a3: (g+8, 2t+{0,1});
/// a4,a5: (g, 2t+8+{0,1}); a6,a7: (g+8, 2t+8+{0,1}).
Coord ptxA(int64_t lane, int reg) {
  static const int64_t rowOff[8] = {0, 0, 8, 8, 0, 0, 8, 8};
  static const int64_t colOff[8] = {0, 1, 0, 1, 8, 9, 8, 9};
  return {groupOf(lane) + rowOff[reg], 2 * threadInGroupOf(lane) + colOff[reg]};
}

/// B (16x8, col), as (k, n): b0,b1: (2t+{0,1}, g); b2,b3: (2t+8+{0,1}, g).
Coord ptxB(int64_t lane, int reg) {
  static const int64_t kOff[4] = {0, 1, 8, 9};
  return {2 * threadInGroupOf(lane) + kOff[reg], groupOf(lane)};
}

/// C/D (16x8, f32): c0,c1: (g, 2t+{0,1}); c2,c3: (g+8, 2t+{0,1}).
Coord ptxC(int64_t lane, int reg) {
  static const int64_t rowOff[4] = {0, 0, 8, 8};
  static const int64_t colOff[4] = {0, 1, 0, 1};
  return {groupOf(lane) + rowOff[reg], 2 * threadInGroupOf(lane) + colOff[reg]};
}

Coord plus(Coord c, int64_t row, int64_t col) {
  c[0] += row;
  c[1] += col;
  return c;
}

int log2Of(int64_t v) {
  int bits = 0;
  while ((int64_t(1) << bits) < v)
    ++bits;
  return bits;
}

/// The m16n8 accumulator pattern of one lane, as a set.
std::set<Coord> cFragment(int64_t lane, int64_t row0, int64_t col0) {
  std::set<Coord> out;
  for (int r = 0; r < 4; ++r)
    out.insert(plus(ptxC(lane, r), row0, col0));
  return out;
}

//===----------------------------------------------------------------------===//
// Single-warp fragments
//===----------------------------------------------------------------------===//

// Every register of every lane holds the element the PTX ISA says.
TEST(MmaFragments, AccumulatorM16N8MatchesPtx) {
  LinearLayout acc = sm80::mmaAccumulator(16, 8, 1);
  ASSERT_EQ(acc.numRegs(), 4);
  ASSERT_EQ(acc.numLanes(), 32);
  ASSERT_EQ(acc.numWarps(), 1);
  for (int64_t lane = 0; lane < 32; ++lane)
    for (int r = 0; r < 4; ++r)
      EXPECT_EQ(acc.apply(r, lane, 0), ptxC(lane, r)) << "lane " << lane << " c" << r;
  EXPECT_EQ(acc.checkCovers({16, 8}), "");
}

TEST(MmaFragments, OperandAM16K16MatchesPtx) {
  LinearLayout a = sm80::mmaOperandA(16, 16, 1);
  ASSERT_EQ(a.numRegs(), 8);
  for (int64_t lane = 0; lane < 32; ++lane)
    for (int r = 0; r < 8; ++r)
      EXPECT_EQ(a.apply(r, lane, 0), ptxA(lane, r)) << "lane " << lane << " a" << r;
  EXPECT_EQ(a.checkCovers({16, 16}), "");
}

TEST(MmaFragments, OperandBK16N8MatchesPtx) {
  LinearLayout b = sm80::mmaOperandB(16, 8, 1);
  ASSERT_EQ(b.numRegs(), 4);
  for (int64_t lane = 0; lane < 32; ++lane)
    for (int r = 0; r < 4; ++r)
      EXPECT_EQ(b.apply(r, lane, 0), ptxB(lane, r)) << "lane " << lane << " b" << r;
  EXPECT_EQ(b.checkCovers({16, 8}), "");
}

// A row of the accumulator lives in the 4 lanes of one group, which is what
// lets rowmax/rowsum finish with shfl.xor 1 and 2.
TEST(MmaFragments, AccumulatorRowLivesInOneQuad) {
  LinearLayout acc = sm80::mmaAccumulator(16, 64, 1);
  for (int64_t lane = 0; lane < 32; ++lane)
    for (int64_t r = 0; r < acc.numRegs(); ++r) {
      int64_t row = acc.apply(r, lane, 0)[0];
      EXPECT_EQ(row % 8, groupOf(lane)) << "lane " << lane << " reg " << r;
    }
}

//===----------------------------------------------------------------------===//
// Larger tiles and split-Q over warps
//===----------------------------------------------------------------------===//

struct AccCase {
  int64_t m, n, warps;
};

class MmaAccumulatorTiles : public ::testing::TestWithParam<AccCase> {};

// Registers follow the documented order [col+1, row+8, n8 tiles..., m16
// tiles...]; inside each 16x8 block the PTX C pattern; warp w owns rows
// [w*M/W, (w+1)*M/W) (FlashAttention-2's split-Q).
TEST_P(MmaAccumulatorTiles, MatchesPtxPerBlockAndSplitsRowsOverWarps) {
  auto [m, n, warps] = GetParam();
  LinearLayout acc = sm80::mmaAccumulator(m, n, warps);
  int64_t rowsPerWarp = m / warps;
  int64_t nTiles = n / 8, mTiles = rowsPerWarp / 16;
  ASSERT_EQ(acc.numWarps(), warps);
  ASSERT_EQ(acc.numRegs(), 4 * nTiles * mTiles);
  EXPECT_EQ(acc.checkCovers({m, n}), "");
  int nBits = log2Of(nTiles);
  for (int64_t w = 0; w < warps; ++w)
    for (int64_t lane = 0; lane < 32; ++lane)
      for (int64_t r = 0; r < acc.numRegs(); ++r) {
        int64_t nt = (r >> 2) & (nTiles - 1);
        int64_t mt = r >> (2 + nBits);
        Coord expected = plus(ptxC(lane, int(r & 3)), w * rowsPerWarp + mt * 16, nt * 8);
        Coord got = acc.apply(r, lane, w);
        EXPECT_EQ(got, expected) << "warp " << w << " lane " << lane << " reg " << r;
        EXPECT_GE(got[0], w * rowsPerWarp);
        EXPECT_LT(got[0], (w + 1) * rowsPerWarp);
      }
}

INSTANTIATE_TEST_SUITE_P(Shapes, MmaAccumulatorTiles,
                         ::testing::Values(AccCase{16, 8, 1}, AccCase{16, 64, 1},
                                           AccCase{64, 64, 4}, AccCase{128, 32, 4},
                                           AccCase{128, 128, 8}, AccCase{64, 128, 2}));

// The whole of each lane's 16x8 block pattern, independent of register order.
TEST(MmaSplitQ, EachWarpHoldsCFragmentsOfItsRowsOnly) {
  const int64_t m = 128, n = 64, warps = 4;
  LinearLayout acc = sm80::mmaAccumulator(m, n, warps);
  for (int64_t w = 0; w < warps; ++w)
    for (int64_t lane = 0; lane < 32; ++lane) {
      std::set<Coord> held, expected;
      for (int64_t r = 0; r < acc.numRegs(); ++r)
        held.insert(acc.apply(r, lane, w));
      for (int64_t row0 = w * m / warps; row0 < (w + 1) * m / warps; row0 += 16)
        for (int64_t col0 = 0; col0 < n; col0 += 8) {
          std::set<Coord> frag = cFragment(lane, row0, col0);
          expected.insert(frag.begin(), frag.end());
        }
      EXPECT_EQ(held, expected) << "warp " << w << " lane " << lane;
    }
}

// A over several k16 and m16 tiles: register order [col+1, row+8, col+8,
// k16 tiles..., m16 tiles...], rows split over warps like the accumulator.
TEST(MmaFragments, OperandAOverTilesMatchesPtx) {
  const int64_t m = 64, k = 64, warps = 2;
  LinearLayout a = sm80::mmaOperandA(m, k, warps);
  int64_t kTiles = k / 16;
  EXPECT_EQ(a.checkCovers({m, k}), "");
  for (int64_t w = 0; w < warps; ++w)
    for (int64_t lane = 0; lane < 32; ++lane)
      for (int64_t r = 0; r < a.numRegs(); ++r) {
        int64_t kt = (r >> 3) & (kTiles - 1);
        int64_t mt = r >> (3 + log2Of(kTiles));
        EXPECT_EQ(a.apply(r, lane, w),
                  plus(ptxA(lane, int(r & 7)), w * (m / warps) + mt * 16, kt * 16))
            << "warp " << w << " lane " << lane << " reg " << r;
      }
}

// B over several tiles: [k+1, k+8, n8 tiles..., k16 tiles...], and every
// warp holds all of B (split-Q reads all of K and V in every warp).
TEST(MmaFragments, OperandBOverTilesIsReplicatedOverWarps) {
  const int64_t k = 64, n = 32, warps = 4;
  LinearLayout b = sm80::mmaOperandB(k, n, warps);
  int64_t nTiles = n / 8;
  EXPECT_EQ(b.checkCovers({k, n}), "");
  ASSERT_EQ(b.numWarps(), warps);
  for (int64_t w = 0; w < warps; ++w)
    for (int64_t lane = 0; lane < 32; ++lane)
      for (int64_t r = 0; r < b.numRegs(); ++r) {
        int64_t nt = (r >> 2) & (nTiles - 1);
        int64_t kt = r >> (2 + log2Of(nTiles));
        EXPECT_EQ(b.apply(r, lane, w), plus(ptxB(lane, int(r & 3)), kt * 16, nt * 8))
            << "warp " << w << " lane " << lane << " reg " << r;
      }
}

//===----------------------------------------------------------------------===//
// Warp grids (tile.dot warps_n, FlashAttention-2's backward tiled MMAs)
//===----------------------------------------------------------------------===//

struct GridCase {
  int64_t m, n, warps, warpsN;
};

class MmaWarpGrid : public ::testing::TestWithParam<GridCase> {};

// Warp w owns the (M/wm) x (N/wn) block (w % wm, w / wm), wm = warps / wn,
// and inside it the split-Q register order of its own block, each element
// in the PTX C pattern; every element of the MxN tile has exactly one owner.
TEST_P(MmaWarpGrid, AccumulatorBlocksFollowTheGrid) {
  auto [m, n, warps, warpsN] = GetParam();
  int64_t warpsM = warps / warpsN, rows = m / warpsM, cols = n / warpsN;
  LinearLayout acc = sm80::mmaAccumulator(m, n, warps, warpsN);
  int64_t nTiles = cols / 8, mTiles = rows / 16;
  ASSERT_EQ(acc.numWarps(), warps);
  ASSERT_EQ(acc.numRegs(), 4 * nTiles * mTiles);
  EXPECT_EQ(acc.checkCovers({m, n}), "");
  int nBits = log2Of(nTiles);
  std::map<Coord, int> owners;
  for (int64_t w = 0; w < warps; ++w)
    for (int64_t lane = 0; lane < 32; ++lane)
      for (int64_t r = 0; r < acc.numRegs(); ++r) {
        int64_t nt = (r >> 2) & (nTiles - 1), mt = r >> (2 + nBits);
        Coord expected = plus(ptxC(lane, int(r & 3)), (w % warpsM) * rows + mt * 16,
                              (w / warpsM) * cols + nt * 8);
        Coord got = acc.apply(r, lane, w);
        EXPECT_EQ(got, expected) << "warp " << w << " lane " << lane << " reg " << r;
        ++owners[got];
      }
  EXPECT_EQ(int64_t(owners.size()), m * n);
  for (const auto &[coord, count] : owners)
    EXPECT_EQ(count, 1) << "(" << coord[0] << ", " << coord[1] << ")";
}

// The A operand of a grid: the warps of one row group (same w % wm) hold
// the same rows, all of K, in the split-Q A order of their row block.
TEST_P(MmaWarpGrid, OperandAIsReplicatedAlongTheGridColumns) {
  auto [m, k, warps, warpsN] = GetParam();
  int64_t warpsM = warps / warpsN, rows = m / warpsM;
  if (k % 16 != 0)
    GTEST_SKIP();
  LinearLayout a = sm80::mmaOperandA(m, k, warps, warpsN);
  int64_t kTiles = k / 16;
  EXPECT_EQ(a.checkCovers({m, k}), "");
  ASSERT_EQ(a.numWarps(), warps);
  for (int64_t w = 0; w < warps; ++w)
    for (int64_t lane = 0; lane < 32; ++lane)
      for (int64_t r = 0; r < a.numRegs(); ++r) {
        int64_t kt = (r >> 3) & (kTiles - 1), mt = r >> (3 + log2Of(kTiles));
        EXPECT_EQ(a.apply(r, lane, w),
                  plus(ptxA(lane, int(r & 7)), (w % warpsM) * rows + mt * 16, kt * 16))
            << "warp " << w << " lane " << lane << " reg " << r;
      }
}

INSTANTIATE_TEST_SUITE_P(Shapes, MmaWarpGrid,
                         ::testing::Values(GridCase{64, 64, 4, 2}, GridCase{64, 128, 4, 2},
                                           GridCase{128, 64, 8, 2}, GridCase{128, 128, 8, 4},
                                           GridCase{64, 32, 4, 4}, GridCase{32, 64, 2, 2},
                                           GridCase{64, 64, 4, 1}));

// warps_n = 1 is split-Q exactly (the forward's layouts do not change).
TEST(MmaWarpGrid, OneColumnIsSplitQ) {
  EXPECT_EQ(sm80::mmaAccumulator(128, 64, 4, 1), sm80::mmaAccumulator(128, 64, 4));
  EXPECT_EQ(sm80::mmaOperandA(128, 64, 4, 1), sm80::mmaOperandA(128, 64, 4));
  EXPECT_NE(sm80::mmaAccumulator(64, 64, 4, 2), sm80::mmaAccumulator(64, 64, 4));
}

//===----------------------------------------------------------------------===//
// FlashAttention-2 register reuse: S's accumulator is P's A operand.
//===----------------------------------------------------------------------===//

// In the PTX tables themselves: the C fragments of the n8 tiles 2j and 2j+1
// are, register for register, the A fragment of k16 tile j.
TEST(FA2RegisterReuse, PtxTablesAgree) {
  for (int64_t lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 8; ++i)
      EXPECT_EQ(ptxA(lane, i), plus(ptxC(lane, i & 3), 0, 8 * (i >> 2)))
          << "lane " << lane << " a" << i;
}

// In the layouts: the accumulator of S (MxN) and the A operand of P (the same
// MxN tile read as MxK) are the same map, so converting S's registers to
// f16 pairs is all that feeds the second mma.
TEST(FA2RegisterReuse, AccumulatorOfSIsOperandAOfP) {
  for (AccCase c :
       {AccCase{16, 16, 1}, AccCase{64, 64, 4}, AccCase{128, 128, 4}, AccCase{128, 64, 8}}) {
    LinearLayout s = sm80::mmaAccumulator(c.m, c.n, c.warps);
    LinearLayout p = sm80::mmaOperandA(c.m, c.n, c.warps);
    EXPECT_EQ(s, p) << c.m << "x" << c.n << " over " << c.warps << " warps";
    EXPECT_TRUE(s.sameThreadMapping(p));
  }
}

//===----------------------------------------------------------------------===//
// checkCovers
//===----------------------------------------------------------------------===//

TEST(CheckCovers, GoodLayouts) {
  EXPECT_EQ(sm80::mmaAccumulator(64, 64, 4).checkCovers({64, 64}), "");
  EXPECT_EQ(sm80::mmaOperandB(64, 128, 4).checkCovers({64, 128}), "");
  EXPECT_EQ(LinearLayout::coalesced({64, 128}, 4, 8).checkCovers({64, 128}), "");
  // Replication (zero bases) is allowed: a row slice is held by 4 lanes.
  EXPECT_EQ(sm80::mmaAccumulator(64, 64, 4).sliceDim(1).checkCovers({64}), "");
}

TEST(CheckCovers, RankMismatch) {
  EXPECT_EQ(sm80::mmaAccumulator(16, 8, 1).checkCovers({16}),
            "layout has rank 2 but the tile has rank 1");
}

TEST(CheckCovers, CoordinateOutsideTheTile) {
  // Warp 2 starts at row 32 (its basis [32, 0]).
  EXPECT_EQ(sm80::mmaAccumulator(64, 64, 4).checkCovers({32, 64}),
            "register 0 of lane 0 in warp 2 maps to coordinate 32 in dimension 0, "
            "outside the tile's extent 32");
  // Register 4 is the second n8 tile (basis [0, 8]).
  EXPECT_EQ(sm80::mmaAccumulator(16, 16, 1).checkCovers({16, 8}),
            "register 4 of lane 0 in warp 0 maps to coordinate 8 in dimension 1, "
            "outside the tile's extent 8");
  // In B, lane 16 is group 4: column n = 4 (basis [0, 4]).
  EXPECT_EQ(sm80::mmaOperandB(16, 8, 1).checkCovers({16, 4}),
            "register 0 of lane 16 in warp 0 maps to coordinate 4 in dimension 1, "
            "outside the tile's extent 4");
}

TEST(CheckCovers, ElementOwnedByNoThread) {
  // Rows 64.. of a 128-row tile have no owner.
  EXPECT_EQ(sm80::mmaAccumulator(64, 64, 4).checkCovers({128, 64}),
            "element (64,0) (row-major index 4096) is owned by no thread");
  // Two equal register bases leave column 1 of every pair unowned.
  LinearLayout dup(2, {{8, 0}, {8, 0}}, {{0, 2}, {0, 4}, {1, 0}, {2, 0}, {4, 0}}, {});
  EXPECT_EQ(dup.checkCovers({16, 8}), "element (0,1) (row-major index 1) is owned by no thread");
}

TEST(CheckCovers, NonPowerOfTwoExtent) {
  EXPECT_EQ(sm80::mmaAccumulator(64, 64, 4).checkCovers({48, 64}),
            "the tile's extent 48 in dimension 0 is not a power of two; a linear layout "
            "covers only power-of-two extents");
}

/// checkCovers by brute force: walk every (warp, lane, register) and mark
/// the tile. The fast version must agree on every layout.
std::string bruteForceCovers(const LinearLayout &l, const std::vector<int64_t> &shape) {
  int64_t numElements = 1;
  for (int64_t e : shape)
    numElements *= e;
  std::vector<bool> hit(numElements, false);
  for (int64_t w = 0; w < l.numWarps(); ++w)
    for (int64_t lane = 0; lane < l.numLanes(); ++lane)
      for (int64_t r = 0; r < l.numRegs(); ++r) {
        Coord c = l.apply(r, lane, w);
        int64_t linear = 0;
        for (size_t d = 0; d < shape.size(); ++d) {
          if (c[d] < 0 || c[d] >= shape[d]) {
            std::ostringstream os;
            os << "register " << r << " of lane " << lane << " in warp " << w
               << " maps to coordinate " << c[d] << " in dimension " << d
               << ", outside the tile's extent " << shape[d];
            return os.str();
          }
          linear = linear * shape[d] + c[d];
        }
        hit[linear] = true;
      }
  auto missing = std::find(hit.begin(), hit.end(), false);
  if (missing == hit.end())
    return "";
  return "missing " + std::to_string(missing - hit.begin());
}

// Random layouts of random power-of-two tiles: the fast check says exactly
// what the walk over all threads says (the same out-of-range message, the
// same first unowned element).
TEST(CheckCovers, AgreesWithBruteForce) {
  std::mt19937 rng(20240607);
  int covered = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    unsigned rank = 1 + rng() % 2;
    std::vector<int64_t> shape(rank);
    for (int64_t &e : shape)
      e = int64_t(1) << (rng() % 5);
    // Bases are mostly single in-range bits, so that many layouts cover.
    auto basis = [&]() {
      Coord c(rank, 0);
      unsigned d = rng() % rank;
      int64_t extent = shape[d] * ((rng() % 8) == 0 ? 2 : 1);
      if (rng() % 6 != 0)
        c[d] = int64_t(1) << (rng() % (log2Of(extent) + 1)) & (extent - 1);
      if (rng() % 5 == 0)
        c[rng() % rank] ^= rng() % shape[d];
      return c;
    };
    std::vector<Coord> reg(rng() % 6), lane(5), warp(rng() % 3);
    for (auto *bases : {&reg, &lane, &warp})
      for (Coord &c : *bases)
        c = basis();
    LinearLayout l(rank, reg, lane, warp);
    std::string fast = l.checkCovers(shape), slow = bruteForceCovers(l, shape);
    if (slow.rfind("missing ", 0) == 0) {
      EXPECT_NE(fast.find("(row-major index " + slow.substr(8) + ")"), std::string::npos)
          << l.str() << " on " << shape[0] << ": " << fast << " vs " << slow;
    } else {
      EXPECT_EQ(fast, slow) << l.str();
    }
    covered += slow.empty();
  }
  // The generator must exercise both outcomes.
  EXPECT_GT(covered, 100);
  EXPECT_LT(covered, 2900);
}

// No bitmap of the tile, no walk over 2^40 registers: huge types verify fast.
TEST(CheckCovers, HugeTilesAreCheap) {
  std::vector<Coord> reg;
  for (int b = 3; b < 40; ++b)
    reg.push_back({int64_t(1) << b});
  LinearLayout l(1, reg, {{1}, {2}, {4}, {0}, {0}}, {});
  EXPECT_EQ(l.checkCovers({int64_t(1) << 40}), "");
  EXPECT_EQ(l.checkCovers({int64_t(1) << 41}),
            "element (1099511627776) (row-major index 1099511627776) is owned by no thread");
}

//===----------------------------------------------------------------------===//
// Shape plumbing: slice, insert, zero, transpose
//===----------------------------------------------------------------------===//

/// The elements one thread holds, over all its registers.
std::set<Coord> heldBy(const LinearLayout &l, int64_t lane, int64_t warp) {
  std::set<Coord> out;
  for (int64_t r = 0; r < l.numRegs(); ++r)
    out.insert(l.apply(r, lane, warp));
  return out;
}

// The row max of S: sliceDim(1) of the accumulator. Each thread holds the
// rows it held before; the 4 lanes of a quad become replicas of the same
// rows, and the registers that only walked columns are gone (rows g, g+8).
TEST(ShapePlumbing, SliceDimIsTheRowReductionLayout) {
  LinearLayout acc = sm80::mmaAccumulator(64, 64, 4);
  LinearLayout rows = acc.sliceDim(1);
  ASSERT_EQ(rows.rank(), 1u);
  EXPECT_EQ(rows.checkCovers({64}), "");
  EXPECT_EQ(rows.regBases(), (std::vector<Coord>{{8}}));
  for (int64_t w = 0; w < 4; ++w)
    for (int64_t lane = 0; lane < 32; ++lane) {
      std::set<Coord> expected;
      for (const Coord &c : heldBy(acc, lane, w))
        expected.insert({c[0]});
      EXPECT_EQ(heldBy(rows, lane, w), expected) << "warp " << w << " lane " << lane;
      // t = lane & 3 no longer moves the coordinate.
      EXPECT_EQ(rows.threadCoord(lane, w), rows.threadCoord(lane & ~3, w));
    }
  EXPECT_EQ(acc.sliceDim(0).checkCovers({64}), "");
}

TEST(ShapePlumbing, InsertDimAddsAUnitDimension) {
  LinearLayout rows = sm80::mmaAccumulator(64, 64, 4).sliceDim(1);
  LinearLayout col = rows.insertDim(1);
  ASSERT_EQ(col.rank(), 2u);
  EXPECT_EQ(col.checkCovers({64, 1}), "");
  EXPECT_EQ(col.apply(3, 17, 2), (Coord{rows.apply(3, 17, 2)[0], 0}));
  LinearLayout row = rows.insertDim(0);
  EXPECT_EQ(row.checkCovers({1, 64}), "");
  EXPECT_EQ(row.sliceDim(0), rows);
}

// Broadcasting a 64x1 column into S's layout: the source layout is S's with
// the column component zeroed, which is expand_dims of the row slice; every
// thread holds the rows (of column 0) that it holds in S.
TEST(ShapePlumbing, ZeroDimIsTheBroadcastSource) {
  LinearLayout acc = sm80::mmaAccumulator(64, 64, 4);
  LinearLayout source = acc.zeroDim(1);
  EXPECT_EQ(source, acc.sliceDim(1).insertDim(1));
  EXPECT_EQ(source.checkCovers({64, 1}), "");
  for (int64_t w = 0; w < 4; ++w)
    for (int64_t lane = 0; lane < 32; ++lane) {
      std::set<Coord> expected;
      for (const Coord &c : heldBy(acc, lane, w))
        expected.insert({c[0], 0});
      EXPECT_EQ(heldBy(source, lane, w), expected) << "warp " << w << " lane " << lane;
    }
}

// Rows of S (64x64) and of O (64x128) are distributed alike, and the
// canonical form (no zero register bases) makes them compare equal: the
// rescale of O by exp(m - m') needs no layout conversion.
TEST(ShapePlumbing, RowLayoutsOfSAndOAreEqual) {
  LinearLayout s = sm80::mmaAccumulator(64, 64, 4);
  LinearLayout o = sm80::mmaAccumulator(64, 128, 4);
  EXPECT_EQ(s.sliceDim(1), o.sliceDim(1));
  EXPECT_EQ(s.zeroDim(1), o.zeroDim(1));
}

TEST(ShapePlumbing, TransposedSwapsCoordinates) {
  LinearLayout b = sm80::mmaOperandB(32, 16, 2);
  LinearLayout bt = b.transposed();
  EXPECT_EQ(bt.checkCovers({16, 32}), "");
  for (int64_t w = 0; w < 2; ++w)
    for (int64_t lane = 0; lane < 32; ++lane)
      for (int64_t r = 0; r < b.numRegs(); ++r) {
        Coord c = b.apply(r, lane, w);
        EXPECT_EQ(bt.apply(r, lane, w), (Coord{c[1], c[0]}));
      }
  EXPECT_EQ(bt.transposed(), b);
}

//===----------------------------------------------------------------------===//
// Registers
//===----------------------------------------------------------------------===//

TEST(Registers, RegHoldingFindsTheRegister) {
  LinearLayout acc = sm80::mmaAccumulator(16, 16, 1);
  EXPECT_EQ(acc.regHolding({0, 0}), 0);
  EXPECT_EQ(acc.regHolding({0, 1}), 1); // c1
  EXPECT_EQ(acc.regHolding({8, 0}), 2); // c2
  EXPECT_EQ(acc.regHolding({8, 1}), 3); // c3
  EXPECT_EQ(acc.regHolding({0, 8}), 4); // c0 of the second n8 tile
  EXPECT_EQ(acc.regHolding({8, 9}), 7);
  // Column 2 belongs to the next lane, not to a register.
  EXPECT_EQ(acc.regHolding({0, 2}), std::nullopt);
  for (int64_t r = 0; r < acc.numRegs(); ++r)
    EXPECT_EQ(acc.regHolding(acc.regCoord(r)), r);
}

TEST(Registers, RegHoldingPicksTheFirstReplica) {
  // Zero register bases replicate: registers 0/1 and 2/3 hold the same rows.
  LinearLayout rows(1, {{0}, {8}, {0}}, {{0}, {0}, {1}, {2}, {4}}, {});
  EXPECT_EQ(rows.regHolding({0}), 0);
  EXPECT_EQ(rows.regHolding({8}), 2);
  EXPECT_EQ(rows.regHolding({1}), std::nullopt);
}

TEST(Registers, SameThreadMappingIgnoresRegisterOrderOnly) {
  LinearLayout acc = sm80::mmaAccumulator(16, 16, 1);
  std::vector<Coord> lanes = acc.laneBases();
  LinearLayout reordered(2, {{8, 0}, {0, 8}, {0, 1}}, lanes, {});
  EXPECT_NE(acc, reordered);
  EXPECT_TRUE(acc.sameThreadMapping(reordered));
  EXPECT_TRUE(reordered.sameThreadMapping(acc));
  EXPECT_TRUE(acc.sameThreadMapping(acc));
  // Same registers, different lanes: elements move between threads.
  LinearLayout otherLanes(2, acc.regBases(), {{1, 0}, {2, 0}, {4, 0}, {0, 2}, {0, 4}}, {});
  EXPECT_FALSE(acc.sameThreadMapping(otherLanes));
  // Different register span: a thread holds other elements.
  LinearLayout otherRegs(2, {{0, 1}, {8, 0}, {0, 16}}, lanes, {});
  EXPECT_FALSE(acc.sameThreadMapping(otherRegs));
  // Different register count.
  EXPECT_FALSE(acc.sameThreadMapping(sm80::mmaAccumulator(16, 8, 1)));
  // Different warps.
  EXPECT_FALSE(sm80::mmaAccumulator(64, 16, 4).sameThreadMapping(
      sm80::mmaAccumulator(64, 16, 2)));
  // The B operand is not the accumulator of the same shape.
  EXPECT_FALSE(sm80::mmaOperandB(16, 16, 1).sameThreadMapping(acc));
}

//===----------------------------------------------------------------------===//
// Coalesced global access
//===----------------------------------------------------------------------===//

// f16, 8 elements per thread: each thread's vector is 16 contiguous bytes
// of one row; lanes walk a row before moving to the next; warps then stack
// rows; registers repeat the block.
TEST(Coalesced, F16Vec8RowMajor) {
  const int64_t rows = 64, cols = 64, warps = 4, vec = 8;
  LinearLayout l = LinearLayout::coalesced({rows, cols}, warps, vec);
  EXPECT_EQ(l.checkCovers({rows, cols}), "");
  ASSERT_EQ(l.numWarps(), warps);
  const int64_t bytesPerElement = 2;
  EXPECT_EQ(vec * bytesPerElement, 16);
  for (int64_t r = 0; r < vec; ++r)
    EXPECT_EQ(l.regCoord(r), (Coord{0, r}));
  const int64_t lanesPerRow = cols / vec;
  for (int64_t w = 0; w < warps; ++w)
    for (int64_t lane = 0; lane < 32; ++lane) {
      Coord start = l.threadCoord(lane, w);
      EXPECT_EQ(start,
                (Coord{w * (32 / lanesPerRow) + lane / lanesPerRow, (lane % lanesPerRow) * vec}))
          << "warp " << w << " lane " << lane;
      for (int64_t r = 0; r < vec; ++r)
        EXPECT_EQ(l.apply(r, lane, w), (Coord{start[0], start[1] + r}));
    }
  // The rest of the tile is the same block, further down.
  EXPECT_EQ(l.regCoord(vec), (Coord{32 / lanesPerRow * warps, 0}));
}

// Consecutive lanes touch consecutive 16-byte chunks: one warp's access to a
// 128-wide f16 row is 256 contiguous bytes.
TEST(Coalesced, LanesWalkTheRowFirst) {
  LinearLayout l = LinearLayout::coalesced({64, 128}, 4, 8);
  for (int64_t lane = 0; lane < 16; ++lane)
    EXPECT_EQ(l.threadCoord(lane, 0), (Coord{0, lane * 8}));
  EXPECT_EQ(l.threadCoord(16, 0), (Coord{1, 0}));
}

// A tile summed along its leading axis (the fused decode merge's (splits,
// features) partials): no warp basis moves along that axis, so the sum stays
// inside each warp; the warps take the row's top bits, the lanes the low
// bits left (a warp reads whole 128-byte lines of f32), registers the rest.
TEST(CoalescedKeepingAxes, WarpsLeaveTheSummedAxis) {
  LinearLayout l = LinearLayout::coalescedKeepingAxes({32, 128}, 4, 4, /*keepAxes=*/1);
  EXPECT_EQ(l.checkCovers({32, 128}), "");
  EXPECT_EQ(l.warpBases(), (std::vector<Coord>{{0, 32}, {0, 64}}));
  EXPECT_EQ(l.laneBases(), (std::vector<Coord>{{0, 4}, {0, 8}, {0, 16}, {1, 0}, {2, 0}}));
  EXPECT_EQ(l.regBases(), (std::vector<Coord>{{0, 1}, {0, 2}, {4, 0}, {8, 0}, {16, 0}}));
}

// Rows too narrow to give every warp bits of their own: the warps hold
// copies (zero bases) rather than split the summed axis.
TEST(CoalescedKeepingAxes, NarrowRowsReplicateOverWarps) {
  LinearLayout l = LinearLayout::coalescedKeepingAxes({64, 4}, 4, 4, /*keepAxes=*/1);
  EXPECT_EQ(l.checkCovers({64, 4}), "");
  EXPECT_EQ(l.warpBases(), (std::vector<Coord>{{0, 0}, {0, 0}}));
  for (const Coord &basis : l.laneBases())
    EXPECT_EQ(basis[1], 0);
}

// A row shorter than the vector: the vector shrinks to the row, because the
// next row is not the next address in a strided view.
TEST(Coalesced, VectorNeverSpansTwoRows) {
  LinearLayout l = LinearLayout::coalesced({64, 4}, 1, 8);
  EXPECT_EQ(l.checkCovers({64, 4}), "");
  EXPECT_EQ(l.regCoord(1), (Coord{0, 1}));
  EXPECT_EQ(l.regCoord(2), (Coord{0, 2}));
  EXPECT_EQ(l.regCoord(3), (Coord{0, 3}));
  for (int64_t lane = 0; lane < 32; ++lane)
    EXPECT_EQ(l.threadCoord(lane, 0), (Coord{lane, 0}));
}

// A tile smaller than the block: extra lanes and warps replicate.
TEST(Coalesced, SmallTileReplicates) {
  LinearLayout l = LinearLayout::coalesced({8, 8}, 4, 8);
  EXPECT_EQ(l.checkCovers({8, 8}), "");
  EXPECT_EQ(l.threadCoord(8, 0), l.threadCoord(0, 0));
  EXPECT_EQ(l.threadCoord(0, 3), l.threadCoord(0, 0));
}

// warpsOnRows: a 16x1024 f32 tile over 4 warps keeps each row in one warp
// (rows 1, 2 to the warps, columns past the lanes' 128 to registers), where
// the plain layout gives columns 256 and 512 to the warps.
TEST(Coalesced, WarpsOnRows) {
  LinearLayout plain = LinearLayout::coalesced({16, 1024}, 4, 4);
  EXPECT_EQ(plain.warpBases(), (std::vector<Coord>{{0, 128}, {0, 256}}));
  LinearLayout l = LinearLayout::coalesced({16, 1024}, 4, 4, /*warpsOnRows=*/true);
  EXPECT_EQ(l.checkCovers({16, 1024}), "");
  EXPECT_EQ(l.warpBases(), (std::vector<Coord>{{1, 0}, {2, 0}}));
  EXPECT_EQ(l.laneBases(), plain.laneBases());
  EXPECT_EQ(l.regCoord(4), (Coord{0, 128}));
  // Rows run out: the remaining warp bit takes a column bit.
  LinearLayout flat = LinearLayout::coalesced({2, 1024}, 4, 4, /*warpsOnRows=*/true);
  EXPECT_EQ(flat.checkCovers({2, 1024}), "");
  EXPECT_EQ(flat.warpBases(), (std::vector<Coord>{{1, 0}, {0, 128}}));
  // Short rows: lanes already cover them; nothing changes.
  EXPECT_EQ(LinearLayout::coalesced({64, 16}, 4, 4, true).warpBases(),
            LinearLayout::coalesced({64, 16}, 4, 4).warpBases());
}

TEST(Coalesced, Rank1And3) {
  EXPECT_EQ(LinearLayout::coalesced({1024}, 4, 4).checkCovers({1024}), "");
  LinearLayout l3 = LinearLayout::coalesced({2, 16, 32}, 2, 4);
  EXPECT_EQ(l3.checkCovers({2, 16, 32}), "");
  EXPECT_EQ(l3.regCoord(3), (Coord{0, 0, 3}));
  EXPECT_EQ(l3.threadCoord(8, 0), (Coord{0, 1, 0}));
}

//===----------------------------------------------------------------------===//
// Printing
//===----------------------------------------------------------------------===//

TEST(Printing, StrIsTheAttributeBody) {
  EXPECT_EQ(sm80::mmaAccumulator(16, 8, 1).str(),
            "reg = [[0, 1], [8, 0]], lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = []");
}

TEST(Printing, ThreadMapLinePerThread) {
  std::string map = sm80::mmaAccumulator(16, 8, 1).drawThreadMap();
  EXPECT_EQ(map.substr(0, map.find('\n')), "w0 l0: r0=(0,0) r1=(0,1) r2=(8,0) r3=(8,1)");
  EXPECT_NE(map.find("w0 l5: r0=(1,2) r1=(1,3) r2=(9,2) r3=(9,3)\n"), std::string::npos);
  EXPECT_EQ(std::count(map.begin(), map.end(), '\n'), 32);
}

TEST(Printing, ElementMapOfTheAccumulator) {
  std::string map = sm80::mmaAccumulator(16, 8, 1).drawElementMap({16, 8});
  std::istringstream lines(map);
  std::string row0, row8;
  std::getline(lines, row0);
  for (int i = 0; i < 8; ++i)
    std::getline(lines, row8);
  auto cells = [](const std::string &line) {
    std::istringstream in(line);
    std::vector<std::string> out;
    for (std::string cell; in >> cell;)
      out.push_back(cell);
    return out;
  };
  EXPECT_EQ(cells(row0), (std::vector<std::string>{"T0:0", "T0:1", "T1:0", "T1:1", "T2:0", "T2:1",
                                                   "T3:0", "T3:1"}));
  EXPECT_EQ(cells(row8), (std::vector<std::string>{"T0:2", "T0:3", "T1:2", "T1:3", "T2:2", "T2:3",
                                                   "T3:2", "T3:3"}));
  EXPECT_EQ(LinearLayout::coalesced({4}, 1, 1).drawElementMap({4}),
            "(element maps are drawn for rank-2 tiles only)\n");
}

TEST(Log2Exact, PowersOfTwoOnly) {
  EXPECT_EQ(tilec::log2Exact(1), 0);
  EXPECT_EQ(tilec::log2Exact(64), 6);
  EXPECT_EQ(tilec::log2Exact(int64_t(1) << 40), 40);
  EXPECT_EQ(tilec::log2Exact(48), -1);
  EXPECT_EQ(tilec::log2Exact(0), -1);
  EXPECT_EQ(tilec::log2Exact(-4), -1);
}

} // namespace
