// RUN: tile-opt %s --convert-tile-to-cpu --split-input-file --verify-diagnostics | FileCheck %s

// Pointers become host buffers; a load reads memory only inside the in-bounds
// branch and yields the padding otherwise; a store writes only in bounds; the
// grid becomes a wrapper looping over program ids (z outer, x inner, x
// counting down from gx - 1: the GPU's start order, tile.wait_turn's). An
// element inside its view but outside the buffer (memref.dim) is not
// accessed: @__tilec_fault records (argument + 1, element) for the runner.
// CHECK:         memref.global "public" @__tilec_fault : memref<2xi64> = dense<0>
// CHECK-LABEL: func.func @copy(
// CHECK-SAME:    %[[SRC:.+]]: memref<?xf32>, %[[DST:.+]]: memref<?xf32>, %{{.+}}: i32, %{{.+}}: i32, %{{.+}}: i32, %{{.+}}: i32, %{{.+}}: i32, %{{.+}}: i32, %{{.+}}: i32)
// CHECK-DAG:     %[[SRC_LEN:.+]] = memref.dim %[[SRC]], %c0
// CHECK-DAG:     %[[FAULT:.+]] = memref.get_global @__tilec_fault
// CHECK:         linalg.generic
// CHECK:           %[[IN_VIEW:.+]] = arith.andi
// CHECK:           %[[IN_BUF:.+]] = arith.cmpi slt, %{{.+}}, %[[SRC_LEN]]
// CHECK:           %[[OK:.+]] = arith.andi %{{.+}}, %[[IN_BUF]] : i1
// CHECK:           %[[IN:.+]] = arith.andi %[[IN_VIEW]], %[[OK]] : i1
// CHECK:           scf.if %{{.+}} {
// CHECK-NEXT:        %[[ARG1:.+]] = arith.constant 1 : i64
// CHECK:             memref.store %[[ARG1]], %[[FAULT]][
// CHECK:           scf.if %[[IN]] -> (f32) {
// CHECK:             memref.load %[[SRC]]
// CHECK:           } else {
// CHECK:             scf.yield %cst
// CHECK:         scf.for
// CHECK:             scf.if
// CHECK:               tensor.extract
// CHECK:               memref.store {{.*}}, %[[DST]]
// CHECK-LABEL: func.func @__tilec_grid_copy(
// CHECK-SAME:    memref<?xf32>, %{{.+}}: memref<?xf32>, %[[N:.+]]: i32, %[[GX:.+]]: i32, %[[GY:.+]]: i32, %[[GZ:.+]]: i32)
// CHECK:         %[[NX:.+]] = arith.index_cast %[[GX]] : i32 to index
// CHECK:         scf.for
// CHECK:           scf.for
// CHECK:             scf.for %[[X:.+]] = %{{.+}} to %[[NX]]
// CHECK:               %[[TOP:.+]] = arith.subi %[[NX]], %{{.+}} : index
// CHECK:               %[[PX:.+]] = arith.subi %[[TOP]], %[[X]] : index
// CHECK:               %[[PX32:.+]] = arith.index_cast %[[PX]] : index to i32
// CHECK:               func.call @copy(%{{.+}}, %{{.+}}, %{{.+}}, %[[PX32]],
func.func @copy(%src: !tile.ptr<f32>, %dst: !tile.ptr<f32>, %n: i32) attributes {tile.kernel} {
  %c1 = arith.constant 1 : i64
  %c0 = arith.constant 0 : i32
  %pid = tile.program_id 0 : i32
  %c8 = arith.constant 8 : i32
  %off = arith.muli %pid, %c8 : i32
  %sv = tile.view %src sizes(%n) strides(%c1) : !tile.ptr<f32> -> !tile.view<f32, 1>
  %dv = tile.view %dst sizes(%n) strides(%c1) : !tile.ptr<f32> -> !tile.view<f32, 1>
  %t = tile.load %sv[%off] padding = neg_inf : !tile.view<f32, 1> -> tensor<8xf32>
  tile.store %t, %dv[%off] : tensor<8xf32>, !tile.view<f32, 1>
  return
}

// -----

// tile.dot accumulates in f32: both f16 operands are extended before the multiply.
// CHECK-LABEL: func.func @dot(
// CHECK:         linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]
// CHECK:           arith.extf %{{.+}} : f16 to f32
// CHECK:           arith.extf %{{.+}} : f16 to f32
// CHECK:           arith.mulf {{.*}} : f32
// CHECK:           arith.addf {{.*}} : f32
func.func @dot(%a: tensor<4x8xf16>, %b: tensor<2x8xf16>, %c: tensor<4x2xf32>) -> tensor<4x2xf32> attributes {tile.kernel} {
  %r = tile.dot %a, %b, %c transpose_b : tensor<4x8xf16>, tensor<2x8xf16> -> tensor<4x2xf32>
  return %r : tensor<4x2xf32>
}

// -----

// Argument attributes stay on their parameters when the grid arguments are
// appended (the signature keeps one attribute dictionary per argument).
// CHECK-LABEL: func.func @positive_scale(
// CHECK-SAME:    %{{.+}}: memref<?xf32>, %{{.+}}: f32 {tile.positive}, %{{.+}}: i32, %{{.+}}: i32, %{{.+}}: i32, %{{.+}}: i32, %{{.+}}: i32, %{{.+}}: i32)
func.func @positive_scale(%dst: !tile.ptr<f32>, %s: f32 {tile.positive}) attributes {tile.kernel} {
  %c1 = arith.constant 1 : i64
  %c0 = arith.constant 0 : i32
  %n = arith.constant 8 : i32
  %dv = tile.view %dst sizes(%n) strides(%c1) : !tile.ptr<f32> -> !tile.view<f32, 1>
  %t = tile.splat %s : f32 -> tensor<8xf32>
  tile.store %t, %dv[%c0] : tensor<8xf32>, !tile.view<f32, 1>
  return
}

// -----

// A scalar load reads its buffer at the pointer's offset only when that is
// inside the buffer; outside, it records the fault (argument 1 + 1) and
// yields 0.
// CHECK-LABEL: func.func @load_scalar(
// CHECK-SAME:    %{{.+}}: memref<?xf32>, %[[CU:.+]]: memref<?xi32>, %[[B:.+]]: i32,
// CHECK:         %[[LEN:.+]] = memref.dim %[[CU]], %c0
// CHECK:         %[[AT:.+]] = arith.addi %c0{{.*}}, %{{.+}} : index
// CHECK:         %[[BELOW:.+]] = arith.cmpi slt, %[[AT]], %[[LEN]] : index
// CHECK:         scf.if
// CHECK:           arith.constant 2 : i64
// CHECK:         %[[START:.+]] = scf.if %{{.+}} -> (i32) {
// CHECK-NEXT:      %[[V:.+]] = memref.load %[[CU]][%[[AT]]] : memref<?xi32>
// CHECK-NEXT:      scf.yield %[[V]] : i32
// CHECK-NEXT:    } else {
// CHECK-NEXT:      %[[ZERO:.+]] = arith.constant 0 : i32
// CHECK-NEXT:      scf.yield %[[ZERO]] : i32
// CHECK:         arith.index_cast %[[START]] : i32 to index
func.func @load_scalar(%dst: !tile.ptr<f32>, %cu: !tile.ptr<i32>, %b: i32) attributes {tile.kernel} {
  %p = tile.addptr %cu, %b : !tile.ptr<i32>, i32
  %start = tile.load_scalar %p : !tile.ptr<i32> -> i32
  %c1 = arith.constant 1 : i64
  %c0 = arith.constant 0 : i32
  %dv = tile.view %dst sizes(%start) strides(%c1) : !tile.ptr<f32> -> !tile.view<f32, 1>
  %t = arith.constant dense<1.0> : tensor<8xf32>
  tile.store %t, %dv[%c0] : tensor<8xf32>, !tile.view<f32, 1>
  return
}

// -----

// Pointers must come from kernel parameters: a diagnostic, not a crash.
func.func @not_a_kernel_pointer(%p: !tile.ptr<f32>) -> !tile.view<f32, 1> attributes {tile.kernel} {
  %c1 = arith.constant 1 : i64
  %n = arith.constant 4 : i32
  // expected-error @below {{CPU lowering cannot carry pointers or views through anything but tile.addptr, tile.view, tile.load, tile.load_scalar, tile.arrive, tile.wait_turn, tile.pass_turn and tile.store}}
  %v = tile.view %p sizes(%n) strides(%c1) : !tile.ptr<f32> -> !tile.view<f32, 1>
  return %v : !tile.view<f32, 1>
}
