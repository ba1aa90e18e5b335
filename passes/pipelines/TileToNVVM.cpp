//===- TileToNVVM.cpp - tile-to-nvvm, and every named pipeline registered --===//
//
// Pipelines are named C++ functions, registered so that
// `tile-opt --pass-pipeline=...`, the tilec driver and Python run the same list.
//
//===----------------------------------------------------------------------===//
#include "tilec/Passes.h"
#include "tilec/Pipelines.h"

#include "mlir/Conversion/ConvertToLLVM/ToLLVMPass.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

void tilec::buildTileToNVVMPipeline(OpPassManager &pm, const TileToNVVMOptions &options) {
  // tile: a stale running max, so that the lowering can skip the O rescale
  // in warps whose factors are all 1 (only where O takes >= 128 registers
  // per thread: measured +5-7% at head_dim 128, -4..-7% at 64 over 4 warps).
  if (options.lazyRescale) {
    TileLazyRescaleOptions lazy;
    lazy.numWarps = options.numWarps;
    lazy.minRegisters = 128;
    pm.addPass(createTileLazyRescale(lazy));
  }
  // tile: rotate K/V loads so copies overlap the dots (FA2's schedule).
  TilePipelineOptions pipeline;
  pipeline.stages = options.stages;
  pipeline.multiUse = options.prefetchMultiUse;
  pipeline.afterLastUse = options.prefetchAfterLastUse;
  pm.addPass(createTilePipeline(pipeline));
  // tile -> layouts: split-Q warp partitioning assigns every tile a layout.
  TilePartitionWarpsOptions partition;
  partition.numWarps = options.numWarps;
  pm.addPass(createTilePartitionWarps(partition));
  // layouts -> shared-memory regions: every shared tile, ring twin,
  // conversion scratch and epilogue staging gets its offset.
  TileAllocateSharedOptions allocate;
  allocate.arch = options.arch;
  allocate.smemEpilogue = options.smemEpilogue;
  pm.addPass(createTileAllocateShared(allocate));
  // regions -> the copies' schedule: commits, waits and barriers as ops.
  TileInsertWaitsOptions waits;
  waits.earlyRefill = options.earlyRefill;
  waits.regionBarriers = options.regionBarriers;
  pm.addPass(createTileInsertWaits(waits));
  // a masked block's compute, per warp: skipped where the warp's rows see
  // none of its keys, fewer comparisons where the window's far edge holds.
  if (options.warpBlocks) {
    TileSkipWarpBlocksOptions warpBlocks;
    warpBlocks.fullWarps = options.fullWarps;
    warpBlocks.pruneTests = options.warpPruneTests;
    pm.addPass(createTileSkipWarpBlocks(warpBlocks));
  }
  // layouts -> nvvm: per-thread registers, mma.sync, ldmatrix, cp.async.
  ConvertTileToNVVMOptions lowering;
  lowering.arch = options.arch;
  lowering.skipUnitRescale = options.skipUnitRescale;
  lowering.copyBounds = options.copyBounds;
  lowering.storeTranspose = options.storeTranspose;
  lowering.carryRingAddresses = options.carryRingAddresses;
  lowering.xorRingPhases = options.xorRingPhases;
  pm.addPass(createConvertTileToNVVM(lowering));
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  // scalar scf/arith/cf -> llvm (upstream).
  pm.addPass(createSCFToControlFlowPass());
  pm.addPass(createConvertToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

/// tile-optimize (FA2's target-independent rewrites) and tile-to-cpu (host
/// execution for numerics checks); built in OptimizeAndCPU.cpp.
static void registerOptimizeAndCPUPipelines() {
  PassPipelineRegistration<>("tile-optimize",
                             "FlashAttention-2's rewrites: minimize non-matmul work, split "
                             "masked loops, canonicalize, cse",
                             tilec::buildTileOptimizePipeline);
  PassPipelineRegistration<>("tile-to-cpu",
                             "tile IR (no layouts) -> LLVM dialect for the host via linalg and "
                             "one-shot bufferization",
                             tilec::buildTileToCPUPipeline);
}

/// The options of tile-to-nvvm that several of its passes take, checked
/// once where they enter, so the message names the pipeline's own option
/// (tile-lazy-rescale runs before tile-partition-warps and would otherwise
/// be the one to refuse num-warps). The options one pass owns (arch,
/// copy-bounds, xor-ring-phases) are checked by that pass.
static std::string invalidOption(const tilec::TileToNVVMOptions &options) {
  int64_t warps = options.numWarps;
  if (warps < 1 || warps > tilec::kMaxWarps || (warps & (warps - 1)) != 0)
    return "tile-to-nvvm: num-warps must be a power of two in [1, " +
           std::to_string(tilec::kMaxWarps) + "], got " + std::to_string(warps);
  if (options.stages != 1 && options.stages != 2)
    return "tile-to-nvvm: stages must be 1 or 2, got " + std::to_string(options.stages);
  return "";
}

llvm::Error tilec::buildTileToNVVMPipeline(OpPassManager &pm, const Strategy &strategy,
                                          StringRef arch) {
  auto error = [](const Twine &message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
  };
  for (StringRef owned : {"arch=", "num-warps=", "stages=", "smem-epilogue=", "copy-bounds="})
    for (StringRef word : llvm::split(strategy.loweringOptions, ' '))
      if (word.starts_with(owned))
        return error("lowering option '" + word + "' has its own setting (--" +
                     owned.drop_back() + "); it cannot be passed as a lowering option");
  TileToNVVMOptions options;
  std::string parseError;
  llvm::raw_string_ostream os(parseError);
  if (failed(options.parseFromString(strategy.loweringOptions, os)))
    return error("invalid lowering options '" + strategy.loweringOptions + "': " + parseError);
  options.arch = arch.str();
  options.numWarps = strategy.numWarps;
  options.stages = strategy.stages;
  options.smemEpilogue = strategy.smemEpilogue;
  options.copyBounds = strategy.copyBounds;
  if (std::string why = invalidOption(options); !why.empty())
    return error(why);
  buildTileToNVVMPipeline(pm, options);
  return llvm::Error::success();
}

void tilec::registerTilecPipelines() {
  registerOptimizeAndCPUPipelines();
  // PassPipelineRegistration's builder cannot fail, so the pipeline is
  // registered with its own parse-validate-build function.
  registerPassPipeline(
      "tile-to-nvvm",
      "tile IR -> layouts (split-Q) -> LLVM + NVVM dialects, ready for translation to LLVM IR",
      [](OpPassManager &pm, StringRef text, function_ref<LogicalResult(const Twine &)> error) {
        TileToNVVMOptions options;
        if (failed(options.parseFromString(text)))
          return failure();
        if (std::string why = invalidOption(options); !why.empty())
          return error(why);
        buildTileToNVVMPipeline(pm, options);
        return success();
      },
      [](function_ref<void(const detail::PassOptions &)> handler) { handler(TileToNVVMOptions()); });
}
