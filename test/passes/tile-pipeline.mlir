// RUN: tile-opt %s -split-input-file -tile-pipeline='stages=1' | FileCheck %s
// RUN: tile-opt %s -split-input-file -tile-pipeline | FileCheck %s --check-prefix=RING
// RUN: not tile-opt %s -split-input-file -tile-pipeline='stages=3' 2>&1 | FileCheck %s --check-prefix=BAD
// Loads left alone are reported (remarks), not skipped silently.
// RUN: tile-opt %s -split-input-file -tile-pipeline -verify-diagnostics -o /dev/null

// BAD: tile-pipeline: stages=3 is not supported (1: FlashAttention-2's single buffer per tile, 2: a ring of two buffers)

// stages=1: K's only use is the first dot, so its load rotates: iteration j
// reads the tile loaded for it one iteration earlier (a loop-carried value),
// and K(j+1) is loaded just before the second dot, at offset (j + 1) * 64;
// the first iteration's K is loaded before the loop at offset lb * 64. V
// stays (no dot follows its dot).
// CHECK-LABEL: func.func @attention_loop
// CHECK:         %[[FIRST_OFF:.+]] = arith.muli %[[LB:.+]], %c64
// CHECK:         %[[FIRST:.+]] = tile.load %[[KV:.+]][%[[FIRST_OFF]], %{{.*}}]
// CHECK:         scf.for %[[IV:.+]] = %[[LB]] to %{{.*}} step %[[STEP:.+]] iter_args(%[[ACC:.+]] = %{{.*}}, %[[K:.+]] = %[[FIRST]])
// CHECK:           %[[V:.+]] = tile.load %[[VV:.+]][
// CHECK:           tile.dot %{{.*}}, %[[K]], %{{.*}} transpose_b
// CHECK:           %[[NEXT:.+]] = arith.addi %[[IV]], %[[STEP]]
// CHECK:           %[[NEXT_OFF:.+]] = arith.muli %[[NEXT]], %c64
// CHECK:           %[[KNEXT:.+]] = tile.load %[[KV]][%[[NEXT_OFF]], %{{.*}}]
// CHECK:           %[[O:.+]] = tile.dot %{{.*}}, %[[V]], %{{.*}}
// CHECK:           scf.yield %[[O]], %[[KNEXT]]

// stages=2 (the default): both K and V rotate; the loads of iteration j + 1
// are the first ops of the body, before either dot reads iteration j's tiles.
// RING-LABEL: func.func @attention_loop
// RING:         %[[KFIRST:.+]] = tile.load %[[KV:.+]][%{{.*}}, %{{.*}}]
// RING:         %[[VFIRST:.+]] = tile.load %[[VV:.+]][%{{.*}}, %{{.*}}]
// RING:         scf.for %[[IV:.+]] = %{{.*}} to %{{.*}} step %[[STEP:.+]] iter_args(%{{[^,]*}} = %{{[^,]*}}, %[[K:[^ ]+]] = %[[KFIRST]], %[[V:[^ ]+]] = %[[VFIRST]])
// RING-NEXT:      %[[NEXT:.+]] = arith.addi %[[IV]], %[[STEP]]
// RING-NEXT:      %[[KOFF:.+]] = arith.muli %[[NEXT]], %c64
// RING-NEXT:      %[[KNEXT:.+]] = tile.load %[[KV]][%[[KOFF]], %{{.*}}]
// RING-NEXT:      %[[VOFF:.+]] = arith.muli %[[NEXT]], %c64
// RING-NEXT:      %[[VNEXT:.+]] = tile.load %[[VV]][%[[VOFF]], %{{.*}}]
// RING:           tile.dot %{{.*}}, %[[K]], %{{.*}} transpose_b
// RING:           %[[O:.+]] = tile.dot %{{.*}}, %[[V]], %{{.*}}
// RING:           scf.yield %[[O]], %[[KNEXT]], %[[VNEXT]]
func.func @attention_loop(%kp: !tile.ptr<f16>, %vp: !tile.ptr<f16>, %lb: i32, %ub: i32, %n: i32)
    attributes {tile.kernel} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %kv = tile.view %kp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %vv = tile.view %vp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %q = arith.constant dense<1.0> : tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %acc = scf.for %j = %lb to %ub step %c1 iter_args(%o = %zero) -> (tensor<64x64xf32>) : i32 {
    %row = arith.muli %j, %c64 : i32
    %k = tile.load %kv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %v = tile.load %vv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %k, %zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    %p = arith.truncf %s : tensor<64x64xf32> to tensor<64x64xf16>
    %o2 = tile.dot %p, %v, %o : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    scf.yield %o2 : tensor<64x64xf32>
  }
  return
}

// -----

// One dot: with one buffer nothing comes after it to overlap with, the loop
// is unchanged; with a ring, the next tile loads while this one is used.
// CHECK-LABEL: func.func @single_dot
// CHECK:         scf.for {{.*}} iter_args(%{{[^,]*}} = %{{[^)]*}}) -> (tensor<64x64xf32>)
// CHECK:           tile.load
// CHECK:           tile.dot
// RING-LABEL: func.func @single_dot
// RING:         %[[FIRST:.+]] = tile.load
// RING:         scf.for {{.*}} iter_args(%{{[^,]*}} = %{{[^,]*}}, %[[K:[^ ]+]] = %[[FIRST]]) -> (tensor<64x64xf32>, tensor<64x64xf16>)
// RING:           %[[NEXT:.+]] = tile.load
// RING:           %[[S:.+]] = tile.dot %{{.*}}, %[[K]]
// RING:           scf.yield %[[S]], %[[NEXT]]
func.func @single_dot(%kp: !tile.ptr<f16>, %n: i32) attributes {tile.kernel} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %kv = tile.view %kp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %q = arith.constant dense<1.0> : tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %acc = scf.for %j = %c0 to %n step %c1 iter_args(%o = %zero) -> (tensor<64x64xf32>) : i32 {
    %row = arith.muli %j, %c64 : i32
    %k = tile.load %kv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %k, %o transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    scf.yield %s : tensor<64x64xf32>
  }
  return
}

// -----

// A loop whose offsets come from a loop-carried value (not the induction
// variable) is left alone: the next iteration's offset is not known here.
// CHECK-LABEL: func.func @carried
// CHECK:         scf.for {{.*}} iter_args({{[^)]*}}) -> (tensor<64x64xf32>, i32)
// CHECK:           tile.load
// CHECK:           tile.load
// CHECK:           tile.dot
// RING-LABEL: func.func @carried
// RING:         scf.for {{.*}} iter_args({{[^)]*}}) -> (tensor<64x64xf32>, i32)
// RING:           tile.load
// RING:           tile.load
// RING:           tile.dot
func.func @carried(%kp: !tile.ptr<f16>, %vp: !tile.ptr<f16>, %n: i32)
    attributes {tile.kernel, tile.grid = ["1", "1", "1"]} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %kv = tile.view %kp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %vv = tile.view %vp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %q = arith.constant dense<1.0> : tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %acc:2 = scf.for %j = %c0 to %n step %c1 iter_args(%o = %zero, %row = %c0) -> (tensor<64x64xf32>, i32) : i32 {
    // expected-remark @below {{not prefetched (tile-pipeline): its address depends on loop-carried value #1}}
    %k = tile.load %kv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    // expected-remark @below {{not prefetched (tile-pipeline): its address depends on loop-carried value #1}}
    %v = tile.load %vv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %k, %zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    %p = arith.truncf %s : tensor<64x64xf32> to tensor<64x64xf16>
    %o2 = tile.dot %p, %v, %o : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    %row2 = arith.addi %row, %c64 : i32
    scf.yield %o2, %row2 : tensor<64x64xf32>, i32
  }
  return
}

// -----

// Two loops tile-split-masked-loops made from one (tile.blocks, adjacent
// ranges [lb, mid) and [mid, ub)): with the ring, the second starts from the
// first's last prefetch (the tile of block mid) instead of loading it again
// behind a wait. With one buffer per tile a single-dot loop is left alone.
// RING-LABEL: func.func @chained
// RING:         %[[K0:.+]] = tile.load
// RING:         %[[L1:.+]]:2 = scf.for {{.*}} iter_args({{.*}}, %{{[^ ]+}} = %[[K0]]) {{.*}} {
// RING:         } {tile.blocks = #tile<blocks full>}
// RING-NOT:     tile.load
// RING:         scf.for {{.*}} iter_args(%{{[^ ]+}} = %[[L1]]#0, %{{[^ ]+}} = %[[L1]]#1)
// RING:         } {tile.blocks = #tile<blocks partial>}
// CHECK-LABEL: func.func @chained
// CHECK:         scf.for
// CHECK-NEXT:      arith.muli
// CHECK-NEXT:      tile.load
// CHECK:         scf.for
// CHECK-NEXT:      arith.muli
// CHECK-NEXT:      tile.load
func.func @chained(%kp: !tile.ptr<f16>, %mid: i32, %n: i32) attributes {tile.kernel} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %kv = tile.view %kp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %q = arith.constant dense<1.0> : tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %a = scf.for %j = %c0 to %mid step %c1 iter_args(%o = %zero) -> (tensor<64x64xf32>) : i32 {
    %row = arith.muli %j, %c64 : i32
    %k = tile.load %kv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %k, %o transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    scf.yield %s : tensor<64x64xf32>
  } {tile.blocks = #tile<blocks full>}
  %b = scf.for %j = %mid to %n step %c1 iter_args(%o = %a) -> (tensor<64x64xf32>) : i32 {
    %row = arith.muli %j, %c64 : i32
    %k = tile.load %kv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %k, %o transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    %neg = arith.negf %s : tensor<64x64xf32>
    scf.yield %neg : tensor<64x64xf32>
  } {tile.blocks = #tile<blocks partial>}
  return
}

// -----

// Adjacent loops that tile-split-masked-loops did not make (no tile.blocks)
// are not chained: nothing says the first one's range ends where it starts.
// RING-LABEL: func.func @not_split
// RING:         tile.load
// RING:         scf.for
// RING:         tile.load
// RING:         scf.for
func.func @not_split(%kp: !tile.ptr<f16>, %mid: i32, %n: i32) attributes {tile.kernel} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %kv = tile.view %kp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %q = arith.constant dense<1.0> : tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %a = scf.for %j = %c0 to %mid step %c1 iter_args(%o = %zero) -> (tensor<64x64xf32>) : i32 {
    %row = arith.muli %j, %c64 : i32
    %k = tile.load %kv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %k, %o transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    scf.yield %s : tensor<64x64xf32>
  }
  %b = scf.for %j = %mid to %n step %c1 iter_args(%o = %a) -> (tensor<64x64xf32>) : i32 {
    %row = arith.muli %j, %c64 : i32
    %k = tile.load %kv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %k, %o transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    scf.yield %s : tensor<64x64xf32>
  }
  return
}

// -----

// A loop that stores to memory keeps its loads where they are: a load moved
// to the previous iteration could miss (or see) that iteration's store.
// CHECK-LABEL: func.func @writes
// CHECK:         scf.for
// CHECK-NEXT:      arith.muli
// CHECK-NEXT:      tile.load
// RING-LABEL: func.func @writes
// RING:         scf.for
// RING-NEXT:      arith.muli
// RING-NEXT:      tile.load
func.func @writes(%kp: !tile.ptr<f16>, %op: !tile.ptr<f32>, %n: i32) attributes {tile.kernel} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %kv = tile.view %kp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %q = arith.constant dense<1.0> : tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  scf.for %j = %c0 to %n step %c1 : i32 {
    %row = arith.muli %j, %c64 : i32
    %k = tile.load %kv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %k, %zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    tile.store %s, %ov[%row, %c0] : tensor<64x64xf32>, !tile.view<f32, 2>
  }
  return
}

// -----

// The fused backward's loop: its only writes are tile.atomic_adds into a
// view of another kernel argument (dQ's f32 accumulator), so the ring
// (stages=2) still prefetches K at the top of the body; stages=1 keeps it.
// CHECK-LABEL: func.func @atomic_other_argument
// CHECK:         scf.for
// CHECK-NEXT:      arith.muli
// CHECK-NEXT:      tile.load
// RING-LABEL: func.func @atomic_other_argument
// RING:         %[[FIRST:.+]] = tile.load %[[KV:.+]][
// RING:         scf.for %{{.+}} iter_args(%[[K:.+]] = %[[FIRST]])
// RING-NEXT:      %[[NEXT:.+]] = arith.addi
// RING:           tile.load %[[KV]][
// RING:           tile.dot %{{.*}}, %[[K]], %{{.*}} transpose_b
// RING:           tile.atomic_add
func.func @atomic_other_argument(%kp: !tile.ptr<f16>, %op: !tile.ptr<f32>, %n: i32) attributes {tile.kernel} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %kv = tile.view %kp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %q = arith.constant dense<1.0> : tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  scf.for %j = %c0 to %n step %c1 : i32 {
    %row = arith.muli %j, %c64 : i32
    %k = tile.load %kv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %k, %zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    %off = arith.extsi %row : i32 to i64
    %blk = tile.addptr %op, %off : !tile.ptr<f32>, i64
    %ov = tile.view %blk sizes(%c64, %c64) strides(%s64, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
    tile.atomic_add %s, %ov[%c0, %c0] : tensor<64x64xf32>, !tile.view<f32, 2>
  }
  return
}

// -----

// Atomic adds beside a plain store: anything may alias the store, so the
// load stays (a load through the atomics' own argument cannot feed a dot:
// tile.atomic_add is f32 only, a dot's operands 16-bit, and no op casts a
// pointer).
// RING-LABEL: func.func @atomic_and_store
// RING:         scf.for
// RING-NEXT:      arith.muli
// RING-NEXT:      tile.load
func.func @atomic_and_store(%kp: !tile.ptr<f16>, %op: !tile.ptr<f32>, %sp: !tile.ptr<f32>, %n: i32) attributes {tile.kernel} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %kv = tile.view %kp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
  %ov = tile.view %op sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %sv = tile.view %sp sizes(%n, %c64) strides(%s64, %one) : !tile.ptr<f32> -> !tile.view<f32, 2>
  %q = arith.constant dense<1.0> : tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  scf.for %j = %c0 to %n step %c1 : i32 {
    %row = arith.muli %j, %c64 : i32
    %k = tile.load %kv[%row, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %k, %zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    tile.atomic_add %s, %ov[%row, %c0] : tensor<64x64xf32>, !tile.view<f32, 2>
    tile.store %s, %sv[%row, %c0] : tensor<64x64xf32>, !tile.view<f32, 2>
  }
  return
}

// -----

// Paged K/V: block j's page is read from the block table inside the loop
// (tile.load_scalar), and the K/V views start at that page. The address is
// still rotatable: the next block's entry is read with the tiles, but only
// when that block exists (next < ub; before the loop, lb < ub), since the
// entry past the last is outside the table. Otherwise it reads as 0 and the
// view gets size 0, so the prefetched tile touches no memory. K and V share
// the one entry read, and the body keeps no read of the current entry.
// RING-LABEL: func.func @paged
// RING:         %[[E0:.+]] = arith.cmpi slt, %[[LB:[^,]+]], %[[UB:[^ ]+]] : i32
// RING:         %[[PG0:.+]] = scf.if %[[E0]] -> (i32) {
// RING-NEXT:      %[[X:.+]] = tile.load_scalar
// RING-NEXT:      scf.yield %[[X]] : i32
// RING-NEXT:    } else {
// RING:         tile.load
// RING:         scf.for %[[IV:.+]] = %[[LB]] to %[[UB]] step %[[STEP:[^ ]+]] iter_args
// RING-NEXT:      %[[NEXT:.+]] = arith.addi %[[IV]], %[[STEP]]
// RING-NEXT:      %[[E:.+]] = arith.cmpi slt, %[[NEXT]], %[[UB]] : i32
// RING:           %[[PG:.+]] = scf.if %[[E]] -> (i32) {
// RING-NEXT:        tile.load_scalar
// RING:             scf.yield %c0_i32{{.*}} : i32
// RING:           %[[SIZE:.+]] = arith.select %[[E]], %{{.+}}, %c0_i32{{.*}} : i32
// RING:           %[[VIEW:.+]] = tile.view %{{.+}} sizes(%[[SIZE]],
// RING-NEXT:      %[[KNEXT:.+]] = tile.load %[[VIEW]]
// RING-NOT:       tile.load_scalar
// RING:           tile.dot
// RING:           scf.yield %{{.+}}, %[[KNEXT]], %{{.+}}
// stages=1 rotates K the same way, just before the second dot.
// CHECK-LABEL: func.func @paged
// CHECK:         scf.for
// CHECK:           tile.dot
// CHECK:           arith.cmpi slt
// CHECK:           scf.if %{{.+}} -> (i32) {
// CHECK-NEXT:        tile.load_scalar
// CHECK:           tile.dot
func.func @paged(%kp: !tile.ptr<f16>, %vp: !tile.ptr<f16>, %table: !tile.ptr<i32>, %lb: i32, %ub: i32,
                 %n: i32) attributes {tile.kernel} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %page_elems = arith.constant 4096 : i32
  %q = arith.constant dense<1.0> : tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %acc = scf.for %j = %lb to %ub step %c1 iter_args(%o = %zero) -> (tensor<64x64xf32>) : i32 {
    %entry = tile.addptr %table, %j : !tile.ptr<i32>, i32
    %page = tile.load_scalar %entry : !tile.ptr<i32> -> i32
    %off = arith.muli %page, %page_elems : i32
    %col0 = arith.muli %j, %c64 : i32
    %left = arith.subi %n, %col0 : i32
    %kb = tile.addptr %kp, %off : !tile.ptr<f16>, i32
    %vb = tile.addptr %vp, %off : !tile.ptr<f16>, i32
    %kv = tile.view %kb sizes(%left, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
    %vv = tile.view %vb sizes(%left, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
    %k = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %v = tile.load %vv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %k, %zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    %p = arith.truncf %s : tensor<64x64xf32> to tensor<64x64xf16>
    %o2 = tile.dot %p, %v, %o : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    scf.yield %o2 : tensor<64x64xf32>
  }
  return
}

// -----

// Two pages per key block (pages smaller than the block, as decode's page-16
// sub-tiles): the two block-table entries of the next block are read under
// one guard, both before any tile copy that needs them, so they cost one
// round trip instead of one each behind the other's copies.
// RING-LABEL: func.func @paged_sub_tiles
// RING:         scf.for %[[IV:.+]] = %{{.+}} to %[[UB:[^ ]+]] step %[[STEP:[^ ]+]] iter_args
// RING-NEXT:      %[[NEXT:.+]] = arith.addi %[[IV]], %[[STEP]]
// RING-NEXT:      %[[E:.+]] = arith.cmpi slt, %[[NEXT]], %[[UB]] : i32
// RING-NEXT:      %[[PG:.+]]:2 = scf.if %[[E]] -> (i32, i32) {
// RING-COUNT-2:     tile.load_scalar
// RING:             scf.yield %{{.+}}, %{{.+}} : i32, i32
// RING-NEXT:      } else {
// RING-NOT:       tile.load_scalar
// RING:           arith.muli %[[PG]]#0
// RING-NOT:       tile.load_scalar
// RING:           arith.muli %[[PG]]#1
// RING-NOT:       tile.load_scalar
// RING:           tile.dot
func.func @paged_sub_tiles(%kp: !tile.ptr<f16>, %vp: !tile.ptr<f16>, %table: !tile.ptr<i32>, %lb: i32,
                           %ub: i32, %n: i32) attributes {tile.kernel} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c2 = arith.constant 2 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %page_elems = arith.constant 1024 : i32
  %q = arith.constant dense<1.0> : tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x16xf32>
  %ozero = arith.constant dense<0.0> : tensor<64x64xf32>
  %acc = scf.for %j = %lb to %ub step %c1 iter_args(%o = %ozero) -> (tensor<64x64xf32>) : i32 {
    %i0 = arith.muli %j, %c2 : i32
    %i1 = arith.addi %i0, %c1 : i32
    %e0 = tile.addptr %table, %i0 : !tile.ptr<i32>, i32
    %e1 = tile.addptr %table, %i1 : !tile.ptr<i32>, i32
    %p0 = tile.load_scalar %e0 : !tile.ptr<i32> -> i32
    %p1 = tile.load_scalar %e1 : !tile.ptr<i32> -> i32
    %off0 = arith.muli %p0, %page_elems : i32
    %off1 = arith.muli %p1, %page_elems : i32
    %k0b = tile.addptr %kp, %off0 : !tile.ptr<f16>, i32
    %k1b = tile.addptr %kp, %off1 : !tile.ptr<f16>, i32
    %v0b = tile.addptr %vp, %off0 : !tile.ptr<f16>, i32
    %v1b = tile.addptr %vp, %off1 : !tile.ptr<f16>, i32
    %k0v = tile.view %k0b sizes(%n, %c1) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
    %k1v = tile.view %k1b sizes(%n, %c1) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
    %v0v = tile.view %v0b sizes(%n, %c1) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
    %v1v = tile.view %v1b sizes(%n, %c1) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
    %k0 = tile.load %k0v[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<16x64xf16>
    %k1 = tile.load %k1v[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<16x64xf16>
    %v0 = tile.load %v0v[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<16x64xf16>
    %v1 = tile.load %v1v[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<16x64xf16>
    %s0 = tile.dot %q, %k0, %zero transpose_b : tensor<64x64xf16>, tensor<16x64xf16> -> tensor<64x16xf32>
    %s1 = tile.dot %q, %k1, %zero transpose_b : tensor<64x64xf16>, tensor<16x64xf16> -> tensor<64x16xf32>
    %pp0 = arith.truncf %s0 : tensor<64x16xf32> to tensor<64x16xf16>
    %pp1 = arith.truncf %s1 : tensor<64x16xf32> to tensor<64x16xf16>
    %o1 = tile.dot %pp0, %v0, %o : tensor<64x16xf16>, tensor<16x64xf16> -> tensor<64x64xf32>
    %o2 = tile.dot %pp1, %v1, %o1 : tensor<64x16xf16>, tensor<16x64xf16> -> tensor<64x64xf32>
    scf.yield %o2 : tensor<64x64xf32>
  }
  return
}

// -----

// Paged split loops (tile-split-masked-loops' adjacent ranges [lb, mid),
// [mid, ub)): the guards test the next block against the end of the whole
// range (ub), not the first loop's bound, so the first loop's last prefetch
// loads block mid (it exists) and the second loop starts from it: no load
// and no block-table read between the loops (before, the guard made that
// prefetch empty and the second loop loaded block mid again, behind a drain).
// RING-LABEL: func.func @paged_chained
// RING-SAME:    %[[LB:[^:]+]]: i32, %[[MID:[^:]+]]: i32, %[[UB:[^:]+]]: i32
// RING:         arith.cmpi slt, %[[LB]], %[[UB]] : i32
// RING:         %[[FIRST:.+]]:3 = scf.for %{{.+}} = %[[LB]] to %[[MID]] step
// RING:           arith.cmpi slt, %{{.+}}, %[[UB]] : i32
// RING:         } {tile.blocks = #tile<blocks full>}
// RING-NEXT:    scf.for %{{.+}} = %[[MID]] to %[[UB]] step %{{.+}} iter_args(%{{.+}} = %[[FIRST]]#0, %{{.+}} = %[[FIRST]]#1, %{{.+}} = %[[FIRST]]#2)
// RING:           arith.cmpi slt, %{{.+}}, %[[UB]] : i32
func.func @paged_chained(%kp: !tile.ptr<f16>, %vp: !tile.ptr<f16>, %table: !tile.ptr<i32>, %lb: i32, %mid: i32,
                         %ub: i32, %n: i32) attributes {tile.kernel} {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c64 = arith.constant 64 : i32
  %one = arith.constant 1 : i64
  %s64 = arith.constant 64 : i64
  %page_elems = arith.constant 4096 : i32
  %q = arith.constant dense<1.0> : tensor<64x64xf16>
  %zero = arith.constant dense<0.0> : tensor<64x64xf32>
  %acc = scf.for %j = %lb to %mid step %c1 iter_args(%o = %zero) -> (tensor<64x64xf32>) : i32 {
    %entry = tile.addptr %table, %j : !tile.ptr<i32>, i32
    %page = tile.load_scalar %entry : !tile.ptr<i32> -> i32
    %off = arith.muli %page, %page_elems : i32
    %col0 = arith.muli %j, %c64 : i32
    %left = arith.subi %n, %col0 : i32
    %kb = tile.addptr %kp, %off : !tile.ptr<f16>, i32
    %vb = tile.addptr %vp, %off : !tile.ptr<f16>, i32
    %kv = tile.view %kb sizes(%left, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
    %vv = tile.view %vb sizes(%left, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
    %k = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %v = tile.load %vv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %k, %zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    %p = arith.truncf %s : tensor<64x64xf32> to tensor<64x64xf16>
    %o2 = tile.dot %p, %v, %o : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    scf.yield %o2 : tensor<64x64xf32>
  } {tile.blocks = #tile<blocks full>}
  %acc2 = scf.for %j = %mid to %ub step %c1 iter_args(%o = %acc) -> (tensor<64x64xf32>) : i32 {
    %entry = tile.addptr %table, %j : !tile.ptr<i32>, i32
    %page = tile.load_scalar %entry : !tile.ptr<i32> -> i32
    %off = arith.muli %page, %page_elems : i32
    %col0 = arith.muli %j, %c64 : i32
    %left = arith.subi %n, %col0 : i32
    %kb = tile.addptr %kp, %off : !tile.ptr<f16>, i32
    %vb = tile.addptr %vp, %off : !tile.ptr<f16>, i32
    %kv = tile.view %kb sizes(%left, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
    %vv = tile.view %vb sizes(%left, %c64) strides(%s64, %one) : !tile.ptr<f16> -> !tile.view<f16, 2>
    %k = tile.load %kv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %v = tile.load %vv[%c0, %c0] padding = zero : !tile.view<f16, 2> -> tensor<64x64xf16>
    %s = tile.dot %q, %k, %zero transpose_b : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    %neg = arith.negf %s : tensor<64x64xf32>
    %p = arith.truncf %neg : tensor<64x64xf32> to tensor<64x64xf16>
    %o2 = tile.dot %p, %v, %o : tensor<64x64xf16>, tensor<64x64xf16> -> tensor<64x64xf32>
    scf.yield %o2 : tensor<64x64xf32>
  } {tile.blocks = #tile<blocks partial>}
  return
}
