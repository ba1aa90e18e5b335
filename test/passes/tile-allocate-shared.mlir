// RUN: tile-opt %s -split-input-file -tile-pipeline -tile-partition-warps -tile-allocate-shared | FileCheck %s
// RUN: tile-opt %s -split-input-file -tile-pipeline -tile-partition-warps -tile-allocate-shared=smem-epilogue=false | FileCheck %s --check-prefix=DIRECT
// RUN: tile-opt %s -split-input-file -tile-pipeline=stages=1 -tile-partition-warps -tile-allocate-shared | FileCheck %s --check-prefix=INPLACE
// RUN: not tile-opt %s -split-input-file -tile-partition-warps -convert-tile-to-nvvm 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not tile-opt %s -split-input-file -tile-partition-warps -tile-allocate-shared=arch=sm_70 2>&1 | FileCheck %s --check-prefix=ARCH

// tile-allocate-shared: every op that needs shared memory gets its region
// (tile.smem), a loop the twins of the rings it starts (tile.smem_twins) and
// where its body's own regions start (tile.smem_body), the kernel its peak
// (tile.shared_bytes). Sizes here: a 64x64 f16 tile is 8 KiB, the 64x64 f32
// accumulator's epilogue staging 16 KiB. The lowering refuses a kernel the
// pass has not run on (MISSING); the shared-memory limit is checked here
// (test/passes/convert-tile-to-nvvm-target.mlir).
// MISSING: error: kernel has no tile.shared_bytes: run tile-allocate-shared first
// ARCH: error: tile-allocate-shared: unsupported arch 'sm_70' (sm_80, sm_86, sm_89, sm_90 or sm_90a)

// Attention's K/V ring (stages=2): K0 and V0 (loaded before the loop) at 0
// and 8 KiB, their twins K1 and V1 at 16 and 24 KiB, the body's own space
// from 32 KiB (empty: its reloads refill K and V's regions). After the loop
// the four are dead and popped, so the epilogue's staging starts at 0 again:
// the peak stays 32 KiB. With stages=1 (INPLACE) only K is carried,
// refilled in place (no twin), and V is the body's own, at 8 KiB: 16 KiB.
// CHECK-LABEL: func.func @ring
// CHECK-SAME:    tile.shared_bytes = 32768 : i64
// CHECK:         tile.load {{.*}} {tile.smem = #tile.smem<offset = 0, bytes = 8192>}
// CHECK:         tile.load {{.*}} {tile.smem = #tile.smem<offset = 8192, bytes = 8192>}
// CHECK:         scf.for
// CHECK:           tile.load {{.*}} {tile.smem = #tile.smem<offset = 0, bytes = 8192>}
// CHECK:           tile.load {{.*}} {tile.smem = #tile.smem<offset = 8192, bytes = 8192>}
// CHECK:         } {tile.smem_body = #tile.smem<offset = 32768, bytes = 0>, tile.smem_twins = [#tile.smem<offset = 16384, bytes = 8192>, #tile.smem<offset = 24576, bytes = 8192>]}
// CHECK:         tile.store {{.*}} {tile.smem = #tile.smem<offset = 0, bytes = 16384>}
// DIRECT-LABEL: func.func @ring
// DIRECT-SAME:    tile.shared_bytes = 32768 : i64
// DIRECT-NOT:     tile.store {{.*}} tile.smem
// INPLACE-LABEL: func.func @ring
// INPLACE-SAME:    tile.shared_bytes = 16384 : i64
// INPLACE:         tile.load {{.*}} {tile.smem = #tile.smem<offset = 0, bytes = 8192>}
// INPLACE:         scf.for
// INPLACE:           tile.load {{.*}} {tile.smem = #tile.smem<offset = 8192, bytes = 8192>}
// INPLACE:           tile.load {{.*}} {tile.smem = #tile.smem<offset = 0, bytes = 8192>}
// INPLACE:         } {tile.smem_body = #tile.smem<offset = 8192, bytes = 8192>}
// INPLACE-NOT:     tile.smem_twins
func.func @ring(%qp: !tile.ptr<f16>, %kp: !tile.ptr<f16>, %vp: !tile.ptr<f16>, %op: !tile.ptr<f32>, %n: i32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %qv = tile.view %qp sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %kv = tile.view %kp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %vv = tile.view %vp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %q = tile.load %qv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %a = scf.for %j = %c0 to %n step %c1 iter_args(%o = %zero) -> (tensor<64x64xf32>) : i32 {
    %row = arith.muli %j, %c64 : i32
    %k = tile.load %kv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %k, %zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    %p = arith.truncf %s : tensor<64x64xf32> to tensor<64x64xf16>
    %v = tile.load %vv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %o2 = tile.dot %p, %v, %o : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    scf.yield %o2 : tensor<64x64xf32>
  }
  tile.store %a, %ov[%c0, %c0] : tensor<64x64xf32>, !tile.view<f32, 2>
  return
}

// -----

// Two loops whose tiles are their bodies' own (a carried row, so
// tile-pipeline rotates nothing): each body's K starts at the same offset,
// the second reusing the first's space; the body regions end with the body.
// CHECK-LABEL: func.func @reuse
// CHECK-SAME:    tile.shared_bytes = 8192 : i64
// CHECK:         scf.for
// CHECK:           tile.load {{.*}} {tile.smem = #tile.smem<offset = 0, bytes = 8192>}
// CHECK:         } {tile.smem_body = #tile.smem<offset = 0, bytes = 8192>}
// CHECK:         scf.for
// CHECK:           tile.load {{.*}} {tile.smem = #tile.smem<offset = 0, bytes = 8192>}
// CHECK:         } {tile.smem_body = #tile.smem<offset = 0, bytes = 8192>}
func.func @reuse(%qp: !tile.ptr<f16>, %kp: !tile.ptr<f16>, %op: !tile.ptr<f32>, %n: i32)
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
  %a:2 = scf.for %j = %c0 to %n step %c1 iter_args(%o = %zero, %row = %c0) -> (tensor<64x64xf32>, i32) : i32 {
    %k = tile.load %kv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %k, %o transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    %next = arith.addi %row, %c64 : i32
    scf.yield %s, %next : tensor<64x64xf32>, i32
  }
  %b:2 = scf.for %j = %c0 to %n step %c1 iter_args(%o = %a#0, %row = %c0) -> (tensor<64x64xf32>, i32) : i32 {
    %k = tile.load %kv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %k, %o transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    %next = arith.addi %row, %c64 : i32
    scf.yield %s, %next : tensor<64x64xf32>, i32
  }
  %h = arith.truncf %b#0 : tensor<64x64xf32> to tensor<64x64xf16>
  %hv = tile.view %qp sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  tile.store %h, %hv[%c0, %c0] : tensor<64x64xf16>, !tile.view<f16, 2>
  return
}

// -----

// Split loops chained by tile-pipeline: the second continues the first's
// ring in the same two regions (no twins of its own), so the kernel takes
// 2 x 8 KiB. The first loop's carried K is read after it (by the second),
// so its regions stay allocated through the second loop.
// CHECK-LABEL: func.func @chain
// CHECK-SAME:    tile.shared_bytes = 16384 : i64
// CHECK:         tile.load {{.*}} {tile.smem = #tile.smem<offset = 0, bytes = 8192>}
// CHECK:         } {tile.blocks = #tile<blocks full>, tile.smem_body = #tile.smem<offset = 16384, bytes = 0>, tile.smem_twins = [#tile.smem<offset = 8192, bytes = 8192>]}
// CHECK:         } {tile.blocks = #tile<blocks partial>, tile.smem_body = #tile.smem<offset = 16384, bytes = 0>}
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
    scf.yield %s : tensor<64x64xf32>
  } {tile.blocks = #tile<blocks partial>}
  %h = arith.truncf %b : tensor<64x64xf32> to tensor<64x64xf16>
  %hv = tile.view %qp sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  tile.store %h, %hv[%c0, %c0] : tensor<64x64xf16>, !tile.view<f16, 2>
  return
}

// -----

// A branch's tiles die with it: both paths' K start at 0, and so does the
// epilogue's staging after the if.
// CHECK-LABEL: func.func @branch
// CHECK-SAME:    tile.shared_bytes = 16384 : i64
// CHECK:         scf.if
// CHECK:           tile.load {{.*}} {tile.smem = #tile.smem<offset = 0, bytes = 8192>}
// CHECK:         } else {
// CHECK:           tile.load {{.*}} {tile.smem = #tile.smem<offset = 0, bytes = 8192>}
// CHECK:         tile.store {{.*}} {tile.smem = #tile.smem<offset = 0, bytes = 16384>}
func.func @branch(%qp: !tile.ptr<f16>, %kp: !tile.ptr<f16>, %k2p: !tile.ptr<f16>, %op: !tile.ptr<f32>, %c: i1)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %qv = tile.view %qp sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %kv = tile.view %kp sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %k2v = tile.view %k2p sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %q = tile.load %qv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %r = scf.if %c -> (tensor<64x64xf32>) {
    %k = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %k, %zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    scf.yield %s : tensor<64x64xf32>
  } else {
    %k = tile.load %k2v[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %k, %zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    scf.yield %s : tensor<64x64xf32>
  }
  tile.store %r, %ov[%c0, %c0] : tensor<64x64xf32>, !tile.view<f32, 2>
  return
}

// -----

// A row vector moving between register layouts that place it in different
// threads goes through an unswizzled scratch row (64 f32 = 256 bytes) above
// K's region; it lives to the end of the kernel, so the epilogue's staging
// starts after it (8192 + 256, a multiple of 128).
// CHECK-LABEL: func.func @scratch
// CHECK-SAME:    tile.shared_bytes = 24832 : i64
// CHECK:         tile.load {{.*}} {tile.smem = #tile.smem<offset = 0, bytes = 8192>}
// CHECK:         tile.convert_layout {{.*}} {tile.smem = #tile.smem<offset = 8192, bytes = 256>}
// CHECK:         tile.store {{.*}} {tile.smem = #tile.smem<offset = 8448, bytes = 16384>}
func.func @scratch(%kp: !tile.ptr<f16>, %op: !tile.ptr<f32>) attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %kv = tile.view %kp sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %a = arith.constant dense<1.0> : tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %k = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %s = tile.dot %a, %k, %zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
  %k32 = arith.extf %k : tensor<64x64xf16> to tensor<64x64xf32>
  %sum = tile.reduce sum %k32 along 1 : tensor<64x64xf32> -> tensor<64xf32>
  %col = tile.expand_dims %sum along 1 : tensor<64xf32> -> tensor<64x1xf32>
  %b = tile.broadcast %col : tensor<64x1xf32> -> tensor<64x64xf32>
  %d = arith.subf %s, %b : tensor<64x64xf32>
  tile.store %d, %ov[%c0, %c0] : tensor<64x64xf32>, !tile.view<f32, 2>
  return
}
