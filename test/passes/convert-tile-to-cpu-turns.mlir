// RUN: tile-opt %s --convert-tile-to-cpu | FileCheck %s

// tile.wait_turn and tile.pass_turn on the CPU runner, whose programs run
// one after another in the GPU's start order (the grid wrapper counts
// program_id(0) down): a wait whose turn has not come would never end on
// the GPU, so it records a fault (kind 2^40 + the counter's argument + 1,
// and the turn) that the runner reports; a pass is a read-modify-write.
// CHECK-LABEL: func.func @add_in_turn(
// CHECK-SAME:    %[[CNT:[^:]+]]: memref<?xi32>
// CHECK:         %[[FAULT:.+]] = memref.get_global @__tilec_fault
// CHECK:         %[[LAST:.+]] = arith.subi %{{.+}}, %{{.+}} : i32
// CHECK:         %[[TURN:.+]] = arith.subi %[[LAST]], %{{.+}} : i32
// CHECK:         scf.if %{{.+}} -> (i1) {
// CHECK:           %[[NOW:.+]] = memref.load %[[CNT]][%{{.+}}] : memref<?xi32>
// CHECK:           %[[LATE:.+]] = arith.cmpi slt, %[[NOW]], %[[TURN]] : i32
// CHECK:           scf.if %[[LATE]] {
// CHECK:             %[[KIND:.+]] = arith.constant 1099511627777 : i64
// CHECK:             memref.store %[[KIND]], %[[FAULT]]
// CHECK:             %[[T64:.+]] = arith.extsi %[[TURN]] : i32 to i64
// CHECK:             memref.store %[[T64]], %[[FAULT]]
// CHECK:         arith.addf
// CHECK:         scf.if %{{.+}} -> (i1) {
// CHECK:           %[[OLD:.+]] = memref.load %[[CNT]][%[[AT:.+]]] : memref<?xi32>
// CHECK:           %[[NEXT:.+]] = arith.addi %[[OLD]], %{{.+}} : i32
// CHECK:           memref.store %[[NEXT]], %[[CNT]][%[[AT]]] : memref<?xi32>
// CHECK-LABEL: func.func @__tilec_grid_add_in_turn(
// CHECK-SAME:    %{{[^:]+}}: memref<?xi32>, %{{[^:]+}}: memref<?xf32>, %{{[^:]+}}: i32, %[[GX:[^:]+]]: i32
// CHECK:         %[[NX:.+]] = arith.index_cast %[[GX]] : i32 to index
// CHECK:         scf.for %[[I:.+]] = %{{.+}} to %[[NX]]
// CHECK:           %[[TOP:.+]] = arith.subi %[[NX]], %{{.+}} : index
// CHECK:           %[[ID:.+]] = arith.subi %[[TOP]], %[[I]] : index
// CHECK:           arith.index_cast %[[ID]] : index to i32
func.func @add_in_turn(%cnt: !tile.ptr<i32>, %acc: !tile.ptr<f32>, %n: i32) attributes {tile.kernel, tile.grid = ["arg2", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %pid = tile.program_id 0 : i32
  %seen = tile.load_scalar %cnt volatile : !tile.ptr<i32> -> i32
  %last = arith.subi %n, %c1 : i32
  %turn = arith.subi %last, %pid : i32
  %av = tile.view %acc sizes(%c64) strides(%one) : !tile.ptr<f32> -> !tile.view<f32, 1>
  %mine = arith.constant dense<1.0> : tensor<64xf32>
  tile.wait_turn %cnt, %turn, %seen : !tile.ptr<i32>
  tile.atomic_add %mine, %av[%c0] : tensor<64xf32>, !tile.view<f32, 1>
  tile.pass_turn %cnt : !tile.ptr<i32>
  return
}
