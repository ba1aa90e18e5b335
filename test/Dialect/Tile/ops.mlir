// Every tile op, type and attribute parses, verifies, prints and parses again
// to the same text.
// RUN: tile-opt %s | tile-opt | FileCheck %s

// Grid coordinates on every axis the hardware has.
// CHECK-LABEL: func.func @grid
// CHECK:         %{{.+}} = tile.program_id 0 : i32
// CHECK:         %{{.+}} = tile.program_id 2 : i32
// CHECK:         %{{.+}} = tile.num_programs 1 : i32
func.func @grid() -> (i32, i32, i32) {
  %0 = tile.program_id 0 : i32
  %1 = tile.program_id 2 : i32
  %2 = tile.num_programs 1 : i32
  return %0, %1, %2 : i32, i32, i32
}

// iota builds a 1-D index tile.
// CHECK-LABEL: func.func @iota
// CHECK:         tile.iota : tensor<64xi32>
func.func @iota() -> tensor<64xi32> {
  %0 = tile.iota : tensor<64xi32>
  return %0 : tensor<64xi32>
}

// splat takes float and integer scalars, to tiles of any rank.
// CHECK-LABEL: func.func @splat
// CHECK-SAME:    (%[[F:.+]]: f32, %[[I:.+]]: i32)
// CHECK:         tile.splat %[[F]] : f32 -> tensor<64x64xf32>
// CHECK:         tile.splat %[[I]] : i32 -> tensor<64xi32>
func.func @splat(%f: f32, %i: i32) -> (tensor<64x64xf32>, tensor<64xi32>) {
  %0 = tile.splat %f : f32 -> tensor<64x64xf32>
  %1 = tile.splat %i : i32 -> tensor<64xi32>
  return %0, %1 : tensor<64x64xf32>, tensor<64xi32>
}

// expand_dims then broadcast: a row vector becomes a full tile (both axes).
// CHECK-LABEL: func.func @expand_broadcast
// CHECK-SAME:    (%[[M:.+]]: tensor<64xf32>)
// CHECK:         %[[COL:.+]] = tile.expand_dims %[[M]] along 1 : tensor<64xf32> -> tensor<64x1xf32>
// CHECK:         tile.broadcast %[[COL]] : tensor<64x1xf32> -> tensor<64x128xf32>
// CHECK:         %[[ROW:.+]] = tile.expand_dims %[[M]] along 0 : tensor<64xf32> -> tensor<1x64xf32>
// CHECK:         tile.broadcast %[[ROW]] : tensor<1x64xf32> -> tensor<32x64xf32>
func.func @expand_broadcast(%m: tensor<64xf32>) -> (tensor<64x128xf32>, tensor<32x64xf32>) {
  %0 = tile.expand_dims %m along 1 : tensor<64xf32> -> tensor<64x1xf32>
  %1 = tile.broadcast %0 : tensor<64x1xf32> -> tensor<64x128xf32>
  %2 = tile.expand_dims %m along 0 : tensor<64xf32> -> tensor<1x64xf32>
  %3 = tile.broadcast %2 : tensor<1x64xf32> -> tensor<32x64xf32>
  return %1, %3 : tensor<64x128xf32>, tensor<32x64xf32>
}

// trans swaps the two dimensions of a non-square tile.
// CHECK-LABEL: func.func @trans
// CHECK-SAME:    (%[[K:.+]]: tensor<64x128xf16>)
// CHECK:         tile.trans %[[K]] : tensor<64x128xf16> -> tensor<128x64xf16>
func.func @trans(%k: tensor<64x128xf16>) -> tensor<128x64xf16> {
  %0 = tile.trans %k : tensor<64x128xf16> -> tensor<128x64xf16>
  return %0 : tensor<128x64xf16>
}

// addptr takes i32, i64 and index offsets; the pointer type is kept.
// CHECK-LABEL: func.func @addptr
// CHECK-SAME:    (%[[P:.+]]: !tile.ptr<f16>, %[[O64:.+]]: i64, %[[O32:.+]]: i32, %[[OIX:.+]]: index)
// CHECK:         %[[P1:.+]] = tile.addptr %[[P]], %[[O64]] : <f16>, i64
// CHECK:         %[[P2:.+]] = tile.addptr %[[P1]], %[[O32]] : <f16>, i32
// CHECK:         tile.addptr %[[P2]], %[[OIX]] : <f16>, index
func.func @addptr(%p: !tile.ptr<f16>, %o64: i64, %o32: i32, %oix: index) -> !tile.ptr<f16> {
  %0 = tile.addptr %p, %o64 : !tile.ptr<f16>, i64
  %1 = tile.addptr %0, %o32 : !tile.ptr<f16>, i32
  %2 = tile.addptr %1, %oix : !tile.ptr<f16>, index
  return %2 : !tile.ptr<f16>
}

// load_scalar reads one element of any integer or float pointee type; the
// result feeds scalar arithmetic and view sizes like any scalar.
// CHECK-LABEL: func.func @load_scalar
// CHECK-SAME:    (%[[CU:.+]]: !tile.ptr<i32>, %[[SL:.+]]: !tile.ptr<f32>, %[[B:.+]]: i32)
// CHECK:         %[[P:.+]] = tile.addptr %[[CU]], %[[B]] : <i32>, i32
// CHECK:         %[[START:.+]] = tile.load_scalar %[[P]] : <i32> -> i32
// CHECK:         tile.load_scalar %[[SL]] : <f32> -> f32
// CHECK:         tile.view %[[SL]] sizes(%[[START]])
func.func @load_scalar(%cu: !tile.ptr<i32>, %slopes: !tile.ptr<f32>, %b: i32) -> (i32, f32, !tile.view<f32, 1>) {
  %p = tile.addptr %cu, %b : !tile.ptr<i32>, i32
  %start = tile.load_scalar %p : !tile.ptr<i32> -> i32
  %slope = tile.load_scalar %slopes : !tile.ptr<f32> -> f32
  %c1 = arith.constant 1 : i64
  %v = tile.view %slopes sizes(%start) strides(%c1) : !tile.ptr<f32> -> !tile.view<f32, 1>
  return %start, %slope, %v : i32, f32, !tile.view<f32, 1>
}

// arrive counts a program on an i32 counter and yields the i1 that an
// scf.if takes.
// CHECK-LABEL: func.func @arrive
// CHECK:         %[[LAST:.+]] = tile.arrive %{{.+}}, %{{.+}} : <i32>
// CHECK:         scf.if %[[LAST]]
func.func @arrive(%counters: !tile.ptr<i32>, %g: i32, %n: i32) {
  %c = tile.addptr %counters, %g : !tile.ptr<i32>, i32
  %last = tile.arrive %c, %n : !tile.ptr<i32>
  scf.if %last {
  }
  return
}

// Turns: a volatile scalar read of the counter, a wait for turn %t (given
// what was read), and the pass that gives the next program its turn.
// CHECK-LABEL: func.func @turns
// CHECK:         %[[SEEN:.+]] = tile.load_scalar %[[C:.+]] volatile : <i32> -> i32
// CHECK:         tile.wait_turn %[[C]], %{{.+}}, %[[SEEN]] : <i32>
// CHECK:         tile.pass_turn %[[C]] : <i32>
func.func @turns(%counters: !tile.ptr<i32>, %g: i32, %t: i32) {
  %c = tile.addptr %counters, %g : !tile.ptr<i32>, i32
  %seen = tile.load_scalar %c volatile : !tile.ptr<i32> -> i32
  tile.wait_turn %c, %t, %seen : !tile.ptr<i32>
  tile.pass_turn %c : !tile.ptr<i32>
  return
}

// Programmatic dependent launch: the wait for the kernels before this one,
// and the signal that lets the next one start.
// CHECK-LABEL: func.func @grid_dependency
// CHECK-NEXT:    tile.wait_prior_kernels
// CHECK-NEXT:    tile.launch_dependents
func.func @grid_dependency() {
  tile.wait_prior_kernels
  tile.launch_dependents
  return
}

// Views of rank 1, 2 and 3, with float and integer element types.
// CHECK-LABEL: func.func @views
// CHECK-SAME:    (%[[PF:.+]]: !tile.ptr<f32>, %[[PB:.+]]: !tile.ptr<bf16>, %[[PI:.+]]: !tile.ptr<i8>, %[[N:.+]]: i32, %[[S:.+]]: i64)
// CHECK:         tile.view %[[PF]] sizes(%[[N]]) strides(%[[S]]) : <f32> -> <f32, 1>
// CHECK:         tile.view %[[PB]] sizes(%[[N]], %[[N]]) strides(%[[S]], %[[S]]) : <bf16> -> <bf16, 2>
// CHECK:         tile.view %[[PI]] sizes(%[[N]], %[[N]], %[[N]]) strides(%[[S]], %[[S]], %[[S]]) : <i8> -> <i8, 3>
func.func @views(%pf: !tile.ptr<f32>, %pb: !tile.ptr<bf16>, %pi: !tile.ptr<i8>, %n: i32, %s: i64)
    -> (!tile.view<f32, 1>, !tile.view<bf16, 2>, !tile.view<i8, 3>) {
  %0 = tile.view %pf sizes(%n) strides(%s) : !tile.ptr<f32> -> !tile.view<f32, 1>
  %1 = tile.view %pb sizes(%n, %n) strides(%s, %s) : !tile.ptr<bf16> -> !tile.view<bf16, 2>
  %2 = tile.view %pi sizes(%n, %n, %n) strides(%s, %s, %s) : !tile.ptr<i8> -> !tile.view<i8, 3>
  return %0, %1, %2 : !tile.view<f32, 1>, !tile.view<bf16, 2>, !tile.view<i8, 3>
}

// load with each padding kind, then store the tile back.
// CHECK-LABEL: func.func @load_store
// CHECK-SAME:    (%[[V:.+]]: !tile.view<f16, 2>, %[[V1:.+]]: !tile.view<f32, 1>, %[[R:.+]]: i32, %[[C:.+]]: i32)
// CHECK:         %[[T:.+]] = tile.load %[[V]][%[[R]], %[[C]]] padding = zero : <f16, 2> -> tensor<64x128xf16>
// CHECK:         tile.load %[[V]][%[[R]], %[[C]]] padding = neg_inf : <f16, 2> -> tensor<64x128xf16>
// CHECK:         %[[U:.+]] = tile.load %[[V1]][%[[R]]] padding = nan : <f32, 1> -> tensor<64xf32>
// CHECK:         tile.store %[[T]], %[[V]][%[[R]], %[[C]]] : tensor<64x128xf16>, <f16, 2>
// CHECK:         tile.store %[[U]], %[[V1]][%[[R]]] : tensor<64xf32>, <f32, 1>
func.func @load_store(%v: !tile.view<f16, 2>, %v1: !tile.view<f32, 1>, %r: i32, %c: i32) -> tensor<64x128xf16> {
  %0 = tile.load %v[%r, %c] padding = zero : !tile.view<f16, 2> -> tensor<64x128xf16>
  %1 = tile.load %v[%r, %c] padding = neg_inf : !tile.view<f16, 2> -> tensor<64x128xf16>
  %2 = tile.load %v1[%r] padding = nan : !tile.view<f32, 1> -> tensor<64xf32>
  tile.store %0, %v[%r, %c] : tensor<64x128xf16>, !tile.view<f16, 2>
  tile.store %2, %v1[%r] : tensor<64xf32>, !tile.view<f32, 1>
  return %1 : tensor<64x128xf16>
}

// atomic_add round-trips (an f32 tile into an f32 view).
// CHECK-LABEL: func.func @atomic_add
// CHECK:         tile.atomic_add %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] : tensor<64x128xf32>, <f32, 2>
func.func @atomic_add(%x: tensor<64x128xf32>, %v: !tile.view<f32, 2>, %r: i32) {
  tile.atomic_add %x, %v[%r, %r] : tensor<64x128xf32>, !tile.view<f32, 2>
  return
}

// dot in both forms: a·bᵀ (S = Q·Kᵀ, f16) and a·b (O += P·V, bf16).
// CHECK-LABEL: func.func @dot
// CHECK-SAME:    (%[[Q:.+]]: tensor<64x128xf16>, %[[K:.+]]: tensor<32x128xf16>, %[[S:.+]]: tensor<64x32xf32>, %[[P:.+]]: tensor<64x32xbf16>, %[[V:.+]]: tensor<32x128xbf16>, %[[O:.+]]: tensor<64x128xf32>)
// CHECK:         tile.dot %[[Q]], %[[K]], %[[S]] transpose_b : tensor<64x128xf16>, tensor<32x128xf16> -> tensor<64x32xf32>
// CHECK:         tile.dot %[[P]], %[[V]], %[[O]] : tensor<64x32xbf16>, tensor<32x128xbf16> -> tensor<64x128xf32>
func.func @dot(%q: tensor<64x128xf16>, %k: tensor<32x128xf16>, %s: tensor<64x32xf32>,
               %p: tensor<64x32xbf16>, %v: tensor<32x128xbf16>, %o: tensor<64x128xf32>)
    -> (tensor<64x32xf32>, tensor<64x128xf32>) {
  %0 = tile.dot %q, %k, %s transpose_b : tensor<64x128xf16>, tensor<32x128xf16> -> tensor<64x32xf32>
  %1 = tile.dot %p, %v, %o : tensor<64x32xbf16>, tensor<32x128xbf16> -> tensor<64x128xf32>
  return %0, %1 : tensor<64x32xf32>, tensor<64x128xf32>
}

// reduce with both kinds, along rows and columns.
// CHECK-LABEL: func.func @reduce
// CHECK-SAME:    (%[[S:.+]]: tensor<64x32xf32>)
// CHECK:         tile.reduce max %[[S]] along 1 : tensor<64x32xf32> -> tensor<64xf32>
// CHECK:         tile.reduce sum %[[S]] along 0 : tensor<64x32xf32> -> tensor<32xf32>
func.func @reduce(%s: tensor<64x32xf32>) -> (tensor<64xf32>, tensor<32xf32>) {
  %0 = tile.reduce max %s along 1 : tensor<64x32xf32> -> tensor<64xf32>
  %1 = tile.reduce sum %s along 0 : tensor<64x32xf32> -> tensor<32xf32>
  return %0, %1 : tensor<64xf32>, tensor<32xf32>
}

// #tile.linear and #tile.shared ride on tensors as encodings, and
// convert_layout moves a tile between them: the accumulator of one warp
// (16x32, four n8 tiles) to swizzled shared memory (a 128-byte row has 8
// chunks: 3 swizzle bits), and back with a different register order.
// CHECK-LABEL: func.func @convert_layout
// CHECK-SAME:    (%[[ACC:.+]]: tensor<16x32xf32, #tile.linear<reg = {{\[}}[0, 1], [8, 0], [0, 8], [0, 16]], lane = {{\[}}[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = []>>)
// CHECK:         %[[SH:.+]] = tile.convert_layout %[[ACC]] : tensor<16x32xf32, #tile.linear<{{.*}}>> -> tensor<16x32xf32, #tile.shared<swizzle = 3>>
// CHECK:         tile.convert_layout %[[SH]] : tensor<16x32xf32, #tile.shared<swizzle = 3>> -> tensor<16x32xf32, #tile.linear<reg = {{\[}}[8, 0], [0, 1], [0, 8], [0, 16]], {{.*}}>>
func.func @convert_layout(
    %acc: tensor<16x32xf32, #tile.linear<reg = [[0, 1], [8, 0], [0, 8], [0, 16]], lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = []>>)
    -> tensor<16x32xf32, #tile.linear<reg = [[8, 0], [0, 1], [0, 8], [0, 16]], lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = []>> {
  %0 = tile.convert_layout %acc
      : tensor<16x32xf32, #tile.linear<reg = [[0, 1], [8, 0], [0, 8], [0, 16]], lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = []>>
     -> tensor<16x32xf32, #tile.shared<swizzle = 3>>
  %1 = tile.convert_layout %0
      : tensor<16x32xf32, #tile.shared<swizzle = 3>>
     -> tensor<16x32xf32, #tile.linear<reg = [[8, 0], [0, 1], [0, 8], [0, 16]], lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = []>>
  return %1 : tensor<16x32xf32, #tile.linear<reg = [[8, 0], [0, 1], [0, 8], [0, 16]], lane = [[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]], warp = []>>
}

// An unswizzled shared tile of any row length.
// CHECK-LABEL: func.func @shared_unswizzled
// CHECK-SAME:    tensor<64xi8, #tile.shared<swizzle = 0>>
func.func @shared_unswizzled(%x: tensor<64xi8, #tile.shared<swizzle = 0>>) -> tensor<64xi8, #tile.shared<swizzle = 0>> {
  return %x : tensor<64xi8, #tile.shared<swizzle = 0>>
}

// A rank-1 layout with warps (a row slice of a 4-warp accumulator: the zero
// lane bases replicate across the 4 lanes of a quad).
// CHECK-LABEL: func.func @linear_rank1_warps
// CHECK-SAME:    tensor<64xf32, #tile.linear<reg = {{\[}}[0], [8]], lane = {{\[}}[0], [0], [1], [2], [4]], warp = {{\[}}[16], [32]]>>
func.func @linear_rank1_warps(
    %m: tensor<64xf32, #tile.linear<reg = [[0], [8]], lane = [[0], [0], [1], [2], [4]], warp = [[16], [32]]>>)
    -> tensor<64xf32, #tile.linear<reg = [[0], [8]], lane = [[0], [0], [1], [2], [4]], warp = [[16], [32]]>> {
  return %m : tensor<64xf32, #tile.linear<reg = [[0], [8]], lane = [[0], [0], [1], [2], [4]], warp = [[16], [32]]>>
}

// An explicit `rank =` that agrees with the bases parses; the printer drops it
// (zero bases everywhere: every thread holds element (0, 0)).
// CHECK-LABEL: func.func @linear_explicit_rank
// CHECK-SAME:    #tile.linear<reg = [], lane = {{\[}}[0, 0], [0, 0], [0, 0], [0, 0], [0, 0]], warp = []>
func.func @linear_explicit_rank(
    %x: tensor<1x1xf32, #tile.linear<reg = [], lane = [[0, 0], [0, 0], [0, 0], [0, 0], [0, 0]], warp = [], rank = 2>>)
    -> tensor<1x1xf32, #tile.linear<reg = [], lane = [[0, 0], [0, 0], [0, 0], [0, 0], [0, 0]], warp = []>> {
  return %x : tensor<1x1xf32, #tile.linear<reg = [], lane = [[0, 0], [0, 0], [0, 0], [0, 0], [0, 0]], warp = []>>
}

// The tile types as function signatures: pointers and views survive
// round trips in argument position, where the dialect prefix is printed.
// CHECK-LABEL: func.func @types
// CHECK-SAME:    (%{{[a-z0-9]+}}: !tile.ptr<f32>, %{{[a-z0-9]+}}: !tile.ptr<i64>, %{{[a-z0-9]+}}: !tile.view<bf16, 3>)
func.func @types(%a: !tile.ptr<f32>, %b: !tile.ptr<i64>, %c: !tile.view<bf16, 3>) {
  return
}

// -----

// The strategy record round-trips.
// CHECK: module attributes {tile.strategy = #tile.strategy<num_warps = 8, stages = 1, smem_epilogue = false, copy_bounds = chunk, lowering_options = "skip-unit-rescale=true">}
module attributes {tile.strategy = #tile.strategy<num_warps = 8, stages = 1, smem_epilogue = false, copy_bounds = chunk, lowering_options = "skip-unit-rescale=true">} {
}

// -----

// The copies' schedule (tile-insert-waits) and the shared-memory regions
// (tile-allocate-shared) round-trip; a wait may leave any number of groups
// in flight.
// CHECK-LABEL: func.func @schedule
// CHECK:         tile.async_commit
// CHECK-NEXT:    tile.async_wait pending = 3
// CHECK-NEXT:    tile.barrier
// CHECK-NEXT:    return {tile.smem = #tile.smem<offset = 128, bytes = 256>}
func.func @schedule() attributes {tile.shared_bytes = 384 : i64} {
  tile.async_commit
  tile.async_wait pending = 3
  tile.barrier
  return {tile.smem = #tile.smem<offset = 128, bytes = 256>}
}
