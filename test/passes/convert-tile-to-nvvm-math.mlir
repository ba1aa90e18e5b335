// Elementwise math on the GPU: convert-tile-to-nvvm expands what NVPTX
// cannot select (or selects slowly) into approximate hardware instructions,
// per register, and clones what it selects natively; f16/bf16 compute in f32.
// 16x16 f32 tiles over one warp: 8 registers per thread.
// RUN: tile-opt %s -split-input-file -tile-partition-warps=num-warps=1 -tile-allocate-shared -tile-insert-waits -convert-tile-to-nvvm | FileCheck %s
// RUN: tilec --num-warps=1 --split-input-file --emit=ptx -o - %s | FileCheck %s --check-prefix=PTX

// tanh: llvm.tanh with `afn` (without it NVPTX has no pattern: LLVM's fatal
// "Cannot select: ftanh"), which is tanh.approx.f32 on sm_75+.
// CHECK-LABEL: llvm.func @tanh_f32
// CHECK-COUNT-8: llvm.intr.tanh(%{{.*}}) {fastmathFlags = #llvm.fastmath<afn>} : (f32) -> f32
// CHECK-NOT: math.tanh
// PTX-LABEL: .entry tanh_f32(
// PTX-COUNT-8: tanh.approx.f32

func.func @tanh_f32(%x: !tile.ptr<f32>, %y: !tile.ptr<f32>, %n: i32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c16 = arith.constant 16 : i32
  %s = arith.constant 16 : i64
  %one = arith.constant 1 : i64
  %c0 = arith.constant 0 : i32
  %vx = tile.view %x sizes(%n, %c16) strides(%s, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %vy = tile.view %y sizes(%n, %c16) strides(%s, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %t = tile.load %vx[%c0, %c0] padding = zero : !tile.view<f32, 2> -> tensor<16x16xf32>
  %r = math.tanh %t : tensor<16x16xf32>
  tile.store %r, %vy[%c0, %c0] : tensor<16x16xf32>, !tile.view<f32, 2>
  return
}

// -----

// f16 goes through f32: extend, tanh.approx, truncate.
// CHECK-LABEL: llvm.func @tanh_f16
// CHECK: %[[W:.+]] = arith.extf %{{.*}} : f16 to f32
// CHECK-NEXT: %[[T:.+]] = llvm.intr.tanh(%[[W]]) {fastmathFlags = #llvm.fastmath<afn>} : (f32) -> f32
// CHECK-NEXT: arith.truncf %[[T]] : f32 to f16
// PTX-LABEL: .entry tanh_f16(
// PTX-COUNT-8: tanh.approx.f32

func.func @tanh_f16(%x: !tile.ptr<f16>, %y: !tile.ptr<f16>, %n: i32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c16 = arith.constant 16 : i32
  %s = arith.constant 16 : i64
  %one = arith.constant 1 : i64
  %c0 = arith.constant 0 : i32
  %vx = tile.view %x sizes(%n, %c16) strides(%s, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %vy = tile.view %y sizes(%n, %c16) strides(%s, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %t = tile.load %vx[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<16x16xf16>
  %r = math.tanh %t : tensor<16x16xf16>
  tile.store %r, %vy[%c0, %c0] : tensor<16x16xf16>, !tile.view<f16, 2>
  return
}

// -----

// sin: the argument reduced by 2*pi (rint, then two FMAs with 2*pi split in
// two parts), then sin.approx, accurate on [-pi, pi] only.
// CHECK-LABEL: llvm.func @sin_f32
// CHECK: %[[Q:.+]] = arith.mulf %[[X:.+]], %{{.*}} : f32
// CHECK-NEXT: %[[K:.+]] = math.roundeven %[[Q]] : f32
// CHECK-NEXT: %[[NK:.+]] = arith.negf %[[K]] : f32
// CHECK-NEXT: %[[HI:.+]] = arith.constant 6.28318548 : f32
// CHECK-NEXT: %[[R1:.+]] = math.fma %[[NK]], %[[HI]], %[[X]] : f32
// CHECK-NEXT: %[[LO:.+]] = arith.constant -1.74845553E-7 : f32
// CHECK-NEXT: %[[R2:.+]] = math.fma %[[NK]], %[[LO]], %[[R1]] : f32
// CHECK-NEXT: llvm.call_intrinsic "llvm.nvvm.sin.approx.ftz.f"(%[[R2]]) : (f32) -> f32
// PTX-LABEL: .entry sin_f32(
// PTX: cvt.rni.f32.f32
// PTX-NEXT: fma.rn.f32 {{%r[0-9]+}}, {{%r[0-9]+}}, 0fC0C90FDB,
// PTX-NEXT: fma.rn.f32 {{%r[0-9]+}}, {{%r[0-9]+}}, 0f343BBD2E,
// PTX-NEXT: sin.approx.ftz.f32
// PTX-COUNT-7: sin.approx.ftz.f32

func.func @sin_f32(%x: !tile.ptr<f32>, %y: !tile.ptr<f32>, %n: i32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c16 = arith.constant 16 : i32
  %s = arith.constant 16 : i64
  %one = arith.constant 1 : i64
  %c0 = arith.constant 0 : i32
  %vx = tile.view %x sizes(%n, %c16) strides(%s, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %vy = tile.view %y sizes(%n, %c16) strides(%s, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %t = tile.load %vx[%c0, %c0] padding = zero : !tile.view<f32, 2> -> tensor<16x16xf32>
  %r = math.sin %t : tensor<16x16xf32>
  tile.store %r, %vy[%c0, %c0] : tensor<16x16xf32>, !tile.view<f32, 2>
  return
}

// -----

// cos: the same reduction, then cos.approx.
// CHECK-LABEL: llvm.func @cos_f32
// CHECK: math.roundeven
// CHECK-COUNT-8: llvm.call_intrinsic "llvm.nvvm.cos.approx.ftz.f"
// PTX-LABEL: .entry cos_f32(
// PTX-COUNT-8: cos.approx.ftz.f32

func.func @cos_f32(%x: !tile.ptr<f32>, %y: !tile.ptr<f32>, %n: i32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c16 = arith.constant 16 : i32
  %s = arith.constant 16 : i64
  %one = arith.constant 1 : i64
  %c0 = arith.constant 0 : i32
  %vx = tile.view %x sizes(%n, %c16) strides(%s, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %vy = tile.view %y sizes(%n, %c16) strides(%s, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %t = tile.load %vx[%c0, %c0] padding = zero : !tile.view<f32, 2> -> tensor<16x16xf32>
  %r = math.cos %t : tensor<16x16xf32>
  tile.store %r, %vy[%c0, %c0] : tensor<16x16xf32>, !tile.view<f32, 2>
  return
}

// -----

// sigmoid as tl.sigmoid writes it, 1 / (1 + exp(-x)) with an `afn`
// division: ex2.approx for the exponential and rcp.approx for 1/d.
// CHECK-LABEL: llvm.func @sigmoid_f32
// CHECK-COUNT-8: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"
// CHECK-COUNT-8: arith.divf %{{.*}}, %{{.*}} fastmath<afn> : f32
// PTX-LABEL: .entry sigmoid_f32(
// PTX-COUNT-8: ex2.approx.ftz.f32
// PTX-COUNT-8: rcp.approx.f32
// PTX-NOT: div.rn.f32

func.func @sigmoid_f32(%x: !tile.ptr<f32>, %y: !tile.ptr<f32>, %n: i32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c16 = arith.constant 16 : i32
  %s = arith.constant 16 : i64
  %one = arith.constant 1 : i64
  %c0 = arith.constant 0 : i32
  %vx = tile.view %x sizes(%n, %c16) strides(%s, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %vy = tile.view %y sizes(%n, %c16) strides(%s, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %t = tile.load %vx[%c0, %c0] padding = zero : !tile.view<f32, 2> -> tensor<16x16xf32>
  %m = arith.negf %t : tensor<16x16xf32>
  %e = math.exp %m : tensor<16x16xf32>
  %1 = arith.constant dense<1.0> : tensor<16x16xf32>
  %d = arith.addf %e, %1 : tensor<16x16xf32>
  %r = arith.divf %1, %d fastmath<afn> : tensor<16x16xf32>
  tile.store %r, %vy[%c0, %c0] : tensor<16x16xf32>, !tile.view<f32, 2>
  return
}

// -----

// |x| of floats: cloned as math.absf; NVPTX clears the sign bit.
// CHECK-LABEL: llvm.func @abs_f32
// CHECK-COUNT-8: math.absf %{{.*}} : f32
// PTX-LABEL: .entry abs_f32(
// PTX-COUNT-8: and.b32 {{%r[0-9]+}}, {{%r[0-9]+}}, 2147483647;

func.func @abs_f32(%x: !tile.ptr<f32>, %y: !tile.ptr<f32>, %n: i32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c16 = arith.constant 16 : i32
  %s = arith.constant 16 : i64
  %one = arith.constant 1 : i64
  %c0 = arith.constant 0 : i32
  %vx = tile.view %x sizes(%n, %c16) strides(%s, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %vy = tile.view %y sizes(%n, %c16) strides(%s, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %t = tile.load %vx[%c0, %c0] padding = zero : !tile.view<f32, 2> -> tensor<16x16xf32>
  %r = math.absf %t : tensor<16x16xf32>
  tile.store %r, %vy[%c0, %c0] : tensor<16x16xf32>, !tile.view<f32, 2>
  return
}

// -----

// |x| of integers: abs.s32.
// CHECK-LABEL: llvm.func @abs_i32
// CHECK-COUNT-8: math.absi %{{.*}} : i32
// PTX-LABEL: .entry abs_i32(
// PTX-COUNT-8: abs.s32

func.func @abs_i32(%x: !tile.ptr<i32>, %y: !tile.ptr<i32>, %n: i32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c16 = arith.constant 16 : i32
  %s = arith.constant 16 : i64
  %one = arith.constant 1 : i64
  %c0 = arith.constant 0 : i32
  %vx = tile.view %x sizes(%n, %c16) strides(%s, %one) : !tile.ptr<i32> -> !tile.view<i32, 2>
  %vy = tile.view %y sizes(%n, %c16) strides(%s, %one) : !tile.ptr<i32> -> !tile.view<i32, 2>
  %t = tile.load %vx[%c0, %c0] padding = zero : !tile.view<i32, 2> -> tensor<16x16xi32>
  %r = math.absi %t : tensor<16x16xi32>
  tile.store %r, %vy[%c0, %c0] : tensor<16x16xi32>, !tile.view<i32, 2>
  return
}

// -----

// Math on a scalar parameter is lowered the same way, once per thread.
// CHECK-LABEL: llvm.func @scalar_tanh
// CHECK: llvm.intr.tanh(%arg3) {fastmathFlags = #llvm.fastmath<afn>} : (f32) -> f32
// CHECK-NOT: llvm.intr.tanh
// PTX-LABEL: .entry scalar_tanh(
// PTX: tanh.approx.f32
// PTX-NOT: tanh.approx.f32

func.func @scalar_tanh(%x: !tile.ptr<f32>, %y: !tile.ptr<f32>, %n: i32, %c: f32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c16 = arith.constant 16 : i32
  %s = arith.constant 16 : i64
  %one = arith.constant 1 : i64
  %c0 = arith.constant 0 : i32
  %vx = tile.view %x sizes(%n, %c16) strides(%s, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %vy = tile.view %y sizes(%n, %c16) strides(%s, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %t = tile.load %vx[%c0, %c0] padding = zero : !tile.view<f32, 2> -> tensor<16x16xf32>
  %a = math.tanh %c : f32
  %as = tile.splat %a : f32 -> tensor<16x16xf32>
  %r = arith.mulf %t, %as : tensor<16x16xf32>
  tile.store %r, %vy[%c0, %c0] : tensor<16x16xf32>, !tile.view<f32, 2>
  return
}
