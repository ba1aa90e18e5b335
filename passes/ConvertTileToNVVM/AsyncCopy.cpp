//===- AsyncCopy.cpp - global -> shared by cp.async -----------------------===//
//
// tile.load into a shared tile: 16-byte cp.async copies (zero-filled past
// the view, by the copy-bounds mode); the commit that closes the tile's
// group, and the waits, are tile-insert-waits' ops (lowered in
// ConvertTileToNVVM.cpp).
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

namespace tilec::nvvm {

/// Cooperative copy global -> shared with 16-byte cp.async: chunk i of the
/// tile goes to thread i % threads. Beyond the view, cp.async's src-size
/// operand zero-fills (padding must be zero).
LogicalResult KernelLowering::lowerLoadToShared(LoadOp op) {
  auto type = op.getResult().getType();
  if (type.getRank() != 2)
    return op.emitError() << "only rank-2 tiles can be placed in shared memory";
  if (op.getPadding() != PaddingKind::zero)
    return op.emitError() << "a tile loaded into shared memory pads with zero (cp.async "
                             "zero-fill); got padding "
                          << stringifyPaddingKind(op.getPadding());
  const ViewInfo &view = views[op.getView()];
  if (!view.block.empty())
    return op.emitError() << "a tile loaded into shared memory needs a strided view; a blocked "
                             "view (tile.view's block) is read into registers only";
  if (constantInt(view.strides[1]) != 1)
    return op.emitError() << "a tile loaded into shared memory needs the view's last "
                             "dimension contiguous (stride a constant 1)";
  if (isTransposedShared(op.getResult()))
    return op.emitError() << "a tile is loaded into shared memory as stored; its transpose is "
                             "tile.trans of the loaded tile";
  auto reused = reuseRegion.find(op.getResult());
  SharedTile tile;
  if (reused != reuseRegion.end()) {
    tile = reused->second;
  } else {
    FailureOr<SharedTile> region = regionOf(op, smem::sharedTileGeometry(type, hw));
    if (failed(region))
      return failure();
    tile = *region;
  }
  int64_t rowBytes = tile.cols * tile.elemBytes;
  if (rowBytes % hw.chunkBytes != 0)
    return op.emitError() << "rows of a shared tile must be whole 16-byte chunks, got "
                          << rowBytes << " bytes";
  int64_t elemsPerChunk = hw.chunkBytes / tile.elemBytes;
  int64_t chunksPerRow = rowBytes / hw.chunkBytes;
  int64_t totalChunks = tile.rows * chunksPerRow;
  int64_t threads = numWarps * kWarpSize;

  // (Earlier copies into the region have landed and everyone is done
  // reading its previous contents: tile-insert-waits put the wait and
  // barrier that say so in front of this op, and the commit after it.)
  Value rowOffset = scalar(op.getOffsets()[0]), colOffset = scalar(op.getOffsets()[1]);
  // Pass p copies chunks [p * threads, (p + 1) * threads): when a pass covers
  // whole rows, a thread keeps its chunk column and moves down by a constant
  // number of rows, so its shared address is a base plus a constant.
  int64_t rowsPerPass = threads / chunksPerRow;
  bool constantStride = threads % chunksPerRow == 0 &&
                        rowsPerPass % (int64_t(1) << tile.swizzleBits) == 0;
  Value rowInPass, chunkInRow;
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPoint(prologueEnd);
    rowInPass = arith::DivUIOp::create(b, threadId, i32(chunksPerRow));
    chunkInRow = arith::RemUIOp::create(b, threadId, i32(chunksPerRow));
  }
  // A tile wholly inside the view (every block of a loop but the last, in
  // practice) needs no per-chunk bounds: its copies take the fast path,
  // whose source addresses are one thread pointer plus a constant step per
  // pass. Only a tile that may cross the view's edge pays for the checked
  // copies (zero-filled chunks, addresses clamped into the view).
  Value inside = copyBounds != CopyBounds::Chunk
                     ? tileInsideView(view, {rowOffset, colOffset}, {tile.rows, tile.cols})
                     : Value();
  std::optional<int64_t> insideConst = inside ? getConstantIntValue(inside) : std::optional<int64_t>(0);
  auto copyChunk = [&](int64_t first, Value dst, Value src, Value srcBytes) {
    auto emit = [&] {
      target.asyncCopy(b, dst, src, srcBytes);
    };
    if (totalChunks % threads == 0 || first + threads <= totalChunks)
      return emit();
    Value chunkId = arith::AddIOp::create(b, threadId, i32(first));
    Value active = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, chunkId, i32(totalChunks));
    auto ifOp = scf::IfOp::create(b, TypeRange{}, active, /*withElse=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    emit();
  };
  auto chunkRowCol = [&](int64_t first) -> std::pair<Value, Value> {
    if (constantStride)
      return {arith::AddIOp::create(b, rowInPass, i32(first / chunksPerRow)), chunkInRow};
    Value chunkId = arith::AddIOp::create(b, threadId, i32(first));
    return {arith::DivUIOp::create(b, chunkId, i32(chunksPerRow)),
            arith::RemUIOp::create(b, chunkId, i32(chunksPerRow))};
  };
  auto chunkDst = [&](int64_t first, Value row, Value col) {
    return constantStride ? sharedChunkAddress(tile, rowInPass, first / chunksPerRow, chunkInRow, 0)
                          : sharedElementAddress(tile, row, col);
  };
  // The next pass's source pointer: the previous one plus `step` elements
  // (two adds), hidden from LLVM: seen through, loop strength reduction
  // makes every pass's pointer its own induction variable (two registers
  // each, 16 per 64x128 tile, live across the whole loop).
  auto nextPassPointer = [&](Value previous, Value step) -> Value {
    Value next = LLVM::GEPOp::create(b, ptrType(kGlobalAddressSpace), view.elementType, previous,
                                     ValueRange{step});
    return inlinePtx(next.getType(), next, "mov.b64 $0, $1;", "=l,l")->getResult(0);
  };
  auto uncheckedCopies = [&] {
    Value srcBytes = i32(hw.chunkBytes), src;
    Value passStep; // elements between a thread's chunks in consecutive passes
    if (constantStride)
      passStep = arith::MulIOp::create(b, view.strides[0], i64(rowsPerPass));
    for (int64_t first = 0; first < totalChunks; first += threads) {
      auto [row, chunk] = chunkRowCol(first);
      Value col = arith::MulIOp::create(b, chunk, i32(elemsPerChunk));
      src = !constantStride || first == 0
                ? elementAddress(view, {arith::AddIOp::create(b, row, rowOffset),
                                        arith::AddIOp::create(b, col, colOffset)})
                : nextPassPointer(src, passStep);
      copyChunk(first, chunkDst(first, row, col), src, srcBytes);
    }
  };
  auto checkedCopies = [&] {
    for (int64_t first = 0; first < totalChunks; first += threads) {
      auto [row, chunk] = chunkRowCol(first);
      Value col = arith::MulIOp::create(b, chunk, i32(elemsPerChunk));
      Value globalRow = arith::AddIOp::create(b, row, rowOffset);
      Value globalCol = arith::AddIOp::create(b, col, colOffset);
      // Bytes of this chunk inside the view: 0 when the row is outside,
      // clamp((size - col) * elemBytes, 0, 16) otherwise.
      // Unsigned compares also reject negative rows and columns.
      Value rowOk = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, globalRow, view.sizes[0]);
      Value colOk = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, globalCol, view.sizes[1]);
      Value colsLeft = arith::SubIOp::create(b, view.sizes[1], globalCol);
      Value bytesLeft = arith::MulIOp::create(b, colsLeft, i32(tile.elemBytes));
      bytesLeft = arith::MaxSIOp::create(b, arith::MinSIOp::create(b, bytesLeft, i32(hw.chunkBytes)), i32(0));
      Value srcBytes = arith::SelectOp::create(b, arith::AndIOp::create(b, rowOk, colOk), bytesLeft, i32(0));
      Value valid = arith::CmpIOp::create(b, arith::CmpIPredicate::sgt, srcBytes, i32(0));
      // Never form an address outside the view, even for a zero-byte copy.
      Value safeRow = arith::SelectOp::create(b, valid, globalRow, i32(0));
      Value safeCol = arith::SelectOp::create(b, valid, globalCol, i32(0));
      copyChunk(first, chunkDst(first, row, col), elementAddress(view, {safeRow, safeCol}), srcBytes);
    }
  };
  // 'row': no branch. Each chunk copies 16 bytes or none by whether its row
  // is inside the view, from a pointer chained like the unchecked copies'.
  // A zero-byte cp.async reads nothing, so the address of a row past the
  // view is formed but never used. Needs whole rows per pass and the
  // columns inside at compile time (else a chunk could be partly inside).
  auto rowPredicatedCopies = [&] {
    Value passStep = arith::MulIOp::create(b, view.strides[0], i64(rowsPerPass)), src;
    Value col = arith::MulIOp::create(b, chunkInRow, i32(elemsPerChunk));
    Value firstRow = arith::AddIOp::create(b, rowInPass, rowOffset);
    for (int64_t first = 0; first < totalChunks; first += threads) {
      Value globalRow = arith::AddIOp::create(b, firstRow, i32(first / chunksPerRow));
      // Unsigned: negative rows are outside too.
      Value rowOk = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, globalRow, view.sizes[0]);
      Value srcBytes = arith::SelectOp::create(b, rowOk, i32(hw.chunkBytes), i32(0));
      src = first == 0 ? elementAddress(view, {firstRow, arith::AddIOp::create(b, col, colOffset)})
                       : nextPassPointer(src, passStep);
      copyChunk(first, chunkDst(first, nullptr, nullptr), src, srcBytes);
    }
  };
  // (i1 constants read as 0 and -1.)
  bool staticallyInside = insideConst && *insideConst;
  auto colsInside = [&] {
    Value test = tileInsideView(view, {colOffset}, {tile.cols}, /*firstDim=*/1);
    return getConstantIntValue(test).value_or(0) != 0;
  };
  if (copyBounds == CopyBounds::Row && constantStride && !staticallyInside && colsInside())
    rowPredicatedCopies();
  else if (insideConst)
    *insideConst ? uncheckedCopies() : checkedCopies();
  else {
    auto ifOp = scf::IfOp::create(b, TypeRange{}, inside, /*withElse=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&ifOp.getThenRegion().front());
    uncheckedCopies();
    b.setInsertionPointToStart(&ifOp.getElseRegion().front());
    checkedCopies();
  }
  noteAccess(view, hw.chunkBytes);
  sharedTiles[op.getResult()] = tile;
  return success();
}

} // namespace tilec::nvvm
