//===- Sm80Layouts.h - the sm80 instances of LinearLayout / LinearMap ----===//
//
// The layouts one architecture's instructions fix, kept out of the
// target-independent LinearLayout class so that the next target (sm90a:
// wgmma's warpgroup accumulators, its shared-memory operand layouts) is a
// file next to this one:
//
//  * the mma.sync m16n8k16 fragments (A, B, C/D) of FlashAttention-2's
//    split-Q (warps split the rows), which tile-partition-warps attaches and
//    the lowering checks;
//  * the XOR swizzle of 16-byte chunks in shared memory (ldmatrix and
//    cp.async rows conflict-free), as a linear map (row, col) -> element
//    offset: the same formula passes/ConvertTileToNVVM/Addressing.cpp
//    emits (sharedElementAddress).
//
//===----------------------------------------------------------------------===//
#ifndef TILEC_LAYOUT_SM80LAYOUTS_H
#define TILEC_LAYOUT_SM80LAYOUTS_H

#include "tilec/Layout/LinearLayout.h"
#include "tilec/Layout/LinearMap.h"

namespace tilec::sm80 {

/// Accumulator (C/D) of an MxN f32 tile computed by `numWarps` warps that
/// split the rows (FlashAttention-2's split-Q): warp w owns M/numWarps
/// consecutive rows; within a warp, the m16n8 pattern repeats over n8
/// column tiles, then over m16 row tiles. Register bit order:
/// [col+1, row+8, col+8, col+16, ..., row+16, ...].
///
/// With `warpsN` > 1 the warps form a grid (FlashAttention-2's backward):
/// numWarps / warpsN along the rows, warpsN along the columns; warp w owns
/// row block w % (numWarps / warpsN) and column block w / (numWarps /
/// warpsN), each (M·warpsN/numWarps) x (N/warpsN), the same per-warp
/// register order over its own block. warpsN = 1 is split-Q.
LinearLayout mmaAccumulator(int64_t m, int64_t n, int64_t numWarps, int64_t warpsN = 1);
/// A operand (MxK, f16/bf16) in registers, rows split over warps the same
/// way. Register bits [col+1, row+8, col+8, col+16.., row+16..]: the same
/// map as the accumulator of an MxK tile, which is why P = softmax(S)
/// feeds the second mma straight from the first one's registers.
/// With a warp grid (`warpsN` > 1) the warps of one row group hold the same
/// rows (replicated along the grid's columns).
LinearLayout mmaOperandA(int64_t m, int64_t k, int64_t numWarps, int64_t warpsN = 1);
/// B operand (KxN) fragment: every warp holds all of B (replicated over
/// warps). Register bits [k+1, k+8, n+8.., k+16..].
LinearLayout mmaOperandB(int64_t k, int64_t n, int64_t numWarps);

/// A row-major rows x cols shared tile of `elemBytes` elements whose
/// `chunkBytes` chunks are XORed with the row's low `swizzleBits` bits:
/// inputs "dim0" (row), "dim1" (column), output "offset" (elements from the
/// tile's start). Needs power-of-two extents and a row at least as long as
/// the swizzle period (cols·elemBytes >= chunkBytes << swizzleBits), which
/// is when the lowering swizzles.
LinearMap swizzledShared(int64_t rows, int64_t cols, int64_t elemBytes, unsigned swizzleBits,
                         int64_t chunkBytes);

} // namespace tilec::sm80

#endif // TILEC_LAYOUT_SM80LAYOUTS_H
