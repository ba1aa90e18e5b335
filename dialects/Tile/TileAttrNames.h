//===- TileAttrNames.h - the attributes passes and the driver agree on -----===//
//
// Every discardable attribute that carries a contract from one pass to
// another, or from the compiler to the driver's launch manifest, is named
// here and nowhere else. The tile dialect verifies the typed ones
// (TileDialect.cpp, verifyOperationAttribute): tile.blocks, tile.strategy,
// tile.num_warps, tile.grid, tile.arg_names.
//
//===----------------------------------------------------------------------===//
#ifndef TILEC_DIALECTS_TILE_TILEATTRNAMES_H
#define TILEC_DIALECTS_TILE_TILEATTRNAMES_H

#include "llvm/ADT/StringRef.h"

namespace tilec {

// --- on a kernel's func.func (the frontend or a hand-written kernel) -------

/// Unit: this func.func is a kernel entry point.
inline constexpr llvm::StringLiteral kKernelAttrName = "tile.kernel";
/// Unit argument attribute on a scalar kernel parameter declared > 0
/// (tl.assume(x > 0)): passes may rely on it; every launch checks it.
inline constexpr llvm::StringLiteral kPositiveAttrName = "tile.positive";
/// Array of strings: the parameters' names (default "arg<i>"), as the
/// manifest and the runtime's error messages name them.
inline constexpr llvm::StringLiteral kArgNamesAttrName = "tile.arg_names";
/// Array of three strings: the launch grid, expressions over the integer
/// parameters in the language of tilec/runtime/GridSyntax.h.
inline constexpr llvm::StringLiteral kGridAttrName = "tile.grid";
/// Dictionary: what the frontend specialized (dtype, head_dim, causal, ...);
/// copied to the manifest's "variant".
inline constexpr llvm::StringLiteral kVariantAttrName = "tile.variant";

/// #tile.strategy<...> on a module: the strategy record it is lowered with
/// (tilec/Strategy.h), put there by the driver and written into manifests.
inline constexpr llvm::StringLiteral kStrategyAttrName = "tile.strategy";

// --- set by passes ------------------------------------------------------------

/// i64 on a kernel: warps per program, set by tile-partition-warps, read by
/// the lowering.
inline constexpr llvm::StringLiteral kNumWarpsAttrName = "tile.num_warps";

/// #tile<blocks full|partial|empty> on a K/V loop that tile-split-masked-loops
/// made: no block needs the mask, every block may, or none runs.
/// tile-pipeline chains adjacent split loops; tile-count-work reports per
/// kind.
inline constexpr llvm::StringLiteral kBlocksAttr = "tile.blocks";

/// On a kernel function: what tile-split-masked-loops made of its masks,
/// the least of any loop: "split" (blocks classified: skipped, unmasked,
/// masked) or "dense" (the mask is applied in every block that runs; blocks
/// it hides entirely may still be skipped). The launch manifest's "mask".
inline constexpr llvm::StringLiteral kMaskAttr = "tile.mask";
/// With a tile.mask other than "split": the pass's remark (what it could not
/// classify, where). The manifest's "mask_note".
inline constexpr llvm::StringLiteral kMaskNoteAttr = "tile.mask_note";

/// On the loop tile-minimize-nonmatmul keeps for rows whose running max is
/// -inf (the exact softmax, no folded-scale rewrite); later rewrites leave it
/// alone and tile-count-work counts it apart.
inline constexpr llvm::StringLiteral kSoftmaxFallbackAttr = "tile.softmax_fallback";

/// On a multiply by a row broadcast that tile-lazy-rescale made exactly 1 in
/// most rows; convert-tile-to-nvvm skips it in warps where every factor is 1.
inline constexpr llvm::StringLiteral kSkipUnitRescaleAttr = "tile.skip_unit_rescale";

/// Unit, on an scf.if whose condition is the same in every lane of a warp
/// (tile-skip-warp-blocks' per-warp branches): convert-tile-to-nvvm branches
/// on a warp vote of it, which ptxas knows is uniform.
inline constexpr llvm::StringLiteral kWarpUniformAttrName = "tile.warp_uniform";

// --- set by tile-allocate-shared, read by convert-tile-to-nvvm -------------
//
// Where each shared-memory tile lives (passes/AllocateShared.cpp; which ops
// need a region, and its size, is passes/AllocateShared.h).

/// #tile.smem<offset, bytes> on an op that needs shared memory: a tile.load
/// or tile.convert_layout whose result is a shared tile (a reload refilling a
/// loop-carried tile repeats that tile's region), a tile.convert_layout
/// through a scratch tile, a tile.store staged through shared memory (the
/// smem-epilogue).
inline constexpr llvm::StringLiteral kSmemAttrName = "tile.smem";
/// Array of #tile.smem on an scf.for: the twin region of each carried shared
/// tile that starts a two-region prefetch ring there, in iter-arg order.
inline constexpr llvm::StringLiteral kSmemTwinsAttrName = "tile.smem_twins";
/// #tile.smem on an scf.for: the space its body's own tiles take (they
/// start at `offset`; every region at or above it may be refilled by the
/// next iteration).
inline constexpr llvm::StringLiteral kSmemBodyAttrName = "tile.smem_body";

// --- left by convert-tile-to-nvvm for the driver (lib/Driver/Manifest.cpp) --
//
// The lowering carries the kernel attributes above over to its llvm.func
// (tile.arg_names, tile.grid, tile.variant, tile.mask, tile.mask_note,
// tile.num_warps) and adds what only it knows; the driver builds the launch
// manifest from them, and an LLVM-dialect input (tilec --from-llvm-dialect)
// states the same attributes by hand.

/// String on the module: the arch the module was lowered for.
inline constexpr llvm::StringLiteral kTargetAttrName = "tile.target";
/// i64 on a kernel: dynamic shared memory per program, in bytes (the peak
/// of its regions). Set on the func.func by tile-allocate-shared, carried
/// over to the llvm.func by convert-tile-to-nvvm.
inline constexpr llvm::StringLiteral kSharedBytesAttrName = "tile.shared_bytes";
/// Unit on a lowered kernel: it waits for the kernels before it
/// (tile.wait_prior_kernels on a target that has the wait), so the runtime
/// may launch it before they end (programmatic dependent launch). The
/// manifest's "programmatic_launch".
inline constexpr llvm::StringLiteral kProgrammaticLaunchAttrName = "tile.programmatic_launch";
/// Type argument attribute on a lowered kernel's pointer parameter: the
/// element type it points to (LLVM pointers are opaque).
inline constexpr llvm::StringLiteral kElemAttrName = "tile.elem";
/// i64 argument attribute on a lowered kernel's pointer parameter: its
/// widest access in bytes, when wider than one element (16 for cp.async);
/// the runtime refuses a pointer not aligned to it.
inline constexpr llvm::StringLiteral kAlignAttrName = "tile.align";

} // namespace tilec

#endif
