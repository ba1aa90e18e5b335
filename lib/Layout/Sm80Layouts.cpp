//===- Sm80Layouts.cpp - the sm80 instances of LinearLayout / LinearMap --===//
#include "tilec/Layout/Sm80Layouts.h"

#include <cassert>

namespace tilec::sm80 {

// Lanes of an mma.sync fragment: lane = 4*g + t; t = lane & 3 moves along the
// contiguous (k or column) direction in pairs, g = lane >> 2 along rows.
static std::vector<Coord> mmaLaneBases(bool tAlongDim1) {
  auto along = [&](bool dim1, int64_t step) {
    return dim1 ? Coord{0, step} : Coord{step, 0};
  };
  return {along(tAlongDim1, 2), along(tAlongDim1, 4), along(!tAlongDim1, 1),
          along(!tAlongDim1, 2), along(!tAlongDim1, 4)};
}

LinearLayout mmaAccumulator(int64_t m, int64_t n, int64_t numWarps, int64_t warpsN) {
  int warpBits = log2Exact(numWarps), colBits = log2Exact(warpsN);
  assert(warpBits >= 0 && colBits >= 0 && colBits <= warpBits);
  int64_t warpsM = numWarps / warpsN;
  int64_t rowsPerWarp = m / warpsM, colsPerWarp = n / warpsN;
  assert(m % (16 * warpsM) == 0 && n % (8 * warpsN) == 0);
  std::vector<Coord> reg = {{0, 1}, {8, 0}};
  for (int64_t col = 8; col < colsPerWarp; col *= 2)
    reg.push_back({0, col});
  for (int64_t row = 16; row < rowsPerWarp; row *= 2)
    reg.push_back({row, 0});
  std::vector<Coord> warp;
  for (int i = 0; i < warpBits - colBits; ++i)
    warp.push_back({rowsPerWarp << i, 0});
  for (int i = 0; i < colBits; ++i)
    warp.push_back({0, colsPerWarp << i});
  return LinearLayout(2, reg, mmaLaneBases(/*tAlongDim1=*/true), warp);
}

LinearLayout mmaOperandA(int64_t m, int64_t k, int64_t numWarps, int64_t warpsN) {
  assert(k % 16 == 0);
  // a0,a1: (g, 2t+{0,1}); a2,a3: row+8; a4..a7: col+8 — the accumulator's
  // bit order exactly, continued over k16 and m16 tiles.
  if (warpsN == 1)
    return mmaAccumulator(m, k, numWarps);
  // A grid's column warps read the same rows: their warp bits move nothing.
  LinearLayout rows = mmaAccumulator(m, k, numWarps / warpsN);
  std::vector<Coord> warp = rows.warpBases();
  for (int64_t i = 1; i < warpsN; i *= 2)
    warp.push_back({0, 0});
  return LinearLayout(2, rows.regBases(), rows.laneBases(), warp);
}

LinearLayout mmaOperandB(int64_t k, int64_t n, int64_t numWarps) {
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

LinearMap swizzledShared(int64_t rows, int64_t cols, int64_t elemBytes, unsigned swizzleBits,
                         int64_t chunkBytes) {
  int rowBits = log2Exact(rows), colBits = log2Exact(cols);
  int64_t perChunk = chunkBytes / elemBytes;
  assert(rowBits >= 0 && colBits >= 0 && log2Exact(perChunk) >= 0 &&
         cols * elemBytes >= (chunkBytes << swizzleBits) && "a row spans the swizzle period");
  // offset = row·cols + ((col / perChunk) ^ (row & mask))·perChunk + col % perChunk:
  // column bits map to themselves; a row bit b adds (1 << b)·cols, and for
  // b < swizzleBits also flips chunk bit b (offset bit b of the chunk index).
  LinearMap::InDim row{"dim0", {}}, col{"dim1", {}};
  for (int b = 0; b < rowBits; ++b) {
    int64_t off = (int64_t(1) << b) * cols;
    if (unsigned(b) < swizzleBits)
      off ^= (int64_t(1) << b) * perChunk;
    row.bases.push_back({off});
  }
  for (int b = 0; b < colBits; ++b)
    col.bases.push_back({int64_t(1) << b});
  return LinearMap({row, col}, {{"offset", rows * cols}});
}

} // namespace tilec::sm80
