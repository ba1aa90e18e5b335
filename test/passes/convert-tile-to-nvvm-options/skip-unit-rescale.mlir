// RUN: tile-opt %s -tile-partition-warps -tile-allocate-shared -tile-insert-waits -convert-tile-to-nvvm='skip-unit-rescale=true' | FileCheck %s
// RUN: tile-opt %s -tile-partition-warps -tile-allocate-shared -tile-insert-waits -convert-tile-to-nvvm | FileCheck %s --check-prefix=OFF

// skip-unit-rescale (experimental, off by default): O * alpha[:, None] — a
// tile times a row broadcast, whose registers hold only the thread's few row
// factors — multiplies only in warps where some factor is not exactly 1. A
// vote decides for the whole warp; the other branch passes O through, which
// is the same value bit for bit (x * 1.0 == x; only a denormal x, which a
// flush-to-zero multiply would make 0, differs), so the rewrite is exact.
// CHECK-LABEL: llvm.func @rescale
// CHECK:         %[[ONE:.+]] = arith.constant 1.000000e+00 : f32
// CHECK:         arith.cmpf une, %{{.+}}, %[[ONE]] : f32
// CHECK:         %[[ANY:.+]] = nvvm.vote.sync any %{{.+}}, %{{.+}} -> i1
// CHECK:         scf.if %[[ANY]] -> ({{.*}}) {
// CHECK-COUNT-32:  arith.mulf
// CHECK:           scf.yield
// CHECK-NEXT:    } else {
// CHECK-NEXT:      scf.yield
// CHECK-NEXT:    }
// OFF-LABEL:   llvm.func @rescale
// OFF-NOT:       nvvm.vote.sync
// OFF-NOT:       scf.if {{.*}} -> (f32
func.func @rescale(%qp: !tile.ptr<f16>, %kp: !tile.ptr<f16>, %op: !tile.ptr<f32>, %ap: !tile.ptr<f32>, %n: i32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %qv = tile.view %qp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %kv = tile.view %kp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %av = tile.view %ap sizes(%n) strides(%one) : !tile.ptr<f32> -> !tile.view<f32, 1>
  %q = tile.load %qv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %k = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %s = tile.dot %q, %k, %zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
  %alpha = tile.reduce max %s along 1 : tensor<64x64xf32> -> tensor<64xf32>
  %a2 = tile.expand_dims %alpha along 1 : tensor<64xf32> -> tensor<64x1xf32>
  %ab = tile.broadcast %a2 : tensor<64x1xf32> -> tensor<64x64xf32>
  %scaled = arith.mulf %s, %ab : tensor<64x64xf32>
  tile.store %scaled, %ov[%c0, %c0] : tensor<64x64xf32>, !tile.view<f32, 2>
  return
}
