//===- TileOps.cpp - verifiers and folders of the tile ops ----------------===//
//
// Verifier messages name the operand and the numbers involved, so a user
// reading one knows what to change without opening this file.
//
//===----------------------------------------------------------------------===//
#include "dialects/Tile/TileDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/OpImplementation.h"

using namespace mlir;
using namespace mlir::tile;

#define GET_OP_CLASSES
#include "dialects/Tile/TileOps.cpp.inc"

/// "64x128" for diagnostics.
static std::string shapeStr(ArrayRef<int64_t> shape) {
  std::string out;
  for (size_t i = 0; i < shape.size(); ++i)
    out += (i ? "x" : "") + std::to_string(shape[i]);
  return shape.empty() ? "scalar" : out;
}

static ArrayRef<int64_t> shapeOf(Value v) { return cast<RankedTensorType>(v.getType()).getShape(); }
static Type elementOf(Value v) { return cast<RankedTensorType>(v.getType()).getElementType(); }

LogicalResult IotaOp::verify() {
  auto type = getResult().getType();
  if (!type.hasStaticShape() || type.getDimSize(0) < 1)
    return emitOpError() << "result must have a static, positive length, got "
                         << type;
  return success();
}

LogicalResult ExpandDimsOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getInput());
  // Signed: getAxis() is unsigned, which would print -1 as 4294967295.
  int64_t axis = getAxisAttr().getInt();
  if (axis < 0 || axis > int64_t(in.size()))
    return emitOpError() << "axis " << axis << " is out of range [0, " << in.size()
                         << "] for an input of rank " << in.size();
  SmallVector<int64_t> expected(in.begin(), in.end());
  expected.insert(expected.begin() + axis, 1);
  if (shapeOf(getResult()) != ArrayRef<int64_t>(expected))
    return emitOpError() << "result shape must be " << shapeStr(expected) << " (input "
                         << shapeStr(in) << " with a 1 at axis " << axis << "), got "
                         << shapeStr(shapeOf(getResult()));
  if (elementOf(getInput()) != elementOf(getResult()))
    return emitOpError() << "result element type " << elementOf(getResult())
                         << " differs from the input's " << elementOf(getInput());
  return success();
}

LogicalResult BroadcastOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getInput()), out = shapeOf(getResult());
  if (in.size() != out.size())
    return emitOpError() << "input rank " << in.size() << " differs from result rank "
                         << out.size() << "; use tile.expand_dims first";
  for (size_t d = 0; d < in.size(); ++d)
    if (in[d] != out[d] && in[d] != 1)
      return emitOpError() << "dimension " << d << " of the input has size " << in[d]
                           << ", which is neither 1 nor the result's " << out[d];
  if (elementOf(getInput()) != elementOf(getResult()))
    return emitOpError() << "result element type " << elementOf(getResult())
                         << " differs from the input's " << elementOf(getInput());
  return success();
}

OpFoldResult BroadcastOp::fold(FoldAdaptor) {
  if (getInput().getType() == getResult().getType())
    return getInput();
  return {};
}

LogicalResult TransOp::verify() {
  // 2DTensorOf admits dynamic sizes; tiles never have them.
  for (auto [name, value] : {std::pair<StringRef, Value>{"input", getInput()},
                             {"result", getResult()}})
    if (!cast<RankedTensorType>(value.getType()).hasStaticShape())
      return emitOpError() << name << " must have a static shape, got " << value.getType();
  ArrayRef<int64_t> in = shapeOf(getInput()), out = shapeOf(getResult());
  if (in[0] != out[1] || in[1] != out[0])
    return emitOpError() << "result shape must be " << in[1] << "x" << in[0]
                         << " (the input " << shapeStr(in) << " transposed), got "
                         << shapeStr(out);
  if (elementOf(getInput()) != elementOf(getResult()))
    return emitOpError() << "result element type " << elementOf(getResult())
                         << " differs from the input's " << elementOf(getInput());
  return success();
}

LogicalResult ViewOp::verify() {
  ViewType view = getResult().getType();
  if (getSizes().size() != view.getRank() || getStrides().size() != view.getRank())
    return emitOpError() << "a rank-" << view.getRank() << " view needs " << view.getRank()
                         << " sizes and " << view.getRank() << " strides, got "
                         << getSizes().size() << " sizes and " << getStrides().size()
                         << " strides";
  Type pointee = getBase().getType().getPointeeType();
  if (pointee != view.getElementType())
    return emitOpError() << "view element type " << view.getElementType()
                         << " differs from the base pointer's " << pointee;
  if (std::optional<ArrayRef<int64_t>> block = getBlock()) {
    if (block->size() != view.getRank())
      return emitOpError() << "a rank-" << view.getRank() << " view needs " << view.getRank()
                           << " block extents, got " << block->size();
    for (int64_t extent : *block)
      if (extent < 1 || (extent & (extent - 1)))
        return emitOpError() << "block extents must be powers of two, got " << extent;
  }
  return success();
}

/// Shared by load and store: offsets count and tile shape against the view.
static LogicalResult verifyAccess(Operation *op, ViewType view, ValueRange offsets,
                                  RankedTensorType tile, StringRef tileName) {
  if (offsets.size() != view.getRank())
    return op->emitOpError() << "a rank-" << view.getRank() << " view takes "
                             << view.getRank() << " offsets, got " << offsets.size();
  if (tile.getRank() != int64_t(view.getRank()))
    return op->emitOpError() << tileName << " has rank " << tile.getRank()
                             << " but the view has rank " << view.getRank();
  if (tile.getElementType() != view.getElementType())
    return op->emitOpError() << tileName << " element type " << tile.getElementType()
                             << " differs from the view's " << view.getElementType();
  return success();
}

LogicalResult LoadOp::verify() {
  if (failed(verifyAccess(*this, getView().getType(), getOffsets(), getResult().getType(),
                          "result")))
    return failure();
  Type element = getResult().getType().getElementType();
  if (getPadding() != PaddingKind::zero && !isa<FloatType>(element))
    return emitOpError() << "padding " << stringifyPaddingKind(getPadding())
                         << " needs a float element type, got " << element;
  return success();
}

LogicalResult StoreOp::verify() {
  return verifyAccess(*this, getView().getType(), getOffsets(), getValue().getType(),
                      "stored value");
}

LogicalResult AtomicAddOp::verify() {
  auto type = dyn_cast<RankedTensorType>(getValue().getType());
  if (!type || !type.hasStaticShape())
    return emitOpError() << "added value must be a statically shaped tile, got "
                         << getValue().getType();
  return verifyAccess(*this, getView().getType(), getOffsets(), type, "added value");
}

LogicalResult ArriveOp::verify() {
  Type pointee = getCounter().getType().getPointeeType();
  if (!pointee.isInteger(32))
    return emitOpError() << "counter must point to i32, got a pointer to " << pointee;
  APInt n;
  if (matchPattern(getExpected(), m_ConstantInt(&n)) && n.getSExtValue() < 1)
    return emitOpError() << "expected arrivals must be at least 1, got " << n.getSExtValue();
  return success();
}

/// A turn counter is one i32 (tile.wait_turn, tile.pass_turn).
static LogicalResult verifyTurnCounter(Operation *op, Value counter) {
  Type pointee = cast<PtrType>(counter.getType()).getPointeeType();
  if (!pointee.isInteger(32))
    return op->emitOpError() << "counter must point to i32, got a pointer to " << pointee;
  return success();
}

LogicalResult WaitTurnOp::verify() {
  if (failed(verifyTurnCounter(*this, getCounter())))
    return failure();
  APInt n;
  if (matchPattern(getTurn(), m_ConstantInt(&n)) && n.isNegative())
    return emitOpError() << "turn must be at least 0, got " << n.getSExtValue();
  return success();
}

LogicalResult PassTurnOp::verify() { return verifyTurnCounter(*this, getCounter()); }

LogicalResult LoadScalarOp::verify() {
  Type pointee = getPtr().getType().getPointeeType();
  if (getResult().getType() != pointee)
    return emitOpError() << "result type " << getResult().getType()
                         << " differs from the pointer's element type " << pointee;
  return success();
}

LogicalResult DotOp::verify() {
  ArrayRef<int64_t> a = shapeOf(getA()), b = shapeOf(getB()), c = shapeOf(getAcc());
  for (auto [name, value] : {std::pair<StringRef, Value>{"a", getA()}, {"b", getB()},
                             {"acc", getAcc()}})
    if (!cast<RankedTensorType>(value.getType()).hasStaticShape())
      return emitOpError() << "operand '" << name << "' must have a static shape";
  if (elementOf(getA()) != elementOf(getB()))
    return emitOpError() << "operands a (" << elementOf(getA()) << ") and b ("
                         << elementOf(getB()) << ") must have the same element type";
  int64_t m = a[0], k = a[1];
  int64_t bk = getTransposeB() ? b[1] : b[0];
  int64_t n = getTransposeB() ? b[0] : b[1];
  std::string rule = getTransposeB() ? "a (MxK) · bᵀ with b NxK" : "a (MxK) · b (KxN)";
  if (bk != k)
    return emitOpError() << "contraction sizes differ: " << rule << " needs b's K = " << k
                         << " (a is " << shapeStr(a) << "), but b is " << shapeStr(b);
  if (c[0] != m || c[1] != n)
    return emitOpError() << "acc and result must be MxN = " << m << "x" << n << " for "
                         << rule << " (a is " << shapeStr(a) << ", b is " << shapeStr(b)
                         << "), got " << shapeStr(c);
  if (std::optional<int64_t> warpsN = getWarpsN())
    if (*warpsN < 1 || (*warpsN & (*warpsN - 1)) != 0)
      return emitOpError() << "warps_n (warps along N) must be a power of two >= 1, got "
                           << *warpsN;
  return success();
}

LogicalResult ReduceOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getInput());
  int64_t axis = getAxisAttr().getInt();
  if (axis < 0 || axis >= int64_t(in.size()))
    return emitOpError() << "cannot reduce along axis " << axis << ": the input "
                         << shapeStr(in) << " has rank " << in.size();
  SmallVector<int64_t> expected(in.begin(), in.end());
  expected.erase(expected.begin() + axis);
  if (shapeOf(getResult()) != ArrayRef<int64_t>(expected))
    return emitOpError() << "result shape must be " << shapeStr(expected) << " (input "
                         << shapeStr(in) << " without axis " << axis << "), got "
                         << shapeStr(shapeOf(getResult()));
  if (elementOf(getInput()) != elementOf(getResult()))
    return emitOpError() << "result element type " << elementOf(getResult())
                         << " differs from the input's " << elementOf(getInput());
  return success();
}

OpFoldResult ConvertLayoutOp::fold(FoldAdaptor) {
  if (getInput().getType() == getResult().getType())
    return getInput();
  return {};
}
