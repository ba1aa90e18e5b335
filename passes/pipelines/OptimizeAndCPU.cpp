//===- OptimizeAndCPU.cpp - the tile-optimize and tile-to-cpu pipelines ---===//
#include "tilec/Passes.h"
#include "tilec/Pipelines.h"

#include "mlir/Conversion/AffineToStandard/AffineToStandard.h"
#include "mlir/Conversion/ConvertToLLVM/ToLLVMPass.h"
#include "mlir/Conversion/MathToLibm/MathToLibm.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Bufferization/Pipelines/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/FuncBufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/ControlFlow/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/Linalg/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Dialect/SCF/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Tensor/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void tilec::buildTileOptimizePipeline(OpPassManager &pm) {
  // exp2, folded scales, one FMA per score, per-row normalization.
  pm.addPass(createTileMinimizeNonmatmul());
  pm.addPass(createCanonicalizerPass());
  // unmasked / masked / skipped K/V blocks from the mask predicate.
  pm.addPass(createTileSplitMaskedLoops());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

void tilec::buildTileToCPUPipeline(OpPassManager &pm) {
  // tile -> linalg/tensor/memref, grid -> loops over program ids.
  // The GPU's loop schedule (K prefetched one iteration ahead) runs here
  // too, so the CPU numerics tests check the rotation itself.
  pm.addPass(createTilePipeline());
  pm.addPass(createConvertTileToCPU());
  pm.addPass(createCanonicalizerPass());
  pm.addNestedPass<func::FuncOp>(createConvertElementwiseToLinalgPass());
  // tensors -> buffers, freed by ownership-based deallocation.
  bufferization::OneShotBufferizePassOptions bufferize;
  bufferize.bufferizeFunctionBoundaries = false;
  bufferize.allowReturnAllocsFromLoops = true; // iter_args are fresh tiles each iteration
  pm.addPass(bufferization::createOneShotBufferizePass(bufferize));
  bufferization::buildBufferDeallocationPipeline(pm);
  // linalg -> loops; bf16 conversions expanded to integer ops (no libcalls).
  pm.addNestedPass<func::FuncOp>(createConvertLinalgToLoopsPass());
  pm.addPass(memref::createExpandStridedMetadataPass());
  pm.addPass(createLowerAffinePass());
  arith::ArithExpandOpsPassOptions expand;
  expand.includeBf16 = true;
  pm.addPass(arith::createArithExpandOpsPass(expand));
  // scf/arith/math/memref/func -> llvm (upstream).
  pm.addPass(createSCFToControlFlowPass());
  pm.addPass(createConvertToLLVMPass());
  // What math is left has no LLVM intrinsic (erf, atan, cbrt, ...): libm
  // calls, which the ExecutionEngine resolves in the host process. (Before
  // ConvertToLLVM, math-to-libm would refuse the math it does not know,
  // math.absi for one.)
  pm.addPass(createConvertMathToLibmPass());
  pm.addPass(createConvertToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  pm.addPass(createCanonicalizerPass());
}

void tilec::registerTileToCPUDialects(DialectRegistry &registry) {
  registry.insert<linalg::LinalgDialect, bufferization::BufferizationDialect,
                  affine::AffineDialect>();
  arith::registerBufferizableOpInterfaceExternalModels(registry);
  bufferization::func_ext::registerBufferizableOpInterfaceExternalModels(registry);
  cf::registerBufferizableOpInterfaceExternalModels(registry);
  linalg::registerBufferizableOpInterfaceExternalModels(registry);
  scf::registerBufferizableOpInterfaceExternalModels(registry);
  tensor::registerBufferizableOpInterfaceExternalModels(registry);
}
