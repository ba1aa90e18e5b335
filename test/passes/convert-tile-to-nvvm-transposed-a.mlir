// RUN: tile-opt %s -split-input-file -tile-partition-warps -tile-allocate-shared -tile-insert-waits -convert-tile-to-nvvm -verify-diagnostics | FileCheck %s

// A dot whose A operand is the transpose of a loaded tile, on a 2 x 2 warp
// grid (the fused backward's dQᵀ = Kᵀ·dSᵀ): Kᵀ is the transposed view of
// K's shared tile (#tile.shared<..., transposed>), read with
// ldmatrix.x4.trans: per k step (16 keys, stored rows 16·k of K: 64-byte
// rows, so +1024 bytes a step), one x4 per 16 head-dim rows of the warp.
// K is never read element by element into registers.
// CHECK-LABEL: llvm.func @transposed_a
// CHECK-NOT:     llvm.load {{.*}} !llvm.ptr<3> -> f16
// CHECK:         "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {$0, $1, $2, $3}, [$4+0];"
// CHECK:         "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16
// CHECK:         nvvm.mma.sync
// CHECK:         "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {$0, $1, $2, $3}, [$4+1024];"
// CHECK:         "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {$0, $1, $2, $3}, [$4+2048];"
// CHECK:         "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {$0, $1, $2, $3}, [$4+3072];"
// CHECK:         nvvm.mma.sync
// CHECK-NOT:     nvvm.mma.sync
// CHECK-NOT:     llvm.load {{.*}} !llvm.ptr<3> -> f16
// CHECK:         llvm.return
func.func @transposed_a(%kp: !tile.ptr<f16>, %dsp: !tile.ptr<f16>, %dqp: !tile.ptr<f32>, %n: i32)
    attributes {tile.kernel} {
  %c0 = arith.constant 0 : i32
  %c16 = arith.constant 16 : i32
  %c32 = arith.constant 32 : i32
  %c1 = arith.constant 1 : i64
  %s16 = arith.constant 16 : i64
  %s32 = arith.constant 32 : i64
  %kv = tile.view %kp sizes(%n, %c32) strides(%s32, %c1) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %dsv = tile.view %dsp sizes(%n, %c16) strides(%s16, %c1) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %dqv = tile.view %dqp sizes(%c32, %c16) strides(%s16, %c1) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %k = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x32xf16>
  %ds = tile.load %dsv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x16xf16>
  %zero = arith.constant dense<0.0> : tensor<32x16xf32>
  %kt = tile.trans %k : tensor<64x32xf16> -> tensor<32x64xf16>
  %dqt = tile.dot %kt, %ds, %zero {warps_n = 2 : i64} : tensor<32x64xf16>, tensor<64x16xf16> -> tensor<32x16xf32>
  tile.atomic_add %dqt, %dqv[%c0, %c0] : tensor<32x16xf32>, !tile.view<f32, 2>
  return
}

