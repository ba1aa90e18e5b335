// RUN: tile-opt %s --convert-tile-to-cpu | FileCheck %s

// What orders kernels and threads on the GPU is nothing on the CPU runner
// (passes/ConvertTileToCPU.cpp), where kernels, and the programs of one, run
// one after another, each in one thread: tile.wait_prior_kernels and
// tile.launch_dependents (programmatic dependent launch), tile.barrier.

// The CPU runner runs kernels one after another: tile.wait_prior_kernels and
// tile.launch_dependents are nothing there.
// CHECK-LABEL: func.func @grid_dependency(
// CHECK-NOT:     tile.wait_prior_kernels
// CHECK-NOT:     tile.launch_dependents
// CHECK:         scf.for
// CHECK:         memref.store
// CHECK-NOT:     tile.wait_prior_kernels
// CHECK-NOT:     tile.launch_dependents
// CHECK-LABEL: func.func @__tilec_grid_grid_dependency(
func.func @grid_dependency(%dst: !tile.ptr<f32>) attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c8 = arith.constant 8 : i32
  %one = arith.constant 1 : i64
  tile.wait_prior_kernels
  tile.launch_dependents
  %dv = tile.view %dst sizes(%c8) strides(%one) : !tile.ptr<f32> -> !tile.view<f32, 1>
  %t = arith.constant dense<1.0> : tensor<8xf32>
  tile.store %t, %dv[%c0] : tensor<8xf32>, !tile.view<f32, 1>
  return
}

// tl.barrier (tile.barrier in a kernel, before tile-insert-waits) is nothing
// on the CPU runner: one thread runs each program.
// CHECK-LABEL: func.func @user_barrier(
// CHECK-NOT:     tile.barrier
// CHECK-LABEL: func.func @__tilec_grid_user_barrier(
func.func @user_barrier(%dst: !tile.ptr<f32>) attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c8 = arith.constant 8 : i32
  %one = arith.constant 1 : i64
  %dv = tile.view %dst sizes(%c8) strides(%one) : !tile.ptr<f32> -> !tile.view<f32, 1>
  %t = arith.constant dense<1.0> : tensor<8xf32>
  tile.store %t, %dv[%c0] : tensor<8xf32>, !tile.view<f32, 1>
  tile.barrier
  %u = tile.load %dv[%c0] padding = zero : !tile.view<f32, 1> -> tensor<8xf32>
  tile.store %u, %dv[%c0] : tensor<8xf32>, !tile.view<f32, 1>
  return
}
