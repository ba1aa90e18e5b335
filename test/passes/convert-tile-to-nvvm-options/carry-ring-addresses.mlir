// RUN: tile-opt %s -split-input-file -tile-pipeline -tile-partition-warps -tile-allocate-shared -tile-insert-waits -convert-tile-to-nvvm | FileCheck %s
// RUN: tile-opt %s -split-input-file -tile-pipeline -tile-partition-warps -tile-allocate-shared -tile-insert-waits -convert-tile-to-nvvm="xor-ring-phases=all" | FileCheck %s --check-prefix=ALL
// RUN: tile-opt %s -split-input-file -tile-pipeline -tile-partition-warps -tile-allocate-shared -tile-insert-waits -convert-tile-to-nvvm="carry-ring-addresses=false" | FileCheck %s --check-prefix=PLAIN
// RUN: tile-opt %s -split-input-file -tile-pipeline -tile-partition-warps -tile-allocate-shared -tile-insert-waits -convert-tile-to-nvvm="xor-ring-phases=trans" | FileCheck %s --check-prefix=TRANS

// A 128x128 f32 accumulator over 4 warps takes 128 registers per thread, so
// the loop is short of registers and carry-ring-addresses (on by default)
// applies: the K ring's ldmatrix addresses (row, lane chunk bit, parity
// region) become loop-carried !llvm.ptr<3>s, stepped to the other ring
// region at the back edge. Q, not a ring, keeps its loop-invariant bases.
// K is read by plain ldmatrix; by default (xor-ring-phases=auto, which is
// trans where one accumulator alone is short) each of the four swizzle
// phases of a 256-byte row (chunks +0, +2, +4, +6) is its own carried
// address.
// CHECK-LABEL: llvm.func @carry
// CHECK:         scf.for {{.*}} -> ({{.*}}f32, i32, !llvm.ptr<3>, !llvm.ptr<3>, !llvm.ptr<3>, !llvm.ptr<3>)
// CHECK-NOT:       llvm.ptrtoint
// CHECK:           scf.yield
// With xor-ring-phases=all only the phase-0 address is carried; the other
// three are that address XOR 32, 64, 96, derived where used.
// ALL-LABEL: llvm.func @carry
// ALL:         scf.for {{.*}}, %[[ADDR:arg[0-9]+]] = %{{[0-9]+}}) -> ({{.*}}f32, i32, !llvm.ptr<3>)
// ALL:           llvm.inline_asm {{.*}}ldmatrix.sync.aligned.m8n8.x4.shared.b16{{.*}} %[[ADDR]] :
// ALL:           %[[I32:[0-9]+]] = llvm.ptrtoint %[[ADDR]] : !llvm.ptr<3> to i32
// ALL-NEXT:      %[[M32:.*]] = arith.constant 32 : i32
// ALL-NEXT:      %[[X32:[0-9]+]] = arith.xori %[[I32]], %[[M32]] : i32
// ALL-NEXT:      %[[P32:[0-9]+]] = llvm.inttoptr %[[X32]] : i32 to !llvm.ptr<3>
// ALL-NEXT:      llvm.inline_asm {{.*}}ldmatrix{{.*}} %[[P32]] :
// ALL:           llvm.ptrtoint %[[ADDR]]
// ALL-NEXT:      arith.constant 64 : i32
// ALL-NEXT:      arith.xori
// ALL:           llvm.ptrtoint %[[ADDR]]
// ALL-NEXT:      arith.constant 96 : i32
// ALL-NEXT:      arith.xori
// ALL:           %[[NEXT:[0-9]+]] = llvm.getelementptr %[[ADDR]][%{{[0-9]+}}] : (!llvm.ptr<3>, i32) -> !llvm.ptr<3>, i8
// ALL-NEXT:      scf.yield {{.*}}, %[[NEXT]] : {{.*}}, i32, !llvm.ptr<3>
// Off: the loop carries only the parity; no address arithmetic through integers.
// PLAIN-LABEL: llvm.func @carry
// PLAIN:         scf.for {{.*}} -> ({{.*}}f32, i32) : i32 {
// PLAIN-NOT:     llvm.ptrtoint
// PLAIN:         scf.yield
func.func @carry(%qp: !tile.ptr<f16>, %kp: !tile.ptr<f16>, %op: !tile.ptr<f32>, %n: i32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c128 = arith.constant 128 : i32
  %one = arith.constant 1 : i64
  %s128 = arith.constant 128 : i64
  %qv = tile.view %qp sizes(%c128, %c128) strides(%s128, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %kv = tile.view %kp sizes(%n, %c128) strides(%s128, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%c128, %c128) strides(%s128, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %q = tile.load %qv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<128x128xf16>
  %zero = arith.constant dense<0.0> : tensor<128x128xf32>
  %blocks = arith.divui %n, %c128 : i32
  %a = scf.for %j = %c0 to %blocks step %c1 iter_args(%o = %zero) -> (tensor<128x128xf32>) : i32 {
    %row = arith.muli %j, %c128 : i32
    %k = tile.load %kv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<128x128xf16>
    %s = tile.dot %q, %k, %o transpose_b : tensor<128x128xf16>, tensor<128x128xf16> -> tensor<128x128xf32>
    scf.yield %s : tensor<128x128xf32>
  }
  tile.store %a, %ov[%c0, %c0] : tensor<128x128xf32>, !tile.view<f32, 2>
  return
}

// -----

// V (B not transposed: ldmatrix.trans, the lane's chunk bit is the high
// matrix bit; XOR-derived phases by default), first read by a dot inside an
// scf.if. A derived address made
// there would not dominate later uses outside the branch, so the three are
// made right after the carried address instead (each inserted there, hence
// 96, 64, 32), before the branch.
// CHECK-LABEL: llvm.func @v_in_branch
// CHECK:         scf.for {{.*}} -> ({{.*}}f32, i32, !llvm.ptr<3>, !llvm.ptr<3>)
// CHECK-NOT:       scf.if
// CHECK:           llvm.ptrtoint %[[V:arg[0-9]+]] : !llvm.ptr<3> to i32
// CHECK-NEXT:      arith.constant 96 : i32
// CHECK-NEXT:      arith.xori
// CHECK-NEXT:      %[[P96:[0-9]+]] = llvm.inttoptr
// CHECK-NEXT:      llvm.ptrtoint %[[V]]
// CHECK-NEXT:      arith.constant 64 : i32
// CHECK:           llvm.ptrtoint %[[V]]
// CHECK-NEXT:      arith.constant 32 : i32
// CHECK:           scf.if
// CHECK:             llvm.inline_asm {{.*}}ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16{{.*}} %[[V]] :
// CHECK:             llvm.inline_asm {{.*}}ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16{{.*}} %[[P96]] :
// (Each dot computes its own lane values, so the dot after the branch
// carries its own address.)
// PLAIN-LABEL: llvm.func @v_in_branch
// PLAIN-NOT:     llvm.ptrtoint
// PLAIN:         llvm.return
func.func @v_in_branch(%pp: !tile.ptr<f16>, %vp: !tile.ptr<f16>, %op: !tile.ptr<f32>, %n: i32, %m: i32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c128 = arith.constant 128 : i32
  %one = arith.constant 1 : i64
  %s128 = arith.constant 128 : i64
  %pv = tile.view %pp sizes(%c128, %c128) strides(%s128, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %vv = tile.view %vp sizes(%n, %c128) strides(%s128, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%c128, %c128) strides(%s128, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %p = tile.load %pv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<128x128xf16>
  %zero = arith.constant dense<0.0> : tensor<128x128xf32>
  %blocks = arith.divui %n, %c128 : i32
  // Written pipelined (the tile for this iteration carried, the next one
  // loaded ahead), as tile-pipeline writes the flagship's loops.
  %v0 = tile.load %vv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<128x128xf16>
  %a:2 = scf.for %j = %c0 to %blocks step %c1 iter_args(%o = %zero, %v = %v0) -> (tensor<128x128xf32>, tensor<128x128xf16>) : i32 {
    %j1 = arith.addi %j, %c1 : i32
    %row = arith.muli %j1, %c128 : i32
    %vn = tile.load %vv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<128x128xf16>
    %flag = arith.cmpi slt, %j, %m : i32
    %r = scf.if %flag -> (tensor<128x128xf32>) {
      %s = tile.dot %p, %v, %o : tensor<128x128xf16>, tensor<128x128xf16> -> tensor<128x128xf32>
      scf.yield %s : tensor<128x128xf32>
    } else {
      scf.yield %o : tensor<128x128xf32>
    }
    %s2 = tile.dot %p, %v, %r : tensor<128x128xf16>, tensor<128x128xf16> -> tensor<128x128xf32>
    scf.yield %s2, %vn : tensor<128x128xf32>, tensor<128x128xf16>
  }
  tile.store %a#0, %ov[%c0, %c0] : tensor<128x128xf32>, !tile.view<f32, 2>
  return
}

// -----

// Two 128x64 f32 accumulators over 4 warps take 64 registers per thread
// each, 128 together (as the backward's dK and dV at head_dim 128 over 8
// warps): no accumulator alone is short, the loop's carried tiles together
// are, so the K ring's address is carried too; there xor-ring-phases=auto
// derives every ring tile's other phases by XOR (as =all): one carried
// address per dot (each dot computes its own lane values), the phases +32,
// +64, +96 from it -- not the four per dot that =trans carries for K.
// CHECK-LABEL: llvm.func @carried_together
// CHECK:         scf.for {{.*}}, %[[ADDR:arg[0-9]+]] = %{{[0-9]+}}, %{{arg[0-9]+}} = %{{[0-9]+}}) -> ({{.*}}f32, i32, !llvm.ptr<3>, !llvm.ptr<3>)
// CHECK:           llvm.ptrtoint %[[ADDR]] : !llvm.ptr<3> to i32
// CHECK-NEXT:      arith.constant 32 : i32
// CHECK-NEXT:      arith.xori
// CHECK:           scf.yield
// ALL-LABEL: llvm.func @carried_together
// ALL:         scf.for {{.*}} -> ({{.*}}f32, i32, !llvm.ptr<3>, !llvm.ptr<3>)
// TRANS-LABEL: llvm.func @carried_together
// TRANS:         scf.for {{.*}} -> ({{.*}}f32, i32, !llvm.ptr<3>, !llvm.ptr<3>, !llvm.ptr<3>, !llvm.ptr<3>, !llvm.ptr<3>, !llvm.ptr<3>, !llvm.ptr<3>, !llvm.ptr<3>)
// PLAIN-LABEL: llvm.func @carried_together
// PLAIN:         scf.for {{.*}} -> ({{.*}}f32, i32) : i32 {
// PLAIN-NOT:     llvm.ptrtoint
// PLAIN:         scf.yield
func.func @carried_together(%qp: !tile.ptr<f16>, %kp: !tile.ptr<f16>, %op: !tile.ptr<f32>, %n: i32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %c128 = arith.constant 128 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %s128 = arith.constant 128 : i64
  %qv = tile.view %qp sizes(%c128, %c128) strides(%s128, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %kv = tile.view %kp sizes(%n, %c128) strides(%s128, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%c128, %c64) strides(%s64, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %q = tile.load %qv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<128x128xf16>
  %zero = arith.constant dense<0.0> : tensor<128x64xf32>
  %blocks = arith.divui %n, %c64 : i32
  %a:2 = scf.for %j = %c0 to %blocks step %c1 iter_args(%o1 = %zero, %o2 = %zero) -> (tensor<128x64xf32>, tensor<128x64xf32>) : i32 {
    %row = arith.muli %j, %c64 : i32
    %k = tile.load %kv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x128xf16>
    %s1 = tile.dot %q, %k, %o1 transpose_b : tensor<128x128xf16>, tensor<64x128xf16> -> tensor<128x64xf32>
    %s2 = tile.dot %q, %k, %o2 transpose_b : tensor<128x128xf16>, tensor<64x128xf16> -> tensor<128x64xf32>
    scf.yield %s1, %s2 : tensor<128x64xf32>, tensor<128x64xf32>
  }
  %sum = arith.addf %a#0, %a#1 : tensor<128x64xf32>
  tile.store %sum, %ov[%c0, %c0] : tensor<128x64xf32>, !tile.view<f32, 2>
  return
}
