// RUN: tile-opt %s --convert-tile-to-cpu --split-input-file | FileCheck %s

// tile.arrive on the CPU runner, whose programs run one after another: a
// read-modify-write of the counter (inside the buffer check: a counter
// outside its buffer is a fault and no program is last); the arrival that
// brings the count to `expected` yields true and stores 0 instead.
// CHECK-LABEL: func.func @arrive(
// CHECK-SAME:    %[[CNT:[^:]+]]: memref<?xi32>, %{{[^:]+}}: i32, %[[N:[^:]+]]: i32,
// CHECK:         %[[LAST:.+]] = scf.if %{{.+}} -> (i1) {
// CHECK:           %[[OLD:.+]] = memref.load %[[CNT]][%[[AT:.+]]] : memref<?xi32>
// CHECK:           %[[COUNT:.+]] = arith.addi %[[OLD]], %{{.+}} : i32
// CHECK:           %[[IS_LAST:.+]] = arith.cmpi eq, %[[COUNT]], %[[N]] : i32
// CHECK:           %[[NEXT:.+]] = arith.select %[[IS_LAST]], %{{.+}}, %[[COUNT]] : i32
// CHECK:           memref.store %[[NEXT]], %[[CNT]][%[[AT]]] : memref<?xi32>
// CHECK:           scf.yield %[[IS_LAST]] : i1
// CHECK:         } else {
// CHECK:           %[[FALSE:.+]] = arith.constant false
// CHECK:           scf.yield %[[FALSE]] : i1
// CHECK:         }
// CHECK:         scf.if %[[LAST]] {
func.func @arrive(%cnt: !tile.ptr<i32>, %g: i32, %n: i32) attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c = tile.addptr %cnt, %g : !tile.ptr<i32>, i32
  %last = tile.arrive %c, %n : !tile.ptr<i32>
  scf.if %last {
    %v = arith.constant 7 : i32
    %z = arith.constant 0 : i32
    %p = tile.addptr %cnt, %z : !tile.ptr<i32>, i32
    %x = tile.load_scalar %p : !tile.ptr<i32> -> i32
  }
  return
}
