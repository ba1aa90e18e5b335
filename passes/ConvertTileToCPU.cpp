//===- ConvertTileToCPU.cpp - tile ops -> linalg/tensor/memref on the host ===//
//
// convert-tile-to-cpu: the first step of the `tile-to-cpu` pipeline, which
// runs tile kernels in-process (ExecutionEngine) so their numerics can be
// checked without a GPU. Tiles stay tensors here; upstream bufferization and
// the standard CPU lowering take it from there.
//
//   !tile.ptr<T>            -> memref<?xT> (the whole host buffer, offset 0)
//   tile.addptr / tile.view -> index arithmetic, remembered per SSA value
//   tile.load               -> linalg.generic whose body bounds-checks each
//                              element and reads memory only when in bounds
//   tile.store              -> loop nest that writes only in-bounds elements
//   tile.load_scalar        -> memref.load, guarded by the buffer's size
//   tile.arrive             -> memref.load + store of the count (programs
//                              run in sequence), true where it reaches
//                              `expected` (then the count is reset to 0)
//   tile.wait_turn          -> a check that the turn has come (programs run
//                              in sequence, in the GPU's start order); a
//                              fault where it has not
//   tile.pass_turn          -> memref.load + store of the count + 1
//   tile.wait_prior_kernels, tile.launch_dependents, tile.barrier -> nothing
//                              (kernels and programs run one after another)
//   tile.dot                -> linalg.generic: extf to f32, mulf, addf in f32
//   tile.reduce             -> linalg.generic reduction from -inf / 0
//   iota/splat/expand_dims/broadcast/trans -> linalg / tensor.expand_shape
//   program_id/num_programs -> extra i32 parameters of the kernel
//
// Each kernel @k gets @__tilec_grid_k(params..., gx, gy, gz: i32) that calls
// it once per program id, z outermost, x innermost and counting down: the
// order the GPU starts them in (the NVVM lowering hands program_id(0) out
// from the top), which tile.wait_turn's turns follow.
//
// An element inside its view but outside its argument's buffer (the memref's
// size, which the runner sets from the caller's buffer; INT64_MAX when the
// caller gave none) is not accessed: the access is recorded in
// @__tilec_fault (argument index + 1, element index) and the runner reports
// it as an error after the kernel returns.
//
//===----------------------------------------------------------------------===//
#include "dialects/Tile/TileDialect.h"
#include "tilec/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/AffineMap.h"

#include <limits>

namespace tilec {
#define GEN_PASS_DEF_CONVERTTILETOCPU
#include "passes/Passes.h.inc"
} // namespace tilec

using namespace mlir;

namespace {

/// A global pointer on the host: the kernel's buffer and an element offset.
struct HostPtr {
  Value memref;
  Value offset; // index
};

constexpr llvm::StringLiteral kFaultSymbol = "__tilec_fault";

/// A view: pointer plus per-dimension sizes and strides, all index.
struct HostView {
  HostPtr base;
  SmallVector<Value> sizes, strides;
  SmallVector<int64_t> block; // tile.view's block (empty: plain strides)
};

class KernelLowering {
public:
  KernelLowering(func::FuncOp fn) : fn(fn), b(fn.getContext()) {}

  LogicalResult run();

private:
  func::FuncOp fn;
  OpBuilder b;
  DenseMap<Value, HostPtr> ptrs;
  DenseMap<Value, HostView> views;
  Value gridArgs[6]; // program ids x, y, z, then grid sizes x, y, z
  DenseMap<Value, Value> bufferLength; // pointer argument -> elements (index)
  /// Pointer argument -> i1: no size was given (INT64_MAX). Then nothing is
  /// known below the pointer either (a negative stride may legitimately
  /// reach there), and the lower bound is not checked.
  DenseMap<Value, Value> bufferUnsized;
  Value fault;                         // memref<2xi64> @__tilec_fault

  /// Whether linear element `addr` lies in `view`'s argument buffer; where
  /// it does not, records the fault (only when `inView` holds).
  Value inBuffer(Location loc, const HostView &view, Value inView, Value addr) {
    Value length = bufferLength.lookup(view.base.memref);
    Value aboveStart = arith::OrIOp::create(
        b, loc, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, addr, cstIndex(loc, 0)),
        bufferUnsized.lookup(view.base.memref));
    Value ok = arith::AndIOp::create(
        b, loc, aboveStart, arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, addr, length));
    Value bad = arith::AndIOp::create(
        b, loc, inView,
        arith::XOrIOp::create(b, loc, ok, arith::ConstantIntOp::create(b, loc, 1, 1)));
    Value usable = arith::AndIOp::create(b, loc, inView, ok);
    auto ifOp = scf::IfOp::create(b, loc, bad, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    unsigned arg = cast<BlockArgument>(view.base.memref).getArgNumber();
    memref::StoreOp::create(b, loc, arith::ConstantIntOp::create(b, loc, arg + 1, 64), fault,
                            ValueRange{cstIndex(loc, 0)});
    memref::StoreOp::create(b, loc, arith::IndexCastOp::create(b, loc, b.getI64Type(), addr), fault,
                            ValueRange{cstIndex(loc, 1)});
    return usable;
  }

  Value toIndex(Location loc, Value v) {
    if (v.getType().isIndex())
      return v;
    return arith::IndexCastOp::create(b, loc, b.getIndexType(), v);
  }
  Value cstIndex(Location loc, int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); }

  FailureOr<Value> padding(Location loc, tile::PaddingKind kind, Type elementType,
                           Operation *op) {
    if (auto ft = dyn_cast<FloatType>(elementType)) {
      const llvm::fltSemantics &sem = ft.getFloatSemantics();
      APFloat v = kind == tile::PaddingKind::zero      ? APFloat::getZero(sem)
                  : kind == tile::PaddingKind::neg_inf ? APFloat::getInf(sem, /*Negative=*/true)
                                                       : APFloat::getNaN(sem);
      return arith::ConstantOp::create(b, loc, b.getFloatAttr(ft, v)).getResult();
    }
    if (kind != tile::PaddingKind::zero)
      return op->emitOpError() << "padding '" << tile::stringifyPaddingKind(kind)
                               << "' has no value of integer type " << elementType;
    return arith::ConstantOp::create(b, loc, b.getIntegerAttr(elementType, 0)).getResult();
  }

  /// In-bounds test and linear address of element `idx` of a tile at
  /// `offsets` of `view`.
  std::pair<Value, Value> address(Location loc, const HostView &view, ValueRange offsets,
                                  ArrayRef<Value> idx) {
    Value inBounds, addr = view.base.offset;
    Value zero = cstIndex(loc, 0);
    for (size_t d = 0; d < idx.size(); ++d) {
      Value pos = arith::AddIOp::create(b, loc, toIndex(loc, offsets[d]), idx[d]);
      Value lo = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::sge, pos, zero);
      Value hi = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, pos, view.sizes[d]);
      Value both = arith::AndIOp::create(b, loc, lo, hi);
      inBounds = inBounds ? arith::AndIOp::create(b, loc, inBounds, both).getResult() : both;
      if (!view.block.empty()) { // block pos / e (strided), pos % e inside the row-major block
        int64_t extent = view.block[d], inner = 1;
        for (size_t e = d + 1; e < view.block.size(); ++e)
          inner *= view.block[e];
        Value within = arith::RemSIOp::create(b, loc, pos, cstIndex(loc, extent));
        addr = arith::AddIOp::create(b, loc, addr,
                                     arith::MulIOp::create(b, loc, within, cstIndex(loc, inner)));
        pos = arith::FloorDivSIOp::create(b, loc, pos, cstIndex(loc, extent));
      }
      addr = arith::AddIOp::create(b, loc, addr,
                                   arith::MulIOp::create(b, loc, pos, view.strides[d]));
    }
    return {inBounds, addr};
  }

  static SmallVector<utils::IteratorType> parallel(int64_t n) {
    return SmallVector<utils::IteratorType>(n, utils::IteratorType::parallel);
  }

  /// One element at a scalar pointer (tile.load_scalar, tile.arrive):
  /// `access` builds the work on it inside an scf.if on its bounds; an
  /// element outside its buffer is a fault (the runner reports it) and
  /// yields `outside()` (built in the else branch) instead, with memory untouched.
  FailureOr<Value> scalarAccess(Location loc, Operation *op, Value ptr, StringRef what,
                                Type type, function_ref<Value(HostPtr)> access,
                                function_ref<Value()> outside) {
    auto it = ptrs.find(ptr);
    if (it == ptrs.end())
      return op->emitOpError("CPU lowering needs the ")
             << what << " to come from a kernel parameter or a tile.addptr";
    HostPtr p = it->second;
    Value usable = inBuffer(loc, HostView{p, {}, {}}, arith::ConstantIntOp::create(b, loc, 1, 1),
                            p.offset);
    auto ifOp = scf::IfOp::create(b, loc, TypeRange{type}, usable, /*addThenBlock=*/true,
                                  /*addElseBlock=*/true);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(ifOp.thenBlock());
    scf::YieldOp::create(b, loc, access(p));
    b.setInsertionPointToStart(ifOp.elseBlock());
    scf::YieldOp::create(b, loc, outside());
    return ifOp.getResult(0);
  }

  LogicalResult lower(Operation *op);
};

LogicalResult KernelLowering::lower(Operation *op) {
  Location loc = op->getLoc();
  b.setInsertionPoint(op);
  MLIRContext *ctx = op->getContext();

  if (auto pid = dyn_cast<tile::ProgramIdOp>(op)) {
    pid.replaceAllUsesWith(gridArgs[pid.getAxis()]);
  } else if (auto np = dyn_cast<tile::NumProgramsOp>(op)) {
    np.replaceAllUsesWith(gridArgs[3 + np.getAxis()]);
  } else if (auto warp = dyn_cast<tile::WarpIdOp>(op)) {
    return warp.emitOpError("exists only on layout-assigned GPU IR (a program runs as one thread "
                            "on the CPU): run tile-skip-warp-blocks in the GPU pipeline only");
  } else if (auto add = dyn_cast<tile::AddPtrOp>(op)) {
    auto it = ptrs.find(add.getPtr());
    if (it == ptrs.end())
      return add.emitOpError("CPU lowering needs the pointer to come from a kernel parameter "
                             "or another tile.addptr");
    HostPtr p = it->second;
    p.offset = arith::AddIOp::create(b, loc, p.offset, toIndex(loc, add.getOffset()));
    ptrs[add.getResult()] = p;
    return success();
  } else if (auto view = dyn_cast<tile::ViewOp>(op)) {
    auto it = ptrs.find(view.getBase());
    if (it == ptrs.end())
      return view.emitOpError("CPU lowering needs the base to come from a kernel parameter "
                              "or a tile.addptr");
    HostView v{it->second, {}, {}};
    for (Value s : view.getSizes())
      v.sizes.push_back(toIndex(loc, s));
    for (Value s : view.getStrides())
      v.strides.push_back(toIndex(loc, s));
    if (std::optional<ArrayRef<int64_t>> block = view.getBlock())
      v.block.assign(block->begin(), block->end());
    views[view.getResult()] = v;
    return success();
  } else if (auto load = dyn_cast<tile::LoadOp>(op)) {
    auto it = views.find(load.getView());
    if (it == views.end())
      return load.emitOpError("CPU lowering needs the view to come from a tile.view");
    auto type = cast<RankedTensorType>(load.getType());
    FailureOr<Value> pad = padding(loc, load.getPadding(), type.getElementType(), op);
    if (failed(pad))
      return failure();
    HostView view = it->second;
    SmallVector<Value> offsets(load.getOffsets());
    Value empty = tensor::EmptyOp::create(b, loc, type.getShape(), type.getElementType());
    auto generic = linalg::GenericOp::create(
        b, loc, TypeRange{type}, ValueRange{}, ValueRange{empty},
        ArrayRef<AffineMap>{b.getMultiDimIdentityMap(type.getRank())}, parallel(type.getRank()),
        [&](OpBuilder &nb, Location nl, ValueRange) {
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPoint(nb.getInsertionBlock(), nb.getInsertionPoint());
          SmallVector<Value> idx;
          for (int64_t d = 0; d < type.getRank(); ++d)
            idx.push_back(linalg::IndexOp::create(b, nl, d));
          auto [inView, addr] = address(nl, view, offsets, idx);
          Value inBounds = inBuffer(nl, view, inView, addr);
          // Out-of-bounds elements never touch memory: the read is inside the if.
          auto ifOp = scf::IfOp::create(b, nl, TypeRange{type.getElementType()}, inBounds,
                                        /*addThenBlock=*/true, /*addElseBlock=*/true);
          b.setInsertionPointToStart(ifOp.thenBlock());
          Value v = memref::LoadOp::create(b, nl, view.base.memref, addr);
          scf::YieldOp::create(b, nl, v);
          b.setInsertionPointToStart(ifOp.elseBlock());
          scf::YieldOp::create(b, nl, *pad);
          b.setInsertionPointAfter(ifOp);
          linalg::YieldOp::create(b, nl, ifOp.getResult(0));
        });
    load.replaceAllUsesWith(generic.getResult(0));
  } else if (auto load = dyn_cast<tile::LoadScalarOp>(op)) {
    Type type = load.getType();
    FailureOr<Value> value = scalarAccess(
        loc, op, load.getPtr(), "pointer", type,
        [&](HostPtr p) { return memref::LoadOp::create(b, loc, p.memref, p.offset).getResult(); },
        [&] { return arith::ConstantOp::create(b, loc, b.getZeroAttr(type)).getResult(); });
    if (failed(value))
      return failure();
    load.replaceAllUsesWith(*value);
  } else if (auto wait = dyn_cast<tile::WaitTurnOp>(op)) {
    // Programs run one after another, in the GPU's start order (the grid
    // wrapper's loops): every turn a program waits for must have been passed
    // by the programs before it. A counter still behind would make the GPU
    // wait forever (or trap): recorded as a fault of kind kCpuTurnFault, with
    // the turn, which the runner reports.
    FailureOr<Value> behind = scalarAccess(
        loc, op, wait.getCounter(), "counter", b.getI1Type(),
        [&](HostPtr p) {
          Value now = memref::LoadOp::create(b, loc, p.memref, p.offset);
          Value late = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, now, wait.getTurn());
          auto ifOp = scf::IfOp::create(b, loc, late, /*withElseRegion=*/false);
          OpBuilder::InsertionGuard guard(b);
          b.setInsertionPointToStart(ifOp.thenBlock());
          unsigned arg = cast<BlockArgument>(p.memref).getArgNumber();
          memref::StoreOp::create(b, loc,
                                  arith::ConstantIntOp::create(b, loc, tilec::kCpuTurnFault + arg + 1, 64),
                                  fault, ValueRange{cstIndex(loc, 0)});
          memref::StoreOp::create(b, loc,
                                  arith::ExtSIOp::create(b, loc, b.getI64Type(), wait.getTurn()),
                                  fault, ValueRange{cstIndex(loc, 1)});
          return late;
        },
        [&] { return arith::ConstantIntOp::create(b, loc, 0, 1).getResult(); });
    if (failed(behind))
      return failure();
  } else if (auto pass = dyn_cast<tile::PassTurnOp>(op)) {
    FailureOr<Value> done = scalarAccess(
        loc, op, pass.getCounter(), "counter", b.getI1Type(),
        [&](HostPtr p) {
          Value old = memref::LoadOp::create(b, loc, p.memref, p.offset);
          Value next = arith::AddIOp::create(b, loc, old, arith::ConstantIntOp::create(b, loc, 1, 32));
          memref::StoreOp::create(b, loc, next, p.memref, p.offset);
          return arith::ConstantIntOp::create(b, loc, 1, 1).getResult();
        },
        [&] { return arith::ConstantIntOp::create(b, loc, 0, 1).getResult(); });
    if (failed(done))
      return failure();
  } else if (auto arrive = dyn_cast<tile::ArriveOp>(op)) {
    // Programs run one after another here, so the count is a plain
    // read-modify-write: the program that brings it to `expected` is the
    // last, gets true and leaves 0 behind (as on the GPU). A counter
    // outside its buffer makes no program last.
    FailureOr<Value> last = scalarAccess(
        loc, op, arrive.getCounter(), "counter", b.getI1Type(),
        [&](HostPtr p) {
          Value old = memref::LoadOp::create(b, loc, p.memref, p.offset);
          Value count = arith::AddIOp::create(b, loc, old, arith::ConstantIntOp::create(b, loc, 1, 32));
          Value isLast = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, count,
                                               arrive.getExpected());
          Value next = arith::SelectOp::create(b, loc, isLast,
                                               arith::ConstantIntOp::create(b, loc, 0, 32), count);
          memref::StoreOp::create(b, loc, next, p.memref, p.offset);
          return isLast;
        },
        [&] { return arith::ConstantIntOp::create(b, loc, 0, 1).getResult(); });
    if (failed(last))
      return failure();
    arrive.replaceAllUsesWith(*last);
  } else if (isa<tile::StoreOp, tile::AtomicAddOp>(op)) {
    // tile.atomic_add is a read-add-write here: the CPU runner runs the
    // programs of the grid one after another.
    bool add = isa<tile::AtomicAddOp>(op);
    Value stored = op->getOperand(0), viewValue = op->getOperand(1);
    ValueRange offsets = op->getOperands().drop_front(2);
    auto it = views.find(viewValue);
    if (it == views.end())
      return op->emitOpError("CPU lowering needs the view to come from a tile.view");
    HostView view = it->second;
    auto type = cast<RankedTensorType>(stored.getType());
    SmallVector<Value> idx;
    for (int64_t d = 0; d < type.getRank(); ++d) {
      auto loop = scf::ForOp::create(b, loc, cstIndex(loc, 0), cstIndex(loc, type.getDimSize(d)),
                                     cstIndex(loc, 1));
      b.setInsertionPointToStart(loop.getBody());
      idx.push_back(loop.getInductionVar());
    }
    auto [inView, addr] = address(loc, view, offsets, idx);
    Value inBounds = inBuffer(loc, view, inView, addr);
    auto ifOp = scf::IfOp::create(b, loc, inBounds, /*withElseRegion=*/false);
    b.setInsertionPointToStart(ifOp.thenBlock());
    Value v = tensor::ExtractOp::create(b, loc, stored, idx);
    if (add)
      v = arith::AddFOp::create(b, loc, memref::LoadOp::create(b, loc, view.base.memref, addr), v);
    memref::StoreOp::create(b, loc, v, view.base.memref, addr);
  } else if (auto iota = dyn_cast<tile::IotaOp>(op)) {
    auto type = cast<RankedTensorType>(iota.getType());
    Value empty = tensor::EmptyOp::create(b, loc, type.getShape(), type.getElementType());
    auto generic = linalg::GenericOp::create(
        b, loc, TypeRange{type}, ValueRange{}, ValueRange{empty},
        ArrayRef<AffineMap>{b.getMultiDimIdentityMap(1)}, parallel(1),
        [&](OpBuilder &nb, Location nl, ValueRange) {
          Value i = linalg::IndexOp::create(nb, nl, 0);
          Value v = arith::IndexCastOp::create(nb, nl, type.getElementType(), i);
          linalg::YieldOp::create(nb, nl, v);
        });
    iota.replaceAllUsesWith(generic.getResult(0));
  } else if (auto splat = dyn_cast<tile::SplatOp>(op)) {
    auto type = cast<RankedTensorType>(splat.getType());
    Value empty = tensor::EmptyOp::create(b, loc, type.getShape(), type.getElementType());
    auto fill = linalg::FillOp::create(b, loc, ValueRange{splat.getValue()}, ValueRange{empty});
    splat.replaceAllUsesWith(fill.getResult(0));
  } else if (auto ex = dyn_cast<tile::ExpandDimsOp>(op)) {
    auto inType = cast<RankedTensorType>(ex.getInput().getType());
    int64_t rank = inType.getRank(), axis = ex.getAxis();
    // Each input dimension is one group; the new unit dimension joins the
    // group of the dimension it precedes (or the last one).
    SmallVector<ReassociationIndices> groups;
    for (int64_t d = 0, out = 0; d < rank; ++d) {
      ReassociationIndices g;
      if (d == axis)
        g.push_back(out++);
      g.push_back(out++);
      if (d == rank - 1 && axis == rank)
        g.push_back(out++);
      groups.push_back(g);
    }
    auto expanded = tensor::ExpandShapeOp::create(b, loc, ex.getType(), ex.getInput(), groups);
    ex.replaceAllUsesWith(expanded.getResult());
  } else if (auto bc = dyn_cast<tile::BroadcastOp>(op)) {
    auto inType = cast<RankedTensorType>(bc.getInput().getType());
    auto outType = cast<RankedTensorType>(bc.getType());
    SmallVector<AffineExpr> inExprs;
    for (int64_t d = 0; d < inType.getRank(); ++d)
      inExprs.push_back(inType.getDimSize(d) == 1 ? getAffineConstantExpr(0, ctx)
                                                  : getAffineDimExpr(d, ctx));
    int64_t rank = outType.getRank();
    Value empty = tensor::EmptyOp::create(b, loc, outType.getShape(), outType.getElementType());
    auto generic = linalg::GenericOp::create(
        b, loc, TypeRange{outType}, ValueRange{bc.getInput()}, ValueRange{empty},
        ArrayRef<AffineMap>{AffineMap::get(rank, 0, inExprs, ctx),
                            b.getMultiDimIdentityMap(rank)},
        parallel(rank), [&](OpBuilder &nb, Location nl, ValueRange args) {
          linalg::YieldOp::create(nb, nl, args[0]);
        });
    bc.replaceAllUsesWith(generic.getResult(0));
  } else if (auto tr = dyn_cast<tile::TransOp>(op)) {
    auto type = cast<RankedTensorType>(tr.getType());
    Value empty = tensor::EmptyOp::create(b, loc, type.getShape(), type.getElementType());
    auto t = linalg::TransposeOp::create(b, loc, tr.getInput(), empty, ArrayRef<int64_t>{1, 0});
    tr.replaceAllUsesWith(t.getResult()[0]);
  } else if (auto dot = dyn_cast<tile::DotOp>(op)) {
    // (m, n, k): a(m, k) · b(k, n) or b(n, k), accumulated into acc(m, n) in f32.
    AffineExpr m = getAffineDimExpr(0, ctx), n = getAffineDimExpr(1, ctx),
               k = getAffineDimExpr(2, ctx);
    auto mapA = AffineMap::get(3, 0, {m, k}, ctx);
    auto mapB = AffineMap::get(3, 0, dot.getTransposeB() ? ArrayRef<AffineExpr>{n, k}
                                                         : ArrayRef<AffineExpr>{k, n},
                               ctx);
    auto mapC = AffineMap::get(3, 0, {m, n}, ctx);
    auto generic = linalg::GenericOp::create(
        b, loc, TypeRange{dot.getType()}, ValueRange{dot.getA(), dot.getB()},
        ValueRange{dot.getAcc()}, ArrayRef<AffineMap>{mapA, mapB, mapC},
        {utils::IteratorType::parallel, utils::IteratorType::parallel,
         utils::IteratorType::reduction},
        [&](OpBuilder &nb, Location nl, ValueRange args) {
          Type f32 = nb.getF32Type();
          Value x = arith::ExtFOp::create(nb, nl, f32, args[0]);
          Value y = arith::ExtFOp::create(nb, nl, f32, args[1]);
          Value p = arith::MulFOp::create(nb, nl, x, y);
          linalg::YieldOp::create(nb, nl, ValueRange{arith::AddFOp::create(nb, nl, args[2], p)});
        });
    dot.replaceAllUsesWith(generic.getResult(0));
  } else if (auto red = dyn_cast<tile::ReduceOp>(op)) {
    auto inType = cast<RankedTensorType>(red.getInput().getType());
    auto outType = cast<RankedTensorType>(red.getType());
    auto ft = cast<FloatType>(outType.getElementType());
    bool isMax = red.getKind() == tile::ReduceKind::max;
    Value init = arith::ConstantOp::create(
        b, loc, b.getFloatAttr(ft, isMax ? APFloat::getInf(ft.getFloatSemantics(), true)
                                         : APFloat::getZero(ft.getFloatSemantics())));
    Value empty = tensor::EmptyOp::create(b, loc, outType.getShape(), ft);
    Value acc = linalg::FillOp::create(b, loc, ValueRange{init}, ValueRange{empty}).getResult(0);
    int64_t rank = inType.getRank(), axis = red.getAxis();
    SmallVector<AffineExpr> outExprs;
    SmallVector<utils::IteratorType> iters = parallel(rank);
    for (int64_t d = 0; d < rank; ++d)
      if (d != axis)
        outExprs.push_back(getAffineDimExpr(d, ctx));
    iters[axis] = utils::IteratorType::reduction;
    auto generic = linalg::GenericOp::create(
        b, loc, TypeRange{outType}, ValueRange{red.getInput()}, ValueRange{acc},
        ArrayRef<AffineMap>{b.getMultiDimIdentityMap(rank), AffineMap::get(rank, 0, outExprs, ctx)},
        iters, [&](OpBuilder &nb, Location nl, ValueRange args) {
          Value r = isMax ? arith::MaximumFOp::create(nb, nl, args[1], args[0]).getResult()
                          : arith::AddFOp::create(nb, nl, args[1], args[0]).getResult();
          linalg::YieldOp::create(nb, nl, r);
        });
    red.replaceAllUsesWith(generic.getResult(0));
  } else if (isa<tile::WaitPriorKernelsOp, tile::LaunchDependentsOp, tile::BarrierOp>(op)) {
    // Nothing: kernels, and the programs of one, run one after another
    // here, each in one thread (erased below).
  } else if (isa<tile::ConvertLayoutOp>(op)) {
    return op->emitOpError("layout-assigned IR cannot run on the CPU; run the CPU pipeline "
                           "before tile-partition-warps");
  } else {
    return success();
  }
  if (!isa<tile::AddPtrOp, tile::ViewOp>(op))
    op->erase();
  return success();
}

LogicalResult KernelLowering::run() {
  MLIRContext *ctx = fn.getContext();
  Block &entry = fn.front();
  Location loc = fn.getLoc();
  b.setInsertionPointToStart(&entry);

  // Pointer parameters become whole host buffers.
  for (BlockArgument arg : entry.getArguments())
    if (auto ptr = dyn_cast<tile::PtrType>(arg.getType())) {
      arg.setType(MemRefType::get({ShapedType::kDynamic}, ptr.getPointeeType()));
      ptrs[arg] = {arg, nullptr};
    }
  Value zero = cstIndex(loc, 0);
  for (auto &[arg, p] : ptrs) {
    p.offset = zero;
    bufferLength[arg] = memref::DimOp::create(b, loc, arg, 0);
    bufferUnsized[arg] = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, bufferLength[arg],
                                               cstIndex(loc, std::numeric_limits<int64_t>::max()));
  }
  fault = memref::GetGlobalOp::create(b, loc, MemRefType::get({2}, b.getI64Type()), kFaultSymbol);
  // Through the function, so that argument attributes (tile.positive) stay
  // one per argument.
  for (Value &g : gridArgs) {
    unsigned index = fn.getNumArguments();
    if (failed(fn.insertArgument(index, b.getI32Type(), DictionaryAttr(), loc)))
      return failure();
    g = fn.getArgument(index);
  }
  fn.setFunctionType(FunctionType::get(ctx, entry.getArgumentTypes(), fn.getResultTypes()));

  SmallVector<Operation *> work;
  fn.walk<WalkOrder::PreOrder>([&](Operation *op) {
    if (isa<tile::TileDialect>(op->getDialect()))
      work.push_back(op);
  });
  SmallVector<Operation *> addressing;
  for (Operation *op : work) {
    if (isa<tile::AddPtrOp, tile::ViewOp>(op))
      addressing.push_back(op);
    if (failed(lower(op)))
      return failure();
  }
  // Views and pointer arithmetic are dead once every access is lowered.
  for (Operation *op : llvm::reverse(addressing)) {
      if (!op->use_empty())
        return op->emitOpError("CPU lowering cannot carry pointers or views through "
                               "anything but tile.addptr, tile.view, tile.load, tile.load_scalar, "
                               "tile.arrive, tile.wait_turn, tile.pass_turn and tile.store");
      op->erase();
    }
  return success();
}

/// @__tilec_grid_k(params..., gx, gy, gz): the grid as loops over program ids.
void buildGridWrapper(func::FuncOp kernel) {
  OpBuilder b(kernel);
  b.setInsertionPointAfter(kernel);
  Location loc = kernel.getLoc();
  unsigned numParams = kernel.getNumArguments() - 6;
  SmallVector<Type> types(kernel.getArgumentTypes().take_front(numParams));
  types.append(3, b.getI32Type());
  auto wrapper = func::FuncOp::create(b, loc, ("__tilec_grid_" + kernel.getSymName()).str(),
                                      b.getFunctionType(types, {}));
  Block *body = wrapper.addEntryBlock();
  b.setInsertionPointToStart(body);
  SmallVector<Value> params(body->getArguments().take_front(numParams));
  Value grid[3];
  for (int d = 0; d < 3; ++d)
    grid[d] = arith::IndexCastOp::create(b, loc, b.getIndexType(), body->getArgument(numParams + d));
  Value c0 = arith::ConstantIndexOp::create(b, loc, 0), c1 = arith::ConstantIndexOp::create(b, loc, 1);
  Value pid[3];
  for (int d = 2; d >= 0; --d) {
    auto loop = scf::ForOp::create(b, loc, c0, grid[d], c1);
    b.setInsertionPointToStart(loop.getBody());
    Value id = loop.getInductionVar();
    if (d == 0) // gx - 1 - i: the GPU's start order (see the file comment)
      id = arith::SubIOp::create(b, loc, arith::SubIOp::create(b, loc, grid[0], c1), id);
    pid[d] = arith::IndexCastOp::create(b, loc, b.getI32Type(), id);
  }
  SmallVector<Value> args = params;
  args.append({pid[0], pid[1], pid[2]});
  for (int d = 0; d < 3; ++d)
    args.push_back(body->getArgument(numParams + d));
  func::CallOp::create(b, loc, kernel, args);
  b.setInsertionPointToEnd(body);
  func::ReturnOp::create(b, loc);
}

struct ConvertTileToCPU final : tilec::impl::ConvertTileToCPUBase<ConvertTileToCPU> {
  void runOnOperation() override {
    SmallVector<func::FuncOp> kernels;
    for (auto fn : getOperation().getOps<func::FuncOp>())
      if (fn->hasAttr(tile::kKernelAttrName) && !fn.isExternal())
        kernels.push_back(fn);
    if (!kernels.empty() && !getOperation().lookupSymbol(kFaultSymbol)) {
      // Public, so the runner can find, clear and read it by name.
      OpBuilder top = OpBuilder::atBlockBegin(getOperation().getBody());
      auto type = MemRefType::get({2}, top.getI64Type());
      memref::GlobalOp::create(top, getOperation().getLoc(), kFaultSymbol,
                               top.getStringAttr("public"), type,
                               DenseElementsAttr::get(RankedTensorType::get({2}, top.getI64Type()),
                                                      ArrayRef<int64_t>{0, 0}),
                               /*constant=*/false, /*alignment=*/nullptr);
    }
    for (func::FuncOp fn : kernels) {
      if (failed(KernelLowering(fn).run()))
        return signalPassFailure();
      buildGridWrapper(fn);
    }
  }
};

} // namespace
