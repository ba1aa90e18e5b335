//===- Pipelines.h - named pipelines ---------------------------------------===//
#ifndef TILEC_PIPELINES_H
#define TILEC_PIPELINES_H

#include "mlir/Pass/PassOptions.h"
#include "llvm/Support/Error.h"
#include "tilec/Strategy.h"

namespace mlir {
class DialectRegistry;
class OpPassManager;
} // namespace mlir

namespace tilec {

struct TileToNVVMOptions : public mlir::PassPipelineOptions<TileToNVVMOptions> {
  Option<std::string> arch{*this, "arch", llvm::cl::desc("sm_80 or sm_90a"),
                           llvm::cl::init("sm_80")};
  Option<int64_t> numWarps{*this, "num-warps", llvm::cl::desc("warps per program"),
                           llvm::cl::init(kDefaultNumWarps)};
  Option<int64_t> stages{*this, "stages",
                         llvm::cl::desc("shared buffers per prefetched K/V tile (tile-pipeline): "
                                        "1 or 2"),
                         llvm::cl::init(kDefaultStages)};
  Option<bool> skipUnitRescale{*this, "skip-unit-rescale",
                               llvm::cl::desc("skip multiplies by a broadcast of exact ones "
                                              "(warp vote; experimental)"),
                               llvm::cl::init(false)};
  Option<bool> lazyRescale{*this, "lazy-rescale",
                           llvm::cl::desc("keep a row's stale max until the new one is 2^8 "
                                          "larger (tile-lazy-rescale) and skip the O rescale "
                                          "in warps whose factors are all 1, where O holds "
                                          ">= 128 f32 registers per thread"),
                           llvm::cl::init(true)};
  Option<bool> warpBlocks{*this, "warp-blocks",
                          llvm::cl::desc("per warp, skip the compute of masked K/V blocks the "
                                         "warp's rows see nothing of and test only the "
                                         "comparisons that can cut its rows "
                                         "(tile-skip-warp-blocks)"),
                          llvm::cl::init(false)};
  Option<bool> warpPruneTests{*this, "warp-prune-tests",
                              llvm::cl::desc("with warp-blocks: warps inside a window's left "
                                             "edge test only the right-hand comparisons"),
                              llvm::cl::init(true)};
  Option<bool> fullWarps{*this, "full-warps",
                         llvm::cl::desc("with warp-blocks: warps whose rows see every key of a "
                                        "masked block take the unmasked body"),
                         llvm::cl::init(false)};
  Option<std::string> copyBounds{*this, "copy-bounds",
                                 llvm::cl::desc("bounds of global->shared copies: chunk, tile "
                                                "or row (see convert-tile-to-nvvm)"),
                                 llvm::cl::init(kDefaultCopyBounds)};
  Option<bool> storeTranspose{*this, "store-transpose",
                              llvm::cl::desc("widen direct register-tile stores to 16 bytes "
                                             "with lane shuffles"),
                              llvm::cl::init(true)};
  Option<bool> earlyRefill{*this, "early-refill",
                           llvm::cl::desc("tile-insert-waits: issue a ring loop's refills before the "
                                          "wait for its current tiles (two blocks in flight through "
                                          "the wait; opt-in, the decode kernels' EARLY_REFILL)"),
                           llvm::cl::init(false)};
  Option<bool> regionBarriers{*this, "region-barriers",
                              llvm::cl::desc("tile-insert-waits: a shared write's WAR barrier "
                                             "only when its bytes may have been touched since "
                                             "the last barrier (opt-in)"),
                              llvm::cl::init(false)};
  Option<bool> carryRingAddresses{*this, "carry-ring-addresses",
                                  llvm::cl::desc("carry the K/V ring's ldmatrix addresses "
                                                 "through loops short of registers (no local "
                                                 "memory in the d128 hot loops; see "
                                                 "xor-ring-phases)"),
                                  llvm::cl::init(true)};
  Option<std::string> xorRingPhases{*this, "xor-ring-phases",
                                    llvm::cl::desc("carried ring tiles whose other swizzle "
                                                   "phases are XOR-derived: auto (trans where "
                                                   "one accumulator is short of registers, "
                                                   "all where the carried tiles together "
                                                   "are), trans (V), non-trans (K), all or "
                                                   "none"),
                                    llvm::cl::init("auto")};
  Option<bool> prefetchAfterLastUse{*this, "prefetch-after-last-use",
                                   llvm::cl::desc("stages=1: also prefetch a loaded tile that "
                                                  "several dots read as B, into its own buffer "
                                                  "before the dot after the last of them "
                                                  "(tile-pipeline after-last-use; opt-in)"),
                                   llvm::cl::init(false)};
  Option<bool> prefetchMultiUse{*this, "prefetch-multi-use",
                                llvm::cl::desc("stages=2: also prefetch a loaded tile that "
                                               "several dots read as B (tile-pipeline "
                                               "multi-use)"),
                                llvm::cl::init(true)};
  Option<bool> smemEpilogue{*this, "smem-epilogue",
                            llvm::cl::desc("store narrow register tiles through shared memory "
                                           "as 16-byte chunks (FA2's epilogue)"),
                            llvm::cl::init(kDefaultSmemEpilogue)};
};

/// tile IR (optionally after tile-optimize) -> LLVM + NVVM dialects.
void buildTileToNVVMPipeline(mlir::OpPassManager &pm, const TileToNVVMOptions &options);

/// tile-to-nvvm for `strategy` on `arch`, built directly (the driver's
/// way): its loweringOptions parsed (an option with a field of its own there
/// is refused: a second value would silently win), its fields set, and the
/// whole checked as the registered pipeline checks it. Fails with a message
/// naming the value.
llvm::Error buildTileToNVVMPipeline(mlir::OpPassManager &pm, const Strategy &strategy,
                                    llvm::StringRef arch);

/// tile-optimize: FlashAttention-2's target-independent rewrites
/// (tile-minimize-nonmatmul, tile-split-masked-loops, canonicalize, cse).
/// Its output stays within tile/arith/math/scf, the GPU lowering's input.
void buildTileOptimizePipeline(mlir::OpPassManager &pm);

/// tile-to-cpu: tile IR (no layouts) -> LLVM dialect for the host, through
/// linalg and one-shot bufferization; kernels become @__tilec_grid_<name>.
void buildTileToCPUPipeline(mlir::OpPassManager &pm);

/// The bufferization models and dialects tile-to-cpu needs in a context.
void registerTileToCPUDialects(mlir::DialectRegistry &registry);

} // namespace tilec

#endif
