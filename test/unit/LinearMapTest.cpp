//===- LinearMapTest.cpp - unit tests of LinearMap and the sm80 swizzle ---===//
//
// References are written from the formulas, not from the code under test:
// the swizzle from the address arithmetic the lowering emits
// (Addressing.cpp sharedElementAddress: chunk ^= row & mask), composition
// and inversion by brute force over every input.
//
//===----------------------------------------------------------------------===//
#include "tilec/Layout/LinearMap.h"
#include "tilec/Layout/LinearLayout.h"
#include "tilec/Layout/Sm80Layouts.h"

#include <gtest/gtest.h>

#include <set>

using tilec::LinearLayout;
using tilec::LinearMap;
namespace sm80 = tilec::sm80;

namespace {

int64_t swizzleReference(int64_t row, int64_t col, int64_t cols, int64_t elemBytes,
                         unsigned swizzleBits, int64_t chunkBytes) {
  int64_t perChunk = chunkBytes / elemBytes;
  int64_t chunk = (col / perChunk) ^ (row & ((int64_t(1) << swizzleBits) - 1));
  return row * cols + chunk * perChunk + col % perChunk;
}

TEST(LinearMap, SwizzledSharedMatchesTheLoweringsAddressFormula) {
  for (auto [rows, cols, elemBytes, bits] :
       {std::tuple{64, 64, 2, 3u}, {128, 128, 2, 3u}, {32, 32, 2, 2u}, {16, 64, 4, 3u},
        {64, 64, 2, 0u}}) {
    LinearMap map = sm80::swizzledShared(rows, cols, elemBytes, bits, 16);
    std::set<int64_t> seen;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        int64_t offset = map.apply({r, c})[0];
        ASSERT_EQ(offset, swizzleReference(r, c, cols, elemBytes, bits, 16))
            << rows << "x" << cols << " bits " << bits << " at (" << r << ", " << c << ")";
        seen.insert(offset);
      }
    EXPECT_EQ(int64_t(seen.size()), rows * cols) << "a permutation of the tile";
    EXPECT_TRUE(map.injective());
  }
}

// ldmatrix reads eight 16-byte rows of an 8x8 matrix per phase: rows r..r+7
// of one chunk column. Swizzled, they land in eight distinct 16-byte bank
// groups of the 128-byte bank window; unswizzled (a row of 128 bytes) all
// eight hit the same group: an 8-way conflict. A property of the map, which
// the composed register -> offset maps of later targets are checked by.
TEST(LinearMap, SwizzleMakesLdmatrixPhasesConflictFree) {
  for (unsigned bits : {3u, 0u}) {
    LinearMap map = sm80::swizzledShared(64, 64, 2, bits, 16);
    for (int64_t chunk = 0; chunk < 8; ++chunk) {
      std::set<int64_t> groups;
      for (int64_t r = 0; r < 8; ++r)
        groups.insert((map.apply({r, chunk * 8})[0] * 2 / 16) % 8);
      EXPECT_EQ(groups.size(), bits == 3 ? 8u : 1u) << "chunk " << chunk << " bits " << bits;
    }
  }
}

TEST(LinearMap, InvertUndoesASwizzle) {
  LinearMap map = sm80::swizzledShared(64, 128, 2, 3, 16);
  std::optional<LinearMap> inv = map.invert();
  ASSERT_TRUE(inv.has_value());
  EXPECT_EQ(inv->ins()[0].name, "offset");
  ASSERT_EQ(inv->outs().size(), 2u);
  for (int64_t r = 0; r < 64; r += 3)
    for (int64_t c = 0; c < 128; c += 5) {
      std::vector<int64_t> back = inv->apply(map.apply({r, c}));
      EXPECT_EQ(back, (std::vector<int64_t>{r, c}));
    }
  // Composition with the inverse is the identity map.
  std::optional<LinearMap> id = map.compose(*inv);
  ASSERT_TRUE(id.has_value());
  for (int64_t r = 0; r < 64; r += 7)
    for (int64_t c = 0; c < 128; c += 9)
      EXPECT_EQ(id->apply({r, c}), (std::vector<int64_t>{r, c}));
}

TEST(LinearMap, ComposeIsApplyingOneAfterTheOther) {
  // register/lane/warp -> tile coordinate -> swizzled shared offset: where a
  // thread's accumulator element would be stored.
  LinearLayout acc = sm80::mmaAccumulator(64, 64, 4);
  LinearMap toCoord = acc.toMap({64, 64});
  LinearMap toOffset = sm80::swizzledShared(64, 64, 4, 3, 16);
  std::optional<LinearMap> composed = toCoord.compose(toOffset);
  ASSERT_TRUE(composed.has_value());
  for (int64_t w = 0; w < acc.numWarps(); ++w)
    for (int64_t l = 0; l < acc.numLanes(); ++l)
      for (int64_t r = 0; r < acc.numRegs(); ++r) {
        tilec::Coord c = acc.apply(r, l, w);
        EXPECT_EQ(composed->apply({r, l, w, 0})[0], toOffset.apply({c[0], c[1]})[0]);
      }
  // Dimensions that do not line up do not compose.
  EXPECT_FALSE(toCoord.compose(sm80::swizzledShared(32, 64, 4, 3, 16)).has_value());
  EXPECT_FALSE(toOffset.compose(toOffset).has_value());
}

TEST(LinearMap, InvertingALayoutFindsTheThreadOfAnElement) {
  // The accumulator of one warp is a bijection (register, lane) -> (row, col).
  LinearLayout acc = sm80::mmaAccumulator(16, 64, 1);
  std::optional<LinearMap> owner = acc.toMap({16, 64}).invert();
  ASSERT_TRUE(owner.has_value());
  ASSERT_EQ(owner->outs().size(), 4u);
  EXPECT_EQ(owner->outs()[1].name, "lane");
  for (int64_t row = 0; row < 16; ++row)
    for (int64_t col = 0; col < 64; ++col) {
      std::vector<int64_t> who = owner->apply({row, col});
      EXPECT_EQ(acc.apply(who[0], who[1], who[2], who[3]), (tilec::Coord{row, col}));
    }
  // B operands are replicated over warps: not invertible, and said so.
  LinearLayout b = sm80::mmaOperandB(16, 8, 4);
  EXPECT_FALSE(b.toMap({16, 8}).injective());
  EXPECT_FALSE(b.toMap({16, 8}).invert().has_value());
}

TEST(LinearMap, BlockDimensionOfAClusterLayout) {
  // Two CTAs of a cluster, each holding half of the rows of a 2x(16x8) tile.
  LinearLayout one = sm80::mmaAccumulator(16, 8, 1);
  LinearLayout two(2, one.regBases(), one.laneBases(), one.warpBases(), {{16, 0}});
  EXPECT_EQ(two.numBlocks(), 2);
  EXPECT_EQ(two.apply(1, 5, 0, 1), (tilec::Coord{one.apply(1, 5, 0)[0] + 16, one.apply(1, 5, 0)[1]}));
  EXPECT_TRUE(two.checkCovers({32, 8}).empty()) << two.checkCovers({32, 8});
  EXPECT_NE(two, one);
  EXPECT_NE(two.str().find("block"), std::string::npos);
  EXPECT_EQ(two.toMap({32, 8}).inSize("block"), 2);
}

} // namespace
