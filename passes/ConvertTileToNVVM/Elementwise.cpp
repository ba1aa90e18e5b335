//===- Elementwise.cpp - elementwise ops and GPU math ---------------------===//
//
// One scalar op per register; exp/exp2/log/log2/tanh expanded to the
// approximate hardware instructions (lowerMath); O * alpha skipped in warps
// where every factor is 1 (lowerRescale, skip-unit-rescale).
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

namespace tilec::nvvm {

static bool isNativeGpuMath(Operation *op) {
  return isa<math::AbsFOp, math::AbsIOp, math::SqrtOp, math::RsqrtOp, math::FmaOp, math::FloorOp,
             math::CeilOp, math::TruncOp, math::RoundEvenOp, math::RoundOp, math::CopySignOp,
             math::CountLeadingZerosOp, math::CountTrailingZerosOp, math::CtPopOp>(op);
}

/// Math ops lowerMath expands into approximate hardware instructions.
static bool isExpandedGpuMath(Operation *op) {
  return isa<math::ExpOp, math::Exp2Op, math::LogOp, math::Log2Op, math::TanhOp, math::SinOp,
             math::CosOp>(op);
}

/// The legality check for math on the GPU, before any code is generated:
/// a math op the backend cannot select (LLVM's "Cannot select: ftanh" is a
/// fatal error that ends the process, Python's included) is refused here,
/// at the op's location, with the list of what does lower.
static LogicalResult checkGpuMath(Operation *op) {
  if (!op->getDialect() || !isa<math::MathDialect>(op->getDialect()))
    return success();
  Type elem = getElementTypeOrSelf(op->getOperand(0).getType());
  if (isNativeGpuMath(op) || (isExpandedGpuMath(op) && (elem.isF32() || elem.isF16() || elem.isBF16())))
    return success();
  auto diag = op->emitError() << "'" << op->getName() << "' on " << elem
                              << " has no GPU (NVPTX) lowering; the GPU lowers math.exp, exp2, "
                                 "log, log2, tanh, sin, cos on f16/bf16/f32 and absf, absi, sqrt, "
                                 "rsqrt, fma, floor, ceil, trunc, round, roundeven, copysign";
  return diag;
}

LogicalResult KernelLowering::lowerMath(Operation *op, ValueRange operands,
                                        SmallVectorImpl<Value> &results) {
  if (failed(checkGpuMath(op)))
    return failure();
  if (!isExpandedGpuMath(op))
    return success(); // cloned as is
  Type type = operands[0].getType();
  // f16/bf16: the approximate instructions are f32 ones.
  if (!type.isF32()) {
    Value wide = arith::ExtFOp::create(b, b.getF32Type(), operands[0]);
    SmallVector<Value> wideResults;
    if (failed(lowerMath(op, ValueRange{wide}, wideResults)))
      return failure();
    results.push_back(arith::TruncFOp::create(b, type, wideResults[0]));
    return success();
  }
  auto f32 = [&](double v) { return arith::ConstantOp::create(b, b.getF32FloatAttr(v)); };
  auto intrinsic = [&](StringRef name, Value x) {
    return LLVM::CallIntrinsicOp::create(b, b.getF32Type(), b.getStringAttr(name), ValueRange{x})
        .getResult(0);
  };
  Value x = operands[0];
  if (isa<math::Exp2Op>(op)) {
    results.push_back(target.exp2Approx(b, x));
  } else if (isa<math::ExpOp>(op)) {
    results.push_back(target.exp2Approx(b, arith::MulFOp::create(b, x, f32(llvm::numbers::log2e))));
  } else if (isa<math::Log2Op>(op)) {
    results.push_back(target.log2Approx(b, x));
  } else if (isa<math::LogOp>(op)) {
    results.push_back(arith::MulFOp::create(b, target.log2Approx(b, x), f32(llvm::numbers::ln2)));
  } else if (isa<math::TanhOp>(op)) {
    // llvm.tanh with `afn` selects tanh.approx.f32 (sm_75+; one MUFU op,
    // relative error about 2^-11); without it NVPTX has no pattern at all.
    results.push_back(LLVM::TanhOp::create(b, b.getF32Type(), x, LLVM::FastmathFlags::afn));
  } else {
    // sin/cos.approx are accurate on [-pi, pi] only: reduce x - 2*pi*k,
    // k = rint(x / 2pi), with 2*pi in two parts (Cody-Waite) so the reduced
    // argument stays exact to ~1 ulp for |x| up to ~1e5 (rotary angles).
    constexpr double twoPi = 2 * llvm::numbers::pi;
    const float hi = static_cast<float>(twoPi);
    const float lo = static_cast<float>(twoPi - static_cast<double>(hi));
    Value k = math::RoundEvenOp::create(b, arith::MulFOp::create(b, x, f32(1 / twoPi)));
    Value negK = arith::NegFOp::create(b, k);
    Value r = math::FmaOp::create(b, negK, f32(hi), x);
    r = math::FmaOp::create(b, negK, f32(lo), r);
    results.push_back(intrinsic(isa<math::SinOp>(op) ? "llvm.nvvm.sin.approx.ftz.f"
                                                     : "llvm.nvvm.cos.approx.ftz.f",
                                r));
  }
  return success();
}

/// x * b where b is a broadcast (few distinct registers per thread, e.g. the
/// online softmax's O * alpha): the warp skips the multiplies when every
/// factor any of its threads holds is exactly 1 — then the product is x,
/// bit for bit (up to the flush of denormal x a multiply under
/// flush-to-zero would make), so the rewrite is exact. After the first blocks of a long
/// row the running max rarely moves and alpha is 1. Returns false (nothing
/// emitted) where it does not apply.
bool KernelLowering::lowerRescale(arith::MulFOp op) {
  auto type = dyn_cast<RankedTensorType>(op.getType());
  if (!(skipUnitRescale || op->hasAttr(tilec::kSkipUnitRescaleAttr)) || !type ||
      !type.getElementType().isF32())
    return false;
  for (unsigned k = 0; k < 2; ++k) {
    Value factors = op->getOperand(k), other = op->getOperand(1 - k);
    if (!isa<RankedTensorType>(factors.getType()) || !isa<RankedTensorType>(other.getType()))
      return false;
    auto found = regs.find(factors);
    if (found == regs.end())
      continue;
    SmallVector<Value> f = found->second;
    llvm::SetVector<Value> distinct(f.begin(), f.end());
    // A broadcast along rows or columns: a few factors per thread, each
    // repeated. A splat (one factor, e.g. the softmax scale) is left alone.
    if (f.size() < 32 || distinct.size() < 2 || distinct.size() * 8 > f.size())
      continue;
    Value one = arith::ConstantOp::create(b, b.getF32FloatAttr(1.0f));
    Value notOne;
    for (Value v : distinct) {
      Value ne = arith::CmpFOp::create(b, arith::CmpFPredicate::UNE, v, one);
      notOne = notOne ? arith::OrIOp::create(b, notOne, ne).getResult() : ne;
    }
    Value warpNeeds = target.voteAny(b, notOne);
    SmallVector<Value> x = regs[other];
    auto ifOp = scf::IfOp::create(b, SmallVector<Type>(x.size(), b.getF32Type()), warpNeeds,
                                  /*withElseRegion=*/true);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(&ifOp.getThenRegion().front());
      SmallVector<Value> products;
      for (auto [xi, fi] : llvm::zip_equal(x, f))
        products.push_back(arith::MulFOp::create(b, xi, fi, op.getFastmathAttr()));
      scf::YieldOp::create(b, products);
      b.setInsertionPointToStart(&ifOp.getElseRegion().front());
      scf::YieldOp::create(b, x);
    }
    regs[op.getResult()] = SmallVector<Value>(ifOp.getResults());
    return true;
  }
  return false;
}

LogicalResult KernelLowering::lowerElementwise(Operation *op) {
  if (auto mul = dyn_cast<arith::MulFOp>(op); mul && lowerRescale(mul))
    return success();
  LinearLayout layout = layoutOf(op->getResult(0));
  SmallVector<Value> result;
  // Registers whose operands are the same values (a stride-0 load's copies,
  // their reductions) share one result: the ops are pure, and a reduction
  // of those results then shuffles each value once (CSE after the lowering
  // cannot merge the shuffles).
  std::map<SmallVector<void *>, Value> same;
  for (int64_t r = 0; r < layout.numRegs(); ++r) {
    SmallVector<Value> operands;
    for (Value operand : op->getOperands())
      operands.push_back(isa<RankedTensorType>(operand.getType()) ? regs[operand][r] : scalar(operand));
    SmallVector<void *> key = llvm::map_to_vector(operands, [](Value v) { return v.getAsOpaquePointer(); });
    if (auto it = same.find(key); it != same.end()) {
      result.push_back(it->second);
      continue;
    }
    auto remember = [&] { same[key] = result.back(); };
    SmallVector<Value> mathResults;
    if (failed(lowerMath(op, operands, mathResults)))
      return failure();
    if (!mathResults.empty()) {
      result.push_back(mathResults[0]);
      remember();
      continue;
    }
    OperationState state(op->getLoc(), op->getName());
    state.addOperands(operands);
    state.addTypes(getElementTypeOrSelf(op->getResult(0).getType()));
    state.addAttributes(op->getAttrs());
    result.push_back(b.create(state)->getResult(0));
    remember();
  }
  regs[op->getResult(0)] = result;
  return success();
}

} // namespace tilec::nvvm
