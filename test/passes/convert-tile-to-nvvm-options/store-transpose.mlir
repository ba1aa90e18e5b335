// RUN: tile-opt %s -split-input-file -tile-partition-warps -tile-allocate-shared="smem-epilogue=false" -tile-insert-waits -convert-tile-to-nvvm | FileCheck %s
// RUN: tile-opt %s -split-input-file -tile-partition-warps -tile-allocate-shared="smem-epilogue=false" -tile-insert-waits -convert-tile-to-nvvm="store-transpose=false" | FileCheck %s --check-prefix=PLAIN

// store-transpose (on by default): an mma accumulator, converted to f16,
// holds 2 consecutive columns (4 bytes) per thread and row; columns 2 and 4
// are lane bits, columns 8, 16, 32 register bits. Two lane/register swaps,
// each a shuffle per pair of 32-bit words (lane masks 1, then 2), leave 8
// consecutive columns per thread: 16-byte stores. 64x64 over 4 warps: 16
// rows per warp, 32 f16 per thread = 16 words, 8 shuffles per swap, 4 stores.
// CHECK-LABEL: llvm.func @store_o
// CHECK-COUNT-8: nvvm.shfl.sync  bfly {{.*}}, %c1_i32{{[_0-9]*}}, %c31_i32{{[_0-9]*}} : i32 -> i32
// CHECK-COUNT-8: nvvm.shfl.sync  bfly {{.*}}, %c2_i32{{[_0-9]*}}, %c31_i32{{[_0-9]*}} : i32 -> i32
// CHECK-NOT:     nvvm.shfl.sync
// CHECK-COUNT-4: st.global.v4.b32
// CHECK-NOT:     st.global
// CHECK:         llvm.return
// Without it: 16 stores of 4 bytes, no shuffles.
// PLAIN-LABEL: llvm.func @store_o
// PLAIN-NOT:     nvvm.shfl.sync
// PLAIN-COUNT-16: st.global.b32
// PLAIN-NOT:     st.global
// PLAIN:         llvm.return
func.func @store_o(%qp: !tile.ptr<f16>, %kp: !tile.ptr<f16>, %op: !tile.ptr<f16>, %n: i32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %qv = tile.view %qp sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %kv = tile.view %kp sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %q = tile.load %qv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %k = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %s = tile.dot %q, %k, %zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
  %h = arith.truncf %s : tensor<64x64xf32> to tensor<64x64xf16>
  tile.store %h, %ov[%c0, %c0] : tensor<64x64xf16>, !tile.view<f16, 2>
  return
}

// -----

// A column offset unknown at compile time caps the store at one element
// (a vector could straddle the view's edge): no shuffles are spent on it.
// CHECK-LABEL: llvm.func @store_at_runtime_column
// CHECK-NOT:     nvvm.shfl.sync
// CHECK:         st.global.b16
// CHECK:         llvm.return
func.func @store_at_runtime_column(%qp: !tile.ptr<f16>, %kp: !tile.ptr<f16>, %op: !tile.ptr<f16>,
                                   %n: i32, %col: i32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %qv = tile.view %qp sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %kv = tile.view %kp sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %q = tile.load %qv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %k = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %s = tile.dot %q, %k, %zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
  %h = arith.truncf %s : tensor<64x64xf32> to tensor<64x64xf16>
  tile.store %h, %ov[%c0, %col] : tensor<64x64xf16>, !tile.view<f16, 2>
  return
}
