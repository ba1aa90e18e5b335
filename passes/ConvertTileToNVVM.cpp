//===- ConvertTileToNVVM.cpp - layout-assigned tile IR -> LLVM + NVVM -----===//
//
// After tile-partition-warps every tile carries a layout. This pass lowers a
// kernel by walking its body once, in order, and emitting for each op what
// one thread does:
//
//   register tile (#tile.linear)  ->  the list of scalars this thread holds,
//                                      register r at coordinates
//                                      regCoord(r) ^ threadCoord(lane, warp)
//   shared tile (#tile.shared)    ->  a region of dynamic shared memory,
//                                      row-major, 16-byte chunks XOR-swizzled
//                                      with the row so ldmatrix rows hit
//                                      distinct bank groups
//
// Elementwise ops become one scalar op per register; tile.reduce an in-thread
// combine plus butterfly shuffles over the lanes that span the reduced axis;
// tile.dot mma.sync m16n8k16 with B fragments read by ldmatrix(.trans);
// shared tiles are filled by cp.async (16-byte copies, zero-filled beyond
// the view) in the regions tile-allocate-shared gave them; the commits,
// waits and barriers are ops tile-insert-waits placed, one instruction each.
// Scalar arith/scf stay for the upstream conversions of the tile-to-nvvm
// pipeline.
//
// This file holds the pass, the kernel's setup (run) and the dispatch by op
// (lowerOp); each op family is lowered in its own file of ConvertTileToNVVM/:
//
//   Lowering.h         the per-kernel state every file shares (KernelLowering)
//   Addressing.cpp     thread coordinates, global/shared addresses, widths
//   SharedMemory.cpp   shared regions (read from tile-allocate-shared's
//                      tile.smem) and element reads/writes; the cp.async
//                      commits, waits and barriers are tile-insert-waits'
//                      ops (../InsertWaits.cpp), lowered in lowerOp
//   AsyncCopy.cpp      tile.load into shared tiles (cp.async, commit groups)
//   LoadStore.cpp      register-tile loads/stores, atomics, scalar loads,
//                      tile.arrive, tile.wait_turn, tile.pass_turn,
//                      tile.wait_prior_kernels, tile.launch_dependents
//   Dot.cpp            tile.dot: ldmatrix + mma.sync m16n8k16 (MMAv2)
//   Reduce.cpp         tile.reduce: in-thread trees + lane shuffles
//   ConvertLayout.cpp  tile.convert_layout, expand_dims/broadcast/trans
//   Elementwise.cpp    elementwise ops, GPU math, the unit-rescale vote
//   ControlFlow.cpp    scf.for (prefetch rings, carried addresses), scf.if
//   TargetInfo.h       the per-architecture primitives they emit through
//                      (TargetInfoSm80.cpp, TargetInfoSm90.cpp), selected by
//                      `arch`; hardware numbers in tilec/Target/TargetDescription.h
//
//===----------------------------------------------------------------------===//
#include "ConvertTileToNVVM/Lowering.h"

#include "llvm/ADT/StringSwitch.h"

namespace tilec {
#define GEN_PASS_DEF_CONVERTTILETONVVM
#include "passes/Passes.h.inc"
} // namespace tilec

namespace tilec::nvvm {

LogicalResult KernelLowering::lowerOp(Operation *op) {
  b.setLoc(op->getLoc());
  if (auto pid = dyn_cast<ProgramIdOp>(op)) {
    Value v;
    switch (pid.getAxis()) {
    case 0: {
      // The GPU starts blocks roughly in blockIdx order. Handing out axis 0
      // from the top makes the last row blocks — the longest under a causal
      // mask — start first, so the tail of the grid is short blocks
      // (FlashAttention-2's ordering). Programs are independent, so any
      // bijection is correct.
      Value block = target.blockId(b, 0);
      Value count = target.gridDim(b, 0);
      v = arith::SubIOp::create(b, arith::SubIOp::create(b, count, i32(1)), block);
      break;
    }
    default: v = target.blockId(b, pid.getAxis()); break;
    }
    mapping.map(pid.getResult(), v);
    return success();
  }
  if (auto warp = dyn_cast<WarpIdOp>(op)) {
    mapping.map(warp.getResult(), warpId);
    return success();
  }
  if (auto num = dyn_cast<NumProgramsOp>(op)) {
    mapping.map(num.getResult(), target.gridDim(b, num.getAxis()));
    return success();
  }
  if (auto addptr = dyn_cast<AddPtrOp>(op)) {
    if (auto it = pointerParam.find(addptr.getPtr()); it != pointerParam.end()) {
      auto [arg, offset] = it->second;
      std::optional<int64_t> delta = constantInt(addptr.getOffset());
      int64_t elemBytes = std::max<int64_t>(
          1, addptr.getPtr().getType().getPointeeType().getIntOrFloatBitWidth() / 8);
      pointerParam[addptr.getResult()] = {
          arg, offset >= 0 && delta ? offset + *delta * elemBytes : int64_t(-1)};
    }
    Value offset = scalar(addptr.getOffset());
    mapping.map(addptr.getResult(),
                LLVM::GEPOp::create(b, ptrType(kGlobalAddressSpace),
                                    addptr.getPtr().getType().getPointeeType(),
                                    scalar(addptr.getPtr()), ValueRange{offset}));
    return success();
  }
  if (auto view = dyn_cast<ViewOp>(op)) {
    ViewInfo info;
    info.base = scalar(view.getBase());
    if (auto it = pointerParam.find(view.getBase()); it != pointerParam.end()) {
      info.arg = int(it->second.first);
      info.argOffset = it->second.second;
    }
    info.elementType = view.getResult().getType().getElementType();
    for (Value size : view.getSizes())
      info.sizes.push_back(scalar(size));
    for (Value stride : view.getStrides())
      info.strides.push_back(scalar(stride));
    if (std::optional<ArrayRef<int64_t>> block = view.getBlock())
      info.block.assign(block->begin(), block->end());
    views[view.getResult()] = info;
    return success();
  }
  if (auto load = dyn_cast<LoadScalarOp>(op))
    return lowerLoadScalar(load);
  if (auto load = dyn_cast<LoadOp>(op))
    return lowerLoad(load);
  if (auto add = dyn_cast<AtomicAddOp>(op))
    return lowerAtomicAdd(add);
  if (auto arrive = dyn_cast<ArriveOp>(op))
    return lowerArrive(arrive);
  if (auto wait = dyn_cast<WaitTurnOp>(op))
    return lowerWaitTurn(wait);
  if (auto pass = dyn_cast<PassTurnOp>(op))
    return lowerPassTurn(pass);
  if (auto wait = dyn_cast<WaitPriorKernelsOp>(op))
    return lowerWaitPriorKernels(wait);
  if (auto launch = dyn_cast<LaunchDependentsOp>(op))
    return lowerLaunchDependents(launch);
  if (auto store = dyn_cast<StoreOp>(op))
    return lowerStore(store);
  if (auto dot = dyn_cast<DotOp>(op))
    return lowerDot(dot);
  if (auto reduce = dyn_cast<ReduceOp>(op))
    return lowerReduce(reduce);
  if (auto forOp = dyn_cast<scf::ForOp>(op))
    return lowerFor(forOp);
  if (auto ifOp = dyn_cast<scf::IfOp>(op))
    return lowerIf(ifOp);
  if (auto convert = dyn_cast<ConvertLayoutOp>(op))
    return lowerConvert(convert);
  if (auto iota = dyn_cast<IotaOp>(op)) {
    LinearLayout layout = layoutOf(iota.getResult());
    SmallVector<Value> thread = threadCoords(layout);
    SmallVector<Value> values;
    for (int64_t r = 0; r < layout.numRegs(); ++r)
      values.push_back(elementCoords(layout, thread, r)[0]);
    regs[iota.getResult()] = values;
    return success();
  }
  if (auto splat = dyn_cast<SplatOp>(op)) {
    regs[splat.getResult()] =
        SmallVector<Value>(layoutOf(splat.getResult()).numRegs(), scalar(splat.getValue()));
    return success();
  }
  if (auto expand = dyn_cast<ExpandDimsOp>(op)) {
    unsigned axis = expand.getAxis();
    return registerRemap(expand.getInput(), expand.getResult(),
                         [axis](tilec::Coord c) {
                           c.erase(c.begin() + axis);
                           return c;
                         },
                         op);
  }
  if (auto broadcast = dyn_cast<BroadcastOp>(op)) {
    ArrayRef<int64_t> inShape = broadcast.getInput().getType().getShape();
    std::vector<int64_t> shape(inShape.begin(), inShape.end());
    return registerRemap(broadcast.getInput(), broadcast.getResult(),
                         [shape](tilec::Coord c) {
                           for (size_t d = 0; d < c.size(); ++d)
                             if (shape[d] == 1)
                               c[d] = 0;
                           return c;
                         },
                         op);
  }
  if (auto trans = dyn_cast<TransOp>(op); trans && isShared(trans.getInput())) {
    // A view: the same stored tile, read transposed (ldmatrix.trans).
    if (!isShared(trans.getResult()) ||
        isTransposedShared(trans.getResult()) == isTransposedShared(trans.getInput()))
      return op->emitError() << "tile.trans of a shared tile must give the transposed shared "
                                "view (#tile.shared<..., transposed>); run tile-partition-warps";
    SharedTile tile = sharedTiles[trans.getInput()];
    tile.transposed = !tile.transposed;
    sharedTiles[trans.getResult()] = tile;
    return success();
  }
  if (auto trans = dyn_cast<TransOp>(op))
    return registerRemap(trans.getInput(), trans.getResult(),
                         [](tilec::Coord c) { return tilec::Coord{c[1], c[0]}; }, op);
  if (auto constant = dyn_cast<arith::ConstantOp>(op)) {
    if (auto type = dyn_cast<RankedTensorType>(constant.getType())) {
      auto splat = dyn_cast<SplatElementsAttr>(constant.getValue());
      if (!splat)
        return op->emitError() << "only splat tile constants are supported on the GPU";
      Value value = arith::ConstantOp::create(b, cast<TypedAttr>(splat.getSplatValue<Attribute>()));
      regs[constant.getResult()] = SmallVector<Value>(layoutOf(constant.getResult()).numRegs(), value);
      return success();
    }
  }
  if (isa<func::ReturnOp>(op)) {
    LLVM::ReturnOp::create(b, ValueRange{});
    return success();
  }
  // tile-insert-waits' schedule, one instruction each.
  if (isa<AsyncCommitOp>(op)) {
    target.asyncCommitGroup(b);
    return success();
  }
  if (auto wait = dyn_cast<AsyncWaitOp>(op)) {
    target.asyncWait(b, wait.getPending());
    return success();
  }
  if (isa<BarrierOp>(op)) {
    target.barrier(b);
    return success();
  }
  bool touchesTiles = llvm::any_of(op->getOperandTypes(), [](Type t) { return isa<RankedTensorType>(t); }) ||
                      llvm::any_of(op->getResultTypes(), [](Type t) { return isa<RankedTensorType>(t); });
  if (touchesTiles) {
    if (op->hasTrait<OpTrait::Elementwise>() && op->getNumResults() == 1)
      return lowerElementwise(op);
    return op->emitError() << "'" << op->getName() << "' on tiles has no GPU lowering";
  }
  if (op->getNumRegions() != 0)
    return op->emitError() << "'" << op->getName() << "' has no GPU lowering";
  // Scalar math the NVPTX backend cannot expand (exp, log, tanh, sin, cos)
  // goes to the approximate hardware instructions, math it cannot select at
  // all is refused (lowerMath); everything else is cloned as is.
  SmallVector<Value> operands = llvm::map_to_vector(op->getOperands(), [&](Value v) { return scalar(v); });
  SmallVector<Value> mathResults;
  if (failed(lowerMath(op, operands, mathResults)))
    return failure();
  if (!mathResults.empty()) {
    mapping.map(op->getResult(0), mathResults[0]);
    return success();
  }
  b.clone(*op, mapping);
  return success();
}

LogicalResult KernelLowering::run() {
  if (auto attr = func->getAttrOfType<IntegerAttr>(tilec::kNumWarpsAttrName))
    numWarps = attr.getInt();
  else
    return func.emitError() << "kernel has no tile.num_warps: run tile-partition-warps first";
  if (failed(tilec::checkNumWarps(func, tilec::kNumWarpsAttrName, numWarps)))
    return failure();
  // Layouts written by hand (or by a run of tile-partition-warps with
  // another num-warps) must spread over exactly this many warps: the
  // lowering indexes registers by the layout and threads by numWarps.
  int64_t warpBits = llvm::Log2_64(numWarps);
  WalkResult layouts = func.walk([&](Operation *op) {
    for (Value result : op->getResults()) {
      auto type = dyn_cast<RankedTensorType>(result.getType());
      auto attr = type ? dyn_cast_or_null<LinearLayoutAttr>(type.getEncoding()) : nullptr;
      if (attr && int64_t(toLinearLayout(attr).warpBases().size()) != warpBits) {
        op->emitError() << "the layout of this result has "
                        << toLinearLayout(attr).warpBases().size() << " warp bases ("
                        << (int64_t(1) << toLinearLayout(attr).warpBases().size())
                        << " warps), but the kernel has tile.num_warps = " << numWarps;
        return WalkResult::interrupt();
      }
    }
    return WalkResult::advance();
  });
  if (layouts.wasInterrupted())
    return failure();
  // Where shared tiles live is decided before (../AllocateShared.cpp), and
  // so are the commits, waits and barriers of the copies (../InsertWaits.cpp).
  if (!func->getAttrOfType<IntegerAttr>(tilec::kSharedBytesAttrName))
    return func.emitError() << "kernel has no " << tilec::kSharedBytesAttrName
                            << ": run tile-allocate-shared first";
  bool copies = false, commits = false;
  func.walk([&](Operation *op) {
    if (auto load = dyn_cast<LoadOp>(op))
      copies |= isShared(load.getResult());
    commits |= isa<AsyncCommitOp>(op);
  });
  if (copies && !commits)
    return func.emitError() << "kernel copies into shared memory but has no tile.async_commit: "
                               "run tile-insert-waits first";
  // The signature. The kernel's ABI (names, element types, grid, ...) is the
  // driver's: it writes the launch manifest from the attributes this leaves
  // on the llvm.func (below; names in dialects/Tile/TileAttrNames.h).
  SmallVector<Type> argTypes;
  for (auto [i, type] : llvm::enumerate(func.getArgumentTypes())) {
    if (isa<PtrType>(type))
      argTypes.push_back(ptrType(kGlobalAddressSpace));
    else if (type.isInteger(32) || type.isInteger(64) || type.isF32())
      argTypes.push_back(type);
    else
      return func.emitError() << "kernel parameter " << i << " has type " << type
                              << "; kernels take !tile.ptr, i32, i64 or f32";
  }
  if (func.getNumResults() != 0)
    return func.emitError() << "kernels return nothing; write results with tile.store";

  auto written = [&](BlockArgument root) {
    if (root && root.getOwner() == &func.getBody().front())
      storedParams.insert(root.getArgNumber());
    else
      storesUntraced = true;
  };
  func.walk([&](Operation *op) {
    if (auto store = dyn_cast<StoreOp>(op)) {
      auto view = store.getView().getDefiningOp<ViewOp>();
      written(view ? pointerRoot(view.getBase()) : BlockArgument());
    } else if (auto arrive = dyn_cast<ArriveOp>(op)) {
      // A counter changes under the kernel (other programs' arrivals): not
      // read-only. (What programs write before arriving is stored through
      // tile.store, so its parameters are in storedParams already.)
      written(pointerRoot(arrive.getCounter()));
    } else if (auto pass = dyn_cast<PassTurnOp>(op)) {
      written(pointerRoot(pass.getCounter())); // as tile.arrive's counter
    } else if (isa<WaitPriorKernelsOp>(op)) {
      waitsPriorKernels = target.hasProgrammaticLaunch();
    }
  });

  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPoint(func);
  auto kernel = LLVM::LLVMFuncOp::create(
      b, func.getName(), LLVM::LLVMFunctionType::get(LLVM::LLVMVoidType::get(ctx), argTypes));
  b.setInsertionPointToStart(kernel.addEntryBlock(b));
  for (auto [oldArg, newArg] : llvm::zip(func.getArguments(), kernel.getArguments())) {
    mapping.map(oldArg, newArg);
    if (isa<PtrType>(oldArg.getType()))
      pointerParam[oldArg] = {oldArg.getArgNumber(), 0};
  }
  threadId = target.threadIdX(b);
  laneId = arith::RemUIOp::create(b, threadId, i32(kWarpSize));
  warpId = arith::DivUIOp::create(b, threadId, i32(kWarpSize));
  smemBase = LLVM::AddressOfOp::create(b, smemGlobal);
  // Thread-invariant address math is emitted before this marker, in the
  // entry block, so every loop sees it computed once.
  prologueEnd = LLVM::UndefOp::create(b, b.getI32Type());

  for (Operation &op : func.getBody().front())
    if (failed(lowerOp(&op)))
      return failure();

  // What the driver's manifest needs (TileAttrNames.h): the kernel's own
  // tile.* attributes (arg_names, grid, variant, mask, num_warps, ...) carried
  // over, and per parameter its positivity, its pointee and -- for pointers
  // accessed more than an element at a time (16-byte cp.async and stores,
  // vector loads) -- that width, which the runtime checks the pointer's
  // alignment against instead of the GPU faulting on a misaligned address.
  for (NamedAttribute attr : func->getDiscardableAttrs())
    if (attr.getName() != kKernelAttrName && attr.getName().strref().starts_with("tile."))
      kernel->setAttr(attr.getName(), attr.getValue());
  for (auto [i, type] : llvm::enumerate(func.getArgumentTypes())) {
    if (func.getArgAttr(i, kPositiveAttrName))
      kernel.setArgAttr(i, kPositiveAttrName, UnitAttr::get(ctx));
    auto ptr = dyn_cast<PtrType>(type);
    if (!ptr)
      continue;
    kernel.setArgAttr(i, tilec::kElemAttrName, TypeAttr::get(ptr.getPointeeType()));
    // Accessed means through a view, whose elements are ints or floats.
    if (auto it = accessBytes.find(i); it != accessBytes.end()) {
      int64_t elem = std::max<int64_t>(1, ptr.getPointeeType().getIntOrFloatBitWidth() / 8);
      if (it->second > elem)
        kernel.setArgAttr(i, tilec::kAlignAttrName, b.getI64IntegerAttr(it->second));
    }
  }
  if (waitsPriorKernels)
    kernel->setAttr(kProgrammaticLaunchAttrName, UnitAttr::get(ctx));
  int64_t threads = numWarps * kWarpSize;
  kernel->setAttr(NVVM::NVVMDialect::getKernelFuncAttrName(), UnitAttr::get(ctx));
  kernel->setAttr(NVVM::NVVMDialect::getMaxntidAttrName(),
                  b.getDenseI32ArrayAttr({int32_t(threads), 1, 1}));
  func.erase();
  return success();
}

} // namespace tilec::nvvm

namespace {

using namespace tilec::nvvm;

struct ConvertTileToNVVMPass final : tilec::impl::ConvertTileToNVVMBase<ConvertTileToNVVMPass> {
  using Base::Base;
  void runOnOperation() override {
    ModuleOp module = getOperation();
    // --arch picks the target implementation (TargetInfo.h) and its
    // hardware numbers.
    std::string unsupported;
    std::unique_ptr<TargetInfo> target = createTargetInfo(arch, unsupported);
    if (!target) {
      module.emitError() << unsupported;
      return signalPassFailure();
    }
    SmallVector<func::FuncOp> kernels;
    for (auto func : module.getOps<func::FuncOp>())
      if (func->hasAttr(kKernelAttrName))
        kernels.push_back(func);
    if (kernels.empty())
      return;
    OpBuilder builder(module.getBodyRegion());
    builder.setInsertionPointToStart(module.getBody());
    auto smem = module.lookupSymbol<LLVM::GlobalOp>(kSharedSymbol);
    if (!smem)
      smem = LLVM::GlobalOp::create(builder, module.getLoc(),
                                    LLVM::LLVMArrayType::get(builder.getI8Type(), 0),
                                    /*isConstant=*/false, LLVM::Linkage::External, kSharedSymbol,
                                    Attribute(), target->description().sharedAlignment,
                                    kSharedAddressSpace);
    std::optional<CopyBounds> bounds = llvm::StringSwitch<std::optional<CopyBounds>>(copyBounds)
                                           .Case("chunk", CopyBounds::Chunk)
                                           .Case("tile", CopyBounds::Tile)
                                           .Case("row", CopyBounds::Row)
                                           .Default(std::nullopt);
    if (!bounds) {
      module.emitError() << "copy-bounds must be chunk, tile or row, got '" << copyBounds << "'";
      return signalPassFailure();
    }
    std::optional<XorRingPhases> xorPhases = llvm::StringSwitch<std::optional<XorRingPhases>>(xorRingPhases)
                                                 .Case("none", XorRingPhases::None)
                                                 .Case("trans", XorRingPhases::Trans)
                                                 .Case("non-trans", XorRingPhases::NonTrans)
                                                 .Case("all", XorRingPhases::All)
                                                 .Case("auto", XorRingPhases::Auto)
                                                 .Default(std::nullopt);
    if (!xorPhases) {
      module.emitError() << "xor-ring-phases must be auto, none, trans, non-trans or all, got '"
                         << xorRingPhases << "'";
      return signalPassFailure();
    }
    for (func::FuncOp func : kernels)
      if (failed(KernelLowering(func, smem, *target, skipUnitRescale, *bounds,
                                storeTranspose, carryRingAddresses, *xorPhases)
                     .run()))
        return signalPassFailure();
    module->setAttr(tilec::kTargetAttrName, builder.getStringAttr(arch));
  }
};

} // namespace
