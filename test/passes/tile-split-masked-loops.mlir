// RUN: tile-opt %s --tile-split-masked-loops --split-input-file --verify-diagnostics | FileCheck %s

// Keys past a runtime seqlen_k: full blocks run without the mask, the last
// (partial) block keeps it; nothing is skipped inside [0, cdiv(seqlen_k, 16)).
// CHECK-LABEL: func.func @seqlen_bound(
// CHECK:         scf.for
// CHECK-NOT:       arith.select
// CHECK:         } {tile.blocks = #tile<blocks full>}
// CHECK:         scf.for
// CHECK:           arith.select
// CHECK:         } {tile.blocks = #tile<blocks partial>}
// CHECK-NOT:     scf.for
func.func @seqlen_bound(%s: tensor<16x16xf32>, %seqlen_k: i32, %n: i32) -> tensor<16xf32> {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c16 = arith.constant 16 : i32
  %ninf = arith.constant dense<0xFF800000> : tensor<16x16xf32>
  %init = arith.constant dense<0xFF800000> : tensor<16xf32>
  %iota = tile.iota : tensor<16xi32>
  %bound = tile.splat %seqlen_k : i32 -> tensor<16x16xi32>
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%m = %init) -> (tensor<16xf32>) : i32 {
    %col0 = arith.muli %j, %c16 : i32
    %col0t = tile.splat %col0 : i32 -> tensor<16xi32>
    %cols1 = arith.addi %iota, %col0t : tensor<16xi32>
    %cols2 = tile.expand_dims %cols1 along 0 : tensor<16xi32> -> tensor<1x16xi32>
    %cols = tile.broadcast %cols2 : tensor<1x16xi32> -> tensor<16x16xi32>
    %keep = arith.cmpi slt, %cols, %bound : tensor<16x16xi32>
    %sm = arith.select %keep, %s, %ninf : tensor<16x16xi1>, tensor<16x16xf32>
    %rm = tile.reduce max %sm along 1 : tensor<16x16xf32> -> tensor<16xf32>
    %mn = arith.maximumf %m, %rm : tensor<16xf32>
    scf.yield %mn : tensor<16xf32>
  }
  return %r : tensor<16xf32>
}

// -----

// Causal (cols <= rows) and seqlen_k: blocks below the diagonal unmasked, exactly
// one masked block range per row block (the diagonal), blocks above it skipped:
// the masked loop ends at min(pid + 1, cdiv(seqlen_k, 16)), not at the loop's bound.
// CHECK-LABEL: func.func @causal(
// CHECK:         tile.program_id 0
// CHECK:         %[[FULL:.+]] = scf.for %{{.+}} = %{{.+}} to %[[B:[^ ]+]] step
// CHECK-NOT:       arith.select
// CHECK:         } {tile.blocks = #tile<blocks full>}
// CHECK:         %[[DIAG:.+]] = scf.for %{{.+}} = %[[B]] to %[[E:[0-9]+]] step %{{.+}} iter_args(%{{.+}} = %[[FULL]])
// CHECK:           arith.select
// CHECK:         } {tile.blocks = #tile<blocks partial>}
// CHECK-NOT:     scf.for
// CHECK:         return %[[DIAG]]
func.func @causal(%s: tensor<16x16xf32>, %seqlen_k: i32, %n: i32) -> tensor<16xf32> {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c16 = arith.constant 16 : i32
  %ninf = arith.constant dense<0xFF800000> : tensor<16x16xf32>
  %init = arith.constant dense<0xFF800000> : tensor<16xf32>
  %pid = tile.program_id 0 : i32
  %row0 = arith.muli %pid, %c16 : i32
  %iota = tile.iota : tensor<16xi32>
  %row0t = tile.splat %row0 : i32 -> tensor<16xi32>
  %rows1 = arith.addi %iota, %row0t : tensor<16xi32>
  %rows2 = tile.expand_dims %rows1 along 1 : tensor<16xi32> -> tensor<16x1xi32>
  %rows = tile.broadcast %rows2 : tensor<16x1xi32> -> tensor<16x16xi32>
  %bound = tile.splat %seqlen_k : i32 -> tensor<16x16xi32>
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%m = %init) -> (tensor<16xf32>) : i32 {
    %col0 = arith.muli %j, %c16 : i32
    %col0t = tile.splat %col0 : i32 -> tensor<16xi32>
    %cols1 = arith.addi %iota, %col0t : tensor<16xi32>
    %cols2 = tile.expand_dims %cols1 along 0 : tensor<16xi32> -> tensor<1x16xi32>
    %cols = tile.broadcast %cols2 : tensor<1x16xi32> -> tensor<16x16xi32>
    %inb = arith.cmpi slt, %cols, %bound : tensor<16x16xi32>
    %causal = arith.cmpi sle, %cols, %rows : tensor<16x16xi32>
    %keep = arith.andi %inb, %causal : tensor<16x16xi1>
    %sm = arith.select %keep, %s, %ninf : tensor<16x16xi1>, tensor<16x16xf32>
    %rm = tile.reduce max %sm along 1 : tensor<16x16xf32> -> tensor<16xf32>
    %mn = arith.maximumf %m, %rm : tensor<16xf32>
    scf.yield %mn : tensor<16xf32>
  }
  return %r : tensor<16xf32>
}

// -----

// Sliding window (rows - 32 <= cols <= rows): blocks left of the window are
// skipped, then masked / unmasked / masked blocks; the window's left edge has
// a negative coefficient on the loop variable, so the first loop starts at a
// computed bound.
// The left range tests only the left edge (the right one holds on its whole
// blocks there); blocks that both edges cut (a window narrower than the
// blocks, when no block is unmasked) join the right range, which starts at
// select(m < b, m, d) and tests both.
// CHECK-LABEL: func.func @sliding_window(
// CHECK:         %[[R:[0-9]+]] = arith.select %{{[0-9]+}}, %[[M:[0-9]+]], %{{[0-9]+}} : i32
// CHECK-NEXT:    scf.for %{{.+}} = %[[START:[^ ]+]] to %[[M]] step
// CHECK:           %[[YES:.+]] = arith.constant dense<true> : tensor<16x16xi1>
// CHECK-NEXT:      arith.cmpi sle
// CHECK-NEXT:      %[[L:.+]] = arith.cmpi sge
// CHECK-NEXT:      %[[K:.+]] = arith.andi %[[L]], %[[YES]]
// CHECK-NEXT:      arith.select %[[K]]
// CHECK:         } {tile.blocks = #tile<blocks partial>}
// CHECK-NEXT:    scf.for %{{.+}} = %[[M]] to %[[R]] step
// CHECK-NOT:       arith.select
// CHECK:         } {tile.blocks = #tile<blocks full>}
// CHECK-NEXT:    scf.for %{{.+}} = %[[R]] to
// CHECK:           %[[R3:.+]] = arith.cmpi sle
// CHECK-NEXT:      %[[L3:.+]] = arith.cmpi sge
// CHECK-NEXT:      %[[K3:.+]] = arith.andi %[[L3]], %[[R3]]
// CHECK-NEXT:      arith.select %[[K3]]
// CHECK:         } {tile.blocks = #tile<blocks partial>}
func.func @sliding_window(%s: tensor<16x16xf32>, %n: i32) -> tensor<16xf32> {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c16 = arith.constant 16 : i32
  %w = arith.constant dense<32> : tensor<16x16xi32>
  %ninf = arith.constant dense<0xFF800000> : tensor<16x16xf32>
  %init = arith.constant dense<0xFF800000> : tensor<16xf32>
  %pid = tile.program_id 0 : i32
  %row0 = arith.muli %pid, %c16 : i32
  %iota = tile.iota : tensor<16xi32>
  %row0t = tile.splat %row0 : i32 -> tensor<16xi32>
  %rows1 = arith.addi %iota, %row0t : tensor<16xi32>
  %rows2 = tile.expand_dims %rows1 along 1 : tensor<16xi32> -> tensor<16x1xi32>
  %rows = tile.broadcast %rows2 : tensor<16x1xi32> -> tensor<16x16xi32>
  %lo = arith.subi %rows, %w : tensor<16x16xi32>
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%m = %init) -> (tensor<16xf32>) : i32 {
    %col0 = arith.muli %j, %c16 : i32
    %col0t = tile.splat %col0 : i32 -> tensor<16xi32>
    %cols1 = arith.addi %iota, %col0t : tensor<16xi32>
    %cols2 = tile.expand_dims %cols1 along 0 : tensor<16xi32> -> tensor<1x16xi32>
    %cols = tile.broadcast %cols2 : tensor<1x16xi32> -> tensor<16x16xi32>
    %right = arith.cmpi sle, %cols, %rows : tensor<16x16xi32>
    %left = arith.cmpi sge, %cols, %lo : tensor<16x16xi32>
    %keep = arith.andi %left, %right : tensor<16x16xi1>
    %sm = arith.select %keep, %s, %ninf : tensor<16x16xi1>, tensor<16x16xf32>
    %rm = tile.reduce max %sm along 1 : tensor<16x16xf32> -> tensor<16xf32>
    %mn = arith.maximumf %m, %rm : tensor<16xf32>
    scf.yield %mn : tensor<16xf32>
  }
  return %r : tensor<16xf32>
}

// -----

// A mask that depends on data (a loaded tile) cannot be analysed: the loop is
// left alone, the mask applied in every iteration, and a remark says why.
// CHECK-LABEL: func.func @data_dependent_mask(
// CHECK:         scf.for
// CHECK:           arith.select
// CHECK-NOT:     tile.blocks
func.func @data_dependent_mask(%s: tensor<16x16xf32>, %ids: tensor<16x16xi32>, %n: i32) -> tensor<16xf32> {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c16 = arith.constant 16 : i32
  %ninf = arith.constant dense<0xFF800000> : tensor<16x16xf32>
  %init = arith.constant dense<0xFF800000> : tensor<16xf32>
  %iota = tile.iota : tensor<16xi32>
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%m = %init) -> (tensor<16xf32>) : i32 {
    %col0 = arith.muli %j, %c16 : i32
    %col0t = tile.splat %col0 : i32 -> tensor<16xi32>
    %cols1 = arith.addi %iota, %col0t : tensor<16xi32>
    %cols2 = tile.expand_dims %cols1 along 0 : tensor<16xi32> -> tensor<1x16xi32>
    %cols = tile.broadcast %cols2 : tensor<1x16xi32> -> tensor<16x16xi32>
    %keep = arith.cmpi slt, %cols, %ids : tensor<16x16xi32>
    // expected-remark @below {{mask stays applied in every iteration: block argument #1 of 'func.func' is not an affine index tile}}
    %sm = arith.select %keep, %s, %ninf : tensor<16x16xi1>, tensor<16x16xf32>
    %rm = tile.reduce max %sm along 1 : tensor<16x16xf32> -> tensor<16xf32>
    %mn = arith.maximumf %m, %rm : tensor<16xf32>
    scf.yield %mn : tensor<16xf32>
  }
  return %r : tensor<16xf32>
}

// -----

// A '!=' predicate is not an interval in the loop variable: kept, with a remark.
// CHECK-LABEL: func.func @equality_mask(
// CHECK:         scf.for
// CHECK:           arith.select
// CHECK-NOT:     tile.blocks
func.func @equality_mask(%s: tensor<16x16xf32>, %n: i32) -> tensor<16xf32> {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c16 = arith.constant 16 : i32
  %ninf = arith.constant dense<0xFF800000> : tensor<16x16xf32>
  %init = arith.constant dense<0xFF800000> : tensor<16xf32>
  %iota = tile.iota : tensor<16xi32>
  %five = arith.constant dense<5> : tensor<16x16xi32>
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%m = %init) -> (tensor<16xf32>) : i32 {
    %col0 = arith.muli %j, %c16 : i32
    %col0t = tile.splat %col0 : i32 -> tensor<16xi32>
    %cols1 = arith.addi %iota, %col0t : tensor<16xi32>
    %cols2 = tile.expand_dims %cols1 along 0 : tensor<16xi32> -> tensor<1x16xi32>
    %cols = tile.broadcast %cols2 : tensor<1x16xi32> -> tensor<16x16xi32>
    %keep = arith.cmpi ne, %cols, %five : tensor<16x16xi32>
    // expected-remark @below {{mask stays applied in every iteration: only signed <, <=, >, >= and == comparisons are analysed, got 'ne'}}
    %sm = arith.select %keep, %s, %ninf : tensor<16x16xi1>, tensor<16x16xf32>
    %rm = tile.reduce max %sm along 1 : tensor<16x16xf32> -> tensor<16xf32>
    %mn = arith.maximumf %m, %rm : tensor<16xf32>
    scf.yield %mn : tensor<16xf32>
  }
  return %r : tensor<16xf32>
}

// -----

// The DSL writes `cols < seqlen_k` on the 1xN column vector and broadcasts
// the i1 result: the comparison is analysed through the broadcast, and the
// loop splits exactly as when the compare is made on the full tile.
// CHECK-LABEL: func.func @broadcast_predicate(
// CHECK:         scf.for
// CHECK-NOT:       arith.select
// CHECK:         } {tile.blocks = #tile<blocks full>}
// CHECK:         scf.for
// CHECK:           arith.select
// CHECK:         } {tile.blocks = #tile<blocks partial>}
// CHECK-NOT:     scf.for
func.func @broadcast_predicate(%s: tensor<16x16xf32>, %seqlen_k: i32, %n: i32) -> tensor<16xf32> {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c16 = arith.constant 16 : i32
  %ninf = arith.constant dense<0xFF800000> : tensor<16x16xf32>
  %init = arith.constant dense<0xFF800000> : tensor<16xf32>
  %iota = tile.iota : tensor<16xi32>
  %bound = tile.splat %seqlen_k : i32 -> tensor<1x16xi32>
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%m = %init) -> (tensor<16xf32>) : i32 {
    %col0 = arith.muli %j, %c16 : i32
    %col0t = tile.splat %col0 : i32 -> tensor<16xi32>
    %cols1 = arith.addi %iota, %col0t : tensor<16xi32>
    %cols = tile.expand_dims %cols1 along 0 : tensor<16xi32> -> tensor<1x16xi32>
    %keep1 = arith.cmpi slt, %cols, %bound : tensor<1x16xi32>
    %keep = tile.broadcast %keep1 : tensor<1x16xi1> -> tensor<16x16xi1>
    %sm = arith.select %keep, %s, %ninf : tensor<16x16xi1>, tensor<16x16xf32>
    %rm = tile.reduce max %sm along 1 : tensor<16x16xf32> -> tensor<16xf32>
    %mn = arith.maximumf %m, %rm : tensor<16xf32>
    scf.yield %mn : tensor<16xf32>
  }
  return %r : tensor<16xf32>
}

// -----

// Varlen: seqlen_k = cu[b + 1] - cu[b] read with tile.load_scalar before the
// loop is a loop-invariant scalar like a parameter: the key-padding mask
// splits the same way, its bound computed from the loaded values.
// CHECK-LABEL: func.func @loaded_seqlen(
// CHECK:         %[[START:.+]] = tile.load_scalar
// CHECK:         %[[END:.+]] = tile.load_scalar
// CHECK:         %[[LEN:.+]] = arith.subi %[[END]], %[[START]]
// CHECK:         scf.for
// CHECK-NOT:       arith.select
// CHECK:         } {tile.blocks = #tile<blocks full>}
// CHECK:         scf.for
// CHECK:           arith.select
// CHECK:         } {tile.blocks = #tile<blocks partial>}
// CHECK-NOT:     scf.for
func.func @loaded_seqlen(%s: tensor<16x16xf32>, %cu: !tile.ptr<i32>, %b: i32) -> tensor<16xf32> {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c15 = arith.constant 15 : i32
  %c16 = arith.constant 16 : i32
  %p0 = tile.addptr %cu, %b : !tile.ptr<i32>, i32
  %start = tile.load_scalar %p0 : !tile.ptr<i32> -> i32
  %p1 = tile.addptr %p0, %c1 : !tile.ptr<i32>, i32
  %end = tile.load_scalar %p1 : !tile.ptr<i32> -> i32
  %seqlen_k = arith.subi %end, %start : i32
  %sum = arith.addi %seqlen_k, %c15 : i32
  %n = arith.divsi %sum, %c16 : i32
  %ninf = arith.constant dense<0xFF800000> : tensor<16x16xf32>
  %init = arith.constant dense<0xFF800000> : tensor<16xf32>
  %iota = tile.iota : tensor<16xi32>
  %bound = tile.splat %seqlen_k : i32 -> tensor<16x16xi32>
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%m = %init) -> (tensor<16xf32>) : i32 {
    %col0 = arith.muli %j, %c16 : i32
    %col0t = tile.splat %col0 : i32 -> tensor<16xi32>
    %cols1 = arith.addi %iota, %col0t : tensor<16xi32>
    %cols2 = tile.expand_dims %cols1 along 0 : tensor<16xi32> -> tensor<1x16xi32>
    %cols = tile.broadcast %cols2 : tensor<1x16xi32> -> tensor<16x16xi32>
    %keep = arith.cmpi slt, %cols, %bound : tensor<16x16xi32>
    %sm = arith.select %keep, %s, %ninf : tensor<16x16xi1>, tensor<16x16xf32>
    %rm = tile.reduce max %sm along 1 : tensor<16x16xf32> -> tensor<16xf32>
    %mn = arith.maximumf %m, %rm : tensor<16xf32>
    scf.yield %mn : tensor<16xf32>
  }
  return %r : tensor<16xf32>
}

// -----

// Prefix-LM, (cols < 20) | (cols <= rows), an OR: blocks inside either
// disjunct's unmasked range run without the mask (the two ranges touch, so
// their hull), blocks outside both live ranges are skipped; the kernel is
// marked split.
// CHECK-LABEL: func.func @prefix_lm(
// CHECK-SAME:    tile.mask = "split"
// CHECK:         scf.for
// CHECK:           arith.select
// CHECK:         } {tile.blocks = #tile<blocks partial>}
// CHECK:         scf.for
// CHECK-NOT:       arith.select
// CHECK:         } {tile.blocks = #tile<blocks full>}
// CHECK:         scf.for
// CHECK:           arith.select
// CHECK:         } {tile.blocks = #tile<blocks partial>}
// CHECK-NOT:     scf.for
func.func @prefix_lm(%s: tensor<16x16xf32>, %seqlen_k: i32, %n: i32) -> tensor<16xf32> {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c16 = arith.constant 16 : i32
  %ninf = arith.constant dense<0xFF800000> : tensor<16x16xf32>
  %init = arith.constant dense<0xFF800000> : tensor<16xf32>
  %pid = tile.program_id 0 : i32
  %row0 = arith.muli %pid, %c16 : i32
  %iota = tile.iota : tensor<16xi32>
  %row0t = tile.splat %row0 : i32 -> tensor<16xi32>
  %rows1 = arith.addi %iota, %row0t : tensor<16xi32>
  %rows2 = tile.expand_dims %rows1 along 1 : tensor<16xi32> -> tensor<16x1xi32>
  %rows = tile.broadcast %rows2 : tensor<16x1xi32> -> tensor<16x16xi32>
  %bound = tile.splat %seqlen_k : i32 -> tensor<16x16xi32>
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%m = %init) -> (tensor<16xf32>) : i32 {
    %col0 = arith.muli %j, %c16 : i32
    %col0t = tile.splat %col0 : i32 -> tensor<16xi32>
    %cols1 = arith.addi %iota, %col0t : tensor<16xi32>
    %cols2 = tile.expand_dims %cols1 along 0 : tensor<16xi32> -> tensor<1x16xi32>
    %cols = tile.broadcast %cols2 : tensor<1x16xi32> -> tensor<16x16xi32>
    %inb = arith.cmpi slt, %cols, %bound : tensor<16x16xi32>
    %c20 = arith.constant dense<20> : tensor<16x16xi32>
    %prefix = arith.cmpi slt, %cols, %c20 : tensor<16x16xi32>
    %causal = arith.cmpi sle, %cols, %rows : tensor<16x16xi32>
    %either = arith.ori %prefix, %causal : tensor<16x16xi1>
    %keep = arith.andi %inb, %either : tensor<16x16xi1>
    %sm = arith.select %keep, %s, %ninf : tensor<16x16xi1>, tensor<16x16xf32>
    %rm = tile.reduce max %sm along 1 : tensor<16x16xf32> -> tensor<16xf32>
    %mn = arith.maximumf %m, %rm : tensor<16xf32>
    scf.yield %mn : tensor<16xf32>
  }
  return %r : tensor<16xf32>
}

// -----

// Chunked attention, rows / 24 == cols / 24 (division by a constant, an
// equality): the key side is rewritten pointwise (cols / 24 <= t iff
// cols <= 24*t + 23), the row side bounded by dividing the rows' extremes;
// blocks inside the row block's chunk run unmasked.
// CHECK-LABEL: func.func @chunked(
// CHECK:         arith.divsi
// CHECK:         scf.for
// CHECK:           arith.select
// CHECK:         } {tile.blocks = #tile<blocks partial>}
// CHECK:         scf.for
// CHECK-NOT:       arith.select
// CHECK:         } {tile.blocks = #tile<blocks full>}
// CHECK:         scf.for
// CHECK:           arith.select
// CHECK:         } {tile.blocks = #tile<blocks partial>}
// CHECK-NOT:     scf.for
func.func @chunked(%s: tensor<16x16xf32>, %seqlen_k: i32, %n: i32) -> tensor<16xf32> {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c16 = arith.constant 16 : i32
  %ninf = arith.constant dense<0xFF800000> : tensor<16x16xf32>
  %init = arith.constant dense<0xFF800000> : tensor<16xf32>
  %pid = tile.program_id 0 : i32
  %row0 = arith.muli %pid, %c16 : i32
  %iota = tile.iota : tensor<16xi32>
  %row0t = tile.splat %row0 : i32 -> tensor<16xi32>
  %rows1 = arith.addi %iota, %row0t : tensor<16xi32>
  %rows2 = tile.expand_dims %rows1 along 1 : tensor<16xi32> -> tensor<16x1xi32>
  %rows = tile.broadcast %rows2 : tensor<16x1xi32> -> tensor<16x16xi32>
  %bound = tile.splat %seqlen_k : i32 -> tensor<16x16xi32>
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%m = %init) -> (tensor<16xf32>) : i32 {
    %col0 = arith.muli %j, %c16 : i32
    %col0t = tile.splat %col0 : i32 -> tensor<16xi32>
    %cols1 = arith.addi %iota, %col0t : tensor<16xi32>
    %cols2 = tile.expand_dims %cols1 along 0 : tensor<16xi32> -> tensor<1x16xi32>
    %cols = tile.broadcast %cols2 : tensor<1x16xi32> -> tensor<16x16xi32>
    %inb = arith.cmpi slt, %cols, %bound : tensor<16x16xi32>
    %c24 = arith.constant dense<24> : tensor<16x16xi32>
    %qc = arith.divsi %rows, %c24 : tensor<16x16xi32>
    %kc = arith.divsi %cols, %c24 : tensor<16x16xi32>
    %same = arith.cmpi eq, %qc, %kc : tensor<16x16xi32>
    %keep = arith.andi %inb, %same : tensor<16x16xi1>
    %sm = arith.select %keep, %s, %ninf : tensor<16x16xi1>, tensor<16x16xf32>
    %rm = tile.reduce max %sm along 1 : tensor<16x16xf32> -> tensor<16xf32>
    %mn = arith.maximumf %m, %rm : tensor<16xf32>
    scf.yield %mn : tensor<16xf32>
  }
  return %r : tensor<16xf32>
}

// -----

// A conjunct that does not depend on the loop variable (rows < %limit) is a
// per-program constant: where it holds on the whole row block the blocks
// split as for seqlen_k alone, where it fails everywhere no block runs (a
// select on the per-program test picks the ranges).
// CHECK-LABEL: func.func @key_independent(
// CHECK:         arith.cmpi sle
// CHECK:         arith.select
// CHECK:         scf.for
// CHECK:           arith.select
// CHECK:         } {tile.blocks = #tile<blocks partial>}
// CHECK:         scf.for
// CHECK-NOT:       arith.select
// CHECK:         } {tile.blocks = #tile<blocks full>}
// CHECK:         scf.for
// CHECK:           arith.select
// CHECK:         } {tile.blocks = #tile<blocks partial>}
// CHECK-NOT:     scf.for
func.func @key_independent(%s: tensor<16x16xf32>, %seqlen_k: i32, %n: i32, %limit: i32) -> tensor<16xf32> {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c16 = arith.constant 16 : i32
  %ninf = arith.constant dense<0xFF800000> : tensor<16x16xf32>
  %init = arith.constant dense<0xFF800000> : tensor<16xf32>
  %pid = tile.program_id 0 : i32
  %row0 = arith.muli %pid, %c16 : i32
  %iota = tile.iota : tensor<16xi32>
  %row0t = tile.splat %row0 : i32 -> tensor<16xi32>
  %rows1 = arith.addi %iota, %row0t : tensor<16xi32>
  %rows2 = tile.expand_dims %rows1 along 1 : tensor<16xi32> -> tensor<16x1xi32>
  %rows = tile.broadcast %rows2 : tensor<16x1xi32> -> tensor<16x16xi32>
  %bound = tile.splat %seqlen_k : i32 -> tensor<16x16xi32>
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%m = %init) -> (tensor<16xf32>) : i32 {
    %col0 = arith.muli %j, %c16 : i32
    %col0t = tile.splat %col0 : i32 -> tensor<16xi32>
    %cols1 = arith.addi %iota, %col0t : tensor<16xi32>
    %cols2 = tile.expand_dims %cols1 along 0 : tensor<16xi32> -> tensor<1x16xi32>
    %cols = tile.broadcast %cols2 : tensor<1x16xi32> -> tensor<16x16xi32>
    %inb = arith.cmpi slt, %cols, %bound : tensor<16x16xi32>
    %lim = tile.splat %limit : i32 -> tensor<16x16xi32>
    %few = arith.cmpi slt, %rows, %lim : tensor<16x16xi32>
    %keep = arith.andi %inb, %few : tensor<16x16xi1>
    %sm = arith.select %keep, %s, %ninf : tensor<16x16xi1>, tensor<16x16xf32>
    %rm = tile.reduce max %sm along 1 : tensor<16x16xf32> -> tensor<16xf32>
    %mn = arith.maximumf %m, %rm : tensor<16xf32>
    scf.yield %mn : tensor<16xf32>
  }
  return %r : tensor<16xf32>
}

// -----

// Two masking selects in a chain (a score_mod that masks with -inf, then
// the kernel's mask): the unmasked loop drops both, blocks either one hides
// are skipped.
// CHECK-LABEL: func.func @two_masks(
// CHECK:         scf.for
// CHECK-COUNT-2:   arith.select
// CHECK:         } {tile.blocks = #tile<blocks partial>}
// CHECK:         scf.for
// CHECK-NOT:       arith.select
// CHECK:         } {tile.blocks = #tile<blocks full>}
// CHECK:         scf.for
// CHECK-COUNT-2:   arith.select
// CHECK:         } {tile.blocks = #tile<blocks partial>}
// CHECK-NOT:     scf.for
func.func @two_masks(%s: tensor<16x16xf32>, %seqlen_k: i32, %n: i32) -> tensor<16xf32> {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c16 = arith.constant 16 : i32
  %ninf = arith.constant dense<0xFF800000> : tensor<16x16xf32>
  %init = arith.constant dense<0xFF800000> : tensor<16xf32>
  %pid = tile.program_id 0 : i32
  %row0 = arith.muli %pid, %c16 : i32
  %iota = tile.iota : tensor<16xi32>
  %row0t = tile.splat %row0 : i32 -> tensor<16xi32>
  %rows1 = arith.addi %iota, %row0t : tensor<16xi32>
  %rows2 = tile.expand_dims %rows1 along 1 : tensor<16xi32> -> tensor<16x1xi32>
  %rows = tile.broadcast %rows2 : tensor<16x1xi32> -> tensor<16x16xi32>
  %bound = tile.splat %seqlen_k : i32 -> tensor<16x16xi32>
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%m = %init) -> (tensor<16xf32>) : i32 {
    %col0 = arith.muli %j, %c16 : i32
    %col0t = tile.splat %col0 : i32 -> tensor<16xi32>
    %cols1 = arith.addi %iota, %col0t : tensor<16xi32>
    %cols2 = tile.expand_dims %cols1 along 0 : tensor<16xi32> -> tensor<1x16xi32>
    %cols = tile.broadcast %cols2 : tensor<1x16xi32> -> tensor<16x16xi32>
    %inb = arith.cmpi slt, %cols, %bound : tensor<16x16xi32>
    %causal = arith.cmpi sle, %cols, %rows : tensor<16x16xi32>
    %s1 = arith.select %causal, %s, %ninf : tensor<16x16xi1>, tensor<16x16xf32>
    %sm = arith.select %inb, %s1, %ninf : tensor<16x16xi1>, tensor<16x16xf32>
    %rm = tile.reduce max %sm along 1 : tensor<16x16xf32> -> tensor<16xf32>
    %mn = arith.maximumf %m, %rm : tensor<16xf32>
    scf.yield %mn : tensor<16xf32>
  }
  return %r : tensor<16xf32>
}

// -----

// An equality of positions (cols == rows, the diagonal) is two conjuncts,
// <= and >=: no block is entirely true, so no unmasked loop has iterations,
// and blocks off the diagonal are skipped.
// CHECK-LABEL: func.func @diagonal(
// CHECK:         scf.for
// CHECK:           arith.select
// CHECK:         } {tile.blocks = #tile<blocks partial>}
// CHECK:         scf.for
// CHECK-NOT:       arith.select
// CHECK:         } {tile.blocks = #tile<blocks full>}
// CHECK:         scf.for
// CHECK:           arith.select
// CHECK:         } {tile.blocks = #tile<blocks partial>}
// CHECK-NOT:     scf.for
func.func @diagonal(%s: tensor<16x16xf32>, %seqlen_k: i32, %n: i32) -> tensor<16xf32> {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c16 = arith.constant 16 : i32
  %ninf = arith.constant dense<0xFF800000> : tensor<16x16xf32>
  %init = arith.constant dense<0xFF800000> : tensor<16xf32>
  %pid = tile.program_id 0 : i32
  %row0 = arith.muli %pid, %c16 : i32
  %iota = tile.iota : tensor<16xi32>
  %row0t = tile.splat %row0 : i32 -> tensor<16xi32>
  %rows1 = arith.addi %iota, %row0t : tensor<16xi32>
  %rows2 = tile.expand_dims %rows1 along 1 : tensor<16xi32> -> tensor<16x1xi32>
  %rows = tile.broadcast %rows2 : tensor<16x1xi32> -> tensor<16x16xi32>
  %bound = tile.splat %seqlen_k : i32 -> tensor<16x16xi32>
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%m = %init) -> (tensor<16xf32>) : i32 {
    %col0 = arith.muli %j, %c16 : i32
    %col0t = tile.splat %col0 : i32 -> tensor<16xi32>
    %cols1 = arith.addi %iota, %col0t : tensor<16xi32>
    %cols2 = tile.expand_dims %cols1 along 0 : tensor<16xi32> -> tensor<1x16xi32>
    %cols = tile.broadcast %cols2 : tensor<1x16xi32> -> tensor<16x16xi32>
    %inb = arith.cmpi slt, %cols, %bound : tensor<16x16xi32>
    %diag = arith.cmpi eq, %cols, %rows : tensor<16x16xi32>
    %keep = arith.andi %inb, %diag : tensor<16x16xi1>
    %sm = arith.select %keep, %s, %ninf : tensor<16x16xi1>, tensor<16x16xf32>
    %rm = tile.reduce max %sm along 1 : tensor<16x16xf32> -> tensor<16xf32>
    %mn = arith.maximumf %m, %rm : tensor<16xf32>
    scf.yield %mn : tensor<16xf32>
  }
  return %r : tensor<16xf32>
}

// -----

// A conjunct on loaded data (document ids) cannot be classified: every
// block that runs stays masked, but the affine conjunct (causal) still skips
// the blocks above the diagonal; the kernel is marked dense, with the note.
// CHECK-LABEL: func.func @partly_unknown(
// CHECK-SAME:    tile.mask = "dense"
// CHECK-SAME:    tile.mask_note = "mask applied in every block that runs
// CHECK:         scf.for
// CHECK:           arith.select
// CHECK:         } {tile.blocks = #tile<blocks partial>}
// CHECK-NOT:     scf.for
func.func @partly_unknown(%s: tensor<16x16xf32>, %seqlen_k: i32, %n: i32, %ids: tensor<16x16xi32>) -> tensor<16xf32> {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c16 = arith.constant 16 : i32
  %ninf = arith.constant dense<0xFF800000> : tensor<16x16xf32>
  %init = arith.constant dense<0xFF800000> : tensor<16xf32>
  %pid = tile.program_id 0 : i32
  %row0 = arith.muli %pid, %c16 : i32
  %iota = tile.iota : tensor<16xi32>
  %row0t = tile.splat %row0 : i32 -> tensor<16xi32>
  %rows1 = arith.addi %iota, %row0t : tensor<16xi32>
  %rows2 = tile.expand_dims %rows1 along 1 : tensor<16xi32> -> tensor<16x1xi32>
  %rows = tile.broadcast %rows2 : tensor<16x1xi32> -> tensor<16x16xi32>
  %bound = tile.splat %seqlen_k : i32 -> tensor<16x16xi32>
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%m = %init) -> (tensor<16xf32>) : i32 {
    %col0 = arith.muli %j, %c16 : i32
    %col0t = tile.splat %col0 : i32 -> tensor<16xi32>
    %cols1 = arith.addi %iota, %col0t : tensor<16xi32>
    %cols2 = tile.expand_dims %cols1 along 0 : tensor<16xi32> -> tensor<1x16xi32>
    %cols = tile.broadcast %cols2 : tensor<1x16xi32> -> tensor<16x16xi32>
    %inb = arith.cmpi slt, %cols, %bound : tensor<16x16xi32>
    %causal = arith.cmpi sle, %cols, %rows : tensor<16x16xi32>
    %doc = arith.cmpi eq, %cols, %ids : tensor<16x16xi32>
    %both = arith.andi %causal, %doc : tensor<16x16xi1>
    %keep = arith.andi %inb, %both : tensor<16x16xi1>
    // expected-remark @below {{mask applied in every block that runs (blocks it hides entirely are skipped): block argument #3 of 'func.func' is not an affine index tile}}
    %sm = arith.select %keep, %s, %ninf : tensor<16x16xi1>, tensor<16x16xf32>
    %rm = tile.reduce max %sm along 1 : tensor<16x16xf32> -> tensor<16xf32>
    %mn = arith.maximumf %m, %rm : tensor<16xf32>
    scf.yield %mn : tensor<16xf32>
  }
  return %r : tensor<16xf32>
}

// -----

// A predicate with no part that can be classified (rows*rows is not affine)
// bounds nothing and makes no block surely true: the loop is left alone,
// the kernel marked dense, and the remark points at the comparison.
// CHECK-LABEL: func.func @not_affine(
// CHECK-SAME:    tile.mask = "dense"
// CHECK:         scf.for
// CHECK:           arith.select
// CHECK-NOT:     tile.blocks
func.func @not_affine(%s: tensor<16x16xf32>, %seqlen_k: i32, %n: i32) -> tensor<16xf32> {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c16 = arith.constant 16 : i32
  %ninf = arith.constant dense<0xFF800000> : tensor<16x16xf32>
  %init = arith.constant dense<0xFF800000> : tensor<16xf32>
  %pid = tile.program_id 0 : i32
  %row0 = arith.muli %pid, %c16 : i32
  %iota = tile.iota : tensor<16xi32>
  %row0t = tile.splat %row0 : i32 -> tensor<16xi32>
  %rows1 = arith.addi %iota, %row0t : tensor<16xi32>
  %rows2 = tile.expand_dims %rows1 along 1 : tensor<16xi32> -> tensor<16x1xi32>
  %rows = tile.broadcast %rows2 : tensor<16x1xi32> -> tensor<16x16xi32>
  %bound = tile.splat %seqlen_k : i32 -> tensor<16x16xi32>
  %r = scf.for %j = %c0 to %n step %c1 iter_args(%m = %init) -> (tensor<16xf32>) : i32 {
    %col0 = arith.muli %j, %c16 : i32
    %col0t = tile.splat %col0 : i32 -> tensor<16xi32>
    %cols1 = arith.addi %iota, %col0t : tensor<16xi32>
    %cols2 = tile.expand_dims %cols1 along 0 : tensor<16xi32> -> tensor<1x16xi32>
    %cols = tile.broadcast %cols2 : tensor<1x16xi32> -> tensor<16x16xi32>
    %inb = arith.cmpi slt, %cols, %bound : tensor<16x16xi32>
    %sq = arith.muli %rows, %rows : tensor<16x16xi32>
    %big = arith.cmpi sle, %cols, %sq : tensor<16x16xi32>
    %keep = arith.ori %big, %big : tensor<16x16xi1>
    // expected-remark @below {{mask stays applied in every iteration: 'arith.muli' result is not an affine index tile}}
    %sm = arith.select %keep, %s, %ninf : tensor<16x16xi1>, tensor<16x16xf32>
    %rm = tile.reduce max %sm along 1 : tensor<16x16xf32> -> tensor<16xf32>
    %mn = arith.maximumf %m, %rm : tensor<16xf32>
    scf.yield %mn : tensor<16xf32>
  }
  return %r : tensor<16xf32>
}

// -----

// Causal with an atomic add into memory of a value computed from the mask
// (FA2's dQ: the block's contribution to an accumulator in memory): blocks
// above the diagonal are skipped as for a carried accumulator; the masked
// loop ends at the diagonal, not at the loop's bound %n.
// CHECK-LABEL: func.func @causal_atomic_add(
// CHECK:         scf.for
// CHECK:           tile.atomic_add
// CHECK:         } {tile.blocks = #tile<blocks full>}
// CHECK:         scf.for %{{.+}} = %{{.+}} to %[[E:[0-9]+]] step
// CHECK:           arith.select
// CHECK:           tile.atomic_add
// CHECK:         } {tile.blocks = #tile<blocks partial>}
// CHECK-NOT:     scf.for
func.func @causal_atomic_add(%s: tensor<16x16xf32>, %seqlen_k: i32, %n: i32, %acc: !tile.ptr<f32>) {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c16 = arith.constant 16 : i32
  %c1_i64 = arith.constant 1 : i64
  %c16_i64 = arith.constant 16 : i64
  %ninf = arith.constant dense<0xFF800000> : tensor<16x16xf32>
  %pid = tile.program_id 0 : i32
  %row0 = arith.muli %pid, %c16 : i32
  %iota = tile.iota : tensor<16xi32>
  %row0t = tile.splat %row0 : i32 -> tensor<16xi32>
  %rows1 = arith.addi %iota, %row0t : tensor<16xi32>
  %rows2 = tile.expand_dims %rows1 along 1 : tensor<16xi32> -> tensor<16x1xi32>
  %rows = tile.broadcast %rows2 : tensor<16x1xi32> -> tensor<16x16xi32>
  %bound = tile.splat %seqlen_k : i32 -> tensor<16x16xi32>
  %v = tile.view %acc sizes(%c16, %seqlen_k) strides(%c16_i64, %c1_i64) : !tile.ptr<f32> -> !tile.view<f32, 2>
  scf.for %j = %c0 to %n step %c1 : i32 {
    %col0 = arith.muli %j, %c16 : i32
    %col0t = tile.splat %col0 : i32 -> tensor<16xi32>
    %cols1 = arith.addi %iota, %col0t : tensor<16xi32>
    %cols2 = tile.expand_dims %cols1 along 0 : tensor<16xi32> -> tensor<1x16xi32>
    %cols = tile.broadcast %cols2 : tensor<1x16xi32> -> tensor<16x16xi32>
    %inb = arith.cmpi slt, %cols, %bound : tensor<16x16xi32>
    %causal = arith.cmpi sle, %cols, %rows : tensor<16x16xi32>
    %keep = arith.andi %inb, %causal : tensor<16x16xi1>
    %sm = arith.select %keep, %s, %ninf : tensor<16x16xi1>, tensor<16x16xf32>
    %p = math.exp %sm : tensor<16x16xf32>
    tile.atomic_add %p, %v[%c0, %col0] : tensor<16x16xf32>, !tile.view<f32, 2>
  }
  return
}

// -----

// An atomic add of something the mask does not produce (here the raw
// scores) is not zero on a hidden block: nothing is skipped, the masked loop
// runs to the loop's bound %n.
// CHECK-LABEL: func.func @causal_atomic_add_unmasked_value(
// CHECK-SAME:    %{{[^:]+}}: tensor<16x16xf32>, %{{[^:]+}}: i32, %[[N:[^:]+]]: i32,
// CHECK:         scf.for
// CHECK:         } {tile.blocks = #tile<blocks full>}
// CHECK:         scf.for %{{.+}} = %{{.+}} to %[[N]] step
// CHECK:         } {tile.blocks = #tile<blocks partial>}
func.func @causal_atomic_add_unmasked_value(%s: tensor<16x16xf32>, %seqlen_k: i32, %n: i32, %acc: !tile.ptr<f32>) {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %c16 = arith.constant 16 : i32
  %c1_i64 = arith.constant 1 : i64
  %c16_i64 = arith.constant 16 : i64
  %ninf = arith.constant dense<0xFF800000> : tensor<16x16xf32>
  %pid = tile.program_id 0 : i32
  %row0 = arith.muli %pid, %c16 : i32
  %iota = tile.iota : tensor<16xi32>
  %row0t = tile.splat %row0 : i32 -> tensor<16xi32>
  %rows1 = arith.addi %iota, %row0t : tensor<16xi32>
  %rows2 = tile.expand_dims %rows1 along 1 : tensor<16xi32> -> tensor<16x1xi32>
  %rows = tile.broadcast %rows2 : tensor<16x1xi32> -> tensor<16x16xi32>
  %bound = tile.splat %seqlen_k : i32 -> tensor<16x16xi32>
  %v = tile.view %acc sizes(%c16, %seqlen_k) strides(%c16_i64, %c1_i64) : !tile.ptr<f32> -> !tile.view<f32, 2>
  scf.for %j = %c0 to %n step %c1 : i32 {
    %col0 = arith.muli %j, %c16 : i32
    %col0t = tile.splat %col0 : i32 -> tensor<16xi32>
    %cols1 = arith.addi %iota, %col0t : tensor<16xi32>
    %cols2 = tile.expand_dims %cols1 along 0 : tensor<16xi32> -> tensor<1x16xi32>
    %cols = tile.broadcast %cols2 : tensor<1x16xi32> -> tensor<16x16xi32>
    %inb = arith.cmpi slt, %cols, %bound : tensor<16x16xi32>
    %causal = arith.cmpi sle, %cols, %rows : tensor<16x16xi32>
    %keep = arith.andi %inb, %causal : tensor<16x16xi1>
    %sm = arith.select %keep, %s, %ninf : tensor<16x16xi1>, tensor<16x16xf32>
    %p = math.exp %sm : tensor<16x16xf32>
    tile.atomic_add %p, %v[%c0, %col0] : tensor<16x16xf32>, !tile.view<f32, 2>
    tile.atomic_add %s, %v[%c0, %col0] : tensor<16x16xf32>, !tile.view<f32, 2>
  }
  return
}
