// RUN: tile-opt %s -split-input-file -tile-optimize -tile-pipeline -tile-partition-warps -tile-allocate-shared -tile-insert-waits -tile-skip-warp-blocks 2>&1 | FileCheck %s
// RUN: tile-opt %s -split-input-file -tile-optimize -tile-pipeline -tile-partition-warps -tile-allocate-shared -tile-insert-waits -tile-skip-warp-blocks=full-warps=true 2>&1 | FileCheck %s --check-prefix=FULL
// RUN: tile-opt %s -split-input-file -tile-optimize -tile-pipeline -tile-partition-warps -tile-allocate-shared -tile-insert-waits -tile-skip-warp-blocks -convert-tile-to-nvvm 2>&1 | FileCheck %s --check-prefix=NVVM
// RUN: tile-opt %s -split-input-file -tile-optimize -tile-pipeline=stages=1 -tile-partition-warps -tile-allocate-shared -tile-insert-waits -tile-skip-warp-blocks 2>&1 | FileCheck %s --check-prefix=STAGES1
// RUN: not tile-opt %S/Inputs/warp-id-cpu.mlir -convert-tile-to-cpu 2>&1 | FileCheck %s --check-prefix=CPU

// tile-skip-warp-blocks on a causal sliding window (query i sees keys
// i - w .. i), 64 query rows over 4 warps (16 rows each), 32-key blocks:
// tile-split-masked-loops makes a left-edge loop that tests the window
// (`sge`) and a diagonal loop that tests both; the pass branches per warp in
// both masked loops (the unmasked one is left alone):
//  - a warp bounds each comparison over its 16 rows (off = 16 * warp, from
//    the layout's warp bases [16, 0] and [32, 0]) and all 32 columns;
//  - where one comparison is false on all of them it passes m, l, acc
//    through (the copies and the barrier above stay collective);
//  - in the diagonal loop, where the window's comparison holds on all of
//    them, a body that tests the causal one only;
//  - full-warps=true adds the unmasked body for warps that see every key.
// The lowering branches on a warp vote (NVVM). Under stages=1 a barrier sits
// between the two dots: the loop is left as it is, with a remark (STAGES1).
// The CPU lowering, where a program is one thread, refuses tile.warp_id (CPU).
// CPU: error: 'tile.warp_id' op exists only on layout-assigned GPU IR

// CHECK-LABEL: func.func @causal_window
// CHECK:         %[[W:.*]] = tile.warp_id : i32
// CHECK:         scf.for
// CHECK:           tile.barrier
// CHECK:           tile.async_commit
// CHECK:           tile.async_commit
// CHECK:           %[[EMPTY:.*]] = arith.cmpi sge
// CHECK:           scf.if %[[EMPTY]] -> (
// CHECK-NEXT:        scf.yield %arg{{.*}}, %arg{{.*}}, %arg{{.*}} :
// CHECK-NEXT:      } else {
// CHECK:             tile.dot
// CHECK:             arith.cmpi sge, {{.*}} : tensor<64x32xi32
// CHECK-NOT:         arith.cmpi sle, {{.*}} : tensor<64x32xi32
// CHECK:             arith.select
// CHECK:           } {tile.warp_uniform}
// CHECK:         } {tile.blocks = #tile<blocks partial>
// The unmasked loop: no branch.
// CHECK:         scf.for
// CHECK-NOT:       scf.if
// CHECK-NOT:       arith.select {{.*}}tensor<64x32xi1
// CHECK:         } {tile.blocks = #tile<blocks full>
// CHECK:         tile.warp_id
// CHECK:         scf.for
// CHECK:           %[[SKIP:.*]] = arith.ori
// CHECK:           scf.if %[[SKIP]] -> (
// CHECK-NEXT:        scf.yield %arg{{.*}}, %arg{{.*}}, %arg{{.*}} :
// CHECK-NEXT:      } else {
// CHECK-NEXT:        scf.if %{{.*}} -> (
// The pruned body: the causal comparison only.
// CHECK-NOT:           arith.cmpi sge, {{.*}} : tensor<64x32xi32
// CHECK:               %[[CAUSAL:.*]] = arith.cmpi sle, {{.*}} : tensor<64x32xi32
// CHECK-NOT:           arith.andi {{.*}} : tensor<64x32xi1
// CHECK:               arith.select %[[CAUSAL]]
// CHECK:             } else {
// CHECK-DAG:           arith.cmpi sge, {{.*}} : tensor<64x32xi32
// CHECK-DAG:           arith.cmpi sle, {{.*}} : tensor<64x32xi32
// CHECK:               arith.andi {{.*}} : tensor<64x32xi1
// CHECK:             } {tile.warp_uniform}
// CHECK:           } {tile.warp_uniform}
// CHECK:         } {tile.blocks = #tile<blocks partial>

// FULL-LABEL: func.func @causal_window
// FULL:         scf.for
// FULL:           scf.if
// FULL:           } else {
// FULL-NEXT:        scf.if %{{.*}} -> (
// FULL-NOT:           arith.select {{.*}}tensor<64x32xi1
// FULL:             } else {
// FULL:               arith.select {{.*}}tensor<64x32xi1
// FULL:             } {tile.warp_uniform}

// NVVM-LABEL: llvm.func @causal_window
// NVVM:         %[[VOTE:.*]] = nvvm.vote.sync any
// NVVM-NEXT:    scf.if %[[VOTE]] -> (f32,
// NVVM-NOT:     tile.warp_id

// STAGES1: remark: tile-skip-warp-blocks left this masked loop as it is: a copy, wait or barrier comes after the warp's compute begins
// STAGES1-LABEL: func.func @causal_window
// STAGES1-NOT:   tile.warp_id
func.func @causal_window(%q: !tile.ptr<f16>, %k: !tile.ptr<f16>, %v: !tile.ptr<f16>,
                         %o: !tile.ptr<f16>, %seqlen: i32, %window: i32)
    attributes {tile.kernel, tile.grid = ["cdiv(seqlen, 64)", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c31 = arith.constant 31 : i32
  %c32 = arith.constant 32 : i32
  %c64 = arith.constant 64 : i32
  %c1_i64 = arith.constant 1 : i64
  %c64_i64 = arith.constant 64 : i64
  %qv = tile.view %q sizes(%seqlen, %c64) strides(%c64_i64, %c1_i64) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %kv = tile.view %k sizes(%seqlen, %c64) strides(%c64_i64, %c1_i64) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %vv = tile.view %v sizes(%seqlen, %c64) strides(%c64_i64, %c1_i64) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %o sizes(%seqlen, %c64) strides(%c64_i64, %c1_i64) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %pid = tile.program_id 0 : i32
  %row0 = arith.muli %pid, %c64 : i32
  %qt = tile.load %qv[%row0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
  %m0 = arith.constant dense<0xFF800000> : tensor<64xf32>
  %l0 = arith.constant dense<0.0> : tensor<64xf32>
  %acc0 = arith.constant dense<0.0> : tensor<64x64xf32>
  %zero = arith.constant dense<0.0> : tensor<64x32xf32>
  %neg_inf = arith.constant dense<0xFF800000> : tensor<64x32xf32>
  %rows_i = tile.iota : tensor<64xi32>
  %row0_t = tile.splat %row0 : i32 -> tensor<64xi32>
  %rows1 = arith.addi %rows_i, %row0_t : tensor<64xi32>
  %rows2 = tile.expand_dims %rows1 along 1 : tensor<64xi32> -> tensor<64x1xi32>
  %rows = tile.broadcast %rows2 : tensor<64x1xi32> -> tensor<64x32xi32>
  %w_t = tile.splat %window : i32 -> tensor<64x32xi32>
  %left = arith.subi %rows, %w_t : tensor<64x32xi32>
  %cols_i = tile.iota : tensor<32xi32>
  %hi = arith.addi %seqlen, %c31 : i32
  %n = arith.divsi %hi, %c32 : i32
  %m_f, %l_f, %acc_f = scf.for %j = %c0 to %n step %c1
      iter_args(%m = %m0, %l = %l0, %acc = %acc0) -> (tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>) : i32 {
    %col0 = arith.muli %j, %c32 : i32
    %kt = tile.load %kv[%col0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<32x64xf16>
    %vt = tile.load %vv[%col0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<32x64xf16>
    %s = tile.dot %qt, %kt, %zero transpose_b : tensor<64x64xf16>, tensor<32x64xf16> -> tensor<64x32xf32>
    %col0_t = tile.splat %col0 : i32 -> tensor<32xi32>
    %cols1 = arith.addi %cols_i, %col0_t : tensor<32xi32>
    %cols2 = tile.expand_dims %cols1 along 0 : tensor<32xi32> -> tensor<1x32xi32>
    %cols = tile.broadcast %cols2 : tensor<1x32xi32> -> tensor<64x32xi32>
    %causal = arith.cmpi sle, %cols, %rows : tensor<64x32xi32>
    %inside = arith.cmpi sge, %cols, %left : tensor<64x32xi32>
    %keep = arith.andi %causal, %inside : tensor<64x32xi1>
    %sm = arith.select %keep, %s, %neg_inf : tensor<64x32xi1>, tensor<64x32xf32>
    %rmax = tile.reduce max %sm along 1 : tensor<64x32xf32> -> tensor<64xf32>
    %m1 = arith.maximumf %m, %rmax : tensor<64xf32>
    %m2 = tile.expand_dims %m1 along 1 : tensor<64xf32> -> tensor<64x1xf32>
    %mb = tile.broadcast %m2 : tensor<64x1xf32> -> tensor<64x32xf32>
    %d = arith.subf %sm, %mb : tensor<64x32xf32>
    %p = math.exp %d : tensor<64x32xf32>
    %md = arith.subf %m, %m1 : tensor<64xf32>
    %alpha = math.exp %md : tensor<64xf32>
    %ls = arith.mulf %l, %alpha : tensor<64xf32>
    %ps = tile.reduce sum %p along 1 : tensor<64x32xf32> -> tensor<64xf32>
    %l1 = arith.addf %ls, %ps : tensor<64xf32>
    %a2 = tile.expand_dims %alpha along 1 : tensor<64xf32> -> tensor<64x1xf32>
    %ab = tile.broadcast %a2 : tensor<64x1xf32> -> tensor<64x64xf32>
    %accs = arith.mulf %acc, %ab : tensor<64x64xf32>
    %p16 = arith.truncf %p : tensor<64x32xf32> to tensor<64x32xf16>
    %acc1 = tile.dot %p16, %vt, %accs : tensor<64x32xf16>, tensor<32x64xf16> -> tensor<64x64xf32>
    scf.yield %m1, %l1, %acc1 : tensor<64xf32>, tensor<64xf32>, tensor<64x64xf32>
  }
  %lf2 = tile.expand_dims %l_f along 1 : tensor<64xf32> -> tensor<64x1xf32>
  %lfb = tile.broadcast %lf2 : tensor<64x1xf32> -> tensor<64x64xf32>
  %out = arith.divf %acc_f, %lfb : tensor<64x64xf32>
  %out16 = arith.truncf %out : tensor<64x64xf32> to tensor<64x64xf16>
  tile.store %out16, %ov[%row0, %c0] : tensor<64x64xf16>, !tile.view<f16, 2>
  return
}

