// RUN: tile-opt %s --tile-minimize-nonmatmul --split-input-file --allow-unregistered-dialect | FileCheck %s

// A positive constant scale moves past the -inf mask: the select sees the raw scores.
// CHECK-LABEL: func.func @scale_after_mask(
// CHECK-SAME:    %[[X:.+]]: tensor<4x8xf32>, %[[C:.+]]: tensor<4x8xi1>)
// CHECK-DAG:     %[[K:.+]] = arith.constant dense<1.250000e-01> : tensor<4x8xf32>
// CHECK-DAG:     %[[NINF:.+]] = arith.constant dense<0xFF800000> : tensor<4x8xf32>
// CHECK:         %[[SEL:.+]] = arith.select %[[C]], %[[X]], %[[NINF]]
// CHECK:         %[[R:.+]] = arith.mulf %[[SEL]], %[[K]]
// CHECK:         return %[[R]]
func.func @scale_after_mask(%x: tensor<4x8xf32>, %c: tensor<4x8xi1>) -> tensor<4x8xf32> {
  %k = arith.constant dense<0.125> : tensor<4x8xf32>
  %ninf = arith.constant dense<0xFF800000> : tensor<4x8xf32>
  %s = arith.mulf %x, %k : tensor<4x8xf32>
  %m = arith.select %c, %s, %ninf : tensor<4x8xi1>, tensor<4x8xf32>
  return %m : tensor<4x8xf32>
}

// -----

// The row max of scaled scores is the scaled row max: one multiply per row, not per element.
// CHECK-LABEL: func.func @max_of_scaled(
// CHECK-SAME:    %[[X:.+]]: tensor<4x8xf32>)
// CHECK:         %[[MAX:.+]] = tile.reduce max %[[X]] along 1
// CHECK:         %[[ROWK:.+]] = tile.splat %{{.+}} : f32 -> tensor<4xf32>
// CHECK:         %[[R:.+]] = arith.mulf %[[MAX]], %[[ROWK]] : tensor<4xf32>
// CHECK:         return %[[R]]
func.func @max_of_scaled(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  %k = arith.constant 4.0 : f32
  %kt = tile.splat %k : f32 -> tensor<4x8xf32>
  %y = arith.mulf %x, %kt : tensor<4x8xf32>
  %m = tile.reduce max %y along 1 : tensor<4x8xf32> -> tensor<4xf32>
  return %m : tensor<4xf32>
}

// -----

// A negative scale turns max into min: neither the mask nor the max rewrite may fire.
// CHECK-LABEL: func.func @negative_scale_kept(
// CHECK:         %[[S:.+]] = arith.mulf
// CHECK:         %[[SEL:.+]] = arith.select %{{.+}}, %[[S]],
// CHECK:         tile.reduce max %[[SEL]] along 1
func.func @negative_scale_kept(%x: tensor<4x8xf32>, %c: tensor<4x8xi1>) -> tensor<4xf32> {
  %k = arith.constant dense<-0.125> : tensor<4x8xf32>
  %ninf = arith.constant dense<0xFF800000> : tensor<4x8xf32>
  %s = arith.mulf %x, %k : tensor<4x8xf32>
  %m = arith.select %c, %s, %ninf : tensor<4x8xi1>, tensor<4x8xf32>
  %r = tile.reduce max %m along 1 : tensor<4x8xf32> -> tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// A running max updated as max(m, r*k) is carried unscaled; its users, inside and
// after the loop, see the scaled value rebuilt per row.
// CHECK-LABEL: func.func @running_max_unscaled(
// CHECK:         %[[KROW:.+]] = arith.constant dense<5.000000e-01> : tensor<4xf32>
// CHECK:         %[[RES:.+]] = scf.for {{.+}} iter_args(%[[M:.+]] = %{{.+}}) -> (tensor<4xf32>)
// CHECK:           %[[MSCALED:.+]] = arith.mulf %[[M]], %[[KROW]]
// CHECK:           %[[R:.+]] = tile.reduce max
// CHECK:           %[[NEW:.+]] = arith.maximumf %[[M]], %[[R]]
// CHECK:           %[[NEWSCALED:.+]] = arith.mulf %[[NEW]], %[[KROW]]
// CHECK:           "test.use"(%[[MSCALED]], %[[NEWSCALED]])
// CHECK:           scf.yield %[[NEW]]
// CHECK:         %[[OUT:.+]] = arith.mulf %[[RES]], %[[KROW]]
// CHECK:         return %[[OUT]]
func.func @running_max_unscaled(%x: tensor<4x8xf32>, %n: i32) -> tensor<4xf32> {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %k = arith.constant dense<0.5> : tensor<4xf32>
  %init = arith.constant dense<0xFF800000> : tensor<4xf32>
  %res = scf.for %j = %c0 to %n step %c1 iter_args(%m = %init) -> (tensor<4xf32>) : i32 {
    %r = tile.reduce max %x along 1 : tensor<4x8xf32> -> tensor<4xf32>
    %rk = arith.mulf %r, %k : tensor<4xf32>
    %new = arith.maximumf %m, %rk : tensor<4xf32>
    "test.use"(%m, %new) : (tensor<4xf32>, tensor<4xf32>) -> ()
    scf.yield %new : tensor<4xf32>
  }
  return %res : tensor<4xf32>
}

// -----

// A running max clamped from below by a constant, max(max(m, r*k), c) (rows that see
// no key keep a finite max), is carried unscaled too, clamped at c/k (-1e30 / 0.5).
// CHECK-LABEL: func.func @running_max_clamped_unscaled(
// CHECK-DAG:     %[[KROW:.+]] = arith.constant dense<5.000000e-01> : tensor<4xf32>
// CHECK-DAG:     %[[CK:.+]] = arith.constant dense<-2.000000e+30> : tensor<4xf32>
// CHECK:         %[[RES:.+]] = scf.for {{.+}} iter_args(%[[M:.+]] = %{{.+}}) -> (tensor<4xf32>)
// CHECK:           %[[R:.+]] = tile.reduce max
// CHECK:           %[[NEW:.+]] = arith.maximumf %[[M]], %[[R]]
// CHECK:           %[[CLAMPED:.+]] = arith.maximumf %[[NEW]], %[[CK]]
// CHECK:           %[[SCALED:.+]] = arith.mulf %[[CLAMPED]], %[[KROW]]
// CHECK:           "test.use"(%[[SCALED]])
// CHECK:           scf.yield %[[CLAMPED]]
// CHECK:         %[[OUT:.+]] = arith.mulf %[[RES]], %[[KROW]]
// CHECK:         return %[[OUT]]
func.func @running_max_clamped_unscaled(%x: tensor<4x8xf32>, %n: i32) -> tensor<4xf32> {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %k = arith.constant dense<0.5> : tensor<4xf32>
  %floor = arith.constant dense<-1.0e30> : tensor<4xf32>
  %init = arith.constant dense<0xFF800000> : tensor<4xf32>
  %res = scf.for %j = %c0 to %n step %c1 iter_args(%m = %init) -> (tensor<4xf32>) : i32 {
    %r = tile.reduce max %x along 1 : tensor<4x8xf32> -> tensor<4xf32>
    %rk = arith.mulf %r, %k : tensor<4xf32>
    %new = arith.maximumf %m, %rk : tensor<4xf32>
    %clamped = arith.maximumf %new, %floor : tensor<4xf32>
    "test.use"(%clamped) : (tensor<4xf32>) -> ()
    scf.yield %clamped : tensor<4xf32>
  }
  return %res : tensor<4xf32>
}

// -----

// exp on f32 tiles becomes exp2 of the argument times log2(e).
// CHECK-LABEL: func.func @exp_to_exp2(
// CHECK-SAME:    %[[X:.+]]: tensor<4x8xf32>)
// CHECK:         %[[L2E:.+]] = arith.constant dense<1.44269502> : tensor<4x8xf32>
// CHECK:         %[[A:.+]] = arith.mulf %[[X]], %[[L2E]]
// CHECK:         %[[E:.+]] = math.exp2 %[[A]]
// CHECK-NOT:     math.exp %
func.func @exp_to_exp2(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %e = math.exp %x : tensor<4x8xf32>
  return %e : tensor<4x8xf32>
}

// -----

// FA2's reassociation: exp(x*k - m*k) with m a broadcast row becomes one FMA with
// k*log2(e) folded into one constant, the row term negated per row, then exp2.
// CHECK-LABEL: func.func @fold_scale_into_difference(
// CHECK-SAME:    %[[X:.+]]: tensor<4x8xf32>, %[[M:.+]]: tensor<4xf32>)
// CHECK-DAG:     %[[KL:.+]] = arith.constant dense<0.180336878> : tensor<4x8xf32>
// CHECK-DAG:     %[[KLROW:.+]] = arith.constant dense<0.180336878> : tensor<4xf32>
// CHECK:         %[[MK:.+]] = arith.mulf %[[M]], %[[KLROW]] : tensor<4xf32>
// CHECK:         %[[NEG:.+]] = arith.negf %[[MK]] : tensor<4xf32>
// CHECK:         %[[NEGE:.+]] = tile.expand_dims %[[NEG]] along 1
// CHECK:         %[[NEGB:.+]] = tile.broadcast %[[NEGE]]
// CHECK:         %[[F:.+]] = math.fma %[[X]], %[[KL]], %[[NEGB]] : tensor<4x8xf32>
// CHECK:         math.exp2 %[[F]]
func.func @fold_scale_into_difference(%x: tensor<4x8xf32>, %m: tensor<4xf32>) -> tensor<4x8xf32> {
  %k = arith.constant dense<0.125> : tensor<4x8xf32>
  %krow = arith.constant dense<0.125> : tensor<4xf32>
  %xs = arith.mulf %x, %k : tensor<4x8xf32>
  %ms = arith.mulf %m, %krow : tensor<4xf32>
  %me = tile.expand_dims %ms along 1 : tensor<4xf32> -> tensor<4x1xf32>
  %mb = tile.broadcast %me : tensor<4x1xf32> -> tensor<4x8xf32>
  %d = arith.subf %xs, %mb : tensor<4x8xf32>
  %e = math.exp %d : tensor<4x8xf32>
  return %e : tensor<4x8xf32>
}

// -----

// x*k + y contracts to one fma (the l = l*alpha + rowsum(p) update, and lse = m*k + log l).
// CHECK-LABEL: func.func @contract_to_fma(
// CHECK-SAME:    %[[L:.+]]: tensor<4xf32>, %[[A:.+]]: tensor<4xf32>, %[[S:.+]]: tensor<4xf32>)
// CHECK:         %[[F:.+]] = math.fma %[[L]], %[[A]], %[[S]] : tensor<4xf32>
// CHECK:         return %[[F]]
func.func @contract_to_fma(%l: tensor<4xf32>, %a: tensor<4xf32>, %s: tensor<4xf32>) -> tensor<4xf32> {
  %p = arith.mulf %l, %a : tensor<4xf32>
  %r = arith.addf %p, %s : tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// The final normalization divides once per row and multiplies per element.
// CHECK-LABEL: func.func @row_reciprocal(
// CHECK-SAME:    %[[ACC:.+]]: tensor<4x8xf32>, %[[L:.+]]: tensor<4xf32>)
// CHECK:         %[[ONE:.+]] = arith.constant dense<1.000000e+00> : tensor<4xf32>
// CHECK:         %[[INV:.+]] = arith.divf %[[ONE]], %[[L]] : tensor<4xf32>
// CHECK:         %[[E:.+]] = tile.expand_dims %[[INV]] along 1
// CHECK:         %[[B:.+]] = tile.broadcast %[[E]]
// CHECK:         %[[R:.+]] = arith.mulf %[[ACC]], %[[B]] : tensor<4x8xf32>
// CHECK-NOT:     arith.divf {{.*}} : tensor<4x8xf32>
func.func @row_reciprocal(%acc: tensor<4x8xf32>, %l: tensor<4xf32>) -> tensor<4x8xf32> {
  %le = tile.expand_dims %l along 1 : tensor<4xf32> -> tensor<4x1xf32>
  %lb = tile.broadcast %le : tensor<4x1xf32> -> tensor<4x8xf32>
  %o = arith.divf %acc, %lb : tensor<4x8xf32>
  return %o : tensor<4x8xf32>
}

// -----

// A runtime scale of unknown sign: the loop is versioned on scale > 0. The then-copy
// gets the FA2 form (raw max); the else-copy is the original loop, marked.
// CHECK-LABEL: func.func @version_on_scale_sign(
// CHECK-SAME:    %[[X:.+]]: tensor<4x8xf32>, %[[S:.+]]: f32, %[[N:.+]]: i32)
// CHECK:         %[[POS:.+]] = arith.cmpf ogt, %[[S]], %{{.+}} : f32
// CHECK:         scf.if %[[POS]]
// CHECK:           scf.for
// CHECK:             %[[RAW:.+]] = tile.reduce max %[[X]]
// CHECK:             arith.maximumf %{{.+}}, %[[RAW]]
// CHECK:         } else {
// CHECK:           scf.for
// CHECK:             %[[SC:.+]] = arith.mulf %[[X]],
// CHECK:             tile.reduce max %[[SC]]
// CHECK:           } {tile.softmax_fallback}
func.func @version_on_scale_sign(%x: tensor<4x8xf32>, %s: f32, %n: i32) -> tensor<4xf32> {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %init = arith.constant dense<0xFF800000> : tensor<4xf32>
  %st = tile.splat %s : f32 -> tensor<4x8xf32>
  %res = scf.for %j = %c0 to %n step %c1 iter_args(%m = %init) -> (tensor<4xf32>) : i32 {
    %y = arith.mulf %x, %st : tensor<4x8xf32>
    %r = tile.reduce max %y along 1 : tensor<4x8xf32> -> tensor<4xf32>
    %new = arith.maximumf %m, %r : tensor<4xf32>
    scf.yield %new : tensor<4xf32>
  }
  return %res : tensor<4xf32>
}

// -----

// The same loop with the scale declared positive (tl.assume): no versioning, no
// fallback copy; the one loop gets the FA2 form (raw max).
// CHECK-LABEL: func.func @declared_positive_scale(
// CHECK-SAME:    %[[X:.+]]: tensor<4x8xf32>, %[[S:.+]]: f32 {tile.positive}, %[[N:.+]]: i32)
// CHECK-NOT:     arith.cmpf
// CHECK-NOT:     scf.if
// CHECK:         scf.for
// CHECK:           %[[RAW:.+]] = tile.reduce max %[[X]]
// CHECK:           arith.maximumf %{{.+}}, %[[RAW]]
// CHECK-NOT:     tile.softmax_fallback
// CHECK:         return
func.func @declared_positive_scale(%x: tensor<4x8xf32>, %s: f32 {tile.positive}, %n: i32) -> tensor<4xf32> {
  %c0 = arith.constant 0 : i32
  %c1 = arith.constant 1 : i32
  %init = arith.constant dense<0xFF800000> : tensor<4xf32>
  %st = tile.splat %s : f32 -> tensor<4x8xf32>
  %res = scf.for %j = %c0 to %n step %c1 iter_args(%m = %init) -> (tensor<4xf32>) : i32 {
    %y = arith.mulf %x, %st : tensor<4x8xf32>
    %r = tile.reduce max %y along 1 : tensor<4x8xf32> -> tensor<4xf32>
    %new = arith.maximumf %m, %r : tensor<4xf32>
    scf.yield %new : tensor<4xf32>
  }
  return %res : tensor<4xf32>
}
