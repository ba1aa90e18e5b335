//===- Addressing.cpp - thread coordinates and addresses ------------------===//
//
// Where a thread's registers sit in a tile (threadCoords, elementCoords),
// the addresses of global elements and of swizzled shared chunks
// (sharedChunkBase, which also hoists and ring-shifts chunk bases), bounds
// tests, and the widest vector access a layout and view allow.
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

namespace tilec::nvvm {

/// Runtime coordinates of this thread's register 0: XOR of the lane and warp
/// bases of the set bits, computed once in the entry block.
Value KernelLowering::replicaOwner(const LinearLayout &layout) {
  int64_t laneMask = 0, warpMask = 0;
  tilec::Coord zero(layout.rank(), 0);
  for (size_t i = 0; i < layout.laneBases().size(); ++i)
    if (layout.laneBases()[i] == zero)
      laneMask |= int64_t(1) << i;
  for (size_t i = 0; i < layout.warpBases().size(); ++i)
    if (layout.warpBases()[i] == zero)
      warpMask |= int64_t(1) << i;
  if (!laneMask && !warpMask)
    return Value();
  Value bits = arith::OrIOp::create(b, arith::AndIOp::create(b, laneId, i32(laneMask)),
                                    arith::AndIOp::create(b, warpId, i32(warpMask)));
  return arith::CmpIOp::create(b, arith::CmpIPredicate::eq, bits, i32(0));
}

SmallVector<Value> KernelLowering::threadCoords(const LinearLayout &layout) {
  Attribute key = toAttr(ctx, layout);
  if (auto it = threadCoordCache.find(key); it != threadCoordCache.end())
    return it->second;
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(prologueEnd);
  SmallVector<Value> coords;
  for (unsigned d = 0; d < layout.rank(); ++d) {
    Value acc = i32(0);
    auto addBits = [&](Value index, const std::vector<tilec::Coord> &bases) {
      for (size_t i = 0; i < bases.size(); ++i) {
        if (bases[i][d] == 0)
          continue;
        Value bit = arith::AndIOp::create(b, arith::ShRUIOp::create(b, index, i32(i)), i32(1));
        Value contribution = arith::MulIOp::create(b, bit, i32(bases[i][d]));
        acc = arith::XOrIOp::create(b, acc, contribution);
      }
    };
    addBits(laneId, layout.laneBases());
    addBits(warpId, layout.warpBases());
    coords.push_back(acc);
  }
  threadCoordCache[key] = coords;
  return coords;
}


/// Coordinates of register `reg`: its constant part combined with the
/// thread's. When the bits of the two parts are disjoint (every layout tilec
/// builds), XOR is an add, which lets address arithmetic fold constants.
SmallVector<Value> KernelLowering::elementCoords(const LinearLayout &layout, ArrayRef<Value> thread,
                                                 int64_t reg) {
  tilec::Coord regPart = layout.regCoord(reg);
  SmallVector<Value> coords;
  for (unsigned d = 0; d < layout.rank(); ++d) {
    auto [threadBits, regBits] = layout.threadAndRegisterBits(d);
    if (regPart[d] == 0)
      coords.push_back(thread[d]);
    else if ((threadBits & regBits) == 0)
      coords.push_back(arith::AddIOp::create(b, thread[d], i32(regPart[d])));
    else
      coords.push_back(arith::XOrIOp::create(b, thread[d], i32(regPart[d])));
  }
  return coords;
}

SmallVector<Value> KernelLowering::viewIndex(const LinearLayout &layout, ArrayRef<Value> thread,
                                             int64_t reg, ArrayRef<Value> offsets) {
  SmallVector<Value> index = elementCoords(layout, thread, reg);
  for (size_t d = 0; d < index.size(); ++d)
    index[d] = arith::AddIOp::create(b, index[d], offsets[d]);
  return index;
}

Value KernelLowering::inBounds(const ViewInfo &view, ArrayRef<Value> index) {
  Value ok;
  for (size_t d = 0; d < index.size(); ++d) {
    // Unsigned compare also rejects negative indices.
    Value inside = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, index[d], view.sizes[d]);
    ok = ok ? arith::AndIOp::create(b, ok, inside).getResult() : inside;
  }
  return ok;
}

/// Whether the tile [offsets, offsets + extents) lies inside the view in
/// every dimension: one uniform test per tile instead of one per element. It
/// folds to a constant where offsets and sizes are constants.
Value KernelLowering::tileInsideView(const ViewInfo &view, ArrayRef<Value> offsets,
                                     ArrayRef<int64_t> extents, unsigned firstDim) {
  Value all;
  for (size_t d = firstDim; d < firstDim + offsets.size(); ++d) {
    // 0 <= offset <= size - extent (signed: size - extent < 0 when the tile
    // is larger than the view, and then nothing fits).
    Value offset = offsets[d - firstDim];
    Value lastStart = b.createOrFold<arith::SubIOp>(view.sizes[d], i32(extents[d - firstDim]));
    Value notBefore = b.createOrFold<arith::CmpIOp>(arith::CmpIPredicate::sge, offset, i32(0));
    Value notPast = b.createOrFold<arith::CmpIOp>(arith::CmpIPredicate::sle, offset, lastStart);
    Value fits = b.createOrFold<arith::AndIOp>(notBefore, notPast);
    all = all ? b.createOrFold<arith::AndIOp>(all, fits) : fits;
  }
  return all;
}

Value KernelLowering::elementAddress(const ViewInfo &view, ArrayRef<Value> index) {
  Value offset;
  auto add = [&](Value term) {
    offset = offset ? arith::AddIOp::create(b, offset, term).getResult() : term;
  };
  // A blocked view: index i along a dimension of block extent e is block
  // i / e (strides step between blocks) and i % e inside the row-major block.
  SmallVector<int64_t> inner(index.size(), 1);
  for (size_t d = view.block.size(); d-- > 1;)
    inner[d - 1] = inner[d] * view.block[d];
  for (size_t d = 0; d < index.size(); ++d) {
    Value i = index[d];
    if (!view.block.empty()) {
      int64_t extent = view.block[d];
      Value within = arith::AndIOp::create(b, i, i32(extent - 1));
      add(arith::ExtSIOp::create(b, b.getI64Type(), arith::MulIOp::create(b, within, i32(inner[d]))));
      i = arith::ShRSIOp::create(b, i, i32(llvm::Log2_64(extent)));
    }
    add(arith::MulIOp::create(b, arith::ExtSIOp::create(b, b.getI64Type(), i), view.strides[d]));
  }
  return LLVM::GEPOp::create(b, ptrType(kGlobalAddressSpace), view.elementType, view.base,
                             ValueRange{offset});
}

/// Address of the 16-byte chunk (rowRuntime + rowConst, chunkRuntime +
/// chunkConst) of a swizzled shared tile, where the runtime parts are
/// thread-invariant values of the prologue and rowConst is a multiple of the
/// swizzle period. Swizzling only touches the low chunk bits, so
///   ((cr + cc) ^ s) = ((cr + (cc & m)) ^ s) + (cc & ~m),   s = row & m,
/// and every access becomes one of at most 2^swizzleBits base addresses per
/// tile plus a constant: ldmatrix/cp.async get [reg + imm] addressing and the
/// loop keeps a handful of address registers instead of one per access.
Value KernelLowering::sharedChunkAddress(const SharedTile &tile, Value rowRuntime, int64_t rowConst,
                                         Value chunkRuntime, int64_t chunkConst) {
  auto [base, offset] = sharedChunkBase(tile, rowRuntime, rowConst, chunkRuntime, chunkConst);
  if (offset == 0)
    return base;
  return LLVM::GEPOp::create(b, ptrType(kSharedAddressSpace), b.getI8Type(), base,
                             ArrayRef<LLVM::GEPArg>{offset});
}

std::pair<Value, int64_t> KernelLowering::sharedChunkBase(const SharedTile &tile, Value rowRuntime,
                                                          int64_t rowConst, Value chunkRuntime,
                                                          int64_t chunkConst, bool chunkRuntimeIsBit) {
  int64_t mask = (int64_t(1) << tile.swizzleBits) - 1;
  assert((rowConst & mask) == 0 && "row offset must keep the swizzle phase");
  int64_t chunkLow = chunkConst & mask, chunkHigh = chunkConst & ~mask;
  int64_t rowBytes = tile.cols * tile.elemBytes;
  // Cache key: the tile, this thread's row and chunk, the low chunk bits
  // and, for addresses inside a ring loop, the iteration's delta.
  auto keyFor = [&](int64_t low, Value delta) -> ChunkBaseKey {
    return {tile.offset * 4096 + rowBytes, rowRuntime.getAsOpaquePointer(),
            chunkRuntime.getAsOpaquePointer(), low,
            delta ? delta.getAsOpaquePointer() : static_cast<void *>(nullptr)};
  };
  // Carried ring addresses (carry-ring-addresses, xor-ring-phases): carry
  // only the low-chunk-0 address and derive the others by XOR each
  // iteration: one carried register per (tile, dot) instead of one per even
  // low chunk (4 at swizzleBits 3). Valid when the runtime
  // chunk is a 0/1 lane bit and chunkLow is even (cr + cl = cr ^ cl, so the
  // swizzled chunk is chunk_0 ^ cl) and nothing else in the address has a
  // bit where the chunk sits: rows, the region, the twin distance and the
  // shared window's alignment (128) are multiples of the swizzle period.
  int64_t period = hw.chunkBytes << tile.swizzleBits;
  if (xorShifts && tile.delta && chunkRuntimeIsBit && chunkLow != 0 && chunkLow % 2 == 0 &&
      rowBytes % period == 0 && tile.offset % period == 0 && tile.twinDistance % period == 0 &&
      hw.sharedAlignment % period == 0) {
    auto [first, constant] =
        sharedChunkBase(tile, rowRuntime, rowConst, chunkRuntime, chunkConst & ~mask, true);
    // -chunkLow: apart from the ring-shifted bases' keys (below).
    Value &derived = chunkBaseCache[keyFor(-chunkLow, tile.delta)];
    if (!derived) {
      // At the first use, unless that is inside a branch later uses would
      // not see (then right after the carried address).
      OpBuilder::InsertionGuard guard(b);
      if (b.getInsertionBlock() != first.getParentBlock())
        b.setInsertionPointAfterValue(first);
      Value address = LLVM::PtrToIntOp::create(b, b.getI32Type(), first);
      address = arith::XOrIOp::create(b, address, i32(chunkLow * hw.chunkBytes));
      derived = LLVM::IntToPtrOp::create(b, ptrType(kSharedAddressSpace), address);
    }
    return {derived, constant};
  }
  ChunkBaseKey key = keyFor(chunkLow, Value());
  // Bases are hoisted to the entry block, where loops read them every
  // iteration; code after the loops (an epilogue) computes its own in place
  // rather than keeping more registers live through the loops.
  auto hoisted = chunkBaseCache.find(key);
  Value &base = hoisted != chunkBaseCache.end() || !localChunkBases ? chunkBaseCache[key]
                                                                     : (*localChunkBases)[key];
  if (!base) {
    OpBuilder::InsertionGuard guard(b);
    if (!localChunkBases)
      b.setInsertionPoint(prologueEnd);
    Value chunk = arith::AddIOp::create(b, chunkRuntime, i32(chunkLow));
    if (mask)
      chunk = arith::XOrIOp::create(b, chunk, arith::AndIOp::create(b, rowRuntime, i32(mask)));
    Value bytes = arith::AddIOp::create(b, arith::MulIOp::create(b, rowRuntime, i32(rowBytes)),
                                        arith::MulIOp::create(b, chunk, i32(hw.chunkBytes)));
    bytes = arith::AddIOp::create(b, bytes, i32(tile.offset));
    base = LLVM::GEPOp::create(b, ptrType(kSharedAddressSpace), b.getI8Type(), smemBase,
                               ValueRange{bytes});
  }
  int64_t constant = rowConst * rowBytes + chunkHigh * hw.chunkBytes;
  if (!tile.delta)
    return {base, constant};
  // A ring tile: the loop-invariant base plus this iteration's delta, once
  // per iteration (right after the delta is computed, at the top of the body).
  key = keyFor(chunkLow, tile.delta);
  Value &shifted = chunkBaseCache[key];
  if (!shifted) {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointAfterValue(tile.delta);
    shifted = LLVM::GEPOp::create(b, ptrType(kSharedAddressSpace), b.getI8Type(), base,
                                  ValueRange{tile.delta});
    if (carryShifts)
      ringShifts.push_back({shifted, base, tile.delta, key});
  }
  return {shifted, constant};
}

/// Byte address of element (row, col) of a swizzled row-major shared tile:
/// the 16-byte chunk index is XORed with the row's low bits.
Value KernelLowering::sharedElementAddress(const SharedTile &tile, Value row, Value col) {
  int64_t elemsPerChunk = hw.chunkBytes / tile.elemBytes;
  Value chunk = arith::DivUIOp::create(b, col, i32(elemsPerChunk));
  Value within = arith::RemUIOp::create(b, col, i32(elemsPerChunk));
  if (tile.swizzleBits > 0) {
    Value rowBits = arith::AndIOp::create(b, row, i32((1 << tile.swizzleBits) - 1));
    chunk = arith::XOrIOp::create(b, chunk, rowBits);
  }
  int64_t rowBytes = tile.cols * tile.elemBytes;
  Value bytes = arith::AddIOp::create(
      b, arith::AddIOp::create(b, arith::MulIOp::create(b, row, i32(rowBytes)),
                               arith::MulIOp::create(b, chunk, i32(hw.chunkBytes))),
      arith::MulIOp::create(b, within, i32(tile.elemBytes)));
  bytes = arith::AddIOp::create(b, bytes, i32(tile.offset));
  if (tile.delta)
    bytes = arith::AddIOp::create(b, bytes, tile.delta);
  return LLVM::GEPOp::create(b, ptrType(kSharedAddressSpace), b.getI8Type(), smemBase,
                             ValueRange{bytes});
}

Operation *KernelLowering::inlinePtx(TypeRange results, ValueRange operands, StringRef text,
                                     StringRef constraints) {
  return TargetInfo::inlinePtx(b, results, operands, text, constraints);
}

/// The strides the vector-width rules see: a blocked view's last dimension
/// is contiguous (stride 1) inside a block, and no vector crosses a block row.
SmallVector<Value> KernelLowering::widthStrides(const ViewInfo &view) {
  SmallVector<Value> strides(view.strides);
  if (!view.block.empty())
    strides.back() = i64(1);
  return strides;
}

/// The most elements along the view's last dimension one access may move
/// (up to 16 bytes): the dimension is contiguous (stride constant 1) and
/// the view's size and the offset are constant multiples of it, so that a
/// vector is wholly inside or outside the view. Sub-byte elements (i1) move
/// one at a time: a vector of them is bit-packed.
int KernelLowering::viewWidthLimit(const ViewInfo &view, ValueRange offsets, Type elemType) {
  int width = smem::viewWidthLimit(view.sizes, widthStrides(view), offsets, elemType, hw.chunkBytes);
  return view.block.empty() ? width : std::min<int64_t>(width, view.block.back());
}

/// Number of consecutive registers that one vector access can move (the
/// rule is AllocateShared.h's: the smem-epilogue stages what it keeps narrow).
int KernelLowering::vectorWidth(const LinearLayout &layout, const ViewInfo &view,
                                ValueRange offsets, Type elemType) {
  int width = smem::vectorWidth(layout, view.sizes, widthStrides(view), offsets, elemType,
                                hw.chunkBytes);
  return view.block.empty() ? width : std::min<int64_t>(width, view.block.back());
}

} // namespace tilec::nvvm
