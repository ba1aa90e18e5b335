//===- Strategy.h - the strategy record: how a kernel is lowered ----------===//
//
// Every knob that chooses how a kernel is lowered (beyond its block sizes,
// which are the kernel's own constexprs) with its default, defined once for
// C++: the tilec CLI's flags, the driver's CompileOptions, the tile-to-nvvm
// pipeline's options and the passes' TableGen options all take their
// defaults from here. In the IR the record is `#tile.strategy<...>`
// (dialects/Tile/TileAttrs.td), which the driver puts on the module it
// lowers (`tile.strategy`) and writes into each manifest ("strategy"). The
// Python package's twin is tilec.strategy.Strategy, whose canonical form
// (Strategy.key()) keys the compile cache and prebuilt digests;
// test_strategy.py checks the two agree.
//
//===----------------------------------------------------------------------===//
#ifndef TILEC_STRATEGY_H
#define TILEC_STRATEGY_H

#include <cstdint>
#include <string>

namespace tilec {

/// Warps per program (thread block): FlashAttention-2 uses 4 for 64-row blocks.
inline constexpr int64_t kDefaultNumWarps = 4;
/// Shared-memory buffers per prefetched K/V tile: 1 (FlashAttention-2's
/// single buffer) or 2 (a ring; one barrier per iteration).
inline constexpr int64_t kDefaultStages = 2;
/// Store narrow register tiles (the O accumulator) through shared memory as
/// 16-byte chunks: FA2's epilogue. Faster at head_dim 64, slower at 128.
inline constexpr bool kDefaultSmemEpilogue = true;
/// How global->shared copies respect their view's bounds: row, tile or chunk
/// (convert-tile-to-nvvm's copy-bounds).
inline constexpr const char *kDefaultCopyBounds = "row";

struct Strategy {
  int64_t numWarps = kDefaultNumWarps;
  int64_t stages = kDefaultStages;
  bool smemEpilogue = kDefaultSmemEpilogue;
  std::string copyBounds = kDefaultCopyBounds;
  /// More tile-to-nvvm options, verbatim ("skip-unit-rescale=true"): the way
  /// experiments reach the lowering before they earn a field here.
  std::string loweringOptions;
};

} // namespace tilec

#endif
