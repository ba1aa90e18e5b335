// A load through a view of stride 0 (a split's lse broadcast over its
// features, the fused decode merge's weights): the 32x128 f32 tile over 4
// warps puts 4 consecutive features in each thread's registers, and they
// share one address, so each thread loads its 8 splits once, not 32 times;
// the ops on those copies (the exp) and their reduction along the splits
// (the in-thread tree, the shuffles) are built once per distinct value too.
// The partials' load (stride 1) stays 8 vectors of 4.
// RUN: tile-opt %s -tile-partition-warps -tile-allocate-shared=arch=sm_80 -tile-insert-waits -convert-tile-to-nvvm=arch=sm_80 | FileCheck %s

// CHECK-LABEL: llvm.func @broadcast_weights
// CHECK-COUNT-8: llvm.load {{.*}} : !llvm.ptr<1> -> f32
// CHECK-NOT:     llvm.load {{.*}} -> f32
// CHECK-COUNT-8: llvm.load {{.*}} : !llvm.ptr<1> -> vector<4xf32>
// CHECK-NOT:     llvm.load
// CHECK-COUNT-8: llvm.nvvm.ex2.approx.ftz.f32
// CHECK-NOT:     llvm.nvvm.ex2.approx.ftz.f32
// The weights' sum: one chain of 2 shuffles (4 lanes along the splits);
// the weighted sum: one per feature a thread holds, 4 x 2.
// CHECK-COUNT-10: nvvm.shfl.sync
// CHECK-NOT:     nvvm.shfl.sync
// CHECK:         llvm.return
func.func @broadcast_weights(%w: !tile.ptr<f32>, %o: !tile.ptr<f32>, %dst: !tile.ptr<f32>) attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c32 = arith.constant 32 : i32
  %c128 = arith.constant 128 : i32
  %c1 = arith.constant 1 : i64
  %z = arith.constant 0 : i64
  %s128 = arith.constant 128 : i64
  %wv = tile.view %w sizes(%c32, %c128) strides(%c1, %z) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %ov = tile.view %o sizes(%c32, %c128) strides(%s128, %c1) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %dv = tile.view %dst sizes(%c128) strides(%c1) : !tile.ptr<f32> -> !tile.view<f32, 1>
  %wt = tile.load %wv[%c0, %c0] padding = zero : !tile.view<f32, 2> -> tensor<32x128xf32>
  %ot = tile.load %ov[%c0, %c0] padding = zero : !tile.view<f32, 2> -> tensor<32x128xf32>
  %e = math.exp %wt : tensor<32x128xf32>
  %total = tile.reduce sum %e along 0 : tensor<32x128xf32> -> tensor<128xf32>
  %p = arith.mulf %ot, %e : tensor<32x128xf32>
  %s = tile.reduce sum %p along 0 : tensor<32x128xf32> -> tensor<128xf32>
  %r = arith.divf %s, %total : tensor<128xf32>
  tile.store %r, %dv[%c0] : tensor<128xf32>, !tile.view<f32, 1>
  return
}
