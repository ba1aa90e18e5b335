//===- WorkCount.h - matmul vs non-matmul work of tile kernels ------------===//
//
// How much of a kernel's work is matmul and how much is everything else, per
// iteration of each loop that contains a tile.dot. FlashAttention-2's point
// (paper §3.1) is that non-matmul FLOPs run ~16x slower than tensor-core
// matmul FLOPs, so the passes that remove them report their effect here;
// `tile-opt --tile-count-work` and `tilec --stats` print it.
//
// Counting rule: a tile.dot is 2·M·N·K matmul FLOPs; every arith/math op on a
// tile is one non-matmul op per result element (select, compare and convert
// included); tile.reduce is one op per input element. Shape plumbing,
// constants, splats, iotas, loads and stores count nothing.
//
//===----------------------------------------------------------------------===//
#ifndef TILEC_ANALYSIS_WORKCOUNT_H
#define TILEC_ANALYSIS_WORKCOUNT_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <string>

namespace tilec {

struct WorkCount {
  int64_t matmulFlops = 0;
  int64_t nonMatmulOps = 0;
  std::map<std::string, int64_t> byOp; // non-matmul ops by op name
};

struct LoopWork {
  mlir::Operation *loop = nullptr;
  std::string blocks;  // "full"/"partial" after tile-split-masked-loops, else ""
  bool fallback = false; // the scale <= 0 copy kept by tile-minimize-nonmatmul
  WorkCount perIteration;
};

struct KernelWork {
  std::string kernel;
  llvm::SmallVector<LoopWork> loops; // loops holding a tile.dot, in program order
  WorkCount outsideLoops;
};

/// Counts the work of every `tile.kernel` function of `module`.
llvm::SmallVector<KernelWork> countWork(mlir::ModuleOp module);

/// One line per loop and per kernel, as `tilec --stats` prints them.
void printWork(llvm::ArrayRef<KernelWork> work, llvm::raw_ostream &os);

/// "matmul 4194304 flops, non-matmul 24576 ops [math.exp2 4096, ...]".
std::string describe(const WorkCount &count);

} // namespace tilec

#endif
