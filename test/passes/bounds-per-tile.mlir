// RUN: tile-opt %s -split-input-file -tile-partition-warps -convert-tile-to-nvvm | FileCheck %s
// RUN: tile-opt %s -split-input-file -tile-partition-warps -convert-tile-to-nvvm="bounds-per-tile=false" | FileCheck %s --check-prefix=EVERY

// Bounds are tested once per tile: a tile wholly inside its view loads
// without per-element guards. Q is a 64x64 tile at (0, 0) of a 64x64 view:
// inside at compile time, so its register loads carry no guard at all. K
// starts at row j*64 of an n-row view: one uniform test (0 <= j*64 <= n - 64)
// picks between unguarded 16-byte copies (the full 16 bytes, no selects)
// and the checked copies (zero-fill and clamped addresses, per chunk).
// CHECK-LABEL: llvm.func @edge
// CHECK-NOT:     scf.if
// CHECK:         llvm.load {{.*}} -> vector<2xf16>
// CHECK-NOT:     scf.if
// CHECK:         %[[GE:.*]] = arith.cmpi sge, %[[ROW:.*]], %{{.*}} : i32
// CHECK:         %[[LE:.*]] = arith.cmpi sle, %[[ROW]], %{{.*}} : i32
// CHECK:         %[[IN:.*]] = arith.andi %[[GE]], %[[LE]] : i1
// CHECK:         scf.if %[[IN]] {
// CHECK-NOT:       arith.select
// CHECK-COUNT-4:   nvvm.cp.async.shared.global {{.*}}, 16, cache = cg, %c16_i32{{[_0-9]*}} :
// CHECK-NEXT:    } else {
// CHECK-COUNT-4:   nvvm.cp.async.shared.global {{.*}}, 16, cache = cg, %{{[0-9]+}} :
// CHECK-NEXT:    }
// CHECK-NEXT:    nvvm.cp.async.commit.group
// With the option off, every element and chunk is checked: guarded loads,
// and copies whose size comes from a select.
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
// CHECK-LABEL: llvm.func @runtime_offset
// CHECK:         %[[IN:.*]] = arith.andi %{{.*}}, %{{.*}} : i1
// CHECK:         %{{.*}}:16 = scf.if %[[IN]] -> (vector<2xf16>, vector<2xf16>
// CHECK-NOT:       scf.if
// CHECK:           llvm.load {{.*}} -> vector<2xf16>
// CHECK:         } else {
// CHECK:           scf.if {{.*}} -> (vector<2xf16>)
// CHECK:             llvm.load {{.*}} -> vector<2xf16>
// CHECK:           } else {
// CHECK:             llvm.insertelement
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
