// Malformed input is a diagnostic and exit code 1, never a crash: `not`
// fails on a crash, and a crash would print a stack dump.
// RUN: not tile-opt %s -split-input-file 2>&1 | FileCheck %s
// CHECK-NOT: Stack dump
// CHECK-NOT: PLEASE submit a bug report

// A missing closing parenthesis in a signature.
// CHECK: error: expected ')'
func.func @unclosed_signature(%x: i32 {
  return
}

// -----

// An op the dialect does not have.
// CHECK: error: custom op 'tile.frobnicate' is unknown
func.func @unknown_op() {
  %0 = tile.frobnicate : i32
  return
}

// -----

// A pointer type without its pointee.
// CHECK: error: expected non-function type
func.func @ptr_without_pointee(%p: !tile.ptr<>) {
  return
}

// -----

// A view type missing its rank.
// CHECK: error: expected ','
func.func @view_without_rank(%v: !tile.view<f16>) {
  return
}

// -----

// A layout attribute cut short.
// CHECK: error: expected ','
func.func @truncated_layout(%x: tensor<32xf32, #tile.linear<reg = []>>) {
  return
}

// -----

// An unknown attribute of the dialect.
// CHECK: error: {{.*}}unknown attribute `swirl` in dialect `tile`
func.func @unknown_attribute(%x: tensor<32xf32, #tile.swirl<3>>) {
  return
}

// CHECK-NOT: Stack dump
