// RUN: tile-opt %s -split-input-file -tile-pipeline -tile-partition-warps -tile-allocate-shared -tile-insert-waits -convert-tile-to-nvvm | FileCheck %s

// Hazards found in review (2026-11-29), pinned by the code around them.

// Two stores through shared memory in a row: the second one's writes must
// wait, behind a barrier, until every warp has read its chunks of the first.
// CHECK-LABEL: llvm.func @two
// CHECK-COUNT-8: -> vector<4xi32>
// CHECK-NOT:     llvm.store {{.*}} !llvm.ptr<3>
// CHECK:         nvvm.barrier0
// CHECK:         llvm.store {{.*}} !llvm.ptr<3>
func.func @two(%qp: !tile.ptr<f16>, %kp: !tile.ptr<f16>, %op: !tile.ptr<f32>, %op2: !tile.ptr<f32>, %n: i32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %qv = tile.view %qp sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %kv = tile.view %kp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %ov2 = tile.view %op2 sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %q = tile.load %qv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %a = scf.for %j = %c0 to %n step %c1 iter_args(%o = %zero) -> (tensor<64x64xf32>) : i32 {
    %row = arith.muli %j, %c64 : i32
    %k = tile.load %kv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %k, %o transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    scf.yield %s : tensor<64x64xf32>
  }
  tile.store %a, %ov[%c0, %c0] : tensor<64x64xf32>, !tile.view<f32, 2>
  %neg = arith.negf %a : tensor<64x64xf32>
  tile.store %neg, %ov2[%c0, %c0] : tensor<64x64xf32>, !tile.view<f32, 2>
  return
}

// -----

// A store through shared memory whose chunks do not fill the last pass (64
// rows x one chunk over 128 threads): the idle threads read a valid address
// (the tile's first chunk), not one past the scratch tile.
// CHECK-LABEL: llvm.func @narrow
// CHECK:         %[[SAFE:.+]] = llvm.select %{{.+}}, %{{.+}}, %{{.+}} : i1, !llvm.ptr<3>
// CHECK:         llvm.load %[[SAFE]] {alignment = 16 : i64} : !llvm.ptr<3> -> vector<4xi32>
func.func @narrow(%qp: !tile.ptr<f16>, %vp: !tile.ptr<f16>, %op: !tile.ptr<f16>)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c8 = arith.constant 8 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %s8 = arith.constant 8 : i64
  %qv = tile.view %qp sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %vv = tile.view %vp sizes(%c64, %c8) strides(%s8, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%c64, %c8) strides(%s8, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %q = tile.load %qv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %v = tile.load %vv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x8xf16>
  %z = arith.constant dense<0.0> : tensor<64x8xf32>
  %o = tile.dot %q, %v, %z : tensor<64x64xf16>, tensor<64x8xf16> -> tensor<64x8xf32>
  %h = arith.truncf %o : tensor<64x8xf32> to tensor<64x8xf16>
  tile.store %h, %ov[%c0, %c0] : tensor<64x8xf16>, !tile.view<f16, 2>
  return
}

// -----

// A loop whose ring regions may hold a copy still in flight when the next
// loop runs zero times: after that loop, group numbers shift between paths,
// so the scratch of the store that reuses the space waits for everything.
// (Before the fix this wait was wait.group 1, leaving loop A's last
// prefetch in flight into the scratch when loop B ran zero times.)
// CHECK-LABEL: llvm.func @zt
// CHECK-NOT:     nvvm.cp.async.wait.group {{[1-9]}}
// CHECK:         llvm.store {{.*}} !llvm.ptr<3>
func.func @zt(%qp: !tile.ptr<f16>, %kp: !tile.ptr<f16>, %k2p: !tile.ptr<f16>, %vp: !tile.ptr<f16>,
              %op: !tile.ptr<f32>, %o2p: !tile.ptr<f32>, %n: i32, %m: i32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c32 = arith.constant 32 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %s32 = arith.constant 32 : i64
  %qv = tile.view %qp sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %kv = tile.view %kp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %k2v = tile.view %k2p sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %vv = tile.view %vp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%c64, %c32) strides(%s32, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %o2v = tile.view %o2p sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %q = tile.load %qv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %zs = arith.constant dense<0.0> : tensor<64x32xf32>
  %zo = arith.constant dense<0.0> : tensor<64x64xf32>
  // Loop A: a ring over 32-row K blocks.
  %a = scf.for %j = %c0 to %n step %c1 iter_args(%s = %zs) -> (tensor<64x32xf32>) : i32 {
    %row = arith.muli %j, %c32 : i32
    %k = tile.load %kv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<32x64xf16>
    %s2 = tile.dot %q, %k, %s transpose_b : tensor<64x64xf16>, tensor<32x64xf16> -> tensor<64x32xf32>
    scf.yield %s2 : tensor<64x32xf32>
  }
  // Loop B: pointer-increment style (row carried), so nothing is rotated:
  // two cp.async fills in the body, no fills before it.
  %b:2 = scf.for %j = %c0 to %m step %c1 iter_args(%o = %zo, %row = %c0) -> (tensor<64x64xf32>, i32) : i32 {
    %k = tile.load %k2v[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %k, %zo transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    %p = arith.truncf %s : tensor<64x64xf32> to tensor<64x64xf16>
    %v = tile.load %vv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %o2 = tile.dot %p, %v, %o : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    %next = arith.addi %row, %c64 : i32
    scf.yield %o2, %next : tensor<64x64xf32>, i32
  }
  tile.store %a, %ov[%c0, %c0] : tensor<64x32xf32>, !tile.view<f32, 2>
  tile.store %b#0, %o2v[%c0, %c0] : tensor<64x64xf32>, !tile.view<f32, 2>
  return
}

// -----

// Split loops where only K's load chains (V's address differs in form): the
// second loop takes none of the first's prefetches and reloads both (the
// lowering continues rings all together or not at all) instead of failing.
// CHECK-LABEL: llvm.func @pc
// CHECK:         scf.for
// CHECK:         }
// CHECK-COUNT-2: nvvm.cp.async.commit.group
// CHECK:         scf.for
func.func @pc(%qp: !tile.ptr<f16>, %kp: !tile.ptr<f16>, %vp: !tile.ptr<f16>, %op: !tile.ptr<f32>, %mid: i32, %n: i32)
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
  %a = scf.for %j = %c0 to %mid step %c1 iter_args(%o = %zero) -> (tensor<64x64xf32>) : i32 {
    %row = arith.muli %j, %c64 : i32
    %k = tile.load %kv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %k, %zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    %p = arith.truncf %s : tensor<64x64xf32> to tensor<64x64xf16>
    %v = tile.load %vv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %o2 = tile.dot %p, %v, %o : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    scf.yield %o2 : tensor<64x64xf32>
  } {tile.blocks = #tile<blocks full>}
  %b = scf.for %j = %mid to %n step %c1 iter_args(%o = %a) -> (tensor<64x64xf32>) : i32 {
    %row = arith.muli %j, %c64 : i32
    %k = tile.load %kv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %k, %zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    %p = arith.truncf %s : tensor<64x64xf32> to tensor<64x64xf16>
    %row2 = arith.addi %row, %c0 : i32
    %v = tile.load %vv[%row2, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %o2 = tile.dot %p, %v, %o : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    scf.yield %o2 : tensor<64x64xf32>
  } {tile.blocks = #tile<blocks partial>}
  tile.store %b, %ov[%c0, %c0] : tensor<64x64xf32>, !tile.view<f32, 2>
  return
}

// -----

// The alignment the manifest asks for a pointer used at a constant offset: K's
// 16-byte copies start 8 bytes past k, so k itself must not be 16-byte
// aligned and no such requirement is stated; its 4-byte register loads
// still ask for 4 (8 is a multiple of 4).
// CHECK-LABEL: llvm.func @offset_base
// CHECK-SAME:    (%{{.*}}: !llvm.ptr<1> {tile.align = 4 : i64, tile.elem = f16}, %{{.*}}: !llvm.ptr<1> {tile.align = 16 : i64, tile.elem = f32}, %{{.*}}: i32)
func.func @offset_base(%kp: !tile.ptr<f16>, %op: !tile.ptr<f32>, %n: i32)
    attributes {tile.kernel, tile.arg_names = ["k", "o", "n"], tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c16 = arith.constant 16 : i32
  %c1 = arith.constant 1 : i64
  %s16 = arith.constant 16 : i64
  %c4 = arith.constant 4 : i64
  %kb = tile.addptr %kp, %c4 : !tile.ptr<f16>, i64
  %kv = tile.view %kb sizes(%n, %c16) strides(%s16, %c1) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %q = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x16xf16>
  %k = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<16x16xf16>
  %zero = arith.constant dense<0.0> : tensor<64x16xf32>
  %s = tile.dot %q, %k, %zero transpose_b : tensor<64x16xf16>, tensor<16x16xf16> -> tensor<64x16xf32>
  %ov = tile.view %op sizes(%n, %c16) strides(%s16, %c1) : !tile.ptr<f32> -> !tile.view<f32, 2>
  tile.store %s, %ov[%c0, %c0] : tensor<64x16xf32>, !tile.view<f32, 2>
  return
}
