// The tile-optimize pipeline on the causal flagship kernel: in the scale > 0 version,
// the unmasked loop has exactly one exp2 and one fma on the 64x64 score tile, no
// multiply of the score tile before the row max, and no mask; exactly one masked
// loop (the diagonal block) follows. The output stays within tile/arith/math/scf.
// RUN: tile-opt %tilec_src_root/kernels/flash_fwd_causal.mlir --pass-pipeline='builtin.module(tile-optimize)' | FileCheck %s

// CHECK-LABEL: func.func @flash_fwd_causal(
// CHECK:         scf.if
// CHECK:           scf.for
// CHECK:             %[[S:.+]] = tile.dot {{.*}} -> tensor<64x64xf32>
// CHECK-NEXT:        %[[MAX:.+]] = tile.reduce max %[[S]] along 1
// CHECK-NOT:         arith.select
// CHECK-NOT:         arith.mulf {{.*}} : tensor<64x64xf32>
// CHECK:             %[[F:.+]] = math.fma %[[S]], %{{.+}}, %{{.+}} : tensor<64x64xf32>
// CHECK-NEXT:        math.exp2 %[[F]] : tensor<64x64xf32>
// CHECK-NOT:         math.exp2 {{.*}} : tensor<64x64xf32>
// CHECK:           } {tile.blocks = #tile<blocks full>}
// CHECK:           scf.for
// CHECK:             arith.select
// CHECK:           } {tile.blocks = #tile<blocks partial>}
// CHECK-NEXT:      arith.mulf
// CHECK-NEXT:      scf.yield
// CHECK:         } else {
// CHECK:         } {tile.blocks = #tile<blocks full>, tile.softmax_fallback}
// CHECK:         } {tile.blocks = #tile<blocks partial>, tile.softmax_fallback}
// CHECK-NOT:     linalg.
// CHECK-NOT:     tensor.
