//===- Passes.td - every tilec pass ----------------------------------------===//
#ifndef TILEC_PASSES_TD
#define TILEC_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// Layout assignment and the GPU lowering
//===----------------------------------------------------------------------===//

def TilePartitionWarps : Pass<"tile-partition-warps", "mlir::ModuleOp"> {
  let summary = "FlashAttention-2's split-Q: assign a distributed layout to every tile";
  let description = [{
    Gives every tile of each `tile.kernel` function a distributed layout
    (`#tile.linear`) or a shared-memory placement (`#tile.shared`) as its
    tensor encoding. Anchors are the `tile.dot`s: accumulators and A operands
    take the mma.sync fragment layouts with rows split across warps (each warp
    owns a block of Q rows), B operands (K and V tiles) live in shared memory
    and are read by every warp. Layouts then flow through elementwise ops,
    loops, reductions and shape plumbing, so row reductions of S stay inside
    a warp and P feeds the second dot from registers. Cheap producers (iota,
    splat, constants) are duplicated rather than converted when two users
    disagree; anything else gets a `tile.convert_layout`. A kernel that cannot
    be split this way (e.g. a reduction across the rows owned by different
    warps) gets a diagnostic saying why.
  }];
  let options = [
    Option<"numWarps", "num-warps", "int64_t", /*default=*/"::tilec::kDefaultNumWarps",
           "warps per program (thread block)">,
  ];
  let dependentDialects = ["::mlir::tile::TileDialect"];
}

def TilePipeline : Pass<"tile-pipeline", "mlir::ModuleOp"> {
  let summary = "prefetch K/V tiles one iteration ahead (single buffer or a ring of two)";
  let description = [{
    The loads of a loop's tile.dot B operands are rotated to load the
    following iteration's tile, carried around the back edge; the first
    iteration's tile is loaded before the loop. With stages=1
    (FlashAttention-2's schedule, one shared buffer per tile) a load moves to
    just before the next dot: the copy of K(j+1) overlaps P·V(j), and V(j)
    overlaps S = Q·K(j)ᵀ. With stages=2 (two buffers per tile, used in turn)
    every such load moves to the top of the body: K(j+1) and V(j+1) overlap
    all of iteration j.
  }];
  let options = [
    Option<"stages", "stages", "int64_t", /*default=*/"::tilec::kDefaultStages",
           "shared-memory buffers per prefetched tile: 1 or 2">,
    Option<"multiUse", "multi-use", "bool", /*default=*/"true",
           "stages=2: also prefetch a loaded tile that several dots read as B (Q and dO "
           "in the backward's dK/dV loop, K in its dQ loop)">,
    Option<"afterLastUse", "after-last-use", "bool", /*default=*/"false",
           "stages=1: also prefetch a loaded tile that several dots read as B, before the "
           "dot that follows the last of them (its buffer is refilled in place: the fused "
           "backward's Q and dO at sm_80's shared-memory size)">,
  ];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

def TileAllocateShared : Pass<"tile-allocate-shared", "mlir::ModuleOp"> {
  let summary = "give every shared-memory tile its region of the kernel's dynamic shared memory";
  let description = [{
    Runs on layout-assigned tile IR (after tile-partition-warps, the last pass
    that makes shared tiles) and before convert-tile-to-nvvm, which reads what
    it decides. Every op that needs shared memory (passes/AllocateShared.h:
    loads into shared tiles, conversions into them, the twins of two-region
    prefetch rings, layout-conversion scratch, smem-epilogue staging) gets
    `tile.smem = #tile.smem<offset, bytes>`; an scf.for gets the twins it
    allocates (`tile.smem_twins`) and where its body's own tiles start
    (`tile.smem_body`); each kernel gets its peak (`tile.shared_bytes`).
    Regions follow program order like a stack: a region lives from its op to
    the end of the block that holds it (a loop body or branch frees its
    tiles when it ends, so the masked and unmasked loops
    tile-split-masked-loops makes reuse the same space); a loop's carried
    tiles and ring twins live until the loop ends and are freed then when
    nothing after it reads them; epilogue staging lives only during its
    store. Offsets are multiples of the target's swizzle period. A kernel
    whose tiles need more than the target allows one block is refused at the
    op where the peak is reached.
  }];
  let options = [
    Option<"arch", "arch", "std::string", /*default=*/"\"sm_80\"",
           "target architecture: its alignment, chunk size and shared-memory limit">,
    Option<"smemEpilogue", "smem-epilogue", "bool", /*default=*/"::tilec::kDefaultSmemEpilogue",
           "store register tiles holding under 16 bytes of a row per thread through "
           "shared memory, as 16-byte chunks along rows (FlashAttention-2's epilogue): "
           "such stores get a staging region, which the lowering then uses">,
  ];
  let dependentDialects = ["::mlir::tile::TileDialect"];
}

def TileSkipWarpBlocks : Pass<"tile-skip-warp-blocks", "mlir::ModuleOp"> {
  let summary = "in a masked K/V block, a warp whose rows see none of its keys skips its compute";
  let description = [{
    Runs on layout-assigned IR after tile-insert-waits, on the loops
    tile-split-masked-loops marked `#tile<blocks partial>` whose one -inf
    mask is a conjunction of affine comparisons (its closed form). Under
    split-Q a warp's scores, softmax and P·V touch only its own registers
    and rows; the K/V copies, waits and barriers are the program's. The
    pass bounds each comparison E <= 0 over the elements one warp holds (the
    mask's layout: warp w's coordinates lie in off(w) + [0, span], off the
    XOR of w's warp bases, span the OR of the register and lane bits, which
    must not overlap the warp bits) and branches, per iteration and warp:
      - some comparison false on all of the warp's elements: the block is
        empty for the warp; it passes its carried values (running max, sum,
        accumulator) through unchanged, as tile-split-masked-loops skips an
        empty block (an update with only -inf scores leaves them as they
        are). The copies and barriers still run.
      - a loop that tests comparisons of both signs in the loop variable (a
        window's right range) and whose negative ones hold on all of the
        warp's elements (the window's left edge is far, the usual case):
        the body that tests the positive ones only.
      - `full-warps`: every tested comparison true on the warp's elements:
        the unmasked body.
      - else the loop's body as it was.
    The compute moved under the branch is the backward slice of the loop's
    register-tile results; it must be free of memory effects and shared
    memory (no tile.smem: a conversion through shared memory has barriers),
    and every copy, wait and barrier of the body must come before it (the
    ring schedule, stages=2). A loop that does not fit is left as it is,
    with a remark saying why.
  }];
  let options = [
    Option<"pruneTests", "prune-tests", "bool", /*default=*/"true",
           "give warps inside a window's left edge the body that tests only the "
           "right-hand comparisons (one more copy of the body in the right range)">,
    Option<"fullWarps", "full-warps", "bool", /*default=*/"false",
           "also give warps whose rows see every key of a masked block the "
           "unmasked body (one more copy of the body per masked loop)">,
  ];
  let dependentDialects = ["::mlir::scf::SCFDialect", "::mlir::arith::ArithDialect",
                           "::mlir::tile::TileDialect"];
}

def TileInsertWaits : Pass<"tile-insert-waits", "mlir::ModuleOp"> {
  let summary = "place the cp.async commits, waits and barriers shared tiles need";
  let description = [{
    Runs after tile-allocate-shared (it reads the regions) and before the
    lowering, which translates what it inserts one op to one instruction.
    Every tile.load into a shared tile (an asynchronous copy) is followed by
    `tile.async_commit`: one group per tile, numbered at compile time. Where
    a copied tile is first read (a tile.dot operand, a conversion out of
    shared memory), `tile.async_wait pending = N` (N = the groups committed
    after its own, which may stay in flight: K's and V's copies of one
    iteration overlap) and a `tile.barrier` (the other threads' copies), each
    unless already implied; tiles filled before a loop and read in it are
    waited for in front of the loop. Before a region is written again (a
    copy, a conversion into it, scratch, epilogue staging: WAR), a wait for
    the last group that wrote any of its bytes and a barrier if any thread
    touched shared memory since the last one. The count stays true path by
    path: each branch of an scf.if starts from the state before it; after a
    loop or branch, tiles pending before it count as committed last; at the
    top of a loop body the previous iteration's copies are the newest group,
    written to every region from the body's start (tile.smem_body). Before
    the kernel returns, a wait for every group. A kernel that already
    holds any of these ops (a schedule written by hand, or the pass ran) is
    left as it is.

    With `early-refill` (opt-in per kernel; the decode kernels' EARLY_REFILL), a ring
    loop (tile-pipeline stages=2) whose only copies are its rings' refills,
    each ring tile read unconditionally in the body, issues the refills
    before it waits for the current tiles: the refill's region held the
    tile of two iterations back, which the previous iteration waited for
    and read, so it needs only a barrier (WAR), and the current tiles are
    waited for at their first read with the refills left in flight
    (`pending = 2` for K and V), so two blocks are in flight through the
    wait. The twin regions are drained once in front of the loop.

    With `region-barriers` (opt-in per kernel; the fused backward's
    candidates), the WAR barrier before a write into a shared tile is left
    out when no access since the last barrier may have touched that tile's
    bytes (the walk records each dot's ldmatrix reads, each conversion's
    reads and writes by region; anything else, a loop's top and the
    previous iteration count as touching everything). The fused backward's
    Pᵀ and dSᵀ writes then need no barrier before them: the iteration's
    top barrier already ordered them after the previous iteration's reads.
  }];
  let options = [
    Option<"earlyRefill", "early-refill", "bool", /*default=*/"false",
           "issue a ring loop's refills before the wait for its current tiles">,
    Option<"regionBarriers", "region-barriers", "bool", /*default=*/"false",
           "a write to shared memory gets a barrier before it only if a thread may have "
           "touched its bytes since the last one (not any shared memory)">,
  ];
  let dependentDialects = ["::mlir::tile::TileDialect"];
}

def ConvertTileToNVVM : Pass<"convert-tile-to-nvvm", "mlir::ModuleOp"> {
  let summary = "lower layout-assigned tile IR to the LLVM and NVVM dialects";
  let description = [{
    Each register-layout tile becomes the list of scalars one thread holds;
    elementwise ops become scalar ops per register, `tile.reduce` an in-thread
    combine plus butterfly shuffles, `tile.dot` mma.sync m16n8k16 with B
    fragments read by ldmatrix from shared memory; shared-memory tiles are
    filled with cp.async, in the regions tile-allocate-shared gave them (it
    must run first; a tile.store it gave a staging region goes through
    shared memory); tile-insert-waits' `tile.async_commit`, `tile.async_wait`
    and `tile.barrier` become one instruction each. Kernels become `llvm.func`s with `nvvm.kernel`,
    carrying the kernel's `tile.*` attributes (`tile.shared_bytes` among them) and,
    per pointer parameter, `tile.elem` and `tile.align`, from which the driver
    builds the launch manifest (dialects/Tile/TileAttrNames.h). Scalar arith/scf remain for the
    upstream conversions that follow in the `tile-to-nvvm` pipeline.
  }];
  let options = [
    Option<"arch", "arch", "std::string", /*default=*/"\"sm_80\"",
           "target architecture (sm_80 or sm_90a)">,
    Option<"skipUnitRescale", "skip-unit-rescale", "bool", /*default=*/"false",
           "multiply a tile by a row or column broadcast (the online softmax's O "
           "rescale) only in warps where some factor is not exactly 1 (a vote and a "
           "branch; exact). Experimental: not measured yet">,
    Option<"copyBounds", "copy-bounds", "std::string", /*default=*/"::tilec::kDefaultCopyBounds",
           "how global->shared copies respect the view's bounds: 'chunk' (every "
           "chunk tested, addresses clamped into the view), 'tile' (one uniform "
           "test per tile branches to unchecked or checked copies), 'row' (no "
           "branch: each chunk's size is 16 or 0 by its row, addresses chained, "
           "when the columns are inside at compile time; else as 'tile'). "
           "Register tiles: one test per tile except with 'chunk'">,
    Option<"storeTranspose", "store-transpose", "bool", /*default=*/"true",
           "when a register tile is stored straight to global memory with under "
           "16 bytes of a row per thread (the O accumulator without smem-epilogue), "
           "exchange registers between lanes with shuffles first so that each "
           "store moves 16 bytes (measured 2026-11-29: +2-7% at head_dim 128 up "
           "to 2k keys, level at 16k; false keeps the narrow stores)">,
    Option<"carryRingAddresses", "carry-ring-addresses", "bool", /*default=*/"true",
           "in loops where one accumulator, or the loop-carried register tiles "
           "together (the backward's dK and dV), take >= 128 registers per thread, "
           "carry the ring's ldmatrix addresses as loop values (advanced at the back "
           "edge) instead of keeping their loop-invariant bases live; with "
           "xor-ring-phases=trans: no local memory in the d128 hot loops on sm_80 "
           "or on the sm_90 JIT, +0..+3% non-causal, level causal (2026-11-29, "
           "bench/RESULTS.md Session 5); false keeps the invariant bases">,
    Option<"xorRingPhases", "xor-ring-phases", "std::string", /*default=*/"\"auto\"",
           "with carry-ring-addresses, which ring tiles carry one address and "
           "derive their other swizzle phases by XOR where used (the others carry "
           "one address per phase): 'trans' (tiles read by ldmatrix.trans: V), "
           "'non-trans' (K), 'all', 'none', or 'auto': 'trans' in loops where one "
           "accumulator is short of registers (the forward's O at d128: no local "
           "memory in its hot loops on sm_80 and the sm_90 JIT and fastest, "
           "2026-11-29, bench/RESULTS.md Session 5), 'all' where the carried tiles "
           "together are (the backward's dK + dV at d128: 2 local loads per "
           "iteration against 5-29 with 'trans', +4% non-causal; Session 14)">,
  ];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect", "::mlir::NVVM::NVVMDialect",
                           "::mlir::arith::ArithDialect", "::mlir::scf::SCFDialect"];
}

//===----------------------------------------------------------------------===//
// Target-independent optimizations (FlashAttention-2's math tricks)
//===----------------------------------------------------------------------===//

def TileMinimizeNonmatmul : Pass<"tile-minimize-nonmatmul", "mlir::ModuleOp"> {
  let summary = "FlashAttention-2's online softmax: exp2, folded scales, one FMA per score";
  let description = [{
    Rewrites the naive online softmax of an attention loop (`exp(s·scale − m)`,
    the scale as a full-tile multiply before the row max, a division by the
    row sum after the loop) into FlashAttention-2's form (paper §3.1):
    the running max is kept on the unscaled scores, `exp` becomes `exp2` with
    `scale·log2(e)` folded into one `math.fma` per score, the normalization is
    one reciprocal per row after the loop, and the log-sum-exp is one FMA per
    row after the loop. Each step is its own pattern. Folding the scale into
    the max needs `scale > 0`: a constant proves it; otherwise the loop is
    versioned on a runtime `scale > 0` test and the original loop is kept for
    the other case.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::math::MathDialect",
                           "::mlir::scf::SCFDialect"];
}

def TileLazyRescale : Pass<"tile-lazy-rescale", "mlir::ModuleOp"> {
  let summary = "keep a stale running max until it is 2^threshold too small (FA4's lazy rescale)";
  let description = [{
    On FlashAttention-2's form of the online softmax (after
    tile-minimize-nonmatmul: `m' = max(m, rowmax)`, `alpha = exp2(fma(m, c,
    -m'·c))`, scores `exp2(fma(s, c, -m'·c))`), a row keeps its old max m
    while the new one would rescale it by no less than 2^-threshold:
    `grow = alpha < 2^-threshold`, `m' = grow ? max : m`, `alpha' = grow ?
    alpha : 1`, and the scores use the kept max. Exact in real arithmetic
    (O, l and lse = m + log l use the same max); the scores it feeds the
    second dot are then at most 2^threshold instead of 1, which f16 and
    bf16 hold. What it buys: after the first blocks alpha is exactly 1 in
    almost every row, so a warp-uniform test can skip the O rescale
    (convert-tile-to-nvvm skips the multiplies this pass marks
    `tile.skip_unit_rescale`). Without exact ones that
    test never fires: alpha = exp2(fma(m, c, -round(m·c))) is the rounding
    error of m·c, not 0.
  }];
  let options = [
    Option<"threshold", "threshold", "double", /*default=*/"8.0",
           "log2 of the largest factor a kept max may leave in the scores (at "
           "most 15: the scores are rounded to f16/bf16 for the second dot)">,
    Option<"numWarps", "num-warps", "int64_t", /*default=*/"::tilec::kDefaultNumWarps",
           "warps per program (to count the O rescale's registers per thread)">,
    Option<"minRegisters", "min-registers", "int64_t", /*default=*/"0",
           "rewrite only loops whose O rescale multiplies at least this many f32 "
           "registers per thread (the warp vote and branch cost more than they "
           "save below; measured: +5-7% at 128, -4..-7% at 64)">,
  ];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::math::MathDialect"];
}

def TileSplitMaskedLoops : Pass<"tile-split-masked-loops", "mlir::ModuleOp"> {
  let summary = "apply a mask only in the K/V blocks where it can bite";
  let description = [{
    Analyses `arith.select(pred, s, -inf)` in an `scf.for` over K/V blocks,
    where `pred` is a conjunction of `arith.cmpi` of index tiles affine in the
    row/column position, the loop variable and loop-invariant scalars (program
    ids, runtime sequence lengths). Splits the loop into plain `scf.for`s over
    computed bounds: blocks where the predicate is true everywhere (no mask),
    blocks where it is mixed (mask kept), and blocks where it is false
    everywhere (skipped: every score is -inf, so the online-softmax update is
    the identity). A predicate it cannot analyse stays applied in every
    iteration, with a remark saying why.

    Beyond one conjunction of affine comparisons (the closed form above),
    the general case takes several -inf masks (chained or not) and
    predicates built with `&` and `|` from comparisons (`==` included,
    indices divided by a constant, conditions that do not depend on the loop
    variable); parts it cannot analyse (loaded data, products of indices)
    make every block that runs masked. The kernel gets `tile.mask` ("split"
    or "dense") and, when dense, `tile.mask_note` with the remark; both go
    to the launch manifest.
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect", "::mlir::scf::SCFDialect"];
}

def TileCountWork : Pass<"tile-count-work", "mlir::ModuleOp"> {
  let summary = "report matmul FLOPs and non-matmul element operations per loop iteration";
  let description = [{
    For every `scf.for` containing a `tile.dot` in a `tile.kernel` function,
    emits a remark with the matmul FLOPs (2·M·N·K per dot) and the number of
    non-matmul element operations (arith/math on tiles, one per element;
    `tile.reduce`, one per input element) of one iteration, and one remark per
    kernel with the totals of code outside the loops.
  }];
}

//===----------------------------------------------------------------------===//
// CPU execution (numerics checks without a GPU)
//===----------------------------------------------------------------------===//

def ConvertTileToCPU : Pass<"convert-tile-to-cpu", "mlir::ModuleOp"> {
  let summary = "lower tile ops to linalg/tensor/memref/scf and wrap each kernel in a grid loop";
  let description = [{
    For a host run through MLIR's ExecutionEngine. Every `!tile.ptr<T>`
    parameter becomes a `memref<?xT>`; views, loads and stores become index
    arithmetic with the same bounds semantics as the GPU path (elements
    outside a view read the padding value and are never written); `tile.dot`
    becomes a `linalg.generic` that extends f16/bf16 operands to f32 and
    multiply-adds in f32. Each kernel `@k` gets a wrapper
    `@__tilec_grid_k(params..., gx, gy, gz : i32)` that calls it for every
    program id of the grid.
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect", "::mlir::tensor::TensorDialect",
                           "::mlir::memref::MemRefDialect", "::mlir::scf::SCFDialect",
                           "::mlir::arith::ArithDialect", "::mlir::func::FuncDialect"];
}

#endif // TILEC_PASSES_TD
