// --arch picks convert-tile-to-nvvm's target implementation and its hardware
// numbers (passes/ConvertTileToNVVM/TargetInfo.h, include/tilec/Target/
// TargetDescription.h). Three f16 K tiles of 64x512 take 192 KB of shared
// memory (plus 16 KB for the epilogue's staging): more than an sm_80 block
// may have (163 KB), less than an sm_90 block's 227 KB. So sm_80 refuses the
// kernel at the load that crosses the limit, naming the bytes and the limit,
// sm_86 (99 KB) already at the second tile, and sm_90a lowers it: the arch
// reaches the sm_90 target, which today emits the sm_80 instructions.
// RUN: not tile-opt %s -tile-partition-warps -tile-allocate-shared=arch=sm_80 -tile-insert-waits -convert-tile-to-nvvm=arch=sm_80 2>&1 | FileCheck %s --check-prefix=SM80
// RUN: not tile-opt %s -tile-partition-warps -tile-allocate-shared=arch=sm_86 -tile-insert-waits -convert-tile-to-nvvm=arch=sm_86 2>&1 | FileCheck %s --check-prefix=SM86
// RUN: tile-opt %s -tile-partition-warps -tile-allocate-shared=arch=sm_90a -tile-insert-waits -convert-tile-to-nvvm=arch=sm_90a | FileCheck %s --check-prefix=SM90
// SM80: :[[@LINE+22]]:9: error: the shared tiles live here take 196608 bytes, but sm_80 allows at most 166912 bytes of shared memory per block
// SM86: :[[@LINE+20]]:9: error: the shared tiles live here take 131072 bytes, but sm_86 allows at most 101376 bytes of shared memory per block
// SM90: module attributes {tile.target = "sm_90a"}
// SM90-LABEL: llvm.func @big_shared
// SM90-SAME: shared_bytes = 212992
// SM90-COUNT-3: nvvm.cp.async.commit.group
// SM90: nvvm.mma.sync
func.func @big_shared(%qp: !tile.ptr<f16>, %kp: !tile.ptr<f16>, %op: !tile.ptr<f32>, %n: i32)
    attributes {tile.kernel, tile.arg_names = ["q", "k", "o", "n"], tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c64 = arith.constant 64 : i32
  %c128 = arith.constant 128 : i32
  %c512 = arith.constant 512 : i32
  %c1 = arith.constant 1 : i64
  %s512 = arith.constant 512 : i64
  %s64 = arith.constant 64 : i64
  %qv = tile.view %qp sizes(%c64, %c512) strides(%s512, %c1) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %kv = tile.view %kp sizes(%n, %c512) strides(%s512, %c1) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%c64, %c64) strides(%s64, %c1) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %q = tile.load %qv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x512xf16>
  %k1 = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x512xf16>
  %k2 = tile.load %kv[%c64, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x512xf16>
  %k3 = tile.load %kv[%c128, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x512xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %s1 = tile.dot %q, %k1, %zero transpose_b : tensor<64x512xf16>, tensor<64x512xf16> -> tensor<64x64xf32>
  %s2 = tile.dot %q, %k2, %s1 transpose_b : tensor<64x512xf16>, tensor<64x512xf16> -> tensor<64x64xf32>
  %s3 = tile.dot %q, %k3, %s2 transpose_b : tensor<64x512xf16>, tensor<64x512xf16> -> tensor<64x64xf32>
  tile.store %s3, %ov[%c0, %c0] : tensor<64x64xf32>, !tile.view<f32, 2>
  return
}
