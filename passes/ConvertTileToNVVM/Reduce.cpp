//===- Reduce.cpp - tile.reduce -------------------------------------------===//
//
// In-thread balanced trees, then butterfly shuffles over the lanes that
// span the reduced axis (row reductions stay in a warp under split-Q).
//
//===----------------------------------------------------------------------===//
#include "Lowering.h"

namespace tilec::nvvm {

Value KernelLowering::combine(ReduceKind kind, Value x, Value y) {
  if (kind == ReduceKind::max)
    return arith::MaximumFOp::create(b, x, y);
  return arith::AddFOp::create(b, x, y);
}

/// In-thread combine of the registers that share a projected coordinate,
/// then butterfly shuffles over the lane bits that move along the axis.
LogicalResult KernelLowering::lowerReduce(ReduceOp op) {
  unsigned axis = op.getAxis();
  LinearLayout in = layoutOf(op.getInput());
  for (const auto &basis : in.warpBases())
    if (basis[axis] != 0)
      return op.emitError() << "reduction along axis " << axis << " crosses warps";
  SmallVector<Value> &values = regs[op.getInput()];
  auto project = [&](tilec::Coord c) {
    c.erase(c.begin() + axis);
    return c;
  };
  // In-thread: a balanced tree per output element (depth log2 n, not a
  // chain of n - 1 dependent ops: with two warps per scheduler the chain's
  // latency is not hidden).
  std::map<tilec::Coord, SmallVector<Value>> operands;
  for (int64_t r = 0; r < in.numRegs(); ++r)
    if (in.regHolding(in.regCoord(r)) == r)
      operands[project(in.regCoord(r))].push_back(values[r]);
  // Output elements whose inputs are the same values (a stride-0 load's
  // copies) share one tree and one shuffle chain.
  std::map<tilec::Coord, Value> partial;
  std::map<SmallVector<void *>, Value> sameTree;
  for (auto &[key, list] : operands) {
    SmallVector<void *> inputs = llvm::map_to_vector(list, [](Value v) { return v.getAsOpaquePointer(); });
    if (auto it = sameTree.find(inputs); it != sameTree.end()) {
      partial[key] = it->second;
      continue;
    }
    while (list.size() > 1) {
      SmallVector<Value> next;
      for (size_t i = 0; i + 1 < list.size(); i += 2)
        next.push_back(combine(op.getKind(), list[i], list[i + 1]));
      if (list.size() % 2)
        next.push_back(list.back());
      list = std::move(next);
    }
    partial[key] = sameTree[inputs] = list.front();
  }
  for (size_t i = 0; i < in.laneBases().size(); ++i) {
    const tilec::Coord &basis = in.laneBases()[i];
    if (basis[axis] == 0)
      continue;
    if (project(basis) != tilec::Coord(in.rank() - 1, 0))
      return op.emitError() << "lane bit " << i << " moves along the reduced axis and another "
                               "axis at once; cannot reduce with shuffles";
    llvm::DenseMap<Value, Value> shuffled;
    for (auto &[key, value] : partial) {
      Value &next = shuffled[value];
      if (!next)
        next = combine(op.getKind(), value, target.shuffleXor(b, value, int64_t(1) << i));
      value = next;
    }
  }
  LinearLayout out = layoutOf(op.getResult());
  SmallVector<Value> result;
  for (int64_t r = 0; r < out.numRegs(); ++r) {
    auto it = partial.find(out.regCoord(r));
    if (it == partial.end())
      return op.emitError() << "result layout does not match the slice of the input layout";
    result.push_back(it->second);
  }
  regs[op.getResult()] = result;
  return success();
}

} // namespace tilec::nvvm
