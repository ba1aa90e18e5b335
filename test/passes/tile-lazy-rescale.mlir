// RUN: tile-opt %S/../../kernels/flash_fwd.mlir --tile-optimize --tile-lazy-rescale="num-warps=2 min-registers=128" | FileCheck %s
// RUN: tile-opt %S/../../kernels/flash_fwd.mlir --tile-optimize --tile-lazy-rescale="num-warps=4 min-registers=128" | FileCheck %s --check-prefix=SMALL
// RUN: tile-opt %S/../../kernels/flash_fwd_causal.mlir --tile-optimize --tile-lazy-rescale="num-warps=2 min-registers=128" | FileCheck %s --check-prefix=CHAINED
// RUN: tile-opt %S/Inputs/lazy-rescale-second-max.mlir --tile-lazy-rescale="num-warps=2 min-registers=128" | FileCheck %s --check-prefix=PARTIAL
// RUN: tile-opt %S/Inputs/lazy-rescale-clamped.mlir --tile-optimize --tile-lazy-rescale="num-warps=2 min-registers=128" | FileCheck %s --check-prefix=CLAMPED
// RUN: not tile-opt %S/../../kernels/flash_fwd.mlir --tile-lazy-rescale="threshold=0" 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not tile-opt %S/../../kernels/flash_fwd.mlir --tile-lazy-rescale="threshold=16" 2>&1 | FileCheck %s --check-prefix=BAD16

// tile-lazy-rescale on the flagship loop in FA2's form: a row keeps its max
// (m' = grow ? max : m) unless the true rescale factor alpha falls below
// 2^-8; the scores subtract the kept max; l and O are rescaled by alpha'
// (exactly 1 for kept rows) and O's multiply is marked for the GPU
// lowering's warp-uniform skip. 64x128 f32 O over 2 warps = 128 registers
// per thread: rewritten.
// CHECK:       scf.for
// CHECK:         %[[MAX:.*]] = arith.maximumf %[[M:arg[0-9]+]], %{{.*}} : tensor<64xf32>
// CHECK:         %[[ALPHA:.*]] = math.exp2 %{{.*}} : tensor<64xf32>
// CHECK:         %[[LIMIT:.*]] = arith.constant dense<3.906250e-03> : tensor<64xf32>
// CHECK:         %[[GROW:.*]] = arith.cmpf olt, %[[ALPHA]], %[[LIMIT]]
// CHECK:         %[[KEPT:.*]] = arith.select %[[GROW]], %[[MAX]], %[[M]]
// CHECK:         %[[SCALED:.*]] = arith.mulf %[[KEPT]], %{{.*}} : tensor<64xf32>
// CHECK:         %[[NEG:.*]] = arith.negf %[[SCALED]]
// CHECK:         %[[ONE:.*]] = arith.constant dense<1.000000e+00> : tensor<64xf32>
// CHECK:         %[[LAZY:.*]] = arith.select %[[GROW]], %[[ALPHA]], %[[ONE]]
// CHECK:         tile.expand_dims %[[NEG]]
// CHECK:         math.fma %{{.*}}, %[[LAZY]], %{{.*}} : tensor<64xf32>
// CHECK:         tile.expand_dims %[[LAZY]]
// CHECK:         arith.mulf %{{.*}}, %{{.*}} {tile.skip_unit_rescale} : tensor<64x128xf32>
// CHECK:         scf.yield %[[KEPT]],

// Over 4 warps O is 64 registers per thread: the vote would cost more than
// the multiplies it skips, so nothing changes.
// The loop is there (FA2's exp2 form from tile-optimize) and the O store
// after it; nothing before that store carries the rewrite's marks.
// SMALL:     scf.for
// SMALL:       math.exp2
// SMALL-NOT: tile.skip_unit_rescale
// SMALL-NOT: dense<3.906250e-03>
// SMALL:     tile.store

// Both loops tile-split-masked-loops chains (unmasked blocks, then the
// masked diagonal ones) are rewritten; the loops of the negative-scale
// fallback (tile.softmax_fallback) are not.
// CHAINED:     scf.for
// CHAINED:       arith.cmpf olt
// CHAINED:       {tile.skip_unit_rescale}
// CHAINED:       scf.yield
// CHAINED:     scf.for
// CHAINED:       arith.cmpf olt
// CHAINED:       {tile.skip_unit_rescale}
// CHAINED:       scf.yield
// CHAINED-NOT: tile.skip_unit_rescale
// CHAINED:     tile.softmax_fallback

// A running max clamped from below by a loop-invariant splat (max(max(m,
// r), c): rows that saw no key yet stay finite, as kernels/flex_fwd.py and
// flash_fwd's WINDOW write it) is kept lazily too, in both split loops: the
// kept value is the clamped max or the old one.
// CLAMPED:     scf.for
// CLAMPED:       %[[INNER:.*]] = arith.maximumf %[[M:arg[0-9]+]], %{{.*}} : tensor<64xf32>
// CLAMPED:       %[[MAX:.*]] = arith.maximumf %[[INNER]], %{{.*}} : tensor<64xf32>
// CLAMPED:       %[[GROW:.*]] = arith.cmpf olt
// CLAMPED:       %[[KEPT:.*]] = arith.select %[[GROW]], %[[MAX]], %[[M]]
// CLAMPED:       {tile.skip_unit_rescale}
// CLAMPED:       scf.yield %[[KEPT]],
// CLAMPED:     scf.for
// CLAMPED:       arith.cmpf olt
// CLAMPED:       {tile.skip_unit_rescale}
// CLAMPED:       scf.yield

// A loop that reads the old max a second time (in this input the first
// loop's scores come from an un-CSE'd copy of the max -> scaled -> negated
// chain) only partly matches: keeping the max would leave that copy stale,
// so that loop is left alone (rewriting it gave an O error of 0.24 on the
// CPU runner); the second loop, which matches, is rewritten.
// PARTIAL:     scf.for
// PARTIAL-NOT: tile.skip_unit_rescale
// PARTIAL:     tile.blocks = #tile<blocks full>
// PARTIAL:     scf.for
// PARTIAL:     {tile.skip_unit_rescale}
// PARTIAL:     tile.blocks = #tile<blocks partial>

// BAD: tile-lazy-rescale: threshold must be in (0, 15], got 0
// BAD16: tile-lazy-rescale: threshold must be in (0, 15], got 1.6
