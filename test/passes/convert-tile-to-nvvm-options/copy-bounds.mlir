// RUN: tile-opt %s -split-input-file -tile-partition-warps -tile-allocate-shared -tile-insert-waits -convert-tile-to-nvvm | FileCheck %s --check-prefixes=ROW,REG
// RUN: tile-opt %s -split-input-file -tile-partition-warps -tile-allocate-shared -tile-insert-waits -convert-tile-to-nvvm="copy-bounds=tile" | FileCheck %s --check-prefixes=TILE,REG
// RUN: tile-opt %s -split-input-file -tile-partition-warps -tile-allocate-shared -tile-insert-waits -convert-tile-to-nvvm="copy-bounds=chunk" | FileCheck %s --check-prefix=EVERY
// RUN: not tile-opt %s -split-input-file -tile-partition-warps -tile-allocate-shared -tile-insert-waits -convert-tile-to-nvvm="copy-bounds=never" 2>&1 | FileCheck %s --check-prefix=BAD

// BAD: copy-bounds must be chunk, tile or row, got 'never'

// Q is a 64x64 tile at (0, 0) of a 64x64 view: inside at compile time, so
// its register loads carry no guard at all (row and tile). K starts at row
// j*64 of an n-row view.
//
// row (the default): no branch; each 16-byte chunk copies 16 bytes or none
// by its row (one unsigned compare against n), and a thread's pointer for
// the next pass is the last one plus a step, through an opaque mov.
// ROW-LABEL: llvm.func @edge
// ROW-NOT:     scf.if
// ROW:         llvm.load {{.*}} -> vector<2xf16>
// ROW-NOT:     scf.if
// ROW:         %[[OK:.*]] = arith.cmpi ult, %{{.*}}, %arg3 : i32
// ROW:         %[[SIZE:.*]] = arith.select %[[OK]], %c16_i32{{[_0-9]*}}, %c0_i32{{[_0-9]*}} : i32
// ROW:         nvvm.cp.async.shared.global {{.*}}, 16, cache = cg, %[[SIZE]] :
// ROW:         arith.cmpi ult, %{{.*}}, %arg3 : i32
// ROW:         "mov.b64 $0, $1;"
// ROW:         nvvm.cp.async.shared.global
// ROW:         arith.cmpi ult, %{{.*}}, %arg3 : i32
// ROW:         "mov.b64 $0, $1;"
// ROW:         nvvm.cp.async.shared.global
// ROW:         arith.cmpi ult, %{{.*}}, %arg3 : i32
// ROW:         "mov.b64 $0, $1;"
// ROW:         nvvm.cp.async.shared.global
// ROW-NOT:     scf.if
// ROW:         nvvm.cp.async.commit.group
//
// tile: one uniform test (0 <= j*64 <= n - 64) picks between unguarded
// copies (the full 16 bytes, no selects) and the checked copies (zero-fill
// and clamped addresses, per chunk).
// TILE-LABEL: llvm.func @edge
// TILE-NOT:     scf.if
// TILE:         llvm.load {{.*}} -> vector<2xf16>
// TILE-NOT:     scf.if
// TILE:         %[[GE:.*]] = arith.cmpi sge, %[[R:.*]], %{{.*}} : i32
// TILE:         %[[LE:.*]] = arith.cmpi sle, %[[R]], %{{.*}} : i32
// TILE:         %[[IN:.*]] = arith.andi %[[GE]], %[[LE]] : i1
// TILE:         scf.if %[[IN]] {
// TILE-NOT:       arith.select
// TILE-COUNT-4:   nvvm.cp.async.shared.global {{.*}}, 16, cache = cg, %c16_i32{{[_0-9]*}} :
// TILE-NEXT:    } else {
// TILE-COUNT-4:   nvvm.cp.async.shared.global {{.*}}, 16, cache = cg, %{{[0-9]+}} :
// TILE-NEXT:    }
// TILE-NEXT:    nvvm.cp.async.commit.group
//
// chunk: every element and chunk is checked: guarded loads, and copies
// whose size comes from a select.
// EVERY-LABEL: llvm.func @edge
// EVERY:         scf.if {{.*}} -> (vector<2xf16>)
// EVERY-NOT:     arith.cmpi sge
// EVERY-NOT:     nvvm.cp.async.shared.global {{.*}}, %c16_i32{{[_0-9]*}} :
// EVERY:         nvvm.cp.async.commit.group
func.func @edge(%qp: !tile.ptr<f16>, %kp: !tile.ptr<f16>, %op: !tile.ptr<f32>, %n: i32, %j: i32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %qv = tile.view %qp sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %kv = tile.view %kp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %q = tile.load %qv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %row = arith.muli %j, %c64 : i32
  %k = tile.load %kv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %s = tile.dot %q, %k, %zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
  tile.store %s, %ov[%c0, %c0] : tensor<64x64xf32>, !tile.view<f32, 2>
  return
}

// -----

// A register tile at a run-time offset: the test picks, at run time, the
// unguarded loads or the guarded ones; both yield every loaded pair. Padding
// other than zero stays on the checked side only.
// REG-LABEL: llvm.func @runtime_offset
// REG:         %[[IN:.*]] = arith.andi %{{.*}}, %{{.*}} : i1
// REG:         %{{.*}}:16 = scf.if %[[IN]] -> (vector<2xf16>, vector<2xf16>
// REG-NOT:       scf.if
// REG:           llvm.load {{.*}} -> vector<2xf16>
// REG:         } else {
// REG:           scf.if {{.*}} -> (vector<2xf16>)
// REG:             llvm.load {{.*}} -> vector<2xf16>
// REG:           } else {
// REG:             llvm.insertelement
func.func @runtime_offset(%qp: !tile.ptr<f16>, %kp: !tile.ptr<f16>, %op: !tile.ptr<f32>, %n: i32, %i: i32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %qv = tile.view %qp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %kv = tile.view %kp sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %q = tile.load %qv[%i, %c0] padding = neg_inf : !tile.view<f16, 2> -> tensor<64x64xf16>
  %k = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %s = tile.dot %q, %k, %zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
  tile.store %s, %ov[%c0, %c0] : tensor<64x64xf32>, !tile.view<f32, 2>
  return
}

// -----

// Inside a loop each mode is what its name says. K's block j of an n-row
// view: 'row' sizes each chunk by its row (no branch), 'tile' branches once
// per tile, 'chunk' checks every chunk (sizes from selects, no tile test).
// ROW-LABEL: llvm.func @in_loop
// ROW:         scf.for
// ROW-NOT:       scf.if
// ROW:           arith.cmpi ult, %{{.*}}, %arg3 : i32
// ROW-NOT:       scf.if
// ROW:           nvvm.cp.async.commit.group
// TILE-LABEL: llvm.func @in_loop
// TILE:         scf.for
// TILE:           arith.cmpi sge
// TILE:           scf.if
// TILE-COUNT-4:     nvvm.cp.async.shared.global {{.*}}, 16, cache = cg, %c16_i32{{[_0-9]*}} :
// EVERY-LABEL: llvm.func @in_loop
// EVERY:         scf.for
// EVERY-NOT:       arith.cmpi sge
// EVERY-NOT:       scf.if
// EVERY:           arith.select
// EVERY:           nvvm.cp.async.shared.global {{.*}}, 16, cache = cg, %{{[0-9]+}} :
// EVERY-NOT:       scf.if
// EVERY:           nvvm.cp.async.commit.group
func.func @in_loop(%qp: !tile.ptr<f16>, %kp: !tile.ptr<f16>, %op: !tile.ptr<f32>, %n: i32, %m: i32)
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
  %acc = scf.for %j = %c0 to %m step %c1 iter_args(%o = %zero) -> (tensor<64x64xf32>) : i32 {
    %row = arith.muli %j, %c64 : i32
    %k = tile.load %kv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %k, %o transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    scf.yield %s : tensor<64x64xf32>
  }
  tile.store %acc, %ov[%c0, %c0] : tensor<64x64xf32>, !tile.view<f32, 2>
  return
}
