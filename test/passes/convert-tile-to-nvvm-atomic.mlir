// tile.atomic_add per target (passes/ConvertTileToNVVM/LoadStore.cpp,
// TargetInfo::atomicAddF32). A 64x64 f32 mma accumulator over 4 warps gives
// each thread 32 elements in pairs of adjacent columns.
// sm_80 has scalar f32 reds only: 32 per thread. sm_90 adds each pair with
// one red.global.add.v2.f32: 16. A tile statically inside the view (constant
// sizes, offsets 0) takes unpredicated reds (ptxas turns each predicated red
// into a branch around it); a runtime-sized view keeps one predicate per red.
// RUN: tile-opt %s -split-input-file -tile-partition-warps -tile-allocate-shared=arch=sm_80 -tile-insert-waits -convert-tile-to-nvvm=arch=sm_80 | FileCheck %s --check-prefix=SM80
// RUN: tile-opt %s -split-input-file -tile-partition-warps -tile-allocate-shared=arch=sm_90a -tile-insert-waits -convert-tile-to-nvvm=arch=sm_90a | FileCheck %s --check-prefix=SM90

// SM80-LABEL: llvm.func @inside
// SM80-COUNT-32: "red.global.add.f32 [$0], $1;", "l,f"
// SM80-NOT:      red.global.add
// SM90-LABEL: llvm.func @inside
// SM90-COUNT-16: "red.global.add.v2.f32 [$0], {$1, $2};", "l,f,f"
// SM90-NOT:      red.global.add
func.func @inside(%kp: !tile.ptr<f16>, %op: !tile.ptr<f32>) attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %kv = tile.view %kp sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %a = arith.constant dense<1.0> : tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %k = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %s = tile.dot %a, %k, %zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
  tile.atomic_add %s, %ov[%c0, %c0] : tensor<64x64xf32>, !tile.view<f32, 2>
  return
}

// -----

// Rows up to a runtime %n: each red predicated on its element's bounds.
// SM80-LABEL: llvm.func @runtime_rows
// SM80-COUNT-32: "{ .reg .pred p; setp.ne.b32 p, $2, 0; @p red.global.add.f32 [$0], $1; }", "l,f,r"
// SM80-NOT:      red.global.add
// SM90-LABEL: llvm.func @runtime_rows
// SM90-COUNT-16: "{ .reg .pred p; setp.ne.b32 p, $3, 0; @p red.global.add.v2.f32 [$0], {$1, $2}; }", "l,f,f,r"
// SM90-NOT:      red.global.add
func.func @runtime_rows(%kp: !tile.ptr<f16>, %op: !tile.ptr<f32>, %n: i32) attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %kv = tile.view %kp sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %a = arith.constant dense<1.0> : tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %k = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %s = tile.dot %a, %k, %zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
  tile.atomic_add %s, %ov[%c0, %c0] : tensor<64x64xf32>, !tile.view<f32, 2>
  return
}

// -----

// A runtime row stride: the columns still pair up (the last stride is 1);
// a runtime column count does not allow vectors (alignment unknown).
// SM80-LABEL: llvm.func @runtime_cols
// SM80-COUNT-32: @p red.global.add.f32 [$0], $1;
// SM80-NOT:      red.global.add
// SM90-LABEL: llvm.func @runtime_cols
// SM90-COUNT-32: @p red.global.add.f32 [$0], $1;
// SM90-NOT:      red.global.add
func.func @runtime_cols(%kp: !tile.ptr<f16>, %op: !tile.ptr<f32>, %n: i32, %st: i64) attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %kv = tile.view %kp sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%c64, %n) strides(%st, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %a = arith.constant dense<1.0> : tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %k = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %s = tile.dot %a, %k, %zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
  tile.atomic_add %s, %ov[%c0, %c0] : tensor<64x64xf32>, !tile.view<f32, 2>
  return
}

// -----

// A blocked view (tile.view's block = 8x8, strides between blocks): each
// accumulator pair still adds with one v2 red on sm_90 (a block row holds 8
// contiguous elements), and the element's address is block (i >> 3, j >> 3)
// through the strides plus (i & 7)·8 + (j & 7) inside it.
// SM80-LABEL: llvm.func @blocked
// SM80-COUNT-32: "red.global.add.f32 [$0], $1;", "l,f"
// SM80-NOT:      red.global.add
// SM90-LABEL: llvm.func @blocked
// SM90:          arith.andi
// SM90:          arith.shrsi
// SM90-COUNT-16: "red.global.add.v2.f32 [$0], {$1, $2};", "l,f,f"
// SM90-NOT:      red.global.add
func.func @blocked(%kp: !tile.ptr<f16>, %op: !tile.ptr<f32>) attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %s512 = arith.constant 512 : i64
  %kv = tile.view %kp sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%c64, %c64) strides(%s512, %s64) {block = array<i64: 8, 8>} : !tile.ptr<f32> -> !tile.view<f32, 2>
  %a = arith.constant dense<1.0> : tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %k = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %s = tile.dot %a, %k, %zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
  tile.atomic_add %s, %ov[%c0, %c0] : tensor<64x64xf32>, !tile.view<f32, 2>
  return
}

// -----

// Blocks 1 x 2 (a pair per block, blocks 2 elements apart along the rows
// and 64 along the columns): a thread's pair is one block, still one v2 red.
// SM90-LABEL: llvm.func @blocked_narrow
// SM90-COUNT-16: "red.global.add.v2.f32 [$0], {$1, $2};", "l,f,f"
// SM90-NOT:      red.global.add
// SM80-LABEL: llvm.func @blocked_narrow
func.func @blocked_narrow(%kp: !tile.ptr<f16>, %op: !tile.ptr<f32>) attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %s2 = arith.constant 2 : i64
  %kv = tile.view %kp sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%c64, %c64) strides(%s2, %s64) {block = array<i64: 1, 2>} : !tile.ptr<f32> -> !tile.view<f32, 2>
  %a = arith.constant dense<1.0> : tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %k = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %s = tile.dot %a, %k, %zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
  tile.atomic_add %s, %ov[%c0, %c0] : tensor<64x64xf32>, !tile.view<f32, 2>
  return
}
