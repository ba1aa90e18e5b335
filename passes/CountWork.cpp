//===- CountWork.cpp - matmul vs non-matmul work per loop iteration -------===//
#include "tilec/Analysis/WorkCount.h"

#include "dialects/Tile/TileDialect.h"
#include "tilec/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace tilec {
#define GEN_PASS_DEF_TILECOUNTWORK
#include "passes/Passes.h.inc"
} // namespace tilec

using namespace mlir;

namespace {

int64_t elements(Type type) {
  auto t = dyn_cast<RankedTensorType>(type);
  return t && t.hasStaticShape() ? t.getNumElements() : 0;
}

/// Adds `op`'s own work (not that of ops nested in it).
void countOp(Operation *op, tilec::WorkCount &count) {
  if (auto dot = dyn_cast<tile::DotOp>(op)) {
    auto a = cast<RankedTensorType>(dot.getA().getType()).getShape();
    auto c = cast<RankedTensorType>(dot.getAcc().getType()).getShape();
    count.matmulFlops += 2 * c[0] * c[1] * a[1];
    return;
  }
  int64_t n = 0;
  if (auto reduce = dyn_cast<tile::ReduceOp>(op))
    n = elements(reduce.getInput().getType());
  else if (isa<arith::ArithDialect, math::MathDialect>(op->getDialect()) &&
           !isa<arith::ConstantOp>(op) && op->getNumResults() == 1)
    n = elements(op->getResult(0).getType());
  if (n) {
    count.nonMatmulOps += n;
    count.byOp[op->getName().getStringRef().str()] += n;
  }
}

void add(tilec::WorkCount &into, const tilec::WorkCount &from) {
  into.matmulFlops += from.matmulFlops;
  into.nonMatmulOps += from.nonMatmulOps;
  for (auto &[k, v] : from.byOp)
    into.byOp[k] += v;
}

bool holdsDot(scf::ForOp loop) {
  return loop.getBody()->walk([](tile::DotOp) { return WalkResult::interrupt(); }).wasInterrupted();
}

} // namespace

std::string tilec::describe(const WorkCount &count) {
  std::string out;
  llvm::raw_string_ostream os(out);
  os << "matmul " << count.matmulFlops << " flops, non-matmul " << count.nonMatmulOps << " ops";
  if (!count.byOp.empty()) {
    os << " [";
    bool first = true;
    for (auto &[name, n] : count.byOp) {
      os << (first ? "" : ", ") << name << " " << n;
      first = false;
    }
    os << "]";
  }
  return out;
}

llvm::SmallVector<tilec::KernelWork> tilec::countWork(ModuleOp module) {
  llvm::SmallVector<KernelWork> result;
  module.walk([&](func::FuncOp fn) {
    if (!fn->hasAttr(tile::kKernelAttrName))
      return;
    KernelWork kw;
    kw.kernel = fn.getSymName().str();
    fn.walk<WalkOrder::PreOrder>([&](Operation *op) {
      // Ops directly inside the innermost enclosing dot-holding loop belong
      // to that loop's iteration; everything else is counted once.
      scf::ForOp owner;
      for (Operation *p = op->getParentOp(); p && p != fn; p = p->getParentOp())
        if (auto loop = dyn_cast<scf::ForOp>(p); loop && holdsDot(loop)) {
          owner = loop;
          break;
        }
      if (auto loop = dyn_cast<scf::ForOp>(op); loop && holdsDot(loop)) {
        LoopWork lw;
        lw.loop = loop;
        if (auto blocks = loop->getAttrOfType<tile::BlocksKindAttr>(tilec::kBlocksAttr))
          lw.blocks = tile::stringifyBlocksKind(blocks.getValue()).str();
        lw.fallback = loop->hasAttr(tilec::kSoftmaxFallbackAttr);
        kw.loops.push_back(lw);
      }
      WorkCount own;
      countOp(op, own);
      if (!owner) {
        add(kw.outsideLoops, own);
        return;
      }
      for (LoopWork &lw : kw.loops)
        if (lw.loop == owner.getOperation())
          add(lw.perIteration, own);
    });
    result.push_back(std::move(kw));
  });
  return result;
}

void tilec::printWork(llvm::ArrayRef<KernelWork> work, llvm::raw_ostream &os) {
  for (const KernelWork &kw : work) {
    os << kw.kernel << ": outside loops: " << describe(kw.outsideLoops) << "\n";
    for (const LoopWork &lw : kw.loops) {
      os << kw.kernel << ": loop";
      if (!lw.blocks.empty())
        os << " (" << lw.blocks << " blocks)";
      if (lw.fallback)
        os << " (scale <= 0 fallback)";
      os << " per iteration: " << describe(lw.perIteration) << "\n";
    }
  }
}

namespace {
struct TileCountWork final : tilec::impl::TileCountWorkBase<TileCountWork> {
  void runOnOperation() override {
    for (const tilec::KernelWork &kw : tilec::countWork(getOperation())) {
      for (const tilec::LoopWork &lw : kw.loops) {
        InFlightDiagnostic diag = lw.loop->emitRemark();
        diag << "per iteration";
        if (!lw.blocks.empty())
          diag << " (" << lw.blocks << " blocks)";
        if (lw.fallback)
          diag << " (scale <= 0 fallback)";
        diag << ": " << tilec::describe(lw.perIteration);
      }
      getOperation().lookupSymbol(kw.kernel)->emitRemark()
          << "outside loops: " << tilec::describe(kw.outsideLoops);
    }
    markAllAnalysesPreserved();
  }
};
} // namespace
