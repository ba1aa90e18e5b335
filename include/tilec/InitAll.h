//===- InitAll.h - one registration function for every tool ---------------===//
//
// tile-opt, tilec and the Python module all call these, so the same dialects,
// passes and named pipelines exist everywhere.
//
//===----------------------------------------------------------------------===//
#ifndef TILEC_INITALL_H
#define TILEC_INITALL_H

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace tilec {
/// The tile dialect plus every upstream dialect the pipelines touch, with
/// their LLVM-translation and ConvertToLLVM interfaces.
void registerAllDialects(mlir::DialectRegistry &registry);
/// Every tilec pass and named pipeline (global, for tile-opt's command line).
void registerAllPasses();
} // namespace tilec

#endif
