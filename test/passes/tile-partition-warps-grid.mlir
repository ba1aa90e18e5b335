// RUN: tile-opt %s -split-input-file -tile-partition-warps -verify-diagnostics | FileCheck %s
// RUN: tile-opt %s -split-input-file -tile-partition-warps="num-warps=8" -verify-diagnostics | FileCheck %s --check-prefix=W8

// The dK/dV step of the backward with tile.dot warps_n = 2 (FlashAttention-2's
// 2-D warp grid). 4 warps: Sᵀ = K·Qᵀ (64 keys x 64 queries) is split 2 x 2,
// each warp a 32 x 32 block (warp bit 0 moves 32 rows, bit 1 32 columns);
// K is read from shared memory (a grid's A operand), Q too (B). The query
// vector broadcast along the keys (lse) is replicated over the row warps.
// Pᵀ (computed in Sᵀ's layout, its K dimension split over warps) is
// written to shared memory for dV += Pᵀ·dO, whose 64 x 64 accumulator is
// split 2 x 2 too (32 rows x 32 head-dim columns per warp). Nothing else
// moves: one convert_layout, to shared memory.
// CHECK-LABEL: func.func @dkdv_step
// CHECK:         %[[K:.+]] = tile.load {{.*}} -> tensor<64x64xf16, #tile.shared<swizzle = 3>>
// CHECK:         %[[Q:.+]] = tile.load {{.*}} -> tensor<64x64xf16, #tile.shared<swizzle = 3>>
// CHECK:         %[[DO:.+]] = tile.load {{.*}} -> tensor<64x64xf16, #tile.shared<swizzle = 3>>
// CHECK:         tile.load {{.*}} -> tensor<64xf32, #tile.linear<reg = {{\[}}[1], [8], [16]], lane = {{\[}}[2], [4], [0], [0], [0]], warp = {{\[}}[0], [32]]>>
// CHECK:         %[[ST:.+]] = tile.dot %[[K]], %[[Q]], {{.*}} transpose_b {warps_n = 2 : i64} {{.*}} -> tensor<64x64xf32, #tile.linear<reg = {{\[}}[0, 1], [8, 0], [0, 8], [0, 16], [16, 0]], lane = {{\[}}[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = {{\[}}[32, 0], [0, 32]]>>
// CHECK:         %[[PT:.+]] = arith.truncf {{.*}} to tensor<64x64xf16, #tile.linear<reg = {{\[}}[0, 1], [8, 0], [0, 8], [0, 16], [16, 0]], lane = {{\[}}[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = {{\[}}[32, 0], [0, 32]]>>
// CHECK:         %[[PS:.+]] = tile.convert_layout %[[PT]] {{.*}} -> tensor<64x64xf16, #tile.shared<swizzle = 3>>
// CHECK:         tile.dot %[[PS]], %[[DO]], {{.*}} {warps_n = 2 : i64} {{.*}} -> tensor<64x64xf32, #tile.linear<reg = {{\[}}[0, 1], [8, 0], [0, 8], [0, 16], [16, 0]], lane = {{\[}}[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = {{\[}}[32, 0], [0, 32]]>>
// CHECK-NOT:     tile.convert_layout
// 8 warps, warps_n = 2: a 4 x 2 grid, 16 rows x 32 columns per warp.
// W8-LABEL: func.func @dkdv_step
// W8:         tile.dot {{.*}} transpose_b {warps_n = 2 : i64} {{.*}} -> tensor<64x64xf32, #tile.linear<reg = {{\[}}[0, 1], [8, 0], [0, 8], [0, 16]], lane = {{\[}}[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = {{\[}}[16, 0], [32, 0], [0, 32]]>>
func.func @dkdv_step(%kp: !tile.ptr<f16>, %qp: !tile.ptr<f16>, %dop: !tile.ptr<f16>,
                     %lp: !tile.ptr<f32>, %dvp: !tile.ptr<f16>, %n: i32) attributes {tile.kernel} {
  %c0 = arith.constant 0 : i32
  %c64 = arith.constant 64 : i32
  %c1 = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %kv = tile.view %kp sizes(%n, %c64) strides(%s64, %c1) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %qv = tile.view %qp sizes(%n, %c64) strides(%s64, %c1) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %dov = tile.view %dop sizes(%n, %c64) strides(%s64, %c1) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %lv = tile.view %lp sizes(%n) strides(%c1) : !tile.ptr<f32> -> !tile.view<f32, 1>
  %dvv = tile.view %dvp sizes(%n, %c64) strides(%s64, %c1) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %k = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %q = tile.load %qv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %do = tile.load %dov[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %l = tile.load %lv[%c0] padding = zero : !tile.view<f32, 1> -> tensor<64xf32>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %st = tile.dot %k, %q, %zero transpose_b {warps_n = 2 : i64} : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
  %l2 = tile.expand_dims %l along 0 : tensor<64xf32> -> tensor<1x64xf32>
  %lb = tile.broadcast %l2 : tensor<1x64xf32> -> tensor<64x64xf32>
  %d = arith.subf %st, %lb : tensor<64x64xf32>
  %p = math.exp2 %d : tensor<64x64xf32>
  %p16 = arith.truncf %p : tensor<64x64xf32> to tensor<64x64xf16>
  %dv = tile.dot %p16, %do, %zero {warps_n = 2 : i64} : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
  %dv16 = arith.truncf %dv : tensor<64x64xf32> to tensor<64x64xf16>
  tile.store %dv16, %dvv[%c0, %c0] : tensor<64x64xf16>, !tile.view<f16, 2>
  return
}

// -----

// The fused backward's dSᵀ: the A operand of dK's grid dot and the B operand
// of the split-Q dQᵀ = Kᵀ·dSᵀ dot, both read from shared memory in one
// placement: one convert_layout (one write, one region) serves both dots.
// CHECK-LABEL: func.func @one_shared_copy_for_two_dots
// CHECK:         %[[DS:.+]] = tile.convert_layout %{{.+}} -> tensor<64x64xf16, #tile.shared<swizzle = 3>>
// CHECK-NOT:     -> tensor<64x64xf16, #tile.shared
// CHECK:         tile.dot %[[DS]], %{{.+}} {warps_n = 2 : i64}
// CHECK-NOT:     -> tensor<64x64xf16, #tile.shared
// CHECK:         tile.dot %{{.+}}, %[[DS]], %{{.+}} :
// W8-LABEL: func.func @one_shared_copy_for_two_dots
// W8:         %[[DS:.+]] = tile.convert_layout %{{.+}} -> tensor<64x64xf16, #tile.shared<swizzle = 3>>
// W8-NOT:     -> tensor<64x64xf16, #tile.shared
// W8:         tile.dot %{{.+}}, %[[DS]], %{{.+}} :
func.func @one_shared_copy_for_two_dots(%kp: !tile.ptr<f16>, %qp: !tile.ptr<f16>, %dkp: !tile.ptr<f16>,
                                        %dqp: !tile.ptr<f16>, %n: i32) attributes {tile.kernel} {
  %c0 = arith.constant 0 : i32
  %c128 = arith.constant 128 : i32
  %c1 = arith.constant 1 : i64
  %s128 = arith.constant 128 : i64
  %kv = tile.view %kp sizes(%n, %c128) strides(%s128, %c1) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %qv = tile.view %qp sizes(%n, %c128) strides(%s128, %c1) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %dkv = tile.view %dkp sizes(%n, %c128) strides(%s128, %c1) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %dqv = tile.view %dqp sizes(%c128, %n) strides(%c1, %s128) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %k = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x128xf16>
  %q = tile.load %qv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x128xf16>
  %z64 = arith.constant dense<0.0> : tensor<64x64xf32>
  %z128 = arith.constant dense<0.0> : tensor<64x128xf32>
  %zt = arith.constant dense<0.0> : tensor<128x64xf32>
  %st = tile.dot %k, %q, %z64 transpose_b {warps_n = 2 : i64} : tensor<64x128xf16>, tensor<64x128xf16> -> tensor<64x64xf32>
  %ds = arith.truncf %st : tensor<64x64xf32> to tensor<64x64xf16>
  %dk = tile.dot %ds, %q, %z128 {warps_n = 2 : i64} : tensor<64x64xf16>, tensor<64x128xf16> -> tensor<64x128xf32>
  %kt = tile.trans %k : tensor<64x128xf16> -> tensor<128x64xf16>
  %dq = tile.dot %kt, %ds, %zt : tensor<128x64xf16>, tensor<64x64xf16> -> tensor<128x64xf32>
  %dk16 = arith.truncf %dk : tensor<64x128xf32> to tensor<64x128xf16>
  %dq16 = arith.truncf %dq : tensor<128x64xf32> to tensor<128x64xf16>
  tile.store %dk16, %dkv[%c0, %c0] : tensor<64x128xf16>, !tile.view<f16, 2>
  tile.store %dq16, %dqv[%c0, %c0] : tensor<128x64xf16>, !tile.view<f16, 2>
  return
}

// -----

func.func @grid_wider_than_the_program(%p: !tile.ptr<f16>, %n: i32) attributes {tile.kernel} {
  %c0 = arith.constant 0 : i32
  %c64 = arith.constant 64 : i32
  %c1 = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %v = tile.view %p sizes(%n, %c64) strides(%s64, %c1) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %a = tile.load %v[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  // expected-error@below {{warps_n = 16 exceeds the program's}}
  %s = tile.dot %a, %a, %zero transpose_b {warps_n = 16 : i64} : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
  return
}

// -----

func.func @columns_too_few_for_the_grid(%p: !tile.ptr<f16>, %n: i32) attributes {tile.kernel} {
  %c0 = arith.constant 0 : i32
  %c64 = arith.constant 64 : i32
  %c1 = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %v = tile.view %p sizes(%n, %c64) strides(%s64, %c1) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %a = tile.load %v[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %b = tile.load %v[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<16x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x16xf32>
  // expected-error@below {{cannot split the 16 columns of this tile.dot over warps_n = 4 warps}}
  %s = tile.dot %a, %b, %zero transpose_b {warps_n = 4 : i64} : tensor<64x64xf16>, tensor<16x64xf16> -> tensor<64x16xf32>
  return
}

// -----

func.func @warps_n_not_a_power_of_two(%p: !tile.ptr<f16>, %n: i32) attributes {tile.kernel} {
  %c0 = arith.constant 0 : i32
  %c64 = arith.constant 64 : i32
  %c1 = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %v = tile.view %p sizes(%n, %c64) strides(%s64, %c1) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %a = tile.load %v[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  // expected-error@below {{warps_n (warps along N) must be a power of two >= 1, got 3}}
  %s = tile.dot %a, %a, %zero transpose_b {warps_n = 3 : i64} : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
  return
}

// -----

// The fused backward's dQᵀ = Kᵀ·dSᵀ in its loop (split-Q, 128 keys): the
// loop's accumulators (8 warps: dK, dV 64 registers each, dQᵀ and Sᵀ 8)
// and K as an invariant A operand (32) pin more than the 168-register
// budget (twice as many over 4 warps), so
// the A operands stay in shared memory. Kᵀ is then the transposed view of
// K's shared tile (read with ldmatrix.trans), not a register copy of K
// transposed before the loop (32 registers held through it).
// CHECK-LABEL: func.func @transposed_view_of_k
// CHECK:         %[[K:.+]] = tile.load {{.*}} -> tensor<128x128xf16, #tile.shared<swizzle = 3>>
// CHECK-NOT:     tile.convert_layout %[[K]]
// CHECK:         scf.for
// CHECK:         %[[KT:.+]] = tile.trans %[[K]] : tensor<128x128xf16, #tile.shared<swizzle = 3>> -> tensor<128x128xf16, #tile.shared<swizzle = 3, transposed>>
// CHECK:         tile.dot %[[KT]], %{{.+}}, %{{.+}} : tensor<128x128xf16, #tile.shared<swizzle = 3, transposed>>
// CHECK-NOT:     tile.convert_layout %[[K]]
// W8-LABEL: func.func @transposed_view_of_k
// W8:         tile.trans %{{.+}} : tensor<128x128xf16, #tile.shared<swizzle = 3>> -> tensor<128x128xf16, #tile.shared<swizzle = 3, transposed>>
func.func @transposed_view_of_k(%kp: !tile.ptr<f16>, %qp: !tile.ptr<f16>, %dkp: !tile.ptr<f16>,
                                %dqp: !tile.ptr<f32>, %n: i32) attributes {tile.kernel} {
  %c0 = arith.constant 0 : i32
  %c1i = arith.constant 1 : i32
  %c4 = arith.constant 4 : i32
  %c16 = arith.constant 16 : i32
  %c128 = arith.constant 128 : i32
  %c1 = arith.constant 1 : i64
  %s128 = arith.constant 128 : i64
  %s16 = arith.constant 16 : i64
  %kv = tile.view %kp sizes(%n, %c128) strides(%s128, %c1) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %qv = tile.view %qp sizes(%n, %c128) strides(%s128, %c1) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %dkv = tile.view %dkp sizes(%n, %c128) strides(%s128, %c1) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %dqv = tile.view %dqp sizes(%c128, %c16) strides(%s16, %c1) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %k = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<128x128xf16>
  %z16 = arith.constant dense<0.0> : tensor<128x16xf32>
  %zacc = arith.constant dense<0.0> : tensor<128x128xf32>
  %zt = arith.constant dense<0.0> : tensor<128x16xf32>
  %r:2 = scf.for %i = %c0 to %c4 step %c1i iter_args(%dk = %zacc, %dv = %zacc) -> (tensor<128x128xf32>, tensor<128x128xf32>) : i32 {
    %row = arith.muli %i, %c16 : i32
    %q = tile.load %qv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<16x128xf16>
    %st = tile.dot %k, %q, %z16 transpose_b : tensor<128x128xf16>, tensor<16x128xf16> -> tensor<128x16xf32>
    %pt = arith.truncf %st : tensor<128x16xf32> to tensor<128x16xf16>
    %dv2 = tile.dot %pt, %q, %dv : tensor<128x16xf16>, tensor<16x128xf16> -> tensor<128x128xf32>
    %dk2 = tile.dot %pt, %q, %dk : tensor<128x16xf16>, tensor<16x128xf16> -> tensor<128x128xf32>
    %kt = tile.trans %k : tensor<128x128xf16> -> tensor<128x128xf16>
    %dqt = tile.dot %kt, %pt, %zt : tensor<128x128xf16>, tensor<128x16xf16> -> tensor<128x16xf32>
    tile.atomic_add %dqt, %dqv[%c0, %c0] : tensor<128x16xf32>, !tile.view<f32, 2>
    scf.yield %dk2, %dv2 : tensor<128x128xf32>, tensor<128x128xf32>
  }
  %dk16 = arith.truncf %r#0 : tensor<128x128xf32> to tensor<128x128xf16>
  tile.store %dk16, %dkv[%c0, %c0] : tensor<128x128xf16>, !tile.view<f16, 2>
  return
}
