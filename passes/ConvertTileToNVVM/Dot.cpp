//===- Dot.cpp - tile.dot as mma.sync (MMAv2) -----------------------------===//
//
// tile.dot: A from registers (or shared, by ldmatrix), B from shared by
// ldmatrix(.trans), mma.sync m16n8k16 into the f32 accumulator fragment.
// wgmma (sm90a) goes next to it in its own file.
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"
#include "tilec/Layout/Sm80Layouts.h"

namespace tilec::nvvm {

/// ldmatrix through the target (TargetInfo::ldmatrix); it reads shared memory.
Value KernelLowering::ldmatrix(Value base, int64_t offset, int num, bool transpose) {
  return target.ldmatrix(b, base, offset, num, transpose);
}

/// mma.sync m16n8k16: A from registers (split-Q fragment layout), B from a
/// shared tile through ldmatrix (.trans when B is stored K-major, i.e. V),
/// accumulator in registers.
LogicalResult KernelLowering::lowerDot(DotOp op) {
  auto aType = op.getA().getType();
  auto accType = op.getAcc().getType();
  int64_t m = accType.getDimSize(0), n = accType.getDimSize(1), k = aType.getDimSize(1);
  bool aShared = isShared(op.getA());
  // A warp grid (warps_n > 1): warp w computes row block w % warpsM and
  // column block w / warpsM of the result; A comes from shared memory.
  int64_t warpsN = op.getWarpsN().value_or(1), warpsM = numWarps / warpsN;
  if ((!aShared && (warpsN != 1 || layoutOf(op.getA()) != sm80::mmaOperandA(m, k, numWarps))) ||
      layoutOf(op.getAcc()) != sm80::mmaAccumulator(m, n, numWarps, warpsN) ||
      !isShared(op.getB()))
    return op.emitError() << "tile.dot operands are not in the mma.sync layouts (A and the "
                             "accumulator split-Q fragments or warps_n's grid, B in shared "
                             "memory); run tile-partition-warps first";
  if (isTransposedShared(op.getB()))
    return op.emitError() << "tile.dot's B operand in a transposed shared view is not "
                             "supported (transpose_b reads B transposed)";
  bool aTransposed = aShared && isTransposedShared(op.getA());
  Type elemType = aType.getElementType();
  bool bf16 = elemType.isBF16();
  SharedTile &bTile = sharedTiles[op.getB()];
  // (The copies into A and B have landed: tile-insert-waits' waits.)

  int64_t rowsPerWarp = m / warpsM, colsPerWarp = n / warpsN;
  int64_t mTiles = rowsPerWarp / hw.mmaM, nTiles = colsPerWarp / hw.mmaN, kTiles = k / hw.mmaK;
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
  // A warp grid's column block: K-like B tiles (N x K) start at row
  // warpCol·colsPerWarp, V-like ones (K x N) at chunk warpCol·colsPerWarp/8.
  Value bNRow = kRow, bNChunk = matrixHigh, warpRow = warpId;
  bool bChunkIsBit = true;
  if (warpsN > 1) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(prologueEnd);
    warpRow = arith::AndIOp::create(b, warpId, i32(warpsM - 1));
    Value warpCol = arith::ShRUIOp::create(b, warpId, i32(tilec::log2Exact(warpsM)));
    bNRow = arith::AddIOp::create(b, arith::MulIOp::create(b, warpCol, i32(colsPerWarp)), kRow);
    bNChunk = arith::AddIOp::create(
        b, arith::MulIOp::create(b, warpCol, i32(colsPerWarp / hw.mmaN)), matrixHigh);
    bChunkIsBit = false;
  }
  // A from shared memory (Q kept there when registers are short): the four
  // 8x8 matrices of a 16x16 fragment are (rows 0-7 | 8-15) x (k 0-7 | 8-15)
  // in a0a1, a2a3, a4a5, a6a7 order, each warp reading its own rows.
  // A transposed view (Aᵀ stored, K's tile read as Kᵀ): ldmatrix.trans of
  // stored (k rows, m chunks); matrix j of a fragment holds m-half j & 1 and
  // k-half j >> 1, so lane l addresses stored row 8·(l >> 4) + l % 8 of the
  // k-step and chunk (l >> 3) & 1 of the warp's m rows.
  Value aRow, aChunk;
  if (aShared) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(prologueEnd);
    if (aTransposed)
      aChunk = arith::AddIOp::create(
          b, arith::MulIOp::create(b, warpRow, i32(rowsPerWarp / 8)), matrixLow);
    else
      aRow = arith::AddIOp::create(b, arith::MulIOp::create(b, warpRow, i32(rowsPerWarp)), vRow);
  }
  int numMatrices = nTiles >= 2 ? 4 : 2;
  carryShifts = loopShortOfRegisters;
  xorShifts = carryShifts && (loopXorPhases == XorRingPhases::All ||
                              loopXorPhases == (transposeB ? XorRingPhases::NonTrans
                                                           : XorRingPhases::Trans));
  llvm::scope_exit stopCarrying([&] { carryShifts = xorShifts = false; });

  for (int64_t ki = 0; ki < kTiles; ++ki) {
    SmallVector<SmallVector<Value>> aFrags(mTiles);
    for (int64_t mi = 0; mi < mTiles; ++mi) {
      if (aShared) {
        auto [base, offset] =
            aTransposed
                ? sharedChunkBase(sharedTiles[op.getA()], kRow, 16 * ki, aChunk, 2 * mi, false)
                : sharedChunkBase(sharedTiles[op.getA()], aRow, 16 * mi, matrixHigh, 2 * ki, true);
        Value ld = ldmatrix(base, offset, 4, /*transpose=*/aTransposed);
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
              ? sharedChunkBase(bTile, bNRow, 8 * ni, matrixLow, 2 * ki, true)
              // The tile is K x N row-major (V): ldmatrix.trans of (k-half, n-block).
              : sharedChunkBase(bTile, vRow, 16 * ki, bNChunk, ni, bChunkIsBit);
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
          Value mma = target.mma(b, aFrag, ValueRange{bFrag[0], bFrag[1]}, cFrag, bf16);
          for (int i = 0; i < 4; ++i)
            acc[cBase + i] = LLVM::ExtractValueOp::create(b, mma, i);
        }
      }
    }
  }
  regs[op.getResult()] = acc;
  return success();
}

} // namespace tilec::nvvm
