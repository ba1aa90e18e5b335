//===- LoadStore.cpp - register loads, stores, atomics --------------------===//
//
// Global memory to and from register tiles: vector loads honouring the
// copy-bounds mode, stores (direct, widened by lane exchanges, or through
// shared memory as 16-byte chunks: the smem-epilogue), tile.atomic_add,
// tile.arrive, tile.wait_turn, tile.pass_turn, tile.wait_prior_kernels,
// tile.launch_dependents and tile.load_scalar.
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

namespace tilec::nvvm {

LogicalResult KernelLowering::lowerLoad(LoadOp op) {
  if (isShared(op.getResult()))
    return lowerLoadToShared(op);
  const ViewInfo &view = views[op.getView()];
  LinearLayout layout = layoutOf(op.getResult());
  Type elemType = op.getResult().getType().getElementType();
  int64_t elemBytes = std::max<int64_t>(1, elemType.getIntOrFloatBitWidth() / 8);
  SmallVector<Value> offsets = llvm::map_to_vector(op.getOffsets(), [&](Value v) { return scalar(v); });
  int width = vectorWidth(layout, view, op.getOffsets(), elemType);
  noteAccess(view, width * elemBytes);

  Value padding;
  switch (op.getPadding()) {
  case PaddingKind::zero:
    padding = LLVM::ZeroOp::create(b, elemType);
    break;
  case PaddingKind::neg_inf:
    padding = arith::ConstantOp::create(
        b, b.getFloatAttr(elemType, APFloat::getInf(cast<FloatType>(elemType).getFloatSemantics(), true)));
    break;
  case PaddingKind::nan:
    padding = arith::ConstantOp::create(
        b, b.getFloatAttr(elemType, APFloat::getNaN(cast<FloatType>(elemType).getFloatSemantics())));
    break;
  }
  if (op.getPadding() != PaddingKind::zero && !isa<FloatType>(elemType))
    return op.emitError() << "padding " << stringifyPaddingKind(op.getPadding())
                          << " needs a float tile";

  SmallVector<Value> thread = threadCoords(layout);
  Type vecType = width > 1 ? VectorType::get({width}, elemType) : elemType;
  auto elementIndex = [&](int64_t r) { return viewIndex(layout, thread, r, offsets); };
  ArrayRef<int64_t> shape = op.getResult().getType().getShape();
  // Dimensions of stride 0 that the tile lies inside of (constant size and
  // offset): registers differing only along them read the same address with
  // the same bounds, so one load serves them (a stride-0 view broadcasting a
  // row's value over a tile: the fused decode merge's lse, 4 registers a
  // thread per split before).
  SmallVector<unsigned> broadcastDims;
  for (unsigned d = 0; d < shape.size(); ++d) {
    auto stride = constantInt(view.strides[d]), size = constantInt(view.sizes[d]);
    auto offset = constantInt(op.getOffsets()[d]);
    if (stride == 0 && size && offset && *offset >= 0 && *offset + shape[d] <= *size)
      broadcastDims.push_back(d);
  }
  // The register groups (one load each) that load: the first of each
  // address; slot[i]: the load group i reads.
  SmallVector<int64_t> starts, slot;
  {
    std::map<tilec::Coord, int64_t> first;
    for (int64_t r = 0; r < layout.numRegs(); r += width) {
      tilec::Coord key = layout.regCoord(r);
      for (unsigned d : broadcastDims)
        key[d] = 0;
      auto [it, isNew] = first.try_emplace(key, int64_t(starts.size()));
      if (isNew)
        starts.push_back(r);
      slot.push_back(it->second);
    }
  }
  // One load (a `width` vector, or a scalar) per group of registers.
  auto uncheckedLoads = [&] {
    SmallVector<Value> loaded;
    for (int64_t r : starts)
      loaded.push_back(LLVM::LoadOp::create(b, vecType, elementAddress(view, elementIndex(r)),
                                            width * elemBytes));
    return loaded;
  };
  auto checkedLoads = [&] {
    SmallVector<Value> loaded;
    for (int64_t r : starts) {
      SmallVector<Value> index = elementIndex(r);
      auto ifOp = scf::IfOp::create(b, TypeRange{vecType}, inBounds(view, index), /*withElse=*/true);
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&ifOp.getThenRegion().front());
      Value value = LLVM::LoadOp::create(b, vecType, elementAddress(view, index), width * elemBytes);
      scf::YieldOp::create(b, value);
      b.setInsertionPointToStart(&ifOp.getElseRegion().front());
      Value pad = padding;
      if (width > 1)
        pad = LLVM::ZeroOp::create(b, vecType).getResult();
      if (width > 1 && op.getPadding() != PaddingKind::zero) {
        Value vec = LLVM::UndefOp::create(b, vecType);
        for (int i = 0; i < width; ++i)
          vec = LLVM::InsertElementOp::create(b, vec, padding, i32(i));
        pad = vec;
      }
      scf::YieldOp::create(b, pad);
      loaded.push_back(ifOp.getResult(0));
    }
    return loaded;
  };
  // A tile wholly inside the view loads without per-element guards (see
  // lowerLoadToShared); the uniform test picks the version at run time.
  Value inside = copyBounds != CopyBounds::Chunk ? tileInsideView(view, offsets, shape) : Value();
  std::optional<int64_t> insideConst = inside ? getConstantIntValue(inside) : std::optional<int64_t>(0);
  SmallVector<Value> loaded;
  if (insideConst) {
    loaded = *insideConst ? uncheckedLoads() : checkedLoads();
  } else {
    auto ifOp = scf::IfOp::create(b, SmallVector<Type>(starts.size(), vecType), inside, /*withElse=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&ifOp.getThenRegion().front());
      scf::YieldOp::create(b, uncheckedLoads());
      b.setInsertionPointToStart(&ifOp.getElseRegion().front());
      scf::YieldOp::create(b, checkedLoads());
    }
    loaded.assign(ifOp.getResults().begin(), ifOp.getResults().end());
  }
  SmallVector<Value> values(layout.numRegs());
  for (int64_t r = 0, i = 0; r < layout.numRegs(); r += width, ++i) {
    Value vector = loaded[slot[i]];
    if (starts[slot[i]] != r) {
      // A copy of an earlier group (same address): the same values.
      for (int w = 0; w < width; ++w)
        values[r + w] = values[starts[slot[i]] + w];
      continue;
    }
    for (int w = 0; w < width; ++w)
      values[r + w] = width > 1 ? LLVM::ExtractElementOp::create(b, vector, i32(w)).getResult() : vector;
    // mma operands want element pairs packed in one register: remember the
    // loaded vector so packing them again costs nothing.
    if (width == 2)
      packedPairs[{values[r], values[r + 1]}] = vector;
  }
  regs[op.getResult()] = values;
  return success();
}

/// Register/lane bit swaps that lengthen each thread's runs along a row
/// (the last dimension) to 16 bytes, for 16-byte stores without shared
/// memory. The mma accumulator holds 2 consecutive columns per thread, the
/// next columns in lane bits and columns 8, 16, ... in register bits.
/// Swapping the lane bit of the next column with such a register bit is a
/// 2x2 transpose between lane pairs: one shuffle per pair of 32-bit words.
/// With lane bit x and words w0 (register bit 0) and w1 (bit 1):
///   send = x ? w0 : w1;  got = shfl.bfly(send);
///   w0' = x ? got : w0;  w1' = x ? w1 : got
/// and the swapped register bit moves down to extend the run.
void KernelLowering::widenRowRuns(LinearLayout &layout, SmallVector<Value> &values, Type elemType,
                                  int64_t maxRun) {
  if (layout.rank() != 2 || elemType.getIntOrFloatBitWidth() % 8 != 0)
    return;
  int64_t elemBytes = elemType.getIntOrFloatBitWidth() / 8;
  auto pureColumn = [](const tilec::Coord &c) { return c[0] == 0 && c[1] > 0; };
  auto runOf = [&](const LinearLayout &l) {
    int64_t run = 1;
    for (const auto &basis : l.regBases()) {
      if (basis != tilec::Coord{0, run})
        break;
      run *= 2;
    }
    return run;
  };
  int64_t run = runOf(layout);
  if (run * elemBytes != 4 || run * 2 > maxRun)
    return; // shuffles move 32-bit words of whole runs; the view caps the width
  int64_t wordRegs = run;
  unsigned wordBits = tilec::log2Exact(wordRegs);
  Type i32Type = b.getI32Type(), wordVec = VectorType::get({wordRegs}, elemType);
  // Pack the runs into words once.
  int64_t numWords = layout.numRegs() / wordRegs;
  SmallVector<Value> words(numWords);
  for (int64_t w = 0; w < numWords; ++w) {
    Value packed = values[w * wordRegs];
    if (wordRegs > 1) {
      packed = LLVM::UndefOp::create(b, wordVec);
      for (int64_t i = 0; i < wordRegs; ++i)
        packed = LLVM::InsertElementOp::create(b, packed, values[w * wordRegs + i], i32(i));
    }
    words[w] = packed.getType() == i32Type ? packed : LLVM::BitcastOp::create(b, i32Type, packed);
  }
  bool changed = false;
  while (run * elemBytes < hw.chunkBytes && run * 2 <= maxRun) {
    const auto &lanes = layout.laneBases();
    auto laneIt = llvm::find(lanes, tilec::Coord{0, run});
    if (laneIt == lanes.end())
      break;
    unsigned laneBit = laneIt - lanes.begin();
    unsigned runBits = tilec::log2Exact(run);
    std::optional<unsigned> regBit;
    for (unsigned j = runBits; j < layout.regBases().size(); ++j)
      if (pureColumn(layout.regBases()[j]) && layout.regBases()[j][1] > run) {
        regBit = j;
        break;
      }
    if (!regBit)
      break;
    unsigned wordBit = *regBit - wordBits;
    Value x = arith::CmpIOp::create(
        b, arith::CmpIPredicate::ne,
        arith::AndIOp::create(b, laneId, i32(int64_t(1) << laneBit)), i32(0));
    for (int64_t w = 0; w < numWords; ++w) {
      if (w & (int64_t(1) << wordBit))
        continue;
      int64_t w1 = w | (int64_t(1) << wordBit);
      Value send = arith::SelectOp::create(b, x, words[w], words[w1]);
      Value got = target.shuffleXor(b, send, int64_t(1) << laneBit);
      Value w0New = arith::SelectOp::create(b, x, got, words[w]);
      Value w1New = arith::SelectOp::create(b, x, words[w1], got);
      words[w] = w0New;
      words[w1] = w1New;
    }
    // The new layout: lane bit laneBit takes the register bit's column;
    // the register bit (now column `run`) moves down to position runBits.
    std::vector<tilec::Coord> regs = layout.regBases(), lanesNew = layout.laneBases();
    lanesNew[laneBit] = regs[*regBit];
    regs.erase(regs.begin() + *regBit);
    regs.insert(regs.begin() + runBits, tilec::Coord{0, run});
    // Word indices follow their register bits: bit wordBit moves to runBits - wordBits.
    unsigned to = runBits - wordBits;
    SmallVector<Value> moved(numWords);
    for (int64_t w = 0; w < numWords; ++w) {
      int64_t bit = (w >> wordBit) & 1;
      int64_t low = w & ((int64_t(1) << wordBit) - 1), high = w >> (wordBit + 1);
      int64_t rest = low | (high << wordBit); // w without bit wordBit
      int64_t restLow = rest & ((int64_t(1) << to) - 1), restHigh = rest >> to;
      moved[restLow | (bit << to) | (restHigh << (to + 1))] = words[w];
    }
    words = std::move(moved);
    layout = tilec::LinearLayout(layout.rank(), regs, lanesNew, layout.warpBases());
    run *= 2;
    changed = true;
  }
  if (!changed)
    return;
  // Unpack the words into per-element registers of the new layout.
  for (int64_t w = 0; w < numWords; ++w) {
    Value word = words[w];
    if (wordRegs == 1) {
      values[w] = word.getType() == elemType ? word : LLVM::BitcastOp::create(b, elemType, word);
      continue;
    }
    Value vec = LLVM::BitcastOp::create(b, wordVec, word);
    for (int64_t i = 0; i < wordRegs; ++i)
      values[w * wordRegs + i] = LLVM::ExtractElementOp::create(b, vec, i32(i));
  }
}

LogicalResult KernelLowering::lowerStore(StoreOp op) {
  TypedValue<RankedTensorType> value = op.getValue();
  if (isShared(value))
    return op.emitError() << "storing a shared-memory tile directly is not supported; the "
                             "layout pass keeps stored tiles in registers";
  const ViewInfo &view = views[op.getView()];
  LinearLayout layout = layoutOf(value);
  Type elemType = value.getType().getElementType();
  int64_t elemBytes = std::max<int64_t>(1, elemType.getIntOrFloatBitWidth() / 8);
  SmallVector<Value> offsets = llvm::map_to_vector(op.getOffsets(), [&](Value v) { return scalar(v); });
  int width = vectorWidth(layout, view, op.getOffsets(), elemType);
  SmallVector<Value> values = regs[value];
  // tile-allocate-shared gave a staging region to the stores the
  // smem-epilogue takes (smem::epilogueStaging).
  if (op->hasAttr(tilec::kSmemAttrName))
    return lowerStoreThroughShared(op);
  if (storeTranspose && width * elemBytes < hw.chunkBytes) {
    widenRowRuns(layout, values, elemType, viewWidthLimit(view, op.getOffsets(), elemType));
    width = vectorWidth(layout, view, op.getOffsets(), elemType);
  }

  // Replicated elements are written once: by the threads whose replicating
  // lane/warp bits are zero, from the first register holding them.
  Value owner = replicaOwner(layout);

  noteAccess(view, width * elemBytes);
  SmallVector<Value> thread = threadCoords(layout);
  Type vecType = width > 1 ? VectorType::get({width}, elemType) : elemType;
  for (int64_t r = 0; r < layout.numRegs(); r += width) {
    if (layout.regHolding(layout.regCoord(r)) != r)
      continue; // a duplicate of an earlier register
    SmallVector<Value> index = viewIndex(layout, thread, r, offsets);
    Value ok = inBounds(view, index);
    if (owner)
      ok = arith::AndIOp::create(b, ok, owner);
    Value toStore = values[r];
    if (width > 1) {
      toStore = LLVM::UndefOp::create(b, vecType);
      for (int i = 0; i < width; ++i)
        toStore = LLVM::InsertElementOp::create(b, toStore, values[r + i], i32(i));
    }
    storeGlobalIf(ok, elementAddress(view, index), toStore, width * elemBytes);
  }
  return success();
}

/// Atomic f32 adds of the elements a thread holds: one red per run of
/// `width` contiguous registers (the target's widest vector red the layout
/// and the view allow: scalar on sm_80, up to v4 on sm_90), predicated on the
/// view's bounds unless the whole tile is statically inside the view (then
/// unpredicated: ptxas turns each predicated red into a branch around it).
/// Replicated elements (lanes or warps holding copies) are added once, by
/// the copy whose replicating lane/warp bits are zero.
LogicalResult KernelLowering::lowerAtomicAdd(AtomicAddOp op) {
  auto value = cast<TypedValue<RankedTensorType>>(op.getValue());
  if (isShared(value))
    return op.emitError() << "atomic_add of a shared-memory tile is not supported; the "
                             "layout pass keeps added tiles in registers";
  const ViewInfo &view = views[op.getView()];
  LinearLayout layout = layoutOf(value);
  SmallVector<Value> offsets = llvm::map_to_vector(op.getOffsets(), [&](Value v) { return scalar(v); });
  SmallVector<Value> values = regs[value];
  Value owner = replicaOwner(layout);
  int width = std::min(vectorWidth(layout, view, op.getOffsets(), value.getType().getElementType()),
                       target.maxAtomicAddF32Width());
  noteAccess(view, 4 * width);
  Value inside = tileInsideView(view, offsets, value.getType().getShape(), 0);
  bool alwaysInside = matchPattern(inside, m_One());
  SmallVector<Value> thread = threadCoords(layout);
  for (int64_t r = 0; r < layout.numRegs(); r += width) {
    if (layout.regHolding(layout.regCoord(r)) != r)
      continue; // a duplicate of an earlier register
    SmallVector<Value> index = viewIndex(layout, thread, r, offsets);
    Value ok = alwaysInside ? Value() : inBounds(view, index);
    if (owner)
      ok = ok ? arith::AndIOp::create(b, ok, owner).getResult() : owner;
    target.atomicAddF32(b, elementAddress(view, index), ArrayRef(values).slice(r, width), ok);
  }
  return success();
}

/// `st.global` of `value` (`bytes` wide) at `address` where `ok` holds, as a
/// predicated instruction: an scf.if per store became a branch around each
/// one, which ptxas did not if-convert.
void KernelLowering::storeGlobalIf(Value ok, Value address, Value value, int64_t bytes) {
  int64_t words = bytes / 4;
  SmallVector<Value> operands = {address};
  std::string type, regs, constraints = "l";
  if (words >= 2) {
    Value asWords = LLVM::BitcastOp::create(b, VectorType::get({words}, b.getI32Type()), value);
    for (int64_t i = 0; i < words; ++i) {
      operands.push_back(LLVM::ExtractElementOp::create(b, asWords, i32(i)));
      regs += (i ? ", $" : "{$") + std::to_string(i + 1);
      constraints += ",r";
    }
    regs += "}";
    type = ".v" + std::to_string(words) + ".b32";
  } else {
    Type intType = b.getIntegerType(bytes * 8);
    // An i1 element is stored as a byte (0 or 1).
    operands.push_back(value.getType().isInteger(1)
                           ? arith::ExtUIOp::create(b, intType, value).getResult()
                           : LLVM::BitcastOp::create(b, intType, value).getResult());
    regs = "$1";
    type = bytes == 4 ? ".b32" : bytes == 2 ? ".b16" : ".b8";
    constraints += bytes == 4 ? ",r" : bytes == 2 ? ",h" : ",r";
    if (bytes == 1) // PTX has no 8-bit registers: widen
      operands.back() = arith::ExtUIOp::create(b, b.getI32Type(), operands.back());
  }
  operands.push_back(arith::ExtUIOp::create(b, b.getI32Type(), ok));
  constraints += ",r";
  std::string pred = "$" + std::to_string(operands.size() - 1);
  std::string text = "{ .reg .pred p; setp.ne.b32 p, " + pred + ", 0; @p st.global" + type + " [$0], " +
                     regs + "; }";
  inlinePtx(TypeRange{}, operands, text, constraints);
}

/// FlashAttention-2's epilogue: a register tile whose threads hold only a few
/// bytes of each row (the mma accumulator: 4 of f16 O) is written to shared
/// memory as it is held, then read back and stored as whole 16-byte chunks
/// of rows, consecutive threads along a row (coalesced, a quarter of the
/// instructions). Where it applies is smem::epilogueStaging's rule
/// (../AllocateShared.h); tile-allocate-shared gave the store its region.
LogicalResult KernelLowering::lowerStoreThroughShared(StoreOp op) {
  TypedValue<RankedTensorType> value = op.getValue();
  const ViewInfo &view = views[op.getView()];
  LinearLayout layout = layoutOf(value);
  std::optional<smem::Staging> staging = smem::epilogueStaging(op, hw);
  FailureOr<SharedTile> region =
      regionOf(op, staging ? std::optional<smem::Geometry>(*staging) : std::nullopt);
  if (failed(region))
    return failure();
  SharedTile tile = *region;
  int64_t rows = tile.rows, elemBytes = tile.elemBytes;
  int64_t chunkElems = hw.chunkBytes / elemBytes;
  int64_t chunksPerRow = tile.cols / chunkElems;
  int run = staging->run;
  int64_t mask = (int64_t(1) << tile.swizzleBits) - 1;

  // The drain and barrier before are tile-insert-waits'; the one between
  // the writes and the reads below is the op's own (the pass models it).
  SmallVector<Value> thread = threadCoords(layout);
  SmallVector<Value> &values = regs[value];
  // Addresses are computed here, not hoisted: they would be live (and
  // spilled) through the loops before the epilogue.
  std::map<ChunkBaseKey, Value> epilogueBases;
  localChunkBases = &epilogueBases;
  llvm::scope_exit restore([&] { localChunkBases = nullptr; });
  storeRegisterRuns(tile, layout, values, thread, run);
  target.barrier(b);

  // Whole chunks, consecutive threads along a row.
  int64_t threads = numWarps * kWarpSize, totalChunks = rows * chunksPerRow;
  Value rowInPass = arith::DivUIOp::create(b, threadId, i32(chunksPerRow));
  Value chunkInRow = arith::RemUIOp::create(b, threadId, i32(chunksPerRow));
  bool wholeRows = threads % chunksPerRow == 0 && (threads / chunksPerRow) % (mask + 1) == 0;
  Type chunkType = VectorType::get({4}, b.getI32Type());
  Value rowOffset = scalar(op.getOffsets()[0]), colOffset = scalar(op.getOffsets()[1]);
  // With whole rows per pass, a thread's global address moves by a fixed
  // number of rows from one pass to the next: one add, not a multiply.
  Value passAddress, passStep;
  for (int64_t first = 0; first < totalChunks; first += threads) {
    Value chunkId = arith::AddIOp::create(b, threadId, i32(first));
    Value row = wholeRows ? arith::AddIOp::create(b, rowInPass, i32(first / chunksPerRow)).getResult()
                          : arith::DivUIOp::create(b, chunkId, i32(chunksPerRow)).getResult();
    Value chunk = wholeRows ? chunkInRow : arith::RemUIOp::create(b, chunkId, i32(chunksPerRow)).getResult();
    Value src = wholeRows ? sharedChunkAddress(tile, rowInPass, first / chunksPerRow, chunkInRow, 0)
                          : sharedElementAddress(tile, row, arith::MulIOp::create(b, chunk, i32(chunkElems)));
    Value ok = arith::CmpIOp::create(b, arith::CmpIPredicate::ult, chunkId, i32(totalChunks));
    if (first + threads > totalChunks) {
      // A partial last pass: threads without a chunk read the tile's first
      // one (any address inside the scratch) and store nothing.
      Value firstChunk = sharedChunkAddress(tile, i32(0), 0, i32(0), 0);
      src = LLVM::SelectOp::create(b, ok, src, firstChunk);
    }
    Value globalRow = arith::AddIOp::create(b, row, rowOffset);
    Value globalCol = arith::AddIOp::create(b, arith::MulIOp::create(b, chunk, i32(chunkElems)), colOffset);
    ok = arith::AndIOp::create(b, ok, inBounds(view, {globalRow, globalCol}));
    Value data = LLVM::LoadOp::create(b, chunkType, src, hw.chunkBytes);
    Value address;
    if (wholeRows && passAddress) {
      address = passAddress = LLVM::GEPOp::create(b, ptrType(kGlobalAddressSpace), view.elementType,
                                                  passAddress, ValueRange{passStep});
    } else {
      // The address is formed even where no store is made (the predicate
      // guards the access, not the arithmetic): no access happens there.
      address = elementAddress(view, {globalRow, globalCol});
      if (wholeRows) {
        passAddress = address;
        passStep = arith::MulIOp::create(b, view.strides[0], i64(threads / chunksPerRow));
      }
    }
    storeGlobalIf(ok, address, data, hw.chunkBytes);
  }
  noteAccess(view, hw.chunkBytes);
  return success();
}

/// tile.arrive (TargetInfo::arriveLast): thread 0 counts the program's
/// arrival; the result is uniform over the program.
LogicalResult KernelLowering::lowerArrive(ArriveOp op) {
  Value leader = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, threadId, i32(0));
  Value expectedMinusOne = arith::SubIOp::create(b, scalar(op.getExpected()), i32(1));
  mapping.map(op.getLast(), target.arriveLast(b, scalar(op.getCounter()), expectedMinusOne, leader));
  return success();
}

/// tile.wait_turn (TargetInfo::waitTurn): every thread polls, so each warp
/// is ordered after the turn's passes by its own acquire (no barrier).
LogicalResult KernelLowering::lowerWaitTurn(WaitTurnOp op) {
  target.waitTurn(b, scalar(op.getCounter()), scalar(op.getTurn()), scalar(op.getSeen()));
  return success();
}

/// tile.pass_turn (TargetInfo::passTurn): thread 0 passes for the program,
/// after a block barrier. (Each warp passing for itself, with waits for
/// turn x num_warps, measured slower: 254 against 275 TFLOP/s in the d128
/// ordered backward, H200, session 16 run 3 -- a release fence per warp.)
LogicalResult KernelLowering::lowerPassTurn(PassTurnOp op) {
  Value leader = arith::CmpIOp::create(b, arith::CmpIPredicate::eq, threadId, i32(0));
  target.passTurn(b, scalar(op.getCounter()), leader);
  return success();
}

/// tile.wait_prior_kernels (TargetInfo::waitPriorKernels): every thread
/// waits (griddepcontrol.wait is per thread); nothing on a target without
/// it. (run() marks the kernel for programmatic launch: waitsPriorKernels.)
LogicalResult KernelLowering::lowerWaitPriorKernels(WaitPriorKernelsOp) {
  if (target.hasProgrammaticLaunch())
    target.waitPriorKernels(b);
  return success();
}

LogicalResult KernelLowering::lowerLaunchDependents(LaunchDependentsOp) {
  if (target.hasProgrammaticLaunch())
    target.launchDependents(b);
  return success();
}

/// One element read by every thread of the program (a uniform load: the
/// threads of a warp hit one address, one transaction). A buffer the kernel
/// never writes is read through the non-coherent path (ld.global.nc, via
/// LLVM's !invariant.load), which cu_seqlens and block tables are.
LogicalResult KernelLowering::lowerLoadScalar(LoadScalarOp op) {
  Type type = op.getType();
  BlockArgument root = pointerRoot(op.getPtr());
  bool readOnly = !op.getVolatile_() && root && isa<func::FuncOp>(root.getOwner()->getParentOp()) &&
                  !storesUntraced && !waitsPriorKernels && !storedParams.contains(root.getArgNumber());
  unsigned bytes = std::max<unsigned>(1, type.getIntOrFloatBitWidth() / 8);
  mapping.map(op.getResult(), LLVM::LoadOp::create(b, type, scalar(op.getPtr()), bytes,
                                                   /*isVolatile=*/op.getVolatile_(),
                                                   /*isNonTemporal=*/false,
                                                   /*isInvariant=*/readOnly));
  return success();
}

} // namespace tilec::nvvm
