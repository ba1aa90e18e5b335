// RUN: tile-opt %s -tile-pipeline -tile-partition-warps -tile-allocate-shared -tile-insert-waits -convert-tile-to-nvvm | FileCheck %s

// Two loops that tile-split-masked-loops made from one (adjacent ranges,
// tile.blocks): tile-pipeline hands the first loop's last prefetch to the
// second, and the GPU lowering continues the same ring: the second loop's
// parity starts from the first loop's final parity, in the same two regions
// (K0, K1: 2 x 8 KiB, no third), and nothing is copied or waited for between
// the loops.
// CHECK-LABEL: llvm.func @chain
// CHECK-SAME:    shared_bytes = 16384
// CHECK:         %[[FIRST:[0-9]+]]:{{[0-9]+}} = scf.for {{.*}}, %{{[^ ]+}} = %c0_i32{{[_0-9]*}})
// CHECK:           nvvm.cp.async.wait.group 0
// CHECK-NEXT:      nvvm.barrier0
// CHECK:           nvvm.cp.async.commit.group
// CHECK:           arith.xori
// CHECK-NEXT:      scf.yield
// CHECK-NOT:     nvvm.cp.async
// CHECK-NOT:     nvvm.barrier0
// CHECK:         scf.for {{.*}}, %{{[^ ]+}} = %[[FIRST]]#{{[0-9]+}})
// CHECK:           nvvm.cp.async.wait.group 0
// CHECK-NEXT:      nvvm.barrier0
// CHECK:           nvvm.cp.async.commit.group
func.func @chain(%qp: !tile.ptr<f16>, %kp: !tile.ptr<f16>, %op: !tile.ptr<f32>, %mid: i32, %n: i32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %qv = tile.view %qp sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %kv = tile.view %kp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %q = tile.load %qv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %a = scf.for %j = %c0 to %mid step %c1 iter_args(%o = %zero) -> (tensor<64x64xf32>) : i32 {
    %row = arith.muli %j, %c64 : i32
    %k = tile.load %kv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %k, %o transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    scf.yield %s : tensor<64x64xf32>
  } {tile.blocks = #tile<blocks full>}
  %b = scf.for %j = %mid to %n step %c1 iter_args(%o = %a) -> (tensor<64x64xf32>) : i32 {
    %row = arith.muli %j, %c64 : i32
    %k = tile.load %kv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %k, %o transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    %neg = arith.negf %s : tensor<64x64xf32>
    scf.yield %neg : tensor<64x64xf32>
  } {tile.blocks = #tile<blocks partial>}
  tile.store %b, %ov[%c0, %c0] : tensor<64x64xf32>, !tile.view<f32, 2>
  return
}
