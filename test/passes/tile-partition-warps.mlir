// RUN: tile-opt %s -split-input-file -tile-partition-warps -verify-diagnostics | FileCheck %s
// RUN: tile-opt %s -split-input-file -tile-partition-warps="num-warps=8" -verify-diagnostics | FileCheck %s --check-prefix=W8

// The attention loop body: S and O take the mma accumulator layout with the
// rows split over warps (4 warps: 32 rows each, the second m16 tile a
// register bit; 8 warps: 16 rows each), Q the A-operand layout (the same
// map), K and V live in shared memory, the row max/sum are row slices of the
// accumulator (the 4 lanes of a quad replicate them), and no tile moves
// between layouts: no convert_layout, so no shared-memory round trip of S or P.
// CHECK-LABEL: func.func @attention_step
// CHECK-SAME:    tile.num_warps = 4
// CHECK:         %[[Q:.+]] = tile.load {{.*}} -> tensor<128x64xf16, #tile.linear<reg = {{\[}}[0, 1], [8, 0], [0, 8], [0, 16], [0, 32], [16, 0]], lane = {{\[}}[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = {{\[}}[32, 0], [64, 0]]>>
// CHECK:         %[[K:.+]] = tile.load {{.*}} -> tensor<64x64xf16, #tile.shared<swizzle = 3>>
// CHECK:         %[[V:.+]] = tile.load {{.*}} -> tensor<64x64xf16, #tile.shared<swizzle = 3>>
// CHECK:         %[[S:.+]] = tile.dot %[[Q]], %[[K]], {{.*}} transpose_b {{.*}} -> tensor<128x64xf32, #tile.linear<reg = {{\[}}[0, 1], [8, 0], [0, 8], [0, 16], [0, 32], [16, 0]], lane = {{\[}}[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = {{\[}}[32, 0], [64, 0]]>>
// CHECK:         tile.reduce max %[[S]] along 1 {{.*}} -> tensor<128xf32, #tile.linear<reg = {{\[}}[8], [16]], lane = {{\[}}[0], [0], [1], [2], [4]], warp = {{\[}}[32], [64]]>>
// CHECK:         %[[P:.+]] = arith.truncf {{.*}} to tensor<128x64xf16, #tile.linear<reg = {{\[}}[0, 1], [8, 0], [0, 8], [0, 16], [0, 32], [16, 0]]
// CHECK:         tile.dot %[[P]], %[[V]]
// CHECK-NOT:     tile.convert_layout
// W8-LABEL: func.func @attention_step
// W8-SAME:    tile.num_warps = 8
// W8:         %[[S:.+]] = tile.dot {{.*}} transpose_b {{.*}} -> tensor<128x64xf32, #tile.linear<reg = {{\[}}[0, 1], [8, 0], [0, 8], [0, 16], [0, 32]], lane = {{\[}}[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = {{\[}}[16, 0], [32, 0], [64, 0]]>>
// W8:         tile.reduce max %[[S]] along 1 {{.*}} -> tensor<128xf32, #tile.linear<reg = {{\[}}[8]], lane = {{\[}}[0], [0], [1], [2], [4]], warp = {{\[}}[16], [32], [64]]>>
// W8-NOT:     tile.convert_layout
func.func @attention_step(%qp: !tile.ptr<f16>, %kp: !tile.ptr<f16>, %vp: !tile.ptr<f16>,
                          %op: !tile.ptr<f16>, %n: i32) attributes {tile.kernel} {
  %c0 = arith.constant 0 : i32
  %c64 = arith.constant 64 : i32
  %c1 = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %qv = tile.view %qp sizes(%n, %c64) strides(%s64, %c1) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %kv = tile.view %kp sizes(%n, %c64) strides(%s64, %c1) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %vv = tile.view %vp sizes(%n, %c64) strides(%s64, %c1) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%n, %c64) strides(%s64, %c1) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %q = tile.load %qv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<128x64xf16>
  %k = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %v = tile.load %vv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<128x64xf32>
  %s = tile.dot %q, %k, %zero transpose_b : tensor<128x64xf16>, tensor<64x64xf16> -> tensor<128x64xf32>
  %m = tile.reduce max %s along 1 : tensor<128x64xf32> -> tensor<128xf32>
  %m2 = tile.expand_dims %m along 1 : tensor<128xf32> -> tensor<128x1xf32>
  %mb = tile.broadcast %m2 : tensor<128x1xf32> -> tensor<128x64xf32>
  %d = arith.subf %s, %mb : tensor<128x64xf32>
  %p = math.exp %d : tensor<128x64xf32>
  %p16 = arith.truncf %p : tensor<128x64xf32> to tensor<128x64xf16>
  %o = tile.dot %p16, %v, %zero : tensor<128x64xf16>, tensor<64x64xf16> -> tensor<128x64xf32>
  %o16 = arith.truncf %o : tensor<128x64xf32> to tensor<128x64xf16>
  tile.store %o16, %ov[%c0, %c0] : tensor<128x64xf16>, !tile.view<f16, 2>
  return
}

// -----

// One index tile used as rows and as columns: the cheap iota is computed
// twice, once per layout, instead of being moved through shared memory.
// CHECK-LABEL: func.func @iota_in_two_layouts
// W8-LABEL: func.func @iota_in_two_layouts
// W8-COUNT-2: tile.iota
// CHECK-COUNT-2: tile.iota
// CHECK-NOT:     tile.convert_layout
func.func @iota_in_two_layouts() attributes {tile.kernel} {
  %a = arith.constant dense<1.0> : tensor<128x64xf16>
  %b = arith.constant dense<1.0> : tensor<64x128xf16>
  %zero = arith.constant dense<0.0> : tensor<128x128xf32>
  %s = tile.dot %a, %b, %zero : tensor<128x64xf16>, tensor<64x128xf16> -> tensor<128x128xf32>
  %i = tile.iota : tensor<128xi32>
  %r1 = tile.expand_dims %i along 1 : tensor<128xi32> -> tensor<128x1xi32>
  %r = tile.broadcast %r1 : tensor<128x1xi32> -> tensor<128x128xi32>
  %c1 = tile.expand_dims %i along 0 : tensor<128xi32> -> tensor<1x128xi32>
  %c = tile.broadcast %c1 : tensor<1x128xi32> -> tensor<128x128xi32>
  %causal = arith.cmpi sle, %c, %r : tensor<128x128xi32>
  %ninf = arith.constant dense<0xFF800000> : tensor<128x128xf32>
  %masked = arith.select %causal, %s, %ninf : tensor<128x128xi1>, tensor<128x128xf32>
  %m = tile.reduce max %masked along 1 : tensor<128x128xf32> -> tensor<128xf32>
  return
}

// -----

// A B operand computed in registers moves to shared memory at the dot.
// CHECK-LABEL: func.func @b_from_registers
// CHECK:         %[[B:.+]] = tile.convert_layout %{{.*}} : tensor<64x64xf16, #tile.linear{{.*}}> -> tensor<64x64xf16, #tile.shared<swizzle = 3>>
// CHECK:         tile.dot %{{.*}}, %[[B]]
func.func @b_from_registers() attributes {tile.kernel} {
  %a = arith.constant dense<1.0> : tensor<128x64xf16>
  %b = arith.constant dense<1.0> : tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<128x64xf32>
  %s = tile.dot %a, %b, %zero : tensor<128x64xf16>, tensor<64x64xf16> -> tensor<128x64xf32>
  return
}

// -----

// Split-Q needs whole m16 row tiles per warp.
func.func @too_few_rows() attributes {tile.kernel} {
  %a = arith.constant dense<1.0> : tensor<32x64xf16>
  %b = arith.constant dense<1.0> : tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<32x64xf32>
  // expected-error@below {{cannot split the 32 rows of this tile.dot over}}
  %s = tile.dot %a, %b, %zero : tensor<32x64xf16>, tensor<64x64xf16> -> tensor<32x64xf32>
  return
}

// -----

// A reduction across the rows that different warps own is not split-Q.
func.func @column_reduction() attributes {tile.kernel} {
  %a = arith.constant dense<1.0> : tensor<128x64xf16>
  %b = arith.constant dense<1.0> : tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<128x64xf32>
  %s = tile.dot %a, %b, %zero : tensor<128x64xf16>, tensor<64x64xf16> -> tensor<128x64xf32>
  // expected-error@below {{tile.reduce along axis 0 would combine elements held by different warps}}
  %m = tile.reduce max %s along 0 : tensor<128x64xf32> -> tensor<64xf32>
  return
}

// -----

// Kernels take pointers and scalars, not tiles.
// expected-error@below {{kernel parameter 0 is a tile}}
func.func @tile_parameter(%a: tensor<64x64xf16>) attributes {tile.kernel} {
  return
}

// -----

// Without a dot, a tile summed along its leading axis (the fused decode
// merge's (splits, features) partials) keeps that axis inside each warp:
// the thread's 4 contiguous f32, then lanes along the row and down 4 rows,
// the warps on the row's top bits (features 32 and 64), the other rows in
// registers. The weights' stride-0 lse view shares the layout; no
// conversion, and the sums are slices of it.
// CHECK-LABEL: func.func @split_sum
// CHECK:         tile.load {{.*}} -> tensor<32x128xf32, #tile.linear<reg = {{\[}}[0, 1], [0, 2], [4, 0], [8, 0], [16, 0]], lane = {{\[}}[0, 4], [0, 8], [0, 16], [1, 0], [2, 0]], warp = {{\[}}[0, 32], [0, 64]]>>
// CHECK:         tile.load {{.*}} -> tensor<32x128xf32, #tile.linear<reg = {{\[}}[0, 1], [0, 2], [4, 0], [8, 0], [16, 0]], lane = {{\[}}[0, 4], [0, 8], [0, 16], [1, 0], [2, 0]], warp = {{\[}}[0, 32], [0, 64]]>>
// CHECK:         tile.reduce sum {{.*}} along 0 {{.*}} -> tensor<128xf32, #tile.linear<reg = {{\[}}[1], [2]], lane = {{\[}}[4], [8], [16], [0], [0]], warp = {{\[}}[32], [64]]>>
// CHECK-NOT:     tile.convert_layout
// A row sum of the same tile keeps the default (warps down the rows).
// CHECK-LABEL: func.func @row_sum
// CHECK:         tile.load {{.*}} -> tensor<32x128xf32, #tile.linear<reg = {{\[}}[0, 1], [0, 2], [4, 0], [8, 0], [16, 0]], lane = {{\[}}[0, 4], [0, 8], [0, 16], [0, 32], [0, 64]], warp = {{\[}}[1, 0], [2, 0]]>>
// CHECK:         tile.reduce sum {{.*}} along 1
func.func @split_sum(%w: !tile.ptr<f32>, %o: !tile.ptr<f32>, %dst: !tile.ptr<f32>, %n: i32) attributes {tile.kernel} {
  %c0 = arith.constant 0 : i32
  %c128 = arith.constant 128 : i32
  %c1 = arith.constant 1 : i64
  %z = arith.constant 0 : i64
  %s128 = arith.constant 128 : i64
  %wv = tile.view %w sizes(%n, %c128) strides(%c1, %z) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %ov = tile.view %o sizes(%n, %c128) strides(%s128, %c1) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %dv = tile.view %dst sizes(%c128) strides(%c1) : !tile.ptr<f32> -> !tile.view<f32, 1>
  %wt = tile.load %wv[%c0, %c0] padding = zero : !tile.view<f32, 2> -> tensor<32x128xf32>
  %ot = tile.load %ov[%c0, %c0] padding = zero : !tile.view<f32, 2> -> tensor<32x128xf32>
  %p = arith.mulf %ot, %wt : tensor<32x128xf32>
  %s = tile.reduce sum %p along 0 : tensor<32x128xf32> -> tensor<128xf32>
  tile.store %s, %dv[%c0] : tensor<128xf32>, !tile.view<f32, 1>
  return
}
func.func @row_sum(%o: !tile.ptr<f32>, %dst: !tile.ptr<f32>, %n: i32) attributes {tile.kernel} {
  %c0 = arith.constant 0 : i32
  %c128 = arith.constant 128 : i32
  %c1 = arith.constant 1 : i64
  %s128 = arith.constant 128 : i64
  %ov = tile.view %o sizes(%n, %c128) strides(%s128, %c1) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %dv = tile.view %dst sizes(%n) strides(%c1) : !tile.ptr<f32> -> !tile.view<f32, 1>
  %ot = tile.load %ov[%c0, %c0] padding = zero : !tile.view<f32, 2> -> tensor<32x128xf32>
  %s = tile.reduce sum %ot along 1 : tensor<32x128xf32> -> tensor<32xf32>
  tile.store %s, %dv[%c0] : tensor<32xf32>, !tile.view<f32, 1>
  return
}

// -----

// The same through a loop that carries the next row's tile (the fused
// decode merge prefetching): the load before the loop reaches the sum
// through the iter_arg, so it too keeps its warps off the summed axis.
// CHECK-LABEL: func.func @carried_split_sum
// CHECK:         tile.load {{.*}} -> tensor<32x128xf32, #tile.linear<reg = {{\[}}[0, 1], [0, 2], [4, 0], [8, 0], [16, 0]], lane = {{\[}}[0, 4], [0, 8], [0, 16], [1, 0], [2, 0]], warp = {{\[}}[0, 32], [0, 64]]>>
// CHECK:         scf.for
// CHECK-NOT:     tile.convert_layout
func.func @carried_split_sum(%o: !tile.ptr<f32>, %dst: !tile.ptr<f32>, %n: i32) attributes {tile.kernel} {
  %c0 = arith.constant 0 : i32
  %c1i = arith.constant 1 : i32
  %c128 = arith.constant 128 : i32
  %c1 = arith.constant 1 : i64
  %s128 = arith.constant 128 : i64
  %ov = tile.view %o sizes(%n, %c128) strides(%s128, %c1) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %dv = tile.view %dst sizes(%c128) strides(%c1) : !tile.ptr<f32> -> !tile.view<f32, 1>
  %t0 = tile.load %ov[%c0, %c0] padding = zero : !tile.view<f32, 2> -> tensor<32x128xf32>
  %last = scf.for %r = %c0 to %n step %c1i iter_args(%t = %t0) -> (tensor<32x128xf32>) : i32 {
    %next = tile.load %ov[%r, %c0] padding = zero : !tile.view<f32, 2> -> tensor<32x128xf32>
    %s = tile.reduce sum %t along 0 : tensor<32x128xf32> -> tensor<128xf32>
    tile.store %s, %dv[%c0] : tensor<128xf32>, !tile.view<f32, 1>
    scf.yield %next : tensor<32x128xf32>
  }
  return
}

// -----

// Without a dot, tiles take the coalesced layout: 8 consecutive f16 (16
// bytes) per thread, lanes along the row first, warps down the rows.
// CHECK-LABEL: func.func @copy
// CHECK:         tile.load {{.*}} -> tensor<32x64xf16, #tile.linear<reg = {{\[}}[0, 1], [0, 2], [0, 4], [16, 0]], lane = {{\[}}[0, 8], [0, 16], [0, 32], [1, 0], [2, 0]], warp = {{\[}}[4, 0], [8, 0]]>>
func.func @copy(%src: !tile.ptr<f16>, %dst: !tile.ptr<f16>, %n: i32) attributes {tile.kernel} {
  %c0 = arith.constant 0 : i32
  %c64 = arith.constant 64 : i32
  %c1 = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %sv = tile.view %src sizes(%n, %c64) strides(%s64, %c1) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %dv = tile.view %dst sizes(%n, %c64) strides(%s64, %c1) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %t = tile.load %sv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<32x64xf16>
  tile.store %t, %dv[%c0, %c0] : tensor<32x64xf16>, !tile.view<f16, 2>
  return
}

// -----

// A row softmax without a dot, in the form tile-minimize-nonmatmul leaves it
// (the row sums inverted by a constant 1 / l, defined first): the loaded tile
// is seeded before the constant, which follows the row sums' layout, so no
// conversion is needed. Its 1024 columns go to lanes and registers and the
// warps take rows: each row reduces inside one warp.
// CHECK-LABEL: func.func @softmax_rows
// CHECK:         tile.load {{.*}} -> tensor<16x1024xf32, #tile.linear<reg = {{\[}}[0, 1], [0, 2], [0, 128], [0, 256], [0, 512], [4, 0], [8, 0]], lane = {{\[}}[0, 4], [0, 8], [0, 16], [0, 32], [0, 64]], warp = {{\[}}[1, 0], [2, 0]]>>
// CHECK-NOT:     tile.convert_layout
func.func @softmax_rows(%x: !tile.ptr<f32>, %n: i32) attributes {tile.kernel} {
  %one = arith.constant dense<1.0> : tensor<16xf32>
  %c0 = arith.constant 0 : i32
  %c1024 = arith.constant 1024 : i32
  %c1 = arith.constant 1 : i64
  %s = arith.constant 1024 : i64
  %xv = tile.view %x sizes(%n, %c1024) strides(%s, %c1) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %t = tile.load %xv[%c0, %c0] padding = neg_inf : !tile.view<f32, 2> -> tensor<16x1024xf32>
  %m = tile.reduce max %t along 1 : tensor<16x1024xf32> -> tensor<16xf32>
  %m1 = tile.expand_dims %m along 1 : tensor<16xf32> -> tensor<16x1xf32>
  %mb = tile.broadcast %m1 : tensor<16x1xf32> -> tensor<16x1024xf32>
  %d = arith.subf %t, %mb : tensor<16x1024xf32>
  %p = math.exp2 %d : tensor<16x1024xf32>
  %l = tile.reduce sum %p along 1 : tensor<16x1024xf32> -> tensor<16xf32>
  %r = arith.divf %one, %l : tensor<16xf32>
  %r1 = tile.expand_dims %r along 1 : tensor<16xf32> -> tensor<16x1xf32>
  %rb = tile.broadcast %r1 : tensor<16x1xf32> -> tensor<16x1024xf32>
  %y = arith.mulf %p, %rb : tensor<16x1024xf32>
  tile.store %y, %xv[%c0, %c0] : tensor<16x1024xf32>, !tile.view<f32, 2>
  return
}

// -----

// A hand-written prefetch that reloads K(j+1) before K(j) is read (the shape
// tile-pipeline's stages=2 makes): the carried tile stays in shared memory,
// no conversion in the loop; the GPU lowering gives it two regions.
// CHECK-LABEL: func.func @manual
// CHECK:         scf.for {{.*}} -> (tensor<128x64xf32, #tile.linear{{.*}}>, tensor<64x64xf16, #tile.shared<swizzle = 3>>)
// CHECK-NOT:       tile.convert_layout
// CHECK:           tile.dot %{{.*}}, %{{.*}}, %{{.*}} transpose_b : tensor<128x64xf16, {{.*}}>, tensor<64x64xf16, #tile.shared<swizzle = 3>>
func.func @manual(%qp: !tile.ptr<f16>, %kp: !tile.ptr<f16>, %op: !tile.ptr<f32>, %n: i32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %qv = tile.view %qp sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %kv = tile.view %kp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %q = tile.load %qv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<128x64xf16>
  %zero = arith.constant dense<0.0> : tensor<128x64xf32>
  %k0 = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %acc:2 = scf.for %j = %c0 to %n step %c1 iter_args(%o = %zero, %k = %k0) -> (tensor<128x64xf32>, tensor<64x64xf16>) : i32 {
    %j1 = arith.addi %j, %c1 : i32
    %row = arith.muli %j1, %c64 : i32
    %knext = tile.load %kv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %k, %o transpose_b : tensor<128x64xf16>, tensor<64x64xf16> -> tensor<128x64xf32>
    scf.yield %s, %knext : tensor<128x64xf32>, tensor<64x64xf16>
  }
  %acc64 = arith.constant dense<0.0> : tensor<64x64xf32>
  tile.store %acc64, %ov[%c0, %c0] : tensor<64x64xf32>, !tile.view<f32, 2>
  return
}

// -----

// Elementwise math on a tile placed in shared memory (a B operand, or an A
// operand kept there) runs in registers: its result takes a register layout
// (here the default, nothing else reaches it) and the shared tile is read
// out at the op. Before, the result inherited #tile.shared and the NVVM
// lowering crashed reading it as a register layout.
// CHECK-LABEL: func.func @elementwise_of_shared
// CHECK:         %[[K:.+]] = tile.load {{.*}} -> tensor<64x64xf16, #tile.shared<swizzle = 3>>
// CHECK:         %[[R:.+]] = tile.convert_layout %[[K]] : tensor<64x64xf16, #tile.shared<swizzle = 3>> -> tensor<64x64xf16, #tile.linear
// CHECK:         arith.extf %[[R]] : tensor<64x64xf16, #tile.linear{{.*}}> to tensor<64x64xf32, #tile.linear
func.func @elementwise_of_shared(%kp: !tile.ptr<f16>, %op: !tile.ptr<f32>) attributes {tile.kernel} {
  %c0 = arith.constant 0 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %kv = tile.view %kp sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%c64) strides(%one) : !tile.ptr<f32> -> !tile.view<f32, 1>
  %a = arith.constant dense<1.0> : tensor<128x64xf16>
  %zero = arith.constant dense<0.0> : tensor<128x64xf32>
  %k = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %s = tile.dot %a, %k, %zero transpose_b : tensor<128x64xf16>, tensor<64x64xf16> -> tensor<128x64xf32>
  %k32 = arith.extf %k : tensor<64x64xf16> to tensor<64x64xf32>
  %sum = tile.reduce sum %k32 along 1 : tensor<64x64xf32> -> tensor<64xf32>
  tile.store %sum, %ov[%c0] : tensor<64xf32>, !tile.view<f32, 1>
  return
}
