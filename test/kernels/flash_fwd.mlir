// The flagship kernel parses, verifies and round-trips through the printer.
// RUN: tile-opt %tilec_src_root/kernels/flash_fwd.mlir | tile-opt | FileCheck %s

// CHECK-LABEL: func.func @flash_fwd(
// CHECK-SAME:    tile.grid = ["cdiv(seqlen_q, 64)", "batch * num_heads", "1"], tile.kernel
// CHECK:         tile.load {{.*}} padding = zero : <f16, 2> -> tensor<64x128xf16>
// CHECK:         scf.for
// CHECK:           tile.dot {{.*}} transpose_b : tensor<64x128xf16>, tensor<64x128xf16> -> tensor<64x64xf32>
// CHECK:           tile.reduce max
// CHECK:           math.exp
// CHECK:           tile.reduce sum
// CHECK:           tile.dot {{.*}} : tensor<64x64xf16>, tensor<64x128xf16> -> tensor<64x128xf32>
// CHECK:           scf.yield
// CHECK:         arith.divf
// CHECK:         tile.store
// CHECK:         math.log
// CHECK:         tile.store
